//! MIG profiles of the supported GPU models and the layout planner.
//!
//! Placements live in NVML's memory-slot space: an A100/H100/H200 has 8 slots; a 1-slice
//! profile starts at 0–6 (size 1), 2g at 0, 2, 4 (size 2), 3g at 0 or 4 (size 4), 4g at 0
//! (size 4), 7g at 0 (size 8); the double-memory 1-slice profile at 0, 2, 4, 6 (size 2).
//! Two instances fit together when their placements do not overlap (and each profile's
//! instance limit holds), which is the rule the driver applies.
//!
//! The built-in tables follow the NVIDIA MIG User Guide ("Supported MIG Profiles") and,
//! for the H200, what NVML reported on the lent card (see shared/gpu-facts.md). On a real
//! GPU colloc asks NVML instead and uses these tables only where NVML cannot answer.

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
    /// A media-extension (`+me`) or other variant profile, not picked by a short name.
    pub fn is_variant(&self) -> bool {
        self.name.contains('+')
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
    /// No GPU model of that name is known.
    #[error("unknown GPU model {0}; known: {KNOWN_MODELS}")]
    UnknownModel(String),
}

/// The models with built-in tables, for messages.
pub const KNOWN_MODELS: &str = "NVIDIA A100-SXM4-40GB (A100-40GB), NVIDIA A100-SXM4-80GB \
(A100-80GB), NVIDIA H100 80GB HBM3 (H100-80GB), NVIDIA H200 (H200)";

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
    name: &'static str,
    alias: &'static str,
    memory_total_mib: u64,
    profiles: &'static [StaticProfile],
}

// NVML profile indexes: 0 = 1 slice, 1 = 2 slices, 2 = 3, 3 = 4, 4 = 7,
// 7 = 1 slice rev1 (+me), 9 = 1 slice rev2 (double memory).
static MODELS: &[StaticModel] = &[
    StaticModel {
        name: "NVIDIA A100-SXM4-40GB",
        alias: "A100-40GB",
        memory_total_mib: 40960,
        profiles: &[
            sp(19, 0, "1g.5gb", 1, 7, 4864, 14),
            sp(14, 1, "2g.10gb", 2, 3, 9984, 28),
            sp(9, 2, "3g.20gb", 3, 2, 20096, 42),
            sp(5, 3, "4g.20gb", 4, 1, 20096, 56),
            sp(0, 4, "7g.40gb", 7, 1, 40448, 98),
            sp(20, 7, "1g.5gb+me", 1, 1, 4864, 14),
            sp(15, 9, "1g.10gb", 1, 4, 9984, 14),
        ],
    },
    StaticModel {
        name: "NVIDIA A100-SXM4-80GB",
        alias: "A100-80GB",
        memory_total_mib: 81920,
        profiles: &[
            sp(19, 0, "1g.10gb", 1, 7, 9728, 14),
            sp(14, 1, "2g.20gb", 2, 3, 19968, 28),
            sp(9, 2, "3g.40gb", 3, 2, 40192, 42),
            sp(5, 3, "4g.40gb", 4, 1, 40192, 56),
            sp(0, 4, "7g.80gb", 7, 1, 81152, 98),
            sp(20, 7, "1g.10gb+me", 1, 1, 9728, 14),
            sp(15, 9, "1g.20gb", 1, 4, 19968, 14),
        ],
    },
    StaticModel {
        name: "NVIDIA H100 80GB HBM3",
        alias: "H100-80GB",
        memory_total_mib: 81559,
        profiles: &[
            sp(19, 0, "1g.10gb", 1, 7, 9984, 16),
            sp(14, 1, "2g.20gb", 2, 3, 20096, 32),
            sp(9, 2, "3g.40gb", 3, 2, 40320, 60),
            sp(5, 3, "4g.40gb", 4, 1, 40320, 64),
            sp(0, 4, "7g.80gb", 7, 1, 80896, 132),
            sp(20, 7, "1g.10gb+me", 1, 1, 9984, 16),
            sp(15, 9, "1g.20gb", 1, 4, 20096, 26),
        ],
    },
    StaticModel {
        name: "NVIDIA H200",
        alias: "H200",
        memory_total_mib: 143771,
        profiles: &[
            sp(19, 0, "1g.18gb", 1, 7, 16384, 16),
            sp(14, 1, "2g.35gb", 2, 3, 33280, 32),
            sp(9, 2, "3g.71gb", 3, 2, 71424, 60),
            sp(5, 3, "4g.71gb", 4, 1, 71424, 64),
            sp(0, 4, "7g.141gb", 7, 1, 143360, 132),
            sp(20, 7, "1g.18gb+me", 1, 1, 16384, 16),
            sp(15, 9, "1g.35gb", 1, 4, 33280, 26),
        ],
    },
];

