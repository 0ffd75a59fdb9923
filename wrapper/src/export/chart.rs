//! PNG charts of a run report and of a benchmark, drawn with the embedded font
//! ([`super::font`]) so they have text on any node:
//!
//! - `colloc-timeline.png`: which run held which slot when, coloured by outcome;
//! - `colloc-runs.png`: each run's throughput (bars by outcome, its solo figure marked);
//! - `colloc-throughput.png`: throughput over time, all runs together on top and each run
//!   below (coloured and named when few enough to tell apart);
//! - `bench.png`: aggregate throughput against copies at once, one line per mode.
//!
//! Legends sit beside the plot, never on the data. The y axis is robust to a lone outlier:
//! it ends a little above the 99th percentile of all samples (or the highest run median),
//! and points above it are drawn on the top edge as triangles.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::{ready, FAMILY};
use crate::engine::State;
use crate::record::model::{Report, RunRecord};
use crate::record::store::{self, ReportDir};

/// A palette whose colours can be told apart (matplotlib's tab10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Most runs drawn each with its own colour and legend entry.
const MAX_NAMED_LINES: usize = 10;
/// Most runs drawn as bars.
const MAX_BARS: usize = 80;

const W: u32 = 1200;
const LEGEND_W: u32 = 230;

/// The colour of an outcome.
pub fn outcome_color(state: State, oom: bool) -> RGBColor {
    match state {
        State::Succeeded => RGBColor(44, 160, 44),
        State::Failed if oom => RGBColor(148, 103, 189),
        State::Failed => RGBColor(214, 39, 40),
        State::TimedOut => RGBColor(255, 127, 14),
        State::Interrupted | State::NotStarted => RGBColor(127, 127, 127),
        State::Running => RGBColor(31, 119, 180),
    }
}

const OUTCOMES: [(&str, State, bool); 6] = [
    ("succeeded", State::Succeeded, false),
    ("failed", State::Failed, false),
    ("failed: out of memory", State::Failed, true),
    ("timed out", State::TimedOut, false),
    ("interrupted", State::Interrupted, false),
    ("running", State::Running, false),
];

type E = String;

fn err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> E + '_ {
    move |e| format!("cannot draw {}: {e}", path.display())
}

fn font(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// The top of a y axis robust to lone outliers.
pub fn robust_top(values: &[f64], medians: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 1.0;
    }
    v.sort_by(f64::total_cmp);
    let q = v[((v.len() - 1) as f64 * 0.99).round() as usize];
    let m = medians.iter().copied().fold(0.0, f64::max);
    let top = q.max(m) * 1.15;
    if top > 0.0 {
        top
    } else {
        1.0
    }
}

/// Tick labels without needless decimals.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Names beside rows: right-aligned text left of the plot at each row's centre.
fn row_labels<X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    chart: &ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, Y>>,
    rows: &[(f64, String)],
    x0: f64,
) -> Result<(), String> {
    for (y, name) in rows {
        let (px, py) = chart.backend_coord(&(x0, *y));
        let w = 7 * name.chars().count() as i32;
        root.draw(&Text::new(name.clone(), (px - w - 8, py - 7), font(12)))
            .map_err(|e| format!("labels: {e}"))?;
    }
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    colloc_core::num::median(v).unwrap_or(0.0)
}

/// A legend beside a plot: colour keys and names.
fn legend(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    entries: &[(String, RGBColor, bool)],
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| format!("legend: {x}");
    let mut y = 50;
    area.draw(&Text::new(title.to_string(), (10, y - 24), font(15)))
        .map_err(|x| e(&x))?;
    for (name, color, bar) in entries {
        if *bar {
            area.draw(&Rectangle::new([(10, y - 6), (30, y + 6)], color.filled()))
                .map_err(|x| e(&x))?;
        } else {
            area.draw(&PathElement::new(
                vec![(10, y), (30, y)],
                color.stroke_width(3),
            ))
            .map_err(|x| e(&x))?;
        }
        let shown: String = name.chars().take(26).collect();
        area.draw(&Text::new(shown, (36, y - 7), font(13)))
            .map_err(|x| e(&x))?;
        y += 22;
    }
    Ok(())
}

/// A picture drawn in memory (RGB), PNG-encoded afterwards: charts are written like
/// every other file of a report directory, never through a path plotters opens.
pub struct Canvas {
    w: u32,
    h: u32,
    rgb: Vec<u8>,
}

