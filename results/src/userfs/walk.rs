//! Opening a directory's path one component at a time ([`walk_parent`]), following
//! only the symbolic links nobody else could have planted.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, Stat};
use rustix::io::Errno;

use super::{euid, io, type_name, UserFsError, DIR_FLAGS};

/// Most symbolic links followed on the way to a directory (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Why a symbolic link on the way to a directory colloc writes is not followed (`None`:
/// it is). Root follows only root's links; a user follows their own, root's, and those
/// of the owner of the directory holding the link (who could have put anything there
/// anyway): a link another user planted in a shared directory never redirects a write
/// (the kernel's `protected_symlinks` rule, applied to every directory on the way).
fn refuse_link(link: &Stat, dir: &Stat) -> Option<String> {
    let me = euid();
    let ok = link.st_uid == 0 || (me != 0 && (link.st_uid == me || link.st_uid == dir.st_uid));
    (!ok).then(|| {
        if me == 0 {
            format!(
                "owned by uid {}; as root colloc follows only root's links",
                link.st_uid
            )
        } else {
            format!(
                "owned by uid {}, neither you, root nor the owner of the directory holding it",
                link.st_uid
            )
        }
    })
}

/// Refuse (as root) a directory on the way that others may rename entries of: writable
/// by group or others without the sticky bit.
pub(super) fn refuse_shared_parent(fd: &OwnedFd, shown: &Path) -> Result<(), UserFsError> {
    let st = rustix::fs::fstat(fd).map_err(|e| io("inspect", shown, e))?;
    if st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0 {
        let shown = if shown.as_os_str().is_empty() {
            Path::new(".")
        } else {
            shown
        };
        return Err(UserFsError::NotYours {
            path: shown.to_path_buf(),
            why: format!(
                "writable by group or others without the sticky bit (mode {:04o}), so others could swap what colloc writes through as root",
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(())
}

/// Open (making what is missing, as `mkdir -p`) the directory `path`, one component at
/// a time with `openat(O_NOFOLLOW|O_DIRECTORY)`: a symbolic link on the way is followed
/// only as [`refuse_link`] allows, so nobody else's link redirects where colloc writes.
/// As root, every directory on the way must pass [`refuse_shared_parent`].
pub(super) fn walk_parent(path: &Path) -> Result<OwnedFd, UserFsError> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Component;

    let root = euid() == 0;
    let open_dir = |at: &OwnedFd, name: &std::ffi::OsStr| {
        rustix::fs::openat(at, name, DIR_FLAGS, Mode::empty())
    };
    let start = if path.is_absolute() { "/" } else { "." };
    let mut fd = rustix::fs::open(start, DIR_FLAGS, Mode::empty())
        .map_err(|e| io("open", Path::new(start), e))?;
    let mut todo: VecDeque<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    let mut links = 0;
    // Where the walk is, for messages: the path as given, up to the component at hand.
    let mut shown = PathBuf::from(if path.is_absolute() { "/" } else { "" });
    while let Some(c) = todo.pop_front() {
        if root {
            refuse_shared_parent(&fd, &shown)?;
        }
        let here = shown.join(&c);
        if c != ".." {
            match rustix::fs::mkdirat(&fd, c.as_os_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io("create", &here, e)),
            }
        }
        match open_dir(&fd, &c) {
            Ok(next) => {
                fd = next;
                shown = here;
            }
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let st = rustix::fs::statat(&fd, c.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| io("look up", &here, e))?;
                let t = FileType::from_raw_mode(st.st_mode);
                if t == FileType::Directory {
                    // `openat` met a link or a file, `statat` a directory: swapped between.
                    return Err(UserFsError::Changing { path: here });
                }
                if t != FileType::Symlink {
                    return Err(UserFsError::WrongType {
                        path: here,
                        what: type_name(t).into(),
                        expected: "a directory",
                    });
                }
                let dir = rustix::fs::fstat(&fd).map_err(|e| io("inspect", &shown, e))?;
                if let Some(why) = refuse_link(&st, &dir) {
                    return Err(UserFsError::UntrustedLink { path: here, why });
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(io("open", path, Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(&fd, c.as_os_str(), Vec::new())
                    .map_err(|e| io("read the link", &here, e))?;
                let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.to_bytes()));
                if target.is_absolute() {
                    fd = rustix::fs::open("/", DIR_FLAGS, Mode::empty())
                        .map_err(|e| io("open", Path::new("/"), e))?;
                }
                for t in target.components().rev() {
                    match t {
                        Component::Normal(n) => todo.push_front(n.to_os_string()),
                        Component::ParentDir => todo.push_front("..".into()),
                        Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                    }
                }
                // Messages go on naming the path as given.
                shown = here;
            }
            Err(e) => return Err(io("open", &here, e)),
        }
    }
    Ok(fd)
}
