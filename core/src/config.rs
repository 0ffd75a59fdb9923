//! The node configuration, `/etc/slurm/colloc.toml` (plugstack argument `config=PATH`
//! overrides). Unknown keys and a missing or unknown `version` are errors.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::fs::FsError;
use crate::mode::{Mode, ModeKind};

/// Where the node configuration lives unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/slurm/colloc.toml";
/// The configuration format version this build understands.
pub const VERSION: u32 = 1;
/// Largest configuration file colloc reads.
pub const CONFIG_LIMIT: u64 = 16 << 20;

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
    /// TOML syntax, an unknown key, a wrong type, a missing or unknown version. Shown
    /// as `FILE:LINE:COLUMN: message` where the place is known (as compilers write it,
    /// so editors jump there), else `FILE: message`.
    #[error("{}{}: {message}", path.display(), at.map_or_else(String::new, |(l, c)| format!(":{l}:{c}")))]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line and column (in characters) where known.
        at: Option<(usize, usize)>,
        /// What is wrong.
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
    /// The file, or a path it names, could be changed by someone other than root: root
    /// must not act on it.
    #[error(transparent)]
    Unsafe(#[from] FsError),
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
    /// Size in MiB of the tmpfs that `colloc check-config --fix` mounts at `run_dir` (a cap
    /// on what the jobs' MPS directories, the users' leaves, can take together).
    #[serde(default = "default_run_dir_size_mib")]
    pub run_dir_size_mib: u64,
    /// Inodes of that tmpfs (its cap on files and directories).
    #[serde(default = "default_run_dir_inodes")]
    pub run_dir_inodes: u64,
    /// Size in MiB of the tmpfs of its own that each MPS job's directory
    /// (`run_dir/job-<id>`) is: all its user can put there (files, unlinked but open files,
    /// mounts of it elsewhere) is charged to it, never to `run_dir`.
    #[serde(default = "default_job_dir_size_mib")]
    pub job_dir_size_mib: u64,
    /// Inodes of each job's tmpfs.
    #[serde(default = "default_job_dir_inodes")]
    pub job_dir_inodes: u64,
    /// May the prolog switch MIG mode on and off itself.
    #[serde(default)]
    pub allow_mig_mode_change: bool,
    /// Publish the node's colloc state (jobs, modes, marked GPUs) in its Slurm node
    /// `Comment` at every prolog and epilog, for `colloc status --cluster`. colloc keeps
    /// its record in one word of the comment and leaves the admin's text around it alone.
    #[serde(default = "default_true")]
    pub node_comment: bool,
    /// Write a summary of each batch job that ran under a colloc mode into its Slurm
    /// `AdminComment` (mode, GPUs, and what its `colloc run`s reported), for `sacct`
    /// ([`crate::jobsummary`]). colloc keeps its summary in one word of the comment and
    /// leaves the rest alone.
    #[serde(default = "default_true")]
    pub job_summary: bool,
    /// `[mig]`: driver retries and waits, reconfiguration hooks, MIG device files.
    #[serde(default)]
    pub mig: crate::migconf::MigConfig,
    /// Does the node take new `--colloc` jobs? `false` switches colloc off while jobs
    /// run: new jobs asking for a mode are refused with a clear line, nothing is
    /// reconfigured, and the epilogs still restore what running jobs' journals recorded.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

fn default_true() -> bool {
    true
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
fn default_run_dir_size_mib() -> u64 {
    256
}
fn default_run_dir_inodes() -> u64 {
    65536
}
fn default_job_dir_size_mib() -> u64 {
    16
}
fn default_job_dir_inodes() -> u64 {
    4096
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
            run_dir_size_mib: default_run_dir_size_mib(),
            run_dir_inodes: default_run_dir_inodes(),
            job_dir_size_mib: default_job_dir_size_mib(),
            job_dir_inodes: default_job_dir_inodes(),
            allow_mig_mode_change: false,
            node_comment: true,
            job_summary: true,
            mig: crate::migconf::MigConfig::default(),
            enabled: true,
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
        let bytes = crate::fs::read_capped(path, CONFIG_LIMIT).map_err(|e| read_error(path, e))?;
        Config::parse_bytes(&bytes, path)
    }

    /// [`Config::load`] for root: the file, and every directory above it, must be root's
    /// and writable by no one else (a link on the way only where it is root's own): whoever
    /// can change it can make root load any library.
    ///
    /// # Errors
    /// As [`Config::load`], and [`ConfigError::Unsafe`].
    pub fn load_trusted(path: &Path) -> Result<Config, ConfigError> {
        Config::load_trusted_text(path).map(|(c, _)| c)
    }

    /// [`Config::load_trusted`], also returning the file's text (for
    /// [`crate::lastgood::remember`]).
    ///
    /// # Errors
    /// As [`Config::load_trusted`].
    pub fn load_trusted_text(path: &Path) -> Result<(Config, Vec<u8>), ConfigError> {
        let file = crate::fs::open_trusted_file(path).map_err(|e| match e {
            FsError::Unsafe { .. } => ConfigError::Unsafe(e),
            e => read_error(path, e),
        })?;
        let bytes = crate::fs::read_file_capped(file, path, CONFIG_LIMIT)
            .map_err(|e| read_error(path, e))?;
        Config::parse_bytes(&bytes, path).map(|c| (c, bytes))
    }

    /// Is this the file's own fault (bad TOML, an unknown key or version, a value that
    /// makes no sense), as opposed to a missing, unreadable or unsafe file?
    pub fn is_broken(e: &ConfigError) -> bool {
        matches!(e, ConfigError::Parse { .. } | ConfigError::Invalid { .. })
    }

    /// The configuration for a command of the caller's: root ([`crate::sys::euid`] 0) gets
    /// [`Config::load_trusted`] and, besides, an `nvml_library` and `mps_control` that no
    /// one else can change (root loads the one and may run the other: `colloc status`,
    /// `plan --gpu`, `run`, `bench` as root load NVML too); anyone else reads the file as
    /// [`Config::load`] does (what it names runs with their own rights only).
    ///
    /// # Errors
    /// As [`Config::load_trusted`] for root, [`Config::load`] for others.
    pub fn load_for_caller(path: &Path) -> Result<Config, ConfigError> {
        if crate::sys::euid() != 0 {
            return Config::load(path);
        }
        // A path typed relative to the current directory is resolved from `/` like any.
        let path = std::path::absolute(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let cfg = Config::load_trusted(&path)?;
        cfg.check_nvml_library()?;
        if let Some(p) = cfg.mps_control_path() {
            match crate::fs::open_trusted_file(&p) {
                Err(e) if !e.is_not_found() => return Err(ConfigError::Unsafe(e)),
                _ => {}
            }
        }
        Ok(cfg)
    }

    fn parse_bytes(bytes: &[u8], path: &Path) -> Result<Config, ConfigError> {
        let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            at: Some(line_column_bytes(bytes, e.valid_up_to())),
            message: format!("not UTF-8 text ({e})"),
        })?;
        Config::parse(text, path)
    }

    /// Parse and validate configuration text; `path` is for messages.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let parse_err = |at: Option<(usize, usize)>, message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            at,
            message,
        };
        let toml_err = |e: toml::de::Error| {
            let at = e.span().map(|s| line_column(text, s.start));
            parse_err(at, e.message().trim().replace('\n', "; "))
        };
        // Check the version first, so a future file gets "unknown version", not a
        // complaint about a key this build does not know.
        #[derive(Deserialize)]
        struct VersionOnly {
            version: Option<toml::Spanned<toml::Value>>,
        }
        let raw: VersionOnly = toml::from_str(text).map_err(toml_err)?;
        match raw.version {
            None => {
                return Err(parse_err(
                    Some((1, 1)),
                    format!("missing `version` (this colloc reads version = {VERSION})"),
                ))
            }
            Some(v) if v.get_ref().as_integer() == Some(i64::from(VERSION)) => {}
            Some(v) => {
                return Err(parse_err(
                    Some(line_column(text, v.span().start)),
                    format!(
                        "unknown version {} (this colloc reads version = {VERSION})",
                        v.get_ref()
                    ),
                ))
            }
        }
        let cfg: Config = toml::from_str(text).map_err(toml_err)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        for (key, dir) in [("state_dir", &self.state_dir), ("run_dir", &self.run_dir)] {
            let text = dir.as_os_str().to_string_lossy();
            if text.contains('\0') {
                return Err(invalid(format!(
                    "{key} contains a NUL character; give an absolute path such as {}",
                    if key == "state_dir" {
                        "/var/lib/colloc"
                    } else {
                        "/run/colloc"
                    }
                )));
            }
            let normal = dir
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if !dir.is_absolute() || !normal || dir == Path::new("/") {
                return Err(invalid(format!(
                    "{key} must be an absolute path without . or .. (and not /), got {}",
                    crate::mode::show_input(&text)
                )));
            }
        }
        for (key, value, lo, hi) in [
            ("run_dir_size_mib", self.run_dir_size_mib, 1, 1 << 20),
            ("run_dir_inodes", self.run_dir_inodes, 64, 1 << 32),
            ("job_dir_size_mib", self.job_dir_size_mib, 1, 1 << 16),
            ("job_dir_inodes", self.job_dir_inodes, 64, 1 << 24),
        ] {
            if !(lo..=hi).contains(&value) {
                return Err(invalid(format!(
                    "{key} must be between {lo} and {hi}, got {value}"
                )));
            }
        }
        if self.state_dir.starts_with(&self.run_dir) || self.run_dir.starts_with(&self.state_dir) {
            return Err(invalid(format!(
                "state_dir ({}) and run_dir ({}) must not lie inside one another",
                self.state_dir.display(),
                self.run_dir.display()
            )));
        }
        for (key, value, example) in [
            ("nvml_library", &self.nvml_library, "libnvidia-ml.so.1"),
            ("mps_control", &self.mps_control, "nvidia-cuda-mps-control"),
        ] {
            if value.is_empty() || value.contains('\0') {
                return Err(invalid(format!(
                    "{key} must be a file name such as {example} or an absolute path, got {}",
                    crate::mode::show_input(value)
                )));
            }
            if value.contains('/') && !Path::new(value).is_absolute() {
                return Err(invalid(format!(
                    "{key} = {}: a relative path would depend on the current directory; give \
                     a file name such as {example} or an absolute path",
                    crate::mode::show_input(value)
                )));
            }
        }
        self.mig.validate().map_err(invalid)?;
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
        if let Mode::MigMps { .. } = mode {
            // MIG instances with an MPS daemon in each: a node offers it where it offers
            // both.
            let missing: Vec<&str> = [ModeKind::Mig, ModeKind::Mps]
                .iter()
                .filter(|k| !self.allowed_modes.contains(k))
                .map(|k| k.as_str())
                .collect();
            if !missing.is_empty() {
                let allowed: Vec<&str> = self.allowed_modes.iter().map(|k| k.as_str()).collect();
                return Err(format!(
                    "mode {mode} (MPS inside MIG instances) needs both mig and mps allowed on \
                     this cluster, and {} is not; allowed: off{}{}",
                    missing.join(" and "),
                    if allowed.is_empty() { "" } else { ", " },
                    allowed.join(", ")
                ));
            }
            return Ok(());
        }
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

    /// Paths root would act on but someone else could change: `state_dir` and `run_dir`
    /// (and the directories above them), `nvml_library` where it is a path, and the
    /// `mps_control` program. Empty when all are safe.
    pub fn unsafe_paths(&self) -> Vec<FsError> {
        let mut results = vec![
            crate::statedir::check(&self.state_dir),
            crate::fs::check_dir_path(&self.run_dir),
            self.check_nvml_library(),
        ];
        if let Some(p) = self.mps_control_path() {
            results.push(crate::fs::open_trusted_file(&p).map(|_| ()));
        }
        results
            .into_iter()
            .filter_map(Result::err)
            .filter(|e| match e {
                FsError::Unsafe { .. } | FsError::WrongType { .. } => true,
                // Missing (made later, or not installed here) or not readable by this
                // user: nothing to say about its safety.
                other => {
                    log::debug!("{other}");
                    false
                }
            })
            .collect()
    }

    /// The paths of this configuration that lie inside one of `private`, the directories a
    /// job container makes private to each job (`/tmp`, `/dev/shm`, its `BasePath`:
    /// [`crate::slurmconf::SlurmFacts::private_dirs`]): the configuration file `file`
    /// itself, `state_dir`, `run_dir`, and `mps_control` and `nvml_library` where they are
    /// paths. The plugin's task hook runs inside the job's namespace and reads the file
    /// and the journal there, and the job's MPS daemons are started there: in such a
    /// directory it would find the job's own, empty one. One message naming every such
    /// setting, or `None`.
    pub fn private_path_problem(&self, file: &Path, private: &[PathBuf]) -> Option<String> {
        if private.is_empty() {
            return None;
        }
        let mut items: Vec<(&str, PathBuf)> = vec![
            ("colloc.toml", file.to_path_buf()),
            ("state_dir", self.state_dir.clone()),
            ("run_dir", self.run_dir.clone()),
        ];
        for (key, value) in [
            ("mps_control", &self.mps_control),
            ("nvml_library", &self.nvml_library),
        ] {
            if value.contains('/') {
                items.push((key, PathBuf::from(value)));
            }
        }
        let found: Vec<String> = items
            .iter()
            .filter_map(|(key, p)| {
                let dir = private.iter().find(|d| lies_in(p, d))?;
                Some(format!("{key} {} lies in {}", p.display(), dir.display()))
            })
            .collect();
        if found.is_empty() {
            return None;
        }
        let list: Vec<String> = private.iter().map(|d| d.display().to_string()).collect();
        Some(format!(
            "{}, which JobContainerType=job_container/tmpfs makes private to each job (a job \
             sees its own, empty one there); keep colloc.toml, state_dir, run_dir and \
             mps_control outside {} (the defaults /etc/slurm/colloc.toml, /var/lib/colloc \
             and /run/colloc are)",
            found.join(", "),
            list.join(", ")
        ))
    }

    /// What keeps `run_dir` from holding the job's MPS directories, other than what
    /// [`Config::unsafe_paths`] says (root's alone): the directory above it must exist
    /// (colloc makes `run_dir` itself, a fresh tmpfs folder after each boot, but not the
    /// directories above it), and it and every directory above it must be searchable by
    /// everyone (the job's user, who runs the MPS daemon, goes through them to its pipe
    /// directory): root's with mode 0755. One line, or `None`.
    pub fn run_dir_problem(&self) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        let run = &self.run_dir;
        let parent = run.parent()?;
        let mut chain: Vec<&Path> = parent.ancestors().collect();
        chain.reverse();
        match std::fs::metadata(run) {
            Ok(_) => chain.push(run),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Some(format!("run_dir {}: {e}", run.display())),
        }
        for dir in chain {
            let m = match std::fs::metadata(dir) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Some(format!(
                        "run_dir {}: {} does not exist; colloc makes run_dir itself but not \
                         the directories above it: create them, root's with mode 0755 (the \
                         default /run/colloc needs only /run)",
                        run.display(),
                        dir.display()
                    ))
                }
                Err(e) => {
                    return Some(format!("run_dir {}: {}: {e}", run.display(), dir.display()))
                }
            };
            if !m.is_dir() {
                return Some(format!(
                    "run_dir {}: {} is not a directory",
                    run.display(),
                    dir.display()
                ));
            }
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o001 == 0 {
                return Some(format!(
                    "run_dir {}: {} has mode {mode:04o}; the job's user runs its MPS daemon \
                     and must pass through it to run_dir/job-<id>/gpu<K>/pipe: make it \
                     root's with mode 0755",
                    run.display(),
                    dir.display()
                ));
            }
        }
        None
    }

    /// Check `nvml_library` where it is a path (a bare name is found by the dynamic
    /// loader in the system's library directories): root loads it into the prolog.
    ///
    /// # Errors
    /// [`FsError`] when someone other than root could change it.
    pub fn check_nvml_library(&self) -> Result<(), FsError> {
        if !self.nvml_library.contains('/') {
            return Ok(());
        }
        match crate::fs::open_trusted_file(Path::new(&self.nvml_library)) {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
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

/// Does `path` lie in `dir` (or is it `dir`)? Also where links lead: both are compared
/// as given and resolved (as far as they exist).
fn lies_in(path: &Path, dir: &Path) -> bool {
    // The deepest part that exists, resolved, and the rest as given.
    let resolved = |p: &Path| {
        p.ancestors().find_map(|a| {
            let real = std::fs::canonicalize(a).ok()?;
            Some(real.join(p.strip_prefix(a).ok()?))
        })
    };
    let paths = [Some(path.to_path_buf()), resolved(path)];
    let dirs = [Some(dir.to_path_buf()), resolved(dir)];
    paths
        .iter()
        .flatten()
        .any(|p| dirs.iter().flatten().any(|d| p.starts_with(d)))
}

fn read_error(path: &Path, e: FsError) -> ConfigError {
    let source = match e {
        FsError::Io { source, .. } => source,
        other => std::io::Error::other(other.reason()),
    };
    ConfigError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// The 1-based line and column of byte `offset` in bytes that are not all UTF-8 (the
/// valid part before it is).
fn line_column_bytes(bytes: &[u8], offset: usize) -> (usize, usize) {
    let valid = std::str::from_utf8(&bytes[..offset.min(bytes.len())]).unwrap_or_default();
    line_column(valid, valid.len())
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests;
