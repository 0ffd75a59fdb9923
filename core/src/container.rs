//! Entering a job's mount namespace and cgroup from its extern step, so that the job's
//! MPS daemons run where its tasks do (docs/slurm-callbacks.md).
//!
//! Under `job_container/tmpfs` Slurm keeps each job's mount namespace alive by
//! bind-mounting it on `BasePath[/<node>]/<job>/.ns` (the node's name is added where
//! Slurm was built with `--enable-multiple-slurmd`, as Debian's is). The extern step's
//! `task_post_fork` runs as root in slurmd's namespace, in the job's cgroups, after that
//! file exists and before the first task. A process forked there that `setns`es through
//! that file shares the tasks' `/tmp` and `/dev/shm`; one that also moves itself into
//! the extern step's freezer cgroup (cgroup v1, `…/job_<id>/step_extern`) is killed by
//! Slurm when the job ends, which then removes the job's cgroups as usual.
//!
//! Only root's directories are walked to the holder (`BasePath` and the per-job folder
//! are root's, mode 0700 for the latter), and only a namespace file (`nsfs`) is taken.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::fs::Dir;
use crate::slurmconf::SlurmFacts;

/// `statfs` type of namespace files (`NSFS_MAGIC`).
const NSFS_MAGIC: i64 = 0x6e73_6673;
/// The holder file in a job's folder under `BasePath`.
const HOLDER: &str = ".ns";

/// Where a process started for the job is put before it runs: the job's mount namespace
/// (through its holder file) and the extern step's freezer cgroup, each where there is
/// one. Both are descriptors opened here, used by the child before it execs.
#[derive(Debug)]
pub struct Entry {
    /// The job container's namespace holder, opened; `None`: stay in this namespace.
    pub ns: Option<OwnedFd>,
    /// The mount namespace the process will run in (its inode number).
    pub ns_id: u64,
    /// Where the holder is (for messages and logs).
    pub holder: Option<PathBuf>,
    /// `cgroup.procs` of the extern step's freezer cgroup, opened for writing; `None`
    /// where there is none (cgroup v2, `proctrack/linuxproc`).
    pub freezer_procs: Option<OwnedFd>,
}

impl Entry {
    /// The entry for job `job` from its extern step: its container's namespace where the
    /// node runs `job_container/tmpfs`, and the extern step's freezer cgroup.
    ///
    /// # Errors
    /// A one-line reason: the node has a job container but the job's holder cannot be
    /// found or trusted.
    pub fn for_extern_step(facts: &SlurmFacts, job: u32) -> Result<Entry, String> {
        let (ns, ns_id, holder) = if facts.tmpfs_container {
            let (fd, id, path) = find_holder(&facts.base_paths, job)?;
            (Some(fd), id, Some(path))
        } else {
            let id = own_mount_ns()
                .map_err(|e| format!("cannot read this process's mount namespace: {e}"))?;
            (None, id, None)
        };
        Ok(Entry {
            ns,
            ns_id,
            holder,
            freezer_procs: extern_step_freezer(),
        })
    }
}

/// The inode number of this process's mount namespace (the number in `mnt:[…]`).
///
/// # Errors
/// `/proc` cannot be read.
pub fn own_mount_ns() -> std::io::Result<u64> {
    std::fs::metadata("/proc/self/ns/mnt").map(|m| m.ino())
}

