//! The exported NVML C API. Each function checks its handles and pointers, runs one
//! state operation under the file lock ([`store::nvml_call`]) and writes the answer
//! through the caller's pointers, with the struct layouts of `nvml-wrapper-sys`
//! (generated from the real nvml.h). A panic never crosses the C boundary: every
//! export runs inside [`guard`] and answers NVML_ERROR_UNKNOWN instead.
//!
//! # Safety
//! The contract of every export is nvml.h's: each pointer argument is NULL (answered
//! with NVML_ERROR_INVALID_ARGUMENT where nvml.h requires it) or valid for the reads and
//! writes nvml.h documents for it; string buffers hold the given length.
// The exports carry nvml.h's names and contract; nvml.h is their documentation.
#![allow(non_snake_case, missing_docs, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_uint, c_ulonglong, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstanceProfileInfo_v3_t,
    nvmlComputeInstance_t, nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_t, nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstanceProfileInfo_v3_t,
    nvmlGpuInstance_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlProcessInfo_t,
    nvmlProcessUtilizationSample_t, nvmlReturn_t, nvmlUtilization_t,
};

use crate::state::{ci_profile_slices, code, legacy_mig_name, Gpu, State, NO_ID, R};
use crate::store::{self, nvml_call};
use crate::sys;
use crate::tables::{self, GiProfile};

const MIB: u64 = 1024 * 1024;
/// Suffix of the driver version the fake reports, so nobody mistakes it for a driver.
pub const FAKE_SUFFIX: &str = "-fake";

// ---- versioned structs: NVML_STRUCT_VERSION(name, ver) = sizeof | ver << 24 ----

const fn struct_version(size: usize, ver: u32) -> u32 {
    size as u32 | (ver << 24)
}
const MEMORY_V2: u32 = struct_version(std::mem::size_of::<nvmlMemory_v2_t>(), 2);
const GI_PROFILE_INFO_V2: u32 =
    struct_version(std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>(), 2);
const GI_PROFILE_INFO_V3: u32 =
    struct_version(std::mem::size_of::<nvmlGpuInstanceProfileInfo_v3_t>(), 3);
const CI_PROFILE_INFO_V2: u32 = struct_version(
    std::mem::size_of::<nvmlComputeInstanceProfileInfo_v2_t>(),
    2,
);
const CI_PROFILE_INFO_V3: u32 = struct_version(
    std::mem::size_of::<nvmlComputeInstanceProfileInfo_v3_t>(),
    3,
);

// ---- handles: opaque pointers that encode what they name, never dereferenced ----

const MAGIC: u64 = 0x7f1;
const KIND_GPU: u64 = 1;
const KIND_MIG: u64 = 2;
const KIND_GI: u64 = 3;
const KIND_CI: u64 = 4;

/// What an opaque NVML handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handle {
    /// A physical GPU.
    Gpu(u32),
    /// A MIG device (one compute instance seen as a device).
    Mig(u32, u32, u32),
    /// A GPU instance.
    Gi(u32, u32),
    /// A compute instance.
    Ci(u32, u32, u32),
}

impl Handle {
    /// The handle's integer value.
    pub fn encode(self) -> u64 {
        let (kind, gpu, gi, ci) = match self {
            Handle::Gpu(g) => (KIND_GPU, g, 0, 0),
            Handle::Mig(g, i, c) => (KIND_MIG, g, i, c),
            Handle::Gi(g, i) => (KIND_GI, g, i, 0),
            Handle::Ci(g, i, c) => (KIND_CI, g, i, c),
        };
        let f = |v: u32| u64::from(v) & 0xffff;
        MAGIC << 52 | kind << 48 | f(gpu) << 32 | f(gi) << 16 | f(ci)
    }

