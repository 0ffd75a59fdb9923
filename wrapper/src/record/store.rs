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
//! events'. Every event is validated before it reaches the fold ([`validate`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use super::events::{Event, Progress};
use super::fold::Fold;
use crate::userfs::{CheckedDir, UserFsError};
use rustix::fs::Stat;

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
/// Every file `colloc bench` writes at the top of its directory.
pub const BENCH_FILES: [&str; 4] = [BENCH_JSON, BENCH_CSV, BENCH_MEASUREMENTS_CSV, BENCH_PNG];

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
/// Most distinct runs a record may name (a manifest's most).
pub const MAX_RUNS: usize = crate::run::manifest::MAX_RUNS;
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

/// The event files of an `events/` folder, in session order: (session, name).
fn event_files(events: &CheckedDir) -> Result<Vec<(u32, String)>, RecordError> {
    let mut files: Vec<(u32, String)> = Vec::new();
    for (name, _) in events.entries()? {
        let Some(stem) = name.strip_suffix(".jsonl") else {
            continue;
        };
        let Some((session, _writer)) = stem.split_once('.') else {
            continue;
        };
        let Ok(session) = session.parse::<u32>() else {
            continue;
        };
        files.push((session, name));
    }
    if files.len() > MAX_EVENT_FILES {
        return Err(RecordError::Invalid {
            path: events.path().to_path_buf(),
            line: 0,
            why: format!(
                "{} event files, more than the {MAX_EVENT_FILES} colloc reads",
                files.len()
            ),
        });
    }
    files.sort();
    Ok(files)
}

/// An event file checked once (then closed, so a record of thousands of files never
/// holds them all open): what it was, and the size it had then. Every later read opens
/// it again, checks it is the same file, and reads no further than that size, so a
/// writer appending meanwhile (a pack still running, or someone feeding it forever)
/// cannot make a read run on.
struct EventFile {
    session: u32,
    name: String,
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
}

/// Open the event file `name` and check it: a regular file of the directory's owner,
/// with one link (another name for it could be someone else's file), not a link.
fn open_event_file(events: &CheckedDir, name: &str) -> Result<Option<(File, Stat)>, RecordError> {
    let Some((file, _)) = events.open_file(name, MAX_EVENT_FILE)? else {
        return Ok(None);
    };
    let path = events.shown(name);
    let st = rustix::fs::fstat(&file).map_err(|e| {
        RecordError::File(UserFsError::Io {
            what: "inspect",
            path: path.clone(),
            source: e.into(),
        })
    })?;
    if st.st_nlink != 1 {
        return Err(RecordError::File(UserFsError::WrongType {
            path,
            what: format!("a file with {} hard links", st.st_nlink),
            expected: "an event file with one link (copy a record with `cp -a`, not `cp -al`)",
        }));
    }
    Ok(Some((file, st)))
}

/// Check every event file, one open at a time, and the record's total size.
fn check_event_files(events: &CheckedDir) -> Result<Vec<EventFile>, RecordError> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for (session, name) in event_files(events)? {
        let Some((_, st)) = open_event_file(events, &name)? else {
            continue;
        };
        total += st.st_size as u64;
        if total > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge {
                path: events.path().to_path_buf(),
                why: format!(
                    "its event files hold more than {} together",
                    crate::userfs::show_size(MAX_RECORD_BYTES)
                ),
            });
        }
        out.push(EventFile {
            session,
            path: events.shown(&name),
            name,
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
        });
    }
    Ok(out)
}

impl EventFile {
    fn io_error(&self, what: &'static str, source: io::Error) -> RecordError {
        RecordError::File(UserFsError::Io {
            what,
            path: self.path.clone(),
            source,
        })
    }

