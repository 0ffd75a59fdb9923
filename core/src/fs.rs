//! File system work for root-side code (prolog, epilog, `colloc apply/restore`) that never
//! resolves a path through a directory a user can write (SECURITY.md).
//!
//! - Configured directories (`state_dir`, `run_dir`) are opened one component at a time
//!   from `/`, each with `O_NOFOLLOW|O_DIRECTORY` and checked on the open descriptor:
//!   owned by root (or by the calling user, for tests run without root) and writable by
//!   no one else; a sticky world-writable directory such as `/tmp` may lie above them.
//!   Symbolic links on the way are followed only where they are root's own.
//! - Everything below is done relative to those descriptors (`openat`, `mkdirat`,
//!   `fchown`, `unlinkat`, `renameat`), so a name swapped for a link is never followed.
//! - A directory that belongs to a user is emptied by a forked child that has become that
//!   user ([`Dir::remove_tree`]): it can do no more than the user could. Root then removes
//!   the emptied directory from its own parent.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, SeekFrom, Stat};
use rustix::io::Errno;

use crate::sys::{self, ChildEnd};

/// Why a path was not used or an operation failed. One line each.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// Someone other than root could change what the path means.
    #[error(
        "{path} is not safe for colloc's root-side files: {why}; it and every directory \
         above it must be owned by root and writable only by root"
    )]
    Unsafe {
        /// The path (as far as it was resolved).
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Not what was expected there (a link, a FIFO or a directory where a file belongs).
    #[error("{path} is {what}, not {expected}")]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What it is.
        what: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// A file over the size colloc reads.
    #[error("{path} is larger than {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
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

impl FsError {
    /// The OS error behind an [`FsError::Io`].
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            FsError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Is this a missing file or directory?
    pub fn is_not_found(&self) -> bool {
        self.raw_os_error() == Some(libc::ENOENT)
    }

    /// What is wrong, without the path (for messages that name the file already).
    pub fn reason(&self) -> String {
        match self {
            FsError::Unsafe { why, .. } => why.clone(),
            FsError::WrongType { what, expected, .. } => format!("{what}, not {expected}"),
            FsError::TooLarge { limit, .. } => format!("larger than {limit} bytes"),
            FsError::Io { what, source, .. } => format!("cannot {what} it: {source}"),
        }
    }
}

fn io(what: &'static str, path: &Path, e: Errno) -> FsError {
    FsError::Io {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// May a directory or file owned by `uid` be trusted? Root's, or the calling user's own
/// (a test run without root trusts its own temporary directories; root trusts only root).
pub fn is_trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == sys::euid()
}

fn trusted_owner(uid: u32) -> bool {
    is_trusted_owner(uid)
}

fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
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

fn group_or_other_writable(st: &Stat) -> bool {
    st.st_mode & 0o022 != 0
}

fn sticky(st: &Stat) -> bool {
    st.st_mode & 0o1000 != 0
}

/// Check a directory on the way to (or at) a trusted path.
fn check_dir(st: &Stat, path: &Path, last: bool) -> Result<(), FsError> {
    let unsafe_because = |why: String| FsError::Unsafe {
        path: path.to_path_buf(),
        why,
    };
    if !trusted_owner(st.st_uid) {
        return Err(unsafe_because(format!("owned by uid {}", st.st_uid)));
    }
    if group_or_other_writable(st) && (last || !sticky(st)) {
        return Err(unsafe_because(format!(
            "writable by group or others (mode {:04o})",
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

/// Check a file root reads or runs (journal, config, library, program).
fn check_file(st: &Stat, path: &Path) -> Result<(), FsError> {
    let t = file_type(st);
    if t != FileType::RegularFile {
        return Err(FsError::WrongType {
            path: path.to_path_buf(),
            what: type_name(t),
            expected: "a regular file",
        });
    }
    if !trusted_owner(st.st_uid) {
        return Err(FsError::Unsafe {
            path: path.to_path_buf(),
            why: format!("owned by uid {}", st.st_uid),
        });
    }
    if group_or_other_writable(st) {
        return Err(FsError::Unsafe {
            path: path.to_path_buf(),
            why: format!(
                "writable by group or others (mode {:04o})",
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(())
}

/// A single name inside a directory: no `/`, not `.` or `..`, no NUL.
fn check_name(name: &str) -> Result<CString, FsError> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains('/');
    match CString::new(name) {
        Ok(c) if !bad => Ok(c),
        _ => Err(FsError::WrongType {
            path: PathBuf::from(name),
            what: "not a plain file name",
            expected: "a name inside a directory",
        }),
    }
}

/// An absolute path without NUL bytes.
fn check_absolute(path: &Path) -> Result<(), FsError> {
    if !path.is_absolute() || path.as_os_str().as_bytes().contains(&0) {
        return Err(FsError::WrongType {
            path: path.to_path_buf(),
            what: "not an absolute path",
            expected: "an absolute path without NUL bytes",
        });
    }
    Ok(())
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What the last component of a trusted walk must be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A directory; missing components are made with this mode when `Some`.
    Dir(Option<u32>),
    /// A regular file.
    File,
    /// Only the directories that exist: a missing component ends the walk (fine).
    ExistingPrefix,
}

enum Walked {
    Dir(Dir),
    File(std::fs::File),
    Missing,
}

/// Resolve `path` from `/`, one component at a time, checking each directory on its open
/// descriptor; root's own symbolic links are followed (at most 40).
fn walk(path: &Path, want: Want) -> Result<Walked, FsError> {
    check_absolute(path)?;
    let mut todo: VecDeque<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    let root = rustix::fs::openat(rustix::fs::CWD, c"/", DIR_FLAGS, Mode::empty())
        .map_err(|e| io("open", Path::new("/"), e))?;
    let st = rustix::fs::fstat(&root).map_err(|e| io("inspect", Path::new("/"), e))?;
    check_dir(&st, Path::new("/"), todo.is_empty())?;
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::from("/"))];
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let last = todo.is_empty();
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let Some((cur, cur_path)) = stack.last() else {
            return Err(io("resolve", path, Errno::NOENT));
        };
        let here = cur_path.join(&name);
        let mut created = false;
        let st = match rustix::fs::statat(cur, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => match want {
                Want::Dir(Some(mode)) => {
                    let mode = if last { mode } else { 0o755 };
                    match rustix::fs::mkdirat(cur, name.as_os_str(), Mode::from_raw_mode(mode)) {
                        Ok(()) => created = true,
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(io("create", &here, e)),
                    }
                    rustix::fs::statat(cur, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| io("look up", &here, e))?
                }
                Want::ExistingPrefix => return Ok(Walked::Missing),
                _ => return Err(io("look up", &here, Errno::NOENT)),
            },
            Err(e) => return Err(io("look up", &here, e)),
        };
        match file_type(&st) {
            FileType::Symlink => {
                if !trusted_owner(st.st_uid) {
                    return Err(FsError::Unsafe {
                        path: here,
                        why: format!("a symbolic link owned by uid {}", st.st_uid),
                    });
                }
                links += 1;
                if links > 40 {
                    return Err(io("resolve", &here, Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(cur, name.as_os_str(), Vec::new())
                    .map_err(|e| io("read the link", &here, e))?;
                let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    stack.truncate(1);
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => todo.push_front(n.to_os_string()),
                        Component::ParentDir => todo.push_front(OsString::from("..")),
                        _ => {}
                    }
                }
            }
            FileType::Directory => {
                let fd = rustix::fs::openat(cur, name.as_os_str(), DIR_FLAGS, Mode::empty())
                    .map_err(|e| io("open", &here, e))?;
                if created {
                    // Exactly the asked mode, whatever the umask.
                    if let Want::Dir(Some(mode)) = want {
                        let mode = if last { mode } else { 0o755 };
                        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
                            .map_err(|e| io("set the mode of", &here, e))?;
                    }
                }
                let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &here, e))?;
                if last && want == Want::File {
                    return Err(FsError::WrongType {
                        path: here,
                        what: "a directory",
                        expected: "a regular file",
                    });
                }
                check_dir(&st, &here, last)?;
                stack.push((fd, here));
            }
            FileType::RegularFile if last && want == Want::File => {
                let fd = rustix::fs::openat(
                    cur,
                    name.as_os_str(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io("open", &here, e))?;
                let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &here, e))?;
                check_file(&st, &here)?;
                return Ok(Walked::File(std::fs::File::from(fd)));
            }
            t => {
                return Err(FsError::WrongType {
                    path: here,
                    what: type_name(t),
                    expected: if last && want == Want::File {
                        "a regular file"
                    } else {
                        "a directory"
                    },
                })
            }
        }
    }
    match (want, stack.pop()) {
        (Want::File, _) => Err(FsError::WrongType {
            path: path.to_path_buf(),
            what: "a directory",
            expected: "a regular file",
        }),
        (Want::ExistingPrefix, _) => Ok(Walked::Missing),
        (_, Some((fd, _))) => Ok(Walked::Dir(Dir {
            fd,
            path: path.to_path_buf(),
        })),
        (_, None) => Err(io("resolve", path, Errno::NOENT)),
    }
}

/// Check that `path`, as far as it exists, is a directory only root can change (and so
/// are the directories above it). A missing tail is fine: root makes it later.
///
/// # Errors
/// [`FsError`] naming the first component that is not safe.
pub fn check_dir_path(path: &Path) -> Result<(), FsError> {
    walk(path, Want::ExistingPrefix).map(|_| ())
}

/// Open a file root reads or runs, checking it and every directory above it: a regular
/// file owned by root and writable by no one else. Never blocks on a FIFO.
///
/// # Errors
/// [`FsError`] naming what is wrong.
pub fn open_trusted_file(path: &Path) -> Result<std::fs::File, FsError> {
    match walk(path, Want::File)? {
        Walked::File(f) => Ok(f),
        _ => Err(io("open", path, Errno::NOENT)),
    }
}

/// Read at most `limit` bytes of a regular file (a larger file is an error). Opened
/// without blocking, so a FIFO in its place is an error rather than a hang.
///
/// # Errors
/// [`FsError`]: unreadable, not a regular file, or too large.
pub fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("read", path, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io("read", path, e))?;
    if file_type(&st) != FileType::RegularFile {
        return Err(FsError::WrongType {
            path: path.to_path_buf(),
            what: type_name(file_type(&st)),
            expected: "a regular file",
        });
    }
    read_file_capped(std::fs::File::from(fd), path, limit)
}

/// Read at most `limit` bytes from an open file; more is an error.
///
/// # Errors
/// [`FsError::TooLarge`] or a read error.
pub fn read_file_capped(f: std::fs::File, path: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| FsError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(FsError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

/// An open directory that root works relative to.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Open a directory that only root can change, checking it and each directory above.
    ///
    /// # Errors
    /// [`FsError`]: missing, or not safe.
    pub fn open_trusted(path: &Path) -> Result<Dir, FsError> {
        match walk(path, Want::Dir(None))? {
            Walked::Dir(d) => Ok(d),
            _ => Err(io("open", path, Errno::NOENT)),
        }
    }

    /// As [`Dir::open_trusted`], making what is missing: the directories above with mode
    /// 0755, the directory itself with `mode`, all owned by the caller (root).
    ///
    /// # Errors
    /// [`FsError`]: cannot be made, or not safe.
    pub fn create_trusted(path: &Path, mode: u32) -> Result<Dir, FsError> {
        match walk(path, Want::Dir(Some(mode)))? {
            Walked::Dir(d) => Ok(d),
            _ => Err(io("open", path, Errno::NOENT)),
        }
    }

    /// The path this directory was opened as (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Status of the entry `name`, not following a link; `None` when there is none.
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn lstat(&self, name: &str) -> Result<Option<Stat>, FsError> {
        let c = check_name(name)?;
        match rustix::fs::statat(&self.fd, &c, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io("look up", &self.path.join(name), e)),
        }
    }

    /// Open the subdirectory `name` (never through a link); `None` when there is none.
    ///
    /// # Errors
    /// [`FsError`]: not a directory (a link, a file), or I/O.
    pub fn open_dir(&self, name: &str) -> Result<Option<Dir>, FsError> {
        let c = check_name(name)?;
        let path = self.path.join(name);
        match rustix::fs::openat(&self.fd, &c, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(Dir { fd, path })),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                let what = self
                    .lstat(name)?
                    .map_or("gone", |st| type_name(file_type(&st)));
                Err(FsError::WrongType {
                    path,
                    what,
                    expected: "a directory",
                })
            }
            Err(e) => Err(io("open", &path, e)),
        }
    }

    /// Make the subdirectory `name` with exactly `mode` and open it. An existing entry is
    /// an error ([`FsError::Io`] with `EEXIST`).
    ///
    /// # Errors
    /// [`FsError::Io`] (`EEXIST`, `ENOSPC`, `EDQUOT`, …).
    pub fn make_dir(&self, name: &str, mode: u32) -> Result<Dir, FsError> {
        let c = check_name(name)?;
        let path = self.path.join(name);
        rustix::fs::mkdirat(&self.fd, &c, Mode::from_raw_mode(mode & 0o700))
            .map_err(|e| io("create", &path, e))?;
        let fd = rustix::fs::openat(&self.fd, &c, DIR_FLAGS, Mode::empty())
            .map_err(|e| io("open", &path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &path, e))?;
        if st.st_uid != sys::euid() {
            // Only root writes in this directory, so this cannot happen unless someone
            // else made it in between; never hand it on.
            return Err(FsError::Unsafe {
                path,
                why: format!("made by uid {} in between", st.st_uid),
            });
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| io("set the mode of", &path, e))?;
        Ok(Dir { fd, path })
    }

    /// Give this directory to `uid`:`gid` (on the open descriptor).
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn chown(&self, uid: u32, gid: u32) -> Result<(), FsError> {
        rustix::fs::fchown(
            &self.fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(|e| io("change the owner of", &self.path, e))
    }

    /// Check that only root can change this directory: owned by root, writable by no one
    /// else.
    ///
    /// # Errors
    /// [`FsError::Unsafe`].
    pub fn check_private(&self) -> Result<(), FsError> {
        check_dir(&self.stat()?, &self.path, true)
    }

    /// This directory's status.
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn stat(&self) -> Result<Stat, FsError> {
        rustix::fs::fstat(&self.fd).map_err(|e| io("inspect", &self.path, e))
    }

    /// The names in this directory (without `.` and `..`), sorted.
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn entries(&self) -> Result<Vec<(OsString, FileType)>, FsError> {
        let err = |e| io("read", &self.path, e);
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&self.fd).map_err(err)? {
            let e = e.map_err(err)?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push((OsStr::from_bytes(name).to_os_string(), e.file_type()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Read the file `name` if it is one root can trust: a regular file (not a link, not a
    /// FIFO) owned by root, writable by no one else, at most `limit` bytes. `None` when
    /// there is none.
    ///
    /// # Errors
    /// [`FsError`] naming what is wrong.
    pub fn read_file(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, FsError> {
        let c = check_name(name)?;
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, &c, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(FsError::WrongType {
                    path,
                    what: "a symbolic link",
                    expected: "a regular file",
                })
            }
            Err(e) => return Err(io("open", &path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &path, e))?;
        check_file(&st, &path)?;
        read_file_capped(std::fs::File::from(fd), &path, limit).map(Some)
    }

    /// Replace the file `name` with `data` atomically: a temporary file `.<name>.tmp`
    /// (mode 0600), fsync, rename over `name`, fsync of the directory.
    ///
    /// # Errors
    /// [`FsError::Io`] (`ENOSPC`, …); `name` is then as it was.
    pub fn write_file(&self, name: &str, data: &[u8]) -> Result<(), FsError> {
        let c = check_name(name)?;
        let tmp_name = format!(".{name}.tmp");
        let tmp = check_name(&tmp_name)?;
        let tmp_path = self.path.join(&tmp_name);
        match rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io("remove", &tmp_path, e)),
        }
        let fd = rustix::fs::openat(
            &self.fd,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("create", &tmp_path, e))?;
        let mut f = std::fs::File::from(fd);
        let written = f.write_all(data).and_then(|()| f.sync_all());
        if let Err(source) = written {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            return Err(FsError::Io {
                what: "write",
                path: tmp_path,
                source,
            });
        }
        rustix::fs::renameat(&self.fd, &tmp, &self.fd, &c)
            .map_err(|e| io("rename into", &self.path.join(name), e))?;
        self.sync()
    }

    /// Open (making it if missing, mode 0600) a regular file root keeps here, e.g. a lock.
    ///
    /// # Errors
    /// [`FsError`]: a link or other non-file in its place, or I/O.
    pub fn open_or_create_file(&self, name: &str) -> Result<std::fs::File, FsError> {
        let c = check_name(name)?;
        let path = self.path.join(name);
        let fd = rustix::fs::openat(
            &self.fd,
            &c,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            Errno::LOOP => FsError::WrongType {
                path: path.clone(),
                what: "a symbolic link",
                expected: "a regular file",
            },
            e => io("open", &path, e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &path, e))?;
        check_file(&st, &path)?;
        Ok(std::fs::File::from(fd))
    }

    /// Remove the non-directory `name`; false when there was none.
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn unlink(&self, name: &str) -> Result<bool, FsError> {
        let c = check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, &c, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io("remove", &self.path.join(name), e)),
        }
    }

    /// Remove the empty directory `name`; false when there was none.
    ///
    /// # Errors
    /// [`FsError::Io`] (`ENOTEMPTY` when something is left in it).
    pub fn rmdir(&self, name: &str) -> Result<bool, FsError> {
        let c = check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, &c, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io("remove", &self.path.join(name), e)),
        }
    }

    /// Move `name` to `to/new_name`, never replacing an entry there.
    ///
    /// # Errors
    /// [`FsError::Io`] (`EEXIST` when `new_name` is taken).
    pub fn move_to(&self, name: &str, to: &Dir, new_name: &str) -> Result<(), FsError> {
        let from = check_name(name)?;
        let dest = check_name(new_name)?;
        // renameat2(RENAME_NOREPLACE) is not on every file system: make sure by hand.
        if to.lstat(new_name)?.is_some() {
            return Err(io("move to", &to.path.join(new_name), Errno::EXIST));
        }
        rustix::fs::renameat(&self.fd, &from, &to.fd, &dest)
            .map_err(|e| io("move", &self.path.join(name), e))
    }

    /// fsync this directory (makes renames and removals in it durable).
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn sync(&self) -> Result<(), FsError> {
        rustix::fs::fsync(&self.fd).map_err(|e| io("fsync", &self.path, e))
    }

    /// Remove `name` and everything below it, never following a link and never failing on
    /// depth, links, FIFOs or device files inside.
    ///
    /// The first `root_levels` levels are expected to be root's own (owned by root,
    /// writable by no one else): they are walked here. A directory below them, or one that
    /// belongs to someone else, is emptied by a forked child that has become its owner (so
    /// it can do no more than that user could; killed at `deadline`); root then removes the
    /// emptied directory.
    ///
    /// # Errors
    /// [`FsError`] when something is left; the caller decides (see
    /// [`crate::rundir`]: a user's files are moved aside, never a node fault).
    pub fn remove_tree(
        &self,
        name: &str,
        root_levels: u32,
        deadline: Instant,
    ) -> Result<(), FsError> {
        let Some(st) = self.lstat(name)? else {
            return Ok(());
        };
        if file_type(&st) != FileType::Directory {
            self.unlink(name)?;
            return Ok(());
        }
        let ours = trusted_owner(st.st_uid) && !group_or_other_writable(&st);
        if ours && root_levels > 0 {
            let Some(sub) = self.open_dir(name)? else {
                return Ok(());
            };
            let now = sub.stat()?;
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                // Replaced in between: only root can do that here; leave it alone.
                return Err(io("remove", &sub.path, Errno::STALE));
            }
            let mut first_err = None;
            for (entry, _) in sub.entries()? {
                let Some(entry) = entry.to_str() else {
                    // Not UTF-8: not one of ours; empty it as its owner below.
                    continue;
                };
                if let Err(e) = sub.remove_tree(entry, root_levels - 1, deadline) {
                    first_err.get_or_insert(e);
                }
            }
            if let Some(e) = first_err {
                return Err(e);
            }
            if !sub.entries()?.is_empty() {
                sub.empty_as_owner(None, &now, deadline)?;
            }
        } else {
            if trusted_owner(st.st_uid) && group_or_other_writable(&st) {
                // Root's, yet others can change it: not emptied with root's rights.
                return Err(FsError::Unsafe {
                    path: self.path.join(name),
                    why: format!(
                        "writable by group or others (mode {:04o}); left in place",
                        st.st_mode & 0o7777
                    ),
                });
            }
            // A process of the user's may still be adding files: empty it again while the
            // deadline allows (what it keeps adding is then moved aside by the caller).
            for attempt in 1.. {
                self.empty_as_owner(Some(name), &st, deadline)?;
                match self.rmdir(name) {
                    Err(e)
                        if e.raw_os_error() == Some(libc::ENOTEMPTY)
                            && attempt < 3
                            && Instant::now() < deadline =>
                    {
                        continue
                    }
                    r => return r.map(|_| ()),
                }
            }
        }
        self.rmdir(name)?;
        Ok(())
    }

    /// Empty the directory `name` (or this directory itself) in a child that has become
    /// its owner (`st`).
    fn empty_as_owner(
        &self,
        name: Option<&str>,
        st: &Stat,
        deadline: Instant,
    ) -> Result<(), FsError> {
        let (cname, path) = match name {
            Some(n) => (check_name(n)?, self.path.join(n)),
            None => (CString::from(c"."), self.path.clone()),
        };
        // Anonymous memory the child maps and grows itself (no heap there): no depth
        // limit but memory.
        let mut levels = sys::MapStack::new();
        let fd = self.fd.as_fd();
        let end = sys::run_forked_as(st.st_uid, st.st_gid, deadline, &mut || {
            empty_tree(fd, &cname, &mut levels)
        })
        .map_err(|source| FsError::Io {
            what: "start a process to empty",
            path: path.clone(),
            source,
        })?;
        let failed = |why: String| FsError::Io {
            what: "empty",
            path: path.clone(),
            source: std::io::Error::other(why),
        };
        match end {
            ChildEnd::Exited(0) | ChildEnd::Lost => Ok(()),
            ChildEnd::Exited(sys::CHILD_CREDENTIALS_FAILED) => Err(failed(format!(
                "cannot become its owner (uid {}, gid {})",
                st.st_uid, st.st_gid
            ))),
            ChildEnd::Exited(ESCAPED) => Err(failed(
                "a directory inside was moved while it was being removed".into(),
            )),
            ChildEnd::Exited(code) => Err(FsError::Io {
                what: "empty",
                path,
                source: std::io::Error::from_raw_os_error(code),
            }),
            ChildEnd::Signaled(sig) => {
                Err(failed(format!("its process was killed by signal {sig}")))
            }
            ChildEnd::TimedOut => Err(failed("it took too long; stopped".into())),
        }
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Exit code of [`empty_tree`]: the walk left the tree (a directory was moved meanwhile).
const ESCAPED: i32 = 252;

enum Stop {
    Errno(Errno),
    Escaped,
}

impl From<Errno> for Stop {
    fn from(e: Errno) -> Stop {
        Stop::Errno(e)
    }
}

/// Remove everything inside the directory `name` of `parent` (not the directory itself)
/// with the permissions of whoever runs it; returns 0, an errno value or [`ESCAPED`]. Runs
/// in a forked child ([`sys::run_forked_as`]): raw system calls on stack buffers and
/// anonymous memory it maps itself, no heap, no panics. Iterative, with one open directory
/// at a time, so depth is bounded only by memory for `levels` (one `(dev, ino)` per
/// level, 16 bytes, pushed as it descends and checked as it climbs back through `..`, so
/// it never walks out of the tree).
fn empty_tree(parent: BorrowedFd<'_>, name: &CStr, levels: &mut sys::MapStack) -> i32 {
    match empty_tree_inner(parent, name, levels) {
        Ok(()) => 0,
        Err(Stop::Errno(e)) => e.raw_os_error().clamp(1, 249),
        Err(Stop::Escaped) => ESCAPED,
    }
}

fn open_for_removal(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::ACCESS) => {
            // A directory of ours without read or search permission: give them back. (As
            // the directory's owner: a link here could only lead to what they own.)
            let _ = rustix::fs::chmodat(dir, name, Mode::RWXU, AtFlags::empty());
            rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())
        }
        r => r,
    }
}

