//! The few libc calls colloc-core needs that std does not offer. All `unsafe` of the crate
//! outside the NVML layer lives here.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

mod proc_stat;
mod spawn;
pub use proc_stat::ProcStat;
pub(crate) use spawn::{spawn, ExecPlan, Placement};

/// Send `sig` to process `pid`. Returns false if the process does not exist (or is not
/// ours to signal). The one pid guard of colloc: 0 and negative pids (a process group,
/// every process) and 1 (init) are never signalled.
pub fn kill(pid: u32, sig: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 1 {
        return false; // never a process group, every process or init by accident
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Send `sig` to the process group `pgid` (a child started with `process_group(0)`, or a
/// run leader in its own session). Returns false if there is no such group (no process is
/// left in it); never signals group 0 or 1.
pub fn kill_group(pgid: u32, sig: i32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Is there a process with this pid (zombies included)?
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The real group id of this process.
pub fn gid() -> u32 {
    // SAFETY: getgid(2) cannot fail and touches no memory.
    unsafe { libc::getgid() }
}

/// The real user id of this process.
pub fn uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// One process, pinned by a pidfd where the kernel has them (Linux 5.3+): signals sent
/// through it reach that process and never one that reused its pid after it exited.
#[derive(Debug)]
pub struct PidHandle {
    pid: u32,
    fd: Option<OwnedFd>,
}

impl PidHandle {
    /// Pin process `pid`; `None` when there is no such process. On a kernel without
    /// pidfds the handle falls back to the plain pid.
    pub fn open(pid: u32) -> Option<PidHandle> {
        let raw = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        if fd >= 0 {
            let fd = i32::try_from(fd).ok()?;
            // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            return Some(PidHandle { pid, fd: Some(fd) });
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => None,
            _ => process_exists(pid).then_some(PidHandle { pid, fd: None }),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Send `sig` (0: only check that the process still exists). False when it is gone.
    pub fn signal(&self, sig: i32) -> bool {
        match &self.fd {
            Some(fd) => {
                // SAFETY: pidfd_send_signal(2) with a pidfd we own, a null siginfo and no
                // flags: plain integers, no memory of ours is read or written.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        sig,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                r == 0
            }
            None => kill(self.pid, sig),
        }
    }

    /// Has the process exited (a zombie counts as exited)?
    pub fn gone(&self) -> bool {
        if !self.signal(0) {
            return true;
        }
        // A zombie still accepts signal 0; its state says it has ended.
        ProcStat::of(self.pid).is_none_or(|s| s.ended())
    }
}

/// How a forked child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
    /// It was still running at the deadline and was killed.
    TimedOut,
    /// Someone else reaped it; how it ended is unknown.
    Lost,
}

/// User `uid`'s entry in the password database (`getpwuid_r`, the one call of colloc):
/// (name, primary group). `None` when it has none (or the database cannot be asked).
fn passwd(uid: u32) -> Option<(Option<String>, u32)> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain data; all-zero is a valid (empty) value to be filled in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` is as long as we say.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() {
        return None;
    }
    let name = (!pw.pw_name.is_null()).then(|| {
        // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`,
        // which is still alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        name.to_string_lossy().into_owned()
    });
    Some((name, pw.pw_gid))
}

/// The name of user `uid` in the password database, `None` when it has none (or the
/// database cannot be asked).
pub fn user_name(uid: u32) -> Option<String> {
    passwd(uid)?.0
}

/// The primary group of user `uid` in the password database (for a prolog environment
/// without `SLURM_JOB_GID`).
pub fn primary_gid(uid: u32) -> Option<u32> {
    passwd(uid).map(|p| p.1)
}

/// Exit code of a child whose change of credentials failed.
pub const CHILD_CREDENTIALS_FAILED: i32 = 250;
/// Exit code of a child whose parent died before it could start.
pub const CHILD_ORPHANED: i32 = 251;

/// Run `work` in a forked child that has become `uid`/`gid` (no supplementary groups, not
/// dumpable, killed if we die), and wait for it until `deadline`, then kill it. `work`'s
/// return value is the child's exit code.
///
/// `work` runs between fork and `_exit` in a copy of a process that may have other
/// threads: it must not allocate, take locks or unwind. Only this crate's callers that
/// make raw system calls on stack buffers (rustix) use it.
///
/// # Errors
/// fork or waitpid failed.
pub(crate) fn run_forked_as(
    uid: u32,
    gid: u32,
    deadline: Instant,
    work: &mut dyn FnMut() -> i32,
) -> std::io::Result<ChildEnd> {
    // SAFETY: getpid(2) cannot fail and touches no memory.
    let parent = unsafe { libc::getpid() };
    // SAFETY: fork(2) has no preconditions. The child runs only `child_body`, which makes
    // raw system calls and runs `work` (held by its callers to raw system calls on stack
    // buffers: no heap, no locks, no unwinding), and then _exits without running any
    // destructor or atexit handler of the copied process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let code = child_body(uid, gid, parent, work);
        // SAFETY: _exit(2) ends the child at once; it never returns.
        unsafe { libc::_exit(code) }
    }
    wait_child(pid, deadline)
}

fn child_body(uid: u32, gid: u32, parent: libc::pid_t, work: &mut dyn FnMut() -> i32) -> i32 {
    // The copied process's signal handlers are the parent's (slurmstepd's, in the
    // plugin): back to the defaults, so a signal from the user only stops or ends us.
    for sig in 1..=64 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: signal(2) with SIG_DFL installs no handler; a bad number only fails.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    // SAFETY: an all-zero sigset_t is a valid (empty) set once sigemptyset has run on it;
    // sigprocmask(2) reads it and writes nothing (old set null).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    if (uid != euid() || gid != egid()) && !become_exactly(uid, gid) {
        return CHILD_CREDENTIALS_FAILED;
    }
    // SAFETY: prctl(2) with integer arguments only. Not dumpable: the user we became
    // cannot ptrace this copy of a root process or read its memory; killed with the
    // parent, so it never outlives the prolog or epilog that waits for it.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    // SAFETY: getppid(2) cannot fail and touches no memory.
    if unsafe { libc::getppid() } != parent {
        return CHILD_ORPHANED;
    }
    work()
}

