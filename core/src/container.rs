//! Entering a job's mount namespace and cgroup from its extern step, so that the job's
//! MPS daemons run where its tasks do (docs/slurm-callbacks.md).
//!
//! Under `job_container/tmpfs` Slurm keeps each job's mount namespace alive by
//! bind-mounting it on `BasePath[/<node>]/<job>/.ns` (the node's name is added where
//! Slurm was built with `--enable-multiple-slurmd`, as Debian's is). The extern step's
//! `task_post_fork` runs as root in slurmd's namespace, in the job's cgroups, after that
//! file exists and before the first task. A process forked there that `setns`es through
//! that file shares the tasks' `/tmp` and `/dev/shm`; one that also moves itself into
//! the extern step's cgroup is killed by Slurm when the job ends, which then removes the
//! job's cgroups as usual. Which cgroup that is depends on the node's hierarchy, found at
//! run time from the filesystem at `/sys/fs/cgroup` (as Slurm's own autodetection does):
//! - cgroup v1 (`cgroup/v1`): the freezer cgroup `…/job_<id>/step_extern`; slurmstepd
//!   itself sits in `…/job_<id>` there.
//! - cgroup v2 (`cgroup/v2`, the unified hierarchy): slurmstepd sits in
//!   `…/job_<id>/step_extern/slurm`, and the extern step's processes (its `sleep`, and
//!   those `pam_slurm_adopt` adopts) in `…/job_<id>/step_extern/user/task_special`, the
//!   leaf that Slurm kills with the step (measured on Slurm 24.11: a process moved into
//!   `step_extern` itself outlives the job). Device access there is Slurm's eBPF program
//!   on the job's and step's cgroups: it denies the GRES files the job was not given and
//!   allows every other device, the MIG `nvidia-caps` files included, as v1's devices
//!   controller does (docs/admin.md, "cgroup v2").
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
/// (through its holder file) and the extern step's cgroup, each where there is one. Both
/// are descriptors opened here, used by the child before it execs.
#[derive(Debug)]
pub struct Entry {
    /// The job container's namespace holder, opened; `None`: stay in this namespace.
    pub ns: Option<OwnedFd>,
    /// The mount namespace the process will run in (its inode number).
    pub ns_id: u64,
    /// Where the holder is (for messages and logs).
    pub holder: Option<PathBuf>,
    /// `cgroup.procs` of the extern step's cgroup that Slurm kills with the step
    /// ([`extern_step_procs`]), opened for writing; `None` where there is none
    /// (`proctrack/linuxproc`, no extern step cgroup found).
    pub step_procs: Option<OwnedFd>,
}

impl Entry {
    /// The entry for job `job` from its extern step: its container's namespace where the
    /// node runs `job_container/tmpfs`, and the extern step's cgroup.
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
            step_procs: extern_step_procs(),
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

/// Where cgroup hierarchies are mounted (Slurm's default `CgroupMountpoint`).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// `statfs` type of a cgroup2 filesystem (`CGROUP2_SUPER_MAGIC`).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The cgroup hierarchy a node runs, as Slurm's `CgroupPlugin=autodetect` tells them
/// apart: cgroup2 mounted at the cgroup root is v2, anything else (a tmpfs with one
/// hierarchy per controller under it) is v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    /// `cgroup/v1`: one hierarchy per controller, `/sys/fs/cgroup/<controller>/…`.
    V1,
    /// `cgroup/v2`: the unified hierarchy mounted at `/sys/fs/cgroup`.
    V2,
}

impl Hierarchy {
    /// The hierarchy mounted at `root`; `None` where `root` cannot be read.
    pub fn at(root: &Path) -> Option<Hierarchy> {
        let fs = rustix::fs::statfs(root).ok()?;
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let v2 = i64::from(fs.f_type) == CGROUP2_SUPER_MAGIC;
        Some(if v2 { Hierarchy::V2 } else { Hierarchy::V1 })
    }
}

/// `cgroup.procs` of the extern step's cgroup that Slurm kills with the step, opened for
/// writing, where it exists (`proctrack/cgroup`): found from this process's own cgroup
/// (the extern slurmstepd's) under [`CGROUP_ROOT`], as [`extern_step_cgroup`] says.
pub fn extern_step_procs() -> Option<OwnedFd> {
    let root = Path::new(CGROUP_ROOT);
    let hierarchy = Hierarchy::at(root)?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    open_step_procs(root, hierarchy, &cgroups)
}