    /// Open it again: the same file (not one put in its place since), no shorter than
    /// when it was checked; read only up to that size.
    fn reopen(&self, events: &CheckedDir) -> Result<io::Take<File>, RecordError> {
        let changed = || {
            self.io_error(
                "read",
                io::Error::other("replaced or cut while it was read; read the record again"),
            )
        };
        let Some((file, st)) = open_event_file(events, &self.name)? else {
            return Err(changed());
        };
        if st.st_dev != self.dev || st.st_ino != self.ino || (st.st_size as u64) < self.size {
            return Err(changed());
        }
        Ok(file.take(self.size))
    }
}

/// A session and the index of its lines.
type SessionIndex = (u32, Vec<Entry>);

/// Where an event line is, for the second pass: 32 bytes a line.
struct Entry {
    ts: f64,
    offset: u64,
    line: u64,
    len: u32,
    file: u16,
    session_event: bool,
}

/// The head of an event line: enough to order it.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    ev: std::borrow::Cow<'a, str>,
    ts: f64,
}

/// Read one line of at most [`MAX_EVENT_LINE`] bytes into `buf` (without its newline);
/// a longer line is skipped and reported as `Ok(Some(false))`. `None` at the end.
fn next_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<Option<(usize, bool)>> {
    buf.clear();
    let n = io::Read::take(&mut *r, MAX_EVENT_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Some((n, true)));
    }
    if n <= MAX_EVENT_LINE {
        return Ok(Some((n, true)));
    }
    // Too long: skip to the end of the line.
    let mut skipped = n;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                skipped += i + 1;
                break;
            }
            None => {
                let l = chunk.len();
                r.consume(l);
                skipped += l;
            }
        }
    }
    Ok(Some((skipped, false)))
}

/// The index of a record's lines, per session (in session order), and how many lines
/// could not be read. One file is open at a time.
fn index_events(
    events: &CheckedDir,
    files: &[EventFile],
) -> Result<(Vec<SessionIndex>, usize), RecordError> {
    let mut bad = 0;
    let mut lines = 0usize;
    let mut sessions: Vec<(u32, Vec<Entry>)> = Vec::new();
    let mut buf = Vec::new();
    for (file_no, f) in files.iter().enumerate() {
        let mut r = BufReader::with_capacity(1 << 16, f.reopen(events)?);
        let mut offset = 0u64;
        let mut line = 0u64;
        let index = match sessions.last_mut() {
            Some((s, v)) if *s == f.session => v,
            _ => {
                sessions.push((f.session, Vec::new()));
                &mut sessions.last_mut().expect("just pushed").1
            }
        };
        while let Some((n, whole)) =
            next_line(&mut r, &mut buf).map_err(|e| f.io_error("read", e))?
        {
            line += 1;
            let at = offset;
            offset += n as u64;
            if !whole {
                bad += 1;
                continue;
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            lines += 1;
            if lines > MAX_EVENT_LINES {
                return Err(RecordError::TooLarge {
                    path: events.path().to_path_buf(),
                    why: format!("it holds more than {MAX_EVENT_LINES} event lines"),
                });
            }
            match serde_json::from_slice::<Head<'_>>(&buf) {
                Ok(h) => index.push(Entry {
                    ts: h.ts,
                    offset: at,
                    line,
                    len: buf.len() as u32,
                    file: file_no as u16,
                    session_event: h.ev == "session",
                }),
                Err(_) => bad += 1,
            }
        }
    }
    Ok((sessions, bad))
}

/// Most event files open at once in the second pass (writers of one session are merged
/// by time, so their files are read side by side).
const MAX_OPEN: usize = 64;

/// The event files open for the second pass: at most [`MAX_OPEN`], the least recently
/// used closed first. The sorted order is nearly always the files' own, so each is read
/// sequentially through its buffer, not with a system call per event.
struct Readers<'a> {
    events: &'a CheckedDir,
    files: &'a [EventFile],
    /// (file number, reader, position, last use)
    open: Vec<(usize, BufReader<io::Take<File>>, u64, u64)>,
    clock: u64,
}

