//! What the record is told of an attempt: its output facts as a progress body, its end
//! as an `end` event, its Slurm step, and how it exited in words.

use colloc_results::record::events::{Escaped, Event, Kind, MetricValue, Progress, StepInfo};

use super::super::record::Recorder;
use super::super::steps::StepFacts;
use crate::engine::pack::{Ended, Exit, Seen};
use crate::engine::signal_name;

/// The output facts of an attempt since the last call, as a progress body.
pub(super) fn progress_of(seen: &mut Seen, metric_names: &[String]) -> Progress {
    let samples = seen.series.take_fresh();
    Progress {
        unit: seen.series.unit.clone(),
        samples,
        stats: seen.series.stats,
        metrics: seen
            .metrics
            .iter()
            .zip(metric_names)
            .filter(|(m, _)| m.count > 0)
            .map(|(m, n)| {
                (
                    n.clone(),
                    MetricValue {
                        last: m.last,
                        best: m.best,
                        count: m.count,
                    },
                )
            })
            .collect(),
        epochs: seen.epochs.take_fresh(),
        oom: seen.oom,
        lines: seen.lines,
    }
}

/// A progress body with its times made Unix seconds.
pub(super) fn in_unix(mut p: Progress, rec: &Recorder) -> Progress {
    for s in &mut p.samples {
        s.0 = rec.ts(s.0);
    }
    p.stats.first_t = p.stats.first_t.map(|t| rec.ts(t));
    p.stats.last_t = p.stats.last_t.map(|t| rec.ts(t));
    p
}

/// What the engine reports about an attempt, as an `end` event.
pub(super) fn end_event(rec: &Recorder, e: &mut Ended, kind: Kind, names: &[String]) -> Event {
    let progress = in_unix(progress_of(&mut e.seen, names), rec);
    let (exit_code, signal, error) = match &e.exit {
        Exit::Code(c) => (Some(*c), None, None),
        Exit::Signal(s) => (None, Some(*s), None),
        Exit::NotStarted(m) => (None, None, Some(m.clone())),
        Exit::Lost => (
            None,
            None,
            Some("its supervisor vanished; how it ended is unknown".to_string()),
        ),
    };
    let error = error
        .or_else(|| {
            (e.left > 0)
                .then(|| format!("{} process(es) of it would not exit after SIGKILL", e.left))
        })
        .or_else(|| e.log_error.clone());
    Event::End {
        ts: rec.ts(e.end),
        run: e.job.label.clone(),
        kind,
        attempt: e.job.attempt,
        state: e.state,
        exit_code,
        signal,
        error,
        pid: e.pid,
        escaped: e
            .escaped
            .iter()
            .map(|(pid, c)| Escaped {
                pid: *pid,
                command: c.clone(),
            })
            .collect(),
        gpu: e.gpu.clone(),
        step: None,
        progress,
    }
}

/// What the record keeps of an attempt's step.
pub(super) fn step_info(f: &StepFacts) -> StepInfo {
    StepInfo {
        id: f.step.clone(),
        dispatch_s: f.started_ts.map(|s| (s - f.launched_ts).max(0.0)),
        failed: f.failure.clone(),
        span: f.started_ts.map(|s| (s, f.done_ts.unwrap_or(s).max(s))),
        gpu: f.gpu.as_ref().map(|g| g.gpu.clone()),
        readings: f
            .gpu
            .as_ref()
            .map(|g| g.readings.clone())
            .unwrap_or_default(),
    }
}

pub(super) fn describe(exit: &Exit) -> String {
    match exit {
        Exit::Code(c) => format!("exit code {c}"),
        Exit::Signal(s) => format!("killed by {}", signal_name(*s)),
        Exit::NotStarted(m) => m.clone(),
        Exit::Lost => "status unknown".into(),
    }
}
