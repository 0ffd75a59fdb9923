//! Running the configurations of `colloc bench` through the pack engine, in the order
//! of [`super::plan`]: a warm-up run (discarded), then rounds of solo, the reference
//! command, and each mode's counts as N copies of the workload on N slots with the MPS
//! daemon and MIG layout a mode needs; the closing solo run. Each measurement is taken
//! over the copies' common window ([`crate::engine::window`]) with its noise from the
//! window's blocks; the figures and their spread are settled at the end and the reports
//! written.

use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::mode::{MigRequest, Mode, ModeKind, ProfileSel};
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};

use super::analysis;
use super::answer::{self, Candidate};
use super::args::{BenchMode, Counts, GpuSel, Spec, MAX_COUNT};
use super::compare;
use super::host::Host;
use super::plan::{self, Budget, MPS_MAX_CLIENTS};
use super::report::{
    self, cell_name, pm, secs, times, BenchGpu, ConfigResult, Measurement, MpsLimit,
    RecommendationOut, Report, Status, SCHEMA,
};
use super::stats::{self, Obs, Spread};
use crate::engine::copies::{self, Window};
use crate::engine::launch::{LaunchSpec, LocalLauncher};
use crate::engine::pack::LogFile;
use crate::engine::pack::{Job, Slot};
use crate::engine::scan::Scanner;
use crate::engine::signals::{Signals, STOP};
use crate::engine::throughput::Sample;
use crate::engine::window::Measured;
use crate::engine::{gpu, signal_name, Clock};
use crate::export::chart::{self, BenchPoint};
use crate::record::store::{self, ReportDir};
use crate::userfs::CheckedDir;
use colloc_core::telemetry::Sampler;

/// How long copies get to stop on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// GPU memory and energy sampling interval.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Longest measured time of the warm-up run.
const WARMUP_RUN_MAX: Duration = Duration::from_secs(10);
/// Most blocks a window is cut into for its noise (each needs two samples or more).
const BLOCKS: usize = 5;

/// A signal asked colloc to stop.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}; all copies and daemons colloc started were stopped", signal_name(*.0))]
pub struct Interrupted(pub i32);

/// What a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Solo,
    Reference,
    Naive,
    Mps,
    /// MPS with `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (and the memory limit) of `mps:N`.
    MpsLimited,
    Mig,
}

/// A configuration: what runs, and how many copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    kind: Kind,
    n: usize,
}

impl Cell {
    const SOLO: Cell = Cell {
        kind: Kind::Solo,
        n: 1,
    };
    const REFERENCE: Cell = Cell {
        kind: Kind::Reference,
        n: 1,
    };

    fn of(mode: BenchMode, n: usize) -> Cell {
        let kind = match mode {
            BenchMode::Naive => Kind::Naive,
            BenchMode::Mps => Kind::Mps,
            BenchMode::Mig => Kind::Mig,
        };
        Cell { kind, n }
    }

    /// The mode as reports name it.
    fn mode(&self) -> String {
        match self.kind {
            Kind::Solo => "solo".into(),
            Kind::Reference => "reference".into(),
            Kind::Naive => "naive".into(),
            Kind::Mps => "mps".into(),
            Kind::MpsLimited => format!("mps:{}", self.n),
            Kind::Mig => "mig".into(),
        }
    }

    /// For the budget's estimates.
    fn key(&self) -> String {
        format!("{} {}", self.mode(), self.n)
    }

    /// For log file names.
    fn slug(&self) -> &'static str {
        match self.kind {
            Kind::Solo => "solo",
            Kind::Reference => "reference",
            Kind::Naive => "naive",
            Kind::Mps => "mps",
            Kind::MpsLimited => "mps-limited",
            Kind::Mig => "mig",
        }
    }
}

/// The configurations of one mode that round 1 measured, to measure again.
#[derive(Debug, Clone)]
struct Block {
    mode: BenchMode,
    cells: Vec<Cell>,
}

/// How one measurement went.
struct Taken {
    result: Result<Measurement, String>,
    wall: f64,
    logs: Vec<String>,
    unit: Option<String>,
}

struct Ctx<'a> {
    spec: &'a Spec,
    config: &'a Config,
    clock: Clock,
    launcher: &'a mut LocalLauncher,
    signals: &'a Signals,
    /// NVML, where it answers: each measurement samples its copies through it.
    nvml: Option<Arc<NvmlGpus>>,
    gpu: Option<BenchGpu>,
    /// `CUDA_VISIBLE_DEVICES` for copies: the GPU's UUID, or the selector as given.
    device: String,
    /// The report directory, and its logs/ folder.
    out: ReportDir,
    logs: Arc<CheckedDir>,
    scanner: Arc<Scanner>,
    budget: Budget,
    /// Order of the next measurement.
    seq: u32,
    /// The workload's peak memory alone (warm-up and solo runs).
    solo_peak: Option<u64>,
    /// The earlier report of `--compare`.
    old: Option<Report>,
    /// The first round that only measures wide cells again (after the repeats).
    extra_from: Option<u32>,
    report: Report,
}

/// The GPU under test, and NVML to sample the copies on it through.
fn open_gpu(spec: &Spec, config: &Config) -> Result<(BenchGpu, Arc<NvmlGpus>), String> {
    let nvml = NvmlGpus::open(&config.nvml_library).map_err(|e| e.to_string())?;
    let all = nvml.gpus().map_err(|e| e.to_string())?;
    let info = all
        .into_iter()
        .find(|g| match &spec.gpu {
            GpuSel::Index(i) => g.index == *i,
            GpuSel::Uuid(u) => &g.uuid == u,
        })
        .ok_or_else(|| format!("no GPU {} in NVML", spec.gpu))?;
    let driver = nvml.driver_version().ok();
    Ok((BenchGpu { info, driver }, Arc::new(nvml)))
}

