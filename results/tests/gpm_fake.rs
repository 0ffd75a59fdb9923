//! GPM readings (`GpmSampler`, and the telemetry probe that takes them) against the fake
//! libnvidia-ml, whose SMs a test sets to a known activity and occupancy.
//!
//! The fake reads `COLLOC_FAKE_NVML_STATE` on every call and the environment is
//! process-wide, so these tests run one at a time (a mutex), each with its own state.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use colloc_core::nvml::{NvmlGpus, GPM_MIN_INTERVAL};
use colloc_results::telemetry::{self, NvmlProbe, Probe, Want};
use fake_nvml::state::State;
use fake_nvml::store::{ctl_change, now_us};

static SERIAL: Mutex<()> = Mutex::new(());

struct Fake {
    _guard: MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
}

impl Fake {
    /// `gpus` with MIG off, GPU `i`'s SMs `busy[i]` = (activity, occupancy) % busy.
    fn new(gpus: &str, busy: &[(f64, f64)]) -> Fake {
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("state.json");
        std::env::set_var("COLLOC_FAKE_NVML_STATE", &state);
        ctl_change(&state, |st| {
            *st = State::fresh_from_list(gpus, 0)?;
            for (i, &(a, o)) in busy.iter().enumerate() {
                st.gpus[i].mig_current = false;
                st.set_gpm(i as u32, a, o, now_us())?;
            }
            Ok(())
        })
        .expect("write the fake state");
        Fake {
            _guard: guard,
            _dir: dir,
            state,
        }
    }

    fn open(&self) -> Arc<NvmlGpus> {
        Arc::new(
            NvmlGpus::open(fake_nvml::locate::library().to_str().expect("utf-8 path"))
                .expect("open the fake NVML"),
        )
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 0.5)
}

/// An H100 whose SMs are 14 % busy with 9 % of their warps active reads so over each
/// interval; the first read and one within 100 ms of the last give nothing; when the
/// SMs get busier the next interval says so.
#[test]
fn an_h100_reads_the_sm_activity_and_occupancy_it_has() {
    let fake = Fake::new("H100-80GB", &[(14.0, 9.0)]);
    let gpus = fake.open();
    let mut s = gpus.gpm_sampler(0).expect("an H100 has GPM");
    assert_eq!(s.read(), None, "one sample is no interval");
    assert_eq!(s.read(), None, "too soon after the last");
    std::thread::sleep(GPM_MIN_INTERVAL + Duration::from_millis(50));
    let r = s.read().expect("a reading");
    assert!(close(r.sm_activity, 14.0), "{r:?}");
    assert!(close(r.sm_occupancy, 9.0), "{r:?}");
    ctl_change(&fake.state, |st| st.set_gpm(0, 50.0, 40.0, now_us())).unwrap();
    std::thread::sleep(GPM_MIN_INTERVAL + Duration::from_millis(50));
    let r = s.read().expect("a reading");
    assert!(close(r.sm_activity, 50.0), "{r:?}");
    assert!(close(r.sm_occupancy, 40.0), "{r:?}");
    drop(s);
    // The sampler kept the library alive and freed its buffers: a new one works.
    assert!(gpus.gpm_sampler(0).is_some());
}

/// An A100 has no GPM: no sampler, and nothing fails.
#[test]
fn an_a100_has_no_gpm_sampler() {
    let fake = Fake::new("A100-40GB,H200", &[(14.0, 9.0), (20.0, 10.0)]);
    let gpus = fake.open();
    assert!(gpus.gpm_sampler(0).is_none());
    assert!(gpus.gpm_sampler(1).is_some());
    assert!(
        gpus.gpm_sampler(7).is_none(),
        "no such GPU: none, not a panic"
    );
}

/// A failing metrics call or sample gives `None`, and the sampler goes on afterwards.
#[test]
fn a_failing_gpm_call_gives_none_and_the_next_reads_again() {
    let fake = Fake::new("H100-80GB", &[(30.0, 20.0)]);
    let gpus = fake.open();
    let mut s = gpus.gpm_sampler(0).expect("an H100 has GPM");
    s.read();
    ctl_change(&fake.state, |st| {
        st.faults.insert(
            "nvmlGpmMetricsGet".into(),
            fake_nvml::state::Fault {
                call: 1,
                code: "NVML_ERROR_UNKNOWN".into(),
                seen: 0,
                times: 1,
            },
        );
        Ok(())
    })
    .unwrap();
    std::thread::sleep(GPM_MIN_INTERVAL + Duration::from_millis(50));
    assert_eq!(s.read(), None);
    std::thread::sleep(GPM_MIN_INTERVAL + Duration::from_millis(50));
    assert!(close(s.read().and_then(|r| r.sm_activity), 30.0));
}

/// The telemetry probe reads GPM at energy ticks, whether or not an attempt runs, on
/// the GPU that has it; an A100 beside it reads none.
#[test]
fn the_probe_reads_gpm_at_energy_ticks() {
    let fake = Fake::new("H200,A100-80GB", &[(14.0, 9.0), (50.0, 50.0)]);
    let gpus = fake.open();
    let map = telemetry::resolve(gpus.nvml(), &[Some("0".into()), Some("1".into())]);
    let mut probe = NvmlProbe::new(Arc::clone(&gpus), &map);
    let want = |energy: bool| Want {
        busy: vec![false, false],
        busy_slots: vec![false, false],
        energy: vec![energy, energy],
    };
    probe.read(&want(true));
    std::thread::sleep(GPM_MIN_INTERVAL + Duration::from_millis(50));
    let t = probe.read(&want(false));
    assert_eq!(t.gpus[0].sm_activity, None, "not an energy tick");
    let t = probe.read(&want(true));
    assert!(close(t.gpus[0].sm_activity, 14.0), "{:?}", t.gpus[0]);
    assert!(close(t.gpus[0].sm_occupancy, 9.0), "{:?}", t.gpus[0]);
    assert_eq!(t.gpus[1].sm_activity, None, "{:?}", t.gpus[1]);
}
