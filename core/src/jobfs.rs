//! Each MPS job's directory `run_dir/job-<id>` is a tmpfs of its own, `job_dir_size_mib`
//! and `job_dir_inodes` large (issue 35). Whatever the job's user can hold there — files,
//! files unlinked but kept open, a bind mount of a leaf in a user namespace of their own,
//! descriptors in flight over a socket — is held in that file system, never in
//! `run_dir`'s. The epilog kills the user's processes that the kernel says use it (by
//! device: working or root directory, open files, mounts elsewhere in other namespaces),
//! then detaches it (`MNT_DETACH`). A copy at the same place in a namespace made while
//! it was mounted (another job's container) is not a use: removing the directory takes
//! every copy away. What a holder it could not find keeps is its own capped, detached
//! tmpfs, which no longer touches `run_dir` or the next job.
//!
//! The tmpfs is made detached (`fsopen`, `fsmount`) and attached on the root-owned
//! `job-<id>` that root just made (`move_mount` onto its descriptor), so no name a user
//! can change is resolved. Where the job's mount namespace was copied before the prolog
//! mounted it (`job_container/tmpfs`), the extern step attaches a clone of the same mount
//! there too ([`graft`]), so the job's daemons and tasks, the epilog and `colloc status`
//! all see one file system.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Instant;

use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};

use crate::config::Config;
use crate::fs::{Dir, FsError};

