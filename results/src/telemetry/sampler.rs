//! The sampler: a background thread that reads the GPUs through a [`Probe`] every
//! interval (and at every attempt's end) and folds each reading into a [`Fold`]; and what
//! it asks `/proc` about a pid (its session, its parent).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use colloc_core::sys::ProcStat;

use super::{AttemptGpu, Fold, GpuTotals, Probe, ProcInfo, Reading, SlotMap, ENERGY_EVERY};

pub(super) enum Cmd {
    Begin(u64, usize, f64),
    Session(u64, u32),
    End(u64, Sender<Option<AttemptGpu>>),
    Current(Vec<u64>, Sender<Vec<Option<AttemptGpu>>>),
    Totals(Sender<(Vec<GpuTotals>, Vec<Vec<Reading>>)>),
    Stop(Sender<(Vec<GpuTotals>, Vec<Vec<Reading>>)>),
}

/// How the sampler runs.
#[derive(Debug, Clone, Copy)]
pub struct SamplerConfig {
    /// Time between ticks (process lists, memory).
    pub interval: Duration,
    /// Does NVML's per-process utilization mean anything here (false under MPS)?
    pub process_util: bool,
    /// Times are seconds since this instant.
    pub base: Instant,
}

impl SamplerConfig {
    /// The one configuration of `colloc run`, its steps and `colloc bench`: `mps` says
    /// whether the attempts are MPS clients, where NVML accounts every client's SM time
    /// to the MPS server, so per-process utilization means nothing.
    pub fn new(interval: Duration, mps: bool, base: Instant) -> SamplerConfig {
        SamplerConfig {
            interval,
            process_util: !mps,
            base,
        }
    }
}

/// The background sampler: one thread that reads the probe every interval and folds.
/// Calls block only for [`Sampler::end`] (one reading of that attempt's GPU) and the
/// snapshots.
pub struct Sampler {
    tx: Option<Sender<Cmd>>,
    thread: Option<JoinHandle<()>>,
    base: Instant,
}

impl Sampler {
    /// Start sampling. Without a thread (the system refused one) the sampler answers
    /// nothing and says so once.
    pub fn start(probe: Box<dyn Probe>, map: SlotMap, cfg: SamplerConfig) -> Sampler {
        let (tx, rx) = mpsc::channel();
        let fold = Fold::new(map, cfg.process_util);
        let thread = thread::Builder::new()
            .name("gpu-sampler".into())
            .spawn(move || sampler_loop(probe, fold, cfg, rx))
            .map_err(|e| {
                log::warn!("cannot start the GPU sampler thread ({e}); GPU figures will be missing")
            })
            .ok();
        Sampler {
            tx: thread.as_ref().map(|_| tx),
            thread,
            base: cfg.base,
        }
    }

    fn now(&self) -> f64 {
        self.base.elapsed().as_secs_f64()
    }

    fn send(&self, c: Cmd) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(c);
        }
    }

    /// An attempt began on `slot`.
    pub fn begin(&self, key: u64, slot: usize) {
        self.send(Cmd::Begin(key, slot, self.now()));
    }

    /// The attempt's processes are session `sid`.
    pub fn session(&self, key: u64, sid: u32) {
        self.send(Cmd::Session(key, sid));
    }

    /// The attempt ended: read its GPU once more and return its figures.
    pub fn end(&self, key: u64) -> Option<AttemptGpu> {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::End(key, tx));
        rx.recv().ok().flatten()
    }

    /// Running attempts' figures so far, in `keys`' order (`None` for one not sampled).
    pub fn current(&self, keys: &[u64]) -> Vec<Option<AttemptGpu>> {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Current(keys.to_vec(), tx));
        rx.recv().unwrap_or_default()
    }

    /// Per-GPU figures and histories so far.
    pub fn totals(&self) -> (Vec<GpuTotals>, Vec<Vec<Reading>>) {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Totals(tx));
        rx.recv().unwrap_or_default()
    }

    /// Stop, after one last reading, and return the per-GPU figures and histories.
    pub fn finish(mut self) -> (Vec<GpuTotals>, Vec<Vec<Reading>>) {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Stop(tx));
        let out = rx.recv().unwrap_or_default();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        out
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let (tx, _rx) = mpsc::channel();
            self.send(Cmd::Stop(tx));
            let _ = t.join();
        }
    }
}

