//! The files of a report directory, and the one place their names are spelled
//! ([`ReportDir`]): the event log (appended, one line per event), the report files
//! (replaced atomically: a temporary file of an unpredictable name, fsync, `renameat`,
//! fsync of the directory, so a reader always sees a whole file and a failed write leaves
//! the previous one), charts, logs, the lock a running pack holds, and `colloc bench`'s
//! files. Every file is opened relative to the directory's checked handle
//! ([`crate::userfs::CheckedDir`]), never through a path.
//!
//! Reading a record streams it: each event file is read once to index its lines (time,
//! offset), the index is sorted, and the events are parsed again one at a time in that
//! order into a [`Fold`], so memory stays near the index's 32 bytes a line, not the
//! events'. Every event is validated before it reaches the fold. The reading
//! is in [`read`], the checks in [`validate`].

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::events::Event;
use super::fold::Fold;
use crate::userfs::{CheckedDir, UserFsError};

mod read;
#[cfg(test)]
mod tests;
mod validate;

pub use read::read_events;

/// `colloc run`'s report.
pub const REPORT_JSON: &str = "colloc-report.json";
/// `colloc run`'s CSV, one row per run.
pub const REPORT_CSV: &str = "colloc-runs.csv";
/// The slot timeline chart.
pub const TIMELINE_PNG: &str = "colloc-timeline.png";
/// The per-run throughput chart.
pub const RUNS_PNG: &str = "colloc-runs.png";
/// Throughput over time.
pub const THROUGHPUT_PNG: &str = "colloc-throughput.png";
/// Folder of event files in a report directory.
pub const EVENTS_DIR: &str = "events";
/// The lock a running pack holds.
pub const LOCK_FILE: &str = ".colloc.lock";
/// Folder of the runs' logs (`logs/NAME.log`, `logs/NAME.K.log` for earlier attempts).
pub const LOGS_DIR: &str = "logs";
/// Folder of the solo calibrations' logs, inside [`LOGS_DIR`].
pub const SOLO_LOGS_DIR: &str = "solo";
/// `colloc bench`'s report.
pub const BENCH_JSON: &str = "bench.json";
/// `colloc bench`'s summary CSV.
pub const BENCH_CSV: &str = "bench.csv";
/// `colloc bench`'s per-measurement CSV.
pub const BENCH_MEASUREMENTS_CSV: &str = "bench-measurements.csv";
/// `colloc bench`'s chart.
pub const BENCH_PNG: &str = "bench.png";
/// `colloc bench`'s page: all of the above in one self-contained HTML file.
pub const BENCH_HTML: &str = "bench.html";
/// Every file `colloc bench` writes at the top of its directory.
pub const BENCH_FILES: [&str; 5] = [
    BENCH_JSON,
    BENCH_CSV,
    BENCH_MEASUREMENTS_CSV,
    BENCH_PNG,
    BENCH_HTML,
];

/// Largest event file read (a guard against a wrong directory, not a limit of packs).
pub const MAX_EVENT_FILE: u64 = 4 << 30;
/// Longest event line read; a longer one is skipped as unreadable.
pub const MAX_EVENT_LINE: usize = 256 << 20;
/// Most event files a record may have (one per session and writer).
pub const MAX_EVENT_FILES: usize = 4096;
/// Most bytes of events a record may hold in all.
pub const MAX_RECORD_BYTES: u64 = 4 << 30;
/// Most event lines a record may hold in all (its index takes 32 bytes a line).
pub const MAX_EVENT_LINES: usize = 16 << 20;
/// Most distinct runs a record may name, and so the most runs one manifest may expand to
/// (`run::manifest` uses this; a typo in a grid should not start a million).
pub const MAX_RUNS: usize = 100_000;
/// Most slots a session may declare.
pub const MAX_SLOTS: usize = 1 << 16;
/// Most sessions (and session ends) a record may hold: colloc writes one session event
/// per session, each in event files of its own, so never more than [`MAX_EVENT_FILES`].
pub const MAX_SESSIONS: usize = MAX_EVENT_FILES;
/// Most distinct grid keys and metric names a record may hold together: each is a
/// column of the CSV, every run a row (100,000 runs each with a grid key of its own made
/// a CSV of 10^10 cells).
pub const MAX_COLUMNS: usize = 1024;
/// Most attempts (start events) a record may hold in all: each costs the fold and the
/// report about a kilobyte, so 16 Mi forged ones would take some 20 GB.
pub const MAX_ATTEMPTS: usize = 1 << 20;
/// Latest time an event may carry (Unix seconds, year 5138): larger is not a time colloc
/// wrote.
pub const MAX_TS: f64 = 1e11;
/// Largest throughput or metric value read back.
pub const MAX_VALUE: f64 = 1e18;

