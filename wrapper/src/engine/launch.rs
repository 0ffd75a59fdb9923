//! Starting runs so that nothing of them outlives colloc, even `kill -9` of colloc.
//!
//! Every slot gets its own small **supervisor** process, which starts the slot's runs one
//! after another (a run started early, while the slot's current one ends, goes to the
//! slot's second supervisor: [`Launcher::lanes_per_slot`]):
//!
//! ```text
//! colloc ──socket──> launcher (forked at start, single-threaded)
//!    │                  └─ fork ─> supervisor of slot k (subreaper) ─ spawn ─> run (own session)
//!    └──── control socket of slot k ────┘            output pipe per run ─────────┘ ──> colloc
//! ```
//!
//! - The **launcher** is forked from colloc before colloc starts any thread, so forking it
//!   again is cheap and safe: colloc itself never forks (a fork of a process with many
//!   threads costs page-table copies and TLB shootdowns on every CPU).
//! - A **supervisor** is a child subreaper: every process of its run that loses its parent
//!   (a grandchild whose shell exited, one that left the run's session with `setsid`) is
//!   re-parented to it, so it can find and kill all of them. As it runs one attempt at a
//!   time, whatever comes back to it belongs to the attempt it runs. It ignores the signals
//!   Slurm sends to a whole job step, and forwards what colloc asks (`sig`) to the run's
//!   process group.
//! - When a run's leader exits, the supervisor reports its status, kills what is left of
//!   its group and every descendant (naming those outside the run's session as escaped),
//!   and reports `done` once nothing is left (or after
//!   [`super::control::GROUP_EXIT_WAIT`]).
//! - When colloc dies, for any reason, the kernel closes its end of the control socket;
//!   the supervisor reads end-of-file, kills everything of its run, and exits.
//!
//! colloc → supervisor: framed JSON requests ([`Request`]), a new run's output pipe
//! attached. Supervisor → colloc: one text line per message, `ID WHAT ...` ([`Msg`]);
//! the protocol is [`super::control`]. A
//! [`Launcher`] is the seam for other ways of starting runs (an `srun` step on another
//! node): the engine needs a run's output and these messages.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

use super::supervisor;
use super::sys;

use super::control::take_lines;
pub use super::control::{send_request, Cmd, LaunchSpec, Msg, Request};

/// colloc's end of one slot's supervisor.
#[derive(Debug)]
struct Sup {
    sock: OwnedFd,
    inbuf: Vec<u8>,
}

/// A way of starting runs.
pub trait Launcher {
    /// Start attempt `id` of `spec` on `slot`; the read end of its output (stdout and
    /// stderr).
    ///
    /// # Errors
    /// The run could not be handed to a supervisor (a failure to start the program itself
    /// comes later, as [`Msg::Error`]).
    fn launch(&mut self, slot: usize, id: u64, spec: &LaunchSpec) -> io::Result<OwnedFd>;

    /// Ask `slot`'s supervisor something about attempt `id`; false when it is gone.
    fn send(&mut self, slot: usize, id: u64, cmd: Cmd) -> bool;

    /// What to poll for messages: (slot, descriptor).
    fn fds(&self) -> Vec<(usize, BorrowedFd<'_>)>;

    /// Messages that arrived from `slot`'s supervisor, and whether it is gone (then the
    /// next launch on the slot starts a new one).
    fn read(&mut self, slot: usize) -> (Vec<(u64, Msg)>, bool);

    /// Called once per turn of the engine's loop (at least every tick), for launchers
    /// with deadlines of their own.
    fn tick(&mut self) {}

    /// Tell attempt `id` on `slot` its last throughput sample (launchers whose runs
    /// serve their node's metrics themselves: a Slurm step on another node).
    fn tell_rate(&mut self, _slot: usize, _id: u64, _value: f64, _unit: Option<&str>) {}

    /// Lanes a slot may have at once. Every method takes a lane where it says slot: lane
    /// `k` is slot `k`, and a launcher with two lanes per slot also takes lane
    /// `k + slots` for slot `k`'s attempt started early beside its running one.
    fn lanes_per_slot(&self) -> usize {
        1
    }
}

/// The pipes of a run started with [`LocalLauncher::launch_with`].
#[derive(Debug)]
pub struct Pipes {
    /// Read end of its output (stdout, and stderr unless apart).
    pub output: OwnedFd,
    /// Write end of its stdin, when asked for.
    pub stdin: Option<OwnedFd>,
    /// Read end of its stderr, when asked for apart.
    pub stderr: Option<OwnedFd>,
}

/// Runs on this machine, through a launcher process forked at start.
#[derive(Debug)]
pub struct LocalLauncher {
    sock: Option<OwnedFd>,
    pid: u32,
    sups: Vec<Option<Sup>>,
}

/// Raise the soft limit of open files to the hard limit: each running run holds a few
/// descriptors in colloc (output, log, its slot's socket).
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            log::debug!("cannot raise the open-file limit: {e}");
        }
    }
}

