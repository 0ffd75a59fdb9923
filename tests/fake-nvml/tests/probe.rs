//! `nvml-probe` against the fake, and the fake held to what the probe recorded on the
//! lent H200 (`fixtures/h200-r580-mig-off.{root,user}.json`).
//!
//! A fixture is a pattern: every value it states must be what the fake answers; a field
//! it leaves out (or sets to null) was not recorded and is not checked. Arrays of objects
//! with an `index` or `id` are matched by it. Fields that differ per machine (UUIDs,
//! versions, euid, library path) are never compared.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bin(name: &str) -> PathBuf {
    assert_cmd::cargo::cargo_bin(name)
}

fn fake_lib() -> PathBuf {
    let dir = bin("nvml-probe")
        .parent()
        .expect("target dir")
        .to_path_buf();
    let lib = dir.join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} missing: cargo build -p fake-nvml",
        lib.display()
    );
    lib
}

fn ctl(state: &Path, args: &[&str]) {
    let out = Command::new(bin("fake-nvml-ctl"))
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .expect("fake-nvml-ctl");
    assert!(
        out.status.success(),
        "fake-nvml-ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn probe(state: &Path) -> Value {
    let out = Command::new(bin("nvml-probe"))
        .arg("--library")
        .arg(fake_lib())
        .env("COLLOC_FAKE_NVML_STATE", state)
        .env_remove("COLLOC_FAKE_NVML_GPUS")
        .output()
        .expect("nvml-probe");
    assert!(
        out.status.success(),
        "nvml-probe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const NOT_COMPARED: &[&str] = &[
    "provenance",
    "euid",
    "library",
    "driver_version",
    "nvml_version",
    "uuid",
];

/// Where `got` differs from what `want` states, as `path: want != got` lines.
fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, _) => {}
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                if NOT_COMPARED.contains(&k.as_str()) {
                    continue;
                }
                let gv = g.get(k).unwrap_or(&Value::Null);
                differences(&format!("{path}.{k}"), wv, gv, out);
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            for (i, wv) in w.iter().enumerate() {
                let key = ["index", "id"]
                    .into_iter()
                    .find_map(|k| wv.get(k).map(|v| (k, v)));
                let gv = match key {
                    Some((k, v)) => g.iter().find(|e| e.get(k) == Some(v)),
                    None => g.get(i),
                };
                let label = key.map_or(i.to_string(), |(k, v)| format!("{k}={v}"));
                differences(
                    &format!("{path}[{label}]"),
                    wv,
                    gv.unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: recorded {w}, the fake answers {g}")),
    }
}

fn assert_matches(want: &Value, got: &Value) {
    let mut diffs = Vec::new();
    differences("", want, got, &mut diffs);
    assert!(
        diffs.is_empty(),
        "the fake differs from the recording:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn the_fake_answers_as_the_h200_did_with_mig_off() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(
        &st,
        &["init", "--gpus", "H200", "--driver", "580", "--mig", "off"],
    );
    // /proc/self belongs to the process's effective uid.
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if root {
        assert_matches(&fixture("h200-r580-mig-off.root.json"), &probe(&st));
    }
    // A normal user: the fake decides by euid, or for everyone once told.
    ctl(&st, &["unprivileged", "on"]);
    assert_matches(&fixture("h200-r580-mig-off.user.json"), &probe(&st));
}

#[test]
fn the_comparison_catches_a_difference() {
    // The checker itself: a recorded value the fake does not give is reported.
    let want: Value = serde_json::json!({
        "devices": [{"index": 0, "memory_total_mib": {"value": 1}, "uuid": "x",
                      "gpu_instance_profiles": [{"index": 5, "v1": {"ret": "NVML_SUCCESS"}}]}]
    });
    let got: Value = serde_json::json!({
        "devices": [{"index": 0, "memory_total_mib": {"value": 2}, "uuid": "y",
                      "gpu_instance_profiles": [{"index": 4}, {"index": 5, "v1": {"ret": "NVML_ERROR_NOT_SUPPORTED"}}]}]
    });
    let mut diffs = Vec::new();
    differences("", &want, &got, &mut diffs);
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert!(
        diffs.iter().any(|d| d.contains("memory_total_mib")),
        "{diffs:?}"
    );
    assert!(diffs.iter().any(|d| d.contains("index=5")), "{diffs:?}");
}

#[test]
fn the_probe_only_reads() {
    // Every function that changes a GPU crashes the caller if called; the probe runs
    // through a GPU with instances and none of them fires.
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("state.json");
    ctl(&st, &["init", "--gpus", "A100-40GB,H100-80GB"]);
    ctl(
        &st,
        &[
            "create-foreign",
            "--gpu",
            "1",
            "--profile",
            "3g.40gb",
            "--start",
            "4",
        ],
    );
    for f in [
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy",
    ] {
        ctl(&st, &["fault", f, "--code", "crash"]);
    }
    let v = probe(&st);
    let out = Command::new(bin("fake-nvml-ctl"))
        .arg("--state")
        .arg(&st)
        .args(["show", "--json"])
        .output()
        .unwrap();
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["fired"], serde_json::json!([]), "a change was called");
    // And it recorded what is there: the 3g instance (GI 2, at slot 4) and its MIG device.
    let gpu = &v["devices"][1];
    let listed = &gpu["gpu_instances"]["9"]["instances"][0];
    assert_eq!(listed["id"], 2);
    assert_eq!(listed["placement"], serde_json::json!([4, 4]));
    assert_eq!(gpu["mig_devices"][0]["gi_id"]["value"], 2);
    assert!(gpu["mig_devices"][0]["uuid"]["value"]
        .as_str()
        .unwrap()
        .starts_with("MIG-"));
    // The resolved functions are the read-only ones.
    let list = Command::new(bin("nvml-probe"))
        .arg("--list-symbols")
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(names.contains("nvmlDeviceGetGpuInstanceProfileInfoV"));
    assert!(
        !names.contains("Destroy") && !names.contains("Set"),
        "{names}"
    );
}
