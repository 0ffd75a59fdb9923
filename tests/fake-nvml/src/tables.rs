//! The fake's own MIG tables: GPU models, GPU instance profiles and their placements.
//!
//! Kept independent of `colloc_core::mig` on purpose: the fake is the test oracle, so a
//! mistake copied from one table into the other would go unnoticed. Sources: the NVIDIA
//! MIG User Guide, "Supported MIG Profiles", `nvidia-smi mig -lgip` listings, and for the
//! H200 what NVML reported on the lent card (shared/gpu-facts.md).

/// One GPU instance profile as NVML describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiProfile {
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// NVML profile id (`nvmlGpuInstanceProfileInfo_t.id`).
    pub id: u32,
    /// Name without the `MIG ` prefix.
    pub name: &'static str,
    /// Compute slices.
    pub slices: u32,
    /// Most instances of this profile at once.
    pub instances: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Copy engines.
    pub copy_engines: u32,
    /// Video decoders.
    pub decoders: u32,
    /// JPEG engines.
    pub jpegs: u32,
    /// Optical flow accelerators.
    pub ofas: u32,
}

/// A GPU model the fake can pretend to be.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Short alias used in `COLLOC_FAKE_NVML_GPUS`.
    pub alias: &'static str,
    /// Name as `nvmlDeviceGetName` reports it.
    pub name: &'static str,
    /// Total memory in MiB.
    pub memory_mib: u64,
    /// Its GPU instance profiles.
    pub profiles: &'static [GiProfile],
}

#[allow(clippy::too_many_arguments)]
const fn p(
    index: u32,
    id: u32,
    name: &'static str,
    slices: u32,
    instances: u32,
    memory_mib: u64,
    sms: u32,
    engines: (u32, u32, u32, u32),
) -> GiProfile {
    GiProfile {
        index,
        id,
        name,
        slices,
        instances,
        memory_mib,
        sms,
        copy_engines: engines.0,
        decoders: engines.1,
        jpegs: engines.2,
        ofas: engines.3,
    }
}

/// All models. Memory figures are what `nvidia-smi mig -lgip` prints (GiB x 1024).
pub static MODELS: &[Model] = &[
    Model {
        alias: "A100-40GB",
        name: "NVIDIA A100-SXM4-40GB",
        memory_mib: 40960,
        profiles: &[
            p(0, 19, "1g.5gb", 1, 7, 4864, 14, (1, 0, 0, 0)),
            p(1, 14, "2g.10gb", 2, 3, 9856, 28, (2, 1, 0, 0)),
            p(2, 9, "3g.20gb", 3, 2, 19968, 42, (3, 2, 0, 0)),
            p(3, 5, "4g.20gb", 4, 1, 19968, 56, (4, 2, 0, 0)),
            p(4, 0, "7g.40gb", 7, 1, 40192, 98, (7, 5, 1, 1)),
            p(7, 20, "1g.5gb+me", 1, 1, 4864, 14, (1, 1, 1, 1)),
            p(9, 15, "1g.10gb", 1, 4, 9856, 14, (1, 1, 0, 0)),
        ],
    },
    Model {
        alias: "A100-80GB",
        name: "NVIDIA A100-SXM4-80GB",
        memory_mib: 81920,
        profiles: &[
            p(0, 19, "1g.10gb", 1, 7, 9728, 14, (1, 0, 0, 0)),
            p(1, 14, "2g.20gb", 2, 3, 19968, 28, (2, 1, 0, 0)),
            p(2, 9, "3g.40gb", 3, 2, 40192, 42, (3, 2, 0, 0)),
            p(3, 5, "4g.40gb", 4, 1, 40192, 56, (4, 2, 0, 0)),
            p(4, 0, "7g.80gb", 7, 1, 80384, 98, (7, 5, 1, 1)),
            p(7, 20, "1g.10gb+me", 1, 1, 9728, 14, (1, 1, 1, 1)),
            p(9, 15, "1g.20gb", 1, 4, 19968, 14, (1, 1, 0, 0)),
        ],
    },
    Model {
        alias: "H100-80GB",
        name: "NVIDIA H100 80GB HBM3",
        memory_mib: 81559,
        profiles: &[
            p(0, 19, "1g.10gb", 1, 7, 9984, 16, (1, 1, 1, 0)),
            p(1, 14, "2g.20gb", 2, 3, 20096, 32, (2, 2, 2, 0)),
            p(2, 9, "3g.40gb", 3, 2, 40448, 60, (3, 3, 3, 0)),
            p(3, 5, "4g.40gb", 4, 1, 40448, 64, (4, 4, 4, 0)),
            p(4, 0, "7g.80gb", 7, 1, 80896, 132, (8, 7, 7, 1)),
            p(7, 20, "1g.10gb+me", 1, 1, 9984, 16, (1, 1, 1, 1)),
            p(9, 15, "1g.20gb", 1, 4, 20096, 26, (1, 1, 1, 0)),
        ],
    },
    Model {
        alias: "H200",
        name: "NVIDIA H200",
        memory_mib: 143771,
        profiles: &[
            p(0, 19, "1g.18gb", 1, 7, 16384, 16, (1, 1, 1, 0)),
            p(1, 14, "2g.35gb", 2, 3, 33280, 32, (2, 2, 2, 0)),
            p(2, 9, "3g.71gb", 3, 2, 71424, 60, (3, 3, 3, 0)),
            p(3, 5, "4g.71gb", 4, 1, 71424, 64, (4, 4, 4, 0)),
            p(4, 0, "7g.141gb", 7, 1, 143360, 132, (8, 7, 7, 1)),
            p(7, 20, "1g.18gb+me", 1, 1, 16384, 16, (1, 1, 1, 1)),
            p(9, 15, "1g.35gb", 1, 4, 33280, 26, (1, 1, 1, 0)),
        ],
    },
];

