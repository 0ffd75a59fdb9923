//! The libc calls the process supervision needs that `rustix` and `std` do not offer
//! safely: `fork` (of a single-threaded process only), `_exit`, signalling by number,
//! signal dispositions, and the child-side setup of a run (new session, parent-death
//! signal). Everything else (sockets, pipes, poll, prctl) goes through `rustix`.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The number of threads of this process, from `/proc/self/status`.
pub fn thread_count() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Fork this process. `Ok(None)` in the child, `Ok(Some(pid))` in the parent.
///
/// Refused when the process has more than one thread: only with one may the child go on
/// running ordinary Rust code (its heap and locks are consistent). Callers fork before
/// they start threads; the count is a check of that (where `/proc` tells it).
///
/// # Errors
/// More than one thread, or `fork` failed.
pub fn fork_single_threaded() -> io::Result<Option<u32>> {
    if thread_count().is_some_and(|n| n > 1) {
        return Err(io::Error::other(
            "internal: fork asked for in a process with more than one thread",
        ));
    }
    // SAFETY: the process has a single thread (checked just above), so the child gets a
    // consistent copy of every lock and allocator state and may run any code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        p => Ok(Some(p as u32)),
    }
}

/// End a forked child at once, without running exit handlers or flushing buffers it
/// inherited from its parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes a plain integer and never returns.
    unsafe { libc::_exit(code) }
}

/// Send `sig` to a process or a process group: colloc's one kill and one group kill, with
/// their guards (never group 0, init or every process), live in core.
pub use colloc_core::sys::{kill, kill_group};

/// Signals a supervisor ignores: Slurm signals every process of a job step at its end,
/// and the supervisor must outlive its run to clean up after it (the run itself gets
/// the signal and decides).
pub const SUPERVISOR_IGNORES: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Ignore these signals in this process.
pub fn ignore_signals(sigs: &[i32]) {
    for &s in sigs {
        // SAFETY: signal() with SIG_IGN installs no handler code; any signal number that
        // is not valid makes it fail with EINVAL, which is harmless here.
        unsafe {
            libc::signal(s, libc::SIG_IGN);
        }
    }
}

/// Prepare `cmd` to run as a run's leader: in its own session (and so its own process
/// group, id = its pid), killed if the supervisor that starts it dies, with the signals
/// the supervisor ignores back at their defaults.
pub fn isolate_run(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, prctl, getppid, signal); it allocates nothing.
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
            // The supervisor died between fork and prctl: do not run orphaned.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            for s in SUPERVISOR_IGNORES {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// A process's `/proc/PID/stat`, read by core's one rule.
pub use colloc_core::sys::ProcStat;

/// The command name of process `pid` (`comm`).
pub fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Children of this (single-threaded) process: `/proc/self/task/<pid>/children` where
/// the kernel offers it, else a scan of `/proc` for processes whose parent it is.
pub fn own_children() -> Vec<u32> {
    let me = std::process::id();
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{me}/children")) {
        return s
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
    }
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| ProcStat::of(p).is_some_and(|s| s.ppid() == Some(me)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_is_refused_with_threads() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        assert!(thread_count().unwrap() > 1);
        assert!(fork_single_threaded().is_err());
        drop(tx);
        t.join().unwrap();
    }
}
