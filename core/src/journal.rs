//! Per-job journals (`state_dir/jobs/<jobid>.json`) and per-GPU locks
//! (`state_dir/locks/<gpu-uuid>.lock`).
//!
//! A journal is written, atomically (temporary file, fsync, rename, fsync of the
//! directory), before colloc changes anything on a GPU, and again after each phase. It
//! records what the GPU looked like before and what colloc planned to make, so a restore
//! can undo a prolog that died at any point: it destroys exactly the planned instances
//! that exist and were not there before.
//!
//! Root acts on what a journal says, so journals are trusted only where only root can
//! have written them: `state_dir` and every directory above it must be root's and
//! writable by no one else (else nothing is read), and a journal is read only as a
//! regular file (never through a link, never a FIFO) named `<job id>.json`, owned by
//! root, at most [`JOURNAL_LIMIT`] bytes, whose `job` is that id and whose MPS paths lie
//! in that job's directory under `run_dir`. Anything else in `jobs/` is reported, and
//! `colloc restore --all` moves it to `state_dir/corrupt/`.

use std::fs::File;
use std::path::{Component, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::fs::{Dir, FsError};
use crate::gpu::{GpuHold, Instance, MigMode};
use crate::mig::PlannedInstance;
use crate::mps::{MpsDaemon, MpsStart};
use crate::statedir;

/// Journal format version.
pub const JOURNAL_VERSION: u32 = 1;
/// How long to wait for another colloc process to release a GPU lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest journal colloc reads.
pub const JOURNAL_LIMIT: u64 = 16 << 20;
pub use crate::statedir::CORRUPT_DIR;

/// Errors reading or writing journals and locks.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// I/O on a journal or lock file.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A journal that cannot be used: not parseable, from another version, misnamed, not
    /// a plain root-owned file, or naming paths outside its job's directory.
    #[error("journal {path} is unreadable: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Another process holds the GPU's lock for too long.
    #[error("GPU {uuid} is locked by another colloc process for over {secs} s")]
    LockTimeout {
        /// The GPU.
        uuid: String,
        /// How long we waited.
        secs: u64,
    },
    /// `state_dir` (or a directory in it) is not safe, or cannot be made or read.
    #[error(transparent)]
    Dir(#[from] FsError),
}

impl JournalError {
    /// Is `state_dir` itself unusable (not safe)? Then no journal can be trusted or written.
    pub fn is_unsafe_state_dir(&self) -> bool {
        matches!(
            self,
            JournalError::Dir(FsError::Unsafe { .. } | FsError::WrongType { .. })
        )
    }
}

/// How far a job's reconfiguration got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Changes may be under way; anything planned may exist.
    Applying,
    /// The layout is in place; `env` is what the tasks get.
    Applied,
    /// Nothing was changed; `refused` says why the job may not run.
    Refused,
    /// A restore is under way.
    Restoring,
}

/// What one GPU looked like before the job, and what colloc planned and made on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRecord {
    /// NVML index.
    pub index: u32,
    /// GPU UUID.
    pub uuid: String,
    /// GPU name.
    pub name: String,
    /// MIG mode before the job.
    pub mig_before: Option<MigMode>,
    /// colloc asked for a MIG mode change on this GPU (to undo at restore).
    #[serde(default)]
    pub mig_mode_changed: bool,
    /// GPU instance ids that existed before (never touched).
    #[serde(default)]
    pub preexisting: Vec<u32>,
    /// Instances colloc will make, written before it makes any.
    #[serde(default)]
    pub planned: Vec<PlannedInstance>,
    /// Instances made, as far as recorded (a crash can leave some unrecorded; `planned`
    /// covers those).
    #[serde(default)]
    pub created: Vec<Instance>,
}

