//! Processes on a GPU, utilization and energy.

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_t, nvmlProcessUtilizationSample_t, nvmlReturn_t,
    nvmlUtilization_t,
};

use super::{api, handle, mig_device, phys, put, Handle, MIB};
use crate::state::{code, NO_ID};
use crate::store::{self, nvml_call};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetComputeRunningProcesses_v3", || {
        // SAFETY: the caller's pointers, passed on as given.
        unsafe {
            process_list(
                "nvmlDeviceGetComputeRunningProcesses_v3",
                device,
                info_count,
                infos,
                |_| true,
            )
        }
    })
}

/// Clients of MPS only, as driver 580 lists them (the server is not among them).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMPSComputeRunningProcesses_v3", || {
        // SAFETY: the caller's pointers, passed on as given.
        unsafe {
            process_list(
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                device,
                info_count,
                infos,
                |p| p.mps == Some(crate::state::MpsRole::Client),
            )
        }
    })
}

/// The processes on `device` that `keep` takes, into the caller's array (in/out count,
/// INSUFFICIENT_SIZE with the count needed when it is too small).
///
/// # Safety
/// `info_count` NULL or valid; `infos` NULL or valid for `*info_count` entries.
unsafe fn process_list(
    call: &str,
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
    keep: fn(&crate::state::Process) -> bool,
) -> Result<(), nvmlReturn_t> {
    if info_count.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    let h = handle(device)?;
    let list = nvml_call(call, |st| {
        let (gpu, gi) = match h {
            Handle::Gpu(g) => (st.gpu(g)?, None),
            Handle::Mig(g, gi, ci) => (mig_device(st, g, gi, ci)?.0, Some(gi)),
            _ => return Err(code::INVALID_ARGUMENT),
        };
        Ok(gpu
            .processes_on(gi)
            .into_iter()
            .filter(|p| keep(p))
            .map(|p| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.mem_mib * MIB,
                gpuInstanceId: p.gi.unwrap_or(NO_ID),
                computeInstanceId: p.ci.unwrap_or(NO_ID),
            })
            .collect::<Vec<_>>())
    })?;
    let n = list.len() as u32;
    // SAFETY: checked non-NULL; in/out count per nvml.h.
    let room = unsafe { *info_count };
    // SAFETY: as above.
    unsafe { put(info_count, n)? };
    if n == 0 {
        return Ok(());
    }
    if infos.is_null() || room < n {
        return Err(code::INSUFFICIENT_SIZE);
    }
    for (i, p) in list.into_iter().enumerate() {
        // SAFETY: i < n <= room entries the caller provides.
        unsafe { put(infos.add(i), p)? };
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetUtilizationRates", || {
        let g = match handle(device)? {
            Handle::Gpu(g) => g,
            // The driver gives no utilization for MIG devices.
            Handle::Mig(..) => return Err(code::NOT_SUPPORTED),
            _ => return Err(code::INVALID_ARGUMENT),
        };
        let v = nvml_call("nvmlDeviceGetUtilizationRates", |st| {
            let gpu = st.gpu(g)?;
            if gpu.mig_current {
                return Err(code::NOT_SUPPORTED);
            }
            let sm: u32 = gpu.processes.iter().map(|p| p.sm_util).sum();
            let total = gpu.model()?.memory_mib.max(1);
            let used: u64 = gpu.processes.iter().map(|p| p.mem_mib).sum();
            Ok(nvmlUtilization_t {
                gpu: sm.min(100),
                memory: (used * 100 / total).min(100) as u32,
            })
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(utilization, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    api("nvmlDeviceGetTotalEnergyConsumption", || {
        let g = phys(device)?;
        let mj = nvml_call("nvmlDeviceGetTotalEnergyConsumption", |st| {
            let gpu = st.gpu(g)?;
            // W x ms = mJ, at a constant draw since the state was made: monotonic.
            Ok(store::now_ms().saturating_sub(st.created_unix_ms) * gpu.power_w)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(energy, mj) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    _last_seen: c_ulonglong,
) -> nvmlReturn_t {
    api("nvmlDeviceGetProcessUtilization", || {
        if count.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = match handle(device)? {
            Handle::Gpu(g) => g,
            Handle::Mig(..) => return Err(code::NOT_SUPPORTED),
            _ => return Err(code::INVALID_ARGUMENT),
        };
        let now_us = store::now_ms() * 1000;
        let list = nvml_call("nvmlDeviceGetProcessUtilization", |st| {
            let gpu = st.gpu(g)?;
            if gpu.mig_current {
                return Err(code::NOT_SUPPORTED);
            }
            let total = gpu.model()?.memory_mib.max(1);
            Ok(gpu
                .processes
                .iter()
                .map(|p| nvmlProcessUtilizationSample_t {
                    pid: p.pid,
                    timeStamp: now_us,
                    smUtil: p.sm_util.min(100),
                    memUtil: (p.mem_mib * 100 / total).min(100) as u32,
                    encUtil: 0,
                    decUtil: 0,
                })
                .collect::<Vec<_>>())
        })?;
        let n = list.len() as u32;
        if n == 0 {
            // The driver answers "not found" when it holds no samples.
            return Err(code::NOT_FOUND);
        }
        // SAFETY: checked non-NULL; in/out count per nvml.h.
        let room = unsafe { *count };
        // SAFETY: as above.
        unsafe { put(count, n)? };
        if utilization.is_null() || room < n {
            return Err(code::INSUFFICIENT_SIZE);
        }
        for (i, s) in list.into_iter().enumerate() {
            // SAFETY: i < n <= room entries the caller provides.
            unsafe { put(utilization.add(i), s)? };
        }
        Ok(())
    })
}
