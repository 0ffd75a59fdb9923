//! `colloc bench`: measure collocation on the user's own workload.
//!
//! A client of the pack engine ([`crate::engine`]): it runs the command once to warm up,
//! then alone (solo), then N copies on N slots under each mode the node allows, and
//! compares aggregate throughput over the copies' common steady-state window. The same
//! throughput patterns, process supervision, GPU sampler, durations and CSV writer as
//! `colloc run`. Every copy and daemon it starts is stopped before it returns, also on
//! SIGINT, SIGTERM and SIGHUP.
//!
//! - [`args`]: the command line, checked.
//! - [`plan`]: which counts (`--counts auto`), in which order (rounds of `--repeat`), and
//!   what fits `--budget`.
//! - [`runner`]: running the configurations through the engine.
//! - [`analysis`]: slowdown, whether copies fit in memory, how far solo can be trusted
//!   (GPU figures are the engine's, as for `colloc run`: [`colloc_results::telemetry::attempts`]).
//!
//! What a benchmark found — its report, the spread and answer rules, the comparison of
//! two reports — is the results library's: [`colloc_results::bench`].

mod analysis;
mod args;
mod plan;
mod runner;

use std::process::ExitCode;

use anyhow::Context;

pub use args::BenchArgs;

use colloc_results::bench::compare;

use crate::engine::launch::LocalLauncher;
use crate::engine::signals::Signals;

/// Entry point of `colloc bench`.
///
/// # Errors
/// Bad arguments or configuration (exit 2); the solo run failing, a signal, or reports
/// that cannot be written (exit 1).
pub fn main(args: BenchArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    let spec = match args::Task::from_args(args)? {
        args::Task::Measure(spec) => spec,
        args::Task::Compare(old, new) => return compare_only(&old, &new),
    };
    // Before any thread exists: the launcher is forked from this process.
    let mut launcher = LocalLauncher::start().context("cannot start the run launcher")?;
    let config = crate::nodecfg::config_or_default(g)?;
    let signals = Signals::install().context("cannot install signal handlers")?;
    runner::run(&spec, &config, &mut launcher, &signals)
}

/// `colloc bench --compare OLD.json NEW.json`: print how NEW differs from OLD.
fn compare_only(old: &std::path::Path, new: &std::path::Path) -> anyhow::Result<ExitCode> {
    let load = |p: &std::path::Path| {
        compare::load(p).map_err(|e| crate::bad_input(format!("--compare: {e}")))
    };
    let (o, n) = (load(old)?, load(new)?);
    let c = compare::compare(&old.display().to_string(), &o, &n);
    out!("{}", c.text);
    Ok(ExitCode::SUCCESS)
}
