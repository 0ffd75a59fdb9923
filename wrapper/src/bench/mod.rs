//! `colloc bench`: measure collocation on the user's own workload.
//!
//! Runs the command alone, then N copies at once under each mode the node allows, and
//! compares aggregate throughput over a common steady-state window (see [`analysis`]).
//! Every copy and daemon it starts is stopped before it returns, also on SIGINT, SIGTERM
//! and SIGHUP.

mod analysis;
mod gpu;
mod metric;
mod plot;
mod proc;
mod report;
mod runner;
mod spec;

use std::path::PathBuf;
use std::process::ExitCode;

pub use spec::BenchArgs;

/// Entry point of `colloc bench`.
///
/// # Errors
/// Bad arguments or configuration (exit 2); the solo run failing, a signal, or reports
/// that cannot be written (exit 1).
pub fn main(args: BenchArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    let spec = spec::Spec::from_args(args)?;
    let config = load_config(g)?;
    runner::run(&spec, &config)
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
