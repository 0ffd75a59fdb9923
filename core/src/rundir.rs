//! The per-job MPS tree under `run_dir`:
//!
//! ```text
//! run_dir/            root, 0755 (it and the directories above: root's, writable only by root)
//!   job-<id>/         root, 0755
//!     gpu<K>/         root, 0755
//!       pipe/  log/   the job's user, 0700: CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY
//!   .leftovers/       root, 0700: what could not be removed, moved aside (made when needed)
//!   summary/          root, 0755: the batch steps' job-summary sockets, each its job's
//!                     user's, 0600 (`crate::jobsummary`; gone with its last socket)
//! ```
//!
//! The user owns only the leaves, so no name root resolves can be swapped for a link.
//! Root makes the tree relative to directory descriptors ([`crate::fs::Dir`]) and hands
//! the leaves over with `fchown` on their open descriptors; the leaves' contents are
//! removed by a child running as the user. A user's files that cannot be removed are moved
//! aside and logged: cleaning up after a user never fails an epilog.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::fs::{Dir, FsError};

/// How long removing a job's tree may take (its user's files are removed by a child that
/// is killed then).
pub const CLEANUP_TIME: Duration = Duration::from_secs(5);

/// Where trees that could not be removed are moved, inside `run_dir`.
pub const LEFTOVERS: &str = ".leftovers";

/// The name of a job's directory in `run_dir`.
pub fn job_dir_name(job: u32) -> String {
    format!("job-{job}")
}

/// A job's directory.
pub fn job_dir(cfg: &Config, job: u32) -> PathBuf {
    cfg.run_dir.join(job_dir_name(job))
}

/// The directory of the daemon of GPU `index` (its `pipe` and `log` are inside).
pub fn gpu_dir(cfg: &Config, job: u32, index: u32) -> PathBuf {
    job_dir(cfg, job).join(gpu_dir_name(index))
}

/// The name of GPU `index`'s daemon directory inside the job's directory.
pub fn gpu_dir_name(index: u32) -> String {
    format!("gpu{index}")
}

/// The name of the daemon directory of MIG instance `gi` of GPU `index` (`mig:…:mps`).
pub fn instance_dir_name(index: u32, gi: u32) -> String {
    format!("gpu{index}-gi{gi}")
}

/// Make `run_dir/job-<id>/gpu<K>/{pipe,log}` for each GPU index, the leaves owned by
/// `uid`:`gid` with mode 0700. A tree left by an earlier job with this id is removed (or
/// moved aside) first. `run_dir` itself is made where missing; the directories above it
/// are not ([`Config::run_dir_problem`]).
///
/// # Errors
/// [`FsError`]: `run_dir` is not safe or not usable (its parent missing, a directory on
/// the way the user cannot pass), or a directory cannot be made (`ENOSPC`, `EDQUOT`, …).
/// The caller removes what was made ([`remove`]).
pub fn create(cfg: &Config, job: u32, uid: u32, gid: u32, gpus: &[u32]) -> Result<(), FsError> {
    let names: Vec<String> = gpus.iter().map(|&i| gpu_dir_name(i)).collect();
    create_named(cfg, job, uid, gid, &names)
}

/// [`create`] with the daemon directories named: `run_dir/job-<id>/<name>/{pipe,log}`
/// ([`gpu_dir_name`], [`instance_dir_name`]).
///
/// # Errors
/// As [`create`].
pub fn create_named(
    cfg: &Config,
    job: u32,
    uid: u32,
    gid: u32,
    names: &[String],
) -> Result<(), FsError> {
    // Only run_dir itself is made (mode 0755): the directories above must exist and let
    // the job's user through, or its daemon could not reach its pipe directory.
    if let Some(problem) = cfg.run_dir_problem() {
        return Err(FsError::Io {
            what: "use",
            path: cfg.run_dir.clone(),
            source: std::io::Error::other(problem),
        });
    }
    let run = crate::jobfs::keep_mounts_private(Dir::create_trusted(&cfg.run_dir, 0o755)?);
    let name = job_dir_name(job);
    if run.lstat(&name)?.is_some() {
        log::warn!(
            "job {job}: {} is left from an earlier job with this id; removing it",
            run.path().join(&name).display()
        );
        clear(&run, &name, Instant::now() + CLEANUP_TIME)?;
    }
    if let Err(why) = crate::jobfs::check_room(cfg, &run, names.len()) {
        log::error!("job {job}: {why}");
        return Err(FsError::Io {
            what: "use",
            path: cfg.run_dir.clone(),
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, why),
        });
    }
    let job_dir = crate::jobfs::make(cfg, &run, &name)?;
    for name in names {
        let g = job_dir.make_dir(name, 0o755)?;
        for leaf in ["pipe", "log"] {
            g.make_dir(leaf, 0o700)?.chown(uid, gid)?;
        }
    }
    Ok(())
}

