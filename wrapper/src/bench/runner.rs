//! Running the configurations: solo, then each mode at each count, with the MPS daemon
//! and MIG layout a mode needs, and writing the reports.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use colloc_core::config::Config;
use colloc_core::mode::{Mode, ModeKind};
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};

use super::analysis::{self, Candidate, Sample, Throughput};
use super::gpu::{GpuInfo, Monitor};
use super::metric::Metric;
use super::plot;
use super::proc::{self, Copy, Event, StopFlag};
use super::report::{self, ConfigResult, RecommendationOut, Report, Status};
use super::spec::{BenchMode, Spec};

/// How long copies get to stop on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Poll interval of the main loop.
const TICK: Duration = Duration::from_millis(50);

/// A signal asked colloc to stop.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}; all copies and daemons colloc started were stopped", proc::signal_name(*.0))]
pub struct Interrupted(pub i32);

struct Ctx<'a> {
    spec: &'a Spec,
    clock: Instant,
    stop: StopFlag,
    monitor: Option<Monitor>,
    gpu: Option<GpuInfo>,
    /// `CUDA_VISIBLE_DEVICES` for copies: the GPU's UUID, or the selector as given.
    device: String,
    logs: PathBuf,
    metric: Arc<Metric>,
}

/// Run the benchmark and write its reports.
///
/// # Errors
/// A signal ([`Interrupted`]), the solo run failing, or reports that cannot be written.
pub fn run(spec: &Spec, config: &Config) -> anyhow::Result<ExitCode> {
    let clock = Instant::now();
    let stop = StopFlag::install()?;
    let logs = spec.report_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let (gpu, monitor, gpu_note) = match Monitor::start(&config.nvml_library, &spec.gpu, clock) {
        Ok((info, m)) => (Some(info), Some(m), None),
        Err(why) => {
            log::warn!("no GPU figures (memory, energy): {why}");
            (None, None, Some(why))
        }
    };
    let device = gpu
        .as_ref()
        .map_or_else(|| spec.gpu.to_string(), |g| g.uuid.clone());
    let ctx = Ctx {
        spec,
        clock,
        stop,
        monitor,
        gpu,
        device,
        logs,
        metric: Arc::new(spec.metric.clone()),
    };
    let mut report = Report {
        schema: 1,
        command: spec.cmd.clone(),
        gpu: ctx.gpu.clone(),
        gpu_note,
        duration_s: spec.duration.as_secs_f64(),
        warmup_s: spec.warmup.as_secs_f64(),
        metric: spec.metric_pattern.clone(),
        solo: None,
        results: vec![],
        recommendation: None,
        wall_s: 0.0,
    };

    let outcome = measure_all(&ctx, config, &mut report);
    // Interrupted or not, what was measured is reported.
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
fn measure_all(ctx: &Ctx<'_>, config: &Config, report: &mut Report) -> anyhow::Result<()> {
    let solo = ctx.measure("solo", 1, &[], None)?;
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
                text: report::recommendation_text(&rec, ctx.spec.min_gain),
            });
        }
    }
    report.wall_s = ctx.clock.elapsed().as_secs_f64();
    out!("{}", report::table(report));
    let dir = &ctx.spec.report_dir;
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    write(
        "bench.json",
        &(serde_json::to_string_pretty(report)? + "\n"),
    )?;
    write("bench.csv", &report::csv(report))?;
    let png = dir.join("bench.png");
    if let Err(e) = plot::draw(report, &png) {
        log::warn!("no plot: {e}");
    }
    errln!("colloc bench: reports in {}", dir.display());
    Ok(())
}

