//! `colloc report DIR`: the report of a `colloc run` directory, rebuilt from its event
//! log at any time: while its pack runs (runs still going show as `running`), after it
//! finished, or after colloc was killed (attempts it never saw end show as
//! `interrupted`). Prints the table (or the JSON, the CSV, one self-contained HTML page,
//! one line: the formats of [`FORMATS`], chosen by name; `--json`, `--csv`, `--html`,
//! `-q` name them) and rewrites the report files and charts, into DIR (only when it is
//! the caller's) or `--out`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::bad_input;
use colloc_results::export::files::write_report;
use colloc_results::export::printed::{self, Shown};
use colloc_results::export::{chart, html};
use colloc_results::output::{self, Formats, Json};
use colloc_results::record::store::{self, LockState, RecordError, ReportDir, REPORT_JSON};
use colloc_results::userfs::UserFsError;

/// Arguments of `colloc report`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
DIR's report files and charts are rewritten only when DIR is yours, writable by no one
else and not read-only; otherwise (someone else's report, also as root) the report is
only printed and nothing is written, unless --out names a directory of yours. --json,
--csv and --html (--format json, csv, html) only print (and write only with --out).

Examples:
  colloc report colloc-1234              the table, and the report files rewritten
  colloc report --json colloc-1234 | jq '.runs[] | select(.state != \"succeeded\") | .name'
  colloc report --html colloc-1234 > result.html   one page, charts inside, to share
  colloc report --out /tmp/r colloc-1234  leave DIR as it is; write into /tmp/r")]
pub struct ReportArgs {
    /// A report directory of `colloc run`.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the report's JSON instead of the table (writes nothing without --out).
    #[arg(long, conflicts_with_all = ["csv", "html", "quiet", "format"])]
    json: bool,
    /// Print the CSV instead of the table (writes nothing without --out).
    #[arg(long, conflicts_with_all = ["html", "quiet", "format"])]
    csv: bool,
    /// Print the report as one self-contained HTML page (its charts embedded; no script,
    /// nothing fetched) instead of the table (writes nothing without --out).
    #[arg(long, conflicts_with_all = ["quiet", "format"])]
    html: bool,
    /// Print only the one-line summary.
    #[arg(short = 'q', long, conflicts_with = "format")]
    quiet: bool,
    /// The output format: table (the default), json, csv, html or quiet (as the flags of
    /// those names).
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// Write the report files and charts here instead of into DIR: a new directory, or
    /// one of yours that no one else can write.
    #[arg(long, value_name = "OUT", conflicts_with = "no_write")]
    out: Option<PathBuf>,
    /// Write nothing; only print.
    #[arg(long)]
    no_write: bool,
}

/// The formats of `colloc report`, the default first: one line each.
pub const FORMATS: Formats<Shown> = Formats {
    command: "colloc report",
    list: &[
        &printed::Table,
        &Json::DECLARED,
        &printed::Csv,
        &html::Html,
        &printed::Quiet,
    ],
};

impl ReportArgs {
    /// The format asked for by name: `--json`, `--csv`, `-q` name theirs; none is the
    /// default.
    fn format_name(&self) -> Option<&str> {
        if self.json {
            Some("json")
        } else if self.csv {
            Some("csv")
        } else if self.html {
            Some("html")
        } else if self.quiet {
            Some("quiet")
        } else {
            self.format.as_deref()
        }
    }

    /// The JSON, the CSV and the HTML only print: they rewrite DIR's files only with --out.
    fn only_prints(&self) -> bool {
        matches!(self.format_name(), Some("json" | "csv" | "html"))
    }
}

/// Where `colloc report` writes: `--out`, DIR when the caller may write it, or nowhere.
fn destination(a: &ReportArgs, dir: ReportDir) -> anyhow::Result<Option<ReportDir>> {
    if a.no_write {
        return Ok(None);
    }
    if let Some(out) = &a.out {
        let (d, _) = ReportDir::create(out).map_err(|e| e.into_anyhow().context("--out"))?;
        return Ok(Some(d));
    }
    if a.only_prints() {
        return Ok(None);
    }
    match dir.why_not_writable() {
        None => Ok(dir.into_writable().ok()),
        Some(why) => {
            log::info!(
                "{} is {why}: the report is only printed (--out DIR writes its files elsewhere)",
                dir.path().display()
            );
            Ok(None)
        }
    }
}

/// Entry point of `colloc report`.
///
/// # Errors
/// Bad input: DIR has no record, or a record colloc did not write (exit 2).
pub fn main(a: ReportArgs) -> anyhow::Result<ExitCode> {
    // Bad input first: an unknown format, before DIR is read.
    let format = FORMATS.pick(a.format_name())?;
    let no_record = |dir: &Path, old: bool| {
        bad_input(format!(
            "{} holds no colloc event log ({}/){}",
            dir.display(),
            store::EVENTS_DIR,
            if old {
                "; its report was made by a colloc that kept no event log (schema 1)"
            } else {
                "; give a report directory of colloc run"
            }
        ))
    };
    let dir = match ReportDir::open_read(&a.dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Err(no_record(&a.dir, false)),
        Err(e) => return Err(e.into_anyhow()),
    };
    let Some((fold, bad)) = dir.fold().map_err(RecordError::into_anyhow)? else {
        return Err(no_record(&a.dir, dir.has(store::REPORT_JSON)));
    };
    if bad > 0 {
        log::warn!(
            "{bad} line(s) of the event log could not be read (cut by a kill or a full disk); skipped"
        );
    }
    if fold.sessions() == 0 {
        return Err(bad_input(format!(
            "{}: the event log has no session (not written by colloc run?)",
            a.dir.display()
        )));
    }
    let live = match dir.lock_state().map_err(UserFsError::into_anyhow)? {
        LockState::Held => Some(fold.sessions()),
        LockState::Free => None,
        LockState::Unknown => {
            log::warn!("cannot tell whether a pack still writes {} (file locks do not work there); attempts without an end show as interrupted", a.dir.display());
            None
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let report = fold.into_report(now, live);
    let mut shown_json = dir.shown(REPORT_JSON);
    let mut failed = None;
    if let Some(out) = destination(&a, dir)? {
        // The one-line summary names the report written, in --out where given.
        shown_json = out.shown(REPORT_JSON);
        match write_report(&out, &report) {
            Ok(()) => {
                chart::run_charts(&report, &out);
            }
            Err(e) => failed = Some(e),
        }
    }
    let shown = Shown {
        report,
        json_file: shown_json.display().to_string(),
    };
    output::print(format, &shown)?;
    if let Some(e) = failed {
        errln!(
            "colloc: error: {} (--out DIR writes elsewhere, --no-write only prints)",
            colloc_results::text::escape(&e.to_string())
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