/// The event file of a session and writer: `<session>.<writer>.jsonl` in [`EVENTS_DIR`].
pub fn event_file_name(session: u32, writer: &str) -> String {
    format!("{session}.{writer}.jsonl")
}

/// A report directory (of `colloc run` or `colloc bench`), opened once and checked.
#[derive(Debug)]
pub struct ReportDir {
    dir: CheckedDir,
}

impl ReportDir {
    /// Open `path` to write into it: made when missing (mode 0700: a run's environment,
    /// recorded in it, may hold tokens), else used only when it is the caller's and
    /// writable by no one else. Also whether it was made here.
    ///
    /// # Errors
    /// [`UserFsError`]: someone else's, a link, or I/O.
    pub fn create(path: &Path) -> Result<(ReportDir, bool), UserFsError> {
        let (dir, made) = CheckedDir::create_or_adopt(path, 0o700)?;
        Ok((ReportDir { dir }, made))
    }

    /// Open an existing report directory to read it.
    ///
    /// # Errors
    /// [`UserFsError`]: missing, not a directory.
    pub fn open_read(path: &Path) -> Result<ReportDir, UserFsError> {
        Ok(ReportDir {
            dir: CheckedDir::open_read(path)?,
        })
    }

    /// This directory, checked for writing; or why the caller may not write it.
    ///
    /// # Errors
    /// [`UserFsError::NotYours`].
    pub fn into_writable(self) -> Result<ReportDir, UserFsError> {
        Ok(ReportDir {
            dir: self.dir.into_writable()?,
        })
    }

    /// Why the caller may not write here (`None`: it may).
    pub fn why_not_writable(&self) -> Option<String> {
        self.dir.why_not_writable()
    }

