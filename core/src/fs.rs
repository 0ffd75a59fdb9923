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
//!
//! The rooms: this file has the errors and the ownership and type checks; `walk`
//! resolves configured paths from `/`; `dir` is the open directory root works relative
//! to; `tree` empties a user's tree as that user.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, OFlags, Stat};
use rustix::io::Errno;

use crate::sys;

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

mod dir;
#[cfg(test)]
mod tests;
mod tree;
mod walk;

pub use dir::Dir;
pub use walk::{check_dir_path, open_trusted_file, read_capped, read_file_capped};

/// The names in the open directory `fd` (without `.` and `..`), sorted, with their types:
/// the one directory listing under root's [`Dir`] and the user side's checked directories.
///
/// # Errors
/// The directory cannot be read.
pub fn dir_entries(
    fd: impl std::os::fd::AsFd,
) -> Result<Vec<(std::ffi::OsString, FileType)>, Errno> {
    Ok(dir_entries_at_most(fd, usize::MAX)?.unwrap_or_default())
}

/// [`dir_entries`], or `None` as soon as the directory holds more than `limit` names: a
/// directory of millions of names costs no more than `limit` of them to refuse.
///
/// # Errors
/// The directory cannot be read.
pub fn dir_entries_at_most(
    fd: impl std::os::fd::AsFd,
    limit: usize,
) -> Result<Option<Vec<(std::ffi::OsString, FileType)>>, Errno> {
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            if out.len() == limit {
                return Ok(None);
            }
            out.push((
                std::ffi::OsStr::from_bytes(name).to_os_string(),
                e.file_type(),
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(out))
}

/// Read at most `limit` bytes from an open file: `None` when it holds more (one byte more
/// is read to know). The one capped read under root's and the user side's readers.
///
/// # Errors
/// A read error.
pub fn read_at_most(f: std::fs::File, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}
