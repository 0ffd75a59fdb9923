//! The report, rebuilt from the event log: [`Fold`] takes events in order and
//! [`Fold::report`] computes every figure from them. `colloc run` keeps a fold of the
//! events it writes and renders its report from it; `colloc report DIR` folds the files in
//! `DIR/events/`. Both give the same report.
//!
//! How the pack's figures are made (also in colloc(1)):
//! - **Makespan**: for each colloc session, its first run start to its last run end;
//!   summed over sessions (a requeued job's time in the queue is not the pack's).
//! - **Aggregate throughput**: the work of every attempt of every run (in the pack's unit,
//!   the most common one) over the makespan. Work follows the window rule of
//!   [`crate::rules::throughput`]: start-up and single samples count as none.
//! - **Speed-up**: the time the same attempts would take one after another, each at its
//!   run's solo throughput plus its own start-up (an attempt without samples: its whole
//!   wall time), over the makespan. Only runs with a solo figure of their own command count;
//!   when some runs have none, the speed-up covers the others and is a lower bound.
//! - **Energy across nodes**: where runs ran as Slurm steps, each step read its run's GPU;
//!   the readings of all runs on one GPU are put together and shared out by
//!   [`crate::energy`].
//!
//! This module takes the events ([`Fold::apply`]); `report` computes the report's records
//! from them, `summary` its summary (counts, makespan, aggregate, speed-up).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use crate::telemetry::{AttemptGpu, GpuTotals};

use super::events::{
    Escaped, Event, Kind, MetricValue, Progress, RunIdentity, SlotRecord, StepInfo,
};
use crate::record::model::Summary;
use crate::record::State;
use crate::rules::throughput::{keep, Stats};

/// RFC 3339 (UTC, milliseconds) of Unix seconds.
pub fn rfc3339(ts: f64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs_f64(ts.max(0.0));
    humantime::format_rfc3339_millis(t).to_string()
}

#[derive(Debug, Clone, Default)]
struct Sess {
    session: u32,
    start: f64,
    last: f64,
    host: String,
    pid: u32,
    job_id: Option<String>,
    restart_count: Option<u32>,
    mode: String,
    source: String,
    steps: bool,
    slots: Vec<SlotRecord>,
    interval_s: f64,
    colloc_version: String,
    ended: bool,
    stopped_by: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct Att {
    attempt: u32,
    session: u32,
    slot: usize,
    device: Option<String>,
    node: Option<String>,
    log: String,
    start: f64,
    end: Option<f64>,
    last_ts: f64,
    state: Option<State>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    error: Option<String>,
    oom: bool,
    unit: Option<String>,
    stats: Stats,
    samples: Vec<(f64, f64)>,
    metrics: BTreeMap<String, MetricValue>,
    epochs: Vec<(u64, f64)>,
    gpu: Option<Box<AttemptGpu>>,
    escaped: Vec<Escaped>,
    lines: u64,
    step: Option<Box<StepInfo>>,
    /// Started while its slot's previous attempt still ran.
    early: bool,
}

impl Att {
    /// Its state as the report has it, `live` the session still running: its recorded
    /// end's, else running while its session runs, else interrupted.
    fn state_at(&self, live: Option<u32>) -> State {
        match self.state {
            Some(s) => s,
            None if live == Some(self.session) => State::Running,
            None => State::Interrupted,
        }
    }

    fn progress(&mut self, ts: f64, p: Progress) {
        self.last_ts = self.last_ts.max(ts);
        if self.unit.is_none() {
            self.unit = p.unit;
        }
        for s in p.samples {
            keep(&mut self.samples, s);
        }
        if p.stats.count >= self.stats.count {
            self.stats = p.stats;
        }
        for (k, v) in p.metrics {
            self.metrics.insert(k, v);
        }
        self.epochs.extend(p.epochs);
        self.oom |= p.oom;
        self.lines = self.lines.max(p.lines);
    }
}

#[derive(Debug, Clone)]
struct RunSt {
    /// Its definition in the latest session that listed it.
    id: RunIdentity,
    /// The session from which `id` holds (0: from the first).
    since: u32,
    /// Its earlier definitions, each with the session from which it held: a resume of
    /// an edited manifest keeps every attempt with the definition it ran.
    before: Vec<(u32, RunIdentity)>,
    /// The session event that listed it last (counted from 1; see [`Fold::listings`]):
    /// one before the latest means it was removed from the manifest.
    listed: u64,
    index: usize,
    attempts: Vec<Att>,
    /// Where the latest attempt of each number is in `attempts`: a progress or end event
    /// finds its attempt at once, not by a scan (a forged record of a million attempts
    /// of one run made that quadratic).
    latest: Latest,
}

/// Where the latest attempt of each number is in a run's attempts. Attempts numbered 1,
/// 2, 3 … in order (as colloc records every run) need no map: number k is at k − 1. Any
/// other order (an edited or forged record) gets one, so a lookup stays one step (a map
/// a run was most of a 100,000-run fold's maps).
#[derive(Debug, Clone, Default)]
enum Latest {
    #[default]
    InOrder,
    // Boxed on purpose: the enum is then one pointer a run, not a map's 48 bytes.
    #[allow(clippy::box_collection)]
    Map(Box<HashMap<u32, usize>>),
}

impl Latest {
    /// Attempt number `attempt` is at `at`, the end of the attempts.
    fn insert(&mut self, attempt: u32, at: usize) {
        match self {
            Latest::InOrder if usize::try_from(attempt).is_ok_and(|a| a == at + 1) => {}
            Latest::InOrder => {
                let mut m: HashMap<u32, usize> = (0..at).map(|i| ((i + 1) as u32, i)).collect();
                m.insert(attempt, at);
                *self = Latest::Map(Box::new(m));
            }
            Latest::Map(m) => {
                m.insert(attempt, at);
            }
        }
    }