    /// The path it was opened as.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `DIR/name`, for messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.dir.shown(name)
    }

    /// The handle.
    pub fn dir(&self) -> &CheckedDir {
        &self.dir
    }

    /// Is there an entry `name`?
    pub fn has(&self, name: &str) -> bool {
        matches!(self.dir.lstat(name), Ok(Some(_)))
    }

    /// Does it hold an event log folder?
    pub fn has_events(&self) -> bool {
        matches!(self.dir.lstat(EVENTS_DIR), Ok(Some(st))
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory)
    }

    /// Replace the file `name` atomically.
    ///
    /// # Errors
    /// Not writable, or I/O.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), UserFsError> {
        self.dir.write_atomic(name, bytes)
    }

    /// [`ReportDir::write`] of what `fill` writes, as it writes it.
    ///
    /// # Errors
    /// As [`ReportDir::write`].
    pub fn write_with(
        &self,
        name: &str,
        fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), UserFsError> {
        self.dir.write_atomic_with(name, fill)
    }

    /// The runs' log folder (made when writable), or the solo calibrations' inside it.
    ///
    /// # Errors
    /// A link or someone else's directory in its place, or I/O.
    pub fn logs(&self, solo: bool) -> Result<CheckedDir, UserFsError> {
        let missing = || UserFsError::Io {
            what: "open",
            path: self.shown(LOGS_DIR),
            source: io::ErrorKind::NotFound.into(),
        };
        let logs = self
            .dir
            .subdir(LOGS_DIR, Some(0o700))?
            .ok_or_else(missing)?;
        if !solo {
            return Ok(logs);
        }
        logs.subdir(SOLO_LOGS_DIR, Some(0o700))?.ok_or_else(missing)
    }

    /// Anything but colloc's own empty scaffolding (the lock, empty `logs/` and `events/`
    /// left by a colloc run that stopped before its first run)?
    pub fn non_empty(&self) -> bool {
        let Ok(entries) = self.dir.entries() else {
            return true;
        };
        entries.iter().any(|(name, _)| match name.as_str() {
            LOCK_FILE => false,
            LOGS_DIR | EVENTS_DIR => match self.dir.subdir(name, None) {
                Ok(Some(d)) => d.entries().map_or(true, |e| !e.is_empty()),
                _ => true,
            },
            _ => true,
        })
    }

    /// Open (create) this writer's event file for appending.
    ///
    /// # Errors
    /// The folder or file cannot be made, or is a link or someone else's.
    pub fn event_log(&self, session: u32, writer: &str) -> Result<EventLog, UserFsError> {
        let name = event_file_name(session, writer);
        let events = self
            .dir
            .subdir(EVENTS_DIR, Some(0o700))?
            .ok_or_else(|| UserFsError::Io {
                what: "open",
                path: self.shown(EVENTS_DIR),
                source: io::ErrorKind::NotFound.into(),
            })?;
        let file = events.append(&name)?;
        Ok(EventLog {
            file: Some(file),
            path: events.shown(&name),
            broken: false,
            error: None,
        })
    }

    /// Fold the record (every event, in session order and within a session in time
    /// order), and how many lines could not be read (cut by a full disk or a kill).
    /// `None` when there is no `events/` folder.
    ///
    /// # Errors
    /// [`RecordError`]: an event file that is not one colloc wrote (a link, a FIFO,
    /// another user's, too large), an event whose values colloc never writes, or I/O.
    pub fn fold(&self) -> Result<Option<(Fold, usize)>, RecordError> {
        let Some(events) = self.dir.subdir(EVENTS_DIR, None)? else {
            return Ok(None);
        };
        let mut fold = Fold::new();
        let bad = read_events(&events, |e| {
            fold.apply(e);
            Ok(())
        })?;
        Ok(Some((fold, bad)))
    }

    /// Take the lock a running pack holds; `Ok(None)` when another process holds it.
    ///
    /// # Errors
    /// The lock file cannot be opened (or is a link, a FIFO, someone else's).
    pub fn lock(&self) -> Result<Option<DirLock>, UserFsError> {
        let Some(file) = self.dir.lock_file(LOCK_FILE)? else {
            return Err(UserFsError::Io {
                what: "open",
                path: self.shown(LOCK_FILE),
                source: io::ErrorKind::NotFound.into(),
            });
        };
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(DirLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => {
                log::debug!("no lock on {}: {e}", self.path().display());
                Ok(Some(DirLock { _file: file }))
            }
        }
    }

    /// Is a pack running here?
    ///
    /// # Errors
    /// The lock file is a link, a FIFO or not a regular file.
    pub fn lock_state(&self) -> Result<LockState, UserFsError> {
        let Some(file) = self.dir.lock_file(LOCK_FILE)? else {
            return Ok(LockState::Free);
        };
        Ok(
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
                Ok(()) => LockState::Free,
                Err(rustix::io::Errno::WOULDBLOCK) => LockState::Held,
                Err(_) => LockState::Unknown,
            },
        )
    }
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A file or folder of the record is not one colloc wrote, or cannot be read.
    #[error(transparent)]
    File(#[from] UserFsError),
    /// An event with a value colloc never writes (a forged or corrupted record).
    #[error("{path}, line {line}: {why}; refused (not a record colloc wrote)")]
    Invalid {
        /// The event file.
        path: PathBuf,
        /// Its line (1-based).
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// More than colloc reads.
    #[error("{path}: {why}, more than colloc reads; refused (not a record colloc wrote?)")]
    TooLarge {
        /// The events folder.
        path: PathBuf,
        /// How large.
        why: String,
    },
    /// No event file at all.
    #[error("no event files in {0}")]
    Empty(PathBuf),
}

impl RecordError {
    /// As an `anyhow::Error`: exit 2 unless the system failed.
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            RecordError::File(e) => e.into_anyhow(),
            e => crate::bad_input(e.to_string()),
        }
    }
}

/// Appends events to one file, one line each, written with one call and flushed to the
/// kernel (not fsynced: a kill of colloc loses nothing, a crash of the machine may lose
/// the last lines). A failed write is reported once; after it, the next line starts on a
/// fresh line so a cut one stays a single bad line.
#[derive(Debug)]
pub struct EventLog {
    file: Option<File>,
    path: PathBuf,
    broken: bool,
    /// The first write error, if any.
    pub error: Option<String>,
}

impl EventLog {
    /// Append one event.
    pub fn append(&mut self, ev: &Event) {
        let Some(f) = self.file.as_mut() else { return };
        let mut line = match serde_json::to_vec(ev) {
            Ok(l) => l,
            Err(e) => {
                log::debug!("cannot encode an event: {e}");
                return;
            }
        };
        line.push(b'\n');
        if self.broken {
            line.insert(0, b'\n');
        }
        match f.write_all(&line) {
            Ok(()) => self.broken = false,
            Err(e) => {
                self.broken = true;
                if self.error.is_none() {
                    log::warn!(
                        "cannot append to the event log {}: {e}; the report may miss what follows",
                        self.path.display()
                    );
                    self.error = Some(format!("{}: {e}", self.path.display()));
                }
            }
        }
    }
}

/// The lock a running pack holds on its report directory, so two packs never write one
/// record and `colloc report` knows whether its pack still runs.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Whether a report directory's pack is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    /// Nobody holds the lock.
    Free,
    /// A pack holds it.
    Held,
    /// Locks do not work here (some network filesystems); nobody knows.
    Unknown,
}
