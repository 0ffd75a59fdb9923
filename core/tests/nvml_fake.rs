//! `NvmlGpus` against the fake libnvidia-ml (`tests/fake-nvml`).
//!
//! The fake is a dev-dependency of colloc-core, so `cargo test -p colloc-core` builds
//! `libfake_nvml.so` into `target/debug/deps/` next to this test binary. To use another
//! build, set `COLLOC_FAKE_NVML_LIB` to its path (or run `cargo build -p fake-nvml`,
//! which puts one in `target/debug/`).
//!
//! The fake reads `COLLOC_FAKE_NVML_STATE` on every call and the environment is
//! process-wide, so the tests run one at a time (a mutex), each with its own state file.
//! What the fake holds is checked by reading its state file directly, not only through
//! `NvmlGpus`, so a bug on one side cannot hide behind the same bug on the other.
//!
//! One file, though long: all but one of its tests take their machine from the `Fake`
//! fixture here, which holds the `SERIAL` lock on the process environment, and many share
//! the config helpers further down (`cfg_in`, `fake_device_files`, `spec`); split, those
//! would have to move to a shared module and each part would be one more test binary to
//! build and link.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use colloc_core::gpu::{GpuControl, GpuError, HoldReason, MigMode};
use colloc_core::mig::{self, Placement};
use colloc_core::nvml::NvmlGpus;
use fake_nvml::state::{Fault, Fresh, State};
use fake_nvml::store::{ctl_change, Locked};

static SERIAL: Mutex<()> = Mutex::new(());

/// One test's fake machine: its own state file, the lock on the process environment.
struct Fake {
    _guard: MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    state: PathBuf,
}

impl Fake {
    fn new(gpus: &str) -> Fake {
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("state.json");
        std::env::set_var("COLLOC_FAKE_NVML_STATE", &state);
        std::env::set_var("COLLOC_FAKE_NVML_GPUS", gpus);
        Fake {
            _guard: guard,
            _dir: dir,
            state,
        }
    }

    /// A fake answering as driver generation `driver`, MIG on or off at start.
    fn with(gpus: &str, driver: u32, mig: bool) -> Fake {
        let fake = Fake::new(gpus);
        fake.change(|st| {
            *st = State::fresh_list_with(gpus, &Fresh { driver, mig }, 0)?;
            Ok(())
        });
        fake
    }

    fn open(&self) -> NvmlGpus {
        NvmlGpus::open(fake_nvml::locate::library().to_str().expect("utf-8 path"))
            .expect("open the fake NVML")
    }

    fn read(&self) -> State {
        read_state(&self.state)
    }

    fn change(&self, f: impl FnOnce(&mut State) -> Result<(), String>) {
        ctl_change(&self.state, f).expect("change the fake state");
    }
}

fn read_state(path: &Path) -> State {
    let locked = Locked::open(path).expect("lock state");
    locked.read().expect("read state").0
}

fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

#[test]
fn lists_gpus_as_the_state_file_has_them() {
    let fake = Fake::new("A100-40GB,H200");
    let gpus = fake.open();
    let list = gpus.gpus().expect("gpus");
    let st = fake.read();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].name, "NVIDIA A100-SXM4-40GB");
    assert_eq!(list[1].name, "NVIDIA H200");
    for (i, g) in list.iter().enumerate() {
        assert_eq!(g.index, i as u32);
        assert_eq!(g.uuid, st.gpus[i].uuid);
        assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
        assert_eq!(
            g.mig_mode,
            Some(MigMode {
                current: true,
                pending: true
            })
        );
    }
    assert_eq!(mib(list[0].memory_total), 40960);
    assert_eq!(mib(list[1].memory_total), 143771);
    assert!(gpus
        .driver_version()
        .expect("driver version")
        .starts_with("580."));
    assert!(matches!(gpus.catalog(2), Err(GpuError::NoSuchGpu(2))));
}

/// A catalog's rows as the tables state them: id, index, name, slices, instances, MiB,
/// SMs, placements.
type Row = (u32, u32, String, u32, u32, u64, u32, Vec<Placement>);

fn rows(c: &mig::Catalog) -> Vec<Row> {
    c.profiles
        .iter()
        .map(|p| {
            (
                p.id,
                p.nvml_index,
                p.name.clone(),
                p.slices,
                p.max_instances,
                p.memory_mib,
                p.sms,
                p.placements.clone(),
            )
        })
        .collect()
}

