//! Starting one run and following it: its own session, stdout and stderr through one pipe
//! into its log file, the live view and the output scanner; its exit reported as an
//! [`Event`] on the scheduler's channel.
//!
//! Two threads per run: the runner (spawns, waits) and the reader (drains the pipe).
//! The runner is the child's parent thread, so `PR_SET_PDEATHSIG` fires only if colloc
//! itself dies.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;

use super::output::{self, Epochs, Series};
use super::sys;

/// How long a run's output may stay open after its process group was killed (a process
/// that left the run's session may hold it) before colloc stops reading it.
const DRAIN_WAIT: Duration = Duration::from_secs(3);
/// Carriage-return progress lines (tqdm) reach the live view at most this often.
const CR_LINE_EVERY: Duration = Duration::from_secs(2);

/// What the scheduler hears about.
pub enum Event {
    /// A run's process ended (or could not start).
    Finished(Finished),
    /// colloc received this signal.
    Signal(i32),
}

/// The end of one attempt.
pub struct Finished {
    /// Run index.
    pub idx: usize,
    /// When the process ended.
    pub end: Instant,
    /// Wall-clock time of the end.
    pub end_wall: SystemTime,
    /// Its status, or why it could not start.
    pub status: Result<ExitStatus, String>,
}

/// What the output of a run showed so far (shared with the scheduler and status line).
#[derive(Debug, Default)]
pub struct Seen {
    /// Throughput samples.
    pub series: Series,
    /// Epoch boundaries.
    pub epochs: Epochs,
    /// A CUDA out-of-memory message appeared.
    pub oom: bool,
}

/// Where a run's process stands, for signalling it: a group is signalled only while its
/// leader is unreaped, so the id cannot belong to someone else by then.
#[derive(Debug, Default)]
enum PidState {
    /// Not spawned yet; a stop asked for meanwhile is kept (SIGKILL over anything else)
    /// and honoured at spawn time by not starting the run at all.
    #[default]
    Before,
    /// A stop came before the spawn.
    StopBefore(i32),
    /// Spawned; the leader is unreaped.
    Running(u32),
    /// Reaped, or never started because a stop came first.
    Gone,
}

/// The pid of a run, shared between the run's thread and the scheduler.
#[derive(Debug, Default)]
pub struct Pid(Mutex<PidState>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pid {
    /// Signal the run's process group; false if it is not running. A signal that comes
    /// before the run was spawned stops it from being spawned.
    pub fn signal_group(&self, sig: i32) -> bool {
        let mut st = lock(&self.0);
        match *st {
            PidState::Running(pid) => sys::kill_group(pid, sig),
            PidState::Before => {
                *st = PidState::StopBefore(sig);
                false
            }
            PidState::StopBefore(old) => {
                if old != libc::SIGKILL {
                    *st = PidState::StopBefore(sig);
                }
                false
            }
            PidState::Gone => false,
        }
    }

    /// The pid while the run's leader is unreaped.
    pub fn get(&self) -> Option<u32> {
        match *lock(&self.0) {
            PidState::Running(pid) => Some(pid),
            _ => None,
        }
    }
}

/// Shared state of one running attempt.
#[derive(Default)]
pub struct Live {
    /// Its pid.
    pub pid: Pid,
    /// What its output showed.
    pub seen: Mutex<Seen>,
    /// A stop came before its process was spawned, so it was not.
    pub never_started: std::sync::atomic::AtomicBool,
}

impl Live {
    /// Lock the output facts.
    pub fn seen(&self) -> MutexGuard<'_, Seen> {
        lock(&self.seen)
    }
}

/// Everything needed to start one attempt.
pub struct Launch {
    /// Run index.
    pub idx: usize,
    /// Live-view prefix and log header.
    pub name: String,
    /// Attempt number (1-based).
    pub attempt: u32,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Full environment changes, in order.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub workdir: Option<PathBuf>,
    /// Log file.
    pub log: PathBuf,
    /// Throughput regex.
    pub metric: Option<Regex>,
    /// Echo output to colloc's stdout.
    pub live_view: bool,
    /// Time zero of the pack, for sample times.
    pub t0: Instant,
}

