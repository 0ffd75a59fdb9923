//! SIGTERM to `colloc run` mid-pack: every running run's process group gets it, the rest
//! never start, and the report is still written.

mod run_support;

use std::time::Duration;

use run_support::{fixture, run, wait_for, Env};

/// `colloc run ARGS -f MANIFEST` in the background, its runs marking into `env.mark()`.
fn spawn_pack(env: &Env, args: &[&str], manifest: &std::path::Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"))
        .args(env.colloc().get_args())
        .current_dir(env.path())
        .env("COLLOC_CONFIG", env.path().join("none.toml"))
        .env("MARK", env.mark())
        .env_remove("COLLOC_MODE")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .args(args)
        .arg("-f")
        .arg(manifest)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn stop_midway(sig: i32) {
    let env = Env::new();
    let t = fixture("term.sh");
    let m = env.manifest(&format!(
        "[[sweep]]\nname = 'w{{i}}'\ncommand = ['{t}']\ngrid = {{ i = [1, 2, 3, 4, 5] }}\n"
    ));
    let child = spawn_pack(&env, &["-j", "3", "--grace", "20s"], &m);
    wait_for("three runs to start", || {
        env.marks()
            .iter()
            .filter(|m| m.ends_with(".started"))
            .count()
            == 3
    });
    run_support::kill(child.id(), sig);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let marks = env.marks();
    let started: Vec<&String> = marks.iter().filter(|m| m.ends_with(".started")).collect();
    assert_eq!(started.len(), 3, "{marks:?}");
    for s in &started {
        let name = s.trim_end_matches(".started");
        assert!(
            marks.contains(&format!("{name}.term")),
            "{name} did not get the signal: {marks:?}"
        );
    }
    let rep = env.report();
    let states: Vec<String> = (1..=5)
        .map(|i| {
            run(&rep, &format!("w{i}"))["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        states.iter().filter(|s| *s == "interrupted").count(),
        3,
        "{states:?}"
    );
    assert_eq!(
        states.iter().filter(|s| *s == "not_started").count(),
        2,
        "{states:?}"
    );
    assert!(rep["stopped_by"]
        .as_str()
        .unwrap()
        .contains("colloc received"));
    assert!(env.report_dir().join("colloc-runs.csv").is_file());
}

#[test]
fn sigterm_reaches_every_run_and_the_report_is_written() {
    stop_midway(libc::SIGTERM);
}

#[test]
fn sigint_is_forwarded_too() {
    // term.sh traps TERM only; SIGINT kills it by signal, which still counts as interrupted.
    let env = Env::new();
    let out = {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"));
        cmd.args(env.colloc().get_args())
            .current_dir(env.path())
            .env("COLLOC_CONFIG", env.path().join("none.toml"))
            .env("MARK", env.mark())
            .env_remove("CUDA_VISIBLE_DEVICES")
            .args([
                "-j",
                "2",
                "-n",
                "2",
                "--",
                "sh",
                "-c",
                "touch \"$MARK/$COLLOC_RUN_NAME\"; sleep 60",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        wait_for("two runs", || env.marks().len() == 2);
        run_support::kill(child.id(), libc::SIGINT);
        child.wait_with_output().unwrap()
    };
    assert_eq!(out.status.code(), Some(1));
    let rep = env.report();
    for n in ["run1", "run2"] {
        assert_eq!(run(&rep, n)["state"], "interrupted");
        assert_eq!(run(&rep, n)["signal"], libc::SIGINT);
    }
}

#[test]
fn a_run_waiting_for_its_oom_retry_is_reported_by_its_failed_attempt() {
    // -j 1: "oomy" fails with CUDA OOM and is queued again behind "long"; colloc is
    // stopped while "long" runs, so the retry never starts. The report must show the
    // attempt that did run (failed, oom, 1 attempt), not "not_started".
    let env = Env::new();
    let m = env.manifest(&format!(
        "[[run]]\nname = 'oomy'\ncommand = ['{}']\n[[run]]\nname = 'long'\ncommand = ['{}']\n",
        fixture("oom.sh"),
        fixture("term.sh")
    ));
    let child = spawn_pack(&env, &["-j", "1", "--retries", "1"], &m);
    wait_for("long to start", || {
        env.marks().iter().any(|m| m == "long.started")
    });
    run_support::kill(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep = env.report();
    assert_eq!(run(&rep, "long")["state"], "interrupted");
    let oomy = run(&rep, "oomy");
    assert_eq!(oomy["state"], "failed", "{oomy}");
    assert_eq!(oomy["oom"], true, "{oomy}");
    assert_eq!(oomy["attempts"].as_array().unwrap().len(), 1, "{oomy}");
    assert_eq!(oomy["exit_code"], 1, "{oomy}");
}

/// Slurm tears a job down by signalling every process in it (scancel, requeue, time
/// limit), so a run can die of SIGTERM a moment before colloc gets its own. Such a run
/// was interrupted with the pack, not failed (a resumed pack runs it again); a run that
/// dies of SIGTERM while colloc is told nothing failed, as before.
#[test]
fn a_run_killed_by_the_job_teardown_just_before_colloc_is_interrupted() {
    let env = Env::new();
    let m = env.manifest(
        "[[sweep]]\nname = 'r{i}'\ncommand = ['sh', '-c', 'echo $$ > \"$MARK/$COLLOC_RUN_NAME.pid.tmp\" && mv \"$MARK/$COLLOC_RUN_NAME.pid.tmp\" \"$MARK/$COLLOC_RUN_NAME.pid\" && exec sleep 60']\ngrid = { i = [1, 2] }\n",
    );
    let child = spawn_pack(&env, &["-j", "2"], &m);
    wait_for("both runs to start", || {
        env.marks().iter().filter(|m| m.ends_with(".pid")).count() == 2
    });
    let pid = |name: &str| -> u32 {
        std::fs::read_to_string(env.mark().join(format!("{name}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // r1 alone: killed from outside, colloc goes on.
    run_support::kill(pid("r1"), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(2500));
    // r2, then colloc 0.2 s later, as a job teardown does.
    run_support::kill(pid("r2"), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    run_support::kill(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let rep = env.report();
    let r1 = run(&rep, "r1");
    assert_eq!(r1["state"], "failed", "{r1}");
    assert_eq!(r1["attempts"][0]["signal"], libc::SIGTERM, "{r1}");
    // Its end is when it died, not after the wait for colloc's own signal.
    let wall = r1["wall_s"].as_f64().unwrap();
    assert!(wall < 2.0, "r1 ran {wall} s");
    let r2 = run(&rep, "r2");
    assert_eq!(r2["state"], "interrupted", "{r2}\n{stderr}");
}