/// Become `uid`/`gid` with no supplementary groups (root drops them; anyone else has
/// none to drop it can change), all of real, effective and saved ids, and check it. For a
/// forked child: raw system calls, not the libc wrappers, whose all-threads machinery is
/// not for a forked copy of a process with threads.
fn become_exactly(uid: u32, gid: u32) -> bool {
    // SAFETY: setgroups(2) with size 0 and a null list reads no memory.
    let groups = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()) };
    // SAFETY: setresgid(2)/setresuid(2) take plain integers.
    let g = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    // SAFETY: as above.
    let u = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    !(groups != 0 && euid() == 0) && g == 0 && u == 0 && is_exactly(uid, gid)
}

fn egid() -> u32 {
    // SAFETY: getegid(2) cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// Are real, effective and saved ids all exactly these?
fn is_exactly(uid: u32, gid: u32) -> bool {
    let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
    // SAFETY: getresuid(2) writes three integers into the locals passed by pointer.
    let u = unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    let uid_ok = u == 0 && r == uid && e == uid && s == uid;
    let (mut gr, mut ge, mut gs) = (0u32, 0u32, 0u32);
    // SAFETY: getresgid(2) writes three integers into the locals passed by pointer.
    let g = unsafe { libc::getresgid(&mut gr, &mut ge, &mut gs) };
    uid_ok && g == 0 && gr == gid && ge == gid && gs == gid
}

/// Wait for our child `pid` until `deadline`, then SIGKILL and reap it.
///
/// # Errors
/// waitpid failed other than by EINTR or ECHILD ([`ChildEnd::Lost`]).
pub(crate) fn wait_child(pid: libc::pid_t, deadline: Instant) -> std::io::Result<ChildEnd> {
    let decode = |status: libc::c_int| {
        if libc::WIFEXITED(status) {
            ChildEnd::Exited(libc::WEXITSTATUS(status))
        } else {
            ChildEnd::Signaled(libc::WTERMSIG(status))
        }
    };
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes the status into the local passed by pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Ok(decode(status));
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(ChildEnd::Lost),
                _ => return Err(e),
            }
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) of our own unreaped child: the pid cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            loop {
                // SAFETY: as above; blocking until the killed child is reaped.
                let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                if r == pid || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    return Ok(ChildEnd::TimedOut);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Make every descriptor from `first` up close when the process execs. Runs in a
/// `pre_exec` hook (after fork): only system calls.
fn cloexec_from(first: i32) {
    descriptors_from(first, true);
}

/// Close every descriptor from `first` up, now. For a forked child: only system calls.
fn close_from(first: i32) {
    descriptors_from(first, false);
}

fn descriptors_from(first: i32, on_exec: bool) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let flags = if on_exec { CLOSE_RANGE_CLOEXEC } else { 0 };
    // SAFETY: close_range(2) takes integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            flags,
        )
    };
    if r == 0 {
        return;
    }
    // Kernels before 5.11 (5.9 without the flag): one call per possible descriptor (EBADF
    // where none is open).
    // SAFETY: getrlimit(2) writes into the local passed by pointer.
    let limit = unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
            rl.rlim_cur.min(1 << 20) as i32
        } else {
            4096
        }
    };
    for fd in first..limit {
        // SAFETY: fcntl(2)/close(2) on a descriptor number; EBADF for numbers not in use.
        unsafe {
            if on_exec {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            } else {
                libc::close(fd);
            }
        }
    }
}

