//! The files of a report directory: the event log (appended, one line per event), the
//! report files (replaced atomically: temporary file, fsync, rename, fsync of the
//! directory, so a reader always sees a whole file and a failed write leaves the previous
//! one), and the lock a running pack holds.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::events::Event;

/// Folder of event files in a report directory.
pub const EVENTS_DIR: &str = "events";
/// The lock a running pack holds.
pub const LOCK_FILE: &str = ".colloc.lock";
/// Largest event file read (a guard against a wrong directory, not a limit of packs).
pub const MAX_EVENT_FILE: u64 = 4 << 30;

/// An event file: `<session>.<writer>.jsonl`.
pub fn event_file(dir: &Path, session: u32, writer: &str) -> PathBuf {
    dir.join(EVENTS_DIR)
        .join(format!("{session}.{writer}.jsonl"))
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
    /// Open (create) an event file for appending.
    ///
    /// # Errors
    /// The folder or file cannot be made.
    pub fn open(path: &Path) -> io::Result<EventLog> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventLog {
            file: Some(file),
            path: path.to_path_buf(),
            broken: false,
            error: None,
        })
    }

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

/// The event files of a report directory, in session order.
pub fn event_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<(u32, String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir.join(EVENTS_DIR))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".jsonl") else {
            continue;
        };
        let Some((session, writer)) = stem.split_once('.') else {
            continue;
        };
        let Ok(session) = session.parse::<u32>() else {
            continue;
        };
        files.push((session, writer.to_string(), e.path()));
    }
    files.sort();
    Ok(files.into_iter().map(|f| f.2).collect())
}

/// Every event of a report directory, in session order and, within a session, in time
/// order; and how many lines could not be read (a line cut by a full disk or a kill).
///
/// # Errors
/// The directory has no event files, or one cannot be read.
pub fn read_events(dir: &Path) -> io::Result<(Vec<Event>, usize)> {
    let files = event_files(dir)?;
    if files.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no event files in {}", dir.join(EVENTS_DIR).display()),
        ));
    }
    let mut bad = 0;
    let mut sessions: Vec<(u32, Vec<Event>)> = Vec::new();
    for path in files {
        let session: u32 = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let file = File::open(&path)?;
        if file.metadata()?.len() > MAX_EVENT_FILE {
            return Err(io::Error::other(format!(
                "{} is larger than {} GiB: not an event log",
                path.display(),
                MAX_EVENT_FILE >> 30
            )));
        }
        let mut events = Vec::new();
        for line in BufReader::new(file).split(b'\n') {
            let line = line?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Event>(&line) {
                Ok(e) => events.push(e),
                Err(_) => bad += 1,
            }
        }
        match sessions.iter_mut().find(|(s, _)| *s == session) {
            Some((_, v)) => v.extend(events),
            None => sessions.push((session, events)),
        }
    }
    let mut out = Vec::new();
    for (_, mut v) in sessions {
        // Writers of one session merge by time; the session event comes first.
        v.sort_by(|a, b| {
            let first = |e: &Event| !matches!(e, Event::Session { .. });
            first(a).cmp(&first(b)).then(a.ts().total_cmp(&b.ts()))
        });
        out.extend(v);
    }
    Ok((out, bad))
}

/// Replace `path` with `bytes` atomically. On any failure the previous file is left as it
/// was and the temporary file removed.
///
/// # Errors
/// Writing, syncing or renaming failed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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

impl DirLock {
    /// Take the lock; `Ok(None)` when another process holds it.
    ///
    /// # Errors
    /// The lock file cannot be opened.
    pub fn take(dir: &Path) -> io::Result<Option<DirLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))?;
        match rustix::fs::flock(
            file.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => Ok(Some(DirLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => {
                log::debug!("no lock on {}: {e}", dir.display());
                Ok(Some(DirLock { _file: file }))
            }
        }
    }

    /// Is a pack running in `dir`?
    pub fn state(dir: &Path) -> LockState {
        let Ok(file) = File::open(dir.join(LOCK_FILE)) else {
            return LockState::Free;
        };
        match rustix::fs::flock(
            file.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockShared,
        ) {
            Ok(()) => LockState::Free,
            Err(rustix::io::Errno::WOULDBLOCK) => LockState::Held,
            Err(_) => LockState::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::events::Event;

    #[test]
    fn events_append_and_read_back_skipping_cut_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = event_file(dir.path(), 1, "main");
        let mut log = EventLog::open(&p).unwrap();
        let ev = |ts| Event::Stop {
            ts,
            reason: "x".into(),
        };
        log.append(&ev(2.0));
        log.append(&ev(1.0));
        // a line cut by a kill or a full disk
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"{\"ev\":\"sto")
            .unwrap();
        log.broken = true;
        log.append(&ev(3.0));
        let (events, bad) = read_events(dir.path()).unwrap();
        assert_eq!(bad, 1);
        let ts: Vec<f64> = events.iter().map(Event::ts).collect();
        assert_eq!(ts, [1.0, 2.0, 3.0]);
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "r.json")
            .collect();
        assert!(leftovers.is_empty());
        // a directory that is not there: error, nothing made
        assert!(write_atomic(&dir.path().join("no/r.json"), b"x").is_err());
    }

    #[test]
    fn the_lock_is_held_by_one_and_seen_by_others() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DirLock::state(dir.path()), LockState::Free);
        let l = DirLock::take(dir.path()).unwrap().unwrap();
        assert_eq!(DirLock::state(dir.path()), LockState::Held);
        assert!(DirLock::take(dir.path()).unwrap().is_none());
        drop(l);
        assert_eq!(DirLock::state(dir.path()), LockState::Free);
    }
}
