//! `colloc-throughput.png`: throughput over time, all runs together on top and each run
//! below (coloured and named when few enough to tell apart).

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{
    err, font, gap_bands, legend, median, robust_top, tick, Area, Canvas, Chart, Entries, TimeAxis,
    CALIBRATION_BAND, E, FEW_SAMPLES, LEGEND_W, MAX_NAMED_LINES, PALETTE, W,
};
use crate::record::model::Report;

/// The summed rate of all runs at `t`: each run's sample covering `t`, none in a run's
/// start-up (before its first sample, or before an attempt's first sample).
fn aggregate_at(report: &Report, t: f64) -> f64 {
    report
        .runs
        .iter()
        .filter_map(|r| {
            let s = &r.throughput.as_ref()?.samples;
            let i = s.partition_point(|x| x.0 < t);
            if i == 0 || i >= s.len() {
                return None;
            }
            let (a, b) = (s[i - 1].0, s[i].0);
            // No sample interval spans an attempt's start.
            if r.attempts
                .iter()
                .any(|at| at.start_s > a && at.start_s <= b)
            {
                return None;
            }
            Some(s[i].1)
        })
        .sum()
}

/// The spans of `--solo-baseline` calibrations as light bands from 0 to `top` on
/// `axis`: while they ran, no run of the pack did, so the lines have a gap there.
fn calibration_bands<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    report: &Report,
    axis: &TimeAxis,
    top: f64,
) -> Result<(), String> {
    chart
        .draw_series(report.calibrations.iter().map(|c| {
            Rectangle::new(
                [
                    (axis.x(c.start_s), 0.0),
                    (axis.x(c.start_s + c.wall_s), top),
                ],
                CALIBRATION_BAND.filled(),
            )
        }))
        .map(|_| ())
        .map_err(|x| format!("calibration bands: {x}"))
}

/// A run's name and its samples (time, rate).
type Series<'a> = (&'a str, &'a [(f64, f64)]);

/// What both panels share: the report, the time axis and its end, the pack's unit, the
/// file.
struct Panels<'a> {
    report: &'a Report,
    axis: &'a TimeAxis,
    x_max: f64,
    unit: &'a str,
    path: &'a Path,
}

