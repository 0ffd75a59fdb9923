//! colloc-results: everything from a sample to a file for what `colloc run` and
//! `colloc bench` measured, so a figure has one rule and a file one writer.
//!
//! - [`telemetry`]: GPU figures per attempt and per GPU, sampled through NVML;
//!   [`telemetry::attempts`] starts a sampler per pack of attempts and names its figures.
//! - [`energy`]: the one rule that shares a GPU's energy out among what ran on it.
//! - [`rules`]: throughput, measurement windows, steady and solo figures; [`num`] the
//!   median.
//! - [`record`]: the durable record of a pack (event log, schema, fold into the report's
//!   typed model, the files of a report directory).
//! - [`live`]: what a running `colloc run` says of its running runs, for the node's
//!   metrics.
//! - [`output`]: the [`output::Exporter`] trait every command prints through, chosen by
//!   name; [`export`]: the formats (table, JSON, CSV, HTML, charts) and the report files.
//! - [`bench`](mod@bench): what `colloc bench` found: its report, the spread and answer rules, and
//!   its files.
//! - [`userfs`]: the user's directories, written without following another user's links.
//! - [`text`]: terminal-safe text; [`duration`]: durations as users write them.
//!
//! The process supervision that produces the samples is the `colloc` command's engine;
//! the node and its GPUs are colloc-core's.
#![deny(missing_docs)]

pub mod bench;
pub mod duration;
pub mod energy;
pub mod export;
pub mod live;
pub mod num;
pub mod output;
pub mod record;
pub mod rules;
pub mod telemetry;
pub mod text;
pub mod userfs;

/// Bad input: usage, mode, manifest or config. Exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Shorthand: an `anyhow::Error` that exits with code 2.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}
