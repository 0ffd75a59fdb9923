//! What the budget (`--budget`) lets run: the seconds owed to measurements already
//! planned (the repeats, the closing solo run), whether a new configuration or one more
//! repeat fits, and what is said and recorded when one does not.

use super::{Block, Cell, Ctx};
use crate::bench::report::{cell_name, secs, ConfigResult};

impl Ctx<'_> {
    /// Seconds still owed to measurements already planned: the closing solo run, and
    /// the repeats of what round 1 has measured (solo, reference, each block's cells).
    fn owed(&self, found: &[Block], with_ref: bool) -> f64 {
        let closing = self.budget.estimate(&Cell::SOLO.key(), 1);
        let repeats = f64::from(self.spec.repeat.saturating_sub(1));
        closing + repeats * self.round_cost(found, with_ref)
    }

    /// Estimated seconds of one repeat round: solo, the reference, every cell found.
    fn round_cost(&self, found: &[Block], with_ref: bool) -> f64 {
        let mut cost = self.budget.estimate(&Cell::SOLO.key(), 1);
        if with_ref {
            cost += self.budget.estimate(&Cell::REFERENCE.key(), 1);
        }
        cost + found
            .iter()
            .flat_map(|b| &b.cells)
            .map(|c| self.budget.estimate(&c.key(), c.n))
            .sum::<f64>()
    }

    /// Does a new configuration of round 1 fit, with all its repeats, and with what is
    /// owed? `found` holds the finished blocks; the block being explored is added by the
    /// caller through `extra`, its cells already measured. `Err`: why not, for the report.
    pub(super) fn new_cell_fits(
        &self,
        cell: Cell,
        found: &[Block],
        with_ref: bool,
        extra: &[Cell],
        keep: Option<(Cell, f64)>,
    ) -> Result<(), String> {
        let repeat = self.spec.repeat;
        let cost = self.budget.estimate(&cell.key(), cell.n) * f64::from(repeat);
        let repeats = f64::from(repeat.saturating_sub(1));
        let extra: f64 = extra
            .iter()
            .map(|c| self.budget.estimate(&c.key(), c.n))
            .sum::<f64>()
            * repeats;
        let kept = keep.map_or(0.0, |(_, s)| s);
        let owed = self.owed(found, with_ref) + extra + kept;
        if self.budget.fits(self.now(), cost, owed) {
            return Ok(());
        }
        Err(format!(
            "not run: the budget ({}) had {} left; this needs about {}{}, and about {} is owed to {}the closing solo run{}",
            secs(self.budget.limit.unwrap_or(0.0)),
            secs(self.budget.left(self.now()).unwrap_or(0.0)),
            secs(cost),
            if repeat > 1 {
                format!(" with its {} repeat(s)", repeat - 1)
            } else {
                String::new()
            },
            secs(owed),
            if repeat > 1 {
                "the repeats of what was measured and "
            } else {
                ""
            },
            keep.map_or_else(String::new, |(c, s)| format!(
                ", {} of it kept for {} (what --colloc={} runs)",
                secs(s),
                c.mode(),
                c.mode()
            ))
        ))
    }

    /// Does one measurement of `cell` fit now, with what is owed (the block's measured
    /// `extra` cells' repeats among it)?
    pub(super) fn fits_once(
        &self,
        cell: Cell,
        found: &[Block],
        with_ref: bool,
        extra: &[Cell],
    ) -> bool {
        let repeats = f64::from(self.spec.repeat.saturating_sub(1));
        let owed = self.owed(found, with_ref)
            + extra
                .iter()
                .map(|c| self.budget.estimate(&c.key(), c.n))
                .sum::<f64>()
                * repeats;
        let cost = self.budget.estimate(&cell.key(), cell.n);
        self.budget.fits(self.now(), cost, owed)
    }

    pub(super) fn skip_for_budget(&mut self, cell: Cell, why: String) {
        errln!(
            "colloc bench: budget: skipping {}: {why}",
            cell_name(&cell.mode(), cell.n)
        );
        self.report
            .skipped
            .push(format!("{}: {why}", cell_name(&cell.mode(), cell.n)));
        *self.report.row_mut(&cell.mode(), cell.n) =
            ConfigResult::skipped(&cell.mode(), cell.n, format!("budget: {why}"));
    }

    /// Does round `round` fit in whole? Says so when it will run in part.
    pub(super) fn round_fits(&self, round: u32, found: &[Block], with_ref: bool) -> bool {
        let cost = self.round_cost(found, with_ref);
        let closing = self.budget.estimate(&Cell::SOLO.key(), 1);
        if self.budget.fits(self.now(), cost, closing) {
            return true;
        }
        let left = self.budget.left(self.now()).unwrap_or(0.0);
        errln!(
            "colloc bench: budget: round {round} needs about {}, and {} is left besides the closing solo run: repeating what fits of it",
            secs(cost),
            secs((left - closing).max(0.0))
        );
        false
    }

    /// Does one more measurement of `cell` fit in round `round`, with the closing solo
    /// run kept? Says what it skips otherwise.
    pub(super) fn repeat_fits(&mut self, cell: Cell, round: u32) -> bool {
        let closing = self.budget.estimate(&Cell::SOLO.key(), 1);
        let cost = self.budget.estimate(&cell.key(), cell.n);
        if self.budget.fits(self.now(), cost, closing) {
            return true;
        }
        let msg = format!(
            "{} in round {round}: about {} needed, {} left besides the closing solo run",
            cell_name(&cell.mode(), cell.n),
            secs(cost),
            secs((self.budget.left(self.now()).unwrap_or(0.0) - closing).max(0.0))
        );
        errln!("colloc bench: budget: skipping {msg}");
        self.report.skipped.push(msg);
        false
    }

    /// Rounds `from` to the last are not run: says so.
    pub(super) fn skip_rounds(&mut self, from: u32, why: &str) {
        let what = if from == self.spec.repeat {
            format!("round {from}")
        } else {
            format!("rounds {from} to {}", self.spec.repeat)
        };
        let msg = format!("{what} (repeats): {why}");
        errln!("colloc bench: budget: skipping {msg}");
        self.report.skipped.push(msg);
    }
}
