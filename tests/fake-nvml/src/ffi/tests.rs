//! The C surface called in-process, as nvml-wrapper would call the cdylib.

use std::ffi::CStr;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

use nvml_wrapper_sys::bindings::{
    nvmlGpmMetricsGet_t, nvmlGpmSample_t, nvmlGpmSupport_t, nvmlGpuInstancePlacement_t,
    nvmlProcessInfo_t, nvmlUtilization_t, NVML_GPM_METRICS_GET_VERSION, NVML_GPM_SUPPORT_VERSION,
};

use super::*;
use crate::state::METRIC_MAX;
use crate::store::{self, nvml_call};

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
    let ret = unsafe { nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, null_mut(), &mut n) };
    assert_eq!((ret, n), (code::SUCCESS, 3));
    let mut buf = [nvmlGpuInstancePlacement_t { start: 9, size: 9 }; 3];
    let mut short = 2;
    // SAFETY: buffer of 3, count says 2: refused without writing past 2.
    let ret = unsafe {
        nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, buf.as_mut_ptr(), &mut short)
    };
    assert_eq!((ret, short), (code::INSUFFICIENT_SIZE, 3));
    // SAFETY: buffer of 3 entries.
    let ret =
        unsafe { nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, buf.as_mut_ptr(), &mut n) };
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
    let ret = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, infos.as_mut_ptr()) };
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

fn gpm_sample() -> nvmlGpmSample_t {
    let mut s: nvmlGpmSample_t = null_mut();
    // SAFETY: valid out-pointer.
    let r = unsafe { nvmlGpmSampleAlloc(&mut s) };
    assert_eq!(r, code::SUCCESS);
    s
}

fn gpm_support(d: nvmlDevice_t, version: u32) -> (nvmlReturn_t, u32) {
    let mut sup = nvmlGpmSupport_t {
        version,
        isSupportedDevice: 7,
    };
    // SAFETY: valid handle and struct.
    let ret = unsafe { nvmlGpmQueryDeviceSupport(d, &mut sup) };
    (ret, sup.isSupportedDevice)
}

/// A request for SM activity, occupancy, an unmodelled metric and an id past the enum.
fn gpm_request(s1: nvmlGpmSample_t, s2: nvmlGpmSample_t) -> Box<nvmlGpmMetricsGet_t> {
    // SAFETY: integers, handles and NULL-able pointers: all zero bytes are valid.
    let mut m: Box<nvmlGpmMetricsGet_t> = Box::new(unsafe { std::mem::zeroed() });
    m.version = NVML_GPM_METRICS_GET_VERSION;
    m.numMetrics = 4;
    m.sample1 = s1;
    m.sample2 = s2;
    for (slot, id) in m.metrics.iter_mut().zip([2, 3, 5, 999]) {
        slot.metricId = id;
        slot.nvmlReturn = 12345;
    }
    m
}

/// GPM on an H100 whose SMs are set 14 % busy (9 % occupancy): the metrics between two
/// samples are those figures; SM activity set to 42 % halfway reads 28 % over both
/// halves. Only the asked-for entries are written.
#[test]
fn gpm_on_hopper_reads_what_the_sms_were_set_to() {
    use crate::state::GpmLoad;
    let _s = Session::new("H100-80GB");
    let d = device(0);
    assert_eq!(gpm_support(d, NVML_GPM_SUPPORT_VERSION), (code::SUCCESS, 1));
    let now = store::now_us();
    change(|st| st.set_gpm(0, 14.0, 9.0, now).unwrap());
    let (s1, s2, s3) = (gpm_sample(), gpm_sample(), gpm_sample());
    assert_eq!(nvmlGpmSampleGet(d, s1), code::SUCCESS);
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(nvmlGpmSampleGet(d, s2), code::SUCCESS);
    let mut m = gpm_request(s1, s2);
    // SAFETY: a whole request struct.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::SUCCESS);
    assert_eq!(m.metrics[0].nvmlReturn, code::SUCCESS);
    assert!(
        (m.metrics[0].value - 14.0).abs() < 1e-6,
        "{}",
        m.metrics[0].value
    );
    assert_eq!(m.metrics[1].nvmlReturn, code::SUCCESS);
    assert!(
        (m.metrics[1].value - 9.0).abs() < 1e-6,
        "{}",
        m.metrics[1].value
    );
    assert_eq!(m.metrics[2].nvmlReturn, code::NOT_SUPPORTED);
    assert_eq!(m.metrics[3].nvmlReturn, code::INVALID_ARGUMENT);
    assert_eq!(m.metrics[4].nvmlReturn, 0, "past numMetrics untouched");
    // Halfway through the next interval the SMs get busier.
    std::thread::sleep(std::time::Duration::from_millis(150));
    let mid = store::now_us();
    change(|st| st.set_gpm(0, 42.0, 30.0, mid).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(nvmlGpmSampleGet(d, s3), code::SUCCESS);
    let mut m = gpm_request(s2, s3);
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::SUCCESS);
    let v = m.metrics[0].value;
    assert!(
        (v - 28.0).abs() < 3.0,
        "about half at 14 %, half at 42 %: {v}"
    );
    let load: Option<GpmLoad> = nvml_call("test", |st| Ok(st.gpus[0].gpm.clone())).unwrap();
    assert_eq!(load.map(|l| l.sm_activity), Some(42.0));
    for s in [s1, s2, s3] {
        assert_eq!(nvmlGpmSampleFree(s), code::SUCCESS);
    }
}

