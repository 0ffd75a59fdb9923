//! What `colloc run` hands the pack engine, and what it makes of what comes back: the
//! solo calibrations of `--solo-baseline` ([`Calibrate`]), then the manifest's runs in
//! order with retries and `--fail-fast` ([`Pack`]). Both turn every start, progress and
//! end into events of the record.
//!
//! [`Calibrate`] lives in [`calibrate`]; [`Pack`] and the bookkeeping both share are here.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::args::{Options, RetryOn};
use super::fit::{Fit, Placer};
use super::live::LiveServer;
use super::manifest::RunSpec;
use super::record::Recorder;
use super::steps::{self, StepBook, StepFacts};
use crate::engine::launch::LaunchSpec;
use crate::engine::pack::{AttemptId, Ctl, Driver, Ended, Job, LogFile, View};
use crate::engine::signal_name;
use colloc_core::jobenv;
use colloc_results::live::{self, Live, LiveRun};
use colloc_results::record::events::{Event, Kind};
use colloc_results::record::State;
use colloc_results::telemetry::Sampler;
use colloc_results::userfs::CheckedDir;

mod calibrate;
mod facts;
mod overlap;

pub use calibrate::Calibrate;
use facts::{describe, end_event, in_unix, progress_of, step_info};
use overlap::{Ask, Overlap};

/// How often running attempts' new output facts go to the record.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How often the GPUs' figures so far go to the record (so a killed colloc loses little).
const GPUS_EVERY: Duration = Duration::from_secs(30);

/// Times a run goes back to the queue because its step failed (not the run) before
/// colloc counts it as failed.
pub const MAX_STEP_REQUEUES: u32 = 3;
/// Failed steps in a row after which a node gets no more runs.
pub const NODE_FAILURES_IN_A_ROW: u32 = 3;

/// Runs as Slurm steps: what the drivers share with the step launcher, and each slot's
/// node.
#[derive(Clone)]
pub struct StepCtx {
    /// Filled by the launcher ([`steps::StepLauncher`]).
    pub book: Rc<RefCell<StepBook>>,
    /// Each slot's node.
    pub slot_nodes: Vec<String>,
}

pub use colloc_results::record::store::LOGS_DIR;
use colloc_results::record::store::SOLO_LOGS_DIR;

/// Node name for the record: Slurm's, else the short host name (one rule, in core).
pub use colloc_core::publish::node_name;

/// The common part of both drivers.
struct Common<'a> {
    /// The runs; a run done for good lets its definition go ([`RunSpec::let_go`]).
    specs: &'a mut [RunSpec],
    rec: &'a mut Recorder,
    devices: Vec<Option<String>>,
    node: Option<String>,
    /// Run index and kind of each running attempt.
    live: HashMap<AttemptId, (usize, Kind)>,
    last_progress: Instant,
    metric_names: Vec<Vec<String>>,
    sampler: Option<&'a Sampler>,
    last_gpus: Instant,
    steps: Option<StepCtx>,
    /// Where the running runs are served to the node's metrics (in a Slurm job).
    publisher: Option<&'a LiveServer>,
}

impl<'a> Common<'a> {
    fn new(
        specs: &'a mut [RunSpec],
        rec: &'a mut Recorder,
        devices: Vec<Option<String>>,
        sampler: Option<&'a Sampler>,
        steps: Option<StepCtx>,
    ) -> Self {
        Common {
            metric_names: specs
                .iter()
                .map(|s| s.scanner.metrics.iter().map(|m| m.name.clone()).collect())
                .collect(),
            specs,
            rec,
            devices,
            node: node_name(),
            live: HashMap::new(),
            last_progress: Instant::now(),
            sampler,
            last_gpus: Instant::now(),
            steps,
            publisher: None,
        }
    }

    /// May a job start on `slot` now? Not on a node out of service, nor while many steps
    /// are still starting (slurmctld creates them one at a time).
    fn slot_open(&self, slot: usize) -> bool {
        let Some(s) = &self.steps else { return true };
        let book = s.book.borrow();
        s.slot_nodes.get(slot).is_some_and(|n| book.in_service(n))
            && book.starting() < steps::MAX_STARTING
    }

