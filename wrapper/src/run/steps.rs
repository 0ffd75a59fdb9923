//! Runs as Slurm job steps: each attempt is `srun --overlap -N1 -n1 -w NODE
//! --job-name=RUN colloc step run` on the node that owns its slot, so Slurm starts,
//! signals, accounts and cleans up every run (`squeue --steps` lists one step per run,
//! named after it). [`StepLauncher`] is the pack engine's [`Launcher`] for this: the
//! local supervisor of a slot runs the `srun` (which dies with colloc), and the step side
//! on the node ([`crate::step::side`]) supervises the run itself and reports over the
//! step's stderr ([`crate::step::protocol`]).
//!
//! What the engine needs is translated: the run's exit, escaped processes and the end of
//! the attempt. What only `colloc run` needs goes into the shared [`StepBook`]: the step
//! id, the GPU figures measured on the node, and, when the step ended without saying how
//! the run ended, why the *step* failed (its node went away, Slurm could not start it):
//! the driver then runs the attempt again elsewhere ([`super::scheduler`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::nodes::{StepCommand, Topology};
use crate::engine::launch::{Cmd, LaunchSpec, Launcher, LocalLauncher, Msg};
use crate::engine::pack::AttemptId;
use crate::engine::signal_name;
use crate::step::protocol::{self, Control, StderrLine, StepGpu, StepMsg, StepSpec};
use colloc_core::jobenv;

/// Most steps colloc has starting at once (launched, not yet running on their node):
/// slurmctld creates steps one at a time, so more only queue (bench/dispatch/README.md).
pub const MAX_STARTING: usize = 32;
/// Longest time from `srun` to the step running on its node before colloc gives the step
/// up (and the run goes to another node).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// After asking a step to kill its run: how long before colloc kills the `srun` itself
/// (Slurm then kills whatever runs in the step).
pub const KILL_WAIT: Duration = Duration::from_secs(3);
/// Lines of srun's own output kept per step (the reason when it fails).
const SAID_LINES: usize = 20;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What colloc learned of one attempt's step.
#[derive(Debug, Clone, Default)]
pub struct StepFacts {
    /// The node.
    pub node: String,
    /// `JOBID.STEPID`, once the step ran.
    pub step: Option<String>,
    /// When colloc started its `srun` (Unix seconds here).
    pub launched_ts: f64,
    /// When the run started on the node (Unix seconds there).
    pub started_ts: Option<f64>,
    /// When the run's last process was gone on the node.
    pub done_ts: Option<f64>,
    /// Its pid on the node.
    pub pid: Option<u32>,
    /// GPU figures from the node.
    pub gpu: Option<StepGpu>,
    /// The step reported how the run ended.
    pub reported_end: bool,
    /// What srun and slurmstepd printed themselves.
    pub said: Vec<String>,
    /// Why the step failed, when it ended without saying how the run ended.
    pub failure: Option<String>,
}

/// A node's record of failed steps.
#[derive(Debug, Clone, Default)]
pub struct NodeHealth {
    /// Failed steps since its last step that worked.
    pub in_a_row: u32,
    /// Failed steps in all.
    pub failed: u32,
    /// Why it gets no more runs, once so.
    pub out: Option<String>,
}

/// What the step launcher and `colloc run`'s driver share.
#[derive(Debug, Default)]
pub struct StepBook {
    facts: HashMap<AttemptId, StepFacts>,
    starting: usize,
    /// Per node, its failed steps.
    pub nodes: BTreeMap<String, NodeHealth>,
}

impl StepBook {
    /// Steps launched and not yet running on their node.
    pub fn starting(&self) -> usize {
        self.starting
    }

    /// Take what is known of an attempt's step (once it ended).
    pub fn take(&mut self, id: AttemptId) -> Option<StepFacts> {
        self.facts.remove(&id)
    }

    /// Does `node` still get runs?
    pub fn in_service(&self, node: &str) -> bool {
        self.nodes.get(node).is_none_or(|h| h.out.is_none())
    }
}