#[test]
fn builtin_tables_match_the_fake_drivers_tables() {
    // Two tables written apart, each citing its readings: they must agree on every row
    // of every model either knows (the profiles every driver generation lists).
    let fake_models: Vec<&str> = fake_nvml::tables::MODELS.iter().map(|m| m.name).collect();
    for (name, _) in mig::known_models() {
        assert!(fake_models.contains(&name), "the fake has no {name}");
    }
    for m in fake_nvml::tables::MODELS {
        let builtin = mig::builtin_catalog(m.name).expect("a built-in table");
        assert_eq!(builtin.memory_total_mib, m.memory_mib, "{}", m.name);
        let want: Vec<Row> = m
            .listed(535)
            .map(|p| {
                let placements = p
                    .placements()
                    .into_iter()
                    .map(|(start, size)| Placement { start, size })
                    .collect();
                (
                    p.id,
                    p.index,
                    p.name.to_string(),
                    p.slices,
                    p.instances,
                    p.memory_mib,
                    p.sms,
                    placements,
                )
            })
            .collect();
        assert_eq!(rows(&builtin), want, "{}", m.name);
    }
}

#[test]
fn catalog_read_through_nvml_matches_the_builtin_tables_on_every_model() {
    let all: Vec<&str> = fake_nvml::tables::MODELS.iter().map(|m| m.alias).collect();
    let fake = Fake::with(&all.join(","), 570, true);
    let gpus = fake.open();
    for (i, info) in gpus.gpus().expect("gpus").iter().enumerate() {
        let got = gpus.catalog(i as u32).expect("catalog");
        let want = mig::builtin_catalog(&info.name).expect("built-in model");
        assert_eq!(got.model, want.model);
        assert_eq!(rows(&got), rows(&want), "{}", info.name);
        // The planner gives the same answer on what NVML reports as on the tables.
        for mode in [
            "mig:3g",
            "mig:1g",
            "mig:4g,2g,1g",
            "mig:2gx2,1gx3",
            "mig:2g",
        ] {
            let colloc_core::mode::Mode::Mig(req) = mode.parse().expect("mode") else {
                panic!("{mode} is not a MIG mode")
            };
            assert_eq!(got.plan(&req), want.plan(&req), "{} {mode}", info.name);
        }
    }
}

#[test]
fn every_profile_the_driver_lists_counts_as_an_instance_colloc_does_not_own() {
    // A driver and card that list the all-media profiles at indexes 15 and 16 (nvml.h API
    // 13; the lent H200 on R580 does not, but Blackwell cards do): colloc asked 0-14 only,
    // so another user's +me.all instance was invisible to the "not ours" check.
    let fake = Fake::with("H100-80GB", 580, true);
    fake.change(|st| {
        st.all_media = true;
        let gi = st
            .create_gi(0, 65, Some((0, 1)))
            .map_err(|c| c.to_string())?;
        st.create_ci(0, gi, 0).map_err(|c| c.to_string())?;
        Ok(())
    });
    let gpus = fake.open();
    let cat = gpus.catalog(0).expect("catalog");
    let me_all = cat.by_id(65).expect("the all-media profile is listed");
    assert_eq!(me_all.nvml_index, 15);
    assert!(me_all.is_variant(), "never picked by a short name");
    let list = gpus.instances(0).expect("instances");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].profile, "1g.10gb+me.all");
    // And the prolog refuses the GPU instead of failing a create on it.
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = cfg_in(tmp.path());
    let spec = colloc_core::reconfig::JobSpec {
        job: 1,
        uid: 0,
        gid: 0,
        gpus: vec![0],
        mode: "mig:1g".parse().expect("mode"),
    };
    let out = colloc_core::reconfig::prolog(&cfg, &gpus, &spec).expect("no node fault");
    let colloc_core::reconfig::Outcome::Refused(r) = out else {
        panic!("not refused: {out:?}")
    };
    assert!(
        r.message.contains("1g.10gb+me.all at start 0"),
        "{}",
        r.message
    );
}