/// Memory slots of every supported model's placement space.
pub const MEMORY_SLOTS: u32 = 8;
/// Compute slices of every supported model.
pub const COMPUTE_SLICES: u32 = 7;

/// A model by alias or NVML name (case-insensitive).
pub fn model(name: &str) -> Option<&'static Model> {
    let name = name.trim();
    MODELS
        .iter()
        .find(|m| m.alias.eq_ignore_ascii_case(name) || m.name.eq_ignore_ascii_case(name))
}

impl Model {
    /// Profile by NVML profile index.
    pub fn by_index(&self, index: u32) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.index == index)
    }
    /// Profile by NVML profile id.
    pub fn by_id(&self, id: u32) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

/// Possible placements `(start, size)` of a profile, as the driver lists them.
pub fn placements(profile: &GiProfile) -> Vec<(u32, u32)> {
    let (starts, size): (&[u32], u32) = match (profile.slices, profile.index) {
        (1, 9) => (&[0, 2, 4, 6], 2), // double-memory 1-slice profile
        (1, _) => (&[0, 1, 2, 3, 4, 5, 6], 1),
        (2, _) => (&[0, 2, 4], 2),
        (3, _) => (&[0, 4], 4),
        (4, _) => (&[0], 4),
        (7, _) => (&[0], 8),
        _ => (&[], 0),
    };
    starts.iter().map(|&s| (s, size)).collect()
}

/// Compute instance profiles: (NVML CI profile index = id, slices).
pub const CI_PROFILES: &[(u32, u32)] = &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 7)];

/// The CI profile slice counts a GPU instance of `gi_slices` slices offers.
pub fn ci_allowed(gi_slices: u32, ci_slices: u32) -> bool {
    match gi_slices {
        7 => matches!(ci_slices, 1 | 2 | 3 | 4 | 7),
        4 => matches!(ci_slices, 1 | 2 | 4),
        3 => matches!(ci_slices, 1..=3),
        2 => matches!(ci_slices, 1 | 2),
        1 => ci_slices == 1,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_has_the_standard_profiles() {
        for m in MODELS {
            let idx: Vec<u32> = m.profiles.iter().map(|p| p.index).collect();
            assert_eq!(idx, [0, 1, 2, 3, 4, 7, 9], "{}", m.alias);
            let ids: Vec<u32> = m.profiles.iter().map(|p| p.id).collect();
            assert_eq!(ids, [19, 14, 9, 5, 0, 20, 15], "{}", m.alias);
            for p in m.profiles {
                // The placements never leave the 8 memory slots and a profile never has
                // more instances than placements.
                let pl = placements(p);
                assert!(pl.iter().all(|(s, z)| s + z <= MEMORY_SLOTS), "{}", p.name);
                assert!(pl.len() as u32 >= p.instances, "{} {}", m.alias, p.name);
                assert!(p.memory_mib < m.memory_mib);
            }
        }
        assert_eq!(model("h200").unwrap().name, "NVIDIA H200");
        assert_eq!(model("NVIDIA A100-SXM4-80GB").unwrap().alias, "A100-80GB");
        assert!(model("V100").is_none());
    }

    #[test]
    fn h200_matches_what_the_card_reported() {
        let m = model("H200").unwrap();
        let row = |i| {
            let p = m.by_index(i).unwrap();
            (p.id, p.name, p.slices, p.instances, p.memory_mib, p.sms)
        };
        assert_eq!(row(0), (19, "1g.18gb", 1, 7, 16384, 16));
        assert_eq!(row(7), (20, "1g.18gb+me", 1, 1, 16384, 16));
        assert_eq!(row(9), (15, "1g.35gb", 1, 4, 33280, 26));
        assert_eq!(row(1), (14, "2g.35gb", 2, 3, 33280, 32));
        assert_eq!(row(2), (9, "3g.71gb", 3, 2, 71424, 60));
        assert_eq!(row(3), (5, "4g.71gb", 4, 1, 71424, 64));
        assert_eq!(row(4), (0, "7g.141gb", 7, 1, 143360, 132));
        assert_eq!(
            placements(m.by_index(9).unwrap()),
            [(0, 2), (2, 2), (4, 2), (6, 2)]
        );
        assert_eq!(placements(m.by_index(2).unwrap()), [(0, 4), (4, 4)]);
        assert_eq!(placements(m.by_index(4).unwrap()), [(0, 8)]);
    }
}
