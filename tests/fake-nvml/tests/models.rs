//! The fake's MIG tables held to what NVIDIA documents for each GPU model
//! (`fixtures/documented-mig-models.json`, the one file that also holds colloc-core's
//! built-in tables to the same figures): through the tables, through the library as a
//! program sees it (`nvml-probe` on a state made from `COLLOC_FAKE_NVML_GPUS`), and the
//! H200 rows against what the lent card answered. Also where the fake puts an instance
//! created without a placement: the documented creation orders.

use std::path::{Path, PathBuf};
use std::process::Command;

use fake_nvml::state::{Fresh, State};
use fake_nvml::tables::{self, Media};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn documented() -> Vec<Value> {
    fixture("documented-mig-models.json")["models"]
        .as_array()
        .expect("models")
        .clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn starts(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("starts")
        .iter()
        .map(|s| u(s) as u32)
        .collect()
}

/// One profile row as `(index, id, name, slices, instances, memory, sms, placements)`.
type Row = (u32, u32, String, u32, u32, u64, u32, Vec<(u32, u32)>);

fn documented_rows(m: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = m["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| {
            let size = u(&p["size"]) as u32;
            (
                u(&p["index"]) as u32,
                u(&p["id"]) as u32,
                p["name"].as_str().expect("name").to_string(),
                u(&p["slices"]) as u32,
                u(&p["instances"]) as u32,
                u(&p["memory_mib"]),
                u(&p["sms"]) as u32,
                starts(&p["starts"])
                    .into_iter()
                    .map(|s| (s, size))
                    .collect(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn every_model_has_the_documented_profiles() {
    let models = documented();
    assert_eq!(
        models.len(),
        tables::MODELS.len(),
        "the fixture and the fake name the same models"
    );
    for m in &models {
        let alias = m["alias"].as_str().unwrap();
        let fake = tables::model_named(alias).unwrap_or_else(|| panic!("no fake model {alias}"));
        assert_eq!(fake.name, m["nvml_name"].as_str().unwrap(), "{alias}");
        assert_eq!(fake.memory_mib, u(&m["memory_total_mib"]), "{alias}");
        assert_eq!(u64::from(fake.mem_slots), u(&m["mem_slots"]), "{alias}");
        assert_eq!(
            u64::from(fake.compute_slices),
            u(&m["compute_slices"]),
            "{alias}"
        );
        // What the newest driver lists, without the all-media profiles (off unless a
        // test turns them on: the H200 answered NOT_SUPPORTED for them).
        let mut got: Vec<Row> = fake
            .listed(580)
            .filter(|p| p.media == Media::Standard)
            .map(|p| {
                (
                    p.index,
                    p.id,
                    p.name.to_string(),
                    p.slices,
                    p.instances,
                    p.memory_mib,
                    p.sms,
                    p.placements(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, documented_rows(m), "{alias}");
        // The NVML name also finds the model (COLLOC_FAKE_NVML_GPUS takes either).
        assert_eq!(
            tables::model_named(m["nvml_name"].as_str().unwrap()).map(|x| x.alias),
            Some(alias)
        );
    }
}

fn bin(name: &str) -> PathBuf {
    assert_cmd::cargo::cargo_bin(name)
}

#[test]
fn every_model_starts_from_the_environment_and_answers_through_nvml() {
    let models = documented();
    let aliases: Vec<&str> = models
        .iter()
        .map(|m| m["alias"].as_str().unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let lib = bin("nvml-probe").parent().unwrap().join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} missing: cargo build -p fake-nvml",
        lib.display()
    );
    let out = Command::new(bin("nvml-probe"))
        .arg("--library")
        .arg(&lib)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("COLLOC_FAKE_NVML_GPUS", aliases.join(","))
        .output()
        .expect("nvml-probe");
    assert!(
        out.status.success(),
        "nvml-probe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), models.len());
    for (m, d) in models.iter().zip(devices) {
        let alias = m["alias"].as_str().unwrap();
        assert_eq!(d["name"]["value"], m["nvml_name"], "{alias}");
        assert_eq!(
            d["memory_total_mib"]["value"], m["memory_total_mib"],
            "{alias}"
        );
        let mut got: Vec<Row> = Vec::new();
        for p in d["gpu_instance_profiles"].as_array().unwrap() {
            if p["v1"]["ret"] != "NVML_SUCCESS" {
                continue;
            }
            let v1 = &p["v1"];
            let id = u(&v1["id"]) as u32;
            let placements = d["placements"][id.to_string()]["list"]
                .as_array()
                .unwrap_or_else(|| panic!("{alias}: no placements for profile {id}"))
                .iter()
                .map(|pl| (u(&pl[0]) as u32, u(&pl[1]) as u32))
                .collect();
            let name = p["v2"]["name"].as_str().unwrap();
            got.push((
                u(&p["index"]) as u32,
                id,
                name.strip_prefix("MIG ").unwrap_or(name).to_string(),
                u(&v1["slices"]) as u32,
                u(&v1["instances"]) as u32,
                u(&v1["memory_mib"]),
                u(&v1["sms"]) as u32,
                placements,
            ));
        }
        got.sort();
        assert_eq!(got, documented_rows(m), "{alias} through NVML");
    }
}

#[test]
fn the_documented_h200_is_what_the_lent_card_answered() {
    let card = &fixture("h200-r580-mig-off.root.json")["devices"][0];
    let models = documented();
    for alias in ["H200", "H200-NVL"] {
        let m = models.iter().find(|m| m["alias"] == alias).unwrap();
        let mut answered: Vec<Row> = Vec::new();
        for p in card["gpu_instance_profiles"].as_array().unwrap() {
            if p["v1"]["ret"] != "NVML_SUCCESS" {
                continue;
            }
            let v1 = &p["v1"];
            let id = u(&v1["id"]) as u32;
            let placements = card["placements"][id.to_string()]["list"]
                .as_array()
                .unwrap()
                .iter()
                .map(|pl| (u(&pl[0]) as u32, u(&pl[1]) as u32))
                .collect();
            let name = p["v2"]["name"].as_str().unwrap();
            answered.push((
                u(&p["index"]) as u32,
                id,
                name.strip_prefix("MIG ").unwrap().to_string(),
                u(&v1["slices"]) as u32,
                u(&v1["instances"]) as u32,
                u(&v1["memory_mib"]),
                u(&v1["sms"]) as u32,
                placements,
            ));
        }
        answered.sort();
        assert_eq!(answered.len(), 7);
        assert_eq!(documented_rows(m), answered, "{alias}");
        assert_eq!(m["memory_total_mib"], card["memory_total_mib"]["value"]);
    }
}

/// Where the fake puts instances made without a placement, one after another, from an
/// empty GPU.
fn default_starts(alias: &str, create: &[&str]) -> (Vec<u32>, State) {
    let opts = Fresh {
        driver: 580,
        mig: true,
    };
    let mut st = State::fresh_list_with(alias, &opts, 0).unwrap();
    let model = tables::model_named(alias).unwrap();
    let mut got = Vec::new();
    for name in create {
        let p = model.profile_by_name(name).unwrap();
        let id = st
            .create_gi(0, p.id, None)
            .unwrap_or_else(|e| panic!("{alias} {name}: {e}"));
        got.push(st.gpus[0].gi(id).unwrap().start);
    }
    (got, st)
}

#[test]
fn without_a_placement_the_fake_places_as_the_driver_documented() {
    let doc = fixture("documented-mig-models.json");
    let seqs = doc["default_placement"].as_array().unwrap();
    assert!(seqs.len() >= 5);
    for s in seqs {
        let alias = s["model"].as_str().unwrap();
        let create: Vec<&str> = s["create"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let (got, mut st) = default_starts(alias, &create);
        assert_eq!(
            got,
            starts(&s["starts"]),
            "{alias} {create:?} ({})",
            s["source"]
        );
        if let Some(refused) = s["then_refused"].as_str() {
            let p = tables::model_named(alias)
                .unwrap()
                .profile_by_name(refused)
                .unwrap();
            assert_eq!(
                st.create_gi(0, p.id, None),
                Err(fake_nvml::state::code::INSUFFICIENT_RESOURCES),
                "{alias}: {refused} after {create:?}"
            );
        }
    }
    // The first instance of a size takes the highest place it has; "lowest free first"
    // (the fake's rule before) would have put each at 0.
    for alias in ["A100-40GB", "H100-80GB", "H200", "GH200-144GB", "B200"] {
        let m = tables::model_named(alias).unwrap();
        let by_slices = |s| {
            m.profiles
                .iter()
                .find(|p| p.slices == s && p.index < 5)
                .unwrap()
                .name
        };
        assert_eq!(default_starts(alias, &[by_slices(1)]).0, [6], "{alias}");
        assert_eq!(default_starts(alias, &[by_slices(2)]).0, [4], "{alias}");
        assert_eq!(default_starts(alias, &[by_slices(3)]).0, [4], "{alias}");
        assert_eq!(default_starts(alias, &[by_slices(7)]).0, [0], "{alias}");
    }
}