pub(super) fn sampler_loop(
    mut probe: Box<dyn Probe>,
    mut fold: Fold,
    cfg: SamplerConfig,
    rx: Receiver<Cmd>,
) {
    let n = fold.gpus.len();
    let mut last_energy: Vec<Option<Instant>> = vec![None; n];
    let mut next = Instant::now();
    let mut tick = |fold: &mut Fold, force: Option<usize>, all: bool| {
        let now = Instant::now();
        let due: Vec<bool> = (0..n)
            .map(|g| {
                all || force == Some(g)
                    || last_energy[g].is_none_or(|t| now.duration_since(t) >= ENERGY_EVERY)
            })
            .collect();
        for (g, d) in due.iter().enumerate() {
            if *d {
                last_energy[g] = Some(now);
            }
        }
        let want = fold.want(&due);
        let reading = probe.read(&want);
        let t = now.duration_since(cfg.base).as_secs_f64();
        fold.apply(t, &reading, proc_info);
    };
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Cmd::Begin(k, slot, t)) => fold.begin(k, slot, t),
            Ok(Cmd::Session(k, sid)) => fold.session(k, sid),
            Ok(Cmd::End(k, reply)) => {
                let gpu = fold.gpu_of(k);
                if gpu.is_some() {
                    tick(&mut fold, gpu, false);
                }
                let _ = reply.send(fold.end(k));
            }
            Ok(Cmd::Current(keys, reply)) => {
                let _ = reply.send(keys.iter().map(|&k| fold.current(k)).collect());
            }
            Ok(Cmd::Totals(reply)) => {
                let hist = (0..n).map(|g| fold.history(g)).collect();
                let _ = reply.send((fold.totals(), hist));
            }
            Ok(Cmd::Stop(reply)) => {
                tick(&mut fold, None, true);
                let hist = (0..n).map(|g| fold.history(g)).collect();
                let _ = reply.send((fold.totals(), hist));
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                tick(&mut fold, None, false);
                next += cfg.interval;
                let now = Instant::now();
                if next < now {
                    next = now + cfg.interval;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The session id of process `pid`, from `/proc/<pid>/stat` (`None` if it is gone).
pub fn session_of(pid: u32) -> Option<u32> {
    ProcStat::of(pid)?.session()
}

/// Field 6 (session) of a `/proc/<pid>/stat` line (core's one reading of that line).
pub fn parse_session(stat: &str) -> Option<u32> {
    ProcStat::parse(stat)?.session()
}

/// What [`Fold::apply`] needs of process `pid`, from `/proc/<pid>/stat` (`None` if it is
/// gone).
pub fn proc_info(pid: u32) -> Option<ProcInfo> {
    info(&ProcStat::of(pid)?)
}

/// Session, parent and whether it is the MPS server, from a `/proc/<pid>/stat` line. The
/// kernel cuts the command name to 15 bytes: `nvidia-cuda-mps-server` reads
/// `nvidia-cuda-mps` (the control daemon too, which holds no GPU memory and so is never
/// listed by NVML).
pub fn parse_stat(stat: &str) -> Option<ProcInfo> {
    info(&ProcStat::parse(stat)?)
}

fn info(stat: &ProcStat) -> Option<ProcInfo> {
    Some(ProcInfo {
        sid: stat.session()?,
        ppid: stat.ppid()?,
        mps_server: stat.comm()?.starts_with("nvidia-cuda-mps"),
    })
}
