//! The durable record of `colloc run` (issue 13): nothing a user ran is lost to `kill -9`,
//! a full disk or a requeue; SIGUSR2 reaches every run; `--resume` finishes only the rest;
//! `colloc report DIR` renders the record at any time.

mod run_support;

use std::collections::BTreeMap;
use std::time::Duration;

use run_support::{kill, processes_with_env, run, succeeded, wait_for, Env};
use serde_json::{json, Value};

/// A sweep of `n` runs `r1..rn`; run i > `quick` waits for `$MARK/go`. Each run starts a
/// grandchild (`sleep 300 &`) and, when it succeeds, appends its name to `$MARK/count`.
fn sweep(env: &Env, n: usize, quick: usize) -> std::path::PathBuf {
    let script = format!(
        "sleep 300 & if [ \"$I\" -gt {quick} ]; then while [ ! -e \"$MARK/go\" ]; do sleep 0.05; done; fi; echo img/s=10; echo \"$COLLOC_RUN_NAME\" >> \"$MARK/count\""
    );
    let values: Vec<String> = (1..=n).map(|i| format!("'{i}'")).collect();
    env.manifest(&format!(
        "[[sweep]]\nname = 'r{{i}}'\ncommand = ['sh', '-c', '{script}']\nenv = {{ I = '{{i}}' }}\ngrid = {{ i = [{}] }}\n",
        values.join(", ")
    ))
}

