//! GPU figures per run, sampled on a background thread: per-process memory and SM
//! utilization on whole GPUs (naive, MPS), memory per MIG instance, GPU utilization and
//! energy per GPU. A run's processes are found by session id (each run is a session).
//!
//! The thread reads a [`Probe`] each tick and folds the readings into per-run figures
//! ([`Fold`], a pure accumulator with unit tests). Per tick it makes a handful of NVML
//! calls per GPU and reads `/proc/<pid>/stat` only for GPU processes it has not seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use colloc_core::nvml::NvmlGpus;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use super::exec::Live;
use super::sys;

/// One tick's readings of one physical GPU.
#[derive(Debug, Default, Clone)]
pub struct GpuTick {
    /// Energy counter in millijoules since the driver loaded.
    pub energy_mj: Option<u64>,
    /// GPU-wide utilization, percent.
    pub util: Option<u32>,
    /// Compute processes: (pid, used memory in bytes).
    pub procs: Option<Vec<(u32, Option<u64>)>>,
    /// Per-process SM utilization since the last tick: (pid, percent).
    pub proc_util: Option<Vec<(u32, u32)>>,
}

/// Readings of one tick.
#[derive(Debug, Default, Clone)]
pub struct Tick {
    /// Per physical GPU.
    pub gpus: Vec<GpuTick>,
    /// Used memory of each slot's MIG instance (None for non-MIG slots).
    pub mig_used: Vec<Option<u64>>,
}

/// Where the readings come from.
pub trait Probe: Send {
    /// Read one tick. `busy[g]`: GPU g has a running run (per-process queries only then).
    fn read(&mut self, busy: &[bool], busy_slots: &[bool]) -> Tick;
}

/// GPU figures of one run.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct RunGpu {
    /// Peak memory of its processes (whole GPU/MPS) or of its MIG instance, bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Mean SM utilization of its own processes, percent.
    pub mean_util_percent: Option<f64>,
    /// Mean utilization of its whole GPU while it ran, percent (shared with co-runners).
    pub mean_gpu_util_percent: Option<f64>,
    /// Energy of its whole GPU while it ran, joules (shared with co-runners).
    pub gpu_energy_j: Option<f64>,
    #[serde(skip)]
    util: (f64, u64),
    #[serde(skip)]
    gpu_util: (f64, u64),
}

/// Figures of one physical GPU over the whole pack.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct GpuTotal {
    /// UUID.
    pub uuid: String,
    /// Model name.
    pub name: String,
    /// Energy used while colloc sampled it, joules.
    pub energy_j: Option<f64>,
    /// Mean utilization while any run was active, percent.
    pub mean_util_percent: Option<f64>,
    #[serde(skip)]
    util: (f64, u64),
}

/// An active run as the sampler sees it.
#[derive(Clone)]
pub struct Active {
    /// Run index.
    pub idx: usize,
    /// Slot index.
    pub slot: usize,
    /// Its pid (= session id).
    pub live: Arc<Live>,
}

/// Folds ticks into per-run and per-GPU figures.
pub struct Fold {
    slot_gpu: Vec<Option<usize>>,
    slot_mig: Vec<bool>,
    last_energy: Vec<Option<u64>>,
    /// Per run.
    pub runs: HashMap<usize, RunGpu>,
    /// Per GPU.
    pub gpus: Vec<GpuTotal>,
    sid_cache: HashMap<u32, Option<u32>>,
}

fn mean(acc: (f64, u64)) -> Option<f64> {
    (acc.1 > 0).then(|| acc.0 / acc.1 as f64)
}

impl Fold {
    /// A fold for slots mapped to GPUs (`slot_gpu`), some of them MIG instances.
    pub fn new(slot_gpu: Vec<Option<usize>>, slot_mig: Vec<bool>, gpus: Vec<GpuTotal>) -> Fold {
        Fold {
            last_energy: vec![None; gpus.len()],
            slot_gpu,
            slot_mig,
            runs: HashMap::new(),
            gpus,
            sid_cache: HashMap::new(),
        }
    }

