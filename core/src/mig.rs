//! MIG profiles of the supported GPU models and the layout planner.
//!
//! Placements live in NVML's memory-slot space: an A100/H100/H200 has 8 slots; a 1-slice
//! profile starts at 0–6 (size 1), 2g at 0, 2, 4 (size 2), 3g at 0 or 4 (size 4), 4g at 0
//! (size 4), 7g at 0 (size 8); the double-memory 1-slice profile at 0, 2, 4, 6 (size 2).
//! The A30 has 4 slots: 1g at 0–3, 2g at 0 or 2, 4g at 0. Two instances fit together when
//! their placements do not overlap (and each profile's instance limit holds), which is the
//! rule the driver applies.
//!
//! The built-in tables follow the drivers' `nvidia-smi mig -lgip` readings and the NVIDIA
//! MIG User Guide ("Supported MIG Profiles"); for the H200, what NVML reported on the lent
//! card (see the comment above `MODELS`). On a real GPU colloc asks NVML instead and uses
//! these tables only where NVML cannot answer (an A100 with MIG off) and for
//! `colloc plan --gpu-model`.
//!
//! Just past 800 lines: the per-model tables (about 150 lines) stay beside the planner
//! that reads them, so a model's profiles and the placement rules they obey read together.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::mode::{MigItem, MigRequest, ProfileSel};

/// Where an instance sits in the GPU's memory-slot space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Placement {
    /// First memory slot.
    pub start: u32,
    /// Number of memory slots.
    pub size: u32,
}

impl Placement {
    fn mask(self) -> u64 {
        if self.size == 0 {
            return 0;
        }
        if u64::from(self.start) + u64::from(self.size) > 64 {
            return u64::MAX; // outside any real GPU: treat as overlapping everything
        }
        (u64::MAX >> (64 - self.size)) << self.start
    }
}

