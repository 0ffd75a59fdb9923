//! `colloc run`: pack many runs onto the allocation's slots and record how each did.
//!
//! - [`manifest`]: `runs.toml` into run specs, every error caught before anything starts.
//! - [`slots`]: the slot layout from the job environment or `--mode`/`-j`.
//! - [`exec`]: one run's process (own session), log, live view and output scan.
//! - [`output`]: throughput, epoch and out-of-memory patterns.
//! - [`sampler`]: GPU figures through NVML on a background thread.
//! - [`report`], [`chart`]: the JSON report, CSV, summary table and PNG chart.
//!
//! The scheduler below is one loop on one channel: run ends, signals to colloc, and a
//! tick for timeouts, grace periods and the status line.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use colloc_core::mode::Mode;
use colloc_core::mps;
use std::os::unix::process::ExitStatusExt;

use crate::bad_input;

pub mod chart;
pub mod exec;
pub mod manifest;
pub mod output;
pub mod report;
pub mod sampler;
pub mod slots;
mod sys;

use exec::{Event, Launch, Live};
use manifest::RunSpec;
use report::{Epoch, Report, RunRecord, SlotRecord, Solo, State, Throughput};
use sampler::{Active, Sampler};
use slots::{Layout, Source};

/// Arguments of `colloc run`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  colloc run -f runs.toml                      inside an sbatch --colloc=... job
  colloc run --mode mps -j 4 -f runs.toml      outside Slurm: colloc starts its own MPS daemon
  colloc run -j 4 -- python train.py --seed 1  4 copies of one command (COLLOC_RUN_INDEX differs)

Writes DIR/colloc-report.json, DIR/colloc-runs.csv, DIR/colloc-throughput.png and
DIR/logs/<run>.log. Exit status: 0 all runs succeeded, 1 a run failed, timed out or was
stopped, 2 bad input.")]
pub struct RunArgs {
    /// Runs at once (default: COLLOC_SLOTS; else one per MIG instance, N per GPU for mps:N,
    /// 2 per GPU for naive/mps, the CPU count without a GPU).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=slots::MAX_SLOTS as i64))]
    jobs: Option<u32>,
    /// naive, mps or mps:N, outside a colloc job (inside one the job's mode applies).
    #[arg(long, value_name = "MODE")]
    mode: Option<String>,
    /// Where the report and logs go (default: ./colloc-<job id or time>).
    #[arg(long, value_name = "DIR")]
    report_dir: Option<PathBuf>,
    /// Run manifest (runs.toml).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "command"
    )]
    file: Option<PathBuf>,
    /// Stop everything when one run fails.
    #[arg(long)]
    fail_fast: bool,
    /// Restart a run up to N times when it fails with a CUDA out-of-memory error.
    #[arg(long, value_name = "N", default_value_t = 0)]
    retries: u32,
    /// Time limit per run (e.g. 90m) for runs whose manifest entry sets none.
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// GPU sampling interval.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    interval: String,
    /// First run the first run alone for --solo-window to measure its solo throughput.
    #[arg(long, conflicts_with = "baseline")]
    solo_baseline: bool,
    /// Length of the --solo-baseline calibration.
    #[arg(long, value_name = "DUR", default_value = "60s")]
    solo_window: String,
    /// Take solo throughput figures from an earlier colloc-report.json.
    #[arg(long, value_name = "REPORT")]
    baseline: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when runs are stopped.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    grace: String,
    /// How often to print the one-line progress status.
    #[arg(long, value_name = "DUR", default_value = "30s")]
    status_every: String,
    /// With `-- CMD`: how many copies to run (default: one per slot).
    #[arg(short = 'n', long = "count", value_name = "N", requires = "command", value_parser = clap::value_parser!(u32).range(1..=manifest::MAX_RUNS as i64))]
    count: Option<u32>,
    /// With `-- CMD`: throughput regex (named group `value`).
    #[arg(long, value_name = "REGEX", requires = "command")]
    metric: Option<String>,
    /// Do not echo the runs' output (it still goes to their log files).
    #[arg(short = 'q', long)]
    quiet: bool,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Sub-directory of the report dir with one log per run.
