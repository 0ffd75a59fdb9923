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

    // H100 MIG off, pending until reset.
    ctl(&st)
        .args(["set-mig", "--gpu", "1", "off"])
        .assert()
        .success();
    assert!(json(&st).gpus[1].mig_current);
    ctl(&st).args(["reset", "--gpu", "1"]).assert().success();
    assert!(!json(&st).gpus[1].mig_current);

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
