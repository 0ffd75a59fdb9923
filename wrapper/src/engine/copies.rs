//! N copies of one command on N slots, until their measurement window is complete: the
//! engine call under `colloc bench` (and any later caller that compares configurations).
//!
//! The window rule: once every copy has printed its first throughput sample, the copies
//! run on for `warmup` + `duration` after the last of those first samples, and then all
//! are stopped (SIGTERM, SIGKILL after the grace period). A copy that fails ends the
//! measurement as failed; a copy that ends by itself ends it early (the common-window
//! analysis, [`colloc_results::rules::window`], decides whether enough was measured); no first sample from
//! some copy within `startup_timeout` fails it. What the copies printed after the stop
//! (their shutdown) is the caller's to leave out: it gets the time of the stop.
//!
//! Each copy is an attempt of the pack engine, so a GPU sampler given here reads each
//! copy's own processes exactly as `colloc run` reads each run's ([`colloc_results::telemetry::attempts`]).

use std::time::Duration;

use super::launch::Launcher;
use super::pack::{Ctl, Driver, Ended, Engine, Exit, Job, LogFile, Options, Slot};
use super::signals::{Signals, STOP};
use super::{signal_name, Clock};
use colloc_results::record::State;
use colloc_results::rules::throughput::Sample;
use colloc_results::telemetry::{AttemptGpu, Sampler};

/// How often the window is checked.
const TICK: Duration = Duration::from_millis(50);

/// The measurement window of a set of copies.
#[derive(Debug, Clone)]
pub struct Window {
    /// Time after the last copy's first sample before the measurement.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// Longest wait for every copy's first sample.
    pub startup_timeout: Duration,
    /// Time between SIGTERM and SIGKILL at the end.
    pub grace: Duration,
    /// What is read as throughput, for messages.
    pub what: String,
}

/// What the copies did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Each copy's kept samples (the engine's clock).
    pub samples: Vec<Vec<Sample>>,
    /// The unit of the first copy's samples.
    pub unit: Option<String>,
    /// When they were launched.
    pub launch_t: f64,
    /// When they were told to stop (or the last ended).
    pub stop_t: f64,
    /// Why the measurement failed, if it did.
    pub failure: Option<String>,
    /// A stop signal colloc received meanwhile.
    pub signal: Option<i32>,
    /// Each copy's GPU figures, where a sampler read them.
    pub gpu: Vec<Option<AttemptGpu>>,
}

/// The last lines of a log, for an error message (read from its last 64 KiB, through
/// its directory's handle).
fn log_tail(log: &LogFile, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    if let Some(Ok(Some((mut f, len)))) = log.dir.as_ref().map(|d| d.open_file(&log.name, u64::MAX))
    {
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 << 10)));
        let _ = f.take(64 << 10).read_to_end(&mut bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let from = tail.len().saturating_sub(lines);
    tail[from..].join(" | ")
}

struct Copies<'a> {
    window: &'a Window,
    jobs: Vec<Option<Job>>,
    first: Vec<Option<f64>>,
    stop_at: Option<f64>,
    out: Outcome,
    stopped: Option<f64>,
}

impl Copies<'_> {
    fn stop(&mut self, ctl: &mut Ctl<'_>, reason: &str) {
        if !ctl.stopping() {
            self.stopped = Some(ctl.now());
            ctl.stop_all(reason, libc::SIGTERM);
        }
    }
}

impl Driver for Copies<'_> {
    fn next_job(&mut self, slot: usize) -> Option<Job> {
        self.jobs.get_mut(slot)?.take()
    }

    fn ended(&mut self, e: Ended, ctl: &mut Ctl<'_>) {
        let i = e.job.run;
        if let Some(s) = self.out.samples.get_mut(i) {
            *s = e.seen.series.as_samples();
        }
        self.first[i] = e.seen.series.stats.first_t;
        if let Some(g) = self.out.gpu.get_mut(i) {
            *g = e.gpu;
        }
        if self.out.unit.is_none() {
            self.out.unit = e.seen.series.unit.clone();
        }
        if ctl.stopping() {
            return;
        }
        let after = e.end - self.out.launch_t;
        if e.state != State::Succeeded {
            let status = match &e.exit {
                Exit::Code(c) => format!("exit status: {c}"),
                Exit::Signal(s) => format!("killed by {}", signal_name(*s)),
                Exit::NotStarted(m) => m.clone(),
                Exit::Lost => "status unknown".into(),
            };
            self.out.failure = Some(format!(
                "copy {i} exited ({status}) after {after:.1} s: {}",
                log_tail(&e.job.log, 2)
            ));
            self.stop(ctl, "a copy failed");
        } else {
            log::info!("copy {i} finished on its own");
            self.stop(ctl, "a copy finished");
        }
    }

    fn tick(&mut self, ctl: &mut Ctl<'_>) {
        if ctl.stopping() {
            return;
        }
        for v in ctl.running() {
            if let Some(f) = v.seen.series.stats.first_t {
                self.first[v.job.run] = Some(f);
            }
        }
        let now = ctl.now();
        if self.stop_at.is_none() && self.first.iter().all(Option::is_some) {
            let ready = self
                .first
                .iter()
                .flatten()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            self.stop_at =
                Some(ready + self.window.warmup.as_secs_f64() + self.window.duration.as_secs_f64());
        }
        match self.stop_at {
            Some(at) if now >= at => self.stop(ctl, "measurement window complete"),
            Some(_) => {}
            None if now - self.out.launch_t > self.window.startup_timeout.as_secs_f64() => {
                let slow = self.first.iter().position(Option::is_none).unwrap_or(0);
                let log = ctl
                    .running()
                    .find(|v| v.job.run == slow)
                    .map(|v| v.job.log.path.display().to_string())
                    .unwrap_or_default();
                self.out.failure = Some(format!(
                    "copy {slow} printed no throughput line within {:.0} s ({}); see {log}",
                    self.window.startup_timeout.as_secs_f64(),
                    self.window.what
                ));
                self.stop(ctl, "a copy printed no throughput");
            }
            None => {}
        }
    }

    fn signal(&mut self, sig: i32, _to: &[(usize, u32)]) {
        if STOP.contains(&sig) {
            self.out.signal.get_or_insert(sig);
        }
    }
}

/// Run `jobs` (copy `i` is `jobs[i]`, with `run == i`) on `slots` (one each) until their
/// window is complete, and return what they printed (and, with a `sampler` over `slots`,
/// their GPU figures).
pub fn run(
    launcher: &mut dyn Launcher,
    signals: &Signals,
    clock: Clock,
    slots: Vec<Slot>,
    jobs: Vec<Job>,
    window: &Window,
    sampler: Option<&Sampler>,
) -> Outcome {
    let n = jobs.len();
    let mut copies = Copies {
        window,
        jobs: jobs.into_iter().map(Some).collect(),
        first: vec![None; n],
        stop_at: None,
        out: Outcome {
            samples: vec![Vec::new(); n],
            gpu: vec![None; n],
            launch_t: clock.now(),
            ..Outcome::default()
        },
        stopped: None,
    };
    let mut engine = Engine::new(
        launcher,
        slots,
        sampler,
        signals,
        Options {
            grace: window.grace,
            tick: TICK,
            live_view: false,
        },
        clock,
    );
    engine.run(&mut copies);
    copies.out.stop_t = copies.stopped.unwrap_or_else(|| clock.now());
    copies.out
}