/// Find and open job `job`'s namespace holder under one of `bases`: `BASE/<job>/.ns` or
/// `BASE/<node>/<job>/.ns`, the one that is a namespace file here (another node's, on a
/// host with several slurmd, is a plain empty file in this namespace).
///
/// # Errors
/// None found, or `BasePath` is not root's alone.
pub fn find_holder(bases: &[PathBuf], job: u32) -> Result<(OwnedFd, u64, PathBuf), String> {
    if bases.is_empty() {
        return Err(
            "JobContainerType=job_container/tmpfs but no BasePath in job_container.conf"
                .to_string(),
        );
    }
    let job_name = job.to_string();
    let mut tried = Vec::new();
    for base in bases {
        let base_dir = match Dir::open_trusted(base) {
            Ok(d) => d,
            Err(e) => {
                tried.push(e.to_string());
                continue;
            }
        };
        let mut dirs = vec![(base_dir.open_dir(&job_name), base.join(&job_name))];
        for (name, t) in base_dir.entries().unwrap_or_default() {
            let Some(name) = name.to_str() else { continue };
            if t != rustix::fs::FileType::Directory || name == job_name {
                continue;
            }
            let node = match base_dir.open_dir(name) {
                Ok(Some(d)) if d.check_private().is_ok() => d,
                _ => continue,
            };
            dirs.push((node.open_dir(&job_name), base.join(name).join(&job_name)));
        }
        for (dir, path) in dirs {
            let dir = match dir {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(e) => {
                    tried.push(e.to_string());
                    continue;
                }
            };
            if let Err(e) = dir.check_private() {
                tried.push(e.to_string());
                continue;
            }
            if let Some(found) = open_holder(&dir, &path.join(HOLDER)) {
                return Ok(found);
            }
        }
    }
    Err(format!(
        "job {job}'s container namespace ({}/[<node>/]{job}/{HOLDER}) was not found{}",
        bases
            .iter()
            .map(|b| b.display().to_string())
            .collect::<Vec<_>>()
            .join(" or "),
        if tried.is_empty() {
            String::new()
        } else {
            format!(" ({})", tried.join("; "))
        }
    ))
}

/// Open `dir/.ns` if it is a namespace file (not following a link).
fn open_holder(dir: &Dir, path: &Path) -> Option<(OwnedFd, u64, PathBuf)> {
    let fd = rustix::fs::openat(
        dir.as_fd(),
        HOLDER,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let fs = rustix::fs::fstatfs(&fd).ok()?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    if i64::from(fs.f_type) != NSFS_MAGIC {
        return None;
    }
    let st = rustix::fs::fstat(&fd).ok()?;
    Some((fd, st.st_ino, path.to_path_buf()))
}

/// `cgroup.procs` of the extern step's freezer cgroup: `/sys/fs/cgroup/freezer<this
/// process's freezer cgroup>/step_extern/cgroup.procs`, opened for writing, where it
/// exists (cgroup v1 with `proctrack/cgroup`).
pub fn extern_step_freezer() -> Option<OwnedFd> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = freezer_path(&cgroups)?;
    let procs = Path::new("/sys/fs/cgroup/freezer")
        .join(own.trim_start_matches('/'))
        .join("step_extern/cgroup.procs");
    match rustix::fs::open(
        &procs,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Some(fd),
        Err(e) => {
            log::debug!("{}: {e}", procs.display());
            None
        }
    }
}

/// The freezer cgroup of a `/proc/PID/cgroup` text (cgroup v1: `N:freezer:/path`).
pub fn freezer_path(cgroups: &str) -> Option<String> {
    cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctls, path) = (f.next()?, f.next()?, f.next()?);
        ctls.split(',')
            .any(|c| c == "freezer")
            .then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freezer_lines() {
        let v1 =
            "12:memory:/slurm_n1/uid_0/job_5/step_extern\n7:freezer:/slurm_n1/uid_0/job_5\n0::/\n";
        assert_eq!(freezer_path(v1).as_deref(), Some("/slurm_n1/uid_0/job_5"));
        assert_eq!(freezer_path("0::/user.slice\n"), None);
    }

    #[test]
    fn a_holder_is_a_namespace_file_under_roots_base_path() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("jc");
        std::fs::create_dir_all(base.join("n1/42")).unwrap();
        // A plain file where the holder would be (another node's, seen from here): not
        // taken.
        std::fs::write(base.join("n1/42/.ns"), "").unwrap();
        let e = find_holder(std::slice::from_ref(&base), 42).unwrap_err();
        assert!(e.contains("was not found"), "{e}");
        assert!(find_holder(&[], 42).unwrap_err().contains("no BasePath"));
        // A real holder (a bind mount of a namespace) is what the real-Slurm tests use:
        // tests/slurm/tests/production.rs.
    }

    #[test]
    fn outside_a_container_the_entry_is_this_namespace() {
        let facts = SlurmFacts::default();
        let e = Entry::for_extern_step(&facts, 7).unwrap();
        assert!(e.ns.is_none() && e.holder.is_none());
        assert_eq!(e.ns_id, own_mount_ns().unwrap());
        let facts = SlurmFacts {
            tmpfs_container: true,
            base_paths: vec![PathBuf::from("/nonexistent/jc")],
            ..SlurmFacts::default()
        };
        let e = Entry::for_extern_step(&facts, 7).unwrap_err();
        assert!(e.contains("job 7's container namespace"), "{e}");
    }
}