    /// Which GPUs and MIG slots have active runs.
    pub fn busy(&self, active: &[(usize, usize, u32)]) -> (Vec<bool>, Vec<bool>) {
        let mut g = vec![false; self.gpus.len()];
        let mut s = vec![false; self.slot_gpu.len()];
        for &(_, slot, _) in active {
            if let Some(Some(gi)) = self.slot_gpu.get(slot) {
                g[*gi] = true;
            }
            if self.slot_mig.get(slot).copied().unwrap_or(false) {
                s[slot] = true;
            }
        }
        (g, s)
    }

    /// Fold one tick; `active` holds (run, slot, session id); `sid_of` maps a pid to its
    /// session id.
    pub fn apply(
        &mut self,
        tick: &Tick,
        active: &[(usize, usize, u32)],
        mut sid_of: impl FnMut(u32) -> Option<u32>,
    ) {
        for (gi, g) in tick.gpus.iter().enumerate().take(self.gpus.len()) {
            let on_gpu: Vec<(usize, usize, u32)> = active
                .iter()
                .copied()
                .filter(|&(_, slot, _)| self.slot_gpu.get(slot).copied().flatten() == Some(gi))
                .collect();
            if let Some(e) = g.energy_mj {
                if let Some(prev) = self.last_energy[gi] {
                    let d = e.saturating_sub(prev) as f64 / 1000.0;
                    *self.gpus[gi].energy_j.get_or_insert(0.0) += d;
                    for &(idx, _, _) in &on_gpu {
                        *self
                            .runs
                            .entry(idx)
                            .or_default()
                            .gpu_energy_j
                            .get_or_insert(0.0) += d;
                    }
                }
                self.last_energy[gi] = Some(e);
            }
            if on_gpu.is_empty() {
                continue;
            }
            if let Some(u) = g.util {
                let t = &mut self.gpus[gi].util;
                t.0 += f64::from(u);
                t.1 += 1;
                for &(idx, _, _) in &on_gpu {
                    let r = self.runs.entry(idx).or_default();
                    r.gpu_util.0 += f64::from(u);
                    r.gpu_util.1 += 1;
                }
            }
            let cache = &mut self.sid_cache;
            let mut run_of = |pid: u32| -> Option<usize> {
                let sid = *cache.entry(pid).or_insert_with(|| sid_of(pid));
                let sid = sid?;
                on_gpu
                    .iter()
                    .find(|&&(_, slot, s)| s == sid && !self.slot_mig[slot])
                    .map(|&(idx, _, _)| idx)
            };
            if let Some(procs) = &g.procs {
                let mut mem: HashMap<usize, u64> = HashMap::new();
                for &(pid, used) in procs {
                    if let (Some(idx), Some(b)) = (run_of(pid), used) {
                        *mem.entry(idx).or_default() += b;
                    }
                }
                for (idx, b) in mem {
                    let r = self.runs.entry(idx).or_default();
                    r.peak_memory_bytes = Some(r.peak_memory_bytes.unwrap_or(0).max(b));
                }
            }
            if let Some(pu) = &g.proc_util {
                let mut util: HashMap<usize, u32> = HashMap::new();
                for &(pid, u) in pu {
                    if let Some(idx) = run_of(pid) {
                        *util.entry(idx).or_default() += u;
                    }
                }
                // A run with no sample this tick was idle on the GPU.
                for &(idx, slot, _) in &on_gpu {
                    if !self.slot_mig[slot] {
                        let u = util.get(&idx).copied().unwrap_or(0).min(100);
                        let r = self.runs.entry(idx).or_default();
                        r.util.0 += f64::from(u);
                        r.util.1 += 1;
                    }
                }
            }
        }
        for &(idx, slot, _) in active {
            if let Some(Some(b)) = tick.mig_used.get(slot) {
                let r = self.runs.entry(idx).or_default();
                r.peak_memory_bytes = Some(r.peak_memory_bytes.unwrap_or(0).max(*b));
            }
        }
        if self.sid_cache.len() > 4096 {
            self.sid_cache.clear();
        }
    }

