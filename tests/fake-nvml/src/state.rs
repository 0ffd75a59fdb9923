//! The fake driver's state and the rules it applies, as plain Rust: no C types, no I/O.
//! Every function answers with the `nvmlReturn_t` code a real driver would give.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::tables::{self, GiProfile, Model, COMPUTE_SLICES};

/// An `nvmlReturn_t` error code.
pub type Ret = u32;
/// Result of a state operation.
pub type R<T> = Result<T, Ret>;

/// `nvmlReturn_t` codes the fake answers with.
#[allow(missing_docs)]
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const UNINITIALIZED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const NOT_SUPPORTED: u32 = 3;
    pub const NO_PERMISSION: u32 = 4;
    pub const NOT_FOUND: u32 = 6;
    pub const INSUFFICIENT_SIZE: u32 = 7;
    pub const RESET_REQUIRED: u32 = 16;
    pub const IN_USE: u32 = 19;
    pub const INSUFFICIENT_RESOURCES: u32 = 23;
    pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const UNKNOWN: u32 = 999;

    /// Names as written in nvml.h, for fault injection and messages.
    pub const NAMES: &[(&str, u32)] = &[
        ("NVML_SUCCESS", SUCCESS),
        ("NVML_ERROR_UNINITIALIZED", UNINITIALIZED),
        ("NVML_ERROR_INVALID_ARGUMENT", INVALID_ARGUMENT),
        ("NVML_ERROR_NOT_SUPPORTED", NOT_SUPPORTED),
        ("NVML_ERROR_NO_PERMISSION", NO_PERMISSION),
        ("NVML_ERROR_ALREADY_INITIALIZED", 5),
        ("NVML_ERROR_NOT_FOUND", NOT_FOUND),
        ("NVML_ERROR_INSUFFICIENT_SIZE", INSUFFICIENT_SIZE),
        ("NVML_ERROR_INSUFFICIENT_POWER", 8),
        ("NVML_ERROR_DRIVER_NOT_LOADED", 9),
        ("NVML_ERROR_TIMEOUT", 10),
        ("NVML_ERROR_IRQ_ISSUE", 11),
        ("NVML_ERROR_LIBRARY_NOT_FOUND", 12),
        ("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
        ("NVML_ERROR_CORRUPTED_INFOROM", 14),
        ("NVML_ERROR_GPU_IS_LOST", 15),
        ("NVML_ERROR_RESET_REQUIRED", RESET_REQUIRED),
        ("NVML_ERROR_OPERATING_SYSTEM", 17),
        ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18),
        ("NVML_ERROR_IN_USE", IN_USE),
        ("NVML_ERROR_MEMORY", 20),
        ("NVML_ERROR_NO_DATA", 21),
        ("NVML_ERROR_INSUFFICIENT_RESOURCES", INSUFFICIENT_RESOURCES),
        (
            "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
            ARGUMENT_VERSION_MISMATCH,
        ),
        ("NVML_ERROR_NOT_READY", 27),
        ("NVML_ERROR_GPU_NOT_FOUND", 28),
        ("NVML_ERROR_INVALID_STATE", 29),
        ("NVML_ERROR_UNKNOWN", UNKNOWN),
    ];

    /// A code by its nvml.h name (with or without the `NVML_ERROR_` prefix) or number.
    pub fn parse(s: &str) -> Option<u32> {
        let s = s.trim();
        if let Ok(n) = s.parse::<u32>() {
            return Some(n);
        }
        let up = s.to_ascii_uppercase();
        NAMES
            .iter()
            .find(|(n, _)| *n == up || n.strip_prefix("NVML_ERROR_") == Some(up.as_str()))
            .map(|(_, c)| *c)
    }

    /// The nvml.h name of a code.
    pub fn name(c: u32) -> &'static str {
        NAMES
            .iter()
            .find(|(_, v)| *v == c)
            .map_or("NVML_ERROR_UNKNOWN", |(n, _)| n)
    }
}

/// Value NVML uses for "no instance id" in process records.
pub const NO_ID: u32 = 0xFFFF_FFFF;
/// Highest MIG device index the fake offers (`nvmlDeviceGetMaxMigDeviceCount` with MIG on).
pub const MAX_MIG_DEVICES: u32 = 7;

