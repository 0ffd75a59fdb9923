//! GPM (GPU Performance Monitoring): the support query, sample buffers and the metrics
//! between two samples. nvml.h: "For Hopper or newer fully supported devices"; the
//! support query answers `isSupportedDevice` 0 on an A100, whose samples answer
//! NOT_SUPPORTED. Sample buffers are the calling process's memory in the driver, so the
//! fake keeps them in the process too (a registry by handle), not in the state file;
//! what a sample captures comes from the state ([`crate::state::GpmLoad`]).
//!
//! Measured on the lent H200 (driver 580.159.04, pynvml): support 1; an encoded or
//! other version ARGUMENT_VERSION_MISMATCH; metric ids 1-3 SUCCESS and 999
//! INVALID_ARGUMENT in their own `nvmlReturn` (the call SUCCESS); one sample given twice
//! or an unfilled one INVALID_ARGUMENT; samples in reverse order SUCCESS with every
//! metric 100.0; an unprivileged caller samples too.
//!
//! Versions are nvml.h's plain `NVML_GPM_SUPPORT_VERSION` and
//! `NVML_GPM_METRICS_GET_VERSION` (1, not `NVML_STRUCT_VERSION`-encoded: go-nvml
//! encoded the support version and the driver answered ARGUMENT_VERSION_MISMATCH,
//! NVIDIA/go-nvml#168, fixed in #176); any other version answers that.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpmMetric_t, nvmlGpmMetricsGet_t, nvmlGpmSample_t, nvmlGpmSupport_t,
    nvmlReturn_t, NVML_GPM_METRICS_GET_VERSION, NVML_GPM_SUPPORT_VERSION,
};

use super::{api, handle, mig_device, put, Handle, MAGIC};
use crate::state::{code, gpm_metric, GpmCounters, METRIC_MAX, R};
use crate::store::{self, nvml_call};

/// Handle kind of a sample buffer (after the kinds of [`Handle`]).
const KIND_SAMPLE: u64 = 5;

/// Sample buffers of this process: allocated (`None`) or filled by a sample.
static SAMPLES: Mutex<Option<HashMap<u64, Option<GpmCounters>>>> = Mutex::new(None);
static NEXT_SAMPLE: AtomicU64 = AtomicU64::new(1);

