//! What `colloc bench` prints and writes of its report (issue 37): the table it prints,
//! an [`Exporter`] like every command's, and the files of its report directory, each
//! rendered by one function and registered by one line in [`BENCH_FILES`]; the chart
//! ([`super::chart::bench`]) and the page embedding it are drawn after them.

use crate::bench::report::{self, ConfigResult, Report, Status};
use crate::export::chart::{self, BenchMark, BenchPoint};
use crate::output::Exporter;
use crate::record::store::{
    ReportDir, BENCH_CSV, BENCH_HTML, BENCH_JSON, BENCH_MEASUREMENTS_CSV, BENCH_PNG,
};

/// The table `colloc bench` prints when it ends.
pub struct Table;

/// The table.
pub const TABLE: Table = Table;

impl Exporter<Report> for Table {
    fn name(&self) -> &'static str {
        "table"
    }

    fn render(&self, r: &Report) -> anyhow::Result<String> {
        Ok(report::table(r))
    }
}

/// A file of a bench directory: its name, and how its bytes are rendered.
pub struct BenchFile {
    /// The file's name.
    pub name: &'static str,
    /// Its bytes.
    pub render: fn(&Report) -> anyhow::Result<Vec<u8>>,
}

/// Every file rendered from the report alone, in the order they are written.
pub const BENCH_FILES: &[BenchFile] = &[
    BenchFile {
        name: BENCH_JSON,
        render: json,
    },
    BenchFile {
        name: BENCH_CSV,
        render: |r| Ok(report::csv(r)?),
    },
    BenchFile {
        name: BENCH_MEASUREMENTS_CSV,
        render: |r| Ok(report::measurements_csv(r)?),
    },
];

/// `bench.json`: the report, pretty, one newline at the end.
fn json(r: &Report) -> anyhow::Result<Vec<u8>> {
    Ok((serde_json::to_string_pretty(r)? + "\n").into_bytes())
}

/// Write every file of [`BENCH_FILES`] into `dir`, then the chart (a chart that cannot be
/// drawn is logged and left out) and the page that embeds it.
///
/// # Errors
/// A file that could not be written; the files after it are not written.
pub fn write(dir: &ReportDir, r: &Report) -> anyhow::Result<()> {
    for f in BENCH_FILES {
        dir.write(f.name, &(f.render)(r)?)?;
    }
    let png = match draw(r, &dir.shown(BENCH_PNG)).and_then(|bytes| {
        dir.write(BENCH_PNG, &bytes)
            .map(|()| bytes)
            .map_err(|e| e.to_string())
    }) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            log::warn!("no plot: {e}");
            None
        }
    };
    dir.write(
        BENCH_HTML,
        report::html::page(r, png.as_deref())?.as_bytes(),
    )?;
    Ok(())
}

/// The chart of a report: every mode's line, solo, the reference and the recommended
/// configuration marked (when collocation pays); `shown` names the file in messages.
fn draw(r: &Report, shown: &std::path::Path) -> Result<Vec<u8>, String> {
    let title = format!(
        "colloc bench: {}",
        r.gpu
            .as_ref()
            .map_or("aggregate throughput", |g| g.info.name.as_str())
    );
    let max_n = r.results.iter().map(|c| c.n).max().unwrap_or(1);
    let solo = r.row("solo", 1).and_then(point);
    let marked = r
        .recommendation
        .as_ref()
        .filter(|rec| rec.pays)
        .map(|rec| BenchMark {
            n: rec.n as f64,
            mean: rec.aggregate,
            label: format!("{} x {}", rec.n, rec.mode),
        });
    chart::bench(
        &lines(r),
        solo,
        r.reference,
        marked.as_ref(),
        max_n,
        &title,
        &r.unit,
        shown,
    )
}

/// A configuration's point: its mean, and its spread as the error bar.
fn point(r: &ConfigResult) -> Option<BenchPoint> {
    let mean = r.aggregate?;
    let u = r.aggregate_u.unwrap_or(0.0);
    Some(BenchPoint {
        n: r.n as f64,
        mean,
        lo: mean - u,
        hi: mean + u,
    })
}

/// Lines of the plot: each mode's measured (N, aggregate ± u) points, naive with solo as
/// N = 1 where naive was measured (solo alone is the dashed line).
fn lines(report: &Report) -> Vec<(String, Vec<BenchPoint>)> {
    let mut out: Vec<(String, Vec<BenchPoint>)> = Vec::new();
    for r in &report.results {
        if r.status != Status::Measured || r.mode == "solo" || r.mode == "reference" {
            continue;
        }
        let Some(p) = point(r) else { continue };
        match out.iter_mut().find(|(m, _)| *m == r.mode) {
            Some((_, pts)) => pts.push(p),
            None => out.push((r.mode.clone(), vec![p])),
        }
    }
    if let Some(solo) = report.row("solo", 1).and_then(point) {
        if let Some((_, pts)) = out.iter_mut().find(|(m, _)| m == "naive") {
            if !pts.iter().any(|p| p.n == 1.0) {
                pts.push(solo);
            }
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.n.total_cmp(&b.n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_joins_solo_to_naive_only_where_naive_ran() {
        use crate::bench::report::sample::{measurement, report};
        let mut r = report();
        let mut mps = ConfigResult::new("mps", 2);
        mps.add(measurement(1, 2, 190.0), vec![]);
        mps.add(measurement(2, 4, 210.0), vec![]);
        mps.settle();
        r.results.push(mps);
        let l = lines(&r);
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].0, "mps");
        let p = l[0].1[0];
        // mean 200, u = 2 x max(sd/√2 = 10, √2/2) = 20: the error bar.
        assert_eq!((p.n, p.mean, p.lo, p.hi), (2.0, 200.0, 180.0, 220.0));
        let mut naive = ConfigResult::new("naive", 2);
        naive.add(measurement(1, 3, 150.0), vec![]);
        naive.settle();
        r.results.push(naive);
        let l = lines(&r);
        let naive = l.iter().find(|(m, _)| m == "naive").unwrap();
        let ns: Vec<f64> = naive.1.iter().map(|p| p.n).collect();
        assert_eq!(ns, [1.0, 2.0]);
        assert_eq!(naive.1[0].mean, 100.0);
    }
}
