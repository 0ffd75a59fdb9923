//! `colloc run` GPU figures against the fake libnvidia-ml (`tests/fake-nvml`): each run
//! attaches itself to the fake H200 (by its pid, which is its session id), and the report
//! holds its memory, utilization and energy, and the GPU's energy.
//!
//! The fake is a dev-dependency, so its cdylib lands in `target/debug/deps/` next to
//! this test; `COLLOC_FAKE_NVML_LIB` overrides.

mod run_support;

use std::time::{Duration, Instant};

use fake_nvml::state::State;
use fake_nvml::store::{ctl_change, now_ms, Locked};
use run_support::{run, succeeded, Env};

/// Two runs on one fake H200 (constant 100 W), each attached to the fake GPU by its pid
/// with known memory and SM utilization. `mode_env`: the job environment (empty: outside
/// a job, naive). Returns the report and the table colloc printed.
fn two_runs_on_one_gpu(mode_env: &[(&str, String)]) -> (serde_json::Value, String) {
    let env = Env::new();
    let state = env.path().join("nvml-state.json");
    let mut fresh = State::fresh_from_list("H200", now_ms()).unwrap();
    // The fake's GPUs start in MIG mode, where NVML has no utilization figures.
    fresh.gpus[0].mig_current = false;
    // GPM (Hopper): 40 % of the SMs busy, 25 % of warps active, whatever runs.
    fresh
        .set_gpm(0, 40.0, 25.0, fake_nvml::store::now_us())
        .unwrap();
    let uuid = fresh.gpus[0].uuid.clone();
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let config = env.path().join("colloc.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\nallowed_modes = [\"naive\", \"mps\", \"mig\"]\nnvml_library = \"{}\"\n",
            fake_nvml::locate::library().display()
        ),
    )
    .unwrap();
    // Each run writes its pid, waits until the test has attached it, then reports
    // throughput for 2.5 s so the sampler (every 100 ms; utilization and energy at most
    // once a second) reads it after the attachment.
    let script = r#"echo $$ > "$MARK/$COLLOC_RUN_NAME.pid"; while [ ! -e "$MARK/$COLLOC_RUN_NAME.go" ]; do sleep 0.05; done; i=0; while [ $i -lt 25 ]; do echo "img/s=100"; sleep 0.1; i=$((i+1)); done"#;
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    cmd.args(env.colloc().get_args())
        .current_dir(env.path())
        .env("COLLOC_CONFIG", &config)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("MARK", env.mark())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("COLLOC_MODE");
    for (k, v) in mode_env {
        cmd.env(k, v.replace("GPU-UUID", &uuid));
    }
    cmd.args([
        "-j",
        "2",
        "-n",
        "2",
        "--interval",
        "100ms",
        "--",
        "sh",
        "-c",
        script,
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let cap = Instant::now() + Duration::from_secs(60);
    for (name, mem, util) in [("run1", 1000u64, 30u32), ("run2", 3000, 50)] {
        let pidfile = env.mark().join(format!("{name}.pid"));
        while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            assert!(Instant::now() < cap, "{name} never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        ctl_change(&state, |s| s.attach(0, None, pid, mem, util)).unwrap();
        std::fs::write(env.mark().join(format!("{name}.go")), "").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("NVML unavailable"), "{stderr}");
    let rep = env.report();
    let csv = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    assert!(csv.contains(",1000,") && csv.contains(",3000,"), "{csv}");
    (rep, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Energy per run is its time share of the GPU's measured energy: the shares add up to
/// what the GPU used while runs were active, never to a multiple of it.
fn check_energy(rep: &serde_json::Value) {
    let g = &rep["gpus"][0];
    let total = g["energy_j"].as_f64().unwrap();
    let runs_j = g["runs_energy_j"].as_f64().unwrap();
    let idle = g["idle_energy_j"].as_f64().unwrap();
    assert!((runs_j + idle - total).abs() < 1e-6, "{g}");
    let shares: f64 = ["run1", "run2"]
        .iter()
        .map(|n| run(rep, n)["gpu"]["energy_j"].as_f64().unwrap())
        .sum();
    assert!((shares - runs_j).abs() < 1e-6, "shares {shares} vs {g}");
    for n in ["run1", "run2"] {
        let e = run(rep, n)["gpu"]["energy_j"].as_f64().unwrap();
        assert!(e > 0.0 && e < runs_j, "{n}: {e} of {runs_j}");
    }
    // The fake draws 100 W: the GPU total is 100 J per second it was sampled (the first
    // reading to the last), which is at least the makespan.
    let makespan = rep["summary"]["makespan_s"].as_f64().unwrap();
    assert!(
        total >= 100.0 * makespan * 0.8,
        "{total} J over {makespan} s"
    );
    assert!((rep["summary"]["energy_j"].as_f64().unwrap() - total).abs() < 1e-6);
}

#[test]
fn gpu_memory_utilization_and_energy_come_from_nvml() {
    let (rep, table) = two_runs_on_one_gpu(&[]);
    let gpus = rep["gpus"].as_array().expect("GPU totals");
    assert_eq!(gpus.len(), 1);
    assert!(
        gpus[0]["name"].as_str().unwrap().contains("H200"),
        "{}",
        gpus[0]
    );
    for (name, mem, util) in [("run1", 1000u64, 30.0), ("run2", 3000, 50.0)] {
        let r = run(&rep, name);
        assert_eq!(r["device"], "0");
        let g = &r["gpu"];
        assert_eq!(
            g["peak_memory_bytes"].as_u64(),
            Some(mem * 1024 * 1024),
            "{name}: {g}"
        );
        // samples before the test attached the run count as idle, so the mean is at most util
        let u = g["mean_util_percent"].as_f64().unwrap();
        assert!(u > 0.0 && u <= util, "{name}: {g}");
        assert!(g["mean_gpu_util_percent"].as_f64().is_some(), "{name}: {g}");
        // GPM's figures are the whole GPU's, whoever runs: what the fake's SMs were set to.
        let a = g["mean_sm_activity_percent"].as_f64().unwrap();
        let o = g["mean_sm_occupancy_percent"].as_f64().unwrap();
        assert!(
            (a - 40.0).abs() < 0.5 && (o - 25.0).abs() < 0.5,
            "{name}: {g}"
        );
    }
    check_energy(&rep);
    assert!(
        table.contains("shared out to runs by time share"),
        "{table}"
    );
}

/// Under MPS NVML accounts every client's SM time to the MPS server: per-run utilization
/// is unavailable (null, "n/a"), not 0.
#[test]
fn under_mps_per_run_utilization_is_unavailable_not_zero() {
    let (rep, table) = two_runs_on_one_gpu(&[
        ("COLLOC_MODE", "mps".into()),
        ("COLLOC_DEVICES", "GPU-UUID".into()),
    ]);
    assert_eq!(rep["mode"], "mps");
    for name in ["run1", "run2"] {
        let g = &run(&rep, name)["gpu"];
        assert!(g["mean_util_percent"].is_null(), "{name}: {g}");
        assert!(g["peak_memory_bytes"].as_u64().is_some(), "{name}: {g}");
    }
    check_energy(&rep);
    let row = table
        .lines()
        .find(|l| l.starts_with("run1 "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" n/a "), "{row}");
}

#[test]
fn a_mig_slot_reports_its_instance_memory() {
    let env = Env::new();
    let state = env.path().join("nvml-state.json");
    let mut st = State::fresh_from_list("H200", now_ms()).unwrap();
    // one 3-slice GPU instance with a full compute instance
    let gi = st.create_gi(0, 9, None).unwrap();
    st.create_ci(0, gi, 2).unwrap();
    let mig_uuid = st.gpus[0].gis[0].cis[0].uuid.clone();
    Locked::open(&state).unwrap().write(&st).unwrap();
    let config = env.path().join("colloc.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\nallowed_modes = [\"naive\", \"mps\", \"mig\"]\nnvml_library = \"{}\"\n",
            fake_nvml::locate::library().display()
        ),
    )
    .unwrap();
    let script =
        r#"echo $$ > "$MARK/pid"; while [ ! -e "$MARK/go" ]; do sleep 0.05; done; sleep 2.5"#;
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    cmd.args(env.colloc().get_args())
        .current_dir(env.path())
        .env("COLLOC_CONFIG", &config)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("MARK", env.mark())
        // as the plugin sets it for sbatch --colloc=mig:3g
        .env("COLLOC_MODE", "mig:3g")
        .env("COLLOC_DEVICES", &mig_uuid)
        .env("COLLOC_SLOTS", "1")
        .args(["--interval", "100ms", "--", "sh", "-c", script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let cap = Instant::now() + Duration::from_secs(60);
    let pidfile = env.mark().join("pid");
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(Instant::now() < cap, "run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ctl_change(&state, |s| s.attach(0, Some(gi), pid, 2048, 10)).unwrap();
    std::fs::write(env.mark().join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    succeeded(&out);
    let rep = env.report();
    assert_eq!(rep["source"], "job");
    let r = run(&rep, "run1");
    assert_eq!(r["device"], mig_uuid.as_str());
    let g = &r["gpu"];
    assert_eq!(
        g["peak_memory_bytes"].as_u64(),
        Some(2048 * 1024 * 1024),
        "{g}"
    );
    assert!(
        g["mean_util_percent"].is_null(),
        "no per-process utilization on MIG: {g}"
    );
    assert!(g["energy_j"].as_f64().unwrap() > 0.0, "{g}");
}
