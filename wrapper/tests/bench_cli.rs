//! `colloc bench` on the built binary, without a GPU: a stand-in workload whose
//! throughput falls by a known factor with the number of copies alive
//! (tests/fixtures/bench/standin.py) must give the right ratios and recommendation.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::prelude::*;
use serde_json::Value;

fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bench/standin.py")
}

/// A node config that finds neither NVML nor the MPS control program (unless `extra`
/// sets them), so the test behaves the same on machines with and without a GPU.
fn config(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("colloc.toml");
    let mut text = String::from("version = 1\n");
    if !extra.contains("nvml_library") {
        text.push_str("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n");
    }
    if !extra.contains("mps_control") {
        text.push_str("mps_control = \"/nonexistent/nvidia-cuda-mps-control\"\n");
    }
    text.push_str(extra);
    std::fs::write(&p, text).unwrap();
    p
}

struct Bench {
    tmp: tempfile::TempDir,
    shared: PathBuf,
    report: PathBuf,
}

impl Bench {
    fn new() -> Bench {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let report = tmp.path().join("report");
        Bench {
            tmp,
            shared,
            report,
        }
    }

    fn cmd(&self, factors: &str, args: &[&str]) -> Command {
        self.cmd_with_config(factors, args, "")
    }

    fn cmd_with_config(&self, factors: &str, args: &[&str], extra_config: &str) -> Command {
        let mut c = Command::cargo_bin("colloc").unwrap();
        c.env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("COLLOC_CONFIG")
            .env("STANDIN_DIR", &self.shared)
            .env("STANDIN_FACTORS", factors)
            .arg("--config")
            .arg(config(self.tmp.path(), extra_config))
            .arg("bench")
            .arg("--report-dir")
            .arg(&self.report)
            .args(args)
            .arg("--")
            .arg("python3")
            .arg(standin());
        c
    }

