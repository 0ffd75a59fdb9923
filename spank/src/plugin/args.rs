//! The plugstack.conf arguments (`config=`, `default=`, `test_panic=`) and the `--help`
//! line they give.

use std::path::{Path, PathBuf};

use colloc_core::config::DEFAULT_PATH;
use colloc_core::mode::Mode;

/// The plugstack.conf arguments: `config=PATH`, `default=MODE`, and, only in a plugin
/// built with the `test-seams` feature (the test suite's, never a package's), the
/// argument `test_panic=option|task` for tests of the plugin's panic containment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// The node configuration file.
    pub config: PathBuf,
    /// Mode for jobs without `--colloc`; overrides the config's `default_mode`.
    pub default: Option<Mode>,
    /// Panic on purpose in this callback (tests only): shows on a real cluster that a
    /// panic stays inside the plugin, fails that one submission or task with a message,
    /// and takes down neither sbatch nor slurmstepd. Always `None` in a release plugin.
    pub test_panic: Option<TestPanic>,
}

/// The arguments a plugin accepts, for messages.
#[cfg(feature = "test-seams")]
const VALID_ARGS: &str = "config=PATH, default=MODE, test_panic=option|task";
/// The arguments a plugin accepts, for messages.
#[cfg(not(feature = "test-seams"))]
const VALID_ARGS: &str = "config=PATH, default=MODE";

/// Where `test_panic=` makes the plugin panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPanic {
    /// The `--colloc` option callback in sbatch/srun/salloc.
    Option,
    /// `slurm_spank_task_init_privileged` in slurmstepd (fails the task, not the node).
    Task,
}

pub(super) fn test_panic(args: &PluginArgs, at: TestPanic) {
    if args.test_panic == Some(at) {
        panic!(
            "test_panic={} in plugstack.conf",
            if at == TestPanic::Option {
                "option"
            } else {
                "task"
            }
        );
    }
}

/// Parse the plugstack.conf arguments.
///
/// # Errors
/// An unknown argument, a relative config path or a bad default mode, in one line.
pub fn parse_args(args: &[&str]) -> Result<PluginArgs, String> {
    let mut out = PluginArgs {
        config: PathBuf::from(DEFAULT_PATH),
        default: None,
        test_panic: None,
    };
    for arg in args {
        match arg.split_once('=') {
            Some(("config", p)) if Path::new(p).is_absolute() => out.config = PathBuf::from(p),
            Some(("config", p)) => {
                return Err(format!(
                    "plugstack.conf: config={p} must be an absolute path"
                ))
            }
            #[cfg(feature = "test-seams")]
            Some(("test_panic", "option")) => out.test_panic = Some(TestPanic::Option),
            #[cfg(feature = "test-seams")]
            Some(("test_panic", "task")) => out.test_panic = Some(TestPanic::Task),
            #[cfg(feature = "test-seams")]
            Some(("test_panic", v)) => {
                return Err(format!(
                    "plugstack.conf: test_panic={}: valid: option, task",
                    colloc_core::mode::show_input(v)
                ))
            }
            Some(("default", m)) => {
                let mode = m
                    .parse::<Mode>()
                    .map_err(|e| format!("plugstack.conf: default={m}: {e}"))?;
                out.default = Some(mode);
            }
            _ => {
                return Err(format!(
                    "plugstack.conf: unknown argument {}; valid: {VALID_ARGS}",
                    colloc_core::mode::show_input(arg)
                ))
            }
        }
    }
    Ok(out)
}

/// The `--help` line.
pub fn usage(args: &PluginArgs) -> String {
    let default = args
        .default
        .as_ref()
        .map_or_else(|| "as configured (off)".to_string(), |m| m.to_string());
    format!(
        "Collocate runs on the job's GPUs with MODE = off, naive, mps, mps:N or \
         mig:P[,P...] (P = 1g, 2g, 3g, 4g, 7g or a full name like 3g.20gb, count xK), \
         optionally followed by :mps or :mps:N for an MPS daemon inside each MIG instance \
         (e.g. mig:3g, mig:2gx3, mps:4, mig:3g:mps:4). Default: {default}."
    )
}
