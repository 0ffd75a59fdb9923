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
//!   [`crate::engine::throughput`]: start-up and single samples count as none.
//! - **Speed-up**: the time the same attempts would take one after another, each at its
//!   run's solo throughput plus its own start-up (an attempt without samples: its whole
//!   wall time), over the makespan. Only runs with a solo figure of their own command count;
//!   when some runs have none, the speed-up covers the others and is a lower bound.
//! - **Energy across nodes**: where runs ran as Slurm steps, each step read its run's GPU;
//!   the readings of all runs on one GPU are put together and shared out by
//!   [`super::energy`].

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use colloc_core::telemetry::{AttemptGpu, GpuTotals};

use super::events::{
    Escaped, Event, Kind, MetricValue, Progress, RunIdentity, SlotRecord, StepInfo,
};
use super::model::{
    AttemptRecord, AttemptStep, CalibrationRecord, EpochRecord, FasterThanSolo, MetricRecord,
    NodeRecord, Report, RunRecord, SessionRecord, SignalRecord, Summary, ThroughputRecord,
    FASTER_THAN_SOLO, SCHEMA,
};
use crate::engine::steady::steady;
use crate::engine::throughput::{keep, Sample, Stats};
use crate::engine::State;

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
    gpu: Option<AttemptGpu>,
    escaped: Vec<Escaped>,
    lines: u64,
    step: Option<StepInfo>,
}