/// The whole fake: GPUs, pending faults and what fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Physical GPUs, by NVML index.
    pub gpus: Vec<Gpu>,
    /// Faults to inject, by NVML function name.
    #[serde(default)]
    pub faults: BTreeMap<String, Fault>,
    /// Faults that have fired, oldest first.
    #[serde(default)]
    pub fired: Vec<Fired>,
    /// Counter that makes MIG UUIDs unique.
    #[serde(default)]
    pub serial: u64,
    /// When the state was made (Unix ms); energy counters start there.
    #[serde(default)]
    pub created_unix_ms: u64,
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Model alias, e.g. `A100-40GB`.
    pub model: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// MIG mode in effect.
    pub mig_current: bool,
    /// MIG mode after the next reset.
    pub mig_pending: bool,
    /// GPU instances.
    #[serde(default)]
    pub gis: Vec<Gi>,
    /// Fake processes with a compute context.
    #[serde(default)]
    pub processes: Vec<Process>,
    /// Constant power draw in W, for the energy counter.
    #[serde(default = "default_power")]
    pub power_w: u64,
}

fn default_power() -> u64 {
    100
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gi {
    /// GPU instance id.
    pub id: u32,
    /// GPU instance profile id.
    pub profile_id: u32,
    /// Placement start (memory slot).
    pub start: u32,
    /// Placement size (memory slots).
    pub size: u32,
    /// Compute instances.
    #[serde(default)]
    pub cis: Vec<Ci>,
}

/// A compute instance; each one is a MIG device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ci {
    /// Compute instance id (within its GPU instance).
    pub id: u32,
    /// Compute instance profile id.
    pub profile_id: u32,
    /// Compute slices.
    pub slices: u32,
    /// Start slice within the GPU instance.
    pub start: u32,
    /// `MIG-…` UUID of its MIG device.
    pub uuid: String,
}

/// A fake process holding a compute context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// Host pid.
    pub pid: u32,
    /// GPU instance it runs on (MIG mode).
    #[serde(default)]
    pub gi: Option<u32>,
    /// Compute instance it runs on (MIG mode).
    #[serde(default)]
    pub ci: Option<u32>,
    /// GPU memory used, MiB.
    #[serde(default)]
    pub mem_mib: u64,
    /// SM utilisation it reports, percent.
    #[serde(default)]
    pub sm_util: u32,
}

/// A fault to inject: the `call`-th call of the function (counting from when the fault
/// was written) answers `code`, or kills the caller when `code` is `crash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Which call fails, 1 = the next one.
    pub call: u64,
    /// An nvml.h error name, a number, or `crash`.
    pub code: String,
    /// Calls counted so far.
    #[serde(default)]
    pub seen: u64,
}

/// A fault that fired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fired {
    /// NVML function.
    pub function: String,
    /// The code it answered (or `crash`).
    pub code: String,
    /// Pid of the caller.
    pub pid: u32,
}

/// What an injected fault does to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Return this code.
    Fail(Ret),
    /// Kill the calling process.
    Crash,
}

/// Check a fault code as written in the state file or on the command line.
pub fn parse_fault_code(s: &str) -> Option<FaultAction> {
    if s.trim().eq_ignore_ascii_case("crash") {
        Some(FaultAction::Crash)
    } else {
        code::parse(s)
            .filter(|c| *c != code::SUCCESS)
            .map(FaultAction::Fail)
    }
}

