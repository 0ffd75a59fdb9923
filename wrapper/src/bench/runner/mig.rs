//! The MIG mode of `colloc bench`: whether it can run here, which counts and layouts it
//! tries, and one measurement on a layout made and undone through colloc's journaled
//! apply/restore.

use std::os::unix::fs::MetadataExt;

use colloc_core::config::Config;
use colloc_core::mode::{MigRequest, Mode, ProfileSel};
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};

use super::{Cell, Ctx, Kind, Taken};
use crate::bench::plan;
use colloc_results::bench::report::BenchGpu;
use colloc_results::bench::stats::Obs;

impl Ctx<'_> {
    /// MIG with `n` copies in `round`: the largest layout of `n` equal instances, made
    /// and undone through colloc's journaled apply/restore, one copy per instance.
    /// `Err`: no layout could be made (why); the measurement is recorded either way.
    pub(super) fn measure_mig(
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
}

/// The MIG counts of `--counts auto`: the GPU's largest equal layouts (the H200's: 2, 3
/// and 7 instances), from colloc's catalog of the model.
pub(super) fn mig_auto_counts(gpu: Option<&BenchGpu>) -> Vec<usize> {
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
pub(super) fn mig_unavailable(gpu: Option<&BenchGpu>, config: &Config) -> Option<String> {
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
    fn mig_layouts_go_from_largest_instances_down() {
        assert_eq!(mig_layouts(1)[0], "mig:7g");
        assert_eq!(mig_layouts(2), ["mig:3gx2", "mig:2gx2", "mig:1gx2"]);
        assert_eq!(mig_layouts(3), ["mig:2gx3", "mig:1gx3"]);
        assert_eq!(mig_layouts(7), ["mig:1gx7"]);
        assert!(mig_layouts(8).is_empty());
    }
}