const LOGS_DIR: &str = "logs";

struct Options {
    grace: Duration,
    interval: Duration,
    status_every: Duration,
    solo_window: Duration,
    timeout: Option<Duration>,
}

fn dur(flag: &str, v: &str) -> anyhow::Result<Duration> {
    manifest::parse_duration(v).map_err(|e| bad_input(format!("{flag}: {e}")))
}

impl Options {
    fn from(a: &RunArgs) -> anyhow::Result<Options> {
        let interval = dur("--interval", &a.interval)?;
        if interval < Duration::from_millis(50) {
            return Err(bad_input("--interval must be at least 50ms"));
        }
        Ok(Options {
            grace: dur("--grace", &a.grace)?,
            interval,
            status_every: dur("--status-every", &a.status_every)?,
            solo_window: dur("--solo-window", &a.solo_window)?,
            timeout: a
                .timeout
                .as_deref()
                .map(|t| dur("--timeout", t))
                .transpose()?,
        })
    }
}

fn specs_from_command(a: &RunArgs, copies: usize) -> anyhow::Result<Vec<RunSpec>> {
    if a.command.first().is_none_or(|c| c.trim().is_empty()) {
        return Err(bad_input("empty command after --"));
    }
    if copies == 0 {
        return Err(bad_input("--count must be at least 1"));
    }
    let metric = match &a.metric {
        Some(m) => {
            let re = regex::Regex::new(m)
                .map_err(|e| bad_input(format!("--metric {m:?} is not a valid regex: {e}")))?;
            if re.captures_len() < 2 {
                return Err(bad_input(format!(
                    "--metric {m:?} has no capture group; mark the number with (?P<value>...)"
                )));
            }
            Some(re)
        }
        None => None,
    };
    Ok((0..copies)
        .map(|i| RunSpec {
            name: format!("run{}", i + 1),
            command: a.command.clone(),
            env: Vec::new(),
            workdir: None,
            metric: metric.clone(),
            timeout: None,
        })
        .collect())
}

fn now_rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn default_report_dir() -> PathBuf {
    let stamp = match std::env::var("SLURM_JOB_ID") {
        Ok(id) if !id.is_empty() => id,
        _ => humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(['-', ':'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_string(),
    };
    let base = PathBuf::from(format!("colloc-{stamp}"));
    let mut p = base.clone();
    let mut k = 2;
    while p.exists() {
        p = PathBuf::from(format!("{}-{k}", base.display()));
        k += 1;
    }
    p
}

fn mps_control_program(config: Option<&colloc_core::config::Config>) -> anyhow::Result<PathBuf> {
    if let Some(c) = config {
        if let Some(p) = c.mps_control_path() {
            return Ok(p);
        }
    }
    const NAME: &str = "nvidia-cuda-mps-control";
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(NAME))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| colloc_core::config::resolve_program(NAME))
        .ok_or_else(|| {
            anyhow::anyhow!("--mode mps: {NAME} not found on PATH or in the system directories")
        })
}

/// `COLLOC_MPS_PIPES` as the plugin sets it for mps jobs: `GPU-uuid=pipe_dir,...`, one
/// daemon per GPU of the job.
fn parse_mps_pipes(v: &str) -> Vec<(String, PathBuf)> {
    v.split(',')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, p)| !k.is_empty() && p.starts_with('/'))
        .map(|(k, p)| (k.to_string(), PathBuf::from(p)))
        .collect()
}

/// The pipe directory of the daemon that serves `device` (a GPU UUID).
fn job_mps_pipe<'a>(pipes: &'a [(String, PathBuf)], device: &str) -> Option<&'a PathBuf> {
    pipes
        .iter()
        .find(|(uuid, _)| uuid == device)
        .map(|(_, p)| p)
}

