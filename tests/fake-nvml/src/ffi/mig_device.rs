//! MIG devices: their handles, and the GPU and instances each belongs to.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use super::{api, handle, mig_device, phys, put, Handle};
use crate::state::{code, State, R};
use crate::store::{self, nvml_call};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMaxMigDeviceCount", || {
        let g = phys(device)?;
        // nvml.h: zero where MIG is not enabled; else one per compute slice.
        let n = nvml_call("nvmlDeviceGetMaxMigDeviceCount", |st| {
            let gpu = st.gpu(g)?;
            Ok(if gpu.mig_current {
                gpu.model()?.compute_slices
            } else {
                0
            })
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMigDeviceHandleByIndex", || {
        let g = phys(device)?;
        let (gi, ci) = nvml_call("nvmlDeviceGetMigDeviceHandleByIndex", |st| {
            let gpu = st.gpu(g)?;
            // MIG off: NOT_FOUND (the lent H200, driver 580.159.04).
            if !gpu.mig_current {
                return Err(code::NOT_FOUND);
            }
            if index >= gpu.model()?.compute_slices {
                return Err(code::INVALID_ARGUMENT);
            }
            // A new MIG device may take a moment to be listed (Quirks).
            st.mig_devices(g, store::now_ms())?
                .get(index as usize)
                .copied()
                .ok_or(code::NOT_FOUND)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(mig_device, Handle::Mig(g, gi, ci).ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", || {
        let Handle::Mig(g, gi, ci) = handle(mig_device)? else {
            return Err(code::INVALID_ARGUMENT);
        };
        nvml_call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", |st| {
            mig_device_exists(st, g, gi, ci)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(device, Handle::Gpu(g).ptr()) }
    })
}

fn mig_device_exists(st: &State, g: u32, gi: u32, ci: u32) -> R<()> {
    mig_device(st, g, gi, ci).map(|_| ())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceIsMigDeviceHandle", || {
        let v = match handle(device)? {
            Handle::Gpu(_) => 0,
            Handle::Mig(..) => 1,
            _ => return Err(code::INVALID_ARGUMENT),
        };
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(is_mig, v) }
    })
}

fn mig_ids(name: &str, device: nvmlDevice_t) -> R<(u32, u32)> {
    match handle(device)? {
        Handle::Mig(g, gi, ci) => {
            nvml_call(name, |st| mig_device_exists(st, g, gi, ci))?;
            Ok((gi, ci))
        }
        Handle::Gpu(_) => Err(code::NOT_SUPPORTED),
        _ => Err(code::INVALID_ARGUMENT),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstanceId", || {
        let (gi, _) = mig_ids("nvmlDeviceGetGpuInstanceId", device)?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(id, gi) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetComputeInstanceId", || {
        let (_, ci) = mig_ids("nvmlDeviceGetComputeInstanceId", device)?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(id, ci) }
    })
}
