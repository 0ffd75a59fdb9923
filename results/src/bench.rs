//! What `colloc bench` found, as a typed report (`bench.json`, schema 3) with its rules
//! and forms: the command's runner measures, this module judges and writes.
//!
//! - [`report`]: the report's model and its table, JSON, CSV and HTML forms;
//!   [`crate::export::bench::BENCH_FILES`] the files of a bench directory, one line each.
//! - [`stats`]: the spread of repeated measurements and the uncertainty of ratios.
//! - [`answer`]: wide cells and the rule that names the configuration to run.
//! - [`cell`]: how a configuration is named; [`busy`]: how busy one copy keeps the GPU
//!   (GPM's SM activity, else utilization).
//! - [`host`]: the host a report comes from; [`compare`]: two reports side by side, and
//!   [`comparison`] what bench.json records of it.

pub mod answer;
pub mod busy;
pub mod cell;
pub mod compare;
pub mod comparison;
pub mod host;
pub mod report;
pub mod stats;
