//! A slot's supervisor (see [`super::launch`] for where it sits). It runs in a process
//! forked from the single-threaded launcher, so it may use ordinary Rust code.
//!
//! For each attempt colloc sends: start the run in a new session with the attempt's
//! output pipe as stdout and stderr, report its pid, forward signals colloc asks for,
//! report the leader's status when it exits, then kill what is left — its process group,
//! and every process re-parented to the supervisor (those outside the run's session are
//! reported as escaped) — and report `done`. End of file on the control socket (colloc
//! died) kills the whole run at once and ends the supervisor.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{wait, WaitOptions};

use super::control::{recv_request, LaunchSpec, Msg, Request, GROUP_EXIT_WAIT};
use super::sys;

/// How often leftovers are looked for while a finished run's processes go away.
const COLLECT_STEP: Duration = Duration::from_millis(10);

struct Current {
    id: u64,
    leader: u32,
    leader_done: bool,
    collecting: Option<Instant>,
    escaped: HashSet<u32>,
}

struct Sup {
    ctl: OwnedFd,
    out: UnixStream,
    colloc_gone: bool,
    cur: Option<Current>,
}

impl Sup {
    fn tell(&mut self, id: u64, m: &Msg) {
        if !self.colloc_gone {
            let _ = self.out.write_all(m.line(id).as_bytes());
        }
    }

    /// Reap every child that has exited; the leader's status goes to colloc.
    fn reap(&mut self) {
        loop {
            match wait(WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    let pid = pid.as_raw_nonzero().get() as u32;
                    let Some(c) = self.cur.as_mut() else { continue };
                    if pid == c.leader && !c.leader_done {
                        c.leader_done = true;
                        let id = c.id;
                        let m = match (st.exit_status(), st.terminating_signal()) {
                            (Some(code), _) => Msg::Exit(code),
                            (None, Some(s)) => Msg::Signaled(s),
                            _ => Msg::Exit(-1),
                        };
                        self.tell(id, &m);
                        self.begin_collect();
                    }
                }
                Ok(None) => return,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
            }
        }
    }

    fn begin_collect(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.collecting.get_or_insert_with(Instant::now);
            // While the leader is unreaped its id cannot name anyone else's group; once
            // it is reaped, group members still alive keep the id in use.
            sys::kill_group(c.leader, libc::SIGKILL);
        }
    }

    /// Kill everything of the current run that is left; true when nothing is.
    fn collect(&mut self) -> bool {
        let Some(c) = self.cur.as_ref() else {
            return true;
        };
        let (id, leader) = (c.id, c.leader);
        sys::kill_group(leader, libc::SIGKILL);
        let children = sys::own_children();
        let mut escaped = Vec::new();
        for &p in &children {
            if let Some(s) = sys::ProcStat::of(p) {
                let alive = s.state().is_some_and(|state| state != 'Z');
                if alive && s.session().is_some_and(|sid| sid != leader) {
                    escaped.push(p);
                }
            }
            sys::kill(p, libc::SIGKILL);
        }
        for p in escaped {
            if self.cur.as_mut().is_some_and(|c| c.escaped.insert(p)) {
                let comm = sys::comm_of(p);
                self.tell(id, &Msg::Escaped { pid: p, comm });
            }
        }
        self.reap();
        children.is_empty() && !sys::kill_group(leader, 0)
    }

    fn start(&mut self, id: u64, spec: &LaunchSpec, output: Result<Stdio3, String>) {
        if self.cur.is_some() {
            self.tell(id, &Msg::Error("the slot is busy".into()));
            self.tell(id, &Msg::Done { left: 0 });
            return;
        }
        match spawn(spec, output) {
            Ok(leader) => {
                self.cur = Some(Current {
                    id,
                    leader,
                    leader_done: false,
                    collecting: None,
                    escaped: HashSet::new(),
                });
                self.tell(id, &Msg::Pid(leader));
            }
            Err(e) => {
                self.tell(id, &Msg::Error(e));
                self.tell(id, &Msg::Done { left: 0 });
            }
        }
    }

    fn request(&mut self) {
        match recv_request(&self.ctl) {
            Ok(Some((
                Request::Run {
                    id,
                    spec,
                    stdin,
                    stderr,
                },
                fds,
            ))) => self.start(id, &spec, Stdio3::take(fds, stdin, stderr)),
            Ok(Some((Request::Signal { id, sig }, _))) => {
                if let Some(c) = self.cur.as_ref().filter(|c| c.id == id && !c.leader_done) {
                    sys::kill_group(c.leader, sig);
                }
            }
            Ok(Some((Request::Kill { id }, _))) => {
                if self.cur.as_ref().is_some_and(|c| c.id == id) {
                    self.begin_collect();
                }
            }
            Ok(None) | Err(_) => {
                // colloc is gone: nothing of this run may outlive it.
                self.colloc_gone = true;
                self.begin_collect();
            }
        }
    }
}