fn samples<T>(f: impl FnOnce(&mut HashMap<u64, Option<GpmCounters>>) -> T) -> T {
    let mut g = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn sample_ptr(id: u64) -> nvmlGpmSample_t {
    (MAGIC << 52 | KIND_SAMPLE << 48 | (id & 0xffff_ffff_ffff)) as usize as nvmlGpmSample_t
}

/// The id of a sample handle this process allocated and has not freed.
fn sample_id(p: nvmlGpmSample_t) -> R<u64> {
    let v = p as usize as u64;
    let id = v & 0xffff_ffff_ffff;
    let ours = v >> 52 == MAGIC && (v >> 48) & 0xf == KIND_SAMPLE;
    if ours && samples(|m| m.contains_key(&id)) {
        Ok(id)
    } else {
        Err(code::INVALID_ARGUMENT)
    }
}

/// The physical GPU behind a device handle (a MIG device's parent).
fn gpu_behind(call: &str, device: nvmlDevice_t) -> R<(u32, bool)> {
    match handle(device)? {
        Handle::Gpu(g) => Ok((g, false)),
        Handle::Mig(g, gi, ci) => {
            nvml_call(call, |st| mig_device(st, g, gi, ci).map(|_| ()))?;
            Ok((g, true))
        }
        _ => Err(code::INVALID_ARGUMENT),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    gpm_support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    api("nvmlGpmQueryDeviceSupport", || {
        let (g, _) = gpu_behind("nvmlGpmQueryDeviceSupport", device)?;
        if gpm_support.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL and valid for a read of the struct (the caller's contract).
        let version = unsafe { (*gpm_support).version };
        if version != NVML_GPM_SUPPORT_VERSION {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        let ok = nvml_call("nvmlGpmQueryDeviceSupport", |st| st.gpm_supported(g))?;
        // SAFETY: as above, for a write.
        unsafe {
            put(
                gpm_support,
                nvmlGpmSupport_t {
                    version,
                    isSupportedDevice: u32::from(ok),
                },
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(gpm_sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    api("nvmlGpmSampleAlloc", || {
        if gpm_sample.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        nvml_call("nvmlGpmSampleAlloc", |_| Ok(()))?;
        let id = NEXT_SAMPLE.fetch_add(1, Ordering::Relaxed);
        samples(|m| m.insert(id, None));
        // SAFETY: checked non-NULL; out-pointer per nvml.h.
        unsafe { put(gpm_sample, sample_ptr(id)) }
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleFree(gpm_sample: nvmlGpmSample_t) -> nvmlReturn_t {
    api("nvmlGpmSampleFree", || {
        let id = sample_id(gpm_sample)?;
        nvml_call("nvmlGpmSampleFree", |_| Ok(()))?;
        samples(|m| m.remove(&id));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleGet(
    device: nvmlDevice_t,
    gpm_sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    api("nvmlGpmSampleGet", || {
        let (g, mig) = gpu_behind("nvmlGpmSampleGet", device)?;
        let id = sample_id(gpm_sample)?;
        if mig {
            // A MIG device's own GPM (its GPU instance's SMs) is not modelled.
            return Err(code::NOT_SUPPORTED);
        }
        let t = store::now_us();
        let c = nvml_call("nvmlGpmSampleGet", |st| st.gpm_counters(g, t))?;
        samples(|m| m.insert(id, Some(c)));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(metrics_get: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    api("nvmlGpmMetricsGet", || {
        if metrics_get.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL and valid for reads of the struct's head (the caller's
        // contract); only plain integers and the two handles are read.
        let (version, n, s1, s2) = unsafe {
            let m = &*metrics_get;
            (m.version, m.numMetrics, m.sample1, m.sample2)
        };
        if version != NVML_GPM_METRICS_GET_VERSION {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        if n > METRIC_MAX {
            return Err(code::INVALID_ARGUMENT);
        }
        let (ia, ib) = (sample_id(s1)?, sample_id(s2)?);
        let (a, b) = samples(|m| (m.get(&ia).copied().flatten(), m.get(&ib).copied().flatten()));
        // Both filled, two samples (the H200 on driver 580.159.04 refused one given twice
        // and an unfilled one with INVALID_ARGUMENT), of one GPU.
        let (Some(a), Some(b)) = (a, b) else {
            return Err(code::INVALID_ARGUMENT);
        };
        if ia == ib || a.t_us == b.t_us || a.gpu != b.gpu {
            return Err(code::INVALID_ARGUMENT);
        }
        nvml_call("nvmlGpmMetricsGet", |_| Ok(()))?;
        // SAFETY: the caller's array holds at least `numMetrics` entries (nvml.h: "How
        // many metrics to retrieve in metrics[]"); only those are touched, so a caller
        // built with a shorter NVML_GPM_METRIC_MAX is safe too. `addr_of_mut!` takes the
        // field's address without making a reference to the whole array.
        let first: *mut nvmlGpmMetric_t =
            unsafe { std::ptr::addr_of_mut!((*metrics_get).metrics) }.cast();
        for i in 0..n as usize {
            // SAFETY: i < numMetrics entries, as above.
            let slot = unsafe { &mut *first.add(i) };
            match gpm_metric(slot.metricId, &a, &b) {
                Ok(v) => {
                    slot.nvmlReturn = code::SUCCESS;
                    slot.value = v;
                }
                Err(c) => {
                    slot.nvmlReturn = c;
                    slot.value = 0.0;
                }
            }
            slot.metricInfo.shortName = std::ptr::null_mut();
            slot.metricInfo.longName = std::ptr::null_mut();
            slot.metricInfo.unit = std::ptr::null_mut();
        }
        Ok(())
    })
}
