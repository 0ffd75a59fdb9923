//! Unit tests of the telemetry fold and sampler (beside it, so the module stays short).
use std::time::Instant;

use super::*;

fn map(slot_gpu: Vec<Option<usize>>, slot_mig: Vec<bool>, gpus: usize) -> SlotMap {
    SlotMap {
        slot_device: vec![None; slot_gpu.len()],
        slot_memory_mib: vec![None; slot_gpu.len()],
        slot_gpu,
        slot_mig,
        gpus: (0..gpus)
            .map(|i| GpuId {
                index: i as u32,
                ..GpuId::default()
            })
            .collect(),
    }
}

fn energy(e0: u64) -> Tick {
    Tick {
        gpus: vec![GpuTick {
            energy_mj: Some(e0),
            ..GpuTick::default()
        }],
        mig_used: vec![None, None],
    }
}

#[test]
fn energy_is_split_by_time_share_and_adds_up() {
    // 100 W constant: 100 J per second. A runs 0..4 s, B 2..4 s, nothing 4..5 s.
    let mut f = Fold::new(map(vec![Some(0), Some(0)], vec![false, false], 1), true);
    f.apply(0.0, &energy(0), |_| None);
    f.begin(1, 0, 0.0);
    f.apply(1.0, &energy(100_000), |_| None);
    f.apply(2.0, &energy(200_000), |_| None);
    f.begin(2, 1, 2.0);
    f.apply(3.0, &energy(300_000), |_| None);
    f.apply(4.0, &energy(400_000), |_| None);
    // While they run, their figures so far are what ending them now gives, and reading
    // them ends nothing.
    let (a_now, b_now) = (f.current(1).unwrap(), f.current(2).unwrap());
    assert!((a_now.energy_j.unwrap() - 300.0).abs() < 1e-6, "{a_now:?}");
    assert!((b_now.energy_j.unwrap() - 100.0).abs() < 1e-6, "{b_now:?}");
    assert_eq!(f.current(3), None, "no such attempt");
    let a = f.end(1).unwrap();
    assert_eq!(a, a_now);
    assert_eq!(f.current(1), None, "ended");
    let b = f.end(2).unwrap();
    f.apply(5.0, &energy(500_000), |_| None);
    // A: 2 s alone (200 J) + half of 2 s together (100 J); B: the other half.
    assert!((a.energy_j.unwrap() - 300.0).abs() < 1e-6, "{a:?}");
    assert!((b.energy_j.unwrap() - 100.0).abs() < 1e-6, "{b:?}");
    let t = &f.totals()[0];
    assert!((t.energy_j.unwrap() - 500.0).abs() < 1e-6);
    assert!((t.runs_energy_j.unwrap() - 400.0).abs() < 1e-6);
    assert!((t.idle_energy_j.unwrap() - 100.0).abs() < 1e-6);
}

#[test]
fn an_attempt_that_starts_mid_interval_gets_only_its_part() {
    // One energy interval 0..10 s of 1000 J: A active all of it, B from 5 s.
    let mut f = Fold::new(map(vec![Some(0), Some(0)], vec![false, false], 1), true);
    f.apply(0.0, &energy(0), |_| None);
    f.begin(1, 0, 0.0);
    f.begin(2, 1, 5.0);
    f.apply(10.0, &energy(1_000_000), |_| None);
    let a = f.end(1).unwrap().energy_j.unwrap();
    let b = f.end(2).unwrap().energy_j.unwrap();
    assert!((a - 1000.0 * 10.0 / 15.0).abs() < 1e-6, "{a}");
    assert!((b - 1000.0 * 5.0 / 15.0).abs() < 1e-6, "{b}");
    assert!((a + b - 1000.0).abs() < 1e-6);
}

#[test]
fn memory_and_utilization_by_session_and_mps_gives_none() {
    let t = Tick {
        gpus: vec![GpuTick {
            util: Some(80),
            procs: Some(vec![(101, Some(1000)), (102, Some(500)), (201, Some(700))]),
            proc_util: Some(vec![(101, 30), (201, 50)]),
            ..GpuTick::default()
        }],
        mig_used: vec![None, None],
    };
    let sid = |pid: u32| {
        Some(ProcInfo {
            sid: if pid < 200 { 100 } else { 200 },
            ppid: 1,
            mps_server: false,
        })
    };
    for process_util in [true, false] {
        let mut f = Fold::new(
            map(vec![Some(0), Some(0)], vec![false, false], 1),
            process_util,
        );
        f.begin(10, 0, 0.0);
        f.session(10, 100);
        f.begin(11, 1, 0.0);
        f.session(11, 200);
        f.apply(1.0, &t, sid);
        f.apply(2.0, &t, sid);
        let a = f.end(10).unwrap();
        let b = f.end(11).unwrap();
        assert_eq!(a.peak_memory_bytes, Some(1500));
        assert_eq!(b.peak_memory_bytes, Some(700));
        assert_eq!(a.mean_gpu_util_percent, Some(80.0));
        if process_util {
            assert_eq!(a.mean_util_percent, Some(30.0));
            assert_eq!(b.mean_util_percent, Some(50.0));
        } else {
            assert_eq!(a.mean_util_percent, None, "unavailable under MPS, not 0");
            assert_eq!(b.mean_util_percent, None);
        }
    }
}