fn count(env: &Env) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in std::fs::read_to_string(env.mark().join("count"))
        .unwrap_or_default()
        .lines()
    {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

fn n_succeeded(rep: &Value) -> u64 {
    rep["summary"]["succeeded"].as_u64().unwrap_or(0)
}

#[test]
fn kill_9_mid_pack_leaves_a_valid_report_no_process_and_resume_finishes_the_rest() {
    let env = Env::new();
    let m = sweep(&env, 30, 10);
    let m = m.to_str().unwrap().to_string();
    let child = env.spawn(&["-j", "4", "-q", "-f", &m]);
    wait_for("10 runs to finish and be in the report", || {
        count(&env).len() == 10 && env.try_report().is_some_and(|r| n_succeeded(&r) == 10)
    });
    // Four runs hold the slots now, each with a grandchild.
    wait_for("the blocked runs to start", || {
        processes_with_env(&env.tag()).len() >= 8
    });
    kill(child.id(), libc::SIGKILL);
    let _ = child.wait_with_output();
    // The report in the directory is whole, and lists every run that had finished.
    let rep = env.report();
    assert_eq!(n_succeeded(&rep), 10, "{}", rep["summary"]);
    for i in 1..=10 {
        assert_eq!(run(&rep, &format!("r{i}"))["state"], "succeeded");
    }
    // Nothing of the pack is left: runs, their grandchildren, supervisors.
    wait_for("every process of the pack to end", || {
        processes_with_env(&env.tag()).is_empty()
    });
    // colloc report rebuilds it from the event log: the runs colloc never saw end are
    // interrupted.
    let out = env
        .colloc_bin()
        .args(["report", "--json", "--no-write"])
        .arg(env.report_dir())
        .output()
        .unwrap();
    succeeded(&out);
    let rebuilt: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rebuilt["summary"]["interrupted"], 4,
        "{}",
        rebuilt["summary"]
    );
    assert_eq!(rebuilt["running"], false);

    // --resume finishes only the rest.
    std::fs::write(env.mark().join("go"), "").unwrap();
    let out = env
        .colloc()
        .env(
            env.tag().split_once('=').unwrap().0,
            env.tag().split_once('=').unwrap().1,
        )
        .args(["-j", "4", "-q", "--resume", "-f", &m])
        .output()
        .unwrap();
    succeeded(&out);
    let c = count(&env);
    assert_eq!(c.len(), 30, "{c:?}");
    assert!(c.values().all(|&n| n == 1), "a run succeeded twice: {c:?}");
    let rep = env.report();
    assert_eq!(n_succeeded(&rep), 30);
    assert_eq!(rep["sessions"].as_array().unwrap().len(), 2);
    let twice: Vec<&Value> = rep["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["attempts"].as_array().unwrap().len() == 2)
        .collect();
    assert_eq!(twice.len(), 4, "the four interrupted runs ran again");
    for r in twice {
        let a = r["attempts"].as_array().unwrap();
        assert_eq!(a[0]["state"], "interrupted");
        assert_eq!(a[0]["session"], 1);
        assert_eq!(a[1]["session"], 2);
        // the earlier attempt's log is kept beside the new one
        let name = r["name"].as_str().unwrap();
        assert_eq!(a[0]["log"], format!("logs/{name}.1.log"));
        assert!(env
            .report_dir()
            .join(format!("logs/{name}.1.log"))
            .is_file());
        assert!(env.report_dir().join(format!("logs/{name}.log")).is_file());
    }
    assert!(processes_with_env(&env.tag()).is_empty());
}

#[test]
fn sigusr2_reaches_every_run_is_recorded_and_does_not_stop_colloc() {
    let env = Env::new();
    let m = env.manifest(
        "[[sweep]]\nname = 'w{i}'\ncommand = ['bash', '-c', 'trap \"touch $MARK/$COLLOC_RUN_NAME.usr1\" USR2; touch $MARK/$COLLOC_RUN_NAME.started; i=0; while [ ! -e $MARK/$COLLOC_RUN_NAME.usr1 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e $MARK/$COLLOC_RUN_NAME.usr1 ]']\ngrid = { i = [1, 2, 3] }\n",
    );
    let child = env.spawn(&["-j", "3", "-f", m.to_str().unwrap()]);
    wait_for("three runs to start", || {
        env.marks()
            .iter()
            .filter(|m| m.ends_with(".started"))
            .count()
            == 3
    });
    // (SIGUSR1 is the time-limit warning: tests/run_timelimit.rs.)
    kill(child.id(), libc::SIGUSR2);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 1..=3 {
        assert!(
            env.mark().join(format!("w{i}.usr1")).exists(),
            "w{i} got no SIGUSR2"
        );
    }
    let rep = env.report();
    assert_eq!(n_succeeded(&rep), 3);
    let sig = &rep["signals"][0];
    assert_eq!(sig["signal"], "SIGUSR2");
    assert_eq!(sig["runs"].as_array().unwrap().len(), 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SIGUSR2: forwarding it to 3 running run(s)"),
        "{stderr}"
    );
}

#[test]
fn a_report_dir_with_a_record_is_refused_without_resume_and_resumed_in_a_requeued_job() {
    let env = Env::new();
    let m = sweep(&env, 3, 3);
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    assert!(out.status.success());
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("already holds a colloc record")
            && stderr.contains("--resume")
            && stderr.contains("--report-dir"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(count(&env).len(), 3, "nothing ran again");
    // A requeued job (SLURM_RESTART_COUNT > 0) resumes by itself: nothing is left to run.
    let out = env
        .colloc()
        .env("SLURM_RESTART_COUNT", "1")
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    assert!(count(&env).values().all(|&n| n == 1));
    let rep = env.report();
    assert_eq!(rep["sessions"].as_array().unwrap().len(), 2);
    assert_eq!(rep["sessions"][1]["restart_count"], 1);
    // A directory that is not a record is refused too, without mention of --resume.
    let other = env.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let out = env
        .colloc_bin()
        .args(["run", "--report-dir"])
        .arg(&other)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no colloc record"));
}

/// A run for the edited-manifest tests: appends `word` to `$MARK/NAME` and exits `code`.
fn marking(name: &str, word: &str, code: u8) -> String {
    format!(
        "[[run]]\nname = '{name}'\ncommand = ['sh', '-c', 'echo {word} >> \"$MARK/{name}\"; exit {code}']\n"
    )
}

/// The words a run appended, one per attempt.
fn marks_of(env: &Env, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.mark().join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `--resume` with an edited manifest (issue 39): unchanged runs keep their record (a
/// success is not run again), changed and failed ones run again, new ones run, a removed
/// one is said at start and kept in the record as removed; every attempt keeps the
/// definition it ran, and `colloc report` rebuilds the same from the event log.
#[test]
fn an_edited_manifest_resumes_keeping_what_is_unchanged() {
    let env = Env::new();
    let first = [
        marking("a", "a1", 0),
        marking("b", "b1", 1),
        marking("c", "c1", 1),
        marking("d", "d1", 0),
        marking("e", "e1", 1),
    ]
    .concat();
    let m = env.manifest(&first);
    let out = env
        .colloc()
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // b fixed, c unchanged (fails again), d changed, e removed, f new.
    let edited = [
        marking("a", "a1", 0),
        marking("b", "b2", 0),
        marking("c", "c1", 1),
        marking("d", "d2", 0),
        marking("f", "f1", 0),
    ]
    .concat();
    env.manifest(&edited);
    let out = env
        .colloc()
        .args(["--resume", "-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "c still fails: {stderr}");
    for line in [
        "colloc: resume: b: its command changed; it runs again",
        "colloc: resume: d: its command changed; it runs again",
        "colloc: resume: 1 new run(s): f",
        "colloc: resume: e was removed from the manifest; its record is kept and it does not run",
    ] {
        assert_eq!(stdout.matches(line).count(), 1, "{line:?} once in {stdout}");
    }
    let got: Vec<(&str, Vec<String>)> = ["a", "b", "c", "d", "e", "f"]
        .into_iter()
        .map(|n| (n, marks_of(&env, n)))
        .collect();
    let want: Vec<(&str, Vec<String>)> = [
        ("a", vec!["a1"]),
        ("b", vec!["b1", "b2"]),
        ("c", vec!["c1", "c1"]),
        ("d", vec!["d1", "d2"]),
        ("e", vec!["e1"]),
        ("f", vec!["f1"]),
    ]
    .into_iter()
    .map(|(n, v)| (n, v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(got, want, "what ran, attempt by attempt");
    let rep = env.report();
    let b = run(&rep, "b");
    assert_eq!(b["state"], "succeeded");
    assert!(b["command"][2].as_str().unwrap().contains("b2"));
    let a = b["attempts"].as_array().unwrap();
    assert!(
        a[0]["definition"]["command"][2]
            .as_str()
            .unwrap()
            .contains("b1"),
        "the first attempt keeps the command it ran: {}",
        a[0]
    );
    assert!(a[1].get("definition").is_none(), "{}", a[1]);
    assert_eq!(run(&rep, "a")["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(run(&rep, "e")["removed"], true);
    assert_eq!(run(&rep, "e")["state"], "failed");
    assert!(run(&rep, "a").get("removed").is_none());
    let s = &rep["summary"];
    assert_eq!(
        (&s["runs"], &s["removed"], &s["succeeded"], &s["failed"]),
        (&json!(5), &json!(1), &json!(4), &json!(1))
    );
    let csv = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("e,") && l.contains(",removed,")),
        "{csv}"
    );
    // The event log alone gives the same runs.
    let out = env
        .colloc_bin()
        .args(["report", "--json"])
        .arg(env.report_dir())
        .output()
        .unwrap();
    let rebuilt: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shape = |r: &Value| -> Vec<(Value, Value, Value, Vec<Value>)> {
        r["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                let defs = x["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["definition"].clone())
                    .collect();
                (
                    x["name"].clone(),
                    x["state"].clone(),
                    x["removed"].clone(),
                    defs,
                )
            })
            .collect()
    };
    assert_eq!(shape(&rebuilt), shape(&rep));
    assert_eq!(rebuilt["summary"]["removed"], 1);
    // With only the removal left to see, the pack is done: exit 0.
    env.manifest(&[marking("a", "a1", 0), marking("b", "b2", 0)].concat());
    let out = env
        .colloc()
        .args(["--resume", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    assert_eq!(marks_of(&env, "a").len(), 1);
    assert_eq!(marks_of(&env, "b").len(), 2);
}

/// Without `--report-dir`, `--resume` of an edited manifest finds the job's directory
/// by the runs it has in common, and goes on there (no `-2` beside it).
#[test]
fn an_edited_manifest_resumes_in_the_jobs_default_directory() {
    let env = Env::new();
    let colloc = |extra: &[&str]| {
        env.colloc_bin()
            .env("SLURM_JOB_ID", "4242")
            .env_remove("SLURM_RESTART_COUNT")
            .args(["run", "--warn-before", "off"])
            .args(extra)
            .arg("-f")
            .arg(env.path().join("runs.toml"))
            .output()
            .unwrap()
    };
    env.manifest(&[marking("a", "a1", 0), marking("b", "b1", 1)].concat());
    assert_eq!(colloc(&[]).status.code(), Some(1));
    env.manifest(&[marking("a", "a1", 0), marking("b", "b2", 0)].concat());
    let out = colloc(&["--resume"]);
    succeeded(&out);
    assert_eq!(marks_of(&env, "a"), ["a1"]);
    assert_eq!(marks_of(&env, "b"), ["b1", "b2"]);
    assert!(env.path().join("colloc-4242/colloc-report.json").exists());
    assert!(!env.path().join("colloc-4242-2").exists());
}

/// `--resume` of a different sweep altogether (no run in common) is refused, and the
/// record is not touched.
#[test]
fn a_resume_of_another_manifest_altogether_is_refused() {
    let env = Env::new();
    let m = env.manifest(&[marking("a", "a1", 0), marking("b", "b1", 1)].concat());
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let before = std::fs::read(env.report_dir().join("colloc-report.json")).unwrap();
    env.manifest(&[marking("x", "x1", 0), marking("y", "y1", 0)].concat());
    let out = env
        .colloc()
        .args(["--resume", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds the record of another manifest (none of its runs is in this one: x is new, y is new, a is gone, b is gone)")
            && stderr.contains("--report-dir"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(marks_of(&env, "x").is_empty());
    assert_eq!(
        std::fs::read(env.report_dir().join("colloc-report.json")).unwrap(),
        before,
        "the record was touched"
    );
}

#[test]
fn retries_on_any_failure_keep_every_attempt_and_its_log() {
    let env = Env::new();
    let script = "echo attempt $COLLOC_RUN_ATTEMPT; [ $COLLOC_RUN_ATTEMPT -ge 2 ]";
    let out = env
        .colloc()
        .args(["-n", "1", "--retries", "1", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "oom is the default: a plain failure is not retried"
    );
    let env = Env::new();
    let out = env
        .colloc()
        .args([
            "-n",
            "1",
            "--retries",
            "2",
            "--retry-on",
            "any",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env.report();
    let a = run(&rep, "run1")["attempts"].as_array().unwrap().clone();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["exit_code"], 1);
    let first = std::fs::read_to_string(env.report_dir().join("logs/run1.1.log")).unwrap();
    let last = std::fs::read_to_string(env.report_dir().join("logs/run1.log")).unwrap();
    assert_eq!((first.trim(), last.trim()), ("attempt 1", "attempt 2"));
    let out = env
        .colloc()
        .args(["--retry-on", "sometimes", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use oom (CUDA out of memory) or any"));
}

#[test]
fn quiet_prints_only_the_one_line_summary() {
    let env = Env::new();
    let out = env
        .colloc()
        .args([
            "-q",
            "-j",
            "2",
            "-n",
            "40",
            "--",
            "sh",
            "-c",
            "echo img/s=5; echo img/s=5",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with("colloc: 40 runs: 40 succeeded; makespan "),
        "{stdout}"
    );
    assert!(stdout.contains("colloc-report.json"), "{stdout}");
}

#[test]
fn colloc_report_shows_a_pack_while_it_runs() {
    let env = Env::new();
    let m = sweep(&env, 2, 1);
    let child = env.spawn(&["-j", "2", "-f", m.to_str().unwrap()]);
    wait_for("the first run's end in the report", || {
        env.try_report().is_some_and(|r| n_succeeded(&r) == 1)
    });
    let out = env
        .colloc_bin()
        .args(["report", "--no-write"])
        .arg(env.report_dir())
        .output()
        .unwrap();
    succeeded(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("r2 ") && l.contains(" running ")),
        "{table}"
    );
    assert!(table.contains("(the pack is still running)"), "{table}");
    std::fs::write(env.mark().join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let out = env
        .colloc_bin()
        .args(["report", "-q"])
        .arg(env.report_dir())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("colloc: 2 runs: 2 succeeded"));
    // Not a record: one line, exit 2.
    let out = env
        .colloc_bin()
        .args(["report"])
        .arg(env.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_process_that_leaves_the_runs_session_is_named_and_killed() {
    let env = Env::new();
    let child = env.spawn(&[
        "-n",
        "1",
        "--",
        "sh",
        "-c",
        "setsid sleep 300 & sleep 0.5; echo img/s=1",
    ]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("had left the run's session (setsid); it was killed"),
        "{stderr}"
    );
    let rep = env.report();
    let escaped = run(&rep, "run1")["escaped"].as_array().unwrap().clone();
    assert!(!escaped.is_empty(), "{rep}");
    wait_for("the escaped process to be gone", || {
        processes_with_env(&env.tag()).is_empty()
    });
}

/// A full filesystem as report directory: the previous report stays whole, the table is
/// printed, colloc says what failed and exits 1. Needs root (a small tmpfs in a private
/// mount namespace; mode 0755, as colloc writes only into a directory no one else can).
#[test]
fn a_full_disk_keeps_the_previous_report_prints_the_table_and_exits_1() {
    if !run_support::is_root()
        || std::process::Command::new("unshare")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipped: needs root and unshare");
        return;
    }
    let env = Env::new();
    let dir = env.report_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let rep = dir.join("colloc-report.json");
    // b waits until a's success is in the report, then fills the disk with its output.
    let m = env.manifest(&format!(
        "[[run]]\nname = 'a'\ncommand = ['true']\n[[run]]\nname = 'b'\ncommand = ['sh', '-c', 'while ! grep -q \"\\\"succeeded\\\": 1\" {rep}; do sleep 0.05; done; head -c 400000 /dev/zero | tr \"\\\\0\" x | fold -w 100']\n",
        rep = rep.display()
    ));
    let after = env.path().join("after.json");
    let colloc = assert_cmd::cargo::cargo_bin("colloc");
    let script = format!(
        "mount -t tmpfs -o size=192k,mode=0755 tmpfs {dir} && {colloc} run -j 1 --report-dir {dir} -f {m}; rc=$?; cp {dir}/colloc-report.json {after}; exit $rc",
        dir = dir.display(),
        colloc = colloc.display(),
        m = m.display(),
        after = after.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env("COLLOC_CONFIG", env.path().join("none.toml"))
        .env_remove("SLURM_JOB_ID")
        .current_dir(env.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // the table, printed anyway
    assert!(stdout.contains("run  state"), "{stdout}");
    assert!(stdout.contains("b    succeeded"), "{stdout}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("colloc report"), "{stderr}");
    // the previous report, whole
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&after).unwrap()).unwrap();
    assert_eq!(run(&kept, "a")["state"], "succeeded");
    assert_ne!(run(&kept, "b")["state"], "succeeded");
}

/// A resume (or a requeued job) that finds another colloc still writing the directory
/// (the job's previous start shutting down) waits for it, then reads the whole record.
#[test]
fn a_resume_waits_for_the_colloc_that_still_writes_the_record() {
    let env = Env::new();
    let m = sweep(&env, 2, 1);
    let m = m.to_str().unwrap().to_string();
    let first = env.spawn(&["-j", "2", "-q", "-f", &m]);
    wait_for("r1 in the report", || {
        env.try_report().is_some_and(|r| n_succeeded(&r) == 1)
    });
    let second = env.spawn(&["-j", "2", "-q", "--resume", "-f", &m]);
    std::thread::sleep(Duration::from_millis(800));
    std::fs::write(env.mark().join("go"), "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("waiting for the colloc run that still writes"),
        "{stderr}"
    );
    assert!(count(&env).values().all(|&n| n == 1), "{:?}", count(&env));
    let rep = env.report();
    assert_eq!(n_succeeded(&rep), 2);
    assert_eq!(rep["sessions"].as_array().unwrap().len(), 2);
}