/// Open (or make) the report directory: the caller's own, writable by no one else, and
/// holding no earlier results unless `--replace` (then they are removed first, so old
/// logs never mix with new).
///
/// # Errors
/// Bad input (exit 2): someone else's directory, earlier results without `--replace`.
fn open_report_dir(spec: &Spec) -> anyhow::Result<ReportDir> {
    let (dir, made) =
        ReportDir::create(&spec.report_dir).map_err(crate::userfs::UserFsError::into_anyhow)?;
    if made {
        return Ok(dir);
    }
    let logs = dir
        .dir()
        .subdir(store::LOGS_DIR, None)
        .map_err(crate::userfs::UserFsError::into_anyhow)?;
    let old_logs = match &logs {
        Some(l) => l
            .entries()
            .map_err(crate::userfs::UserFsError::into_anyhow)?,
        None => Vec::new(),
    };
    let old_files: Vec<&str> = store::BENCH_FILES
        .into_iter()
        .filter(|f| dir.has(f))
        .collect();
    if old_files.is_empty() && old_logs.is_empty() {
        return Ok(dir);
    }
    if !spec.replace {
        let what = if old_files.is_empty() {
            format!("{} log(s) in {}/", old_logs.len(), store::LOGS_DIR)
        } else {
            old_files.join(", ")
        };
        return Err(crate::bad_input(format!(
            "{} already holds the results of an earlier colloc bench ({what}): give another --report-dir, or add --replace to replace them",
            spec.report_dir.display()
        )));
    }
    let gone = |e: crate::userfs::UserFsError| e.into_anyhow().context("--replace");
    for f in old_files {
        dir.dir().unlink(f).map_err(gone)?;
    }
    if let Some(l) = logs {
        for (name, _) in old_logs {
            l.unlink(&name).map_err(gone)?;
        }
    }
    Ok(dir)
}

