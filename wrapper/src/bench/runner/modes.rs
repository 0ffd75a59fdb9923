//! The modes' configurations: round 1 of a mode (its counts, grown under `--counts auto`
//! while the aggregate rises, then `mps:N` at the chosen N), its repeats in later rounds,
//! the cells measured again because their repeats disagreed, and the MPS daemon each
//! block runs under.

use colloc_core::mode::ModeKind;
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;

use super::finish::judged_candidates;
use super::mig::{mig_auto_counts, mig_unavailable};
use super::{Block, Cell, Ctx, Kind, RisingCut};
use crate::bench::analysis;
use crate::bench::args::{BenchMode, Counts, MAX_COUNT};
use crate::bench::plan::{self, MPS_MAX_CLIENTS};
use colloc_results::bench::answer::{self, Candidate};
use colloc_results::bench::busy::{Busy, BusySource};
use colloc_results::bench::report::{cell_name, ConfigResult, Measurement};
use colloc_results::bench::stats::Obs;

impl Ctx<'_> {
    /// The counts to try for `mode`.
    fn counts_for(&self, mode: BenchMode) -> Vec<usize> {
        match (&self.spec.counts, mode) {
            (Counts::List(v), BenchMode::Naive) => v.iter().copied().filter(|&n| n > 1).collect(),
            (Counts::List(v), _) => v.clone(),
            (Counts::Auto, BenchMode::Naive) => plan::auto_counts(MAX_COUNT),
            (Counts::Auto, BenchMode::Mps) => plan::auto_counts(MPS_MAX_CLIENTS),
            (Counts::Auto, BenchMode::Mig) => mig_auto_counts(self.gpu.as_ref()),
        }
    }

    /// One row per count (one for `--counts auto`), skipped for `why`.
    fn skip_mode(&mut self, mode: BenchMode, counts: &[usize], why: &str) {
        let shown: &[usize] = match self.spec.counts {
            Counts::Auto => &counts[..counts.len().min(1)],
            Counts::List(_) => counts,
        };
        for &n in shown {
            self.report
                .results
                .push(ConfigResult::skipped(mode.as_str(), n, why));
        }
    }

    /// Round 1 of a mode, one measurement per count: under `--counts auto` from where
    /// the solo run puts the answer, up while the aggregate rises, then down while fewer
    /// copies stay as good; a `--counts` list as given. The block measured.
    pub(super) fn explore(&mut self, mode: BenchMode) -> anyhow::Result<Option<Block>> {
        let name = mode.as_str();
        let counts = self.counts_for(mode);
        if counts.is_empty() {
            return Ok(None);
        }
        let kind = match mode {
            BenchMode::Naive => ModeKind::Naive,
            BenchMode::Mps => ModeKind::Mps,
            BenchMode::Mig => ModeKind::Mig,
        };
        if !self.config.allowed_modes.contains(&kind) {
            self.skip_mode(
                mode,
                &counts,
                &format!("{name} is not in this node's allowed_modes"),
            );
            return Ok(None);
        }
        if mode == BenchMode::Mig {
            if let Some(why) = mig_unavailable(self.gpu.as_ref(), self.config) {
                self.skip_mode(mode, &counts, &why);
                return Ok(None);
            }
        }
        let under = match self.open_mode(mode) {
            Ok(u) => u,
            Err(why) => {
                self.skip_mode(mode, &counts, &why);
                return Ok(None);
            }
        };
        let auto = self.spec.counts == Counts::Auto;
        let search = self.search_for(mode, counts);
        let mut prev: Option<(usize, Obs)> = self
            .report
            .row("solo", 1)
            .and_then(|r| r.in_round(1))
            .map(|o| (1, o));
        let mut stopped: Option<String> = None;
        let mut block = Block {
            mode,
            cells: Vec::new(),
        };
        let mut rose = false;
        for (i, &n) in search.up.iter().enumerate() {
            if let Some(why) = &stopped {
                if !auto {
                    self.report
                        .results
                        .push(ConfigResult::skipped(name, n, why.clone()));
                }
                continue;
            }
            let tried = self.why_tried(name, &search, i, n, prev, auto);
            match self.try_count(&under, mode, n, &block, auto)? {
                Tried::Measured(o) => {
                    let cell = Cell::of(mode, n);
                    block.cells.push(cell);
                    self.report.row_mut(name, n).tried = Some(tried);
                    if let Some(p) = prev.filter(|p| p.0 > 1 || auto) {
                        rose = plan::step_rises(p.1, o).go_on;
                        if auto {
                            stopped = self.judge_step(name, n, p, o);
                        }
                    }
                    prev = Some((n, o));
                }
                Tried::Stop(why) => stopped = Some(why),
                Tried::Budget(why) => {
                    if let Some((pn, _)) = prev.filter(|(pn, _)| *pn > 1 && rose) {
                        self.budget_cut_rising(mode, pn, n);
                    }
                    stopped = Some(format!("budget: {why}"));
                }
            }
        }
        if auto && stopped.as_deref().is_none_or(|w| !w.starts_with("budget")) {
            self.search_down(&under, mode, &search.down, &mut block)?;
        }
        block.cells.sort_by_key(|c| c.n);
        drop(under);
        Ok((!block.cells.is_empty()).then_some(block))
    }

    /// The counts of `mode` in the order tried: under `--counts auto` from what the
    /// solo run showed of the GPU ([`plan::auto_plan`]); a `--counts` list as given.
    fn search_for(&self, mode: BenchMode, counts: Vec<usize>) -> plan::AutoPlan {
        let listed = plan::AutoPlan {
            up: counts,
            down: Vec::new(),
            why_start: String::new(),
            why_top: None,
        };
        if self.spec.counts != Counts::Auto {
            return plan::AutoPlan {
                why_start: "given in --counts".into(),
                ..listed
            };
        }
        let limit = match mode {
            BenchMode::Naive => MAX_COUNT,
            BenchMode::Mps => MPS_MAX_CLIENTS,
            BenchMode::Mig => {
                return plan::AutoPlan {
                    why_start: "the GPU's largest equal MIG layouts".into(),
                    ..listed
                }
            }
        };
        let solo = self.report.row("solo", 1);
        let busy = solo
            .and_then(|r| r.measurements.iter().find_map(busy_of))
            .or_else(|| busy_of(self.report.warmup_run.as_ref()?));
        let total = self.gpu.as_ref().map(|g| g.info.memory_total);
        plan::auto_plan(limit, busy, self.solo_peak, total)
    }

    /// Why count `n`, the `i`-th going up, is tried, for its row.
    fn why_tried(
        &self,
        name: &str,
        search: &plan::AutoPlan,
        i: usize,
        n: usize,
        prev: Option<(usize, Obs)>,
        auto: bool,
    ) -> String {
        let mut why = match (i, prev) {
            (0, _) | (_, None) => search.why_start.clone(),
            (_, _) if !auto => "given in --counts".into(),
            (_, Some((pn, _))) => {
                let rise = self.report.row(name, pn);
                match rise.and_then(|r| r.rise) {
                    Some(r) => format!(
                        "the aggregate rose {:+.0} % at {pn} copies (over the count before): more may give more",
                        r * 100.0
                    ),
                    None => format!("the step after {pn}"),
                }
            }
        };
        if search.up.last() == Some(&n) {
            if let Some(top) = &search.why_top {
                why = format!("{why}; the largest count: {top}");
            }
        }
        why
    }

    /// Below where the search started: each count down, while it stays as good as the
    /// best so far (fewer copies as good are the answer).
    fn search_down(
        &mut self,
        under: &Under,
        mode: BenchMode,
        down: &[usize],
        block: &mut Block,
    ) -> anyhow::Result<()> {
        let name = mode.as_str();
        for &n in down {
            let obs = |c: &Cell| Some((c.n, self.report.row(&c.mode(), c.n)?.in_round(1)?));
            let best = block
                .cells
                .iter()
                .filter_map(obs)
                .max_by(|a, b| a.1.value.total_cmp(&b.1.value));
            let lowest = block.cells.iter().filter_map(obs).min_by_key(|x| x.0);
            let (Some((bn, b)), Some((_, low))) = (best, lowest) else {
                return Ok(());
            };
            // Fewer copies than a count already well below the best give no more.
            if low.value < (1.0 - answer::AS_GOOD) * b.value {
                return Ok(());
            }
            let tried =
                format!("below where the search started: do {n} copies do as well as {bn}?");
            match self.try_count(under, mode, n, block, true)? {
                Tried::Measured(_) => {
                    block.cells.push(Cell::of(mode, n));
                    self.report.row_mut(name, n).tried = Some(tried);
                }
                Tried::Stop(_) | Tried::Budget(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// One measurement of `n` copies of `mode` in the search, where they can run and
    /// fit the budget (room kept for the closing solo run and, under MPS once a count
    /// was measured, one `mps:N` at the chosen N).
    fn try_count(
        &mut self,
        under: &Under,
        mode: BenchMode,
        n: usize,
        block: &Block,
        auto: bool,
    ) -> anyhow::Result<Tried> {
        let name = mode.as_str();
        let cell = Cell::of(mode, n);
        if let Some(why) = self.cannot_hold(mode, n, auto) {
            return Ok(Tried::Stop(why));
        }
        let measured_mps = block.cells.iter().any(|c| c.kind == Kind::Mps && c.n > 1);
        let keep = (mode == BenchMode::Mps && under.daemon.is_some() && measured_mps).then(|| {
            let limited = Cell {
                kind: Kind::MpsLimited,
                n,
            };
            let s = plan::kept_for_limit(&self.budget, &limited.key(), n, 1);
            (limited, s)
        });
        if let Err(why) = self.new_cell_fits(cell, keep) {
            self.skip_for_budget(cell, why.clone());
            return Ok(Tried::Budget(why));
        }
        let obs = match &under.mig {
            Some(ctl) => match self.measure_mig(ctl, n, 1)? {
                Ok(o) => o,
                Err(why) => {
                    self.report
                        .results
                        .push(ConfigResult::skipped(name, n, why.clone()));
                    return Ok(Tried::Stop(why));
                }
            },
            None => self.measure(cell, 1, &under.env, None)?,
        };
        Ok(match obs {
            Some(o) => Tried::Measured(o),
            None => Tried::Stop(format!("not tried: {name} with {n} copies failed")),
        })
    }

    /// The budget ended the search of `name` before `next` copies while the aggregate
    /// still rose at `at`: noted, and the answer will say it is a lower bound.
    fn budget_cut_rising(&mut self, mode: BenchMode, at: usize, next: usize) {
        let name = mode.as_str();
        self.report.notes.push(format!(
            "{name}: --counts auto was cut by the budget before {next} copies while the aggregate still rose at {at}: more copies may give more; a larger --budget (or a shorter --duration) lets the search go on"
        ));
        let cost = self.budget.estimate(&Cell::of(mode, next).key(), next);
        let settle =
            self.budget.limit.unwrap_or(0.0) + 2.0 * cost * f64::from(self.spec.repeat.max(1));
        self.rising_cut = Some(RisingCut {
            mode: name.to_string(),
            at,
            next,
            settle_s: settle,
        });
    }

    /// Why `n` copies of `mode` cannot run, said in their row (and, under `--counts auto`,
    /// in a note where memory stopped the search): more MPS clients than a GPU serves, or
    /// copies that would not fit in the GPU's memory. `None`: they can.
    fn cannot_hold(&mut self, mode: BenchMode, n: usize, auto: bool) -> Option<String> {
        let name = mode.as_str();
        if mode == BenchMode::Mps && n > MPS_MAX_CLIENTS {
            let why = format!("MPS serves at most {MPS_MAX_CLIENTS} clients per GPU");
            self.report
                .results
                .push(ConfigResult::skipped(name, n, why.clone()));
            return Some(why);
        }
        let total = self.gpu.as_ref().map(|g| g.info.memory_total);
        if let Err(why) = analysis::memory_fits(self.solo_peak, total, n) {
            self.report
                .results
                .push(ConfigResult::skipped(name, n, why.clone()));
            if auto {
                self.report.notes.push(format!(
                    "{name}: --counts auto stopped before {n} copies: they would not fit in the GPU's memory"
                ));
            }
            return Some(why);
        }
        None
    }

    /// `--counts auto`: did the aggregate rise enough from `prev` copies to `n` to try
    /// more? The rise goes into the row; why the search stops, where it does.
    fn judge_step(
        &mut self,
        name: &str,
        n: usize,
        (pn, p): (usize, Obs),
        o: Obs,
    ) -> Option<String> {
        let step = plan::step_rises(p, o);
        self.report.row_mut(name, n).rise = Some(step.rise);
        if step.go_on {
            return None;
        }
        let note = format!(
            "{name}: --counts auto stopped at {n} copies: the aggregate rose {:+.1} % from {pn} cop{}, not more than the noise (± {:.1} %) and {:.0} %",
            step.rise * 100.0,
            if pn == 1 { "y" } else { "ies" },
            step.noise * 100.0,
            plan::MIN_RISE * 100.0
        );
        errln!("colloc bench: {note}");
        self.report.notes.push(note);
        Some("the aggregate stopped rising".into())
    }

    /// After the repeats: `mps:N` at the chosen N (the configuration `--colloc=mps:N`
    /// runs), measured up to `--repeat` times while the budget holds it (the closing
    /// solo run kept), each time a round of its own; added to the MPS block. Where not
    /// even once fits, a note says so first.
    pub(super) fn measure_limited(&mut self, found: &mut [Block]) -> anyhow::Result<()> {
        let Some(block) = found.iter_mut().find(|b| b.mode == BenchMode::Mps) else {
            return Ok(());
        };
        let Some(n) = self.chosen_n(block) else {
            return Ok(());
        };
        let cell = Cell {
            kind: Kind::MpsLimited,
            n,
        };
        if let Err(why) = self.new_cell_fits(cell, None) {
            self.skip_for_budget(cell, why.clone());
            // Said first: the question "does mps:N cost anything here" stays open.
            self.report.notes.insert(
                0,
                format!(
                    "{m} was not measured: the budget could not hold it even after the search for N stopped to keep room for it ({why}); whether --colloc={m}'s limits cost anything against unlimited mps at {n} copies stays open: a larger --budget measures it",
                    m = cell.mode()
                ),
            );
            return Ok(());
        }
        let under = match self.open_mode(BenchMode::Mps) {
            Ok(u) => u,
            Err(why) => {
                self.skip_for_budget(cell, why);
                return Ok(());
            }
        };
        let limited = self.limited_env(&under.env, n);
        self.report.row_mut(&cell.mode(), n).tried = Some(format!(
            "what --colloc={} runs, at the N the rule chose among unlimited mps",
            cell.mode()
        ));
        for k in 0..self.spec.repeat.max(1) {
            let round = self.report.rounds + 1;
            if k > 0 && !self.repeat_fits(cell, round) {
                break;
            }
            self.report.rounds = round;
            let ok = self.measure(cell, round, &limited, None)?.is_some();
            if k == 0 && ok {
                block.cells.push(cell);
            }
            if !ok {
                break;
            }
        }
        drop(under);
        Ok(())
    }

    /// The N at which `mps:N` is tried: the plateau rule over the block's unlimited MPS
    /// configurations, as measured so far; none below two copies.
    fn chosen_n(&self, block: &Block) -> Option<usize> {
        let cands: Vec<Candidate> = block
            .cells
            .iter()
            .filter(|c| c.kind == Kind::Mps)
            .filter_map(|c| {
                Some(Candidate {
                    mode: c.mode(),
                    n: c.n,
                    aggregate: self.report.row(&c.mode(), c.n)?.spread()?,
                    wide: None,
                })
            })
            .collect();
        let chosen = answer::pick(&cands)?.chosen;
        (chosen.n > 1).then_some(chosen.n)
    }

    /// The environment of `mps:N` clients: the daemon's, with colloc's client limits.
    fn limited_env(&self, daemon: &[(String, String)], n: usize) -> Vec<(String, String)> {
        let mem: Vec<u64> = self
            .gpu
            .as_ref()
            .map(|g| vec![g.info.memory_total >> 20])
            .unwrap_or_default();
        let mut env = daemon.to_vec();
        env.extend(mps::client_limits(n as u32, &mem));
        env
    }

    /// Rounds 2 and on: the block's configurations again, in this round's order.
    pub(super) fn repeat_block(&mut self, block: &Block, round: u32) -> anyhow::Result<()> {
        let cells = plan::in_round_order(&block.cells, round);
        let under = match self.open_mode(block.mode) {
            Ok(u) => u,
            Err(why) => {
                for c in &cells {
                    self.report
                        .row_mut(&c.mode(), c.n)
                        .fail(round, why.clone(), 0.0, vec![]);
                }
                return Ok(());
            }
        };
        for c in cells {
            if !self.repeat_fits(c, round) {
                continue;
            }
            match c.kind {
                Kind::Mig => {
                    let ctl = under.mig.as_ref().expect("opened above");
                    if let Err(why) = self.measure_mig(ctl, c.n, round)? {
                        self.report
                            .row_mut(&c.mode(), c.n)
                            .fail(round, why, 0.0, vec![]);
                    }
                }
                Kind::MpsLimited => {
                    let limited = self.limited_env(&under.env, c.n);
                    self.measure(c, round, &limited, None)?;
                }
                _ => {
                    self.measure(c, round, &under.env, None)?;
                }
            }
        }
        drop(under);
        Ok(())
    }

    /// What a block of `mode` runs under: a private MPS daemon (with its clients'
    /// environment), or NVML to make MIG layouts through; nothing for naive. `Err`: why
    /// it cannot.
    fn open_mode(&self, mode: BenchMode) -> Result<Under, String> {
        let mut under = Under {
            daemon: None,
            env: Vec::new(),
            mig: None,
        };
        match mode {
            BenchMode::Naive => {}
            BenchMode::Mps => {
                let d = self.start_mps()?;
                under.env = d.daemon().env();
                under.daemon = Some(d);
            }
            BenchMode::Mig => {
                under.mig =
                    Some(NvmlGpus::open(&self.config.nvml_library).map_err(|e| e.to_string())?);
            }
        }
        Ok(under)
    }

    /// After the rounds: the cells whose repeats disagree by more than the others'
    /// noise ([`answer::wide_cells`]) are measured again while the budget allows (the
    /// closing solo run kept), those that could change the answer first
    /// ([`answer::remeasure_order`]), each at most `max(--repeat, 2)` more times; every
    /// pass is a round of its own and judges the cells afresh.
    pub(super) fn remeasure_wide(&mut self, found: &[Block], with_ref: bool) -> anyhow::Result<()> {
        let cap = self.spec.repeat.max(2);
        let mut again: Vec<(Cell, u32)> = Vec::new();
        loop {
            let cands = judged_candidates(&self.report);
            let closing = self.budget.estimate(&Cell::SOLO.key(), 1);
            let mut planned = 0.0;
            let mut now_cells: Vec<Cell> = Vec::new();
            for i in answer::remeasure_order(&cands) {
                let c = &cands[i];
                let cell = if c.mode == "reference" {
                    Some(Cell::REFERENCE).filter(|_| with_ref)
                } else {
                    found
                        .iter()
                        .flat_map(|b| &b.cells)
                        .find(|x| x.mode() == c.mode && x.n == c.n)
                        .copied()
                };
                let Some(cell) = cell else { continue };
                if again.iter().any(|(x, k)| *x == cell && *k >= cap) {
                    continue;
                }
                let cost = self.budget.estimate(&cell.key(), cell.n);
                if !self.budget.fits(self.now(), planned + cost, closing) {
                    continue;
                }
                planned += cost;
                now_cells.push(cell);
            }
            if now_cells.is_empty() {
                return Ok(());
            }
            let round = self.report.rounds + 1;
            self.report.rounds = round;
            self.extra_from.get_or_insert(round);
            let names: Vec<String> = now_cells
                .iter()
                .map(|c| cell_name(&c.mode(), c.n))
                .collect();
            errln!(
                "colloc bench: measuring again what disagreed with itself more than the other cells: {}",
                names.join(", ")
            );
            for cell in &now_cells {
                match again.iter_mut().find(|(x, _)| x == cell) {
                    Some((_, k)) => *k += 1,
                    None => again.push((*cell, 1)),
                }
            }
            if now_cells.contains(&Cell::REFERENCE) {
                self.measure(Cell::REFERENCE, round, &[], None)?;
            }
            for b in found {
                let cells: Vec<Cell> = b
                    .cells
                    .iter()
                    .filter(|c| now_cells.contains(c))
                    .copied()
                    .collect();
                if !cells.is_empty() {
                    self.repeat_block(
                        &Block {
                            mode: b.mode,
                            cells,
                        },
                        round,
                    )?;
                }
            }
        }
    }

    fn start_mps(&self) -> Result<mps::PrivateDaemon, String> {
        let program = crate::nodecfg::mps_control(self.config)?;
        let guard = mps::PrivateDaemon::start(&program, "colloc-bench", &self.device)
            .map_err(|e| format!("cannot start MPS: {e}"))?;
        errln!(
            "colloc bench: started MPS daemon ({})",
            guard.daemon().pipe_dir.display()
        );
        Ok(guard)
    }
}

/// What a block of a mode runs under ([`Ctx::open_mode`]).
struct Under {
    /// The private MPS daemon, stopped when dropped.
    daemon: Option<mps::PrivateDaemon>,
    /// The copies' environment under it.
    env: Vec<(String, String)>,
    /// NVML, to make and undo MIG layouts through.
    mig: Option<NvmlGpus>,
}

/// How one count of the search went ([`Ctx::try_count`]).
enum Tried {
    /// Measured, with its observation.
    Measured(Obs),
    /// Could not run (memory, MPS's client limit, a failure): the search stops.
    Stop(String),
    /// Did not fit the budget: the search stops, and why is recorded.
    Budget(String),
}

/// How busy a measurement says one copy kept the GPU, for [`plan::auto_plan`].
fn busy_of(m: &Measurement) -> Option<Busy> {
    Some(Busy {
        share: m.sm_busy_percent? / 100.0,
        // Recorded before the source was: the utilization's.
        source: m.sm_busy_source.unwrap_or(BusySource::ProcessUtil),
        occupancy: m.sm_occupancy_percent,
    })
}