/// The reason a step failed, from what srun and slurmstepd said and how srun ended.
pub fn failure_reason(said: &[String], srun_end: Option<&str>, ran: bool) -> String {
    let errors: Vec<&str> = said
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains("error") || l.contains("Killed") || l.contains("failed"))
        .collect();
    let text = if errors.is_empty() {
        said.last().map(String::as_str)
    } else {
        // srun's first error names the cause; the rest follow from it.
        errors.first().copied()
    };
    let what = if ran {
        "its step ended without reporting how the run ended"
    } else {
        "its step did not start"
    };
    match (text, srun_end) {
        (Some(t), _) => format!("{what} ({t})"),
        (None, Some(e)) => format!("{what} (srun: {e})"),
        (None, None) => what.to_string(),
    }
}

/// Is this error of the step side about the step itself, not the run it ran (the run
/// then goes back to the queue as after any failed step)? Seen: a node lost mid-sweep
/// killed a run's supervisor before the step side, which said so, and the run was
/// counted failed where its neighbour on that node went elsewhere.
pub fn is_step_error(e: &str) -> bool {
    e == protocol::SUPERVISOR_GONE
}

/// Does this failure say the node is gone from the job (no use trying it again)?
pub fn node_gone(reason: &str) -> bool {
    [
        "Node failure",
        "Requested node configuration is not available",
        "Communication connection failure",
        "container_g_join failed",
    ]
    .iter()
    .any(|k| reason.contains(k))
}

/// One running attempt's step.
struct Att {
    id: AttemptId,
    stdin: Option<File>,
    /// Bytes for the step's stdin that did not fit yet.
    unsent: Vec<u8>,
    ctl: Option<File>,
    inbuf: Vec<u8>,
    srun_done: bool,
    srun_end: Option<String>,
    remote_left: u32,
    hello: bool,
    start_by: Instant,
    kill_at: Option<Instant>,
    srun_killed: bool,
}

/// Starts each attempt as a Slurm step on its slot's node.
pub struct StepLauncher {
    inner: LocalLauncher,
    cmd: StepCommand,
    /// Per slot: its node and device.
    slots: Vec<(String, Option<String>)>,
    /// Per slot: the mode of its node.
    modes: Vec<String>,
    interval_s: f64,
    atts: Vec<Option<Att>>,
    book: Rc<RefCell<StepBook>>,
}

impl StepLauncher {
    /// A launcher over the slots of `topo`, through `inner`'s supervisors.
    pub fn new(
        inner: LocalLauncher,
        cmd: StepCommand,
        topo: &Topology,
        interval: Duration,
        book: Rc<RefCell<StepBook>>,
    ) -> StepLauncher {
        let layout = topo.layout();
        let mut slots = Vec::new();
        let mut modes = Vec::new();
        for (i, dev) in layout.slots.iter().enumerate() {
            let n = topo.node_of(i);
            slots.push((n.name.clone(), dev.clone()));
            modes.push(n.layout.mode.to_string());
        }
        StepLauncher {
            inner,
            cmd,
            atts: (0..slots.len()).map(|_| None).collect(),
            slots,
            modes,
            interval_s: interval.as_secs_f64(),
            book,
        }
    }

    /// The srun command line of one run's step.
    fn srun_argv(&self, node: &str, name: &str) -> Vec<String> {
        let mut argv = vec![self.cmd.srun.clone()];
        argv.extend(self.cmd.common());
        argv.extend([
            "--nodes=1".to_string(),
            "--ntasks=1".into(),
            format!("--nodelist={node}"),
            format!("--job-name={name}"),
        ]);
        argv.extend(self.cmd.colloc_step("run"));
        argv
    }

    fn flush(att: &mut Att) {
        let Some(w) = att.stdin.as_mut() else {
            att.unsent.clear();
            return;
        };
        while !att.unsent.is_empty() {
            match w.write(&att.unsent) {
                Ok(0) => break,
                Ok(n) => {
                    att.unsent.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // The step (or its srun) is gone; how it ended comes from srun.
                    att.stdin = None;
                    att.unsent.clear();
                    break;
                }
            }
        }
    }

    fn control(att: &mut Att, c: Control) {
        if let Ok(mut l) = serde_json::to_vec(&c) {
            l.push(b'\n');
            att.unsent.extend_from_slice(&l);
        }
        Self::flush(att);
    }

