//! `--solo-baseline`'s driver ([`Calibrate`]): each distinct command measured alone
//! before the pack, on the shared bookkeeping of [`Common`].

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::{describe, Common, Logs, StepCtx, LOGS_DIR, SOLO_LOGS_DIR};
use crate::engine::pack::{AttemptId, Ctl, Driver, Ended, Job, View};
use crate::run::args::Options;
use crate::run::manifest::RunSpec;
use crate::run::record::Recorder;
use colloc_results::duration;
use colloc_results::record::events::{Event, Kind, RunIdentity};
use colloc_results::record::State;
use colloc_results::rules::solo;
use colloc_results::telemetry::Sampler;

/// How long a `--solo-baseline` measurement may take to print its first throughput line
/// (CUDA start-up, an MPS server's first client, autotuning: over a minute seen on a cold
/// H200); its window begins at that line, since start-up does no work.
pub const SOLO_STARTUP: Duration = Duration::from_secs(180);

/// `--solo-baseline`: each distinct command (a sweep point) alone on slot 0, for the
/// solo window each, counted from its first throughput line, until the budget is spent.
/// Runs with the same command, environment and working directory share one measurement.
pub struct Calibrate<'a> {
    common: Common<'a>,
    queue: VecDeque<usize>,
    window: Duration,
    /// Left out after the first throughput line ([`solo::figure`]).
    warmup: Duration,
    budget: Duration,
    started: Instant,
    quiet: bool,
    /// Attempts whose window has begun (their first throughput line was read).
    windowed: HashSet<AttemptId>,
    /// Distinct commands and how many were measured.
    pub total: usize,
    /// Measured so far (this session).
    pub measured: usize,
    logs: Logs,
}

impl<'a> Calibrate<'a> {
    /// The calibrations still to do: one per solo key without a figure in the record.
    pub fn new(
        specs: &'a mut [RunSpec],
        ids: &[RunIdentity],
        rec: &'a mut Recorder,
        devices: Vec<Option<String>>,
        sampler: Option<&'a Sampler>,
        opts: &Options,
        steps: Option<StepCtx>,
    ) -> Calibrate<'a> {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::new();
        let mut total = 0;
        for (i, id) in ids.iter().enumerate() {
            let key = id.solo_key();
            if !seen.insert(key.clone()) {
                continue;
            }
            total += 1;
            if rec.fold().solo(&key).is_none() {
                queue.push_back(i);
            }
        }
        let logs = Logs::open(rec, true);
        Calibrate {
            common: Common::new(specs, rec, devices, sampler, steps),
            queue,
            window: opts.solo_window,
            warmup: opts.solo_warmup,
            budget: opts.solo_budget,
            started: Instant::now(),
            quiet: opts.quiet,
            windowed: HashSet::new(),
            total,
            measured: 0,
            logs,
        }
    }

    /// Calibrations left undone.
    pub fn left(&self) -> usize {
        self.queue.len()
    }
}

impl Driver for Calibrate<'_> {
    fn next_job(&mut self, slot: usize) -> Option<Job> {
        if slot != 0 || !self.common.slot_open(slot) {
            return None;
        }
        let left = self.budget.saturating_sub(self.started.elapsed());
        if left < self.window.min(Duration::from_secs(5)) {
            return None;
        }
        let idx = self.queue.pop_front()?;
        let window = self.window.min(left);
        let limit = (self.warmup + self.window + SOLO_STARTUP).min(left);
        let name = &self.common.specs[idx].name;
        if !self.quiet {
            outln!(
                "colloc: measuring {} alone for up to {} after a {} warm-up from its first throughput line ({} of {} distinct commands)",
                colloc_results::text::escape(name),
                duration::show(window),
                duration::show(self.warmup),
                self.total - self.queue.len(),
                self.total
            );
        }
        let attempt = self.common.rec.fold().calibrations_of(name) + 1;
        Some(self.common.job(
            idx,
            attempt,
            self.logs.file(format!("{name}.log")),
            Some(limit),
        ))
    }

    fn started(&mut self, v: &View<'_>) {
        let log = format!("{LOGS_DIR}/{SOLO_LOGS_DIR}/{}.log", v.job.label);
        self.common.started(v, Kind::Solo, &log, false);
    }

    fn ended(&mut self, mut e: Ended, _ctl: &mut Ctl<'_>) {
        // The end of the window is how a calibration ends; it is not a time-out.
        if e.state == State::TimedOut {
            e.state = State::Succeeded;
        }
        let stats = e.seen.series.stats;
        let samples = e.seen.series.as_samples();
        let unit = e.seen.series.unit.clone();
        if let Some(f) = self.common.ended(&mut e, Kind::Solo) {
            self.common.node_health(&f);
        }
        let name = e.job.label.clone();
        self.windowed.remove(&e.id);
        // n = 1 of bench's path: the warm-up after the first line is left out.
        let figure = solo::figure(&samples, self.warmup.as_secs_f64()).ok();
        match (figure, unit) {
            (Some(rate), Some(unit)) if stats.count >= 2 && e.state == State::Succeeded => {
                let key = self.common.rec.fold().identities()[e.job.run].solo_key();
                let ev = Event::Solo {
                    ts: self.common.rec.now(),
                    key,
                    run: name.clone(),
                    throughput: rate,
                    unit: unit.clone(),
                    source: "--solo-baseline".into(),
                };
                self.common.rec.emit(ev);
                self.measured += 1;
                if !self.quiet {
                    outln!(
                        "colloc: solo throughput of {}: {rate:.1} {}",
                        colloc_results::text::escape(&name),
                        colloc_results::text::escape(&unit)
                    );
                }
            }
            _ => log::warn!(
                "--solo-baseline: {name} printed {} throughput sample(s) alone ({}); its runs get no solo figure",
                stats.count,
                describe(&e.exit)
            ),
        }
        self.common.rec.maybe_write();
    }

    fn tick(&mut self, ctl: &mut Ctl<'_>) {
        // A measurement's window begins at its first throughput line.
        let now = ctl.now();
        let budget_left = self.budget.saturating_sub(self.started.elapsed());
        let begun: Vec<(AttemptId, Duration)> = ctl
            .running()
            .filter(|v| !self.windowed.contains(&v.id))
            .filter_map(|v| {
                let first = v.seen.series.stats.first_t?;
                let since = Duration::from_secs_f64((now - first).max(0.0));
                let rest = (self.warmup + self.window).saturating_sub(since);
                Some((v.id, rest.min(budget_left)))
            })
            .collect();
        for (id, rest) in begun {
            ctl.end_after(id, rest);
            self.windowed.insert(id);
        }
        self.common.progress(ctl);
    }

    fn signal(&mut self, sig: i32, to: &[(usize, u32)]) {
        self.common.signal(sig, to);
    }

    fn stopping(&mut self, reason: &str) {
        self.common.stopping(reason);
    }
}
