//! Self-contained HTML pages (issue 38), to mail to a colleague or open offline:
//! `colloc report --html` prints the run report as one (the pack's facts and one-line
//! summary, every run with its grid values and metrics — the rows of `colloc-runs.csv` —,
//! the summary table with its totals and notes, and the three charts embedded as `data:`
//! PNGs); `colloc bench` writes `bench.html` beside bench.json, built by its own code from
//! the pieces here ([`document`], [`facts`], [`csv_table`], [`pre`], [`figure`]).
//!
//! Nothing in the page runs or fetches: it has no script, and its Content-Security-Policy
//! allows only its own inline style and `data:` images, so a hostile run name or command
//! (every text is escaped; the policy is the second wall) can neither run nor call out.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;

use super::chart;
use super::printed::Shown;
use super::runs;
use crate::output::Exporter;
use crate::record::model::Report;
use crate::record::store;

/// The page's policy: nothing but its inline style and `data:` images.
pub const CSP: &str = "default-src 'none'; img-src data:; style-src 'unsafe-inline'";

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1300px;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:90%}\
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}\
th{background:#f2f2f2}td.num{text-align:right;font-variant-numeric:tabular-nums}\
pre{background:#f7f7f7;padding:1em;overflow-x:auto}img{max-width:100%;height:auto}\
.state-failed,.state-timed_out{color:#b00}.state-succeeded{color:#070}";

/// The page.
pub struct Html;

impl Exporter<Shown> for Html {
    fn name(&self) -> &'static str {
        "html"
    }

    fn render(&self, s: &Shown) -> anyhow::Result<String> {
        page(&s.report, &s.json_file)
    }
}

/// `text` with `&`, `<`, `>`, `"` and `'` as character references: safe as element text
/// and inside a quoted attribute. Control characters (but tab and newline) become U+FFFD,
/// as the table's terminal escaping would show them.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: `title` (escaped here) and `body` (markup made by the pieces below).
pub fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"colloc {v}\">\n\
         <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\
         <footer><p>Made by colloc {v}.</p></footer>\n</body>\n</html>\n",
        v = escape(env!("CARGO_PKG_VERSION")),
        t = escape(title),
    )
}

/// A two-column table of facts, one row each.
pub fn facts(id: &str, rows: &[(&str, String)]) -> String {
    let mut h = format!("<table id=\"{}\">\n", escape(id));
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    h.push_str("</table>\n");
    h
}

/// A CSV (with its header) as a table; a row's `state` column, where there is one,
/// becomes its class (`state-failed`), and numbers are set right.
///
/// # Errors
/// The CSV cannot be read back (colloc wrote it: out of memory).
pub fn csv_table(id: &str, csv: &[u8]) -> Result<String, csv::Error> {
    let mut rd = csv::ReaderBuilder::new().has_headers(true).from_reader(csv);
    let header: Vec<String> = rd.headers()?.iter().map(str::to_string).collect();
    let state = header.iter().position(|c| c == "state");
    let mut h = format!("<table id=\"{}\">\n<thead><tr>", escape(id));
    for c in &header {
        let _ = write!(h, "<th>{}</th>", escape(c));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for row in rd.records() {
        let row = row?;
        let class = state
            .and_then(|i| row.get(i))
            .map(|s| format!(" class=\"state-{}\"", escape(s)))
            .unwrap_or_default();
        let _ = write!(h, "<tr{class}>");
        for v in row.iter() {
            let num = !v.is_empty() && v.parse::<f64>().is_ok();
            let _ = write!(
                h,
                "<td{}>{}</td>",
                if num { " class=\"num\"" } else { "" },
                escape(v)
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table>\n");
    Ok(h)
}

/// Preformatted text (a table as the terminal shows it).
pub fn pre(id: &str, text: &str) -> String {
    format!("<pre id=\"{}\">{}</pre>\n", escape(id), escape(text))
}

/// A PNG as an embedded image with its caption.
pub fn figure(caption: &str, png: &[u8]) -> String {
    format!(
        "<figure><img alt=\"{c}\" src=\"data:image/png;base64,{}\">\
         <figcaption>{c}</figcaption></figure>\n",
        base64::engine::general_purpose::STANDARD.encode(png),
        c = escape(caption)
    )
}

/// The run report's page.
fn page(r: &Report, json_file: &str) -> anyhow::Result<String> {
    let summary = runs::one_line(r, json_file);
    let mut h = format!(
        "<h1>colloc report</h1>\n<p id=\"summary\">{}</p>\n",
        escape(&summary)
    );
    h.push_str(&facts("facts", &fact_rows(r)));
    h.push_str("<h2>Runs</h2>\n");
    h.push_str(&csv_table("runs", &runs::csv(r)?)?);
    h.push_str("<h2>Summary</h2>\n");
    h.push_str(&pre("table", &runs::table(r)));
    charts(&mut h, r);
    Ok(document(&format!("colloc report: {summary}"), &h))
}

/// The pack's facts.
fn fact_rows(r: &Report) -> Vec<(&'static str, String)> {
    let mut rows: Vec<(&str, String)> = vec![
        ("mode", r.mode.clone()),
        ("GPU set up by", r.source.clone()),
        ("started", r.started.clone()),
        ("last event", r.ended.clone()),
        ("sessions", r.sessions.len().to_string()),
        ("colloc", r.colloc_version.clone()),
    ];
    if let Some(job) = &r.job_id {
        rows.insert(0, ("Slurm job", job.clone()));
    }
    if r.running {
        rows.push(("state", "still running".into()));
    }
    if let Some(why) = &r.stopped_by {
        rows.push(("stopped by", why.clone()));
    }
    rows
}

/// The three charts as `data:` PNGs; a chart that has nothing to show is left out, one
/// that could not be drawn is said in its place.
fn charts(h: &mut String, r: &Report) {
    type Png = fn(&Report, &Path) -> Result<Option<Vec<u8>>, String>;
    let list: [(&str, &str, Png); 3] = [
        (
            store::TIMELINE_PNG,
            "Which run held which slot when",
            chart::timeline,
        ),
        (store::RUNS_PNG, "Each run's throughput", chart::runs),
        (
            store::THROUGHPUT_PNG,
            "Throughput over time",
            chart::throughput,
        ),
    ];
    h.push_str("<h2>Charts</h2>\n");
    if !super::font::ready() {
        h.push_str("<p>No charts: colloc's font could not be loaded.</p>\n");
        return;
    }
    for (name, caption, draw) in list {
        match draw(r, Path::new(name)) {
            Ok(Some(png)) => h.push_str(&figure(caption, &png)),
            Ok(None) => {}
            Err(e) => {
                let _ = writeln!(h, "<p>{}: not drawn: {}</p>", escape(caption), escape(&e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escape("<img src=x onerror='a(\"b\")'>&\u{1b}[31m\tok\n"),
            "&lt;img src=x onerror=&#39;a(&quot;b&quot;)&#39;&gt;&amp;\u{FFFD}[31m\tok\n"
        );
    }
}
