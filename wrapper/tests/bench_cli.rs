//! `colloc bench` on the built binary, without a GPU: a stand-in workload whose
//! throughput falls by a known factor with the number of copies alive, and drifts and
//! jitters by known amounts (tests/fixtures/bench/standin.py), must give the right
//! ratios with a spread that covers them, find the count where the aggregate stops
//! rising, and recommend what the truth says, whatever the noise.
//!
//! One file, though long: every test is of the one command `colloc bench` against the one
//! stand-in, read through the helpers here (`row`, `interval`, `order`, `rec_cell`) that
//! most of them use; split by topic, those helpers would have to move to `run_support`
//! and each part would be one more test binary to build and link.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod run_support;
use run_support::bench::{standin, Bench, BenchCmd};
use run_support::{is_root, processes_with_env, succeeded};

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
        .standin("1,0.8,0.6")
        .modes("naive")
        .counts("1,2,3")
        .times("3s", "1s")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(j["schema"], 3);
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
        let w = r["measurements"][0]["window"].as_array().unwrap();
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
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().take(3).collect::<Vec<_>>() == ["naive", "3", "180.0"]),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(b.report.join("bench.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let png = std::fs::read(b.report.join("bench.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // Every copy got its index and a device; the warm-up, solo and closing solo runs
    // (one copy each), then 2 and 3 copies.
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
    assert_eq!(
        seen,
        ["0 0 - -", "0 0 - -", "0 0 - -", "0 0 - -", "0 0 - -", "1 0 - -", "1 0 - -", "2 0 - -"]
    );
    // Nothing is left running.
    assert_eq!(live_copies(&b.shared), 0);
}

#[test]
fn collocation_that_does_not_pay_is_called_so() {
    let b = Bench::new();
    // Each copy gets 1/n of the rate: aggregate stays at solo.
    let out = b
        .standin("1,0.5,0.3333")
        .modes("naive")
        .counts("2,3")
        .times("3s", "1s")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
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
        .standin("1,0.9,0.8,0.7")
        .modes("naive,mps,mig")
        .counts("1,2,3,4")
        .times("2s", "0s")
        .env("STANDIN_FAIL_FROM", "3")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
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
        .standin("1,1")
        .modes("mps")
        .counts("2")
        .times("1s", "0s")
        .config("allowed_modes = [\"naive\"]\n")
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
        .standin("1,1")
        .modes("naive")
        .counts("2")
        .times("60s", "0s")
        .command()
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
    assert_eq!(b.json()["schema"], 3);
}

#[test]
fn mps_runs_copies_as_clients_of_a_private_daemon_that_is_stopped_after() {
    let b = Bench::new();
    let out = b
        .standin("1,0.9")
        .modes("mps")
        .counts("1,2")
        .times("2s", "0s")
        .with_fake_mps()
        .output()
        .unwrap();
    succeeded(&out);
    let j = b.json();
    for n in [1, 2] {
        assert_eq!(row(&j, "mps", n)["status"], "measured", "{j}");
    }
    assert!(close(row(&j, "mps", 2)["vs_solo"].as_f64().unwrap(), 1.8));
    // At the chosen N (2), mps:2 against unlimited: the same here (STANDIN_LIMITED unset).
    assert_eq!(row(&j, "mps:2", 2)["status"], "measured", "{j}");
    assert_eq!(j["mps_limit"]["thread_percentage"], 50);
    assert_eq!(j["mps_limit"]["better"], "neither", "{}", j["mps_limit"]);
    // The MPS copies (1 + 2 + 2 of them) got the daemon's pipe directory; the mps:2
    // copies also the thread limit.
    let envs: Vec<Vec<String>> = std::fs::read_dir(&b.shared)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("env-").then(|| {
                let text = std::fs::read_to_string(e.path()).unwrap();
                text.split_whitespace().map(str::to_string).collect()
            })
        })
        .filter(|f: &Vec<String>| f[2] != "-")
        .collect();
    let pipes: Vec<String> = envs.iter().map(|f| f[2].clone()).collect();
    assert_eq!(pipes.len(), 5, "{pipes:?}");
    let limited: Vec<&str> = envs
        .iter()
        .map(|f| f[3].as_str())
        .filter(|t| *t != "-")
        .collect();
    assert_eq!(limited, ["50", "50"], "{envs:?}");
    // Each daemon's directory has a random name of its own (a daemon per phase of the
    // search: the plain counts, then mps:N); every one is a private colloc-bench one.
    let mut daemons = pipes.clone();
    daemons.sort();
    daemons.dedup();
    assert!(daemons.len() <= 2, "{pipes:?}");
    for pipe in &daemons {
        assert!(pipe.contains("/colloc-bench-"), "{pipe}");
        // The daemon is gone, and so are its directories.
        assert!(!Path::new(pipe).exists(), "{pipe} left behind");
        assert_eq!(
            processes_with_env(&format!("CUDA_MPS_PIPE_DIRECTORY={pipe}")).len(),
            0
        );
    }
}

