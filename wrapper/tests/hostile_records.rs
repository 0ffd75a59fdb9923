//! Records forged to make `colloc report` (an admin's, as root, on a user's directory)
//! spend time or memory without end (SECURITY.md, "User-side commands", 4 and 5): what
//! the fold does per event must not grow with what came before.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// `colloc` with a clean environment.
fn colloc(cwd: &Path) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    for k in [
        "SLURM_JOB_ID",
        "COLLOC_LOG",
        "COLLOC_MODE",
        "COLLOC_DEVICES",
    ] {
        c.env_remove(k);
    }
    c.env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run it, killed past `limit` of wall time: the processor time it used (user and
/// system, from `wait4`), which a forged record made grow quadratically. Processor time,
/// not wall time: on a loaded machine (CI's two cores shared with other tests) the wall
/// time of a linear fold grows with the load, its processor time hardly. Its output is
/// read meanwhile, so a large one never stalls it.
// The child is reaped by `wait4` (for its rusage), which std's `Child` cannot see.
#[allow(clippy::zombie_processes)]
fn timed(c: &mut Command, limit: Duration) -> (Output, Duration) {
    let mut child = c.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                r.read_to_end(&mut buf).unwrap();
            }
            buf
        })
    };
    let stdout = read(child.stdout.take().map(|r| Box::new(r) as _));
    let stderr = read(child.stderr.take().map(|r| Box::new(r) as _));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our unreaped child (std's Child never waits for it here), and
        // both pointers are to live locals of the right types.
        let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let cpu = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        let _ = tx.send((got, status, cpu(usage.ru_utime) + cpu(usage.ru_stime)));
    });
    match rx.recv_timeout(limit) {
        Ok((got, status, cpu)) => {
            assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
            let out = Output {
                status: std::os::unix::process::ExitStatusExt::from_raw(status),
                stdout: stdout.join().unwrap(),
                stderr: stderr.join().unwrap(),
            };
            (out, cpu)
        }
        Err(_) => {
            // SAFETY: kill has no memory preconditions; the child is ours and unreaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("colloc report spun past {limit:?} on a forged record");
        }
    }
}

/// `colloc report --no-write -q DIR` run from `cwd`, killed past `secs` seconds.
fn report(cwd: &Path, dir: &Path, secs: u64) -> (Output, Duration) {
    timed(
        colloc(cwd).args(["report", "--no-write", "-q"]).arg(dir),
        Duration::from_secs(secs),
    )
}

const SESSION: &str = r#"{"ev":"session","ts":1000,"version":1,"session":1,"colloc_version":"0.1.0","host":"h","pid":1,"job_id":null,"restart_count":null,"mode":"naive","source":"plain","slots":[{"index":0,"device":null}],"interval_s":1.0,"runs":RUNS}"#;