    fn job(&self, idx: usize, attempt: u32, log: LogFile, timeout: Option<Duration>) -> Job {
        let spec = &self.specs[idx];
        let mut env = vec![
            (jobenv::RUN_NAME.to_string(), spec.name.clone()),
            (jobenv::RUN_INDEX.to_string(), idx.to_string()),
            (jobenv::RUN_ATTEMPT.to_string(), attempt.to_string()),
        ];
        env.extend(spec.env.iter().cloned());
        Job {
            run: idx,
            attempt,
            label: spec.name.clone(),
            spec: LaunchSpec {
                argv: spec.command.clone(),
                env,
                cwd: spec.workdir.clone(),
            },
            scanner: spec.scanner.clone(),
            timeout,
            log,
        }
    }

    /// `early`: it started while its slot's previous attempt still ran.
    fn started(&mut self, v: &View<'_>, kind: Kind, log: &str, early: bool) {
        self.live.insert(v.id, (v.job.run, kind));
        let ev = Event::Start {
            ts: self.rec.ts(v.start),
            run: v.job.label.clone(),
            kind,
            attempt: v.job.attempt,
            session: self.rec.session(),
            slot: v.slot,
            device: self.devices.get(v.slot).cloned().flatten(),
            node: match &self.steps {
                Some(s) => s.slot_nodes.get(v.slot).cloned(),
                None => self.node.clone(),
            },
            log: log.to_string(),
            early,
        };
        self.rec.emit(ev);
    }

    /// New output facts of running attempts go to the record every second.
    fn progress(&mut self, ctl: &mut Ctl<'_>) {
        if self.last_progress.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last_progress = Instant::now();
        self.publish_live(ctl);
        let ids: Vec<(AttemptId, String, u32)> = ctl
            .running()
            .map(|v| (v.id, v.job.label.clone(), v.job.attempt))
            .collect();
        for (id, run, attempt) in ids {
            let Some(&(idx, kind)) = self.live.get(&id) else {
                continue;
            };
            let Some(seen) = ctl.seen_mut(id) else {
                continue;
            };
            let p = progress_of(seen, &self.metric_names[idx]);
            let changed = !p.samples.is_empty() || !p.epochs.is_empty() || !p.metrics.is_empty();
            if !changed {
                continue;
            }
            let ev = Event::Progress {
                ts: self.rec.now(),
                run,
                kind,
                attempt,
                progress: in_unix(p, self.rec),
            };
            self.rec.emit(ev);
        }
        if let Some(s) = self
            .sampler
            .filter(|_| self.last_gpus.elapsed() >= GPUS_EVERY)
        {
            self.last_gpus = Instant::now();
            let ev = Event::Gpus {
                ts: self.rec.now(),
                session: self.rec.session(),
                gpus: s.totals().0,
            };
            self.rec.emit(ev);
        }
        self.rec.maybe_write();
    }

    /// What each running run is doing now, to the node's metrics ([`LiveServer`]).
    fn publish_live(&self, ctl: &Ctl<'_>) {
        let Some(p) = self.publisher else { return };
        // Across nodes each run is a Slurm step, which serves it to its own node's
        // metrics (crate::step::live): none is served from here.
        if self.steps.is_some() {
            return;
        }
        let views: Vec<View<'_>> = ctl.running().take(live::MAX_RUNS).collect();
        let keys: Vec<AttemptId> = views.iter().map(|v| v.id).collect();
        let gpu = self.sampler.map(|s| s.current(&keys)).unwrap_or_default();
        let figure =
            |x: Option<f64>| x.filter(|x| x.is_finite() && (0.0..=live::MAX_FIGURE).contains(x));
        let runs = views
            .iter()
            .zip(gpu.into_iter().chain(std::iter::repeat(None)))
            .filter_map(|(v, g)| {
                let g = g.unwrap_or_default();
                Some(LiveRun {
                    name: v.job.label.clone(),
                    index: u32::try_from(v.job.run).unwrap_or(u32::MAX),
                    attempt: v.job.attempt,
                    slot: u32::try_from(v.slot)
                        .ok()
                        .filter(|s| (*s as usize) < live::MAX_RUNS)?,
                    // NVML's name of the slot's device, else the job's (a UUID in a
                    // colloc job's COLLOC_DEVICES; an index is not said: its number is
                    // the job's view, not the node's).
                    device: p.slot_device(v.slot).map(String::from).or_else(|| {
                        self.devices.get(v.slot).cloned().flatten().filter(|d| {
                            (d.starts_with("GPU-") || d.starts_with("MIG-"))
                                && d.len() <= 64
                                && !d.chars().any(char::is_control)
                        })
                    }),
                    started_unix: self.rec.ts(v.start),
                    throughput: figure(v.seen.series.stats.last),
                    unit: v
                        .seen
                        .series
                        .unit
                        .as_ref()
                        .map(|u| u.chars().filter(|c| !c.is_control()).take(24).collect()),
                    memory_peak_bytes: g.peak_memory_bytes.filter(|b| *b <= 1 << 53),
                    util_ratio: g.mean_util_percent.map(|u| (u / 100.0).clamp(0.0, 1.0)),
                    energy_joules: figure(g.energy_j),
                })
            })
            .collect();
        p.publish(&Live {
            schema: live::SCHEMA,
            job: p.job(),
            runs,
        });
    }