/// How long a finished run's leftover group members get to disappear before its slot
/// is given to the next run.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(3);

/// Start an attempt on its own threads. Returns the shared state at once; the end comes
/// as [`Event::Finished`] on `tx`.
pub fn start(l: Launch, tx: Sender<Event>) -> io::Result<Arc<Live>> {
    let live = Arc::new(Live::default());
    let shared = live.clone();
    thread::Builder::new()
        .name(format!("run-{}", l.idx))
        .stack_size(128 * 1024)
        .spawn(move || {
            let idx = l.idx;
            let status = run_attempt(l, &shared);
            let _ = tx.send(Event::Finished(Finished {
                idx,
                end: Instant::now(),
                end_wall: SystemTime::now(),
                status,
            }));
        })?;
    Ok(live)
}

fn open_log(l: &Launch) -> io::Result<File> {
    let mut f = if l.attempt > 1 {
        OpenOptions::new().append(true).create(true).open(&l.log)?
    } else {
        File::create(&l.log)?
    };
    if l.attempt > 1 {
        writeln!(f, "\n--- colloc: attempt {} ---", l.attempt)?;
    }
    Ok(f)
}

fn run_attempt(l: Launch, live: &Arc<Live>) -> Result<ExitStatus, String> {
    let log = open_log(&l).map_err(|e| format!("cannot write log {}: {e}", l.log.display()))?;
    let (rd, wr) = sys::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let wr2 = wr
        .try_clone()
        .map_err(|e| format!("cannot make a pipe: {e}"))?;
    let mut cmd = Command::new(&l.command[0]);
    cmd.args(&l.command[1..])
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(wr))
        .stderr(Stdio::from(wr2));
    if let Some(d) = &l.workdir {
        cmd.current_dir(d);
    }
    sys::isolate(&mut cmd);
    let mut child = {
        // Hold the pid lock across spawn so a signal sent meanwhile waits for the pid,
        // and one sent before it (colloc is stopping) keeps the run from starting.
        let mut pid = lock(&live.pid.0);
        if let PidState::StopBefore(sig) = *pid {
            *pid = PidState::Gone;
            live.never_started
                .store(true, std::sync::atomic::Ordering::SeqCst);
            log::debug!("{}: not started: signal {sig} came before it", l.name);
            return Err("not started: colloc was stopping".into());
        }
        let child = cmd.spawn().map_err(|e| {
            let msg = format!("cannot start {:?}: {e}", l.command[0]);
            let mut log = &log;
            let _ = writeln!(log, "colloc: {msg}");
            msg
        })?;
        *pid = PidState::Running(child.id());
        child
    };
    // The write ends now live only in the child; drop ours so EOF comes when it ends.
    drop(cmd);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let reader_live = live.clone();
    let prefix = format!("[{}] ", l.name);
    let (metric, live_view, t0) = (l.metric.clone(), l.live_view, l.t0);
    let reader = thread::Builder::new()
        .name(format!("out-{}", l.idx))
        .stack_size(128 * 1024)
        .spawn(move || {
            read_output(
                File::from(rd),
                log,
                &prefix,
                metric.as_ref(),
                live_view,
                t0,
                &reader_live,
            );
            let _ = done_tx.send(());
        });
    let pid = child.id();
    if let Err(e) = sys::wait_exited(pid) {
        log::debug!("waitid on {pid}: {e}");
    }
    {
        // The leader has exited but is not reaped: its group id is still ours. Whatever
        // it left behind in its group would hold the slot's GPU; end it.
        let mut guard = lock(&live.pid.0);
        sys::kill_group(pid, libc::SIGKILL);
        *guard = PidState::Gone;
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for the run: {e}"));
    // SIGKILL is asynchronous: members of the group (data-loader workers, torchrun
    // children) may still be releasing the slot's GPU. The next run on this slot waits
    // for them, a little, so it does not start into an out-of-memory error.
    let deadline = Instant::now() + GROUP_EXIT_WAIT;
    while sys::kill_group(pid, 0) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    if reader.is_ok() && done_rx.recv_timeout(DRAIN_WAIT).is_err() {
        log::warn!(
            "{}: its output is still held open by a process outside its session; no longer reading it",
            l.name
        );
    }
    status
}

