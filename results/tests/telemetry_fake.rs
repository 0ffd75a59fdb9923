//! The GPU telemetry sampler (`colloc_results::telemetry`) against the fake libnvidia-ml
//! (`tests/fake-nvml`), whose H200 draws a constant 100 W and reports the memory and SM
//! utilization the test attaches to a pid. The fake is a dev-dependency, so its library
//! lands next to this test binary (`COLLOC_FAKE_NVML_LIB` overrides).

use std::sync::Arc;
use std::time::{Duration, Instant};

use colloc_core::nvml::NvmlGpus;
use colloc_results::telemetry::{self, NvmlProbe, Sampler, SamplerConfig};
use fake_nvml::state::State;
use fake_nvml::store::{ctl_change, now_ms, Locked};

#[test]
fn the_sampler_reads_memory_utilization_and_shares_out_energy() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    // The only test in this binary: the process environment is its own.
    std::env::set_var("COLLOC_FAKE_NVML_STATE", &state);
    let mut fresh = State::fresh_from_list("H200", now_ms()).unwrap();
    fresh.gpus[0].mig_current = false; // utilization is NOT_SUPPORTED in MIG mode
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let nvml =
        Arc::new(NvmlGpus::open(&fake_nvml::locate::library().display().to_string()).unwrap());
    // Two slots on GPU 0.
    let map = telemetry::resolve(nvml.nvml(), &[Some("0".into()), Some("0".into())]);
    assert_eq!(map.slot_gpu, vec![Some(0), Some(0)]);
    assert!(map.gpus[0].name.contains("H200"), "{:?}", map.gpus);
    let me = std::process::id();
    let sid = telemetry::session_of(me).unwrap();
    ctl_change(&state, |s| s.attach(0, None, me, 2048, 40)).unwrap();
    let t0 = Instant::now();
    let sampler = Sampler::start(
        Box::new(NvmlProbe::new(Arc::clone(&nvml), &map)),
        map,
        SamplerConfig {
            interval: Duration::from_millis(50),
            process_util: true,
            base: Instant::now(),
        },
    );
    // Attempt 1 holds this process (its session); attempt 2 holds nothing on the GPU.
    sampler.begin(1, 0);
    sampler.session(1, sid);
    sampler.begin(2, 1);
    sampler.session(2, 1);
    std::thread::sleep(Duration::from_millis(2300));
    let a = sampler.end(1).expect("figures of attempt 1");
    let b = sampler.end(2).expect("figures of attempt 2");
    std::thread::sleep(Duration::from_millis(300));
    let (totals, history) = sampler.finish();
    let elapsed = t0.elapsed().as_secs_f64();
    assert_eq!(a.peak_memory_bytes, Some(2048 * 1024 * 1024), "{a:?}");
    let util = a.mean_util_percent.expect("per-process utilization");
    assert!(util > 0.0 && util <= 40.0, "{a:?}");
    assert_eq!(b.peak_memory_bytes, None, "{b:?}");
    assert_eq!(b.mean_util_percent, Some(0.0), "idle on the GPU: {b:?}");
    // Both were active (nearly) the same time: (nearly) equal shares, adding up to the
    // runs' energy exactly.
    let (ea, eb) = (a.energy_j.unwrap(), b.energy_j.unwrap());
    assert!((ea - eb).abs() < 0.03 * ea, "{ea} vs {eb}");
    let g = &totals[0];
    let runs = g.runs_energy_j.unwrap();
    assert!((ea + eb - runs).abs() < 1e-6, "{ea} + {eb} vs {runs}");
    let total = g.energy_j.unwrap();
    assert!((runs + g.idle_energy_j.unwrap() - total).abs() < 1e-6);
    // 100 W from the first reading to the last: at least the 2.3 s the attempts ran, at
    // most the time the sampler was there.
    assert!(
        total >= 100.0 * 2.3 * 0.95 && total <= 100.0 * elapsed + 1.0,
        "{total} J in {elapsed} s"
    );
    assert!(g.peak_used_bytes.unwrap() >= 2048 * 1024 * 1024);
    assert!(history[0].len() > 10, "{}", history[0].len());
}