impl Canvas {
    /// A white-to-be canvas of `w`×`h` in `slot`, and the area to draw on it.
    fn area(slot: &mut Option<Canvas>, w: u32, h: u32) -> DrawingArea<BitMapBackend<'_>, Shift> {
        let c = slot.insert(Canvas {
            w,
            h,
            rgb: vec![0; w as usize * h as usize * 3],
        });
        BitMapBackend::with_buffer(&mut c.rgb, (w, h)).into_drawing_area()
    }

    /// The drawn canvas as PNG bytes.
    fn png(canvas: Option<Canvas>, path: &Path) -> Result<Vec<u8>, E> {
        let c = canvas.ok_or_else(|| format!("cannot draw {}: nothing drawn", path.display()))?;
        let mut png = Vec::new();
        let mut enc = png::Encoder::new(&mut png, c.w, c.h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()
            .and_then(|mut wr| wr.write_image_data(&c.rgb))
            .map_err(|x| err(path)(&x))?;
        Ok(png)
    }
}

/// One of the run charts as PNG bytes; `None` when it has nothing to show.
type Draw = fn(&Report, &Path, &mut Option<Canvas>) -> Result<bool, E>;

fn draw_png(draw: Draw, report: &Report, path: &Path) -> Result<Option<Vec<u8>>, E> {
    let mut canvas = None;
    if !draw(report, path, &mut canvas)? {
        return Ok(None);
    }
    Canvas::png(canvas, path).map(Some)
}

/// Slot timeline (see [`timeline_into`]) as PNG bytes.
pub fn timeline(report: &Report, path: &Path) -> Result<Option<Vec<u8>>, E> {
    draw_png(timeline_into, report, path)
}

/// Per-run throughput (see [`runs_into`]) as PNG bytes.
pub fn runs(report: &Report, path: &Path) -> Result<Option<Vec<u8>>, E> {
    draw_png(runs_into, report, path)
}

/// Throughput over time (see [`throughput_into`]) as PNG bytes.
pub fn throughput(report: &Report, path: &Path) -> Result<Option<Vec<u8>>, E> {
    draw_png(throughput_into, report, path)
}

/// Draw the three charts of a run report into `dir`; the files drawn.
pub fn run_charts(report: &Report, dir: &ReportDir) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !ready() {
        return out;
    }
    type Png = fn(&Report, &Path) -> Result<Option<Vec<u8>>, E>;
    let jobs: [(&str, Png); 3] = [
        (store::TIMELINE_PNG, timeline),
        (store::RUNS_PNG, runs),
        (store::THROUGHPUT_PNG, throughput),
    ];
    for (name, draw) in jobs {
        let p = dir.shown(name);
        let written = draw(report, &p).and_then(|png| match png {
            Some(png) => dir
                .write(name, &png)
                .map(|()| true)
                .map_err(|e| e.to_string()),
            None => Ok(false),
        });
        match written {
            Ok(true) => out.push(p),
            Ok(false) => {}
            Err(e) => log::warn!("{e}"),
        }
    }
    out
}

fn x_end(report: &Report) -> f64 {
    report
        .runs
        .iter()
        .flat_map(|r| &r.attempts)
        .map(|a| a.start_s + a.wall_s)
        .chain(report.calibrations.iter().map(|c| c.start_s + c.wall_s))
        .fold(0.0, f64::max)
        .max(1.0)
}

/// The colour of a `--solo-baseline` calibration: a run measured alone, not one of the
/// pack's attempts.
pub const CALIBRATION: RGBColor = RGBColor(158, 202, 225);
/// The band behind the throughput lines while calibrations ran (no run of the pack ran).
const CALIBRATION_BAND: RGBColor = RGBColor(226, 238, 246);

/// A slot's row label: `slot 3`, or `n2 slot 3` where runs went to several nodes.
fn slot_label(report: &Report, k: usize) -> String {
    match report.slots.get(k).and_then(|s| s.node.as_deref()) {
        Some(node) => format!("{node} slot {k}"),
        None => format!("slot {k}"),
    }
}

