//! `fake-nvml-ctl`, run as a user would.

use assert_cmd::Command;
use fake_nvml::state::State;

fn ctl(state: &std::path::Path) -> Command {
    let mut c = Command::cargo_bin("fake-nvml-ctl").expect("binary");
    c.env("COLLOC_FAKE_NVML_STATE", state)
        .env_remove("COLLOC_FAKE_NVML_GPUS");
    c
}

fn json(state: &std::path::Path) -> State {
    let out = ctl(state).args(["show", "--json"]).output().expect("run");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("state JSON")
}

#[test]
fn init_attach_foreign_fault_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(&st)
        .args(["init", "--gpus", "A100-80GB,H100-80GB"])
        .assert()
        .success();
    let s = json(&st);
    assert_eq!(s.gpus.len(), 2);
    assert_eq!(s.gpus[1].model, "H100-80GB");

    ctl(&st)
        .args([
            "create-foreign",
            "--gpu",
            "0",
            "--profile",
            "3g.40gb",
            "--start",
            "4",
        ])
        .assert()
        .success();
    let s = json(&st);
    assert_eq!((s.gpus[0].gis[0].start, s.gpus[0].gis[0].size), (4, 4));
    assert_eq!(s.gpus[0].gis[0].cis[0].slices, 3);
    let gi = s.gpus[0].gis[0].id.to_string();

    // The same place again: the fake driver refuses, exit 1.
    let out = ctl(&st)
        .args([
            "create-foreign",
            "--gpu",
            "0",
            "--profile",
            "3g.40gb",
            "--start",
            "4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NVML_ERROR_INSUFFICIENT_RESOURCES"));

    ctl(&st)
        .args([
            "attach",
            "--gpu",
            "0",
            "--gi",
            &gi,
            "--pid",
            "555",
            "--mem-mib",
            "100",
        ])
        .assert()
        .success();
    let out = ctl(&st)
        .args(["set-mig", "--gpu", "0", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "in use");
    ctl(&st).args(["detach", "--pid", "555"]).assert().success();
    ctl(&st).args(["detach", "--pid", "555"]).assert().code(1);

    ctl(&st)
        .args([
            "fault",
            "nvmlGpuInstanceDestroy",
            "--call",
            "2",
            "--code",
            "IN_USE",
        ])
        .assert()
        .success();
    let s = json(&st);
    assert_eq!(s.faults["nvmlGpuInstanceDestroy"].call, 2);

    // H100: MIG off takes effect at once (Hopper needs no reset; the old fake kept it
    // pending until a reset, which only an A100 needs).
    ctl(&st)
        .args(["set-mig", "--gpu", "1", "off"])
        .assert()
        .success();
    assert!(!json(&st).gpus[1].mig_current);
    // An A100 held by something (nvidia-persistenced) stays pending; its reset is
    // refused while the holder is there and applies the mode once it is gone.
    ctl(&st).args(["detach", "--pid", "555"]).assert().code(1);
    let out = ctl(&st)
        .args(["set-mig", "--gpu", "0", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "instances exist");

    let out = ctl(&st).arg("show").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("GPU 0: NVIDIA A100-SXM4-80GB"), "{text}");
    assert!(text.contains("3g.40gb at 4+4"), "{text}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    for args in [
        &["init", "--gpus", "V100"][..],
        &["fault", "nvmlX", "--code", "SOMETIMES"],
        &["fault", "notnvml", "--code", "crash"],
        &["fault", "nvmlX", "--call", "0", "--code", "crash"],
        &["set-mig", "--gpu", "0", "maybe"],
        &["init", "--gpus", "H200", "--driver", "470"],
        &["init", "--gpus", "H200", "--mig", "sometimes"],
        &["hold", "--gpu", "0", "--release-after", "0"],
        &["unprivileged", "maybe"],
    ] {
        let out = ctl(&st).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("Error: "), "{err}");
    }
    // Unknown profile or start on a default (A100-40GB) state: the valid ones are named.
    for (args, valid) in [
        (&["--profile", "3g.40gb"][..], "3g.20gb"),
        (&["--profile", "3g.20gb", "--start", "2"], "0, 4"),
    ] {
        let out = ctl(&st)
            .args(["create-foreign", "--gpu", "0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(valid),
            "{args:?}"
        );
    }
}

