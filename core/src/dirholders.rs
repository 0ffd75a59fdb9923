//! Processes of a job's user that keep its directory under `run_dir` busy: their working
//! or root directory, or a descriptor they hold, lies inside it. A process left behind by
//! the job (`setsid`, outside the job's cgroup) can keep adding files there after the job
//! ended, past any cleanup deadline; the epilog kills it before it removes the tree or
//! moves it aside ([`crate::rundir`]).
//!
//! Who is killed follows `SECURITY.md`, rule 7: only processes whose real, effective,
//! saved and file-system user ids are all the tree's user (never root, never a set-uid
//! program), each pinned with a pidfd before it is inspected and killed through it, so a
//! reused pid is never hit. Whether a directory lies inside the tree is decided by device
//! and inode, climbing `..` from the process's own directory (opened through `/proc`
//! with `O_PATH`, nothing followed on the way), not by path, so it holds for processes in
//! the job's mount namespace too.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::sys::PidHandle;

/// Identity of a directory: device and inode.
pub type DirId = (u64, u64);

const UP: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Does the directory `fd` lie inside (or is it) the directory `top`? Climbs `..` until it
/// meets `top`, leaves `top`'s device, reaches a root, or `deadline` passes.
fn inside(fd: OwnedFd, top: DirId, deadline: Instant) -> bool {
    let mut cur = fd;
    let mut steps = 0u64;
    loop {
        let Ok(st) = rustix::fs::fstat(&cur) else {
            return false;
        };
        if (st.st_dev, st.st_ino) == top {
            return true;
        }
        if st.st_dev != top.0 {
            return false;
        }
        steps += 1;
        if steps.is_multiple_of(4096) && Instant::now() >= deadline {
            return false;
        }
        let Ok(up) = rustix::fs::openat(cur.as_fd(), c"..", UP, Mode::empty()) else {
            return false;
        };
        let Ok(ust) = rustix::fs::fstat(&up) else {
            return false;
        };
        if (ust.st_dev, ust.st_ino) == (st.st_dev, st.st_ino) {
            return false; // a root
        }
        cur = up;
    }
}

/// Is a `/proc/<pid>/…` link (cwd, root, fd/N) a directory inside `top`?
fn link_inside(link: &Path, top: DirId, deadline: Instant) -> bool {
    // O_PATH of the magic link opens what it stands for (as root) without reading it.
    match rustix::fs::open(
        link,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => inside(fd, top, deadline),
        Err(_) => false,
    }
}

/// Does process `pid` hold something inside `top` (its cwd, its root, an open directory,
/// or an open file whose path lies under `top_path` on `top`'s device)?
fn holds(pid: u32, top: DirId, top_path: &Path, deadline: Instant) -> bool {
    let base = Path::new("/proc").join(pid.to_string());
    if link_inside(&base.join("cwd"), top, deadline)
        || link_inside(&base.join("root"), top, deadline)
    {
        return true;
    }
    let Ok(fds) = std::fs::read_dir(base.join("fd")) else {
        return false;
    };
    for fd in fds.flatten() {
        if Instant::now() >= deadline {
            return false;
        }
        let link = fd.path();
        let Ok(st) = rustix::fs::stat(&link) else {
            continue;
        };
        if st.st_dev != top.0 {
            continue;
        }
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
            if link_inside(&link, top, deadline) {
                return true;
            }
        } else if std::fs::read_link(&link).is_ok_and(|p| p.starts_with(top_path)) {
            return true;
        }
    }
    false
}

/// The processes of `uid` (not root) that hold something inside the directory `top`
/// (at `top_path`), each pinned before it was inspected and alive after.
pub fn holders(uid: u32, top: DirId, top_path: &Path, deadline: Instant) -> Vec<PidHandle> {
    if uid == 0 {
        return Vec::new();
    }
    let mut found = Vec::new();
    for (pid, handle) in other_processes(deadline) {
        if !crate::mps::runs_wholly_as(pid, uid) || !holds(pid, top, top_path, deadline) {
            continue;
        }
        if handle.signal(0) {
            found.push(handle);
        }
    }
    found
}