/// `DIR/events/1.main.jsonl` made of `lines`.
fn forge(dir: &Path, lines: impl Iterator<Item = String>) {
    std::fs::create_dir_all(dir.join("events")).unwrap();
    let f = std::fs::File::create(dir.join("events/1.main.jsonl")).unwrap();
    let mut w = std::io::BufWriter::new(f);
    for l in lines {
        w.write_all(l.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
    }
    w.flush().unwrap();
}

#[test]
fn many_attempts_of_one_run_fold_in_linear_time() {
    // 120,000 attempts of one run, then 120,000 progress lines for its first: each
    // looked its attempt up by a scan (49 s for 80,000 in a debug build, 4x that for
    // twice as many); now by an index.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    let n = 120_000;
    let session = SESSION.replace("RUNS", r#"[{"name":"a","command":["x"],"env":[]}]"#);
    let starts = (1..=n).map(|i| {
        format!(
            r#"{{"ev":"start","ts":{},"run":"a","attempt":{i},"session":1,"slot":0,"log":"l"}}"#,
            1000 + i
        )
    });
    let progress = (0..n).map(|i| {
        format!(
            r#"{{"ev":"progress","ts":{},"run":"a","attempt":1}}"#,
            2_000_000 + i
        )
    });
    forge(&dir, std::iter::once(session).chain(starts).chain(progress));
    let (out, took) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("internal error"), "{err}");
    assert!(took < Duration::from_secs(30), "processor time {took:?}");
}

#[test]
fn many_session_events_are_refused_before_they_cost_minutes() {
    // One session naming 100,000 runs, then 5,000 sessions naming none: each re-sorted
    // the runs and rebuilt their map (114 s for 2,000 in a debug build). colloc writes
    // one session event per session, each in its own files: more than 4,096 is refused.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    let runs: Vec<String> = (0..100_000)
        .map(|i| format!(r#"{{"name":"r{i}","command":[],"env":[]}}"#))
        .collect();
    let big = SESSION.replace("RUNS", &format!("[{}]", runs.join(",")));
    let small = SESSION
        .replace("RUNS", "[]")
        .replace("\"ts\":1000", "\"ts\":1001");
    forge(
        &dir,
        std::iter::once(big).chain(std::iter::repeat_n(small, 5_000)),
    );
    let (out, took) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 4097: more than 4096 session events"),
        "{err}"
    );
    assert!(took < Duration::from_secs(30), "processor time {took:?}");
}

#[test]
fn an_events_folder_of_countless_other_names_is_refused_not_listed_in_full() {
    // Names that are not event files were skipped, but only after the whole folder was
    // listed and sorted: millions of them cost time and memory. Past 4 x 4,096 names the
    // folder is refused as soon as that many are read.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    forge(&dir, std::iter::once(SESSION.replace("RUNS", "[]")));
    // The event file and 4 x 4,096 others: one name too many.
    for i in 0..4 * 4096 {
        std::fs::File::create(dir.join(format!("events/junk{i}"))).unwrap();
    }
    let (out, _) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("events: more than 16384 names (a record has at most 4096 event files)"),
        "{err}"
    );
    // One name fewer is a record like any other.
    std::fs::remove_file(dir.join("events/junk0")).unwrap();
    let (out, _) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
}

#[test]
fn a_session_naming_runs_again_and_again_does_not_rebuild_everything() {
    // 4,000 sessions alternately naming the first and the last of 100,000 runs: the
    // order changes each time; only the runs' positions are updated, no map rebuilt.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    let runs: Vec<String> = (0..100_000)
        .map(|i| format!(r#"{{"name":"r{i}","command":[],"env":[]}}"#))
        .collect();
    let big = SESSION.replace("RUNS", &format!("[{}]", runs.join(",")));
    let one = |i: usize| {
        SESSION
            .replace("RUNS", &format!("[{}]", runs[i]))
            .replace("\"ts\":1000", "\"ts\":1001")
    };
    forge(
        &dir,
        std::iter::once(big).chain((0..4_000).map(|k| one(if k % 2 == 0 { 99_999 } else { 0 }))),
    );
    let (out, took) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(took < Duration::from_secs(60), "processor time {took:?}");
}

#[test]
fn many_calibrations_are_reported_in_linear_time_and_memory() {
    // A session of 30,000 runs and a solo calibration of each: the report scanned every
    // run per calibration (10,000: 89 s in a debug build); and where all runs share one
    // command, listed all of them under each calibration (30,000 x 30,000 names).
    for same in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("rec");
        let n = 30_000;
        let runs: Vec<String> = (0..n)
            .map(|i| {
                let cmd = if same {
                    "x".to_string()
                } else {
                    format!("x{i}")
                };
                format!(r#"{{"name":"r{i}","command":["{cmd}"],"env":[]}}"#)
            })
            .collect();
        let session = SESSION.replace("RUNS", &format!("[{}]", runs.join(",")));
        let solos = (0..n).map(|i| {
            format!(
                r#"{{"ev":"start","ts":{},"run":"r{i}","kind":"solo","attempt":1,"session":1,"slot":0,"log":"l"}}"#,
                1001 + i
            )
        });
        forge(&dir, std::iter::once(session).chain(solos));
        let (out, took) = timed(
            colloc(t.path())
                .args(["report", "--no-write", "--json"])
                .arg(&dir),
            Duration::from_secs(240),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(took < Duration::from_secs(30), "processor time {took:?}");
        // Each run is named once among the calibrations' runs.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed: usize = v["calibrations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["runs"].as_array().unwrap().len())
            .sum();
        assert_eq!(listed, n, "same command: {same}");
    }
}

/// A session event: number `session`, with steps or not, these slots and runs (JSON).
fn session(session: u32, steps: bool, slots: &str, runs: &str) -> String {
    SESSION
        .replace(
            "\"session\":1",
            &format!("\"session\":{session},\"steps\":{steps}"),
        )
        .replace("[{\"index\":0,\"device\":null}]", slots)
        .replace("RUNS", runs)
}

#[test]
fn many_sessions_nodes_and_attempts_are_reported_in_linear_time() {
    // 4,000 sessions and 200,000 attempts in the last: each session's makespan went over
    // every attempt, and each attempt without an end looked its session up by a scan.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("spans");
    let slot = r#"[{"index":0,"device":null}]"#;
    let sessions = (1..=4_000u32).map(|s| {
        let runs = if s == 1 {
            r#"[{"name":"a","command":[],"env":[]}]"#
        } else {
            "[]"
        };
        session(s, false, slot, runs)
    });
    let starts = (1..=200_000).map(|i| {
        format!(
            r#"{{"ev":"start","ts":1001,"run":"a","attempt":{i},"session":4000,"slot":0,"log":"l"}}"#
        )
    });
    forge(&dir, sessions.chain(starts));
    // One session across 65,536 nodes, 30,000 attempts: per node, every attempt, slot
    // and known node was gone through again.
    let nodes = t.path().join("nodes");
    let slots: Vec<String> = (0..65_536)
        .map(|i| format!(r#"{{"index":{i},"device":null,"node":"n{i}"}}"#))
        .collect();
    let first = session(
        1,
        true,
        &format!("[{}]", slots.join(",")),
        r#"[{"name":"a","command":[],"env":[]}]"#,
    );
    let starts = (1..=30_000).map(|i| {
        format!(
            r#"{{"ev":"start","ts":1001,"run":"a","attempt":{i},"session":1,"slot":{},"node":"n{i}","log":"l"}}"#,
            i % 65_536
        )
    });
    forge(&nodes, std::iter::once(first).chain(starts));
    for d in [dir, nodes] {
        let (out, took) = report(t.path(), &d, 240);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {err}", d.display());
        assert!(
            took < Duration::from_secs(30),
            "{}: processor time {took:?}",
            d.display()
        );
    }
}

#[test]
fn energy_of_many_overlapping_steps_on_one_gpu_is_bounded() {
    // 20,000 attempts ran as steps on one GPU, all active at once, each with two
    // readings of its counter: sharing 40,000 intervals out among 20,000 spans, every
    // span for every interval, took 69 s in a debug build (5,000: 4.5 s).
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    let n = 20_000u64;
    let session = SESSION.replace("RUNS", r#"[{"name":"a","command":[],"env":[]}]"#);
    let starts = (1..=n).map(|i| {
        format!(
            r#"{{"ev":"start","ts":1001,"run":"a","attempt":{i},"session":1,"slot":0,"log":"l"}}"#
        )
    });
    let ends = (1..=n).map(|i| {
        format!(
            r#"{{"ev":"end","ts":{},"run":"a","attempt":{i},"state":"succeeded","exit_code":0,"signal":null,"error":null,"pid":1,"gpu":null,"step":{{"gpu":{{"index":0,"uuid":"GPU-x","name":"x"}},"span":[1001,{}],"readings":[[{},{},null,null],[{},{},null,null]]}},"stats":{{"count":0,"work":0.0}},"oom":false,"lines":0}}"#,
            2_000_000 + i,
            1_000_000 + i,
            1001 + 2 * i,
            1000 * i,
            1002 + 2 * i,
            1000 * i + 500
        )
    });
    forge(&dir, std::iter::once(session).chain(starts).chain(ends));
    let (out, took) = report(t.path(), &dir, 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(took < Duration::from_secs(30), "processor time {took:?}");
}

#[test]
fn a_grid_key_per_run_is_refused_not_made_a_csv_of_runs_squared_cells() {
    // 100,000 runs each with a grid key of its own (6 MB) made `--csv` print 10^10
    // cells (built in memory first); the record is refused past 1,024 columns.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rec");
    let runs: Vec<String> = (0..2_000)
        .map(|i| format!(r#"{{"name":"r{i}","command":[],"env":[],"grid":{{"k{i}":"v"}}}}"#))
        .collect();
    forge(
        &dir,
        std::iter::once(
            SESSION
                .replace("RUNS", &format!("[{}]", runs.join(",")))
                .to_string(),
        ),
    );
    let (out, _) = timed(
        colloc(t.path()).args(["report", "--csv"]).arg(&dir),
        Duration::from_secs(240),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 1: more than 1024 distinct grid keys and metric names"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