    /// Decode a handle value; `None` for NULL or anything the fake did not make.
    pub fn decode(v: u64) -> Option<Handle> {
        if v >> 52 != MAGIC {
            return None;
        }
        let gpu = ((v >> 32) & 0xffff) as u32;
        let gi = ((v >> 16) & 0xffff) as u32;
        let ci = (v & 0xffff) as u32;
        match (v >> 48) & 0xf {
            KIND_GPU => Some(Handle::Gpu(gpu)),
            KIND_MIG => Some(Handle::Mig(gpu, gi, ci)),
            KIND_GI => Some(Handle::Gi(gpu, gi)),
            KIND_CI => Some(Handle::Ci(gpu, gi, ci)),
            _ => None,
        }
    }

    fn ptr<T>(self) -> *mut T {
        self.encode() as usize as *mut T
    }
}

fn handle<T>(p: *mut T) -> R<Handle> {
    Handle::decode(p as usize as u64).ok_or(code::INVALID_ARGUMENT)
}

fn phys(dev: nvmlDevice_t) -> R<u32> {
    match handle(dev)? {
        Handle::Gpu(g) => Ok(g),
        _ => Err(code::INVALID_ARGUMENT),
    }
}

fn gi_handle(gi: nvmlGpuInstance_t) -> R<(u32, u32)> {
    match handle(gi)? {
        Handle::Gi(g, i) => Ok((g, i)),
        _ => Err(code::INVALID_ARGUMENT),
    }
}

fn ci_handle(ci: nvmlComputeInstance_t) -> R<(u32, u32, u32)> {
    match handle(ci)? {
        Handle::Ci(g, i, c) => Ok((g, i, c)),
        _ => Err(code::INVALID_ARGUMENT),
    }
}

// ---- plumbing ----

static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Run an export: no panic escapes, the result becomes an `nvmlReturn_t`.
fn guard(name: &str, f: impl FnOnce() -> R<()>) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => code::SUCCESS,
        Ok(Err(c)) => c,
        Err(_) => {
            eprintln!("fake-nvml: {name} panicked; answering NVML_ERROR_UNKNOWN");
            code::UNKNOWN
        }
    }
}

/// An export that needs nvmlInit: checks it, then runs `f`.
fn api(name: &str, f: impl FnOnce() -> R<()>) -> nvmlReturn_t {
    guard(name, || {
        if INIT_COUNT.load(Ordering::SeqCst) == 0 {
            return Err(code::UNINITIALIZED);
        }
        f()
    })
}

/// Write `v` through an out-pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of `T` (the export's contract).
unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL and valid for writes by the caller's contract; `write` does not
    // read or drop the old (possibly uninitialised) value.
    unsafe { p.write(v) };
    Ok(())
}

