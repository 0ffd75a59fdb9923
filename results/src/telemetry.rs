//! GPU telemetry for `colloc run` and `colloc bench`: NVML read on a background thread
//! ([`Sampler`]) behind the [`Probe`] trait, and folded ([`Fold`], a pure accumulator)
//! into figures per attempt (one process tree running on one slot) and per physical GPU.
//!
//! What is attributed how (one rule each, for `colloc run` and `colloc bench` alike):
//! - **Memory**: per process. On a whole GPU (naive, MPS) an attempt's figure is the peak
//!   of the summed memory NVML lists for its own processes: those in its session (each
//!   attempt is its own session) or below its leader in the process tree. NVML's two
//!   lists are merged by pid: `nvmlDeviceGetComputeRunningProcesses` (under MPS on driver
//!   580: the server and each client with its own memory) and
//!   `nvmlDeviceGetMPSComputeRunningProcesses` (the clients only). The MPS server's memory
//!   goes to no attempt: it is kept per GPU ([`GpuTotals::mps_server_peak_bytes`]), as is
//!   the memory of processes of no attempt ([`GpuTotals::others_peak_bytes`]). On a MIG
//!   slot the figure is its instance's used memory.
//! - **Utilization**: per-process SM utilization where NVML reports it per process (a
//!   whole GPU without MPS); `None` where it cannot (MPS accounts every client to the MPS
//!   server, MIG has none), never a made-up 0. The GPU-wide utilization while an attempt
//!   ran is kept as well, and on Hopper and later GPM's SM activity (the share of SMs
//!   busy) and occupancy (of warps active) of the whole GPU, read at the energy cadence
//!   (`None` where the GPU has no GPM).
//! - **Energy**: each GPU's energy counter is read at most every [`ENERGY_EVERY`] and at
//!   every attempt's end, and each interval between two readings is shared out by the one
//!   rule of [`crate::energy`] (time share of the busy part; the rest idle), so the
//!   attempts' shares plus the idle energy add up to the GPU's measured energy exactly
//!   ([`GpuTotals`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod attempts;
mod probe;
mod sampler;
pub use crate::energy::Reading;
pub use probe::{resolve, NvmlProbe};
pub use sampler::{parse_session, parse_stat, proc_info, session_of, Sampler, SamplerConfig};

/// Energy and GPU-wide and per-process utilization are read at most this often (and at
/// every attempt's end). The energy counter is cumulative, NVML averages utilization over
/// its own sampling period and returns every per-process sample since the last read, so
/// reading them faster adds only driver time: on the H200 (driver 580) one energy read
/// took 4.1 ms of CPU and one per-process utilization read 2.4 ms, while process lists and
/// memory took about 0.01 ms.
pub const ENERGY_EVERY: Duration = Duration::from_secs(1);

/// Most readings kept per GPU in its history; beyond this every other one is dropped.
pub const MAX_HISTORY: usize = 4096;

/// One tick's readings of one physical GPU.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GpuTick {
    /// Energy counter in millijoules since the driver loaded.
    pub energy_mj: Option<u64>,
    /// GPU-wide utilization, percent.
    pub util: Option<u32>,
    /// Memory in use on the whole GPU, bytes.
    pub used_bytes: Option<u64>,
    /// Compute processes: (pid, used memory in bytes).
    pub procs: Option<Vec<(u32, Option<u64>)>>,
    /// MPS clients, from NVML's MPS list: (pid, used memory in bytes).
    pub mps_clients: Option<Vec<(u32, Option<u64>)>>,
    /// Per-process SM utilization since the last reading: (pid, percent).
    pub proc_util: Option<Vec<(u32, u32)>>,
    /// GPM's SM activity since its last reading, percent of SMs busy (Hopper and later).
    pub sm_activity: Option<f64>,
    /// GPM's SM occupancy since its last reading, percent of warps active.
    pub sm_occupancy: Option<f64>,
}

/// Readings of one tick.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tick {
    /// Per physical GPU, in [`SlotMap::gpus`] order.
    pub gpus: Vec<GpuTick>,
    /// Used memory of each slot's MIG instance (`None` for other slots).
    pub mig_used: Vec<Option<u64>>,
}

