//! The `colloc` command as a library: pack training runs onto GPU slots and record how
//! they did (`run`, `bench`), and plan, apply and undo collocation layouts (`plan`,
//! `status`, `apply`, `restore`, `check-config`). The binary (`main.rs`) only calls
//! [`app::main`]; the modules are public so that unit tests of the command's logic use
//! them directly instead of driving the binary.
//!
//! What a pack measured, and every output format, are the results library's
//! ([`colloc_results`]); the node and its GPUs are colloc-core's.

#[macro_use]
mod cli;
pub mod admin;
pub mod app;
pub mod bench;
pub mod engine;
pub mod logger;
pub mod nodecfg;
pub mod plan;
pub mod report;
pub mod run;
pub mod slurm;
pub mod slurmcheck;
pub mod status;
pub mod step;

pub use cli::{bad_input, BadInput, Global};
