//! Whole GPUs: count, handles, names and UUIDs, indexes, memory, MIG mode.

use std::ffi::{c_char, c_uint, CStr};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlReturn_t};

use super::{
    api, gpu_of, handle, mig_device, phys, put, put_str, require_privilege, Handle, MEMORY_V2, MIB,
};
use crate::state::{code, legacy_mig_name, Gpu, State, R};
use crate::store::nvml_call;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    api("nvmlDeviceGetCount_v2", || {
        let n = nvml_call("nvmlDeviceGetCount_v2", |st| Ok(st.gpus.len() as u32))?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(device_count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetHandleByIndex_v2", || {
        nvml_call("nvmlDeviceGetHandleByIndex_v2", |st| {
            st.gpu(index).map(|_| ())
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(device, Handle::Gpu(index).ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetHandleByUUID", || {
        if uuid.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL NUL-terminated string per nvml.h.
        let wanted = unsafe { CStr::from_ptr(uuid) }
            .to_str()
            .map_err(|_| code::INVALID_ARGUMENT)?
            .to_string();
        let h = nvml_call("nvmlDeviceGetHandleByUUID", |st| {
            for (g, gpu) in st.gpus.iter().enumerate() {
                if gpu.uuid == wanted {
                    return Ok(Handle::Gpu(g as u32));
                }
                for gi in &gpu.gis {
                    if let Some(c) = gi.cis.iter().find(|c| {
                        c.uuid == wanted || legacy_mig_name(&gpu.uuid, gi.id, c.id) == wanted
                    }) {
                        return Ok(Handle::Mig(g as u32, gi.id, c.id));
                    }
                }
            }
            Err(code::NOT_FOUND)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(device, h.ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetName", || {
        let h = handle(device)?;
        let s = nvml_call("nvmlDeviceGetName", |st| match h {
            Handle::Gpu(g) => Ok(gpu_of(st, g)?.model()?.name.to_string()),
            Handle::Mig(g, gi, ci) => {
                let (gpu, p, _) = mig_device(st, g, gi, ci)?;
                Ok(format!("{} MIG {}", gpu.model()?.name, p.name))
            }
            _ => Err(code::INVALID_ARGUMENT),
        })?;
        // SAFETY: `name` holds `length` bytes (nvml.h contract).
        unsafe { put_str(name, length, &s) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetUUID", || {
        let h = handle(device)?;
        let s = nvml_call("nvmlDeviceGetUUID", |st| match h {
            Handle::Gpu(g) => Ok(gpu_of(st, g)?.uuid.clone()),
            Handle::Mig(g, gi, ci) => Ok(mig_device(st, g, gi, ci)?.2),
            _ => Err(code::INVALID_ARGUMENT),
        })?;
        // SAFETY: `uuid` holds `length` bytes (nvml.h contract).
        unsafe { put_str(uuid, length, &s) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetIndex", || {
        let g = phys(device)?;
        nvml_call("nvmlDeviceGetIndex", |st| st.gpu(g).map(|_| ()))?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(index, g) }
    })
}

/// The minor of `/dev/nvidiaN`, which also numbers the GPU in the driver's capability
/// tree (`/proc/driver/nvidia/capabilities/gpuN`): the index here, as on nodes whose
/// device files follow the PCI order.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMinorNumber", || {
        let g = phys(device)?;
        nvml_call("nvmlDeviceGetMinorNumber", |st| st.gpu(g).map(|_| ()))?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(minor, g) }
    })
}

/// (total, used) bytes of a device or MIG device.
fn memory(st: &State, h: Handle) -> R<(u64, u64)> {
    let used = |gpu: &Gpu, gi: Option<u32>| -> u64 {
        gpu.processes_on(gi).iter().map(|p| p.mem_mib * MIB).sum()
    };
    match h {
        Handle::Gpu(g) => {
            let gpu = gpu_of(st, g)?;
            Ok((gpu.model()?.memory_mib * MIB, used(gpu, None)))
        }
        Handle::Mig(g, gi, ci) => {
            let (gpu, p, _) = mig_device(st, g, gi, ci)?;
            Ok((p.memory_mib * MIB, used(gpu, Some(gi))))
        }
        _ => Err(code::INVALID_ARGUMENT),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMemoryInfo", || {
        let h = handle(device)?;
        let (total, used) = nvml_call("nvmlDeviceGetMemoryInfo", |st| memory(st, h))?;
        let used = used.min(total);
        let v = nvmlMemory_t {
            total,
            free: total - used,
            used,
        };
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(mem, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMemoryInfo_v2", || {
        if mem.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL and valid for a read of the struct (nvml.h: version is set
        // by the caller).
        if unsafe { (*mem).version } != MEMORY_V2 {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        let h = handle(device)?;
        let (total, used) = nvml_call("nvmlDeviceGetMemoryInfo_v2", |st| memory(st, h))?;
        let used = used.min(total);
        let v = nvmlMemory_v2_t {
            version: MEMORY_V2,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        // SAFETY: checked non-NULL above; valid for writes by contract.
        unsafe { put(mem, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetMigMode", || {
        if current.is_null() || pending.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = phys(device)?;
        let (c, p) = nvml_call("nvmlDeviceGetMigMode", |st| {
            let gpu = st.gpu(g)?;
            Ok((gpu.mig_current, gpu.mig_pending))
        })?;
        // SAFETY: both checked non-NULL; out-pointers per nvml.h.
        unsafe {
            put(current, u32::from(c))?;
            put(pending, u32::from(p))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: nvmlDevice_t,
    mode: c_uint,
    activation_status: *mut nvmlReturn_t,
) -> nvmlReturn_t {
    api("nvmlDeviceSetMigMode", || {
        if activation_status.is_null() || mode > 1 {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = phys(device)?;
        // nvml.h: "Requires root user."
        let status = nvml_call("nvmlDeviceSetMigMode", |st| {
            require_privilege(st)?;
            st.set_mig(g, mode == 1)
        })?;
        // SAFETY: checked non-NULL; out-pointer per nvml.h.
        unsafe { put(activation_status, status) }
    })
}