/// " (run_dir /run/colloc: … free; job-5's tmpfs: … free)": the figures for a refusal
/// for lack of space.
pub fn space_note(cfg: &Config, job: u32) -> String {
    let Ok(run) = Dir::open_trusted(&cfg.run_dir) else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Ok(s) = crate::jobfs::Space::of(std::os::fd::AsFd::as_fd(&run)) {
        parts.push(format!(
            "run_dir {}: {}",
            run.path().display(),
            s.describe()
        ));
    }
    let name = job_dir_name(job);
    if let Ok(Some(d)) = run.open_dir(&name) {
        let own = match (run.stat(), d.stat()) {
            (Ok(a), Ok(b)) => a.st_dev != b.st_dev,
            _ => false,
        };
        if own {
            if let Ok(s) = crate::jobfs::Space::of(std::os::fd::AsFd::as_fd(&d)) {
                parts.push(format!(
                    "the job's own tmpfs {name} (job_dir_size_mib, job_dir_inodes): {}",
                    s.describe()
                ));
            }
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}

/// What [`remove`] did about a job's tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// Where a tree that could not be removed went.
    pub moved_aside: Option<PathBuf>,
    /// Why the tree is not (wholly) gone; logged as a warning.
    pub problem: Option<String>,
}

/// Remove a job's tree. Never fails: what cannot be removed by `deadline` is moved to
/// `run_dir/.leftovers/`, and the reason is returned (and logged) as a warning.
pub fn remove(cfg: &Config, job: u32, deadline: Instant) -> Cleanup {
    let name = job_dir_name(job);
    let run = match Dir::open_trusted(&cfg.run_dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Cleanup::default(),
        Err(e) => {
            let problem = format!("not removing {}: {e}", job_dir(cfg, job).display());
            log::warn!("job {job}: {problem}");
            return Cleanup {
                moved_aside: None,
                problem: Some(problem),
            };
        }
    };
    match clear(&run, &name, deadline) {
        Ok(None) => Cleanup::default(),
        Ok(Some((to, why))) => {
            log::warn!(
                "job {job}: could not remove all its files ({why}); moved them to {}",
                to.display()
            );
            Cleanup {
                moved_aside: Some(to),
                problem: Some(why),
            }
        }
        Err(e) => {
            let problem = e.to_string();
            log::warn!("job {job}: {problem}");
            Cleanup {
                moved_aside: None,
                problem: Some(problem),
            }
        }
    }
}

/// Kill the processes of the tree's users (the owners of its first three levels, root
/// aside) that keep `dir/name` busy ([`crate::dirholders`]): a process left behind by the
/// job could otherwise keep adding files there past any deadline. Returns their pids.
fn kill_holders(dir: &Dir, name: &str, deadline: Instant) -> Vec<u32> {
    let Ok(Some(st)) = dir.lstat(name) else {
        return Vec::new();
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Vec::new();
    }
    let uids = tree_uids(dir, name);
    if uids.is_empty() {
        return Vec::new();
    }
    crate::dirholders::kill_holders(
        &uids,
        (st.st_dev, st.st_ino),
        &dir.path().join(name),
        deadline,
    )
}

/// The owners of the first three levels of `dir/name`, root aside: the tree's users.
fn tree_uids(dir: &Dir, name: &str) -> Vec<u32> {
    let Ok(Some(st)) = dir.lstat(name) else {
        return Vec::new();
    };
    let mut uids = vec![st.st_uid];
    if let Ok(Some(top)) = dir.open_dir(name) {
        for (sub, _) in top.entries().unwrap_or_default() {
            let Some(sub) = sub.to_str() else { continue };
            if let Ok(Some(s)) = top.lstat(sub) {
                uids.push(s.st_uid);
            }
            let Ok(Some(d)) = top.open_dir(sub) else {
                continue;
            };
            for (leaf, _) in d.entries().unwrap_or_default() {
                if let Some(Ok(Some(s))) = leaf.to_str().map(|l| d.lstat(l)) {
                    uids.push(s.st_uid);
                }
            }
        }
    }
    uids.sort_unstable();
    uids.dedup();
    uids.retain(|&u| u != 0);
    uids
}

/// Where `run/name` is a job's own tmpfs ([`crate::jobfs`]): kill its user's processes
/// that use it and detach it, logging what was found. What is left is then the plain,
/// empty directory under it.
fn detach_job_fs(run: &Dir, name: &str, deadline: Instant) -> Result<(), FsError> {
    let uids = tree_uids(run, name);
    let done = crate::jobfs::detach(run, name, &uids, deadline)?;
    if let Some((major, minor)) = done.device {
        let path = run.path().join(name);
        if !done.killed.is_empty() {
            log::warn!(
                "{}: killed process(es) {:?} of its user that used its tmpfs ({major}:{minor})",
                path.display(),
                done.killed
            );
        }
        for (pid, uid) in &done.others {
            log::warn!(
                "{}: its tmpfs ({major}:{minor}) is still used by process {pid} of uid {uid} \
                 (not the job's user's alone: not killed); detached, it keeps only that",
                path.display()
            );
        }
    }
    Ok(())
}

/// Remove `name` from `run`; if that fails, move it to `.leftovers`. `Ok(None)`: removed;
/// `Ok(Some((where, why)))`: moved aside. Processes of the job's user that keep it busy
/// are killed first.
fn clear(run: &Dir, name: &str, deadline: Instant) -> Result<Option<(PathBuf, String)>, FsError> {
    detach_job_fs(run, name, deadline)?;
    let killed = kill_holders(run, name, deadline);
    if !killed.is_empty() {
        log::warn!(
            "{}: killed process(es) {killed:?} of its user that kept it busy",
            run.path().join(name).display()
        );
    }
    let why = match run.remove_tree(name, 2, deadline) {
        Ok(()) => return Ok(None),
        Err(e) => e.to_string(),
    };
    let leftovers = leftovers_dir(run)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for n in 0..100 {
        let new_name = format!("{name}.{stamp}.{n}");
        match run.move_to(name, &leftovers, &new_name) {
            Ok(()) => return Ok(Some((leftovers.path().join(new_name), why))),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Err(FsError::Io {
        what: "move aside",
        path: run.path().join(name),
        source: std::io::Error::from_raw_os_error(libc::EEXIST),
    })
}

fn leftovers_dir(run: &Dir) -> Result<Dir, FsError> {
    let dir = match run.open_dir(LEFTOVERS)? {
        Some(d) => d,
        None => match run.make_dir(LEFTOVERS, 0o700) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                run.open_dir(LEFTOVERS)?.ok_or_else(|| FsError::Io {
                    what: "open",
                    path: run.path().join(LEFTOVERS),
                    source: std::io::Error::from_raw_os_error(libc::ENOENT),
                })?
            }
            Err(e) => return Err(e),
        },
    };
    let st = dir.stat()?;
    if st.st_uid != crate::sys::euid() || st.st_mode & 0o077 != 0 {
        return Err(FsError::Unsafe {
            path: dir.path().to_path_buf(),
            why: format!(
                "owned by uid {} with mode {:04o} (colloc makes it root's, 0700)",
                st.st_uid,
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(dir)
}

/// How long a prolog spends retrying `run_dir/.leftovers` ([`clear_leftovers`]).
pub const LEFTOVERS_TIME: Duration = Duration::from_secs(5);

/// A tree in `run_dir/.leftovers` that could not be removed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Where it is.
    pub path: PathBuf,
    /// Why it is still there.
    pub why: String,
}

/// Try again to remove what was moved to `run_dir/.leftovers` (as each tree's owner,
/// after killing the processes of its user that keep it busy), until `deadline`. Returns
/// what is still there, with why; a `.leftovers` that cannot be opened is one such entry.
pub fn clear_leftovers(cfg: &Config, deadline: Instant) -> Vec<Leftover> {
    let here = cfg.run_dir.join(LEFTOVERS);
    let run = match Dir::open_trusted(&cfg.run_dir) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Vec::new(),
        Err(e) => {
            return vec![Leftover {
                path: here,
                why: e.to_string(),
            }]
        }
    };
    let dir = match leftovers_dir_if_any(&run) {
        Ok(Some(d)) => d,
        Ok(None) => return Vec::new(),
        Err(e) => {
            return vec![Leftover {
                path: here,
                why: e.to_string(),
            }]
        }
    };
    let mut left = Vec::new();
    for (name, _) in dir.entries().unwrap_or_default() {
        let path = dir.path().join(&name);
        let Some(name) = name.to_str() else {
            left.push(Leftover {
                path,
                why: "its name is not UTF-8".into(),
            });
            continue;
        };
        if Instant::now() >= deadline {
            left.push(Leftover {
                path,
                why: "not tried: out of time".into(),
            });
            continue;
        }
        kill_holders(&dir, name, deadline);
        if let Err(e) = dir.remove_tree(name, 2, deadline) {
            log::warn!("{}: {e}", path.display());
            left.push(Leftover {
                path,
                why: e.to_string(),
            });
        }
    }
    if left.is_empty() {
        let _ = run.rmdir(LEFTOVERS);
    }
    left
}

/// `run_dir/.leftovers`, checked to be root's 0700, where it exists.
fn leftovers_dir_if_any(run: &Dir) -> Result<Option<Dir>, FsError> {
    if run.lstat(LEFTOVERS)?.is_none() {
        return Ok(None);
    }
    leftovers_dir(run).map(Some)
}

/// What `run_dir/.leftovers` holds (for `colloc status`), without touching it.
///
/// # Errors
/// [`FsError`] when `run_dir` or `.leftovers` cannot be opened (as a user: permission).
pub fn leftovers(cfg: &Config) -> Result<Vec<PathBuf>, FsError> {
    let run = match Dir::open_trusted(&cfg.run_dir) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let Some(dir) = run.open_dir(LEFTOVERS)? else {
        return Ok(Vec::new());
    };
    let mut list: Vec<PathBuf> = dir
        .entries()?
        .into_iter()
        .map(|(n, _)| dir.path().join(n))
        .collect();
    list.sort();
    Ok(list)
}

/// Is `path` where colloc puts job `job`'s tree (as a journal must say)?
pub fn is_job_dir(cfg: &Config, job: u32, path: &Path) -> bool {
    path == job_dir(cfg, job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn cfg(dir: &Path) -> Config {
        // The job's user must be able to pass through to its leaves.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Config {
            state_dir: dir.join("state"),
            run_dir: dir.join("run"),
            ..Config::default()
        }
    }

    /// A uid and gid that are not ours: nobody when we are root, else our own (the test
    /// then checks less).
    fn other_user() -> (u32, u32) {
        if crate::sys::euid() == 0 {
            (65534, 65534)
        } else {
            (crate::sys::euid(), crate::sys::gid())
        }
    }

    #[test]
    fn the_tree_is_roots_but_the_leaves() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        let (uid, gid) = other_user();
        create(&c, 5, uid, gid, &[0, 3]).unwrap();
        let me = crate::sys::euid();
        for (p, owner, mode) in [
            (c.run_dir.clone(), me, 0o755),
            (job_dir(&c, 5), me, 0o755),
            (gpu_dir(&c, 5, 0), me, 0o755),
            (gpu_dir(&c, 5, 3), me, 0o755),
            (gpu_dir(&c, 5, 0).join("pipe"), uid, 0o700),
            (gpu_dir(&c, 5, 3).join("log"), uid, 0o700),
        ] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert!(m.is_dir(), "{}", p.display());
            assert_eq!(m.uid(), owner, "{}", p.display());
            assert_eq!(m.permissions().mode() & 0o7777, mode, "{}", p.display());
        }
        assert_eq!(
            remove(&c, 5, Instant::now() + CLEANUP_TIME),
            Cleanup::default()
        );
        assert!(!job_dir(&c, 5).exists());
        assert_eq!(std::fs::read_dir(&c.run_dir).unwrap().count(), 0);
    }

    #[test]
    fn a_stale_tree_of_the_same_job_id_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        let (uid, gid) = other_user();
        create(&c, 6, uid, gid, &[0]).unwrap();
        std::fs::write(gpu_dir(&c, 6, 0).join("log/old"), "x").unwrap();
        create(&c, 6, uid, gid, &[1]).unwrap();
        assert!(!gpu_dir(&c, 6, 0).exists());
        assert!(gpu_dir(&c, 6, 1).join("pipe").is_dir());
        assert_eq!(
            remove(&c, 6, Instant::now() + CLEANUP_TIME),
            Cleanup::default()
        );
    }

    /// Issue 35: as root, each job's directory is a tmpfs of its own, capped; what the
    /// job's user fills it with, or keeps open unlinked, never touches run_dir, and the
    /// epilog detaches it (killing the user's processes the kernel says use it).
    #[test]
    fn a_jobs_dir_is_its_own_capped_tmpfs_and_what_is_held_there_goes_with_it() {
        use std::os::unix::process::CommandExt;
        if crate::sys::euid() != 0 {
            return; // mounting is root's
        }
        let tmp = tempfile::tempdir().unwrap();
        let c = Config {
            job_dir_inodes: 200,
            job_dir_size_mib: 1,
            ..cfg(tmp.path())
        };
        // run_dir a tmpfs of its own too, so that its figures are the test's alone.
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
            }
        }
        std::fs::create_dir(&c.run_dir).unwrap();
        crate::sys::mount_tmpfs(&c.run_dir, "size=1m,nr_inodes=100,mode=0755").unwrap();
        let _run = Unmount(c.run_dir.clone());
        let _job = Unmount(job_dir(&c, 12));
        create(&c, 12, 65534, 65534, &[0, 1]).unwrap();
        let run_dev = std::fs::metadata(&c.run_dir).unwrap().dev();
        let job = std::fs::metadata(job_dir(&c, 12)).unwrap();
        assert_ne!(job.dev(), run_dev, "a file system of its own");
        assert_eq!((job.uid(), job.permissions().mode() & 0o7777), (0, 0o755));
        let run_used = || {
            let s = crate::jobfs::Space::of(std::fs::File::open(&c.run_dir).unwrap()).unwrap();
            s.total_inodes - s.free_inodes
        };
        let before = run_used();
        // The user fills the job's inodes with files it unlinks and keeps open (issue 35,
        // attack 2), from a shell outside the job whose working directory is elsewhere.
        let log = gpu_dir(&c, 12, 0).join("log");
        let script = format!(
            "cd {}; i=0; while [ $i -lt 400 ]; do i=$((i+1)); eval \"exec $((i+10))>f$i\" 2>/dev/null || break; rm -f f$i; done; cd /; echo $i; exec sleep 60",
            log.display()
        );
        let mut holder = std::process::Command::new("bash")
            .args(["-c", &script])
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let reached: u32 = line.trim().parse().unwrap();
        assert!(reached < 400, "stopped by the job's cap ({reached} files)");
        let job_space =
            crate::jobfs::Space::of(std::fs::File::open(job_dir(&c, 12)).unwrap()).unwrap();
        assert!(job_space.free_inodes < 2, "{job_space:?}");
        assert_eq!(run_used(), before, "run_dir gave nothing");
        assert_eq!(
            remove(&c, 12, Instant::now() + CLEANUP_TIME),
            Cleanup::default()
        );
        assert!(!job_dir(&c, 12).exists());
        assert!(
            holder.wait().is_ok(),
            "killed: it held unlinked files there"
        );
        assert_eq!(run_used(), before - 1, "only the job's directory, gone");
    }

    #[test]
    fn a_user_file_that_cannot_go_is_moved_aside_and_cleared_later() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        let me = crate::sys::euid();
        // A directory inside the leaf that belongs to someone else: the leaf's owner
        // cannot empty it (only testable as root, who can make such a thing). A tree of
        // plain directories (as before each job had a tmpfs of its own, or made where
        // none could be mounted): a job's own tmpfs is detached whatever is inside.
        if me != 0 {
            return;
        }
        std::fs::create_dir_all(gpu_dir(&c, 7, 0).join("pipe")).unwrap();
        let log = gpu_dir(&c, 7, 0).join("log");
        std::fs::create_dir_all(&log).unwrap();
        std::os::unix::fs::chown(&log, Some(65534), Some(65534)).unwrap();
        let foreign = log.join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("f"), "x").unwrap();
        // foreign/ is root's: nobody (the leaf's owner) cannot remove f from it.
        let done = remove(&c, 7, Instant::now() + CLEANUP_TIME);
        let moved = done.moved_aside.expect("moved aside");
        assert!(
            moved.starts_with(c.run_dir.join(LEFTOVERS)),
            "{}",
            moved.display()
        );
        assert!(done.problem.unwrap().contains("Permission denied"));
        assert!(!job_dir(&c, 7).exists(), "the job's name is free again");
        assert!(moved.join("gpu0/log/foreign/f").exists());
        let leftovers = std::fs::symlink_metadata(c.run_dir.join(LEFTOVERS)).unwrap();
        assert_eq!(leftovers.permissions().mode() & 0o777, 0o700);
        // Once the obstacle is gone, a later sweep removes it all.
        std::os::unix::fs::chown(moved.join("gpu0/log/foreign"), Some(65534), Some(65534)).unwrap();
        assert_eq!(super::leftovers(&c).unwrap(), vec![moved.clone()]);
        assert!(clear_leftovers(&c, Instant::now() + CLEANUP_TIME).is_empty());
        assert!(super::leftovers(&c).unwrap().is_empty());
        assert!(!c.run_dir.join(LEFTOVERS).exists());
    }

    /// Issue 23: a `setsid` writer of the job's user, its cwd in the job's log directory,
    /// keeps creating files after the job; it is killed and the tree removed (nothing
    /// moved aside for it to fill).
    #[test]
    fn a_writer_left_in_the_job_dir_is_killed_and_the_dir_removed() {
        use std::os::unix::process::CommandExt;
        if crate::sys::euid() != 0 {
            return; // another user's process: root's
        }
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        create(&c, 11, 65534, 65534, &[0]).unwrap();
        let log = gpu_dir(&c, 11, 0).join("log");
        let mut writer = std::process::Command::new("setsid")
            .args([
                "sh",
                "-c",
                "i=0; while :; do i=$((i+1)); mkdir d$i 2>/dev/null; true >d$i/f 2>/dev/null; done",
            ])
            .current_dir(&log)
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        // It is writing.
        while std::fs::read_dir(&log).unwrap().count() < 50 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let done = remove(&c, 11, Instant::now() + CLEANUP_TIME);
        assert_eq!(done, Cleanup::default(), "removed, not moved aside");
        assert!(!job_dir(&c, 11).exists());
        assert!(!c.run_dir.join(LEFTOVERS).exists());
        // Killed (it never stops by itself): give up after a minute rather than hang.
        let mut status = None;
        for _ in 0..6000 {
            status = writer.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if status.is_none() {
            let _ = writer.kill();
            panic!("the writer was not killed");
        }
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        for pid in pids {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            assert!(
                !cwd.starts_with(&c.run_dir),
                "process {pid} still in {} ({status:?})",
                cwd.display()
            );
        }
    }

    #[test]
    fn an_unsafe_run_dir_is_refused_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        std::fs::create_dir(&c.run_dir).unwrap();
        std::fs::set_permissions(&c.run_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = create(&c, 8, 0, 0, &[0]).unwrap_err().to_string();
        assert!(
            err.contains("writable by group or others (mode 0777)"),
            "{err}"
        );
        assert!(!job_dir(&c, 8).exists());
        std::fs::create_dir(job_dir(&c, 8)).unwrap();
        let done = remove(&c, 8, Instant::now() + CLEANUP_TIME);
        assert!(done.problem.unwrap().contains("not safe"));
        assert!(
            job_dir(&c, 8).exists(),
            "nothing is removed through an unsafe run_dir"
        );
    }
}