/// What to read in one tick.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Want {
    /// GPU g has an active attempt: read its processes.
    pub busy: Vec<bool>,
    /// Slot s is a MIG instance with an active attempt: read its memory.
    pub busy_slots: Vec<bool>,
    /// Read GPU g's energy counter and utilization now.
    pub energy: Vec<bool>,
}

/// Where the readings come from: NVML ([`NvmlProbe`]), or a stand-in in tests.
pub trait Probe: Send {
    /// Read one tick.
    fn read(&mut self, want: &Want) -> Tick;
}

/// A physical GPU as the telemetry names it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuId {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Model name.
    pub name: String,
}

/// The slots an engine runs attempts on, mapped to the GPUs behind them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SlotMap {
    /// Slot → index into `gpus`.
    pub slot_gpu: Vec<Option<usize>>,
    /// Slot is a MIG instance (its device UUID is in `slot_device`).
    pub slot_mig: Vec<bool>,
    /// Slot's CUDA device id as given (index, GPU UUID or MIG UUID).
    pub slot_device: Vec<Option<String>>,
    /// Total memory of each slot's GPU or MIG instance, MiB.
    pub slot_memory_mib: Vec<Option<u64>>,
    /// The physical GPUs.
    pub gpus: Vec<GpuId>,
}

/// GPU figures of one attempt.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptGpu {
    /// Peak memory of its processes (whole GPU, MPS) or of its MIG instance, bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Mean SM utilization of its own processes, percent; `None` where NVML cannot say
    /// (MPS, MIG).
    pub mean_util_percent: Option<f64>,
    /// Mean utilization of its whole GPU while it ran, percent (shared with co-runners).
    pub mean_gpu_util_percent: Option<f64>,
    /// Mean GPM SM activity of its whole GPU while it ran, percent of SMs busy (shared
    /// with co-runners); `None` without GPM (before Hopper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_sm_activity_percent: Option<f64>,
    /// Mean GPM SM occupancy of its whole GPU while it ran, percent of warps active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_sm_occupancy_percent: Option<f64>,
    /// Its time share of its GPU's measured energy, joules.
    pub energy_j: Option<f64>,
}

/// Figures of one physical GPU while it was sampled.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTotals {
    /// Which GPU.
    #[serde(flatten)]
    pub id: GpuId,
    /// Energy measured from the first to the last reading, joules.
    pub energy_j: Option<f64>,
    /// The part of it shared out to attempts (the sum of their `energy_j`).
    pub runs_energy_j: Option<f64>,
    /// The part of it with no attempt active.
    pub idle_energy_j: Option<f64>,
    /// Mean utilization while at least one attempt was active, percent.
    pub mean_util_percent: Option<f64>,
    /// Most memory in use on the whole GPU, bytes.
    pub peak_used_bytes: Option<u64>,
    /// Most memory the MPS server held (attributed to no attempt), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_server_peak_bytes: Option<u64>,
    /// Most memory held together by listed processes of no attempt (another user's, a
    /// process that left its attempt's tree), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_peak_bytes: Option<u64>,
}

/// What the sampler needs to know of a process NVML lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its session id.
    pub sid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// It is the MPS server (`nvidia-cuda-mps-server`), whoever started it.
    pub mps_server: bool,
}

/// Who a listed process's memory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Attempt(u64),
    /// An attempt that ended, its processes on their way out: counted nowhere.
    Ended,
    MpsServer,
    Other,
}

/// Deepest process tree walked up from a listed process to an attempt's leader.
const MAX_TREE_DEPTH: usize = 64;