impl Readers<'_> {
    fn read(&mut self, e: &Entry, buf: &mut Vec<u8>) -> Result<(), RecordError> {
        let no = e.file as usize;
        self.clock += 1;
        let i = match self.open.iter().position(|o| o.0 == no) {
            Some(i) => i,
            None => {
                if self.open.len() >= MAX_OPEN {
                    let oldest = (0..self.open.len())
                        .min_by_key(|&i| self.open[i].3)
                        .expect("full");
                    self.open.swap_remove(oldest);
                }
                let r = self.files[no].reopen(self.events)?;
                self.open
                    .push((no, BufReader::with_capacity(1 << 16, r), 0, self.clock));
                self.open.len() - 1
            }
        };
        let (_, r, pos, used) = &mut self.open[i];
        *used = self.clock;
        buf.resize(e.len as usize, 0);
        let read = r
            .seek_relative(e.offset.wrapping_sub(*pos) as i64)
            .and_then(|()| r.read_exact(buf));
        *pos = e.offset + u64::from(e.len);
        read.map_err(|err| self.files[no].io_error("read", err))
    }
}

/// Call `each` with every event of an `events/` folder, in session order and, within a
/// session, in time order (the session event first); the number of lines that could not
/// be read. Each event is validated first; `each` may refuse one (its reason becomes the
/// error, naming the event's file and line).
///
/// Reading is bounded whatever the folder holds: each file only up to the size it had
/// when checked, [`MAX_RECORD_BYTES`] and [`MAX_EVENT_LINES`] in all, [`MAX_RUNS`]
/// distinct runs, at most [`MAX_OPEN`] files open at once; memory is the index (32
/// bytes a line) and what `each` keeps.
///
/// # Errors
/// [`RecordError`].
pub fn read_events(
    events: &CheckedDir,
    mut each: impl FnMut(Event) -> Result<(), String>,
) -> Result<usize, RecordError> {
    let files = check_event_files(events)?;
    if files.is_empty() {
        return Err(RecordError::Empty(events.path().to_path_buf()));
    }
    let (sessions, mut bad) = index_events(events, &files)?;
    let mut readers = Readers {
        events,
        files: &files,
        open: Vec::new(),
        clock: 0,
    };
    let mut buf = Vec::new();
    let mut check = Validator::default();
    for (_, mut index) in sessions {
        // Writers of one session merge by time; the session event comes first.
        index.sort_by(|a, b| {
            (!a.session_event)
                .cmp(&!b.session_event)
                .then(a.ts.total_cmp(&b.ts))
        });
        for e in index {
            readers.read(&e, &mut buf)?;
            let Ok(ev) = serde_json::from_slice::<Event>(&buf) else {
                bad += 1;
                continue;
            };
            check
                .event(&ev)
                .and_then(|()| each(ev))
                .map_err(|why| RecordError::Invalid {
                    path: files[e.file as usize].path.clone(),
                    line: e.line,
                    why,
                })?;
        }
    }
    Ok(bad)
}

/// Checks on the values of events read back, before they size a loop, an allocation or
/// a `Duration`: times within Unix seconds colloc can have written, figures finite and
/// bounded, slot indexes within the slots their session declared.
#[derive(Default)]
struct Validator {
    /// Slots the latest session declared.
    slots: Option<usize>,
    /// The runs (and calibrations) named so far.
    runs: std::collections::HashSet<String>,
    /// The grid keys and metric names seen so far (a CSV column each).
    columns: std::collections::HashSet<String>,
    /// Session, session-end and start events so far.
    sessions: usize,
    session_ends: usize,
    attempts: usize,
}

/// One more of what is counted in `n`, refused past `max`.
fn count(n: &mut usize, max: usize, what: &str) -> Result<(), String> {
    *n += 1;
    if *n > max {
        return Err(format!(
            "more than {max} {what}: colloc never writes that many in one record"
        ));
    }
    Ok(())
}

