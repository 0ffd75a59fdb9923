//! The modes' configurations: round 1 of a mode (its counts, grown under `--counts auto`
//! while the aggregate rises, then `mps:N` at the chosen N), its repeats in later rounds,
//! the cells measured again because their repeats disagreed, and the MPS daemon each
//! block runs under.

use colloc_core::mode::ModeKind;
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;

use super::finish::judged_candidates;
use super::mig::{mig_auto_counts, mig_unavailable};
use super::{Block, Cell, Ctx, Kind};
use crate::bench::analysis;
use crate::bench::answer::{self, Candidate};
use crate::bench::args::{BenchMode, Counts, MAX_COUNT};
use crate::bench::plan::{self, MPS_MAX_CLIENTS};
use crate::bench::report::{cell_name, ConfigResult};
use crate::bench::stats::{Obs, Spread};

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

    /// Round 1 of a mode: its counts (growing them under `--counts auto` while the
    /// aggregate rises), then under MPS `mps:N` at the chosen N. The block measured.
    pub(super) fn explore(
        &mut self,
        mode: BenchMode,
        found: &[Block],
        with_ref: bool,
    ) -> anyhow::Result<Option<Block>> {
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
        for n in counts {
            let cell = Cell::of(mode, n);
            if let Some(why) = &stopped {
                if !auto {
                    self.report
                        .results
                        .push(ConfigResult::skipped(name, n, why.clone()));
                }
                continue;
            }
            if let Some(why) = self.cannot_hold(mode, n, auto) {
                stopped = Some(why);
                continue;
            }
            // Under MPS, once a count was measured, room stays for `mps:N` at the chosen N:
            // a count further is tried only where both fit.
            let measured_mps = block.cells.iter().any(|c| c.kind == Kind::Mps && c.n > 1);
            let keep =
                (mode == BenchMode::Mps && under.daemon.is_some() && measured_mps).then(|| {
                    let limited = Cell {
                        kind: Kind::MpsLimited,
                        n,
                    };
                    let s = plan::kept_for_limit(&self.budget, &limited.key(), n, self.spec.repeat);
                    (limited, s)
                });
            if let Err(why) = self.new_cell_fits(cell, found, with_ref, &block.cells, keep) {
                self.skip_for_budget(cell, why.clone());
                if auto {
                    if let Some((pn, _)) = prev.filter(|(pn, _)| *pn > 1) {
                        self.report.notes.push(format!(
                            "{name}: --counts auto was cut by the budget before {n} copies while the aggregate still rose at {pn}: more copies may give more; a larger --budget (or a shorter --duration) lets the search go on"
                        ));
                    }
                }
                stopped = Some(format!("budget: {why}"));
                continue;
            }
            let obs = match &under.mig {
                Some(ctl) => match self.measure_mig(ctl, n, 1)? {
                    Ok(o) => o,
                    Err(why) => {
                        self.report
                            .results
                            .push(ConfigResult::skipped(name, n, why.clone()));
                        stopped = Some(why);
                        continue;
                    }
                },
                None => self.measure(cell, 1, &under.env, None)?,
            };
            let Some(o) = obs else {
                stopped = Some(format!("not tried: {name} with {n} copies failed"));
                continue;
            };
            block.cells.push(cell);
            if auto {
                if let Some(p) = prev {
                    stopped = self.judge_step(name, n, p, o);
                }
            }
            prev = Some((n, o));
        }
        if mode == BenchMode::Mps && under.daemon.is_some() {
            self.explore_limited(&mut block, &under.env, found, with_ref)?;
        }
        drop(under);
        Ok((!block.cells.is_empty()).then_some(block))
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

    /// After the MPS counts of round 1: `mps:N` at the chosen N, measured where the
    /// budget holds it (once, at least, if its repeats no longer fit); where it does
    /// not, a note says so first.
    fn explore_limited(
        &mut self,
        block: &mut Block,
        daemon_env: &[(String, String)],
        found: &[Block],
        with_ref: bool,
    ) -> anyhow::Result<()> {
        let Some(n) = self.chosen_n(block) else {
            return Ok(());
        };
        let cell = Cell {
            kind: Kind::MpsLimited,
            n,
        };
        let fits = self
            .new_cell_fits(cell, found, with_ref, &block.cells, None)
            // Its repeat no longer fits (a count ran longer than its estimate):
            // measured once all the same where that fits; round 2 repeats it
            // first if it can.
            .or_else(|why| {
                if self.fits_once(cell, found, with_ref, &block.cells) {
                    Ok(())
                } else {
                    Err(why)
                }
            });
        if let Err(why) = fits {
            self.skip_for_budget(cell, why.clone());
            // Said first: the question "does mps:N cost anything here" stays open.
            self.report.notes.insert(
                0,
                format!(
                    "{m} was not measured: the budget could not hold it even after the search for N stopped to keep room for it ({why}); whether --colloc={m}'s limits cost anything against unlimited mps at {n} copies stays open: a larger --budget measures it",
                    m = cell.mode()
                ),
            );
        } else {
            let limited = self.limited_env(daemon_env, n);
            if self.measure(cell, 1, &limited, None)?.is_some() {
                block.cells.push(cell);
            }
        }
        Ok(())
    }

    /// The N at which `mps:N` is tried: the plateau rule over the block's unlimited MPS
    /// configurations of round 1; none below two copies.
    fn chosen_n(&self, block: &Block) -> Option<usize> {
        let cands: Vec<Candidate> = block
            .cells
            .iter()
            .filter(|c| c.kind == Kind::Mps)
            .filter_map(|c| {
                let o = self.report.row(&c.mode(), c.n)?.in_round(1)?;
                Some(Candidate {
                    mode: c.mode(),
                    n: c.n,
                    aggregate: Spread::of(&[o])?,
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
