//! What the budget (`--budget`) lets run: whether a new configuration (one
//! measurement, the closing solo run kept) or one more repeat fits, and what is said
//! and recorded when one does not.

use super::{Block, Cell, Ctx};
use colloc_results::bench::report::{cell_name, secs, ConfigResult};

impl Ctx<'_> {
    /// Estimated seconds of one repeat round: the reference (solo where there is
    /// none: the figure the answer is led by), and every cell to repeat.
    fn round_cost(&self, repeat: &[Block], with_ref: bool) -> f64 {
        let base = if with_ref {
            Cell::REFERENCE
        } else {
            Cell::SOLO
        };
        self.budget.estimate(&base.key(), 1)
            + repeat
                .iter()
                .flat_map(|b| &b.cells)
                .map(|c| self.budget.estimate(&c.key(), c.n))
                .sum::<f64>()
    }

    /// Does one measurement of a configuration not measured yet fit, with the closing
    /// solo run kept (and, in the search under MPS, one `mps:N` at the count about to
    /// be tried: `keep`)? The search spends the budget before any repeat: repeats go
    /// only to what could change the answer, with what is left. `Err`: why not, for
    /// the report.
    pub(super) fn new_cell_fits(
        &self,
        cell: Cell,
        keep: Option<(Cell, f64)>,
    ) -> Result<(), String> {
        let cost = self.budget.estimate(&cell.key(), cell.n);
        let closing = self.budget.estimate(&Cell::SOLO.key(), 1);
        let kept = keep.map_or(0.0, |(_, s)| s);
        let owed = closing + kept;
        if self.budget.fits(self.now(), cost, owed) {
            return Ok(());
        }
        Err(format!(
            "not run: the budget ({}) had {} left; this needs about {}, and about {} is kept for the closing solo run{}",
            secs(self.budget.limit.unwrap_or(0.0)),
            secs(self.budget.left(self.now()).unwrap_or(0.0)),
            secs(cost),
            secs(owed),
            keep.map_or_else(String::new, |(c, s)| format!(
                " and {} for {} (what --colloc={} runs)",
                secs(s),
                c.mode(),
                c.mode()
            ))
        ))
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
    pub(super) fn round_fits(&self, round: u32, repeat: &[Block], with_ref: bool) -> bool {
        let cost = self.round_cost(repeat, with_ref);
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
