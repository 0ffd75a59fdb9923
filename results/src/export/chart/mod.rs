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
//!
//! Each chart is drawn in a file of its own (`timeline`, `runs`, `throughput`, `bench`);
//! this module holds what they share and writes the run charts.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::{ready, FAMILY};
use crate::record::model::Report;
use crate::record::store::{self, ReportDir};
use crate::record::State;

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

/// A drawing area on a canvas.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A chart with two `f64` axes on a canvas.
type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A legend's entries: name, colour, and whether its key is a bar (else a line).
type Entries = Vec<(String, RGBColor, bool)>;

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
    crate::num::median(v).unwrap_or(0.0)
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
/// The charts' time axis: seconds since the report's start, where a gap between two
/// sessions of a resumed pack (the job back in the queue, no colloc running) longer than
/// [`GAP_SHARE`] of the sessions' time is drawn that wide, so that an hour in the queue
/// does not squeeze ten minutes of runs into a corner. Plot coordinates are "shown
/// seconds"; tick labels give the real ones.
pub(super) struct TimeAxis {
    /// Each gap between sessions, in order: real start, real end, width shown.
    gaps: Vec<(f64, f64, f64)>,
    /// The real end of the axis (the last attempt's end).
    end: f64,
}

/// The widest a gap between sessions is drawn, as a share of the sessions' own time.
const GAP_SHARE: f64 = 0.06;

/// The colour of the time between sessions.
const GAP_BAND: RGBColor = RGBColor(232, 232, 232);

impl TimeAxis {
    /// The axis of `report`: its sessions' gaps (where it has several).
    pub(super) fn of(report: &Report) -> TimeAxis {
        let spans: Vec<(f64, f64)> = report
            .sessions
            .iter()
            .filter_map(|s| Some((s.start_s?, s.end_s?)))
            .collect();
        TimeAxis::from_spans(&spans, x_end(report))
    }

    /// The axis of sessions whose runs ran over `spans` (real start, end; in order),
    /// ending at `end`.
    fn from_spans(spans: &[(f64, f64)], end: f64) -> TimeAxis {
        let active: f64 = spans.iter().map(|(a, b)| (b - a).max(0.0)).sum();
        let widest = (active * GAP_SHARE).max(1e-3);
        let gaps = spans
            .windows(2)
            .filter(|w| w[1].0 > w[0].1)
            .map(|w| (w[0].1, w[1].0, (w[1].0 - w[0].1).min(widest)))
            .collect();
        TimeAxis { gaps, end }
    }

    /// Shown seconds of real time `t`.
    pub(super) fn x(&self, t: f64) -> f64 {
        let mut cut = 0.0;
        for &(a, b, w) in &self.gaps {
            if t >= b {
                cut += (b - a) - w;
            } else if t > a {
                return a - cut + (t - a) / (b - a) * w;
            }
        }
        t - cut
    }

    /// Real seconds of shown `x` (the inverse of [`TimeAxis::x`]).
    pub(super) fn t(&self, x: f64) -> f64 {
        let mut cut = 0.0;
        for &(a, b, w) in &self.gaps {
            let (xa, xb) = (a - cut, a - cut + w);
            if x >= xb {
                cut += (b - a) - w;
            } else if x > xa {
                return a + (x - xa) / w * (b - a);
            }
        }
        x + cut
    }

    /// The axis's right end, shown seconds (a margin past the last attempt's end).
    pub(super) fn x_max(&self) -> f64 {
        self.x(self.end) * 1.02
    }

    /// The gaps as drawn: shown start, shown end, real length in seconds.
    pub(super) fn gaps(&self) -> Vec<(f64, f64, f64)> {
        self.gaps
            .iter()
            .map(|&(a, b, _)| (self.x(a), self.x(b), b - a))
            .collect()
    }

    /// The tick label of shown `x`: its real seconds.
    pub(super) fn label(&self, x: &f64) -> String {
        tick(&self.t(*x))
    }
}

/// The gaps between sessions of `axis` as grey bands from 0 to `top`, each named with
/// its real length when `named` (the top panel); its legend entry when there are any.
fn gap_bands(
    chart: &mut Chart<'_, '_>,
    axis: &TimeAxis,
    top: f64,
    named: bool,
) -> Result<Option<(String, RGBColor, bool)>, String> {
    let gaps = axis.gaps();
    if gaps.is_empty() {
        return Ok(None);
    }
    let e = |x: &dyn std::fmt::Display| format!("gaps between sessions: {x}");
    chart
        .draw_series(
            gaps.iter()
                .map(|&(x0, x1, _)| Rectangle::new([(x0, 0.0), (x1, top)], GAP_BAND.filled())),
        )
        .map_err(|x| e(&x))?;
    if named {
        for &(x0, _, secs) in &gaps {
            let shown = crate::duration::show(std::time::Duration::from_secs(secs.round() as u64));
            chart
                .draw_series(std::iter::once(Text::new(
                    shown,
                    (x0, top * 0.97),
                    font(11).color(&RGBColor(90, 90, 90)),
                )))
                .map_err(|x| e(&x))?;
        }
    }
    Ok(Some(("between sessions".into(), GAP_BAND, true)))
}

/// The bar of a run measured alone (a calibration) on the timeline.
const CALIBRATION: RGBColor = RGBColor(158, 202, 225);
/// The band behind the throughput lines while calibrations ran (no run of the pack ran).
const CALIBRATION_BAND: RGBColor = RGBColor(226, 238, 246);

/// Runs whose throughput rests on fewer samples than this do not set the bar axis.
const FEW_SAMPLES: u64 = 3;

mod bench;
mod runs;
mod throughput;
mod timeline;

pub use bench::{bench, BenchMark, BenchPoint};
use runs::runs_into;
use throughput::throughput_into;
use timeline::timeline_into;

#[cfg(test)]
mod tests;