impl LocalLauncher {
    /// Fork the launcher process. Must be called while colloc has a single thread (before
    /// NVML, signal threads or the GPU sampler start).
    ///
    /// # Errors
    /// The process has threads already, or the fork or socket failed.
    pub fn start() -> io::Result<LocalLauncher> {
        raise_fd_limit();
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        match sys::fork_single_threaded()? {
            None => {
                drop(ours);
                // If colloc dies the socket closes and this process ends by itself; the
                // parent-death signal is only a second line.
                let _ = rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ));
                launcher_main(theirs)
            }
            Some(pid) => {
                drop(theirs);
                Ok(LocalLauncher {
                    sock: Some(ours),
                    pid,
                    sups: Vec::new(),
                })
            }
        }
    }

    /// A new supervisor for `slot`, forked by the launcher process.
    fn new_supervisor(&mut self) -> io::Result<Sup> {
        let sock = self
            .sock
            .as_ref()
            .ok_or_else(|| io::Error::other("the launcher process is gone"))?;
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        // The launcher takes one byte and a descriptor: fork a supervisor on it.
        let fds = [theirs.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        cmsg.push(SendAncillaryMessage::ScmRights(&fds));
        if let Err(e) = sendmsg(sock, &[IoSlice::new(b"S")], &mut cmsg, SendFlags::NOSIGNAL) {
            self.sock = None;
            return Err(io::Error::other(format!(
                "the launcher process is gone ({e})"
            )));
        }
        drop(theirs);
        Ok(Sup {
            sock: ours,
            inbuf: Vec::new(),
        })
    }
}

impl LocalLauncher {
    /// Start attempt `id` of `spec` on `slot`, with its stdin a pipe colloc writes and
    /// its stderr a pipe apart from its output, as asked (for runs that speak to colloc
    /// on these: an `srun` step).
    ///
    /// # Errors
    /// The pipes could not be made, or the run could not be handed to a supervisor.
    pub fn launch_with(
        &mut self,
        slot: usize,
        id: u64,
        spec: &LaunchSpec,
        stdin: bool,
        stderr: bool,
    ) -> io::Result<Pipes> {
        let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
        let (out_r, out_w) = rustix::pipe::pipe_with(cloexec)?;
        let in_pipe = stdin
            .then(|| rustix::pipe::pipe_with(cloexec))
            .transpose()?;
        let err_pipe = stderr
            .then(|| rustix::pipe::pipe_with(cloexec))
            .transpose()?;
        let req = Request::Run {
            id,
            spec: spec.clone(),
            stdin,
            stderr,
        };
        let mut fds = vec![out_w.as_fd()];
        fds.extend(in_pipe.as_ref().map(|(r, _)| r.as_fd()));
        fds.extend(err_pipe.as_ref().map(|(_, w)| w.as_fd()));
        self.send_run(slot, &req, &fds)?;
        rustix::io::ioctl_fionbio(&out_r, true)?;
        let (stdin, stderr) = (in_pipe.map(|(_, w)| w), err_pipe.map(|(r, _)| r));
        if let Some(e) = &stderr {
            rustix::io::ioctl_fionbio(e, true)?;
        }
        Ok(Pipes {
            output: out_r,
            stdin,
            stderr,
        })
    }
}

impl LocalLauncher {
    /// Start attempt `id` of `spec` on `slot` with its stdout and stderr going to
    /// `output`, a descriptor this process has (inside an `srun` step: its own stdout,
    /// which Slurm forwards to colloc).
    ///
    /// # Errors
    /// The run could not be handed to a supervisor.
    pub fn launch_to(
        &mut self,
        slot: usize,
        id: u64,
        spec: &LaunchSpec,
        output: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let req = Request::Run {
            id,
            spec: spec.clone(),
            stdin: false,
            stderr: false,
        };
        self.send_run(slot, &req, &[output])
    }

    /// Hand a run request to `slot`'s supervisor (started first if need be).
    fn send_run(&mut self, slot: usize, req: &Request, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if self.sups.len() <= slot {
            self.sups.resize_with(slot + 1, || None);
        }
        if self.sups[slot].is_none() {
            self.sups[slot] = Some(self.new_supervisor()?);
        }
        let sent = match &self.sups[slot] {
            Some(s) => send_request(&s.sock, req, fds),
            None => Err(io::Error::other("no supervisor")),
        };
        if sent.is_err() {
            // A dead supervisor: the next launch on this slot starts a new one.
            self.sups[slot] = None;
        }
        sent
    }
}

impl Launcher for LocalLauncher {
    /// A supervisor runs one attempt at a time (whatever is re-parented to it is its
    /// attempt's), so a slot's second lane is a second supervisor.
    fn lanes_per_slot(&self) -> usize {
        2
    }