/// Every process but this one, each pinned (a pidfd) before the caller inspects it, as
/// /proc lists them, until `deadline`: the one walk both holder searches make.
fn other_processes(deadline: Instant) -> impl Iterator<Item = (u32, PidHandle)> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .take_while(move |_| Instant::now() < deadline)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(move |&pid| pid != me)
        .filter_map(|pid| PidHandle::open(pid).map(|h| (pid, h)))
}

/// SIGKILL the processes of each of `uids` that hold something inside `top`, and wait
/// for them to go until `deadline`. Returns the pids killed.
pub fn kill_holders(uids: &[u32], top: DirId, top_path: &Path, deadline: Instant) -> Vec<u32> {
    let mut procs = Vec::new();
    for &uid in uids {
        procs.extend(holders(uid, top, top_path, deadline));
    }
    for p in &procs {
        log::warn!(
            "killing process {} of the job's user: it keeps {} busy",
            p.pid(),
            top_path.display()
        );
        p.signal(libc::SIGKILL);
    }
    while Instant::now() < deadline && procs.iter().any(|p| !p.gone()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    procs.iter().map(PidHandle::pid).collect()
}

/// A process that uses a file system, as the kernel tells it.
#[derive(Debug)]
pub struct FsUser {
    /// The process, pinned before it was inspected.
    pub handle: PidHandle,
    /// Its real user id.
    pub uid: u32,
    /// How it uses the file system: "working directory", "root directory", "open file",
    /// "mount in another namespace".
    pub how: &'static str,
}

/// The inode of a namespace link (`/proc/PID/ns/…`).
fn ns_inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .ok()
}

/// A path as `/proc/PID/mountinfo` writes it (space, tab, newline and backslash as
/// octal escapes); `None` where it is not UTF-8.
fn mountinfo_escaped(p: &Path) -> Option<String> {
    let s = p.to_str()?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    Some(out)
}

/// The mounts of device `dev` that process `pid` sees (`/proc/PID/mountinfo`, paths
/// relative to its root directory): each as (the mount's root in the file system, its
/// mount point), escaped as the kernel writes them.
pub fn mounts_of(pid: u32, dev: u64) -> Vec<(String, String)> {
    let want = format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    let Some(text) = std::fs::File::open(format!("/proc/{pid}/mountinfo"))
        .ok()
        .and_then(|f| crate::fs::read_at_most(f, 16 << 20).ok().flatten())
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            // "ID PARENT MAJ:MIN ROOT MOUNT-POINT …"
            let f: Vec<&str> = l.splitn(6, ' ').collect();
            (f.len() == 6 && f[2] == want).then(|| (f[3].to_string(), f[4].to_string()))
        })
        .collect()
}

