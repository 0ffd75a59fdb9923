//! GPU control over libnvidia-ml, through nvml-wrapper.
//!
//! [`NvmlGpus`] loads the library named by `nvml_library` in the node config: the real
//! driver's `libnvidia-ml.so.1`, or `libfake_nvml.so` from `tests/fake-nvml` in tests.
//! The same code runs against both. Reads go through nvml-wrapper's safe API where it has
//! one; GPU/compute instance profiles, placements, creation and destruction and MIG device
//! lookup go through its raw `nvml-wrapper-sys` symbols, each checked for presence first
//! (the generated methods panic on a missing symbol).
//!
//! GPM (Hopper and later: the share of SMs busy and of warps active) is read through raw
//! symbols too, by a [`GpmSampler`] per physical GPU that owns its sample buffers.
//!
//! The NVML layer's `unsafe` lives in this module only; each block says why it is sound.
//! That is also why it is one file past 800 lines: every raw call of the library stays
//! in one place to review, beside the safe face built on it.

use std::collections::HashMap;
use std::ffi::{c_uint, CStr, OsStr};
use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t,
    nvmlDevice_t, nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY,
    nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL, nvmlGpmMetricsGet_t, nvmlGpmSample_t,
    nvmlGpmSupport_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t, nvmlReturn_t,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_GPM_METRICS_GET_VERSION,
    NVML_GPM_SUPPORT_VERSION,
};

use crate::gpu::nvml_code::{
    self, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, NO_PERMISSION, SUCCESS,
};
use crate::gpu::{
    GpuControl, GpuError, GpuInfo, GpuProcess, GpuResult, Instance, MigMode, MigModeChange,
};
use crate::mig::{self, Catalog, Placement, Profile};

/// GPU instance profile indexes colloc asks the driver about (`NVML_GPU_INSTANCE_PROFILE_*`):
/// every index below this. The driver says which exist: NOT_SUPPORTED for a profile the
/// GPU lacks, INVALID_ARGUMENT past its `NVML_GPU_INSTANCE_PROFILE_COUNT` (10 in R535, 17
/// in R580's nvml.h, which added the all-media profiles 15 and 16 — the H200 on 580.159
/// answers NOT_SUPPORTED for those, other cards list them). A fixed list would miss the
/// profiles of a newer driver, and with them instances colloc does not own.
pub const GI_PROFILE_INDEX_LIMIT: u32 = 32;

/// Compute instance profile indexes colloc asks about, likewise (8 in R535, 9 in R580).
pub const CI_PROFILE_INDEX_LIMIT: u32 = 16;

/// How long to look for a new compute instance's MIG device before giving up, unless
/// [`GpuControl::set_listing_wait`] says otherwise (`[mig] listing_wait_s`): drivers list
/// it a moment after the compute instance is made, slow ones seconds later.
pub const MIG_DEVICE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

const MIB: u64 = 1024 * 1024;

/// `NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`: size | version << 24.
const GI_PROFILE_INFO_V2: u32 =
    std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);

/// Fetch a raw NVML symbol or return [`GpuError::MissingSymbol`].
macro_rules! sym {
    ($self:expr, $name:ident) => {
        match $self.nvml.lib().$name.as_ref() {
            Ok(f) => *f,
            Err(_) => {
                return Err(GpuError::MissingSymbol {
                    symbol: stringify!($name),
                })
            }
        }
    };
}

/// The node's GPUs through libnvidia-ml (real or fake).
pub struct NvmlGpus {
    nvml: Nvml,
    library: String,
    /// Catalogs already read, by GPU index: profiles do not change while NVML is loaded.
    catalogs: Mutex<HashMap<u32, Catalog>>,
    /// How long a create waits for its MIG device to be listed, milliseconds.
    listing_wait_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for NvmlGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpus")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// One MIG device: a compute instance seen as a device.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MigDevice {
    gi_id: u32,
    ci_id: u32,
    uuid: String,
}

/// The NVML code of a wrapper error (NVML_ERROR_UNKNOWN for wrapper-only errors).
fn wrapper_code(e: &NvmlError) -> u32 {
    use nvml_code::*;
    match e {
        NvmlError::Uninitialized => UNINITIALIZED,
        NvmlError::InvalidArg => INVALID_ARGUMENT,
        NvmlError::NotSupported => NOT_SUPPORTED,
        NvmlError::NoPermission => NO_PERMISSION,
        NvmlError::NotFound => NOT_FOUND,
        NvmlError::InsufficientSize(_) => INSUFFICIENT_SIZE,
        NvmlError::InsufficientPower => INSUFFICIENT_POWER,
        NvmlError::DriverNotLoaded => DRIVER_NOT_LOADED,
        NvmlError::Timeout => TIMEOUT,
        NvmlError::IrqIssue => IRQ_ISSUE,
        NvmlError::LibraryNotFound => LIBRARY_NOT_FOUND,
        NvmlError::FunctionNotFound => FUNCTION_NOT_FOUND,
        NvmlError::CorruptedInfoROM => CORRUPTED_INFOROM,
        NvmlError::GpuLost => GPU_IS_LOST,
        NvmlError::ResetRequired => RESET_REQUIRED,
        NvmlError::OperatingSystem => OPERATING_SYSTEM,
        NvmlError::LibRmVersionMismatch => LIB_RM_VERSION_MISMATCH,
        NvmlError::InUse => IN_USE,
        NvmlError::InsufficientMemory => MEMORY,
        NvmlError::NoData => NO_DATA,
        NvmlError::VgpuEccNotSupported => VGPU_ECC_NOT_SUPPORTED,
        NvmlError::UnexpectedVariant(c) => *c,
        _ => UNKNOWN,
    }
}