    /// Record an attempt's end; what is known of its step, where it ran as one.
    fn ended(&mut self, e: &mut Ended, kind: Kind) -> Option<StepFacts> {
        self.live.remove(&e.id);
        let facts = self
            .steps
            .as_ref()
            .and_then(|s| s.book.borrow_mut().take(e.id));
        if let Some(g) = facts.as_ref().and_then(|f| f.gpu.as_ref()) {
            if e.gpu.is_none() {
                e.gpu = Some(g.figures.clone());
            }
        }
        let mut ev = end_event(self.rec, e, kind, &self.metric_names[e.job.run]);
        if let (Event::End { step, error, .. }, Some(f)) = (&mut ev, &facts) {
            *step = Some(Box::new(step_info(f)));
            if let Some(why) = &f.failure {
                *error = Some(format!("on {}: {why}", f.node));
            }
        }
        self.rec.emit(ev);
        facts
    }

    /// A step failed (not its run): count it against its node, and take the node out of
    /// service when it is gone or keeps failing. A step that worked clears the count.
    fn node_health(&mut self, f: &StepFacts) {
        let Some(s) = &self.steps else { return };
        let out = {
            let mut book = s.book.borrow_mut();
            let h = book.nodes.entry(f.node.clone()).or_default();
            let Some(why) = &f.failure else {
                h.in_a_row = 0;
                return;
            };
            h.in_a_row += 1;
            h.failed += 1;
            if h.out.is_some() {
                return;
            }
            let reason = if steps::node_gone(why) {
                format!("it left the job ({why})")
            } else if h.in_a_row >= NODE_FAILURES_IN_A_ROW {
                format!("{} steps in a row failed there (last: {why})", h.in_a_row)
            } else {
                return;
            };
            h.out = Some(reason.clone());
            reason
        };
        log::warn!("node {}: no more runs go there: {out}", f.node);
        let ev = Event::NodeOut {
            ts: self.rec.now(),
            node: f.node.clone(),
            reason: out,
        };
        self.rec.emit(ev);
    }

    fn signal(&mut self, sig: i32, to: &[(usize, u32)]) {
        let ev = Event::Signal {
            ts: self.rec.now(),
            signal: signal_name(sig),
            runs: to
                .iter()
                .map(|(i, _)| self.specs[*i].name.clone())
                .collect(),
        };
        self.rec.emit(ev);
        self.rec.maybe_write();
    }

    fn stopping(&mut self, reason: &str) {
        let ev = Event::Stop {
            ts: self.rec.now(),
            reason: reason.to_string(),
        };
        self.rec.emit(ev);
    }
}

/// The folder of the attempts' logs, opened once through the report directory's handle.
struct Logs {
    dir: Option<Arc<CheckedDir>>,
    path: PathBuf,
}

impl Logs {
    fn open(rec: &Recorder, solo: bool) -> Logs {
        let mut path = rec.dir().shown(LOGS_DIR);
        if solo {
            path.push(SOLO_LOGS_DIR);
        }
        let dir = match rec.dir().logs(solo) {
            Ok(d) => Some(Arc::new(d)),
            Err(e) => {
                log::warn!("{e}; runs go on without logs");
                None
            }
        };
        Logs { dir, path }
    }

    fn file(&self, name: String) -> LogFile {
        let path = self.path.join(&name);
        LogFile::new(self.dir.as_ref(), name, path)
    }
}

