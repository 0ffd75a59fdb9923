//! `colloc run` packing plain processes (no GPU): slot limits, recording, failures,
//! retries, timeouts, fail-fast and solo figures.

mod run_support;

use run_support::{fixture, run, succeeded, Env};

/// Parse `start NS` / `end NS` lines that a run logged itself.
fn interval(env: &Env, name: &str) -> (u128, u128) {
    let text = std::fs::read_to_string(env.mark().join(format!("{name}.times"))).unwrap();
    let mut start = None;
    let mut end = None;
    for line in text.lines() {
        let (k, v) = line.split_once(' ').unwrap();
        let v: u128 = v.trim().parse().unwrap();
        match k {
            "start" => start = Some(v),
            "end" => end = Some(v),
            _ => panic!("bad line {line}"),
        }
    }
    (start.unwrap(), end.unwrap())
}

fn max_overlap(iv: &[(u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = Vec::new();
    for &(s, e) in iv {
        events.push((s, 1));
        events.push((e, -1));
    }
    // at equal times, ends before starts
    events.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

#[test]
fn six_runs_on_three_slots_never_exceed_three_and_all_are_recorded() {
    let env = Env::new();
    let m = env.manifest(&format!(
        "[[sweep]]\nname = 'r{{i}}'\ncommand = ['{}', '0', '4']\ngrid = {{ i = ['1', '2', '3', '4', '5', '6'] }}\n",
        fixture("work.sh")
    ));
    let out = env
        .colloc()
        .args(["-j", "3", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // the live view is prefixed with the run's name
    assert!(stdout.contains("[r4] Epoch 1 step img/s=400.5"), "{stdout}");
    assert!(stdout.contains("aggregate throughput"), "{stdout}");

    let names: Vec<String> = (1..=6).map(|i| format!("r{i}")).collect();
    let own: Vec<(u128, u128)> = names.iter().map(|n| interval(&env, n)).collect();
    let overlap = max_overlap(&own);
    assert!(overlap <= 3, "runs' own logs show {overlap} at once");
    assert!(overlap >= 2, "runs were not packed at all: {own:?}");

    let rep = env.report();
    assert_eq!(rep["schema"], 2);
    assert_eq!(rep["slots"].as_array().unwrap().len(), 3);
    assert!(rep["summary"]["max_concurrent"].as_u64().unwrap() <= 3);
    for (i, n) in names.iter().enumerate() {
        let r = run(&rep, n);
        assert_eq!(r["state"], "succeeded");
        assert_eq!(r["exit_code"], 0);
        assert_eq!(r["index"], i);
        let tp = &r["throughput"];
        assert_eq!(tp["unit"], "img/s");
        let want = 100.0 * (i as f64 + 1.0) + 0.5;
        let mean = tp["mean"].as_f64().unwrap();
        assert!((mean - want).abs() < 1e-6 * want, "{n}: {mean} vs {want}");
        assert_eq!(tp["count"], 4);
        // four `Epoch N` lines time three epochs: the last one's end is unknown
        assert_eq!(r["epochs"].as_array().unwrap().len(), 3);
        assert!(r["gpu"].is_null());
        assert!(r["slot"].as_u64().unwrap() < 3);
        let log =
            std::fs::read_to_string(env.report_dir().join(r["log"].as_str().unwrap())).unwrap();
        assert!(log.contains("Epoch 4 step"), "{log}");
    }
    // the report's own start/end times agree: never more than 3 at once
    let rec: Vec<(u128, u128)> = names
        .iter()
        .map(|n| {
            let r = run(&rep, n);
            let s = (r["start_s"].as_f64().unwrap() * 1e6) as u128;
            let e = (r["end_s"].as_f64().unwrap() * 1e6) as u128;
            (s, e)
        })
        .collect();
    assert!(max_overlap(&rec) <= 3);
    let csv = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.lines().nth(1).unwrap().starts_with("r1,0,succeeded,0,"));
    let png = std::fs::read(env.report_dir().join("colloc-throughput.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn a_failing_run_is_recorded_others_finish_and_colloc_exits_1() {
    let env = Env::new();
    let w = fixture("work.sh");
    let m = env.manifest(&format!(
        "[[run]]\nname = 'ok1'\ncommand = ['{w}']\n[[run]]\nname = 'bad'\ncommand = ['{w}', '3']\n[[run]]\nname = 'ok2'\ncommand = ['{w}']\n[[run]]\nname = 'ok3'\ncommand = ['{w}']\n"
    ));
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    assert_eq!(run(&rep, "bad")["exit_code"], 3);
    assert_eq!(run(&rep, "bad")["state"], "failed");
    for n in ["ok1", "ok2", "ok3"] {
        assert_eq!(run(&rep, n)["state"], "succeeded", "{n}");
    }
    assert_eq!(rep["summary"]["failed"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad: failed (exit code 3)"), "{stderr}");
}

#[test]
fn fail_fast_stops_the_rest() {
    let env = Env::new();
    let m = env.manifest(&format!(
        "[[run]]\nname = 'bad'\ncommand = ['sh', '-c', 'exit 5']\n[[run]]\nname = 'long'\ncommand = ['{}']\n[[run]]\nname = 'later'\ncommand = ['{}']\n",
        fixture("term.sh"),
        fixture("term.sh")
    ));
    let out = env
        .colloc()
        .args(["-j", "2", "--fail-fast", "--grace", "5s", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    assert_eq!(run(&rep, "bad")["exit_code"], 5);
    assert_eq!(run(&rep, "later")["state"], "not_started");
    // "long" may have been stopped, or not yet started when "bad" ended
    let long = run(&rep, "long")["state"].as_str().unwrap().to_string();
    assert!(long == "interrupted" || long == "not_started", "{long}");
    assert!(rep["stopped_by"].as_str().unwrap().contains("--fail-fast"));
}

#[test]
fn oom_failures_are_retried() {
    let env = Env::new();
    let out = env
        .colloc()
        .args(["-j", "1", "--retries", "1", "--", &fixture("oom.sh")])
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env.report();
    let r = run(&rep, "run1");
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["oom"], true);
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(attempts[1]["state"], "succeeded");
    assert_eq!(r["throughput"]["mean"], 42.0);
    // without retries the same run fails
    let env = Env::new();
    let out = env
        .colloc()
        .args(["-j", "1", "--", &fixture("oom.sh")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    assert_eq!(run(&rep, "run1")["oom"], true);
    assert_eq!(run(&rep, "run1")["attempts"].as_array().unwrap().len(), 1);
}

#[test]
fn a_run_past_its_timeout_is_stopped_and_marked() {
    let env = Env::new();
    let m = env.manifest(&format!(
        "[[run]]\nname = 'slow'\ntimeout = '1s'\ncommand = ['{}']\n[[run]]\nname = 'quick'\ncommand = ['true']\n",
        fixture("term.sh")
    ));
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    assert_eq!(run(&rep, "slow")["state"], "timed_out");
    assert_eq!(run(&rep, "slow")["exit_code"], 143);
    assert_eq!(run(&rep, "quick")["state"], "succeeded");
    assert!(env.marks().contains(&"slow.term".to_string()));
}

#[test]
fn solo_baseline_and_earlier_reports_give_a_speedup() {
    let env = Env::new();
    let cmd = [
        "sh",
        "-c",
        "echo img/s=50; echo img/s=50; echo img/s=50; sleep 0.3",
    ];
    let out = env
        .colloc()
        .args([
            "-j",
            "2",
            "-n",
            "2",
            "--solo-baseline",
            "--solo-warmup",
            "0s",
            "--solo-window",
            "30s",
            "--",
        ])
        .args(cmd)
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env.report();
    let s = &rep["summary"];
    // Samples of 50 img/s averaged over the window they cover: 50 up to rounding.
    let solo = run(&rep, "run1")["solo_throughput"].as_f64().unwrap();
    assert!((solo - 50.0).abs() < 1e-9, "{solo}");
    assert!(s["speedup"].as_f64().unwrap() > 0.0);
    assert!(s["solo_source"]
        .as_str()
        .unwrap()
        .contains("--solo-baseline"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // two copies of one command: one measurement alone covers both
    assert!(
        stdout.contains("solo throughput of run1: 50.0 img/s"),
        "{stdout}"
    );
    assert!(stdout.contains("(1 of 1 distinct commands)"), "{stdout}");
    assert_eq!(rep["calibrations"].as_array().unwrap().len(), 1);
    // the calibration has its own log
    assert!(env.report_dir().join("logs/solo/run1.log").is_file());

    // the same figures from that report, for runs of the same command only
    let first = env.report_dir().join("colloc-report.json");
    let env2 = Env::new();
    let m = env2.manifest(&format!(
        "[[run]]\nname = 'same'\ncommand = {cmd:?}\n[[run]]\nname = 'other'\ncommand = ['sh', '-c', 'echo img/s=40; echo img/s=40']\n"
    ));
    let out = env2
        .colloc()
        .args(["-j", "2", "--baseline"])
        .arg(&first)
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env2.report();
    let solo = run(&rep, "same")["solo_throughput"].as_f64().unwrap();
    assert!((solo - 50.0).abs() < 1e-9, "{solo}");
    assert!(run(&rep, "other")["solo_throughput"].is_null());
    assert_eq!(rep["summary"]["speedup_runs"], 1);
    assert_eq!(rep["summary"]["speedup_of"], 2);
}

#[test]
fn runs_get_their_name_index_and_manifest_env() {
    let env = Env::new();
    let m = env.manifest(
        "[defaults]\nenv = { A = 'd', B = 'd' }\n[[run]]\nname = 'x'\nenv = { B = 'x' }\ncommand = 'echo \"$COLLOC_RUN_NAME $COLLOC_RUN_INDEX $A $B\" > \"$MARK/env\"'\n",
    );
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    succeeded(&out);
    let got = std::fs::read_to_string(env.mark().join("env")).unwrap();
    assert_eq!(got.trim(), "x 0 d x");
}

#[test]
fn no_gpu_gives_exactly_one_nvml_warning() {
    let env = Env::new();
    let out = env
        .colloc()
        .args(["-j", "2", "-n", "3", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().filter(|l| l.contains("NVML")).count(),
        1,
        "{stderr}"
    );
    assert!(env.report()["gpus"].is_null());
}

/// Inside an mps job with several GPUs (one MPS daemon per GPU, as the plugin starts them),
/// each run talks to the daemon of its own slot's GPU.
#[test]
fn runs_in_a_multi_gpu_mps_job_get_their_gpus_daemon() {
    let env = Env::new();
    let out = env
        .colloc()
        .env("COLLOC_MODE", "mps:2")
        .env("COLLOC_DEVICES", "GPU-a,GPU-a,GPU-b,GPU-b")
        .env("COLLOC_SLOTS", "4")
        .env("CUDA_MPS_PIPE_DIRECTORY", "/run/colloc/job-7/gpu0/pipe")
        .env(
            "COLLOC_MPS_PIPES",
            "GPU-a=/run/colloc/job-7/gpu0/pipe,GPU-b=/run/colloc/job-7/gpu1/pipe",
        )
        .args(["-n", "4", "--", "sh", "-c"])
        .arg(r#"echo "$CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" > "$MARK/$COLLOC_RUN_INDEX""#)
        .output()
        .unwrap();
    succeeded(&out);
    let mut seen: Vec<String> = (0..4)
        .map(|i| {
            std::fs::read_to_string(env.mark().join(i.to_string()))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "GPU-a /run/colloc/job-7/gpu0/pipe /run/colloc/job-7/gpu0/log",
            "GPU-a /run/colloc/job-7/gpu0/pipe /run/colloc/job-7/gpu0/log",
            "GPU-b /run/colloc/job-7/gpu1/pipe /run/colloc/job-7/gpu1/log",
            "GPU-b /run/colloc/job-7/gpu1/pipe /run/colloc/job-7/gpu1/log",
        ]
    );
}

/// A reader that goes away (`colloc run ... 2>&1 | head -1`, a hung-up terminal) must not
/// abort colloc half way: the runs finish and the report is written.
#[test]
fn a_closed_stdout_and_stderr_do_not_abort_the_pack() {
    let env = Env::new();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    let mut child = cmd
        .env("COLLOC_CONFIG", env.path().join("no-config.toml"))
        .env_remove("COLLOC_MODE")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .current_dir(env.path())
        .arg("run")
        .arg("--report-dir")
        .arg(env.report_dir())
        .args([
            "-j",
            "2",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "echo img/s=5; sleep 0.3; echo img/s=6",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let rep = env.report();
    assert_eq!(rep["runs"].as_array().unwrap().len(), 3);
}

/// tqdm-style output (cursor moves, colours, carriage returns) reaches neither a piped
/// live view nor the scanner as escapes: the view shows text, the rate is still read.
#[test]
fn terminal_escapes_stay_out_of_a_piped_live_view() {
    let env = Env::new();
    let m = env.manifest(
        "[[run]]\nname = 'bar'\ncommand = ['sh', '-c', 'for i in 1 2 3 4 5; do printf \"\\033[A\\033[2K\\033[32m%s%%|##|\\033[0m img/s=40\\r\" $i; sleep 0.1; done; printf \"\\033]0;title\\007done\\n\"']\n",
    );
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    let (stdout, _) = succeeded(&out);
    assert!(!stdout.contains('\u{1b}'), "{stdout:?}");
    assert!(stdout.contains("[bar] done"), "{stdout}");
    let rep = env.report();
    let run = rep["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "bar")
        .unwrap();
    assert_eq!(run["throughput"]["unit"], "img/s", "{run}");
    assert!(
        run["throughput"]["samples"].as_array().unwrap().len() >= 2,
        "{run}"
    );
}