#[test]
fn creates_and_destroys_two_3g_instances() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    let a = gpus
        .create_instance(0, 9, Placement { start: 0, size: 4 })
        .expect("first 3g.20gb");
    let b = gpus
        .create_instance(0, 9, Placement { start: 4, size: 4 })
        .expect("second 3g.20gb");
    for inst in [&a, &b] {
        assert_eq!(inst.profile, "3g.20gb");
        assert_eq!(inst.profile_id, 9);
        assert_eq!(inst.ci_ids.len(), 1);
        let uuid = inst.uuid.as_deref().expect("MIG UUID");
        assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
    }
    assert_ne!(a.gi_id, b.gi_id);
    assert_ne!(a.uuid, b.uuid);

    // The fake holds exactly these, each with one compute instance of 3 slices.
    let st = fake.read();
    let gis = &st.gpus[0].gis;
    assert_eq!(gis.len(), 2);
    for (gi, inst) in gis.iter().zip([&a, &b]) {
        assert_eq!(
            (gi.id, gi.start, gi.size),
            (inst.gi_id, inst.placement.start, 4)
        );
        assert_eq!(gi.cis.len(), 1);
        assert_eq!(gi.cis[0].slices, 3);
        assert_eq!(Some(gi.cis[0].uuid.as_str()), inst.uuid.as_deref());
    }
    // And NvmlGpus reads back what it made.
    assert_eq!(
        gpus.instances(0).expect("instances"),
        vec![a.clone(), b.clone()]
    );

    gpus.destroy_instance(0, a.gi_id).expect("destroy a");
    gpus.destroy_instance(0, b.gi_id).expect("destroy b");
    assert!(fake.read().gpus[0].gis.is_empty());
    assert!(gpus.instances(0).expect("instances").is_empty());
    let gone = gpus.destroy_instance(0, a.gi_id).expect_err("already gone");
    assert!(gone.is_not_found(), "{gone}");
}

#[test]
fn overlapping_placement_is_refused_with_insufficient_resources() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    gpus.create_instance(0, 9, Placement { start: 0, size: 4 })
        .expect("3g.20gb at 0");
    // A 2g.10gb at 2 overlaps slots 2-3 of the 3g at 0.
    let err = gpus
        .create_instance(0, 14, Placement { start: 2, size: 2 })
        .expect_err("overlap");
    assert!(err.is_insufficient_resources(), "{err}");
    let err = gpus
        .create_instance(0, 9, Placement { start: 0, size: 4 })
        .expect_err("same place");
    assert!(err.is_insufficient_resources(), "{err}");
    assert!(
        err.to_string()
            .contains("nvmlDeviceCreateGpuInstanceWithPlacement"),
        "{err}"
    );
    assert_eq!(fake.read().gpus[0].gis.len(), 1, "nothing more was made");
}

#[test]
fn destroy_is_refused_while_a_process_runs_on_the_instance() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    let inst = gpus
        .create_instance(0, 19, Placement { start: 3, size: 1 })
        .expect("1g.5gb");
    fake.change(|st| st.attach(0, Some(inst.gi_id), 4321, 512, 0));
    let procs = gpus.processes(0).expect("processes");
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 4321);
    assert_eq!(procs[0].gi_id, Some(inst.gi_id));
    assert_eq!(procs[0].used_memory, Some(512 * 1024 * 1024));

    let err = gpus.destroy_instance(0, inst.gi_id).expect_err("in use");
    assert!(err.is_in_use(), "{err}");
    let st = fake.read();
    assert_eq!(st.gpus[0].gis.len(), 1, "the instance stays");
    assert_eq!(
        st.gpus[0].gis[0].cis.len(),
        1,
        "and so does its compute instance"
    );

    fake.change(|st| {
        st.detach(4321);
        Ok(())
    });
    gpus.destroy_instance(0, inst.gi_id)
        .expect("destroy after detach");
    assert!(fake.read().gpus[0].gis.is_empty());
}

