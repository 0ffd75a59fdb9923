//! `colloc step` (hidden): what `colloc run` starts inside Slurm steps on the nodes of a
//! multi-node job. Not for users to type.
//!
//! - `colloc step discover`: one line describing this node's slots ([`discover`]), from
//!   each task of one `srun -N<n> --ntasks-per-node=1` step.
//! - `colloc step run`: one run on this node, as its own step ([`side`]), speaking
//!   [`protocol`] over the step's stdin, stdout and stderr, and serving the run to its
//!   node's metrics ([`live`]).

use std::process::ExitCode;

pub mod discover;
pub mod live;
pub mod protocol;
pub mod side;

/// Arguments of `colloc step`.
#[derive(clap::Args, Debug)]
pub struct StepArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Print this node's slots as one line (for colloc run's discovery step).
    Discover,
    /// Run the run that colloc run sends on stdin, and report on stderr.
    Run,
}

fn nvml_library(g: &crate::Global) -> anyhow::Result<String> {
    Ok(crate::nodecfg::config_or_default(g)?.nvml_library)
}

/// Entry point of `colloc step`.
///
/// # Errors
/// See [`side::main`].
pub fn main(a: StepArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    match a.what {
        What::Discover => {
            let r = discover::gather(&nvml_library(g)?);
            for l in discover::lines(&r) {
                outln!("{l}");
            }
            Ok(ExitCode::SUCCESS)
        }
        What::Run => side::main(&nvml_library(g)?),
    }
}
