//! The layout of `state_dir`: the root-only directories colloc keeps there (`jobs`,
//! `locks`, `corrupt`), opened and checked through [`crate::fs`]. It knows paths only,
//! not the configuration, so both [`crate::config`] (checking a node's paths) and
//! [`crate::journal`] (reading and writing in them) build on it without importing each
//! other.

use std::path::Path;

use crate::fs::{Dir, FsError};

/// Where unreadable journals are moved, inside `state_dir`.
pub const CORRUPT_DIR: &str = "corrupt";

/// Where each slurmd that loaded colloc leaves its start marker (see `slurmdmark`).
pub const SLURMD_DIR: &str = "slurmd";

/// The directories colloc keeps in `state_dir`.
pub const SUB_DIRS: [&str; 4] = ["jobs", "locks", CORRUPT_DIR, SLURMD_DIR];

/// `state_dir`, opened and checked (made, mode 0700, when `create`); `None` when it does
/// not exist.
fn open(state_dir: &Path, create: bool) -> Result<Option<Dir>, FsError> {
    if create {
        return Ok(Some(Dir::create_trusted(state_dir, 0o700)?));
    }
    match Dir::open_trusted(state_dir) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A root-only directory in `state_dir` (`jobs`, `locks`, `corrupt`), opened and checked
/// (made, mode 0700, when `create`); `None` when it does not exist.
///
/// # Errors
/// [`FsError`]: it (or a directory above) is not safe, or cannot be made or read.
pub fn sub_dir(state_dir: &Path, name: &str, create: bool) -> Result<Option<Dir>, FsError> {
    let Some(state) = open(state_dir, create)? else {
        return Ok(None);
    };
    let dir = match state.open_dir(name)? {
        Some(d) => d,
        None if create => match state.make_dir(name, 0o700) {
            Ok(d) => d,
            // Made by another colloc process just now.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => match state.open_dir(name)? {
                Some(d) => d,
                None => return Err(e),
            },
            Err(e) => return Err(e),
        },
        None => return Ok(None),
    };
    dir.check_private()?;
    Ok(Some(dir))
}

/// Check `state_dir` (as far as it exists) and its [`SUB_DIRS`]: root's, writable by no
/// one else, and so is every directory above.
///
/// # Errors
/// [`FsError`] naming the first directory that is not safe.
pub fn check(state_dir: &Path) -> Result<(), FsError> {
    crate::fs::check_dir_path(state_dir)?;
    for name in SUB_DIRS {
        sub_dir(state_dir, name, false)?;
    }
    Ok(())
}
