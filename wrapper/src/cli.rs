//! What every subcommand shares: bad-input errors (exit 2), the node configuration's
//! path, and output macros that ignore a closed stdout or stderr.

use std::path::PathBuf;

/// `println!` that ignores a closed or broken stdout (a pipe to `head`, a hung-up
/// terminal) instead of panicking half way through a pack of runs.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` that ignores a broken stdout.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `eprintln!` that ignores a broken stderr.
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

pub use colloc_results::{bad_input, BadInput};

/// Options every subcommand can read.
pub struct Global {
    /// `--config`, if given.
    pub config: Option<PathBuf>,
}

impl Global {
    /// The configuration file to use: `--config`, `$COLLOC_CONFIG`, the default.
    pub fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .or_else(|| std::env::var_os("COLLOC_CONFIG").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(colloc_core::config::DEFAULT_PATH))
    }

    /// Load the node configuration; a bad file is bad input (exit 2). As root, only one
    /// that no one else can change, naming a library and a program no one else can change
    /// ([`colloc_core::config::Config::load_for_caller`]): whoever writes it would choose
    /// what root loads or runs.
    pub fn load_config(&self) -> anyhow::Result<colloc_core::config::Config> {
        use colloc_core::config::{Config, ConfigError};
        Config::load_for_caller(&self.config_path()).map_err(|e| match e {
            ConfigError::Unsafe(_) => bad_input(format!(
                "{e}; as root colloc uses only a configuration, nvml_library and mps_control \
                 that no one but root can change (run it as the file's owner instead)"
            )),
            e => bad_input(e.to_string()),
        })
    }
}