/// The manifest's runs on the slots, with retries.
pub struct Pack<'a> {
    common: Common<'a>,
    queue: VecDeque<usize>,
    attempts: Vec<u32>,
    opts: &'a Options,
    logs: Logs,
    unmatched_warned: usize,
    last_status: Instant,
    /// Per run: times it went back to the queue because its step failed.
    step_requeues: Vec<u32>,
    /// Right-sized placement by declared GPU memory, where slot sizes are known.
    placer: Option<Placer>,
    /// Per run: its declared `gpu_memory`, for the placer (set with it).
    needs: Vec<Option<u64>>,
    /// Starting a slot's next run early, over its start-up ([`Pack::with_overlap`]).
    overlap: Option<Overlap>,
    /// Per run: its command, for the start-up and length figures.
    commands: Vec<usize>,
    last_overlap_look: Instant,
}

impl<'a> Pack<'a> {
    /// The runs still to do: every run whose last recorded attempt did not succeed.
    pub fn new(
        specs: &'a mut [RunSpec],
        rec: &'a mut Recorder,
        devices: Vec<Option<String>>,
        sampler: Option<&'a Sampler>,
        opts: &'a Options,
        steps: Option<StepCtx>,
    ) -> Pack<'a> {
        let mut queue = VecDeque::new();
        let mut attempts = Vec::with_capacity(specs.len());
        let mut skipped = 0;
        for (i, s) in specs.iter().enumerate() {
            let (n, ok) = rec.fold().attempts_of(&s.name);
            attempts.push(n);
            if ok {
                skipped += 1;
            } else {
                queue.push_back(i);
            }
        }
        if skipped > 0 {
            let msg = format!(
                "resuming: {skipped} of {} runs succeeded before and are skipped; {} to run",
                specs.len(),
                queue.len()
            );
            if opts.quiet {
                log::info!("{msg}");
            } else {
                outln!("colloc: {msg}");
            }
        }
        let logs = Logs::open(rec, false);
        let runs = specs.len();
        Pack {
            common: Common::new(specs, rec, devices, sampler, steps),
            step_requeues: vec![0; runs],
            queue,
            attempts,
            opts,
            logs,
            unmatched_warned: 0,
            last_status: Instant::now(),
            placer: None,
            needs: Vec::new(),
            overlap: None,
            commands: Vec::new(),
            last_overlap_look: Instant::now(),
        }
    }

    /// Start a slot's next run early, so that its start-up overlaps the end of the run
    /// before it ([`overlap`]), on slots of these sizes (`fit`) and devices. Runs on this
    /// node only: not across nodes (a Slurm step per attempt).
    pub fn with_overlap(mut self, fit: Fit, devices: &[Option<String>]) -> Self {
        if self.common.steps.is_some() {
            return self;
        }
        let (commands, n) =
            overlap::commands_of(self.common.specs.iter().map(|s| s.command.as_slice()));
        self.commands = commands;
        self.overlap = Some(Overlap::new(fit, devices, n));
        self
    }

    /// The queue position of the run `slot` would take now.
    fn pick(&self, slot: usize) -> Option<usize> {
        match &self.placer {
            Some(p) => p.choose(slot, &self.queue, &self.needs),
            None => (!self.queue.is_empty()).then_some(0),
        }
    }

    /// What the running attempts show now, for the early-start rule: their first
    /// throughput line and memory peak (once a second).
    fn overlap_look(&mut self, ctl: &Ctl<'_>) {
        let Some(o) = &mut self.overlap else { return };
        if self.last_overlap_look.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last_overlap_look = Instant::now();
        let views: Vec<(AttemptId, Option<f64>)> = ctl
            .running()
            .map(|v| (v.id, v.seen.series.stats.first_t))
            .collect();
        let keys: Vec<AttemptId> = views.iter().map(|(id, _)| *id).collect();
        let gpu = self
            .common
            .sampler
            .map(|s| s.current(&keys))
            .unwrap_or_default();
        for (i, (id, first)) in views.into_iter().enumerate() {
            let peak = gpu
                .get(i)
                .cloned()
                .flatten()
                .and_then(|g| g.peak_memory_bytes);
            o.seen(id, first, peak);
        }
    }

    /// Place runs by their declared `gpu_memory` on slots of these sizes.
    /// Serve the running runs to the node's metrics through `server`.
    pub fn with_live(mut self, server: Option<&'a LiveServer>) -> Self {
        self.common.publisher = server;
        self
    }

    pub fn with_fit(mut self, fit: Fit) -> Self {
        self.placer = Some(Placer::new(fit));
        // Asked at every start (and every early-start check): made once.
        self.needs = self.common.specs.iter().map(|s| s.gpu_memory).collect();
        self
    }

    /// The log of a run's next attempt: `logs/NAME.log`; the previous attempt's log is
    /// kept as `logs/NAME.K.log`.
    fn log_for(&self, name: &str, attempt: u32) -> LogFile {
        let cur = format!("{name}.log");
        if let (true, Some(d)) = (attempt > 1, &self.logs.dir) {
            if matches!(d.lstat(&cur), Ok(Some(_))) {
                let prev = format!("{name}.{}.log", attempt - 1);
                if let Err(e) = d.rename(&cur, &prev) {
                    log::warn!("{name}: cannot keep the earlier attempt's log as {prev}: {e}");
                }
            }
        }
        self.logs.file(cur)
    }

    fn status_line(&mut self, ctl: &Ctl<'_>) {
        if self.opts.quiet || self.last_status.elapsed() < self.opts.status_every {
            return;
        }
        self.last_status = Instant::now();
        let s = self.common.rec.state_counts();
        let done = s.succeeded + s.failed + s.timed_out + s.interrupted;
        let mut agg: BTreeMap<String, f64> = BTreeMap::new();
        for v in ctl.running() {
            if let (Some(u), Some(last)) = (&v.seen.series.unit, v.seen.series.stats.last) {
                *agg.entry(u.clone()).or_default() += last;
            }
        }
        let mut line = format!(
            "colloc: {done}/{} done ({} not ok), {} running, {} queued, {:.0} s",
            s.runs,
            done - s.succeeded,
            ctl.running().count(),
            self.queue.len(),
            ctl.now()
        );
        for (u, v) in agg {
            line.push_str(&format!("; aggregate now {v:.1} {u}"));
        }
        outln!("{}", colloc_results::text::escape(&line));
    }

    /// A run's extra attempts and which failures they cover: its manifest's, else the
    /// flags'.
    fn retry_rule(&self, run: usize) -> (u32, RetryOn) {
        self.common.specs[run]
            .retry
            .with_flags(self.opts.retries, self.opts.retry_on)
    }

    fn retry(&self, e: &Ended) -> bool {
        let (retries, on) = self.retry_rule(e.job.run);
        let failed = match on {
            RetryOn::Oom => e.state == State::Failed && e.seen.oom,
            RetryOn::Any => matches!(e.state, State::Failed | State::TimedOut),
        };
        // Attempts lost to failed steps do not count against its retries.
        failed && self.attempts[e.job.run] - self.step_requeues[e.job.run] <= retries
    }
}

