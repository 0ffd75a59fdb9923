//! The formats `colloc report` prints a run report in (issue 37): the table (the
//! default), the CSV and the one-line summary, each an [`Exporter`] of [`Shown`]; the
//! JSON is [`crate::output::Json`]. `report::FORMATS` lists them.

use serde::{Serialize, Serializer};

use super::runs;
use crate::output::Exporter;
use crate::record::model::Report;

/// A run report as `colloc report` shows it: the report, and the path its JSON file is
/// named by in the one-line summary (the file written, or DIR's).
pub struct Shown {
    /// The report.
    pub report: Report,
    /// Where its `colloc-report.json` is, as shown.
    pub json_file: String,
}

/// Its JSON is the report's.
impl Serialize for Shown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.report.serialize(s)
    }
}

/// The summary table, and whether the pack still runs.
pub struct Table;

impl Exporter<Shown> for Table {
    fn name(&self) -> &'static str {
        "table"
    }

    fn render(&self, s: &Shown) -> anyhow::Result<String> {
        let mut out = runs::table(&s.report);
        if s.report.running {
            out.push_str("(the pack is still running)\n");
        }
        Ok(out)
    }
}

/// `colloc-runs.csv`, as written to the report directory.
pub struct Csv;

impl Exporter<Shown> for Csv {
    fn name(&self) -> &'static str {
        "csv"
    }

    fn render(&self, s: &Shown) -> anyhow::Result<String> {
        let csv = runs::csv(&s.report)?;
        Ok(crate::text::escape_lines(&String::from_utf8_lossy(&csv)).into_owned())
    }
}

/// The one-line summary (`-q`).
pub struct Quiet;

impl Exporter<Shown> for Quiet {
    fn name(&self) -> &'static str {
        "quiet"
    }

    fn render(&self, s: &Shown) -> anyhow::Result<String> {
        Ok(format!("{}\n", runs::one_line(&s.report, &s.json_file)))
    }
}
