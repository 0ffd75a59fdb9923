//! The few libc calls `colloc run` needs for its child processes: a pipe, a new session
//! with a parent-death signal, signalling a process group, and waiting for a child's exit
//! without reaping it (so its pid, and so its group id, cannot be reused while colloc
//! may still signal the group).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid, writable array of two c_ints, as pipe2 requires.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Start the child in its own session (and so its own process group, id = its pid),
/// killed if the thread that started it dies.
pub fn isolate(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // colloc died between fork and prctl: do not run orphaned.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Send `sig` to process group `pgid`. False when no process is left in it.
pub fn kill_group(pgid: u32, sig: i32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill takes plain integers; a negative pid addresses the process group.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Block until child `pid` has exited, leaving it a zombie (not reaped).
pub fn wait_exited(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t for the duration of the call.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The session id of process `pid`, from `/proc/<pid>/stat` (`None` if it is gone).
pub fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_session(&stat)
}

/// Field 6 (session) of a `/proc/<pid>/stat` line; the command name may hold spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn parse_session(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // after ")": state, ppid, pgrp, session
    rest.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_field() {
        assert_eq!(
            parse_session("1234 (python a) b) S 1 1234 1200 0 -1"),
            Some(1200)
        );
        assert_eq!(parse_session("garbage"), None);
        assert!(session_of(std::process::id()).is_some());
    }

    #[test]
    fn no_group_signals_for_init_or_nonsense() {
        assert!(!kill_group(0, 0));
        assert!(!kill_group(1, 0));
        assert!(!kill_group(u32::MAX, 0));
    }
}
