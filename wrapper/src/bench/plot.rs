//! The PNG plot: aggregate throughput against the number of copies, one line per mode,
//! with solo as a dashed reference. Text needs a TrueType font read at run time (Debian's
//! fonts-dejavu-core); without one the chart is drawn without text.

use std::path::Path;

use plotters::prelude::*;

use super::report::{Report, Status};

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Lines to draw: mode name and its measured (N, aggregate) points. Naive includes solo
/// as N = 1.
pub fn series(report: &Report) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in &report.results {
        if r.status != Status::Measured || r.mode == "solo" {
            continue;
        }
        let Some(a) = r.aggregate else { continue };
        match out.iter_mut().find(|(m, _)| *m == r.mode) {
            Some((_, pts)) => pts.push((r.n as f64, a)),
            None => out.push((r.mode.clone(), vec![(r.n as f64, a)])),
        }
    }
    if let Some(solo) = report.solo {
        match out.iter_mut().find(|(m, _)| m == "naive") {
            Some((_, pts)) if !pts.iter().any(|p| p.0 == 1.0) => pts.push((1.0, solo)),
            Some(_) => {}
            None => out.insert(0, ("naive".into(), vec![(1.0, solo)])),
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Draw the plot into `path`.
///
/// # Errors
/// Drawing or writing the file failed.
pub fn draw(report: &Report, path: &Path) -> anyhow::Result<()> {
    let text = crate::font::available();
    let lines = series(report);
    let max_n = report.results.iter().map(|r| r.n).max().unwrap_or(1).max(2) as f64;
    let max_y = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(report.solo.unwrap_or(1.0), f64::max)
        * 1.15;
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        let title = format!(
            "colloc bench: {}",
            report
                .gpu
                .as_ref()
                .map_or("aggregate throughput", |g| g.name.as_str())
        );
        builder
            .caption(title, ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    let mut chart = builder
        .build_cartesian_2d(0.5f64..max_n + 0.5, 0f64..max_y.max(1e-9))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if text {
        chart
            .configure_mesh()
            .x_desc("copies at once (N)")
            .y_desc("aggregate samples/s")
            .x_labels(max_n as usize + 1)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    } else {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(0)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if let Some(solo) = report.solo {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.5, solo), (max_n + 0.5, solo)],
                6,
                4,
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    for (i, (mode, pts)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let s = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if text {
            s.label(mode.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if text && !lines.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 18))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}