    fn json(&self) -> Value {
        let text = std::fs::read_to_string(self.report.join("bench.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn row<'a>(j: &'a Value, mode: &str, n: u64) -> &'a Value {
    j["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mode"] == mode && r["n"] == n)
        .unwrap_or_else(|| panic!("no row {mode} {n} in {j}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.05 * b
}

#[test]
fn collocation_that_pays_gives_the_right_ratios_and_recommendation() {
    let b = Bench::new();
    // Per-copy rate 100, 80, 60 % with 1, 2, 3 copies: aggregate 1.0x, 1.6x, 1.8x.
    let out = b
        .cmd(
            "1,0.8,0.6",
            &[
                "--modes",
                "naive",
                "--counts",
                "1,2,3",
                "--duration",
                "3s",
                "--warmup",
                "1s",
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = b.json();
    assert_eq!(j["schema"], 2);
    let solo = j["solo"].as_f64().unwrap();
    assert!(close(solo, 100.0), "solo {solo}");
    for (n, ratio, slowdown) in [(2, 1.6, 1.25), (3, 1.8, 1.0 / 0.6)] {
        let r = row(&j, "naive", n);
        assert_eq!(r["status"], "measured", "{r}");
        let vs = r["vs_solo"].as_f64().unwrap();
        assert!(close(vs, ratio), "naive {n}: {vs} vs {ratio}");
        let s = r["slowdown_mean"].as_f64().unwrap();
        assert!(close(s, slowdown), "naive {n}: slowdown {s} vs {slowdown}");
        assert_eq!(r["per_copy"].as_array().unwrap().len() as u64, n);
        let w = r["window"].as_array().unwrap();
        assert!(
            w[1].as_f64().unwrap() - w[0].as_f64().unwrap() >= 1.5,
            "{r}"
        );
        assert!(r["peak_memory_bytes"].is_null());
    }
    let rec = &j["recommendation"];
    assert_eq!(
        (rec["mode"].as_str(), rec["n"].as_u64()),
        (Some("naive"), Some(3))
    );
    assert_eq!(rec["pays"], true);
    assert!(
        stdout.contains("recommendation: run 3 copies under naive"),
        "{stdout}"
    );
    // The table, CSV and plot are there.
    assert!(stdout.contains("naive  3"), "{stdout}");
    let csv = std::fs::read_to_string(b.report.join("bench.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let png = std::fs::read(b.report.join("bench.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // Every copy got its index and a device; 1 + 2 + 3 copies ran.
    let mut seen: Vec<String> = std::fs::read_dir(&b.shared)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("env-").then(|| {
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .trim()
                    .to_string()
            })
        })
        .collect();
    seen.sort();
    assert_eq!(seen, ["0 0 -", "0 0 -", "0 0 -", "1 0 -", "1 0 -", "2 0 -"]);
    // Nothing is left running.
    assert_eq!(live_copies(&b.shared), 0);
}

#[test]
fn collocation_that_does_not_pay_is_called_so() {
    let b = Bench::new();
    // Each copy gets 1/n of the rate: aggregate stays at solo.
    let out = b
        .cmd(
            "1,0.5,0.3333",
            &[
                "--modes",
                "naive",
                "--counts",
                "2,3",
                "--duration",
                "3s",
                "--warmup",
                "1s",
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let j = b.json();
    for n in [2, 3] {
        let vs = row(&j, "naive", n)["vs_solo"].as_f64().unwrap();
        assert!(close(vs, 1.0), "naive {n}: {vs}");
    }
    assert_eq!(j["recommendation"]["pays"], false);
    assert!(stdout.contains("collocation does not pay"), "{stdout}");
    assert!(stdout.contains("run one at a time"), "{stdout}");
}

#[test]
fn a_failing_count_stops_the_mode_and_unavailable_modes_say_why() {
    let b = Bench::new();
    let out = b
        .cmd(
            "1,0.9,0.8,0.7",
            &[
                "--modes",
                "naive,mps,mig",
                "--counts",
                "1,2,3,4",
                "--duration",
                "2s",
                "--warmup",
                "0s",
            ],
        )
        .env("STANDIN_FAIL_FROM", "3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let j = b.json();
    assert_eq!(row(&j, "naive", 2)["status"], "measured");
    let failed = row(&j, "naive", 3);
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["reason"].as_str().unwrap().contains("out of memory"),
        "{failed}"
    );
    let after = row(&j, "naive", 4);
    assert_eq!(after["status"], "skipped");
    assert!(after["reason"]
        .as_str()
        .unwrap()
        .contains("naive with 3 copies failed"));
    let mps = row(&j, "mps", 2);
    assert_eq!(mps["status"], "skipped");
    assert!(
        mps["reason"].as_str().unwrap().contains("not found"),
        "{mps}"
    );
    assert_eq!(row(&j, "mig", 1)["status"], "skipped");
    assert!(row(&j, "mig", 1)["reason"]
        .as_str()
        .unwrap()
        .contains("NVML"));
    assert_eq!(j["recommendation"]["n"], 2);
    assert!(stdout.contains("failed: copy"), "{stdout}");
    assert_eq!(live_copies(&b.shared), 0);
}

#[test]
fn modes_the_node_does_not_allow_are_skipped() {
    let b = Bench::new();
    let out = b
        .cmd_with_config(
            "1,1",
            &[
                "--modes",
                "mps",
                "--counts",
                "2",
                "--duration",
                "1s",
                "--warmup",
                "0s",
            ],
            "allowed_modes = [\"naive\"]\n",
        )
        .output()
        .unwrap();
    assert!(out.status.success());
    let j = b.json();
    let r = row(&j, "mps", 2);
    assert!(
        r["reason"].as_str().unwrap().contains("allowed_modes"),
        "{r}"
    );
}

#[test]
fn a_signal_stops_every_copy() {
    let b = Bench::new();
    let child = b
        .cmd(
            "1,1",
            &[
                "--modes",
                "naive",
                "--counts",
                "2",
                "--duration",
                "60s",
                "--warmup",
                "0s",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the solo run is going, then interrupt.
    let deadline = Instant::now() + Duration::from_secs(60);
    while live_copies(&b.shared) < 1 {
        assert!(Instant::now() < deadline, "copies never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    assert_eq!(live_copies(&b.shared), 0);
    // What was measured before the signal is still reported.
    assert_eq!(b.json()["schema"], 2);
}

#[test]
fn mps_runs_copies_as_clients_of_a_private_daemon_that_is_stopped_after() {
    let b = Bench::new();
    let fake =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-mps/nvidia-cuda-mps-control");
    let out = b
        .cmd_with_config(
            "1,0.9",
            &[
                "--modes",
                "mps",
                "--counts",
                "1,2",
                "--duration",
                "2s",
                "--warmup",
                "0s",
            ],
            &format!("mps_control = \"{}\"\n", fake.display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = b.json();
    for n in [1, 2] {
        assert_eq!(row(&j, "mps", n)["status"], "measured", "{j}");
    }
    assert!(close(row(&j, "mps", 2)["vs_solo"].as_f64().unwrap(), 1.8));
    // The MPS copies (3 of the 4 runs) got the daemon's pipe directory.
    let pipes: Vec<String> = std::fs::read_dir(&b.shared)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("env-").then(|| {
                let text = std::fs::read_to_string(e.path()).unwrap();
                text.split_whitespace().nth(2).unwrap().to_string()
            })
        })
        .filter(|p| p != "-")
        .collect();
    assert_eq!(pipes.len(), 3, "{pipes:?}");
    assert!(pipes.iter().all(|p| p == &pipes[0]));
    // The daemon is gone, and so are its directories.
    assert!(!Path::new(&pipes[0]).exists(), "{} left behind", pipes[0]);
    assert_eq!(
        processes_with_env(&format!("CUDA_MPS_PIPE_DIRECTORY={}", pipes[0])),
        0
    );
}

/// The fake libnvidia-ml, built with this test as a dev-dependency.
fn fake_nvml() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libfake_nvml.so"),
        deps.join("../libfake_nvml.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libfake_nvml.so next to the test (cargo test builds it as a dev-dependency)")
}

#[test]
fn with_nvml_it_reports_the_gpu_and_runs_one_copy_per_mig_instance() {
    let b = Bench::new();
    let state = b.tmp.path().join("fake-nvml.json");
    let dirs = b.tmp.path().display().to_string();
    let out = b
        .cmd_with_config(
            "1,0.9,0.8,0.7,0.7,0.7,0.7",
            &[
                "--modes",
                "naive,mig",
                "--counts",
                "1,2,7",
                "--duration",
                "1s",
                "--warmup",
                "0s",
            ],
            &format!(
                "nvml_library = \"{}\"\nstate_dir = \"{dirs}/state\"\nrun_dir = \"{dirs}/run\"\n",
                fake_nvml().display()
            ),
        )
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("COLLOC_FAKE_NVML_GPUS", "H200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let j = b.json();
    let gpu = &j["gpu"];
    assert!(gpu["name"].as_str().unwrap().contains("H200"), "{gpu}");
    assert!(gpu["memory_total"].as_u64().unwrap() > 100 << 30, "{gpu}");
    let uuid = gpu["uuid"].as_str().unwrap();
    assert!(uuid.starts_with("GPU-"), "{gpu}");
    assert!(row(&j, "naive", 2)["peak_memory_bytes"].is_u64());
    let envs: Vec<String> = std::fs::read_dir(&b.shared)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.file_name()
                .to_string_lossy()
                .starts_with("env-")
                .then(|| std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    // solo + naive 2 + naive 7 on the GPU; MIG 1 + 2 + 7 copies each on its own instance.
    assert_eq!(
        envs.iter().filter(|l| l.contains(uuid)).count(),
        10,
        "{envs:?}"
    );
    let mut migs: Vec<&str> = envs
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|d| d.starts_with("MIG-"))
        .collect();
    assert_eq!(migs.len(), 10, "{envs:?}");
    migs.sort();
    migs.dedup();
    assert!(
        migs.len() >= 7,
        "each copy of a layout has its own instance: {migs:?}"
    );
    if is_root() {
        for (n, layout) in [(1, "7g"), (2, "3g"), (7, "1g")] {
            let r = row(&j, "mig", n);
            assert_eq!(r["status"], "measured", "{r}");
            assert!(r["layout"].as_str().unwrap().contains(layout), "{r}");
        }
        // Every instance was destroyed again and the journal removed.
        let st = std::fs::read_to_string(&state).unwrap();
        assert!(!st.contains("MIG-"), "instances left: {st}");
        let jobs = b.tmp.path().join("state/jobs");
        let left = std::fs::read_dir(&jobs).map_or(0, |d| d.count());
        assert_eq!(left, 0, "journals left in {}", jobs.display());
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// Processes whose environment holds `entry`.
fn processes_with_env(entry: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let env = std::fs::read(e.ok()?.path().join("environ")).ok()?;
            env.split(|&b| b == 0)
                .any(|kv| kv == entry.as_bytes())
                .then_some(())
        })
        .count()
}

/// Stand-in copies still alive (their pid files name live processes).
fn live_copies(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("live-")?.to_string();
            Path::new("/proc").join(pid).exists().then_some(())
        })
        .count()
}

#[test]
fn bad_arguments_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["--counts", "0", "--", "true"], "--counts"),
        (&["--counts", "1,x", "--", "true"], "not a number"),
        (&["--modes", "gpu", "--", "true"], "valid: naive, mps, mig"),
        (&["--duration", "soon", "--", "true"], "--duration"),
        (&["--duration", "0s", "--", "true"], "is zero"),
        (&["--metric", "img/s=", "--", "true"], "capture group"),
        (&["--min-gain", "0", "--", "true"], "--min-gain"),
        (&["--gpu", "MIG-x", "--", "true"], "--gpu"),
        (&[], "needs a workload"),
    ];
    for (args, want) in cases {
        let out = Command::cargo_bin("colloc")
            .unwrap()
            .env_remove("COLLOC_CONFIG")
            .arg("bench")
            .args(*args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(stderr.starts_with("colloc: error: "), "{args:?}: {stderr}");
    }
}

/// The same throughput patterns and unit as colloc run: tqdm's `it/s` is read, and named.
#[test]
fn builtin_patterns_and_units_are_colloc_runs() {
    let b = Bench::new();
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("COLLOC_CONFIG")
        .arg("--config")
        .arg(config(b.tmp.path(), ""))
        .args(["bench", "--report-dir"])
        .arg(&b.report)
        .args([
            "--modes",
            "naive",
            "--counts",
            "2",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "i=0; while [ $i -lt 40 ]; do echo \"step $i 100.0it/s\"; sleep 0.1; i=$((i+1)); done",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = b.json();
    assert_eq!(j["unit"], "it/s");
    assert!(close(j["solo"].as_f64().unwrap(), 100.0), "{}", j["solo"]);
    assert!(stdout.contains("aggregate it/s"), "{stdout}");
    let csv = std::fs::read_to_string(b.report.join("bench.csv")).unwrap();
    assert!(csv.lines().nth(1).unwrap().contains(",it/s,"), "{csv}");
}

/// Durations are colloc run's: `1h30m` is a duration, not bad input (the workload here
/// fails at once, so the bench ends with exit 1, not 2).
#[test]
fn bench_takes_the_durations_colloc_run_takes() {
    let b = Bench::new();
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("COLLOC_CONFIG")
        .arg("--config")
        .arg(config(b.tmp.path(), ""))
        .args(["bench", "--report-dir"])
        .arg(&b.report)
        .args([
            "--modes",
            "naive",
            "--counts",
            "1",
            "--duration",
            "1h30m",
            "--",
            "false",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the workload failed when run alone"),
        "{stderr}"
    );
    assert_eq!(b.json()["duration_s"], 5400.0);
}

/// A copy that ends by itself leaves nothing behind: its process group and every
/// descendant are killed when its leader exits.
#[test]
fn nothing_of_a_copy_outlives_its_leader() {
    let b = Bench::new();
    let tag = format!("COLLOC_TEST_TAG={}", b.tmp.path().display());
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("COLLOC_CONFIG")
        .env("COLLOC_TEST_TAG", b.tmp.path())
        .arg("--config")
        .arg(config(b.tmp.path(), ""))
        .args(["bench", "--report-dir"])
        .arg(&b.report)
        .args(["--modes", "naive", "--counts", "2", "--duration", "1s", "--warmup", "0s", "--"])
        .args([
            "sh",
            "-c",
            "sleep 300 & setsid sleep 300 & i=0; while [ $i -lt 15 ]; do echo img/s=10; sleep 0.1; i=$((i+1)); done",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with_env(&tag) > 0 {
        assert!(
            Instant::now() < deadline,
            "processes of the copies outlived them"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
