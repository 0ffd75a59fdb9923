//! Running the configurations of `colloc bench` through the pack engine: solo, then each
//! mode at each count as N copies of the workload on N slots, with the MPS daemon and MIG
//! layout a mode needs; each configuration measured over the copies' common window
//! ([`crate::engine::window`]), and the reports written.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::mode::{Mode, ModeKind};
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};
use colloc_core::telemetry::{GpuId, NvmlProbe, Reading, Sampler, SamplerConfig, SlotMap};

use super::analysis::{self, Candidate};
use super::args::{BenchMode, GpuSel, Spec};
use super::report::{self, BenchGpu, ConfigResult, RecommendationOut, Report, Status, SCHEMA};
use crate::engine::copies::{self, Window};
use crate::engine::launch::{LaunchSpec, LocalLauncher};
use crate::engine::pack::{Job, Slot};
use crate::engine::scan::Scanner;
use crate::engine::signals::{Signals, STOP};
use crate::engine::throughput::Sample;
use crate::engine::window::Measured;
use crate::engine::{signal_name, Clock};
use crate::export::chart;
use crate::record::store::write_atomic;

/// How long copies get to stop on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// GPU memory and energy sampling interval.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// A signal asked colloc to stop.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}; all copies and daemons colloc started were stopped", signal_name(*.0))]
pub struct Interrupted(pub i32);

struct Ctx<'a> {
    spec: &'a Spec,
    clock: Clock,
    launcher: &'a mut LocalLauncher,
    signals: &'a Signals,
    sampler: Option<Sampler>,
    gpu: Option<BenchGpu>,
    /// `CUDA_VISIBLE_DEVICES` for copies: the GPU's UUID, or the selector as given.
    device: String,
    logs: PathBuf,
    scanner: Arc<Scanner>,
}