/// One GPU instance profile of a GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// NVML GPU instance profile id (`nvmlGpuInstanceProfileInfo_t.id`).
    pub id: u32,
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`), the key for profile info calls.
    pub nvml_index: u32,
    /// Name without the `MIG ` prefix, e.g. `3g.20gb`, `1g.10gb+me`.
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// Most instances of this profile on one GPU.
    pub max_instances: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Possible placements.
    pub placements: Vec<Placement>,
}

impl Profile {
    /// A media variant (`+me`, `+me.all`, `-me`, `+gfx`), not picked by a short name.
    pub fn is_variant(&self) -> bool {
        self.name.contains(['+', '-'])
    }
}

/// The MIG profiles of one GPU (model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// GPU name as NVML reports it.
    pub model: String,
    /// Total GPU memory in MiB.
    pub memory_total_mib: u64,
    /// Profiles, in NVML index order.
    pub profiles: Vec<Profile>,
}

/// One instance of a planned layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedInstance {
    /// Profile name, e.g. `3g.20gb`.
    pub profile: String,
    /// NVML GPU instance profile id.
    pub profile_id: u32,
    /// Where to create it.
    #[serde(flatten)]
    pub placement: Placement,
}

/// Why a MIG request cannot be planned on a GPU model. One line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The model has no such profile.
    #[error("{model} has no MIG profile {profile}; its profiles are {known}")]
    UnknownProfile {
        /// GPU model.
        model: String,
        /// The requested profile.
        profile: String,
        /// The model's profile names.
        known: String,
    },
    /// The instances cannot all be placed at once.
    #[error("mig:{request} does not fit one {model}: {why}; layouts that fit include {valid}")]
    DoesNotFit {
        /// The request as written.
        request: String,
        /// GPU model.
        model: String,
        /// What is over.
        why: String,
        /// Examples of valid layouts on this model.
        valid: String,
    },
    /// More MPS clients per instance than MPS serves in an instance of that size.
    #[error(
        "{mode}: a {profile} instance serves at most {limit} MPS client(s) (MPS's 48 scaled \
         to its {slices} of {gpu_slices} compute slices); ask for :mps:{limit} or fewer, or \
         a larger profile"
    )]
    TooManyMpsClients {
        /// The mode as written.
        mode: String,
        /// The smallest instance of the layout.
        profile: String,
        /// Its compute slices.
        slices: u32,
        /// The GPU's compute slices.
        gpu_slices: u32,
        /// The most clients it serves.
        limit: u32,
    },
    /// No GPU model of that name is known.
    #[error(
        "unknown GPU model {0}: colloc has no built-in MIG table for it (on a node with that \
         GPU, `colloc plan --gpu INDEX` and the prolog use the driver's own tables); built-in \
         tables: {known}",
        known = known_models_line()
    )]
    UnknownModel(String),
}

/// The models with built-in tables, for messages: `NVML name (alias)`, comma separated.
pub fn known_models_line() -> String {
    MODELS
        .iter()
        .map(|m| format!("{} ({})", m.name, m.alias))
        .collect::<Vec<_>>()
        .join(", ")
}

struct StaticProfile {
    id: u32,
    index: u32,
    name: &'static str,
    slices: u32,
    max: u32,
    mem: u64,
    sms: u32,
}

const fn sp(
    id: u32,
    index: u32,
    name: &'static str,
    slices: u32,
    max: u32,
    mem: u64,
    sms: u32,
) -> StaticProfile {
    StaticProfile {
        id,
        index,
        name,
        slices,
        max,
        mem,
        sms,
    }
}

struct StaticModel {
    /// Name as NVML reports it.
    name: &'static str,
    /// Short name for `--gpu-model`.
    alias: &'static str,
    memory_total_mib: u64,
    /// Memory slots of the placement space (8; the A30 has 4).
    slots: u32,
    profiles: &'static [StaticProfile],
}

// The built-in tables: what `nvidia-smi mig -lgip`/`-lgipp` show on each model (profile
// id, NVML profile index, name, slices, instances, memory MiB, SMs), used where the driver
// cannot answer (an A100 with MIG off answers profile queries NOT_SUPPORTED) and by
// `colloc plan --gpu-model`. NVML profile indexes: 0 = 1 slice, 1 = 2 slices, 2 = 3,
// 3 = 4, 4 = 7, 7 = 1 slice +me, 8 = 2 slices +me, 9 = 1 slice double memory. Only the
// profiles every supported driver lists; all-media profiles (nvml.h API 13, indexes 15 and
// 16; the H200 on R580.159 answers NOT_SUPPORTED for them) are read from the driver where
// it lists them. Sources (the same the fake driver's tables cite, where each figure is tied to
// its reading; core/tests/nvml_fake.rs holds the two to each other):
// - A100 40GB: issue 16's `-lgip` (4.75/9.62/19.50/39.25 GiB) and nvidia-smi MIG device
//   tables (4864/9856/19968 MiB); A100 80GB: nvidia-smi MIG device tables (9728/19968 MiB)
//   and NVIDIA's go-nvml mock (40192/80384 MiB). PCIe cards share the SXM4 tables (MIG
//   User Guide, "Supported MIG Profiles").
// - A30: MIG User Guide (profiles, counts), go-nvml mock (memory, SMs).
// - H100 80GB HBM3 and H100 PCIe: `-lgip` readings (9.75/19.62/39.50/79.25 GiB; SMs
//   16/26/32/60/64/132 on SXM, 14/14/30/46/62/114 on PCIe); H100 NVL: `-lgip` in
//   NVIDIA/gpu-operator#900 and mig-parted#101 (10.75/21.62/46.38 GiB, 93.12 GiB 7g).
// - H200: what NVML reported on the lent card (driver 580, MIG off); the H200 NVL has
//   the same profiles (MIG User Guide), its figures here are the SXM card's.
// - GH200 480GB (96 GB HBM3): `-lgip` in public Grace Hopper install logs (11.00/23.00/
//   46.50/93.00 GiB); the total (97871 MiB) is not from a reading found.
// - GH200 144G HBM3e: `-lgip` in NVIDIA/mig-parted#139 for 1g/1g.36gb/2g (17.50/35.25 GiB),
//   total 146831 MiB from `nvidia-smi`; NOT CONFIRMED: 3g/4g/7g memory and SMs (estimates:
//   the H200's share of its 7g; SMs as the H200's).
// - B200: `-lgip` in NVIDIA/mig-parted#187 (1g 20.50 GiB; #166 showed 22.00 with an earlier
//   driver), 1g.45gb/2g.45gb 44.25 GiB, SMs 18/30/36; total 183359 MiB. NOT CONFIRMED: 3g/4g/7g
//   memory (estimated from the 2g as on the H100) and SMs (NVIDIA's go-nvml mock).
// tests/fake-nvml/fixtures/documented-mig-models.json holds every figure with its source;
// core/tests/mig_models.rs holds these tables to it.
static MODELS: &[StaticModel] = &[
    StaticModel {
        name: "NVIDIA A100-SXM4-40GB",
        alias: "A100-40GB",
        memory_total_mib: 40960,
        slots: 8,
        profiles: A100_40GB,
    },
    StaticModel {
        name: "NVIDIA A100-PCIE-40GB",
        alias: "A100-PCIE-40GB",
        memory_total_mib: 40960,
        slots: 8,
        profiles: A100_40GB,
    },
    StaticModel {
        name: "NVIDIA A100-SXM4-80GB",
        alias: "A100-80GB",
        memory_total_mib: 81920,
        slots: 8,
        profiles: A100_80GB,
    },
    StaticModel {
        name: "NVIDIA A100 80GB PCIe",
        alias: "A100-80GB-PCIE",
        memory_total_mib: 81920,
        slots: 8,
        profiles: A100_80GB,
    },
    StaticModel {
        name: "NVIDIA A30",
        alias: "A30",
        memory_total_mib: 24576,
        slots: 4,
        profiles: &[
            sp(14, 0, "1g.6gb", 1, 4, 5836, 14),
            sp(5, 1, "2g.12gb", 2, 2, 11672, 28),
            sp(0, 3, "4g.24gb", 4, 1, 23344, 56),
            sp(21, 7, "1g.6gb+me", 1, 1, 5836, 14),
            sp(6, 8, "2g.12gb+me", 2, 1, 11672, 28),
        ],
    },
    StaticModel {
        name: "NVIDIA H100 80GB HBM3",
        alias: "H100-80GB",
        memory_total_mib: 81559,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.10gb", 1, 7, 9984, 16),
            sp(14, 1, "2g.20gb", 2, 3, 20096, 32),
            sp(9, 2, "3g.40gb", 3, 2, 40448, 60),
            sp(5, 3, "4g.40gb", 4, 1, 40448, 64),
            sp(0, 4, "7g.80gb", 7, 1, 81152, 132),
            sp(20, 7, "1g.10gb+me", 1, 1, 9984, 16),
            sp(15, 9, "1g.20gb", 1, 4, 20096, 26),
        ],
    },
    StaticModel {
        name: "NVIDIA H100 PCIe",
        alias: "H100-PCIE",
        memory_total_mib: 81559,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.10gb", 1, 7, 9984, 14),
            sp(14, 1, "2g.20gb", 2, 3, 20096, 30),
            sp(9, 2, "3g.40gb", 3, 2, 40448, 46),
            sp(5, 3, "4g.40gb", 4, 1, 40448, 62),
            sp(0, 4, "7g.80gb", 7, 1, 81152, 114),
            sp(20, 7, "1g.10gb+me", 1, 1, 9984, 14),
            sp(15, 9, "1g.20gb", 1, 4, 20096, 14),
        ],
    },
    StaticModel {
        name: "NVIDIA H100 NVL",
        alias: "H100-NVL",
        memory_total_mib: 95830,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.12gb", 1, 7, 11008, 16),
            sp(14, 1, "2g.24gb", 2, 3, 22144, 32),
            sp(9, 2, "3g.47gb", 3, 2, 47488, 60),
            sp(5, 3, "4g.47gb", 4, 1, 47488, 64),
            sp(0, 4, "7g.94gb", 7, 1, 95360, 132),
            sp(20, 7, "1g.12gb+me", 1, 1, 11008, 16),
            sp(15, 9, "1g.24gb", 1, 4, 22144, 26),
        ],
    },
    StaticModel {
        name: "NVIDIA H200",
        alias: "H200",
        memory_total_mib: 143771,
        slots: 8,
        profiles: H200,
    },
    StaticModel {
        name: "NVIDIA H200 NVL",
        alias: "H200-NVL",
        memory_total_mib: 143771,
        slots: 8,
        profiles: H200,
    },
    StaticModel {
        name: "NVIDIA GH200 480GB",
        alias: "GH200-96GB",
        memory_total_mib: 97871,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.12gb", 1, 7, 11264, 16),
            sp(14, 1, "2g.24gb", 2, 3, 23552, 32),
            sp(9, 2, "3g.48gb", 3, 2, 47616, 60),
            sp(5, 3, "4g.48gb", 4, 1, 47616, 64),
            sp(0, 4, "7g.96gb", 7, 1, 95232, 132),
            sp(20, 7, "1g.12gb+me", 1, 1, 11264, 16),
            sp(15, 9, "1g.24gb", 1, 4, 23552, 26),
        ],
    },
    StaticModel {
        name: "NVIDIA GH200 144G HBM3e",
        alias: "GH200-144GB",
        memory_total_mib: 146831,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.18gb", 1, 7, 17920, 16),
            sp(14, 1, "2g.36gb", 2, 3, 36096, 32),
            // 3g/4g/7g memory and SMs: estimates (see above).
            sp(9, 2, "3g.72gb", 3, 2, 72960, 60),
            sp(5, 3, "4g.72gb", 4, 1, 72960, 64),
            sp(0, 4, "7g.144gb", 7, 1, 146432, 132),
            sp(20, 7, "1g.18gb+me", 1, 1, 17920, 16),
            sp(15, 9, "1g.36gb", 1, 4, 36096, 26),
        ],
    },
    StaticModel {
        name: "NVIDIA B200",
        alias: "B200",
        memory_total_mib: 183359,
        slots: 8,
        profiles: &[
            sp(19, 0, "1g.23gb", 1, 7, 20992, 18),
            sp(14, 1, "2g.45gb", 2, 3, 45312, 36),
            // 3g/4g/7g memory and SMs: estimates (see above).
            sp(9, 2, "3g.90gb", 3, 2, 90880, 54),
            sp(5, 3, "4g.90gb", 4, 1, 90880, 72),
            sp(0, 4, "7g.180gb", 7, 1, 182784, 126),
            sp(20, 7, "1g.23gb+me", 1, 1, 20992, 18),
            sp(15, 9, "1g.45gb", 1, 4, 45312, 30),
        ],
    },
];

/// More names users type for a model (`--gpu-model`), beside its alias and NVML name.
static OTHER_NAMES: &[(&str, &str)] = &[("H100-80GB", "H100-SXM"), ("GH200-96GB", "GH200-480GB")];

/// Profiles a driver or card names otherwise: `(model alias, other name, name in the
/// table)`. Both names are accepted wherever a profile is named (`--colloc`, `colloc
/// plan`, journals), whichever the node's driver reports.
static RENAMED: &[(&str, &str, &str)] = &[
    // Drivers 535/545 named the A100 80GB's 3g profile 3g.39gb (NVIDIA/mig-parted#31).
    ("A100-80GB", "3g.39gb", "3g.40gb"),
    ("A100-80GB-PCIE", "3g.39gb", "3g.40gb"),
    // Some drivers named its 7g profile 7g.79gb (NVIDIA/gpu-operator#351, nebuly-ai/nos#51).
    ("A100-80GB", "7g.79gb", "7g.80gb"),
    ("A100-80GB-PCIE", "7g.79gb", "7g.80gb"),
    // The GB100 boards name their 1g profile 1g.23gb or 1g.24gb by card (HGX GB200:
    // 1g.24gb, NVIDIA/gpu-operator#1303; others 1g.23gb, NVIDIA/mig-parted#227). Seen on a
    // B200 only as 1g.23gb; accepted in both forms.
    ("B200", "1g.24gb", "1g.23gb"),
];

/// The other names of a profile of a model (by NVML name or alias): the names a driver
/// or card may give it instead of `profile`, in either direction of a rename.
pub fn other_profile_names(model: &str, profile: &str) -> Vec<&'static str> {
    let Some(m) = find_model(model) else {
        return Vec::new();
    };
    RENAMED
        .iter()
        .filter(|(alias, _, _)| *alias == m.alias)
        .filter_map(|&(_, other, current)| {
            if other == profile {
                Some(current)
            } else if current == profile {
                Some(other)
            } else {
                None
            }
        })
        .collect()
}

