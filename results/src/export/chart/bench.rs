//! `bench.png`: aggregate throughput against copies at once, one line per mode.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{err, font, legend, tick, Canvas, E, PALETTE};
use crate::export::font::ready;

/// A point of `bench.png`: copies, mean aggregate and its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchPoint {
    /// Copies at once.
    pub n: f64,
    /// Mean aggregate throughput.
    pub mean: f64,
    /// Low end of its interval.
    pub lo: f64,
    /// High end of its interval.
    pub hi: f64,
}

/// The configuration the recommendation names, as `bench.png` marks it.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchMark {
    /// Its copies.
    pub n: f64,
    /// Its mean aggregate.
    pub mean: f64,
    /// What the mark says (`run 7 copies under mps`).
    pub label: String,
}

/// `bench.png`: aggregate throughput against copies at once, one line per mode with
/// each point's interval as an error bar; solo dashed with its interval shaded, the
/// reference command dotted; the recommended configuration ringed and labelled.
#[allow(clippy::too_many_arguments)]
pub fn bench(
    lines: &[(String, Vec<BenchPoint>)],
    solo: Option<BenchPoint>,
    reference: Option<f64>,
    marked: Option<&BenchMark>,
    max_n: usize,
    title: &str,
    unit: &str,
    path: &Path,
) -> Result<Vec<u8>, E> {
    let mut canvas = None;
    bench_into(
        lines,
        solo,
        reference,
        marked,
        max_n,
        title,
        unit,
        path,
        &mut canvas,
    )?;
    Canvas::png(canvas, path)
}

#[allow(clippy::too_many_arguments)]
fn bench_into(
    lines: &[(String, Vec<BenchPoint>)],
    solo: Option<BenchPoint>,
    reference: Option<f64>,
    marked: Option<&BenchMark>,
    max_n: usize,
    title: &str,
    unit: &str,
    path: &Path,
    canvas: &mut Option<Canvas>,
) -> Result<(), E> {
    if !ready() {
        return Err("no chart font".into());
    }
    let e = err(path);
    let max_n = max_n.max(2) as f64;
    let top = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.hi.max(q.mean)))
        .chain(solo.map(|s| s.hi))
        .chain(reference)
        .fold(1e-9, f64::max)
        * 1.15;
    let root = Canvas::area(canvas, 1000, 600);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plot, side) = root.split_horizontally(1000 - 200);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, font(20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..max_n + 0.5, 0f64..top)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("copies at once (N)")
        .y_desc(format!("aggregate {unit}"))
        .x_labels((max_n as usize + 1).min(13))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&tick)
        .label_style(font(13))
        .axis_desc_style(font(14))
        .draw()
        .map_err(|x| e(&x))?;
    let mut entries = Vec::new();
    let grey = RGBColor(90, 90, 90);
    if let Some(s) = solo {
        if s.hi > s.lo {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.5, s.lo), (max_n + 0.5, s.hi)],
                    RGBColor(200, 200, 200).mix(0.5).filled(),
                )))
                .map_err(|x| e(&x))?;
        }
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.5, s.mean), (max_n + 0.5, s.mean)],
                8,
                5,
                grey.stroke_width(2),
            ))
            .map_err(|x| e(&x))?;
        entries.push(("alone (solo)".to_string(), grey, false));
    }
    if let Some(r) = reference {
        let black = RGBColor(0, 0, 0);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.5, r), (max_n + 0.5, r)],
                2,
                4,
                black.stroke_width(2),
            ))
            .map_err(|x| e(&x))?;
        entries.push(("reference (1 process)".to_string(), black, false));
    }
    let cap = (max_n / 100.0).max(0.06);
    for (i, (mode, pts)) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.n, p.mean)),
                color.stroke_width(3),
            ))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.n, p.mean), 5, color.filled())),
            )
            .map_err(|x| e(&x))?;
        for p in pts.iter().filter(|p| p.hi > p.lo) {
            for seg in [
                vec![(p.n, p.lo), (p.n, p.hi)],
                vec![(p.n - cap, p.lo), (p.n + cap, p.lo)],
                vec![(p.n - cap, p.hi), (p.n + cap, p.hi)],
            ] {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        seg,
                        color.stroke_width(2),
                    )))
                    .map_err(|x| e(&x))?;
            }
        }
        entries.push((mode.clone(), color, false));
    }
    if let Some(m) = marked {
        draw_mark(&mut chart, m, top).map_err(|x| e(&x))?;
        entries.push(("recommended (ringed)".to_string(), RGBColor(0, 0, 0), false));
    }
    legend(&side, "mode", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The recommended configuration: a ring around its point and what it is, above the
/// point (below it where the top of the plot is near).
fn draw_mark<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    m: &BenchMark,
    top: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let black = RGBColor(0, 0, 0);
    chart.draw_series(std::iter::once(Circle::new(
        (m.n, m.mean),
        12,
        black.stroke_width(3),
    )))?;
    let y = if m.mean > 0.8 * top {
        m.mean - 0.08 * top
    } else {
        m.mean + 0.05 * top
    };
    chart.draw_series(std::iter::once(Text::new(
        format!("recommended: {}", m.label),
        ((m.n - 0.3).max(0.6), y),
        font(14),
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring and label change the picture only where a configuration is marked.
    #[test]
    fn the_recommended_configuration_is_ringed() {
        let pts = |k: f64| {
            [2.0, 4.0, 7.0, 10.0].map(|n| BenchPoint {
                n,
                mean: k * n.min(7.0),
                lo: k * n.min(7.0) - 1.0,
                hi: k * n.min(7.0) + 1.0,
            })
        };
        let lines = vec![("mps".to_string(), pts(100.0).to_vec())];
        let draw = |m: Option<&BenchMark>| {
            bench(
                &lines,
                None,
                Some(1000.0),
                m,
                10,
                "t",
                "img/s",
                Path::new("x.png"),
            )
        };
        let (Ok(plain), Ok(again)) = (draw(None), draw(None)) else {
            // No chart font on this machine: nothing is drawn at all.
            assert!(!ready());
            return;
        };
        assert_eq!(plain, again, "drawing is deterministic");
        let mark = BenchMark {
            n: 7.0,
            mean: 700.0,
            label: "7 x mps".into(),
        };
        let marked = draw(Some(&mark)).unwrap();
        assert_eq!(&marked[1..4], b"PNG");
        assert_ne!(plain, marked);
    }
}
