//! The prolog's and epilog's MPS path on a real NVIDIA GPU (the lent H200), as root, with
//! the daemon running as an unprivileged user (`nobody`): the root-owned tree with the
//! user's leaves, the real `nvidia-cuda-mps-control` started and stopped through memory
//! files, and a daemon its user stopped (SIGSTOP) killed within the budget.
//!
//! Run there as root with the built test binary and `--ignored --test-threads=1`. It never
//! changes the card's settings (no MIG, no compute mode): it starts MPS daemons only and
//! stops every one it starts. `COLLOC_NVML_LIBRARY` names the library (default
//! `libnvidia-ml.so.1`, then `/usr/local/nvidia/lib64/libnvidia-ml.so.1`);
//! `COLLOC_MPS_CONTROL` the control program (default: found as the prolog finds it). With
//! the fake library, its state in `COLLOC_FAKE_NVML_STATE` and the stand-in control
//! program of `tests/fake-mps`, they also run without a GPU.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Instant;

use colloc_core::config::Config;
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};

const NOBODY: (u32, u32) = (65534, 65534);

fn nvml() -> (NvmlGpus, String) {
    let candidates = match std::env::var("COLLOC_NVML_LIBRARY") {
        Ok(l) => vec![l],
        Err(_) => vec![
            "libnvidia-ml.so.1".to_string(),
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1".to_string(),
        ],
    };
    for lib in &candidates {
        if let Ok(g) = NvmlGpus::open(lib) {
            return (g, lib.clone());
        }
    }
    panic!("no NVML in {candidates:?}");
}

/// A node config in a fresh directory that `nobody` can traverse (its pipe directory
/// lies below it).
fn node(dir: &std::path::Path, lib: &str) -> Config {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Config {
        state_dir: dir.join("state"),
        run_dir: dir.join("run"),
        nvml_library: lib.to_string(),
        mps_control: std::env::var("COLLOC_MPS_CONTROL")
            .unwrap_or_else(|_| Config::default().mps_control),
        ..Config::default()
    }
}

fn root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

fn apply(cfg: &Config, gpus: &NvmlGpus, job: u32) -> Vec<(String, String)> {
    let spec = JobSpec {
        job,
        uid: NOBODY.0,
        gid: NOBODY.1,
        gpus: vec![0],
        mode: "mps".parse().unwrap(),
    };
    match reconfig::prolog(cfg, gpus, &spec).unwrap() {
        Outcome::Applied(env) => env,
        other => panic!("not applied: {other:?}"),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_real_daemon_runs_as_the_user_in_its_leaves_and_is_stopped() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (gpus, lib) = nvml();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = node(tmp.path(), &lib);
    assert!(
        cfg.mps_control_path().is_some(),
        "nvidia-cuda-mps-control not found"
    );
    let env = apply(&cfg, &gpus, 1);
    let pipe = env
        .iter()
        .find(|(k, _)| k == "CUDA_MPS_PIPE_DIRECTORY")
        .map(|(_, v)| std::path::PathBuf::from(v))
        .unwrap();
    for (p, owner) in [
        (cfg.run_dir.join("job-1"), 0),
        (cfg.run_dir.join("job-1/gpu0"), 0),
        (pipe.clone(), NOBODY.0),
    ] {
        assert_eq!(
            std::fs::metadata(&p).unwrap().uid(),
            owner,
            "{}",
            p.display()
        );
    }
    let j = reconfig::job_state(&cfg, 1).unwrap().unwrap();
    let procs = mps::daemon_processes(&j.mps[0], NOBODY.0);
    assert!(!procs.is_empty(), "no daemon of nobody's found");
    let t = Instant::now();
    let r = reconfig::restore(&cfg, None, 1).unwrap();
    println!(
        "restore of a real daemon: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        r.killed.is_empty(),
        "the daemon did not quit: killed {:?}",
        r.killed
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert!(procs.iter().all(|p| p.gone()));
    assert!(!cfg.run_dir.join("job-1").exists());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_stopped_real_daemon_is_killed_within_the_budget() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (gpus, lib) = nvml();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = node(tmp.path(), &lib);
    apply(&cfg, &gpus, 2);
    let j = reconfig::job_state(&cfg, 2).unwrap().unwrap();
    let procs = mps::daemon_processes(&j.mps[0], NOBODY.0);
    assert!(!procs.is_empty());
    for p in &procs {
        p.signal(libc::SIGSTOP);
    }
    let t = Instant::now();
    let r = reconfig::restore(&cfg, None, 2).unwrap();
    let took = t.elapsed();
    println!(
        "restore of a stopped real daemon: {:.2} s",
        took.as_secs_f64()
    );
    assert!(took <= reconfig::MPS_RESTORE_BUDGET, "{took:?}");
    assert!(!r.killed.is_empty(), "a stopped daemon cannot quit");
    assert!(procs.iter().all(|p| p.gone()));
    assert!(!cfg.run_dir.join("job-2").exists());
}
