//! Running the configurations of `colloc bench` through the pack engine, in the order
//! of [`super::plan`]: a warm-up run (discarded), then rounds of solo, the reference
//! command, and each mode's counts as N copies of the workload on N slots with the MPS
//! daemon and MIG layout a mode needs; the closing solo run. Each measurement is taken
//! over the copies' common window ([`colloc_results::rules::window`]) with its noise from the
//! window's blocks; the figures and their spread are settled at the end and the reports
//! written.
//!
//! This file owns the run's state ([`Ctx`]), what a configuration is ([`Cell`]), the
//! report directory and GPU it opens, and the order of rounds (`measure_all`). The rest:
//! - [`budget`]: what `--budget` lets run, and what is said when it does not;
//! - [`modes`]: a mode's round 1, its repeats, the cells measured again;
//! - [`take`]: one measurement of a configuration's copies;
//! - [`mig`]: the MIG mode (availability, counts, layouts made and undone);
//! - [`finish`]: the figures settled, the recommendation, the reports written.

mod budget;
mod finish;
mod mig;
mod modes;
mod take;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::nvml::NvmlGpus;

use super::args::{BenchMode, GpuSel, Spec};
use super::plan::{self, Budget};
use crate::engine::launch::LocalLauncher;
use crate::engine::scan::Scanner;
use crate::engine::signals::{Signals, STOP};
use crate::engine::{signal_name, Clock};
use colloc_results::bench::answer;
use colloc_results::bench::compare;
use colloc_results::bench::host::Host;
use colloc_results::bench::report::{
    cell_name, secs, BenchGpu, Measurement, Report, Status, SCHEMA,
};
use colloc_results::record::store::{self, ReportDir};
use colloc_results::userfs::CheckedDir;

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

