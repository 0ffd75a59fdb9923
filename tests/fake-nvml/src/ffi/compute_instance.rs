//! Compute instance profiles; creating, listing and destroying compute instances.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstanceProfileInfo_v3_t,
    nvmlComputeInstance_t, nvmlGpuInstance_t, nvmlReturn_t,
};

use super::{
    api, ci_handle, ci_profile_info, gi_handle, name_field, put, require_privilege, Handle,
    CI_PROFILE_INFO_V2, CI_PROFILE_INFO_V3,
};
use crate::state::code;
use crate::store::{self, nvml_call};

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetComputeInstanceProfileInfo", || {
        let (g, id) = gi_handle(gpu_instance)?;
        let (v, _) = nvml_call("nvmlGpuInstanceGetComputeInstanceProfileInfo", |st| {
            ci_profile_info(st, g, id, profile, eng_profile)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(info, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetComputeInstanceProfileInfoV", || {
        if info.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL; the caller set `version`, the first field of v2 and v3 alike.
        let version = unsafe { (*info).version };
        if version != CI_PROFILE_INFO_V2 && version != CI_PROFILE_INFO_V3 {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        let (g, id) = gi_handle(gpu_instance)?;
        let (b, name) = nvml_call("nvmlGpuInstanceGetComputeInstanceProfileInfoV", |st| {
            ci_profile_info(st, g, id, profile, eng_profile)
        })?;
        let v2 = nvmlComputeInstanceProfileInfo_v2_t {
            version,
            id: b.id,
            sliceCount: b.sliceCount,
            instanceCount: b.instanceCount,
            multiprocessorCount: b.multiprocessorCount,
            sharedCopyEngineCount: b.sharedCopyEngineCount,
            sharedDecoderCount: b.sharedDecoderCount,
            sharedEncoderCount: b.sharedEncoderCount,
            sharedJpegCount: b.sharedJpegCount,
            sharedOfaCount: b.sharedOfaCount,
            name: name_field(&name),
        };
        if version == CI_PROFILE_INFO_V3 {
            let v3 = nvmlComputeInstanceProfileInfo_v3_t {
                version,
                id: v2.id,
                sliceCount: v2.sliceCount,
                instanceCount: v2.instanceCount,
                multiprocessorCount: v2.multiprocessorCount,
                sharedCopyEngineCount: v2.sharedCopyEngineCount,
                sharedDecoderCount: v2.sharedDecoderCount,
                sharedEncoderCount: v2.sharedEncoderCount,
                sharedJpegCount: v2.sharedJpegCount,
                sharedOfaCount: v2.sharedOfaCount,
                name: v2.name,
                capabilities: 0,
            };
            // SAFETY: the caller declared (by version) a v3 struct behind the pointer.
            unsafe { put(info.cast::<nvmlComputeInstanceProfileInfo_v3_t>(), v3) }
        } else {
            // SAFETY: the caller declared (by version) a v2 struct behind the pointer.
            unsafe { put(info, v2) }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", || {
        let (g, id) = gi_handle(gpu_instance)?;
        let n = nvml_call("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", |st| {
            require_privilege(st)?;
            let (info, _) = ci_profile_info(st, g, id, profile_id, 0)?;
            let gpu = st.gpu(g)?;
            let inst = gpu.gi(id)?;
            let gi_slices = gpu.gi_profile(inst, st.driver)?.slices;
            let used: u32 = inst.cis.iter().map(|c| c.slices).sum();
            let same = inst
                .cis
                .iter()
                .filter(|c| c.profile_id == profile_id)
                .count() as u32;
            let by_room = gi_slices.saturating_sub(used) / info.sliceCount;
            Ok(by_room.min(info.instanceCount.saturating_sub(same)))
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceCreateComputeInstance", || {
        if compute_instance.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let (g, gi) = gi_handle(gpu_instance)?;
        let ci = nvml_call("nvmlGpuInstanceCreateComputeInstance", |st| {
            require_privilege(st)?;
            st.create_ci_at(g, gi, profile_id, store::now_ms())
        })?;
        // SAFETY: checked non-NULL; out-pointer per nvml.h.
        unsafe { put(compute_instance, Handle::Ci(g, gi, ci).ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instances: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetComputeInstances", || {
        if compute_instances.is_null() || count.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let (g, gi) = gi_handle(gpu_instance)?;
        let ids = nvml_call("nvmlGpuInstanceGetComputeInstances", |st| {
            require_privilege(st)?;
            let (info, _) = ci_profile_info(st, g, gi, profile_id, 0)?;
            let gpu = st.gpu(g)?;
            Ok(gpu
                .gi(gi)?
                .cis
                .iter()
                .filter(|c| c.profile_id == profile_id)
                .map(|c| c.id)
                .take(info.instanceCount as usize)
                .collect::<Vec<_>>())
        })?;
        for (i, id) in ids.iter().enumerate() {
            // SAFETY: nvml.h: the buffer holds the CI profile's instanceCount entries,
            // and at most that many are written.
            unsafe { put(compute_instances.add(i), Handle::Ci(g, gi, *id).ptr())? };
        }
        // SAFETY: checked non-NULL.
        unsafe { put(count, ids.len() as u32) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: nvmlGpuInstance_t,
    id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    api("nvmlGpuInstanceGetComputeInstanceById", || {
        let (g, gi) = gi_handle(gpu_instance)?;
        nvml_call("nvmlGpuInstanceGetComputeInstanceById", |st| {
            require_privilege(st)?;
            let inst = st.gpu(g)?.gi(gi)?;
            inst.cis
                .iter()
                .find(|c| c.id == id)
                .map(|_| ())
                .ok_or(code::NOT_FOUND)
        })?;
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(compute_instance, Handle::Ci(g, gi, id).ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    api("nvmlComputeInstanceGetInfo_v2", || {
        let (g, gi, id) = ci_handle(compute_instance)?;
        let c = nvml_call("nvmlComputeInstanceGetInfo_v2", |st| {
            let inst = st.gpu(g)?.gi(gi)?;
            inst.cis
                .iter()
                .find(|c| c.id == id)
                .cloned()
                .ok_or(code::NOT_FOUND)
        })?;
        let v = nvmlComputeInstanceInfo_t {
            device: Handle::Gpu(g).ptr(),
            gpuInstance: Handle::Gi(g, gi).ptr(),
            id: c.id,
            profileId: c.profile_id,
            placement: nvml_wrapper_sys::bindings::nvmlComputeInstancePlacement_t {
                start: c.start,
                size: c.slices,
            },
        };
        // SAFETY: out-pointer per nvml.h.
        unsafe { put(info, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(
    compute_instance: nvmlComputeInstance_t,
) -> nvmlReturn_t {
    api("nvmlComputeInstanceDestroy", || {
        let (g, gi, id) = ci_handle(compute_instance)?;
        nvml_call("nvmlComputeInstanceDestroy", |st| {
            require_privilege(st)?;
            st.destroy_ci(g, gi, id)
        })
    })
}