/// NVML's two process lists merged: one entry per pid, its entries within a list summed,
/// the larger of the two lists' figures (a client listed in both counts once).
fn merge_lists(
    procs: Option<&[(u32, Option<u64>)]>,
    clients: Option<&[(u32, Option<u64>)]>,
) -> Vec<(u32, u64)> {
    let sum = |l: Option<&[(u32, Option<u64>)]>| {
        let mut m: HashMap<u32, u64> = HashMap::new();
        for &(pid, b) in l.unwrap_or_default() {
            if let Some(b) = b {
                *m.entry(pid).or_default() += b;
            }
        }
        m
    };
    let mut out = sum(procs);
    for (pid, b) in sum(clients) {
        let e = out.entry(pid).or_default();
        *e = (*e).max(b);
    }
    let mut v: Vec<(u32, u64)> = out.into_iter().collect();
    v.sort_unstable();
    v
}

/// Whose memory a listed process's is: an attempt's if it is in the attempt's session or
/// below its leader in the process tree (an attempt that already ended: nobody's, it is
/// on its way out); the MPS server's (no attempt's, even when it was started from an
/// attempt's tree) if it is the server and not an MPS client; else no one's.
/// `by_leader`: attempt leader pid (= its session id) -> attempt; `ended`: leaders of
/// attempts that ended.
fn owner(
    pid: u32,
    by_leader: &HashMap<u32, u64>,
    ended: &HashSet<u32>,
    mps_clients: &[(u32, Option<u64>)],
    info: &mut dyn FnMut(u32) -> Option<ProcInfo>,
) -> Owner {
    let Some(me) = info(pid) else {
        return Owner::Other;
    };
    if me.mps_server && !mps_clients.iter().any(|(p, _)| *p == pid) {
        return Owner::MpsServer;
    }
    let led_by = |leader: u32| match by_leader.get(&leader) {
        Some(k) => Some(Owner::Attempt(*k)),
        None => ended.contains(&leader).then_some(Owner::Ended),
    };
    if let Some(o) = led_by(me.sid).or_else(|| led_by(pid)) {
        return o;
    }
    let mut up = me.ppid;
    for _ in 0..MAX_TREE_DEPTH {
        if up <= 1 {
            break;
        }
        if let Some(o) = led_by(up) {
            return o;
        }
        match info(up) {
            Some(p) => up = p.ppid,
            None => break,
        }
    }
    Owner::Other
}

#[derive(Debug, Default, Clone)]
struct AttemptAcc {
    slot: usize,
    gpu: Option<usize>,
    sid: Option<u32>,
    /// When it began, seconds.
    since: f64,
    /// Seconds active in the open energy interval of its GPU.
    pending_s: f64,
    fig: AttemptGpu,
    util: (f64, u64),
    gpu_util: (f64, u64),
    sm_activity: (f64, u64),
    sm_occupancy: (f64, u64),
}

#[derive(Debug, Default, Clone)]
struct GpuAcc {
    totals: GpuTotals,
    last_energy_mj: Option<u64>,
    first_energy_mj: Option<u64>,
    /// Seconds of the open energy interval with at least one attempt active.
    pending_busy_s: f64,
    /// Seconds of the open energy interval.
    pending_total_s: f64,
    util: (f64, u64),
    history: Vec<Reading>,
    stride: u64,
    seen: u64,
}

fn mean(acc: (f64, u64)) -> Option<f64> {
    (acc.1 > 0).then(|| acc.0 / acc.1 as f64)
}

/// Folds ticks into per-attempt and per-GPU figures. Pure: times are given, session ids
/// come from a function, so every rule is unit-tested.
#[derive(Debug)]
pub struct Fold {
    map: SlotMap,
    process_util: bool,
    attempts: HashMap<u64, AttemptAcc>,
    gpus: Vec<GpuAcc>,
    last_t: Option<f64>,
    proc_cache: HashMap<u32, ProcInfo>,
    /// Leaders of attempts that ended (their lingering processes are no one's).
    ended: HashSet<u32>,
}

impl Fold {
    /// A fold over `map`. `process_util`: NVML's per-process utilization means something
    /// here (false under MPS).
    pub fn new(map: SlotMap, process_util: bool) -> Fold {
        let gpus = map
            .gpus
            .iter()
            .map(|id| GpuAcc {
                totals: GpuTotals {
                    id: id.clone(),
                    ..GpuTotals::default()
                },
                stride: 1,
                ..GpuAcc::default()
            })
            .collect();
        Fold {
            map,
            process_util,
            attempts: HashMap::new(),
            gpus,
            last_t: None,
            proc_cache: HashMap::new(),
            ended: HashSet::new(),
        }
    }