/// Map an nvml-wrapper error of the C call `call` on GPU `gpu`.
fn wrap(call: &'static str, gpu: impl Display, e: NvmlError) -> GpuError {
    if let NvmlError::FailedToLoadSymbol(_) = e {
        return GpuError::MissingSymbol { symbol: call };
    }
    GpuError::Call {
        call,
        gpu: gpu.to_string(),
        message: e.to_string(),
        code: wrapper_code(&e),
    }
}

/// The raw handle of a device, for raw calls.
fn raw(dev: &Device<'_>) -> nvmlDevice_t {
    // SAFETY: the handle is only passed to NVML calls made while `dev` (and so the
    // `Nvml` it borrows) is alive; nothing here keeps it longer.
    unsafe { dev.handle() }
}

/// Profile name as NVML writes it in `name`, without the `MIG ` prefix.
fn profile_name(raw_name: &[std::ffi::c_char]) -> Option<String> {
    let bytes: Vec<u8> = raw_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let s = String::from_utf8_lossy(&bytes);
    let s = s.trim();
    let s = match s.strip_prefix("MIG") {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => rest.trim(),
        _ => s,
    };
    (!s.is_empty()).then(|| s.to_string())
}

impl NvmlGpus {
    /// Load and initialise NVML from `library` (a soname such as `libnvidia-ml.so.1` or a
    /// path).
    ///
    /// # Errors
    /// [`GpuError::Load`] when the library cannot be loaded or `nvmlInit_v2` fails.
    pub fn open(library: &str) -> GpuResult<NvmlGpus> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(library))
            .init()
            .map_err(|e| GpuError::Load {
                library: library.to_string(),
                reason: e.to_string(),
            })?;
        log::debug!("NVML loaded from {library}");
        Ok(NvmlGpus {
            nvml,
            library: library.to_string(),
            catalogs: Mutex::new(HashMap::new()),
            listing_wait_ms: std::sync::atomic::AtomicU64::new(MIG_DEVICE_WAIT.as_millis() as u64),
        })
    }

    /// The loaded library, for reads colloc does not wrap (memory, utilization, energy).
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    /// The library name or path it was loaded from.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The driver version, e.g. `580.159.04`.
    ///
    /// # Errors
    /// NVML failures.
    #[doc(alias = "nvmlSystemGetDriverVersion")]
    pub fn driver_version(&self) -> GpuResult<String> {
        self.nvml
            .sys_driver_version()
            .map_err(|e| wrap("nvmlSystemGetDriverVersion", "-", e))
    }

    fn device(&self, gpu: u32) -> GpuResult<Device<'_>> {
        self.nvml.device_by_index(gpu).map_err(|e| match e {
            NvmlError::InvalidArg | NvmlError::NotFound => GpuError::NoSuchGpu(gpu),
            e => wrap("nvmlDeviceGetHandleByIndex_v2", gpu, e),
        })
    }

    fn error_string(&self, ret: nvmlReturn_t) -> String {
        let Ok(f) = self.nvml.lib().nvmlErrorString.as_ref() else {
            return format!("NVML error {ret}");
        };
        // SAFETY: nvmlErrorString takes any code and returns NULL or a pointer to a
        // static NUL-terminated string.
        let p = unsafe { f(ret) };
        if p.is_null() {
            return format!("NVML error {ret}");
        }
        // SAFETY: non-NULL, NUL-terminated and static per nvml.h.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, call: &'static str, gpu: u32, ret: nvmlReturn_t) -> GpuResult<()> {
        if ret == SUCCESS {
            Ok(())
        } else {
            Err(GpuError::Call {
                call,
                gpu: gpu.to_string(),
                message: self.error_string(ret),
                code: ret,
            })
        }
    }

    fn mig_mode_of(&self, gpu: u32, dev: &Device<'_>) -> GpuResult<Option<MigMode>> {
        match dev.mig_mode() {
            Ok(m) => Ok(Some(MigMode {
                current: m.current == 1,
                pending: m.pending == 1,
            })),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(wrap("nvmlDeviceGetMigMode", gpu, e)),
        }
    }

    /// MIG mode on (in effect) or [`GpuError::NotMig`].
    fn require_mig(&self, gpu: u32, dev: &Device<'_>) -> GpuResult<()> {
        match self.mig_mode_of(gpu, dev)? {
            Some(MigMode { current: true, .. }) => Ok(()),
            _ => Err(GpuError::NotMig(gpu)),
        }
    }

    /// Profile info (v2, with its name) for one NVML profile index; `None` where the
    /// driver says the GPU has no such profile.
    fn gi_profile_info(
        &self,
        gpu: u32,
        dev: &Device<'_>,
        index: u32,
    ) -> GpuResult<Option<(nvmlGpuInstanceProfileInfo_v2_t, bool)>> {
        if let Ok(f) = self
            .nvml
            .lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .as_ref()
        {
            // SAFETY: an all-integer C struct, for which all zero bytes are valid.
            let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            info.version = GI_PROFILE_INFO_V2;
            // SAFETY: valid device handle; `info` is a v2 struct as its version says.
            let ret = unsafe { f(raw(dev), index, &mut info) };
            return match ret {
                NOT_SUPPORTED | INVALID_ARGUMENT => Ok(None),
                _ => self
                    .check("nvmlDeviceGetGpuInstanceProfileInfoV", gpu, ret)
                    .map(|()| Some((info, true))),
            };
        }
        // Older drivers: the v1 call, which has no name.
        let f = sym!(self, nvmlDeviceGetGpuInstanceProfileInfo);
        // SAFETY: an all-integer C struct, for which all zero bytes are valid.
        let mut v1: nvml_wrapper_sys::bindings::nvmlGpuInstanceProfileInfo_t =
            unsafe { std::mem::zeroed() };
        // SAFETY: valid device handle and out-pointer.
        let ret = unsafe { f(raw(dev), index, &mut v1) };
        match ret {
            NOT_SUPPORTED | INVALID_ARGUMENT => Ok(None),
            _ => {
                self.check("nvmlDeviceGetGpuInstanceProfileInfo", gpu, ret)?;
                // SAFETY: as above.
                let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
                info.id = v1.id;
                info.sliceCount = v1.sliceCount;
                info.instanceCount = v1.instanceCount;
                info.multiprocessorCount = v1.multiprocessorCount;
                info.memorySizeMB = v1.memorySizeMB;
                Ok(Some((info, false)))
            }
        }
    }

    /// Possible placements of a profile; `None` where the driver does not answer.
    fn possible_placements(
        &self,
        gpu: u32,
        dev: &Device<'_>,
        profile_id: u32,
    ) -> GpuResult<Option<Vec<Placement>>> {
        let f = sym!(self, nvmlDeviceGetGpuInstancePossiblePlacements_v2);
        let mut count: c_uint = 0;
        // SAFETY: valid handle; a NULL buffer asks for the count only (nvml.h).
        let ret = unsafe { f(raw(dev), profile_id, std::ptr::null_mut(), &mut count) };
        match ret {
            // NO_PERMISSION: nvml.h reserves placements to privileged callers; a user's
            // `colloc plan --gpu` takes the standard ones.
            NOT_SUPPORTED | NO_PERMISSION => return Ok(None),
            SUCCESS | INSUFFICIENT_SIZE => {}
            _ => self.check("nvmlDeviceGetGpuInstancePossiblePlacements_v2", gpu, ret)?,
        }
        let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
        if !buf.is_empty() {
            // SAFETY: `buf` holds `count` entries, the number the driver just gave.
            let ret = unsafe { f(raw(dev), profile_id, buf.as_mut_ptr(), &mut count) };
            self.check("nvmlDeviceGetGpuInstancePossiblePlacements_v2", gpu, ret)?;
            buf.truncate(count as usize);
        }
        Ok(Some(
            buf.into_iter()
                .map(|p| Placement {
                    start: p.start,
                    size: p.size,
                })
                .collect(),
        ))
    }

    fn read_catalog(&self, gpu: u32) -> GpuResult<Catalog> {
        let dev = self.device(gpu)?;
        let model = dev.name().map_err(|e| wrap("nvmlDeviceGetName", gpu, e))?;
        let memory = dev
            .memory_info()
            .map_err(|e| wrap("nvmlDeviceGetMemoryInfo_v2", gpu, e))?;
        let builtin = mig::builtin_catalog(&model).ok();
        let mut profiles = Vec::new();
        for index in 0..GI_PROFILE_INDEX_LIMIT {
            let Some((info, named)) = self.gi_profile_info(gpu, &dev, index)? else {
                continue;
            };
            let name = named
                .then(|| profile_name(&info.name))
                .flatten()
                .or_else(|| {
                    let b = builtin.as_ref()?.by_id(info.id)?;
                    Some(b.name.clone())
                })
                .unwrap_or_else(|| {
                    format!(
                        "{}g.{}gb",
                        info.sliceCount,
                        info.memorySizeMB.div_ceil(1024)
                    )
                });
            let placements = match self.possible_placements(gpu, &dev, info.id)? {
                Some(p) => p,
                None => {
                    log::debug!(
                        "GPU {gpu}: no placements from NVML for profile {name}; using the built-in table"
                    );
                    mig::standard_placements(mig::placement_slots(&model), index)
                }
            };
            profiles.push(Profile {
                id: info.id,
                nvml_index: index,
                name,
                slices: info.sliceCount,
                max_instances: info.instanceCount,
                memory_mib: info.memorySizeMB,
                sms: info.multiprocessorCount,
                placements,
            });
        }
        Ok(Catalog {
            model,
            memory_total_mib: memory.total / MIB,
            profiles,
        })
    }

    /// The GPU instance handles of one profile.
    fn gpu_instances(
        &self,
        gpu: u32,
        dev: &Device<'_>,
        profile: &Profile,
    ) -> GpuResult<Vec<nvmlGpuInstance_t>> {
        let f = sym!(self, nvmlDeviceGetGpuInstances);
        // nvml.h: the buffer must hold the profile's instance count.
        let mut buf: Vec<nvmlGpuInstance_t> =
            vec![std::ptr::null_mut(); profile.max_instances.max(1) as usize];
        // nvml.h: count is output only; set it to the capacity for drivers that read it.
        let mut count = buf.len() as c_uint;
        // SAFETY: valid handle; `buf` holds the profile's instanceCount entries.
        let ret = unsafe { f(raw(dev), profile.id, buf.as_mut_ptr(), &mut count) };
        self.check("nvmlDeviceGetGpuInstances", gpu, ret)?;
        buf.truncate((count as usize).min(buf.len()));
        Ok(buf)
    }

    fn gi_info(&self, gpu: u32, gi: nvmlGpuInstance_t) -> GpuResult<nvmlGpuInstanceInfo_t> {
        let f = sym!(self, nvmlGpuInstanceGetInfo);
        // SAFETY: a C struct of integers and opaque handles; all zero bytes (NULL
        // handles) are valid.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` came from NVML for this GPU; valid out-pointer.
        let ret = unsafe { f(gi, &mut info) };
        self.check("nvmlGpuInstanceGetInfo", gpu, ret)?;
        Ok(info)
    }

    /// The compute instance profiles a GPU instance offers, by CI profile index.
    fn ci_profiles(
        &self,
        gpu: u32,
        gi: nvmlGpuInstance_t,
    ) -> GpuResult<Vec<nvmlComputeInstanceProfileInfo_t>> {
        let f = sym!(self, nvmlGpuInstanceGetComputeInstanceProfileInfo);
        let mut out = Vec::new();
        for index in 0..CI_PROFILE_INDEX_LIMIT {
            // SAFETY: an all-integer C struct, for which all zero bytes are valid.
            let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `gi` came from NVML; valid out-pointer.
            let ret = unsafe {
                f(
                    gi,
                    index,
                    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    &mut info,
                )
            };
            match ret {
                NOT_SUPPORTED | INVALID_ARGUMENT => continue,
                _ => self.check("nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu, ret)?,
            }
            out.push(info);
        }
        Ok(out)
    }

    /// All compute instances of a GPU instance: (handle, id).
    fn compute_instances(
        &self,
        gpu: u32,
        gi: nvmlGpuInstance_t,
    ) -> GpuResult<Vec<(nvmlComputeInstance_t, u32)>> {
        let list = sym!(self, nvmlGpuInstanceGetComputeInstances);
        let info_f = sym!(self, nvmlComputeInstanceGetInfo_v2);
        let mut out = Vec::new();
        for prof in self.ci_profiles(gpu, gi)? {
            let mut buf: Vec<nvmlComputeInstance_t> =
                vec![std::ptr::null_mut(); prof.instanceCount.max(1) as usize];
            let mut count = buf.len() as c_uint;
            // SAFETY: `gi` came from NVML; `buf` holds the CI profile's instanceCount
            // entries as nvml.h requires.
            let ret = unsafe { list(gi, prof.id, buf.as_mut_ptr(), &mut count) };
            self.check("nvmlGpuInstanceGetComputeInstances", gpu, ret)?;
            for &ci in buf.iter().take(count as usize) {
                // SAFETY: integers and opaque handles; all zero bytes are valid.
                let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: `ci` came from NVML just now; valid out-pointer.
                let ret = unsafe { info_f(ci, &mut info) };
                self.check("nvmlComputeInstanceGetInfo_v2", gpu, ret)?;
                out.push((ci, info.id));
            }
        }
        out.sort_by_key(|&(_, id)| id);
        Ok(out)
    }

    /// The MIG devices of a GPU with their instance ids and UUIDs.
    fn mig_devices(&self, gpu: u32, dev: &Device<'_>) -> GpuResult<Vec<MigDevice>> {
        let max_f = sym!(self, nvmlDeviceGetMaxMigDeviceCount);
        let by_index = sym!(self, nvmlDeviceGetMigDeviceHandleByIndex);
        let gi_id_f = sym!(self, nvmlDeviceGetGpuInstanceId);
        let ci_id_f = sym!(self, nvmlDeviceGetComputeInstanceId);
        let mut max: c_uint = 0;
        // SAFETY: valid handle and out-pointer.
        let ret = unsafe { max_f(raw(dev), &mut max) };
        self.check("nvmlDeviceGetMaxMigDeviceCount", gpu, ret)?;
        let mut out = Vec::new();
        for index in 0..max {
            let mut mig_handle: nvmlDevice_t = std::ptr::null_mut();
            // SAFETY: valid handle and out-pointer.
            let ret = unsafe { by_index(raw(dev), index, &mut mig_handle) };
            if ret != SUCCESS {
                // A free slot answers NOT_FOUND; drivers have other codes for slots being
                // set up or torn down. None of them is a MIG device to list.
                if ret != NOT_FOUND {
                    log::debug!("GPU {gpu}: MIG device slot {index}: NVML code {ret}");
                }
                continue;
            }
            let (mut gi_id, mut ci_id): (c_uint, c_uint) = (0, 0);
            // SAFETY: `mig_handle` came from NVML just now; valid out-pointers.
            let ret = unsafe { gi_id_f(mig_handle, &mut gi_id) };
            // SAFETY: as above.
            let ret2 = unsafe { ci_id_f(mig_handle, &mut ci_id) };
            if ret != SUCCESS || ret2 != SUCCESS {
                log::debug!("GPU {gpu}: MIG device slot {index}: no instance ids ({ret}, {ret2})");
                continue;
            }
            // SAFETY: a MIG device handle from this `Nvml`, used only while it lives.
            let mig = unsafe { Device::new(mig_handle, &self.nvml) };
            let Ok(uuid) = mig.uuid() else {
                log::debug!("GPU {gpu}: MIG device slot {index}: no UUID");
                continue;
            };
            out.push(MigDevice { gi_id, ci_id, uuid });
        }
        Ok(out)
    }

    /// Create the full-size compute instance in a new GPU instance and find its MIG
    /// device. `made_ci` receives the compute instance as soon as it exists, so the
    /// caller can undo it on failure.
    fn fill_instance(
        &self,
        gpu: u32,
        dev: &Device<'_>,
        gi: nvmlGpuInstance_t,
        profile_id: u32,
        made_ci: &mut Option<nvmlComputeInstance_t>,
    ) -> GpuResult<Instance> {
        let info = self.gi_info(gpu, gi)?;
        // The compute instance profile spanning the whole GPU instance: the largest
        // one it offers.
        let full = self
            .ci_profiles(gpu, gi)?
            .into_iter()
            .max_by_key(|p| (p.sliceCount, std::cmp::Reverse(p.id)))
            .ok_or(GpuError::Call {
                call: "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gpu: gpu.to_string(),
                message: format!(
                    "GPU instance {} offers no compute instance profile",
                    info.id
                ),
                code: NOT_SUPPORTED,
            })?;
        let create = sym!(self, nvmlGpuInstanceCreateComputeInstance);
        let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
        // SAFETY: `gi` came from NVML; valid out-pointer.
        let ret = unsafe { create(gi, full.id, &mut ci) };
        self.check("nvmlGpuInstanceCreateComputeInstance", gpu, ret)?;
        *made_ci = Some(ci);
        let info_f = sym!(self, nvmlComputeInstanceGetInfo_v2);
        // SAFETY: integers and opaque handles; all zero bytes are valid.
        let mut ci_info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `ci` came from NVML just now; valid out-pointer.
        let ret = unsafe { info_f(ci, &mut ci_info) };
        self.check("nvmlComputeInstanceGetInfo_v2", gpu, ret)?;
        // A MIG device can take a moment to appear in the device table after its compute
        // instance is made: look again, a little longer each time, before giving up (and
        // undoing).
        let wait = std::time::Duration::from_millis(
            self.listing_wait_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let deadline = std::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_millis(20);
        let found = loop {
            let hit = self
                .mig_devices(gpu, dev)?
                .into_iter()
                .find(|m| m.gi_id == info.id && m.ci_id == ci_info.id);
            if hit.is_some() || std::time::Instant::now() >= deadline {
                break hit;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
        };
        let uuid = found.map(|m| m.uuid).ok_or_else(|| GpuError::Call {
            call: "nvmlDeviceGetMigDeviceHandleByIndex",
            gpu: gpu.to_string(),
            message: format!(
                "no MIG device for GPU instance {} compute instance {} after {} s (colloc.toml \
                 [mig] listing_wait_s)",
                info.id,
                ci_info.id,
                wait.as_secs()
            ),
            code: NOT_FOUND,
        })?;
        Ok(Instance {
            gi_id: info.id,
            profile_id,
            profile: self.profile_name_of(gpu, profile_id),
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
            ci_ids: vec![ci_info.id],
            uuid: Some(uuid),
        })
    }

    /// The MIG devices of a GPU as `(GPU instance id, compute instance id, MIG UUID)`.
    /// Needs no privilege (unlike listing the instances), so `colloc status` run by a user
    /// can still show what exists.
    ///
    /// # Errors
    /// NVML failures.
    #[doc(alias = "nvmlDeviceGetMigDeviceHandleByIndex")]
    pub fn mig_device_list(&self, gpu: u32) -> GpuResult<Vec<(u32, u32, String)>> {
        let dev = self.device(gpu)?;
        if !matches!(
            self.mig_mode_of(gpu, &dev)?,
            Some(MigMode { current: true, .. })
        ) {
            return Ok(Vec::new());
        }
        Ok(self
            .mig_devices(gpu, &dev)?
            .into_iter()
            .map(|m| (m.gi_id, m.ci_id, m.uuid))
            .collect())
    }

    fn profile_name_of(&self, gpu: u32, profile_id: u32) -> String {
        self.catalog(gpu)
            .ok()
            .and_then(|c| c.by_id(profile_id).map(|p| p.name.clone()))
            .unwrap_or_else(|| format!("profile-{profile_id}"))
    }

    /// Destroy every compute instance of a GPU instance, then the GPU instance.
    fn destroy_gi(&self, gpu: u32, gi: nvmlGpuInstance_t) -> GpuResult<()> {
        let destroy_ci = sym!(self, nvmlComputeInstanceDestroy);
        let destroy_gi = sym!(self, nvmlGpuInstanceDestroy);
        for (ci, _) in self.compute_instances(gpu, gi)? {
            // SAFETY: `ci` came from NVML just now.
            let ret = unsafe { destroy_ci(ci) };
            self.check("nvmlComputeInstanceDestroy", gpu, ret)?;
        }
        // SAFETY: `gi` came from NVML.
        let ret = unsafe { destroy_gi(gi) };
        self.check("nvmlGpuInstanceDestroy", gpu, ret)
    }
}

/// What GPM read of one physical GPU over the interval between two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpmReading {
    /// Share of the SMs busy, percent (`NVML_GPM_METRIC_SM_UTIL`, "SM activity"): how
    /// much of the GPU the work in flight fills, where utilization says only how much of
    /// the time any of it ran.
    pub sm_activity: Option<f64>,
    /// Active warps against the SMs' maximum, percent (`NVML_GPM_METRIC_SM_OCCUPANCY`).
    pub sm_occupancy: Option<f64>,
}

/// nvml.h: two GPM samples should be more than 100 ms apart ("the internal sample
/// refresh rate"); a read sooner after the last one is skipped.
pub const GPM_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// GPM readings of one physical GPU: each [`GpmSampler::read`] takes a sample and gives
/// the metrics over the interval since the one before. It owns two sample buffers
/// (freed on drop) and holds the library alive while it has them. Nothing it meets is an
/// error that stops a measurement: an unsupported GPU gives no sampler, a failed sample
/// or metric a `None`, each logged once at debug level.
pub struct GpmSampler {
    gpus: Arc<NvmlGpus>,
    gpu: u32,
    bufs: [nvmlGpmSample_t; 2],
    /// Which buffer holds the last good sample, and when it was taken.
    last: Option<(usize, Instant)>,
    logged: bool,
}

impl std::fmt::Debug for GpmSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpmSampler")
            .field("gpu", &self.gpu)
            .finish_non_exhaustive()
    }
}