/// `statfs` type of tmpfs (`TMPFS_MAGIC`).
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Free and total space and inodes of a file system (`statfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Space {
    /// Bytes free.
    pub free_bytes: u64,
    /// Bytes in all.
    pub total_bytes: u64,
    /// Inodes free.
    pub free_inodes: u64,
    /// Inodes in all.
    pub total_inodes: u64,
}

impl Space {
    /// `statfs` of an open directory.
    ///
    /// # Errors
    /// What `fstatfs` says.
    pub fn of(fd: impl AsFd) -> std::io::Result<Space> {
        let s = rustix::fs::fstatfs(fd)?;
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let bsize = u64::try_from(s.f_bsize).unwrap_or(0);
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        Ok(Space {
            free_bytes: (s.f_bavail as u64).saturating_mul(bsize),
            total_bytes: (s.f_blocks as u64).saturating_mul(bsize),
            free_inodes: s.f_ffree as u64,
            total_inodes: s.f_files as u64,
        })
    }

    /// "0 of 65,536 inodes and 255.9 MiB of 256.0 MiB free".
    pub fn describe(&self) -> String {
        format!(
            "{} of {} inodes and {:.1} MiB of {:.1} MiB free",
            self.free_inodes,
            self.total_inodes,
            mib(self.free_bytes),
            mib(self.total_bytes)
        )
    }
}

#[allow(clippy::cast_precision_loss)]
fn mib(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

fn io_err(what: &'static str, path: &std::path::Path, e: impl Into<std::io::Error>) -> FsError {
    FsError::Io {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// Is `dir` a tmpfs on a device other than `run`'s (a job's own mount)?
fn is_own_mount(run: &Dir, dir: &Dir) -> Result<bool, FsError> {
    let (a, b) = (run.stat()?, dir.stat()?);
    if a.st_dev == b.st_dev {
        return Ok(false);
    }
    let fs = rustix::fs::fstatfs(dir.as_fd()).map_err(|e| io_err("inspect", dir.path(), e))?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let tmpfs = i64::from(fs.f_type) == TMPFS_MAGIC;
    Ok(tmpfs)
}

/// Keep the job mounts colloc makes under `run_dir` in this mount namespace: make
/// `run_dir` a private mount, bound on itself first where it is no mount's root; returns
/// `run_dir` opened anew where it was bound. Not root: `run` as it is.
///
/// Where `run_dir`'s mount is shared (systemd makes `/`, and so `/run`, shared), each
/// job's tmpfs would be copied into every mount namespace that receives from it, a
/// user's own too (`unshare -Urm --propagation unchanged` from a login shell), and the
/// kernel refuses the job's mount (`ENOSPC`) when one such namespace holds
/// `fs.mount-max` mounts: one user with 100,000 bind mounts of their own would refuse
/// every later MPS job of every user. A private `run_dir` sends its mounts nowhere.
///
/// The bind is made only while no job's tmpfs is mounted in `run_dir` (it would hide
/// them); until then, and where it fails, the job goes on as before (logged).
pub fn keep_mounts_private(run: Dir) -> Dir {
    if crate::sys::euid() != 0 {
        return run;
    }
    let link = |d: &Dir| PathBuf::from(format!("/proc/self/fd/{}", d.as_fd().as_raw_fd()));
    let private = |d: &Dir| {
        rustix::mount::mount_change(link(d), rustix::mount::MountPropagationFlags::PRIVATE)
    };
    match private(&run) {
        Ok(()) => return run,
        // EINVAL: not a mount's root.
        Err(e) if e == rustix::io::Errno::INVAL => {}
        Err(e) => {
            log::warn!(
                "cannot make {} a private mount (its jobs' mounts may be copied into other \
                 mount namespaces): {e}",
                run.path().display()
            );
            return run;
        }
    }
    match parent_is_shared(&run) {
        Ok(true) => {}
        Ok(false) => return run, // nothing made under it is sent anywhere
        Err(e) => {
            log::warn!("cannot tell how {} propagates: {e}", run.path().display());
            return run;
        }
    }
    match has_mounts(&run) {
        Ok(false) => {}
        Ok(true) => return run, // a job's tmpfs is there: the next prolog without one
        Err(e) => {
            log::warn!("cannot look for mounts in {}: {e}", run.path().display());
            return run;
        }
    }
    if let Err(e) = rustix::mount::mount_bind(link(&run), link(&run)) {
        log::warn!(
            "cannot bind {} on itself to make it a private mount: {e}",
            run.path().display()
        );
        return run;
    }
    // The bind covers the directory `run` holds: open the path again (root's, as before).
    let bound = match Dir::open_trusted(run.path()) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("cannot open {} again: {e}", run.path().display());
            return run;
        }
    };
    if let Err(e) = private(&bound) {
        log::warn!(
            "cannot make {} a private mount: {e}",
            bound.path().display()
        );
    } else {
        log::info!(
            "{} is now a private mount: the jobs' tmpfs mounts are not copied into other \
             mount namespaces",
            bound.path().display()
        );
    }
    bound
}

/// Is the mount `run` lies on shared (`shared:N` in `/proc/self/mountinfo`), so that a
/// mount made under it is copied to its peers and slaves?
fn parent_is_shared(run: &Dir) -> std::io::Result<bool> {
    let st = rustix::fs::statx(
        run.as_fd(),
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::MNT_ID,
    )?;
    let id = st.stx_mnt_id.to_string();
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL…] - TYPE …".
    Ok(info.lines().any(|l| {
        let mut f = l.split(' ');
        f.next() == Some(id.as_str())
            && f.skip(5)
                .take_while(|w| *w != "-")
                .any(|w| w.starts_with("shared:"))
    }))
}

/// Is any directory in `run` on another device (a mount, such as a job's tmpfs)?
fn has_mounts(run: &Dir) -> Result<bool, FsError> {
    let dev = run.stat()?.st_dev;
    for (name, kind) in run.entries()? {
        let Some(name) = name.to_str() else { continue };
        if !kind.is_dir() {
            continue;
        }
        if let Some(d) = run.open_dir(name)? {
            if d.stat()?.st_dev != dev {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Make `run/name` (root's, 0755) and, as root, mount a fresh tmpfs of the job's caps on
/// it; returns the mounted directory (its root, root's 0755). Not root (unit tests, a
/// user's own `colloc`): the plain directory, nothing mounted.
///
/// # Errors
/// [`FsError`]: the directory cannot be made, or the tmpfs not mounted (no
/// `CAP_SYS_ADMIN`, out of memory); the caller removes the directory ([`detach`] then
/// `rmdir`).
pub fn make(cfg: &Config, run: &Dir, name: &str) -> Result<Dir, FsError> {
    let dir = run.make_dir(name, 0o755)?;
    if crate::sys::euid() != 0 {
        return Ok(dir);
    }
    let path = dir.path().to_path_buf();
    let fsfd = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(|e| io_err("mount a tmpfs on", &path, e))?;
    let size = format!("{}m", cfg.job_dir_size_mib);
    let inodes = cfg.job_dir_inodes.to_string();
    let source = format!("colloc-{name}");
    for (key, value) in [
        ("source", source.as_str()),
        ("size", size.as_str()),
        ("nr_inodes", inodes.as_str()),
        ("mode", "0755"),
    ] {
        rustix::mount::fsconfig_set_string(&fsfd, key, value)
            .map_err(|e| io_err("configure the tmpfs for", &path, e))?;
    }
    rustix::mount::fsconfig_create(&fsfd).map_err(|e| io_err("make the tmpfs for", &path, e))?;
    let mnt = rustix::mount::fsmount(
        &fsfd,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )
    .map_err(|e| io_err("mount a tmpfs on", &path, e))?;
    rustix::mount::move_mount(
        &mnt,
        "",
        dir.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| io_err("mount a tmpfs on", &path, e))?;
    // Only root writes in run_dir: the name is the directory just made, now covered.
    let mounted = run.open_dir(name)?.ok_or_else(|| {
        io_err(
            "open",
            &path,
            std::io::Error::from_raw_os_error(libc::ENOENT),
        )
    })?;
    if !is_own_mount(run, &mounted)? {
        return Err(FsError::Unsafe {
            path,
            why: "not the tmpfs colloc just mounted there".into(),
        });
    }
    mounted.check_private()?;
    Ok(mounted)
}

/// What [`detach`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The file system's device (`major:minor`), where it was a job's own mount.
    pub device: Option<(u32, u32)>,
    /// Processes of the job's user that used it, killed.
    pub killed: Vec<u32>,
    /// Other processes that used it (pid, uid): reported, not killed.
    pub others: Vec<(u32, u32)>,
}

/// Where `run/name` is a job's own tmpfs: kill the processes of `uids` that the kernel
/// says use it ([`crate::dirholders::fs_users`]), then detach it (repeatedly, should
/// several be stacked). Nothing is done where it is a plain directory. Copies of it at
/// the same place in other namespaces (a job container made while it was mounted) are
/// not uses: they go when the caller removes the directory.
///
/// # Errors
/// [`FsError`]: it cannot be opened or detached.
pub fn detach(run: &Dir, name: &str, uids: &[u32], deadline: Instant) -> Result<Detached, FsError> {
    let mut done = Detached::default();
    for _ in 0..8 {
        let Some(dir) = run.open_dir(name)? else {
            return Ok(done);
        };
        if !is_own_mount(run, &dir)? {
            return Ok(done);
        }
        let dev = dir.stat()?.st_dev;
        done.device = Some((rustix::fs::major(dev), rustix::fs::minor(dev)));
        let users = crate::dirholders::fs_users(dev, Some(dir.path()), deadline);
        let (kill, others): (Vec<_>, Vec<_>) = users.into_iter().partition(|u| {
            uids.contains(&u.uid) && crate::mps::runs_wholly_as(u.handle.pid(), u.uid)
        });
        for u in &kill {
            log::warn!(
                "killing process {} of the job's user: it uses {} ({})",
                u.handle.pid(),
                dir.path().display(),
                u.how
            );
            u.handle.signal(libc::SIGKILL);
        }
        while Instant::now() < deadline && kill.iter().any(|u| !u.handle.gone()) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        done.killed.extend(kill.iter().map(|u| u.handle.pid()));
        done.others
            .extend(others.iter().map(|u| (u.handle.pid(), u.uid)));
        // The descriptor's magic link is the mount's root: no name is resolved again.
        let link = PathBuf::from(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()));
        rustix::mount::unmount(&link, UnmountFlags::DETACH)
            .map_err(|e| io_err("detach the tmpfs at", dir.path(), e))?;
    }
    Ok(done)
}

/// From the job's extern step: where the job's mount namespace `ns` (its container's)
/// does not see the job's tmpfs at `run_dir/<name>` (`job-<id>`) (it was copied before the prolog
/// mounted it), attach a clone of that mount there. Nothing where there is no such mount
/// (not root) or the namespace already sees it.
///
/// # Errors
/// One line: what failed (the job is refused).
pub fn graft(cfg: &Config, job: u32, name: &str, ns: BorrowedFd<'_>) -> Result<(), String> {
    let name = name.to_string();
    let run = Dir::open_trusted(&cfg.run_dir).map_err(|e| e.to_string())?;
    let Some(dir) = run.open_dir(&name).map_err(|e| e.to_string())? else {
        return Err(format!("{} is missing", run.path().join(&name).display()));
    };
    if !is_own_mount(&run, &dir).map_err(|e| e.to_string())? {
        return Ok(());
    }
    let dev = dir.stat().map_err(|e| e.to_string())?.st_dev;
    let clone = rustix::mount::open_tree(
        dir.as_fd(),
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| format!("cannot clone the mount at {}: {e}", dir.path().display()))?;
    let run_dir = cfg.run_dir.clone();
    // A thread of its own, with its own file-system context, enters the namespace: the
    // rest of the process stays where it is.
    std::thread::scope(|s| {
        s.spawn(|| -> Result<(), String> {
            crate::sys::unshare_fs()
                .map_err(|e| format!("cannot unshare the file-system context: {e}"))?;
            rustix::thread::move_into_link_name_space(
                ns,
                Some(rustix::thread::LinkNameSpaceType::Mount),
            )
            .map_err(|e| format!("cannot enter the job's mount namespace: {e}"))?;
            let run = Dir::open_trusted(&run_dir).map_err(|e| e.to_string())?;
            let target = run
                .open_dir(&name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "{} is missing in the job's namespace",
                        run_dir.join(&name).display()
                    )
                })?;
            let st = target.stat().map_err(|e| e.to_string())?;
            if st.st_dev == dev {
                log::info!("job {job}: its namespace sees its tmpfs already");
                return Ok(());
            }
            if st.st_dev != run.stat().map_err(|e| e.to_string())?.st_dev {
                return Err(format!(
                    "{} is another file system in the job's namespace",
                    target.path().display()
                ));
            }
            target.check_private().map_err(|e| e.to_string())?;
            rustix::mount::move_mount(
                &clone,
                "",
                target.as_fd(),
                "",
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
            )
            .map_err(|e| {
                format!(
                    "cannot mount the job's tmpfs at {} in its namespace: {e}",
                    target.path().display()
                )
            })?;
            log::info!(
                "job {job}: its tmpfs mounted at {} in its namespace too",
                target.path().display()
            );
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err("the thread entering the job's namespace failed".into()))
    })
}

/// Check that the job's directory can be made: `run_dir` has an inode and a block free,
/// and `job_dir_inodes` holds the `daemons` daemon directories and their leaves. The
/// reason names the figures.
///
/// # Errors
/// Why not, in one line.
pub fn check_room(cfg: &Config, run: &Dir, daemons: usize) -> Result<(), String> {
    let need = 1 + 3 * u64::try_from(daemons).unwrap_or(u64::MAX);
    if crate::sys::euid() == 0 && cfg.job_dir_inodes < need + 16 {
        return Err(format!(
            "job_dir_inodes = {} in colloc.toml is too small for {daemons} MPS daemon \
             directories (they need {need}, and the daemons' files some more)",
            cfg.job_dir_inodes
        ));
    }
    match Space::of(run.as_fd()) {
        Ok(s) if s.free_inodes < 2 || s.free_bytes < 8192 => Err(format!(
            "no space left in run_dir {}: {}",
            run.path().display(),
            s.describe()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    /// A root-owned `run_dir` (0755) in a temporary folder any user can pass, and the
    /// configuration naming it; the folder goes when the first value is dropped.
    fn run_dir_in_tempdir() -> (tempfile::TempDir, Config, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = Config {
            state_dir: tmp.path().join("state"),
            run_dir: tmp.path().join("run"),
            ..Config::default()
        };
        let run = Dir::create_trusted(&cfg.run_dir, 0o755).unwrap();
        (tmp, cfg, run)
    }

    /// A mount namespace copied before the prolog mounted the job's tmpfs (as a job
    /// container made early would be) gets the same tmpfs from [`graft`]: one file
    /// system, seen from both.
    #[test]
    fn a_namespace_copied_before_the_mount_is_given_the_same_tmpfs() {
        if crate::sys::euid() != 0 {
            return; // mounting is root's
        }
        let (_tmp, cfg, run) = run_dir_in_tempdir();
        // The "job container": a process in a private copy of this namespace.
        let mut holder = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sleep", "60"])
            .spawn()
            .unwrap();
        let ns_path = format!("/proc/{}/ns/mnt", holder.id());
        let own = std::fs::metadata("/proc/self/ns/mnt").unwrap().ino();
        for _ in 0..500 {
            if std::fs::metadata(&ns_path).is_ok_and(|m| m.ino() != own) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let job = make(&cfg, &run, "job-3").unwrap();
        let dev = job.stat().unwrap().st_dev;
        let inside = PathBuf::from(format!("/proc/{}/root", holder.id()))
            .join(cfg.run_dir.strip_prefix("/").unwrap())
            .join("job-3");
        let seen = || std::fs::metadata(&inside).unwrap().dev();
        assert_ne!(seen(), dev, "copied before the mount: not seen there");
        let ns = std::fs::File::open(&ns_path).unwrap();
        graft(&cfg, 3, "job-3", ns.as_fd()).unwrap();
        assert_eq!(seen(), dev, "the same tmpfs in the job's namespace");
        // Once more changes nothing (it sees it already).
        graft(&cfg, 3, "job-3", ns.as_fd()).unwrap();
        let _ = holder.kill();
        let _ = holder.wait();
        let done = detach(
            &run,
            "job-3",
            &[],
            Instant::now() + std::time::Duration::from_secs(5),
        )
        .unwrap();
        assert!(done.device.is_some());
        run.rmdir("job-3").unwrap();
    }

    /// A process of user nobody in a private mount namespace copied from this one: made
    /// by root (`unshare -m`, then `setpriv`), or by the user in a user namespace of
    /// their own (`setpriv`, then `unshare -r -m`) where it first runs `then` (`sh -c`).
    fn nobody_in_namespace(user_made: bool, then: &str) -> std::process::Child {
        let drop = "setpriv --reuid 65534 --regid 65534 --clear-groups";
        let line = if user_made {
            format!("{drop} unshare -r -m --propagation private sh -c '{then} exec sleep 60'")
        } else {
            format!("unshare -m --propagation private {drop} sh -c '{then} exec sleep 60'")
        };
        let child = std::process::Command::new("sh")
            .args(["-c", &format!("exec {line}")])
            .current_dir("/")
            .spawn()
            .unwrap();
        let status = format!("/proc/{}/status", child.id());
        for _ in 0..500 {
            if std::fs::read_to_string(&status).is_ok_and(|s| s.contains("Name:\tsleep")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child
    }

    /// The CI failure of 2026-12-06 (`PrologFlags=Serial`, two MPS jobs of one user): a
    /// namespace made while a job's tmpfs was mounted holds a copy of it at the same
    /// place. The job's epilog kills nothing for such a copy — in a job container root
    /// made, or in a rootless container the user made in their next job — and removing
    /// the directory takes every copy away; a mount of it elsewhere, in a namespace the
    /// user made, is still a holder, killed.
    #[test]
    fn copies_in_later_namespaces_are_not_holders_and_go_with_the_directory() {
        if crate::sys::euid() != 0 {
            return; // mounting is root's
        }
        let (_tmp, cfg, run) = run_dir_in_tempdir();
        let job = make(&cfg, &run, "job-5").unwrap();
        let dev = job.stat().unwrap().st_dev;
        drop(job);
        let job_dir = cfg.run_dir.join("job-5");
        let mut other_job = nobody_in_namespace(false, "");
        let mut rootless = nobody_in_namespace(true, "");
        let mut hidden =
            nobody_in_namespace(true, &format!("mount --bind {} /mnt &&", job_dir.display()));
        for c in [&other_job, &rootless, &hidden] {
            assert!(
                crate::dirholders::mounts_of(c.id(), dev)
                    .iter()
                    .any(|(_, at)| Path::new(at) == job_dir),
                "process {} has a copy of the tmpfs",
                c.id()
            );
        }
        assert!(crate::dirholders::mounts_of(hidden.id(), dev)
            .iter()
            .any(|(_, at)| at == "/mnt"));
        let done = detach(
            &run,
            "job-5",
            &[65534],
            Instant::now() + std::time::Duration::from_secs(5),
        )
        .unwrap();
        run.rmdir("job-5").unwrap();
        let alive = [&mut other_job, &mut rootless].map(|c| c.try_wait().unwrap().is_none());
        let copies: Vec<usize> = [&other_job, &rootless]
            .iter()
            .map(|c| crate::dirholders::mounts_of(c.id(), dev).len())
            .collect();
        let hidden_end = hidden.wait().unwrap();
        for c in [&mut other_job, &mut rootless] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert_eq!(alive, [true, true], "killed for a copy: {done:?}");
        assert_eq!(copies, [0, 0], "the copies went with the directory");
        assert_eq!(done.killed, vec![hidden.id()], "only the holder elsewhere");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&hidden_end),
            Some(libc::SIGKILL)
        );
        assert!(done.others.is_empty(), "{done:?}");
    }
}
