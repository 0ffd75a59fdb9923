//! The exported NVML C API. Each function checks its handles and pointers, runs one
//! state operation under the file lock ([`crate::store::nvml_call`]) and writes the answer
//! through the caller's pointers, with the struct layouts of `nvml-wrapper-sys`
//! (generated from the real nvml.h). A panic never crosses the C boundary: every
//! export runs inside [`guard`] and answers NVML_ERROR_UNKNOWN instead.
//!
//! This file holds what the exports share (struct versions, handles, the guard, the
//! out-pointer writers); the exports are in one module per NVML area, re-exported here:
//! `system` (init, strings, versions), `device`, `gpu_instance`, `compute_instance`,
//! `mig_device`, `processes` (processes, utilization, energy), `gpm` (SM activity and
//! occupancy on Hopper and later).
//!
//! # Safety
//! The contract of every export is nvml.h's: each pointer argument is NULL (answered
//! with NVML_ERROR_INVALID_ARGUMENT where nvml.h requires it) or valid for the reads and
//! writes nvml.h documents for it; string buffers hold the given length.
// The exports carry nvml.h's names and contract; nvml.h is their documentation.
#![allow(non_snake_case, missing_docs, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceProfileInfo_t, nvmlComputeInstanceProfileInfo_v2_t,
    nvmlComputeInstanceProfileInfo_v3_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstanceProfileInfo_t, nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstanceProfileInfo_v3_t,
    nvmlGpuInstance_t, nvmlMemory_v2_t, nvmlReturn_t,
};

use crate::state::{ci_profile_slices, code, Gpu, State, R};
use crate::sys;
use crate::tables::{self, GiProfile};

mod compute_instance;
mod device;
mod gpm;
mod gpu_instance;
mod mig_device;
mod processes;
mod system;

pub use compute_instance::*;
pub use device::*;
pub use gpm::*;
pub use gpu_instance::*;
pub use mig_device::*;
pub use processes::*;
pub use system::*;

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

#[cfg(test)]
mod tests;