    /// An attempt began on `slot` at `t`.
    pub fn begin(&mut self, key: u64, slot: usize, t: f64) {
        let gpu = self.map.slot_gpu.get(slot).copied().flatten();
        self.attempts.insert(
            key,
            AttemptAcc {
                slot,
                gpu,
                since: t,
                ..AttemptAcc::default()
            },
        );
    }

    /// The attempt's processes are the session `sid`.
    pub fn session(&mut self, key: u64, sid: u32) {
        if let Some(a) = self.attempts.get_mut(&key) {
            a.sid = Some(sid);
        }
    }

    /// The GPU an attempt runs on (index into the map's GPUs).
    pub fn gpu_of(&self, key: u64) -> Option<usize> {
        self.attempts.get(&key).and_then(|a| a.gpu)
    }

    /// What to read next tick; `energy_due[g]`: GPU g's energy reading is due.
    pub fn want(&self, energy_due: &[bool]) -> Want {
        let mut w = Want {
            busy: vec![false; self.gpus.len()],
            busy_slots: vec![false; self.map.slot_gpu.len()],
            energy: energy_due.to_vec(),
        };
        w.energy.resize(self.gpus.len(), false);
        for a in self.attempts.values() {
            if let Some(g) = a.gpu {
                w.busy[g] = true;
            }
            if self.map.slot_mig.get(a.slot).copied().unwrap_or(false) {
                w.busy_slots[a.slot] = true;
            }
        }
        w
    }

    /// Fold one tick read at `t` seconds; `proc_of` tells what a pid is ([`proc_info`]
    /// in the sampler; `None` if it is gone or unknown).
    pub fn apply(&mut self, t: f64, tick: &Tick, mut proc_of: impl FnMut(u32) -> Option<ProcInfo>) {
        self.advance_to(t);
        for gi in 0..self.gpus.len().min(tick.gpus.len()) {
            let g = &tick.gpus[gi];
            if let Some(e) = g.energy_mj {
                self.energy_reading(gi, e);
            }
            if let Some(b) = g.used_bytes {
                let p = &mut self.gpus[gi].totals.peak_used_bytes;
                *p = Some(p.unwrap_or(0).max(b));
            }
            self.record_history(gi, t, g);
            let on_gpu: Vec<u64> = self
                .attempts
                .iter()
                .filter(|(_, a)| a.gpu == Some(gi))
                .map(|(k, _)| *k)
                .collect();
            if on_gpu.is_empty() {
                continue;
            }
            for k in &on_gpu {
                if let Some(a) = self.attempts.get_mut(k) {
                    for (v, acc) in [
                        (g.sm_activity, &mut a.sm_activity),
                        (g.sm_occupancy, &mut a.sm_occupancy),
                    ] {
                        if let Some(v) = v.filter(|v| v.is_finite()) {
                            acc.0 += v;
                            acc.1 += 1;
                        }
                    }
                }
            }
            if let Some(u) = g.util {
                let acc = &mut self.gpus[gi].util;
                acc.0 += f64::from(u);
                acc.1 += 1;
                for k in &on_gpu {
                    if let Some(a) = self.attempts.get_mut(k) {
                        a.gpu_util.0 += f64::from(u);
                        a.gpu_util.1 += 1;
                    }
                }
            }
            // Leader pid (= session id) -> attempt. A MIG slot's figure is its instance's
            // memory (at least its processes'), its processes are still its own.
            let by_leader: HashMap<u32, u64> = on_gpu
                .iter()
                .filter_map(|k| Some((self.attempts[k].sid?, *k)))
                .collect();
            let clients = g.mps_clients.as_deref().unwrap_or_default();
            let cache = &mut self.proc_cache;
            let ended = &self.ended;
            let mut owner_of = |pid: u32| -> Owner {
                // A pid that is gone is asked again next time: it may be reused.
                let mut info = |p: u32| match cache.get(&p) {
                    Some(i) => Some(i.clone()),
                    None => {
                        let i = proc_of(p)?;
                        cache.insert(p, i.clone());
                        Some(i)
                    }
                };
                owner(pid, &by_leader, ended, clients, &mut info)
            };
            if g.procs.is_some() || g.mps_clients.is_some() {
                let used = merge_lists(g.procs.as_deref(), g.mps_clients.as_deref());
                let mut mem: HashMap<u64, u64> = HashMap::new();
                let (mut server, mut others) = (None::<u64>, None::<u64>);
                for (pid, b) in used {
                    match owner_of(pid) {
                        Owner::Attempt(k) => *mem.entry(k).or_default() += b,
                        Owner::MpsServer => *server.get_or_insert(0) += b,
                        Owner::Other => *others.get_or_insert(0) += b,
                        Owner::Ended => {}
                    }
                }
                for (k, b) in mem {
                    if let Some(a) = self.attempts.get_mut(&k) {
                        let p = &mut a.fig.peak_memory_bytes;
                        *p = Some(p.unwrap_or(0).max(b));
                    }
                }
                let totals = &mut self.gpus[gi].totals;
                for (seen, peak) in [
                    (server, &mut totals.mps_server_peak_bytes),
                    (others, &mut totals.others_peak_bytes),
                ] {
                    if let Some(b) = seen {
                        *peak = Some(peak.unwrap_or(0).max(b));
                    }
                }
            }
            if let (Some(pu), true) = (&g.proc_util, self.process_util) {
                let mut util: HashMap<u64, u32> = HashMap::new();
                for &(pid, u) in pu {
                    if let Owner::Attempt(k) = owner_of(pid) {
                        *util.entry(k).or_default() += u;
                    }
                }
                // An attempt with no sample in this reading was idle on the GPU.
                for k in by_leader.values() {
                    let u = util.get(k).copied().unwrap_or(0).min(100);
                    if let Some(a) = self.attempts.get_mut(k) {
                        a.util.0 += f64::from(u);
                        a.util.1 += 1;
                    }
                }
            }
        }
        self.mig_memory(&tick.mig_used);
        if self.proc_cache.len() > 4096 {
            self.proc_cache.clear();
        }
        if self.ended.len() > 4096 {
            self.ended.clear();
        }
    }