// SAFETY: the buffers are memory NVML allocated for this process, not tied to a thread;
// they are only touched through `&mut self` (one thread at a time) while `gpus` keeps the
// library loaded, and NVML's calls are thread-safe.
unsafe impl Send for GpmSampler {}

impl GpmSampler {
    /// Sample now; SM activity and occupancy since the previous sample. `None` for the
    /// first sample, within [`GPM_MIN_INTERVAL`] of the last one, and where NVML fails.
    #[doc(alias = "nvmlGpmSampleGet")]
    #[doc(alias = "nvmlGpmMetricsGet")]
    pub fn read(&mut self) -> Option<GpmReading> {
        if self
            .last
            .is_some_and(|(_, t)| t.elapsed() < GPM_MIN_INTERVAL)
        {
            return None;
        }
        let next = self.last.map_or(0, |(i, _)| 1 - i);
        let taken = Instant::now();
        if let Err(e) = self.gpus.gpm_get(self.gpu, self.bufs[next]) {
            self.note(&e);
            self.last = None;
            return None;
        }
        let prev = self.last.replace((next, taken));
        let (i, _) = prev?;
        match self
            .gpus
            .gpm_metrics(self.gpu, self.bufs[i], self.bufs[next])
        {
            Ok(r) if r.sm_activity.is_some() || r.sm_occupancy.is_some() => Some(r),
            Ok(_) => None,
            Err(e) => {
                self.note(&e);
                None
            }
        }
    }