const A100_40GB: &[StaticProfile] = &[
    sp(19, 0, "1g.5gb", 1, 7, 4864, 14),
    sp(14, 1, "2g.10gb", 2, 3, 9856, 28),
    sp(9, 2, "3g.20gb", 3, 2, 19968, 42),
    sp(5, 3, "4g.20gb", 4, 1, 19968, 56),
    sp(0, 4, "7g.40gb", 7, 1, 40192, 98),
    sp(20, 7, "1g.5gb+me", 1, 1, 4864, 14),
    sp(15, 9, "1g.10gb", 1, 4, 9856, 14),
];

const A100_80GB: &[StaticProfile] = &[
    sp(19, 0, "1g.10gb", 1, 7, 9728, 14),
    sp(14, 1, "2g.20gb", 2, 3, 19968, 28),
    sp(9, 2, "3g.40gb", 3, 2, 40192, 42),
    sp(5, 3, "4g.40gb", 4, 1, 40192, 56),
    sp(0, 4, "7g.80gb", 7, 1, 80384, 98),
    sp(20, 7, "1g.10gb+me", 1, 1, 9728, 14),
    sp(15, 9, "1g.20gb", 1, 4, 19968, 14),
];

const H200: &[StaticProfile] = &[
    sp(19, 0, "1g.18gb", 1, 7, 16384, 16),
    sp(14, 1, "2g.35gb", 2, 3, 33280, 32),
    sp(9, 2, "3g.71gb", 3, 2, 71424, 60),
    sp(5, 3, "4g.71gb", 4, 1, 71424, 64),
    sp(0, 4, "7g.141gb", 7, 1, 143360, 132),
    sp(20, 7, "1g.18gb+me", 1, 1, 16384, 16),
    sp(15, 9, "1g.35gb", 1, 4, 33280, 26),
];