/// Every copy of a bench cell is sampled as `colloc run` samples each run: its own
/// processes' memory from NVML's per-process list. Each stand-in copy is attached to the
/// fake H200 (by its pid, its session) with a known memory: 1000 MiB for copy 0, 1100
/// for copy 1.
#[test]
fn each_copy_gets_the_memory_of_its_own_processes() {
    use fake_nvml::state::State;
    use fake_nvml::store::{ctl_change, now_ms, now_us, Locked};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let b = Bench::new();
    let state = b.tmp.path().join("fake-nvml.json");
    let mut fresh = State::fresh_from_list("H200", now_ms()).unwrap();
    fresh.gpus[0].mig_current = false;
    fresh.set_gpm(0, 14.0, 9.0, now_us()).unwrap();
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    // Attach each copy as soon as it has written its env-<pid> file.
    let attacher = {
        let (done, shared, state) = (Arc::clone(&done), b.shared.clone(), state.clone());
        std::thread::spawn(move || {
            let mut seen: HashSet<u32> = HashSet::new();
            while !done.load(Ordering::Relaxed) {
                for e in std::fs::read_dir(&shared).unwrap().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let Some(pid) = name.strip_prefix("env-").and_then(|p| p.parse().ok()) else {
                        continue;
                    };
                    let Ok(text) = std::fs::read_to_string(e.path()) else {
                        continue;
                    };
                    let Some(index) = text.split_whitespace().next() else {
                        continue;
                    };
                    if seen.insert(pid) {
                        let mib = 1000 + 100 * index.parse::<u64>().unwrap();
                        ctl_change(&state, |s| s.attach(0, None, pid, mib, 0)).unwrap();
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let out = b
        .standin("1,0.9")
        .modes("naive")
        .counts("1,2")
        .times("1s", "0s")
        .with_fake_nvml(b.tmp.path())
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .output()
        .unwrap();
    done.store(true, Ordering::Relaxed);
    attacher.join().unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    const MIB: u64 = 1 << 20;
    let solo = &row(&j, "solo", 1)["measurements"][0];
    assert_eq!(solo["peak_memory_bytes"], 1000 * MIB, "{solo}");
    let two = &row(&j, "naive", 2)["measurements"][0];
    assert_eq!(
        two["copy_peak_memory_bytes"],
        serde_json::json!([1000 * MIB, 1100 * MIB]),
        "{two}"
    );
    assert_eq!(two["peak_memory_bytes"], 2100 * MIB, "{two}");
    assert!(
        stdout.contains("peak memory: the copies' own processes"),
        "{stdout}"
    );
}

#[test]
fn with_nvml_it_reports_the_gpu_and_runs_one_copy_per_mig_instance() {
    let b = Bench::new();
    let state = b.tmp.path().join("fake-nvml.json");
    let dirs = b.tmp.path().display().to_string();
    let out = b
        .standin("1,0.9,0.8,0.7,0.7,0.7,0.7")
        .modes("naive,mig")
        .counts("1,2,7")
        .times("1s", "0s")
        .with_fake_nvml(b.tmp.path())
        // [mig]: the instances' device files from the fake driver's capability tree
        // (beside its state file) into a folder of the test's.
        .config(&format!(
            "[mig]\ncaps_dev_dir = \"{dirs}/dev/nvidia-caps\"\n\
             caps_proc_dir = \"{dirs}/proc/driver/nvidia/capabilities\"\n\
             mig_minors = \"{dirs}/proc/driver/nvidia-caps/mig-minors\"\n\
             proc_devices = \"{dirs}/proc/devices\"\nnvidia_modprobe = \"{dirs}/no-nvidia-modprobe\"\n",
        ))
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("COLLOC_FAKE_NVML_GPUS", "H200")
        .output()
        .unwrap();
    succeeded(&out);
    let j = b.json();
    let gpu = &j["gpu"];
    assert!(gpu["name"].as_str().unwrap().contains("H200"), "{gpu}");
    assert!(gpu["memory_total"].as_u64().unwrap() > 100 << 30, "{gpu}");
    let uuid = gpu["uuid"].as_str().unwrap();
    assert!(uuid.starts_with("GPU-"), "{gpu}");
    // The stand-in holds no GPU memory: nothing is attributed to its copies (their
    // figures with memory held: each_copy_gets_the_memory_of_its_own_processes).
    assert!(row(&j, "naive", 2)["peak_memory_bytes"].is_null());
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
    // warm-up + solo + closing solo + naive 2 + naive 7 on the GPU; MIG 1 + 2 + 7 copies
    // each on its own instance.
    assert_eq!(
        envs.iter().filter(|l| l.contains(uuid)).count(),
        12,
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
        (&["--repeat", "0", "--", "true"], "--repeat"),
        (&["--counts", "auto,2", "--", "true"], "write auto"),
        (&["--budget", "soon", "--", "true"], "--budget"),
        (
            &["--reference", "python 'x", "--", "true"],
            "unclosed quote",
        ),
        (
            &["--compare", "/nonexistent/a.json", "/nonexistent/b.json"],
            "cannot read",
        ),
        (&["--compare", "a.json"], "needs a workload"),
        (&[], "needs a workload"),
    ];
    for (args, want) in cases {
        let out = BenchCmd::bare().args(*args).output().unwrap();
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
    let out = b
        .cmd([
            "sh",
            "-c",
            "i=0; while [ $i -lt 40 ]; do echo \"step $i 100.0it/s\"; sleep 0.1; i=$((i+1)); done",
        ])
        .modes("naive")
        .counts("2")
        .times("1s", "0s")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
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
    let out = b
        .cmd(["false"])
        .modes("naive")
        .counts("1")
        .args(["--duration", "1h30m"])
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

/// An earlier bench's results are never silently replaced or mixed with new ones: a
/// second bench into the same directory is refused (exit 2, nothing changed) unless
/// `--replace`, which removes the old results and logs first.
#[test]
fn an_earlier_bench_is_refused_unless_replace() {
    let b = Bench::new();
    let bench = |extra: &[&str]| {
        b.cmd(["false"])
            .args(extra)
            .modes("naive")
            .counts("1")
            .output()
            .unwrap()
    };
    // The first: the workload fails alone, but its report and logs are written.
    let out = bench(&[]);
    assert_eq!(out.status.code(), Some(1));
    let first = std::fs::read(b.report.join("bench.json")).unwrap();
    std::fs::write(b.report.join("logs/earlier.log"), "old").unwrap();
    let out = bench(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "already holds the results of an earlier colloc bench (bench.json, bench.csv"
        ) && stderr.contains("give another --report-dir, or add --replace to replace them"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(b.report.join("bench.json")).unwrap(), first);
    assert!(b.report.join("logs/earlier.log").exists());
    // --replace: the old results and logs go, the new ones are written.
    let out = bench(&["--replace"]);
    assert_eq!(out.status.code(), Some(1));
    assert_ne!(std::fs::read(b.report.join("bench.json")).unwrap(), first);
    assert!(!b.report.join("logs/earlier.log").exists());
    assert!(std::fs::read_dir(b.report.join("logs")).unwrap().count() > 0);
}

/// A copy that ends by itself leaves nothing behind: its process group and every
/// descendant are killed when its leader exits.
#[test]
fn nothing_of_a_copy_outlives_its_leader() {
    let b = Bench::new();
    let tag = format!("COLLOC_TEST_TAG={}", b.tmp.path().display());
    let out = b
        .cmd([
            "sh",
            "-c",
            "sleep 300 & setsid sleep 300 & i=0; while [ $i -lt 15 ]; do echo img/s=10; sleep 0.1; i=$((i+1)); done",
        ])
        .modes("naive")
        .counts("2")
        .times("1s", "0s")
        .env("COLLOC_TEST_TAG", b.tmp.path())
        .output()
        .unwrap();
    succeeded(&out);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with_env(&tag).is_empty() {
        assert!(
            Instant::now() < deadline,
            "processes of the copies outlived them"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A row's `vs_solo` interval, `value ± u`.
fn interval(r: &Value, key: &str) -> (f64, f64) {
    let v = r[key].as_f64().unwrap_or_else(|| panic!("no {key} in {r}"));
    let u = r[format!("{key}_u")].as_f64().unwrap_or(0.0);
    (v - u, v + u)
}

/// The measurements of all rows, as (mode, n, round, seq), in the order they ran.
fn order(j: &Value) -> Vec<(String, u64, u64, u64)> {
    let mut all: Vec<(String, u64, u64, u64)> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["measurements"].as_array().unwrap().iter().map(move |m| {
                (
                    r["mode"].as_str().unwrap().to_string(),
                    r["n"].as_u64().unwrap(),
                    m["round"].as_u64().unwrap(),
                    m["seq"].as_u64().unwrap(),
                )
            })
        })
        .collect();
    all.sort_by_key(|x| x.3);
    all
}

/// The stand-in's aggregate rises as N up to 4 copies, then stays (STANDIN_KNEE=4); each
/// line jitters by up to ±5 % and the host slows down 0.5 % a second throughout. With
/// two rounds, for two different noise sequences: `--counts auto` stops at the first
/// count past the knee (7), 2 copies (half the best) are not repeated, the intervals of
/// the repeated ratios cover the truth, solo is measured at the start of each round and
/// at the end with its spread, and the recommendation is 4 copies each time.
#[test]
fn drift_and_jitter_the_spread_covers_the_truth_and_auto_stops_at_the_knee() {
    for seed in ["1", "2"] {
        let b = Bench::new();
        let out = b
            .standin("1")
            .modes("naive")
            .counts("auto")
            .repeat(2)
            .times("1s", "0s")
            .env("STANDIN_KNEE", "4")
            .env("STANDIN_JITTER", "0.05")
            .env("STANDIN_DRIFT", "0.005")
            .env("STANDIN_PERIOD", "0.05")
            .env("STANDIN_SEED", seed)
            .output()
            .unwrap();
        let (stdout, _) = succeeded(&out);
        let j = b.json();
        // auto: 2, 4, 7, then stop (7 is no better than 4).
        let counts: Vec<u64> = j["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["mode"] == "naive")
            .map(|r| r["n"].as_u64().unwrap())
            .collect();
        assert_eq!(counts, [2, 4, 7], "seed {seed}: {stdout}");
        assert!(
            stdout.contains("naive: --counts auto stopped at 7 copies"),
            "{stdout}"
        );
        let r4 = row(&j, "naive", 4)["rise"].as_f64().unwrap();
        assert!((r4 - 1.0).abs() < 0.15, "seed {seed}: rise to 4 {r4}");
        // The truth: aggregate = 100 x min(N, 4), drift alike for all (round-robin).
        // Rounds after the second measured again a cell whose repeats the host's drift
        // pulled apart by more than the others' (the cells measured furthest apart in
        // time: round 2 runs backwards).
        // 2 copies (200) cannot reach 4 (400): measured once.
        let rounds = j["rounds"].as_u64().unwrap();
        assert_eq!(row(&j, "naive", 2)["repeats"], 1, "seed {seed}");
        for (n, truth) in [(4, 4.0), (7, 4.0)] {
            let r = row(&j, "naive", n);
            assert!(r["repeats"].as_u64().unwrap() >= 2, "{r}");
            let (lo, hi) = interval(r, "vs_solo");
            assert!(
                lo <= truth && truth <= hi,
                "seed {seed}: naive {n}: [{lo}, {hi}] misses {truth}"
            );
            // An interval, not a point, and not so wide that it says nothing.
            assert!(
                hi - lo > 0.0 && hi - lo < 0.5 * truth,
                "naive {n}: [{lo}, {hi}]"
            );
            for k in [
                "aggregate_sd",
                "aggregate_min",
                "aggregate_max",
                "aggregate_u",
            ] {
                assert!(r[k].is_f64(), "{k} in {r}");
            }
        }
        // Solo: at the start of rounds 1 and 2 and at the end; the drift shows in its spread.
        let solo = row(&j, "solo", 1);
        let rounds_all = rounds;
        let rounds: Vec<u64> = solo["measurements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["round"].as_u64().unwrap())
            .collect();
        assert_eq!(rounds, [1, 2, rounds_all + 1], "{solo}");
        assert!(solo["aggregate_u"].as_f64().unwrap() > 0.0, "{solo}");
        assert!(
            stdout.contains("solo: ") && stdout.contains("over 3 run(s); min"),
            "{stdout}"
        );
        // The order: solo opens each round, round 2 runs backwards, solo closes.
        let seen: Vec<(String, u64, u64)> = order(&j)
            .into_iter()
            .map(|(m, n, r, _)| (m, n, r))
            .collect();
        let want: Vec<(String, u64, u64)> = [
            ("solo", 1, 1),
            ("naive", 2, 1),
            ("naive", 4, 1),
            ("naive", 7, 1),
            ("solo", 1, 2),
            ("naive", 7, 2),
            ("naive", 4, 2),
        ]
        .iter()
        .map(|(m, n, r)| (m.to_string(), *n, *r))
        .collect();
        assert_eq!(seen[..7], want, "{seen:?}");
        let (extra, last) = seen[7..].split_at(seen.len() - 8);
        assert!(
            extra
                .iter()
                .all(|(m, _, r)| m == "naive" && *r > 2 && *r <= rounds_all),
            "{seen:?}"
        );
        assert_eq!(last, [("solo".to_string(), 1, rounds_all + 1)]);
        assert_eq!(j["warmup_run"]["round"], 0);
        let rec = &j["recommendation"];
        assert_eq!(
            (
                rec["mode"].as_str(),
                rec["n"].as_u64(),
                rec["pays"].as_bool()
            ),
            (Some("naive"), Some(4), Some(true)),
            "seed {seed}: {rec}"
        );
        assert!(rec["margin"].as_f64().unwrap() > 1.0, "{rec}");
        assert!(
            stdout.contains("recommendation: run 4 copies under naive")
                && stdout.contains("margin: its low end"),
            "{stdout}"
        );
        let m = std::fs::read_to_string(b.report.join("bench-measurements.csv")).unwrap();
        assert_eq!(m.lines().count(), 1 + 1 + 8 + extra.len(), "{m}");
        assert_eq!(live_copies(&b.shared), 0);
    }
}

/// A reference command measured in the same call gives every configuration as a
/// fraction of it; under MPS, `mps:N` is measured against unlimited MPS at the chosen N
/// and the better named; the host is recorded; `--compare` lines two reports up and
/// flags a different host.
#[test]
fn a_reference_and_the_mps_limit_are_measured_in_the_same_call() {
    let b = Bench::new();
    let reference = format!("python3 '{}' --rate 500", standin().display());
    let out = b
        .standin("1")
        .modes("mps")
        .counts("2,4")
        .times("1s", "0s")
        .args(["--reference", &reference])
        .with_fake_mps()
        .env("STANDIN_KNEE", "4")
        .env("STANDIN_LIMITED", "0.8")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert!(
        close(j["reference"].as_f64().unwrap(), 500.0),
        "{}",
        j["reference"]
    );
    // Solo 100 = 0.2 of the reference; mps 4 = 400 = 0.8; mps:4 = 320 = 0.64.
    for (mode, n, frac) in [
        ("solo", 1, 0.2),
        ("mps", 2, 0.4),
        ("mps", 4, 0.8),
        ("mps:4", 4, 0.64),
    ] {
        let r = row(&j, mode, n);
        let f = r["vs_reference"].as_f64().unwrap();
        assert!(close(f, frac), "{mode} {n}: {f} vs {frac}");
    }
    let lim = &j["mps_limit"];
    assert_eq!(
        (lim["n"].as_u64(), lim["better"].as_str()),
        (Some(4), Some("unlimited")),
        "{lim}"
    );
    assert!(close(lim["ratio"].as_f64().unwrap(), 0.8), "{lim}");
    assert!(stdout.contains("unlimited mps is better by"), "{stdout}");
    assert!(
        stdout.contains("vs ref") && stdout.contains("reference (one process"),
        "{stdout}"
    );
    assert!(close(
        j["recommendation"]["vs_reference"].as_f64().unwrap(),
        0.8
    ));
    // The host.
    let host = &j["host"];
    assert!(host["cpus_usable"].as_u64().unwrap() >= 1, "{host}");
    assert!(stdout.contains("host: "), "{stdout}");

    // --compare: the same report against itself is the same host; with another CPU it
    // is flagged, and the fractions of the reference are offered instead.
    let a = b.report.join("bench.json");
    let mut other = j.clone();
    other["host"]["cpu_model"] = "Some Other CPU".into();
    other["results"][1]["aggregate"] = 1000.0.into();
    let o = b.tmp.path().join("other.json");
    std::fs::write(&o, serde_json::to_string(&other).unwrap()).unwrap();
    let cmp = |x: &Path, y: &Path| {
        BenchCmd::bare()
            .arg("--compare")
            .args([x, y])
            .output()
            .unwrap()
    };
    let same = cmp(&a, &a);
    let text = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "{text}");
    assert!(text.contains("same host"), "{text}");
    let diff = cmp(&a, &o);
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(diff.status.success(), "{text}");
    assert!(
        text.contains("DIFFERENT HOSTS") && text.contains("Some Other CPU"),
        "{text}"
    );
    assert!(
        text.contains("compare the fractions of the reference"),
        "{text}"
    );
}

/// Each copy faster collocated than the solo run, beyond the noise: a baseline problem,
/// flagged, not a speed-up.
#[test]
fn a_slowdown_below_one_is_a_baseline_problem() {
    let b = Bench::new();
    let out = b
        .standin("1,1.3")
        .modes("naive")
        .counts("2")
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    let r = row(&j, "naive", 2);
    assert!(
        close(r["slowdown_mean"].as_f64().unwrap(), 1.0 / 1.3),
        "{r}"
    );
    assert_eq!(r["baseline_problem"], true, "{r}");
    assert!(
        stdout.contains("baseline problem: each copy ran faster than the solo run")
            && stdout.contains("give a --reference"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(b.report.join("bench.csv")).unwrap();
    assert!(csv.lines().nth(2).unwrap().contains(",true,"), "{csv}");
}

/// `--budget`: what does not fit is skipped and named, the closing solo run is kept,
/// the benchmark ends near the budget, and the table says how long each cell ran.
#[test]
fn a_budget_plans_what_fits_and_says_what_it_skipped() {
    let b = Bench::new();
    let out = b
        .standin("1")
        .modes("naive")
        .counts("auto")
        .repeat(2)
        .budget("12s")
        .times("1s", "0s")
        .env("STANDIN_KNEE", "64")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(j["budget_s"], 12.0);
    let skipped = j["skipped"].as_array().unwrap();
    assert!(!skipped.is_empty(), "{j}");
    assert!(
        stdout.contains("budget 12 s: the benchmark took"),
        "{stdout}"
    );
    assert!(stdout.contains("skipped to fit: "), "{stdout}");
    // The aggregate was still rising (the knee is at 64): the search was cut, and said so.
    if row(&j, "naive", 2)["status"] == "measured" {
        assert!(
            stdout.contains("--counts auto was cut by the budget before"),
            "{stdout}"
        );
    }
    // The last solo run closes the benchmark, whatever was skipped.
    let solo = row(&j, "solo", 1);
    assert!(solo["repeats"].as_u64().unwrap() >= 2, "{solo}");
    let last = order(&j).pop().unwrap();
    assert_eq!(last.0, "solo");
    // Started only what fits: it ends near the budget (estimates carry a margin, and a
    // loaded machine starts copies more slowly than the first runs showed).
    let wall = j["wall_s"].as_f64().unwrap();
    assert!(wall < 12.0 + 4.0, "took {wall} s");
    // Every measured cell's time is in the table (the `time` column).
    for r in j["results"].as_array().unwrap() {
        if r["status"] == "measured" {
            assert!(r["wall_s"].as_f64().unwrap() > 0.5, "{r}");
        }
    }
    assert!(stdout.contains(" time "), "{stdout}");
}

/// A repeat round that no longer fits in whole (a configuration of round 1 ran far
/// longer than the ones before it, as a first start on a GPU can) is run in part: solo
/// and what else fits are repeated, the rest is named, the closing solo run is kept.
/// (On the H200 a whole round 2 was once dropped for 4 s, leaving 46 % of the budget
/// unused and every cell measured once.)
///
/// Both counts give the same aggregate (150), so both could change the answer and are
/// repeated where they fit. Each measurement takes T ≈ 1.2 s here; the three copies of `naive 3` in round 1
/// (start numbers 5-7) take 12 s more. Round 1 ends at ≈ 4T + 12; a whole round 2 then
/// needs 1.1 x (3T + 12) and the closing solo run 1.1 T: over 32 s for any T > 0.81 s.
/// Round 2 runs backwards: `naive 3` (1.1 x (T + 12)) does not fit for T > 0.94 s;
/// solo and `naive 2` do for T < 2.78 s.
#[test]
fn a_round_that_does_not_fit_in_whole_is_repeated_in_part() {
    let b = Bench::new();
    let out = b
        .standin("1,0.75,0.5")
        .modes("naive")
        .counts("2,3")
        .repeat(2)
        .budget("32s")
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .env("STANDIN_SLOW_STARTS", "5,6,7")
        .env("STANDIN_SLOW_S", "12")
        .output()
        .unwrap();
    let (_, stderr) = succeeded(&out);
    let j = b.json();
    assert_eq!(j["rounds"], 2, "{j}");
    // Solo: rounds 1 and 2 and the closing run; naive 2 repeated; naive 3 once.
    assert_eq!(row(&j, "solo", 1)["repeats"], 3, "{j}");
    assert_eq!(row(&j, "naive", 2)["repeats"], 2, "{j}");
    assert_eq!(row(&j, "naive", 3)["repeats"], 1, "{j}");
    let skipped: Vec<&str> = j["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(
        skipped.len() == 1 && skipped[0].starts_with("naive 3 in round 2: "),
        "{skipped:?}"
    );
    assert!(
        stderr.contains("round 2 needs about") && stderr.contains("repeating what fits of it"),
        "{stderr}"
    );
    assert_eq!(order(&j).pop().unwrap().0, "solo");
    let wall = j["wall_s"].as_f64().unwrap();
    assert!(wall < 32.0 + 4.0, "took {wall} s");
}

/// A solo figure that moves with the host is named: the stand-in's host slows 4 % a
/// second, so its solo runs (start of each round, end) come out more than 10 % apart;
/// with no reference the note asks for one. A steady stand-in gets no such note.
#[test]
fn a_solo_that_moves_with_the_host_is_named() {
    for (drift, named) in [("0.04", true), ("0", false)] {
        let b = Bench::new();
        let out = b
            .standin("1")
            .modes("naive")
            .counts("2")
            .repeat(2)
            .times("1s", "0s")
            .env("STANDIN_PERIOD", "0.05")
            .env("STANDIN_DRIFT", drift)
            .output()
            .unwrap();
        let (stdout, _) = succeeded(&out);
        let j = b.json();
        let solo = row(&j, "solo", 1);
        let apart = (solo["aggregate_max"].as_f64().unwrap()
            - solo["aggregate_min"].as_f64().unwrap())
            / solo["aggregate"].as_f64().unwrap();
        let notes: Vec<&str> = j["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        let note = notes
            .iter()
            .find(|n| n.starts_with("solo moves with the host"));
        assert_eq!(
            note.is_some(),
            named,
            "drift {drift}, solo {apart:.3} apart: {notes:?}"
        );
        if let Some(n) = note {
            assert!(apart > 0.10, "{apart}");
            assert!(n.contains(&format!("{:.1} % apart", apart * 100.0)), "{n}");
            assert!(n.contains("a --reference"), "{n}");
            assert!(
                stdout.contains("note: solo moves with the host"),
                "{stdout}"
            );
        }
    }
}

fn rec_cell(j: &Value) -> (String, u64) {
    let r = &j["recommendation"];
    (
        r["mode"].as_str().unwrap_or("-").to_string(),
        r["n"].as_u64().unwrap_or(0),
    )
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The stand-in: 3 copies steady at 2.4x solo, 2 copies whose repeats read 3.2x
/// and 0.8x (every round alike: they never agree). The wide cell is measured again (twice:
/// `max(--repeat, 2)`), stays wide, is named with why the answer does not rest on it, and
/// the answer is 3 copies: it pays. (The old rule let the wide cell's error bar reach the
/// steady one, preferred it for its fewer copies, and said collocation does not pay.)
#[test]
fn a_wide_cell_beside_a_steady_better_one_is_measured_again_and_not_chosen() {
    let b = Bench::new();
    let out = b
        .standin("1,1,0.8")
        .modes("naive")
        .counts("2,3")
        .repeat(2)
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .env("STANDIN_ROUND_FACTORS", "naive-n2:1.6,0.4")
        .output()
        .unwrap();
    let (stdout, stderr) = succeeded(&out);
    let j = b.json();
    assert_eq!(rec_cell(&j), ("naive".to_string(), 3), "{stdout}");
    let rec = &j["recommendation"];
    assert_eq!(rec["pays"], true, "{rec}");
    assert!(close(rec["vs_solo"].as_f64().unwrap(), 2.4), "{rec}");
    // Round 1 read 2 copies at 320, above 3 (240): only 2 could matter, and round 2
    // repeats it alone. At 80 its mean falls to 200: 3 copies come to matter and get
    // their repeat in a round of their own (3). Then 2 copies, wide, are measured again
    // twice (4, 5); solo opens rounds 1-3 and closes.
    let two = row(&j, "naive", 2);
    assert_eq!(two["repeats"], 4, "{two}");
    assert_eq!(row(&j, "naive", 3)["repeats"], 2);
    assert_eq!(row(&j, "solo", 1)["repeats"], 4);
    let three: Vec<u64> = row(&j, "naive", 3)["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["round"].as_u64().unwrap())
        .collect();
    assert_eq!(three, [1, 3]);
    let seen: Vec<(String, u64, u64)> = order(&j)
        .into_iter()
        .map(|(m, n, r, _)| (m, n, r))
        .collect();
    assert_eq!(
        seen[seen.len() - 3..],
        [
            ("naive".to_string(), 2, 4),
            ("naive".to_string(), 2, 5),
            ("solo".to_string(), 1, 6)
        ]
    );
    assert!(
        stderr.contains(
            "measuring again what disagreed with itself more than the other cells: naive 2"
        ),
        "{stderr}"
    );
    let wide = strings(&rec["wide"]);
    assert_eq!(wide.len(), 1, "{wide:?}");
    assert!(
        wide[0].starts_with("wide: naive 2 stayed wide after 4 runs (")
            && wide[0].contains("judged by the low end of its interval"),
        "{wide:?}"
    );
    assert!(stdout.contains(&wide[0]), "{stdout}");
    assert!(
        stdout.contains("recommendation: run 3 copies under naive"),
        "{stdout}"
    );
}

/// Two cells with the same aggregate (2 copies at 1.0 each, 3 at 0.667 each: 200 both):
/// the fewer copies, the other named as good; nothing is wide, nothing measured again.
#[test]
fn two_equal_cells_give_the_fewer_copies() {
    let b = Bench::new();
    let out = b
        .standin("1,1,0.6667")
        .modes("naive")
        .counts("2,3")
        .repeat(2)
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(rec_cell(&j), ("naive".to_string(), 2), "{stdout}");
    let rec = &j["recommendation"];
    assert_eq!(strings(&rec["as_good"]), ["naive 3"], "{rec}");
    assert!(strings(&rec["wide"]).is_empty(), "{rec}");
    for n in [2, 3] {
        assert_eq!(row(&j, "naive", n)["repeats"], 2);
    }
    assert!(
        stdout.contains("as good (within 5 % of the best): naive 3"),
        "{stdout}"
    );
}

/// A solo run that moves with the host (its rounds read 1.3x, 0.7x, 1.3x its rate) does
/// not move the answer (4 copies: 3.6x the per-copy base, 2 copies 1.8x), is not measured
/// again, makes no steady cell wide, and the answer flags its ratio to solo.
#[test]
fn a_noisy_solo_does_not_move_the_answer() {
    let b = Bench::new();
    let out = b
        .standin("1,0.9")
        .modes("naive")
        .counts("2,4")
        .repeat(2)
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .env("STANDIN_ROUND_FACTORS", "solo-n1:1.3,0.7")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(rec_cell(&j), ("naive".to_string(), 4), "{stdout}");
    let rec = &j["recommendation"];
    assert_eq!(rec["pays"], true, "{rec}");
    assert!(close(rec["aggregate"].as_f64().unwrap(), 360.0), "{rec}");
    assert_eq!(row(&j, "solo", 1)["repeats"], 3);
    // 2 copies (180) cannot reach 4 (360): measured once.
    assert_eq!(row(&j, "naive", 2)["repeats"], 1);
    assert_eq!(row(&j, "naive", 4)["repeats"], 2);
    assert!(strings(&rec["wide"]).is_empty(), "{rec}");
    assert!(
        stdout.contains("note: solo moves with the host")
            && stdout.contains(" img/s; solo moves with the host: see its note)"),
        "{stdout}"
    );
}

/// The H200 table in a stand-in (per 100 img/s of solo): reference 664, mps 2
/// 170, mps 4 noisy (343 and 435 in turn), mps 7 479 steady, mps 10 445 (7 % lower; the
/// H200's was 5.6 %), mps:7 as mps 7. `--counts auto` stops at 10; mps 2 and 4 (343 in
/// round 1) cannot reach mps 7 and are measured once; mps 7 and 10 are repeated; mps:7
/// is measured at the chosen N; the answer is 7 copies under mps, led by its fraction of
/// the reference (0.72), the ratio to solo second.
#[test]
fn the_h200_table_mps_4_wide_mps_7_steady_mps_10_lower_recommends_7() {
    let b = Bench::new();
    let reference = format!("python3 '{}' --rate 664", standin().display());
    let out = b
        .standin("1,0.85,0.85,0.9725,0.9725,0.9725,0.6843,0.6843,0.6843,0.445")
        .modes("mps")
        .counts("auto")
        .repeat(2)
        .times("1s", "0s")
        .args(["--reference", &reference])
        .with_fake_mps()
        .env("STANDIN_PERIOD", "0.05")
        .env("STANDIN_ROUND_FACTORS", "mps-n4:0.881,1.119")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(rec_cell(&j), ("mps".to_string(), 7), "{stdout}");
    let rec = &j["recommendation"];
    assert_eq!(rec["pays"], true);
    assert!(
        close(rec["vs_reference"].as_f64().unwrap(), 479.0 / 664.0),
        "{rec}"
    );
    assert_eq!(strings(&rec["as_good"]), ["mps:7"], "{rec}");
    for (mode, n, runs) in [
        ("mps", 2, 1),
        ("mps", 4, 1),
        ("mps", 7, 2),
        ("mps", 10, 2),
        ("mps:7", 7, 2),
    ] {
        assert_eq!(row(&j, mode, n)["repeats"], runs, "{mode} {n}");
    }
    assert!(
        strings(&j["notes"]).iter().any(|n| n
            .starts_with("measured once, as they could not change the answer")
            && n.ends_with(": mps 2, mps 4")),
        "{stdout}"
    );
    assert_eq!(row(&j, "mps", 7)["recommended"], true);
    assert!(row(&j, "mps", 10).get("recommended").is_none());
    let line = stdout
        .lines()
        .find(|l| l.starts_with("recommendation: "))
        .unwrap();
    assert!(
        line.starts_with("recommendation: run 7 copies under mps: 0.72 ± ")
            && line.contains(" of the reference, 4.79x"),
        "{line}"
    );
    assert!(line.find("of the reference").unwrap() < line.find("solo").unwrap());
}

/// `--budget` under MPS with an aggregate that keeps rising: the search for N stops
/// where the next count and `mps:N` would not both fit, `mps:N` is measured at the
/// chosen N (the configuration a user runs under `--colloc=mps:N`), and the answer is
/// a lower bound, said first. Before, the search spent the budget and `mps:N` was
/// skipped.
#[test]
fn a_budget_keeps_room_for_mps_at_the_chosen_n() {
    let b = Bench::new();
    let out = b
        .standin("1")
        .modes("mps")
        .counts("auto")
        .budget("12s")
        .times("1s", "0s")
        .with_fake_mps()
        .env("STANDIN_KNEE", "64")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    let measured: Vec<u64> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"] == "mps" && r["status"] == "measured")
        .map(|r| r["n"].as_u64().unwrap())
        .collect();
    let top = *measured.iter().max().expect("no mps count measured");
    assert_eq!(rec_cell(&j), ("mps".to_string(), top), "{stdout}");
    // The count after the last was not tried for the room kept.
    let skipped = strings(&j["skipped"]);
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("is kept for the closing solo run and ")
                && s.contains(" for mps:")
                && s.contains("(what --colloc=mps:")),
        "{skipped:?}"
    );
    // The aggregate still rose when the budget ended the search: the answer says first
    // that it is a lower bound, with the budget that would settle it.
    let rec = &j["recommendation"];
    let settle = rec["settle_budget_s"].as_f64().unwrap();
    assert!(settle > 12.0, "{rec}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("recommendation: "))
        .unwrap();
    assert!(
        line.starts_with(&format!(
            "recommendation: lower bound: the budget ended the search at {top} copies of mps while the aggregate still rose;"
        )) && line.contains(&format!("a --budget of about {} would settle it. So far: run {top} copies under mps", secs_text(settle))),
        "{line}"
    );
    // mps:N is measured at the chosen N, unless the last count ran so much longer than
    // its estimate (a loaded machine starts copies slowly) that not even one
    // measurement of mps:N fit: then the report says so first.
    let limited = format!("mps:{top}");
    let notes = strings(&j["notes"]);
    if row(&j, &limited, top)["status"] == "measured" {
        assert!(!stdout.contains("was not measured"), "{stdout}");
    } else {
        assert!(
            notes[0].starts_with(&format!("{limited} was not measured: the budget could not hold it even after the search for N stopped")),
            "{notes:?}"
        );
        let first_note = stdout
            .lines()
            .position(|l| l.starts_with("note: "))
            .unwrap();
        assert!(
            stdout
                .lines()
                .nth(first_note)
                .unwrap()
                .contains("was not measured"),
            "{stdout}"
        );
    }
}

/// A number of seconds as colloc prints it (`12 s`, `1m 45s` from 100 s on).
fn secs_text(s: f64) -> String {
    if s < 100.0 {
        format!("{s:.0} s")
    } else {
        let s = s.round() as u64;
        format!("{}m {:02}s", s / 60, s % 60)
    }
}

/// Per-copy rates of a stand-in whose aggregate peaks at 7 copies: 1, 1.9, 2.7, 3.4,
/// 4.0, 4.5, 5.0 (7), 4.8, 4.6, 4.2 (10), 4.1, … times one copy's.
const PEAK_AT_7: &str =
    "1,0.95,0.9,0.85,0.8,0.75,0.714286,0.6,0.511111,0.42,0.372727,0.333333,0.3,0.271429";

/// The measured counts of `mode`, in the order they ran (round 1).
fn tried_order(j: &Value, mode: &str) -> Vec<u64> {
    order(j)
        .into_iter()
        .filter(|(m, _, r, _)| m == mode && *r == 1)
        .map(|(_, n, _, _)| n)
        .collect()
}

/// The command in a stand-in whose true curve peaks at 7 (aggregate 5.0x one
/// copy's; 4.2x at 10), with a reference at 10x: `--modes mps --counts auto --repeat 2`
/// and a budget that holds about as many cells as 500 s holds 10 s cells (each ~27-37 s
/// with start-up on the H100): 25 s for cells of ~1.3 s. The search measures 2, 4, 7 and
/// 10 once each; only 7 is repeated (2, 4 and 10 cannot reach it); `mps:7` is measured
/// at the chosen N; the answer is 7 copies, 0.50 of the reference, and the budget holds.
/// (The planner this replaces reserved every repeat before each new count: on the H100
/// it stopped at 4 copies, two thirds of what 7 give.)
#[test]
fn a_peak_at_7_is_found_within_the_budget_and_only_what_matters_is_repeated() {
    let b = Bench::new();
    let reference = format!("python3 '{}' --rate 1000", standin().display());
    let out = b
        .standin(PEAK_AT_7)
        .modes("mps")
        .counts("auto")
        .repeat(2)
        .budget("25s")
        .times("1s", "0s")
        .args(["--reference", &reference])
        .with_fake_mps()
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(tried_order(&j, "mps"), [2, 4, 7, 10], "{stdout}");
    assert_eq!(rec_cell(&j), ("mps".to_string(), 7), "{stdout}");
    let rec = &j["recommendation"];
    assert_eq!(rec["pays"], true, "{rec}");
    assert!(close(rec["vs_reference"].as_f64().unwrap(), 0.5), "{rec}");
    assert!(rec.get("lower_bound").is_none(), "{rec}");
    for (mode, n, runs) in [
        ("mps", 2, 1),
        ("mps", 4, 1),
        ("mps", 7, 2),
        ("mps", 10, 1),
        ("mps:7", 7, 2),
        ("reference", 1, 2),
    ] {
        assert_eq!(row(&j, mode, n)["repeats"], runs, "{mode} {n}: {stdout}");
    }
    assert_eq!(row(&j, "mps", 7)["recommended"], true);
    // Why each count was tried is in the report.
    let tried = |n: u64| row(&j, "mps", n)["tried"].as_str().unwrap().to_string();
    assert!(
        tried(2).starts_with("no reading of how busy"),
        "{}",
        tried(2)
    );
    assert!(
        tried(7).starts_with("the aggregate rose +")
            && tried(7).contains(" % at 4 copies (over the count before): more may give more"),
        "{}",
        tried(7)
    );
    assert!(
        stdout.contains("tried mps 10: the aggregate rose +"),
        "{stdout}"
    );
    assert!(
        strings(&j["notes"]).iter().any(|n| n
            .starts_with("measured once, as they could not change the answer")
            && n.ends_with(": mps 2, mps 4, mps 10")),
        "{stdout}"
    );
    assert!(j["skipped"].as_array().unwrap().is_empty(), "{stdout}");
    let wall = j["wall_s"].as_f64().unwrap();
    assert!(wall < 25.0 + 4.0, "took {wall} s");
    assert_eq!(order(&j).pop().unwrap().0, "solo");
}

/// A workload that keeps a seventh of the SMs busy alone (the fake H200's GPM reads 14 %
/// SM activity) is tried at 7 copies first; 10 are lower, so the search goes down: 4 are
/// well below 7, so 2 are never tried. Each copy holds 13,000 MiB of the H200's 143,771:
/// memory bounds the largest count at 11. (The share is GPM's, set before the run: the
/// process's own utilization, attached once the copy shows, counted the readings before
/// the attach as idle, and on a loaded machine read 9 % instead of 14.)
#[test]
fn a_workload_using_a_seventh_of_the_gpu_is_tried_at_7_first() {
    use fake_nvml::state::State;
    use fake_nvml::store::{ctl_change, now_ms, now_us, Locked};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let b = Bench::new();
    let state = b.tmp.path().join("fake-nvml.json");
    let mut fresh = State::fresh_from_list("H200", now_ms()).unwrap();
    fresh.gpus[0].mig_current = false;
    fresh.set_gpm(0, 14.0, 9.0, now_us()).unwrap();
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let attacher = {
        let (done, shared, state) = (Arc::clone(&done), b.shared.clone(), state.clone());
        std::thread::spawn(move || {
            let mut seen: HashSet<u32> = HashSet::new();
            while !done.load(Ordering::Relaxed) {
                for e in std::fs::read_dir(&shared).unwrap().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let Some(pid) = name.strip_prefix("env-").and_then(|p| p.parse().ok()) else {
                        continue;
                    };
                    if seen.insert(pid) {
                        ctl_change(&state, |s| s.attach(0, None, pid, 13_000, 14)).unwrap();
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let out = b
        .standin(PEAK_AT_7)
        .modes("naive")
        .counts("auto")
        .times("1s", "0s")
        .with_fake_nvml(b.tmp.path())
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    done.store(true, Ordering::Relaxed);
    attacher.join().unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(tried_order(&j, "naive"), [7, 10, 4], "{stdout}");
    assert_eq!(rec_cell(&j), ("naive".to_string(), 7), "{stdout}");
    let busy = row(&j, "solo", 1)["measurements"][0]["sm_busy_percent"]
        .as_f64()
        .unwrap();
    assert!((busy - 14.0).abs() < 0.5, "{busy}");
    let seven = row(&j, "naive", 7)["tried"].as_str().unwrap();
    assert!(
        seven.starts_with("the solo run kept the GPU's SMs 14 % busy (SM activity (GPM), occupancy 9 %): about 7 copies would fill it, so the search starts at 7"),
        "{seven}"
    );
    let four = row(&j, "naive", 4)["tried"].as_str().unwrap();
    assert_eq!(
        four,
        "below where the search started: do 4 copies do as well as 7?"
    );
    assert!(
        j["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["n"].as_u64().unwrap() <= 11),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: naive: --counts auto stopped at 10 copies"),
        "{stdout}"
    );
}

/// A flat curve (each copy gets 1/N: the aggregate stays at solo's): the search stops
/// after 2 copies, which are repeated (the only cell, so it could change the answer);
/// the answer is one at a time, and nothing is marked recommended.
#[test]
fn a_flat_curve_stops_at_the_first_step_and_says_one_at_a_time() {
    let b = Bench::new();
    let out = b
        .standin("1")
        .modes("naive")
        .counts("auto")
        .repeat(2)
        .budget("20s")
        .times("1s", "0s")
        .env("STANDIN_KNEE", "1")
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(tried_order(&j, "naive"), [2], "{stdout}");
    assert_eq!(row(&j, "naive", 2)["repeats"], 2);
    let rec = &j["recommendation"];
    assert_eq!(rec["pays"], false, "{rec}");
    assert!(
        stdout.contains("naive: --counts auto stopped at 2 copies"),
        "{stdout}"
    );
    assert!(
        j["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("recommended").is_none()),
        "{j}"
    );
    assert!(rec.get("lower_bound").is_none(), "{rec}");
    let png = std::fs::read(b.report.join("bench.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

/// A noisy low cell (4 copies read 0.8x and 1.25x their rate in turn, with ±3 % jitter
/// on every line) on the curve that peaks at 7: it cannot reach 7 in round 1, so it is
/// measured once and does not move the answer; 7 is repeated and recommended.
#[test]
fn a_noisy_low_cell_is_not_repeated_and_does_not_move_the_answer() {
    let b = Bench::new();
    let out = b
        .standin(PEAK_AT_7)
        .modes("naive")
        .counts("auto")
        .repeat(2)
        .times("1s", "0s")
        .env("STANDIN_PERIOD", "0.05")
        .env("STANDIN_JITTER", "0.03")
        .env("STANDIN_SEED", "3")
        .env("STANDIN_ROUND_FACTORS", "naive-n4:0.8,1.25")
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let j = b.json();
    assert_eq!(tried_order(&j, "naive"), [2, 4, 7, 10], "{stdout}");
    assert_eq!(rec_cell(&j), ("naive".to_string(), 7), "{stdout}");
    assert_eq!(row(&j, "naive", 4)["repeats"], 1);
    assert_eq!(row(&j, "naive", 7)["repeats"], 2);
    let four = row(&j, "naive", 4)["aggregate"].as_f64().unwrap();
    assert!(close(four, 0.8 * 340.0), "{four}");
    assert!(close(
        j["recommendation"]["aggregate"].as_f64().unwrap(),
        500.0
    ));
}

/// A fake GPU of `model` with MIG off and its SMs `sm_activity` % busy by GPM (9 %
/// occupancy), and a thread that attaches each stand-in copy as soon as it starts with
/// 1000 MiB and `util` % SM utilization of its own: stop it with the flag, then join.
fn gpm_gpu(
    b: &Bench,
    model: &str,
    sm_activity: f64,
    util: u32,
) -> (
    std::path::PathBuf,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    use fake_nvml::state::State;
    use fake_nvml::store::{ctl_change, now_ms, now_us, Locked};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let state = b.tmp.path().join("fake-nvml.json");
    let mut fresh = State::fresh_from_list(model, now_ms()).unwrap();
    fresh.gpus[0].mig_current = false;
    fresh.set_gpm(0, sm_activity, 9.0, now_us()).unwrap();
    Locked::open(&state).unwrap().write(&fresh).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let attacher = {
        let (done, shared, state) = (Arc::clone(&done), b.shared.clone(), state.clone());
        std::thread::spawn(move || {
            let mut seen: HashSet<u32> = HashSet::new();
            while !done.load(Ordering::Relaxed) {
                for e in std::fs::read_dir(&shared).unwrap().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let Some(pid) = name.strip_prefix("env-").and_then(|p| p.parse().ok()) else {
                        continue;
                    };
                    if seen.insert(pid) {
                        ctl_change(&state, |s| s.attach(0, None, pid, 1000, util)).unwrap();
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    (state, done, attacher)
}

/// On an H100, GPM says the solo run kept 14 % of the SMs busy while NVML's utilization
/// of its process says 30 % (a share of time, as a small ResNet read 28-35 % on the lent
/// H100 where 7 copies were best): `--counts auto` starts at 7, from GPM, and says so in
/// the row's reason, the progress line and bench.json, with the occupancy.
#[test]
fn on_hopper_the_search_starts_from_gpm_sm_activity_not_utilization() {
    let b = Bench::new();
    let (state, done, attacher) = gpm_gpu(&b, "H100-80GB", 14.0, 30);
    let out = b
        .standin(PEAK_AT_7)
        .modes("naive")
        .counts("auto")
        .times("1s", "0s")
        .with_fake_nvml(b.tmp.path())
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    attacher.join().unwrap();
    let (stdout, stderr) = succeeded(&out);
    let j = b.json();
    assert_eq!(tried_order(&j, "naive"), [7, 10, 4], "{stdout}");
    assert_eq!(rec_cell(&j), ("naive".to_string(), 7), "{stdout}");
    let solo = &row(&j, "solo", 1)["measurements"][0];
    assert_eq!(solo["sm_busy_source"], "gpm", "{solo}");
    let busy = solo["sm_busy_percent"].as_f64().unwrap();
    assert!((busy - 14.0).abs() < 0.5, "{busy}");
    let occ = solo["sm_occupancy_percent"].as_f64().unwrap();
    assert!((occ - 9.0).abs() < 0.5, "{occ}");
    let seven = row(&j, "naive", 7)["tried"].as_str().unwrap();
    assert!(
        seven.starts_with(
            "the solo run kept the GPU's SMs 14 % busy (SM activity (GPM), occupancy 9 %): \
             about 7 copies would fill it, so the search starts at 7"
        ),
        "{seven}"
    );
    assert!(
        stderr.contains("SMs 14 % busy (SM activity (GPM), occupancy 9 %)"),
        "{stderr}"
    );
}

/// The same workload on an A100, which has no GPM (its SMs are set 14 % busy all the
/// same): the search starts from the process's utilization (30 %, less the readings
/// taken before the test attached the copy, which count as idle), at the count nearest
/// one over it, and bench.json and the reason read as they did before GPM was read.
#[test]
fn without_gpm_the_search_starts_from_utilization_as_before() {
    let b = Bench::new();
    let (state, done, attacher) = gpm_gpu(&b, "A100-80GB", 14.0, 30);
    let out = b
        .standin(PEAK_AT_7)
        .modes("naive")
        .counts("auto")
        .times("1s", "0s")
        .with_fake_nvml(b.tmp.path())
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("STANDIN_PERIOD", "0.05")
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    attacher.join().unwrap();
    let (stdout, stderr) = succeeded(&out);
    let j = b.json();
    let solo = &row(&j, "solo", 1)["measurements"][0];
    assert!(solo.get("sm_busy_source").is_none(), "{solo}");
    assert!(solo.get("sm_occupancy_percent").is_none(), "{solo}");
    let busy = solo["sm_busy_percent"].as_f64().unwrap();
    assert!(
        busy > 14.9 && busy <= 30.5,
        "utilization, not GPM's 14 %: {busy}"
    );
    // The count nearest 1 / busy (by ratio) is where the search started.
    let want = [2u64, 4, 7, 10, 14]
        .into_iter()
        .min_by(|a, b| {
            let d = |n: u64| (n as f64 * busy / 100.0).ln().abs();
            d(*a).total_cmp(&d(*b))
        })
        .unwrap();
    let order = tried_order(&j, "naive");
    assert_eq!(order[0], want, "{busy} % {stdout}");
    let first = row(&j, "naive", want)["tried"].as_str().unwrap();
    assert!(
        first.starts_with(&format!(
            "the solo run kept the GPU's SMs {busy:.0} % busy: about "
        )),
        "{first}"
    );
    assert!(
        first.ends_with(&format!("so the search starts at {want}")),
        "{first}"
    );
    assert_eq!(rec_cell(&j), ("naive".to_string(), 7), "{stdout}");
    assert!(
        !stderr.contains("GPM") && !stdout.contains("GPM"),
        "{stderr}"
    );
}
