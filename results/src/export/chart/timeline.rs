//! `colloc-timeline.png`: which run held which slot when, coloured by outcome.

use std::path::Path;

use plotters::prelude::*;

use super::{
    err, font, gap_bands, legend, outcome_color, row_labels, Area, Canvas, Chart, Entries,
    TimeAxis, CALIBRATION, E, LEGEND_W, OUTCOMES, W,
};
use crate::record::model::{AttemptRecord, Report, RunRecord};
use crate::record::State;

/// A slot's row label: `slot 3`, or `n2 slot 3` where runs went to several nodes.
fn slot_label(report: &Report, k: usize) -> String {
    match report.slots.get(k).and_then(|s| s.node.as_deref()) {
        Some(node) => format!("{node} slot {k}"),
        None => format!("slot {k}"),
    }
}

/// An attempt of the pack, with its run.
type Attempt<'a> = (&'a RunRecord, &'a AttemptRecord);

/// A bar of the timeline: slot, start, wall time, colour, label, and whether it started
/// early (beside its slot's previous attempt: drawn in the row's lower half, over the
/// other's end).
type Bar = (usize, f64, f64, RGBColor, String, bool);

/// Slot timeline: one row per slot, one bar per attempt; the time between the sessions
/// of a resumed pack drawn as a grey gap (shortened where long: [`TimeAxis`]).
pub(super) fn timeline_into(
    report: &Report,
    path: &Path,
    canvas: &mut Option<Canvas>,
) -> Result<bool, E> {
    let attempts: Vec<Attempt> = report
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
    let axis = TimeAxis::of(report);
    let x_max = axis.x_max();
    let n = slots as f64;
    let mut chart = axes(report, &plot, (slots, row_h), &axis, path)?;
    let gap = gap_bands(&mut chart, &axis, n, true)?;
    if row_h >= 12 {
        let rows: Vec<(f64, String)> = (0..slots)
            .map(|k| (n - k as f64 - 0.5, slot_label(report, k)))
            .collect();
        row_labels(&root, &chart, &rows, 0.0)?;
    }
    let px_per_s = f64::from(W - LEGEND_W - 100) / x_max;
    for bar in bars(report, &attempts, &axis) {
        draw_bar(&mut chart, bar, n, x_max, px_per_s, row_h, path)?;
    }
    let mut entries = entries(report, &attempts);
    entries.extend(gap);
    legend(&side, "attempts", &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

/// The timeline's title and axes on `plot`: time across (`axis`), one row per slot
/// (`slots` rows of `row_h` pixels), rows named when `row_h` leaves room.
fn axes<'a, 'b>(
    report: &Report,
    plot: &'a Area<'b>,
    (slots, row_h): (usize, u32),
    axis: &TimeAxis,
    path: &Path,
) -> Result<Chart<'a, 'b>, E> {
    let x_max = axis.x_max();
    let e = err(path);
    let n = slots as f64;
    // Room for the longest row label (node names across nodes).
    let label_w = (0..slots)
        .map(|k| 7 * slot_label(report, k).chars().count() as u32 + 16)
        .max()
        .unwrap_or(0)
        .clamp(70, 240);
    let mut chart = ChartBuilder::on(plot)
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
        .x_label_formatter(&|x| axis.label(x))
        .x_desc(if axis.gaps().is_empty() {
            "seconds since start"
        } else {
            "seconds since start (long gaps between sessions shortened)"
        })
        .label_style(font(13))
        .axis_desc_style(font(14))
        .draw()
        .map_err(|x| e(&x))?;
    Ok(chart)
}

/// The timeline's bars on `axis` (shown start and width): calibrations first, then the
/// pack's attempts (a retry's label names its attempt), those started early last.
fn bars(report: &Report, attempts: &[Attempt], axis: &TimeAxis) -> Vec<Bar> {
    let shown = |start: f64, wall: f64| (axis.x(start), axis.x(start + wall) - axis.x(start));
    let mut v: Vec<Bar> = report
        .calibrations
        .iter()
        .map(|c| {
            let (x, w) = shown(c.start_s, c.wall_s);
            (
                c.slot,
                x,
                w,
                CALIBRATION,
                format!("{} alone", c.name),
                false,
            )
        })
        .chain(attempts.iter().map(|(r, a)| {
            let label = if a.attempt > 1 {
                format!("{} #{}", r.name, a.attempt)
            } else {
                r.name.clone()
            };
            let (x, w) = shown(a.start_s, a.wall_s);
            let color = outcome_color(a.state, a.oom);
            (a.slot, x, w, color, label, a.started_early)
        }))
        .collect();
    v.sort_by_key(|b| b.5);
    v
}

/// One bar on its slot's row (of `n`), outlined in white, with its label inside where
/// the row is tall enough and the bar wide enough.
fn draw_bar(
    chart: &mut Chart<'_, '_>,
    (slot, start_s, wall_s, color, label, early): Bar,
    n: f64,
    x_max: f64,
    px_per_s: f64,
    row_h: u32,
    path: &Path,
) -> Result<(), E> {
    let e = err(path);
    let y = n - slot as f64 - 1.0;
    let (x0, x1) = (start_s, start_s + wall_s.max(x_max / 2000.0));
    let (bottom, top) = if early { (0.12, 0.5) } else { (0.12, 0.88) };
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(x0, y + bottom), (x1, y + top)],
            color.filled(),
        )))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(x0, y + bottom), (x1, y + top)],
            WHITE.stroke_width(1),
        )))
        .map_err(|x| e(&x))?;
    let width_px = (x1 - x0) * px_per_s;
    let tall = if early { row_h >= 28 } else { row_h >= 14 };
    if tall && width_px > 7.0 * label.chars().count() as f64 + 6.0 {
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (x0 + 3.0 / px_per_s, y + top - 0.08),
                font(12).color(if color == CALIBRATION { &BLACK } else { &WHITE }),
            )))
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// The timeline's legend: the outcomes its attempts had, and the calibrations if any.
fn entries(report: &Report, attempts: &[Attempt]) -> Entries {
    let bucket = |s: State, oom: bool| (s, s == State::Failed && oom);
    let mut entries: Entries = OUTCOMES
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
    entries
}
