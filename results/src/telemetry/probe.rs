//! The NVML side of the telemetry: which GPU is behind each slot ([`resolve`]) and the
//! readings of one tick ([`NvmlProbe`]).

use std::sync::Arc;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::{Device, Nvml};

use super::{GpuId, GpuTick, Probe, SlotMap, Tick, Want};
use colloc_core::nvml::{GpmSampler, NvmlGpus};

/// Map slot devices (`CUDA_VISIBLE_DEVICES` entries: index, GPU UUID or MIG UUID) to the
/// GPUs behind them. Devices NVML does not know are warned about once and left unmapped.
pub fn resolve(nvml: &Nvml, slot_devices: &[Option<String>]) -> SlotMap {
    let mut m = SlotMap {
        slot_device: slot_devices.to_vec(),
        ..SlotMap::default()
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
                        let gi = match m.gpus.iter().position(|g| g.uuid == uuid) {
                            Some(gi) => gi,
                            None => {
                                m.gpus.push(GpuId {
                                    index: p.index().unwrap_or(u32::MAX),
                                    uuid,
                                    name: p.name().unwrap_or_default(),
                                });
                                m.gpus.len() - 1
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
        m.slot_gpu.push(found.0);
        m.slot_mig.push(found.1);
        m.slot_memory_mib.push(found.2);
    }
    m
}

/// Readings through NVML. Device handles are looked up by index or UUID at each reading
/// (a table lookup in the driver), so the probe owns the library and borrows nothing.
pub struct NvmlProbe {
    nvml: Arc<NvmlGpus>,
    gpu_index: Vec<u32>,
    slot_mig_uuid: Vec<Option<String>>,
    last_ts: Vec<Option<u64>>,
    /// GPM of each GPU that has it (Hopper and later).
    gpm: Vec<Option<GpmSampler>>,
}

impl NvmlProbe {
    /// A probe over the GPUs of `map`.
    pub fn new(nvml: Arc<NvmlGpus>, map: &SlotMap) -> NvmlProbe {
        NvmlProbe {
            gpu_index: map.gpus.iter().map(|g| g.index).collect(),
            slot_mig_uuid: map
                .slot_device
                .iter()
                .zip(&map.slot_mig)
                .map(|(d, &mig)| d.clone().filter(|_| mig))
                .collect(),
            last_ts: vec![None; map.gpus.len()],
            gpm: map.gpus.iter().map(|g| nvml.gpm_sampler(g.index)).collect(),
            nvml,
        }
    }

    fn read_gpu(&mut self, gi: usize, d: &Device<'_>, want: &Want) -> GpuTick {
        let mut g = GpuTick {
            used_bytes: d.memory_info().ok().map(|m| m.used),
            ..GpuTick::default()
        };
        let energy = want.energy.get(gi).copied().unwrap_or(false);
        if energy {
            g.energy_mj = d.total_energy_consumption().ok();
            // Every energy tick, busy or not, so each reading spans one interval.
            if let Some(r) = self
                .gpm
                .get_mut(gi)
                .and_then(Option::as_mut)
                .and_then(GpmSampler::read)
            {
                g.sm_activity = r.sm_activity;
                g.sm_occupancy = r.sm_occupancy;
            }
        }
        if !want.busy.get(gi).copied().unwrap_or(false) {
            return g;
        }
        let list = |ps: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>| {
            ps.into_iter()
                .map(|p| {
                    let m = match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    };
                    (p.pid, m)
                })
                .collect()
        };
        g.procs = d.running_compute_processes().ok().map(list);
        // Empty without MPS; older drivers list MPS clients only here.
        g.mps_clients = d.mps_running_compute_processes().ok().map(list);
        if energy {
            g.util = d
                .utilization_rates()
                .map_err(|e| log::debug!("GPU {gi}: utilization: {e}"))
                .ok()
                .map(|u| u.gpu);
            match d.process_utilization_stats(self.last_ts[gi]) {
                Ok(samples) => {
                    if let Some(ts) = samples.iter().map(|s| s.timestamp).max() {
                        self.last_ts[gi] = Some(ts);
                    }
                    g.proc_util = Some(samples.iter().map(|s| (s.pid, s.sm_util)).collect());
                }
                Err(e) => log::debug!("GPU {gi}: process utilization: {e}"),
            }
        }
        g
    }
}

impl Probe for NvmlProbe {
    fn read(&mut self, want: &Want) -> Tick {
        let nvml = Arc::clone(&self.nvml);
        let mut tick = Tick::default();
        for gi in 0..self.gpu_index.len() {
            let g = match nvml.nvml().device_by_index(self.gpu_index[gi]) {
                Ok(d) => self.read_gpu(gi, &d, want),
                Err(_) => GpuTick::default(),
            };
            tick.gpus.push(g);
        }
        tick.mig_used = self
            .slot_mig_uuid
            .iter()
            .enumerate()
            .map(|(s, uuid)| {
                let uuid = uuid
                    .as_deref()
                    .filter(|_| want.busy_slots.get(s).copied().unwrap_or(false))?;
                let d = nvml.nvml().device_by_uuid(uuid).ok()?;
                d.memory_info().ok().map(|m| m.used)
            })
            .collect();
        tick
    }
}