/// Keep a child that root starts (as a user) from inheriting any descriptor of ours
/// beyond its stdin, stdout and stderr: a root process's open files are not the user's.
pub fn no_inherited_fds(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the child after fork and makes only system calls
    // (close_range or fcntl, getrlimit): no allocation, no locks.
    unsafe {
        cmd.pre_exec(|| {
            cloexec_from(3);
            Ok(())
        });
    }
}

/// Start a child that root runs for a user with no signal blocked and every signal at its
/// default action: slurmstepd blocks SIGTERM, SIGHUP, SIGINT and others (measured:
/// HUP INT QUIT USR1 USR2 PIPE ALRM TERM TSTP) and may ignore some, and a daemon started
/// from it would keep that (std's `Command` clears neither).
pub fn default_signals(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the child after fork and makes only signal(2),
    // sigemptyset(3) and sigprocmask(2) calls on a local set, all async-signal-safe: no
    // allocation, no locks.
    unsafe {
        cmd.pre_exec(|| {
            // The standard signals; real-time ones are not slurmstepd's to set.
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Mount a tmpfs at `target` with `options` (e.g. `size=256m,nr_inodes=65536,mode=0755`),
/// never setuid, device files or programs (`nosuid,nodev,noexec`).
///
/// # Errors
/// What mount(2) says (`EPERM` for anyone but root).
pub fn mount_tmpfs(target: &std::path::Path, options: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let options = std::ffi::CString::new(options)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; mount(2)
    // only reads them.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            options.as_ptr().cast(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A stack of `(device, inode)` pairs in anonymous memory that grows by `mremap(2)`, for a
/// forked child that must not touch the heap (the copied allocator's locks may be held):
/// its depth is bounded only by memory. Pushing returns false when no memory is left.
pub(crate) struct MapStack {
    ptr: *mut (u64, u64),
    cap: usize,
    len: usize,
}

impl MapStack {
    const FIRST: usize = 4096;

    /// An empty stack; no memory until the first push.
    pub(crate) fn new() -> MapStack {
        MapStack {
            ptr: std::ptr::null_mut(),
            cap: 0,
            len: 0,
        }
    }

    /// Push `v`; false when the memory for it cannot be had.
    pub(crate) fn push(&mut self, v: (u64, u64)) -> bool {
        if self.len == self.cap && !self.grow() {
            return false;
        }
        // SAFETY: len < cap, and the mapping holds cap elements (grow() made it so); the
        // memory is ours alone (an anonymous private mapping).
        unsafe { self.ptr.add(self.len).write(v) };
        self.len += 1;
        true
    }

    /// Remove the top element.
    pub(crate) fn pop(&mut self) -> Option<(u64, u64)> {
        let top = self.top()?;
        self.len -= 1;
        Some(top)
    }

    /// The top element.
    pub(crate) fn top(&self) -> Option<(u64, u64)> {
        if self.len == 0 {
            return None;
        }
        // SAFETY: len - 1 < cap and that element was written by push().
        Some(unsafe { self.ptr.add(self.len - 1).read() })
    }

    /// The first element.
    pub(crate) fn first(&self) -> Option<(u64, u64)> {
        if self.len == 0 {
            return None;
        }
        // SAFETY: element 0 was written by push().
        Some(unsafe { self.ptr.read() })
    }

    /// How many elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn grow(&mut self) -> bool {
        let elem = std::mem::size_of::<(u64, u64)>();
        let new_cap = if self.cap == 0 {
            Self::FIRST
        } else {
            self.cap.saturating_mul(2)
        };
        let Some(new_bytes) = new_cap.checked_mul(elem) else {
            return false;
        };
        let p = if self.ptr.is_null() {
            // SAFETY: an anonymous private mapping of new_bytes at an address the kernel
            // picks; no memory of ours is involved.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    new_bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            }
        } else {
            // SAFETY: ptr/cap describe the mapping made above (or by an earlier mremap);
            // MREMAP_MAYMOVE keeps its contents, and ptr is replaced below.
            unsafe {
                libc::mremap(
                    self.ptr.cast(),
                    self.cap * elem,
                    new_bytes,
                    libc::MREMAP_MAYMOVE,
                )
            }
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        self.ptr = p.cast();
        self.cap = new_cap;
        true
    }
}

impl Drop for MapStack {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: ptr/cap describe a mapping of ours that nothing else refers to.
            unsafe {
                libc::munmap(
                    self.ptr.cast(),
                    self.cap * std::mem::size_of::<(u64, u64)>(),
                )
            };
        }
    }
}

/// Give the calling thread a file-system context (root, working directory) of its own
/// (`unshare(CLONE_FS)`), so that it alone can then enter another mount namespace.
///
/// # Errors
/// What unshare(2) says.
pub fn unshare_fs() -> std::io::Result<()> {
    // SAFETY: unshare(2) with CLONE_FS only copies this thread's root and working
    // directory; no memory of ours is read or written, and no other thread's view changes.
    if unsafe { libc::unshare(libc::CLONE_FS) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forked_child_reports_its_code_and_is_killed_at_the_deadline() {
        let far = Instant::now() + Duration::from_secs(30);
        let end = run_forked_as(uid(), gid(), far, &mut || 7).unwrap();
        assert_eq!(end, ChildEnd::Exited(7));
        let t = Instant::now();
        let soon = t + Duration::from_millis(200);
        let end = run_forked_as(uid(), gid(), soon, &mut || {
            // SAFETY: pause(2) waits for a signal; the parent's SIGKILL ends it.
            unsafe { libc::pause() };
            0
        })
        .unwrap();
        assert_eq!(end, ChildEnd::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn forked_child_drops_to_the_user() {
        if euid() != 0 {
            return; // only root can change credentials
        }
        let far = Instant::now() + Duration::from_secs(30);
        let end = run_forked_as(65534, 65534, far, &mut || {
            i32::from(!(super::is_exactly(65534, 65534) && euid() == 65534))
        })
        .unwrap();
        assert_eq!(end, ChildEnd::Exited(0));
    }

    #[test]
    fn a_map_stack_grows_without_a_limit_of_its_own() {
        let mut s = MapStack::new();
        assert_eq!(s.pop(), None);
        let n = 3 * MapStack::FIRST as u64 + 5;
        for i in 0..n {
            assert!(s.push((i, i + 1)));
        }
        assert_eq!(
            (s.len(), s.first(), s.top()),
            (n as usize, Some((0, 1)), Some((n - 1, n)))
        );
        for i in (0..n).rev() {
            assert_eq!(s.pop(), Some((i, i + 1)));
        }
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn no_signals_for_init_or_nonsense() {
        assert!(!kill_group(0, 0));
        assert!(!kill_group(1, 0));
        assert!(!kill_group(u32::MAX, 0));
        assert!(!kill(0, 0));
        assert!(!kill(1, 0));
        assert!(!kill(u32::MAX, 0));
        assert!(kill(std::process::id(), 0));
        // SAFETY: getpgrp(2) cannot fail and touches no memory.
        let group = unsafe { libc::getpgrp() } as u32;
        assert!(kill_group(group, 0), "our own group exists");
    }

    #[test]
    fn user_names() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(4_000_000_000), None);
        assert_eq!(primary_gid(0), Some(0));
        assert_eq!(primary_gid(4_000_000_000), None);
    }

    #[test]
    fn pid_handles() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let h = PidHandle::open(child.id()).unwrap();
        assert!(!h.gone());
        assert!(h.signal(libc::SIGKILL));
        child.wait().unwrap();
        assert!(h.gone());
        assert!(!h.signal(0), "a reaped process takes no signal");
        assert!(PidHandle::open(0).is_none());
    }
}