    fn note(&mut self, e: &GpuError) {
        if !std::mem::replace(&mut self.logged, true) {
            log::debug!(
                "GPU {}: no GPM reading ({e}); further failures are not logged",
                self.gpu
            );
        }
    }
}

impl Drop for GpmSampler {
    fn drop(&mut self) {
        for b in self.bufs {
            self.gpus.gpm_free(b);
        }
    }
}

impl NvmlGpus {
    /// A GPM sampler of physical GPU `gpu`, where the GPU and driver have GPM (Hopper and
    /// later); `None` elsewhere (an A100, an older driver without the symbols), said once
    /// at debug level.
    #[doc(alias = "nvmlGpmQueryDeviceSupport")]
    #[doc(alias = "nvmlGpmSampleAlloc")]
    pub fn gpm_sampler(self: &Arc<Self>, gpu: u32) -> Option<GpmSampler> {
        match self.gpm_supported(gpu) {
            Ok(true) => {}
            Ok(false) => {
                log::debug!("GPU {gpu}: no GPM (before Hopper): SM activity from utilization");
                return None;
            }
            Err(e) => {
                log::debug!("GPU {gpu}: GPM unavailable ({e}): SM activity from utilization");
                return None;
            }
        }
        let first = self.gpm_alloc();
        let second = self.gpm_alloc();
        match (first, second) {
            (Ok(a), Ok(b)) => Some(GpmSampler {
                gpus: Arc::clone(self),
                gpu,
                bufs: [a, b],
                last: None,
                logged: false,
            }),
            (a, b) => {
                for buf in [&a, &b].into_iter().flatten() {
                    self.gpm_free(*buf);
                }
                if let Some(e) = [a, b].into_iter().find_map(Result::err) {
                    log::debug!("GPU {gpu}: no GPM sample buffers ({e})");
                }
                None
            }
        }
    }

