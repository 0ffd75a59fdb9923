//! A child that root starts for a user and that is held before its exec (as a user's
//! SIGSTOP between its change of user and its exec holds it) does not hold root past the
//! deadline: std's `Command::spawn` waited for the exec without one, so an epilog sat in
//! it until Slurm's epilog timeout drained the node.
//!
//! The child is held deterministically: the cgroup it is told to join is a FIFO whose
//! buffer is full, so its write blocks before the exec. A test binary of its own, because
//! a held child keeps copies of the process's descriptors, and sibling tests that write a
//! script and run it would see "Text file busy".

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use colloc_core::container::Entry;
use colloc_core::mps::{self, MpsDaemon};

/// A FIFO's write end whose buffer is full, in blocking mode.
fn full_fifo(dir: &Path) -> OwnedFd {
    let path = dir.join("procs");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    while (&f).write(&[0u8; 4096]).is_ok() {}
    while (&f).write(&[0u8]).is_ok() {}
    let fd = OwnedFd::from(f);
    rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::empty()).unwrap();
    fd
}

#[test]
fn a_child_held_before_its_exec_does_not_hold_root_past_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("nvidia-cuda-mps-control");
    std::fs::write(&prog, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let d = MpsDaemon::in_dir(tmp.path(), "GPU-x");
    let entry = Entry {
        ns: None,
        ns_id: 0,
        holder: None,
        step_procs: Some(full_fifo(tmp.path())),
    };
    let t = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_millis(300);
        let r = mps::start_daemon_in(&prog, &d, None, Some(&entry), deadline);
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the start did not come back: it waited for the child's exec");
    let err = r.unwrap_err();
    assert!(err.contains("did not answer"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}