fn start_own_mps(
    config: Option<&colloc_core::config::Config>,
    devices: &[String],
) -> anyhow::Result<mps::PrivateDaemon> {
    let program = mps_control_program(config)?;
    mps::PrivateDaemon::start(&program, "colloc-mps", &devices.join(","))
        .context("cannot start the MPS daemon")
}

/// One run that is running now.
struct Running {
    slot: usize,
    live: Arc<Live>,
    start: Instant,
    start_wall: SystemTime,
    deadline: Option<Instant>,
    term_at: Option<Instant>,
    killed: bool,
    timed_out: bool,
    interrupted: bool,
}

/// The last attempt of one run.
struct Outcome {
    slot: usize,
    start: Instant,
    start_wall: SystemTime,
    end: Instant,
    end_wall: SystemTime,
    status: Result<std::process::ExitStatus, String>,
    state: State,
    live: Arc<Live>,
}

impl Outcome {
    fn of(f: exec::Finished, r: Running, state: State) -> Outcome {
        Outcome {
            slot: r.slot,
            start: r.start,
            start_wall: r.start_wall,
            end: f.end,
            end_wall: f.end_wall,
            status: f.status,
            state,
            live: r.live,
        }
    }
}

struct Pack<'a> {
    specs: &'a [RunSpec],
    layout: &'a Layout,
    slot_env: Vec<Vec<(String, String)>>,
    opts: &'a Options,
    fail_fast: bool,
    retries: u32,
    live_view: bool,
    logs: PathBuf,
    t0: Instant,
    tx: Sender<Event>,
    rx: Receiver<Event>,
    sampler: Option<&'a Sampler>,
    // state
    attempts: Vec<u32>,
    outcomes: Vec<Option<Outcome>>,
    /// The last failed attempt of a run queued for a retry after a CUDA OOM.
    retried: Vec<Option<Outcome>>,
    stopping: Option<(String, Instant)>,
    max_concurrent: usize,
    last_status: Instant,
}

