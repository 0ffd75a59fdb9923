//! The control program root runs as a job's user for `quit` (the epilog) and
//! `get_server_list` leaves nothing running. It runs outside the job's cgroup and mount
//! namespace, and once it has exec'd it is the user's like any process of theirs: the user
//! can trace it (no Yama, or `ptrace_scope` 0) and make it start anything. Root waited for
//! and killed only its pid, so what it forked stayed behind after the job, outside every
//! job's cgroup (seen: a `setsid` process injected into the epilog's `quit` with
//! `PTRACE_ATTACH` and an `execve` outlived `stop_all` in root's mount namespace).
//!
//! The program here stands for one the user took over: it forks a `setsid` process with
//! another name (so no search for MPS processes finds it) and exits. A `-d` must still
//! leave its daemon running.
//!
//! A test binary of its own: it forks children that hold copies of the process's
//! descriptors, and sibling tests that write a script and run it would see "Text file
//! busy".

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use colloc_core::mps::{self, MpsDaemon};

const NOBODY: (u32, u32) = (65534, 65534);

/// Is `pid` the program's `sleep 300`, still running?
fn alive(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline == b"sleep\x00300\x00"
        && colloc_core::sys::PidHandle::open(pid).is_some_and(|h| !h.gone())
}

/// A program that leaves `sleep 300` running under another name, its pid in `out/left`
/// (as `/proc` of the host says: `$$` would be its pid in a PID namespace of its own).
fn leaving_program(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("nvidia-cuda-mps-control");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\nsetsid sh -c 'read -r p r </proc/self/stat; echo $p > {out}/left.tmp; mv {out}/left.tmp {out}/left; \
             exec sleep 300' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -e {out}/left ]; do sleep 0.01; done\nexit 0\n",
            out = out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    prog
}

fn left_pid(dir: &Path) -> u32 {
    let p = dir.join("out/left");
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(&p) {
            return s.trim().parse().unwrap();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the program never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

#[test]
fn what_quit_and_get_server_list_start_as_the_user_ends_with_them() {
    if colloc_core::sys::euid() != 0 {
        return; // only root runs the program as another user
    }
    let mut left = Vec::new();
    let tmp = dir();
    let prog = leaving_program(tmp.path());
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let t = Instant::now();
    let r = mps::stop_daemon(
        Some(&prog),
        &d,
        Some(NOBODY),
        t + mps::QUIT_TIME,
        t + mps::QUIT_TIME + mps::KILL_TIME,
    );
    assert!(r.quit_ok, "{r:?}");
    left.push(("quit", left_pid(tmp.path())));

    let tmp = dir();
    let prog = leaving_program(tmp.path());
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    assert!(mps::server_list(&prog, &d, Some(NOBODY))
        .unwrap()
        .is_empty());
    left.push(("get_server_list", left_pid(tmp.path())));

    let mut stayed = Vec::new();
    for (what, pid) in left {
        if alive(pid) {
            stayed.push((what, pid));
            colloc_core::sys::kill(pid, libc::SIGKILL);
        }
    }
    assert!(stayed.is_empty(), "left running as the user: {stayed:?}");
}

#[test]
fn the_daemon_that_minus_d_starts_stays() {
    if colloc_core::sys::euid() != 0 {
        return;
    }
    let tmp = dir();
    let prog = leaving_program(tmp.path());
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    mps::start_daemon(&prog, &d, Some(NOBODY), Instant::now() + mps::START_TIME).unwrap();
    let pid = left_pid(tmp.path());
    std::thread::sleep(Duration::from_millis(200));
    let was_alive = alive(pid);
    colloc_core::sys::kill(pid, libc::SIGKILL);
    assert!(was_alive, "-d's daemon did not outlive the control program");
}