    fn gpm_supported(&self, gpu: u32) -> GpuResult<bool> {
        let f = sym!(self, nvmlGpmQueryDeviceSupport);
        let dev = self.device(gpu)?;
        // nvml.h's plain version number, not NVML_STRUCT_VERSION-encoded.
        let mut support = nvmlGpmSupport_t {
            version: NVML_GPM_SUPPORT_VERSION,
            isSupportedDevice: 0,
        };
        // SAFETY: valid device handle; `support` is a live struct of the version it says.
        let ret = unsafe { f(raw(&dev), &mut support) };
        self.check("nvmlGpmQueryDeviceSupport", gpu, ret)?;
        Ok(support.isSupportedDevice != 0)
    }

    fn gpm_alloc(&self) -> GpuResult<nvmlGpmSample_t> {
        let f = sym!(self, nvmlGpmSampleAlloc);
        let mut s: nvmlGpmSample_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the buffer it returns is freed by `gpm_free`.
        let ret = unsafe { f(&mut s) };
        self.check("nvmlGpmSampleAlloc", 0, ret)?;
        Ok(s)
    }

    fn gpm_free(&self, s: nvmlGpmSample_t) {
        let Ok(f) = self.nvml.lib().nvmlGpmSampleFree.as_ref() else {
            return;
        };
        // SAFETY: `s` came from nvmlGpmSampleAlloc of this library and is freed once:
        // only a dropped `GpmSampler` (or a failed construction) frees its buffers.
        let ret = unsafe { f(s) };
        if ret != SUCCESS {
            log::debug!("nvmlGpmSampleFree: {}", self.error_string(ret));
        }
    }