    /// Per-run figures with means filled in.
    pub fn run(&self, idx: usize) -> Option<RunGpu> {
        self.runs.get(&idx).map(|r| RunGpu {
            mean_util_percent: mean(r.util),
            mean_gpu_util_percent: mean(r.gpu_util),
            ..r.clone()
        })
    }

    /// Per-GPU figures with means filled in.
    pub fn totals(&self) -> Vec<GpuTotal> {
        self.gpus
            .iter()
            .map(|g| GpuTotal {
                mean_util_percent: mean(g.util),
                ..g.clone()
            })
            .collect()
    }
}

/// The background sampler.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    active: Arc<Mutex<Vec<Active>>>,
    thread: Option<JoinHandle<Fold>>,
}

impl Sampler {
    /// Start sampling every `interval`.
    pub fn start(mut probe: Box<dyn Probe>, mut fold: Fold, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let active: Arc<Mutex<Vec<Active>>> = Arc::default();
        let (s, a) = (stop.clone(), active.clone());
        let thread = thread::Builder::new()
            .name("gpu-sampler".into())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    let now_active: Vec<(usize, usize, u32)> = a
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .filter_map(|r| r.live.pid.get().map(|pid| (r.idx, r.slot, pid)))
                        .collect();
                    let (busy, busy_slots) = fold.busy(&now_active);
                    let tick = probe.read(&busy, &busy_slots);
                    fold.apply(&tick, &now_active, sys::session_of);
                    if s.load(Ordering::Relaxed) {
                        return fold;
                    }
                    next += interval;
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    } else {
                        thread::park_timeout(next - now);
                    }
                    if s.load(Ordering::Relaxed) {
                        // One last reading closes the energy count.
                        let tick = probe.read(&busy, &busy_slots);
                        fold.apply(&tick, &now_active, sys::session_of);
                        return fold;
                    }
                }
            })
            .ok();
        if thread.is_none() {
            log::warn!("cannot start the GPU sampler thread; GPU figures will be missing");
        }
        Sampler {
            stop,
            active,
            thread,
        }
    }

    /// A run became active.
    pub fn add(&self, a: Active) {
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(a);
    }

    /// A run ended.
    pub fn remove(&self, idx: usize) {
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|a| a.idx != idx);
    }

    /// Stop and return the figures.
    pub fn finish(mut self) -> Option<Fold> {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take()?;
        t.thread().unpark();
        t.join().ok()
    }
}

/// The GPUs behind a list of slot devices.
pub struct Resolved {
    /// Slot → physical GPU index.
    pub slot_gpu: Vec<Option<usize>>,
    /// Slot is a MIG instance.
    pub slot_mig: Vec<bool>,
    /// Physical GPUs (uuid, name).
    pub gpus: Vec<GpuTotal>,
    /// Total memory of each slot's GPU (or MIG instance), MiB.
    pub slot_memory_mib: Vec<Option<u64>>,
}

/// Open NVML from `lib` (a file name or path), as the rest of colloc does.
///
/// # Errors
/// [`colloc_core::gpu::GpuError`] when the library is missing or fails to initialize.
pub fn open_nvml(lib: &str) -> colloc_core::gpu::GpuResult<NvmlGpus> {
    NvmlGpus::open(lib)
}

/// Physical GPU indexes visible through NVML when `CUDA_VISIBLE_DEVICES` is unset.
pub fn all_gpus(nvml: &Nvml) -> Vec<String> {
    let n = nvml.device_count().unwrap_or(0);
    (0..n).map(|i| i.to_string()).collect()
}

