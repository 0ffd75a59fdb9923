//! GPU figures as `colloc run` and `colloc bench` take and name them: one sampler per
//! pack of attempts (a run's slots, a bench cell's copies) started the same way, and one
//! wording of what each figure is. The rules themselves live in core:
//! [`crate::telemetry`] (memory and utilization per attempt) and
//! [`crate::energy`] (energy shares).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::telemetry::{self, GpuTotals, NvmlProbe, Sampler, SamplerConfig, SlotMap};
use colloc_core::nvml::NvmlGpus;

/// Start the GPU sampler over `map`'s slots; `mps`: the attempts are MPS clients.
pub fn sampler(
    nvml: &Arc<NvmlGpus>,
    map: SlotMap,
    mps: bool,
    interval: Duration,
    base: Instant,
) -> Sampler {
    let probe = NvmlProbe::new(Arc::clone(nvml), &map);
    Sampler::start(
        Box::new(probe),
        map,
        SamplerConfig::new(interval, mps, base),
    )
}

/// A sampler over slots given as their CUDA devices (index, GPU UUID or MIG UUID).
pub fn sampler_for_devices(
    nvml: &Arc<NvmlGpus>,
    devices: &[String],
    mps: bool,
    interval: Duration,
    base: Instant,
) -> Sampler {
    let slots: Vec<Option<String>> = devices.iter().cloned().map(Some).collect();
    let map = telemetry::resolve(nvml.nvml(), &slots);
    sampler(nvml, map, mps, interval, base)
}

/// MiB, as the tables show memory.
fn mib(b: u64) -> String {
    format!("{} MiB", b / (1024 * 1024))
}

/// What the MPS server held, where it was seen: attributed to nobody.
fn server_part(totals: &[GpuTotals]) -> String {
    let held: Vec<u64> = totals
        .iter()
        .filter_map(|g| g.mps_server_peak_bytes)
        .collect();
    match held.iter().max() {
        Some(b) => format!(
            "; the MPS server's memory (at most {}) is no one's",
            mib(*b)
        ),
        None => String::new(),
    }
}

/// The lines under `colloc run`'s table that say what its GPU columns are.
pub fn run_legend(mps: bool, totals: &[GpuTotals]) -> Vec<String> {
    let mut memory = "peak MiB: per run, the most GPU memory its own processes held at once \
                      (its session and process tree, from NVML's per-process lists; a MIG \
                      slot: its instance's memory)"
        .to_string();
    if mps {
        memory.push_str("; under MPS each client's own memory is its run's");
        memory.push_str(&server_part(totals));
    }
    if let Some(b) = totals.iter().filter_map(|g| g.others_peak_bytes).max() {
        memory.push_str(&format!(
            "; processes of no run (another user's, or one that left its run) held up to {}",
            mib(b)
        ));
    }
    let util = if mps {
        "util %: n/a under MPS (NVML counts every client's SM time to the MPS server)"
    } else {
        "util %: per run, its own processes' SM time (n/a on MIG slots); the GPU line below is device-wide"
    };
    vec![
        memory,
        util.to_string(),
        "energy J: the GPU's energy counter (device-wide) shared out among the runs active on \
         it by time share; the rest is idle energy"
            .to_string(),
    ]
}

/// The line under `colloc bench`'s table that says what its GPU columns are.
pub fn bench_legend(mps_seen: bool, server_bytes: Option<u64>) -> String {
    let mut s = "peak memory: the copies' own processes (NVML's per-process lists), each \
                 copy's peak, summed over copies; J/unit: the whole GPU's energy in the \
                 window over the work done in it"
        .to_string();
    if mps_seen {
        s.push_str("; under MPS each client's own memory is its copy's");
        if let Some(b) = server_bytes {
            s.push_str(&format!(
                ", the MPS server's (at most {}) no copy's",
                mib(b)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legends_say_who_gets_the_mps_server() {
        let g = GpuTotals {
            mps_server_peak_bytes: Some(66 << 20),
            ..GpuTotals::default()
        };
        let l = run_legend(true, &[g]);
        assert!(
            l[0].contains("the MPS server's memory (at most 66 MiB) is no one's"),
            "{l:?}"
        );
        assert!(l[1].starts_with("util %: n/a under MPS"));
        assert!(!run_legend(false, &[]).join(" ").contains("MPS server's"));
        let other = GpuTotals {
            others_peak_bytes: Some(500 << 20),
            ..GpuTotals::default()
        };
        assert!(run_legend(false, &[other])[0].contains("held up to 500 MiB"));
        assert!(bench_legend(true, Some(66 << 20)).contains("(at most 66 MiB) no copy's"));
        assert!(!bench_legend(false, None).contains("MPS"));
    }
}
