//! `colloc status --output FILE` (issue 38): the rendering written whole or not at all, for
//! node_exporter's textfile collector, which may read the file at any moment.
//!
//! Root runs this from a timer, so the file is written the way root-side code writes
//! (SECURITY.md): FILE's directory is opened from `/` one component at a time, never
//! through a link, and must be root's and writable by no one else. A sticky directory
//! such as `/tmp` may lie above it but may not be it: there another user could put her
//! own `NAME` first, or a directory at the temporary name that stops every later write
//! (found by this change's red team). Inside it a temporary file
//! `.NAME.tmp` is made with `O_EXCL|O_NOFOLLOW`, written, fsynced, renamed over NAME and
//! the directory fsynced ([`Dir::write_file_mode`]); a link planted at NAME is replaced,
//! never followed. The file is 0644: node_exporter runs as its own user.

use std::path::Path;

use colloc_core::fs::{Dir, FsError};

/// Why `--output FILE` was refused or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// FILE is not an absolute path to a file (`/dir/name`).
    #[error(
        "--output {0}: not an absolute path to a file; give one such as \
         /var/lib/prometheus/node-exporter/colloc.prom"
    )]
    NotAFilePath(String),
    /// Its directory is missing or someone other than root could change what it holds.
    #[error("--output {file}: {source}")]
    Directory {
        /// FILE.
        file: String,
        /// Why.
        #[source]
        source: FsError,
    },
    /// Writing failed (the file is as it was).
    #[error("--output {file}: {source}")]
    Write {
        /// FILE.
        file: String,
        /// Why.
        #[source]
        source: FsError,
    },
}

impl OutputError {
    /// Is this the caller's mistake (exit 2), rather than a failed write (exit 1)?
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, OutputError::Write { .. })
    }
}

/// The file's mode: readable by node_exporter's user.
const MODE: u32 = 0o644;

/// Where `--output` writes: FILE's directory, open and checked, and FILE's name in it.
#[derive(Debug)]
pub struct Target {
    dir: Dir,
    name: String,
    shown: String,
}

impl Target {
    /// Open FILE's directory and check it, before anything is read or written.
    ///
    /// # Errors
    /// [`OutputError`]: not an absolute file path, or an unsafe or missing directory.
    pub fn open(file: &Path) -> Result<Target, OutputError> {
        let shown = file.display().to_string();
        let (dir, name) = split(file)?;
        let dir = open_dir(dir).map_err(|source| OutputError::Directory {
            file: shown.clone(),
            source,
        })?;
        Ok(Target {
            dir,
            name: name.to_string(),
            shown,
        })
    }

    /// Replace FILE with `text`, atomically.
    ///
    /// # Errors
    /// [`OutputError::Write`]: the write failed (the file is as it was).
    pub fn write(&self, text: &str) -> Result<(), OutputError> {
        self.dir
            .write_file_mode(&self.name, text.as_bytes(), MODE)
            .map_err(|source| OutputError::Write {
                file: self.shown.clone(),
                source,
            })
    }
}

/// Replace `file` with `text`, atomically, in a directory only root can change.
///
/// # Errors
/// [`OutputError`]: not an absolute file path, an unsafe or missing directory (nothing
/// written), or the write failed (the file is as it was).
#[cfg(test)]
fn write(file: &Path, text: &str) -> Result<(), OutputError> {
    Target::open(file)?.write(text)
}

/// `file`'s directory and name; a path whose last component is `.` or `..` (which `Path`
/// would read as the directory above, or not at all) is not a file path.
fn split(file: &Path) -> Result<(&Path, &str), OutputError> {
    use std::os::unix::ffi::OsStrExt;
    let shown = file.display().to_string();
    let raw = file.as_os_str().as_bytes();
    let dotted = raw.ends_with(b"/.") || raw.ends_with(b"/..");
    match (file.parent(), file.file_name().and_then(|n| n.to_str())) {
        (Some(d), Some(n)) if file.is_absolute() && !shown.ends_with('/') && !dotted => Ok((d, n)),
        _ => Err(OutputError::NotAFilePath(shown)),
    }
}

/// Open `path` as root's directory ([`Dir::open_trusted`]): root's, writable by no one
/// else, every directory above it too (a sticky one may lie above).
fn open_dir(path: &Path) -> Result<Dir, FsError> {
    Dir::open_trusted(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// A directory whose every component is trusted (under a 0755 temporary directory).
    fn trusted_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        chmod(d.path(), 0o755);
        d
    }

    #[test]
    fn the_file_is_replaced_whole_with_mode_0644_and_no_temporary_left() {
        let d = trusted_dir();
        let f = d.path().join("colloc.prom");
        std::fs::write(&f, "old\n").unwrap();
        write(&f, "# EOF\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "# EOF\n");
        assert_eq!(mode(&f), 0o644);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["colloc.prom"], "no partial or temporary file left");
    }

    #[test]
    fn a_link_planted_at_the_file_is_replaced_not_followed() {
        let d = trusted_dir();
        let target = d.path().join("target");
        std::fs::write(&target, "keep\n").unwrap();
        let f = d.path().join("colloc.prom");
        std::os::unix::fs::symlink(&target, &f).unwrap();
        write(&f, "# EOF\n").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
        assert!(std::fs::symlink_metadata(&f).unwrap().is_file());
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_partial_one() {
        let d = trusted_dir();
        let f = d.path().join("colloc.prom");
        std::fs::write(&f, "old\n").unwrap();
        // A directory where the temporary file goes: the create fails.
        std::fs::create_dir(d.path().join(".colloc.prom.tmp")).unwrap();
        let e = write(&f, "new\n").unwrap_err();
        assert!(!e.is_bad_input(), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "old\n");
    }

    #[test]
    fn a_directory_others_may_write_is_refused_and_nothing_written() {
        let d = trusted_dir();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let f = open.join("colloc.prom");
        let e = write(&f, "# EOF\n").unwrap_err();
        assert!(e.is_bad_input());
        let said = e.to_string();
        assert!(!said.contains('\n'), "one line: {said}");
        assert!(said.contains("writable by group or others"), "{said}");
        assert!(!f.exists());
    }

    /// A sticky directory may lie above FILE's directory but may not be it: there another
    /// user could plant her own file first, or a directory at the temporary name.
    #[test]
    fn a_sticky_directory_may_lie_above_but_may_not_hold_the_file() {
        let d = trusted_dir();
        let sticky = d.path().join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        chmod(&sticky, 0o1777);
        let e = write(&sticky.join("colloc.prom"), "# EOF\n").unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        assert!(!sticky.join("colloc.prom").exists());
        let below = sticky.join("metrics");
        std::fs::create_dir(&below).unwrap();
        chmod(&below, 0o755);
        write(&below.join("colloc.prom"), "# EOF\n").unwrap();
        assert_eq!(mode(&below.join("colloc.prom")), 0o644);
    }

    #[test]
    fn a_relative_path_or_a_directory_is_not_a_file_path() {
        for p in ["colloc.prom", "/", "/tmp/", "/tmp/x/.", "/tmp/x/.."] {
            let e = write(Path::new(p), "").unwrap_err();
            assert!(matches!(e, OutputError::NotAFilePath(_)), "{p}: {e}");
        }
    }
}