impl Driver for Pack<'_> {
    fn next_job(&mut self, slot: usize) -> Option<Job> {
        if !self.common.slot_open(slot) {
            return None;
        }
        let pos = self.pick(slot)?;
        let idx = self.queue.remove(pos)?;
        self.attempts[idx] += 1;
        let attempt = self.attempts[idx];
        let spec = &self.common.specs[idx];
        let log = self.log_for(&spec.name, attempt);
        let timeout = spec.timeout.or(self.opts.timeout);
        Some(self.common.job(idx, attempt, log, timeout))
    }

    fn slot_rank(&self, slot: usize) -> u64 {
        self.placer.as_ref().map_or(0, |p| p.rank(slot))
    }

    fn start_early(&mut self, v: &View<'_>, now: f64) -> bool {
        let Some(o) = &self.overlap else { return false };
        // Cheap refusals first: this is asked at every turn of the engine's loop.
        let producing = v.seen.series.stats.count > 0;
        if !producing || self.queue.is_empty() || !self.common.slot_open(v.slot) {
            return false;
        }
        let Some(next) = self.pick(v.slot).and_then(|p| self.queue.get(p).copied()) else {
            return false;
        };
        let ask = Ask {
            running: v.id,
            remaining_by_progress: v.seen.advance.remaining(now),
            producing,
            next_command: self.commands.get(next).copied().unwrap_or(0),
            next_declared: self.common.specs[next].gpu_memory,
            now,
        };
        let Some(e) = o.decide(&ask) else {
            return false;
        };
        log::info!(
            "slot {}: {} ends in about {:.1} s and a start-up takes about {:.1} s: its next run starts now",
            v.slot,
            v.job.label,
            e.ends_in,
            e.startup
        );
        true
    }

    fn started(&mut self, v: &View<'_>) {
        if let Some(p) = &mut self.placer {
            p.started(v.id, v.slot, self.common.specs[v.job.run].gpu_memory);
        }
        let early = self.overlap.as_mut().is_some_and(|o| {
            let c = self.commands.get(v.job.run).copied().unwrap_or(0);
            o.started(v.id, v.slot, c, v.start)
        });
        let log = format!("{LOGS_DIR}/{}.log", v.job.label);
        self.common.started(v, Kind::Run, &log, early);
    }

    fn ended(&mut self, mut e: Ended, ctl: &mut Ctl<'_>) {
        if let Some(p) = &mut self.placer {
            p.ended(e.id);
        }
        if let Some(o) = &mut self.overlap {
            let peak = e.gpu.as_ref().and_then(|g| g.peak_memory_bytes);
            o.ended(e.id, e.end, e.state == State::Succeeded, peak);
        }
        let facts = self.common.ended(&mut e, Kind::Run);
        let name = e.job.label.clone();
        if let Some(f) = &facts {
            self.common.node_health(f);
            let step_failed = f.failure.is_some()
                && !ctl.stopping()
                && !matches!(e.state, State::Interrupted | State::TimedOut);
            if step_failed && self.step_requeues[e.job.run] < MAX_STEP_REQUEUES {
                self.step_requeues[e.job.run] += 1;
                log::warn!(
                    "{name}: its step on {} failed ({}); it goes back to the queue for another slot",
                    f.node,
                    f.failure.as_deref().unwrap_or_default()
                );
                self.queue.push_front(e.job.run);
                self.common.rec.maybe_write();
                return;
            }
        }
        let spec = &self.common.specs[e.job.run];
        if spec.scanner.throughput.is_custom()
            && e.seen.series.stats.count == 0
            && e.state != State::Interrupted
        {
            self.unmatched_warned += 1;
            if self.unmatched_warned <= 5 {
                log::warn!(
                    "{name}: no line of its output matched {} ({} lines read); its throughput is unknown",
                    spec.scanner.throughput.describe(),
                    e.seen.lines
                );
            } else if self.unmatched_warned == 6 {
                log::warn!("more runs whose output matched no metric line (see the report)");
            }
        }
        if !ctl.stopping() && self.retry(&e) {
            let why = if e.seen.oom {
                "CUDA out of memory".to_string()
            } else {
                format!("{} ({})", e.state.as_str(), describe(&e.exit))
            };
            log::warn!(
                "{name}: {why}; retrying (attempt {} of {})",
                self.attempts[e.job.run] + 1,
                self.retry_rule(e.job.run).0 + 1
            );
            self.queue.push_back(e.job.run);
        } else {
            match e.state {
                State::Failed => log::warn!(
                    "{name}: failed ({}){}",
                    describe(&e.exit),
                    if e.seen.oom {
                        ", CUDA out of memory"
                    } else {
                        ""
                    }
                ),
                State::TimedOut => log::warn!("{name}: timed out"),
                s => log::info!("{name}: {}", s.as_str()),
            }
            // Done for good: its record holds its definition (a 100,000-run pack held
            // every one to its end).
            self.common.specs[e.job.run].let_go();
            if self.opts.fail_fast && matches!(e.state, State::Failed | State::TimedOut) {
                let reason = format!("--fail-fast: {name} {}", e.state.as_str());
                ctl.stop_all(&reason, libc::SIGTERM);
                self.common.stopping(&reason);
            }
        }
        self.common.rec.maybe_write();
    }

    fn tick(&mut self, ctl: &mut Ctl<'_>) {
        self.overlap_look(ctl);
        self.common.progress(ctl);
        self.common.rec.maybe_write();
        self.status_line(ctl);
    }

    fn signal(&mut self, sig: i32, to: &[(usize, u32)]) {
        self.common.signal(sig, to);
    }

    fn stopping(&mut self, reason: &str) {
        self.common.stopping(reason);
    }
}