/// Slot timeline: one row per slot, one bar per attempt.
fn timeline_into(report: &Report, path: &Path, canvas: &mut Option<Canvas>) -> Result<bool, E> {
    let attempts: Vec<(&RunRecord, &crate::record::model::AttemptRecord)> = report
        .runs
        .iter()
        .flat_map(|r| r.attempts.iter().map(move |a| (r, a)))
        .collect();
    if attempts.is_empty() && report.calibrations.is_empty() {
        return Ok(false);
    }
    let e = err(path);
    let slots = report.slots.len().max(
        attempts
            .iter()
            .map(|(_, a)| a.slot + 1)
            .chain(report.calibrations.iter().map(|c| c.slot + 1))
            .max()
            .unwrap_or(1),
    );
    let row_h = (600 / slots as u32).clamp(6, 40);
    let h = (row_h * slots as u32 + 140).clamp(300, 2400);
    let root = Canvas::area(canvas, W, h);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plot, side) = root.split_horizontally(W - LEGEND_W);
    let x_max = x_end(report) * 1.02;
    let n = slots as f64;
    // Room for the longest row label (node names across nodes).
    let label_w = (0..slots)
        .map(|k| 7 * slot_label(report, k).chars().count() as u32 + 16)
        .max()
        .unwrap_or(0)
        .clamp(70, 240);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("colloc: which run held which slot ({})", report.mode),
            font(20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(if row_h >= 12 { label_w } else { 10 })
        .build_cartesian_2d(0f64..x_max, 0f64..n)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&tick)
        .x_desc("seconds since start")
        .label_style(font(13))
        .axis_desc_style(font(14))
        .draw()
        .map_err(|x| e(&x))?;
    if row_h >= 12 {
        let rows: Vec<(f64, String)> = (0..slots)
            .map(|k| (n - k as f64 - 0.5, slot_label(report, k)))
            .collect();
        row_labels(&root, &chart, &rows, 0.0)?;
    }
    let px_per_s = f64::from(W - LEGEND_W - 100) / x_max;
    // Calibrations first, then the pack's attempts: (slot, start, wall, colour, label).
    let bars = report
        .calibrations
        .iter()
        .map(|c| {
            (
                c.slot,
                c.start_s,
                c.wall_s,
                CALIBRATION,
                format!("{} alone", c.name),
            )
        })
        .chain(attempts.iter().map(|(r, a)| {
            let label = if a.attempt > 1 {
                format!("{} #{}", r.name, a.attempt)
            } else {
                r.name.clone()
            };
            (
                a.slot,
                a.start_s,
                a.wall_s,
                outcome_color(a.state, a.oom),
                label,
            )
        }));
    for (slot, start_s, wall_s, color, label) in bars {
        let y = n - slot as f64 - 1.0;
        let (x0, x1) = (start_s, start_s + wall_s.max(x_max / 2000.0));
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, y + 0.12), (x1, y + 0.88)],
                color.filled(),
            )))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, y + 0.12), (x1, y + 0.88)],
                WHITE.stroke_width(1),
            )))
            .map_err(|x| e(&x))?;
        let width_px = (x1 - x0) * px_per_s;
        if row_h >= 14 && width_px > 7.0 * label.chars().count() as f64 + 6.0 {
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (x0 + 3.0 / px_per_s, y + 0.5 + 0.3),
                    font(12).color(if color == CALIBRATION { &BLACK } else { &WHITE }),
                )))
                .map_err(|x| e(&x))?;
        }
    }
    let bucket = |s: State, oom: bool| (s, s == State::Failed && oom);
    let mut entries: Vec<(String, RGBColor, bool)> = OUTCOMES
        .iter()
        .filter(|(_, s, oom)| {
            attempts
                .iter()
                .any(|(_, a)| bucket(a.state, a.oom) == (*s, *oom))
        })
        .map(|(n, s, oom)| (n.to_string(), outcome_color(*s, *oom), true))
        .collect();
    if !report.calibrations.is_empty() {
        entries.push(("measured alone (solo)".into(), CALIBRATION, true));
    }
    legend(&side, "attempts", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

/// Runs whose throughput rests on fewer samples than this do not set the bar axis.
const FEW_SAMPLES: u64 = 3;

/// Each run's throughput as a bar, coloured by outcome, its solo figure as a tick. A run
/// with fewer than three samples is drawn hollow and does not set the axis; a bar past the
/// axis ends in a triangle with its value.
fn runs_into(report: &Report, path: &Path, canvas: &mut Option<Canvas>) -> Result<bool, E> {
    let with: Vec<&RunRecord> = report
        .runs
        .iter()
        .filter(|r| r.throughput.is_some())
        .take(MAX_BARS)
        .collect();
    if with.is_empty() {
        return Ok(false);
    }
    let e = err(path);
    let unit = report
        .summary
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let n = with.len();
    let h = (n as u32 * 24 + 150).clamp(300, 2400);
    let root = Canvas::area(canvas, W, h);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plot, side) = root.split_horizontally(W - LEGEND_W);
    let solid = |r: &RunRecord| {
        r.throughput
            .as_ref()
            .is_some_and(|t| t.count >= FEW_SAMPLES)
    };
    let mut values: Vec<f64> = with
        .iter()
        .filter(|r| solid(r))
        .filter_map(|r| r.throughput.as_ref().map(|t| t.mean))
        .chain(with.iter().filter_map(|r| r.solo_throughput))
        .collect();
    if values.is_empty() {
        values = with
            .iter()
            .filter_map(|r| r.throughput.as_ref().map(|t| t.mean))
            .collect();
    }
    let top = values.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15;
    let name_w = with
        .iter()
        .map(|r| r.name.chars().count().min(30))
        .max()
        .unwrap_or(4) as u32
        * 7
        + 16;
    let title = if n < report
        .runs
        .iter()
        .filter(|r| r.throughput.is_some())
        .count()
    {
        format!("colloc: throughput per run (first {n})")
    } else {
        "colloc: throughput per run".into()
    };
    let nf = n as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, font(20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(name_w.min(230))
        .build_cartesian_2d(0f64..top, 0f64..nf)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&tick)
        .x_desc(format!("{unit} (work over sampled time)"))
        .label_style(font(12))
        .axis_desc_style(font(14))
        .draw()
        .map_err(|x| e(&x))?;
    let rows: Vec<(f64, String)> = with
        .iter()
        .enumerate()
        .map(|(i, r)| (nf - i as f64 - 0.5, r.name.chars().take(30).collect()))
        .collect();
    row_labels(&root, &chart, &rows, 0.0)?;
    for (i, r) in with.iter().enumerate() {
        let y = nf - i as f64 - 1.0;
        let Some(t) = &r.throughput else { continue };
        let v = t.mean;
        let c = outcome_color(r.state, r.attempts.last().is_some_and(|a| a.oom));
        let rect = [(0.0, y + 0.15), (v.min(top), y + 0.85)];
        let style = if solid(r) {
            c.filled()
        } else {
            c.stroke_width(2)
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(rect, style)))
            .map_err(|x| e(&x))?;
        if v > top {
            chart
                .draw_series(std::iter::once(TriangleMarker::new(
                    (top, y + 0.5),
                    7,
                    c.filled(),
                )))
                .map_err(|x| e(&x))?;
            let (px, py) = chart.backend_coord(&(top, y + 0.5));
            root.draw(&Text::new(tick(&v), (px - 60, py - 20), font(11)))
                .map_err(|x| e(&x))?;
        }
        if let Some(s) = r.solo_throughput {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(s.min(top), y + 0.05), (s.min(top), y + 0.95)],
                    BLACK.stroke_width(3),
                )))
                .map_err(|x| e(&x))?;
        }
    }
    let bucket = |r: &RunRecord| {
        (
            r.state,
            r.state == State::Failed && r.attempts.last().is_some_and(|a| a.oom),
        )
    };
    let mut entries: Vec<(String, RGBColor, bool)> = OUTCOMES
        .iter()
        .filter(|(_, s, oom)| with.iter().any(|r| bucket(r) == (*s, *oom)))
        .map(|(n, s, oom)| (n.to_string(), outcome_color(*s, *oom), true))
        .collect();
    if with.iter().any(|r| !solid(r)) {
        entries.push(("hollow: < 3 samples".into(), RGBColor(120, 120, 120), false));
    }
    if with.iter().any(|r| r.solo_throughput.is_some()) {
        entries.push(("alone (solo)".into(), BLACK, false));
    }
    legend(&side, "runs", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

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

/// The spans of `--solo-baseline` calibrations as light bands from 0 to `top`: while
/// they ran, no run of the pack did, so the lines have a gap there.
fn calibration_bands<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    report: &Report,
    top: f64,
) -> Result<(), String> {
    chart
        .draw_series(report.calibrations.iter().map(|c| {
            Rectangle::new(
                [(c.start_s, 0.0), (c.start_s + c.wall_s, top)],
                CALIBRATION_BAND.filled(),
            )
        }))
        .map(|_| ())
        .map_err(|x| format!("calibration bands: {x}"))
}