    /// Where the latest attempt numbered `attempt` is, of `len` attempts.
    fn get(&self, attempt: u32, len: usize) -> Option<usize> {
        match self {
            Latest::InOrder => usize::try_from(attempt)
                .ok()?
                .checked_sub(1)
                .filter(|&i| i < len),
            Latest::Map(m) => m.get(&attempt).copied(),
        }
    }
}

impl RunSt {
    /// The definition it had in `session`.
    fn definition_in(&self, session: u32) -> &RunIdentity {
        if session >= self.since {
            return &self.id;
        }
        // `before` is in session order: a search, not a scan (a forged record of many
        // edits and attempts would make a scan per attempt quadratic).
        let at = self.before.partition_point(|(since, _)| *since <= session);
        at.checked_sub(1)
            .and_then(|i| self.before.get(i))
            .map_or(&self.id, |(_, d)| d)
    }
}

impl RunSt {
    /// A run known so far by its name alone, at `index`.
    fn named(name: String, index: usize) -> RunSt {
        RunSt {
            id: RunIdentity {
                name,
                command: Vec::new(),
                env: Vec::new(),
                workdir: None,
                grid: None,
                metrics: Vec::new(),
                metric: None,
                gpu_memory_mib: None,
            },
            since: 0,
            before: Vec::new(),
            listed: 0,
            index,
            attempts: Vec::new(),
            latest: Latest::InOrder,
        }
    }
}

#[derive(Debug, Clone)]
struct SoloFig {
    throughput: f64,
    unit: String,
    source: String,
}

/// Events folded so far.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    sessions: Vec<Sess>,
    /// Where the first session of each number is in `sessions`.
    session_at: HashMap<u32, usize>,
    /// Each run shared, and the maps of runs too: a clone of the fold (the snapshot
    /// `colloc run`'s report writer writes from) costs a pointer a run, and a change
    /// copies only the run it changes while a snapshot holds it.
    runs: Vec<Arc<RunSt>>,
    by_name: Arc<HashMap<String, usize>>,
    calibrations: Arc<BTreeMap<String, Vec<Att>>>,
    /// As [`RunSt::latest`], for the calibrations.
    calibration_latest: Arc<HashMap<String, HashMap<u32, usize>>>,
    solos: Arc<HashMap<String, SoloFig>>,
    signals: Vec<(f64, String, Vec<String>)>,
    gpus: BTreeMap<u32, Vec<GpuTotals>>,
    /// Nodes given no more runs: session, time, node, why.
    node_outs: Vec<(u32, f64, String, String)>,
    /// Session events seen: a run last listed by an earlier one is removed.
    listings: u64,
}

/// One GPU's figures across steps: its totals, every reading of its energy counter, and
/// its runs' spans (attempt key, start, end).
type GpuAcc = (
    GpuTotals,
    Vec<(f64, u64)>,
    Vec<((Kind, String, u32), f64, f64)>,
);

/// Energy of runs measured on other nodes, shared out per GPU ([`super::energy`]).
#[derive(Debug, Default)]
struct Remote {
    /// Per attempt (kind, run, attempt number): its share, joules.
    shares: HashMap<(Kind, String, u32), f64>,
    /// Per session and GPU.
    totals: Vec<GpuTotals>,
}

impl Fold {
    /// An empty fold.
    pub fn new() -> Fold {
        Fold::default()
    }

    /// Sessions seen.
    pub fn sessions(&self) -> u32 {
        self.sessions.iter().map(|s| s.session).max().unwrap_or(0)
    }

