//! The only NVML functions the probe can call, resolved once from the library by name.
//!
//! Read-only by construction: the probe never looks up any other symbol, so no
//! `Set*`, `Create*`, `Destroy*` or `Reset*` function of the driver is even resolved, let
//! alone called. [`SYMBOLS`] is the list; a test holds it to read-only names.
// The functions keep nvml.h's names.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint, c_ulonglong};

use libloading::Library;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t,
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t, nvmlMemory_t, nvmlProcessInfo_t,
};

/// `nvmlReturn_t`.
pub type Ret = u32;

macro_rules! read_only_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// Every NVML function the probe resolves; nothing else is looked up.
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        /// The resolved functions (`None` where the library lacks one).
        #[allow(non_snake_case)]
        pub struct Api {
            _lib: Library,
            $(
                #[doc = concat!("`", stringify!($name), "` (nvml.h).")]
                pub $name: Option<unsafe extern "C" fn($($arg),*) -> Ret>,
            )*
        }

        impl Api {
            /// Load NVML from `path` and resolve the read-only functions.
            ///
            /// # Errors
            /// The loader's message when the library cannot be opened.
            pub fn load(path: &str) -> Result<Api, String> {
                // SAFETY: opening libnvidia-ml runs its initialisers, which is what using
                // NVML means; the probe is a short-lived process made for that.
                let lib = unsafe { Library::new(path) }.map_err(|e| format!("{path}: {e}"))?;
                $(
                    // SAFETY: the symbol has the signature nvml.h declares for this name;
                    // the pointer is used only while `lib`, kept in the struct, is loaded.
                    let $name = unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) -> Ret>(
                            concat!(stringify!($name), "\0").as_bytes(),
                        )
                    }
                    .ok()
                    .map(|s| *s);
                )*
                Ok(Api { _lib: lib, $($name,)* })
            }
        }
    };
}

read_only_api! {
    nvmlInit_v2: fn();
    nvmlShutdown: fn();
    nvmlSystemGetDriverVersion: fn(*mut c_char, c_uint);
    nvmlSystemGetNVMLVersion: fn(*mut c_char, c_uint);
    nvmlDeviceGetCount_v2: fn(*mut c_uint);
    nvmlDeviceGetHandleByIndex_v2: fn(c_uint, *mut nvmlDevice_t);
    nvmlDeviceGetHandleByUUID: fn(*const c_char, *mut nvmlDevice_t);
    nvmlDeviceGetName: fn(nvmlDevice_t, *mut c_char, c_uint);
    nvmlDeviceGetUUID: fn(nvmlDevice_t, *mut c_char, c_uint);
    nvmlDeviceGetMemoryInfo: fn(nvmlDevice_t, *mut nvmlMemory_t);
    nvmlDeviceGetMigMode: fn(nvmlDevice_t, *mut c_uint, *mut c_uint);
    nvmlDeviceGetGpuInstanceProfileInfo: fn(nvmlDevice_t, c_uint, *mut nvmlGpuInstanceProfileInfo_t);
    nvmlDeviceGetGpuInstanceProfileInfoV: fn(nvmlDevice_t, c_uint, *mut nvmlGpuInstanceProfileInfo_v2_t);
    nvmlDeviceGetGpuInstancePossiblePlacements_v2: fn(nvmlDevice_t, c_uint, *mut nvmlGpuInstancePlacement_t, *mut c_uint);
    nvmlDeviceGetGpuInstanceRemainingCapacity: fn(nvmlDevice_t, c_uint, *mut c_uint);
    nvmlDeviceGetGpuInstances: fn(nvmlDevice_t, c_uint, *mut nvmlGpuInstance_t, *mut c_uint);
    nvmlDeviceGetGpuInstanceById: fn(nvmlDevice_t, c_uint, *mut nvmlGpuInstance_t);
    nvmlGpuInstanceGetInfo: fn(nvmlGpuInstance_t, *mut nvmlGpuInstanceInfo_t);
    nvmlGpuInstanceGetComputeInstanceProfileInfo: fn(nvmlGpuInstance_t, c_uint, c_uint, *mut nvmlComputeInstanceProfileInfo_t);
    nvmlGpuInstanceGetComputeInstances: fn(nvmlGpuInstance_t, c_uint, *mut nvmlComputeInstance_t, *mut c_uint);
    nvmlComputeInstanceGetInfo_v2: fn(nvmlComputeInstance_t, *mut nvmlComputeInstanceInfo_t);
    nvmlDeviceGetMaxMigDeviceCount: fn(nvmlDevice_t, *mut c_uint);
    nvmlDeviceGetMigDeviceHandleByIndex: fn(nvmlDevice_t, c_uint, *mut nvmlDevice_t);
    nvmlDeviceGetGpuInstanceId: fn(nvmlDevice_t, *mut c_uint);
    nvmlDeviceGetComputeInstanceId: fn(nvmlDevice_t, *mut c_uint);
    nvmlDeviceGetComputeRunningProcesses_v3: fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t);
    nvmlDeviceGetTotalEnergyConsumption: fn(nvmlDevice_t, *mut c_ulonglong);
}