#[test]
fn failed_second_compute_instance_leaves_no_gpu_instance_behind() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    fake.change(|st| {
        st.faults.insert(
            "nvmlGpuInstanceCreateComputeInstance".into(),
            Fault {
                call: 2,
                code: "NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
                seen: 0,
                times: 1,
            },
        );
        Ok(())
    });
    let first = gpus
        .create_instance(0, 9, Placement { start: 0, size: 4 })
        .expect("first CI is call 1");
    let err = gpus
        .create_instance(0, 9, Placement { start: 4, size: 4 })
        .expect_err("second CI fails");
    assert!(err.is_insufficient_resources(), "{err}");
    assert!(
        err.to_string()
            .contains("nvmlGpuInstanceCreateComputeInstance"),
        "{err}"
    );
    let st = fake.read();
    assert_eq!(st.fired.len(), 1, "the fault fired once");
    let ids: Vec<u32> = st.gpus[0].gis.iter().map(|g| g.id).collect();
    assert_eq!(
        ids,
        vec![first.gi_id],
        "the second GPU instance was destroyed again"
    );
    assert!(st.faults.is_empty());
}

#[test]
fn mig_mode_changes_at_once_on_hopper_and_when_an_a100_is_idle() {
    // Hopper: at once, no reset (the old fake kept it pending until a reset).
    let fake = Fake::new("H200,A100-80GB");
    let gpus = fake.open();
    let ch = gpus.set_mig_mode(0, false).expect("ask for MIG off");
    assert_eq!((ch.mode.current, ch.activation), (false, 0));
    assert!(gpus.instances(0).expect("instances").is_empty());
    let err = gpus
        .create_instance(0, 19, Placement { start: 0, size: 1 })
        .expect_err("MIG off");
    assert!(matches!(err, GpuError::NotMig(0)), "{err}");
    // Hopper answers profiles and placements with MIG off; the fake does too.
    let cat = gpus.catalog(0).expect("catalog with MIG off");
    assert_eq!(cat.by_id(19).expect("1g.18gb").placements.len(), 7);
    // An idle A100: the driver resets it itself, the change is immediate.
    let ch = gpus.set_mig_mode(1, false).expect("A100 MIG off");
    assert!(ch.took_effect(false), "{ch:?}");
    // An A100 that nvidia-persistenced holds: pending, IN_USE in activationStatus.
    fake.change(|st| st.hold(1, None, "nvidia-persistenced", None));
    let ch = gpus
        .set_mig_mode(1, true)
        .expect("the call itself succeeds");
    assert_eq!(ch.activation, 19);
    assert_eq!(
        ch.mode,
        MigMode {
            current: false,
            pending: true
        }
    );
    assert!(ch.why_pending(1, true).contains("nvidia-persistenced"));
    fake.change(|st| {
        st.release(1, None);
        st.reset(1).map_err(|c| format!("reset: {c}"))
    });
    assert_eq!(
        gpus.gpus().expect("gpus")[1].mig_mode,
        Some(MigMode {
            current: true,
            pending: true
        })
    );
}

#[test]
fn an_a100_with_mig_off_plans_from_the_builtin_tables() {
    // nvml.h: profile queries answer NOT_SUPPORTED without MIG mode; colloc falls back
    // to its own table (the old fake answered, so this path never ran).
    let fake = Fake::with("A100-40GB", 580, false);
    let gpus = fake.open();
    let raw = gpus.catalog(0).expect("catalog");
    assert!(raw.profiles.is_empty(), "{raw:?}");
    let info = gpus.gpus().expect("gpus").remove(0);
    let cat = colloc_core::reconfig::catalog_for(&gpus, &info).expect("built-in");
    assert_eq!(cat, mig::builtin_catalog("A100-40GB").expect("table"));
}

#[test]
fn mode_change_is_pending_while_a_process_runs() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    fake.change(|st| {
        st.gpus[0].mig_current = false;
        st.gpus[0].mig_pending = false;
        st.attach(0, None, 99, 100, 40)
    });
    // nvml.h: the call succeeds and activationStatus says IN_USE (it used to be
    // refused outright, which is not what the driver does).
    let ch = gpus.set_mig_mode(0, true).expect("the call succeeds");
    assert_eq!((ch.activation, ch.mode.current), (19, false));
    assert!(fake.read().gpus[0].mig_pending);
    // Whole-GPU process records carry no instance id.
    let procs = gpus.processes(0).expect("processes");
    assert_eq!((procs[0].pid, procs[0].gi_id), (99, None));
    // With MIG off the fake, like the driver, reports utilization.
    let dev = gpus.nvml().device_by_index(0).expect("device");
    assert_eq!(dev.utilization_rates().expect("utilization").gpu, 40);
}