/// The budget ended the search of `mode` before `next` copies while the aggregate
/// still rose at `at`: an answer there is a lower bound, settled by about `settle_s`.
#[derive(Debug, Clone)]
struct RisingCut {
    mode: String,
    at: usize,
    next: usize,
    settle_s: f64,
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
    /// Where the budget ended a search while the aggregate still rose.
    rising_cut: Option<RisingCut>,
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
    let (dir, made) = ReportDir::create(&spec.report_dir)
        .map_err(colloc_results::userfs::UserFsError::into_anyhow)?;
    if made {
        return Ok(dir);
    }
    let logs = dir
        .dir()
        .subdir(store::LOGS_DIR, None)
        .map_err(colloc_results::userfs::UserFsError::into_anyhow)?;
    let old_logs = match &logs {
        Some(l) => l
            .entries()
            .map_err(colloc_results::userfs::UserFsError::into_anyhow)?,
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
    let gone = |e: colloc_results::userfs::UserFsError| e.into_anyhow().context("--replace");
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
            .map_err(colloc_results::userfs::UserFsError::into_anyhow)?,
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
        rising_cut: None,
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
                "colloc bench: budget {}: the warm-up run took {}; the search measures each count once first (the closing solo run kept in reserve), then repeats what could change the answer",
                secs(limit.as_secs_f64()),
                secs(self.now()),
            );
        }
        self.report.rounds = 1;
        if self.measure(Cell::SOLO, 1, &[], None)?.is_none() {
            return Ok(());
        }
        let peak = self.report.row("solo", 1).and_then(|r| {
            r.measurements
                .iter()
                .filter_map(|m| m.peak_memory_bytes)
                .max()
        });
        self.solo_peak = self.solo_peak.max(peak);
        let mut with_ref = false;
        if self.spec.reference.is_some() {
            match self.new_cell_fits(Cell::REFERENCE, None) {
                Ok(()) => with_ref = self.measure(Cell::REFERENCE, 1, &[], None)?.is_some(),
                Err(why) => self.skip_for_budget(Cell::REFERENCE, why),
            }
        }
        let mut found: Vec<Block> = Vec::new();
        for &mode in &self.spec.modes.clone() {
            if let Some(b) = self.explore(mode)? {
                found.push(b);
            }
        }
        self.repeat_what_matters(&found, with_ref)?;
        self.measure_limited(&mut found)?;
        self.remeasure_wide(&found, with_ref)?;
        // The closing solo run, after the last round.
        let last = self.report.rounds + 1;
        self.measure(Cell::SOLO, last, &[], None)?;
        Ok(())
    }

    /// Rounds 2 to `--repeat`: the reference (solo where there is none) and the cells
    /// that could still change the answer ([`answer::could_matter`], judged afresh each
    /// round), every other round in reverse; one round more where a cell came to matter
    /// late (a repeat pulled the best down) and has fewer than `--repeat` runs. The
    /// others are not repeated, and a note says which. A round that does not fit in
    /// whole is run in part (each measurement started only if it fits, the closing solo
    /// run kept), and is the last.
    fn repeat_what_matters(&mut self, found: &[Block], with_ref: bool) -> anyhow::Result<()> {
        let want = self.spec.repeat;
        if want < 2 {
            return Ok(());
        }
        let base = if with_ref {
            Cell::REFERENCE
        } else {
            Cell::SOLO
        };
        for round in 2..=want + 1 {
            let repeat = self.to_repeat(found);
            if repeat.is_empty() && round > want {
                break;
            }
            let part = !self.round_fits(round, &repeat, with_ref);
            if part && !self.repeat_fits(base, round) {
                self.skip_rounds(
                    round.min(want),
                    &format!("no time left for its {} run", base.mode()),
                );
                break;
            }
            self.report.rounds = round;
            self.measure(base, round, &[], None)?;
            for block in plan::in_round_order(&repeat, round) {
                self.repeat_block(&block, round)?;
            }
            if part {
                if round < want {
                    self.skip_rounds(round + 1, "the budget was spent");
                }
                break;
            }
        }
        let once: Vec<String> = found
            .iter()
            .flat_map(|b| &b.cells)
            .filter(|c| {
                self.report
                    .row(&c.mode(), c.n)
                    .is_some_and(|r| r.measurements.len() == 1)
            })
            .map(|c| cell_name(&c.mode(), c.n))
            .collect();
        let matter = answer::could_matter(&finish::judged_candidates(&self.report));
        let (kept_out, cut): (Vec<String>, Vec<String>) = once
            .into_iter()
            .partition(|name| !matter.iter().any(|(m, n)| cell_name(m, *n) == *name));
        if !kept_out.is_empty() {
            self.report.notes.push(format!(
                "measured once, as they could not change the answer (even their high end stays more than {:.0} % below the best's low end): {}",
                answer::AS_GOOD * 100.0,
                kept_out.join(", ")
            ));
        }
        if !cut.is_empty() {
            self.report.notes.push(format!(
                "measured once, as the budget held no repeat: {}",
                cut.join(", ")
            ));
        }
        Ok(())
    }

    /// The cells of `found` that could still change the answer and have fewer than
    /// `--repeat` runs, by mode.
    fn to_repeat(&self, found: &[Block]) -> Vec<Block> {
        let matter = answer::could_matter(&finish::judged_candidates(&self.report));
        let runs = |c: &Cell| {
            self.report
                .row(&c.mode(), c.n)
                .map_or(0, |r| r.measurements.len())
        };
        found
            .iter()
            .filter_map(|b| {
                let cells: Vec<Cell> = b
                    .cells
                    .iter()
                    .filter(|c| matter.iter().any(|k| k.0 == c.mode() && k.1 == c.n))
                    .filter(|c| runs(c) < self.spec.repeat as usize)
                    .copied()
                    .collect();
                (!cells.is_empty()).then_some(Block {
                    mode: b.mode,
                    cells,
                })
            })
            .collect()
    }

    fn learn_unit(&mut self, unit: Option<&str>) {
        if self.report.unit.is_empty() {
            if let Some(u) = unit {
                self.report.unit = u.to_string();
            }
        }
    }
}