impl Pack<'_> {
    fn log_path(&self, idx: usize, calibration: bool) -> PathBuf {
        let name = &self.specs[idx].name;
        if calibration {
            // Not beside the runs' logs: a run may be named "solo-<name>".
            let dir = self.logs.join("calibration");
            let _ = std::fs::create_dir_all(&dir);
            dir.join(format!("{name}.log"))
        } else {
            self.logs.join(format!("{name}.log"))
        }
    }

    fn launch(&mut self, idx: usize, slot: usize, calibration: bool) -> Running {
        let spec = &self.specs[idx];
        let attempt = if calibration {
            1
        } else {
            self.attempts[idx] += 1;
            self.attempts[idx]
        };
        let mut env = self.slot_env[slot].clone();
        env.push(("COLLOC_RUN_NAME".into(), spec.name.clone()));
        env.push(("COLLOC_RUN_INDEX".into(), idx.to_string()));
        env.push(("COLLOC_RUN_ATTEMPT".into(), attempt.to_string()));
        env.extend(spec.env.iter().cloned());
        let start = Instant::now();
        let start_wall = SystemTime::now();
        let timeout = if calibration {
            Some(self.opts.solo_window)
        } else {
            spec.timeout.or(self.opts.timeout)
        };
        let launch = Launch {
            idx,
            name: if calibration {
                format!("solo:{}", spec.name)
            } else {
                spec.name.clone()
            },
            attempt,
            command: spec.command.clone(),
            env,
            workdir: spec.workdir.clone(),
            log: self.log_path(idx, calibration),
            metric: spec.metric.clone(),
            live_view: self.live_view,
            t0: self.t0,
        };
        let live = match exec::start(launch, self.tx.clone()) {
            Ok(l) => l,
            Err(e) => {
                // No thread: report the failure through the channel like any other end.
                let live = Arc::new(Live::default());
                let _ = self.tx.send(Event::Finished(exec::Finished {
                    idx,
                    end: Instant::now(),
                    end_wall: SystemTime::now(),
                    status: Err(format!("cannot start a thread for the run: {e}")),
                }));
                live
            }
        };
        if let Some(s) = self.sampler {
            s.add(Active {
                idx,
                slot,
                live: live.clone(),
            });
        }
        log::debug!("started {} on slot {slot}", spec.name);
        Running {
            slot,
            live,
            start,
            start_wall,
            deadline: timeout.map(|t| start + t),
            term_at: None,
            killed: false,
            timed_out: false,
            interrupted: false,
        }
    }

    fn begin_stop(&mut self, reason: String, sig: i32, running: &mut HashMap<usize, Running>) {
        if self.stopping.is_some() {
            return;
        }
        log::warn!("{reason}: stopping {} running run(s)", running.len());
        let now = Instant::now();
        for r in running.values_mut() {
            r.interrupted = true;
            r.term_at.get_or_insert(now);
            r.live.pid.signal_group(sig);
        }
        self.stopping = Some((reason, now));
    }

    /// Run `queue` through the slots. With `calibration`, one run alone for the solo
    /// window; its result is not recorded as the run's outcome.
    fn run_queue(&mut self, mut queue: VecDeque<usize>, calibration: bool) -> Option<Arc<Live>> {
        let mut free: BTreeSet<usize> = (0..self.layout.slots.len()).collect();
        let mut running: HashMap<usize, Running> = HashMap::new();
        let mut calibrated = None;
        let done_before = self.outcomes.iter().filter(|o| o.is_some()).count();
        loop {
            while self.stopping.is_none() && !queue.is_empty() {
                let Some(&slot) = free.iter().next() else {
                    break;
                };
                let Some(idx) = queue.pop_front() else { break };
                free.remove(&slot);
                let r = self.launch(idx, slot, calibration);
                running.insert(idx, r);
                self.max_concurrent = self.max_concurrent.max(running.len());
            }
            if running.is_empty() && (queue.is_empty() || self.stopping.is_some()) {
                break;
            }
            let now = Instant::now();
            let mut wake = now + Duration::from_millis(500);
            for r in running.values() {
                if let Some(d) = r.deadline.filter(|_| r.term_at.is_none()) {
                    wake = wake.min(d);
                }
                if let Some(t) = r.term_at.filter(|_| !r.killed) {
                    wake = wake.min(t + self.opts.grace);
                }
            }
            match self.rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Event::Finished(f)) => {
                    let Some(r) = running.remove(&f.idx) else {
                        continue;
                    };
                    free.insert(r.slot);
                    if let Some(s) = self.sampler {
                        s.remove(f.idx);
                    }
                    if calibration {
                        calibrated = Some(r.live.clone());
                        continue;
                    }
                    self.finished(f, r, &mut queue, &mut running);
                }
                Ok(Event::Signal(sig)) => {
                    let name = signal_name(sig);
                    if self.stopping.is_some() {
                        log::warn!("{name} again: killing all runs now");
                        for r in running.values_mut() {
                            r.live.pid.signal_group(libc::SIGKILL);
                            r.killed = true;
                        }
                    } else {
                        // SIGHUP (lost terminal) is forwarded as SIGTERM.
                        let fwd = if sig == libc::SIGHUP {
                            libc::SIGTERM
                        } else {
                            sig
                        };
                        self.begin_stop(format!("colloc received {name}"), fwd, &mut running);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            let grace = self.opts.grace;
            for (idx, r) in running.iter_mut() {
                if r.term_at.is_none() && r.deadline.is_some_and(|d| now >= d) {
                    if calibration {
                        log::info!("solo calibration window over; stopping it");
                    } else {
                        log::warn!("{}: timed out; sending SIGTERM", self.specs[*idx].name);
                        r.timed_out = true;
                    }
                    r.term_at = Some(now);
                    r.live.pid.signal_group(libc::SIGTERM);
                }
                if !r.killed && r.term_at.is_some_and(|t| now >= t + grace) {
                    log::warn!(
                        "{}: still running {:?} after SIGTERM; sending SIGKILL",
                        self.specs[*idx].name,
                        grace
                    );
                    r.live.pid.signal_group(libc::SIGKILL);
                    r.killed = true;
                }
            }
            if !calibration && now.duration_since(self.last_status) >= self.opts.status_every {
                self.last_status = now;
                self.status_line(&running, queue.len(), done_before);
            }
        }
        calibrated
    }

    fn finished(
        &mut self,
        f: exec::Finished,
        r: Running,
        queue: &mut VecDeque<usize>,
        running: &mut HashMap<usize, Running>,
    ) {
        let name = self.specs[f.idx].name.clone();
        if r.live.never_started.load(Ordering::SeqCst) {
            // colloc began stopping between this run's launch and its spawn: it never
            // ran, and is reported as not started (or by its earlier attempt).
            log::info!("{name}: not started (colloc is stopping)");
            self.attempts[f.idx] = self.attempts[f.idx].saturating_sub(1);
            return;
        }
        let oom = r.live.seen().oom;
        let state = match &f.status {
            Err(_) => State::Failed,
            Ok(_) if r.timed_out => State::TimedOut,
            Ok(_) if r.interrupted => State::Interrupted,
            Ok(st) if st.success() => State::Succeeded,
            Ok(_) => State::Failed,
        };
        let t_end = f.end.duration_since(self.t0).as_secs_f64();
        r.live
            .seen()
            .epochs
            .finish(t_end, state == State::Succeeded);
        if state == State::Failed
            && oom
            && self.attempts[f.idx] <= self.retries
            && self.stopping.is_none()
        {
            log::warn!(
                "{name}: CUDA out of memory; retrying (attempt {} of {})",
                self.attempts[f.idx] + 1,
                self.retries + 1
            );
            queue.push_back(f.idx);
            // Reported as this failed attempt should the retry never start.
            let idx = f.idx;
            self.retried[idx] = Some(Outcome::of(f, r, state));
            return;
        }
        match (&f.status, state) {
            (Err(e), _) => log::warn!("{name}: {e}"),
            (Ok(st), State::Failed) => log::warn!("{name}: failed ({})", describe(st)),
            _ => log::info!("{name}: {}", state.as_str()),
        }
        if self.fail_fast && matches!(state, State::Failed | State::TimedOut) {
            self.begin_stop(
                format!("--fail-fast: {name} {}", state.as_str()),
                libc::SIGTERM,
                running,
            );
        }
        let idx = f.idx;
        self.outcomes[idx] = Some(Outcome::of(f, r, state));
    }

    fn status_line(&self, running: &HashMap<usize, Running>, queued: usize, done_before: usize) {
        let done = self
            .outcomes
            .iter()
            .filter(|o| o.is_some())
            .count()
            .max(done_before);
        let failed = self
            .outcomes
            .iter()
            .flatten()
            .filter(|o| o.state != State::Succeeded)
            .count();
        let mut agg: HashMap<&'static str, f64> = HashMap::new();
        for r in running.values() {
            let seen = r.live.seen();
            if let Some(u) = seen.series.unit {
                *agg.entry(u).or_default() += seen.series.last;
            }
        }
        let mut line = format!(
            "colloc: {done}/{} done ({failed} not ok), {} running, {queued} queued, {:.0} s",
            self.specs.len(),
            running.len(),
            self.t0.elapsed().as_secs_f64()
        );
        for (u, v) in agg {
            line.push_str(&format!("; aggregate {v:.1} {u}"));
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
    }
}

fn describe(st: &std::process::ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by {}", signal_name(s)),
        _ => "unknown status".into(),
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        s => format!("signal {s}"),
    }
}

