//! [`Fold::report`]: every record of the report (sessions, attempts, runs,
//! calibrations, nodes, GPUs) computed from the folded events.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::telemetry::{AttemptGpu, GpuTotals};

use super::tally::Tally;
use super::{rfc3339, Att, Fold, GpuAcc, Remote, RunSt, Sess};
use crate::record::events::{Kind, RunIdentity};
use crate::record::model::{
    AttemptRecord, AttemptStep, CalibrationRecord, Definition, EpochRecord, MetricRecord,
    NodeRecord, Report, RunRecord, SessionRecord, SignalRecord, Summary, ThroughputRecord, SCHEMA,
};
use crate::record::State;
use crate::rules::throughput::{keep, Stats};

/// A report made as it is written ([`Fold::streamed`]): every part but its runs, made
/// once; its runs made one at a time, in the report's order, each time they are asked
/// for.
pub struct Streamed<'a> {
    head: Report<()>,
    fold: &'a Fold,
    /// `t0`, `now` and `live` of the report.
    at: (f64, f64, Option<u32>),
    remote: Remote,
    grid: Vec<String>,
    metrics: Vec<String>,
}

impl Streamed<'_> {
    /// Every part of the report but its runs.
    pub fn head(&self) -> &Report<()> {
        &self.head
    }

    /// The runs' records in the report's order: the manifest's, then those removed from
    /// it.
    pub fn runs(&self) -> impl Iterator<Item = RunRecord> + '_ {
        let f = self.fold;
        let (t0, now, live) = self.at;
        let current = f.runs.iter().filter(|r| !f.removed(r));
        let removed = f.runs.iter().filter(|r| f.removed(r));
        current
            .chain(removed)
            .map(move |r| f.run_record(r, t0, now, live, &self.remote))
    }

    /// The grid keys and metric names of all runs, sorted (the CSV's columns).
    pub fn columns(&self) -> (&[String], &[String]) {
        (&self.grid, &self.metrics)
    }
}

impl Fold {
    /// The report at `now` (Unix seconds); `live`: the session still running, if any.
    pub fn report(&self, now: f64, live: Option<u32>) -> Report {
        let (mut report, t0, remote) = self.report_without_runs(now, live);
        report.runs = self
            .runs
            .iter()
            .map(|r| self.run_record(r, t0, now, live, &remote))
            .collect();
        let tally = Tally::of(report.runs.iter());
        self.complete(report, &tally, t0, now, live)
    }

    /// [`Fold::report`], the fold given up as the report is built: the summary is made
    /// first (each record made and dropped), then each run goes once its record holds
    /// it, so the fold and the report are never both whole in memory (the final report
    /// of a 100,000-run pack, and `colloc report`'s: issue 39). The same report.
    pub fn into_report(mut self, now: f64, live: Option<u32>) -> Report {
        let (mut report, t0, remote) = self.report_without_runs(now, live);
        let tally = self.tally((t0, now, live), &remote);
        self.fill(&mut report, &tally, t0, now, live);
        // From here on a run's record needs only the run itself (and the sessions, solo
        // figures and energy shares): each goes as its record is made, and the maps by
        // name go first.
        self.by_name = Arc::default();
        self.calibration_latest = Arc::default();
        let gone = Arc::new(RunSt::named(String::new(), 0));
        let mut runs = Vec::with_capacity(self.runs.len());
        for i in 0..self.runs.len() {
            runs.push(self.run_record(&self.runs[i], t0, now, live, &remote));
            self.runs[i] = Arc::clone(&gone);
        }
        report.runs = runs;
        Self::removed_last(&mut report);
        report
    }