/// 64-bit mix (splitmix64), for stable fake UUIDs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A UUID-shaped string with a prefix, from a seed.
fn uuid(prefix: &str, seed: u64) -> String {
    let a = mix(seed);
    let b = mix(a);
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

fn mask(start: u32, size: u32) -> u64 {
    if size == 0 || start + size > 64 {
        return 0;
    }
    ((1u64 << size) - 1) << start
}

impl State {
    /// A fresh state: the given models, MIG on, no instances, stable GPU UUIDs.
    ///
    /// # Errors
    /// The name of an unknown model.
    pub fn fresh(models: &[&str], now_ms: u64) -> Result<State, String> {
        let mut gpus = Vec::new();
        for (i, m) in models.iter().enumerate() {
            let model = tables::model(m).ok_or_else(|| {
                let known: Vec<&str> = tables::MODELS.iter().map(|m| m.alias).collect();
                format!("unknown fake GPU model {m:?}; known: {}", known.join(", "))
            })?;
            gpus.push(Gpu {
                model: model.alias.to_string(),
                uuid: uuid("GPU", fnv(model.alias) ^ (i as u64)),
                mig_current: true,
                mig_pending: true,
                gis: Vec::new(),
                processes: Vec::new(),
                power_w: default_power(),
            });
        }
        if gpus.is_empty() {
            return Err("no fake GPUs named".into());
        }
        Ok(State {
            gpus,
            faults: BTreeMap::new(),
            fired: Vec::new(),
            serial: 0,
            created_unix_ms: now_ms,
        })
    }

    /// Models from a comma list such as `A100-40GB,H200` (empty: one A100-40GB).
    ///
    /// # Errors
    /// An unknown model.
    pub fn fresh_from_list(list: &str, now_ms: u64) -> Result<State, String> {
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            State::fresh(&["A100-40GB"], now_ms)
        } else {
            State::fresh(&names, now_ms)
        }
    }

    /// Count a call of `function` against its fault; the action if this call fails.
    /// Returns whether the state changed (a counter moved).
    pub fn count_call(&mut self, function: &str, pid: u32) -> (bool, Option<FaultAction>) {
        let Some(f) = self.faults.get_mut(function) else {
            return (false, None);
        };
        f.seen += 1;
        if f.seen < f.call {
            return (true, None);
        }
        let Some(fault) = self.faults.remove(function) else {
            return (true, None);
        };
        let action = parse_fault_code(&fault.code).unwrap_or(FaultAction::Fail(code::UNKNOWN));
        self.fired.push(Fired {
            function: function.to_string(),
            code: fault.code,
            pid,
        });
        (true, Some(action))
    }

    /// A GPU by index.
    ///
    /// # Errors
    /// INVALID_ARGUMENT.
    pub fn gpu(&self, i: u32) -> R<&Gpu> {
        self.gpus.get(i as usize).ok_or(code::INVALID_ARGUMENT)
    }

    /// A GPU by index, mutable.
    ///
    /// # Errors
    /// INVALID_ARGUMENT.
    pub fn gpu_mut(&mut self, i: u32) -> R<&mut Gpu> {
        self.gpus.get_mut(i as usize).ok_or(code::INVALID_ARGUMENT)
    }

    /// Next MIG UUID.
    fn next_mig_uuid(&mut self, gpu: u32) -> String {
        self.serial += 1;
        let base = self.gpus.get(gpu as usize).map_or(0, |g| fnv(&g.uuid));
        uuid("MIG", base ^ self.serial.wrapping_mul(0x1000_0001))
    }

    /// Create a GPU instance, at `placement` or the first free one.
    ///
    /// # Errors
    /// As the driver: NOT_SUPPORTED (MIG off), INVALID_ARGUMENT (profile, placement),
    /// INSUFFICIENT_RESOURCES (overlap, profile exhausted).
    pub fn create_gi(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Option<(u32, u32)>,
    ) -> R<u32> {
        let g = self.gpu(gpu)?;
        if !g.mig_current {
            return Err(code::NOT_SUPPORTED);
        }
        let model = g.model()?;
        let prof = model.by_id(profile_id).ok_or(code::INVALID_ARGUMENT)?;
        let possible = tables::placements(prof);
        if let Some(pl) = placement {
            if !possible.contains(&pl) {
                return Err(code::INVALID_ARGUMENT);
            }
        }
        let same = g
            .gis
            .iter()
            .filter(|gi| gi.profile_id == profile_id)
            .count() as u32;
        if same >= prof.instances {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let used = g.used_mask();
        let used_slices = g.used_slices(model);
        if used_slices + prof.slices > COMPUTE_SLICES {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let (start, size) = match placement {
            Some(pl) => pl,
            None => possible
                .iter()
                .copied()
                .find(|&(s, z)| used & mask(s, z) == 0)
                .ok_or(code::INSUFFICIENT_RESOURCES)?,
        };
        if used & mask(start, size) != 0 {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        // Lowest free id from 1: ids are unique while alive; the driver, too, gives a
        // re-created instance an id it had before.
        let id = (1..)
            .find(|id| g.gis.iter().all(|gi| gi.id != *id))
            .unwrap_or(1);
        let g = self.gpu_mut(gpu)?;
        g.gis.push(Gi {
            id,
            profile_id,
            start,
            size,
            cis: Vec::new(),
        });
        g.gis.sort_by_key(|gi| gi.id);
        Ok(id)
    }

    /// Create a compute instance of CI profile `ci_profile` in a GPU instance.
    ///
    /// # Errors
    /// NOT_FOUND (GI gone), NOT_SUPPORTED (profile not offered), INSUFFICIENT_RESOURCES.
    pub fn create_ci(&mut self, gpu: u32, gi: u32, ci_profile: u32) -> R<u32> {
        let g = self.gpu(gpu)?;
        let model = g.model()?;
        let inst = g.gi(gi)?;
        let gi_slices = model.by_id(inst.profile_id).ok_or(code::UNKNOWN)?.slices;
        let (_, ci_slices) = ci_profile_slices(ci_profile)?;
        if !tables::ci_allowed(gi_slices, ci_slices) {
            return Err(code::NOT_SUPPORTED);
        }
        let mut used = 0u64;
        for c in &inst.cis {
            used |= mask(c.start, c.slices);
        }
        let start = (0..gi_slices)
            .step_by(ci_slices as usize)
            .find(|&s| s + ci_slices <= gi_slices && used & mask(s, ci_slices) == 0)
            .ok_or(code::INSUFFICIENT_RESOURCES)?;
        let id = (0..)
            .find(|id| inst.cis.iter().all(|c| c.id != *id))
            .unwrap_or(0);
        let uuid = self.next_mig_uuid(gpu);
        let inst = self.gpu_mut(gpu)?.gi_mut(gi)?;
        inst.cis.push(Ci {
            id,
            profile_id: ci_profile,
            slices: ci_slices,
            start,
            uuid,
        });
        inst.cis.sort_by_key(|c| c.id);
        Ok(id)
    }

    /// Destroy a compute instance.
    ///
    /// # Errors
    /// NOT_FOUND, IN_USE while a process runs on it.
    pub fn destroy_ci(&mut self, gpu: u32, gi: u32, ci: u32) -> R<()> {
        let g = self.gpu_mut(gpu)?;
        if g.processes
            .iter()
            .any(|p| p.gi == Some(gi) && p.ci == Some(ci))
        {
            return Err(code::IN_USE);
        }
        let inst = g.gi_mut(gi)?;
        let before = inst.cis.len();
        inst.cis.retain(|c| c.id != ci);
        if inst.cis.len() == before {
            return Err(code::NOT_FOUND);
        }
        Ok(())
    }

    /// Destroy a GPU instance.
    ///
    /// # Errors
    /// NOT_FOUND, IN_USE while it has compute instances or processes.
    pub fn destroy_gi(&mut self, gpu: u32, gi: u32) -> R<()> {
        let g = self.gpu_mut(gpu)?;
        let inst = g.gi(gi)?;
        if !inst.cis.is_empty() || g.processes.iter().any(|p| p.gi == Some(gi)) {
            return Err(code::IN_USE);
        }
        g.gis.retain(|x| x.id != gi);
        Ok(())
    }

    /// Ask for a MIG mode; it applies at the next reset. Returns the activation status.
    ///
    /// # Errors
    /// IN_USE while processes run, or (turning MIG off) while instances exist.
    pub fn set_mig(&mut self, gpu: u32, on: bool) -> R<Ret> {
        let g = self.gpu_mut(gpu)?;
        if !g.processes.is_empty() || (!on && !g.gis.is_empty()) {
            return Err(code::IN_USE);
        }
        g.mig_pending = on;
        Ok(if g.mig_pending == g.mig_current {
            code::SUCCESS
        } else {
            code::RESET_REQUIRED
        })
    }

    /// Reset a GPU: the pending MIG mode takes effect.
    ///
    /// # Errors
    /// IN_USE while processes run.
    pub fn reset(&mut self, gpu: u32) -> R<()> {
        let g = self.gpu_mut(gpu)?;
        if !g.processes.is_empty() {
            return Err(code::IN_USE);
        }
        g.mig_current = g.mig_pending;
        if !g.mig_current {
            g.gis.clear();
        }
        Ok(())
    }

    /// Attach a fake process, on a GPU instance (its first compute instance) or the
    /// whole GPU.
    ///
    /// # Errors
    /// One line saying what is wrong.
    pub fn attach(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        pid: u32,
        mem_mib: u64,
        sm_util: u32,
    ) -> Result<(), String> {
        let n = self.gpus.len();
        let g = self
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        if g.processes.iter().any(|p| p.pid == pid) {
            return Err(format!("pid {pid} is already attached to GPU {gpu}"));
        }
        let ci = match gi {
            Some(id) => {
                let inst = g
                    .gis
                    .iter()
                    .find(|x| x.id == id)
                    .ok_or_else(|| format!("GPU {gpu} has no GPU instance {id}"))?;
                let ci = inst
                    .cis
                    .first()
                    .ok_or_else(|| format!("GPU instance {id} has no compute instance"))?;
                Some(ci.id)
            }
            None if g.mig_current && !g.gis.is_empty() => {
                return Err(format!(
                    "GPU {gpu} is in MIG mode with instances: name one with --gi"
                ))
            }
            None => None,
        };
        g.processes.push(Process {
            pid,
            gi,
            ci,
            mem_mib,
            sm_util,
        });
        Ok(())
    }

    /// Detach a fake process from every GPU. Returns whether it was attached.
    pub fn detach(&mut self, pid: u32) -> bool {
        let mut found = false;
        for g in &mut self.gpus {
            let before = g.processes.len();
            g.processes.retain(|p| p.pid != pid);
            found |= g.processes.len() != before;
        }
        found
    }

    /// The MIG devices of a GPU in NVML enumeration order: (gi id, ci id).
    pub fn mig_devices(&self, gpu: u32) -> R<Vec<(u32, u32)>> {
        let g = self.gpu(gpu)?;
        if !g.mig_current {
            return Ok(Vec::new());
        }
        Ok(g.gis
            .iter()
            .flat_map(|gi| gi.cis.iter().map(move |c| (gi.id, c.id)))
            .collect())
    }
}

/// A compute instance profile (index = id) and its slices.
///
/// # Errors
/// INVALID_ARGUMENT beyond the profile count, NOT_SUPPORTED for profiles these GPUs lack.
pub fn ci_profile_slices(index: u32) -> R<(u32, u32)> {
    if index >= 8 {
        return Err(code::INVALID_ARGUMENT);
    }
    tables::CI_PROFILES
        .iter()
        .copied()
        .find(|(i, _)| *i == index)
        .ok_or(code::NOT_SUPPORTED)
}

impl Gpu {
    /// The model table of this GPU.
    ///
    /// # Errors
    /// UNKNOWN for a state file naming a model the fake lacks.
    pub fn model(&self) -> R<&'static Model> {
        tables::model(&self.model).ok_or(code::UNKNOWN)
    }

    /// A GPU instance by id.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi(&self, id: u32) -> R<&Gi> {
        self.gis.iter().find(|g| g.id == id).ok_or(code::NOT_FOUND)
    }

    /// A GPU instance by id, mutable.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi_mut(&mut self, id: u32) -> R<&mut Gi> {
        self.gis
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or(code::NOT_FOUND)
    }

    fn used_mask(&self) -> u64 {
        self.gis.iter().fold(0, |m, g| m | mask(g.start, g.size))
    }

    fn used_slices(&self, model: &Model) -> u32 {
        self.gis
            .iter()
            .filter_map(|g| model.by_id(g.profile_id))
            .map(|p| p.slices)
            .sum()
    }

    /// How many more instances of a profile fit now.
    pub fn remaining(&self, prof: &GiProfile) -> u32 {
        if !self.mig_current {
            // With MIG off the driver answers for an empty GPU (the H200 did: 7 x 1g).
            return prof.instances.min(tables::placements(prof).len() as u32);
        }
        let same = self.gis.iter().filter(|g| g.profile_id == prof.id).count() as u32;
        let left = prof.instances.saturating_sub(same);
        let mut used = self.used_mask();
        let mut slices = self.model().map_or(0, |m| self.used_slices(m));
        let mut n = 0;
        // Placements are aligned and listed low to high, so first-fit finds the most.
        for (s, z) in tables::placements(prof) {
            if n < left && used & mask(s, z) == 0 && slices + prof.slices <= COMPUTE_SLICES {
                used |= mask(s, z);
                slices += prof.slices;
                n += 1;
            }
        }
        n
    }

    /// Processes, optionally only those on one GPU instance.
    pub fn processes_on(&self, gi: Option<u32>) -> Vec<&Process> {
        self.processes
            .iter()
            .filter(|p| gi.is_none() || p.gi == gi)
            .collect()
    }

    /// SM count of a GPU instance's profile.
    pub fn gi_profile(&self, gi: &Gi) -> R<&'static GiProfile> {
        self.model()?.by_id(gi.profile_id).ok_or(code::UNKNOWN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a100() -> State {
        State::fresh(&["A100-40GB"], 0).unwrap()
    }

    #[test]
    fn fresh_state_has_stable_uuids_and_mig_on() {
        let a = State::fresh_from_list("A100-40GB, H200", 0).unwrap();
        let b = State::fresh_from_list("A100-40GB,H200", 5).unwrap();
        assert_eq!(a.gpus[0].uuid, b.gpus[0].uuid);
        assert_ne!(a.gpus[0].uuid, a.gpus[1].uuid);
        assert!(a.gpus[0].uuid.starts_with("GPU-") && a.gpus[0].uuid.len() == 40);
        assert!(a
            .gpus
            .iter()
            .all(|g| g.mig_current && g.mig_pending && g.gis.is_empty()));
        assert_eq!(
            State::fresh_from_list("", 0).unwrap().gpus[0].model,
            "A100-40GB"
        );
        let err = State::fresh_from_list("V100", 0).unwrap_err();
        assert!(err.contains("V100") && err.contains("H200"), "{err}");
    }

    #[test]
    fn overlap_and_exhaustion_are_insufficient_resources() {
        let mut s = a100();
        let one = s.create_gi(0, 9, Some((0, 4))).unwrap();
        assert_eq!(
            s.create_gi(0, 9, Some((0, 4))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
        assert_eq!(
            s.create_gi(0, 14, Some((2, 2))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
        assert_eq!(s.create_gi(0, 9, Some((2, 4))), Err(code::INVALID_ARGUMENT));
        let two = s.create_gi(0, 9, None).unwrap();
        assert_ne!(one, two);
        assert_eq!(s.gpus[0].gi(two).unwrap().start, 4);
        assert_eq!(s.create_gi(0, 19, None), Err(code::INSUFFICIENT_RESOURCES));
        assert_eq!(s.create_gi(0, 77, None), Err(code::INVALID_ARGUMENT));
        // 1g.5gb+me: one at most.
        let mut s = a100();
        s.create_gi(0, 20, Some((0, 1))).unwrap();
        assert_eq!(
            s.create_gi(0, 20, Some((1, 1))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
    }

    #[test]
    fn seven_small_and_mixed_layouts_fit() {
        let mut s = a100();
        for _ in 0..7 {
            s.create_gi(0, 19, None).unwrap();
        }
        assert_eq!(s.create_gi(0, 19, None), Err(code::INSUFFICIENT_RESOURCES));
        let ids: Vec<u32> = s.gpus[0].gis.iter().map(|g| g.id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
        let mut s = a100();
        s.create_gi(0, 5, Some((0, 4))).unwrap();
        s.create_gi(0, 14, Some((4, 2))).unwrap();
        s.create_gi(0, 19, Some((6, 1))).unwrap();
        let m = tables::model("A100-40GB").unwrap();
        assert_eq!(s.gpus[0].remaining(m.by_index(0).unwrap()), 0);
    }

    #[test]
    fn remaining_capacity_counts_what_still_fits() {
        let mut s = a100();
        let m = tables::model("A100-40GB").unwrap();
        let one_g = m.by_index(0).unwrap();
        assert_eq!(s.gpus[0].remaining(one_g), 7);
        s.create_gi(0, 9, Some((4, 4))).unwrap();
        assert_eq!(s.gpus[0].remaining(one_g), 4);
        assert_eq!(s.gpus[0].remaining(m.by_index(2).unwrap()), 1);
        assert_eq!(s.gpus[0].remaining(m.by_index(4).unwrap()), 0);
    }

    #[test]
    fn compute_instances_and_in_use() {
        let mut s = a100();
        let gi = s.create_gi(0, 9, Some((0, 4))).unwrap();
        // A 3g instance offers 1, 2 and 3 slice CIs, not 4 or 7.
        assert_eq!(s.create_ci(0, gi, 3), Err(code::NOT_SUPPORTED));
        assert_eq!(s.create_ci(0, gi, 9), Err(code::INVALID_ARGUMENT));
        let ci = s.create_ci(0, gi, 2).unwrap();
        assert_eq!(ci, 0);
        assert_eq!(s.create_ci(0, gi, 0), Err(code::INSUFFICIENT_RESOURCES));
        let uuid = &s.gpus[0].gis[0].cis[0].uuid;
        assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
        assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE), "CIs still there");
        s.attach(0, Some(gi), 4242, 100, 0).unwrap();
        assert_eq!(s.destroy_ci(0, gi, ci), Err(code::IN_USE));
        assert_eq!(s.set_mig(0, false), Err(code::IN_USE));
        assert!(s.detach(4242));
        assert!(!s.detach(4242));
        s.destroy_ci(0, gi, ci).unwrap();
        assert_eq!(s.destroy_ci(0, gi, ci), Err(code::NOT_FOUND));
        s.destroy_gi(0, gi).unwrap();
        assert_eq!(s.destroy_gi(0, gi), Err(code::NOT_FOUND));
    }

    #[test]
    fn mig_mode_change_waits_for_reset() {
        let mut s = a100();
        assert_eq!(s.set_mig(0, false), Ok(code::RESET_REQUIRED));
        assert!(s.gpus[0].mig_current && !s.gpus[0].mig_pending);
        assert_eq!(
            s.create_gi(0, 19, None).map(|_| ()),
            Ok(()),
            "still MIG until reset"
        );
        assert_eq!(s.set_mig(0, false), Err(code::IN_USE), "instances exist");
        s.gpus[0].gis.clear();
        s.set_mig(0, false).unwrap();
        s.reset(0).unwrap();
        assert!(!s.gpus[0].mig_current);
        assert_eq!(s.create_gi(0, 19, None), Err(code::NOT_SUPPORTED));
        assert_eq!(s.set_mig(0, true), Ok(code::RESET_REQUIRED));
        s.attach(0, None, 7, 10, 50).unwrap();
        assert_eq!(s.reset(0), Err(code::IN_USE));
    }

    #[test]
    fn faults_fire_once_on_the_nth_call() {
        let mut s = a100();
        s.faults.insert(
            "nvmlX".into(),
            Fault {
                call: 2,
                code: "NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
                seen: 0,
            },
        );
        assert_eq!(s.count_call("nvmlY", 1), (false, None));
        assert_eq!(s.count_call("nvmlX", 1), (true, None));
        assert_eq!(
            s.count_call("nvmlX", 1),
            (true, Some(FaultAction::Fail(code::INSUFFICIENT_RESOURCES)))
        );
        assert_eq!(s.count_call("nvmlX", 1), (false, None));
        assert_eq!(s.fired.len(), 1);
        assert_eq!(parse_fault_code("crash"), Some(FaultAction::Crash));
        assert_eq!(parse_fault_code("IN_USE"), Some(FaultAction::Fail(19)));
        assert_eq!(parse_fault_code("NVML_SUCCESS"), None);
        assert_eq!(parse_fault_code("bogus"), None);
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut s = a100();
        let gi = s.create_gi(0, 14, None).unwrap();
        s.create_ci(0, gi, 1).unwrap();
        let text = serde_json::to_string_pretty(&s).unwrap();
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        // A hand-written fault without a counter parses.
        let with_fault = text.replacen(
            "\"faults\": {}",
            "\"faults\": {\"nvmlGpuInstanceCreateComputeInstance\": {\"call\": 2, \"code\": \"crash\"}}",
            1,
        );
        let back: State = serde_json::from_str(&with_fault).unwrap();
        assert_eq!(back.faults["nvmlGpuInstanceCreateComputeInstance"].seen, 0);
    }
}
