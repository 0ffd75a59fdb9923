//! Files a user-side command (`run`, `bench`, `report`) touches in directories that may
//! not be the caller's: a shared working directory, a planted `colloc-<job id>`, another
//! user's report read by an admin as root (SECURITY.md, "User-side commands").
//!
//! - [`CheckedDir`]: a directory opened once (`O_DIRECTORY|O_NOFOLLOW`), its owner and
//!   mode checked on the descriptor; every file in it is opened relative to that handle
//!   (`openat`) without following links, new files with `O_EXCL`, replacements through a
//!   temporary file of an unpredictable name renamed with `renameat`.
//! - [`read_user_file`]: a file named on the command line (a manifest, a baseline, a
//!   bench report), opened non-blocking, checked to be a regular file and size-capped
//!   before it is parsed, so a FIFO or `/dev/zero` is refused at once.

use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Access, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

#[cfg(test)]
mod tests;
mod walk;

use walk::{refuse_shared_parent, walk_parent};

/// Why a user-side file or directory was not used. Everything but [`UserFsError::Io`]
/// is the caller's input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum UserFsError {
    /// A directory colloc may not write into (someone else's, or writable by others).
    #[error("{path} is {why}: colloc writes only into a directory of your own that no one else can write; give another directory")]
    NotYours {
        /// The directory.
        path: PathBuf,
        /// Whose it is, or who else can write it.
        why: String,
    },
    /// Not what was expected there (a link, a FIFO, a device, another user's file).
    #[error("{path} is {what}, not {expected}; refused")]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What it is.
        what: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A symbolic link on the way to a directory colloc writes that it does not follow.
    #[error(
        "{path} is a symbolic link {why}; colloc does not follow it to write (give the real path)"
    )]
    UntrustedLink {
        /// The link.
        path: PathBuf,
        /// Whose it is, and whose colloc follows.
        why: String,
    },
    /// A directory on the way that was swapped (with a link or a file) while colloc
    /// opened it: someone is racing colloc there.
    #[error("{path} changed while colloc opened it (a directory swapped with a link or a file?); refused")]
    Changing {
        /// The path.
        path: PathBuf,
    },
    /// A file over the size colloc reads.
    #[error("{path} is larger than {limit}; refused (not a file colloc wrote?)")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap, for people.
        limit: String,
    },
    /// A system call failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl UserFsError {
    /// Is this the caller's input (exit 2) rather than a failure of the system?
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, UserFsError::Io { .. })
    }

    /// Is this a missing file or directory?
    pub fn is_not_found(&self) -> bool {
        matches!(self, UserFsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// What is wrong, without the path (for messages that name the file already).
    pub fn reason(&self) -> String {
        match self {
            UserFsError::NotYours { why, .. } => why.clone(),
            UserFsError::WrongType { what, expected, .. } => format!("{what}, not {expected}"),
            UserFsError::TooLarge { limit, .. } => format!("larger than {limit}"),
            UserFsError::UntrustedLink { why, .. } => format!("a symbolic link {why}"),
            UserFsError::Changing { .. } => "changed while colloc opened it".into(),
            UserFsError::Io { source, .. } => source.to_string(),
        }
    }

    /// As an `anyhow::Error` that exits 2 when it is bad input.
    pub fn into_anyhow(self) -> anyhow::Error {
        if self.is_bad_input() {
            crate::bad_input(self.to_string())
        } else {
            self.into()
        }
    }
}

fn io(what: &'static str, path: &Path, e: Errno) -> UserFsError {
    UserFsError::Io {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// A size for people: `16 MiB`.
pub fn show_size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "of an unknown type",
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Check an open file before reading it: a regular file of at most `limit` bytes.
fn check_regular(st: &Stat, path: &Path, limit: u64) -> Result<(), UserFsError> {
    let t = FileType::from_raw_mode(st.st_mode);
    if t != FileType::RegularFile {
        return Err(UserFsError::WrongType {
            path: path.to_path_buf(),
            what: type_name(t).into(),
            expected: "a regular file",
        });
    }
    if st.st_size as u64 > limit {
        return Err(UserFsError::TooLarge {
            path: path.to_path_buf(),
            limit: show_size(limit),
        });
    }
    Ok(())
}

/// What is at `name` that `open` refused with `ENXIO` (a socket, or a device with no
/// driver): named as not a regular file, bad input like a FIFO.
fn not_openable<Fd: AsFd, P: rustix::path::Arg>(at: Fd, name: P, shown: &Path) -> UserFsError {
    let what = rustix::fs::statat(at, name, AtFlags::empty()).map_or("not openable", |st| {
        type_name(FileType::from_raw_mode(st.st_mode))
    });
    UserFsError::WrongType {
        path: shown.to_path_buf(),
        what: what.into(),
        expected: "a regular file",
    }
}

/// Read at most `limit` bytes from an open regular file; more (a file that grew) is an
/// error.
fn read_capped(f: File, path: &Path, limit: u64) -> Result<Vec<u8>, UserFsError> {
    colloc_core::fs::read_at_most(f, limit)
        .map_err(|source| UserFsError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?
        .ok_or_else(|| UserFsError::TooLarge {
            path: path.to_path_buf(),
            limit: show_size(limit),
        })
}

/// Read a file named on the command line (`-f` manifest, `--baseline`, `bench
/// --compare`): opened non-blocking, a regular file (a link to one is fine: the caller
/// named it), at most `limit` bytes. A FIFO, a device or a directory is refused at once.
///
/// # Errors
/// [`UserFsError`]: not a regular file, too large (bad input), or unreadable.
pub fn read_user_file(path: &Path, limit: u64) -> Result<Vec<u8>, UserFsError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NXIO => not_openable(rustix::fs::CWD, path, path),
        e => io("read", path, e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", path, e))?;
    check_regular(&st, path, limit)?;
    read_capped(File::from(fd), path, limit)
}

/// An unpredictable suffix for temporary names (the std hasher's keys come from the
/// system's random source; `O_EXCL` makes a guessed name harmless anyway).
fn random_suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// A directory opened once and worked in only relative to its descriptor.
#[derive(Debug)]
pub struct CheckedDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Its owner: files read from it must be this user's.
    owner: u32,
    /// Checked writable by the caller alone (made or adopted for writing).
    writable: bool,
}

/// Whose a directory is, or who else can write it, when the caller may not write there.
fn not_yours(st: &Stat) -> Option<String> {
    if st.st_uid != euid() {
        return Some(format!("owned by uid {} (not you)", st.st_uid));
    }
    if st.st_mode & 0o022 != 0 {
        return Some(format!(
            "writable by group or others (mode {:04o})",
            st.st_mode & 0o7777
        ));
    }
    None
}

impl CheckedDir {
    /// Open `path` to write into it: made with `mkdir` (mode `mode`, the directories
    /// above as `mkdir -p` would) when missing; an existing directory is used only when
    /// it is the caller's and writable by no one else. Also returns whether it was made
    /// here.
    ///
    /// # Errors
    /// [`UserFsError::NotYours`] (someone else's, or group/other-writable),
    /// [`UserFsError::WrongType`] (a link or a file), or I/O.
    pub fn create_or_adopt(path: &Path, mode: u32) -> Result<(CheckedDir, bool), UserFsError> {
        let Some(name) = path.file_name() else {
            // `.`, `..`, `/`: the directory the walk ends in, never made here.
            let fd = walk_parent(path)?;
            let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", path, e))?;
            if let Some(why) = not_yours(&st) {
                return Err(UserFsError::NotYours {
                    path: path.to_path_buf(),
                    why,
                });
            }
            let d = CheckedDir {
                fd,
                path: path.to_path_buf(),
                owner: st.st_uid,
                writable: true,
            };
            return Ok((d, false));
        };
        let parent = path.parent().unwrap_or(Path::new(""));
        let at = walk_parent(parent)?;
        if euid() == 0 {
            refuse_shared_parent(&at, parent)?;
        }
        let made = match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(mode)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(io("create", path, e)),
        };
        let d = Self::open_at(&at, Path::new(name), path)?;
        if let Some(why) = not_yours(&d.stat()?) {
            return Err(UserFsError::NotYours {
                path: path.to_path_buf(),
                why,
            });
        }
        Ok((
            CheckedDir {
                writable: true,
                ..d
            },
            made,
        ))
    }

    /// Open an existing directory to read it (a link given on the command line is
    /// followed); files read from it must belong to its owner.
    ///
    /// # Errors
    /// Missing, not a directory, or I/O.
    pub fn open_read(path: &Path) -> Result<CheckedDir, UserFsError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOTDIR => UserFsError::WrongType {
                path: path.to_path_buf(),
                what: "not a directory".into(),
                expected: "a report directory",
            },
            e => io("open", path, e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", path, e))?;
        Ok(CheckedDir {
            fd,
            path: path.to_path_buf(),
            owner: st.st_uid,
            writable: false,
        })
    }

    fn open_at<Fd: AsFd>(at: Fd, name: &Path, shown: &Path) -> Result<CheckedDir, UserFsError> {
        let fd = rustix::fs::openat(&at, name, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => {
                let t = rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                match t {
                    // a link or a file when opened, a directory now: swapped between
                    Ok(FileType::Directory) => UserFsError::Changing {
                        path: shown.to_path_buf(),
                    },
                    t => UserFsError::WrongType {
                        path: shown.to_path_buf(),
                        what: t.map_or("not a directory", type_name).into(),
                        expected: "a directory",
                    },
                }
            }
            e => io("open", shown, e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", shown, e))?;
        Ok(CheckedDir {
            fd,
            path: shown.to_path_buf(),
            owner: st.st_uid,
            writable: false,
        })
    }

    /// Why the caller may not write here (`None`: it may): someone else's, writable by
    /// others, without its owner's write permission, or on a read-only file system.
    pub fn why_not_writable(&self) -> Option<String> {
        let st = match self.stat() {
            Ok(st) => st,
            Err(e) => return Some(e.to_string()),
        };
        if let Some(why) = not_yours(&st) {
            return Some(why);
        }
        if st.st_mode & 0o200 == 0 {
            return Some(format!("read-only (mode {:04o})", st.st_mode & 0o7777));
        }
        match rustix::fs::accessat(&self.fd, ".", Access::WRITE_OK, AtFlags::EACCESS) {
            Ok(()) => None,
            Err(e) => Some(format!("not writable ({})", std::io::Error::from(e))),
        }
    }

    /// This handle, checked for writing (see [`CheckedDir::why_not_writable`]).
    ///
    /// # Errors
    /// [`UserFsError::NotYours`].
    pub fn into_writable(self) -> Result<CheckedDir, UserFsError> {
        match self.why_not_writable() {
            None => Ok(CheckedDir {
                writable: true,
                ..self
            }),
            Some(why) => Err(UserFsError::NotYours {
                path: self.path,
                why,
            }),
        }
    }

    /// The path it was opened as (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path/name`, for messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Its status.
    ///
    /// # Errors
    /// I/O.
    pub fn stat(&self) -> Result<Stat, UserFsError> {
        rustix::fs::fstat(&self.fd).map_err(|e| io("inspect", &self.path, e))
    }

    fn check_writable(&self) -> Result<(), UserFsError> {
        if self.writable {
            return Ok(());
        }
        Err(UserFsError::NotYours {
            path: self.path.clone(),
            why: "opened only to be read".into(),
        })
    }

    /// Status of the entry `name` (a link is not followed); `None` when there is none.
    ///
    /// # Errors
    /// I/O.
    pub fn lstat(&self, name: &str) -> Result<Option<Stat>, UserFsError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io("look up", &self.shown(name), e)),
        }
    }

    /// The subdirectory `name` (never through a link), made with `mode` when missing and
    /// this handle is writable; `None` when it is missing and not made. A subdirectory of
    /// a writable handle must be the caller's and writable by no one else; one read must
    /// belong to this directory's owner.
    ///
    /// # Errors
    /// [`UserFsError`]: a link, a file, someone else's directory, or I/O.
    pub fn subdir(&self, name: &str, mode: Option<u32>) -> Result<Option<CheckedDir>, UserFsError> {
        let shown = self.shown(name);
        if let (Some(m), true) = (mode, self.writable) {
            match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(m)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io("create", &shown, e)),
            }
        }
        let d = match Self::open_at(&self.fd, Path::new(name), &shown) {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let st = d.stat()?;
        if self.writable {
            if let Some(why) = not_yours(&st) {
                return Err(UserFsError::NotYours { path: shown, why });
            }
        } else if st.st_uid != self.owner {
            return Err(UserFsError::WrongType {
                path: shown,
                what: format!("owned by uid {}, not by the directory's owner", st.st_uid),
                expected: "a part of this record",
            });
        }
        Ok(Some(CheckedDir {
            writable: self.writable,
            owner: self.owner,
            ..d
        }))
    }

    /// Open the file `name` to read it: not a symbolic link, a regular file of this
    /// directory's owner (so a hard link to someone else's file is refused; the owner's
    /// own backups made with `cp -al` still read), at most `limit` bytes; opened
    /// non-blocking. `None` when there is none. Also its size.
    ///
    /// # Errors
    /// [`UserFsError`] naming what is wrong.
    pub fn open_file(&self, name: &str, limit: u64) -> Result<Option<(File, u64)>, UserFsError> {
        let shown = self.shown(name);
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(UserFsError::WrongType {
                    path: shown,
                    what: "a symbolic link".into(),
                    expected: "a regular file",
                })
            }
            // A socket cannot be opened (ENXIO): say what it is, as for a FIFO.
            Err(Errno::NXIO) => return Err(not_openable(&self.fd, name, &shown)),
            Err(e) => return Err(io("open", &shown, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &shown, e))?;
        check_regular(&st, &shown, limit)?;
        if st.st_uid != self.owner {
            return Err(UserFsError::WrongType {
                path: shown,
                what: format!("owned by uid {}, not by the directory's owner", st.st_uid),
                expected: "a part of this record",
            });
        }
        Ok(Some((File::from(fd), st.st_size as u64)))
    }

    /// The names in this directory (without `.` and `..`), sorted, with their types.
    ///
    /// # Errors
    /// I/O.
    pub fn entries(&self) -> Result<Vec<(String, FileType)>, UserFsError> {
        Ok(self.entries_at_most(usize::MAX)?.unwrap_or_default())
    }

    /// [`Self::entries`], or `None` when the directory holds more than `limit` names (found
    /// out after reading `limit + 1` of them, however many there are).
    ///
    /// # Errors
    /// I/O.
    pub fn entries_at_most(
        &self,
        limit: usize,
    ) -> Result<Option<Vec<(String, FileType)>>, UserFsError> {
        let Some(entries) = colloc_core::fs::dir_entries_at_most(&self.fd, limit)
            .map_err(|e| io("read", &self.path, e))?
        else {
            return Ok(None);
        };
        let mut out: Vec<(String, FileType)> = entries
            .into_iter()
            .map(|(name, t)| (name.to_string_lossy().into_owned(), t))
            .collect();
        // Sorted as the names are shown (a name that is not UTF-8 sorts by its lossy form).
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(out))
    }

    fn create_excl(&self, name: &str) -> Result<File, UserFsError> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(|e| io("create", &self.shown(name), e))?;
        Ok(File::from(fd))
    }

    /// Replace the file `name` with `bytes` atomically: a temporary file of an
    /// unpredictable name made with `O_EXCL`, fsync, `renameat` over `name` (a link
    /// there is replaced, never followed), fsync of the directory. On failure `name` is
    /// as it was and the temporary file removed.
    ///
    /// # Errors
    /// [`UserFsError`]: not writable, or I/O (`ENOSPC`, …).
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), UserFsError> {
        self.write_atomic_with(name, &mut |f| f.write_all(bytes))
    }

    /// [`CheckedDir::write_atomic`] of what `fill` writes, as it writes it (through a
    /// buffer): a report of 100,000 runs is not held whole in memory first.
    ///
    /// # Errors
    /// As [`CheckedDir::write_atomic`]; an error of `fill` is a write error.
    pub fn write_atomic_with(
        &self,
        name: &str,
        fill: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), UserFsError> {
        self.check_writable()?;
        let mut tries = 0;
        let (tmp, mut f) = loop {
            let tmp = format!(".{name}.tmp-{}", random_suffix());
            match self.create_excl(&tmp) {
                Ok(f) => break (tmp, f),
                Err(UserFsError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 =>
                {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let filled = {
            let mut buffered = std::io::BufWriter::with_capacity(1 << 16, &mut f);
            fill(&mut buffered).and_then(|()| buffered.flush())
        };
        let written = filled
            .and_then(|()| f.sync_all())
            .map_err(|source| UserFsError::Io {
                what: "write",
                path: self.shown(&tmp),
                source,
            })
            .and_then(|()| {
                rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                    .map_err(|e| io("rename into", &self.shown(name), e))
            });
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        rustix::fs::fsync(&self.fd).map_err(|e| io("fsync", &self.path, e))
    }

    /// Make the file `name` afresh for writing (a log): whatever is there is removed
    /// first (a link is removed, never followed), then made with `O_EXCL`.
    ///
    /// # Errors
    /// [`UserFsError`]: not writable, a directory in its place, or I/O.
    pub fn create(&self, name: &str) -> Result<File, UserFsError> {
        self.check_writable()?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io("replace", &self.shown(name), e)),
        }
        self.create_excl(name)
    }

    /// Open the file `name` to append to it (made when missing): refused when it is a
    /// link, not a regular file, someone else's or has other hard links.
    ///
    /// # Errors
    /// [`UserFsError`] naming what is wrong.
    pub fn append(&self, name: &str) -> Result<File, UserFsError> {
        self.check_writable()?;
        let shown = self.shown(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::CLOEXEC
                | OFlags::NOCTTY,
            Mode::from_raw_mode(0o666),
        )
        .map_err(|e| match e {
            Errno::LOOP => UserFsError::WrongType {
                path: shown.clone(),
                what: "a symbolic link".into(),
                expected: "a regular file",
            },
            Errno::NXIO => not_openable(&self.fd, name, &shown),
            e => io("open", &shown, e),
        })?;
        self.check_own_file(&fd, &shown)?;
        Ok(File::from(fd))
    }

    /// Open (making it when missing) the lock file `name`: a regular file with one link.
    /// With a read-only handle it is only opened (`None` when there is none).
    ///
    /// # Errors
    /// [`UserFsError`] naming what is wrong.
    pub fn lock_file(&self, name: &str) -> Result<Option<File>, UserFsError> {
        let shown = self.shown(name);
        let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        flags |= if self.writable {
            OFlags::RDWR | OFlags::CREATE
        } else {
            OFlags::RDONLY
        };
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o666)) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(UserFsError::WrongType {
                    path: shown,
                    what: "a symbolic link".into(),
                    expected: "a regular file",
                })
            }
            // A socket cannot be opened (ENXIO): say what it is, as for a FIFO.
            Err(Errno::NXIO) => return Err(not_openable(&self.fd, name, &shown)),
            Err(e) => return Err(io("open", &shown, e)),
        };
        if self.writable {
            self.check_own_file(&fd, &shown)?;
        } else {
            let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &shown, e))?;
            check_regular(&st, &shown, u64::MAX)?;
        }
        Ok(Some(File::from(fd)))
    }

    fn check_own_file(&self, fd: &OwnedFd, shown: &Path) -> Result<(), UserFsError> {
        let st = rustix::fs::fstat(fd).map_err(|e| io("inspect", shown, e))?;
        check_regular(&st, shown, u64::MAX)?;
        if st.st_uid != euid() || st.st_nlink != 1 {
            return Err(UserFsError::WrongType {
                path: shown.to_path_buf(),
                what: format!("a file of uid {} with {} link(s)", st.st_uid, st.st_nlink),
                expected: "a file of yours with one link",
            });
        }
        Ok(())
    }

    /// Rename `from` to `to` in this directory (a link at `to` is replaced, not followed).
    ///
    /// # Errors
    /// I/O.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), UserFsError> {
        self.check_writable()?;
        rustix::fs::renameat(&self.fd, from, &self.fd, to)
            .map_err(|e| io("rename", &self.shown(from), e))
    }

    /// Remove the non-directory `name`; false when there was none.
    ///
    /// # Errors
    /// I/O.
    pub fn unlink(&self, name: &str) -> Result<bool, UserFsError> {
        self.check_writable()?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io("remove", &self.shown(name), e)),
        }
    }
}