/// A per-job journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub version: u32,
    /// Slurm job id.
    pub job: u32,
    /// The job's user and group.
    pub uid: u32,
    /// The job's group.
    pub gid: u32,
    /// The mode as asked (normalized).
    pub mode: String,
    /// How far it got.
    pub phase: Phase,
    /// Why the job may not run (phase `Refused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The job's GPUs.
    #[serde(default)]
    pub gpus: Vec<GpuRecord>,
    /// MPS daemons started for the job.
    #[serde(default)]
    pub mps: Vec<MpsDaemon>,
    /// The per-job directory under `run_dir` (MPS), removed at restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_dir: Option<PathBuf>,
    /// Environment for the job's tasks.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Seconds since the epoch when the journal was first written.
    pub created: u64,
    /// The kernel's boot id when it was written: a journal of an earlier boot describes
    /// instances and daemons that a reboot has removed (MIG mode survives, though).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The GPUs the job asked for (NVML indexes), also for a refused job.
    #[serde(default)]
    pub requested: Vec<u32>,
    /// Where the job's MPS daemons are started: by the prolog, or by the job's extern
    /// step inside its container.
    #[serde(default, skip_serializing_if = "MpsStart::is_prolog")]
    pub mps_start: MpsStart,
    /// The mount namespace (its inode number) the job's MPS daemons run in, once they
    /// run: the job's tasks must be in the same one to share its `/dev/shm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_mount_ns: Option<u64>,
    /// GPUs a restore left marked: what still holds the job's MIG instances there (see
    /// `reconfig::restore`). Empty for a journal whose restore has not given up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<GpuHold>,
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), if the kernel tells.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Journal {
    /// A new journal in phase `Applying`.
    pub fn new(job: u32, uid: u32, gid: u32, mode: String) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            job,
            uid,
            gid,
            mode,
            phase: Phase::Applying,
            refused: None,
            gpus: Vec::new(),
            mps: Vec::new(),
            job_dir: None,
            env: Vec::new(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            boot_id: boot_id(),
            requested: Vec::new(),
            mps_start: MpsStart::Prolog,
            mps_mount_ns: None,
            held: Vec::new(),
        }
    }

    /// Written before the last reboot (journals without a boot id count as current).
    pub fn from_earlier_boot(&self) -> bool {
        matches!((&self.boot_id, boot_id()), (Some(then), Some(now)) if *then != now)
    }

    /// The GPU indexes this journal covers.
    pub fn gpu_indexes(&self) -> Vec<u32> {
        self.gpus.iter().map(|g| g.index).collect()
    }

    /// Does this journal hold (or may it hold) changes on the GPU with this UUID?
    pub fn claims(&self, uuid: &str) -> bool {
        self.phase != Phase::Refused && self.gpus.iter().any(|g| g.uuid == uuid)
    }
}

/// The journal file of a job.
pub fn path(cfg: &Config, job: u32) -> PathBuf {
    cfg.jobs_dir().join(file_name(job))
}

/// A journal's file name: `<job id>.json`.
pub fn file_name(job: u32) -> String {
    format!("{job}.json")
}

/// The job id of a journal's file name: only the canonical `<digits>.json` (no sign, no
/// leading zero) counts.
pub fn job_of_file_name(name: &str) -> Option<u32> {
    let job: u32 = name.strip_suffix(".json")?.parse().ok()?;
    (file_name(job) == name).then_some(job)
}

/// A temporary file of [`write`] (`.<job>.json.tmp`), left by a crash: not a journal.
fn is_temporary(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(job_of_file_name)
        .is_some()
}

/// A root-only directory in `state_dir` (`jobs`, `locks`, `corrupt`).
fn sub_dir(cfg: &Config, name: &str, create: bool) -> Result<Option<Dir>, JournalError> {
    Ok(statedir::sub_dir(&cfg.state_dir, name, create)?)
}

fn jobs(cfg: &Config, create: bool) -> Result<Option<Dir>, JournalError> {
    sub_dir(cfg, "jobs", create)
}

/// Check `state_dir` (as far as it exists) and its `jobs` and `locks`: root's, writable
/// by no one else, and so is every directory above.
///
/// # Errors
/// [`JournalError::Dir`] naming the first directory that is not safe.
pub fn check_state_dir(cfg: &Config) -> Result<(), JournalError> {
    Ok(statedir::check(&cfg.state_dir)?)
}

/// Is there a file of root's at the job's journal path, looked at without trusting
/// `state_dir` (no link followed, nothing opened)? For an epilog that cannot use an unsafe
/// `state_dir`: the prolog then refused the job and wrote nothing, so only a journal of
/// root's from before the directory was opened up can stand for GPUs colloc changed. A
/// file someone else put there is theirs, not colloc's.
pub fn roots_file_present(cfg: &Config, job: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path(cfg, job))
        .is_ok_and(|m| m.is_file() && crate::fs::is_trusted_owner(m.uid()))
}

