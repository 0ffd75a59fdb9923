//! Emptying a user's directory tree, in a forked child that has become that user: it can
//! do no more than the user could.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, SeekFrom};
use rustix::io::Errno;

use super::DIR_FLAGS;
use crate::sys;

/// Exit code of [`empty_tree`]: the walk left the tree (a directory was moved meanwhile).
pub(super) const ESCAPED: i32 = 252;

pub(super) enum Stop {
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
pub(super) fn empty_tree(parent: BorrowedFd<'_>, name: &CStr, levels: &mut sys::MapStack) -> i32 {
    match empty_tree_inner(parent, name, levels) {
        Ok(()) => 0,
        Err(Stop::Errno(e)) => e.raw_os_error().clamp(1, 249),
        Err(Stop::Escaped) => ESCAPED,
    }
}

pub(super) fn open_for_removal(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
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

pub(super) fn remove_entry(dir: BorrowedFd<'_>, name: &CStr, t: FileType) -> Result<(), Errno> {
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

pub(super) fn empty_tree_inner(
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
