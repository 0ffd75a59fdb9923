//! Every figure `colloc run` prints, against stand-in runs whose true rates are known
//! (issue 12: solo baselines, aggregate, retries in time, epoch times, units, sweeps and
//! user metrics). GPU energy and utilization are in `run_gpu_fake.rs`, charts in
//! `run_charts.rs`.

mod run_support;

use run_support::bench::BenchCmd;
use run_support::{fixture, run, succeeded, Env};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs()
}

fn csv_rows(env: &Env) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

/// A sweep of two batch sizes whose rates alone are 100 and 50 img/s, and half that when
/// both run. Each solo figure must be its own command's, the speed-up must be made of
/// them (about 1.0x here: two runs at half speed), and never exceed what 2 slots can give.
#[test]
fn solo_baseline_measures_each_sweep_point_and_the_speedup_says_what_it_covers() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ RATE_DIR = '{}', FACTORS = '1,0.5', DURATION = '2' }}\n[[sweep]]\nname = 'bs{{bs}}'\ncommand = ['python3', '{rate}']\nenv = {{ BASE = '{{base}}' }}\ngrid = {{ bs = ['32'], base = ['100'] }}\n[[sweep]]\nname = 'bs{{bs}}'\ncommand = ['python3', '{rate}']\nenv = {{ BASE = '{{base}}' }}\ngrid = {{ bs = ['64'], base = ['50'] }}\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args(["-j", "2", "--solo-baseline", "--solo-warmup", "0s", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let rep = env.report();
    let solo32 = run(&rep, "bs32")["solo_throughput"].as_f64().unwrap();
    let solo64 = run(&rep, "bs64")["solo_throughput"].as_f64().unwrap();
    assert!(close(solo32, 100.0, 0.05), "bs32 alone: {solo32}");
    assert!(close(solo64, 50.0, 0.05), "bs64 alone: {solo64}");
    let s = &rep["summary"];
    // One after another, each run's work at its own true solo rate plus its start-up:
    // what the speed-up must be made of, whatever the timing on a busy machine.
    let mut seq = 0.0;
    for (name, solo) in [("bs32", 100.0), ("bs64", 50.0)] {
        let r = run(&rep, name);
        let t = &r["throughput"];
        let first = t["samples"][0][0].as_f64().unwrap();
        let startup = first - r["start_s"].as_f64().unwrap();
        seq += t["work"].as_f64().unwrap() / solo + startup;
    }
    let reported = s["sequential_s"].as_f64().unwrap();
    assert!(
        close(reported, seq, 0.05),
        "one after another: {reported} s vs {seq} s"
    );
    let x = s["speedup"].as_f64().unwrap();
    let makespan = s["makespan_s"].as_f64().unwrap();
    assert!(close(x, seq / makespan, 0.05), "{x}x\n{stdout}");
    assert!(x <= 2.0, "more than 2 slots can give: {x}");
    assert_eq!(
        (s["speedup_runs"].as_u64(), s["speedup_of"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(stdout.contains("solo figures of all 2 runs"), "{stdout}");
    assert_eq!(rep["calibrations"].as_array().unwrap().len(), 2);
    // The calibrations ran one after another on slot 0, before any run of the pack, and
    // the record says when (the charts draw them there).
    let mut cals: Vec<(f64, f64, u64)> = rep["calibrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["start_s"].as_f64().unwrap(),
                c["wall_s"].as_f64().unwrap(),
                c["slot"].as_u64().unwrap(),
            )
        })
        .collect();
    cals.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!((0.0..2.0).contains(&cals[0].0), "{cals:?}");
    assert!(cals[1].0 >= cals[0].0 + cals[0].1 - 0.05, "{cals:?}");
    assert!(cals.iter().all(|c| c.2 == 0 && c.1 > 1.0), "{cals:?}");
    let cal_end = cals[1].0 + cals[1].1;
    for name in ["bs32", "bs64"] {
        let start = run(&rep, name)["start_s"].as_f64().unwrap();
        assert!(
            start >= cal_end - 0.05,
            "{name} at {start} s, calibrations until {cal_end} s"
        );
    }
    // Slower packed than alone: nothing to flag.
    assert!(s.get("faster_than_solo").is_none(), "{s}");
    assert!(!stdout.contains("baseline problem"), "{stdout}");

    // A budget for one measurement only: the speed-up covers one run and says so.
    let env = Env::new();
    let m2 = std::fs::read_to_string(&m)
        .unwrap()
        .replace(&env_mark_of(&m), &env.mark().display().to_string());
    let m2 = env.manifest(&m2);
    let out = env
        .colloc()
        .args([
            "-j",
            "2",
            "--solo-baseline",
            "--solo-warmup",
            "0s",
            "--solo-window",
            "1500ms",
            "--solo-budget",
            "2s",
            "-f",
        ])
        .arg(&m2)
        .output()
        .unwrap();
    let (stdout, stderr) = succeeded(&out);
    assert!(
        stderr.contains("1 of 2 distinct commands were not measured alone"),
        "{stderr}"
    );
    let rep = env.report();
    assert!(run(&rep, "bs64")["solo_throughput"].is_null());
    let s = &rep["summary"];
    assert_eq!(
        (s["speedup_runs"].as_u64(), s["speedup_of"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(stdout.contains("speed-up at least"), "{stdout}");
}

/// A cold start longer than the solo window (seen on the H200: 67 s before the first line
/// under a fresh MPS server, window 25 s) must not leave a solo figure made of start-up:
/// the window begins at the first throughput line, so the figure is the true rate, taken
/// over about a whole window.
#[test]
fn solo_window_begins_at_the_first_throughput_line() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[[run]]\nname = 'cold'\ncommand = ['python3', '{rate}']\nenv = {{ RATE_DIR = '{}', BASE = '80', STARTUP = '2', DURATION = '30' }}\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args([
            "--solo-baseline",
            "--solo-warmup",
            "0s",
            "--solo-window",
            "1500ms",
            "-f",
        ])
        .arg(&m)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rep = env.report();
    let solo = run(&rep, "cold")["solo_throughput"].as_f64();
    assert!(
        solo.is_some_and(|s| close(s, 80.0, 0.05)),
        "solo {solo:?}\n{stdout}\n{stderr}"
    );
    // The window ending is the plan, not a time-out.
    assert!(!stderr.contains("cold: timed out"), "{stderr}");
    // 2 s of start-up, then the 1.5 s window; the run itself would go on for 30 s.
    let cal = &rep["calibrations"][0];
    let wall = cal["wall_s"].as_f64().unwrap();
    assert!((3.3..10.0).contains(&wall), "{cal}");
}

/// Runs faster packed than alone (1.3x each here; on the H200 a host-bound solo run did
/// this): their solo figures are too low and the report says so, naming each run.
#[test]
fn runs_faster_packed_than_alone_are_a_baseline_problem() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ RATE_DIR = '{}', BASE = '100', FACTORS = '1,1.3', DURATION = '2' }}\n[[run]]\nname = 'a'\ncommand = ['python3', '{rate}']\n[[run]]\nname = 'b'\ncommand = ['python3', '{rate}']\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args([
            "-j",
            "2",
            "--solo-baseline",
            "--solo-warmup",
            "0s",
            "--solo-window",
            "1s",
            "-f",
        ])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let rep = env.report();
    let f = rep["summary"]["faster_than_solo"].as_array().unwrap();
    let names: Vec<&str> = f.iter().map(|x| x["run"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"], "{f:?}");
    for x in f {
        let ratio = x["throughput"].as_f64().unwrap() / x["solo"].as_f64().unwrap();
        assert!(close(ratio, 1.3, 0.08), "{x}");
    }
    assert!(
        stdout.contains("note: baseline problem: 2 runs ran faster packed than alone (a +"),
        "{stdout}"
    );
}

/// The mark dir a manifest written by [`Env::manifest`] names in its RATE_DIR.
fn env_mark_of(manifest: &std::path::Path) -> String {
    manifest
        .parent()
        .unwrap()
        .join("mark")
        .display()
        .to_string()
}

/// A run that prints one line and crashes does no work: it cannot supply half of the
/// aggregate, whatever its one line says.
#[test]
fn a_single_sample_adds_no_work_to_the_aggregate() {
    let env = Env::new();
    let m = env.manifest(
        "[[run]]\nname = 'crash'\ncommand = ['sh', '-c', 'echo img/s=11000; sleep 0.5; exit 1']\n[[run]]\nname = 'steady'\ncommand = ['sh', '-c', 'i=0; while [ $i -lt 20 ]; do echo img/s=100; sleep 0.1; i=$((i+1)); done']\n",
    );
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    let crash = &run(&rep, "crash")["throughput"];
    assert_eq!(crash["count"], 1);
    assert_eq!(crash["work"], 0.0);
    let steady = run(&rep, "steady")["throughput"]["work"].as_f64().unwrap();
    let makespan = rep["summary"]["makespan_s"].as_f64().unwrap();
    let agg = rep["summary"]["aggregate_throughput"].as_f64().unwrap();
    assert!(
        close(agg, steady / makespan, 1e-9),
        "{agg} vs {steady}/{makespan}"
    );
    assert!(agg <= 100.0, "{agg}");
}

/// Every attempt counts in wall time and makespan, and the OOM shows in table and CSV.
#[test]
fn retries_count_in_wall_time_and_makespan_and_the_oom_shows() {
    let env = Env::new();
    let script = "sleep 0.6; if [ $COLLOC_RUN_ATTEMPT = 1 ]; then echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2; exit 1; fi; echo img/s=42";
    let out = env
        .colloc()
        .args(["-j", "1", "--retries", "2", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let rep = env.report();
    let r = run(&rep, "run1");
    let wall = r["wall_s"].as_f64().unwrap();
    assert!(wall >= 1.2, "both attempts' time: {wall}");
    assert!(rep["summary"]["makespan_s"].as_f64().unwrap() >= 1.2);
    assert_eq!(rep["summary"]["oom_attempts"], 1);
    let row = &csv_rows(&env)[0];
    assert_eq!(
        (row["attempts"].as_str(), row["oom_attempts"].as_str()),
        ("2", "1")
    );
    assert!(stdout.contains("succeeded after 1 OOM"), "{stdout}");
    assert!(
        stdout.contains("2 attempts (1 with CUDA out of memory)"),
        "{stdout}"
    );
}

/// `epoch_time=` anywhere on a line is an epoch; epochs numbered on lines run from one
/// epoch's first line to the next, and the last is never timed to the process's exit.
#[test]
fn epoch_times_come_from_the_output_and_never_from_the_exit() {
    let env = Env::new();
    let m = env.manifest(
        "[[run]]\nname = 'stated'\ncommand = ['sh', '-c', 'echo epoch_time=1.5; echo step; echo \"done epoch_time: 2.5\"']\n[[run]]\nname = 'numbered'\ncommand = ['sh', '-c', 'echo Epoch 1; sleep 0.3; echo Epoch 2; sleep 0.3; echo Epoch 3']\n",
    );
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert!(out.status.success());
    let rep = env.report();
    let stated: Vec<(u64, f64)> = run(&rep, "stated")["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["epoch"].as_u64().unwrap(), e["seconds"].as_f64().unwrap()))
        .collect();
    assert_eq!(stated, [(1, 1.5), (2, 2.5)]);
    let numbered = run(&rep, "numbered")["epochs"].as_array().unwrap().clone();
    assert_eq!(numbered.len(), 2, "epoch 3 has no end: {numbered:?}");
    for e in &numbered {
        let s = e["seconds"].as_f64().unwrap();
        assert!((0.25..5.0).contains(&s), "{e}");
    }
}

/// The unit comes from the regex, and a regex that never matches is warned about.
#[test]
fn units_come_from_the_metric_regex_and_a_regex_that_never_matches_is_named() {
    let env = Env::new();
    let m = env.manifest(
        "[[run]]\nname = 'images'\nmetric = 'img/s=(?P<value>[0-9.]+)'\ncommand = ['sh', '-c', 'echo img/s=5; sleep 0.2; echo img/s=5']\n[[run]]\nname = 'tokens'\nmetric = 'tok/s: (?P<value>[0-9]+)'\ncommand = ['sh', '-c', 'echo tokens per second 5']\n",
    );
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert!(out.status.success());
    let rep = env.report();
    assert_eq!(rep["summary"]["throughput_unit"], "img/s");
    assert_eq!(run(&rep, "images")["throughput"]["unit"], "img/s");
    assert_eq!(run(&rep, "tokens")["throughput_unmatched"], true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header = stdout.lines().find(|l| l.starts_with("run ")).unwrap();
    assert!(header.contains(" img/s "), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tokens: no line of its output matched the metric regex \"tok/s: (?P<value>[0-9]+)\" (1 lines read)"),
        "{stderr}"
    );
}

/// A sweep's grid values are columns and an object; the manifest's metrics give their last
/// and best values.
#[test]
fn sweeps_carry_their_grid_values_and_metrics() {
    let env = Env::new();
    let m = env.manifest(
        "[defaults]\nmetrics = { loss = 'loss=(?P<value>[0-9.]+)', acc = 'acc=([0-9.]+)' }\n[[sweep]]\nname = 'bs{bs}-lr{lr}'\ncommand = ['sh', '-c', 'echo loss=0.5 acc=0.1; echo loss=0.3 acc=0.4; echo loss=0.4 acc=0.3']\ngrid = { bs = [32, 64], lr = ['0.1'] }\n",
    );
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert!(out.status.success());
    let rep = env.report();
    let r = run(&rep, "bs64-lr0.1");
    assert_eq!(r["grid"]["bs"], "64");
    assert_eq!(r["grid"]["lr"], "0.1");
    assert_eq!(r["metrics"]["loss"]["last"], 0.4);
    assert_eq!(r["metrics"]["loss"]["best"], 0.3);
    assert_eq!(r["metrics"]["loss"]["best_is"], "min");
    assert_eq!(r["metrics"]["acc"]["best"], 0.4);
    assert_eq!(r["metrics"]["acc"]["best_is"], "max");
    let rows = csv_rows(&env);
    let row = rows.iter().find(|r| r["name"] == "bs64-lr0.1").unwrap();
    assert_eq!(row["grid_bs"], "64");
    assert_eq!(row["grid_lr"], "0.1");
    assert_eq!(row["loss_best"], "0.300");
    assert_eq!(row["acc_last"], "0.300");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("loss best"), "{stdout}");
}

/// Three runs on two slots, each silent for 1 s of start-up, then 100 img/s alone and 75
/// each when two run: a and b together (150 img/s on the GPU), then c alone. The steady
/// aggregate (while both slots ran past start-up) must read 150; work over makespan,
/// which counts start-ups and c's lone tail, must read well below it; each run's start-up
/// must be its silence; the table must name which figure is which.
#[test]
fn the_steady_aggregate_and_start_up_stand_beside_work_over_makespan() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ RATE_DIR = '{}', BASE = '100', FACTORS = '1,0.75', STARTUP = '1', DURATION = '3' }}\n[[run]]\nname = 'a'\ncommand = ['python3', '{rate}']\n[[run]]\nname = 'b'\ncommand = ['python3', '{rate}']\n[[run]]\nname = 'c'\ncommand = ['python3', '{rate}']\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let rep = env.report();
    let s = &rep["summary"];
    let steady = s["steady_throughput"].as_f64().unwrap();
    assert!(close(steady, 150.0, 0.05), "steady {steady}\n{stdout}");
    let over = s["aggregate_throughput"].as_f64().unwrap();
    assert!(
        over < 0.85 * steady,
        "work over makespan {over} vs steady {steady}"
    );
    // a and b produce together for about their 3 s; never longer.
    let secs = s["steady_s"].as_f64().unwrap();
    assert!(secs > 1.5 && secs <= 3.2, "{secs} s steady");
    for name in ["a", "b", "c"] {
        let r = run(&rep, name);
        let st = r["startup_s"].as_f64().unwrap();
        // At least its 1 s of silence and less than its whole run.
        assert!(st >= 1.0 && st < r["wall_s"].as_f64().unwrap() - 2.0, "{r}");
        assert_eq!(r["attempts"][0]["startup_s"].as_f64(), Some(st));
    }
    assert!(
        stdout.contains(&format!("(work over makespan); steady {steady:.1} img/s")),
        "{stdout}"
    );
    assert!(
        stdout.contains("while all 2 slots ran past start-up"),
        "{stdout}"
    );
    assert!(stdout.contains("start s: from a run's start to its first throughput line"));
    let rows = csv_rows(&env);
    assert!(rows.iter().all(|r| !r["startup_s"].is_empty()), "{rows:?}");
}

/// A solo figure is `n = 1` of bench's path with one warm-up rule: the same stand-in
/// (20 img/s for its first second of output, a warm-up, then 100 img/s) measured alone
/// by `colloc run --solo-baseline` and by `colloc bench` must read the same, 100 img/s,
/// with the same warm-up left out. (Counting the warm-up in read (20 + 100 * 2) / 3 = 73.)
#[test]
fn run_and_bench_give_the_same_solo_figure() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let vars = format!(
        "RATE_DIR = '{}', BASE = '100', WARM_S = '1', WARM_RATE = '20', DURATION = '5'",
        env.mark().display()
    );
    let m = env.manifest(&format!(
        "[[run]]\nname = 'w'\ncommand = ['python3', '{rate}']\nenv = {{ {vars} }}\n"
    ));
    let out = env
        .colloc()
        .args([
            "--solo-baseline",
            "--solo-warmup",
            "1500ms",
            "--solo-window",
            "2s",
            "-f",
        ])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    let from_run = run(&env.report(), "w")["solo_throughput"].as_f64().unwrap();

    let bench_dir = env.path().join("bench");
    let out = BenchCmd::new(&env.path().join("bench.toml"), &bench_dir)
        .modes("naive")
        .counts("2")
        .times("2s", "1500ms")
        .workload(["python3", &rate])
        .env("RATE_DIR", env.mark())
        .env("BASE", "100")
        .env("WARM_S", "1")
        .env("WARM_RATE", "20")
        .env("DURATION", "60")
        .output()
        .unwrap();
    succeeded(&out);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bench_dir.join("bench.json")).unwrap())
            .unwrap();
    let from_bench = j["solo"].as_f64().unwrap();
    assert!(close(from_run, 100.0, 0.03), "run: {from_run}");
    assert!(close(from_bench, 100.0, 0.03), "bench: {from_bench}");
    assert!(
        close(from_run, from_bench, 0.03),
        "{from_run} vs {from_bench}"
    );
}
