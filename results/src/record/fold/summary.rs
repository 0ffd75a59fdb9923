//! The report's summary: counts, makespan, aggregate, speed-up and the steady aggregate
//! (the rules in the parent module's documentation).

use std::collections::BTreeMap;

use crate::telemetry::GpuTotals;

use super::report::median;
use super::Fold;
use crate::record::model::{FasterThanSolo, Report, Summary, FASTER_THAN_SOLO};
use crate::record::State;
use crate::rules::steady::steady;
use crate::rules::throughput::Sample;

impl Fold {
    /// The summary of `rep`, the report being built.
    pub(super) fn summary(&self, rep: &Report, now: f64, live: Option<u32>) -> Summary {
        let mut sum = counts(rep);
        let makespan_s = sum.makespan_s;
        energy_into(&mut sum, rep);
        let Some(unit) = pack_unit(rep) else {
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
        self.speedup_into(&mut sum, rep, &unit, now, live);
        sum.throughput_unit = Some(unit);
        sum
    }

    /// The speed-up against one after another in `unit` (and the runs faster packed than
    /// alone): each covered attempt's work at its run's solo rate, plus its start-up (the
    /// time before its first sample, or all of it without samples), over the makespan.
    fn speedup_into(
        &self,
        sum: &mut Summary,
        rep: &Report,
        unit: &str,
        now: f64,
        live: Option<u32>,
    ) {
        let makespan_s = sum.makespan_s;
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
            let in_unit = r.attempts.iter().any(|a| a.unit.as_deref() == Some(unit));
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
                if a.unit.as_deref() == Some(unit) && a.stats.count > 0 {
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
    }
}

/// The summary's counts of `rep`: runs by state (and removed), attempts, OOMs,
/// concurrency, makespan, failed steps and the median dispatch time.
fn counts(rep: &Report) -> Summary {
    // The runs by state are the manifest's as it stands; removed runs' attempts still
    // count as attempts.
    let current = || rep.runs.iter().filter(|r| !r.removed);
    let count = |s: State| current().filter(|r| r.state == s).count();
    let makespan_s: f64 = rep.sessions.iter().map(|s| s.makespan_s).sum();
    Summary {
        runs: current().count(),
        removed: rep.runs.len() - current().count(),
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
    }
}

/// The energy totals over the report's GPUs, where it has any.
fn energy_into(sum: &mut Summary, rep: &Report) {
    if let Some(gpus) = &rep.gpus {
        let total = |f: fn(&GpuTotals) -> Option<f64>| {
            let v: Vec<f64> = gpus.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        };
        sum.energy_j = total(|g| g.energy_j);
        sum.runs_energy_j = total(|g| g.runs_energy_j);
        sum.idle_energy_j = total(|g| g.idle_energy_j);
    }
}

/// The pack's unit: the most common one among runs with throughput (ties: the first by
/// name); `None` when no run has throughput.
fn pack_unit(rep: &Report) -> Option<String> {
    let mut units: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rep.runs {
        if let Some(t) = &r.throughput {
            *units.entry(t.unit.as_str()).or_default() += 1;
        }
    }
    units
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(u, _)| u.to_string())
}

impl Fold {
    /// The steady aggregate of the session at `self.sessions[i]` in `unit`: its periods
    /// with every slot producing, `(throughput, seconds)`.
    fn session_steady(&self, i: usize, unit: &str) -> Option<(f64, f64)> {
        let s = &self.sessions[i];
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
        steady(&refs, s.slots.len()).map(|st| (st.throughput, st.seconds))
    }

    /// Each session's own figures in the pack's unit, for a pack of several sessions:
    /// the work of its attempts over its makespan, and its steady aggregate. The
    /// summary's are over all sessions (work summed over makespans summed).
    pub(super) fn session_figures(&self, rep: &mut Report) {
        let Some(unit) = rep.summary.throughput_unit.clone() else {
            return;
        };
        for (i, s) in self.sessions.iter().enumerate() {
            let Some(rec) = rep.sessions.iter_mut().find(|r| r.session == s.session) else {
                continue;
            };
            let work: f64 = self
                .runs
                .iter()
                .flat_map(|r| &r.attempts)
                .filter(|a| a.session == s.session && a.unit.as_deref() == Some(unit.as_str()))
                .map(|a| a.stats.work)
                .sum();
            if rec.makespan_s > 0.0 {
                rec.aggregate_throughput = Some(work / rec.makespan_s);
            }
            if let Some((throughput, seconds)) = self.session_steady(i, &unit) {
                rec.steady_throughput = Some(throughput);
                rec.steady_s = Some(seconds);
            }
        }
    }

    /// The steady aggregate over all sessions: each session's periods with every slot
    /// producing, their work summed over their time summed.
    fn steady_into(&self, sum: &mut Summary, unit: &str) {
        let (mut work, mut seconds) = (0.0, 0.0);
        for i in 0..self.sessions.len() {
            if let Some((throughput, secs)) = self.session_steady(i, unit) {
                work += throughput * secs;
                seconds += secs;
            }
        }
        if seconds > 0.0 {
            sum.steady_throughput = Some(work / seconds);
            sum.steady_s = Some(seconds);
        }
    }
}
