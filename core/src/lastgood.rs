//! The last node configuration that loaded, kept for the epilog.
//!
//! A config push with a typo must not strand GPUs: the epilog needs `state_dir` (and
//! `nvml_library`, `mps_control`) to restore what running jobs' journals recorded, and a
//! broken colloc.toml says none of them. So each time root loads the config successfully
//! (prolog, epilog), colloc keeps a copy of its text beside it, `<config>.last-good`
//! (`/etc/slurm/colloc.toml.last-good`), root's, mode 0600, written only when the text
//! changed. When the config is broken, the epilog uses that copy, and where there is none
//! (a node that never loaded a good config), the packaged defaults (`state_dir =
//! /var/lib/colloc`). The copy lies in the config's own directory, which root already
//! requires to be root's alone (`Config::load_trusted`), so nobody else can plant or
//! change it; it is read back through the same checks.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError};

/// Where the copy of `config` lives: `<config>.last-good`.
pub fn path(config: &Path) -> PathBuf {
    let mut p = OsString::from(config.as_os_str());
    p.push(".last-good");
    PathBuf::from(p)
}

/// Keep `text`, the content of `config` that just loaded, as its last good copy. Does
/// nothing when the copy already holds it.
///
/// # Errors
/// The copy could not be written (a read-only `/etc`, say): the caller logs it.
pub fn remember(config: &Path, text: &[u8]) -> std::io::Result<()> {
    let dest = path(config);
    if std::fs::read(&dest).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let tmp = path(&dest);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let written = f.write_all(text).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &dest)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// What the epilog uses when `config` is broken: its last good copy, else the packaged
/// defaults. Says which, for the log.
pub fn recall(config: &Path) -> (Config, String) {
    let copy = path(config);
    match Config::load_trusted(&copy) {
        Ok(c) => (c, format!("the last good copy {}", copy.display())),
        Err(ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => (
            Config::default(),
            format!(
                "the packaged defaults (state_dir = {}; there is no {})",
                Config::default().state_dir.display(),
                copy.display()
            ),
        ),
        Err(e) => (
            Config::default(),
            format!(
                "the packaged defaults (state_dir = {}; {e})",
                Config::default().state_dir.display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn the_copy_is_kept_beside_the_config_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = dir.path().join("colloc.toml");
        assert_eq!(path(&cfg), dir.path().join("colloc.toml.last-good"));
        let good = b"version = 1\nstate_dir = \"/srv/colloc-state\"\n";
        remember(&cfg, good).unwrap();
        let meta = std::fs::metadata(path(&cfg)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(path(&cfg)).unwrap(), good);
        // Unchanged text: not rewritten.
        let before = meta.modified().unwrap();
        remember(&cfg, good).unwrap();
        assert_eq!(
            std::fs::metadata(path(&cfg)).unwrap().modified().unwrap(),
            before
        );
        let (c, from) = recall(&cfg);
        assert_eq!(c.state_dir, Path::new("/srv/colloc-state"), "{from}");
        assert!(from.contains("last good copy"), "{from}");
    }

    #[test]
    fn without_a_copy_the_packaged_defaults_are_used() {
        let dir = tempfile::tempdir().unwrap();
        let (c, from) = recall(&dir.path().join("colloc.toml"));
        assert_eq!(c, Config::default());
        assert!(
            from.contains("packaged defaults (state_dir = /var/lib/colloc"),
            "{from}"
        );
    }
}