    /// The report at `now` to be written as its runs are made ([`Streamed`]): the
    /// records are made once here for the summary, and again as they are written, never
    /// all held (a 100,000-run pack's report is as large as its fold).
    pub fn streamed(&self, now: f64, live: Option<u32>) -> Streamed<'_> {
        let (head, t0, remote) = self.report_without_runs(now, live);
        let mut tally = self.tally((t0, now, live), &remote);
        let mut head = head.with_runs(());
        self.fill(&mut head, &tally, t0, now, live);
        Streamed {
            head,
            fold: self,
            at: (t0, now, live),
            remote,
            grid: std::mem::take(&mut tally.grid).into_iter().collect(),
            metrics: std::mem::take(&mut tally.metrics).into_iter().collect(),
        }
    }

    /// A tally of every run's record at `(t0, now, live)`, each made and dropped.
    fn tally(&self, (t0, now, live): (f64, f64, Option<u32>), remote: &Remote) -> Tally {
        let mut tally = Tally::with_room(self.runs.len());
        for r in &self.runs {
            tally.add(&self.run_record(r, t0, now, live, remote));
        }
        tally
    }

    /// Every part of the report but its runs, sessions and summary; its start (`t0`)
    /// and the energy shares of runs measured on other nodes.
    fn report_without_runs(&self, now: f64, live: Option<u32>) -> (Report, f64, Remote) {
        let t0 = self
            .sessions
            .iter()
            .map(|s| s.start)
            .fold(f64::INFINITY, f64::min);
        let t0 = if t0.is_finite() { t0 } else { now };
        let latest = self.sessions.last().cloned().unwrap_or_default();
        let remote = self.remote_energy();
        let last_event = self.sessions.iter().map(|s| s.last).fold(t0, f64::max);
        let report = Report {
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
            runs: Vec::new(),
            sessions: Vec::new(),
        };
        (report, t0, remote)
    }

    /// The report's sessions and summary (its runs' records counted in `tally`), and its
    /// runs removed from the manifest put after the others.
    fn complete(
        &self,
        mut report: Report,
        tally: &Tally,
        t0: f64,
        now: f64,
        live: Option<u32>,
    ) -> Report {
        self.fill(&mut report, tally, t0, now, live);
        Self::removed_last(&mut report);
        report
    }

    /// Runs removed from the manifest after the manifest's own (the summary pairs the
    /// fold's runs with the tally's in one order: only once it is made).
    fn removed_last(report: &mut Report) {
        // (Only where a run was removed: two more lists of every run cost the memory of a
        // large pack.)
        if report.runs.iter().any(|r| r.removed) {
            let (current, removed): (Vec<RunRecord>, Vec<RunRecord>) =
                std::mem::take(&mut report.runs)
                    .into_iter()
                    .partition(|r| !r.removed);
            report.runs = current;
            report.runs.extend(removed);
        }
    }

    /// Fill in the report's sessions and summary, its runs' records counted in `tally`.
    fn fill<R>(&self, report: &mut Report<R>, tally: &Tally, t0: f64, now: f64, live: Option<u32>) {
        let spans = self.session_spans(now, live);
        let several = self.sessions.len() > 1;
        report.sessions = self
            .sessions
            .iter()
            .map(|s| {
                let mut rec = self.session_record(s, &spans, live);
                if let (true, Some(span)) = (several, spans.get(&s.session)) {
                    rec.start_s = Some(span.first - t0);
                    rec.end_s = Some(span.last - t0);
                }
                rec
            })
            .collect();
        report.summary = self.summary(tally, &report.sessions, report.gpus.as_deref(), now, live);
        if several {
            self.session_figures(report);
        }
    }

    fn session_record(
        &self,
        s: &Sess,
        spans: &HashMap<u32, Span>,
        live: Option<u32>,
    ) -> SessionRecord {
        let running = live == Some(s.session);
        let (makespan_s, max_concurrent) = spans.get(&s.session).map_or((0.0, 0), |sp| {
            ((sp.last - sp.first).max(0.0), sp.max_concurrent)
        });
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
            start_s: None,
            end_s: None,
            aggregate_throughput: None,
            steady_throughput: None,
            steady_s: None,
        }
    }

    /// End of an attempt: its end, or now while its session runs, or the last event of
    /// its session (colloc was alive, and the attempt running, until then).
    pub(super) fn end_of(&self, a: &Att, now: f64, live: Option<u32>) -> f64 {
        match a.end {
            Some(e) => e,
            None if live == Some(a.session) => now,
            None => self
                .session_at
                .get(&a.session)
                .map_or(a.last_ts, |&i| self.sessions[i].last.max(a.last_ts)),
        }
    }

    /// Each session's span and most attempts at once, from one pass over the attempts
    /// (one pass per session was sessions x attempts for a forged record).
    pub(super) fn session_spans(&self, now: f64, live: Option<u32>) -> HashMap<u32, Span> {
        let mut by_session: HashMap<u32, Vec<(f64, f64)>> = HashMap::new();
        for a in self.runs.iter().flat_map(|r| r.attempts.iter()) {
            by_session
                .entry(a.session)
                .or_default()
                .push((a.start, self.end_of(a, now, live)));
        }
        by_session
            .into_iter()
            .map(|(s, iv)| (s, span_of(&iv)))
            .collect()
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
        let state = a.state_at(live);
        let error = match (a.state, state) {
            (Some(_), _) => a.error.clone(),
            (None, State::Interrupted) => Some(
                "colloc ended before it recorded this attempt's end (killed?); it counts as interrupted"
                    .into(),
            ),
            (None, _) => None,
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
                .and_then(|u| throughput(u, &a.stats, Vec::new()))
                .map(Box::new),
            gpu,
            escaped: a.escaped.clone(),
            step: a.step.as_ref().map(|s| {
                Box::new(AttemptStep {
                    id: s.id.clone(),
                    dispatch_s: s.dispatch_s,
                    failed: s.failed.clone(),
                })
            }),
            startup_s: a.stats.first_t.map(|f| (f - a.start).max(0.0)),
            started_early: a.early,
            definition: None,
        }
    }

    /// A run's attempts, each with its log (earlier ones kept as `NAME.K.log` when the
    /// next one starts) and the definition it ran where that is not the run's now.
    fn attempt_records(
        &self,
        r: &RunSt,
        t0: f64,
        now: f64,
        live: Option<u32>,
        remote: &Remote,
    ) -> Vec<AttemptRecord> {
        let mut attempts: Vec<AttemptRecord> = r
            .attempts
            .iter()
            .map(|a| {
                let mut rec =
                    self.attempt_record(a, (Kind::Run, &r.id.name), t0, now, live, remote);
                let def = r.definition_in(a.session);
                if !std::ptr::eq(def, &r.id) && def.changed(&r.id).is_some() {
                    rec.definition = Some(Box::new(definition(def)));
                }
                rec
            })
            .collect();
        let n = attempts.len();
        for a in attempts.iter_mut().take(n.saturating_sub(1)) {
            if let Some(stem) = a.log.strip_suffix(".log") {
                a.log = format!("{stem}.{}.log", a.attempt);
            }
        }
        attempts
    }

    fn run_record(
        &self,
        r: &RunSt,
        t0: f64,
        now: f64,
        live: Option<u32>,
        remote: &Remote,
    ) -> RunRecord {
        let attempts = self.attempt_records(r, t0, now, live, remote);
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
            throughput: tp.map(Box::new),
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
            gpu: combine_gpu(&attempts).map(Box::new),
            startup_s: attempts.iter().rev().find_map(|a| a.startup_s),
            solo_throughput: self
                .solos
                .get(&r.id.solo_key())
                .filter(|s| unit.as_deref().is_none_or(|u| u == s.unit))
                .map(|s| s.throughput),
            escaped: attempts.iter().flat_map(|a| a.escaped.clone()).collect(),
            attempts,
            removed: self.removed(r),
        }
    }

    fn calibration_records(&self, now: f64, t0: f64) -> Vec<CalibrationRecord> {
        // The runs of each solo key, computed once (per calibration it scanned every run:
        // hours for a forged record of 100,000 calibrated runs). A key's runs are listed
        // under its first calibration: colloc calibrates one run per key, and repeating
        // the list under forged calibrations of one key would grow as their product.
        let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
        if !self.calibrations.is_empty() {
            for r in &self.runs {
                by_key
                    .entry(r.id.solo_key())
                    .or_default()
                    .push(r.id.name.clone());
            }
        }
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
                    runs: key.and_then(|k| by_key.remove(&k)).unwrap_or_default(),
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
            if let Some(sp) = crate::energy::split(&readings, &iv) {
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
        // Every tally in one pass (per node, a pass over every attempt, slot and
        // node-out event was quadratic in a forged record of 65,536 nodes).
        let mut seen: HashSet<&str> = HashSet::new();
        let mut names: Vec<String> = Vec::new();
        for s in self.sessions.iter().filter(|s| s.steps) {
            for slot in &s.slots {
                if let Some(n) = &slot.node {
                    if seen.insert(n.as_str()) {
                        names.push(n.clone());
                    }
                }
            }
        }
        if names.is_empty() {
            return Vec::new();
        }
        // (attempts, succeeded, step failures) per node
        let mut tally: HashMap<&str, (usize, usize, usize)> = HashMap::new();
        for a in self.runs.iter().flat_map(|r| &r.attempts) {
            let (Some(step), Some(node)) = (&a.step, a.node.as_deref()) else {
                continue;
            };
            let t = tally.entry(node).or_default();
            t.0 += 1;
            t.1 += usize::from(a.state == Some(State::Succeeded));
            t.2 += usize::from(step.failed.is_some());
        }
        let mut slots: HashMap<&str, Vec<usize>> = HashMap::new();
        for s in &latest.slots {
            if let Some(n) = s.node.as_deref() {
                slots.entry(n).or_default().push(s.index);
            }
        }
        // the latest session's last word on each node
        let mut outs: HashMap<&str, (f64, &String)> = HashMap::new();
        for o in self.node_outs.iter().filter(|o| o.0 == latest.session) {
            outs.insert(o.2.as_str(), (o.1, &o.3));
        }
        names
            .into_iter()
            .map(|name| {
                let (attempts, succeeded, step_failures) =
                    tally.get(name.as_str()).copied().unwrap_or_default();
                let out = outs.get(name.as_str());
                NodeRecord {
                    slots: slots.remove(name.as_str()).unwrap_or_default(),
                    attempts,
                    succeeded,
                    step_failures,
                    out: out.map(|o| o.1.clone()),
                    out_s: out.map(|o| o.0 - t0),
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
        // where each GPU is in `out` (a scan per GPU was quadratic in forged GPUs)
        let mut at: HashMap<String, usize> = HashMap::new();
        let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        for g in self.gpus.values().flatten().chain(&remote.totals) {
            match at.get(&g.id.uuid).map(|&i| &mut out[i]) {
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
                None => {
                    at.insert(g.id.uuid.clone(), out.len());
                    out.push(g.clone());
                }
            }
        }
        Some(out)
    }
}

/// The median of some figures (the one rule, in core).
/// The report's form of a run's definition.
fn definition(id: &RunIdentity) -> Definition {
    Definition {
        command: id.command.clone(),
        env: id.env.iter().cloned().collect(),
        workdir: id.workdir.clone(),
        grid: id.grid.clone(),
    }
}

pub(super) fn median(v: Vec<f64>) -> Option<f64> {
    crate::num::median(&v)
}

/// A run's throughput over its attempts: their work over their summed sampled time (the
/// one rate rule, [`crate::rules::throughput::rate`]).
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
    let mean = crate::rules::throughput::rate(count, work, span, last.last)?;
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
        .filter_map(|a| a.gpu.as_deref().map(|g| (g, a.wall_s)))
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
        mean_sm_activity_percent: wmean(|g| g.mean_sm_activity_percent),
        mean_sm_occupancy_percent: wmean(|g| g.mean_sm_occupancy_percent),
        energy_j: (!energies.is_empty()).then(|| energies.iter().sum()),
    })
}

/// A session's attempts together: the first start and the last end (Unix seconds), and
/// the most at once. Its makespan is `last - first`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Span {
    pub first: f64,
    pub last: f64,
    pub max_concurrent: usize,
}

/// The span of a session's attempts, `(start, end)` each.
fn span_of(iv: &[(f64, f64)]) -> Span {
    if iv.is_empty() {
        return Span {
            first: 0.0,
            last: 0.0,
            max_concurrent: 0,
        };
    }
    let first = iv.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let last = iv.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    let mut events: Vec<(f64, i32)> = Vec::with_capacity(2 * iv.len());
    for &(s, e) in iv {
        events.push((s, 1));
        events.push((e, -1));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    Span {
        first,
        last: last.max(first),
        max_concurrent: max as usize,
    }
}