    fn launch(&mut self, slot: usize, id: u64, spec: &LaunchSpec) -> io::Result<OwnedFd> {
        Ok(self.launch_with(slot, id, spec, false, false)?.output)
    }

    fn send(&mut self, slot: usize, id: u64, cmd: Cmd) -> bool {
        let Some(Some(s)) = self.sups.get(slot) else {
            return false;
        };
        let req = match cmd {
            Cmd::Signal(sig) => Request::Signal { id, sig },
            Cmd::Kill => Request::Kill { id },
        };
        send_request(&s.sock, &req, &[]).is_ok()
    }

    fn fds(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        self.sups
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s.sock.as_fd())))
            .collect()
    }

    fn read(&mut self, slot: usize) -> (Vec<(u64, Msg)>, bool) {
        let Some(Some(s)) = self.sups.get_mut(slot) else {
            return (Vec::new(), true);
        };
        let mut buf = [0u8; 4096];
        let mut eof = false;
        loop {
            match rustix::net::recv(&s.sock, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((0, _)) => {
                    eof = true;
                    break;
                }
                Ok((n, _)) => s.inbuf.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        let msgs = take_lines(&mut s.inbuf)
            .iter()
            .filter_map(|l| Msg::parse(l))
            .collect();
        if eof {
            self.sups[slot] = None;
        }
        (msgs, eof)
    }
}

impl Drop for LocalLauncher {
    fn drop(&mut self) {
        // End of file makes the supervisors and the launcher exit; reap the launcher.
        self.sups.clear();
        self.sock = None;
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        }
    }
}

/// The launcher process: fork one supervisor per request until colloc closes the socket.
fn launcher_main(sock: OwnedFd) -> ! {
    // Supervisors are reaped by the kernel: nobody waits for them here.
    sys::ignore_signals(&[libc::SIGCHLD]);
    sys::ignore_signals(&sys::SUPERVISOR_IGNORES);
    loop {
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let got = match recvmsg(
            &sock,
            &mut [IoSliceMut::new(&mut byte)],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(r) => r.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => sys::exit_now(0),
        };
        if got == 0 {
            sys::exit_now(0);
        }
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        let Some(ctl) = fds.pop() else { continue };
        match sys::fork_single_threaded() {
            Ok(None) => {
                drop(sock);
                supervisor::serve(ctl)
            }
            Ok(Some(_)) => {}
            Err(e) => log::debug!("cannot fork a supervisor: {e}"),
        }
        // ctl closes here: only the supervisor holds it now.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::recv_request;
    use std::io::{Read, Write};

    #[test]
    fn protocol_lines_round_trip() {
        for m in [
            Msg::Pid(12),
            Msg::Error("cannot start \"x\": No such file".into()),
            Msg::Exit(3),
            Msg::Signaled(15),
            Msg::Escaped {
                pid: 9,
                comm: "sleep".into(),
            },
            Msg::Done { left: 0 },
        ] {
            let l = m.line(7);
            assert!(l.ends_with('\n'));
            assert_eq!(Msg::parse(l.trim_end_matches('\n')), Some((7, m)));
        }
        assert_eq!(Msg::parse("nonsense"), None);
        assert_eq!(Msg::parse("x pid 1"), None);
        assert_eq!(
            Msg::Error("two\nlines".into()).line(1),
            "1 error two lines\n"
        );
    }

    #[test]
    fn lines_are_split_off_and_the_rest_kept() {
        let mut b = b"1 pid 1\n1 exit 0\n1 do".to_vec();
        assert_eq!(take_lines(&mut b), vec!["1 pid 1", "1 exit 0"]);
        assert_eq!(b, b"1 do");
    }

    #[test]
    fn requests_travel_with_their_descriptor() {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let req = Request::Run {
            id: 3,
            spec: LaunchSpec {
                argv: vec!["true".into()],
                env: vec![("A".into(), "b".into())],
                cwd: None,
            },
            stdin: false,
            stderr: false,
        };
        send_request(&a, &req, &[w.as_fd()]).unwrap();
        send_request(&a, &Request::Kill { id: 3 }, &[]).unwrap();
        drop(w);
        let (got, mut fds) = recv_request(&b).unwrap().unwrap();
        assert_eq!(got, req);
        assert_eq!(fds.len(), 1);
        let fd = fds.pop().expect("the pipe came along");
        // It is the same pipe: what is written to it comes out of r.
        let mut f = std::fs::File::from(fd);
        f.write_all(b"hi").unwrap();
        drop(f);
        let mut s = String::new();
        std::fs::File::from(r).read_to_string(&mut s).unwrap();
        assert_eq!(s, "hi");
        let (got, fds) = recv_request(&b).unwrap().unwrap();
        assert_eq!(got, Request::Kill { id: 3 });
        assert!(fds.is_empty());
        drop(a);
        assert!(recv_request(&b).unwrap().is_none());
    }
}
