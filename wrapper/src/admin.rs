//! Admin subcommands: plan, status, apply, restore, check-config.
use std::path::PathBuf;
use std::process::ExitCode;

/// `colloc plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {}
/// `colloc status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {}
/// `colloc apply`.
#[derive(clap::Args, Debug)]
pub struct ApplyArgs {}
/// `colloc restore`.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {}
/// `colloc check-config`.
#[derive(clap::Args, Debug)]
pub struct CheckConfigArgs {
    /// The file to check.
    file: Option<PathBuf>,
}
macro_rules! todo_cmd { ($($f:ident $a:ty),*) => { $(pub fn $f(_a: $a, _g: &crate::Global) -> anyhow::Result<ExitCode> { Err(crate::bad_input("not built yet")) })* } }
todo_cmd!(plan PlanArgs, status StatusArgs, apply ApplyArgs, restore RestoreArgs, check_config CheckConfigArgs);