#[test]
fn a_mig_slot_reports_its_instance_memory_and_no_process_util() {
    let mut f = Fold::new(map(vec![Some(0), Some(0)], vec![true, false], 1), true);
    f.begin(1, 0, 0.0);
    f.session(1, 100);
    let t = Tick {
        gpus: vec![GpuTick {
            proc_util: Some(vec![(100, 40)]),
            procs: Some(vec![(100, Some(99))]),
            ..GpuTick::default()
        }],
        mig_used: vec![Some(4096), None],
    };
    f.apply(1.0, &t, |pid| {
        Some(ProcInfo {
            sid: pid,
            ..ProcInfo::default()
        })
    });
    let a = f.end(1).unwrap();
    assert_eq!(a.peak_memory_bytes, Some(4096));
    assert_eq!(a.mean_util_percent, None);
}

#[test]
fn idle_energy_goes_to_no_one() {
    let mut f = Fold::new(map(vec![Some(0)], vec![false], 1), true);
    f.apply(0.0, &energy(0), |_| None);
    f.apply(1.0, &energy(500), |_| None);
    let t = &f.totals()[0];
    assert_eq!(t.energy_j, Some(0.5));
    assert_eq!(t.runs_energy_j, Some(0.0));
    assert_eq!(t.idle_energy_j, Some(0.5));
}

#[test]
fn session_field() {
    assert_eq!(
        parse_session("1234 (python a) b) S 1 1234 1200 0 -1"),
        Some(1200)
    );
    assert_eq!(parse_session("garbage"), None);
    assert!(session_of(std::process::id()).is_some());
    assert_eq!(
        parse_stat("77 (nvidia-cuda-mps) S 50 77 77 0 -1"),
        Some(ProcInfo {
            sid: 77,
            ppid: 50,
            mps_server: true
        })
    );
    let me = proc_info(std::process::id()).unwrap();
    assert_eq!(Some(me.sid), session_of(std::process::id()));
    assert!(!me.mps_server);
}

/// A stand-in process table: pid -> (session, parent, is the MPS server).
fn table(rows: &[(u32, u32, u32, bool)]) -> impl FnMut(u32) -> Option<ProcInfo> + '_ {
    move |pid| {
        rows.iter()
            .find(|r| r.0 == pid)
            .map(|&(_, sid, ppid, mps_server)| ProcInfo {
                sid,
                ppid,
                mps_server,
            })
    }
}

#[test]
fn under_mps_each_client_has_its_own_memory_and_the_server_none() {
    // As driver 580 lists it on the H200: the compute list has the server (66 MiB)
    // and each client with its own memory; the MPS list the clients only. Three
    // identical runs (sessions 100, 200, 300); the server was started by the MPS
    // control daemon (session 50) -- and once, in a second fold, from run 100's tree.
    const MIB: u64 = 1 << 20;
    let tick = Tick {
        gpus: vec![GpuTick {
            procs: Some(vec![
                (60, Some(66 * MIB)),
                (101, Some(1182 * MIB)),
                (201, Some(1182 * MIB)),
                (301, Some(1182 * MIB)),
                (999, Some(500 * MIB)),
            ]),
            mps_clients: Some(vec![
                (101, Some(1182 * MIB)),
                (201, Some(1182 * MIB)),
                (301, Some(1182 * MIB)),
            ]),
            ..GpuTick::default()
        }],
        mig_used: vec![None; 3],
    };
    for server_sid in [50, 100] {
        let rows = [
            (60, server_sid, 51, true),
            (101, 100, 100, false),
            // A client that called setsid: found through its parent, the leader.
            (201, 201, 200, false),
            (301, 300, 300, false),
            (999, 900, 1, false),
        ];
        let mut f = Fold::new(map(vec![Some(0); 3], vec![false; 3], 1), false);
        for (k, sid) in [(1u64, 100u32), (2, 200), (3, 300)] {
            f.begin(k, k as usize - 1, 0.0);
            f.session(k, sid);
        }
        f.apply(1.0, &tick, table(&rows));
        f.apply(2.0, &tick, table(&rows));
        for k in 1..=3 {
            let a = f.end(k).unwrap();
            assert_eq!(a.peak_memory_bytes, Some(1182 * MIB), "run {k}: {a:?}");
        }
        let t = &f.totals()[0];
        assert_eq!(t.mps_server_peak_bytes, Some(66 * MIB));
        assert_eq!(t.others_peak_bytes, Some(500 * MIB));
    }
}

