//! The node configuration as every user command reads it: one config-or-default rule and
//! one MPS control lookup (root-side commands read theirs through
//! [`colloc_core::config::Config::load_trusted`] and never look at `PATH`).

use std::path::PathBuf;

use colloc_core::config::{Config, SYSTEM_BIN_DIRS};

use crate::cli::Global;

/// The node configuration: the file named by `--config` (which must exist), else by
/// `$COLLOC_CONFIG` or at the default path, where an absent file means the defaults (a
/// machine that is not a colloc node). A file that exists but cannot be read or is not a
/// valid configuration is bad input: one line, exit 2, for every command.
///
/// # Errors
/// As above.
pub fn config_or_default(g: &Global) -> anyhow::Result<Config> {
    let path = g.config_path();
    if g.config.is_none() && !path.exists() {
        log::info!(
            "no {}; using the default node configuration",
            path.display()
        );
        return Ok(Config::default());
    }
    g.load_config()
}

/// The MPS control program for a user's command: the configured `mps_control` when it is
/// a path; a bare name in the system directories, else on `PATH`.
///
/// # Errors
/// Not found: one line saying where it looked and what to set.
pub fn mps_control(config: &Config) -> Result<PathBuf, String> {
    let name = &config.mps_control;
    if let Some(p) = config.mps_control_path().filter(|p| p.is_file()) {
        return Ok(p);
    }
    let on_path = (!name.contains('/'))
        .then(|| std::env::var_os("PATH"))
        .flatten()
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        });
    on_path.ok_or_else(|| {
        if name.contains('/') {
            format!("MPS control program {name} not found; set mps_control in the node config")
        } else {
            format!(
                "MPS control program {name} not found (looked in {} and on PATH); set mps_control in the node config",
                SYSTEM_BIN_DIRS.join(", ")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_path_is_taken_as_is_and_never_searched_for() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("nvidia-cuda-mps-control");
        std::fs::write(&prog, "").unwrap();
        let cfg = Config {
            mps_control: prog.display().to_string(),
            ..Config::default()
        };
        assert_eq!(mps_control(&cfg), Ok(prog.clone()));
        let missing = Config {
            mps_control: dir.path().join("nope").display().to_string(),
            ..Config::default()
        };
        let e = mps_control(&missing).unwrap_err();
        assert!(e.contains("not found; set mps_control"), "{e}");
    }
}
