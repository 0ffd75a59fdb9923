//! Unit tests of [`super`].

use super::*;
use std::process::Command;

#[test]
fn limits() {
    assert_eq!(
        client_limits(4, &[40960]),
        vec![
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
                "25".to_string()
            ),
            (
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                "0=10240M".to_string()
            ),
        ]
    );
    assert_eq!(client_limits(3, &[])[0].1, "33");
    assert_eq!(client_limits(2, &[100, 200])[1].1, "0=50M,1=100M");
}

#[test]
fn server_list_parsing() {
    assert_eq!(
        parse_server_list("1234\n 5678 \n\nnot a pid\n"),
        vec![1234, 5678]
    );
    assert!(parse_server_list("").is_empty());
}

fn stand_in(dir: &Path, body: &str) -> PathBuf {
    let prog = dir.join("nvidia-cuda-mps-control");
    std::fs::write(&prog, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    prog
}

#[test]
fn a_failing_start_is_reported_with_what_the_program_said() {
    let tmp = tempfile::tempdir().unwrap();
    // `-d` fails: start must report it (from the memory file, not from the user's log
    // directory, which does not even exist here).
    let prog = stand_in(tmp.path(), "echo 'no GPU' >&2\nexit 3");
    let d = MpsDaemon::in_dir(&tmp.path().join("job"), "GPU-x");
    let soon = Instant::now() + Duration::from_secs(10);
    let err = start_daemon(&prog, &d, None, soon).unwrap_err().to_string();
    assert!(err.contains("-d failed"), "{err}");
    assert!(err.contains("no GPU"), "{err}");
    let report = stop_daemon(Some(&prog), &d, None, soon, soon);
    assert!(!report.quit_ok);
    assert!(report.killed.is_empty());
}

/// What the user's program says reaches slurmd's log and the job's refusal: a carriage
/// return or an escape sequence there would let it rewrite what an admin reads on a
/// terminal (a forged "restored" line, a cleared screen).
#[test]
fn what_the_program_says_reaches_the_log_without_control_characters() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = stand_in(
        tmp.path(),
        "printf 'no GPU\\r\\033[2Kcolloc: job 1: restored\\n\\033[2J\\a\\tx' >&2\nexit 3",
    );
    let d = MpsDaemon::in_dir(&tmp.path().join("job"), "GPU-x");
    let soon = Instant::now() + Duration::from_secs(10);
    let err = start_daemon(&prog, &d, None, soon).unwrap_err().to_string();
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert!(
        err.contains(r"no GPU\r\u{1b}[2Kcolloc: job 1: restored"),
        "{err}"
    );
}

#[test]
fn output_is_read_up_to_a_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = stand_in(
        tmp.path(),
        "head -c 100000 /dev/zero | tr '\\0' x >&2\nexit 1",
    );
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let soon = Instant::now() + Duration::from_secs(10);
    let err = control(&prog, &d, None, None, &[], "quit\n", soon)
        .unwrap_err()
        .to_string();
    assert!(err.len() < 4096 + 200, "{} bytes", err.len());
}

#[test]
fn a_control_program_that_hangs_is_stopped_at_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    // Ignores stdin and never exits, like a client of a stopped daemon.
    let prog = stand_in(tmp.path(), "exec sleep 60");
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let t = Instant::now();
    let err = control(
        &prog,
        &d,
        None,
        None,
        &[],
        "quit\n",
        t + Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(matches!(err, MpsError::Timeout { .. }), "{err}");
    // The message states the wait it made (300 ms), not what was left of it (issue 23).
    let msg = err.to_string();
    let waited: f64 = msg
        .split("after waiting ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{msg}"));
    assert!(waited >= 0.2, "{msg}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn the_control_program_gets_exactly_its_environment_and_the_user() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = stand_in(tmp.path(), "id -u; id -G; pwd; env | sort");
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let far = Instant::now() + Duration::from_secs(30);
    let root = crate::sys::euid() == 0;
    let as_user = root.then_some((65534, 65534));
    let out = control(&prog, &d, as_user, None, &[], "", far).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let me = crate::sys::euid().to_string();
    assert_eq!(lines[0], if root { "65534" } else { me.as_str() }, "{out}");
    if root {
        assert_eq!(lines[1], "65534", "no supplementary group of root's: {out}");
    }
    assert_eq!(lines[2], "/", "{out}");
    let vars: Vec<&str> = lines[3..]
        .iter()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .filter(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k))
        .collect();
    let mut expected = vec![
        "CUDA_MPS_LOG_DIRECTORY",
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_VISIBLE_DEVICES",
        "PATH",
    ];
    for k in PASSED_ON {
        if std::env::var_os(k).is_some() {
            expected.push(k);
        }
    }
    expected.sort_unstable();
    assert_eq!(vars, expected, "{out}");
    assert!(out.contains("CUDA_VISIBLE_DEVICES=GPU-x\n"), "{out}");
}