#[test]
fn an_unprivileged_caller_is_told_no_permission_not_zero_instances() {
    let fake = Fake::new("H200");
    let gpus = fake.open();
    let made = gpus
        .create_instance(0, 9, Placement { start: 4, size: 4 })
        .expect("3g");
    fake.change(|st| {
        st.unprivileged = true;
        Ok(())
    });
    let err = gpus.instances(0).expect_err("needs privilege");
    assert!(err.is_no_permission(), "{err}");
    // The MIG devices themselves are visible to anyone.
    let devs = gpus.mig_device_list(0).expect("MIG devices");
    assert_eq!(devs, [(2, 0, made.uuid.clone().expect("uuid"))]);
}

#[test]
fn mig_uuids_are_stable_and_old_names_resolve() {
    let fake = Fake::new("A100-80GB");
    let gpus = fake.open();
    let pl = Placement { start: 2, size: 2 };
    let a = gpus.create_instance(0, 14, pl).expect("2g");
    assert_eq!(a.gi_id, 4, "2g at slot 2 is GPU instance 4");
    gpus.destroy_instance(0, a.gi_id).expect("destroy");
    let b = gpus.create_instance(0, 14, pl).expect("2g again");
    assert_eq!(
        (b.gi_id, &b.uuid),
        (a.gi_id, &a.uuid),
        "same place, same UUID"
    );
    let gpu_uuid = gpus.gpus().expect("gpus")[0].uuid.clone();
    let dev = gpus
        .nvml()
        .device_by_uuid(format!("MIG-{gpu_uuid}/4/0").as_str())
        .expect("old form");
    assert_eq!(dev.uuid().ok(), b.uuid);
}

#[test]
fn a_mig_device_listed_late_is_waited_for_within_bounds() {
    let fake = Fake::new("H200");
    let gpus = fake.open();
    fake.change(|st| {
        st.quirks.mig_device_delay_ms = 300;
        Ok(())
    });
    let inst = gpus
        .create_instance(0, 19, Placement { start: 0, size: 1 })
        .expect("found after the delay");
    assert!(inst.uuid.is_some());
    fake.change(|st| {
        st.quirks.mig_device_delay_ms = 60_000;
        Ok(())
    });
    // The wait is what `[mig] listing_wait_s` says (default 10 s): here 1 s.
    gpus.set_listing_wait(std::time::Duration::from_secs(1));
    let t = std::time::Instant::now();
    let err = gpus
        .create_instance(0, 19, Placement { start: 1, size: 1 })
        .expect_err("never listed in time");
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("listing_wait_s"), "{err}");
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let ids: Vec<u32> = fake.read().gpus[0].gis.iter().map(|g| g.id).collect();
    assert_eq!(ids, [inst.gi_id], "the failed one was undone");
}

fn cfg_in(dir: &Path) -> colloc_core::config::Config {
    let mut cfg = colloc_core::config::Config {
        state_dir: dir.join("state"),
        run_dir: dir.join("run"),
        ..colloc_core::config::Config::default()
    };
    fake_device_files(&mut cfg, dir);
    cfg
}

/// Point `[mig]`'s device-file paths at the fake driver's capability tree (beside its
/// state file) and make the device files under `dir`.
fn fake_device_files(cfg: &mut colloc_core::config::Config, dir: &Path) {
    let state = PathBuf::from(std::env::var_os("COLLOC_FAKE_NVML_STATE").expect("a Fake"));
    let root = state.parent().expect("state dir").to_path_buf();
    cfg.mig.caps_proc_dir = root.join("proc/driver/nvidia/capabilities");
    cfg.mig.mig_minors = root.join("proc/driver/nvidia-caps/mig-minors");
    cfg.mig.proc_devices = root.join("proc/devices");
    cfg.mig.caps_dev_dir = dir.join("dev-nvidia-caps");
    cfg.mig.nvidia_modprobe = dir.join("no-nvidia-modprobe").display().to_string();
}

fn spec(job: u32, mode: &str) -> colloc_core::reconfig::JobSpec {
    colloc_core::reconfig::JobSpec {
        job,
        uid: 0,
        gid: 0,
        gpus: vec![0],
        mode: mode.parse().expect("mode"),
    }
}