impl Ctx<'_> {
    fn check_signal(&self) -> Result<(), Interrupted> {
        match self.stop.signal() {
            Some(sig) => Err(Interrupted(sig)),
            None => Ok(()),
        }
    }

    /// Every count of one mode, or one skip row per count with the reason.
    fn run_mode(
        &self,
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
        let total = self.gpu.as_ref().map(|g| g.memory_total);
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
            let r = self.measure(name, n, &env, solo)?;
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
        &self,
        config: &Config,
        counts: &[usize],
        solo_peak: Option<u64>,
        solo: Option<f64>,
        out: &mut Vec<ConfigResult>,
    ) -> anyhow::Result<()> {
        let name = "mig";
        let Some(gpu) = &self.gpu else {
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
            if let Err(why) = analysis::memory_fits(solo_peak, Some(gpu.memory_total), n) {
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
                    gpus: vec![gpu.index],
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
                    format!("no layout of {n} equal MIG instances fits {}", gpu.name)
                });
                out.push(ConfigResult::skipped(name, n, why.clone()));
                stopped = Some(why);
                continue;
            };
            errln!("colloc bench: made MIG layout {layout}");
            let measured = if devices.len() == n {
                self.measure_on(name, n, &[], Some(&devices), solo)
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
                    gpu.index
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

    /// Run `n` copies at once and measure them.
    fn measure(
        &self,
        mode: &str,
        n: usize,
        extra_env: &[(String, String)],
        solo: Option<f64>,
    ) -> anyhow::Result<ConfigResult> {
        self.measure_on(mode, n, extra_env, None, solo)
    }

    /// As [`Ctx::measure`], copy `i` on `devices[i]` where given (MIG instances).
    fn measure_on(
        &self,
        mode: &str,
        n: usize,
        extra_env: &[(String, String)],
        devices: Option<&[String]>,
        solo: Option<f64>,
    ) -> anyhow::Result<ConfigResult> {
        self.check_signal()?;
        errln!(
            "colloc bench: {mode} with {n} cop{} ...",
            if n == 1 { "y" } else { "ies" }
        );
        let baseline = self.monitor.as_ref().and_then(Monitor::latest);
        let (tx, rx) = mpsc::channel();
        let launch_t = self.clock.elapsed().as_secs_f64();
        let mut copies: Vec<Copy> = Vec::with_capacity(n);
        let mut logs = Vec::with_capacity(n);
        for i in 0..n {
            let log = self.logs.join(format!("{mode}-n{n}-{i}.log"));
            logs.push(log.display().to_string());
            let mut env: Vec<(String, String)> = vec![
                ("COLLOC_RUN_INDEX".into(), i.to_string()),
                ("COLLOC_RUN_NAME".into(), format!("bench-{mode}-n{n}-{i}")),
                (
                    "CUDA_VISIBLE_DEVICES".into(),
                    devices
                        .and_then(|d| d.get(i))
                        .unwrap_or(&self.device)
                        .clone(),
                ),
                ("PYTHONUNBUFFERED".into(), "1".into()),
            ];
            env.extend(extra_env.iter().cloned());
            match proc::spawn(i, &self.spec.cmd, &env, &log, &self.metric, self.clock, &tx) {
                Ok(c) => copies.push(c),
                Err(e) => {
                    proc::stop_all(&mut copies, STOP_GRACE);
                    return Ok(ConfigResult::failed(mode, n, format!("{e:#}"), logs));
                }
            }
        }
        drop(tx);
        let outcome = self.watch(&mut copies, &rx, launch_t);
        let stop_t = self.clock.elapsed().as_secs_f64();
        proc::stop_all(&mut copies, STOP_GRACE);
        let (mut samples, failure) = outcome?;
        // Lines still in flight from before the stop count; those after do not.
        while let Ok(ev) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Event::Rate { copy, t, rate } = ev {
                if t <= stop_t {
                    samples[copy].push(Sample { t, rate });
                }
            }
        }
        for s in &mut samples {
            s.sort_by(|a, b| a.t.total_cmp(&b.t));
        }
        if let Some(why) = failure {
            errln!("colloc bench: {mode} with {n}: failed: {why}");
            return Ok(ConfigResult::failed(mode, n, why, logs));
        }
        let min_len = (self.spec.duration.as_secs_f64() * 0.5).max(0.2);
        let tp = match Throughput::measure(&samples, self.spec.warmup.as_secs_f64(), min_len) {
            Ok(tp) => tp,
            Err(e) => {
                let why = e.to_string();
                errln!("colloc bench: {mode} with {n}: failed: {why}");
                return Ok(ConfigResult::failed(mode, n, why, logs));
            }
        };
        let mut r = ConfigResult::skipped(mode, n, "");
        r.status = Status::Measured;
        r.reason = None;
        r.logs = logs;
        r.window = Some([tp.window.start, tp.window.end]);
        r.aggregate = Some(tp.aggregate());
        r.per_copy = tp.per_copy();
        if let Some(m) = &self.monitor {
            let readings = m.readings(launch_t, stop_t);
            let peak = readings.iter().map(|x| x.used).max();
            r.peak_memory_bytes = peak.map(|p| p.saturating_sub(baseline.map_or(0, |b| b.used)));
            let energy: Vec<(f64, u64)> = m
                .readings(tp.window.start - 1.0, tp.window.end + 1.0)
                .iter()
                .filter_map(|x| x.energy_mj.map(|e| (x.t, e)))
                .collect();
            r.energy_j = analysis::energy_in(&energy, tp.window);
            if tp.total() > 0.0 {
                r.energy_per_sample_j = r.energy_j.map(|j| j / tp.total());
            }
        }
        let vs = solo.map_or_else(String::new, |s| {
            format!(" ({:.2}x solo)", tp.aggregate() / s)
        });
        errln!(
            "colloc bench: {mode} with {n}: {:.1} samples/s over {:.1} s{vs}",
            tp.aggregate(),
            tp.window.len()
        );
        Ok(r)
    }

    /// Collect throughput lines until the measurement ends: `duration` after every copy
    /// is past its warm-up, or a copy exits. Returns the lines and, for a failed run,
    /// why.
    #[allow(clippy::type_complexity)]
    fn watch(
        &self,
        copies: &mut [Copy],
        rx: &mpsc::Receiver<Event>,
        launch_t: f64,
    ) -> Result<(Vec<Vec<Sample>>, Option<String>), Interrupted> {
        let n = copies.len();
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
        let mut stop_at: Option<f64> = None;
        let warmup = self.spec.warmup.as_secs_f64();
        let startup = self.spec.startup_timeout.as_secs_f64();
        let mut seen_exit: HashSet<usize> = HashSet::new();
        loop {
            self.check_signal()?;
            match rx.recv_timeout(TICK) {
                Ok(Event::Rate { copy, t, rate }) => samples[copy].push(Sample { t, rate }),
                Ok(Event::Closed { .. }) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                // Every copy closed its output: nothing will arrive, so do not spin.
                Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(TICK),
            }
            while let Ok(ev) = rx.try_recv() {
                if let Event::Rate { copy, t, rate } = ev {
                    samples[copy].push(Sample { t, rate });
                }
            }
            let now = self.clock.elapsed().as_secs_f64();
            if stop_at.is_none() && samples.iter().all(|s| !s.is_empty()) {
                let ready = samples
                    .iter()
                    .filter_map(|s| s.first().map(|x| x.t))
                    .fold(f64::NEG_INFINITY, f64::max);
                stop_at = Some(ready + warmup + self.spec.duration.as_secs_f64());
            }
            if let Some(at) = stop_at {
                if now >= at {
                    return Ok((samples, None));
                }
            } else if now - launch_t > startup {
                let slow = samples.iter().position(|s| s.is_empty()).unwrap_or(0);
                return Ok((
                    samples,
                    Some(format!(
                        "copy {slow} printed no throughput line within {startup:.0} s (--metric {:?}); see {}",
                        self.spec.metric_pattern,
                        copies[slow].log.display()
                    )),
                ));
            }
            for c in copies.iter_mut() {
                if seen_exit.contains(&c.index) {
                    continue;
                }
                if let Some(status) = c.poll() {
                    seen_exit.insert(c.index);
                    if !status.success() {
                        return Ok((
                            samples,
                            Some(format!(
                                "copy {} exited ({status}) after {:.1} s: {}",
                                c.index,
                                now - launch_t,
                                c.log_tail(2)
                            )),
                        ));
                    }
                    // A clean exit ends the common window; the analysis decides whether
                    // enough of it was measured.
                    log::info!("copy {} finished on its own", c.index);
                    return Ok((samples, None));
                }
            }
        }
    }
}

/// Why the MIG mode cannot run here, or `None` where colloc may reconfigure the GPU.
/// colloc bench never changes MIG mode itself.
fn mig_unavailable(gpu: Option<&GpuInfo>, config: &Config) -> Option<String> {
    let Some(g) = gpu else {
        return Some(
            "needs NVML to plan and create MIG instances, and NVML is not available".into(),
        );
    };
    match g.mig_enabled {
        None => Some(format!("{} does not support MIG", g.name)),
        Some(false) if !config.allow_mig_mode_change => Some(format!(
            "MIG mode is off on GPU {} and the node config does not let colloc switch it (allow_mig_mode_change = false)",
            g.index
        )),
        Some(false) => Some(format!(
            "MIG mode is off on GPU {}; colloc bench does not switch it (a switch may need a GPU reset): enable it first",
            g.index
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

    fn gpu(mig: Option<bool>) -> GpuInfo {
        GpuInfo {
            index: 0,
            name: "NVIDIA H200".into(),
            uuid: "GPU-x".into(),
            memory_total: 1,
            driver: None,
            mig_enabled: mig,
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