fn remove_entry(dir: BorrowedFd<'_>, name: &CStr, t: FileType) -> Result<(), Errno> {
    let attempt = || {
        if t == FileType::Directory {
            return rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
        }
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Err(Errno::ISDIR) => rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR),
            r => r,
        }
    };
    match attempt() {
        Err(Errno::ACCESS) | Err(Errno::PERM) => {
            // Our own directory made read-only or sticky: make it ours to change again.
            let _ = rustix::fs::fchmod(dir, Mode::RWXU);
            attempt()
        }
        r => r,
    }
}

fn empty_tree_inner(
    parent: BorrowedFd<'_>,
    name: &CStr,
    levels: &mut sys::MapStack,
) -> Result<(), Stop> {
    let mut cur = open_for_removal(parent, name)?;
    let st = rustix::fs::fstat(&cur)?;
    if !levels.push((st.st_dev, st.st_ino)) {
        return Err(Stop::Errno(Errno::NOMEM));
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
    loop {
        rustix::fs::seek(&cur, SeekFrom::Start(0))?;
        let mut saw = false;
        let mut progress = false;
        let mut stuck = None;
        let mut down = None;
        {
            let mut it = RawDir::new(cur.as_fd(), &mut buf);
            while let Some(entry) = it.next() {
                let entry = entry?;
                let n = entry.file_name();
                if n == c"." || n == c".." {
                    continue;
                }
                saw = true;
                match remove_entry(cur.as_fd(), n, entry.file_type()) {
                    Ok(()) => progress = true,
                    Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => {
                        match open_for_removal(cur.as_fd(), n) {
                            Ok(fd) => {
                                down = Some(fd);
                                break;
                            }
                            Err(e) => stuck = Some(e),
                        }
                    }
                    Err(e) => stuck = Some(e),
                }
            }
        }
        if let Some(fd) = down {
            let st = rustix::fs::fstat(&fd)?;
            if levels.first().is_some_and(|top| top.0 != st.st_dev) {
                // Another file system mounted inside (a user's FUSE mount): not ours to
                // walk. Left in place, and reported.
                return Err(Stop::Errno(Errno::XDEV));
            }
            if !levels.push((st.st_dev, st.st_ino)) {
                return Err(Stop::Errno(Errno::NOMEM));
            }
            cur = fd;
            continue;
        }
        // Everything seen went: empty, unless the user adds something meanwhile (then the
        // parent's rmdir fails and the walk comes back down).
        let emptied = saw && progress && stuck.is_none();
        if !saw || emptied {
            if levels.len() <= 1 {
                return Ok(());
            }
            let up = rustix::fs::openat(
                &cur,
                c"..",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&up)?;
            levels.pop();
            if levels.top() != Some((st.st_dev, st.st_ino)) {
                return Err(Stop::Escaped);
            }
            cur = up;
            continue;
        }
        if !progress {
            return Err(Stop::Errno(stuck.unwrap_or(Errno::NOTEMPTY)));
        }
    }
}

#[cfg(test)]
mod tests;
