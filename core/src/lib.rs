//! colloc-core: the logic shared by the `colloc` command and the SPANK plugin.
//!
//! - [`mode`]: the `--colloc` mode grammar.
//! - [`mig`]: MIG profiles of the supported GPU models and the layout planner.
//! - [`config`]: the node configuration (`colloc.toml`).
//! - [`gpu`]: the GPU control interface; [`nvml`] implements it over libnvidia-ml.
//! - [`journal`]: per-job journals and per-GPU locks.
//! - [`reconfig`]: apply a mode to a job's GPUs and restore them.
//! - [`mps`]: per-job MPS control daemons.
//! - [`telemetry`]: GPU figures per attempt and per GPU, sampled through NVML.
#![deny(missing_docs)]

pub mod config;
pub mod gpu;
pub mod journal;
pub mod mig;
pub mod mode;
pub mod mps;
pub mod nvml;
pub mod reconfig;
pub mod sys;
pub mod telemetry;
