//! The files a run report directory holds beside its event log, each rendered from the
//! report by one function and registered by one line in [`RUN_FILES`]; written by
//! `colloc run` (after attempts end, and at the end) and by `colloc report` (into DIR when
//! it is the caller's, or `--out`). The charts are drawn apart ([`super::chart`]): they
//! cost more and are drawn only at the end.

use std::io::Write;

use super::runs;
use crate::record::fold::Streamed;
use crate::record::model::Report;
use crate::record::store::{ReportDir, REPORT_CSV, REPORT_JSON};

/// What a report file is rendered from: a whole report, or one made as it is written.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A report in memory.
    Whole(&'a Report),
    /// A report whose runs are made one at a time as they are written (the same bytes).
    Streamed(&'a Streamed<'a>),
}

/// A report file: its name in the directory, and how it is written (as it is rendered:
/// the report of a large pack is not held whole in memory twice).
pub struct RunFile {
    /// The file's name.
    pub name: &'static str,
    /// Writes its bytes.
    pub render: fn(Source<'_>, &mut dyn Write) -> std::io::Result<()>,
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

/// The runs of a [`Streamed`] report, serialized as they are made.
struct Lazy<'a>(&'a Streamed<'a>);

impl serde::Serialize for Lazy<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.runs())
    }
}

/// `colloc-report.json`: the report, pretty, one newline at the end.
fn json(report: Source<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    match report {
        Source::Whole(r) => serde_json::to_writer_pretty(&mut *out, r)?,
        Source::Streamed(s) => {
            let r = s.head().clone().with_runs(Lazy(s));
            serde_json::to_writer_pretty(&mut *out, &r)?;
        }
    }
    out.write_all(b"\n")
}

/// `colloc-runs.csv`: one row per run.
fn csv(report: Source<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    match report {
        Source::Whole(r) => runs::csv_to(out, r),
        Source::Streamed(s) => runs::write_csv(out, s.columns(), s.runs()),
    }
    .map(drop)
    .map_err(std::io::Error::other)
}

/// Write every file of [`RUN_FILES`] into `dir`, each atomically, in order.
///
/// # Errors
/// What failed, naming the file; the files after it are not written.
pub fn write_report(dir: &ReportDir, report: &Report) -> Result<(), String> {
    write_files(dir, Source::Whole(report))
}

/// [`write_report`] of a report made as it is written.
///
/// # Errors
/// As [`write_report`].
pub fn write_streamed(dir: &ReportDir, report: &Streamed<'_>) -> Result<(), String> {
    write_files(dir, Source::Streamed(report))
}

fn write_files(dir: &ReportDir, report: Source<'_>) -> Result<(), String> {
    for f in RUN_FILES {
        dir.write_with(f.name, &mut |out| (f.render)(report, out))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
