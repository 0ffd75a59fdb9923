//! [`Tally`]: what the report's summary and its CSV's columns take from the runs'
//! records, one record at a time.

use std::collections::{BTreeMap, BTreeSet};

use crate::record::model::RunRecord;
use crate::record::State;

/// What the summary (and the CSV's columns) take from the runs' records, gathered one
/// record at a time in the fold's order: the records need not be held together (a
/// report written as it is made builds each twice and keeps none).
#[derive(Debug, Default)]
pub struct Tally {
    /// Records seen; those removed from the manifest; by state, the others.
    pub(super) seen: usize,
    pub(super) removed: usize,
    pub(super) states: [usize; 6],
    pub(super) attempts: usize,
    pub(super) oom_attempts: usize,
    pub(super) early_starts: usize,
    pub(super) step_failures: usize,
    pub(super) dispatch: Vec<f64>,
    /// Runs with throughput, per unit.
    pub(super) units: BTreeMap<String, usize>,
    /// Per run in the fold's order: its throughput's unit (in `units`' keys, by index
    /// into `unit_names`), mean, sample count and sampled seconds.
    pub(super) throughput: Vec<Option<(usize, f64, u64, f64)>>,
    pub(super) unit_names: Vec<String>,
    /// The names of runs with a solo figure, by their place in the fold (the runs the
    /// summary may name as faster packed than alone).
    pub(super) solo_names: BTreeMap<usize, String>,
    /// The grid keys and metric names of all runs.
    pub(super) grid: BTreeSet<String>,
    pub(super) metrics: BTreeSet<String>,
}

/// Where a state is counted in [`Tally::states`].
fn slot(s: State) -> usize {
    match s {
        State::Succeeded => 0,
        State::Failed => 1,
        State::TimedOut => 2,
        State::Interrupted => 3,
        State::NotStarted => 4,
        State::Running => 5,
    }
}

impl Tally {
    /// Count `r`, the next run's record in the fold's order.
    pub fn add(&mut self, r: &RunRecord) {
        self.seen += 1;
        if r.removed {
            self.removed += 1;
        } else {
            self.states[slot(r.state)] += 1;
        }
        self.attempts += r.attempts.len();
        for a in &r.attempts {
            self.oom_attempts += usize::from(a.oom);
            self.early_starts += usize::from(a.started_early);
            if let Some(step) = &a.step {
                self.step_failures += usize::from(step.failed.is_some());
                self.dispatch.extend(step.dispatch_s);
            }
        }
        let tp = r.throughput.as_ref().map(|t| {
            let unit = match self.unit_names.iter().position(|u| *u == t.unit) {
                Some(i) => i,
                None => {
                    self.unit_names.push(t.unit.clone());
                    self.unit_names.len() - 1
                }
            };
            *self.units.entry(t.unit.clone()).or_default() += 1;
            (unit, t.mean, t.count, t.sampled_s)
        });
        if r.solo_throughput.is_some() {
            self.solo_names
                .insert(self.throughput.len(), r.name.clone());
        }
        self.throughput.push(tp);
        self.grid
            .extend(r.grid.iter().flat_map(|g| g.keys().cloned()));
        self.metrics.extend(r.metrics.keys().cloned());
    }

    /// An empty tally with room for `runs` records.
    pub fn with_room(runs: usize) -> Tally {
        Tally {
            throughput: Vec::with_capacity(runs),
            ..Tally::default()
        }
    }

    /// A tally of `runs`.
    pub fn of<'a>(runs: impl ExactSizeIterator<Item = &'a RunRecord>) -> Tally {
        let mut t = Tally::with_room(runs.len());
        for r in runs {
            t.add(r);
        }
        t
    }

    pub(super) fn state(&self, s: State) -> usize {
        self.states[slot(s)]
    }
}