    /// The runs of the latest session's manifest.
    pub fn identities(&self) -> Vec<RunIdentity> {
        self.runs
            .iter()
            .filter(|r| !self.removed(r))
            .map(|r| r.id.clone())
            .collect()
    }

    /// Is `r` no longer in the manifest (listed by a session before the latest)? A run
    /// known only from its attempts, before any session, is not.
    fn removed(&self, r: &RunSt) -> bool {
        r.listed != self.listings
    }

    /// The state of `r` as its report record has it: its last attempt's (one without an
    /// end is running while its session runs, else interrupted), or not started.
    fn run_state(r: &RunSt, live: Option<u32>) -> State {
        r.attempts
            .last()
            .map_or(State::NotStarted, |a| a.state_at(live))
    }

    /// The runs of the manifest as it stands, by state, as the report's summary counts
    /// them: a summary with those counts alone (the rest left at its default), made
    /// without building the report (a status line of a 100,000-run pack built one whole,
    /// as large as the record itself, every 30 seconds).
    pub fn state_counts(&self, live: Option<u32>) -> Summary {
        let mut c = Summary::default();
        for r in self.runs.iter().filter(|r| !self.removed(r)) {
            c.runs += 1;
            match Self::run_state(r, live) {
                State::Succeeded => c.succeeded += 1,
                State::Failed => c.failed += 1,
                State::TimedOut => c.timed_out += 1,
                State::Interrupted => c.interrupted += 1,
                State::NotStarted => c.not_started += 1,
                State::Running => c.running += 1,
            }
        }
        c
    }

    /// Per run name: its attempts so far and whether its last one succeeded with the
    /// definition it has now (one that ran before an edit of its definition runs again).
    pub fn attempts_of(&self, name: &str) -> (u32, bool) {
        match self.by_name.get(name).map(|&i| &self.runs[i]) {
            Some(r) => (
                r.attempts.iter().map(|a| a.attempt).max().unwrap_or(0),
                r.attempts
                    .last()
                    .is_some_and(|a| a.state == Some(State::Succeeded) && a.session >= r.since),
            ),
            None => (0, false),
        }
    }

    /// Calibrations made so far for a run name.
    pub fn calibrations_of(&self, name: &str) -> u32 {
        self.calibrations.get(name).map_or(0, |v| v.len() as u32)
    }

    /// The solo figure for a solo key, if one is recorded.
    pub fn solo(&self, key: &str) -> Option<(f64, String)> {
        self.solos.get(key).map(|s| (s.throughput, s.unit.clone()))
    }

    fn run_mut(&mut self, name: &str) -> &mut RunSt {
        let i = match self.by_name.get(name) {
            Some(&i) => i,
            None => {
                let i = self.runs.len();
                self.runs.push(Arc::new(RunSt::named(name.to_string(), i)));
                Arc::make_mut(&mut self.by_name).insert(name.to_string(), i);
                i
            }
        };
        Arc::make_mut(&mut self.runs[i])
    }

    fn attempt_mut(&mut self, name: &str, kind: Kind, attempt: u32) -> Option<&mut Att> {
        match kind {
            Kind::Run => self.by_name.get(name).and_then(|&i| {
                let r = Arc::make_mut(&mut self.runs[i]);
                let at = r.latest.get(attempt, r.attempts.len())?;
                r.attempts.get_mut(at)
            }),
            Kind::Solo => {
                let at = *self.calibration_latest.get(name)?.get(&attempt)?;
                Arc::make_mut(&mut self.calibrations)
                    .get_mut(name)?
                    .get_mut(at)
            }
        }
    }

    /// Take one event.
    pub fn apply(&mut self, ev: Event) {
        let ts = ev.ts();
        if !matches!(ev, Event::Session { .. }) {
            if let Some(s) = self.sessions.last_mut() {
                s.last = s.last.max(ts);
            }
        }
        match ev {
            Event::Session { .. } => self.open_session(ev),
            Event::Start { .. } => self.start_attempt(ev),
            Event::Progress {
                ts,
                run,
                kind,
                attempt,
                progress,
            } => {
                if let Some(a) = self.attempt_mut(&run, kind, attempt) {
                    a.progress(ts, progress);
                }
            }
            Event::End { .. } => self.end_attempt(ev),
            Event::NodeOut {
                ts, node, reason, ..
            } => {
                let session = self.sessions();
                self.node_outs.push((session, ts, node, reason));
            }
            Event::Signal { ts, signal, runs } => self.signals.push((ts, signal, runs)),
            Event::Stop { reason, .. } => {
                if let Some(s) = self.sessions.last_mut() {
                    s.stopped_by.get_or_insert(reason);
                }
            }
            Event::Gpus { session, gpus, .. } => {
                self.gpus.insert(session, gpus);
            }
            Event::Solo {
                key,
                throughput,
                unit,
                source,
                ..
            } => {
                Arc::make_mut(&mut self.solos).insert(
                    key,
                    SoloFig {
                        throughput,
                        unit,
                        source,
                    },
                );
            }
            Event::SessionEnd {
                session,
                stopped_by,
                ..
            } => {
                if let Some(s) = self.sessions.iter_mut().find(|s| s.session == session) {
                    s.ended = true;
                    if stopped_by.is_some() {
                        s.stopped_by = stopped_by;
                    }
                }
            }
        }
    }

