//! `colloc run --mode mps` outside Slurm: colloc starts a private MPS daemon (here the
//! stand-in control program), its runs see the pipe directory, and the daemon is gone
//! afterwards, also when colloc is stopped by a signal.

mod run_support;

use std::path::Path;

use run_support::{fixture, run, succeeded, Env};

fn stand_in_path() -> String {
    let dir = Path::new(&fixture("mps")).to_path_buf();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn pid_alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{}", pid.trim())).exists()
}

#[test]
fn mps_mode_starts_and_stops_a_private_daemon() {
    let env = Env::new();
    // Each run records its pipe dir and whether the daemon's pid was alive then.
    let script = r#"p="$CUDA_MPS_PIPE_DIRECTORY"; pid=$(cat "$p/daemon.pid"); if kill -0 "$pid"; then a=alive; else a=dead; fi; echo "$p $pid $a $CUDA_VISIBLE_DEVICES $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" > "$MARK/$COLLOC_RUN_NAME""#;
    let out = env
        .colloc()
        .env("PATH", stand_in_path())
        .env("HOME", env.path())
        .env("CUDA_VISIBLE_DEVICES", "0")
        .args(["--mode", "mps:2", "-n", "3", "--", "sh", "-c", script])
        .output()
        .unwrap();
    succeeded(&out);
    let log = std::fs::read_to_string(env.path().join("mps-control.log")).unwrap();
    assert!(log.starts_with("start "), "{log}");
    assert!(log.contains("cmd quit"), "{log}");
    let mut pipe_dirs = Vec::new();
    for n in ["run1", "run2", "run3"] {
        let rec = std::fs::read_to_string(env.mark().join(n)).unwrap();
        let f: Vec<&str> = rec.split_whitespace().collect();
        assert_eq!(f[2], "alive", "{n}: {rec}");
        assert_eq!(f[3], "0", "{n}: {rec}");
        assert_eq!(f[4], "50", "{n}: mps:2 gives half the SMs: {rec}");
        assert!(!pid_alive(f[1]), "daemon {} still running", f[1]);
        pipe_dirs.push(f[0].to_string());
    }
    pipe_dirs.dedup();
    assert_eq!(pipe_dirs.len(), 1, "one daemon for the pack");
    assert!(!Path::new(&pipe_dirs[0]).exists(), "pipe dir left behind");
    let rep = env.report();
    assert_eq!(rep["mode"], "mps:2");
    assert_eq!(rep["source"], "own");
    assert_eq!(run(&rep, "run1")["device"], "0");
}

#[test]
fn mps_daemon_is_stopped_when_colloc_is_signalled() {
    let env = Env::new();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    cmd.args(env.colloc().get_args())
        .current_dir(env.path())
        .env("COLLOC_CONFIG", env.path().join("none.toml"))
        .env("MARK", env.mark())
        .env("PATH", stand_in_path())
        .env("HOME", env.path())
        .env("CUDA_VISIBLE_DEVICES", "0")
        .args(["--mode", "mps", "-j", "1", "--", "sh", "-c"])
        .arg(r#"cat "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid" > "$MARK/pid"; exec sleep 60"#)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = cmd.spawn().unwrap();
    let cap = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !env.mark().join("pid").exists() {
        assert!(std::time::Instant::now() < cap, "run never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill takes plain integers; the pid is our own unreaped child's.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let pid = std::fs::read_to_string(env.mark().join("pid")).unwrap();
    assert!(!pid.trim().is_empty());
    assert!(!pid_alive(&pid), "daemon {pid} outlived colloc");
    let log = std::fs::read_to_string(env.path().join("mps-control.log")).unwrap();
    assert!(log.contains("cmd quit"), "{log}");
    assert_eq!(env.report()["runs"][0]["state"], "interrupted");
}
