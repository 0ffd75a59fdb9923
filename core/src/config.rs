//! The node configuration, `/etc/slurm/colloc.toml` (plugstack argument `config=PATH`
//! overrides). Unknown keys and a missing or unknown `version` are errors.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::mode::{Mode, ModeKind};

/// Where the node configuration lives unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/slurm/colloc.toml";
/// The configuration format version this build understands.
pub const VERSION: u32 = 1;

/// Directories searched for a bare `mps_control` name: the prolog runs without PATH.
pub const SYSTEM_BIN_DIRS: &[&str] = &[
    "/usr/local/nvidia/bin",
    "/usr/local/cuda/bin",
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
];

/// Why a configuration was rejected. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column where known.
        message: String,
    },
    /// A value that parses but makes no sense.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what is valid.
        message: String,
    },
}

/// The node configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Format version; must be [`VERSION`].
    pub version: u32,
    /// Mode kinds users may ask for.
    #[serde(default = "default_allowed", deserialize_with = "de_kinds")]
    pub allowed_modes: Vec<ModeKind>,
    /// Mode used when a job does not ask for one.
    #[serde(default = "default_mode", deserialize_with = "de_mode")]
    pub default_mode: Mode,
    /// Per-job journals and locks (root-only).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Per-job MPS pipe and log directories.
    #[serde(default = "default_run_dir")]
    pub run_dir: PathBuf,
    /// libnvidia-ml to load: a name for the dynamic loader, or a path.
    #[serde(default = "default_nvml")]
    pub nvml_library: String,
    /// The MPS control program: a path, or a bare name looked up in [`SYSTEM_BIN_DIRS`].
    #[serde(default = "default_mps_control")]
    pub mps_control: String,
    /// May the prolog switch MIG mode on and off itself.
    #[serde(default)]
    pub allow_mig_mode_change: bool,
}

fn default_allowed() -> Vec<ModeKind> {
    vec![ModeKind::Naive, ModeKind::Mps, ModeKind::Mig]
}
fn default_mode() -> Mode {
    Mode::Off
}
fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/colloc")
}
fn default_run_dir() -> PathBuf {
    PathBuf::from("/run/colloc")
}
fn default_nvml() -> String {
    "libnvidia-ml.so.1".into()
}
fn default_mps_control() -> String {
    "nvidia-cuda-mps-control".into()
}

fn de_kinds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ModeKind>, D::Error> {
    let names: Vec<String> = Vec::deserialize(d)?;
    names
        .iter()
        .map(|n| {
            n.parse::<ModeKind>().map_err(|_| {
                serde::de::Error::custom(format!(
                    "allowed_modes: unknown mode {}; valid: naive, mps, mig, off",
                    crate::mode::show_input(n)
                ))
            })
        })
        .collect()
}

fn de_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    let s = String::deserialize(d)?;
    s.parse::<Mode>()
        .map_err(|e| serde::de::Error::custom(format!("default_mode: {e}")))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: VERSION,
            allowed_modes: default_allowed(),
            default_mode: default_mode(),
            state_dir: default_state_dir(),
            run_dir: default_run_dir(),
            nvml_library: default_nvml(),
            mps_control: default_mps_control(),
            allow_mig_mode_change: false,
        }
    }
}