#[test]
fn restore_outlasts_lingering_and_briefly_busy_instances() {
    use colloc_core::reconfig::{self, Outcome};
    let fake = Fake::new("H100-80GB");
    fake.change(|st| {
        st.quirks.linger_listings = 4;
        st.quirks.busy_after_ci_destroy = 2;
        Ok(())
    });
    let gpus = fake.open();
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = cfg_in(tmp.path());
    let out = reconfig::prolog(&cfg, &gpus, &spec(5, "mig:3g")).expect("prolog");
    assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
    let r = reconfig::restore(&cfg, Some(&gpus), 5).expect("restore");
    assert_eq!((r.destroyed, r.held.len()), (2, 0), "{r:?}");
    let st = fake.read();
    assert!(st.gpus[0].gis.is_empty() && st.gpus[0].lingering.is_empty());
    // The next job gets the GPU: no lingering instance looks foreign to it.
    let out = reconfig::prolog(&cfg, &gpus, &spec(6, "mig:3g")).expect("prolog");
    assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
    reconfig::restore(&cfg, Some(&gpus), 6).expect("restore");
}

#[test]
fn instances_dcgm_holds_mark_the_gpu_until_released() {
    use colloc_core::reconfig::{self, Outcome};
    let fake = Fake::new("A100-80GB");
    let gpus = fake.open();
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = cfg_in(tmp.path());
    reconfig::prolog(&cfg, &gpus, &spec(7, "mig:3g")).expect("prolog");
    let gi = fake.read().gpus[0].gis[0].id;
    fake.change(|st| st.hold(0, Some(gi), "dcgm", None));
    let r = reconfig::restore_within(&cfg, Some(&gpus), 7, std::time::Duration::from_millis(600))
        .expect("a held instance is no node fault");
    assert_eq!(r.held.len(), 1, "{r:?}");
    assert_eq!(
        (&r.held[0].gi_ids, &r.held[0].reason),
        (&vec![gi], &HoldReason::InUse)
    );
    assert_eq!(
        fake.read().gpus[0].gis.len(),
        1,
        "only the held one is left"
    );
    let out = reconfig::prolog(&cfg, &gpus, &spec(8, "mig:1g")).expect("prolog");
    let Outcome::Refused(refusal) = out else {
        panic!("not refused: {out:?}")
    };
    assert!(refusal.message.contains("job 7"), "{}", refusal.message);
    reconfig::restore(&cfg, Some(&gpus), 8).expect("clear the refusal");
    fake.change(|st| {
        st.release(0, None);
        Ok(())
    });
    let r = reconfig::restore(&cfg, Some(&gpus), 7).expect("restore after release");
    assert_eq!((r.jobs.as_slice(), r.destroyed), (&[7][..], 1));
    assert!(fake.read().gpus[0].gis.is_empty());
}

/// A process holding `file` open (O_PATH), as user `uid` (0: root stays), once it has.
fn hold_open_as(file: &Path, uid: u32) -> std::process::Child {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import os, sys, time\nfd = os.open(sys.argv[1], os.O_PATH)\n\
             uid = int(sys.argv[2])\nif uid:\n    os.setgid(uid); os.setuid(uid)\n\
             print('held', flush=True)\ntime.sleep(60)",
        )
        .arg(file)
        .arg(uid.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "held");
    child
}

