//! One measurement: a configuration's copies run at once through the engine, sampled on
//! the GPU, read over their common window with its noise from the window's blocks, and
//! recorded in the configuration's row.

use std::sync::Arc;

use colloc_results::telemetry::{GpuTotals, Reading, Sampler};

use super::{
    Cell, Ctx, Interrupted, Kind, Taken, BLOCKS, SAMPLE_EVERY, STOP_GRACE, WARMUP_RUN_MAX,
};
use crate::engine::copies::{self, Window};
use crate::engine::launch::LaunchSpec;
use crate::engine::pack::{Job, LogFile, Slot};
use colloc_results::bench::report::{pm, secs, BusySource, ConfigResult, Measurement};
use colloc_results::bench::stats::{self, Obs};
use colloc_results::rules::throughput::Sample;
use colloc_results::rules::window::Measured;
use colloc_results::telemetry::attempts;

impl Ctx<'_> {
    /// Measure `cell` in `round` and record it; its observation where it was measured.
    pub(super) fn measure(
        &mut self,
        cell: Cell,
        round: u32,
        env: &[(String, String)],
        devices: Option<&[String]>,
    ) -> Result<Option<Obs>, Interrupted> {
        let t = self.take(cell, round, env, devices)?;
        Ok(self.record(cell, round, t, None))
    }

    pub(super) fn record(
        &mut self,
        cell: Cell,
        round: u32,
        t: Taken,
        layout: Option<String>,
    ) -> Option<Obs> {
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

    /// Run `cell`'s copies at once and measure them (copy `i` on `devices[i]` where
    /// given: MIG instances). Round 0 is the warm-up run.
    pub(super) fn take(
        &mut self,
        cell: Cell,
        round: u32,
        extra_env: &[(String, String)],
        devices: Option<&[String]>,
    ) -> Result<Taken, Interrupted> {
        self.check_signal()?;
        let seq = self.seq;
        self.seq += 1;
        let what = self.describe(cell, round);
        errln!("colloc bench: {what} ...");
        let started = self.now();
        let copies = self.copies(cell, round, extra_env, devices);
        let duration = if round == 0 {
            self.spec.duration.min(WARMUP_RUN_MAX)
        } else {
            self.spec.duration
        };
        // Each copy is read as `colloc run` reads each run: its own processes.
        let mps = matches!(cell.kind, Kind::Mps | Kind::MpsLimited);
        let sampler = self.nvml.as_ref().map(|nvml| {
            attempts::sampler_for_devices(nvml, &copies.devices, mps, SAMPLE_EVERY, self.clock.t0)
        });
        let out = copies::run(
            self.launcher,
            self.signals,
            self.clock,
            copies.slots,
            copies.jobs,
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
        let logs = copies.logs;
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
        if let Some(why) = &out.failure {
            return Ok(fail(why.clone(), logs));
        }
        // Lines after the stop (a copy's shutdown) do not count.
        let samples: Vec<Vec<Sample>> = out
            .samples
            .iter()
            .map(|s| s.iter().copied().filter(|x| x.t <= out.stop_t).collect())
            .collect();
        let min_len = (duration.as_secs_f64() * 0.5).max(0.2);
        let m = match Measured::over(&samples, self.spec.warmup.as_secs_f64(), min_len) {
            Ok(m) => m,
            Err(e) => return Ok(fail(e.to_string(), logs)),
        };
        let se = window_se(&samples, &m);
        let fig = gpu_figures(&out, gpu_read.as_ref(), &m);
        let measurement = Measurement {
            round,
            seq,
            started_s: started,
            wall_s: wall,
            window: [m.window.start, m.window.end],
            aggregate: m.aggregate(),
            se,
            per_copy: m.per_copy(),
            peak_memory_bytes: fig.peak,
            copy_peak_memory_bytes: fig.copy_peaks,
            mps_server_bytes: fig.mps_server,
            energy_j: fig.energy,
            sm_busy_percent: fig.busy.map(|b| b.0),
            sm_busy_source: fig.busy.map(|b| b.1),
            sm_occupancy_percent: fig.occupancy,
        };
        let vs_solo = cell.kind != Kind::Solo && round > 0;
        self.say_measured(&what, vs_solo, unit.as_deref(), &m, &measurement);
        Ok(Taken {
            result: Ok(measurement),
            wall,
            logs,
            unit,
        })
    }

    /// What a measurement is, as the progress lines name it.
    fn describe(&self, cell: Cell, round: u32) -> String {
        let n = cell.n;
        let mode = cell.mode();
        if round == 0 {
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
        }
    }

    /// `cell`'s copies for the engine: each with its log, its slot (its device and
    /// `extra_env`) and its job.
    fn copies(
        &self,
        cell: Cell,
        round: u32,
        extra_env: &[(String, String)],
        devices: Option<&[String]>,
    ) -> Copies {
        let n = cell.n;
        let argv = match cell.kind {
            Kind::Reference => self.spec.reference.clone().unwrap_or_default(),
            _ => self.spec.cmd.clone(),
        };
        let tag = if round == 0 {
            "warmup".to_string()
        } else {
            format!("{}-n{n}-r{round}", cell.slug())
        };
        let mut c = Copies {
            logs: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
            jobs: Vec::with_capacity(n),
            devices: Vec::with_capacity(n),
        };
        for i in 0..n {
            let name = format!("{tag}-{i}.log");
            let log = LogFile::new(Some(&self.logs), name.clone(), self.logs.shown(&name));
            c.logs.push(log.path.display().to_string());
            let dev = devices
                .and_then(|d| d.get(i))
                .unwrap_or(&self.device)
                .clone();
            c.devices.push(dev.clone());
            let mut env = vec![("CUDA_VISIBLE_DEVICES".to_string(), dev)];
            env.extend(extra_env.iter().cloned());
            c.slots.push(Slot { env });
            c.jobs.push(Job {
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
        c
    }

    /// The progress line of a measurement (`taken`, over the window `m`): aggregate ±
    /// its noise, window, (`vs_solo`) its ratio to solo, and what GPM read.
    fn say_measured(
        &self,
        what: &str,
        vs_solo: bool,
        unit: Option<&str>,
        m: &Measured,
        taken: &Measurement,
    ) {
        let u = unit
            .or(Some(self.report.unit.as_str()).filter(|u| !u.is_empty()))
            .unwrap_or(crate::engine::scan::FALLBACK_UNIT)
            .to_string();
        let vs = self
            .report
            .row("solo", 1)
            .and_then(ConfigResult::spread)
            .filter(|_| vs_solo)
            .map_or_else(String::new, |s| {
                format!(" ({:.2}x solo)", m.aggregate() / s.mean)
            });
        errln!(
            "colloc bench: {what}: {} {u} over {:.1} s{vs}, {}{}",
            pm(m.aggregate(), taken.se.map(|s| s * stats::COVERAGE), 1),
            m.window.len(),
            secs(taken.wall_s),
            gpm_note(taken)
        );
    }
}

/// A measurement's copies, ready for the engine.
struct Copies {
    /// Each copy's log, as the report names it.
    logs: Vec<String>,
    slots: Vec<Slot>,
    jobs: Vec<Job>,
    /// Each copy's device (`CUDA_VISIBLE_DEVICES`).
    devices: Vec<String>,
}

/// The noise of a window's aggregate: the window in blocks of two samples or more (of
/// the copy with fewest), at most [`BLOCKS`]; none below two blocks.
fn window_se(samples: &[Vec<Sample>], m: &Measured) -> Option<f64> {
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
    (k >= 2)
        .then(|| stats::block_se(&m.blocks(samples, k)))
        .flatten()
}

/// A measurement's GPU figures, where a sampler read them.
struct GpuFigures {
    /// The copies' peaks added up.
    peak: Option<u64>,
    /// Each copy's peak (empty without a sampler).
    copy_peaks: Vec<Option<u64>>,
    /// The MPS server's own peak.
    mps_server: Option<u64>,
    /// The GPU's energy over the window.
    energy: Option<f64>,
    /// How busy the copies kept the SMs, percent, and what says so ([`busy_of`]).
    busy: Option<(f64, BusySource)>,
    /// GPM's SM occupancy over the window, percent.
    occupancy: Option<f64>,
}

fn gpu_figures(
    out: &copies::Outcome,
    read: Option<&(Vec<GpuTotals>, Vec<Vec<Reading>>)>,
    m: &Measured,
) -> GpuFigures {
    let copy_peaks: Vec<Option<u64>> = out
        .gpu
        .iter()
        .map(|g| g.as_ref().and_then(|g| g.peak_memory_bytes))
        .collect();
    let Some((totals, history)) = read else {
        return GpuFigures {
            peak: None,
            copy_peaks: Vec::new(),
            mps_server: None,
            energy: None,
            busy: None,
            occupancy: None,
        };
    };
    let readings = history.first().map(Vec::as_slice).unwrap_or_default();
    let (start, end) = (m.window.start, m.window.end);
    let window_gpm =
        |f: fn(&Reading) -> Option<f64>| colloc_results::energy::mean_in(readings, start, end, f);
    GpuFigures {
        peak: copy_peaks
            .iter()
            .any(Option::is_some)
            .then(|| copy_peaks.iter().flatten().sum::<u64>()),
        energy: colloc_results::energy::energy_in(readings, m.window.start, m.window.end),
        mps_server: totals.iter().filter_map(|g| g.mps_server_peak_bytes).max(),
        busy: busy_of(&out.gpu, window_gpm(|r| r.sm_activity)),
        occupancy: window_gpm(|r| r.sm_occupancy).or_else(|| {
            out.gpu
                .iter()
                .filter_map(|g| g.as_ref()?.mean_sm_occupancy_percent)
                .reduce(f64::max)
        }),
        copy_peaks,
    }
}

/// How busy the copies kept the SMs, percent, best reading first: GPM's SM activity of
/// the GPU over the window (`window_gpm`; else while the copies ran), the share of the SMs
/// busy; else their own processes' utilization summed where NVML gives it per process;
/// else the GPU's mean utilization while they ran. Both utilizations are shares of time
/// (a ResNet at batch 128 that fills a seventh of an H100 read 28-35 %). A GPM reading
/// of no SM busy at all, over copies that did work, says GPM saw none of it: the
/// utilization is taken instead.
fn busy_of(
    gpu: &[Option<colloc_results::telemetry::AttemptGpu>],
    window_gpm: Option<f64>,
) -> Option<(f64, BusySource)> {
    let gpm = window_gpm.or_else(|| {
        gpu.iter()
            .filter_map(|g| g.as_ref()?.mean_sm_activity_percent)
            .reduce(f64::max)
    });
    if let Some(a) = gpm.filter(|a| *a > 0.0) {
        return Some((a.min(100.0), BusySource::Gpm));
    }
    let own: Vec<f64> = gpu
        .iter()
        .filter_map(|g| g.as_ref()?.mean_util_percent)
        .collect();
    if !own.is_empty() && own.len() == gpu.len() {
        return Some((own.iter().sum::<f64>().min(100.0), BusySource::ProcessUtil));
    }
    gpu.iter()
        .filter_map(|g| g.as_ref()?.mean_gpu_util_percent)
        .reduce(f64::max)
        .map(|u| (u, BusySource::GpuUtil))
}

/// What the progress line adds of GPM's readings, where it read them: nothing elsewhere,
/// so the line stays as it was.
fn gpm_note(m: &Measurement) -> String {
    match (m.sm_busy_source, m.sm_busy_percent) {
        (Some(BusySource::Gpm), Some(a)) => format!(
            ", SMs {a:.0} % busy ({}{})",
            BusySource::Gpm.describe(),
            m.sm_occupancy_percent
                .map_or(String::new(), |o| format!(", occupancy {o:.0} %"))
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloc_results::telemetry::AttemptGpu;

    fn copy(gpm: Option<f64>, own: Option<f64>, gpu: Option<f64>) -> Option<AttemptGpu> {
        Some(AttemptGpu {
            mean_sm_activity_percent: gpm,
            mean_util_percent: own,
            mean_gpu_util_percent: gpu,
            ..AttemptGpu::default()
        })
    }

    /// GPM over the window first, then GPM while the copies ran, then their own
    /// utilization summed (only where every copy has it), then the GPU's; a GPM zero
    /// counts as no reading.
    #[test]
    fn the_busy_share_prefers_gpm_then_own_then_gpu_utilization() {
        let two = [
            copy(Some(20.0), Some(30.0), Some(60.0)),
            copy(Some(22.0), Some(25.0), Some(60.0)),
        ];
        assert_eq!(busy_of(&two, Some(14.0)), Some((14.0, BusySource::Gpm)));
        assert_eq!(busy_of(&two, None), Some((22.0, BusySource::Gpm)));
        let no_gpm = [
            copy(None, Some(30.0), Some(60.0)),
            copy(None, Some(25.0), Some(60.0)),
        ];
        assert_eq!(
            busy_of(&no_gpm, None),
            Some((55.0, BusySource::ProcessUtil))
        );
        assert_eq!(
            busy_of(&no_gpm, Some(0.0)),
            Some((55.0, BusySource::ProcessUtil))
        );
        let one_own = [
            copy(None, Some(30.0), Some(60.0)),
            copy(None, None, Some(70.0)),
        ];
        assert_eq!(busy_of(&one_own, None), Some((70.0, BusySource::GpuUtil)));
        assert_eq!(busy_of(&[None], None), None);
    }

    #[test]
    fn the_progress_line_names_gpm_only_where_it_read() {
        let mut m = Measurement {
            sm_busy_percent: Some(14.2),
            sm_busy_source: Some(BusySource::Gpm),
            sm_occupancy_percent: Some(9.0),
            ..Measurement::default()
        };
        assert_eq!(
            gpm_note(&m),
            ", SMs 14 % busy (SM activity (GPM), occupancy 9 %)"
        );
        m.sm_busy_source = Some(BusySource::ProcessUtil);
        assert_eq!(gpm_note(&m), "");
    }
}
