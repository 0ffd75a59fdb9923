//! The `colloc` command line: its arguments (clap) and the dispatch to each command.
//!
//! Exit codes: 0 success; 1 a run or operation failed; 2 bad input (usage, mode,
//! manifest, config). Errors are one line on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cli::Global;
use crate::{admin, bench, logger, plan, report, run, status, step, BadInput};

#[derive(Parser, Debug)]
#[command(
    name = "colloc",
    version,
    about = "GPU collocation for Slurm: pack training runs onto MIG/MPS/shared GPU slots",
    long_about = None,
    propagate_version = true
)]
struct Cli {
    /// Node configuration (default: $COLLOC_CONFIG, then /etc/slurm/colloc.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// More log output (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Pack many runs onto the allocation's GPU slots and record how each performed.
    Run(run::RunArgs),
    /// Measure collocation on your own workload: solo, then N copies under each mode.
    Bench(bench::BenchArgs),
    /// Show the report of a `colloc run` directory, rebuilt from its record (also while
    /// its pack runs, or after colloc was killed).
    Report(report::ReportArgs),
    /// Show the MIG layout or MPS split a mode would make (read-only, no root needed).
    Plan(plan::PlanArgs),
    /// Show GPUs, MIG mode, instances, MPS daemons and journals colloc owns (--cluster:
    /// every node's).
    Status(status::StatusArgs),
    /// Apply a mode to a GPU for a job, as the prolog does (root).
    Apply(admin::ApplyArgs),
    /// Restore GPUs from job journals, as the epilog does (root).
    Restore(admin::RestoreArgs),
    /// Validate a node configuration file.
    CheckConfig(admin::CheckConfigArgs),
    /// The node side of `colloc run` across nodes, inside Slurm steps (not for users).
    #[command(hide = true)]
    Step(step::StepArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell (the
    /// packages install bash's, zsh's and fish's).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// An error and its causes on one line, each said once: a cause whose text the line
/// already holds (a message that ends with its source's text, as `cannot open X: No such
/// file` over the `No such file` it came from) is not repeated.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line.replace('\n', " ")
}

/// Parse the command line, run the command, and say how it ended.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help/--version print and exit 0; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    logger::init(cli.verbose);
    // No Rust panic text reaches a user: report one line and exit 1.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "internal error".into());
        errln!("colloc: internal error: {msg} (please report this)");
    }));
    let global = Global { config: cli.config };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cli.command {
        Command::Run(a) => run::main(a, &global),
        Command::Bench(a) => bench::main(a, &global),
        Command::Report(a) => report::main(a),
        Command::Plan(a) => plan::plan(a, &global),
        Command::Status(a) => status::main(a, &global),
        Command::Apply(a) => admin::apply(a, &global),
        Command::Restore(a) => admin::restore(a, &global),
        Command::CheckConfig(a) => admin::check_config(a, &global),
        Command::Step(a) => step::main(a, &global),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Into memory first: clap_complete panics on a closed stdout (`| head`).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "colloc", &mut script);
            out!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::SUCCESS)
        }
    }));
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            let code = if e.downcast_ref::<BadInput>().is_some() {
                2
            } else {
                1
            };
            errln!(
                "colloc: error: {}",
                colloc_results::text::escape(&error_line(&e))
            );
            ExitCode::from(code)
        }
        Err(_) => ExitCode::from(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `--format` option's help names every format its command has (a format added
    /// to a list is said in `--help`).
    #[test]
    fn each_format_option_names_every_format() {
        let cmd = <Cli as clap::CommandFactory>::command();
        for (sub, names) in [
            ("status", status::FORMATS.names()),
            ("status", status::CLUSTER_FORMATS.names()),
            ("plan", plan::FORMATS.names()),
            ("plan", plan::FIT_FORMATS.names()),
            ("report", report::FORMATS.names()),
        ] {
            let help = cmd
                .find_subcommand(sub)
                .and_then(|c| c.get_arguments().find(|a| a.get_id() == "format"))
                .and_then(|a| a.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            for n in names {
                assert!(
                    help.contains(n),
                    "colloc {sub} --format: {help:?} lacks {n}"
                );
            }
        }
    }

    #[test]
    fn an_error_line_says_each_cause_once() {
        let e = colloc_results::userfs::UserFsError::Io {
            what: "create",
            path: "/x/y".into(),
            source: std::io::ErrorKind::NotFound.into(),
        };
        let line = error_line(&anyhow::Error::from(e).context("--out"));
        assert_eq!(line, "--out: cannot create /x/y: entity not found");
        let e = anyhow::anyhow!("inner\nsecond").context("outer");
        assert_eq!(error_line(&e), "outer: inner second");
    }
}