#[test]
fn restore_kills_the_jobs_leftover_holder_and_retries_never_a_system_daemon() {
    use colloc_core::reconfig;
    if colloc_core::sys::euid() != 0 {
        return; // device files and other users' processes: root only
    }
    let fake = Fake::new("A100-80GB");
    let gpus = fake.open();
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = cfg_in(tmp.path());
    let mut job = spec(11, "mig:3g");
    (job.uid, job.gid) = (4242, 4242);
    reconfig::prolog(&cfg, &gpus, &job).expect("prolog");
    let gis: Vec<u32> = fake.read().gpus[0].gis.iter().map(|g| g.id).collect();
    assert_eq!(gis.len(), 2, "{gis:?}");
    let file = |gi: u32| {
        colloc_core::devfiles::instance_files(&cfg, gpus.device_minor(0), gi, &[])
            .into_iter()
            .next()
            .expect("a GI's device file")
    };
    // The job's leftover holds the first instance; DCGM (root) the second.
    let mut leftover = hold_open_as(&file(gis[0]), 4242);
    let mut dcgm = hold_open_as(&file(gis[1]), 0);
    let (l, d) = (leftover.id(), dcgm.id());
    fake.change(|st| st.hold_while(0, Some(gis[0]), "leftover", l));
    fake.change(|st| st.hold(0, Some(gis[1]), "dcgm", None));
    let r = reconfig::restore_within(&cfg, Some(&gpus), 11, std::time::Duration::from_secs(3))
        .expect("restore");
    let dcgm_alive = dcgm.try_wait().expect("try_wait").is_none();
    let _ = dcgm.kill();
    let _ = dcgm.wait();
    if !r.killed.contains(&l) {
        let _ = leftover.kill();
    }
    assert!(leftover.wait().is_ok());
    assert!(r.killed.contains(&l) && !r.killed.contains(&d), "{r:?}");
    assert!(dcgm_alive, "a root daemon was killed");
    // The leftover's instance went; DCGM's stays, named with its holder.
    assert_eq!(r.held.len(), 1, "{r:?}");
    assert_eq!(r.held[0].gi_ids, [gis[1]]);
    let pids: Vec<u32> = r.held[0].holders.iter().map(|h| h.pid).collect();
    assert_eq!(pids, [d]);
    let left: Vec<u32> = fake.read().gpus[0].gis.iter().map(|g| g.id).collect();
    assert_eq!(left, [gis[1]]);
    fake.change(|st| {
        st.release(0, None);
        Ok(())
    });
    reconfig::restore(&cfg, Some(&gpus), 11).expect("restore after release");
}

#[test]
fn a_crash_fault_kills_the_calling_process() {
    // Run the crashing call in a child process (this test binary, one test, env set).
    if std::env::var_os("COLLOC_NVML_FAKE_CRASH_CHILD").is_some() {
        let gpus =
            NvmlGpus::open(fake_nvml::locate::library().to_str().expect("utf-8")).expect("open");
        let _ = gpus.create_instance(0, 19, Placement { start: 0, size: 1 });
        unreachable!("the fake should have killed this process");
    }
    let fake = Fake::new("A100-40GB");
    fake.change(|st| {
        st.faults.insert(
            "nvmlGpuInstanceCreateComputeInstance".into(),
            Fault {
                call: 1,
                code: "crash".into(),
                seen: 0,
                times: 1,
            },
        );
        Ok(())
    });
    let status = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "a_crash_fault_kills_the_calling_process",
            "--nocapture",
        ])
        .env("COLLOC_NVML_FAKE_CRASH_CHILD", "1")
        .status()
        .expect("run child");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc_sigkill()), "{status:?}");
    // The GPU instance made before the crash is still there, for restore to clean up.
    let st = fake.read();
    assert_eq!(st.gpus[0].gis.len(), 1);
    assert!(st.gpus[0].gis[0].cis.is_empty());
    assert_eq!(st.fired[0].code, "crash");
    // And a fresh process can clean it up.
    let gpus = fake.open();
    gpus.destroy_instance(0, st.gpus[0].gis[0].id)
        .expect("clean up");
    assert!(fake.read().gpus[0].gis.is_empty());
}

fn libc_sigkill() -> i32 {
    9
}

