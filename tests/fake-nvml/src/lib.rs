//! A fake libnvidia-ml for testing MIG reconfiguration without a GPU.
//!
//! Built as a cdylib (`libfake_nvml.so`) that exports the subset of the NVML C API colloc
//! and nvml-wrapper call, with the real struct layouts (from `nvml-wrapper-sys`) and the
//! driver's return codes. Its state lives in a JSON file (`COLLOC_FAKE_NVML_STATE`, else
//! `/run/colloc-fake-nvml/state.json`), created on first use with the models named in
//! `COLLOC_FAKE_NVML_GPUS`, and locked on every call so concurrent processes agree.
//! Faults are injected through the same file (see [`state::Fault`]); `fake-nvml-ctl`
//! edits it from the shell.
//!
//! - [`tables`]: GPU models and MIG profiles (the test oracle, independent of colloc).
//! - [`state`]: the state and the driver's rules, pure Rust.
//! - [`store`]: the state file, its lock and fault counting.
//! - [`ffi`]: the exported C functions.
//! - [`locate`]: where a test finds the library.
#![deny(missing_docs)]

pub mod caps;
pub mod ffi;
pub mod locate;
pub mod state;
pub mod store;
mod sys;
pub mod tables;