impl Att {
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
    id: RunIdentity,
    index: usize,
    attempts: Vec<Att>,
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
    runs: Vec<RunSt>,
    by_name: HashMap<String, usize>,
    calibrations: BTreeMap<String, Vec<Att>>,
    solos: HashMap<String, SoloFig>,
    signals: Vec<(f64, String, Vec<String>)>,
    gpus: BTreeMap<u32, Vec<GpuTotals>>,
    /// Nodes given no more runs: session, time, node, why.
    node_outs: Vec<(u32, f64, String, String)>,
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
        self.runs.iter().map(|r| r.id.clone()).collect()
    }

    /// Per run name: its attempts so far and whether its last one succeeded.
    pub fn attempts_of(&self, name: &str) -> (u32, bool) {
        match self.by_name.get(name).map(|&i| &self.runs[i]) {
            Some(r) => (
                r.attempts.iter().map(|a| a.attempt).max().unwrap_or(0),
                r.attempts
                    .last()
                    .is_some_and(|a| a.state == Some(State::Succeeded)),
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
                self.runs.push(RunSt {
                    id: RunIdentity {
                        name: name.to_string(),
                        command: Vec::new(),
                        env: Vec::new(),
                        workdir: None,
                        grid: None,
                        metrics: Vec::new(),
                        metric: None,
                        gpu_memory_mib: None,
                    },
                    index: i,
                    attempts: Vec::new(),
                });
                self.by_name.insert(name.to_string(), i);
                i
            }
        };
        &mut self.runs[i]
    }

    fn attempt_mut(&mut self, name: &str, kind: Kind, attempt: u32) -> Option<&mut Att> {
        match kind {
            Kind::Run => self.by_name.get(name).and_then(|&i| {
                self.runs[i]
                    .attempts
                    .iter_mut()
                    .rev()
                    .find(|a| a.attempt == attempt)
            }),
            Kind::Solo => self
                .calibrations
                .get_mut(name)
                .and_then(|v| v.iter_mut().rev().find(|a| a.attempt == attempt)),
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
            Event::Session {
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
            } => {
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
                for (index, id) in runs.into_iter().enumerate() {
                    let name = id.name.clone();
                    let r = self.run_mut(&name);
                    r.id = id;
                    r.index = index;
                }
                self.runs.sort_by_key(|r| r.index);
                self.by_name = self
                    .runs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.id.name.clone(), i))
                    .collect();
            }
            Event::Start {
                ts,
                run,
                kind,
                attempt,
                session,
                slot,
                device,
                node,
                log,
            } => {
                let a = Att {
                    attempt,
                    session,
                    slot,
                    device,
                    node,
                    log,
                    start: ts,
                    last_ts: ts,
                    ..Att::default()
                };
                match kind {
                    Kind::Run => self.run_mut(&run).attempts.push(a),
                    Kind::Solo => self.calibrations.entry(run).or_default().push(a),
                }
            }
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
            Event::End {
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
            } => {
                if let Some(a) = self.attempt_mut(&run, kind, attempt) {
                    a.progress(ts, progress);
                    a.end = Some(ts);
                    a.state = Some(state);
                    a.exit_code = exit_code;
                    a.signal = signal;
                    a.error = error;
                    a.escaped = escaped;
                    a.gpu = gpu;
                    a.step = step.map(|s| *s);
                }
            }
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
                self.solos.insert(
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

    /// The report at `now` (Unix seconds); `live`: the session still running, if any.
    pub fn report(&self, now: f64, live: Option<u32>) -> Report {
        let t0 = self
            .sessions
            .iter()
            .map(|s| s.start)
            .fold(f64::INFINITY, f64::min);
        let t0 = if t0.is_finite() { t0 } else { now };
        let latest = self.sessions.last().cloned().unwrap_or_default();
        let remote = self.remote_energy();
        let runs: Vec<RunRecord> = self
            .runs
            .iter()
            .map(|r| self.run_record(r, t0, now, live, &remote))
            .collect();
        let sessions: Vec<SessionRecord> = self
            .sessions
            .iter()
            .map(|s| self.session_record(s, now, live))
            .collect();
        let last_event = self.sessions.iter().map(|s| s.last).fold(t0, f64::max);
        let mut report = Report {
            schema: SCHEMA,
            colloc_version: latest.colloc_version.clone(),
            mode: latest.mode.clone(),
            source: latest.source.clone(),
            job_id: latest.job_id.clone(),
            slots: latest.slots.clone(),
            started: rfc3339(t0),
            ended: rfc3339(if live.is_some() { now } else { last_event }),
            running: live.is_some(),
            stopped_by: latest.stopped_by.clone(),
            interval_s: latest.interval_s,
            summary: Summary::default(),
            gpus: self.gpu_totals(&remote),
            signals: self
                .signals
                .iter()
                .map(|(ts, signal, runs)| SignalRecord {
                    time: rfc3339(*ts),
                    t_s: ts - t0,
                    signal: signal.clone(),
                    runs: runs.clone(),
                })
                .collect(),
            calibrations: self.calibration_records(now, t0),
            nodes: self.node_records(&latest, t0),
            runs,
            sessions,
        };
        report.summary = self.summary(&report, now, live);
        report
    }

    fn session_record(&self, s: &Sess, now: f64, live: Option<u32>) -> SessionRecord {
        let running = live == Some(s.session);
        let (makespan_s, max_concurrent) = self.session_span(s.session, now, live);
        SessionRecord {
            session: s.session,
            started: rfc3339(s.start),
            ended: (!running).then(|| rfc3339(s.last)),
            host: s.host.clone(),
            pid: s.pid,
            job_id: s.job_id.clone(),
            restart_count: s.restart_count,
            stopped_by: s.stopped_by.clone(),
            makespan_s,
            max_concurrent,
            running,
        }
    }

    /// End of an attempt: its end, or now while its session runs, or the last event of
    /// its session (colloc was alive, and the attempt running, until then).
    fn end_of(&self, a: &Att, now: f64, live: Option<u32>) -> f64 {
        match a.end {
            Some(e) => e,
            None if live == Some(a.session) => now,
            None => self
                .sessions
                .iter()
                .find(|s| s.session == a.session)
                .map_or(a.last_ts, |s| s.last.max(a.last_ts)),
        }
    }

    /// A session's makespan and most attempts at once.
    fn session_span(&self, session: u32, now: f64, live: Option<u32>) -> (f64, usize) {
        let iv: Vec<(f64, f64)> = self
            .runs
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|a| a.session == session)
            .map(|a| (a.start, self.end_of(a, now, live)))
            .collect();
        if iv.is_empty() {
            return (0.0, 0);
        }
        let first = iv.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        let last = iv.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let mut events: Vec<(f64, i32)> = Vec::new();
        for &(s, e) in &iv {
            events.push((s, 1));
            events.push((e, -1));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut cur, mut max) = (0i32, 0i32);
        for (_, d) in events {
            cur += d;
            max = max.max(cur);
        }
        ((last - first).max(0.0), max as usize)
    }

    fn attempt_record(
        &self,
        a: &Att,
        (kind, name): (Kind, &str),
        t0: f64,
        now: f64,
        live: Option<u32>,
        remote: &Remote,
    ) -> AttemptRecord {
        let mut gpu = a.gpu.clone();
        if let (Some(g), Some(share)) = (
            gpu.as_mut(),
            remote.shares.get(&(kind, name.to_string(), a.attempt)),
        ) {
            g.energy_j = Some(*share);
        }
        let end = self.end_of(a, now, live);
        let (state, error) = match (a.state, a.end) {
            (Some(s), _) => (s, a.error.clone()),
            (None, _) if live == Some(a.session) => (State::Running, None),
            (None, _) => (
                State::Interrupted,
                Some(
                    "colloc ended before it recorded this attempt's end (killed?); it counts as interrupted"
                        .into(),
                ),
            ),
        };
        AttemptRecord {
            attempt: a.attempt,
            session: a.session,
            state,
            exit_code: a.exit_code,
            signal: a.signal,
            error,
            start: rfc3339(a.start),
            end: a.end.map(rfc3339),
            start_s: a.start - t0,
            end_s: a.end.map(|e| e - t0),
            wall_s: (end - a.start).max(0.0),
            slot: a.slot,
            device: a.device.clone(),
            node: a.node.clone(),
            log: a.log.clone(),
            oom: a.oom,
            throughput: a
                .unit
                .as_ref()
                .and_then(|u| throughput(u, &a.stats, Vec::new())),
            gpu,
            escaped: a.escaped.clone(),
            step: a.step.as_ref().map(|s| AttemptStep {
                id: s.id.clone(),
                dispatch_s: s.dispatch_s,
                failed: s.failed.clone(),
            }),
            startup_s: a.stats.first_t.map(|f| (f - a.start).max(0.0)),
        }
    }

    fn run_record(
        &self,
        r: &RunSt,
        t0: f64,
        now: f64,
        live: Option<u32>,
        remote: &Remote,
    ) -> RunRecord {
        let attempts: Vec<AttemptRecord> = r
            .attempts
            .iter()
            .map(|a| self.attempt_record(a, (Kind::Run, &r.id.name), t0, now, live, remote))
            .collect();
        let mut attempts = attempts;
        // Earlier attempts' logs are kept as NAME.K.log when the next one starts.
        let n = attempts.len();
        for a in attempts.iter_mut().take(n.saturating_sub(1)) {
            if let Some(stem) = a.log.strip_suffix(".log") {
                a.log = format!("{stem}.{}.log", a.attempt);
            }
        }
        let last = attempts.last();
        let unit = r.attempts.iter().find_map(|a| a.unit.clone());
        let tp = unit.as_ref().and_then(|u| {
            let same: Vec<&Att> = r
                .attempts
                .iter()
                .filter(|a| a.unit.as_deref() == Some(u.as_str()))
                .collect();
            let mut samples = Vec::new();
            for a in &same {
                for &(t, v) in &a.samples {
                    keep(&mut samples, (t - t0, v));
                }
            }
            combined(u, &same, samples)
        });
        let mut metrics: BTreeMap<String, MetricRecord> = BTreeMap::new();
        for (name, best) in &r.id.metrics {
            let mut m = MetricRecord {
                last: None,
                best: None,
                best_is: *best,
                count: 0,
            };
            for a in &r.attempts {
                if let Some(v) = a.metrics.get(name) {
                    if v.last.is_some() {
                        m.last = v.last;
                    }
                    if let Some(b) = v.best {
                        m.best = Some(m.best.map_or(b, |x| best.better(x, b)));
                    }
                    m.count += v.count;
                }
            }
            metrics.insert(name.clone(), m);
        }
        let ended_any = r.attempts.iter().any(|a| a.end.is_some());
        let count: u64 = r.attempts.iter().map(|a| a.stats.count).sum();
        RunRecord {
            name: r.id.name.clone(),
            index: r.index,
            command: r.id.command.clone(),
            env: r.id.env.iter().cloned().collect(),
            workdir: r.id.workdir.clone(),
            grid: r.id.grid.clone(),
            state: last.map_or(State::NotStarted, |a| a.state),
            exit_code: last.and_then(|a| a.exit_code),
            signal: last.and_then(|a| a.signal),
            error: last.and_then(|a| a.error.clone()),
            start: attempts.first().map(|a| a.start.clone()),
            end: last.and_then(|a| a.end.clone()),
            start_s: attempts.first().map(|a| a.start_s),
            end_s: last.and_then(|a| a.end_s),
            wall_s: (!attempts.is_empty()).then(|| attempts.iter().map(|a| a.wall_s).sum()),
            slot: last.map(|a| a.slot),
            device: last.and_then(|a| a.device.clone()),
            node: last
                .filter(|a| a.step.is_some())
                .and_then(|a| a.node.clone()),
            gpu_memory_mib: r.id.gpu_memory_mib,
            slot_memory_mib: r.attempts.last().and_then(|a| {
                self.sessions
                    .iter()
                    .find(|s| s.session == a.session)
                    .and_then(|s| s.slots.iter().find(|x| x.index == a.slot))
                    .and_then(|x| x.memory_mib)
            }),
            oom: attempts.iter().any(|a| a.oom),
            log: last.map(|a| a.log.clone()),
            throughput: tp,
            throughput_unmatched: r.id.metric.is_some() && ended_any && count == 0,
            metrics,
            epochs: r
                .attempts
                .iter()
                .flat_map(|a| {
                    a.epochs.iter().map(|&(epoch, seconds)| EpochRecord {
                        epoch,
                        seconds,
                        attempt: a.attempt,
                    })
                })
                .collect(),
            gpu: combine_gpu(&attempts),
            startup_s: attempts.iter().rev().find_map(|a| a.startup_s),
            solo_throughput: self
                .solos
                .get(&r.id.solo_key())
                .filter(|s| unit.as_deref().is_none_or(|u| u == s.unit))
                .map(|s| s.throughput),
            escaped: attempts.iter().flat_map(|a| a.escaped.clone()).collect(),
            attempts,
        }
    }

    fn calibration_records(&self, now: f64, t0: f64) -> Vec<CalibrationRecord> {
        self.calibrations
            .iter()
            .filter_map(|(name, atts)| {
                let a = atts.last()?;
                let id = self.by_name.get(name).map(|&i| &self.runs[i].id);
                let key = id.map(RunIdentity::solo_key);
                let fig = key.as_ref().and_then(|k| self.solos.get(k));
                Some(CalibrationRecord {
                    name: name.clone(),
                    command: id.map(|i| i.command.clone()).unwrap_or_default(),
                    state: a.state.unwrap_or(State::Interrupted),
                    start_s: a.start - t0,
                    slot: a.slot,
                    wall_s: (a.end.unwrap_or(now.min(a.last_ts.max(a.start))) - a.start).max(0.0),
                    throughput: fig.map(|f| f.throughput),
                    unit: fig.map(|f| f.unit.clone()).or_else(|| a.unit.clone()),
                    runs: key
                        .map(|k| {
                            self.runs
                                .iter()
                                .filter(|r| r.id.solo_key() == k)
                                .map(|r| r.id.name.clone())
                                .collect()
                        })
                        .unwrap_or_default(),
                    log: a.log.clone(),
                })
            })
            .collect()
    }

    /// The energy of runs that ran as Slurm steps: per session and GPU, every reading of
    /// the GPU's counter by any of its runs' steps, shared out among those runs.
    fn remote_energy(&self) -> Remote {
        // (session, GPU uuid) -> the GPU, its readings, and its runs' spans.
        let mut by_gpu: BTreeMap<(u32, String), GpuAcc> = BTreeMap::new();
        let mut util: BTreeMap<(u32, String), (f64, u64)> = BTreeMap::new();
        let all = self
            .runs
            .iter()
            .flat_map(|r| r.attempts.iter().map(move |a| (Kind::Run, &r.id.name, a)))
            .chain(
                self.calibrations
                    .iter()
                    .flat_map(|(n, v)| v.iter().map(move |a| (Kind::Solo, n, a))),
            );
        for (kind, name, a) in all {
            let Some(step) = &a.step else { continue };
            let Some(gpu) = &step.gpu else { continue };
            let key = (a.session, gpu.uuid.clone());
            let e = by_gpu.entry(key.clone()).or_insert_with(|| {
                (
                    GpuTotals {
                        id: gpu.clone(),
                        ..GpuTotals::default()
                    },
                    Vec::new(),
                    Vec::new(),
                )
            });
            for &(t, mj, u, used) in &step.readings {
                e.1.push((t, mj));
                if let Some(u) = u {
                    let acc = util.entry(key.clone()).or_default();
                    acc.0 += f64::from(u);
                    acc.1 += 1;
                }
                if let Some(b) = used {
                    e.0.peak_used_bytes = Some(e.0.peak_used_bytes.unwrap_or(0).max(b));
                }
            }
            let (s, end) = step.span.unwrap_or((a.start, a.end.unwrap_or(a.last_ts)));
            e.2.push(((kind, name.clone(), a.attempt), s, end));
        }
        let mut out = Remote::default();
        for (key, (mut totals, readings, spans)) in by_gpu {
            let iv: Vec<(f64, f64)> = spans.iter().map(|(_, s, e)| (*s, *e)).collect();
            if let Some(sp) = colloc_core::energy::split(&readings, &iv) {
                for ((k, _, _), share) in spans.into_iter().zip(sp.shares) {
                    out.shares.insert(k, share);
                }
                totals.energy_j = Some(sp.total_j);
                totals.runs_energy_j = Some(sp.runs_j);
                totals.idle_energy_j = Some(sp.idle_j);
            }
            totals.mean_util_percent = util.get(&key).filter(|u| u.1 > 0).map(|u| u.0 / u.1 as f64);
            out.totals.push(totals);
        }
        out
    }

    /// The nodes of a pack across nodes: their slots in the latest session, what ran
    /// there, and those given no more runs.
    fn node_records(&self, latest: &Sess, t0: f64) -> Vec<NodeRecord> {
        let mut names: Vec<String> = Vec::new();
        for s in self.sessions.iter().filter(|s| s.steps) {
            for slot in &s.slots {
                if let Some(n) = &slot.node {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                }
            }
        }
        names
            .into_iter()
            .map(|name| {
                let atts: Vec<&Att> = self
                    .runs
                    .iter()
                    .flat_map(|r| &r.attempts)
                    .filter(|a| a.step.is_some() && a.node.as_deref() == Some(name.as_str()))
                    .collect();
                let out = self
                    .node_outs
                    .iter()
                    .rev()
                    .find(|o| o.2 == name && o.0 == latest.session);
                NodeRecord {
                    slots: latest
                        .slots
                        .iter()
                        .filter(|s| s.node.as_deref() == Some(name.as_str()))
                        .map(|s| s.index)
                        .collect(),
                    attempts: atts.len(),
                    succeeded: atts
                        .iter()
                        .filter(|a| a.state == Some(State::Succeeded))
                        .count(),
                    step_failures: atts
                        .iter()
                        .filter(|a| a.step.as_ref().is_some_and(|s| s.failed.is_some()))
                        .count(),
                    out: out.map(|o| o.3.clone()),
                    out_s: out.map(|o| o.1 - t0),
                    name,
                }
            })
            .collect()
    }

    fn gpu_totals(&self, remote: &Remote) -> Option<Vec<GpuTotals>> {
        if self.gpus.is_empty() && remote.totals.is_empty() {
            return None;
        }
        let mut out: Vec<GpuTotals> = Vec::new();
        let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        for g in self.gpus.values().flatten().chain(&remote.totals) {
            match out.iter_mut().find(|o| o.id.uuid == g.id.uuid) {
                Some(o) => {
                    let (wa, wb) = (o.energy_j.unwrap_or(0.0), g.energy_j.unwrap_or(0.0));
                    o.mean_util_percent = match (o.mean_util_percent, g.mean_util_percent) {
                        (Some(a), Some(b)) if wa + wb > 0.0 => Some((a * wa + b * wb) / (wa + wb)),
                        (a, b) => a.or(b),
                    };
                    o.energy_j = add(o.energy_j, g.energy_j);
                    o.runs_energy_j = add(o.runs_energy_j, g.runs_energy_j);
                    o.idle_energy_j = add(o.idle_energy_j, g.idle_energy_j);
                    o.peak_used_bytes = o.peak_used_bytes.max(g.peak_used_bytes);
                }
                None => out.push(g.clone()),
            }
        }
        Some(out)
    }

    fn summary(&self, rep: &Report, now: f64, live: Option<u32>) -> Summary {
        let count = |s: State| rep.runs.iter().filter(|r| r.state == s).count();
        let makespan_s: f64 = self
            .sessions
            .iter()
            .map(|s| self.session_span(s.session, now, live).0)
            .sum();
        let mut sum = Summary {
            runs: rep.runs.len(),
            succeeded: count(State::Succeeded),
            failed: count(State::Failed),
            timed_out: count(State::TimedOut),
            interrupted: count(State::Interrupted),
            not_started: count(State::NotStarted),
            running: count(State::Running),
            attempts: rep.runs.iter().map(|r| r.attempts.len()).sum(),
            oom_attempts: rep
                .runs
                .iter()
                .flat_map(|r| &r.attempts)
                .filter(|a| a.oom)
                .count(),
            max_concurrent: rep
                .sessions
                .iter()
                .map(|s| s.max_concurrent)
                .max()
                .unwrap_or(0),
            makespan_s,
            step_failures: rep
                .runs
                .iter()
                .flat_map(|r| &r.attempts)
                .filter(|a| a.step.as_ref().is_some_and(|s| s.failed.is_some()))
                .count(),
            median_dispatch_s: median(
                rep.runs
                    .iter()
                    .flat_map(|r| &r.attempts)
                    .filter_map(|a| a.step.as_ref().and_then(|s| s.dispatch_s))
                    .collect(),
            ),
            ..Summary::default()
        };
        if let Some(gpus) = &rep.gpus {
            let total = |f: fn(&GpuTotals) -> Option<f64>| {
                let v: Vec<f64> = gpus.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            };
            sum.energy_j = total(|g| g.energy_j);
            sum.runs_energy_j = total(|g| g.runs_energy_j);
            sum.idle_energy_j = total(|g| g.idle_energy_j);
        }
        // The most common unit among runs with throughput is the pack's unit.
        let mut units: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &rep.runs {
            if let Some(t) = &r.throughput {
                *units.entry(t.unit.as_str()).or_default() += 1;
            }
        }
        let Some(unit) = units
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(u, _)| u.to_string())
        else {
            return sum;
        };
        let work: f64 = self
            .runs
            .iter()
            .flat_map(|r| &r.attempts)
            .filter(|a| a.unit.as_deref() == Some(unit.as_str()))
            .map(|a| a.stats.work)
            .sum();
        if makespan_s > 0.0 {
            sum.aggregate_throughput = Some(work / makespan_s);
        }
        self.steady_into(&mut sum, &unit);
        // One after another: each covered attempt's work at its run's solo rate, plus its
        // start-up (the time before its first sample, or all of it without samples).
        let mut seq = 0.0;
        let mut covered = 0;
        let mut ran = 0;
        let mut sources: Vec<String> = Vec::new();
        // `rep.runs` is made from `self.runs`, in order.
        for (r, rec) in self.runs.iter().zip(&rep.runs) {
            if r.attempts.is_empty() {
                continue;
            }
            ran += 1;
            let solo = self
                .solos
                .get(&r.id.solo_key())
                .filter(|s| s.unit == unit && s.throughput > 0.0);
            let in_unit = r
                .attempts
                .iter()
                .any(|a| a.unit.as_deref() == Some(unit.as_str()));
            let Some(solo) = solo.filter(|_| in_unit) else {
                continue;
            };
            covered += 1;
            if !sources.contains(&solo.source) {
                sources.push(solo.source.clone());
            }
            // Its throughput packed: work over sampled time of its attempts in this unit.
            if let Some(t) = rec.throughput.as_ref().filter(|t| {
                t.unit == unit
                    && t.count >= 2
                    && t.sampled_s > 0.0
                    && t.mean > solo.throughput * FASTER_THAN_SOLO
            }) {
                sum.faster_than_solo.push(FasterThanSolo {
                    run: rec.name.clone(),
                    throughput: t.mean,
                    solo: solo.throughput,
                });
            }
            for a in &r.attempts {
                let end = self.end_of(a, now, live);
                let wall = (end - a.start).max(0.0);
                if a.unit.as_deref() == Some(unit.as_str()) && a.stats.count > 0 {
                    let startup = a.stats.first_t.map_or(wall, |f| (f - a.start).max(0.0));
                    seq += a.stats.work / solo.throughput + startup;
                } else {
                    seq += wall;
                }
            }
        }
        if covered > 0 && makespan_s > 0.0 && seq > 0.0 {
            sum.sequential_s = Some(seq);
            sum.speedup = Some(seq / makespan_s);
            sum.speedup_runs = Some(covered);
            sum.speedup_of = Some(ran);
            sum.solo_source = Some(sources.join("; "));
        }
        sum.throughput_unit = Some(unit);
        sum
    }
}