#[test]
fn the_fake_exports_every_function_the_layer_and_colloc_run_call() {
    let fake = Fake::new("A100-40GB");
    let gpus = fake.open();
    let lib = gpus.nvml().lib();
    macro_rules! present {
        ($($f:ident),* $(,)?) => {
            vec![$((stringify!($f), lib.$f.is_ok())),*]
        };
    }
    let missing: Vec<&str> = present![
        // nvml-wrapper's init, shutdown and the safe reads NvmlGpus uses
        nvmlInit_v2,
        nvmlShutdown,
        nvmlSystemGetDriverVersion,
        nvmlDeviceGetCount_v2,
        nvmlDeviceGetHandleByIndex_v2,
        nvmlDeviceGetName,
        nvmlDeviceGetUUID,
        nvmlDeviceGetMemoryInfo_v2,
        nvmlDeviceGetMigMode,
        nvmlDeviceSetMigMode,
        nvmlDeviceGetComputeRunningProcesses_v3,
        // raw symbols of NvmlGpus
        nvmlErrorString,
        nvmlDeviceGetGpuInstanceProfileInfo,
        nvmlDeviceGetGpuInstanceProfileInfoV,
        nvmlDeviceGetGpuInstancePossiblePlacements_v2,
        nvmlDeviceCreateGpuInstanceWithPlacement,
        nvmlDeviceGetGpuInstances,
        nvmlDeviceGetGpuInstanceById,
        nvmlGpuInstanceGetInfo,
        nvmlGpuInstanceGetComputeInstanceProfileInfo,
        nvmlGpuInstanceCreateComputeInstance,
        nvmlGpuInstanceGetComputeInstances,
        nvmlComputeInstanceGetInfo_v2,
        nvmlComputeInstanceDestroy,
        nvmlGpuInstanceDestroy,
        nvmlDeviceGetMaxMigDeviceCount,
        nvmlDeviceGetMigDeviceHandleByIndex,
        nvmlDeviceGetGpuInstanceId,
        nvmlDeviceGetComputeInstanceId,
        // what `colloc run` samples through NvmlGpus::nvml()
        nvmlDeviceGetUtilizationRates,
        nvmlDeviceGetTotalEnergyConsumption,
        nvmlDeviceGetProcessUtilization,
        // GPM (Hopper and later), through NvmlGpus::gpm_sampler
        nvmlGpmQueryDeviceSupport,
        nvmlGpmSampleAlloc,
        nvmlGpmSampleFree,
        nvmlGpmSampleGet,
        nvmlGpmMetricsGet,
        // the rest of the fake's surface
        nvmlInitWithFlags,
        nvmlDeviceGetHandleByUUID,
        nvmlDeviceGetIndex,
        nvmlDeviceGetMemoryInfo,
        nvmlDeviceCreateGpuInstance,
        nvmlDeviceGetGpuInstanceRemainingCapacity,
        nvmlGpuInstanceGetComputeInstanceProfileInfoV,
        nvmlGpuInstanceGetComputeInstanceRemainingCapacity,
        nvmlGpuInstanceGetComputeInstanceById,
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
        nvmlDeviceIsMigDeviceHandle,
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(name, _)| name)
    .collect();
    assert!(missing.is_empty(), "the fake lacks {missing:?}");
    // And one it does not have is reported as missing, not as a panic.
    assert!(lib.nvmlDeviceGetGpcClkVfOffset.is_err());
}

#[test]
fn after_a_reboot_no_instance_survives_and_hopper_has_mig_off() {
    use colloc_core::reconfig::{self, Outcome};
    // Journals of an earlier boot describe instances a reboot removed (the old fake kept
    // them across its "reboot", so this was tested against instances no GPU would have).
    let fake = Fake::new("H100-80GB,A100-80GB");
    let gpus = fake.open();
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = cfg_in(tmp.path());
    let both = |job, mode: &str| colloc_core::reconfig::JobSpec {
        gpus: vec![0, 1],
        ..spec(job, mode)
    };
    let out = reconfig::prolog(&cfg, &gpus, &both(9, "mig:3g")).expect("prolog");
    assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
    let mut j = colloc_core::journal::load(&cfg, 9)
        .expect("load")
        .expect("journal");
    j.boot_id = Some("an-earlier-boot".into());
    colloc_core::journal::write(&cfg, &j).expect("write");
    fake.change(|st| {
        st.reboot();
        Ok(())
    });
    let st = fake.read();
    assert!(st.gpus.iter().all(|g| g.gis.is_empty()));
    assert_eq!(
        (st.gpus[0].mig_current, st.gpus[1].mig_current),
        (false, true)
    );
    // The next job restores the old journal (nothing to destroy) and then finds the H100
    // without MIG mode (not enabled at boot): refused with the reason, no fault. The
    // A100 kept its mode: a job there runs.
    let out = reconfig::prolog(&cfg, &gpus, &both(10, "mig:3g")).expect("no node fault");
    let Outcome::Refused(r) = out else {
        panic!("not refused: {out:?}")
    };
    assert!(r.message.contains("not in MIG mode"), "{}", r.message);
    assert!(colloc_core::journal::load(&cfg, 9).expect("load").is_none());
    reconfig::restore(&cfg, Some(&gpus), 10).expect("clear");
    let a100_only = colloc_core::reconfig::JobSpec {
        gpus: vec![1],
        ..spec(11, "mig:3g")
    };
    let out = reconfig::prolog(&cfg, &gpus, &a100_only).expect("prolog");
    assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
    reconfig::restore(&cfg, Some(&gpus), 11).expect("restore");
}