    fn gpm_get(&self, gpu: u32, s: nvmlGpmSample_t) -> GpuResult<()> {
        let f = sym!(self, nvmlGpmSampleGet);
        let dev = self.device(gpu)?;
        // SAFETY: valid device handle; `s` is a live buffer from nvmlGpmSampleAlloc.
        let ret = unsafe { f(raw(&dev), s) };
        self.check("nvmlGpmSampleGet", gpu, ret)
    }

    /// SM activity and occupancy between two filled samples, `s1` the earlier; a metric
    /// the driver answers with an error of its own is `None`.
    fn gpm_metrics(
        &self,
        gpu: u32,
        s1: nvmlGpmSample_t,
        s2: nvmlGpmSample_t,
    ) -> GpuResult<GpmReading> {
        let f = sym!(self, nvmlGpmMetricsGet);
        // SAFETY: integers, a double, sample handles and C string pointers: all zero
        // bytes (NULL pointers) are valid.
        let mut req: Box<nvmlGpmMetricsGet_t> = Box::new(unsafe { std::mem::zeroed() });
        req.version = NVML_GPM_METRICS_GET_VERSION;
        req.sample1 = s1;
        req.sample2 = s2;
        let ids = [
            nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL,
            nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY,
        ];
        req.numMetrics = ids.len() as u32;
        for (slot, id) in req.metrics.iter_mut().zip(ids) {
            slot.metricId = id;
        }
        // SAFETY: `req` is a whole request of the version it says, with `numMetrics`
        // entries filled in; both samples are live buffers NVML filled.
        let ret = unsafe { f(&mut *req) };
        self.check("nvmlGpmMetricsGet", gpu, ret)?;
        let value = |i: usize| {
            let m = &req.metrics[i];
            (m.nvmlReturn == SUCCESS && m.value.is_finite()).then_some(m.value)
        };
        Ok(GpmReading {
            sm_activity: value(0),
            sm_occupancy: value(1),
        })
    }
}

