//! GPU instance profiles and placements; creating, listing and destroying GPU
//! instances.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstanceProfileInfo_v3_t, nvmlGpuInstance_t,
    nvmlReturn_t,
};

use super::{
    api, gi_handle, gi_profile_info, name_field, phys, put, require_privilege,
    require_privilege_if_mig, Handle, GI_PROFILE_INFO_V2, GI_PROFILE_INFO_V3,
};
use crate::state::{code, R};
use crate::store::nvml_call;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstanceProfileInfo", || {
        let g = phys(device)?;
        let p = nvml_call("nvmlDeviceGetGpuInstanceProfileInfo", |st| {
            st.gi_profile_by_index(g, profile)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(info, gi_profile_info(p)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstanceProfileInfoV", || {
        if info.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL; the caller set `version`, the first field of v2 and v3 alike.
        let version = unsafe { (*info).version };
        if version != GI_PROFILE_INFO_V2 && version != GI_PROFILE_INFO_V3 {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        let g = phys(device)?;
        let p = nvml_call("nvmlDeviceGetGpuInstanceProfileInfoV", |st| {
            st.gi_profile_by_index(g, profile)
        })?;
        let b = gi_profile_info(p);
        let name = name_field(&format!("MIG {}", p.name));
        if version == GI_PROFILE_INFO_V3 {
            let v3 = nvmlGpuInstanceProfileInfo_v3_t {
                version,
                id: b.id,
                sliceCount: b.sliceCount,
                instanceCount: b.instanceCount,
                multiprocessorCount: b.multiprocessorCount,
                copyEngineCount: b.copyEngineCount,
                decoderCount: b.decoderCount,
                encoderCount: b.encoderCount,
                jpegCount: b.jpegCount,
                ofaCount: b.ofaCount,
                memorySizeMB: b.memorySizeMB,
                name,
                capabilities: 0,
            };
            // SAFETY: the caller declared (by version) a v3 struct behind the pointer.
            unsafe { put(info.cast::<nvmlGpuInstanceProfileInfo_v3_t>(), v3) }
        } else {
            let v2 = nvmlGpuInstanceProfileInfo_v2_t {
                version,
                id: b.id,
                isP2pSupported: b.isP2pSupported,
                sliceCount: b.sliceCount,
                instanceCount: b.instanceCount,
                multiprocessorCount: b.multiprocessorCount,
                copyEngineCount: b.copyEngineCount,
                decoderCount: b.decoderCount,
                encoderCount: b.encoderCount,
                jpegCount: b.jpegCount,
                ofaCount: b.ofaCount,
                memorySizeMB: b.memorySizeMB,
                name,
            };
            // SAFETY: the caller declared (by version) a v2 struct behind the pointer.
            unsafe { put(info, v2) }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstancePossiblePlacements_v2", || {
        if count.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = phys(device)?;
        let list = nvml_call("nvmlDeviceGetGpuInstancePossiblePlacements_v2", |st| {
            require_privilege_if_mig(st, g)?;
            Ok(st.gi_profile_by_id(g, profile_id)?.placements())
        })?;
        let n = list.len() as u32;
        if placements.is_null() {
            // SAFETY: checked non-NULL.
            return unsafe { put(count, n) };
        }
        // The driver trusts the buffer to be big enough; the fake checks the count the
        // caller passes, so a short buffer is an error here instead of memory damage.
        // SAFETY: checked non-NULL; in/out count per nvml.h.
        let room = unsafe { *count };
        if room < n {
            // SAFETY: as above.
            unsafe { put(count, n)? };
            return Err(code::INSUFFICIENT_SIZE);
        }
        for (i, (start, size)) in list.into_iter().enumerate() {
            // SAFETY: i < n <= room entries the caller provides.
            unsafe {
                put(
                    placements.add(i),
                    nvmlGpuInstancePlacement_t { start, size },
                )?
            };
        }
        // SAFETY: checked non-NULL.
        unsafe { put(count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstanceRemainingCapacity", || {
        let g = phys(device)?;
        let n = nvml_call("nvmlDeviceGetGpuInstanceRemainingCapacity", |st| {
            require_privilege_if_mig(st, g)?;
            let p = st.gi_profile_by_id(g, profile_id)?;
            Ok(st.gpu(g)?.remaining(p))
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(count, n) }
    })
}

// ---- GPU instances ----

fn create_gi(
    name: &str,
    device: nvmlDevice_t,
    profile_id: u32,
    placement: Option<(u32, u32)>,
    out: *mut nvmlGpuInstance_t,
) -> R<()> {
    if out.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    let g = phys(device)?;
    let id = nvml_call(name, |st| {
        require_privilege(st)?;
        st.create_gi(g, profile_id, placement)
    })?;
    // SAFETY: checked non-NULL; out-pointer per nvml.h.
    unsafe { put(out, Handle::Gi(g, id).ptr()) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    api("nvmlDeviceCreateGpuInstance", || {
        create_gi(
            "nvmlDeviceCreateGpuInstance",
            device,
            profile_id,
            None,
            gpu_instance,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    api("nvmlDeviceCreateGpuInstanceWithPlacement", || {
        // SAFETY: NULL or a valid placement per nvml.h.
        let pl = unsafe { placement.as_ref() }.ok_or(code::INVALID_ARGUMENT)?;
        create_gi(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            device,
            profile_id,
            Some((pl.start, pl.size)),
            gpu_instance,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstances", || {
        if gpu_instances.is_null() || count.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = phys(device)?;
        let ids = nvml_call("nvmlDeviceGetGpuInstances", |st| {
            let p = st.gi_profile_by_id(g, profile_id)?;
            // MIG off: SUCCESS with no instances, for root and for `nobody` alike (the lent
            // H200, driver 580.159.04: fixtures/h200-r580-mig-off.*.json).
            if !st.gpu(g)?.mig_current {
                return Ok(Vec::new());
            }
            require_privilege(st)?;
            // Destroyed instances the driver still lists come too (go-nvml#146).
            let ids = st.list_gis(g, p.id)?;
            Ok(ids
                .into_iter()
                .take(p.instances as usize)
                .collect::<Vec<_>>())
        })?;
        for (i, id) in ids.iter().enumerate() {
            // SAFETY: nvml.h: the buffer holds the profile's instanceCount entries, and
            // at most that many are written.
            unsafe { put(gpu_instances.add(i), Handle::Gi(g, *id).ptr())? };
        }
        // SAFETY: checked non-NULL.
        unsafe { put(count, ids.len() as u32) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    api("nvmlDeviceGetGpuInstanceById", || {
        let g = phys(device)?;
        nvml_call("nvmlDeviceGetGpuInstanceById", |st| {
            // MIG off: NOT_FOUND, for root and `nobody` alike (the lent H200, R580).
            if !st.gpu(g)?.mig_current {
                return Err(code::NOT_FOUND);
            }
            require_privilege(st)?;
            st.gpu(g)?.gi(id).map(|_| ())
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(gpu_instance, Handle::Gi(g, id).ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetInfo", || {
        let (g, id) = gi_handle(gpu_instance)?;
        let gi = nvml_call("nvmlGpuInstanceGetInfo", |st| st.gpu(g)?.gi(id).cloned())?;
        let v = nvmlGpuInstanceInfo_t {
            device: Handle::Gpu(g).ptr(),
            id: gi.id,
            profileId: gi.profile_id,
            placement: nvmlGpuInstancePlacement_t {
                start: gi.start,
                size: gi.size,
            },
        };
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(info, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: nvmlGpuInstance_t) -> nvmlReturn_t {
    api("nvmlGpuInstanceDestroy", || {
        let (g, id) = gi_handle(gpu_instance)?;
        nvml_call("nvmlGpuInstanceDestroy", |st| {
            require_privilege(st)?;
            st.destroy_gi(g, id)
        })
    })
}