    /// A session event (any other event is ignored): a new session, and its manifest's
    /// runs in their order.
    fn open_session(&mut self, ev: Event) {
        let Event::Session {
            ts,
            session,
            colloc_version,
            host,
            pid,
            job_id,
            restart_count,
            mode,
            source,
            steps,
            slots,
            interval_s,
            runs,
            ..
        } = ev
        else {
            return;
        };
        self.session_at
            .entry(session)
            .or_insert(self.sessions.len());
        self.sessions.push(Sess {
            session,
            start: ts,
            last: ts,
            host,
            pid,
            job_id,
            restart_count,
            mode,
            source,
            steps,
            slots,
            interval_s,
            colloc_version,
            ..Sess::default()
        });
        self.manifest(session, runs);
    }

    /// The runs of a session's manifest: each known by name gets its identity and index
    /// (a changed definition keeps the one before, from `session` on), runs it does not
    /// list are removed (by their older `listed`), and the runs are kept in manifest
    /// order.
    fn manifest(&mut self, session: u32, runs: Vec<RunIdentity>) {
        self.listings += 1;
        let listing = self.listings;
        // Room for the listed runs at once (a large pack's list grown by doubling kept up
        // to twice its runs' room).
        self.runs
            .reserve_exact(runs.len().saturating_sub(self.runs.len()));
        for (index, id) in runs.into_iter().enumerate() {
            let name = id.name.clone();
            let r = self.run_mut(&name);
            // A run named only by an attempt so far has no definition to keep.
            let known = !r.id.command.is_empty();
            if known && !r.id.same_run(&id) {
                let old = std::mem::replace(&mut r.id, id);
                r.before.push((r.since, old));
                r.since = session;
            } else {
                r.id = id;
            }
            r.index = index;
            r.listed = listing;
        }
        // Only when the order changed (by_name holds every name already): a
        // forged record of many session events must not rebuild the map each.
        if !self.runs.is_sorted_by_key(|r| r.index) {
            self.runs.sort_by_key(|r| r.index);
            let by_name = Arc::make_mut(&mut self.by_name);
            for (i, r) in self.runs.iter().enumerate() {
                if let Some(at) = by_name.get_mut(&r.id.name) {
                    *at = i;
                }
            }
        }
    }

    /// A start event (any other event is ignored): a new attempt of a run or of a
    /// calibration, found later as the latest of its number.
    fn start_attempt(&mut self, ev: Event) {
        let Event::Start {
            ts,
            run,
            kind,
            attempt,
            session,
            slot,
            device,
            node,
            log,
            early,
        } = ev
        else {
            return;
        };
        let a = Att {
            attempt,
            session,
            slot,
            device,
            node,
            log,
            early,
            start: ts,
            last_ts: ts,
            ..Att::default()
        };
        match kind {
            Kind::Run => {
                let r = self.run_mut(&run);
                r.latest.insert(attempt, r.attempts.len());
                // Most runs have one attempt: room for one, not the four a first push
                // makes (an attempt's state is large; 100,000 runs held three spare each).
                r.attempts.reserve_exact(1);
                r.attempts.push(a);
            }
            Kind::Solo => {
                let v = Arc::make_mut(&mut self.calibrations)
                    .entry(run.clone())
                    .or_default();
                Arc::make_mut(&mut self.calibration_latest)
                    .entry(run)
                    .or_default()
                    .insert(attempt, v.len());
                v.push(a);
            }
        }
    }

    /// An end event (any other event is ignored): its attempt's last progress and how it
    /// ended.
    fn end_attempt(&mut self, ev: Event) {
        let Event::End {
            ts,
            run,
            kind,
            attempt,
            state,
            exit_code,
            signal,
            error,
            escaped,
            gpu,
            step,
            progress,
            ..
        } = ev
        else {
            return;
        };
        if let Some(a) = self.attempt_mut(&run, kind, attempt) {
            a.progress(ts, progress);
            a.end = Some(ts);
            a.state = Some(state);
            a.exit_code = exit_code;
            a.signal = signal;
            a.error = error;
            a.escaped = escaped;
            a.gpu = gpu.map(Box::new);
            a.step = step;
        }
    }
}

mod report;
mod summary;
mod tally;

pub use report::Streamed;

#[cfg(test)]
mod tests;