impl GpuControl for NvmlGpus {
    fn device_minor(&self, gpu: u32) -> u32 {
        self.device(gpu)
            .ok()
            .and_then(|d| d.minor_number().ok())
            .unwrap_or(gpu)
    }

    fn set_listing_wait(&self, wait: std::time::Duration) {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.listing_wait_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn gpus(&self) -> GpuResult<Vec<GpuInfo>> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| wrap("nvmlDeviceGetCount_v2", "-", e))?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let dev = self.device(index)?;
            out.push(GpuInfo {
                index,
                uuid: dev
                    .uuid()
                    .map_err(|e| wrap("nvmlDeviceGetUUID", index, e))?,
                name: dev
                    .name()
                    .map_err(|e| wrap("nvmlDeviceGetName", index, e))?,
                mig_mode: self.mig_mode_of(index, &dev)?,
                memory_total: dev
                    .memory_info()
                    .map_err(|e| wrap("nvmlDeviceGetMemoryInfo_v2", index, e))?
                    .total,
            });
        }
        Ok(out)
    }

    fn catalog(&self, gpu: u32) -> GpuResult<Catalog> {
        let cached = self
            .catalogs
            .lock()
            .map_err(|_| GpuError::Load {
                library: self.library.clone(),
                reason: "catalog cache poisoned by an earlier panic".into(),
            })?
            .get(&gpu)
            .cloned();
        if let Some(c) = cached {
            return Ok(c);
        }
        let cat = self.read_catalog(gpu)?;
        // An empty answer may change (A100s answer only in MIG mode): keep only full ones.
        if !cat.profiles.is_empty() {
            if let Ok(mut m) = self.catalogs.lock() {
                m.insert(gpu, cat.clone());
            }
        }
        Ok(cat)
    }

    fn instances(&self, gpu: u32) -> GpuResult<Vec<Instance>> {
        let dev = self.device(gpu)?;
        if !matches!(
            self.mig_mode_of(gpu, &dev)?,
            Some(MigMode { current: true, .. })
        ) {
            return Ok(Vec::new());
        }
        let catalog = self.catalog(gpu)?;
        // UUIDs are for people and the job's environment; restore does not need them, so
        // a failure to read them must not stop it.
        let migs = self.mig_devices(gpu, &dev).unwrap_or_else(|e| {
            log::warn!("GPU {gpu}: MIG device UUIDs unavailable: {e}");
            Vec::new()
        });
        let mut out = Vec::new();
        for profile in &catalog.profiles {
            for gi in self.gpu_instances(gpu, &dev, profile)? {
                // An instance being destroyed can go between the listing and these reads.
                let gone = |e: &GpuError| e.is_not_found();
                let info = match self.gi_info(gpu, gi) {
                    Err(e) if gone(&e) => continue,
                    other => other?,
                };
                let ci_ids: Vec<u32> = match self.compute_instances(gpu, gi) {
                    Err(e) if gone(&e) => continue,
                    other => other?,
                }
                .into_iter()
                .map(|(_, id)| id)
                .collect();
                let uuid = ci_ids.first().and_then(|&ci| {
                    migs.iter()
                        .find(|m| m.gi_id == info.id && m.ci_id == ci)
                        .map(|m| m.uuid.clone())
                });
                out.push(Instance {
                    gi_id: info.id,
                    profile_id: info.profileId,
                    profile: profile.name.clone(),
                    placement: Placement {
                        start: info.placement.start,
                        size: info.placement.size,
                    },
                    ci_ids,
                    uuid,
                });
            }
        }
        out.sort_by_key(|i| (i.placement, i.gi_id));
        Ok(out)
    }

    fn processes(&self, gpu: u32) -> GpuResult<Vec<GpuProcess>> {
        let dev = self.device(gpu)?;
        let list = dev
            .running_compute_processes()
            .map_err(|e| wrap("nvmlDeviceGetComputeRunningProcesses_v3", gpu, e))?;
        Ok(list
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                gi_id: p.gpu_instance_id,
            })
            .collect())
    }

    fn create_instance(
        &self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> GpuResult<Instance> {
        let dev = self.device(gpu)?;
        self.require_mig(gpu, &dev)?;
        let create = sym!(self, nvmlDeviceCreateGpuInstanceWithPlacement);
        // Check now what cleanup needs, so a missing symbol cannot strand an instance.
        sym!(self, nvmlGpuInstanceDestroy);
        sym!(self, nvmlComputeInstanceDestroy);
        let pl = nvmlGpuInstancePlacement_t {
            start: placement.start,
            size: placement.size,
        };
        let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: valid handle; `pl` and `gi` are live locals.
        let ret = unsafe { create(raw(&dev), profile_id, &pl, &mut gi) };
        self.check("nvmlDeviceCreateGpuInstanceWithPlacement", gpu, ret)?;
        let mut made_ci = None;
        match self.fill_instance(gpu, &dev, gi, profile_id, &mut made_ci) {
            Ok(inst) => {
                log::debug!(
                    "GPU {gpu}: created {} GI {} {:?}",
                    inst.profile,
                    inst.gi_id,
                    inst.uuid
                );
                Ok(inst)
            }
            Err(err) => {
                // All or nothing: remove what this call made, report the first error.
                if let Some(ci) = made_ci {
                    let destroy = sym!(self, nvmlComputeInstanceDestroy);
                    // SAFETY: `ci` was created by this call and not destroyed yet.
                    let ret = unsafe { destroy(ci) };
                    if let Err(e) = self.check("nvmlComputeInstanceDestroy", gpu, ret) {
                        log::warn!("GPU {gpu}: undoing a failed create: {e}");
                    }
                }
                let destroy = sym!(self, nvmlGpuInstanceDestroy);
                // SAFETY: `gi` was created by this call and not destroyed yet.
                let ret = unsafe { destroy(gi) };
                if let Err(e) = self.check("nvmlGpuInstanceDestroy", gpu, ret) {
                    log::warn!("GPU {gpu}: undoing a failed create: {e}");
                }
                Err(err)
            }
        }
    }

    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> GpuResult<()> {
        let dev = self.device(gpu)?;
        let by_id = sym!(self, nvmlDeviceGetGpuInstanceById);
        let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: valid handle and out-pointer.
        let ret = unsafe { by_id(raw(&dev), gi_id, &mut gi) };
        self.check("nvmlDeviceGetGpuInstanceById", gpu, ret)?;
        self.destroy_gi(gpu, gi)?;
        log::debug!("GPU {gpu}: destroyed GI {gi_id}");
        Ok(())
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> GpuResult<MigModeChange> {
        let dev = self.device(gpu)?;
        let activation = dev
            .set_mig_mode(enabled)
            .map_err(|e| wrap("nvmlDeviceSetMigMode", gpu, e))?;
        if activation != SUCCESS {
            log::info!(
                "GPU {gpu}: MIG mode change pending ({})",
                self.error_string(activation)
            );
        }
        let mode = self.mig_mode_of(gpu, &dev)?.ok_or(GpuError::Call {
            call: "nvmlDeviceGetMigMode",
            gpu: gpu.to_string(),
            message: "the GPU does not support MIG".into(),
            code: NOT_SUPPORTED,
        })?;
        Ok(MigModeChange { mode, activation })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_lose_the_mig_prefix() {
        let field = |s: &str| {
            let mut f = [0 as std::ffi::c_char; 96];
            for (o, b) in f.iter_mut().zip(s.bytes()) {
                *o = b as std::ffi::c_char;
            }
            f
        };
        assert_eq!(
            profile_name(&field("MIG 3g.20gb")).as_deref(),
            Some("3g.20gb")
        );
        assert_eq!(
            profile_name(&field("MIG 1g.5gb+me")).as_deref(),
            Some("1g.5gb+me")
        );
        assert_eq!(profile_name(&field("2g.35gb")).as_deref(), Some("2g.35gb"));
        assert_eq!(profile_name(&field("")), None);
        assert_eq!(profile_name(&field("MIG ")), None);
    }

    #[test]
    fn wrapper_errors_keep_their_nvml_code() {
        let e = wrap("nvmlGpuInstanceDestroy", 0, NvmlError::InUse);
        assert!(e.is_in_use(), "{e}");
        let e = wrap("nvmlX", 1, NvmlError::UnexpectedVariant(23));
        assert!(e.is_insufficient_resources(), "{e}");
        let e = wrap("nvmlDeviceGetGpuInstanceById", 0, NvmlError::NotFound);
        assert!(e.is_not_found());
        let e = wrap("nvmlFoo", 0, NvmlError::FailedToLoadSymbol("x".into()));
        assert!(matches!(e, GpuError::MissingSymbol { symbol: "nvmlFoo" }));
    }

    #[test]
    fn a_missing_library_is_a_load_error() {
        let err = NvmlGpus::open("/nonexistent/libnvidia-ml.so.1").unwrap_err();
        assert!(matches!(err, GpuError::Load { .. }), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
            "{err}"
        );
    }
}