/// The placements the driver allows for a profile index in a placement space of
/// `slots` memory slots (8 on A100/H100/H200, 4 on the A30): MIG User Guide, "Concepts";
/// checked against the H200's `nvmlDeviceGetGpuInstancePossiblePlacements`.
pub fn standard_placements(slots: u32, nvml_index: u32) -> Vec<Placement> {
    let at = |starts: &[u32], size: u32| {
        starts
            .iter()
            .map(|&start| Placement { start, size })
            .collect()
    };
    match (slots, nvml_index) {
        // 1 slice (also +me, +me.all)
        (8, 0 | 7 | 15) => at(&[0, 1, 2, 3, 4, 5, 6], 1),
        (8, 1 | 16) => at(&[0, 2, 4], 2),
        (8, 2) => at(&[0, 4], 4),
        (8, 3) => at(&[0], 4),
        (8, 4) => at(&[0], 8),
        (8, 9) => at(&[0, 2, 4, 6], 2),
        (4, 0 | 7) => at(&[0, 1, 2, 3], 1),
        (4, 1 | 8) => at(&[0, 2], 2),
        (4, 3) => at(&[0], 4),
        _ => Vec::new(),
    }
}

/// The names NVML reports for the models with built-in tables, with their aliases.
pub fn known_models() -> impl Iterator<Item = (&'static str, &'static str)> {
    MODELS.iter().map(|m| (m.name, m.alias))
}