fn record(
    spec: &RunSpec,
    idx: usize,
    attempts: u32,
    o: Option<&Outcome>,
    layout: &Layout,
    t0: Instant,
) -> RunRecord {
    let mut r = RunRecord {
        name: spec.name.clone(),
        index: idx,
        command: spec.command.clone(),
        state: State::NotStarted,
        exit_code: None,
        signal: None,
        error: None,
        start: None,
        end: None,
        start_s: None,
        end_s: None,
        wall_s: None,
        slot: None,
        device: None,
        attempts,
        oom: false,
        log: None,
        throughput: None,
        epochs: Vec::new(),
        gpu: None,
        solo_throughput: None,
    };
    let Some(o) = o else { return r };
    r.state = o.state;
    match &o.status {
        Ok(st) => {
            r.exit_code = st.code();
            r.signal = st.signal();
        }
        Err(e) => r.error = Some(e.clone()),
    }
    r.start = Some(now_rfc3339(o.start_wall));
    r.end = Some(now_rfc3339(o.end_wall));
    r.start_s = Some(o.start.duration_since(t0).as_secs_f64());
    r.end_s = Some(o.end.duration_since(t0).as_secs_f64());
    r.wall_s = Some(o.end.duration_since(o.start).as_secs_f64());
    r.slot = Some(o.slot);
    r.device = layout.slots.get(o.slot).cloned().flatten();
    r.log = Some(format!("{LOGS_DIR}/{}.log", spec.name));
    let seen = o.live.seen();
    r.oom = seen.oom;
    r.throughput = seen.series.mean().map(|mean| Throughput {
        unit: seen.series.unit.unwrap_or(output::CUSTOM_UNIT).to_string(),
        mean,
        last: seen.series.last,
        max: seen.series.max,
        count: seen.series.count,
        samples: seen.series.samples.clone(),
        work: seen.series.work,
    });
    r.epochs = seen
        .epochs
        .done
        .iter()
        .map(|&(epoch, seconds)| Epoch { epoch, seconds })
        .collect();
    r
}

