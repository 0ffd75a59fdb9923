//! Resolving a configured path from `/`, one component at a time, each directory
//! checked on its open descriptor; reading a trusted file with a size cap.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::{
    check_absolute, check_dir, check_file, file_type, io, trusted_owner, type_name, FsError,
    DIR_FLAGS,
};

/// What the last component of a trusted walk must be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// A directory; missing components are made with this mode when `Some`.
    Dir(Option<u32>),
    /// A regular file.
    File,
    /// Only the directories that exist: a missing component ends the walk (fine).
    ExistingPrefix,
}

pub(super) enum Walked {
    /// The directory, open, and the path it was reached by (`fs::dir` makes its `Dir`).
    Dir(OwnedFd, PathBuf),
    File(std::fs::File),
    Missing,
}

/// The components of `path` a walk goes through: names and `..`.
pub(super) fn components(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        _ => None,
    })
}

/// Resolve `path` from `/`, one component at a time, checking each directory on its open
/// descriptor; root's own symbolic links are followed (at most 40).
pub(super) fn walk(path: &Path, want: Want) -> Result<Walked, FsError> {
    check_absolute(path)?;
    let mut todo: VecDeque<OsString> = components(path).collect();
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
        let Some((st, created)) = look_up(cur, &name, &here, want, last)? else {
            return Ok(Walked::Missing);
        };
        match file_type(&st) {
            FileType::Symlink => {
                links += 1;
                let target = read_trusted_link(cur, &name, &here, &st, links)?;
                if target.is_absolute() {
                    stack.truncate(1);
                }
                for c in components(&target).rev() {
                    todo.push_front(c);
                }
            }
            FileType::Directory => {
                let fd = enter_dir(cur, &name, &here, want, last, created)?;
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
        (_, Some((fd, _))) => Ok(Walked::Dir(fd, path.to_path_buf())),
        (_, None) => Err(io("resolve", path, Errno::NOENT)),
    }
}

/// Look `name` up in `cur` without following it, making it first where `want` asks for
/// missing directories to be made. Returns what it is and whether it was made here;
/// `None` where it is missing and `want` is [`Want::ExistingPrefix`].
pub(super) fn look_up(
    cur: &OwnedFd,
    name: &OsStr,
    here: &Path,
    want: Want,
    last: bool,
) -> Result<Option<(Stat, bool)>, FsError> {
    match rustix::fs::statat(cur, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some((st, false))),
        Err(Errno::NOENT) => match want {
            Want::Dir(Some(mode)) => {
                let mode = if last { mode } else { 0o755 };
                let created = match rustix::fs::mkdirat(cur, name, Mode::from_raw_mode(mode)) {
                    Ok(()) => true,
                    Err(Errno::EXIST) => false,
                    Err(e) => return Err(io("create", here, e)),
                };
                let st = rustix::fs::statat(cur, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| io("look up", here, e))?;
                Ok(Some((st, created)))
            }
            Want::ExistingPrefix => Ok(None),
            _ => Err(io("look up", here, Errno::NOENT)),
        },
        Err(e) => Err(io("look up", here, e)),
    }
}

/// The target of the symbolic link `name` in `cur`, the `links`-th of the walk: only a
/// link of root's own is followed, and at most 40.
pub(super) fn read_trusted_link(
    cur: &OwnedFd,
    name: &OsStr,
    here: &Path,
    st: &Stat,
    links: u32,
) -> Result<PathBuf, FsError> {
    if !trusted_owner(st.st_uid) {
        return Err(FsError::Unsafe {
            path: here.to_path_buf(),
            why: format!("a symbolic link owned by uid {}", st.st_uid),
        });
    }
    if links > 40 {
        return Err(io("resolve", here, Errno::LOOP));
    }
    let target =
        rustix::fs::readlinkat(cur, name, Vec::new()).map_err(|e| io("read the link", here, e))?;
    Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
}

/// Open the directory `name` in `cur` and check it (a directory just `created` gets
/// exactly the asked mode, whatever the umask).
pub(super) fn enter_dir(
    cur: &OwnedFd,
    name: &OsStr,
    here: &Path,
    want: Want,
    last: bool,
    created: bool,
) -> Result<OwnedFd, FsError> {
    let fd =
        rustix::fs::openat(cur, name, DIR_FLAGS, Mode::empty()).map_err(|e| io("open", here, e))?;
    if created {
        if let Want::Dir(Some(mode)) = want {
            let mode = if last { mode } else { 0o755 };
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
                .map_err(|e| io("set the mode of", here, e))?;
        }
    }
    let st = rustix::fs::fstat(&fd).map_err(|e| io("inspect", here, e))?;
    if last && want == Want::File {
        return Err(FsError::WrongType {
            path: here.to_path_buf(),
            what: "a directory",
            expected: "a regular file",
        });
    }
    check_dir(&st, here, last)?;
    Ok(fd)
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
    super::read_at_most(f, limit)
        .map_err(|source| FsError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?
        .ok_or_else(|| FsError::TooLarge {
            path: path.to_path_buf(),
            limit,
        })
}