/// Throughput over time in two panels on one time axis: all runs together on top, each
/// run below (coloured and named when few enough to tell apart), each panel with its own
/// y axis.
pub(super) fn throughput_into(
    report: &Report,
    path: &Path,
    canvas: &mut Option<Canvas>,
) -> Result<bool, E> {
    let series: Vec<Series> = report
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
    // Each run's samples split where an attempt starts: no line across a restart.
    let starts: Vec<Vec<f64>> = report
        .runs
        .iter()
        .filter(|r| r.throughput.as_ref().is_some_and(|t| !t.samples.is_empty()))
        .map(|r| r.attempts.iter().map(|a| a.start_s).collect())
        .collect();
    let e = err(path);
    let unit = report
        .summary
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let axis = TimeAxis::of(report);
    let x_max = axis.x_max();
    let steps = 600;
    let agg: Vec<(f64, f64)> = (0..=steps)
        .map(|k| {
            let x = x_max * f64::from(k) / f64::from(steps);
            (x, aggregate_at(report, axis.t(x)))
        })
        .collect();
    let run_top = run_axis_top(&series);
    let agg_top = aggregate_axis_top(report, &agg);
    let root = Canvas::area(canvas, W, 900);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plots, side) = root.split_horizontally(W - LEGEND_W);
    let (top, bottom) = plots.split_vertically(360);
    let p = Panels {
        report,
        axis: &axis,
        x_max,
        unit: &unit,
        path,
    };
    let mut entries = aggregate_panel(&p, &top, &agg, agg_top)?;
    runs_panel(&p, &bottom, &series, &starts, run_top, &mut entries)?;
    legend(&side, "throughput", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

/// The top of the runs' panel: robust over all samples, counting a run's typical level
/// only when it rests on a few samples.
fn run_axis_top(series: &[Series]) -> f64 {
    let run_values: Vec<f64> = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .collect();
    // A run's typical level counts for the axis only when it rests on a few samples.
    let medians: Vec<f64> = series
        .iter()
        .filter(|(_, s)| s.len() >= FEW_SAMPLES as usize)
        .map(|(_, s)| median(&s.iter().map(|p| p.1).collect::<Vec<_>>()))
        .collect();
    robust_top(&run_values, &medians)
}

/// The top of the aggregate panel: robust over the curve `agg`, and above the mean over
/// the makespan.
fn aggregate_axis_top(report: &Report, agg: &[(f64, f64)]) -> f64 {
    let agg_values: Vec<f64> = agg.iter().map(|p| p.1).collect();
    robust_top(
        &agg_values,
        &[median(
            &agg_values
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .collect::<Vec<_>>(),
        )],
    )
    .max(report.summary.aggregate_throughput.unwrap_or(0.0) * 1.15)
}

/// The top panel on `area`: the title, all runs together (`agg`, up to `top`) and the
/// mean over the makespan dashed (over each session's, for a resumed pack, with the
/// time between sessions grey); its legend entries.
fn aggregate_panel(p: &Panels, area: &Area, agg: &[(f64, f64)], top: f64) -> Result<Entries, E> {
    let (report, x_max) = (p.report, p.x_max);
    let e = err(p.path);
    let mut c = ChartBuilder::on(area)
        .caption(
            format!("colloc: throughput over time ({})", report.mode),
            font(20),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(75)
        .build_cartesian_2d(0f64..x_max, 0f64..top)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_label_formatter(&|x| p.axis.label(x))
        .y_label_formatter(&tick)
        .y_desc(format!("all runs, {}", p.unit))
        .label_style(font(13))
        .axis_desc_style(font(14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|x| e(&x))?;
    calibration_bands(&mut c, report, p.axis, top)?;
    let gap = gap_bands(&mut c, p.axis, top, true)?;
    c.draw_series(LineSeries::new(
        agg.iter().map(|&(t, v)| (t, v.min(top))),
        BLACK.stroke_width(3),
    ))
    .map_err(|x| e(&x))?;
    let mut entries: Entries = vec![("all runs together".into(), BLACK, false)];
    // The mean over the makespan: across the chart, or for a resumed pack each session's
    // own across that session (the time between sessions is not makespan).
    let means: Vec<(f64, f64, f64)> = if p.axis.gaps().is_empty() {
        report
            .summary
            .aggregate_throughput
            .map(|a| (0.0, x_max, a))
            .into_iter()
            .collect()
    } else {
        report
            .sessions
            .iter()
            .filter_map(|s| {
                let (a, b) = (s.start_s?, s.end_s?);
                Some((p.axis.x(a), p.axis.x(b), s.aggregate_throughput?))
            })
            .collect()
    };
    for &(x0, x1, a) in &means {
        c.draw_series(DashedLineSeries::new(
            vec![(x0, a.min(top)), (x1, a.min(top))],
            8,
            5,
            RGBColor(90, 90, 90).stroke_width(2),
        ))
        .map_err(|x| e(&x))?;
    }
    if !means.is_empty() {
        let what = if means.len() > 1 {
            "mean over each session"
        } else {
            "mean over makespan"
        };
        entries.push((what.into(), RGBColor(90, 90, 90), false));
    }
    entries.extend(gap);
    Ok(entries)
}

/// The bottom panel on `area`: each run's samples up to `top`, split at its attempts'
/// `starts`, coloured and named when few enough; its entries added to `entries`.
fn runs_panel(
    p: &Panels,
    area: &Area,
    series: &[Series],
    starts: &[Vec<f64>],
    top: f64,
    entries: &mut Entries,
) -> Result<(), E> {
    let e = err(p.path);
    let named = series.len() <= MAX_NAMED_LINES;
    let mut c = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(75)
        .build_cartesian_2d(0f64..p.x_max, 0f64..top)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_label_formatter(&|x| p.axis.label(x))
        .y_label_formatter(&tick)
        .x_desc(if p.axis.gaps().is_empty() {
            "seconds since start"
        } else {
            "seconds since start (long gaps between sessions shortened)"
        })
        .y_desc(format!("each run, {}", p.unit))
        .label_style(font(13))
        .axis_desc_style(font(14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|x| e(&x))?;
    calibration_bands(&mut c, p.report, p.axis, top)?;
    gap_bands(&mut c, p.axis, top, false)?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = if named {
            PALETTE[i % PALETTE.len()]
        } else {
            RGBColor(150, 150, 150)
        };
        draw_run(&mut c, (s, &starts[i]), p.axis, color, named, top, p.path)?;
        if named {
            entries.push((name.to_string(), color, false));
        }
    }
    if !named {
        entries.push((
            format!("{} runs", series.len()),
            RGBColor(150, 150, 150),
            false,
        ));
    }
    if !p.report.calibrations.is_empty() {
        entries.push(("runs measured alone".into(), CALIBRATION_BAND, true));
    }
    Ok(())
}

/// One run's samples `s` (capped at `top`, on `axis`) as lines split at its attempts'
/// `starts` (a lone sample as a dot), thicker when `named`; samples above `top` as
/// triangles on it.
fn draw_run(
    c: &mut Chart<'_, '_>,
    (s, starts): (&[(f64, f64)], &[f64]),
    axis: &TimeAxis,
    color: RGBColor,
    named: bool,
    top: f64,
    path: &Path,
) -> Result<(), E> {
    let e = err(path);
    let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for &(t, v) in s.iter() {
        let last = segments.last().and_then(|g| g.last()).map(|p| p.0);
        if last.is_some_and(|l| starts.iter().any(|&a| a > l && a <= t)) {
            segments.push(Vec::new());
        }
        if let Some(g) = segments.last_mut() {
            g.push((axis.x(t), v.min(top)));
        }
    }
    for pts in segments.iter().filter(|g| !g.is_empty()) {
        if pts.len() >= 2 {
            c.draw_series(LineSeries::new(
                pts.clone(),
                color.stroke_width(if named { 2 } else { 1 }),
            ))
            .map_err(|x| e(&x))?;
        } else {
            // One sample: a dot, not nothing.
            c.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|x| e(&x))?;
        }
    }
    // Samples above the axis: a triangle on its top edge.
    c.draw_series(
        s.iter()
            .filter(|p| p.1 > top)
            .map(|p| TriangleMarker::new((axis.x(p.0), top), 6, color.filled())),
    )
    .map_err(|x| e(&x))?;
    Ok(())
}
