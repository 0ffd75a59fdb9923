//! Unit tests of [`super`].

use super::*;
use crate::mode::Mode;

fn plan(model: &str, mode: &str) -> Result<Vec<PlannedInstance>, PlanError> {
    let Mode::Mig(req) = mode.parse::<Mode>().unwrap() else {
        panic!("not mig")
    };
    builtin_catalog(model).unwrap().plan(&req)
}

fn shape(v: &[PlannedInstance]) -> Vec<(String, u32, u32)> {
    v.iter()
        .map(|i| (i.profile.clone(), i.placement.start, i.placement.size))
        .collect()
}

#[test]
fn fill_gives_the_maximum_on_a100_40gb() {
    assert_eq!(plan("A100-40GB", "mig:3g").unwrap().len(), 2);
    assert_eq!(plan("A100-40GB", "mig:2g").unwrap().len(), 3);
    assert_eq!(plan("A100-40GB", "mig:1g").unwrap().len(), 7);
    assert_eq!(plan("A100-40GB", "mig:4g").unwrap().len(), 1);
    assert_eq!(plan("A100-40GB", "mig:7g").unwrap().len(), 1);
    assert_eq!(plan("A100-40GB", "mig:1g.10gb").unwrap().len(), 4);
    let p = plan("A100-40GB", "mig:3g").unwrap();
    assert_eq!(
        shape(&p),
        vec![("3g.20gb".into(), 0, 4), ("3g.20gb".into(), 4, 4)]
    );
}

#[test]
fn every_model_every_profile() {
    for (name, alias) in known_models() {
        for m in [name, alias] {
            let cat = builtin_catalog(m).unwrap();
            let four_slots = name == "NVIDIA A30";
            for p in &cat.profiles {
                let req = MigRequest::Fill(ProfileSel::Short(p.slices));
                let got = cat.plan(&req).unwrap();
                let want = match (four_slots, p.slices) {
                    (false, 1) => 7,
                    (false, 2) => 3,
                    (false, 3) => 2,
                    (true, 1) => 4,
                    (true, 2) => 2,
                    _ => 1,
                };
                assert_eq!(got.len(), want, "{m} {}", p.name);
                assert!(!p.placements.is_empty(), "{m} {}", p.name);
            }
        }
    }
    // Names as NVML reports them, also without the "NVIDIA " prefix of old drivers.
    for name in [
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA A30",
        "NVIDIA H200 NVL",
        "A100-SXM4-40GB",
        "nvidia h100 80gb hbm3",
    ] {
        assert!(builtin_catalog(name).is_ok(), "{name}");
    }
    assert_eq!(plan("A30", "mig:2g").unwrap()[0].profile, "2g.12gb");
    assert_eq!(plan("H100-NVL", "mig:3g").unwrap()[0].profile, "3g.47gb");
    assert_eq!(plan("H200", "mig:1g").unwrap()[0].profile, "1g.18gb");
    assert_eq!(plan("H200", "mig:1g.35gb").unwrap().len(), 4);
    assert_eq!(plan("A100-80GB", "mig:1g").unwrap()[0].profile, "1g.10gb");
    assert_eq!(
        plan("NVIDIA H100 80GB HBM3", "mig:3g").unwrap()[0].profile,
        "3g.40gb"
    );
}

#[test]
fn mixed_layouts() {
    let p = plan("A100-40GB", "mig:4g,2g,1g").unwrap();
    assert_eq!(
        shape(&p),
        vec![
            ("4g.20gb".into(), 0, 4),
            ("2g.10gb".into(), 4, 2),
            ("1g.5gb".into(), 6, 1)
        ]
    );
    let p = plan("A100-40GB", "mig:3g,2g,1g,1g").unwrap();
    assert_eq!(p.len(), 4);
    let mut used = 0u64;
    for i in &p {
        assert_eq!(used & i.placement.mask(), 0, "overlap in {p:?}");
        used |= i.placement.mask();
    }
    assert!(plan("A100-40GB", "mig:4g,3g").is_ok());
    assert!(plan("A100-40GB", "mig:2gx2,1gx3").is_ok());
    assert!(plan("A100-40GB", "mig:3g,1gx4").is_ok());
    assert!(plan("A100-40GB", "mig:3g,2g,1gx3").is_err());
}

