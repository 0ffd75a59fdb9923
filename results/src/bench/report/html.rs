//! `bench.html` (issue 38): the benchmark as one self-contained page, beside bench.json:
//! the answer first, what was run and where, the table as the terminal showed it, every
//! configuration and every measurement (bench.csv, bench-measurements.csv), and the chart
//! with the recommended configuration ringed. Built from [`crate::export::html`]'s pieces
//! (no script, nothing fetched, every text escaped).

use super::{csv, measurements_csv, table, Report};
use crate::export::html::{csv_table, document, escape, facts, figure, pre};

/// The page; `png` is bench.png where it was drawn.
///
/// # Errors
/// A CSV writer failed (out of memory).
pub fn page(r: &Report, png: Option<&[u8]>) -> anyhow::Result<String> {
    let answer = r.recommendation.as_ref().map_or_else(
        || "no recommendation: the workload gave no figure alone".to_string(),
        |rec| rec.text.clone(),
    );
    let mut h = format!(
        "<h1>colloc bench</h1>\n<p id=\"recommendation\"><strong>{}</strong></p>\n",
        escape(&answer)
    );
    let mut rows: Vec<(&str, String)> = vec![("workload", r.command.join(" "))];
    if let Some(reference) = &r.reference_command {
        rows.push(("reference", reference.join(" ")));
    }
    if let Some(g) = &r.gpu {
        let driver = g.driver.as_deref().unwrap_or("driver unknown");
        rows.push(("GPU", format!("{} ({driver})", g.info.name)));
    } else if let Some(note) = &r.gpu_note {
        rows.push(("GPU", note.clone()));
    }
    if let Some(cpu) = &r.host.cpu_model {
        rows.push(("CPU", cpu.clone()));
    }
    rows.push(("modes", r.modes.join(", ")));
    rows.push(("counts", r.counts.clone()));
    rows.push(("repeat", r.repeat.to_string()));
    rows.push((
        "measured",
        format!("{} s after {} s of warm-up", r.duration_s, r.warmup_s),
    ));
    if let Some(b) = r.budget_s {
        rows.push(("budget", format!("{b} s")));
    }
    rows.push(("took", format!("{:.0} s", r.wall_s)));
    h.push_str(&facts("facts", &rows));
    if let Some(png) = png {
        h.push_str(&figure(
            "Aggregate throughput against copies at once, the recommended configuration ringed",
            png,
        ));
    }
    h.push_str("<h2>Table</h2>\n");
    h.push_str(&pre("table", &table(r)));
    h.push_str("<h2>Configurations</h2>\n");
    h.push_str(&csv_table("configurations", &csv(r)?)?);
    h.push_str("<h2>Measurements</h2>\n");
    h.push_str(&csv_table("measurements", &measurements_csv(r)?)?);
    Ok(document(&format!("colloc bench: {answer}"), &h))
}
