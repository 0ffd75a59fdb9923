//! `colloc-throughput.png`: throughput over time, one line per run.
//!
//! Text needs a TrueType font ([`crate::font`]); without one the chart has no text.

use std::path::Path;

use plotters::prelude::*;

use super::report::Report;

/// Draw the chart; false when no run has throughput samples (no file is written).
///
/// # Errors
/// A message when drawing or writing the PNG fails.
pub fn draw(report: &Report, path: &Path) -> Result<bool, String> {
    let series: Vec<(&str, &[(f64, f64)])> = report
        .runs
        .iter()
        .filter_map(|r| {
            let t = r.throughput.as_ref()?;
            (!t.samples.is_empty()).then_some((r.name.as_str(), t.samples.as_slice()))
        })
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    let x_max = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.0))
        .fold(report.summary.makespan_s, f64::max)
        .max(1.0);
    let y_max = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let text = crate::font::available();
    let e = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = BitMapBackend::new(path, (1200, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let unit = report
        .summary
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption(
                format!("colloc: throughput per run ({})", report.mode),
                ("sans-serif", 24),
            )
            .x_label_area_size(45)
            .y_label_area_size(70);
    }
    let mut chart = builder
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("seconds since start").y_desc(unit);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|x| e(&x))?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let drawn = chart
            .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(&x))?;
        if text {
            drawn.label(*name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if text && series.len() <= 40 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}