/// Throughput over time in two panels on one time axis: all runs together on top, each
/// run below (coloured and named when few enough to tell apart), each panel with its own
/// y axis.
fn throughput_into(report: &Report, path: &Path, canvas: &mut Option<Canvas>) -> Result<bool, E> {
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
    let x_max = x_end(report) * 1.02;
    let steps = 600;
    let agg: Vec<(f64, f64)> = (0..=steps)
        .map(|k| {
            let t = x_max * f64::from(k) / f64::from(steps);
            (t, aggregate_at(report, t))
        })
        .collect();
    let named = series.len() <= MAX_NAMED_LINES;
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
    let run_top = robust_top(&run_values, &medians);
    let agg_values: Vec<f64> = agg.iter().map(|p| p.1).collect();
    let agg_top = robust_top(
        &agg_values,
        &[median(
            &agg_values
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .collect::<Vec<_>>(),
        )],
    )
    .max(report.summary.aggregate_throughput.unwrap_or(0.0) * 1.15);
    let root = Canvas::area(canvas, W, 900);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plots, side) = root.split_horizontally(W - LEGEND_W);
    let (top, bottom) = plots.split_vertically(360);

    let mut c = ChartBuilder::on(&top)
        .caption(
            format!("colloc: throughput over time ({})", report.mode),
            font(20),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(75)
        .build_cartesian_2d(0f64..x_max, 0f64..agg_top)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .y_desc(format!("all runs, {unit}"))
        .label_style(font(13))
        .axis_desc_style(font(14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|x| e(&x))?;
    calibration_bands(&mut c, report, agg_top)?;
    c.draw_series(LineSeries::new(
        agg.iter().map(|&(t, v)| (t, v.min(agg_top))),
        BLACK.stroke_width(3),
    ))
    .map_err(|x| e(&x))?;
    let mut entries: Vec<(String, RGBColor, bool)> =
        vec![("all runs together".into(), BLACK, false)];
    if let Some(a) = report.summary.aggregate_throughput {
        c.draw_series(DashedLineSeries::new(
            vec![(0.0, a.min(agg_top)), (x_max, a.min(agg_top))],
            8,
            5,
            RGBColor(90, 90, 90).stroke_width(2),
        ))
        .map_err(|x| e(&x))?;
        entries.push(("mean over makespan".into(), RGBColor(90, 90, 90), false));
    }

    let mut c = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(75)
        .build_cartesian_2d(0f64..x_max, 0f64..run_top)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .x_desc("seconds since start")
        .y_desc(format!("each run, {unit}"))
        .label_style(font(13))
        .axis_desc_style(font(14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|x| e(&x))?;
    calibration_bands(&mut c, report, run_top)?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = if named {
            PALETTE[i % PALETTE.len()]
        } else {
            RGBColor(150, 150, 150)
        };
        let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(t, v) in s.iter() {
            let last = segments.last().and_then(|g| g.last()).map(|p| p.0);
            if last.is_some_and(|l| starts[i].iter().any(|&a| a > l && a <= t)) {
                segments.push(Vec::new());
            }
            if let Some(g) = segments.last_mut() {
                g.push((t, v.min(run_top)));
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
                .filter(|p| p.1 > run_top)
                .map(|p| TriangleMarker::new((p.0, run_top), 6, color.filled())),
        )
        .map_err(|x| e(&x))?;
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
    if !report.calibrations.is_empty() {
        entries.push(("runs measured alone".into(), CALIBRATION_BAND, true));
    }
    legend(&side, "throughput", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

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

/// `bench.png`: aggregate throughput against copies at once, one line per mode with
/// each point's interval as an error bar; solo dashed with its interval shaded, the
/// reference command dotted.
pub fn bench(
    lines: &[(String, Vec<BenchPoint>)],
    solo: Option<BenchPoint>,
    reference: Option<f64>,
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
    legend(&side, "mode", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_outlier_does_not_set_the_axis() {
        let mut v: Vec<f64> = (0..1200).map(|i| 100.0 + f64::from(i % 7)).collect();
        v.push(11_000.0);
        let top = robust_top(&v, &[103.0]);
        assert!(top < 200.0, "{top}");
        // but a run whose typical level is high is shown whole
        let top = robust_top(&v, &[103.0, 900.0]);
        assert!(top > 900.0, "{top}");
        assert_eq!(robust_top(&[], &[]), 1.0);
    }
}
