//! `colloc bench`: measure collocation on the user's own workload.
//!
//! A client of the pack engine ([`crate::engine`]): it runs the command alone, then N
//! copies on N slots under each mode the node allows, and compares aggregate throughput
//! over the copies' common steady-state window. The same throughput patterns, process
//! supervision, GPU sampler, durations and CSV writer as `colloc run`. Every copy and
//! daemon it starts is stopped before it returns, also on SIGINT, SIGTERM and SIGHUP.

mod analysis;
mod args;
mod report;
mod runner;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

pub use args::BenchArgs;

use crate::engine::launch::LocalLauncher;
use crate::engine::signals::Signals;

/// Entry point of `colloc bench`.
///
/// # Errors
/// Bad arguments or configuration (exit 2); the solo run failing, a signal, or reports
/// that cannot be written (exit 1).
pub fn main(args: BenchArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    // Before any thread exists: the launcher is forked from this process.
    let mut launcher = LocalLauncher::start().context("cannot start the run launcher")?;
    let spec = args::Spec::from_args(args)?;
    let config = load_config(g)?;
    let signals = Signals::install().context("cannot install signal handlers")?;
    runner::run(&spec, &config, &mut launcher, &signals)
}

/// The node configuration: as given (`--config`, `$COLLOC_CONFIG`) or at the default
/// path; outside a managed node, where no file exists, the defaults.
fn load_config(g: &crate::Global) -> anyhow::Result<colloc_core::config::Config> {
    let explicit = g.config.is_some() || std::env::var_os("COLLOC_CONFIG").is_some();
    let path: PathBuf = g.config_path();
    if !explicit && !path.exists() {
        log::info!(
            "no {}; using the default node configuration",
            path.display()
        );
        return Ok(colloc_core::config::Config::default());
    }
    g.load_config()
}