/// Write a journal atomically: temporary file, fsync, rename, fsync of the directory.
///
/// # Errors
/// [`JournalError`]: `state_dir` is not safe or I/O failed (`ENOSPC`, …).
pub fn write(cfg: &Config, j: &Journal) -> Result<(), JournalError> {
    let dir = jobs(cfg, true)?.ok_or_else(|| JournalError::Io {
        what: "cannot create",
        path: cfg.jobs_dir(),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    })?;
    let body = serde_json::to_vec_pretty(j).map_err(|e| JournalError::Io {
        what: "cannot serialize",
        path: path(cfg, j.job),
        source: std::io::Error::other(e),
    })?;
    dir.write_file(&file_name(j.job), &body)?;
    Ok(())
}

/// Read a job's journal; `None` if there is none.
///
/// # Errors
/// [`JournalError`] for an unsafe `state_dir`, I/O errors and unusable journals.
pub fn load(cfg: &Config, job: u32) -> Result<Option<Journal>, JournalError> {
    let Some(dir) = jobs(cfg, false)? else {
        return Ok(None);
    };
    load_in(cfg, &dir, &file_name(job), job)
}

fn load_in(cfg: &Config, dir: &Dir, name: &str, job: u32) -> Result<Option<Journal>, JournalError> {
    let path = dir.path().join(name);
    let corrupt = |message: String| JournalError::Corrupt {
        path: path.clone(),
        message,
    };
    let bytes = match dir.read_file(name, JOURNAL_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(
            e @ (FsError::Unsafe { .. } | FsError::WrongType { .. } | FsError::TooLarge { .. }),
        ) => return Err(corrupt(e.reason())),
        Err(e) => return Err(e.into()),
    };
    let j: Journal = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    validate(cfg, &j, job).map_err(corrupt)?;
    Ok(Some(j))
}