    /// Time since the last tick counts as active for every attempt that was active in it
    /// (from its start, if it began meanwhile), and as busy for its GPU.
    fn advance_to(&mut self, t: f64) {
        let prev = self.last_t.unwrap_or(t);
        let mut busy_any = vec![0.0f64; self.gpus.len()];
        for a in self.attempts.values_mut() {
            let Some(g) = a.gpu else { continue };
            let from = prev.max(a.since);
            let dt = (t - from).max(0.0);
            a.pending_s += dt;
            // Every active interval ends at `t`: their union is the longest.
            busy_any[g] = f64::max(busy_any[g], dt);
        }
        let span = (t - prev).max(0.0);
        for (g, acc) in self.gpus.iter_mut().enumerate() {
            acc.pending_total_s += span;
            acc.pending_busy_s += busy_any[g].min(span);
        }
        self.last_t = Some(t);
    }

    /// A MIG slot's memory figure: its instance's used memory (`mig_used`, by slot).
    fn mig_memory(&mut self, mig_used: &[Option<u64>]) {
        for (slot, used) in mig_used.iter().enumerate() {
            let Some(b) = used else { continue };
            for a in self.attempts.values_mut().filter(|a| a.slot == slot) {
                let p = &mut a.fig.peak_memory_bytes;
                *p = Some(p.unwrap_or(0).max(*b));
            }
        }
    }