/// The size of a model's placement space (memory slots), for placements the driver did
/// not list; 8 for models without a built-in table.
pub fn placement_slots(name: &str) -> u32 {
    find_model(name).map_or(8, |m| m.slots)
}

fn find_model(name: &str) -> Option<&'static StaticModel> {
    let wanted = name.trim();
    // Drivers before R470 reported names without the "NVIDIA " prefix
    // ("A100-SXM4-40GB", NVIDIA/k8s-device-plugin#343).
    let bare = |n: &str| {
        let n = n.to_ascii_lowercase();
        n.strip_prefix("nvidia ").map_or(n.clone(), str::to_string)
    };
    MODELS.iter().find(|m| {
        m.alias.eq_ignore_ascii_case(wanted)
            || bare(m.name) == bare(wanted)
            || OTHER_NAMES
                .iter()
                .any(|(alias, other)| *alias == m.alias && other.eq_ignore_ascii_case(wanted))
    })
}

/// The built-in catalog of a model, by NVML name (with or without the `NVIDIA ` prefix)
/// or alias, case-insensitive.
///
/// # Errors
/// [`PlanError::UnknownModel`] for other names.
pub fn builtin_catalog(name: &str) -> Result<Catalog, PlanError> {
    let model =
        find_model(name).ok_or_else(|| PlanError::UnknownModel(crate::mode::show_input(name)))?;
    Ok(Catalog {
        model: model.name.to_string(),
        memory_total_mib: model.memory_total_mib,
        profiles: model
            .profiles
            .iter()
            .map(|p| Profile {
                id: p.id,
                nvml_index: p.index,
                name: p.name.to_string(),
                slices: p.slices,
                max_instances: p.max,
                memory_mib: p.mem,
                sms: p.sms,
                placements: standard_placements(model.slots, p.index),
            })
            .collect(),
    })
}

