//! colloc-core's built-in MIG tables held to what NVIDIA documents for every current MIG
//! GPU (`tests/fake-nvml/fixtures/documented-mig-models.json`, the file that also holds
//! the fake NVML's tables to the same figures), the plans they give, and the profile
//! names drivers changed, accepted in both forms (also in an older journal).

use std::path::Path;

use colloc_core::journal::Journal;
use colloc_core::mig::{self, Catalog, PlanError, PlannedInstance};
use colloc_core::mode::Mode;
use serde_json::Value;

fn documented() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-nvml/fixtures/documented-mig-models.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn models() -> Vec<Value> {
    documented()["models"].as_array().unwrap().clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `(id, index, name, slices, instances, memory MiB, SMs, placements)`, sorted.
type Row = (u32, u32, String, u32, u32, u64, u32, Vec<(u32, u32)>);

fn documented_rows(m: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = m["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let size = u(&p["size"]) as u32;
            (
                u(&p["id"]) as u32,
                u(&p["index"]) as u32,
                p["name"].as_str().unwrap().to_string(),
                u(&p["slices"]) as u32,
                u(&p["instances"]) as u32,
                u(&p["memory_mib"]),
                u(&p["sms"]) as u32,
                p["starts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| (u(s) as u32, size))
                    .collect(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn catalog_rows(c: &Catalog) -> Vec<Row> {
    let mut rows: Vec<Row> = c
        .profiles
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
                p.placements.iter().map(|pl| (pl.start, pl.size)).collect(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn every_documented_model_has_its_documented_table_under_every_name() {
    let models = models();
    assert_eq!(models.len(), 13);
    assert_eq!(
        mig::known_models().count(),
        models.len(),
        "core knows the documented models, no more"
    );
    for m in &models {
        let alias = m["alias"].as_str().unwrap();
        let names = m["typed_names"].as_array().unwrap();
        assert!(names.iter().any(|n| n == alias), "{alias}");
        for name in names {
            let name = name.as_str().unwrap();
            let c = mig::builtin_catalog(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(c.model, m["nvml_name"].as_str().unwrap(), "{name}");
            assert_eq!(c.memory_total_mib, u(&m["memory_total_mib"]), "{name}");
            assert_eq!(catalog_rows(&c), documented_rows(m), "{name}");
        }
        assert_eq!(
            u64::from(mig::placement_slots(alias)),
            u(&m["mem_slots"]),
            "{alias}"
        );
    }
}

fn plan(model: &str, mode: &str) -> Result<Vec<PlannedInstance>, PlanError> {
    let Ok(Mode::Mig(req)) = mode.parse::<Mode>() else {
        panic!("{mode} is not a MIG mode")
    };
    mig::builtin_catalog(model).unwrap().plan(&req)
}

fn shape(p: &[PlannedInstance]) -> Vec<(String, u32, u32)> {
    p.iter()
        .map(|i| (i.profile.clone(), i.placement.start, i.placement.size))
        .collect()
}

/// The documented standard profile of `slices` slices: not a media variant, the
/// smaller memory where two have the same slices (1g, not the double-memory 1g).
fn standard(m: &Value, slices: u64) -> Option<String> {
    m["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| u(&p["slices"]) == slices && !p["name"].as_str().unwrap().contains('+'))
        .min_by_key(|p| u(&p["memory_mib"]))
        .map(|p| p["name"].as_str().unwrap().to_string())
}

#[test]
fn plans_of_every_model() {
    for m in &models() {
        let alias = m["alias"].as_str().unwrap();
        let slots = u(&m["mem_slots"]) as u32;
        let one = standard(m, 1).unwrap();
        // mig:1g: every 1-slice placement.
        let want: Vec<_> = (0..slots - 1 + u32::from(slots == 4))
            .map(|s| (one.clone(), s, 1))
            .collect();
        assert_eq!(
            shape(&plan(alias, "mig:1g").unwrap()),
            want,
            "{alias} mig:1g"
        );
        match standard(m, 3) {
            Some(three) => {
                assert_eq!(
                    shape(&plan(alias, "mig:3g").unwrap()),
                    [(three.clone(), 0, 4), (three, 4, 4)],
                    "{alias} mig:3g"
                );
                let (four, two) = (standard(m, 4).unwrap(), standard(m, 2).unwrap());
                assert_eq!(
                    shape(&plan(alias, "mig:4g,2g,1g").unwrap()),
                    [(four, 0, 4), (two, 4, 2), (one, 6, 1)],
                    "{alias} mig:4g,2g,1g"
                );
            }
            None => {
                // The A30: four slices, no 3g; 4g+2g+1g is 7 slices.
                assert_eq!(slots, 4, "{alias}");
                let err = plan(alias, "mig:3g").unwrap_err().to_string();
                assert!(err.contains("has no MIG profile 3g"), "{err}");
                let err = plan(alias, "mig:4g,2g,1g").unwrap_err().to_string();
                assert!(
                    err.contains("needs 7 compute slices, the GPU has 4"),
                    "{err}"
                );
                assert!(err.contains("mig:2gx2"), "{err}");
            }
        }
    }
}

#[test]
fn renamed_profiles_are_accepted_in_both_forms() {
    let mut checked = 0;
    for m in &models() {
        let alias = m["alias"].as_str().unwrap();
        for (other, current) in m["renamed"].as_object().unwrap() {
            let current = current.as_str().unwrap();
            let a = plan(alias, &format!("mig:{current}")).unwrap();
            let b = plan(alias, &format!("mig:{other}")).unwrap();
            assert_eq!(shape(&a), shape(&b), "{alias}: {other} = {current}");
            assert!(a.iter().all(|i| i.profile == current), "{alias} {a:?}");
            assert_eq!(mig::other_profile_names(alias, other), [current]);
            // A node whose driver reports the other name: asking for the table's
            // name finds it there too.
            let mut c = mig::builtin_catalog(alias).unwrap();
            for p in &mut c.profiles {
                if p.name == current {
                    p.name = other.clone();
                }
            }
            let Ok(Mode::Mig(req)) = format!("mig:{current}x1").parse::<Mode>() else {
                panic!()
            };
            assert_eq!(c.plan(&req).unwrap()[0].profile, *other, "{alias}");
            checked += 1;
        }
    }
    assert!(checked >= 5, "{checked}");
    // Other models do not take those names.
    let err = plan("A100-40GB", "mig:3g.39gb").unwrap_err().to_string();
    assert!(err.contains("has no MIG profile 3g.39gb"), "{err}");
    assert!(mig::other_profile_names("H200", "3g.40gb").is_empty());
    // Both names in one layout count as one profile: 3g twice fits, three times not.
    assert_eq!(plan("A100-80GB", "mig:3g.39gb,3g.40gb").unwrap().len(), 2);
    assert!(plan("A100-80GB", "mig:3g.39gb,3g.40gbx2").is_err());
}

/// A journal written on a node whose driver named the profile 3g.39gb still reads, and
/// its mode plans to the same instances on a node (or table) that says 3g.40gb.
#[test]
fn an_older_journal_with_the_old_name_still_reads() {
    let old = r#"{
        "version": 1, "job": 41, "uid": 1000, "gid": 1000,
        "mode": "mig:3g.39gbx2", "phase": "applied",
        "gpus": [{
            "index": 0, "uuid": "GPU-8c8cb6d6-0000-4000-8000-000000000000",
            "name": "NVIDIA A100-SXM4-80GB",
            "mig_before": {"current": true, "pending": true},
            "planned": [
                {"profile": "3g.39gb", "profile_id": 9, "start": 0, "size": 4},
                {"profile": "3g.39gb", "profile_id": 9, "start": 4, "size": 4}
            ]
        }],
        "created": 1764800000
    }"#;
    let j: Journal = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(j.gpus[0].planned.len(), 2);
    let Ok(Mode::Mig(req)) = j.mode.parse::<Mode>() else {
        panic!("{}", j.mode)
    };
    let again = mig::builtin_catalog(&j.gpus[0].name)
        .unwrap()
        .plan(&req)
        .unwrap();
    let key = |p: &[PlannedInstance]| -> Vec<(u32, u32, u32)> {
        p.iter()
            .map(|i| (i.profile_id, i.placement.start, i.placement.size))
            .collect()
    };
    assert_eq!(key(&again), key(&j.gpus[0].planned));
    assert_eq!(again[0].profile, "3g.40gb");
}