    /// A new energy counter value of GPU `gi`: share out the interval since the last.
    fn energy_reading(&mut self, gi: usize, e: u64) {
        let acc = &mut self.gpus[gi];
        acc.first_energy_mj.get_or_insert(e);
        let Some(prev) = acc.last_energy_mj.replace(e) else {
            // The first reading opens the first interval.
            acc.pending_busy_s = 0.0;
            acc.pending_total_s = 0.0;
            for a in self.attempts.values_mut().filter(|a| a.gpu == Some(gi)) {
                a.pending_s = 0.0;
            }
            return;
        };
        let delta = e.saturating_sub(prev) as f64 / 1000.0;
        let (span, busy_s) = (acc.pending_total_s, acc.pending_busy_s);
        let mut on: Vec<&mut AttemptAcc> = self
            .attempts
            .values_mut()
            .filter(|a| a.gpu == Some(gi))
            .collect();
        let times: Vec<f64> = on.iter().map(|a| a.pending_s).collect();
        let (shares, given) = crate::energy::share(delta, span, busy_s, &times);
        for (a, share) in on.iter_mut().zip(shares) {
            *a.fig.energy_j.get_or_insert(0.0) += share;
            a.pending_s = 0.0;
        }
        let acc = &mut self.gpus[gi];
        let t = &mut acc.totals;
        *t.energy_j.get_or_insert(0.0) += delta;
        *t.runs_energy_j.get_or_insert(0.0) += given;
        *t.idle_energy_j.get_or_insert(0.0) += delta - given;
        acc.pending_busy_s = 0.0;
        acc.pending_total_s = 0.0;
    }

    fn record_history(&mut self, gi: usize, t: f64, g: &GpuTick) {
        let acc = &mut self.gpus[gi];
        let energy_j = match (g.energy_mj, acc.first_energy_mj) {
            (Some(e), Some(first)) => Some(e.saturating_sub(first) as f64 / 1000.0),
            _ => None,
        };
        if energy_j.is_none()
            && g.used_bytes.is_none()
            && g.sm_activity.is_none()
            && g.sm_occupancy.is_none()
        {
            return;
        }
        acc.seen += 1;
        if !acc.seen.is_multiple_of(acc.stride) {
            return;
        }
        acc.history.push(Reading {
            t,
            energy_j,
            used_bytes: g.used_bytes,
            sm_activity: g.sm_activity,
            sm_occupancy: g.sm_occupancy,
        });
        if acc.history.len() >= MAX_HISTORY {
            let mut i = 0;
            acc.history.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            acc.stride *= 2;
        }
    }

    /// The attempt ended (after the tick that read its GPU's energy last): its figures.
    pub fn end(&mut self, key: u64) -> Option<AttemptGpu> {
        let a = self.attempts.remove(&key)?;
        if let Some(sid) = a.sid {
            self.ended.insert(sid);
            // Its processes' pids may be reused by a later attempt's.
            self.proc_cache.retain(|_, i| i.sid != sid);
        }
        self.figures(&a)
    }

    /// A running attempt's figures so far (as [`Fold::end`] would give them now, without
    /// ending it): its peak memory and means up to the last tick, its energy share up to
    /// its GPU's last energy reading.
    pub fn current(&self, key: u64) -> Option<AttemptGpu> {
        self.figures(self.attempts.get(&key)?)
    }

    fn figures(&self, a: &AttemptAcc) -> Option<AttemptGpu> {
        a.gpu?;
        Some(AttemptGpu {
            mean_util_percent: if self.process_util
                && !self.map.slot_mig.get(a.slot).copied().unwrap_or(false)
            {
                mean(a.util)
            } else {
                None
            },
            mean_gpu_util_percent: mean(a.gpu_util),
            mean_sm_activity_percent: mean(a.sm_activity),
            mean_sm_occupancy_percent: mean(a.sm_occupancy),
            ..a.fig.clone()
        })
    }

    /// Per-GPU figures so far.
    pub fn totals(&self) -> Vec<GpuTotals> {
        self.gpus
            .iter()
            .map(|g| GpuTotals {
                mean_util_percent: mean(g.util),
                ..g.totals.clone()
            })
            .collect()
    }

    /// The readings of GPU `gi` so far (thinned to at most [`MAX_HISTORY`]).
    pub fn history(&self, gi: usize) -> Vec<Reading> {
        self.gpus
            .get(gi)
            .map(|g| g.history.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
