//! [`Dir`]: an open, checked directory that root works relative to (`openat`,
//! `mkdirat`, `fchown`, `unlinkat`, `renameat`), so a name swapped for a link is never
//! followed.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::tree::{empty_tree, ESCAPED};
use super::walk::{walk, Walked, Want};
use super::{
    check_dir, check_file, check_name, file_type, group_or_other_writable, io, read_file_capped,
    trusted_owner, type_name, FsError, DIR_FLAGS,
};
use crate::sys::{self, ChildEnd};

/// An open directory that root works relative to.
#[derive(Debug)]
pub struct Dir {
    pub(super) fd: OwnedFd,
    pub(super) path: PathBuf,
}

impl Dir {
    /// Open a directory that only root can change, checking it and each directory above.
    ///
    /// # Errors
    /// [`FsError`]: missing, or not safe.
    pub fn open_trusted(path: &Path) -> Result<Dir, FsError> {
        match walk(path, Want::Dir(None))? {
            Walked::Dir(fd, path) => Ok(Dir { fd, path }),
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
            Walked::Dir(fd, path) => Ok(Dir { fd, path }),
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

    /// Give the entry `name` (never a link: it is looked at first) to `uid`, keeping its
    /// group, with exactly `mode`: a socket root made here for one user.
    ///
    /// # Errors
    /// [`FsError`]: missing, a link, or I/O.
    pub fn give_entry(&self, name: &str, uid: u32, mode: u32) -> Result<(), FsError> {
        let c = check_name(name)?;
        let path = self.path.join(name);
        match self.lstat(name)? {
            None => return Err(io("look up", &path, Errno::NOENT)),
            Some(st) if file_type(&st) == FileType::Symlink => {
                return Err(FsError::WrongType {
                    path,
                    what: "a link",
                    expected: "anything but a link",
                })
            }
            Some(_) => {}
        }
        rustix::fs::chownat(
            &self.fd,
            &c,
            Some(rustix::fs::Uid::from_raw(uid)),
            None,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io("change the owner of", &path, e))?;
        rustix::fs::chmodat(&self.fd, &c, Mode::from_raw_mode(mode), AtFlags::empty())
            .map_err(|e| io("set the mode of", &path, e))
    }

    /// Set this directory's mode (on the open descriptor).
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn set_mode(&self, mode: u32) -> Result<(), FsError> {
        rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode))
            .map_err(|e| io("set the mode of", &self.path, e))
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
        super::dir_entries(&self.fd).map_err(|e| io("read", &self.path, e))
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
        self.write_file_mode(name, data, 0o600)
    }

    /// [`Dir::write_file`] with the file's `mode` (e.g. 0644 for a file another service
    /// reads, such as node_exporter's textfile collector).
    ///
    /// # Errors
    /// [`FsError::Io`] (`ENOSPC`, …); `name` is then as it was.
    pub fn write_file_mode(&self, name: &str, data: &[u8], mode: u32) -> Result<(), FsError> {
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
        // Exactly `mode`, whatever the umask; before any byte is written.
        if let Err(e) = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)) {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            return Err(io("set the mode of", &tmp_path, e));
        }
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
        if let Err(e) = rustix::fs::renameat(&self.fd, &tmp, &self.fd, &c) {
            // Nothing of this write is left behind (a directory at `name`, EXDEV, …).
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            return Err(io("rename into", &self.path.join(name), e));
        }
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