#[test]
fn a_client_listed_only_by_the_mps_list_counts_once() {
    let mut f = Fold::new(map(vec![Some(0)], vec![false], 1), false);
    f.begin(1, 0, 0.0);
    f.session(1, 100);
    let t = Tick {
        gpus: vec![GpuTick {
            procs: Some(vec![(100, Some(700))]),
            mps_clients: Some(vec![(100, Some(700)), (101, Some(300))]),
            ..GpuTick::default()
        }],
        mig_used: vec![None],
    };
    f.apply(
        1.0,
        &t,
        table(&[(100, 100, 1, false), (101, 100, 100, false)]),
    );
    assert_eq!(f.end(1).unwrap().peak_memory_bytes, Some(1000));
}

#[test]
fn a_pid_gone_at_one_reading_is_asked_again_at_the_next() {
    let mut f = Fold::new(map(vec![Some(0)], vec![false], 1), false);
    f.begin(1, 0, 0.0);
    f.session(1, 100);
    let t = Tick {
        gpus: vec![GpuTick {
            procs: Some(vec![(300, Some(700))]),
            ..GpuTick::default()
        }],
        mig_used: vec![None],
    };
    // Not (yet) in /proc at the first reading: nobody's, and not remembered so.
    f.apply(1.0, &t, |_| None);
    f.apply(2.0, &t, table(&[(300, 100, 100, false)]));
    assert_eq!(f.end(1).unwrap().peak_memory_bytes, Some(700));
}

#[test]
fn the_config_of_mps_attempts_has_no_process_util() {
    let b = Instant::now();
    assert!(!SamplerConfig::new(Duration::from_secs(1), true, b).process_util);
    assert!(SamplerConfig::new(Duration::from_secs(1), false, b).process_util);
}

struct Fixed(Tick);
impl Probe for Fixed {
    fn read(&mut self, _: &Want) -> Tick {
        self.0.clone()
    }
}

#[test]
fn the_sampler_thread_answers_and_stops() {
    let m = map(vec![Some(0)], vec![false], 1);
    let s = Sampler::start(
        Box::new(Fixed(Tick {
            gpus: vec![GpuTick {
                used_bytes: Some(7),
                energy_mj: Some(5),
                ..GpuTick::default()
            }],
            mig_used: vec![None],
        })),
        m,
        SamplerConfig {
            interval: Duration::from_millis(10),
            process_util: true,
            base: Instant::now(),
        },
    );
    s.begin(1, 0);
    std::thread::sleep(Duration::from_millis(30));
    let a = s.end(1).unwrap();
    assert_eq!(a.energy_j, Some(0.0));
    let (totals, hist) = s.finish();
    assert_eq!(totals[0].peak_used_bytes, Some(7));
    assert!(!hist[0].is_empty());
}

fn gpm(activity: Option<f64>, occupancy: Option<f64>) -> Tick {
    Tick {
        gpus: vec![
            GpuTick {
                sm_activity: activity,
                sm_occupancy: occupancy,
                ..GpuTick::default()
            },
            GpuTick::default(),
        ],
        mig_used: vec![None, None],
    }
}

/// GPM's SM activity and occupancy are the GPU's, like its utilization: each attempt on
/// the GPU gets the mean of the readings taken while it ran (under MPS too), a reading
/// before it began or one without GPM counts nothing, and a GPU without GPM (the second)
/// gives `None`, which leaves the serialized figures as they were.
#[test]
fn gpm_readings_are_each_attempts_mean_of_its_gpu() {
    for process_util in [true, false] {
        let mut f = Fold::new(
            map(vec![Some(0), Some(0), Some(1)], vec![false; 3], 2),
            process_util,
        );
        f.begin(1, 0, 0.0);
        f.apply(1.0, &gpm(Some(14.0), Some(9.0)), |_| None);
        f.begin(2, 1, 1.5);
        f.begin(3, 2, 1.5);
        f.apply(2.0, &gpm(Some(28.0), None), |_| None);
        f.apply(3.0, &gpm(None, None), |_| None);
        f.apply(4.0, &gpm(Some(30.0), Some(f64::NAN)), |_| None);
        let a = f.end(1).unwrap();
        let b = f.end(2).unwrap();
        let c = f.end(3).unwrap();
        assert_eq!(a.mean_sm_activity_percent, Some((14.0 + 28.0 + 30.0) / 3.0));
        assert_eq!(a.mean_sm_occupancy_percent, Some(9.0));
        assert_eq!(b.mean_sm_activity_percent, Some(29.0));
        assert_eq!(b.mean_sm_occupancy_percent, None);
        assert_eq!(c.mean_sm_activity_percent, None);
        assert_eq!(c.mean_sm_occupancy_percent, None);
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("sm_"), "{json}");
        let back: AttemptGpu = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }
}