    /// Read what the step said on its stderr; the engine's messages among it.
    fn read_ctl(&mut self, slot: usize, out: &mut Vec<(u64, Msg)>) {
        let Some(att) = self.atts[slot].as_mut() else {
            return;
        };
        let node = self.slots[slot].0.clone();
        let mut buf = [0u8; 16 * 1024];
        let mut eof = false;
        if let Some(f) = att.ctl.as_mut() {
            loop {
                match f.read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        att.inbuf.extend_from_slice(&buf[..n]);
                        if att.inbuf.len() > protocol::MAX_LINE {
                            // Not a step of ours talking: keep what is whole.
                            att.inbuf.push(b'\n');
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        if eof {
            att.ctl = None;
            if !att.inbuf.is_empty() && !att.inbuf.ends_with(b"\n") {
                att.inbuf.push(b'\n');
            }
        }
        let mut lines = Vec::new();
        while let Some(i) = att.inbuf.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = att.inbuf.drain(..=i).collect();
            lines.push(String::from_utf8_lossy(&raw[..i]).into_owned());
        }
        let mut book = self.book.borrow_mut();
        let mut hello = false;
        let facts = book.facts.entry(att.id).or_default();
        for line in lines {
            match protocol::parse_stderr(&line) {
                StderrLine::Msg(m) => match m {
                    StepMsg::Hello { step, .. } => {
                        facts.step = step;
                        hello = true;
                    }
                    StepMsg::Started { pid, ts } => {
                        facts.pid = Some(pid);
                        facts.started_ts = Some(ts);
                    }
                    StepMsg::Exit(c) => {
                        facts.reported_end = true;
                        out.push((att.id, Msg::Exit(c)));
                    }
                    StepMsg::Signaled(s) => {
                        facts.reported_end = true;
                        out.push((att.id, Msg::Signaled(s)));
                    }
                    StepMsg::Error(e) if is_step_error(&e) => {
                        facts.failure = Some(format!("{e} (on {node})"));
                    }
                    StepMsg::Error(e) => {
                        facts.reported_end = true;
                        out.push((att.id, Msg::Error(format!("{e} (on {node})"))));
                    }
                    StepMsg::Escaped { pid, comm } => out.push((
                        att.id,
                        Msg::Escaped {
                            pid,
                            comm: format!("{comm} on {node}"),
                        },
                    )),
                    StepMsg::Gpu(g) => facts.gpu = Some(*g),
                    StepMsg::Done { left, ts } => {
                        att.remote_left = left;
                        facts.done_ts = Some(ts);
                    }
                },
                StderrLine::Text(t) if !t.is_empty() => {
                    if facts.said.len() >= SAID_LINES {
                        facts.said.remove(0);
                    }
                    facts.said.push(t);
                }
                StderrLine::Text(_) => {}
            }
        }
        if hello && !att.hello {
            att.hello = true;
            book.starting = book.starting.saturating_sub(1);
        }
    }

    /// The attempt on `slot` is over once its srun is gone; its end for the engine.
    fn finish(&mut self, slot: usize, out: &mut Vec<(u64, Msg)>) {
        let Some(att) = self.atts[slot].as_ref() else {
            return;
        };
        if !att.srun_done {
            return;
        }
        let Some(att) = self.atts[slot].take() else {
            return;
        };
        let mut book = self.book.borrow_mut();
        if !att.hello {
            book.starting = book.starting.saturating_sub(1);
        }
        let facts = book.facts.entry(att.id).or_default();
        if !facts.reported_end && facts.failure.is_none() {
            facts.failure = Some(failure_reason(
                &facts.said,
                att.srun_end.as_deref(),
                att.hello,
            ));
        }
        // Without an exit of the run, the engine records the attempt as lost.
        out.push((
            att.id,
            Msg::Done {
                left: att.remote_left,
            },
        ));
    }
}

impl Launcher for StepLauncher {
    fn launch(&mut self, slot: usize, id: u64, spec: &LaunchSpec) -> io::Result<OwnedFd> {
        let (node, device) = self
            .slots
            .get(slot)
            .cloned()
            .ok_or_else(|| io::Error::other(format!("no slot {slot}")))?;
        let var = |k: &str| {
            spec.env
                .iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let name = var(jobenv::RUN_NAME).unwrap_or_else(|| format!("colloc-{id}"));
        let step = StepSpec {
            run: name.clone(),
            attempt: var(jobenv::RUN_ATTEMPT)
                .and_then(|a| a.parse().ok())
                .unwrap_or(1),
            launch: spec.clone(),
            device,
            mode: self.modes[slot].clone(),
            interval_s: self.interval_s,
            slot: u32::try_from(slot).ok(),
            index: var(jobenv::RUN_INDEX).and_then(|i| i.parse().ok()),
        };
        let mut line = serde_json::to_vec(&step).map_err(io::Error::other)?;
        line.push(b'\n');
        if line.len() > protocol::MAX_LINE {
            return Err(io::Error::other(format!(
                "the run's command and environment take {} bytes; at most {} go to a step",
                line.len(),
                protocol::MAX_LINE
            )));
        }
        let srun = LaunchSpec {
            argv: self.srun_argv(&node, &name),
            env: Vec::new(),
            cwd: spec.cwd.clone(),
        };
        let pipes = self.inner.launch_with(slot, id, &srun, true, true)?;
        let stdin = pipes.stdin.map(File::from);
        if let Some(w) = &stdin {
            rustix::io::ioctl_fionbio(w, true)?;
            // Room for a large spec at once where the kernel allows it.
            let _ = rustix::pipe::fcntl_setpipe_size(w, 1 << 20);
        }
        let mut att = Att {
            id,
            stdin,
            unsent: line,
            ctl: pipes.stderr.map(File::from),
            inbuf: Vec::new(),
            srun_done: false,
            srun_end: None,
            remote_left: 0,
            hello: false,
            start_by: Instant::now() + START_TIMEOUT,
            kill_at: None,
            srun_killed: false,
        };
        Self::flush(&mut att);
        {
            let mut book = self.book.borrow_mut();
            book.starting += 1;
            book.facts.insert(
                id,
                StepFacts {
                    node,
                    launched_ts: unix_now(),
                    ..StepFacts::default()
                },
            );
        }
        self.atts[slot] = Some(att);
        Ok(pipes.output)
    }

    fn send(&mut self, slot: usize, id: u64, cmd: Cmd) -> bool {
        let Some(att) = self.atts.get_mut(slot).and_then(Option::as_mut) else {
            return false;
        };
        if att.id != id {
            return false;
        }
        match cmd {
            Cmd::Signal(s) => Self::control(att, Control::Signal(s)),
            Cmd::Kill => {
                Self::control(att, Control::Kill);
                att.kill_at.get_or_insert(Instant::now() + KILL_WAIT);
            }
        }
        true
    }

    fn tell_rate(&mut self, slot: usize, id: u64, value: f64, unit: Option<&str>) {
        if let Some(att) = self.atts.get_mut(slot).and_then(Option::as_mut) {
            if att.id == id {
                let unit = unit.map(String::from);
                Self::control(att, Control::Rate { value, unit });
            }
        }
    }

    fn fds(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        let mut v = self.inner.fds();
        for (slot, a) in self.atts.iter().enumerate() {
            if let Some(c) = a.as_ref().and_then(|a| a.ctl.as_ref()) {
                v.push((slot, c.as_fd()));
            }
        }
        v
    }

    fn read(&mut self, slot: usize) -> (Vec<(u64, Msg)>, bool) {
        let mut out = Vec::new();
        let (msgs, gone) = self.inner.read(slot);
        if let Some(att) = self.atts.get_mut(slot).and_then(Option::as_mut) {
            for (id, m) in msgs {
                if id != att.id {
                    continue;
                }
                match m {
                    Msg::Exit(c) => att.srun_end = Some(format!("exit code {c}")),
                    Msg::Signaled(s) => {
                        att.srun_end = Some(format!("killed by {}", signal_name(s)))
                    }
                    Msg::Error(e) => {
                        att.srun_end = Some(e.clone());
                        let mut book = self.book.borrow_mut();
                        let f = book.facts.entry(id).or_default();
                        f.failure = Some(format!("cannot start srun: {e}"));
                    }
                    Msg::Done { .. } => att.srun_done = true,
                    Msg::Pid(_) | Msg::Escaped { .. } => {}
                }
            }
            if gone && !att.srun_done {
                // The local supervisor vanished, and srun with it.
                att.srun_done = true;
                att.srun_end
                    .get_or_insert_with(|| "its supervisor vanished".into());
            }
        }
        self.read_ctl(slot, &mut out);
        self.finish(slot, &mut out);
        // The engine learns of a vanished supervisor through the attempt's end.
        (out, false)
    }

    fn tick(&mut self) {
        let now = Instant::now();
        for slot in 0..self.atts.len() {
            let Some(att) = self.atts[slot].as_mut() else {
                continue;
            };
            Self::flush(att);
            if att.srun_done || att.srun_killed {
                continue;
            }
            let late_kill = att.kill_at.is_some_and(|t| now >= t);
            let never_started = !att.hello && now >= att.start_by;
            if late_kill || never_started {
                if never_started {
                    let mut book = self.book.borrow_mut();
                    let f = book.facts.entry(att.id).or_default();
                    f.failure.get_or_insert_with(|| {
                        format!(
                            "its step did not start within {} s",
                            START_TIMEOUT.as_secs()
                        )
                    });
                }
                // Slurm kills whatever still runs in a step whose srun is killed.
                att.srun_killed = true;
                let id = att.id;
                self.inner.send(slot, id, Cmd::Kill);
            }
        }
    }
}

/// Descriptors colloc holds per running step: the supervisor's socket, and the step's
/// output, stdin and stderr pipes.
pub const FDS_PER_SLOT: u64 = 4;

/// Raise this process's soft limit on open files to what `slots` steps need (the default
/// 1,024 would stop at about 250 slots), within the hard limit; warn where that is short.
pub fn raise_open_files(slots: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let need = FDS_PER_SLOT * slots as u64 + 64;
    let l = getrlimit(Resource::Nofile);
    if l.current.is_none_or(|c| c >= need) {
        return;
    }
    let new = l.maximum.map_or(need, |m| m.min(need));
    let ok = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(new),
            maximum: l.maximum,
        },
    )
    .is_ok();
    if !ok || new < need {
        log::warn!(
            "{slots} slots need about {need} open files; the limit is {} (ulimit -Hn): some runs may not start",
            if ok { new } else { l.current.unwrap_or(0) }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_srun_s_first_error() {
        let said = vec![
            "srun: Job 12 step creation temporarily disabled, retrying".to_string(),
            "srun: error: Node failure on n3".to_string(),
            "srun: error: n3: task 0: Killed".to_string(),
        ];
        let r = failure_reason(&said, Some("exit code 0"), true);
        assert_eq!(
            r,
            "its step ended without reporting how the run ended (srun: error: Node failure on n3)"
        );
        assert!(node_gone(&r));
        let r = failure_reason(&[], Some("exit code 1"), false);
        assert_eq!(r, "its step did not start (srun: exit code 1)");
        assert!(!node_gone(&r));
        assert!(node_gone(
            "srun: error: Unable to create step for job 3: Requested node configuration is not available"
        ));
    }

    #[test]
    fn a_supervisor_gone_is_the_steps_failure_and_a_runs_error_is_the_runs() {
        assert!(is_step_error(protocol::SUPERVISOR_GONE));
        assert!(!is_step_error(
            "cannot start python3: No such file or directory"
        ));
        assert!(!is_step_error(""));
    }

    #[test]
    fn open_files_limit_is_raised_for_many_slots() {
        use rustix::process::{getrlimit, Resource};
        raise_open_files(2000);
        let l = getrlimit(Resource::Nofile);
        let need = FDS_PER_SLOT * 2000 + 64;
        let want = l.maximum.map_or(need, |m| m.min(need));
        assert!(l.current.is_none_or(|c| c >= want), "{l:?}");
    }

    #[test]
    fn a_node_is_in_service_until_taken_out() {
        let mut b = StepBook::default();
        assert!(b.in_service("n1"));
        b.nodes.entry("n1".into()).or_default().out = Some("gone".into());
        assert!(!b.in_service("n1"));
        assert!(b.in_service("n2"));
    }
}