impl Catalog {
    /// The profile a selector names: a short name picks the standard (smallest-memory,
    /// non-variant) profile with that many slices.
    ///
    /// # Errors
    /// [`PlanError::UnknownProfile`].
    pub fn resolve(&self, sel: &ProfileSel) -> Result<&Profile, PlanError> {
        let found = match sel {
            ProfileSel::Short(s) => self
                .profiles
                .iter()
                .filter(|p| p.slices == *s && !p.is_variant() && !p.placements.is_empty())
                .min_by_key(|p| (p.memory_mib, p.id)),
            ProfileSel::Full { .. } => {
                let name = sel.to_string();
                let others = other_profile_names(&self.model, &name);
                self.profiles.iter().find(|p| p.name == name).or_else(|| {
                    self.profiles
                        .iter()
                        .find(|p| others.contains(&p.name.as_str()))
                })
            }
        };
        found.ok_or_else(|| PlanError::UnknownProfile {
            model: self.model.clone(),
            profile: sel.to_string(),
            known: self
                .profiles
                .iter()
                .filter(|p| !p.is_variant())
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The most MPS clients one MPS daemon serves inside an instance of `slices` compute
    /// slices: MPS's 48, lowered in proportion to the instance's share of the GPU's compute
    /// slices (MIG User Guide, "MIG with CUDA MPS"), at least 1.
    pub fn mps_client_limit(&self, slices: u32) -> u32 {
        let gpu_slices = self.compute_slices().max(1);
        (crate::mode::MAX_MPS_CLIENTS * slices.min(gpu_slices) / gpu_slices).max(1)
    }

    /// The GPU's compute slices: its largest profile's.
    pub fn compute_slices(&self) -> u32 {
        self.profiles.iter().map(|p| p.slices).max().unwrap_or(0)
    }

    /// Check `mps:N` inside each planned instance against [`Catalog::mps_client_limit`].
    ///
    /// # Errors
    /// [`PlanError::TooManyMpsClients`], naming the smallest instance.
    pub fn check_mps_clients(
        &self,
        mode: &str,
        instances: &[PlannedInstance],
        clients: u32,
    ) -> Result<(), PlanError> {
        let smallest = instances
            .iter()
            .filter_map(|i| self.by_id(i.profile_id))
            .min_by_key(|p| p.slices);
        match smallest {
            Some(p) if clients > self.mps_client_limit(p.slices) => {
                Err(PlanError::TooManyMpsClients {
                    mode: mode.to_string(),
                    profile: p.name.clone(),
                    slices: p.slices,
                    gpu_slices: self.compute_slices(),
                    limit: self.mps_client_limit(p.slices),
                })
            }
            _ => Ok(()),
        }
    }

    /// Profile by NVML profile id.
    pub fn by_id(&self, id: u32) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// Plan a MIG request on this GPU: concrete, non-overlapping placements, or why none
    /// exist. A `Fill` gives the most instances that fit.
    ///
    /// # Errors
    /// [`PlanError::UnknownProfile`], [`PlanError::DoesNotFit`].
    pub fn plan(&self, req: &MigRequest) -> Result<Vec<PlannedInstance>, PlanError> {
        self.plan_with(req, true)
    }

    /// [`Catalog::plan`]; `examples`: name layouts that fit in a `DoesNotFit` (off while
    /// finding those examples, which plans too).
    fn plan_with(
        &self,
        req: &MigRequest,
        examples: bool,
    ) -> Result<Vec<PlannedInstance>, PlanError> {
        match req {
            MigRequest::Fill(sel) => {
                let p = self.resolve(sel)?;
                // Most non-overlapping placements, within the profile's instance limit.
                let mut best = Vec::new();
                let mut chosen = Vec::new();
                max_fill(
                    &p.placements,
                    0,
                    0,
                    p.max_instances as usize,
                    &mut chosen,
                    &mut best,
                );
                if best.is_empty() {
                    return Err(self.no_fit(examples, req, format!("{} has no placement", p.name)));
                }
                Ok(best.into_iter().map(|pl| planned(p, pl)).collect())
            }
            MigRequest::Layout(items) => {
                let mut wanted: Vec<&Profile> = Vec::new();
                for MigItem { profile, count } in items {
                    let p = self.resolve(profile)?;
                    let already = wanted.iter().filter(|w| w.id == p.id).count() as u32;
                    if already + count > p.max_instances {
                        return Err(self.no_fit(
                            examples,
                            req,
                            format!("{} fits at most {} time(s)", p.name, p.max_instances),
                        ));
                    }
                    wanted.extend(std::iter::repeat_n(p, *count as usize));
                }
                let slices: u32 = wanted.iter().map(|p| p.slices).sum();
                let max_slices = self.profiles.iter().map(|p| p.slices).max().unwrap_or(0);
                if slices > max_slices {
                    return Err(self.no_fit(
                        examples,
                        req,
                        format!("it needs {slices} compute slices, the GPU has {max_slices}"),
                    ));
                }
                // Largest first: they have the fewest placements.
                wanted.sort_by_key(|p| {
                    let size = p.placements.first().map_or(0, |pl| pl.size);
                    (std::cmp::Reverse(size), p.placements.len(), p.id)
                });
                let mut chosen = Vec::with_capacity(wanted.len());
                if place_all(&wanted, 0, 0, &mut chosen) {
                    let mut out: Vec<PlannedInstance> = wanted
                        .iter()
                        .zip(chosen)
                        .map(|(p, pl)| planned(p, pl))
                        .collect();
                    out.sort_by_key(|i| i.placement);
                    Ok(out)
                } else {
                    Err(self.no_fit(
                        examples,
                        req,
                        "no placement of these instances avoids overlap".into(),
                    ))
                }
            }
        }
    }

    fn no_fit(&self, examples: bool, req: &MigRequest, why: String) -> PlanError {
        PlanError::DoesNotFit {
            request: req.to_string(),
            model: self.model.clone(),
            why,
            valid: if examples {
                self.example_layouts().join(", ")
            } else {
                String::new()
            },
        }
    }

    /// Layouts that fit this model, to suggest in messages: each standard profile as
    /// many times as it fits, then common mixes.
    pub fn example_layouts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in [7u32, 4, 3, 2, 1] {
            let req = MigRequest::Fill(ProfileSel::Short(s));
            if let Ok(plan) = self.plan_with(&req, false) {
                out.push(format!("mig:{s}gx{}", plan.len()));
            }
        }
        for mix in ["4g,3g", "4g,2g,1g", "3g,2g,1gx2", "2gx2,1gx3"] {
            if let Ok(crate::mode::Mode::Mig(req)) = format!("mig:{mix}").parse() {
                if self.plan_with(&req, false).is_ok() {
                    out.push(format!("mig:{mix}"));
                }
            }
        }
        out
    }
}

fn planned(p: &Profile, placement: Placement) -> PlannedInstance {
    PlannedInstance {
        profile: p.name.clone(),
        profile_id: p.id,
        placement,
    }
}

fn max_fill(
    placements: &[Placement],
    from: usize,
    used: u64,
    limit: usize,
    chosen: &mut Vec<Placement>,
    best: &mut Vec<Placement>,
) {
    if chosen.len() > best.len() {
        best.clone_from(chosen);
    }
    if chosen.len() == limit {
        return;
    }
    for (i, pl) in placements.iter().enumerate().skip(from) {
        if used & pl.mask() == 0 {
            chosen.push(*pl);
            max_fill(placements, i + 1, used | pl.mask(), limit, chosen, best);
            chosen.pop();
        }
    }
}

fn place_all(wanted: &[&Profile], next: usize, used: u64, chosen: &mut Vec<Placement>) -> bool {
    let Some(p) = wanted.get(next) else {
        return true;
    };
    // Same profile as the previous one: only later placements, to skip permutations.
    let min_start = match (next.checked_sub(1).map(|i| wanted[i]), chosen.last()) {
        (Some(prev), Some(last)) if prev.id == p.id => Some(last.start),
        _ => None,
    };
    for pl in &p.placements {
        if min_start.is_some_and(|m| pl.start <= m) {
            continue;
        }
        if used & pl.mask() == 0 {
            chosen.push(*pl);
            if place_all(wanted, next + 1, used | pl.mask(), chosen) {
                return true;
            }
            chosen.pop();
        }
    }
    false
}

/// Summarise a planned layout as a normalized mode string, e.g. `mig:3g.20gbx2`
/// (for `COLLOC_MODE`).
pub fn layout_mode_string(instances: &[PlannedInstance]) -> String {
    let mut counts: Vec<(String, u32, u32)> = Vec::new();
    for i in instances {
        let slices = i
            .profile
            .split('g')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        match counts.iter_mut().find(|c| c.0 == i.profile) {
            Some(c) => c.2 += 1,
            None => counts.push((i.profile.clone(), slices, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let parts: Vec<String> = counts
        .iter()
        .map(|(name, _, k)| {
            if *k == 1 && counts.len() > 1 {
                name.clone()
            } else {
                format!("{name}x{k}")
            }
        })
        .collect();
    format!("mig:{}", parts.join(","))
}

impl fmt::Display for PlannedInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at placement start {} (size {})",
            self.profile, self.placement.start, self.placement.size
        )
    }
}

#[cfg(test)]
mod tests;