fn check_ts(what: &str, ts: f64) -> Result<(), String> {
    if (0.0..=MAX_TS).contains(&ts) {
        Ok(())
    } else {
        Err(format!(
            "{what} {ts:e} is not a time colloc writes (0 to {MAX_TS:e} Unix seconds)"
        ))
    }
}

fn check_value(what: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v.abs() <= MAX_VALUE {
        Ok(())
    } else {
        Err(format!(
            "{what} {v:e} is out of range (at most {MAX_VALUE:e})"
        ))
    }
}

fn check_seconds(what: &str, s: f64) -> Result<(), String> {
    if (0.0..=MAX_TS).contains(&s) {
        Ok(())
    } else {
        Err(format!("{what} {s:e} is not a duration colloc writes"))
    }
}

fn check_progress(p: &Progress) -> Result<(), String> {
    for &(t, v) in &p.samples {
        check_ts("a sample's time", t)?;
        check_value("a sample", v)?;
    }
    let s = &p.stats;
    for t in [s.first_t, s.last_t].into_iter().flatten() {
        check_ts("a throughput time", t)?;
    }
    for v in [Some(s.work), s.max, s.last].into_iter().flatten() {
        check_value("a throughput figure", v)?;
    }
    for m in p.metrics.values() {
        for v in [m.last, m.best].into_iter().flatten() {
            check_value("a metric", v)?;
        }
    }
    for &(_, secs) in &p.epochs {
        check_seconds("an epoch's seconds", secs)?;
    }
    Ok(())
}

impl Validator {
    /// Count a run's name; more than [`MAX_RUNS`] distinct ones is not a record colloc
    /// wrote (each costs the fold memory).
    fn run(&mut self, name: &str) -> Result<(), String> {
        if !self.runs.contains(name) {
            if self.runs.len() >= MAX_RUNS {
                return Err(format!(
                    "more than {MAX_RUNS} distinct runs, the most a pack has"
                ));
            }
            self.runs.insert(name.to_string());
        }
        Ok(())
    }

    /// Count a grid key or metric name: more than [`MAX_COLUMNS`] is not a record colloc
    /// wrote (each is a column of every row of the CSV).
    fn column(&mut self, name: &str) -> Result<(), String> {
        if !self.columns.contains(name) {
            if self.columns.len() >= MAX_COLUMNS {
                return Err(format!(
                    "more than {MAX_COLUMNS} distinct grid keys and metric names (a CSV column each)"
                ));
            }
            self.columns.insert(name.to_string());
        }
        Ok(())
    }