/// The descriptors that came with a run: its output, and its stdin and stderr where asked.
struct Stdio3 {
    output: OwnedFd,
    stdin: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Stdio3 {
    /// Sort out the descriptors of a request (in the order [`super::control::Request::Run`]
    /// says).
    fn take(fds: Vec<OwnedFd>, stdin: bool, stderr: bool) -> Result<Stdio3, String> {
        let want = 1 + usize::from(stdin) + usize::from(stderr);
        if fds.len() != want {
            return Err(format!(
                "{} descriptor(s) came with the run, {want} expected",
                fds.len()
            ));
        }
        let mut it = fds.into_iter();
        let output = it.next().ok_or("no output pipe came with the run")?;
        let stdin = if stdin { it.next() } else { None };
        let stderr = if stderr { it.next() } else { None };
        Ok(Stdio3 {
            output,
            stdin,
            stderr,
        })
    }
}

/// Start a run's leader: in its own session, its output into the pipe, stdin empty (or
/// the pipe that came with it), stderr with its output (or into its own pipe).
fn spawn(spec: &LaunchSpec, io: Result<Stdio3, String>) -> Result<u32, String> {
    let Some(program) = spec.argv.first() else {
        return Err("empty command".into());
    };
    let io = io?;
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(io.stdin.map_or_else(Stdio::null, Stdio::from));
    let err = match io.stderr {
        Some(e) => e,
        None => io
            .output
            .try_clone()
            .map_err(|e| format!("cannot set up the output: {e}"))?,
    };
    cmd.stdout(Stdio::from(io.output)).stderr(Stdio::from(err));
    if let Some(d) = &spec.cwd {
        cmd.current_dir(d);
    }
    sys::isolate_run(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program:?}: {e}"))?;
    // The pipe's write ends now live only in the run: its output ends with it.
    Ok(child.id())
}

/// Serve one slot until colloc closes the control socket.
pub fn serve(ctl: OwnedFd) -> ! {
    sys::ignore_signals(&sys::SUPERVISOR_IGNORES);
    let me = rustix::process::getpid();
    let _ = rustix::process::set_child_subreaper(Some(me));
    let out = match ctl.try_clone() {
        Ok(fd) => UnixStream::from(fd),
        Err(_) => sys::exit_now(1),
    };
    // SIGCHLD wakes the poll through a self-pipe.
    let Ok((mut chld_r, chld_w)) = UnixStream::pair() else {
        sys::exit_now(1)
    };
    let _ = chld_w.set_nonblocking(true);
    let _ = chld_r.set_nonblocking(true);
    if signal_hook::low_level::pipe::register(libc::SIGCHLD, chld_w).is_err() {
        sys::exit_now(1);
    }
    let mut s = Sup {
        ctl,
        out,
        colloc_gone: false,
        cur: None,
    };
    loop {
        let collecting = s.cur.as_ref().and_then(|c| c.collecting);
        let timeout = collecting.map(|_| Timespec {
            tv_sec: 0,
            tv_nsec: COLLECT_STEP.as_nanos() as i64,
        });
        let (ctl_ready, _) = {
            let mut fds = [
                PollFd::new(&chld_r, PollFlags::IN),
                PollFd::new(&s.ctl, PollFlags::IN),
            ];
            let n = if s.colloc_gone { 1 } else { 2 };
            match poll(&mut fds[..n], timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => std::thread::sleep(COLLECT_STEP),
            }
            (
                n == 2 && !fds[1].revents().is_empty(),
                !fds[0].revents().is_empty(),
            )
        };
        let mut drain = [0u8; 64];
        while matches!(chld_r.read(&mut drain), Ok(n) if n > 0) {}
        s.reap();
        if ctl_ready {
            s.request();
        }
        if let Some(since) = s.cur.as_ref().and_then(|c| c.collecting) {
            let id = s.cur.as_ref().map_or(0, |c| c.id);
            if s.collect() {
                s.tell(id, &Msg::Done { left: 0 });
                s.cur = None;
            } else if since.elapsed() >= GROUP_EXIT_WAIT {
                let left = sys::own_children().len() as u32;
                s.tell(id, &Msg::Done { left: left.max(1) });
                s.cur = None;
            }
        }
        if s.colloc_gone && s.cur.is_none() {
            sys::exit_now(0);
        }
    }
}
