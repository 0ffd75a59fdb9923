//! Reading the benchmarked GPU through NVML: what it is, and memory in use and the total
//! energy counter sampled every [`PERIOD`] while the benchmark runs. Read-only. Without
//! NVML (no GPU, no driver) the benchmark still runs and these figures are null.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use colloc_core::nvml::NvmlGpus;
use serde::Serialize;

/// How often memory and energy are read.
pub const PERIOD: Duration = Duration::from_millis(100);

/// The GPU under test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// Model name.
    pub name: String,
    /// `GPU-…` UUID (what copies get as `CUDA_VISIBLE_DEVICES`).
    pub uuid: String,
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Driver version.
    pub driver: Option<String>,
    /// MIG mode in effect (`None`: the GPU has no MIG).
    pub mig_enabled: Option<bool>,
}

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Seconds since the benchmark began.
    pub t: f64,
    /// Memory in use on the GPU, bytes.
    pub used: u64,
    /// Energy counter, millijoules (`None` where the GPU has none).
    pub energy_mj: Option<u64>,
}

/// Which GPU: an NVML index or a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSel {
    /// NVML index.
    Index(u32),
    /// `GPU-…` UUID.
    Uuid(String),
}

impl std::fmt::Display for GpuSel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSel::Index(i) => write!(f, "{i}"),
            GpuSel::Uuid(u) => f.write_str(u),
        }
    }
}

/// A sampling thread.
pub struct Monitor {
    readings: Arc<Mutex<Vec<Reading>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Open NVML from `library` and start sampling the selected GPU. `Err` says why
    /// there are no GPU figures (the caller logs it and carries on).
    ///
    /// # Errors
    /// NVML cannot be loaded or the GPU is not there.
    pub fn start(
        library: &str,
        sel: &GpuSel,
        clock: Instant,
    ) -> Result<(GpuInfo, Monitor), String> {
        let readings = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (lib, sel2, r2, s2) = (
            library.to_string(),
            sel.clone(),
            Arc::clone(&readings),
            Arc::clone(&stop),
        );
        let handle = std::thread::spawn(move || {
            let gpus = match NvmlGpus::open(&lib) {
                Ok(g) => g,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let nvml = gpus.nvml();
            let device = match &sel2 {
                GpuSel::Index(i) => nvml.device_by_index(*i),
                GpuSel::Uuid(u) => nvml.device_by_uuid(u.as_str()),
            };
            let device = match device {
                Ok(d) => d,
                Err(e) => {
                    let _ = tx.send(Err(format!("no GPU {sel2} in NVML: {e}")));
                    return;
                }
            };
            let info = (|| -> Result<GpuInfo, nvml_wrapper::error::NvmlError> {
                Ok(GpuInfo {
                    index: device.index()?,
                    name: device.name()?,
                    uuid: device.uuid()?,
                    memory_total: device.memory_info()?.total,
                    driver: nvml.sys_driver_version().ok(),
                    mig_enabled: device.mig_mode().ok().map(|m| m.current == 1),
                })
            })();
            match info {
                Ok(i) => {
                    let _ = tx.send(Ok(i));
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot read GPU {sel2}: {e}")));
                    return;
                }
            }
            while !s2.load(Ordering::Relaxed) {
                if let Ok(m) = device.memory_info() {
                    let r = Reading {
                        t: clock.elapsed().as_secs_f64(),
                        used: m.used,
                        energy_mj: device.total_energy_consumption().ok(),
                    };
                    if let Ok(mut v) = r2.lock() {
                        v.push(r);
                    }
                }
                std::thread::sleep(PERIOD);
            }
        });
        match rx.recv() {
            Ok(Ok(info)) => Ok((
                info,
                Monitor {
                    readings,
                    stop,
                    handle: Some(handle),
                },
            )),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => {
                let _ = handle.join();
                Err("the NVML thread ended without an answer".into())
            }
        }
    }

    /// Readings between `from` and `to` seconds.
    pub fn readings(&self, from: f64, to: f64) -> Vec<Reading> {
        self.readings
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|r| r.t >= from && r.t <= to)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The latest reading, waiting up to two periods for a fresh one.
    pub fn latest(&self) -> Option<Reading> {
        let before = self.readings.lock().ok()?.len();
        let deadline = Instant::now() + 2 * PERIOD;
        while Instant::now() < deadline {
            if self.readings.lock().ok()?.len() > before {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.readings.lock().ok()?.last().copied()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
