//! The report's summary: counts, makespan, aggregate, speed-up and the steady aggregate
//! (the rules in the parent module's documentation).

use crate::telemetry::GpuTotals;

use super::report::median;
use super::tally::Tally;
use super::Fold;
use crate::record::model::{FasterThanSolo, Report, SessionRecord, Summary, FASTER_THAN_SOLO};
use crate::record::State;
use crate::rules::steady::steady;
use crate::rules::throughput::Sample;

impl Fold {
    /// The summary of a report with `sessions` and `gpus` whose runs' records `tally`
    /// counted.
    pub(super) fn summary(
        &self,
        tally: &Tally,
        sessions: &[SessionRecord],
        gpus: Option<&[GpuTotals]>,
        now: f64,
        live: Option<u32>,
    ) -> Summary {
        let mut sum = counts(tally, sessions);
        let makespan_s = sum.makespan_s;
        energy_into(&mut sum, gpus);
        let Some(unit) = pack_unit(tally) else {
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
        self.speedup_into(&mut sum, tally, &unit, now, live);
        sum.throughput_unit = Some(unit);
        sum
    }

    /// The speed-up against one after another in `unit` (and the runs faster packed than
    /// alone): each covered attempt's work at its run's solo rate, plus its start-up (the
    /// time before its first sample, or all of it without samples), over the makespan.
    fn speedup_into(
        &self,
        sum: &mut Summary,
        tally: &Tally,
        unit: &str,
        now: f64,
        live: Option<u32>,
    ) {
        let makespan_s = sum.makespan_s;
        let mut seq = 0.0;
        let mut covered = 0;
        let mut ran = 0;
        let mut sources: Vec<String> = Vec::new();
        // The tally counted the records of `self.runs`, in order.
        let unit_at = tally.unit_names.iter().position(|u| u == unit);
        for (i, (r, rec)) in self.runs.iter().zip(&tally.throughput).enumerate() {
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
            if let Some(&(_, mean, _, _)) = rec.as_ref().filter(|&&(u, mean, count, sampled_s)| {
                Some(u) == unit_at
                    && count >= 2
                    && sampled_s > 0.0
                    && mean > solo.throughput * FASTER_THAN_SOLO
            }) {
                sum.faster_than_solo.push(FasterThanSolo {
                    run: tally.solo_names.get(&i).cloned().unwrap_or_default(),
                    throughput: mean,
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

/// The summary's counts: runs by state (and removed), attempts, OOMs, concurrency,
/// makespan, failed steps and the median dispatch time.
fn counts(t: &Tally, sessions: &[SessionRecord]) -> Summary {
    // The runs by state are the manifest's as it stands; removed runs' attempts still
    // count as attempts.
    Summary {
        runs: t.seen - t.removed,
        removed: t.removed,
        succeeded: t.state(State::Succeeded),
        failed: t.state(State::Failed),
        timed_out: t.state(State::TimedOut),
        interrupted: t.state(State::Interrupted),
        not_started: t.state(State::NotStarted),
        running: t.state(State::Running),
        attempts: t.attempts,
        oom_attempts: t.oom_attempts,
        early_starts: t.early_starts,
        max_concurrent: sessions.iter().map(|s| s.max_concurrent).max().unwrap_or(0),
        makespan_s: sessions.iter().map(|s| s.makespan_s).sum(),
        step_failures: t.step_failures,
        median_dispatch_s: median(t.dispatch.clone()),
        ..Summary::default()
    }
}

/// The energy totals over the report's GPUs, where it has any.
fn energy_into(sum: &mut Summary, gpus: Option<&[GpuTotals]>) {
    if let Some(gpus) = gpus {
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
fn pack_unit(t: &Tally) -> Option<String> {
    t.units
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(u, _)| u.clone())
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
    pub(super) fn session_figures<R>(&self, rep: &mut Report<R>) {
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