/// Run the benchmark and write its reports.
///
/// # Errors
/// A signal ([`Interrupted`]), the solo run failing, or reports that cannot be written.
pub fn run(
    spec: &Spec,
    config: &Config,
    launcher: &mut LocalLauncher,
    signals: &Signals,
) -> anyhow::Result<ExitCode> {
    // A report to compare with is read first: a bad path is bad input, before any work.
    let old = spec
        .compare
        .as_deref()
        .map(compare::load)
        .transpose()
        .map_err(|e| crate::bad_input(format!("--compare: {e}")))?;
    let out = open_report_dir(spec)?;
    let logs = Arc::new(
        out.logs(false)
            .map_err(crate::userfs::UserFsError::into_anyhow)?,
    );
    let clock = Clock::start();
    let (gpu, nvml, gpu_note) = match open_gpu(spec, config) {
        Ok((g, n)) => (Some(g), Some(n), None),
        Err(why) => {
            log::warn!("no GPU figures (memory, energy): {why}");
            (None, None, Some(why))
        }
    };
    let device = gpu
        .as_ref()
        .map_or_else(|| spec.gpu.to_string(), |g| g.info.uuid.clone());
    let unit = match &spec.throughput {
        crate::engine::scan::Throughput::Custom { unit, .. } => unit.clone(),
        crate::engine::scan::Throughput::Builtin => String::new(),
    };
    let host = Host::here(
        gpu.as_ref()
            .map(|g| (g.info.name.as_str(), g.info.uuid.as_str())),
        gpu.as_ref().and_then(|g| g.driver.as_deref()),
    );
    let report = Report {
        schema: SCHEMA,
        command: spec.cmd.clone(),
        reference_command: spec.reference.clone(),
        host,
        gpu: gpu.clone(),
        gpu_note,
        started_unix: clock.unix0,
        modes: spec.modes.iter().map(|m| m.as_str().to_string()).collect(),
        counts: spec.counts.to_string(),
        repeat: spec.repeat,
        rounds: 0,
        duration_s: spec.duration.as_secs_f64(),
        warmup_s: spec.warmup.as_secs_f64(),
        budget_s: spec.budget.map(|b| b.as_secs_f64()),
        min_gain: spec.min_gain,
        metric: spec.throughput.describe(),
        unit,
        solo: None,
        solo_u: None,
        reference: None,
        reference_u: None,
        warmup_run: None,
        warmup_note: None,
        results: vec![],
        mps_limit: None,
        recommendation: None,
        notes: vec![],
        skipped: vec![],
        comparison: None,
        wall_s: 0.0,
    };
    let mut ctx = Ctx {
        spec,
        config,
        clock,
        launcher,
        signals,
        nvml,
        gpu,
        device,
        out,
        logs,
        scanner: Arc::new(Scanner {
            throughput: spec.throughput.clone(),
            metrics: Vec::new(),
        }),
        budget: Budget::new(spec.budget.map(|b| b.as_secs_f64())),
        seq: 0,
        solo_peak: None,
        old,
        extra_from: None,
        report,
    };

    let outcome = ctx.measure_all();
    // Interrupted or not, what was measured is reported.
    ctx.finish()?;
    outcome?;
    let solo = ctx.report.row("solo", 1);
    if !solo.is_some_and(|r| r.status == Status::Measured) {
        anyhow::bail!(
            "the workload failed when run alone: {}",
            solo.and_then(|r| r.reason.clone())
                .or_else(|| ctx.report.warmup_note.clone())
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Lines of the plot: each mode's measured (N, aggregate ± u) points, naive with solo as
/// N = 1 where naive was measured (solo alone is the dashed line).
pub fn lines(report: &Report) -> Vec<(String, Vec<BenchPoint>)> {
    let point = |r: &ConfigResult| {
        let mean = r.aggregate?;
        let u = r.aggregate_u.unwrap_or(0.0);
        Some(BenchPoint {
            n: r.n as f64,
            mean,
            lo: mean - u,
            hi: mean + u,
        })
    };
    let mut out: Vec<(String, Vec<BenchPoint>)> = Vec::new();
    for r in &report.results {
        if r.status != Status::Measured || r.mode == "solo" || r.mode == "reference" {
            continue;
        }
        let Some(p) = point(r) else { continue };
        match out.iter_mut().find(|(m, _)| *m == r.mode) {
            Some((_, pts)) => pts.push(p),
            None => out.push((r.mode.clone(), vec![p])),
        }
    }
    if let Some(solo) = report.row("solo", 1).and_then(point) {
        if let Some((_, pts)) = out.iter_mut().find(|(m, _)| m == "naive") {
            if !pts.iter().any(|p| p.n == 1.0) {
                pts.push(solo);
            }
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.n.total_cmp(&b.n));
    }
    out
}

impl Ctx<'_> {
    fn check_signal(&self) -> Result<(), Interrupted> {
        for sig in self.signals.take() {
            if STOP.contains(&sig) {
                return Err(Interrupted(sig));
            }
            log::warn!(
                "colloc bench received {}; no copies run now",
                signal_name(sig)
            );
        }
        Ok(())
    }

    fn now(&self) -> f64 {
        self.clock.now()
    }

    /// The warm-up run, the rounds, the closing solo run; stops early on a signal or
    /// when the workload fails alone.
    fn measure_all(&mut self) -> anyhow::Result<()> {
        let warm = self.spec.duration.min(WARMUP_RUN_MAX);
        let t = self.take(Cell::SOLO, 0, &[], None)?;
        self.learn_unit(t.unit.as_deref());
        match t.result {
            Ok(m) => {
                self.budget
                    .saw_warmup(m.wall_s, (self.spec.duration - warm).as_secs_f64());
                self.solo_peak = m.peak_memory_bytes;
                self.report.warmup_run = Some(m);
            }
            Err(why) => {
                self.report.warmup_note = Some(why.clone());
                self.report.row_mut("solo", 1).fail(
                    0,
                    format!("the warm-up run failed: {why}"),
                    t.wall,
                    t.logs,
                );
                return Ok(());
            }
        }
        if let Some(limit) = self.spec.budget {
            errln!(
                "colloc bench: budget {}: the warm-up run took {}; a configuration starts only if it{} fits, with the closing solo run kept in reserve",
                secs(limit.as_secs_f64()),
                secs(self.now()),
                match self.spec.repeat {
                    1 => String::new(),
                    r => format!(" and its {} repeat(s)", r - 1),
                }
            );
        }
        let mut found: Vec<Block> = Vec::new();
        let mut measured_ref = false;
        for round in 1..=self.spec.repeat {
            // A round that does not fit in whole is run in part (each measurement
            // started only if it fits, the closing solo run kept), and is the last.
            let part = round > 1 && !self.round_fits(round, &found, measured_ref);
            if part && !self.repeat_fits(Cell::SOLO, round) {
                self.skip_rounds(round, "no time left for its solo run");
                break;
            }
            self.report.rounds = round;
            let solo = self.measure(Cell::SOLO, round, &[], None)?;
            if round == 1 {
                if solo.is_none() {
                    return Ok(());
                }
                let peak = self.report.row("solo", 1).and_then(|r| {
                    r.measurements
                        .iter()
                        .filter_map(|m| m.peak_memory_bytes)
                        .max()
                });
                self.solo_peak = self.solo_peak.max(peak);
            }
            if self.spec.reference.is_some() && (round == 1 || measured_ref) {
                let fits = if round > 1 {
                    !part || self.repeat_fits(Cell::REFERENCE, round)
                } else {
                    match self.new_cell_fits(Cell::REFERENCE, &found, measured_ref, &[], None) {
                        Ok(()) => true,
                        Err(why) => {
                            self.skip_for_budget(Cell::REFERENCE, why);
                            false
                        }
                    }
                };
                if fits {
                    let o = self.measure(Cell::REFERENCE, round, &[], None)?;
                    measured_ref |= o.is_some();
                }
            }
            if round == 1 {
                for &mode in &self.spec.modes.clone() {
                    if let Some(b) = self.explore(mode, &found, measured_ref)? {
                        found.push(b);
                    }
                }
            } else {
                for block in plan::in_round_order(&found, round) {
                    self.repeat_block(&block, round)?;
                }
            }
            if part {
                if round < self.spec.repeat {
                    self.skip_rounds(round + 1, "the budget was spent");
                }
                break;
            }
        }
        self.remeasure_wide(&found, measured_ref)?;
        // The closing solo run, after the last round.
        let last = self.report.rounds + 1;
        self.measure(Cell::SOLO, last, &[], None)?;
        Ok(())
    }

    fn learn_unit(&mut self, unit: Option<&str>) {
        if self.report.unit.is_empty() {
            if let Some(u) = unit {
                self.report.unit = u.to_string();
            }
        }
    }

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
    fn new_cell_fits(
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
    fn fits_once(&self, cell: Cell, found: &[Block], with_ref: bool, extra: &[Cell]) -> bool {
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

    fn skip_for_budget(&mut self, cell: Cell, why: String) {
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
    fn round_fits(&self, round: u32, found: &[Block], with_ref: bool) -> bool {
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
    fn repeat_fits(&mut self, cell: Cell, round: u32) -> bool {
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

    /// After the rounds: the cells whose repeats disagree by more than the others'
    /// noise ([`answer::wide_cells`]) are measured again while the budget allows (the
    /// closing solo run kept), those that could change the answer first
    /// ([`answer::remeasure_order`]), each at most `max(--repeat, 2)` more times; every
    /// pass is a round of its own and judges the cells afresh.
    fn remeasure_wide(&mut self, found: &[Block], with_ref: bool) -> anyhow::Result<()> {
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

    /// Rounds `from` to the last are not run: says so.
    fn skip_rounds(&mut self, from: u32, why: &str) {
        let what = if from == self.spec.repeat {
            format!("round {from}")
        } else {
            format!("rounds {from} to {}", self.spec.repeat)
        };
        let msg = format!("{what} (repeats): {why}");
        errln!("colloc bench: budget: skipping {msg}");
        self.report.skipped.push(msg);
    }

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
    fn explore(
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
        let mut guard = None;
        let mut env: Vec<(String, String)> = Vec::new();
        let mut mig_ctl = None;
        match mode {
            BenchMode::Naive => {}
            BenchMode::Mps => match self.start_mps() {
                Ok(g) => {
                    env = g.daemon().env();
                    guard = Some(g);
                }
                Err(why) => {
                    self.skip_mode(mode, &counts, &why);
                    return Ok(None);
                }
            },
            BenchMode::Mig => {
                if let Some(why) = mig_unavailable(self.gpu.as_ref(), self.config) {
                    self.skip_mode(mode, &counts, &why);
                    return Ok(None);
                }
                match NvmlGpus::open(&self.config.nvml_library) {
                    Ok(c) => mig_ctl = Some(c),
                    Err(e) => {
                        self.skip_mode(mode, &counts, &e.to_string());
                        return Ok(None);
                    }
                }
            }
        }
        let auto = self.spec.counts == Counts::Auto;
        let total = self.gpu.as_ref().map(|g| g.info.memory_total);
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
            if mode == BenchMode::Mps && n > MPS_MAX_CLIENTS {
                let why = format!("MPS serves at most {MPS_MAX_CLIENTS} clients per GPU");
                self.report
                    .results
                    .push(ConfigResult::skipped(name, n, why.clone()));
                stopped = Some(why);
                continue;
            }
            if let Err(why) = analysis::memory_fits(self.solo_peak, total, n) {
                self.report
                    .results
                    .push(ConfigResult::skipped(name, n, why.clone()));
                if auto {
                    self.report.notes.push(format!(
                        "{name}: --counts auto stopped before {n} copies: they would not fit in the GPU's memory"
                    ));
                }
                stopped = Some(why);
                continue;
            }
            // Under MPS, once a count was measured, room stays for `mps:N` at the chosen N:
            // a count further is tried only where both fit.
            let measured_mps = block.cells.iter().any(|c| c.kind == Kind::Mps && c.n > 1);
            let keep = (mode == BenchMode::Mps && guard.is_some() && measured_mps).then(|| {
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
            let obs = match mode {
                BenchMode::Mig => {
                    let ctl = mig_ctl.as_ref().expect("opened above");
                    match self.measure_mig(ctl, n, 1)? {
                        Ok(o) => o,
                        Err(why) => {
                            self.report
                                .results
                                .push(ConfigResult::skipped(name, n, why.clone()));
                            stopped = Some(why);
                            continue;
                        }
                    }
                }
                _ => self.measure(cell, 1, &env, None)?,
            };
            let Some(o) = obs else {
                stopped = Some(format!("not tried: {name} with {n} copies failed"));
                continue;
            };
            block.cells.push(cell);
            if auto {
                if let Some((pn, p)) = prev {
                    let step = plan::step_rises(p, o);
                    self.report.row_mut(name, n).rise = Some(step.rise);
                    if !step.go_on {
                        let note = format!(
                            "{name}: --counts auto stopped at {n} copies: the aggregate rose {:+.1} % from {pn} cop{}, not more than the noise (± {:.1} %) and {:.0} %",
                            step.rise * 100.0,
                            if pn == 1 { "y" } else { "ies" },
                            step.noise * 100.0,
                            plan::MIN_RISE * 100.0
                        );
                        errln!("colloc bench: {note}");
                        self.report.notes.push(note);
                        stopped = Some("the aggregate stopped rising".into());
                    }
                }
            }
            prev = Some((n, o));
        }
        if mode == BenchMode::Mps && guard.is_some() {
            if let Some(n) = self.chosen_n(&block) {
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
                    let limited = self.limited_env(&env, n);
                    if self.measure(cell, 1, &limited, None)?.is_some() {
                        block.cells.push(cell);
                    }
                }
            }
        }
        drop(guard);
        Ok((!block.cells.is_empty()).then_some(block))
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
    fn repeat_block(&mut self, block: &Block, round: u32) -> anyhow::Result<()> {
        let cells = plan::in_round_order(&block.cells, round);
        let mut guard = None;
        let mut env = Vec::new();
        let mut mig_ctl = None;
        match block.mode {
            BenchMode::Naive => {}
            BenchMode::Mps => match self.start_mps() {
                Ok(g) => {
                    env = g.daemon().env();
                    guard = Some(g);
                }
                Err(why) => {
                    for c in &cells {
                        self.report
                            .row_mut(&c.mode(), c.n)
                            .fail(round, why.clone(), 0.0, vec![]);
                    }
                    return Ok(());
                }
            },
            BenchMode::Mig => match NvmlGpus::open(&self.config.nvml_library) {
                Ok(c) => mig_ctl = Some(c),
                Err(e) => {
                    for c in &cells {
                        self.report
                            .row_mut(&c.mode(), c.n)
                            .fail(round, e.to_string(), 0.0, vec![]);
                    }
                    return Ok(());
                }
            },
        }
        for c in cells {
            if !self.repeat_fits(c, round) {
                continue;
            }
            match c.kind {
                Kind::Mig => {
                    let ctl = mig_ctl.as_ref().expect("opened above");
                    if let Err(why) = self.measure_mig(ctl, c.n, round)? {
                        self.report
                            .row_mut(&c.mode(), c.n)
                            .fail(round, why, 0.0, vec![]);
                    }
                }
                Kind::MpsLimited => {
                    let limited = self.limited_env(&env, c.n);
                    self.measure(c, round, &limited, None)?;
                }
                _ => {
                    self.measure(c, round, &env, None)?;
                }
            }
        }
        drop(guard);
        Ok(())
    }

    /// Measure `cell` in `round` and record it; its observation where it was measured.
    fn measure(
        &mut self,
        cell: Cell,
        round: u32,
        env: &[(String, String)],
        devices: Option<&[String]>,
    ) -> Result<Option<Obs>, Interrupted> {
        let t = self.take(cell, round, env, devices)?;
        Ok(self.record(cell, round, t, None))
    }

    fn record(&mut self, cell: Cell, round: u32, t: Taken, layout: Option<String>) -> Option<Obs> {
        self.learn_unit(t.unit.as_deref());
        self.budget.saw(&cell.key(), cell.n, t.wall);
        let row = self.report.row_mut(&cell.mode(), cell.n);
        if layout.is_some() {
            row.layout = layout;
        }
        match t.result {
            Ok(m) => {
                let o = m.obs();
                row.add(m, t.logs);
                Some(o)
            }
            Err(why) => {
                row.fail(round, why, t.wall, t.logs);
                None
            }
        }
    }

    /// MIG with `n` copies in `round`: the largest layout of `n` equal instances, made
    /// and undone through colloc's journaled apply/restore, one copy per instance.
    /// `Err`: no layout could be made (why); the measurement is recorded either way.
    fn measure_mig(
        &mut self,
        ctl: &NvmlGpus,
        n: usize,
        round: u32,
    ) -> anyhow::Result<Result<Option<Obs>, String>> {
        self.check_signal()?;
        let Some(gpu) = self.gpu.clone() else {
            return Ok(Err("needs NVML".into()));
        };
        let (uid, gid) = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let job = bench_job_id();
        let started = self.now();
        let mut applied: Option<(String, Vec<String>)> = None;
        let mut refused: Option<String> = None;
        for layout in mig_layouts(n) {
            let Ok(mode) = layout.parse::<Mode>() else {
                continue;
            };
            let spec = JobSpec {
                job,
                uid,
                gid,
                gpus: vec![gpu.info.index],
                mode,
            };
            match reconfig::prolog(self.config, ctl, &spec) {
                Ok(Outcome::Applied(env)) => {
                    let get = |k: &str| {
                        env.iter()
                            .find(|(key, _)| key == k)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default()
                    };
                    let devices: Vec<String> = get("COLLOC_DEVICES")
                        .split(',')
                        .filter(|d| !d.is_empty())
                        .map(str::to_string)
                        .collect();
                    applied = Some((get("COLLOC_MODE"), devices));
                    break;
                }
                Ok(Outcome::Refused(r)) if r.bad_request => continue,
                Ok(Outcome::Refused(r)) => {
                    refused = Some(r.message);
                    break;
                }
                Ok(Outcome::Off) => continue,
                Err(fault) => {
                    refused = Some(format!("cannot create MIG instances: {fault}"));
                    break;
                }
            }
        }
        let Some((layout, devices)) = applied else {
            return Ok(Err(refused.unwrap_or_else(|| {
                format!(
                    "no layout of {n} equal MIG instances fits {}",
                    gpu.info.name
                )
            })));
        };
        errln!("colloc bench: made MIG layout {layout}");
        let cell = Cell { kind: Kind::Mig, n };
        let taken = if devices.len() == n {
            self.take(cell, round, &[], Some(&devices)).map(Some)
        } else {
            Ok(None)
        };
        // Undo the layout whatever happened, then record.
        reconfig::restore(self.config, Some(ctl), job).map_err(|e| {
            anyhow::anyhow!(
                "cannot restore GPU {} after MIG layout {layout}: {e}",
                gpu.info.index
            )
        })?;
        let mut t = match taken? {
            Some(t) => t,
            None => Taken {
                result: Err(format!(
                    "layout {layout} gave {} devices, not {n}",
                    devices.len()
                )),
                wall: 0.0,
                logs: vec![],
                unit: None,
            },
        };
        // The layout's making and undoing belong to the configuration's time.
        let wall = self.now() - started;
        t.wall = wall;
        if let Ok(m) = &mut t.result {
            m.wall_s = wall;
        }
        Ok(Ok(self.record(cell, round, t, Some(layout))))
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

    /// Run `cell`'s copies at once and measure them (copy `i` on `devices[i]` where
    /// given: MIG instances). Round 0 is the warm-up run.
    fn take(
        &mut self,
        cell: Cell,
        round: u32,
        extra_env: &[(String, String)],
        devices: Option<&[String]>,
    ) -> Result<Taken, Interrupted> {
        self.check_signal()?;
        let seq = self.seq;
        self.seq += 1;
        let n = cell.n;
        let mode = cell.mode();
        let what = if round == 0 {
            "warm-up run (discarded)".to_string()
        } else if round > self.report.rounds {
            "closing solo run".to_string()
        } else if let Some(from) = self.extra_from.filter(|f| round >= *f) {
            format!(
                "[again {}] {mode} with {n} cop{}, whose repeats disagreed",
                round - from + 1,
                if n == 1 { "y" } else { "ies" }
            )
        } else {
            format!(
                "[{round}/{}] {mode} with {n} cop{}",
                self.spec.repeat,
                if n == 1 { "y" } else { "ies" }
            )
        };
        errln!("colloc bench: {what} ...");
        let started = self.now();
        let argv = match cell.kind {
            Kind::Reference => self.spec.reference.clone().unwrap_or_default(),
            _ => self.spec.cmd.clone(),
        };
        let tag = if round == 0 {
            "warmup".to_string()
        } else {
            format!("{}-n{n}-r{round}", cell.slug())
        };
        let mut logs = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        let mut jobs = Vec::with_capacity(n);
        let mut slot_devices = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("{tag}-{i}.log");
            let log = LogFile::new(Some(&self.logs), name.clone(), self.logs.shown(&name));
            logs.push(log.path.display().to_string());
            let dev = devices
                .and_then(|d| d.get(i))
                .unwrap_or(&self.device)
                .clone();
            slot_devices.push(dev.clone());
            let mut env = vec![("CUDA_VISIBLE_DEVICES".to_string(), dev)];
            env.extend(extra_env.iter().cloned());
            slots.push(Slot { env });
            jobs.push(Job {
                run: i,
                attempt: 1,
                label: format!("{tag}-{i}"),
                spec: LaunchSpec {
                    argv: argv.clone(),
                    env: vec![
                        ("COLLOC_RUN_INDEX".into(), i.to_string()),
                        ("COLLOC_RUN_NAME".into(), format!("bench-{tag}-{i}")),
                        ("PYTHONUNBUFFERED".into(), "1".into()),
                    ],
                    cwd: None,
                },
                scanner: Arc::clone(&self.scanner),
                timeout: None,
                log,
            });
        }
        let duration = if round == 0 {
            self.spec.duration.min(WARMUP_RUN_MAX)
        } else {
            self.spec.duration
        };
        // Each copy is read as `colloc run` reads each run: its own processes.
        let mps = matches!(cell.kind, Kind::Mps | Kind::MpsLimited);
        let sampler = self.nvml.as_ref().map(|nvml| {
            gpu::sampler_for_devices(nvml, &slot_devices, mps, SAMPLE_EVERY, self.clock.t0)
        });
        let out = copies::run(
            self.launcher,
            self.signals,
            self.clock,
            slots,
            jobs,
            &Window {
                warmup: self.spec.warmup,
                duration,
                startup_timeout: self.spec.startup_timeout,
                grace: STOP_GRACE,
                what: self.spec.throughput.describe(),
            },
            sampler.as_ref(),
        );
        let gpu_read = sampler.map(Sampler::finish);
        if let Some(sig) = out.signal {
            return Err(Interrupted(sig));
        }
        let wall = self.now() - started;
        let stop_t = out.stop_t;
        // Lines after the stop (a copy's shutdown) do not count.
        let samples: Vec<Vec<Sample>> = out
            .samples
            .iter()
            .map(|s| s.iter().copied().filter(|x| x.t <= stop_t).collect())
            .collect();
        let unit = out.unit.clone();
        let fail = |why: String, logs: Vec<String>| {
            errln!("colloc bench: {what}: failed: {why}");
            Taken {
                result: Err(why),
                wall,
                logs,
                unit: unit.clone(),
            }
        };
        if let Some(why) = out.failure {
            return Ok(fail(why, logs));
        }
        let min_len = (duration.as_secs_f64() * 0.5).max(0.2);
        let m = match Measured::over(&samples, self.spec.warmup.as_secs_f64(), min_len) {
            Ok(m) => m,
            Err(e) => return Ok(fail(e.to_string(), logs)),
        };
        // Noise: the window in blocks of two samples or more (of the copy with fewest).
        let fewest = samples
            .iter()
            .map(|s| {
                s.iter()
                    .filter(|x| x.t > m.window.start && x.t <= m.window.end)
                    .count()
            })
            .min()
            .unwrap_or(0);
        let k = (fewest / 2).min(BLOCKS);
        let se = (k >= 2)
            .then(|| stats::block_se(&m.blocks(&samples, k)))
            .flatten();
        let copy_peaks: Vec<Option<u64>> = out
            .gpu
            .iter()
            .map(|g| g.as_ref().and_then(|g| g.peak_memory_bytes))
            .collect();
        let (mut peak, mut energy, mut mps_server) = (None, None, None);
        if let Some((totals, history)) = &gpu_read {
            peak = copy_peaks
                .iter()
                .any(Option::is_some)
                .then(|| copy_peaks.iter().flatten().sum::<u64>());
            let readings = history.first().map(Vec::as_slice).unwrap_or_default();
            energy = colloc_core::energy::energy_in(readings, m.window.start, m.window.end);
            mps_server = totals.iter().filter_map(|g| g.mps_server_peak_bytes).max();
        }
        let measurement = Measurement {
            round,
            seq,
            started_s: started,
            wall_s: wall,
            window: [m.window.start, m.window.end],
            aggregate: m.aggregate(),
            se,
            per_copy: m.per_copy(),
            peak_memory_bytes: peak,
            copy_peak_memory_bytes: if gpu_read.is_some() {
                copy_peaks
            } else {
                Vec::new()
            },
            mps_server_bytes: mps_server,
            energy_j: energy,
        };
        let u = unit
            .as_deref()
            .or(Some(self.report.unit.as_str()).filter(|u| !u.is_empty()))
            .unwrap_or(crate::engine::scan::FALLBACK_UNIT)
            .to_string();
        let vs = self
            .report
            .row("solo", 1)
            .and_then(ConfigResult::spread)
            .filter(|_| cell.kind != Kind::Solo && round > 0)
            .map_or_else(String::new, |s| {
                format!(" ({:.2}x solo)", m.aggregate() / s.mean)
            });
        errln!(
            "colloc bench: {what}: {} {u} over {:.1} s{vs}, {}",
            pm(m.aggregate(), se.map(|s| s * stats::COVERAGE), 1),
            m.window.len(),
            secs(wall)
        );
        Ok(Taken {
            result: Ok(measurement),
            wall,
            logs,
            unit,
        })
    }

    /// Settle the figures, recommend, print the table, write JSON, CSVs and PNG.
    fn finish(&mut self) -> anyhow::Result<()> {
        let report = &mut self.report;
        if report.unit.is_empty() {
            report.unit = crate::engine::scan::FALLBACK_UNIT.into();
        }
        for r in &mut report.results {
            r.settle();
        }
        let solo = report.row("solo", 1).and_then(ConfigResult::spread);
        let reference = report.row("reference", 1).and_then(ConfigResult::spread);
        report.solo = solo.map(|s| s.mean);
        report.solo_u = solo.and_then(|s| s.u);
        report.reference = reference.map(|s| s.mean);
        report.reference_u = reference.and_then(|s| s.u);
        let mut faster: Vec<String> = Vec::new();
        for r in &mut report.results {
            let Some(sp) = r.spread() else { continue };
            r.set_vs_solo(solo.and_then(|s| stats::ratio(&sp, &s)));
            r.set_vs_reference(reference.and_then(|f| stats::ratio(&sp, &f)));
            if r.mode == "solo" || r.mode == "reference" {
                continue;
            }
            if let Some(s) = solo {
                if let Some((mean, max)) = analysis::slowdown(s.mean, &r.per_copy) {
                    r.slowdown_mean = Some(mean);
                    r.slowdown_max = Some(max);
                    let rel = (s.rel_u().powi(2) + sp.rel_u().powi(2)).sqrt();
                    r.baseline_problem = analysis::baseline_problem(mean, rel);
                    if r.baseline_problem {
                        faster.push(format!("{} ({mean:.2}x)", cell_name(&r.mode, r.n)));
                    }
                }
            }
        }
        if !faster.is_empty() {
            report.notes.push(format!(
                "baseline problem: each copy ran faster than the solo run, beyond the noise, in {}: the solo figure is too low (a solo run bound by launching kernels from the host measures the host's CPU as much as the GPU), so ratios to solo overstate collocation{}",
                faster.join(", "),
                if report.reference.is_some() {
                    "; the fractions of the reference do not depend on it"
                } else {
                    "; give a --reference that saturates the GPU in one process"
                }
            ));
        }
        if let Some(note) = analysis::solo_unsteady(solo, reference) {
            report.notes.push(note);
        }
        report.mps_limit = mps_limit(report);
        if let Some(s) = solo {
            let cands = judged_candidates(report);
            if let Some(rec) = answer::recommend(&s, &cands, self.spec.min_gain) {
                let vs_ref = report
                    .row(&rec.chosen.mode, rec.chosen.n)
                    .and_then(|r| r.vs_reference.map(|v| (v, r.vs_reference_u)));
                let solo_moves = report
                    .notes
                    .iter()
                    .any(|n| n.starts_with(analysis::SOLO_MOVES));
                report.recommendation = Some(RecommendationOut {
                    mode: rec.chosen.mode.clone(),
                    n: rec.chosen.n,
                    aggregate: rec.chosen.aggregate.mean,
                    aggregate_u: rec.chosen.aggregate.u,
                    vs_solo: rec.ratio.value,
                    vs_solo_u: rec.ratio.u,
                    vs_reference: vs_ref.map(|v| v.0),
                    vs_reference_u: vs_ref.and_then(|v| v.1),
                    pays: rec.pays(),
                    verdict: rec.verdict.as_str().into(),
                    margin: rec.margin,
                    best: cell_name(&rec.best.mode, rec.best.n),
                    as_good: rec
                        .as_good
                        .iter()
                        .map(|c| cell_name(&c.mode, c.n))
                        .collect(),
                    wide: rec
                        .wide
                        .iter()
                        .map(|c| report::wide_text(c, &rec, &report.unit))
                        .collect(),
                    text: report::recommendation_text(
                        &rec,
                        self.spec.min_gain,
                        &report.unit,
                        vs_ref,
                        solo_moves,
                    ),
                });
            }
        }
        report.wall_s = self.clock.now();
        if let (Some(old), Some(path)) = (&self.old, &self.spec.compare) {
            let c = compare::compare(&path.display().to_string(), old, report);
            report.comparison = Some(c);
        }
        let report = &self.report;
        out!("{}", report::table(report));
        let dir = &self.out;
        let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
            dir.write(name, bytes).map_err(anyhow::Error::from)
        };
        write(
            store::BENCH_JSON,
            (serde_json::to_string_pretty(report)? + "\n").as_bytes(),
        )?;
        write(store::BENCH_CSV, &report::csv(report)?)?;
        write(
            store::BENCH_MEASUREMENTS_CSV,
            &report::measurements_csv(report)?,
        )?;
        let png = dir.shown(store::BENCH_PNG);
        let title = format!(
            "colloc bench: {}",
            report
                .gpu
                .as_ref()
                .map_or("aggregate throughput", |g| g.info.name.as_str())
        );
        let max_n = report.results.iter().map(|r| r.n).max().unwrap_or(1);
        let solo_point = report.row("solo", 1).and_then(|r| {
            let mean = r.aggregate?;
            let u = r.aggregate_u.unwrap_or(0.0);
            Some(BenchPoint {
                n: 1.0,
                mean,
                lo: mean - u,
                hi: mean + u,
            })
        });
        let drawn = chart::bench(
            &lines(report),
            solo_point,
            report.reference,
            max_n,
            &title,
            &report.unit,
            &png,
        )
        .and_then(|bytes| {
            dir.write(store::BENCH_PNG, &bytes)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = drawn {
            log::warn!("no plot: {e}");
        }
        errln!("colloc bench: reports in {}", dir.path().display());
        Ok(())
    }
}

/// Every measured configuration but solo, with the cells whose repeats stayed wide
/// marked ([`answer::wide_cells`]).
fn judged_candidates(report: &Report) -> Vec<Candidate> {
    let mut cands: Vec<Candidate> = report
        .results
        .iter()
        .filter(|r| r.status == Status::Measured && r.mode != "solo")
        .filter_map(|r| {
            Some(Candidate {
                mode: r.mode.clone(),
                n: r.n,
                aggregate: r.spread()?,
                wide: None,
            })
        })
        .collect();
    let spreads: Vec<Spread> = cands.iter().map(|c| c.aggregate).collect();
    for (c, w) in cands.iter_mut().zip(answer::wide_cells(&spreads)) {
        c.wide = w;
    }
    cands
}

/// `mps:N` against unlimited MPS at the same N, where both were measured.
fn mps_limit(report: &Report) -> Option<MpsLimit> {
    let limited = report
        .results
        .iter()
        .find(|r| r.mode.starts_with("mps:") && r.status == Status::Measured)?;
    let n = limited.n;
    let unlimited = report.row("mps", n)?;
    let r = stats::ratio(&limited.spread()?, &unlimited.spread()?)?;
    let pct = 100 / n.max(1) as u32;
    // Better only beyond the noise and by the least rise that counts elsewhere: a
    // fraction of a percent between two steady runs is start-up, not the limit.
    let least = 1.0 + plan::MIN_RISE;
    let (better, verdict) = if r.lo() > 1.0 && r.value >= least {
        (
            "limited",
            format!("mps:{n} is better by {:.1} %", (r.value - 1.0) * 100.0),
        )
    } else if r.hi() < 1.0 && 1.0 / r.value >= least {
        (
            "unlimited",
            format!(
                "unlimited mps is better by {:.1} %",
                (1.0 / r.value - 1.0) * 100.0
            ),
        )
    } else {
        (
            "neither",
            format!(
                "the two cannot be told apart (within the noise, or less than {:.0} % apart)",
                plan::MIN_RISE * 100.0
            ),
        )
    };
    let text = format!(
        "mps:{n} (each copy limited to {pct} % of the SMs and 1/{n} of the memory) against unlimited mps, {n} copies: {} vs {} {} ({}): {verdict}",
        pm(limited.aggregate.unwrap_or(0.0), limited.aggregate_u, 1),
        pm(unlimited.aggregate.unwrap_or(0.0), unlimited.aggregate_u, 1),
        report.unit,
        times(r.value, r.u),
    );
    Some(MpsLimit {
        n,
        thread_percentage: pct,
        ratio: r.value,
        ratio_u: r.u,
        better: better.into(),
        text,
    })
}

/// The MIG counts of `--counts auto`: the GPU's largest equal layouts (the H200's: 2, 3
/// and 7 instances), from colloc's catalog of the model.
fn mig_auto_counts(gpu: Option<&BenchGpu>) -> Vec<usize> {
    let fallback = vec![2, 3, 7];
    let Some(g) = gpu else { return fallback };
    let Ok(cat) = colloc_core::mig::builtin_catalog(&g.info.name) else {
        return fallback;
    };
    let layouts: Vec<(u32, usize)> = [7u32, 4, 3, 2, 1]
        .iter()
        .filter_map(|&s| {
            cat.plan(&MigRequest::Fill(ProfileSel::Short(s)))
                .ok()
                .map(|p| (s, p.len()))
        })
        .collect();
    let counts = plan::mig_auto_counts(&layouts);
    if counts.is_empty() {
        fallback
    } else {
        counts
    }
}

/// Why the MIG mode cannot run here, or `None` where colloc may reconfigure the GPU.
/// colloc bench never changes MIG mode itself.
fn mig_unavailable(gpu: Option<&BenchGpu>, config: &Config) -> Option<String> {
    let Some(g) = gpu else {
        return Some(
            "needs NVML to plan and create MIG instances, and NVML is not available".into(),
        );
    };
    match g.info.mig_mode.map(|m| m.current) {
        None => Some(format!("{} does not support MIG", g.info.name)),
        Some(false) if !config.allow_mig_mode_change => Some(format!(
            "MIG mode is off on GPU {} and the node config does not let colloc switch it (allow_mig_mode_change = false)",
            g.info.index
        )),
        Some(false) => Some(format!(
            "MIG mode is off on GPU {}; colloc bench does not switch it (a switch may need a GPU reset): enable it first",
            g.info.index
        )),
        Some(true) if !is_root() => Some(
            "creating MIG instances needs root (run on a node where colloc may reconfigure the GPU)".into(),
        ),
        Some(true) => None,
    }
}

/// The MIG layouts tried for `n` copies, largest instances first: `mig:7g` for one,
/// then `mig:4gx1`, `mig:3gx2`, `mig:2gx3`, `mig:1gx7` and so on as the GPU allows.
fn mig_layouts(n: usize) -> Vec<String> {
    [7, 4, 3, 2, 1]
        .iter()
        .filter(|&&s| s * n <= 7)
        .map(|s| {
            if n == 1 && *s == 7 {
                "mig:7g".to_string()
            } else {
                format!("mig:{s}gx{n}")
            }
        })
        .collect()
}

/// A job id for bench's own journal: above Slurm's largest job id (0x03FF0000), so it
/// never names a real job's journal, and distinct per process.
fn bench_job_id() -> u32 {
    4_000_000_000 + std::process::id() % 100_000_000
}

fn is_root() -> bool {
    // /proc/self/status "Uid:" real effective saved fs.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloc_core::gpu::GpuInfo;

    fn gpu(mig: Option<bool>) -> BenchGpu {
        BenchGpu {
            info: GpuInfo {
                index: 0,
                name: "NVIDIA H200".into(),
                uuid: "GPU-x".into(),
                memory_total: 1,
                mig_mode: mig.map(|m| colloc_core::gpu::MigMode {
                    current: m,
                    pending: m,
                }),
            },
            driver: None,
        }
    }

    #[test]
    fn mig_is_skipped_with_the_reason_that_applies() {
        let cfg = Config::default();
        assert!(mig_unavailable(None, &cfg).unwrap().contains("NVML"));
        assert!(mig_unavailable(Some(&gpu(None)), &cfg)
            .unwrap()
            .contains("does not support MIG"));
        let off = mig_unavailable(Some(&gpu(Some(false))), &cfg).unwrap();
        assert!(off.contains("allow_mig_mode_change = false"), "{off}");
        let may = Config {
            allow_mig_mode_change: true,
            ..Config::default()
        };
        let off = mig_unavailable(Some(&gpu(Some(false))), &may).unwrap();
        assert!(off.contains("enable it first"), "{off}");
        assert_eq!(
            mig_unavailable(Some(&gpu(Some(true))), &cfg).is_none(),
            is_root()
        );
    }

    #[test]
    fn mig_auto_counts_come_from_the_models_catalog() {
        let mut g = gpu(Some(true));
        assert_eq!(mig_auto_counts(Some(&g)), [2, 3, 7]);
        g.info.name = "NVIDIA A30".into();
        assert_eq!(mig_auto_counts(Some(&g)), [2, 4]);
        g.info.name = "no such GPU".into();
        assert_eq!(mig_auto_counts(Some(&g)), [2, 3, 7]);
        assert_eq!(mig_auto_counts(None), [2, 3, 7]);
    }

    #[test]
    fn the_plot_joins_solo_to_naive_only_where_naive_ran() {
        use crate::bench::report::tests::{measurement, report};
        let mut r = report();
        let mut mps = ConfigResult::new("mps", 2);
        mps.add(measurement(1, 2, 190.0), vec![]);
        mps.add(measurement(2, 4, 210.0), vec![]);
        mps.settle();
        r.results.push(mps);
        let l = lines(&r);
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].0, "mps");
        let p = l[0].1[0];
        // mean 200, u = 2 x max(sd/√2 = 10, √2/2) = 20: the error bar.
        assert_eq!((p.n, p.mean, p.lo, p.hi), (2.0, 200.0, 180.0, 220.0));
        let mut naive = ConfigResult::new("naive", 2);
        naive.add(measurement(1, 3, 150.0), vec![]);
        naive.settle();
        r.results.push(naive);
        let l = lines(&r);
        let naive = l.iter().find(|(m, _)| m == "naive").unwrap();
        let ns: Vec<f64> = naive.1.iter().map(|p| p.n).collect();
        assert_eq!(ns, [1.0, 2.0]);
        assert_eq!(naive.1[0].mean, 100.0);
    }

    #[test]
    fn the_mps_limit_is_better_only_beyond_the_noise_and_five_percent() {
        use crate::bench::report::tests::{measurement, report};
        let with = |limited: f64| {
            let mut r = report();
            for (mode, v) in [("mps", 200.0), ("mps:2", limited)] {
                let mut row = ConfigResult::new(mode, 2);
                row.add(measurement(1, 2, v), vec![]);
                row.add(measurement(2, 4, v), vec![]);
                row.settle();
                r.results.push(row);
            }
            mps_limit(&r).unwrap()
        };
        // ± 1.4 on 200 (the windows' se 1.0 each): 1 % apart is beyond it, but not 5 %.
        let close = with(202.0);
        assert_eq!(close.better, "neither", "{close:?}");
        assert!(
            close.text.contains("cannot be told apart"),
            "{}",
            close.text
        );
        let worse = with(160.0);
        assert_eq!((worse.better.as_str(), worse.n), ("unlimited", 2));
        assert_eq!(worse.thread_percentage, 50);
        assert!(
            worse.text.contains("unlimited mps is better by 25.0 %"),
            "{}",
            worse.text
        );
        assert_eq!(with(230.0).better, "limited");
    }

    #[test]
    fn mig_layouts_go_from_largest_instances_down() {
        assert_eq!(mig_layouts(1)[0], "mig:7g");
        assert_eq!(mig_layouts(2), ["mig:3gx2", "mig:2gx2", "mig:1gx2"]);
        assert_eq!(mig_layouts(3), ["mig:2gx3", "mig:1gx3"]);
        assert_eq!(mig_layouts(7), ["mig:1gx7"]);
        assert!(mig_layouts(8).is_empty());
    }
}
