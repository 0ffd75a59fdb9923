//! `colloc bench`: measure collocation on a workload.
use std::process::ExitCode;

/// Arguments of `colloc bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

/// Entry point of `colloc bench`.
pub fn main(_args: BenchArgs, _g: &crate::Global) -> anyhow::Result<ExitCode> {
    Err(crate::bad_input("colloc bench is not built yet"))
}