/// Map slot devices (`CUDA_VISIBLE_DEVICES` entries: index, GPU UUID or MIG UUID) to GPUs.
pub fn resolve(nvml: &Nvml, slot_devices: &[Option<String>]) -> Resolved {
    let mut r = Resolved {
        slot_gpu: Vec::new(),
        slot_mig: Vec::new(),
        gpus: Vec::new(),
        slot_memory_mib: Vec::new(),
    };
    let mut warned: Vec<&str> = Vec::new();
    for dev in slot_devices {
        let mut found = (None, false, None);
        if let Some(d) = dev {
            let handle = match d.parse::<u32>() {
                Ok(i) => nvml.device_by_index(i),
                Err(_) => nvml.device_by_uuid(d.as_str()),
            };
            match handle {
                Ok(h) => {
                    let mig = d.starts_with("MIG-");
                    let mem = h.memory_info().ok().map(|m| m.total / (1024 * 1024));
                    let phys = if mig { h.mig_parent_device() } else { Ok(h) };
                    if let Ok(p) = phys {
                        let uuid = p.uuid().unwrap_or_default();
                        let gi = match r.gpus.iter().position(|g| g.uuid == uuid) {
                            Some(gi) => gi,
                            None => {
                                r.gpus.push(GpuTotal {
                                    uuid,
                                    name: p.name().unwrap_or_default(),
                                    ..GpuTotal::default()
                                });
                                r.gpus.len() - 1
                            }
                        };
                        found = (Some(gi), mig, mem);
                    }
                }
                Err(e) if !warned.contains(&d.as_str()) => {
                    warned.push(d);
                    log::warn!("GPU {d}: not found through NVML ({e}); no GPU figures for it")
                }
                Err(_) => {}
            }
        }
        r.slot_gpu.push(found.0);
        r.slot_mig.push(found.1);
        r.slot_memory_mib.push(found.2);
    }
    r
}

/// Energy and GPU-wide and per-process utilization are read at most this often. The
/// energy counter is cumulative, NVML averages utilization over its own sampling period
/// and returns every per-process sample since the last read, so reading them at 10 Hz
/// adds nothing but driver time: on the H200 (driver 580) one energy read took 4.1 ms of
/// CPU and one per-process utilization read 2.4 ms, while process lists and memory took
/// about 0.01 ms. Every tick, that was 6 % of a core at 10 Hz.
const UTIL_EVERY: Duration = Duration::from_secs(1);

/// Readings through NVML. Device handles are looked up once: the library is kept for the
/// life of the process (the sampler runs until colloc exits), which lets the handles,
/// which borrow it, live in the probe.
pub struct NvmlProbe {
    devices: Vec<Option<nvml_wrapper::Device<'static>>>,
    gpu_uuids: Vec<String>,
    slot_mig: Vec<Option<nvml_wrapper::Device<'static>>>,
    last_ts: Vec<Option<u64>>,
    last_util: Vec<Option<Instant>>,
}

impl NvmlProbe {
    /// A probe over the resolved GPUs.
    pub fn new(nvml: NvmlGpus, r: &Resolved, slot_devices: &[Option<String>]) -> NvmlProbe {
        let nvml: &'static NvmlGpus = Box::leak(Box::new(nvml));
        let lookup = |uuid: &str| {
            nvml.nvml()
                .device_by_uuid(uuid)
                .map_err(|e| log::warn!("NVML: no device {uuid}: {e}"))
                .ok()
        };
        let gpu_uuids: Vec<String> = r.gpus.iter().map(|g| g.uuid.clone()).collect();
        NvmlProbe {
            devices: gpu_uuids.iter().map(|u| lookup(u)).collect(),
            slot_mig: slot_devices
                .iter()
                .zip(&r.slot_mig)
                .map(|(d, &m)| {
                    if m {
                        d.as_deref().and_then(lookup)
                    } else {
                        None
                    }
                })
                .collect(),
            last_ts: vec![None; gpu_uuids.len()],
            last_util: vec![None; gpu_uuids.len()],
            gpu_uuids,
        }
    }
}