    fn columns_of(&mut self, ev: &Event) -> Result<(), String> {
        match ev {
            Event::Session { runs, .. } => {
                for r in runs {
                    for k in r.grid.iter().flat_map(|g| g.keys()) {
                        self.column(k)?;
                    }
                    for (m, _) in &r.metrics {
                        self.column(m)?;
                    }
                }
            }
            Event::Progress { progress, .. } | Event::End { progress, .. } => {
                for m in progress.metrics.keys() {
                    self.column(m)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event) -> Result<(), String> {
        self.columns_of(ev)?;
        check_ts("time", ev.ts())?;
        match ev {
            Event::Session { .. } => count(&mut self.sessions, MAX_SESSIONS, "session events")?,
            Event::SessionEnd { .. } => {
                count(&mut self.session_ends, MAX_SESSIONS, "session end events")?;
            }
            Event::Start { .. } => count(&mut self.attempts, MAX_ATTEMPTS, "attempts")?,
            _ => {}
        }
        match ev {
            Event::Session { runs, .. } => {
                for r in runs {
                    self.run(&r.name)?;
                }
            }
            Event::Start { run, .. }
            | Event::Progress { run, .. }
            | Event::End { run, .. }
            | Event::Solo { run, .. } => self.run(run)?,
            _ => {}
        }
        match ev {
            Event::Session {
                slots, interval_s, ..
            } => {
                if slots.len() > MAX_SLOTS {
                    return Err(format!(
                        "{} slots, more than the {MAX_SLOTS} colloc runs",
                        slots.len()
                    ));
                }
                if let Some(s) = slots.iter().find(|s| s.index >= slots.len()) {
                    return Err(format!(
                        "slot index {} but the session declares {} slot(s)",
                        s.index,
                        slots.len()
                    ));
                }
                check_seconds("the sampling interval", *interval_s)?;
                self.slots = Some(slots.len());
            }
            Event::Start { slot, .. } => {
                let declared = self.slots.unwrap_or(0);
                if *slot >= declared {
                    return Err(format!(
                        "slot index {slot} but its session declares {declared} slot(s)"
                    ));
                }
            }
            Event::Progress { progress, .. } => check_progress(progress)?,
            Event::End {
                progress,
                step,
                gpu,
                ..
            } => {
                check_progress(progress)?;
                if let Some(g) = gpu {
                    for v in [g.mean_util_percent, g.mean_gpu_util_percent, g.energy_j]
                        .into_iter()
                        .flatten()
                    {
                        check_value("a GPU figure", v)?;
                    }
                }
                if let Some(st) = step {
                    if let Some(d) = st.dispatch_s {
                        check_seconds("a step's dispatch seconds", d)?;
                    }
                    if let Some((a, b)) = st.span {
                        check_ts("a step's start", a)?;
                        check_ts("a step's end", b)?;
                    }
                    for r in &st.readings {
                        check_ts("a GPU reading's time", r.0)?;
                    }
                }
            }
            Event::Solo { throughput, .. } => check_value("a solo figure", *throughput)?,
            Event::Gpus { gpus, .. } => {
                for g in gpus {
                    for v in [
                        g.energy_j,
                        g.runs_energy_j,
                        g.idle_energy_j,
                        g.mean_util_percent,
                    ]
                    .into_iter()
                    .flatten()
                    {
                        check_value("a GPU figure", v)?;
                    }
                }
            }
            Event::Signal { .. }
            | Event::Stop { .. }
            | Event::NodeOut { .. }
            | Event::SessionEnd { .. } => {}
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::events::Event;

    fn events_of(d: &ReportDir) -> (Vec<Event>, usize) {
        let ev = d.dir().subdir(EVENTS_DIR, None).unwrap().unwrap();
        let mut out = Vec::new();
        let bad = read_events(&ev, |e| {
            out.push(e);
            Ok(())
        })
        .unwrap();
        (out, bad)
    }

    fn session(ts: f64, slots: usize) -> Event {
        Event::Session {
            ts,
            version: 1,
            session: 1,
            colloc_version: "x".into(),
            host: "h".into(),
            pid: 1,
            job_id: None,
            restart_count: None,
            mode: "naive".into(),
            source: "plain".into(),
            steps: false,
            slots: (0..slots)
                .map(|index| crate::record::events::SlotRecord {
                    index,
                    device: None,
                    node: None,
                    memory_mib: None,
                })
                .collect(),
            interval_s: 1.0,
            runs: vec![],
        }
    }

    #[test]
    fn events_append_and_read_back_skipping_cut_lines() {
        let t = tempfile::tempdir().unwrap();
        let (d, made) = ReportDir::create(&t.path().join("r")).unwrap();
        assert!(made);
        let mut log = d.event_log(1, "main").unwrap();
        let ev = |ts| Event::Stop {
            ts,
            reason: "x".into(),
        };
        log.append(&ev(2.0));
        log.append(&session(5.0, 1));
        log.append(&ev(1.0));
        // a line cut by a kill or a full disk
        std::fs::OpenOptions::new()
            .append(true)
            .open(t.path().join("r/events/1.main.jsonl"))
            .unwrap()
            .write_all(b"{\"ev\":\"sto")
            .unwrap();
        log.broken = true;
        log.append(&ev(3.0));
        let (events, bad) = events_of(&d);
        assert_eq!(bad, 1);
        let ts: Vec<f64> = events.iter().map(Event::ts).collect();
        assert_eq!(ts, [5.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let t = tempfile::tempdir().unwrap();
        let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
        d.write("r.json", b"one").unwrap();
        d.write("r.json", b"two").unwrap();
        assert_eq!(std::fs::read(t.path().join("r/r.json")).unwrap(), b"two");
        let names: Vec<String> = d
            .dir()
            .entries()
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(names, ["r.json"]);
    }

    #[test]
    fn values_colloc_never_writes_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
        let p = t.path().join("r/events/1.main.jsonl");
        let mut log = d.event_log(1, "main").unwrap();
        log.append(&session(5.0, 2));
        drop(log);
        let base = std::fs::read_to_string(&p).unwrap();
        let start = |slot: &str, ts: &str| {
            format!("{{\"ev\":\"start\",\"ts\":{ts},\"run\":\"a\",\"attempt\":1,\"session\":1,\"slot\":{slot},\"device\":null,\"node\":null,\"log\":\"logs/a.log\"}}\n")
        };
        for (line, want) in [
            (
                start("1000000000000000", "6"),
                "slot index 1000000000000000 but its session declares 2 slot(s)",
            ),
            (
                start("1", "1e308"),
                "time 1e308 is not a time colloc writes",
            ),
            (start("1", "-1"), "time -1e0 is not a time"),
        ] {
            std::fs::write(&p, format!("{base}{line}")).unwrap();
            let e = d.fold().unwrap_err();
            assert!(matches!(e, RecordError::Invalid { line: 2, .. }), "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        std::fs::write(&p, format!("{base}{}", start("1", "6"))).unwrap();
        let (f, bad) = d.fold().unwrap().unwrap();
        assert_eq!((f.sessions(), bad), (1, 0));
    }

    /// A record of one session whose event file holds `lines`.
    fn record_with(lines: &str) -> (tempfile::TempDir, ReportDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
        d.event_log(1, "main").unwrap().append(&session(5.0, 1));
        let p = t.path().join("r/events/1.main.jsonl");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(lines.as_bytes())
            .unwrap();
        (t, d, p)
    }

    fn stop(ts: f64) -> String {
        format!("{{\"ev\":\"stop\",\"ts\":{ts},\"reason\":\"x\"}}\n")
    }

    #[test]
    fn a_writer_appending_meanwhile_cannot_make_a_read_run_on() {
        let (_t, d, p) = record_with(&stop(6.0));
        let ev = d.dir().subdir(EVENTS_DIR, None).unwrap().unwrap();
        let files = check_event_files(&ev).unwrap();
        // Someone appends after the record was checked (as fast as they like).
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        for i in 0..1000 {
            f.write_all(stop(7.0 + f64::from(i)).as_bytes()).unwrap();
        }
        let (sessions, bad) = index_events(&ev, &files).unwrap();
        assert_eq!(
            (sessions[0].1.len(), bad),
            (2, 0),
            "read past the checked size"
        );
        // Replaced by another file meanwhile: refused, not read.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, stop(8.0)).unwrap();
        let e = index_events(&ev, &files).err().unwrap();
        assert!(
            e.to_string().contains("replaced or cut while it was read"),
            "{e}"
        );
    }

    #[test]
    fn many_writers_of_a_session_merge_by_time_with_few_files_open() {
        // More writers than files kept open, their lines interleaved in time: every
        // line is read from a file opened again and sought to.
        let (t, d, _) = record_with("");
        let writers = MAX_OPEN as u32 + 36;
        for w in 0..writers {
            let lines: String = (0..3).map(|k| stop(f64::from(10 + k * 1000 + w))).collect();
            std::fs::write(t.path().join(format!("r/events/1.w{w}.jsonl")), lines).unwrap();
        }
        let (events, bad) = events_of(&d);
        assert_eq!((events.len(), bad), (1 + 3 * writers as usize, 0));
        let ts: Vec<f64> = events.iter().skip(1).map(Event::ts).collect();
        let mut sorted = ts.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(ts, sorted);
        assert_eq!(ts[writers as usize], 1010.0);
    }

    #[test]
    fn an_event_file_with_another_link_is_refused() {
        let (t, d, p) = record_with("");
        std::fs::hard_link(&p, t.path().join("elsewhere")).unwrap();
        let e = d.fold().unwrap_err();
        assert!(
            e.to_string().contains(
                "1.main.jsonl is a file with 2 hard links, not an event file with one link"
            ),
            "{e}"
        );
        assert!(
            matches!(e, RecordError::File(ref f) if f.is_bad_input()),
            "{e}"
        );
    }

    #[test]
    fn a_record_past_the_total_caps_is_refused_with_a_clear_line() {
        // Bytes: two sparse files, each under the per-file cap, together over 4 GiB.
        let (t, d, _) = record_with("");
        for w in ["a", "b"] {
            let f = std::fs::File::create(t.path().join(format!("r/events/1.{w}.jsonl"))).unwrap();
            f.set_len(2 << 30).unwrap();
        }
        let e = d.fold().unwrap_err();
        assert!(matches!(e, RecordError::TooLarge { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("its event files hold more than 4 GiB together, more than colloc reads"),
            "{e}"
        );
        // Lines: one more than 16 Mi short lines.
        let (_t, d, _) = record_with(&"x\n".repeat(MAX_EVENT_LINES));
        let e = d.fold().unwrap_err();
        assert!(
            e.to_string()
                .contains("it holds more than 16777216 event lines"),
            "{e}"
        );
    }

    #[test]
    fn a_record_of_more_runs_than_a_pack_has_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
        let mut s = session(5.0, 1);
        if let Event::Session { runs, .. } = &mut s {
            *runs = (0..=MAX_RUNS)
                .map(|i| crate::record::events::RunIdentity {
                    name: format!("r{i}"),
                    command: vec![],
                    env: vec![],
                    workdir: None,
                    grid: None,
                    metrics: vec![],
                    metric: None,
                    gpu_memory_mib: None,
                })
                .collect();
        }
        d.event_log(1, "main").unwrap().append(&s);
        let e = d.fold().unwrap_err();
        assert!(
            e.to_string()
                .contains("line 1: more than 100000 distinct runs"),
            "{e}"
        );
    }

    #[test]
    fn more_sessions_session_ends_or_attempts_than_colloc_writes_are_refused() {
        let start = || {
            serde_json::from_str::<Event>(
                r#"{"ev":"start","ts":6,"run":"a","attempt":1,"session":1,"slot":0,"log":"l"}"#,
            )
            .unwrap()
        };
        let end = || {
            serde_json::from_str::<Event>(
                r#"{"ev":"session_end","ts":6,"session":1,"stopped_by":null,"max_concurrent":1}"#,
            )
            .unwrap()
        };
        let mut v = Validator::default();
        for _ in 0..MAX_SESSIONS {
            v.event(&session(5.0, 1)).unwrap();
            v.event(&end()).unwrap();
        }
        let e = v.event(&session(5.0, 1)).unwrap_err();
        assert!(e.contains("more than 4096 session events"), "{e}");
        let e = v.event(&end()).unwrap_err();
        assert!(e.contains("more than 4096 session end events"), "{e}");
        for _ in 0..MAX_ATTEMPTS {
            v.event(&start()).unwrap();
        }
        let e = v.event(&start()).unwrap_err();
        assert!(e.contains("more than 1048576 attempts"), "{e}");
    }

    #[test]
    fn the_lock_is_held_by_one_and_seen_by_others() {
        let t = tempfile::tempdir().unwrap();
        let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
        assert_eq!(d.lock_state().unwrap(), LockState::Free);
        let l = d.lock().unwrap().unwrap();
        assert_eq!(d.lock_state().unwrap(), LockState::Held);
        assert!(d.lock().unwrap().is_none());
        drop(l);
        assert_eq!(d.lock_state().unwrap(), LockState::Free);
    }
}