/// What a journal may say, given its file name and the node's `run_dir`.
fn validate(cfg: &Config, j: &Journal, job: u32) -> Result<(), String> {
    if j.job != job {
        return Err(format!(
            "it names job {} but is the file of job {job}",
            j.job
        ));
    }
    let dir = crate::rundir::job_dir(cfg, job);
    if let Some(d) = &j.job_dir {
        if *d != dir {
            return Err(format!(
                "its job_dir {} is not {}",
                d.display(),
                dir.display()
            ));
        }
    }
    for d in &j.mps {
        for p in [&d.pipe_dir, &d.log_dir] {
            let clean = p
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if !clean || !p.starts_with(&dir) {
                return Err(format!(
                    "its MPS directory {} is not inside {}",
                    p.display(),
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

/// Remove a job's journal (after a complete restore). Missing is fine.
///
/// # Errors
/// [`JournalError`].
pub fn remove(cfg: &Config, job: u32) -> Result<(), JournalError> {
    let Some(dir) = jobs(cfg, false)? else {
        return Ok(());
    };
    if dir.unlink(&file_name(job))? {
        let _ = dir.sync();
    }
    Ok(())
}

/// One entry of `state_dir/jobs`, as [`scan`] found it.
#[derive(Debug)]
pub struct Scanned {
    /// The file name.
    pub name: String,
    /// The journal, or why it cannot be used (misnamed, corrupt, not a plain file, …).
    pub journal: Result<Journal, JournalError>,
}

/// Every entry of `state_dir/jobs` but colloc's own temporary files, journals first in
/// job order, then the rest by name.
///
/// # Errors
/// [`JournalError`] when `state_dir` is not safe or cannot be read.
pub fn scan(cfg: &Config) -> Result<Vec<Scanned>, JournalError> {
    let Some(dir) = jobs(cfg, false)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(Option<u32>, Scanned)> = Vec::new();
    for (raw, _) in dir.entries()? {
        let name = raw.to_string_lossy().into_owned();
        if is_temporary(&name) {
            continue;
        }
        let journal = match (raw.to_str(), job_of_file_name(&name)) {
            (Some(_), Some(job)) => match load_in(cfg, &dir, &name, job) {
                Ok(Some(j)) => Ok(j),
                Ok(None) => continue, // removed meanwhile
                Err(e) => Err(e),
            },
            _ => Err(JournalError::Corrupt {
                path: dir.path().join(&name),
                message: "not a journal's name (journals are named <job id>.json)".into(),
            }),
        };
        out.push((job_of_file_name(&name), Scanned { name, journal }));
    }
    out.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.name.cmp(&b.1.name),
    });
    Ok(out.into_iter().map(|(_, s)| s).collect())
}

/// All journals, ordered by job id. Unusable ones (and anything else in `jobs/`) are
/// reported as errors in the list so a caller can show them rather than silently skip a
/// GPU that may be reconfigured.
///
/// # Errors
/// [`JournalError`] when `state_dir` is not safe or cannot be read.
pub fn list(cfg: &Config) -> Result<Vec<Result<Journal, JournalError>>, JournalError> {
    Ok(scan(cfg)?.into_iter().map(|s| s.journal).collect())
}

/// Move the entry `name` of `state_dir/jobs` to `state_dir/corrupt/` (as `name`, or
/// `name.N` when taken). Returns where it went.
///
/// # Errors
/// [`JournalError`].
pub fn quarantine(cfg: &Config, name: &str) -> Result<PathBuf, JournalError> {
    let missing = || JournalError::Io {
        what: "cannot find",
        path: cfg.jobs_dir().join(name),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    };
    let from = jobs(cfg, false)?.ok_or_else(missing)?;
    let to = sub_dir(cfg, CORRUPT_DIR, true)?.ok_or_else(missing)?;
    for n in 0..1000 {
        let target = if n == 0 {
            name.to_string()
        } else {
            format!("{name}.{n}")
        };
        match from.move_to(name, &to, &target) {
            Ok(()) => {
                let _ = from.sync();
                let _ = to.sync();
                return Ok(to.path().join(target));
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(JournalError::Io {
        what: "cannot move aside",
        path: cfg.jobs_dir().join(name),
        source: std::io::Error::from_raw_os_error(libc::EEXIST),
    })
}

/// The name of a GPU's lock file in `state_dir/locks`.
fn lock_file_name(uuid: &str) -> String {
    let safe: String = uuid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.lock")
}

/// Make `state_dir` with its `jobs`, `locks` and `corrupt` directories and the lock file
/// of each GPU in `uuids`, where missing (`colloc check-config --fix`, at install or
/// boot): then no prolog has to make anything before it can write a journal, and a full
/// file system refuses jobs instead of failing them part way. Returns what was made.
///
/// # Errors
/// [`JournalError`] when something cannot be made or is not safe.
pub fn prepare(cfg: &Config, uuids: &[String]) -> Result<Vec<PathBuf>, JournalError> {
    let mut made = Vec::new();
    if !cfg.state_dir.exists() {
        made.push(cfg.state_dir.clone());
    }
    for name in statedir::SUB_DIRS {
        if sub_dir(cfg, name, false)?.is_none() {
            sub_dir(cfg, name, true)?;
            made.push(cfg.state_dir.join(name));
        }
    }
    let locks = sub_dir(cfg, "locks", false)?.ok_or_else(|| JournalError::Io {
        what: "cannot open",
        path: cfg.locks_dir(),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    })?;
    for uuid in uuids {
        let name = lock_file_name(uuid);
        if locks.lstat(&name)?.is_none() {
            locks.open_or_create_file(&name)?;
            made.push(locks.path().join(name));
        }
    }
    Ok(made)
}

/// An exclusive lock on one GPU, held while colloc reads and changes it. Released on drop
/// (and by the kernel if the process dies).
#[derive(Debug)]
pub struct GpuLock {
    _file: File,
}

impl GpuLock {
    /// Take the lock of the GPU with this UUID, waiting up to [`LOCK_TIMEOUT`].
    ///
    /// # Errors
    /// [`JournalError`] on I/O errors or time-out.
    pub fn acquire(cfg: &Config, uuid: &str) -> Result<GpuLock, JournalError> {
        Self::acquire_within(cfg, uuid, LOCK_TIMEOUT)
    }

    /// As [`GpuLock::acquire`], with a chosen time-out.
    ///
    /// # Errors
    /// [`JournalError`] on I/O errors or time-out.
    pub fn acquire_within(
        cfg: &Config,
        uuid: &str,
        wait: Duration,
    ) -> Result<GpuLock, JournalError> {
        let dir = sub_dir(cfg, "locks", true)?.ok_or_else(|| JournalError::Io {
            what: "cannot create",
            path: cfg.locks_dir(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        })?;
        let name = lock_file_name(uuid);
        let p = dir.path().join(&name);
        let file = dir.open_or_create_file(&name)?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(GpuLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(JournalError::LockTimeout {
                        uuid: uuid.to_string(),
                        secs: wait.as_secs(),
                    })
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(JournalError::Io {
                        what: "cannot lock",
                        path: p,
                        source,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
