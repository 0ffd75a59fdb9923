//! Library init and shutdown, error strings, the driver and NVML versions.

use std::ffi::{c_char, c_uint, CStr};
use std::sync::atomic::Ordering;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use super::{api, guard, put_str, FAKE_SUFFIX, INIT_COUNT};
use crate::state::code;
use crate::store::nvml_call;
use crate::tables;

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
