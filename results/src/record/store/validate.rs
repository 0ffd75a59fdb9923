//! The checks every event read back passes before it reaches the fold ([`Validator`]).

use super::{MAX_ATTEMPTS, MAX_COLUMNS, MAX_RUNS, MAX_SESSIONS, MAX_SLOTS, MAX_TS, MAX_VALUE};
use crate::record::events::{Event, Progress};

/// Checks on the values of events read back, before they size a loop, an allocation or
/// a `Duration`: times within Unix seconds colloc can have written, figures finite and
/// bounded, slot indexes within the slots their session declared.
#[derive(Default)]
pub(super) struct Validator {
    /// Slots the latest session declared.
    slots: Option<usize>,
    /// The runs (and calibrations) named so far.
    runs: std::collections::HashSet<String>,
    /// The grid keys and metric names seen so far (a CSV column each).
    columns: std::collections::HashSet<String>,
    /// Session, session-end and start events so far.
    sessions: usize,
    session_ends: usize,
    attempts: usize,
}

/// One more of what is counted in `n`, refused past `max`.
fn count(n: &mut usize, max: usize, what: &str) -> Result<(), String> {
    *n += 1;
    if *n > max {
        return Err(format!(
            "more than {max} {what}: colloc never writes that many in one record"
        ));
    }
    Ok(())
}

fn check_ts(what: &str, ts: f64) -> Result<(), String> {
    if (0.0..=MAX_TS).contains(&ts) {
        Ok(())
    } else {
        Err(format!(
            "{what} {ts:e} is not a time colloc writes (0 to {MAX_TS:e} Unix seconds)"
        ))
    }
}

fn check_value(what: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v.abs() <= MAX_VALUE {
        Ok(())
    } else {
        Err(format!(
            "{what} {v:e} is out of range (at most {MAX_VALUE:e})"
        ))
    }
}

fn check_seconds(what: &str, s: f64) -> Result<(), String> {
    if (0.0..=MAX_TS).contains(&s) {
        Ok(())
    } else {
        Err(format!("{what} {s:e} is not a duration colloc writes"))
    }
}

fn check_progress(p: &Progress) -> Result<(), String> {
    for &(t, v) in &p.samples {
        check_ts("a sample's time", t)?;
        check_value("a sample", v)?;
    }
    let s = &p.stats;
    for t in [s.first_t, s.last_t].into_iter().flatten() {
        check_ts("a throughput time", t)?;
    }
    for v in [Some(s.work), s.max, s.last].into_iter().flatten() {
        check_value("a throughput figure", v)?;
    }
    for m in p.metrics.values() {
        for v in [m.last, m.best].into_iter().flatten() {
            check_value("a metric", v)?;
        }
    }
    for &(_, secs) in &p.epochs {
        check_seconds("an epoch's seconds", secs)?;
    }
    Ok(())
}

impl Validator {
    /// Count a run's name; more than [`MAX_RUNS`] distinct ones is not a record colloc
    /// wrote (each costs the fold memory).
    fn run(&mut self, name: &str) -> Result<(), String> {
        if !self.runs.contains(name) {
            if self.runs.len() >= MAX_RUNS {
                return Err(format!(
                    "more than {MAX_RUNS} distinct runs, the most a pack has"
                ));
            }
            self.runs.insert(name.to_string());
        }
        Ok(())
    }

    /// Count a grid key or metric name: more than [`MAX_COLUMNS`] is not a record colloc
    /// wrote (each is a column of every row of the CSV).
    fn column(&mut self, name: &str) -> Result<(), String> {
        if !self.columns.contains(name) {
            if self.columns.len() >= MAX_COLUMNS {
                return Err(format!(
                    "more than {MAX_COLUMNS} distinct grid keys and metric names (a CSV column each)"
                ));
            }
            self.columns.insert(name.to_string());
        }
        Ok(())
    }

    fn columns_of(&mut self, ev: &Event) -> Result<(), String> {
        match ev {
            Event::Session { runs, .. } => {
                for r in runs {
                    for k in r.grid.iter().flat_map(|g| g.keys()) {
                        self.column(k)?;
                    }
                    for (m, _) in &r.metrics {
                        self.column(m)?;
                    }
                }
            }
            Event::Progress { progress, .. } | Event::End { progress, .. } => {
                for m in progress.metrics.keys() {
                    self.column(m)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn event(&mut self, ev: &Event) -> Result<(), String> {
        self.columns_of(ev)?;
        check_ts("time", ev.ts())?;
        match ev {
            Event::Session { .. } => count(&mut self.sessions, MAX_SESSIONS, "session events")?,
            Event::SessionEnd { .. } => {
                count(&mut self.session_ends, MAX_SESSIONS, "session end events")?;
            }
            Event::Start { .. } => count(&mut self.attempts, MAX_ATTEMPTS, "attempts")?,
            _ => {}
        }
        match ev {
            Event::Session { runs, .. } => {
                for r in runs {
                    self.run(&r.name)?;
                }
            }
            Event::Start { run, .. }
            | Event::Progress { run, .. }
            | Event::End { run, .. }
            | Event::Solo { run, .. } => self.run(run)?,
            _ => {}
        }
        match ev {
            Event::Session {
                slots, interval_s, ..
            } => {
                if slots.len() > MAX_SLOTS {
                    return Err(format!(
                        "{} slots, more than the {MAX_SLOTS} colloc runs",
                        slots.len()
                    ));
                }
                if let Some(s) = slots.iter().find(|s| s.index >= slots.len()) {
                    return Err(format!(
                        "slot index {} but the session declares {} slot(s)",
                        s.index,
                        slots.len()
                    ));
                }
                check_seconds("the sampling interval", *interval_s)?;
                self.slots = Some(slots.len());
            }
            Event::Start { slot, .. } => {
                let declared = self.slots.unwrap_or(0);
                if *slot >= declared {
                    return Err(format!(
                        "slot index {slot} but its session declares {declared} slot(s)"
                    ));
                }
            }
            Event::Progress { progress, .. } => check_progress(progress)?,
            Event::End {
                progress,
                step,
                gpu,
                ..
            } => {
                check_progress(progress)?;
                if let Some(g) = gpu {
                    for v in [g.mean_util_percent, g.mean_gpu_util_percent, g.energy_j]
                        .into_iter()
                        .flatten()
                    {
                        check_value("a GPU figure", v)?;
                    }
                }
                if let Some(st) = step {
                    if let Some(d) = st.dispatch_s {
                        check_seconds("a step's dispatch seconds", d)?;
                    }
                    if let Some((a, b)) = st.span {
                        check_ts("a step's start", a)?;
                        check_ts("a step's end", b)?;
                    }
                    for r in &st.readings {
                        check_ts("a GPU reading's time", r.0)?;
                    }
                }
            }
            Event::Solo { throughput, .. } => check_value("a solo figure", *throughput)?,
            Event::Gpus { gpus, .. } => {
                for g in gpus {
                    for v in [
                        g.energy_j,
                        g.runs_energy_j,
                        g.idle_energy_j,
                        g.mean_util_percent,
                    ]
                    .into_iter()
                    .flatten()
                    {
                        check_value("a GPU figure", v)?;
                    }
                }
            }
            Event::Signal { .. }
            | Event::Stop { .. }
            | Event::NodeOut { .. }
            | Event::SessionEnd { .. } => {}
        }
        Ok(())
    }
}