#[test]
fn a_program_that_cannot_be_run_is_reported_with_the_step_that_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let far = Instant::now() + Duration::from_secs(30);
    // Not executable: execve fails after the fork; the child says so and exits 127.
    let prog = tmp.path().join("not-a-program");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    let err = control(&prog, &d, None, None, &["-d"], "", far)
        .unwrap_err()
        .to_string();
    assert!(err.contains("exit status: 127"), "{err}");
    assert!(err.contains("execve failed (errno 13)"), "{err}");
    // A bare name found in none of the system directories: refused before any fork.
    let err = control(
        Path::new("colloc-no-such-program"),
        &d,
        None,
        None,
        &[],
        "",
        far,
    )
    .unwrap_err();
    assert!(matches!(err, MpsError::Spawn { .. }), "{err}");
}

#[test]
fn uid_lines() {
    let status = "Name:\tbash\nUid:\t1000\t1000\t0\t1000\nGid:\t1\t1\t1\t1\n";
    assert_eq!(parse_uid_line(status), Some([1000, 1000, 0, 1000]));
    assert_eq!(parse_uid_line("Name: x\n"), None);
    assert_eq!(parse_uid_line("Uid:\t1\t2\n"), None);
}

#[test]
fn only_mps_processes_of_the_user_with_the_pipe_dir_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let d = MpsDaemon::in_dir(&tmp.path().join("gpu0"), "GPU-x");
    // A process named like a daemon (the file name is the comm), with the pipe dir.
    let fake = tmp.path().join("nvidia-cuda-mps-server");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let spawn = |pipe: &Path| {
        Command::new(&fake)
            .arg("30")
            .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
            .spawn()
            .unwrap()
    };
    let mut ours = spawn(&d.pipe_dir);
    let mut other_dir = spawn(&tmp.path().join("gpu1/pipe"));
    // A client of the daemon (not named nvidia-cuda-mps*) is not the daemon's.
    let mut client = Command::new("sleep")
        .arg("30")
        .env("CUDA_MPS_PIPE_DIRECTORY", &d.pipe_dir)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let me = crate::sys::euid();
    let found: Vec<u32> = daemon_processes(&d, me)
        .iter()
        .map(PidHandle::pid)
        .collect();
    assert_eq!(found, vec![ours.id()]);
    // Another user's: none of this user's processes qualify.
    assert!(daemon_processes(&d, me + 1).is_empty());
    let (killed, survived) = kill_daemon(&d, me, Instant::now() + KILL_TIME);
    assert_eq!(killed, vec![ours.id()]);
    assert!(survived.is_empty());
    assert!(ours.wait().is_ok());
    for c in [&mut other_dir, &mut client] {
        assert!(
            c.try_wait().unwrap().is_none(),
            "killed a process not of the daemon"
        );
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn stopped_daemons_of_many_gpus_are_stopped_within_one_budget() {
    let tmp = tempfile::tempdir().unwrap();
    // quit never answers (a daemon stopped with SIGSTOP); each "daemon" is a process
    // named nvidia-cuda-mps-server that ignores SIGTERM.
    let prog = stand_in(tmp.path(), "exec sleep 60");
    let fake = tmp.path().join("nvidia-cuda-mps-server");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let daemons: Vec<MpsDaemon> = (0..6)
        .map(|i| MpsDaemon::in_dir(&tmp.path().join(format!("gpu{i}")), "GPU-x"))
        .collect();
    let mut procs: Vec<_> = daemons
        .iter()
        .map(|d| {
            let c = Command::new(&fake)
                .arg("60")
                .env("CUDA_MPS_PIPE_DIRECTORY", &d.pipe_dir)
                .spawn()
                .unwrap();
            crate::sys::kill(c.id(), libc::SIGSTOP);
            c
        })
        .collect();
    let t = Instant::now();
    // The budget starts in the past: only a fraction of QUIT_TIME is left.
    let start = t - QUIT_TIME + Duration::from_millis(500);
    let reports = stop_all(Some(&prog), &daemons, None, start);
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500) + KILL_TIME, "{took:?}");
    assert_eq!(reports.len(), 6);
    for (r, p) in reports.iter().zip(&mut procs) {
        assert_eq!(r.killed, vec![p.id()]);
        assert!(r.survived.is_empty());
        assert!(!r.quit_ok);
        p.wait().unwrap();
    }
}

/// Issue 35: another user who plants `colloc-mps-<pid>-0` … `-1000` (the names colloc
/// used to take in a shared `/tmp`) does not stop `colloc run`'s daemon directory: its
/// name is random, made fresh with mode 0700.
#[test]
fn a_users_own_mps_dir_has_a_name_no_one_can_plant_first() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    for n in 0..=1000 {
        std::fs::create_dir(
            tmp.path()
                .join(format!("colloc-mps-{}-{n}", std::process::id())),
        )
        .unwrap();
    }
    let a = private_dir(tmp.path(), "colloc-mps").unwrap();
    let b = private_dir(tmp.path(), "colloc-mps").unwrap();
    assert_ne!(a, b);
    for d in [&a, &b] {
        let name = d.file_name().unwrap().to_str().unwrap();
        let suffix = name.strip_prefix("colloc-mps-").unwrap();
        assert_eq!(suffix.len(), 16, "{name}");
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        let m = std::fs::symlink_metadata(d).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    }
}