/// Entry point of `colloc run`.
pub fn main(args: RunArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    let opts = Options::from(&args)?;
    // Everything the user wrote is checked before anything starts.
    let manifest_specs = match &args.file {
        Some(f) => Some(manifest::load(f).map_err(|e| bad_input(e.to_string()))?),
        None if args.command.is_empty() => {
            return Err(bad_input(
                "nothing to run: give -f runs.toml or -- CMD [ARGS...]",
            ))
        }
        None => None,
    };
    let solo_from_file = match &args.baseline {
        Some(p) => Some(report::solo_from_report(p).map_err(bad_input)?),
        None => None,
    };
    let config = match colloc_core::config::Config::load(&g.config_path()) {
        Ok(c) => Some(c),
        Err(e) => {
            log::debug!("no node configuration ({e}); using defaults");
            None
        }
    };
    let nvml_lib = config
        .as_ref()
        .map(|c| c.nvml_library.clone())
        .unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let nvml = match sampler::open_nvml(&nvml_lib) {
        Ok(n) => Some(n),
        Err(e) => {
            log::warn!("NVML unavailable ({e}); runs go on without GPU figures");
            None
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    let mut layout = slots::layout(&slots::Inputs {
        job_mode: env("COLLOC_MODE"),
        job_devices: env("COLLOC_DEVICES"),
        job_slots: env("COLLOC_SLOTS"),
        visible: env("CUDA_VISIBLE_DEVICES"),
        mode: args.mode.clone(),
        jobs: args.jobs.map(|j| j as usize),
        nvml_gpus: nvml.as_ref().map(|n| sampler::all_gpus(n.nvml())),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
    .map_err(bad_input)?;
    let specs = match manifest_specs {
        Some(s) => s,
        None => specs_from_command(&args, args.count.map_or(layout.slots.len(), |n| n as usize))?,
    };

    let dir = args.report_dir.clone().unwrap_or_else(default_report_dir);
    let logs = dir.join(LOGS_DIR);
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;

    // Signals first: one that arrives while the MPS daemon starts is still handled.
    let (tx, rx) = mpsc::channel::<Event>();
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
            .context("cannot install signal handlers")?;
    let sig_handle = signals.handle();
    {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for s in signals.forever() {
                    if tx.send(Event::Signal(s)).is_err() {
                        break;
                    }
                }
            })
            .context("cannot start the signal thread")?;
    }

    let resolved = nvml
        .as_ref()
        .map(|n| sampler::resolve(n.nvml(), &layout.slots));
    if let (Mode::Mps { .. }, Source::Own, Some(r)) = (&layout.mode, &layout.source, &resolved) {
        // MPS clients number devices within the daemon's CUDA_VISIBLE_DEVICES, so an
        // index such as "2" would name another GPU (or none) for them: use UUIDs.
        for (slot, gi) in layout.slots.iter_mut().zip(&r.slot_gpu) {
            if let Some(g) = gi.and_then(|gi| r.gpus.get(gi)) {
                *slot = Some(g.uuid.clone());
            }
        }
        let mut devices: Vec<String> = Vec::new();
        for d in layout.slots.iter().flatten() {
            if !devices.contains(d) {
                devices.push(d.clone());
            }
        }
        layout.devices = devices;
    }
    let own_mps = match (&layout.mode, &layout.source) {
        (Mode::Mps { .. }, Source::Own) => Some(start_own_mps(config.as_ref(), &layout.devices)?),
        _ => None,
    };
    let job_pipes = match (&layout.mode, &layout.source) {
        (Mode::Mps { .. }, Source::Own) => Vec::new(),
        (Mode::Mps { .. }, _) => {
            parse_mps_pipes(&std::env::var("COLLOC_MPS_PIPES").unwrap_or_default())
        }
        _ => Vec::new(),
    };
    let slot_env: Vec<Vec<(String, String)>> = layout
        .slots
        .iter()
        .enumerate()
        .map(|(si, dev)| {
            let mut e = Vec::new();
            if let Some(d) = dev {
                e.push(("CUDA_VISIBLE_DEVICES".to_string(), d.clone()));
            }
            if let Some(m) = &own_mps {
                e.extend(m.daemon().env());
            } else if let Some(pipe) = dev.as_deref().and_then(|d| job_mps_pipe(&job_pipes, d)) {
                // A job with several GPUs has one MPS daemon per GPU; the job-wide
                // CUDA_MPS_PIPE_DIRECTORY names the first. Each run talks to its GPU's.
                e.push(("CUDA_MPS_PIPE_DIRECTORY".into(), pipe.display().to_string()));
                if let Some(dir) = pipe.parent() {
                    e.push((
                        "CUDA_MPS_LOG_DIRECTORY".into(),
                        dir.join("log").display().to_string(),
                    ));
                }
            }
            if let Mode::Mps { clients: Some(n) } = layout.mode {
                let mem: Vec<u64> = resolved
                    .as_ref()
                    .and_then(|r| r.slot_memory_mib.get(si).copied().flatten())
                    .into_iter()
                    .collect();
                e.extend(mps::client_limits(n, &mem));
            }
            e
        })
        .collect();

    let sampler = match (nvml, &resolved) {
        (Some(n), Some(r)) if !r.gpus.is_empty() => {
            let probe = sampler::NvmlProbe::new(n, r, &layout.slots);
            let fold = sampler::Fold::new(r.slot_gpu.clone(), r.slot_mig.clone(), r.gpus.clone());
            Some(Sampler::start(Box::new(probe), fold, opts.interval))
        }
        _ => None,
    };
    let mut pack = Pack {
        specs: &specs,
        layout: &layout,
        slot_env,
        opts: &opts,
        fail_fast: args.fail_fast,
        retries: args.retries,
        live_view: !args.quiet,
        logs: logs.clone(),
        t0: Instant::now(),
        tx,
        rx,
        sampler: sampler.as_ref(),
        attempts: vec![0; specs.len()],
        outcomes: specs.iter().map(|_| None).collect(),
        retried: specs.iter().map(|_| None).collect(),
        stopping: None,
        max_concurrent: 0,
        last_status: Instant::now(),
    };

    let mut solo = solo_from_file;
    if args.solo_baseline {
        outln!(
            "colloc: calibrating: {} alone for up to {:?}",
            specs[0].name,
            opts.solo_window
        );
        if let Some(live) = pack.run_queue(VecDeque::from([0]), true) {
            let seen = live.seen();
            match seen.series.mean() {
                Some(v) => {
                    outln!(
                        "colloc: solo throughput of {}: {v:.1} {}",
                        specs[0].name,
                        seen.series.unit.unwrap_or("")
                    );
                    solo = Some(Solo {
                        any: Some(v),
                        unit: seen.series.unit.map(String::from),
                        source: format!("--solo-baseline ({} alone)", specs[0].name),
                        ..Solo::default()
                    });
                }
                None => log::warn!(
                    "--solo-baseline: {} printed no throughput in {:?}; no speed-up figure",
                    specs[0].name,
                    opts.solo_window
                ),
            }
        }
        pack.max_concurrent = 0;
    }
    // Times in the report count from the start of the pack proper.
    pack.t0 = Instant::now();
    let t0 = pack.t0;
    let pack_started = SystemTime::now();
    if pack.stopping.is_none() {
        pack.run_queue((0..specs.len()).collect(), false);
    }
    let ended = SystemTime::now();
    let stopped_by = pack.stopping.as_ref().map(|(r, _)| r.clone());
    let max_concurrent = pack.max_concurrent;
    let attempts = std::mem::take(&mut pack.attempts);
    // A run whose OOM retry never started (colloc stopped first) is reported by the
    // attempt that failed.
    let outcomes: Vec<Option<Outcome>> = std::mem::take(&mut pack.outcomes)
        .into_iter()
        .zip(std::mem::take(&mut pack.retried))
        .map(|(o, r)| o.or(r))
        .collect();
    drop(pack);
    let fold = sampler.and_then(Sampler::finish);
    drop(own_mps);
    sig_handle.close();

    let mut runs: Vec<RunRecord> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut r = record(s, i, attempts[i], outcomes[i].as_ref(), &layout, t0);
            r.gpu = fold.as_ref().and_then(|f| f.run(i));
            r
        })
        .collect();
    // The makespan runs from the first start to the last end of the pack proper.
    let first = runs
        .iter()
        .filter_map(|r| r.start_s)
        .fold(f64::INFINITY, f64::min);
    let last = runs.iter().filter_map(|r| r.end_s).fold(0.0, f64::max);
    let makespan = if first.is_finite() {
        (last - first).max(0.0)
    } else {
        0.0
    };
    let summary = report::summarize(&mut runs, makespan, max_concurrent, solo.as_ref());
    let rep = Report {
        schema: report::SCHEMA,
        colloc_version: env!("CARGO_PKG_VERSION").to_string(),
        mode: layout.mode.to_string(),
        source: match layout.source {
            Source::Job => "job",
            Source::Own => "own",
            Source::Plain => "plain",
        }
        .into(),
        job_id: env("SLURM_JOB_ID"),
        slots: layout
            .slots
            .iter()
            .enumerate()
            .map(|(index, device)| SlotRecord {
                index,
                device: device.clone(),
            })
            .collect(),
        started: now_rfc3339(pack_started),
        ended: now_rfc3339(ended),
        stopped_by,
        interval_s: opts.interval.as_secs_f64(),
        summary,
        gpus: fold.as_ref().map(|f| f.totals()),
        runs,
    };
    let json_path = dir.join("colloc-report.json");
    let json = serde_json::to_string_pretty(&rep).context("cannot encode the report")?;
    std::fs::write(&json_path, json + "\n")
        .with_context(|| format!("cannot write {}", json_path.display()))?;
    let csv_path = dir.join("colloc-runs.csv");
    std::fs::write(&csv_path, report::csv(&rep))
        .with_context(|| format!("cannot write {}", csv_path.display()))?;
    let png_path = dir.join("colloc-throughput.png");
    let png = match chart::draw(&rep, &png_path) {
        Ok(drawn) => drawn,
        Err(e) => {
            log::warn!("{e}");
            false
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\n{}", report::table(&rep));
    let _ = writeln!(
        out,
        "report: {}, {}{}",
        json_path.display(),
        csv_path.display(),
        if png {
            format!(", {}", png_path.display())
        } else {
            String::new()
        }
    );
    let all_ok = rep.runs.iter().all(|r| r.state == State::Succeeded);
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