impl Config {
    /// Read and validate a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] for an unreadable file, bad TOML, unknown keys, a missing or
    /// unknown version, or values that make no sense.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parse and validate configuration text; `path` is for messages.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        // Check the version first, so a future file gets "unknown version", not a
        // complaint about a key this build does not know.
        let raw: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse_err(one_line(&e)))?;
        match raw.get("version") {
            None => {
                return Err(parse_err(format!(
                    "missing `version` (this colloc reads version = {VERSION})"
                )))
            }
            Some(toml::Value::Integer(v)) if *v == i64::from(VERSION) => {}
            Some(v) => {
                return Err(parse_err(format!(
                    "unknown version {v} (this colloc reads version = {VERSION})"
                )))
            }
        }
        let cfg: Config = toml::from_str(text).map_err(|e| parse_err(one_line(&e)))?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        for (key, dir) in [("state_dir", &self.state_dir), ("run_dir", &self.run_dir)] {
            if !dir.is_absolute() {
                return Err(invalid(format!(
                    "{key} must be an absolute path, got {}",
                    dir.display()
                )));
            }
        }
        if self.nvml_library.is_empty() {
            return Err(invalid("nvml_library must not be empty".into()));
        }
        if self.mps_control.is_empty() {
            return Err(invalid("mps_control must not be empty".into()));
        }
        let kind = self.default_mode.kind();
        if kind != ModeKind::Off && !self.allowed_modes.contains(&kind) {
            return Err(invalid(format!(
                "default_mode {} is not in allowed_modes",
                self.default_mode
            )));
        }
        Ok(())
    }

    /// Is this mode allowed on the node? `off` always is.
    ///
    /// # Errors
    /// A one-line message naming the allowed modes.
    pub fn check_allowed(&self, mode: &Mode) -> Result<(), String> {
        let kind = mode.kind();
        if kind == ModeKind::Off || self.allowed_modes.contains(&kind) {
            return Ok(());
        }
        let allowed: Vec<&str> = self.allowed_modes.iter().map(|k| k.as_str()).collect();
        Err(format!(
            "mode {mode} is not allowed on this cluster; allowed: off{}{}",
            if allowed.is_empty() { "" } else { ", " },
            allowed.join(", ")
        ))
    }

    /// The MPS control program's absolute path: as configured when it contains a `/`,
    /// else the first match in [`SYSTEM_BIN_DIRS`].
    pub fn mps_control_path(&self) -> Option<PathBuf> {
        resolve_program(&self.mps_control)
    }

    /// Directory of per-job journals.
    pub fn jobs_dir(&self) -> PathBuf {
        self.state_dir.join("jobs")
    }

    /// Directory of per-GPU lock files.
    pub fn locks_dir(&self) -> PathBuf {
        self.state_dir.join("locks")
    }
}

/// Resolve a program: a path containing `/` as is, a bare name in [`SYSTEM_BIN_DIRS`].
pub fn resolve_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    SYSTEM_BIN_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn one_line(e: &toml::de::Error) -> String {
    // toml's messages span lines (source excerpt); keep "line N, column M" and the reason.
    let msg = e.message().trim().replace('\n', "; ");
    match e.span() {
        Some(span) => format!("{msg} (at byte {})", span.start),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::parse(s, Path::new("test.toml"))
    }

    #[test]
    fn full_example_parses() {
        let c = parse(
            r#"
version = 1
allowed_modes = ["naive", "mps", "mig"]
default_mode = "off"
state_dir = "/var/lib/colloc"
run_dir = "/run/colloc"
nvml_library = "libnvidia-ml.so.1"
mps_control = "nvidia-cuda-mps-control"
allow_mig_mode_change = false
"#,
        )
        .unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn minimal_takes_defaults() {
        assert_eq!(parse("version = 1").unwrap(), Config::default());
    }

    #[test]
    fn rejections() {
        let cases = [
            ("", "missing `version`"),
            ("version = 2", "unknown version 2"),
            ("version = \"1\"", "unknown version \"1\""),
            ("version = 1\nbogus = 3", "unknown field `bogus`"),
            (
                "version = 1\nallowed_modes = [\"gpu\"]",
                "unknown mode \"gpu\"",
            ),
            (
                "version = 1\ndefault_mode = \"mig:\"",
                "default_mode: invalid mode",
            ),
            (
                "version = 1\nstate_dir = \"rel\"",
                "state_dir must be an absolute path",
            ),
            (
                "version = 1\nallowed_modes = [\"mps\"]\ndefault_mode = \"naive\"",
                "not in allowed_modes",
            ),
            (
                "version = 1\nallow_mig_mode_change = \"yes\"",
                "invalid type",
            ),
            ("version = [", "invalid"),
        ];
        for (text, want) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{text:?}: {err}");
            assert!(err.starts_with("test.toml: "), "{err}");
        }
    }

    #[test]
    fn allowed_modes_check() {
        let c = parse("version = 1\nallowed_modes = [\"mps\"]").unwrap();
        assert!(c.check_allowed(&Mode::Off).is_ok());
        assert!(c.check_allowed(&"mps:2".parse().unwrap()).is_ok());
        let err = c.check_allowed(&"mig:3g".parse().unwrap()).unwrap_err();
        assert_eq!(
            err,
            "mode mig:3g is not allowed on this cluster; allowed: off, mps"
        );
    }
}