/// The processes that use the file system on device `dev` (a job's own tmpfs,
/// [`crate::jobfs`]), found the way the kernel knows them, not by any path a user can
/// bend: a working or root directory or an open descriptor on that device (`stat` of
/// `/proc/PID/{cwd,root,fd/N}`, unlinked files included), or a mount of it in a mount
/// namespace other than this process's (`/proc/PID/mountinfo`, read once per
/// namespace and root directory). Descriptors in flight in a socket (`SCM_RIGHTS`) and
/// mounts in namespaces no process is in any more are out of reach. Until `deadline`.
///
/// A mount of the whole file system at exactly `copies_at` is a copy, not a use: a
/// namespace made while the file system was mounted there holds one (another job's
/// container under `job_container/tmpfs`, a rootless container the user began in a
/// later job), and removing that directory here once the file system is detached
/// detaches every such copy, in every namespace, locked ones included (Linux 3.18 and
/// later). Counting them killed a user's second job at the end of their first.
pub fn fs_users(dev: u64, copies_at: Option<&Path>, deadline: Instant) -> Vec<FsUser> {
    let own_ns = ns_inode(Path::new("/proc/self/ns/mnt"));
    let copy_point = copies_at.and_then(mountinfo_escaped);
    let is_use = |(root, at): &(String, String)| {
        !(root == "/" && copy_point.as_deref() == Some(at.as_str()))
    };
    let mut seen: std::collections::HashMap<(u64, u64, u64), bool> =
        std::collections::HashMap::new();
    let mut found = Vec::new();
    for (pid, handle) in other_processes(deadline) {
        let base = Path::new("/proc").join(pid.to_string());
        let on_dev = |p: &Path| rustix::fs::stat(p).is_ok_and(|st| st.st_dev == dev);
        let mut how = None;
        if on_dev(&base.join("cwd")) {
            how = Some("working directory");
        } else if on_dev(&base.join("root")) {
            how = Some("root directory");
        } else if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            let in_time = |_: &std::fs::DirEntry| Instant::now() < deadline;
            if fds
                .flatten()
                .take_while(in_time)
                .any(|fd| on_dev(&fd.path()))
            {
                how = Some("open file");
            }
        }
        if how.is_none() {
            if let Some(ns) = ns_inode(&base.join("ns/mnt")).filter(|&n| Some(n) != own_ns) {
                // mountinfo shows what lies under the process's root: one reading per
                // namespace and root, so a chrooted process hides nothing of the others.
                let root =
                    rustix::fs::stat(base.join("root")).map_or((0, 0), |st| (st.st_dev, st.st_ino));
                let used = *seen
                    .entry((ns, root.0, root.1))
                    .or_insert_with(|| mounts_of(pid, dev).iter().any(is_use));
                if used {
                    how = Some("mount in another namespace");
                }
            }
        }
        let Some(how) = how else { continue };
        let status = std::fs::read_to_string(base.join("status")).unwrap_or_default();
        let Some(uid) = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok())
        else {
            continue;
        };
        if handle.signal(0) {
            found.push(FsUser { handle, uid, how });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn id_of(p: &Path) -> DirId {
        let st = rustix::fs::stat(p).unwrap();
        (st.st_dev, st.st_ino)
    }

    #[test]
    fn processes_with_cwd_or_a_descriptor_inside_are_found_and_killed_only_those() {
        if crate::sys::euid() != 0 {
            return; // other users' processes: root's view only
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            tmp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let top = tmp.path().join("job-1");
        let deep = top.join("gpu0/log/a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let outside = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        for p in [&top.join("gpu0/log"), &deep, &top.join("gpu0/log/a")] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        let spawn = |dir: &Path, script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .current_dir(dir)
                .uid(65534)
                .gid(65534)
                .spawn()
                .unwrap()
        };
        // cwd inside; a directory descriptor inside (cwd elsewhere); neither.
        let mut in_cwd = spawn(&deep, "exec sleep 60");
        let mut in_fd = spawn(
            &outside,
            &format!("exec 3<{} ; exec sleep 60", deep.display()),
        );
        let mut away = spawn(&outside, "exec sleep 60");
        // Let the shells reach their exec.
        let wait_exec = |pid: u32| {
            for _ in 0..500 {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.trim() == "sleep" {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        for c in [&in_cwd, &in_fd, &away] {
            wait_exec(c.id());
        }
        let soon = Instant::now() + Duration::from_secs(10);
        let mut found: Vec<u32> = holders(65534, id_of(&top), &top, soon)
            .iter()
            .map(PidHandle::pid)
            .collect();
        found.sort_unstable();
        let mut want = vec![in_cwd.id(), in_fd.id()];
        want.sort_unstable();
        assert_eq!(found, want);
        // Nobody else's: not root's processes, whatever they hold.
        assert!(holders(0, id_of(&top), &top, soon).is_empty());
        let killed = kill_holders(&[65534], id_of(&top), &top, soon);
        assert_eq!(killed.len(), 2);
        assert!(in_cwd.wait().is_ok() && in_fd.wait().is_ok());
        assert!(
            away.try_wait().unwrap().is_none(),
            "the one outside runs on"
        );
        let _ = away.kill();
        let _ = away.wait();
    }
}
