//! Reading a record's `events/` folder ([`read_events`]): each event file checked once
//! and indexed (time, offset a line), the index sorted, then each event read again,
//! validated ([`Validator`]) and handed on in order, within fixed bounds.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;

use super::validate::Validator;
use super::{
    RecordError, MAX_EVENT_FILE, MAX_EVENT_FILES, MAX_EVENT_LINE, MAX_EVENT_LINES, MAX_RECORD_BYTES,
};
use crate::record::events::Event;
use crate::userfs::{CheckedDir, UserFsError};
use rustix::fs::Stat;

/// The event files of an `events/` folder, in session order: (session, name).
fn event_files(events: &CheckedDir) -> Result<Vec<(u32, String)>, RecordError> {
    let mut files: Vec<(u32, String)> = Vec::new();
    // Names that are not event files are skipped, but a folder of millions of them is
    // refused once a bounded number is read, not listed in full first.
    let listing_cap = 4 * MAX_EVENT_FILES;
    let Some(entries) = events.entries_at_most(listing_cap)? else {
        return Err(RecordError::TooLarge {
            path: events.path().to_path_buf(),
            why: format!(
                "more than {listing_cap} names (a record has at most {MAX_EVENT_FILES} event files)"
            ),
        });
    };
    for (name, _) in entries {
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
        return Err(RecordError::TooLarge {
            path: events.path().to_path_buf(),
            why: format!("{} event files (at most {MAX_EVENT_FILES})", files.len()),
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
pub(super) struct EventFile {
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
pub(super) fn check_event_files(events: &CheckedDir) -> Result<Vec<EventFile>, RecordError> {
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
pub(super) type SessionIndex = (u32, Vec<Entry>);

/// Where an event line is, for the second pass: 32 bytes a line.
pub(super) struct Entry {
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
pub(super) fn index_events(
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
pub(super) const MAX_OPEN: usize = 64;

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
/// when checked, [`MAX_RECORD_BYTES`] and [`MAX_EVENT_LINES`] in all, [`MAX_RUNS`](super::MAX_RUNS)
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
