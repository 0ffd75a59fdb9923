//! What the engine and its caller exchange: the jobs it is handed ([`Job`]), what it
//! reports of them ([`View`], [`Ended`]), the caller's side ([`Driver`], [`Deadline`])
//! and its settings ([`Options`], [`Warn`]).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use colloc_results::telemetry::AttemptGpu;

use super::super::launch::LaunchSpec;
use super::super::scan::{Advance, Epochs, Scanner};
use super::Ctl;
use colloc_results::record::State;
use colloc_results::rules::throughput::Series;
use colloc_results::userfs::CheckedDir;

/// Number of an attempt, unique within the process (engines run one after another share
/// the launcher's supervisors).
pub type AttemptId = u64;

/// One thing to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The caller's run index.
    pub run: usize,
    /// The caller's attempt number (1-based).
    pub attempt: u32,
    /// Prefix of its lines in the live view.
    pub label: String,
    /// What to start; the slot's environment goes before `spec.env`.
    pub spec: LaunchSpec,
    /// What its lines are scanned for.
    pub scanner: Arc<Scanner>,
    /// Its time limit.
    pub timeout: Option<Duration>,
    /// Its log file (made afresh).
    pub log: LogFile,
}

/// An attempt's log: a file made afresh in a checked directory (a link or anything else
/// at its name is replaced, never followed), and its path for messages.
#[derive(Debug, Clone)]
pub struct LogFile {
    /// The directory it is made in (`None`: it could not be opened; the attempt runs
    /// without a log).
    pub dir: Option<Arc<CheckedDir>>,
    /// Its name there.
    pub name: String,
    /// Its path, for messages and for reading it back.
    pub path: PathBuf,
}

impl LogFile {
    /// The log `name` in `dir` (shown as `path`).
    pub fn new(dir: Option<&Arc<CheckedDir>>, name: String, path: PathBuf) -> LogFile {
        LogFile {
            dir: dir.cloned(),
            name,
            path,
        }
    }

    pub(super) fn create(&self) -> Result<File, String> {
        match &self.dir {
            Some(d) => d.create(&self.name).map_err(|e| e.to_string()),
            None => Err(format!("no folder for {}", self.path.display())),
        }
    }
}

/// A slot: where one attempt at a time runs.
#[derive(Debug, Clone, Default)]
pub struct Slot {
    /// Environment every attempt on it gets (`CUDA_VISIBLE_DEVICES`, MPS pipes).
    pub env: Vec<(String, String)>,
}

/// Last and best value of a user metric.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct MetricAcc {
    /// Latest value.
    pub last: Option<f64>,
    /// Best value so far.
    pub best: Option<f64>,
    /// Values seen.
    pub count: u64,
}

/// What an attempt's output showed.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Throughput samples.
    pub series: Series,
    /// Epochs.
    pub epochs: Epochs,
    /// Its progress through the whole run, for when it will end.
    pub advance: Advance,
    /// A CUDA out-of-memory message appeared.
    pub oom: bool,
    /// User metrics, in the scanner's order.
    pub metrics: Vec<MetricAcc>,
    /// Lines read.
    pub lines: u64,
}

/// How an attempt's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Never ran: why.
    NotStarted(String),
    /// Its supervisor vanished; how it ended is unknown.
    Lost,
}

/// An attempt that ended.
#[derive(Debug)]
pub struct Ended {
    /// Engine id.
    pub id: AttemptId,
    /// The job it ran.
    pub job: Job,
    /// Its end, on the engine's clock.
    pub end: f64,
    /// How its process ended.
    pub exit: Exit,
    /// What that means.
    pub state: State,
    /// Its leader's pid.
    pub pid: Option<u32>,
    /// What its output showed.
    pub seen: Seen,
    /// Processes that had left its session (killed): (pid, command name).
    pub escaped: Vec<(u32, String)>,
    /// Processes that would not go away in time.
    pub left: u32,
    /// GPU figures, where sampled.
    pub gpu: Option<AttemptGpu>,
    /// The log could not be written (from this point on).
    pub log_error: Option<String>,
}

/// A running attempt, as the driver sees it.
#[derive(Debug)]
pub struct View<'a> {
    /// Engine id.
    pub id: AttemptId,
    /// Its job.
    pub job: &'a Job,
    /// Its slot.
    pub slot: usize,
    /// Its start, on the engine's clock.
    pub start: f64,
    /// What its output showed so far.
    pub seen: &'a Seen,
}

/// What the engine asks of its caller.
pub trait Driver {
    /// The next job for free slot `slot`, or `None` when nothing waits now or the slot
    /// is to stay idle (every free slot is asked). Not asked while the engine is
    /// stopping.
    fn next_job(&mut self, slot: usize) -> Option<Job>;
    /// The order in which free slots are offered to [`Driver::next_job`]: lowest rank
    /// first, ties by slot index (the default keeps slot order).
    fn slot_rank(&self, _slot: usize) -> u64 {
        0
    }
    /// An attempt was handed to its supervisor.
    fn started(&mut self, _v: &View<'_>) {}

    /// Should the next job of `v`'s slot start now, while `v` still runs (its start-up
    /// then overlaps `v`'s end)? Asked at each turn for a slot with one running attempt
    /// that is not being stopped, where the launcher can run two on a slot; on `true`
    /// the engine asks [`Driver::next_job`] for the slot. `now`: the engine's clock.
    fn start_early(&mut self, _v: &View<'_>, _now: f64) -> bool {
        false
    }
    /// An attempt ended.
    fn ended(&mut self, e: Ended, ctl: &mut Ctl<'_>);
    /// Called every tick, with the running attempts.
    fn tick(&mut self, _ctl: &mut Ctl<'_>) {}
    /// colloc received `sig` and forwarded it to these running attempts (run, attempt).
    fn signal(&mut self, _sig: i32, _to: &[(usize, u32)]) {}
    /// The engine began stopping everything.
    fn stopping(&mut self, _reason: &str) {}
}

/// What the engine does when told that the job's time limit is near (SIGUSR1 to colloc,
/// or the time a [`Deadline`] gives): `signal` to every running attempt, `grace` for them
/// to checkpoint and exit, then SIGTERM and, after [`Options::grace`], SIGKILL. Nothing
/// more starts, and every attempt that was running ends as interrupted, whatever its exit
/// status (a run that saved a checkpoint and exited 0 is not done), so a resumed pack
/// runs it again from its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Warn {
    /// The signal the runs get.
    pub signal: i32,
    /// How long they have before SIGTERM.
    pub grace: Duration,
}

/// When to warn the runs that the job's time limit is near (asked about once per turn of
/// the engine's loop; the answer may move as the job's limit changes).
pub trait Deadline {
    /// The moment to warn, if any.
    fn warn_at(&mut self) -> Option<Instant>;
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time between SIGTERM and SIGKILL when attempts are stopped.
    pub grace: Duration,
    /// How often [`Driver::tick`] is called.
    pub tick: Duration,
    /// Echo output lines to stdout with their label.
    pub live_view: bool,
}