/// The GPU under test through NVML, and a sampler of its memory and energy.
fn open_gpu(spec: &Spec, config: &Config, clock: Clock) -> Result<(BenchGpu, Sampler), String> {
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
    let map = SlotMap {
        gpus: vec![GpuId {
            index: info.index,
            uuid: info.uuid.clone(),
            name: info.name.clone(),
        }],
        ..SlotMap::default()
    };
    let nvml = Arc::new(nvml);
    let probe = NvmlProbe::new(Arc::clone(&nvml), &map);
    let sampler = Sampler::start(
        Box::new(probe),
        map,
        SamplerConfig {
            interval: SAMPLE_EVERY,
            process_util: false,
            base: clock.t0,
        },
    );
    Ok((BenchGpu { info, driver }, sampler))
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
    let clock = Clock::start();
    let logs = spec.report_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let (gpu, sampler, gpu_note) = match open_gpu(spec, config, clock) {
        Ok((g, s)) => (Some(g), Some(s), None),
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
    let mut ctx = Ctx {
        spec,
        clock,
        launcher,
        signals,
        sampler,
        gpu,
        device,
        logs,
        scanner: Arc::new(Scanner {
            throughput: spec.throughput.clone(),
            metrics: Vec::new(),
        }),
    };
    let mut report = Report {
        schema: SCHEMA,
        command: spec.cmd.clone(),
        gpu: ctx.gpu.clone(),
        gpu_note,
        duration_s: spec.duration.as_secs_f64(),
        warmup_s: spec.warmup.as_secs_f64(),
        metric: spec.throughput.describe(),
        unit,
        solo: None,
        results: vec![],
        recommendation: None,
        wall_s: 0.0,
    };

    let outcome = measure_all(&mut ctx, config, &mut report);
    // Interrupted or not, what was measured is reported.
    if let Some(s) = ctx.sampler.take() {
        s.finish();
    }
    finish(&ctx, &mut report)?;
    outcome?;
    let solo_ok = report
        .results
        .first()
        .is_some_and(|r| r.status == Status::Measured);
    let solo_reason = report.results.first().and_then(|r| r.reason.clone());
    if !solo_ok {
        anyhow::bail!(
            "the workload failed when run alone: {}",
            solo_reason.unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Solo, then every mode; stops early on a signal or when solo fails.
fn measure_all(ctx: &mut Ctx<'_>, config: &Config, report: &mut Report) -> anyhow::Result<()> {
    let (solo, unit) = ctx.measure("solo", 1, &[], None, None)?;
    if report.unit.is_empty() {
        report.unit = unit.unwrap_or_else(|| crate::engine::scan::FALLBACK_UNIT.into());
    }
    report.solo = solo.aggregate;
    let solo_ok = solo.status == Status::Measured;
    let solo_peak = solo.peak_memory_bytes;
    report.results.push(solo);
    if solo_ok {
        for &mode in &ctx.spec.modes {
            ctx.run_mode(mode, config, solo_peak, report.solo, &mut report.results)?;
        }
    }
    Ok(())
}

/// Fill in ratios and the recommendation, print the table, write JSON, CSV and PNG.
fn finish(ctx: &Ctx<'_>, report: &mut Report) -> anyhow::Result<()> {
    if let Some(solo) = report.solo {
        for r in &mut report.results {
            if let Some(a) = r.aggregate {
                r.vs_solo = Some(a / solo);
            }
            if let Some((mean, max)) = analysis::slowdown(solo, &r.per_copy) {
                r.slowdown_mean = Some(mean);
                r.slowdown_max = Some(max);
            }
        }
        let measured: Vec<Candidate> = report
            .results
            .iter()
            .filter(|r| r.status == Status::Measured)
            .filter_map(|r| {
                r.aggregate.map(|aggregate| Candidate {
                    mode: r.mode.clone(),
                    n: r.n,
                    aggregate,
                })
            })
            .collect();
        if let Some(rec) = analysis::recommend(solo, &measured, ctx.spec.min_gain) {
            report.recommendation = Some(RecommendationOut {
                mode: rec.best.mode.clone(),
                n: rec.best.n,
                aggregate: rec.best.aggregate,
                vs_solo: rec.speedup,
                pays: rec.pays,
                text: report::recommendation_text(&rec, ctx.spec.min_gain, &report.unit),
            });
        }
    }
    report.wall_s = ctx.clock.now();
    out!("{}", report::table(report));
    let dir = &ctx.spec.report_dir;
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let p = dir.join(name);
        write_atomic(&p, bytes).with_context(|| format!("cannot write {}", p.display()))
    };
    write(
        "bench.json",
        (serde_json::to_string_pretty(report)? + "\n").as_bytes(),
    )?;
    write("bench.csv", &report::csv(report)?)?;
    let png = dir.join("bench.png");
    let title = format!(
        "colloc bench: {}",
        report
            .gpu
            .as_ref()
            .map_or("aggregate throughput", |g| g.info.name.as_str())
    );
    let max_n = report.results.iter().map(|r| r.n).max().unwrap_or(1);
    if let Err(e) = chart::bench(
        &lines(report),
        report.solo,
        max_n,
        &title,
        &report.unit,
        &png,
    ) {
        log::warn!("no plot: {e}");
    }
    errln!("colloc bench: reports in {}", dir.display());
    Ok(())
}

/// Lines of the plot: each mode's measured (N, aggregate) points, naive with solo as
/// N = 1.
pub fn lines(report: &Report) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in &report.results {
        if r.status != Status::Measured || r.mode == "solo" {
            continue;
        }
        let Some(a) = r.aggregate else { continue };
        match out.iter_mut().find(|(m, _)| *m == r.mode) {
            Some((_, pts)) => pts.push((r.n as f64, a)),
            None => out.push((r.mode.clone(), vec![(r.n as f64, a)])),
        }
    }
    if let Some(solo) = report.solo {
        match out.iter_mut().find(|(m, _)| m == "naive") {
            Some((_, pts)) if !pts.iter().any(|p| p.0 == 1.0) => pts.push((1.0, solo)),
            Some(_) => {}
            None => out.insert(0, ("naive".into(), vec![(1.0, solo)])),
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
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

    /// Every count of one mode, or one skip row per count with the reason.
    fn run_mode(
        &mut self,
        mode: BenchMode,
        config: &Config,
        solo_peak: Option<u64>,
        solo: Option<f64>,
        out: &mut Vec<ConfigResult>,
    ) -> anyhow::Result<()> {
        let name = mode.as_str();
        let counts: Vec<usize> = self
            .spec
            .counts
            .iter()
            .copied()
            .filter(|&n| !(mode == BenchMode::Naive && n == 1)) // that is the solo run
            .collect();
        let skip_all = |why: String| -> Vec<ConfigResult> {
            counts
                .iter()
                .map(|&n| ConfigResult::skipped(name, n, why.clone()))
                .collect()
        };
        let kind = match mode {
            BenchMode::Naive => ModeKind::Naive,
            BenchMode::Mps => ModeKind::Mps,
            BenchMode::Mig => ModeKind::Mig,
        };
        if !config.allowed_modes.contains(&kind) {
            out.extend(skip_all(format!(
                "{name} is not in this node's allowed_modes"
            )));
            return Ok(());
        }
        let mut _mps_guard = None;
        let mut env: Vec<(String, String)> = Vec::new();
        match mode {
            BenchMode::Naive => {}
            BenchMode::Mps => match self.start_mps(config) {
                Ok(guard) => {
                    env = guard.daemon().env();
                    _mps_guard = Some(guard);
                }
                Err(why) => {
                    out.extend(skip_all(why));
                    return Ok(());
                }
            },
            BenchMode::Mig => {
                if let Some(why) = mig_unavailable(self.gpu.as_ref(), config) {
                    out.extend(skip_all(why));
                    return Ok(());
                }
                return self.run_mig(config, &counts, solo_peak, solo, out);
            }
        }
        let mut stopped: Option<String> = None;
        let total = self.gpu.as_ref().map(|g| g.info.memory_total);
        for n in counts {
            if let Some(why) = &stopped {
                out.push(ConfigResult::skipped(name, n, why.clone()));
                continue;
            }
            if let Err(why) = analysis::memory_fits(solo_peak, total, n) {
                out.push(ConfigResult::skipped(name, n, why.clone()));
                stopped = Some(why);
                continue;
            }
            let (r, _) = self.measure(name, n, &env, None, solo)?;
            if r.status == Status::Failed {
                stopped = Some(format!("not tried: {name} with {n} copies failed"));
            }
            out.push(r);
        }
        Ok(())
    }

    /// MIG: for each count, the largest layout of that many equal instances, made and
    /// undone through colloc's journaled apply/restore, one copy per instance.
    fn run_mig(
        &mut self,
        config: &Config,
        counts: &[usize],
        solo_peak: Option<u64>,
        solo: Option<f64>,
        out: &mut Vec<ConfigResult>,
    ) -> anyhow::Result<()> {
        let name = "mig";
        let Some(gpu) = self.gpu.clone() else {
            return Ok(());
        };
        let ctl = match NvmlGpus::open(&config.nvml_library) {
            Ok(c) => c,
            Err(e) => {
                out.extend(
                    counts
                        .iter()
                        .map(|&n| ConfigResult::skipped(name, n, e.to_string())),
                );
                return Ok(());
            }
        };
        let (uid, gid) = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let job = bench_job_id();
        let mut stopped: Option<String> = None;
        for &n in counts {
            self.check_signal()?;
            if let Some(why) = &stopped {
                out.push(ConfigResult::skipped(name, n, why.clone()));
                continue;
            }
            if let Err(why) = analysis::memory_fits(solo_peak, Some(gpu.info.memory_total), n) {
                out.push(ConfigResult::skipped(name, n, why.clone()));
                stopped = Some(why);
                continue;
            }
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
                match reconfig::prolog(config, &ctl, &spec) {
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
                let why = refused.unwrap_or_else(|| {
                    format!(
                        "no layout of {n} equal MIG instances fits {}",
                        gpu.info.name
                    )
                });
                out.push(ConfigResult::skipped(name, n, why.clone()));
                stopped = Some(why);
                continue;
            };
            errln!("colloc bench: made MIG layout {layout}");
            let measured = if devices.len() == n {
                self.measure(name, n, &[], Some(&devices), solo)
                    .map(|x| x.0)
            } else {
                Ok(ConfigResult::failed(
                    name,
                    n,
                    format!("layout {layout} gave {} devices, not {n}", devices.len()),
                    vec![],
                ))
            };
            // Undo the layout whatever happened, then report.
            reconfig::restore(config, Some(&ctl), job).map_err(|e| {
                anyhow::anyhow!(
                    "cannot restore GPU {} after MIG layout {layout}: {e}",
                    gpu.info.index
                )
            })?;
            let mut r = measured?;
            r.layout = Some(layout);
            if r.status == Status::Failed {
                stopped = Some(format!("not tried: {name} with {n} copies failed"));
            }
            out.push(r);
        }
        Ok(())
    }

    fn start_mps(&self, config: &Config) -> Result<mps::PrivateDaemon, String> {
        let program = config
            .mps_control_path()
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "MPS control program {} not found (looked in {}); set mps_control in the node config",
                    config.mps_control,
                    colloc_core::config::SYSTEM_BIN_DIRS.join(", ")
                )
            })?;
        let guard = mps::PrivateDaemon::start(&program, "colloc-bench", &self.device)
            .map_err(|e| format!("cannot start MPS: {e}"))?;
        errln!(
            "colloc bench: started MPS daemon ({})",
            guard.daemon().pipe_dir.display()
        );
        Ok(guard)
    }

    /// Run `n` copies at once and measure them (copy `i` on `devices[i]` where given:
    /// MIG instances). The result, and the unit the copies' lines had.
    fn measure(
        &mut self,
        mode: &str,
        n: usize,
        extra_env: &[(String, String)],
        devices: Option<&[String]>,
        solo: Option<f64>,
    ) -> anyhow::Result<(ConfigResult, Option<String>)> {
        self.check_signal()?;
        errln!(
            "colloc bench: {mode} with {n} cop{} ...",
            if n == 1 { "y" } else { "ies" }
        );
        let readings = |s: &Option<Sampler>| -> Vec<Reading> {
            s.as_ref()
                .map(|s| s.totals().1.into_iter().next().unwrap_or_default())
                .unwrap_or_default()
        };
        let baseline = readings(&self.sampler)
            .iter()
            .rev()
            .find_map(|r| r.used_bytes)
            .unwrap_or(0);
        let mut logs = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        let mut jobs = Vec::with_capacity(n);
        for i in 0..n {
            let log = self.logs.join(format!("{mode}-n{n}-{i}.log"));
            logs.push(log.display().to_string());
            let dev = devices
                .and_then(|d| d.get(i))
                .unwrap_or(&self.device)
                .clone();
            let mut env = vec![("CUDA_VISIBLE_DEVICES".to_string(), dev)];
            env.extend(extra_env.iter().cloned());
            slots.push(Slot { env });
            jobs.push(Job {
                run: i,
                attempt: 1,
                label: format!("{mode}-n{n}-{i}"),
                spec: LaunchSpec {
                    argv: self.spec.cmd.clone(),
                    env: vec![
                        ("COLLOC_RUN_INDEX".into(), i.to_string()),
                        ("COLLOC_RUN_NAME".into(), format!("bench-{mode}-n{n}-{i}")),
                        ("PYTHONUNBUFFERED".into(), "1".into()),
                    ],
                    cwd: None,
                },
                scanner: Arc::clone(&self.scanner),
                timeout: None,
                log,
            });
        }
        let out = copies::run(
            self.launcher,
            self.signals,
            self.clock,
            slots,
            jobs,
            &Window {
                warmup: self.spec.warmup,
                duration: self.spec.duration,
                startup_timeout: self.spec.startup_timeout,
                grace: STOP_GRACE,
                what: self.spec.throughput.describe(),
            },
        );
        if let Some(sig) = out.signal {
            return Err(Interrupted(sig).into());
        }
        let (launch_t, stop_t) = (out.launch_t, out.stop_t);
        // Lines after the stop (a copy's shutdown) do not count.
        let samples: Vec<Vec<Sample>> = out
            .samples
            .iter()
            .map(|s| s.iter().copied().filter(|x| x.t <= stop_t).collect())
            .collect();
        let copies = out;
        let unit = copies.unit.clone();
        if let Some(why) = copies.failure {
            errln!("colloc bench: {mode} with {n}: failed: {why}");
            return Ok((ConfigResult::failed(mode, n, why, logs), unit));
        }
        let min_len = (self.spec.duration.as_secs_f64() * 0.5).max(0.2);
        let m = match Measured::over(&samples, self.spec.warmup.as_secs_f64(), min_len) {
            Ok(m) => m,
            Err(e) => {
                let why = e.to_string();
                errln!("colloc bench: {mode} with {n}: failed: {why}");
                return Ok((ConfigResult::failed(mode, n, why, logs), unit));
            }
        };
        let mut r = ConfigResult::skipped(mode, n, "");
        r.status = Status::Measured;
        r.reason = None;
        r.logs = logs;
        r.window = Some([m.window.start, m.window.end]);
        r.aggregate = Some(m.aggregate());
        r.per_copy = m.per_copy();
        if self.sampler.is_some() {
            let readings = readings(&self.sampler);
            r.peak_memory_bytes = analysis::peak_memory(&readings, launch_t, stop_t, baseline);
            r.energy_j = analysis::energy_in(&readings, m.window);
            if m.total() > 0.0 {
                r.energy_per_sample_j = r.energy_j.map(|j| j / m.total());
            }
        }
        let vs = solo.map_or_else(String::new, |s| {
            format!(" ({:.2}x solo)", m.aggregate() / s)
        });
        errln!(
            "colloc bench: {mode} with {n}: {:.1} {} over {:.1} s{vs}",
            m.aggregate(),
            unit.as_deref()
                .unwrap_or(crate::engine::scan::FALLBACK_UNIT),
            m.window.len()
        );
        Ok((r, unit))
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
    fn mig_layouts_go_from_largest_instances_down() {
        assert_eq!(mig_layouts(1)[0], "mig:7g");
        assert_eq!(mig_layouts(2), ["mig:3gx2", "mig:2gx2", "mig:1gx2"]);
        assert_eq!(mig_layouts(3), ["mig:2gx3", "mig:1gx3"]);
        assert_eq!(mig_layouts(7), ["mig:1gx7"]);
        assert!(mig_layouts(8).is_empty());
    }
}