/// Open `cgroup.procs` of the extern step's cgroup under `root` for writing, for a
/// process whose `/proc/PID/cgroup` text is `cgroups`.
pub fn open_step_procs(root: &Path, hierarchy: Hierarchy, cgroups: &str) -> Option<OwnedFd> {
    let procs = root
        .join(extern_step_cgroup(hierarchy, cgroups)?)
        .join("cgroup.procs");
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

/// The extern step's cgroup that Slurm kills with the step, relative to the cgroup root,
/// for the extern slurmstepd whose `/proc/PID/cgroup` text is `cgroups`:
/// - v1: `freezer/<its freezer cgroup>/step_extern` (it sits at the job's level);
/// - v2: `<its cgroup's parent>/user/task_special`, where its cgroup is
///   `…/job_<id>/step_extern/slurm`.
///
/// `None` where the text has no such cgroup (another layout, `proctrack/linuxproc`).
pub fn extern_step_cgroup(hierarchy: Hierarchy, cgroups: &str) -> Option<PathBuf> {
    match hierarchy {
        Hierarchy::V1 => {
            let own = freezer_path(cgroups)?;
            Some(
                Path::new("freezer")
                    .join(own.trim_start_matches('/'))
                    .join("step_extern"),
            )
        }
        Hierarchy::V2 => {
            let own = unified_path(cgroups)?;
            let step = own.strip_suffix("/slurm")?;
            let job = step.strip_suffix("/step_extern")?;
            let leaf = job.rsplit('/').next()?;
            leaf.strip_prefix("job_")?.parse::<u32>().ok()?;
            Some(
                Path::new(step.trim_start_matches('/'))
                    .join("user")
                    .join("task_special"),
            )
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

/// The unified (v2) cgroup of a `/proc/PID/cgroup` text: its `0::/path` line.
pub fn unified_path(cgroups: &str) -> Option<String> {
    cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded Slurm 24.11 `cgroup/v2` tree (core/tests/fixtures/cgroup-v2-slurm-24.11).
    fn recorded_v2() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cgroup-v2-slurm-24.11")
    }

    fn recorded_proc(name: &str) -> String {
        std::fs::read_to_string(recorded_v2().join("proc").join(name)).unwrap()
    }

    /// A copy of the recorded tree to write into.
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_tree(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    #[test]
    fn under_cgroup_v2_the_extern_steps_processes_go_to_its_task_special_leaf() {
        let stepd = recorded_proc("extern-slurmstepd");
        assert_eq!(
            unified_path(&stepd).as_deref(),
            Some("/system.slice/vm_slurmstepd.scope/job_5/step_extern/slurm")
        );
        let want =
            Path::new("system.slice/vm_slurmstepd.scope/job_5/step_extern/user/task_special");
        assert_eq!(
            extern_step_cgroup(Hierarchy::V2, &stepd).as_deref(),
            Some(want)
        );
        // Where Slurm put the extern step's own `sleep`: the same leaf.
        assert_eq!(
            unified_path(&recorded_proc("extern-sleep")).map(PathBuf::from),
            Some(Path::new("/").join(want))
        );
        // On a node with the unified hierarchy alone the file has only that line.
        let only = stepd
            .lines()
            .filter(|l| l.starts_with("0::"))
            .collect::<String>();
        assert_eq!(
            extern_step_cgroup(Hierarchy::V2, &only).as_deref(),
            Some(want)
        );
        // The v1 reading of the same text finds no freezer cgroup below the root's.
        assert_eq!(
            extern_step_cgroup(Hierarchy::V1, &stepd),
            Some(PathBuf::from("freezer/step_extern"))
        );
    }

    #[test]
    fn under_cgroup_v2_only_an_extern_slurmstepd_has_a_step_cgroup() {
        // Not the batch step's slurmstepd, not a task, not slurmd: colloc starts daemons
        // only from the extern step, and a layout it does not know is left alone.
        for name in ["batch-slurmstepd", "batch-task", "extern-sleep", "slurmd"] {
            assert_eq!(
                extern_step_cgroup(Hierarchy::V2, &recorded_proc(name)),
                None,
                "{name}"
            );
        }
        for text in [
            "0::/\n",
            "0::/job_x/step_extern/slurm\n",
            "0::/a/step_extern/slurm\n",
            "0::/job_5/step_batch/slurm\n",
            "0::relative/job_5/step_extern/slurm\n",
            "7:freezer:/slurm_n1/uid_0/job_5\n",
        ] {
            assert_eq!(extern_step_cgroup(Hierarchy::V2, text), None, "{text}");
        }
        assert_eq!(
            extern_step_cgroup(Hierarchy::V2, "0::/job_7/step_extern/slurm\n").as_deref(),
            Some(Path::new("job_7/step_extern/user/task_special"))
        );
    }

    #[test]
    fn the_step_cgroup_is_opened_in_the_recorded_v2_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        copy_tree(&recorded_v2().join("tree"), &root);
        let fd = open_step_procs(&root, Hierarchy::V2, &recorded_proc("extern-slurmstepd"))
            .expect("task_special's cgroup.procs");
        rustix::io::write(&fd, b"0\n").unwrap();
        let leaf =
            root.join("system.slice/vm_slurmstepd.scope/job_5/step_extern/user/task_special");
        assert_eq!(
            std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap(),
            "0\n"
        );
        // Without the leaf (the job ended, another layout) there is nothing to open.
        std::fs::remove_file(leaf.join("cgroup.procs")).unwrap();
        assert!(
            open_step_procs(&root, Hierarchy::V2, &recorded_proc("extern-slurmstepd")).is_none()
        );
        // A tree that is not cgroup2 is v1 (this tempdir's filesystem).
        assert_eq!(Hierarchy::at(tmp.path()), Some(Hierarchy::V1));
        assert_eq!(Hierarchy::at(&tmp.path().join("missing")), None);
    }

    #[test]
    fn the_v1_step_cgroup_is_below_the_freezer_cgroup_of_the_job() {
        let v1 =
            "12:memory:/slurm_n1/uid_0/job_5/step_extern\n7:freezer:/slurm_n1/uid_0/job_5\n0::/\n";
        assert_eq!(
            extern_step_cgroup(Hierarchy::V1, v1).as_deref(),
            Some(Path::new("freezer/slurm_n1/uid_0/job_5/step_extern"))
        );
        assert_eq!(extern_step_cgroup(Hierarchy::V1, "0::/user.slice\n"), None);
        assert_eq!(unified_path(v1).as_deref(), Some("/"));
    }

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