impl Probe for NvmlProbe {
    fn read(&mut self, busy: &[bool], busy_slots: &[bool]) -> Tick {
        let mut tick = Tick::default();
        let now = Instant::now();
        for (gi, uuid) in self.gpu_uuids.iter().enumerate() {
            let mut g = GpuTick::default();
            if let Some(d) = &self.devices[gi] {
                let due = self.last_util[gi].is_none_or(|t| now.duration_since(t) >= UTIL_EVERY);
                if due {
                    self.last_util[gi] = Some(now);
                    g.energy_mj = d.total_energy_consumption().ok();
                }
                if busy.get(gi).copied().unwrap_or(false) {
                    g.procs = d.running_compute_processes().ok().map(|ps| {
                        ps.into_iter()
                            .map(|p| {
                                let m = match p.used_gpu_memory {
                                    UsedGpuMemory::Used(b) => Some(b),
                                    UsedGpuMemory::Unavailable => None,
                                };
                                (p.pid, m)
                            })
                            .collect()
                    });
                    if due {
                        g.util = d
                            .utilization_rates()
                            .map_err(|e| log::debug!("GPU {uuid}: utilization: {e}"))
                            .ok()
                            .map(|u| u.gpu);
                        let samples = d.process_utilization_stats(self.last_ts[gi]);
                        if let Err(e) = &samples {
                            log::debug!("GPU {uuid}: process utilization: {e}");
                        }
                        if let Ok(samples) = samples {
                            if let Some(ts) = samples.iter().map(|s| s.timestamp).max() {
                                self.last_ts[gi] = Some(ts);
                            }
                            g.proc_util =
                                Some(samples.iter().map(|s| (s.pid, s.sm_util)).collect());
                        }
                    }
                }
            }
            tick.gpus.push(g);
        }
        tick.mig_used = self
            .slot_mig
            .iter()
            .enumerate()
            .map(|(si, d)| {
                let d = d
                    .as_ref()
                    .filter(|_| busy_slots.get(si).copied().unwrap_or(false))?;
                d.memory_info().ok().map(|m| m.used)
            })
            .collect();
        tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_attributes_by_session_and_shares_gpu_energy() {
        // slots 0,1 on GPU 0 (naive), slot 2 a MIG instance on GPU 1
        let mut f = Fold::new(
            vec![Some(0), Some(0), Some(1)],
            vec![false, false, true],
            vec![GpuTotal::default(), GpuTotal::default()],
        );
        let active = [(10, 0, 100), (11, 1, 200), (12, 2, 300)];
        let sid = |pid: u32| Some(if pid < 200 { 100 } else { 200 });
        let tick = |e0: u64, e1: u64| Tick {
            gpus: vec![
                GpuTick {
                    energy_mj: Some(e0),
                    util: Some(80),
                    procs: Some(vec![(101, Some(1000)), (102, Some(500)), (201, Some(700))]),
                    proc_util: Some(vec![(101, 30), (201, 50)]),
                },
                GpuTick {
                    energy_mj: Some(e1),
                    ..GpuTick::default()
                },
            ],
            mig_used: vec![None, None, Some(4096)],
        };
        f.apply(&tick(1_000, 5_000), &active, sid);
        f.apply(&tick(3_000, 6_000), &active, sid);
        let r10 = f.run(10).unwrap();
        assert_eq!(r10.peak_memory_bytes, Some(1500));
        assert_eq!(r10.mean_util_percent, Some(30.0));
        assert_eq!(r10.mean_gpu_util_percent, Some(80.0));
        assert_eq!(r10.gpu_energy_j, Some(2.0));
        let r11 = f.run(11).unwrap();
        assert_eq!(r11.peak_memory_bytes, Some(700));
        assert_eq!(r11.mean_util_percent, Some(50.0));
        let r12 = f.run(12).unwrap();
        assert_eq!(r12.peak_memory_bytes, Some(4096));
        assert_eq!(r12.gpu_energy_j, Some(1.0));
        assert_eq!(r12.mean_util_percent, None);
        let t = f.totals();
        assert_eq!(t[0].energy_j, Some(2.0));
        assert_eq!(t[1].energy_j, Some(1.0));
    }

    #[test]
    fn idle_runs_add_nothing_but_energy_of_the_gpu() {
        let mut f = Fold::new(vec![Some(0)], vec![false], vec![GpuTotal::default()]);
        let t = |e| Tick {
            gpus: vec![GpuTick {
                energy_mj: Some(e),
                ..GpuTick::default()
            }],
            mig_used: vec![None],
        };
        f.apply(&t(0), &[], |_| None);
        f.apply(&t(500), &[], |_| None);
        assert!(f.run(0).is_none());
        assert_eq!(f.totals()[0].energy_j, Some(0.5));
    }
}
