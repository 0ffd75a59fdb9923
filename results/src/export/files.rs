//! The files a run report directory holds beside its event log, each rendered from the
//! report by one function and registered by one line in [`RUN_FILES`]; written by
//! `colloc run` (after attempts end, and at the end) and by `colloc report` (into DIR when
//! it is the caller's, or `--out`). The charts are drawn apart ([`super::chart`]): they
//! cost more and are drawn only at the end.

use std::io::Write;

use super::runs;
use crate::record::model::Report;
use crate::record::store::{ReportDir, REPORT_CSV, REPORT_JSON};

/// A report file: its name in the directory, and how it is written (as it is rendered:
/// the report of a large pack is not held whole in memory twice).
pub struct RunFile {
    /// The file's name.
    pub name: &'static str,
    /// Writes its bytes.
    pub render: fn(&Report, &mut dyn Write) -> std::io::Result<()>,
}

/// Every file written from the report, in the order they are written.
pub const RUN_FILES: &[RunFile] = &[
    RunFile {
        name: REPORT_JSON,
        render: json,
    },
    RunFile {
        name: REPORT_CSV,
        render: csv,
    },
];

/// `colloc-report.json`: the report, pretty, one newline at the end.
fn json(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    out.write_all(b"\n")
}

/// `colloc-runs.csv`: one row per run.
fn csv(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let bytes = runs::csv(report).map_err(std::io::Error::other)?;
    out.write_all(&bytes)
}

/// Write every file of [`RUN_FILES`] into `dir`, each atomically, in order.
///
/// # Errors
/// What failed, naming the file; the files after it are not written.
pub fn write_report(dir: &ReportDir, report: &Report) -> Result<(), String> {
    for f in RUN_FILES {
        dir.write_with(f.name, &mut |out| (f.render)(report, out))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
