//! `colloc run`: pack many runs onto the allocation's slots.
use std::process::ExitCode;

/// Arguments of `colloc run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {}

/// Entry point of `colloc run`.
pub fn main(_args: RunArgs, _g: &crate::Global) -> anyhow::Result<ExitCode> {
    Err(crate::bad_input("colloc run is not built yet"))
}
