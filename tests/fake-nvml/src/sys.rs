//! The two OS calls the fake needs beyond std: an advisory file lock and killing itself.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Take an exclusive `flock` on `file`, waiting for it; released when the file closes.
///
/// # Errors
/// The OS error.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor comes from a live `File` borrowed for this call; flock
        // takes no pointers.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Die at once, as `kill -9` would kill us: for crash-injection tests.
pub fn kill_self() -> ! {
    // SAFETY: kill with our own pid and a valid signal number has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught; this is only reached if kill itself failed.
    std::process::abort()
}

/// The caller's effective uid: the driver lets only privileged callers change or list MIG
/// instances.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