/// An A100 has no GPM: the support query says so and a sample answers NOT_SUPPORTED,
/// whatever its SMs do.
#[test]
fn gpm_on_an_a100_is_not_supported() {
    let _s = Session::new("A100-40GB");
    change(|st| st.set_gpm(0, 14.0, 9.0, 0).unwrap());
    let d = device(0);
    assert_eq!(gpm_support(d, NVML_GPM_SUPPORT_VERSION), (code::SUCCESS, 0));
    let s = gpm_sample();
    assert_eq!(nvmlGpmSampleGet(d, s), code::NOT_SUPPORTED);
    assert_eq!(nvmlGpmSampleFree(s), code::SUCCESS);
}

/// Wrong versions, NULLs, freed and unknown samples, unfilled ones and samples of two
/// GPUs are refused as the driver refuses them.
#[test]
fn gpm_refuses_bad_versions_pointers_and_samples() {
    let _s = Session::new("H100-80GB,H200");
    let (d0, d1) = (device(0), device(1));
    // The struct-version encoding is not what GPM takes (NVIDIA/go-nvml#168).
    let encoded = std::mem::size_of::<nvmlGpmSupport_t>() as u32 | (1 << 24);
    assert_eq!(
        gpm_support(d0, encoded),
        (code::ARGUMENT_VERSION_MISMATCH, 7)
    );
    assert_eq!(gpm_support(d0, 2).0, code::ARGUMENT_VERSION_MISMATCH);
    // SAFETY: NULL is refused before any use.
    let r = unsafe { nvmlGpmQueryDeviceSupport(d0, null_mut()) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    // SAFETY: as above.
    let r = unsafe { nvmlGpmSampleAlloc(null_mut()) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(null_mut()) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    let (a, b) = (gpm_sample(), gpm_sample());
    // An unfilled sample; one sample given twice.
    assert_eq!(nvmlGpmSampleGet(d0, a), code::SUCCESS);
    let mut same = gpm_request(a, a);
    // SAFETY: a whole request struct.
    let r = unsafe { nvmlGpmMetricsGet(&mut *same) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    let mut m = gpm_request(a, b);
    // SAFETY: a whole request struct.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    // Two GPUs.
    assert_eq!(nvmlGpmSampleGet(d1, b), code::SUCCESS);
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    assert_eq!(nvmlGpmSampleGet(d0, b), code::SUCCESS);
    m.version = 2;
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::ARGUMENT_VERSION_MISMATCH);
    m.version = NVML_GPM_METRICS_GET_VERSION;
    m.numMetrics = METRIC_MAX + 1;
    // SAFETY: refused before the entries are read.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    m.numMetrics = 2;
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::SUCCESS);
    // In reverse order: answered, every metric 100 (as the H200 on driver 580 did).
    let mut rev = gpm_request(b, a);
    // SAFETY: a whole request struct.
    let r = unsafe { nvmlGpmMetricsGet(&mut *rev) };
    assert_eq!(r, code::SUCCESS);
    assert_eq!(
        (rev.metrics[0].nvmlReturn, rev.metrics[0].value),
        (0, 100.0)
    );
    // Freed, then used: refused; freed twice: refused.
    assert_eq!(nvmlGpmSampleFree(b), code::SUCCESS);
    assert_eq!(nvmlGpmSampleFree(b), code::INVALID_ARGUMENT);
    assert_eq!(nvmlGpmSampleGet(d0, b), code::INVALID_ARGUMENT);
    // SAFETY: as above.
    let r = unsafe { nvmlGpmMetricsGet(&mut *m) };
    assert_eq!(r, code::INVALID_ARGUMENT);
    // A handle the fake never made, and a device handle where a sample goes.
    assert_eq!(
        nvmlGpmSampleFree(0x1234 as nvmlGpmSample_t),
        code::INVALID_ARGUMENT
    );
    assert_eq!(nvmlGpmSampleGet(d0, d0.cast()), code::INVALID_ARGUMENT);
    assert_eq!(nvmlGpmSampleGet(a.cast(), a), code::INVALID_ARGUMENT);
    assert_eq!(nvmlGpmSampleFree(a), code::SUCCESS);
}