/// Copy `s` with its NUL into a C buffer of `len` bytes.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> R<()> {
    if buf.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    if s.len() + 1 > len as usize {
        return Err(code::INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds `len` >= s.len() + 1 bytes by the caller's contract; the
    // source is a live &str that cannot overlap a caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

fn name_field(s: &str) -> [c_char; 96] {
    let mut out = [0 as c_char; 96];
    for (o, b) in out.iter_mut().zip(s.bytes().take(95)) {
        *o = b as c_char;
    }
    out
}

fn gpu_of(st: &State, g: u32) -> R<&Gpu> {
    st.gpu(g)
}

/// nvml.h marks the instance create, destroy and list calls, placements and capacities
/// "Requires privileged user" (NVML_ERROR_NO_PERMISSION otherwise). The driver decides
/// by the caller's privilege; so does the fake (euid 0), unless the state makes every
/// caller unprivileged.
fn require_privilege(st: &State) -> R<()> {
    if st.unprivileged || sys::euid() != 0 {
        Err(code::NO_PERMISSION)
    } else {
        Ok(())
    }
}

/// The read calls (placements, capacities, instance listings) ask for privilege only
/// where MIG is on: on the lent H200 with MIG off (driver 580.159.04) `nobody` got the same
/// answers as root to every one of them (fixtures/h200-r580-mig-off.user.json).
fn require_privilege_if_mig(st: &State, g: u32) -> R<()> {
    if st.gpu(g)?.mig_current {
        require_privilege(st)
    } else {
        Ok(())
    }
}

fn gi_profile_info(p: &GiProfile) -> nvmlGpuInstanceProfileInfo_t {
    nvmlGpuInstanceProfileInfo_t {
        id: p.id,
        isP2pSupported: 0,
        sliceCount: p.slices,
        instanceCount: p.instances,
        multiprocessorCount: p.sms,
        copyEngineCount: p.copy_engines,
        decoderCount: p.decoders,
        encoderCount: 0,
        jpegCount: p.jpegs,
        ofaCount: p.ofas,
        memorySizeMB: p.memory_mib,
    }
}

/// A compute instance profile inside a GPU instance: (info, name).
fn ci_profile_info(
    st: &State,
    g: u32,
    gi: u32,
    index: u32,
    eng: u32,
) -> R<(nvmlComputeInstanceProfileInfo_t, String)> {
    if eng != nvml_wrapper_sys::bindings::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
        return Err(code::INVALID_ARGUMENT);
    }
    let driver = st.driver;
    let gpu = st.gpu(g)?;
    let inst = gpu.gi(gi)?;
    let gp = gpu.gi_profile(inst, driver)?;
    let slices = ci_profile_slices(index, driver)?;
    if !tables::ci_offered(gpu.model()?.family, driver, gp.slices, index) {
        return Err(code::NOT_SUPPORTED);
    }
    let id = index;
    let name = if slices == gp.slices {
        format!("MIG {}", gp.name)
    } else {
        format!("MIG {slices}c.{}", gp.name)
    };
    let info = nvmlComputeInstanceProfileInfo_t {
        id,
        sliceCount: slices,
        instanceCount: gp.slices / slices,
        multiprocessorCount: gp.sms * slices / gp.slices,
        sharedCopyEngineCount: gp.copy_engines,
        sharedDecoderCount: gp.decoders,
        sharedEncoderCount: 0,
        sharedJpegCount: gp.jpegs,
        sharedOfaCount: gp.ofas,
    };
    Ok((info, name))
}

/// (gpu, gi) of a MIG device handle that still exists, with its profile.
fn mig_device(st: &State, g: u32, gi: u32, ci: u32) -> R<(&Gpu, &'static GiProfile, String)> {
    let gpu = gpu_of(st, g)?;
    let inst = gpu.gi(gi)?;
    let c = inst
        .cis
        .iter()
        .find(|c| c.id == ci)
        .ok_or(code::NOT_FOUND)?;
    Ok((gpu, gpu.gi_profile(inst, st.driver)?, c.uuid.clone()))
}

// ---- init, shutdown, strings ----

fn init(name: &str) -> nvmlReturn_t {
    guard(name, || {
        nvml_call(name, |_| Ok(()))?;
        INIT_COUNT.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init("nvmlInit_v2")
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    init("nvmlInit")
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init("nvmlInitWithFlags")
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard("nvmlShutdown", || {
        INIT_COUNT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| code::UNINITIALIZED)
    })
}

/// nvml.h's strings for the codes.
pub fn error_string(c: nvmlReturn_t) -> &'static CStr {
    match c {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        19 => c"In use by another client",
        23 => c"Insufficient resources",
        25 => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    error_string(result).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: `version` holds `length` bytes (nvml.h contract).
    api("nvmlSystemGetDriverVersion", || {
        let v = nvml_call("nvmlSystemGetDriverVersion", |st| {
            Ok(format!(
                "{}{FAKE_SUFFIX}",
                tables::driver_version(st.driver)
            ))
        })?;
        // SAFETY: as above.
        unsafe { put_str(version, length, &v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: `version` holds `length` bytes (nvml.h contract).
    api("nvmlSystemGetNVMLVersion", || {
        // NVML's version is the CUDA major with the driver version: 12.535…, 13.580….
        let v = nvml_call("nvmlSystemGetNVMLVersion", |st| {
            let cuda = if st.driver >= 580 { 13 } else { 12 };
            Ok(format!(
                "{cuda}.{}{FAKE_SUFFIX}",
                tables::driver_version(st.driver)
            ))
        })?;
        // SAFETY: as above.
        unsafe { put_str(version, length, &v) }
    })
}

// ---- devices ----

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

// ---- GPU instance profiles and placements ----

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

// ---- compute instances ----

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

// ---- MIG devices ----

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

// ---- processes, utilization, energy ----

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

#[cfg(test)]
mod tests {
    //! The C surface called in-process, as nvml-wrapper would call the cdylib.
    use std::ptr::null_mut;
    use std::sync::{Mutex, MutexGuard};

    use super::*;

    static ENV: Mutex<()> = Mutex::new(());

    /// Own state file and initialised library for one test.
    struct Session {
        _env: MutexGuard<'static, ()>,
        _dir: tempfile::TempDir,
    }

    impl Session {
        fn new(gpus: &str) -> Session {
            let env = ENV.lock().unwrap_or_else(|e| e.into_inner());
            let dir = tempfile::tempdir().unwrap();
            std::env::set_var(store::STATE_ENV, dir.path().join("s.json"));
            std::env::set_var(store::GPUS_ENV, gpus);
            assert_eq!(nvmlInit_v2(), code::SUCCESS);
            Session {
                _env: env,
                _dir: dir,
            }
        }
    }

    impl Drop for Session {
        fn drop(&mut self) {
            nvmlShutdown();
        }
    }

    fn device(i: u32) -> nvmlDevice_t {
        let mut d: nvmlDevice_t = null_mut();
        // SAFETY: valid out-pointer.
        let ret = unsafe { nvmlDeviceGetHandleByIndex_v2(i, &mut d) };
        assert_eq!(ret, code::SUCCESS);
        d
    }

    #[test]
    fn handles_round_trip_and_garbage_is_refused() {
        for h in [
            Handle::Gpu(3),
            Handle::Mig(1, 2, 3),
            Handle::Gi(0, 14),
            Handle::Ci(7, 1, 0),
        ] {
            assert_eq!(Handle::decode(h.encode()), Some(h));
        }
        assert_eq!(Handle::decode(0), None);
        assert_eq!(Handle::decode(0x1234_5678), None);
    }

    #[test]
    fn calls_before_init_and_null_pointers_are_refused() {
        let _s = Session::new("A100-40GB");
        assert_eq!(nvmlShutdown(), code::SUCCESS);
        let mut n = 0;
        // SAFETY: valid out-pointer.
        let ret = unsafe { nvmlDeviceGetCount_v2(&mut n) };
        assert_eq!(ret, code::UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), code::SUCCESS);
        // SAFETY: NULL is allowed by the contract and must be refused.
        let ret = unsafe { nvmlDeviceGetCount_v2(null_mut()) };
        assert_eq!(ret, code::INVALID_ARGUMENT);
        let bogus = 0xdead_beef_usize as nvmlDevice_t;
        let mut c = 0;
        let mut p = 0;
        // SAFETY: valid out-pointers; the bogus handle is never dereferenced.
        let ret = unsafe { nvmlDeviceGetMigMode(bogus, &mut c, &mut p) };
        assert_eq!(ret, code::INVALID_ARGUMENT);
        let mut d: nvmlDevice_t = null_mut();
        // SAFETY: valid out-pointer.
        let ret = unsafe { nvmlDeviceGetHandleByIndex_v2(1, &mut d) };
        assert_eq!(ret, code::INVALID_ARGUMENT, "only one GPU");
        let mut name = [0 as c_char; 8];
        // SAFETY: buffer of 8 bytes, too short for the name.
        let ret = unsafe { nvmlDeviceGetName(device(0), name.as_mut_ptr(), 8) };
        assert_eq!(ret, code::INSUFFICIENT_SIZE);
        // SAFETY: static string from the fake.
        let s = unsafe { CStr::from_ptr(nvmlErrorString(code::IN_USE)) };
        assert_eq!(s.to_str().unwrap(), "In use by another client");
    }

    #[test]
    fn versioned_profile_info_honours_the_version_field() {
        let _s = Session::new("H200");
        let d = device(0);
        // SAFETY: an all-integer struct; zero is valid.
        let mut v2: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
        v2.version = 7;
        // SAFETY: valid device handle and struct.
        let ret = unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(d, 9, &mut v2) };
        assert_eq!(ret, code::ARGUMENT_VERSION_MISMATCH);
        v2.version = GI_PROFILE_INFO_V2;
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(d, 9, &mut v2) };
        assert_eq!(ret, 0);
        // SAFETY: NUL-terminated by the fake.
        let name = unsafe { CStr::from_ptr(v2.name.as_ptr()) };
        assert_eq!(name.to_str().unwrap(), "MIG 1g.35gb");
        assert_eq!((v2.id, v2.sliceCount, v2.instanceCount), (15, 1, 4));
        // SAFETY: an all-integer struct; zero is valid.
        let mut v3: nvmlGpuInstanceProfileInfo_v3_t = unsafe { std::mem::zeroed() };
        v3.version = GI_PROFILE_INFO_V3;
        let p = (&mut v3 as *mut nvmlGpuInstanceProfileInfo_v3_t).cast();
        // SAFETY: a v3 struct behind the pointer, as its version says.
        assert_eq!(unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(d, 4, p) }, 0);
        assert_eq!(
            (v3.id, v3.memorySizeMB, v3.multiprocessorCount),
            (0, 143360, 132)
        );
        // Unsupported and out-of-range indexes, as the H200 answered.
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(d, 5, &mut v2) };
        assert_eq!(ret, code::NOT_SUPPORTED);
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetGpuInstanceProfileInfoV(d, 40, &mut v2) };
        assert_eq!(ret, code::INVALID_ARGUMENT);
    }

    #[test]
    fn placements_and_process_lists_follow_the_count_protocol() {
        let _s = Session::new("A100-40GB");
        let d = device(0);
        let mut n = 0;
        // SAFETY: NULL buffer asks for the count.
        let ret =
            unsafe { nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, null_mut(), &mut n) };
        assert_eq!((ret, n), (code::SUCCESS, 3));
        let mut buf = [nvmlGpuInstancePlacement_t { start: 9, size: 9 }; 3];
        let mut short = 2;
        // SAFETY: buffer of 3, count says 2: refused without writing past 2.
        let ret = unsafe {
            nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, buf.as_mut_ptr(), &mut short)
        };
        assert_eq!((ret, short), (code::INSUFFICIENT_SIZE, 3));
        // SAFETY: buffer of 3 entries.
        let ret = unsafe {
            nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, buf.as_mut_ptr(), &mut n)
        };
        assert_eq!(ret, code::SUCCESS);
        let starts: Vec<(u32, u32)> = buf.iter().map(|p| (p.start, p.size)).collect();
        assert_eq!(starts, [(0, 2), (2, 2), (4, 2)]);

        // No processes: count query succeeds with 0; then one attached.
        let mut count = 0;
        // SAFETY: NULL infos with count 0 asks for the count.
        let ret = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, null_mut()) };
        assert_eq!((ret, count), (code::SUCCESS, 0));
        let mut gi: nvmlGpuInstance_t = null_mut();
        let pl = nvmlGpuInstancePlacement_t { start: 0, size: 1 };
        // SAFETY: valid handle, placement and out-pointer.
        let ret = unsafe { nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, &pl, &mut gi) };
        assert_eq!(ret, code::SUCCESS);
        let mut ci: nvmlComputeInstance_t = null_mut();
        // SAFETY: valid GI handle and out-pointer.
        let ret = unsafe { nvmlGpuInstanceCreateComputeInstance(gi, 0, &mut ci) };
        assert_eq!(ret, 0);
        let (_, gi_id) = gi_handle(gi).unwrap();
        nvml_call("test", |st| {
            st.attach(0, Some(gi_id), 77, 64, 0)
                .map_err(|_| code::UNKNOWN)
        })
        .unwrap();
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, null_mut()) };
        assert_eq!((ret, count), (code::INSUFFICIENT_SIZE, 1));
        // SAFETY: an all-integer struct; zero is valid.
        let mut infos: [nvmlProcessInfo_t; 2] = unsafe { std::mem::zeroed() };
        count = 2;
        // SAFETY: buffer of 2 entries.
        let ret =
            unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, infos.as_mut_ptr()) };
        assert_eq!((ret, count), (code::SUCCESS, 1));
        assert_eq!(
            (
                infos[0].pid,
                infos[0].gpuInstanceId,
                infos[0].computeInstanceId
            ),
            (77, gi_id, 0)
        );
        assert_eq!(infos[0].usedGpuMemory, 64 * MIB);
        // The MIG device of that instance, and its parent.
        let mut mig: nvmlDevice_t = null_mut();
        // SAFETY: valid handle and out-pointer.
        let ret = unsafe { nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &mut mig) };
        assert_eq!(ret, 0);
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetMigDeviceHandleByIndex(d, 1, &mut mig) };
        assert_eq!(ret, code::NOT_FOUND, "only one MIG device");
        let mut parent: nvmlDevice_t = null_mut();
        // SAFETY: as above.
        let ret = unsafe { nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &mut parent) };
        assert_eq!(ret, 0);
        assert_eq!(parent, d);
        // Utilization: none in MIG mode.
        // SAFETY: an all-integer struct; zero is valid.
        let mut u: nvmlUtilization_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid handle and out-pointer.
        let ret = unsafe { nvmlDeviceGetUtilizationRates(d, &mut u) };
        assert_eq!(ret, code::NOT_SUPPORTED);
    }

    #[test]
    fn concurrent_callers_see_one_consistent_state() {
        let _s = Session::new("A100-40GB");
        // Eight threads race for seven 1g slots; each call locks the file on its own
        // descriptor, as separate processes would.
        let results: Vec<R<u32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| nvml_call("race", |st| st.create_gi(0, 19, None))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ids: Vec<u32> = results.iter().filter_map(|r| r.ok()).collect();
        ids.sort_unstable();
        // Ids follow the placements (1g at slot s is 7+s), whoever made which.
        assert_eq!(ids, [7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(
            results
                .iter()
                .filter(|r| **r == Err(code::INSUFFICIENT_RESOURCES))
                .count(),
            1
        );
        let gis = nvml_call("check", |st| Ok(st.gpus[0].gis.len())).unwrap();
        assert_eq!(gis, 7);
    }

    #[test]
    fn injected_fault_answers_once_then_the_call_works_again() {
        let _s = Session::new("A100-40GB");
        nvml_call("setup", |st| {
            st.faults.insert(
                "nvmlDeviceGetCount_v2".into(),
                crate::state::Fault {
                    call: 2,
                    code: "NVML_ERROR_GPU_IS_LOST".into(),
                    seen: 0,
                    times: 1,
                },
            );
            Ok(())
        })
        .unwrap();
        let mut n = 0;
        // SAFETY: valid out-pointer, three times.
        let rets: Vec<u32> = (0..3)
            .map(|_| unsafe { nvmlDeviceGetCount_v2(&mut n) })
            .collect();
        assert_eq!(rets, [code::SUCCESS, 15, code::SUCCESS]);
    }

    fn change(f: impl FnOnce(&mut State)) {
        nvml_call("test", |st| {
            f(st);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn unprivileged_callers_get_no_permission_where_nvml_h_says_so() {
        let _s = Session::new("H200");
        change(|st| st.unprivileged = true);
        let d = device(0);
        let mut n = 0;
        // SAFETY: valid handle and out-pointers throughout.
        unsafe {
            let mut gis: [nvmlGpuInstance_t; 8] = [null_mut(); 8];
            assert_eq!(
                nvmlDeviceGetGpuInstances(d, 9, gis.as_mut_ptr(), &mut n),
                code::NO_PERMISSION
            );
            let mut gi: nvmlGpuInstance_t = null_mut();
            let pl = nvmlGpuInstancePlacement_t { start: 0, size: 4 };
            assert_eq!(
                nvmlDeviceCreateGpuInstanceWithPlacement(d, 9, &pl, &mut gi),
                code::NO_PERMISSION
            );
            let mut status = 0;
            assert_eq!(nvmlDeviceSetMigMode(d, 0, &mut status), code::NO_PERMISSION);
            // Profile info and MIG mode need no privilege.
            let mut c = 9;
            let mut p = 9;
            assert_eq!(nvmlDeviceGetMigMode(d, &mut c, &mut p), code::SUCCESS);
            // SAFETY: an all-integer struct; zero is valid.
            let mut info: nvmlGpuInstanceProfileInfo_t = std::mem::zeroed();
            assert_eq!(
                nvmlDeviceGetGpuInstanceProfileInfo(d, 0, &mut info),
                code::SUCCESS
            );
        }
    }

    #[test]
    fn an_a100_with_mig_off_answers_profile_queries_not_supported() {
        let _s = Session::new("A100-40GB,H200");
        change(|st| {
            for g in &mut st.gpus {
                g.mig_current = false;
                g.mig_pending = false;
            }
        });
        // SAFETY: an all-integer struct; zero is valid.
        let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        let mut n = 0;
        // SAFETY: valid handles and out-pointers.
        unsafe {
            assert_eq!(
                nvmlDeviceGetGpuInstanceProfileInfo(device(0), 0, &mut info),
                code::NOT_SUPPORTED
            );
            assert_eq!(
                nvmlDeviceGetGpuInstancePossiblePlacements_v2(device(0), 19, null_mut(), &mut n),
                code::NOT_SUPPORTED
            );
            // Hopper answers (what the H200 did with MIG off).
            assert_eq!(
                nvmlDeviceGetGpuInstanceProfileInfo(device(1), 0, &mut info),
                code::SUCCESS
            );
            assert_eq!(info.id, 19);
            assert_eq!(
                nvmlDeviceGetGpuInstanceRemainingCapacity(device(1), 19, &mut n),
                code::SUCCESS
            );
            assert_eq!(n, 7);
        }
    }

    #[test]
    fn mig_uuids_are_stable_and_the_old_form_is_accepted() {
        let _s = Session::new("A100-40GB");
        change(|st| {
            let gi = st.create_gi(0, 9, Some((4, 4))).unwrap();
            st.create_ci(0, gi, 2).unwrap();
        });
        let (gpu_uuid, uuid) = nvml_call("read", |st| {
            Ok((
                st.gpus[0].uuid.clone(),
                st.gpus[0].gis[0].cis[0].uuid.clone(),
            ))
        })
        .unwrap();
        for name in [uuid.clone(), format!("MIG-{gpu_uuid}/2/0")] {
            let c = std::ffi::CString::new(name.clone()).unwrap();
            let mut h: nvmlDevice_t = null_mut();
            // SAFETY: NUL-terminated string and valid out-pointer.
            let ret = unsafe { nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut h) };
            assert_eq!(ret, code::SUCCESS, "{name}");
            assert_eq!(handle(h), Ok(Handle::Mig(0, 2, 0)), "{name}");
        }
        assert_eq!(uuid, crate::state::mig_uuid(&gpu_uuid, 2, 0));
    }

    #[test]
    fn a_new_mig_device_is_listed_after_the_delay() {
        let _s = Session::new("H200");
        change(|st| {
            st.quirks.mig_device_delay_ms = 300;
            let gi = st.create_gi(0, 19, Some((0, 1))).unwrap();
            st.create_ci_at(0, gi, 0, store::now_ms()).unwrap();
        });
        let mut mig: nvmlDevice_t = null_mut();
        // SAFETY: valid handle and out-pointer.
        let first = unsafe { nvmlDeviceGetMigDeviceHandleByIndex(device(0), 0, &mut mig) };
        assert_eq!(first, code::NOT_FOUND);
        std::thread::sleep(std::time::Duration::from_millis(350));
        // SAFETY: as above.
        let later = unsafe { nvmlDeviceGetMigDeviceHandleByIndex(device(0), 0, &mut mig) };
        assert_eq!(later, code::SUCCESS);
    }
}