impl Fold {
    /// The steady aggregate over all sessions: each session's periods with every slot
    /// producing, their work summed over their time summed.
    fn steady_into(&self, sum: &mut Summary, unit: &str) {
        let (mut work, mut seconds) = (0.0, 0.0);
        for s in &self.sessions {
            let series: Vec<Vec<Sample>> = self
                .runs
                .iter()
                .flat_map(|r| &r.attempts)
                .filter(|a| a.session == s.session && a.unit.as_deref() == Some(unit))
                .map(|a| {
                    a.samples
                        .iter()
                        .map(|&(t, rate)| Sample { t, rate })
                        .collect()
                })
                .collect();
            let refs: Vec<&[Sample]> = series.iter().map(Vec::as_slice).collect();
            if let Some(st) = steady(&refs, s.slots.len()) {
                work += st.throughput * st.seconds;
                seconds += st.seconds;
            }
        }
        if seconds > 0.0 {
            sum.steady_throughput = Some(work / seconds);
            sum.steady_s = Some(seconds);
        }
    }
}

/// The median of some figures (the one rule, in core).
fn median(v: Vec<f64>) -> Option<f64> {
    colloc_core::num::median(&v)
}

/// A run's throughput over its attempts: their work over their summed sampled time.
fn combined(unit: &str, atts: &[&Att], samples: Vec<(f64, f64)>) -> Option<ThroughputRecord> {
    let with: Vec<&Stats> = atts
        .iter()
        .map(|a| &a.stats)
        .filter(|s| s.count > 0)
        .collect();
    let last = with.last()?;
    let count: u64 = with.iter().map(|s| s.count).sum();
    let work: f64 = with.iter().map(|s| s.work).sum();
    let span: f64 = with.iter().map(|s| s.span()).sum();
    let mean = if count >= 2 && span > 0.0 {
        work / span
    } else {
        last.last?
    };
    Some(ThroughputRecord {
        unit: unit.to_string(),
        mean,
        last: last.last,
        max: with.iter().filter_map(|s| s.max).reduce(f64::max),
        count,
        work,
        sampled_s: span,
        samples,
    })
}

