//! `colloc bench --compare`: this report against an earlier one (schema 1 to 3), cell
//! by cell, with the hosts compared first. A launch-bound workload measures the host's
//! CPU as much as the GPU, so figures from two hosts are compared only with that said,
//! and the fractions of a `--reference` (measured on each host) are the figures to
//! compare there.

use std::path::Path;

use serde::Deserialize;

use super::cell::cell_name;
use super::comparison::{CellChange, Comparison};
use super::host::{differences, Host};
use super::report::{Report, Status};
use crate::export::table::Table;

/// Why a report cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// It could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a colloc bench report.
    #[error(
        "{path} is not a colloc bench report ({why}); give a bench.json written by colloc bench"
    )]
    NotAReport {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// Largest bench.json read (colloc writes a few hundred KiB).
pub const MAX_BENCH_REPORT: u64 = 64 << 20;

/// What a file must have to be read as a bench report at all.
#[derive(Deserialize)]
struct Head {
    schema: Option<u64>,
    results: Option<serde::de::IgnoredAny>,
}

/// Read a bench.json through the model bench writes ([`Report`]), checking that it is
/// one (schema 1 to 3).
///
/// # Errors
/// [`CompareError`].
pub fn load(path: &Path) -> Result<Report, CompareError> {
    let shown = path.display().to_string();
    // Non-blocking, a regular file, capped: a FIFO or /dev/zero is refused at once.
    let text = crate::userfs::read_user_file(path, MAX_BENCH_REPORT).map_err(|e| match e {
        crate::userfs::UserFsError::Io { source, .. } => CompareError::Read {
            path: shown.clone(),
            source,
        },
        e => CompareError::NotAReport {
            path: shown.clone(),
            why: e.reason(),
        },
    })?;
    let not = |why: String| CompareError::NotAReport {
        path: shown.clone(),
        why,
    };
    let head: Head = serde_json::from_slice(&text).map_err(|e| not(format!("not JSON: {e}")))?;
    match (head.schema, head.results) {
        (Some(1..=3), Some(_)) => serde_json::from_slice(&text).map_err(|e| not(e.to_string())),
        (Some(s), Some(_)) => Err(not(format!("schema {s}; this colloc reads schema 1 to 3"))),
        _ => Err(not("no schema and results".into())),
    }
}

/// The host of a report: its `host` record (schema 3 on), else what its `gpu` says.
fn host_of(r: &Report) -> (Host, bool) {
    if r.schema >= 3 {
        return (r.host.clone(), true);
    }
    let g = r.gpu.as_ref();
    (
        Host {
            gpu: g.map(|g| g.info.name.clone()),
            gpu_uuid: g.map(|g| g.info.uuid.clone()),
            driver: g.and_then(|g| g.driver.clone()),
            ..Host::default()
        },
        false,
    )
}

struct Row {
    mode: String,
    n: usize,
    aggregate: f64,
    u: Option<f64>,
    vs_solo: Option<f64>,
    vs_reference: Option<f64>,
}

fn rows(r: &Report) -> Vec<Row> {
    r.results
        .iter()
        .filter(|c| c.status == Status::Measured)
        .filter_map(|c| {
            Some(Row {
                mode: c.mode.clone(),
                n: c.n,
                aggregate: c.aggregate?,
                u: c.aggregate_u,
                vs_solo: c.vs_solo,
                vs_reference: c.vs_reference,
            })
        })
        .collect()
}

fn recommendation(r: &Report) -> Option<String> {
    let rec = r.recommendation.as_ref()?;
    // An older report without the figure reads 0: say nothing of it.
    let vs = Some(rec.vs_solo).filter(|v| v.is_finite() && *v > 0.0);
    Some(format!(
        "{}{}{}",
        cell_name(&rec.mode, rec.n),
        vs.map_or_else(String::new, |x| format!(", {x:.2}x solo")),
        if rec.pays { "" } else { " (does not pay)" }
    ))
}

/// Compare `new` with `old` (read from `old_path`).
pub fn compare(old_path: &str, old: &Report, new: &Report) -> Comparison {
    let (old_host, old_known) = host_of(old);
    let (new_host, new_known) = host_of(new);
    let host_differences = differences(&old_host, &new_host);
    let same_host = if !host_differences.is_empty() {
        Some(false)
    } else if old_known && new_known {
        Some(true)
    } else {
        None
    };
    let new_rows = rows(new);
    let cells: Vec<CellChange> = rows(old)
        .into_iter()
        .filter_map(|o| {
            let n = new_rows.iter().find(|r| r.mode == o.mode && r.n == o.n)?;
            (o.aggregate > 0.0).then(|| CellChange {
                mode: o.mode.clone(),
                n: o.n,
                old: o.aggregate,
                new: n.aggregate,
                change: n.aggregate / o.aggregate - 1.0,
                beyond_noise: match (o.u, n.u) {
                    (Some(a), Some(b)) => {
                        Some((n.aggregate - o.aggregate).abs() > (a * a + b * b).sqrt())
                    }
                    _ => None,
                },
                old_vs_solo: o.vs_solo,
                new_vs_solo: n.vs_solo,
                old_vs_reference: o.vs_reference,
                new_vs_reference: n.vs_reference,
            })
        })
        .collect();
    let mut c = Comparison {
        old: old_path.to_string(),
        old_schema: u64::from(old.schema),
        same_host,
        host_differences,
        cells,
        old_recommendation: recommendation(old),
        new_recommendation: recommendation(new),
        text: String::new(),
    };
    c.text = render(&c);
    c
}

fn render(c: &Comparison) -> String {
    let mut out = format!("comparison with {} (schema {}):\n", c.old, c.old_schema);
    let with_ref = c
        .cells
        .iter()
        .any(|x| x.old_vs_reference.is_some() && x.new_vs_reference.is_some());
    match c.same_host {
        Some(false) => out.push_str(&format!(
            "DIFFERENT HOSTS: {}. A workload that is not GPU-bound measures the host's CPU as much as the GPU, so its ratios to solo are not comparable across hosts; {}\n",
            c.host_differences.join("; "),
            if with_ref {
                "compare the fractions of the reference (\"vs ref\") instead"
            } else {
                "measure both with --reference and compare its fractions"
            }
        )),
        Some(true) => out.push_str("same host (host name, CPU, GPU and driver as both reports record them)\n"),
        None => out.push_str(
            "host unknown for one report (before schema 3 a report records at most the GPU and driver): the comparison may cross hosts\n",
        ),
    }
    let mut headers: Vec<String> = [
        "config",
        "old",
        "new",
        "change",
        "old vs solo",
        "new vs solo",
    ]
    .map(String::from)
    .to_vec();
    let mut right = vec![false, true, true, true, true, true];
    if with_ref {
        headers.extend(["old vs ref".to_string(), "new vs ref".into()]);
        right.extend([true, true]);
    }
    let mut t = Table::new(headers, right);
    let o =
        |v: Option<f64>, suffix: &str| v.map_or_else(|| "-".into(), |v| format!("{v:.2}{suffix}"));
    for x in &c.cells {
        let noise = match x.beyond_noise {
            Some(true) => " (beyond the noise)",
            Some(false) => " (within the noise)",
            None => "",
        };
        let mut row = vec![
            cell_name(&x.mode, x.n),
            format!("{:.1}", x.old),
            format!("{:.1}", x.new),
            format!("{:+.1} %{noise}", x.change * 100.0),
            o(x.old_vs_solo, "x"),
            o(x.new_vs_solo, "x"),
        ];
        if with_ref {
            row.extend([o(x.old_vs_reference, ""), o(x.new_vs_reference, "")]);
        }
        t.row(row);
    }
    if c.cells.is_empty() {
        out.push_str("no configuration was measured in both reports\n");
    } else {
        out.push_str(&t.render());
    }
    out.push_str(&format!(
        "recommendation: old: {}; new: {}\n",
        c.old_recommendation.as_deref().unwrap_or("none"),
        c.new_recommendation.as_deref().unwrap_or("none")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A report as bench.json holds it, read through the model.
    fn report(schema: u64, host: Option<Value>, solo: f64, mps7: f64, u: Option<f64>) -> Report {
        let mut v = json!({
            "schema": schema,
            "gpu": {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1", "memory_total": 1, "driver": "580.1"},
            "results": [
                {"mode": "solo", "n": 1, "status": "measured", "aggregate": solo, "aggregate_u": u, "vs_solo": 1.0},
                {"mode": "mps", "n": 7, "status": "measured", "aggregate": mps7, "aggregate_u": u, "vs_solo": mps7 / solo},
                {"mode": "mig", "n": 2, "status": "skipped", "aggregate": null},
            ],
            "recommendation": {"mode": "mps", "n": 7, "pays": true, "vs_solo": mps7 / solo},
        });
        if let Some(h) = host {
            v["host"] = h;
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_bench_json_of_the_studies_reads_through_the_model() {
        // bench/results holds reports of schemas 1 and 3 written by earlier colloc.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
        let mut found = 0;
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.file_name().is_some_and(|n| n == "bench.json") {
                    let r = load(&p).unwrap_or_else(|e| panic!("{e}"));
                    assert!(!r.results.is_empty(), "{}", p.display());
                    assert!(
                        r.results.iter().any(|c| c.aggregate.is_some()),
                        "{}",
                        p.display()
                    );
                    found += 1;
                }
            }
        }
        assert!(found >= 2, "{found} reports");
    }

    #[test]
    fn a_host_change_is_flagged_and_cells_are_lined_up() {
        // The issue's calls: solo 8,403 -> 13,954 on another host, mps 7 62,231 -> 68,797.
        let a = json!({"hostname": "a", "cpu_model": "Xeon", "cpus_usable": 16, "gpu": "NVIDIA H200", "driver": "580.1"});
        let b = json!({"hostname": "b", "cpu_model": "EPYC", "cpus_usable": 16, "gpu": "NVIDIA H200", "driver": "580.1"});
        let old = report(3, Some(a.clone()), 8403.0, 62231.0, Some(100.0));
        let new = report(3, Some(b), 13954.0, 68797.0, Some(100.0));
        let c = compare("old.json", &old, &new);
        assert_eq!(c.same_host, Some(false));
        assert_eq!(c.host_differences.len(), 2, "{:?}", c.host_differences);
        assert_eq!(c.cells.len(), 2);
        assert!((c.cells[0].change - (13954.0 / 8403.0 - 1.0)).abs() < 1e-12);
        assert_eq!(c.cells[1].beyond_noise, Some(true));
        assert!(c.text.contains("DIFFERENT HOSTS"), "{}", c.text);
        assert!(c.text.contains("CPU \"Xeon\" vs \"EPYC\""), "{}", c.text);
        assert!(
            c.text.contains("7.41x") && c.text.contains("4.93x"),
            "{}",
            c.text
        );
        assert!(
            c.text
                .contains("old: mps 7, 7.41x solo; new: mps 7, 4.93x solo"),
            "{}",
            c.text
        );
        let same = compare(
            "old.json",
            &old,
            &report(3, Some(a), 8500.0, 62000.0, Some(400.0)),
        );
        assert_eq!(same.same_host, Some(true));
        assert_eq!(same.cells[1].beyond_noise, Some(false));
        assert!(same.text.contains("within the noise"), "{}", same.text);
    }

    #[test]
    fn a_schema_2_report_compares_by_its_gpu_and_says_the_host_is_unknown() {
        let old = report(2, None, 8403.0, 62231.0, None);
        let new = report(
            3,
            Some(json!({"hostname": "b", "gpu": "NVIDIA H200", "driver": "580.1"})),
            8744.0,
            62000.0,
            Some(10.0),
        );
        let c = compare("old.json", &old, &new);
        assert_eq!(c.same_host, None);
        assert!(c.text.contains("host unknown"), "{}", c.text);
        assert_eq!(c.cells[0].beyond_noise, None);
        let other_driver = report(3, Some(json!({"driver": "590.1"})), 1.0, 2.0, None);
        assert_eq!(compare("o", &old, &other_driver).same_host, Some(false));
    }

    #[test]
    fn bench_json_reads_back_as_the_report_it_was_written_from() {
        // One model for both: what runner/finish.rs writes is what --compare reads.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bench.json");
        let mut written = crate::bench::report::sample::report();
        written.gpu = Some(report(3, None, 1.0, 2.0, None).gpu.unwrap());
        written.notes.push("a note".into());
        std::fs::write(&p, serde_json::to_string_pretty(&written).unwrap() + "\n").unwrap();
        assert_eq!(load(&p).unwrap(), written);
    }

    #[test]
    fn an_older_gpu_record_reads_through_the_model_or_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bench.json");
        // Schema 1 (bench/results/earlier): `mig_enabled`, no `mig_mode`.
        std::fs::write(
            &p,
            r#"{"schema": 1, "gpu": {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-e16f", "memory_total": 150754820096, "driver": "580.159.04", "mig_enabled": false},
               "results": [{"mode": "solo", "n": 1, "status": "measured", "aggregate": 8403.0}]}"#,
        )
        .unwrap();
        let r = load(&p).unwrap();
        let g = r.gpu.unwrap();
        assert_eq!((g.info.uuid.as_str(), g.info.mig_mode), ("GPU-e16f", None));
        assert_eq!(g.driver.as_deref(), Some("580.159.04"));
        assert_eq!(r.results[0].aggregate, Some(8403.0));
        // A record that is not one (no uuid; not an object): no GPU, the rest still read.
        for gpu in [r#"{"index": 0, "name": "NVIDIA H200"}"#, r#""NVIDIA H200""#] {
            std::fs::write(
                &p,
                format!(r#"{{"schema": 2, "gpu": {gpu}, "results": [{{"mode": "mps", "n": 7, "aggregate": 62231.0}}]}}"#),
            )
            .unwrap();
            let r = load(&p).unwrap_or_else(|e| panic!("{gpu}: {e}"));
            assert_eq!(r.gpu, None, "{gpu}");
            assert_eq!(r.row("mps", 7).unwrap().aggregate, Some(62231.0));
        }
    }

    #[test]
    fn only_bench_reports_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        std::fs::write(&p, "{\"schema\": 2, \"runs\": []}").unwrap();
        assert!(load(&p)
            .unwrap_err()
            .to_string()
            .contains("not a colloc bench report"));
        std::fs::write(&p, "nope").unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("not JSON"));
        // The study's reports (schema 1, before the event log) are read.
        std::fs::write(&p, "{\"schema\": 1, \"results\": []}").unwrap();
        assert!(load(&p).is_ok());
        std::fs::write(&p, "{\"schema\": 9, \"results\": []}").unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("schema 9"));
        assert!(load(&dir.path().join("none.json"))
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}