fn read_output(
    mut pipe: File,
    mut log: File,
    prefix: &str,
    metric: Option<&Regex>,
    live_view: bool,
    t0: Instant,
    live: &Live,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut last_cr: Option<Instant> = None;
    let mut log_ok = true;
    let emit = |text: &[u8], cr: bool, last_cr: &mut Option<Instant>| {
        line(text, cr, prefix, metric, live_view, t0, live, last_cr)
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if log_ok && log.write_all(&buf[..n]).is_err() {
            log_ok = false;
            log::warn!("{}: cannot write its log any more", prefix.trim());
        }
        pending.extend_from_slice(&buf[..n]);
        let mut start = 0;
        while let Some(off) = pending[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + off;
            let cr = pending[end] == b'\r';
            emit(&pending[start..end], cr, &mut last_cr);
            start = end + 1;
        }
        pending.drain(..start);
        if pending.len() > 64 * 1024 {
            emit(&pending, false, &mut last_cr);
            pending.clear();
        }
    }
    if !pending.is_empty() {
        emit(&pending, false, &mut last_cr);
    }
}

#[allow(clippy::too_many_arguments)]
fn line(
    raw: &[u8],
    cr: bool,
    prefix: &str,
    metric: Option<&Regex>,
    live_view: bool,
    t0: Instant,
    live: &Live,
    last_cr: &mut Option<Instant>,
) {
    if raw.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(raw);
    let facts = output::scan(&text, metric);
    if facts.throughput.is_some() || facts.epoch.is_some() || facts.oom {
        let t = t0.elapsed().as_secs_f64();
        let mut seen = live.seen();
        if let Some((v, unit)) = facts.throughput {
            seen.series.push(t, v, unit);
        }
        match (facts.epoch, facts.epoch_time) {
            (Some(n), Some(secs)) => seen.epochs.reported(n, secs),
            (Some(n), None) => seen.epochs.see(n, t),
            _ => {}
        }
        seen.oom |= facts.oom;
    }
    if live_view {
        if cr {
            let now = Instant::now();
            if last_cr.is_some_and(|l| now.duration_since(l) < CR_LINE_EVERY) {
                return;
            }
            *last_cr = Some(now);
        }
        let mut out = io::stdout().lock();
        let _ = out
            .write_all(prefix.as_bytes())
            .and_then(|_| out.write_all(text.as_bytes()))
            .and_then(|_| out.write_all(b"\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(dir: &std::path::Path) -> Launch {
        Launch {
            idx: 0,
            name: "r".into(),
            attempt: 1,
            command: vec!["touch".into(), dir.join("ran").display().to_string()],
            env: Vec::new(),
            workdir: None,
            log: dir.join("r.log"),
            metric: None,
            live_view: false,
            t0: Instant::now(),
        }
    }

    #[test]
    fn a_stop_before_the_spawn_keeps_the_run_from_starting() {
        let dir = tempfile::tempdir().unwrap();
        let live = Arc::new(Live::default());
        // colloc starts stopping after the launch, before the run's thread spawned it.
        assert!(!live.pid.signal_group(libc::SIGTERM));
        let r = run_attempt(launch(dir.path()), &live);
        assert!(r.is_err(), "{r:?}");
        assert!(live.never_started.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!dir.path().join("ran").exists(), "the run was started");
        assert_eq!(live.pid.get(), None);
        // Signals after that reach nothing and change nothing.
        assert!(!live.pid.signal_group(libc::SIGKILL));
    }

    #[test]
    fn without_a_stop_the_run_starts_and_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let live = Arc::new(Live::default());
        let r = run_attempt(launch(dir.path()), &live);
        assert!(r.as_ref().is_ok_and(|s| s.success()), "{r:?}");
        assert!(!live.never_started.load(std::sync::atomic::Ordering::SeqCst));
        assert!(dir.path().join("ran").exists());
        assert_eq!(live.pid.get(), None);
    }
}
