//! The run of a step, served to its node's metrics (issue 38): a pack across nodes has
//! its `colloc run` on the job's first node, whose snapshot speaks of the runs there; a
//! run on another node is served by its own step, on the same kind of socket
//! (`colloc-live/<job>/…`, [`crate::run::live::LiveServer`]), so that root's `colloc
//! status` on that node finds it as it finds any other. Its GPU figures are the step's
//! own sampler's; its throughput is what `colloc run` read from its output and sent back
//! ([`super::protocol::Control::Rate`]); its energy share is left to the report (colloc
//! run shares a GPU's energy out among every run on it, which one step cannot).

use std::time::{Duration, Instant};

use colloc_results::live::{Live, LiveRun, MAX_FIGURE, MAX_RUNS, SCHEMA};
use colloc_results::telemetry::AttemptGpu;

use super::protocol::StepSpec;
use crate::run::live::LiveServer;

/// How often the snapshot is refreshed.
pub const REFRESH: Duration = Duration::from_secs(1);

/// The step's socket and its one run.
pub struct Served {
    server: LiveServer,
    live: Live,
    last: Option<Instant>,
}

/// Printable text of at most `max` characters (what a reader takes).
fn clean(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| !c.is_control() && !matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}'))
        .take(max)
        .collect()
}

fn figure(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite() && (0.0..=MAX_FIGURE).contains(x))
}

impl Served {
    /// Serve `spec`'s run, started at `started_unix`, in `job` (the step's
    /// `SLURM_JOB_ID`); `None` outside a job or where no socket can be made.
    pub fn start(spec: &StepSpec, started_unix: f64, job: Option<u32>) -> Option<Served> {
        let job = job?;
        let slot = spec.slot.filter(|s| (*s as usize) < MAX_RUNS)?;
        let name = clean(&spec.run, 100);
        if name.is_empty() {
            return None;
        }
        let server = LiveServer::start(job)?;
        let device = spec.device.clone().filter(|d| {
            (d.starts_with("GPU-") || d.starts_with("MIG-"))
                && d.len() <= 64
                && !d.chars().any(char::is_control)
        });
        let run = LiveRun {
            name,
            index: spec.index.unwrap_or(0),
            attempt: spec.attempt,
            slot,
            device,
            started_unix,
            ..LiveRun::default()
        };
        Some(Served {
            server,
            live: Live {
                schema: SCHEMA,
                job,
                runs: vec![run],
            },
            last: None,
        })
    }

    /// The run's last throughput, from colloc run.
    pub fn rate(&mut self, value: f64, unit: Option<&str>) {
        let r = &mut self.live.runs[0];
        r.throughput = figure(Some(value));
        r.unit = unit.map(|u| clean(u, 24)).filter(|u| !u.is_empty());
        self.server.publish(&self.live);
    }

    /// Refresh the GPU figures at most every [`REFRESH`]: `gpu` (a round trip to the
    /// sampler's thread) is asked only then.
    pub fn refresh(&mut self, gpu: impl FnOnce() -> Option<AttemptGpu>) {
        let now = Instant::now();
        if self.last.is_some_and(|t| now < t + REFRESH) {
            return;
        }
        self.last = Some(now);
        let g = gpu().unwrap_or_default();
        let r = &mut self.live.runs[0];
        r.memory_peak_bytes = g.peak_memory_bytes.filter(|b| *b <= 1 << 53);
        r.util_ratio = g.mean_util_percent.map(|u| (u / 100.0).clamp(0.0, 1.0));
        self.server.publish(&self.live);
    }

    /// What is served now (tests).
    pub fn snapshot(&self) -> &Live {
        &self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::launch::LaunchSpec;

    fn spec(run: &str, slot: Option<u32>) -> StepSpec {
        StepSpec {
            run: run.into(),
            attempt: 2,
            launch: LaunchSpec {
                argv: vec!["true".into()],
                env: Vec::new(),
                cwd: None,
            },
            device: Some("MIG-1234".into()),
            mode: "mig".into(),
            interval_s: 1.0,
            slot,
            index: Some(7),
        }
    }

    #[test]
    fn a_steps_run_is_served_as_a_reader_takes_it() {
        let mut s = Served::start(
            &spec("lr\u{202e}0.1\n", Some(3)),
            1_700_000_000.0,
            Some(4_000_001),
        )
        .unwrap();
        s.rate(812.5, Some("img/s\u{7}"));
        s.refresh(|| {
            Some(AttemptGpu {
                peak_memory_bytes: Some(3 << 30),
                mean_util_percent: Some(41.0),
                ..AttemptGpu::default()
            })
        });
        let live = Live::parse(&s.snapshot().to_bytes()).unwrap();
        let r = &live.runs[0];
        assert_eq!(
            (live.job, r.name.as_str(), r.index, r.attempt, r.slot),
            (4_000_001, "lr0.1", 7, 2, 3)
        );
        assert_eq!(r.device.as_deref(), Some("MIG-1234"));
        assert_eq!(
            (r.throughput, r.unit.as_deref()),
            (Some(812.5), Some("img/s"))
        );
        assert_eq!(r.memory_peak_bytes, Some(3 << 30));
        assert_eq!(r.util_ratio, Some(0.41));
        assert_eq!(r.energy_joules, None);
        // A figure no reader takes is left out, not served.
        s.rate(f64::NAN, None);
        assert_eq!(s.snapshot().runs[0].throughput, None);
        // Without a slot (an older colloc run) nothing is served.
        assert!(Served::start(&spec("x", None), 0.0, Some(1)).is_none());
        assert!(Served::start(&spec("x", Some(0)), 0.0, None).is_none());
    }
}
