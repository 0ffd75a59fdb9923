//! Per-process memory under MPS through NVML (the fake libnvidia-ml answering as driver
//! 580 did on the H200): three runs of known memory, each its own session, an MPS server
//! process and a process of no run on the same GPU. Each run's peak must be its own
//! processes' memory; the server's goes to no run.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colloc_core::nvml::NvmlGpus;
use colloc_results::telemetry::{self, NvmlProbe, Sampler, SamplerConfig};
use fake_nvml::state::{MpsRole, State};
use fake_nvml::store::{ctl_change, now_ms, Locked};

const MIB: u64 = 1 << 20;

/// A process in a session of its own, as the engine starts each attempt.
fn own_session(program: &std::path::Path) -> Child {
    let mut c = Command::new(program);
    c.arg("30");
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    c.spawn().unwrap()
}

struct Reap(Vec<Child>);
impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn each_mps_client_run_gets_its_own_memory_and_the_server_none() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    // The only test in this binary: the process environment is its own.
    std::env::set_var("COLLOC_FAKE_NVML_STATE", &state);
    let mut fresh = State::fresh_from_list("H200", now_ms()).unwrap();
    fresh.gpus[0].mig_current = false;
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let nvml =
        Arc::new(NvmlGpus::open(&fake_nvml::locate::library().display().to_string()).unwrap());
    let map = telemetry::resolve(nvml.nvml(), &vec![Some("0".to_string()); 3]);

    // The MPS server is named as the real one (the kernel keeps 15 bytes of it).
    let server_bin = dir.path().join("nvidia-cuda-mps-server");
    std::fs::copy("/bin/sleep", &server_bin).unwrap();
    let sleep = std::path::Path::new("/bin/sleep");
    let mut procs = Reap(vec![]);
    for _ in 0..3 {
        procs.0.push(own_session(sleep));
    }
    procs.0.push(own_session(&server_bin));
    procs.0.push(own_session(sleep)); // someone else's process on the GPU
    let pid: Vec<u32> = procs.0.iter().map(Child::id).collect();
    // Identical runs except their memory, so a mix-up shows.
    let run_mib = [1182, 2658, 3682];
    ctl_change(&state, |s| {
        for (i, mib) in run_mib.iter().enumerate() {
            s.attach(0, None, pid[i], *mib, 30)?;
            s.set_mps_role(pid[i], Some(MpsRole::Client))?;
        }
        s.attach(0, None, pid[3], 66, 0)?;
        s.set_mps_role(pid[3], Some(MpsRole::Server))?;
        s.attach(0, None, pid[4], 500, 0)
    })
    .unwrap();

    let sampler = Sampler::start(
        Box::new(NvmlProbe::new(Arc::clone(&nvml), &map)),
        map,
        SamplerConfig::new(Duration::from_millis(20), true, Instant::now()),
    );
    for (i, p) in pid.iter().take(3).enumerate() {
        sampler.begin(i as u64, i);
        sampler.session(i as u64, *p);
    }
    // `end` reads the GPU once more before it answers: every run is read at least once.
    let figs: Vec<_> = (0..3)
        .map(|i| sampler.end(i as u64).expect("figures"))
        .collect();
    let (totals, _) = sampler.finish();
    for (i, f) in figs.iter().enumerate() {
        assert_eq!(
            f.peak_memory_bytes,
            Some(run_mib[i] * MIB),
            "run {i}: {f:?}"
        );
        assert_eq!(f.mean_util_percent, None, "MPS: no per-process utilization");
    }
    assert_eq!(totals[0].mps_server_peak_bytes, Some(66 * MIB));
    assert_eq!(totals[0].others_peak_bytes, Some(500 * MIB));
}