#[test]
fn invalid_layouts() {
    for bad in [
        "mig:4gx2",
        "mig:7g,1g",
        "mig:3gx3",
        "mig:2gx4",
        "mig:3gx2,1g",
    ] {
        let err = plan("A100-40GB", bad).expect_err(bad).to_string();
        assert!(
            err.contains("layouts that fit include mig:7gx1"),
            "{bad}: {err}"
        );
        assert!(err.contains("mig:4g,2g,1g"), "{err}");
        assert!(!err.contains('\n'));
    }
    // The A30 (4 slots) cannot take the usual mixes: the examples name what fits
    // there (and finding them must not recurse into the error itself).
    let err = plan("A30", "mig:2gx2,1gx3").unwrap_err().to_string();
    assert!(err.contains("mig:4gx1, mig:2gx2, mig:1gx4"), "{err}");
    let err = plan("A100-40GB", "mig:3g.40gb").unwrap_err().to_string();
    assert!(err.contains("has no MIG profile 3g.40gb"), "{err}");
    assert!(err.contains("3g.20gb"), "{err}");
    let err = builtin_catalog("GeForce").unwrap_err().to_string();
    assert!(err.contains("driver's own tables"), "{err}");
    assert!(
        err.contains("NVIDIA A100 80GB PCIe (A100-80GB-PCIE)"),
        "{err}"
    );
}

#[test]
fn mps_clients_inside_instances_scale_with_their_slices() {
    let a100 = builtin_catalog("A100-40GB").unwrap();
    // 48 in proportion to the instance's compute slices, of 7.
    let limits: Vec<u32> = [1, 2, 3, 4, 7]
        .iter()
        .map(|&s| a100.mps_client_limit(s))
        .collect();
    assert_eq!(limits, [6, 13, 20, 27, 48]);
    // The A30 has four slices: its 1g takes a quarter.
    let a30 = builtin_catalog("A30").unwrap();
    assert_eq!(a30.mps_client_limit(1), 12);
    assert_eq!(a30.mps_client_limit(4), 48);
    // The smallest instance of a layout decides.
    let p = plan("A100-40GB", "mig:4g,2g,1g").unwrap();
    assert!(a100.check_mps_clients("m", &p, 6).is_ok());
    let err = a100
        .check_mps_clients("mig:4g,2g,1g:mps:7", &p, 7)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "mig:4g,2g,1g:mps:7: a 1g.5gb instance serves at most 6 MPS client(s) (MPS's 48 \
             scaled to its 1 of 7 compute slices); ask for :mps:6 or fewer, or a larger profile"
    );
    let p = plan("A100-40GB", "mig:3g").unwrap();
    assert!(a100.check_mps_clients("m", &p, 20).is_ok());
    assert!(a100.check_mps_clients("m", &p, 21).is_err());
}

#[test]
fn layout_strings() {
    let p = plan("A100-40GB", "mig:3g").unwrap();
    assert_eq!(layout_mode_string(&p), "mig:3g.20gbx2");
    let p = plan("A100-40GB", "mig:4g,2g,1g").unwrap();
    assert_eq!(layout_mode_string(&p), "mig:4g.20gb,2g.10gb,1g.5gb");
    let p = plan("A100-40GB", "mig:4gx1").unwrap();
    assert_eq!(layout_mode_string(&p), "mig:4g.20gbx1");
    // The summary is itself a valid mode that plans to the same layout.
    for m in ["mig:3g", "mig:4g,2g,1g", "mig:1g", "mig:3g,2g,1g,1g"] {
        let p = plan("A100-40GB", m).unwrap();
        let again = plan("A100-40GB", &layout_mode_string(&p)).unwrap();
        assert_eq!(shape(&p), shape(&again), "{m}");
    }
}

#[test]
fn placements_past_the_slot_space_overlap_everything() {
    let mask = |start, size| Placement { start, size }.mask();
    assert_eq!(mask(0, 1), 1);
    assert_eq!(mask(4, 2), 0b11_0000);
    assert_eq!(mask(3, 0), 0, "an empty placement takes no slot");
    assert_eq!(mask(56, 8), 0xff << 56, "ends at the last slot: a real one");
    for (start, size) in [(60, 8), (64, 1), (0, 65), (u32::MAX, 1), (1, u32::MAX)] {
        assert_eq!(mask(start, size), u64::MAX, "{start}+{size}");
    }
    // A driver that lists such a placement gets it planned alone, never beside another.
    let catalog = Catalog {
        model: "odd".into(),
        memory_total_mib: 1024,
        profiles: vec![Profile {
            id: 19,
            nvml_index: 0,
            name: "1g.1gb".into(),
            slices: 1,
            max_instances: 7,
            memory_mib: 128,
            sms: 1,
            placements: vec![
                Placement { start: 70, size: 1 },
                Placement { start: 0, size: 1 },
                Placement { start: 1, size: 1 },
            ],
        }],
    };
    let p = catalog
        .plan(&MigRequest::Fill(ProfileSel::Short(1)))
        .unwrap();
    assert_eq!(
        shape(&p),
        vec![("1g.1gb".into(), 0, 1), ("1g.1gb".into(), 1, 1)]
    );
}
