//! `colloc report DIR`: the report of a `colloc run` directory, rebuilt from its event
//! log at any time: while its pack runs (runs still going show as `running`), after it
//! finished, or after colloc was killed (attempts it never saw end show as
//! `interrupted`). Prints the table (or the JSON, the CSV, one line) and rewrites the
//! report files and charts, into DIR or `--out`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::bad_input;
use crate::export::{chart, runs};
use crate::record::fold::Fold;
use crate::record::store::{self, DirLock, LockState};
use crate::run::record::{write_report, REPORT_JSON};

/// Arguments of `colloc report`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  colloc report colloc-1234              the table, and the report files rewritten
  colloc report --json colloc-1234 | jq '.runs[] | select(.state != \"succeeded\") | .name'
  colloc report --out /tmp/r colloc-1234  leave DIR as it is; write into /tmp/r")]
pub struct ReportArgs {
    /// A report directory of `colloc run`.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the report's JSON instead of the table.
    #[arg(long, conflicts_with_all = ["csv", "quiet"])]
    json: bool,
    /// Print the CSV instead of the table.
    #[arg(long, conflicts_with = "quiet")]
    csv: bool,
    /// Print only the one-line summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Write the report files and charts here instead of into DIR.
    #[arg(long, value_name = "OUT", conflicts_with = "no_write")]
    out: Option<PathBuf>,
    /// Write nothing; only print.
    #[arg(long)]
    no_write: bool,
}

/// Entry point of `colloc report`.
///
/// # Errors
/// Bad input: DIR has no record (exit 2).
pub fn main(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let dir = &a.dir;
    if !dir.join(store::EVENTS_DIR).is_dir() {
        let old = dir.join(REPORT_JSON).is_file();
        return Err(bad_input(format!(
            "{} holds no colloc event log ({}/){}",
            dir.display(),
            store::EVENTS_DIR,
            if old {
                "; its report was made by a colloc that kept no event log (schema 1)"
            } else {
                "; give a report directory of colloc run"
            }
        )));
    }
    let (events, bad) = store::read_events(dir)
        .with_context(|| format!("cannot read the record in {}", dir.display()))?;
    if bad > 0 {
        log::warn!(
            "{bad} line(s) of the event log could not be read (cut by a kill or a full disk); skipped"
        );
    }
    let mut fold = Fold::new();
    for e in events {
        fold.apply(e);
    }
    if fold.sessions() == 0 {
        return Err(bad_input(format!(
            "{}: the event log has no session (not written by colloc run?)",
            dir.display()
        )));
    }
    let live = match DirLock::state(dir) {
        LockState::Held => Some(fold.sessions()),
        LockState::Free => None,
        LockState::Unknown => {
            log::warn!("cannot tell whether a pack still writes {} (file locks do not work there); attempts without an end show as interrupted", dir.display());
            None
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let report = fold.report(now, live);
    let mut failed = None;
    if !a.no_write {
        let out = a.out.clone().unwrap_or_else(|| dir.clone());
        let written = std::fs::create_dir_all(&out)
            .map_err(|e| format!("cannot create {}: {e}", out.display()))
            .and_then(|()| write_report(&out, &report));
        match written {
            Ok(()) => {
                chart::run_charts(&report, &out);
            }
            Err(e) => failed = Some(e),
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else if a.csv {
        let csv = runs::csv(&report)?;
        out!("{}", String::from_utf8_lossy(&csv));
    } else if a.quiet {
        outln!(
            "{}",
            runs::one_line(&report, &dir.join(REPORT_JSON).display().to_string())
        );
    } else {
        out!("{}", runs::table(&report));
        if report.running {
            outln!("(the pack is still running)");
        }
    }
    if let Some(e) = failed {
        errln!("colloc: error: {e} (--out DIR writes elsewhere, --no-write only prints)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
