//! Per-job journals (`state_dir/jobs/<jobid>.json`) and per-GPU locks
//! (`state_dir/locks/<gpu-uuid>.lock`).
//!
//! A journal is written, atomically (temporary file, fsync, rename, fsync of the
//! directory), before colloc changes anything on a GPU, and again after each phase. It
//! records what the GPU looked like before and what colloc planned to make, so a restore
//! can undo a prolog that died at any point: it destroys exactly the planned instances
//! that exist and were not there before.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::gpu::{GpuHold, Instance, MigMode};
use crate::mig::PlannedInstance;
use crate::mps::MpsDaemon;

/// Journal format version.
pub const JOURNAL_VERSION: u32 = 1;
/// How long to wait for another colloc process to release a GPU lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(120);

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
    /// A journal that cannot be parsed (corrupt, or from another version).
    #[error("journal {path} is unreadable: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Parser message.
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
    cfg.jobs_dir().join(format!("{job}.json"))
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> JournalError + 'a {
    move |source| JournalError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Create `dir` (and parents) as a root-only directory.
fn private_dir(dir: &Path) -> Result<(), JournalError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("cannot create", dir))
}

/// Write a journal atomically: temporary file, fsync, rename, fsync of the directory.
///
/// # Errors
/// [`JournalError::Io`].
pub fn write(cfg: &Config, j: &Journal) -> Result<(), JournalError> {
    let dir = cfg.jobs_dir();
    private_dir(&dir)?;
    let target = path(cfg, j.job);
    let tmp = dir.join(format!(".{}.json.tmp", j.job));
    let body = serde_json::to_vec_pretty(j).expect("journal serializes");
    {
        let mut f = File::create(&tmp).map_err(io("cannot create", &tmp))?;
        f.write_all(&body).map_err(io("cannot write", &tmp))?;
        f.sync_all().map_err(io("cannot fsync", &tmp))?;
    }
    std::fs::rename(&tmp, &target).map_err(io("cannot rename into", &target))?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("cannot fsync", &dir))?;
    Ok(())
}

/// Read a job's journal; `None` if there is none.
///
/// # Errors
/// [`JournalError`] for I/O errors and unreadable journals.
pub fn load(cfg: &Config, job: u32) -> Result<Option<Journal>, JournalError> {
    load_path(&path(cfg, job))
}

fn load_path(p: &Path) -> Result<Option<Journal>, JournalError> {
    match std::fs::read(p) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| JournalError::Corrupt {
                path: p.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("cannot read", p)(e)),
    }
}

/// Remove a job's journal (after a complete restore). Missing is fine.
///
/// # Errors
/// [`JournalError::Io`].
pub fn remove(cfg: &Config, job: u32) -> Result<(), JournalError> {
    let p = path(cfg, job);
    match std::fs::remove_file(&p) {
        Ok(()) => {
            let _ = File::open(cfg.jobs_dir()).and_then(|d| d.sync_all());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("cannot remove", &p)(e)),
    }
}

/// All journals, ordered by job id. Unreadable ones are reported as errors in the list
/// so a caller can show them rather than silently skip a GPU that may be reconfigured.
///
/// # Errors
/// [`JournalError::Io`] when the directory cannot be read.
pub fn list(cfg: &Config) -> Result<Vec<Result<Journal, JournalError>>, JournalError> {
    let dir = cfg.jobs_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot read", &dir)(e)),
    };
    let mut out: Vec<(u32, Result<Journal, JournalError>)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(job) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match load_path(&e.path()) {
            Ok(Some(j)) => out.push((job, Ok(j))),
            Ok(None) => {}
            Err(err) => out.push((job, Err(err))),
        }
    }
    out.sort_by_key(|(job, _)| *job);
    Ok(out.into_iter().map(|(_, j)| j).collect())
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
        let dir = cfg.locks_dir();
        private_dir(&dir)?;
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
        let p = dir.join(format!("{safe}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(io("cannot open", &p))?;
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
                Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock", &p)(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> Config {
        Config {
            state_dir: dir.to_path_buf(),
            ..Config::default()
        }
    }

    #[test]
    fn write_load_list_remove() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        assert!(load(&c, 7).unwrap().is_none());
        assert!(list(&c).unwrap().is_empty());
        let mut j = Journal::new(7, 1000, 1000, "mig:3g".into());
        j.gpus.push(GpuRecord {
            index: 0,
            uuid: "GPU-a".into(),
            name: "NVIDIA A100-SXM4-40GB".into(),
            mig_before: Some(MigMode {
                current: true,
                pending: true,
            }),
            mig_mode_changed: false,
            preexisting: vec![],
            planned: vec![],
            created: vec![],
        });
        write(&c, &j).unwrap();
        write(&c, &Journal::new(3, 0, 0, "mps".into())).unwrap();
        assert_eq!(load(&c, 7).unwrap().unwrap(), j);
        let all: Vec<u32> = list(&c)
            .unwrap()
            .into_iter()
            .map(|j| j.unwrap().job)
            .collect();
        assert_eq!(all, vec![3, 7]);
        assert!(j.claims("GPU-a"));
        assert!(!j.claims("GPU-b"));
        // No temporary files left behind; the directory is private.
        let names: Vec<_> = std::fs::read_dir(c.jobs_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(c.jobs_dir())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        remove(&c, 7).unwrap();
        remove(&c, 7).unwrap();
        assert!(load(&c, 7).unwrap().is_none());
    }

    #[test]
    fn corrupt_journal_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        std::fs::create_dir_all(c.jobs_dir()).unwrap();
        std::fs::write(path(&c, 9), b"{not json").unwrap();
        let err = load(&c, 9).unwrap_err().to_string();
        assert!(err.contains("9.json is unreadable"), "{err}");
        assert!(list(&c).unwrap()[0].is_err());
    }

    #[test]
    fn lock_is_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        let held = GpuLock::acquire(&c, "GPU-1/../x").unwrap();
        let err = GpuLock::acquire_within(&c, "GPU-1/../x", Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, JournalError::LockTimeout { .. }), "{err}");
        drop(held);
        GpuLock::acquire_within(&c, "GPU-1/../x", Duration::from_millis(50)).unwrap();
        // The UUID cannot escape the locks directory.
        assert!(c.locks_dir().join("GPU-1____x.lock").exists());
    }
}
