//! Root starting a program as a user, with no wait that the user can stretch.
//!
//! std's `Command::spawn` waits for its child to reach `execve` (it reads a close-on-exec
//! pipe to learn of a failed exec) and only then returns the child. Between the child's
//! change of user and its exec, the user may signal it like any process of theirs: a
//! SIGSTOP there kept root's epilog inside `spawn`, past every deadline, until Slurm's
//! epilog timeout drained the node (seen with a user stopping all their processes in a
//! loop while 14 MPS daemons were told to quit). Here the parent returns right after
//! `fork`, with the pid, so the one deadline of [`super::wait_child`] covers everything the
//! child does; a failed step before exec is told on the child's stderr and exit code
//! [`SPAWN_FAILED`].

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Exit code of a child that could not reach its program (what failed is on its stderr).
pub const SPAWN_FAILED: i32 = 127;

/// Directories searched for a program named without a `/`, as the `PATH` given to it.
const SEARCH: &[&str] = &[
    "/usr/local/nvidia/bin",
    "/usr/local/cuda/bin",
    "/usr/bin",
    "/bin",
];

/// A program with its arguments and whole environment, made ready (every string and
/// pointer array allocated) before the fork: the child allocates nothing.
pub struct ExecPlan {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl ExecPlan {
    /// `program` (absolute; a relative one with a `/` is taken from the current directory,
    /// a bare name is looked up in [`SEARCH`]) run with `args` and exactly `env`.
    ///
    /// # Errors
    /// A string with a NUL byte (`InvalidInput`), a bare name found nowhere (`NotFound`).
    pub fn new<'a>(
        program: &Path,
        args: &[&str],
        env: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    ) -> std::io::Result<ExecPlan> {
        let path = resolve(program)?;
        let c = |b: &[u8]| {
            CString::new(b).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        };
        let mut argv = vec![c(program.as_os_str().as_bytes())?];
        for a in args {
            argv.push(c(a.as_bytes())?);
        }
        let mut envp = Vec::new();
        for (k, v) in env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(c(&kv)?);
        }
        Ok(ExecPlan {
            program: c(path.as_os_str().as_bytes())?,
            argv,
            envp,
        })
    }
}

fn resolve(program: &Path) -> std::io::Result<PathBuf> {
    if program.is_absolute() {
        return Ok(program.to_path_buf());
    }
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(std::env::current_dir()?.join(program));
    }
    SEARCH
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
}

/// Where the child goes and whom it becomes before its exec, in this order: a PID
/// namespace of its own where `contained` (root only), the cgroup whose `cgroup.procs` is
/// `procs` (open for writing), the mount namespace `ns`, `/` as its directory, then `ids`
/// (uid, gid; no supplementary groups), checked, and not dumpable until its exec.
#[derive(Default, Clone, Copy)]
pub struct Placement<'a> {
    /// Whatever the program starts ends with it: it is the first process of a PID
    /// namespace of its own, and when that one ends (exits, or is killed at the deadline)
    /// the kernel kills every other process in the namespace, which none can leave. For a
    /// program run as a user that must leave nothing running (the control program's
    /// `quit`): once it has exec'd, the user may trace it and make it start anything, and
    /// root waits for and kills only its pid. Only where we are root (a PID namespace
    /// needs `CAP_SYS_ADMIN`); elsewhere the program runs as the caller, whose own
    /// processes are theirs anyway.
    pub contained: bool,
    /// A mount namespace file, open.
    pub ns: Option<BorrowedFd<'a>>,
    /// A cgroup's `cgroup.procs`, open for writing.
    pub procs: Option<BorrowedFd<'a>>,
    /// The user and group to become; `None`: stay who we are.
    pub ids: Option<(u32, u32)>,
}