/// Call a resolved function of an [`Api`], or answer FUNCTION_NOT_FOUND for one the
/// library lacks. Each call site passes live locals and out-pointers of the types
/// nvml.h declares, and buffers with the counts passed beside them.
macro_rules! call {
    ($api:expr, $f:ident($($arg:expr),*)) => {
        match $api.$f {
            // SAFETY: the arguments are live locals, out-pointers of the declared types
            // and buffers holding the counts passed with them (see the macro's doc); the
            // function pointer is valid while the `Api` (and its library) lives.
            Some(f) => unsafe { f($($arg),*) },
            None => $crate::nvml::FUNCTION_NOT_FOUND,
        }
    };
}

/// NVML's C structs the probe fills: plain integers, char arrays and opaque handles,
/// for which all-zero bytes are a valid value.
pub trait Zeroable {}
impl Zeroable for nvmlMemory_t {}
impl Zeroable for nvmlGpuInstanceProfileInfo_t {}
impl Zeroable for nvmlGpuInstanceProfileInfo_v2_t {}
impl Zeroable for nvmlGpuInstanceInfo_t {}
impl Zeroable for nvmlComputeInstanceProfileInfo_t {}
impl Zeroable for nvmlComputeInstanceInfo_t {}

/// An all-zero value of one of NVML's structs.
pub fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `Zeroable` is implemented only for C structs of integers, char arrays and
    // raw pointers, for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

/// The caller's effective uid (some answers depend on privilege).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A symbol missing from the library: NVML_ERROR_FUNCTION_NOT_FOUND.
pub const FUNCTION_NOT_FOUND: Ret = 13;

/// nvml.h's name of a return code.
pub fn code_name(c: Ret) -> String {
    let name = match c {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        5 => "NVML_ERROR_ALREADY_INITIALIZED",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        23 => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        25 => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        999 => "NVML_ERROR_UNKNOWN",
        _ => return format!("NVML code {c}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_functions_are_resolved() {
        for name in SYMBOLS {
            for verb in [
                "Set", "Create", "Destroy", "Reset", "Clear", "Register", "Modify", "Enable",
                "Disable", "Remove", "Discover", "Validate", "Flush", "Freeze", "Start", "Stop",
            ] {
                let after_prefix = name.trim_start_matches("nvml");
                // Verbs follow the object: nvmlDeviceSet…, nvmlGpuInstanceDestroy.
                assert!(
                    !after_prefix.contains(verb),
                    "{name} is not a read-only NVML function"
                );
            }
        }
        assert!(SYMBOLS.contains(&"nvmlDeviceGetGpuInstancePossiblePlacements_v2"));
    }
}