#[test]
fn holders_quirks_privilege_and_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(&st)
        .args([
            "init",
            "--gpus",
            "A100-80GB,H200",
            "--driver",
            "570",
            "--mig",
            "off",
        ])
        .assert()
        .success();
    let s = json(&st);
    assert_eq!(s.driver, 570);
    assert!(s.gpus.iter().all(|g| !g.mig_current));
    // A100 held as a whole (nvidia-persistenced): MIG on stays pending, with IN_USE.
    ctl(&st)
        .args(["hold", "--gpu", "0", "--name", "nvidia-persistenced"])
        .assert()
        .success();
    let out = ctl(&st)
        .args(["set-mig", "--gpu", "0", "on"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NVML_ERROR_IN_USE"));
    assert!(!json(&st).gpus[0].mig_current && json(&st).gpus[0].mig_pending);
    ctl(&st).args(["reset", "--gpu", "0"]).assert().code(1);
    ctl(&st).args(["release", "--gpu", "0"]).assert().success();
    ctl(&st).args(["release", "--gpu", "0"]).assert().code(1);
    ctl(&st).args(["reset", "--gpu", "0"]).assert().success();
    assert!(json(&st).gpus[0].mig_current);
    // Passthrough: RESET_REQUIRED.
    ctl(&st)
        .args(["init", "--gpus", "A100-40GB", "--mig", "off"])
        .assert()
        .success();
    ctl(&st)
        .args(["passthrough", "--gpu", "0", "on"])
        .assert()
        .success();
    let out = ctl(&st)
        .args(["set-mig", "--gpu", "0", "on"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("NVML_ERROR_RESET_REQUIRED"));
    // A DCGM-like holder on an instance, quirks and privilege are recorded and shown.
    ctl(&st)
        .args(["init", "--gpus", "H100-80GB"])
        .assert()
        .success();
    ctl(&st)
        .args([
            "create-foreign",
            "--gpu",
            "0",
            "--profile",
            "3g.40gb",
            "--start",
            "4",
        ])
        .assert()
        .success();
    assert_eq!(
        json(&st).gpus[0].gis[0].id,
        2,
        "3g at slot 4 is GPU instance 2"
    );
    ctl(&st)
        .args(["hold", "--gpu", "0", "--gi", "2", "--release-after", "3"])
        .assert()
        .success();
    ctl(&st)
        .args(["hold", "--gpu", "0", "--gi", "5"])
        .assert()
        .code(1);
    ctl(&st)
        .args([
            "quirks",
            "--linger-listings",
            "2",
            "--mig-device-delay-ms",
            "300",
        ])
        .assert()
        .success();
    ctl(&st).args(["unprivileged", "on"]).assert().success();
    let s = json(&st);
    assert_eq!(s.gpus[0].holders[0].release_after, Some(3));
    assert_eq!(
        (s.quirks.linger_listings, s.quirks.mig_device_delay_ms),
        (2, 300)
    );
    assert!(s.unprivileged);
    let text = String::from_utf8_lossy(&ctl(&st).arg("show").output().unwrap().stdout).into_owned();
    assert!(text.contains("held by dcgm on GI 2"), "{text}");
    assert!(text.contains("no callers privileged"), "{text}");
    // Reboot: nothing survives, Hopper comes up with MIG off.
    ctl(&st).arg("reboot").assert().success();
    let s = json(&st);
    assert!(s.gpus[0].gis.is_empty() && s.gpus[0].holders.is_empty());
    assert!(!s.gpus[0].mig_current);
    assert_eq!(s.boots, 1);
}

#[test]
fn cuda_sees_no_whole_gpu_in_mig_mode_only_its_instances() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(&st)
        .args(["init", "--gpus", "A100-40GB,H200", "--mig", "off"])
        .assert()
        .success();
    let s = json(&st);
    let (a100, h200) = (s.gpus[0].uuid.clone(), s.gpus[1].uuid.clone());
    let seen = |visible: &str| {
        let out = ctl(&st)
            .args(["cuda-devices", "--visible", visible])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    assert_eq!(seen("0,1"), (Some(0), format!("{a100}\n{h200}")));
    ctl(&st)
        .args(["set-mig", "--gpu", "0", "on"])
        .assert()
        .success();
    // MIG on: the whole GPU is no CUDA device, by index or by UUID.
    assert_eq!(seen("0"), (Some(0), String::new()));
    assert_eq!(seen(&a100), (Some(0), String::new()));
    assert_eq!(seen("1"), (Some(0), h200.clone()));
    ctl(&st)
        .args(["create-foreign", "--gpu", "0", "--profile", "7g.40gb"])
        .assert()
        .success();
    let mig = json(&st).gpus[0].gis[0].cis[0].uuid.clone();
    assert_eq!(seen(&mig), (Some(0), mig.clone()));
    // CUDA stops at the first entry that names no device.
    assert_eq!(
        seen(&format!("MIG-nonesuch,{mig}")),
        (Some(0), String::new())
    );
    // Unset: bad input.
    let out = ctl(&st)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .arg("cuda-devices")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `gpm` sets what GPM reads of a GPU's SMs; values that are no percentage exit 2 and
/// change nothing; an unknown GPU is a refusal (1).
#[test]
fn gpm_sets_the_sm_activity_and_occupancy_a_gpu_shows() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(&st)
        .args(["init", "--gpus", "H100-80GB", "--mig", "off"])
        .assert()
        .success();
    ctl(&st)
        .args([
            "gpm",
            "--gpu",
            "0",
            "--sm-activity",
            "14",
            "--occupancy",
            "9",
        ])
        .assert()
        .success();
    let load = json(&st).gpus[0].gpm.clone().expect("a GPM load");
    assert_eq!((load.sm_activity, load.sm_occupancy), (14.0, 9.0));
    let out = ctl(&st)
        .args(["gpm", "--gpu", "0", "--sm-activity", "140"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("percentages from 0 to 100"));
    assert_eq!(json(&st).gpus[0].gpm.clone().unwrap().sm_activity, 14.0);
    ctl(&st)
        .args(["gpm", "--gpu", "3", "--sm-activity", "10"])
        .assert()
        .code(1);
}