/// Fork a child that resets every signal to its default (none blocked), goes where
/// `place` says, takes `stdio` as its descriptors 0, 1 and 2 (no other descriptor of ours
/// stays open in it) and execs `plan`. Returns its pid at once: wait for it with
/// [`super::wait_child`] and its deadline.
///
/// # Errors
/// fork failed.
pub fn spawn(
    plan: &ExecPlan,
    stdio: [BorrowedFd<'_>; 3],
    place: Placement<'_>,
) -> std::io::Result<libc::pid_t> {
    let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = ptrs(&plan.argv);
    let envp = ptrs(&plan.envp);
    let stdio = stdio.map(|f| f.as_raw_fd());
    // SAFETY: fork(2) has no preconditions, nor has clone(2) with no new stack (the child
    // goes on with a copy of this one, as after fork; glibc's fork handlers do not run, and
    // the child needs none). The child runs only `child`, which makes raw system calls on
    // integers, on the strings and pointer arrays made above (alive until this function
    // returns, which the child never does) and on stack buffers, then execs or _exits: no
    // allocation, no locks, no unwinding, no destructor of the copy.
    let pid = unsafe {
        if place.contained && super::euid() == 0 {
            let flags = (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong;
            let null = 0 as libc::c_ulong;
            // s390 takes the new stack first; everywhere else the flags come first.
            #[cfg(target_arch = "s390x")]
            let r = libc::syscall(libc::SYS_clone, null, flags, null, null, null);
            #[cfg(not(target_arch = "s390x"))]
            let r = libc::syscall(libc::SYS_clone, flags, null, null, null, null);
            r as libc::pid_t
        } else {
            libc::fork()
        }
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let failed = child(plan, &argv, &envp, stdio, place);
        tell(failed, &plan.program);
        // SAFETY: _exit(2) ends the child at once; it never returns.
        unsafe { libc::_exit(SPAWN_FAILED) }
    }
    Ok(pid)
}

/// The child's way to its exec; returns what failed (the step and errno) if it did not
/// get there.
fn child(
    plan: &ExecPlan,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    stdio: [libc::c_int; 3],
    place: Placement<'_>,
) -> (&'static str, i32) {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: raw system calls on integers, on `set` (a local), on static C strings and on
    // `plan`'s strings and the pointer arrays, which are NUL-terminated and outlive the
    // call; nothing allocates.
    unsafe {
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            return ("sigprocmask", errno());
        }
        if let Some(fd) = place.procs {
            // "0": the writing process itself (cgroup v1 and v2).
            if libc::write(fd.as_raw_fd(), b"0\n".as_ptr().cast(), 2) != 2 {
                return ("joining the cgroup", errno());
            }
        }
        if let Some(fd) = place.ns {
            if libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
                return ("entering the mount namespace", errno());
            }
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return ("chdir /", errno());
        }
        // Copies above 2 first, so that no dup2 below overwrites a source still needed.
        let mut high = [0; 3];
        for (h, fd) in high.iter_mut().zip(stdio) {
            *h = libc::fcntl(fd, libc::F_DUPFD, 3);
            if *h < 0 {
                return ("dup", errno());
            }
        }
        for (target, h) in (0..).zip(high) {
            if libc::dup2(h, target) != target {
                return ("dup2", errno());
            }
        }
        // Nothing of root's stays open in a process the user may stop, from here on.
        super::close_from(3);
        if let Some((uid, gid)) = place.ids {
            if !super::become_exactly(uid, gid) {
                return ("changing to the user", errno());
            }
            // Not dumpable until the exec (which makes it so again, for the program): it is
            // a copy of root's memory that the user may now signal and, where
            // fs.suid_dumpable is 1, trace and read (its memory, root's environment). The
            // kernel leaves it dumpable at the change of user where that setting is 1; a
            // moment between the two calls remains there.
            if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
                return ("prctl", errno());
            }
        }
        libc::execve(plan.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        ("execve", errno())
    }
}

/// Say on stderr (already the caller's file, where dup2 got that far) what failed:
/// `colloc: cannot run PROGRAM: STEP failed (errno N)`, with writes of stack buffers only.
fn tell((step, errno): (&'static str, i32), program: &CString) {
    let mut digits = [0u8; 12];
    let mut n = errno.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let parts: [&[u8]; 7] = [
        b"colloc: cannot run ",
        program.as_bytes(),
        b": ",
        step.as_bytes(),
        b" failed (errno ",
        &digits[at..],
        b")\n",
    ];
    for p in parts {
        // SAFETY: write(2) reads `p.len()` bytes of a live slice.
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    /// After the change of user and before its exec, the child is a copy of root's memory
    /// that the user may signal: it must not be dumpable (the user could trace it, read its
    /// memory and environment). The kernel makes it so at the change of user only where
    /// `fs.suid_dumpable` is 0; this test tells the difference where it is 1. The child is
    /// held there by a failed exec whose message goes to a full pipe.
    #[test]
    fn the_child_is_not_dumpable_as_the_user_before_its_exec() {
        if super::super::euid() != 0 {
            return; // only root changes to another user
        }
        let mut fds = [0; 2];
        // SAFETY: pipe(2) writes two new descriptors into the local array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both are ours alone, just made.
        let (r, w) = unsafe {
            use std::os::fd::{FromRawFd, OwnedFd};
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::NONBLOCK).unwrap();
        while rustix::io::write(&w, &[0u8; 4096]).is_ok() {}
        while rustix::io::write(&w, &[0u8]).is_ok() {}
        rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::empty()).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let plan = ExecPlan::new(Path::new("/nonexistent/colloc-test"), &[], []).unwrap();
        let place = Placement {
            ids: Some((65534, 65534)),
            ..Placement::default()
        };
        let pid = spawn(&plan, [null.as_fd(), null.as_fd(), w.as_fd()], place).unwrap();
        // Held in its write of "cannot run" to the full pipe, as the user.
        let t = Instant::now();
        let held = loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let stack = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            if status.contains("Uid:\t65534\t65534\t65534\t65534") && stack.contains("pipe") {
                break true;
            }
            if t.elapsed() > Duration::from_secs(10) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let owner = std::fs::metadata(format!("/proc/{pid}/mem")).map(|m| m.uid());
        drop(r);
        let end = super::super::wait_child(pid, Instant::now() + Duration::from_secs(10));
        assert!(held, "the child was not seen held after its change of user");
        // /proc/PID of a process that is not dumpable belongs to root.
        assert_eq!(owner.unwrap(), 0, "the child is dumpable as the user");
        // Its write fails with the reader gone: SIGPIPE, at its default.
        assert_eq!(
            end.unwrap(),
            super::super::ChildEnd::Signaled(libc::SIGPIPE)
        );
    }
}