/// The placements the driver allows for a profile index on an 8-slot GPU.
pub fn standard_placements(nvml_index: u32) -> Vec<Placement> {
    let at = |starts: &[u32], size: u32| {
        starts
            .iter()
            .map(|&start| Placement { start, size })
            .collect()
    };
    match nvml_index {
        0 | 7 => at(&[0, 1, 2, 3, 4, 5, 6], 1),
        1 => at(&[0, 2, 4], 2),
        2 => at(&[0, 4], 4),
        3 => at(&[0], 4),
        4 => at(&[0], 8),
        9 => at(&[0, 2, 4, 6], 2),
        _ => Vec::new(),
    }
}

/// The names NVML reports for the models with built-in tables, with their aliases.
pub fn known_models() -> impl Iterator<Item = (&'static str, &'static str)> {
    MODELS.iter().map(|m| (m.name, m.alias))
}

/// The built-in catalog of a model, by NVML name or alias (case-insensitive).
///
/// # Errors
/// [`PlanError::UnknownModel`] for other names.
pub fn builtin_catalog(name: &str) -> Result<Catalog, PlanError> {
    let wanted = name.trim();
    let model = MODELS
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(wanted) || m.alias.eq_ignore_ascii_case(wanted))
        .ok_or_else(|| PlanError::UnknownModel(crate::mode::show_input(name)))?;
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
                placements: standard_placements(p.index),
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
                self.profiles.iter().find(|p| p.name == name)
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
                    return Err(self.no_fit(req, format!("{} has no placement", p.name)));
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
                    Err(self.no_fit(req, "no placement of these instances avoids overlap".into()))
                }
            }
        }
    }

    fn no_fit(&self, req: &MigRequest, why: String) -> PlanError {
        PlanError::DoesNotFit {
            request: req.to_string(),
            model: self.model.clone(),
            why,
            valid: self.example_layouts().join(", "),
        }
    }

    /// Layouts that fit this model, to suggest in messages: each standard profile as
    /// many times as it fits, then common mixes.
    pub fn example_layouts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in [7u32, 4, 3, 2, 1] {
            let req = MigRequest::Fill(ProfileSel::Short(s));
            if let Ok(plan) = self.plan(&req) {
                out.push(format!("mig:{s}gx{}", plan.len()));
            }
        }
        for mix in ["4g,3g", "4g,2g,1g", "3g,2g,1gx2", "2gx2,1gx3"] {
            if let Ok(crate::mode::Mode::Mig(req)) = format!("mig:{mix}").parse() {
                if self.plan(&req).is_ok() {
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
            "{} at slot {} (size {})",
            self.profile, self.placement.start, self.placement.size
        )
    }
}

#[cfg(test)]
mod tests {
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
                for p in &cat.profiles {
                    let req = MigRequest::Fill(ProfileSel::Short(p.slices));
                    let got = cat.plan(&req).unwrap();
                    let want = match p.slices {
                        1 => 7,
                        2 => 3,
                        3 => 2,
                        _ => 1,
                    };
                    assert_eq!(got.len(), want, "{m} {}", p.name);
                }
            }
        }
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
        let err = plan("A100-40GB", "mig:3g.40gb").unwrap_err().to_string();
        assert!(err.contains("has no MIG profile 3g.40gb"), "{err}");
        assert!(err.contains("3g.20gb"), "{err}");
        assert!(builtin_catalog("GeForce").is_err());
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
}