fn throughput(unit: &str, s: &Stats, samples: Vec<(f64, f64)>) -> Option<ThroughputRecord> {
    let mean = s.rate()?;
    Some(ThroughputRecord {
        unit: unit.to_string(),
        mean,
        last: s.last,
        max: s.max,
        count: s.count,
        work: s.work,
        sampled_s: s.span(),
        samples,
    })
}

/// A run's GPU figures over its attempts: peak memory, energy summed, utilization
/// weighted by wall time.
fn combine_gpu(attempts: &[AttemptRecord]) -> Option<AttemptGpu> {
    let with: Vec<(&AttemptGpu, f64)> = attempts
        .iter()
        .filter_map(|a| a.gpu.as_ref().map(|g| (g, a.wall_s)))
        .collect();
    if with.is_empty() {
        return None;
    }
    let wmean = |f: fn(&AttemptGpu) -> Option<f64>| {
        let v: Vec<(f64, f64)> = with
            .iter()
            .filter_map(|(g, w)| f(g).map(|x| (x, *w)))
            .collect();
        let tw: f64 = v.iter().map(|x| x.1).sum();
        if v.is_empty() {
            None
        } else if tw > 0.0 {
            Some(v.iter().map(|(x, w)| x * w).sum::<f64>() / tw)
        } else {
            Some(v.iter().map(|x| x.0).sum::<f64>() / v.len() as f64)
        }
    };
    let energies: Vec<f64> = with.iter().filter_map(|(g, _)| g.energy_j).collect();
    Some(AttemptGpu {
        peak_memory_bytes: with.iter().filter_map(|(g, _)| g.peak_memory_bytes).max(),
        mean_util_percent: wmean(|g| g.mean_util_percent),
        mean_gpu_util_percent: wmean(|g| g.mean_gpu_util_percent),
        energy_j: (!energies.is_empty()).then(|| energies.iter().sum()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::scan::Best;

    fn id(name: &str, cmd: &str) -> RunIdentity {
        RunIdentity {
            name: name.into(),
            command: vec![cmd.into()],
            env: vec![],
            workdir: None,
            grid: None,
            metrics: vec![("loss".into(), Best::Min)],
            metric: None,
            gpu_memory_mib: None,
        }
    }

    fn session(n: u32, ts: f64, runs: Vec<RunIdentity>) -> Event {
        Event::Session {
            ts,
            version: 1,
            session: n,
            colloc_version: "t".into(),
            host: "h".into(),
            pid: 1,
            job_id: None,
            restart_count: None,
            mode: "naive".into(),
            source: "plain".into(),
            steps: false,
            slots: vec![],
            interval_s: 1.0,
            runs,
        }
    }

    fn start(run: &str, attempt: u32, session: u32, ts: f64) -> Event {
        Event::Start {
            ts,
            run: run.into(),
            kind: Kind::Run,
            attempt,
            session,
            slot: 0,
            device: None,
            node: None,
            log: format!("logs/{run}.log"),
        }
    }

    /// Samples every second from `from` to `to` at `rate`, as a progress body.
    fn samples(from: f64, to: f64, rate: f64) -> Progress {
        let mut stats = Stats::default();
        let mut s = Vec::new();
        let mut t = from;
        while t <= to + 1e-9 {
            stats.push(t, rate);
            s.push((t, rate));
            t += 1.0;
        }
        Progress {
            unit: Some("img/s".into()),
            samples: s,
            stats,
            ..Progress::default()
        }
    }

    fn end(run: &str, attempt: u32, ts: f64, state: State, p: Progress) -> Event {
        Event::End {
            ts,
            run: run.into(),
            kind: Kind::Run,
            attempt,
            state,
            exit_code: Some(if state == State::Succeeded { 0 } else { 1 }),
            signal: None,
            error: None,
            pid: None,
            escaped: vec![],
            gpu: None,
            step: None,
            progress: p,
        }
    }

    fn solo(key: &str, v: f64) -> Event {
        Event::Solo {
            ts: 0.0,
            key: key.into(),
            run: "x".into(),
            throughput: v,
            unit: "img/s".into(),
            source: "test".into(),
        }
    }

    #[test]
    fn runs_across_nodes_energy_nodes_and_failed_steps() {
        use colloc_core::telemetry::GpuId;
        let mut f = Fold::new();
        let (a, b) = (id("a", "x"), id("b", "y"));
        let mut s = session(1, 0.0, vec![a, b]);
        if let Event::Session { steps, slots, .. } = &mut s {
            *steps = true;
            *slots = (0..4)
                .map(|i| SlotRecord {
                    index: i,
                    device: Some(format!("MIG-{i}")),
                    node: Some(if i < 2 { "n1" } else { "n2" }.into()),
                    memory_mib: None,
                })
                .collect();
        }
        f.apply(s);
        let gpu = GpuId {
            index: 0,
            uuid: "GPU-n2".into(),
            name: "A100".into(),
        };
        let on = |run: &str, attempt: u32, slot: usize, node: &str, ts: f64| Event::Start {
            ts,
            run: run.into(),
            kind: Kind::Run,
            attempt,
            session: 1,
            slot,
            device: Some(format!("MIG-{slot}")),
            node: Some(node.into()),
            log: format!("logs/{run}.log"),
        };
        // a's first attempt on n1: its step failed (the node went away).
        f.apply(on("a", 1, 0, "n1", 0.0));
        let mut e = end("a", 1, 2.0, State::Failed, Progress::default());
        if let Event::End { step, .. } = &mut e {
            *step = Some(Box::new(StepInfo {
                id: Some("7.1".into()),
                dispatch_s: Some(0.2),
                failed: Some("srun: error: Node failure on n1".into()),
                ..StepInfo::default()
            }));
        }
        f.apply(e);
        f.apply(Event::NodeOut {
            ts: 2.0,
            node: "n1".into(),
            reason: "it left the job".into(),
        });
        // a again and b, side by side on n2's one GPU, 10..20 and 10..30; the two steps
        // read the GPU's counter: 100 W all along (100,000 mJ a second).
        let reading = |t: f64| (t, (t * 100_000.0) as u64, Some(50), Some(1 << 30));
        for (run, att, slot, from, to, disp) in
            [("a", 2, 2, 10.0, 20.0, 0.1), ("b", 1, 3, 10.0, 30.0, 0.3)]
        {
            f.apply(on(run, att, slot, "n2", from));
            let mut e = end(run, att, to, State::Succeeded, Progress::default());
            if let Event::End { step, gpu: g, .. } = &mut e {
                *g = Some(AttemptGpu::default());
                *step = Some(Box::new(StepInfo {
                    id: Some(format!("7.{slot}")),
                    dispatch_s: Some(disp),
                    failed: None,
                    span: Some((from, to)),
                    gpu: Some(gpu.clone()),
                    readings: (from as i64..=to as i64)
                        .map(|t| reading(t as f64))
                        .collect(),
                }));
            }
            f.apply(e);
        }
        let r = f.report(40.0, None);
        // 10..20 shared by two runs (500 J each), 20..30 b alone (1 kJ).
        let ea = r.runs[0].gpu.as_ref().unwrap().energy_j.unwrap();
        let eb = r.runs[1].gpu.as_ref().unwrap().energy_j.unwrap();
        assert!((ea - 500.0).abs() < 1e-6, "{ea}");
        assert!((eb - 1500.0).abs() < 1e-6, "{eb}");
        let g = &r.gpus.as_ref().unwrap()[0];
        assert_eq!(g.id.uuid, "GPU-n2");
        assert!((g.energy_j.unwrap() - 2000.0).abs() < 1e-6);
        assert_eq!(g.mean_util_percent, Some(50.0));
        assert_eq!(g.peak_used_bytes, Some(1 << 30));
        assert!((g.idle_energy_j.unwrap()).abs() < 1e-6);
        assert_eq!(r.runs[0].node.as_deref(), Some("n2"));
        assert_eq!(r.runs[0].attempts.len(), 2);
        assert_eq!(r.summary.step_failures, 1);
        // Median of 0.2, 0.1, 0.3.
        assert_eq!(r.summary.median_dispatch_s, Some(0.2));
        assert_eq!(r.nodes.len(), 2);
        let (n1, n2) = (&r.nodes[0], &r.nodes[1]);
        assert_eq!((n1.name.as_str(), n1.slots.clone()), ("n1", vec![0, 1]));
        assert_eq!((n1.attempts, n1.succeeded, n1.step_failures), (1, 0, 1));
        assert_eq!(n1.out.as_deref(), Some("it left the job"));
        assert_eq!(n1.out_s, Some(2.0));
        assert_eq!((n2.attempts, n2.succeeded, n2.out.clone()), (2, 2, None));
        let t = crate::export::runs::table(&r);
        assert!(
            t.contains("node n1: 2 slots, 1 attempts (0 succeeded, 1 steps failed); given no more runs after 2 s: it left the job"),
            "{t}"
        );
        assert!(
            t.contains("node n2: 2 slots, 2 attempts (2 succeeded)"),
            "{t}"
        );
        assert!(t.contains("1 step(s) failed (not their runs)"), "{t}");
        assert!(t.contains("median start of a run's step: 0.20 s"), "{t}");
        let csv = String::from_utf8(crate::export::runs::csv(&r).unwrap()).unwrap();
        assert!(
            csv.lines().next().unwrap().contains(",slot,device,node,"),
            "{csv}"
        );
        assert!(csv.contains(",2,MIG-2,n2,"), "{csv}");
    }

    #[test]
    fn single_sample_runs_add_no_work_and_retries_count_in_time() {
        let mut f = Fold::new();
        let (a, b) = (id("a", "x"), id("b", "y"));
        f.apply(session(1, 100.0, vec![a.clone(), b.clone()]));
        // a: OOM at once (one sample of 11,000), then a retry 1..11 s at 100/s
        f.apply(start("a", 1, 1, 100.0));
        let mut one = samples(100.5, 100.5, 11_000.0);
        one.oom = true;
        f.apply(end("a", 1, 100.7, State::Failed, one));
        f.apply(start("a", 2, 1, 101.0));
        f.apply(end(
            "a",
            2,
            111.0,
            State::Succeeded,
            samples(101.0, 111.0, 100.0),
        ));
        // b: never started
        let r = f.report(200.0, None);
        let ra = &r.runs[0];
        assert_eq!(ra.attempts.len(), 2);
        assert!(ra.oom);
        assert!((ra.wall_s.unwrap() - 10.7).abs() < 1e-9, "{:?}", ra.wall_s);
        assert_eq!(r.summary.makespan_s, 11.0);
        // 1,000 images over 11 s; the single sample of 11,000/s adds nothing
        let agg = r.summary.aggregate_throughput.unwrap();
        assert!((agg - 1000.0 / 11.0).abs() < 1e-9, "{agg}");
        assert_eq!(r.runs[1].state, State::NotStarted);
        assert_eq!(r.summary.oom_attempts, 1);
        assert_eq!(r.summary.attempts, 2);
    }

    #[test]
    fn speedup_uses_each_runs_own_solo_figure_and_says_what_it_covers() {
        let mut f = Fold::new();
        let (a, b, c) = (id("a", "bs32"), id("b", "bs64"), id("c", "bs128"));
        f.apply(session(1, 0.0, vec![a.clone(), b.clone(), c.clone()]));
        for (n, rate) in [("a", 60.0), ("b", 30.0), ("c", 10.0)] {
            f.apply(start(n, 1, 1, 0.0));
            f.apply(end(n, 1, 10.0, State::Succeeded, samples(0.0, 10.0, rate)));
        }
        // alone a does 100/s, b 50/s; c has no solo figure
        f.apply(solo(&a.solo_key(), 100.0));
        f.apply(solo(&b.solo_key(), 50.0));
        let r = f.report(20.0, None);
        assert_eq!(r.runs[0].solo_throughput, Some(100.0));
        assert_eq!(r.runs[1].solo_throughput, Some(50.0));
        assert_eq!(r.runs[2].solo_throughput, None);
        let s = &r.summary;
        // a: 600 images at 100/s = 6 s; b: 300 at 50/s = 6 s; over a 10 s makespan
        assert_eq!(s.sequential_s, Some(12.0));
        assert!((s.speedup.unwrap() - 1.2).abs() < 1e-9);
        assert_eq!((s.speedup_runs, s.speedup_of), (Some(2), Some(3)));
    }

    #[test]
    fn an_attempt_without_an_end_is_running_or_interrupted() {
        let mut f = Fold::new();
        f.apply(session(1, 0.0, vec![id("a", "x")]));
        f.apply(start("a", 1, 1, 1.0));
        f.apply(Event::Progress {
            ts: 5.0,
            run: "a".into(),
            kind: Kind::Run,
            attempt: 1,
            progress: samples(2.0, 5.0, 10.0),
        });
        let live = f.report(6.0, Some(1));
        assert_eq!(live.runs[0].state, State::Running);
        assert!(live.running);
        let dead = f.report(60.0, None);
        assert_eq!(dead.runs[0].state, State::Interrupted);
        assert!(dead.runs[0].attempts[0]
            .error
            .as_deref()
            .unwrap()
            .contains("killed"));
        assert_eq!(dead.runs[0].wall_s, Some(4.0));
        assert!((dead.runs[0].throughput.as_ref().unwrap().work - 30.0).abs() < 1e-9);
    }

    #[test]
    fn sessions_add_up_and_later_attempts_keep_the_earlier() {
        let mut f = Fold::new();
        f.apply(session(1, 0.0, vec![id("a", "x"), id("b", "x")]));
        f.apply(start("a", 1, 1, 0.0));
        f.apply(end(
            "a",
            1,
            10.0,
            State::Succeeded,
            samples(0.0, 10.0, 10.0),
        ));
        f.apply(start("b", 1, 1, 0.0));
        // colloc killed at 5 s; the job is requeued and resumes an hour later
        f.apply(session(2, 3600.0, vec![id("a", "x"), id("b", "x")]));
        f.apply(start("b", 2, 2, 3600.0));
        f.apply(end(
            "b",
            2,
            3608.0,
            State::Succeeded,
            samples(3600.0, 3608.0, 10.0),
        ));
        let r = f.report(4000.0, None);
        assert_eq!(r.sessions.len(), 2);
        let b = &r.runs[1];
        assert_eq!(b.attempts.len(), 2);
        assert_eq!(b.attempts[0].state, State::Interrupted);
        assert_eq!(b.state, State::Succeeded);
        // the hour in the queue is not makespan
        assert_eq!(r.summary.makespan_s, 10.0 + 8.0);
        assert_eq!(f.attempts_of("b"), (2, true));
    }

    #[test]
    fn user_metrics_keep_the_last_value_and_the_best() {
        let mut f = Fold::new();
        f.apply(session(1, 0.0, vec![id("a", "x")]));
        f.apply(start("a", 1, 1, 0.0));
        let mut p = Progress::default();
        p.metrics.insert(
            "loss".into(),
            MetricValue {
                last: Some(0.5),
                best: Some(0.2),
                count: 3,
            },
        );
        f.apply(end("a", 1, 1.0, State::Failed, p));
        f.apply(start("a", 2, 1, 2.0));
        let mut p = Progress::default();
        p.metrics.insert(
            "loss".into(),
            MetricValue {
                last: Some(0.3),
                best: Some(0.3),
                count: 1,
            },
        );
        f.apply(end("a", 2, 3.0, State::Succeeded, p));
        let m = &f.report(4.0, None).runs[0].metrics["loss"];
        assert_eq!((m.last, m.best, m.count), (Some(0.3), Some(0.2), 4));
    }
}
