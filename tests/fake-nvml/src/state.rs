//! The fake driver's state and the rules it applies, as plain Rust: no C types, no I/O.
//! Every function answers with the `nvmlReturn_t` code a real driver would give.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::tables::{self, Family, GiProfile, Media, Model};

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

fn default_driver() -> u32 {
    580
}

/// The whole fake: GPUs, driver generation, quirks, pending faults and what fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Physical GPUs, by NVML index.
    pub gpus: Vec<Gpu>,
    /// Driver generation it answers as (535, 550, 570, 580).
    #[serde(default = "default_driver")]
    pub driver: u32,
    /// Every caller is unprivileged (else the caller's euid decides, as the driver does).
    #[serde(default)]
    pub unprivileged: bool,
    /// List the all-media GPU instance profiles (indexes 15 and 16 of nvml.h API 13,
    /// `+me.all`). Off by default: the lent H200 with driver 580.159.04 answered
    /// NOT_SUPPORTED for both (fixtures/h200-r580-mig-off.root.json), so a Hopper card on
    /// R580 does not list them; on is a driver and card that do (Blackwell's RTX PRO 6000
    /// reports a `+me.all` profile), for testing that colloc sees every listed profile.
    #[serde(default)]
    pub all_media: bool,
    /// Timing quirks of real drivers, off unless asked for.
    #[serde(default)]
    pub quirks: Quirks,
    /// Faults to inject, by NVML function name.
    #[serde(default)]
    pub faults: BTreeMap<String, Fault>,
    /// Faults that have fired, oldest first.
    #[serde(default)]
    pub fired: Vec<Fired>,
    /// Reboots so far (`fake-nvml-ctl reboot`).
    #[serde(default)]
    pub boots: u32,
    /// When the state was made (Unix ms); energy counters start there.
    #[serde(default)]
    pub created_unix_ms: u64,
}

/// What real drivers do that a simple model would not, each off (0) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quirks {
    /// A destroyed GPU instance stays listed by `nvmlDeviceGetGpuInstances` this many
    /// more times (NVIDIA/go-nvml#146: on H100 a GI destroy returned SUCCESS with the GI
    /// still listed; a destroy takes about a second).
    #[serde(default)]
    pub linger_listings: u32,
    /// After its last compute instance is destroyed, a GPU instance answers IN_USE to this
    /// many destroy calls (seen for a moment; the NVIDIA DRA driver retries about 1 s).
    #[serde(default)]
    pub busy_after_ci_destroy: u32,
    /// A new compute instance's MIG device is listed only this many ms after it was made.
    #[serde(default)]
    pub mig_device_delay_ms: u64,
    /// The driver publishes no capability file of any GPU or compute instance
    /// (`/proc/driver/nvidia/capabilities/gpuG/mig/...`, see [`crate::caps`]).
    #[serde(default)]
    pub no_caps: bool,
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
    /// MIG mode after the next activation (reset, reboot).
    pub mig_pending: bool,
    /// GPU instances.
    #[serde(default)]
    pub gis: Vec<Gi>,
    /// Fake processes with a compute context.
    #[serde(default)]
    pub processes: Vec<Process>,
    /// Holders that are not processes NVML lists (DCGM, a leaked handle,
    /// nvidia-persistenced): they make destroys and resets answer IN_USE.
    #[serde(default)]
    pub holders: Vec<Holder>,
    /// The GPU is passed through to a VM: a mode change needing a reset answers
    /// RESET_REQUIRED (nvml.h, nvmlDeviceSetMigMode).
    #[serde(default)]
    pub passthrough: bool,
    /// Destroyed GPU instances the driver still lists ([`Quirks::linger_listings`]).
    #[serde(default)]
    pub lingering: Vec<Lingering>,
    /// GPU instances whose destroy answers IN_USE a few more times
    /// ([`Quirks::busy_after_ci_destroy`]): (GI id, calls left).
    #[serde(default)]
    pub busy: Vec<(u32, u32)>,
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
    /// GPU instance id (fixed by profile size and placement).
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
    /// `MIG-…` UUID of its MIG device (derived from GPU, GI and CI).
    pub uuid: String,
    /// When it was made (Unix ms), for [`Quirks::mig_device_delay_ms`].
    #[serde(default)]
    pub created_ms: u64,
}

/// A destroyed GPU instance still listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lingering {
    /// The instance as it was (without compute instances).
    pub gi: Gi,
    /// Listings left.
    pub listings: u32,
}

/// Something that holds a GPU or GPU instance without being a listed process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// The GPU instance it holds; `None`: the whole GPU (nvidia-persistenced, nvidia_drm).
    #[serde(default)]
    pub gi: Option<u32>,
    /// Who it stands for, e.g. `dcgm`.
    pub name: String,
    /// Let go after refusing this many destroy calls; `None`: hold until released.
    #[serde(default)]
    pub release_after: Option<u32>,
    /// A real process it stands for (a job's leftover with a device file open): the hold
    /// ends when that process has exited, as the driver's does when its last handle
    /// closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// Is process `pid` still running (a zombie has exited)?
fn process_alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|s| s != "Z" && s != "X")
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
    /// Its part in MPS, if any. As driver 580 answers (measured on the H200):
    /// `nvmlDeviceGetComputeRunningProcesses` lists the server and every client, each with
    /// its own memory; `nvmlDeviceGetMPSComputeRunningProcesses` lists the clients only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<MpsRole>,
}

/// A process's part in MPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MpsRole {
    /// The MPS server (`nvidia-cuda-mps-server`).
    Server,
    /// A client of the MPS server.
    Client,
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
    /// How many calls it fails, from the `call`-th on; 0: every call until cleared.
    #[serde(default = "one")]
    pub times: u64,
}

fn one() -> u64 {
    1
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

/// The MIG device UUID of (GPU, GI, CI): the same instance ids on the same GPU give the
/// same UUID, as real MIG UUIDs behave (issue 16, point 4).
pub fn mig_uuid(gpu_uuid: &str, gi: u32, ci: u32) -> String {
    uuid(
        "MIG",
        fnv(gpu_uuid) ^ (u64::from(gi) << 20 | u64::from(ci)).wrapping_mul(0x1000_0001),
    )
}

/// The older MIG device name NVML lookups still accept: `MIG-<GPU UUID>/<gi>/<ci>`
/// (drivers before R470 printed it; `nvmlDeviceGetHandleByUUID` takes both).
pub fn legacy_mig_name(gpu_uuid: &str, gi: u32, ci: u32) -> String {
    format!("MIG-{gpu_uuid}/{gi}/{ci}")
}

fn mask(start: u32, size: u32) -> u64 {
    if size == 0 || start + size > 64 {
        return 0;
    }
    ((1u64 << size) - 1) << start
}

/// Options of a fresh state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    /// Driver generation.
    pub driver: u32,
    /// MIG mode on at start.
    pub mig: bool,
}

impl Default for Fresh {
    fn default() -> Fresh {
        Fresh {
            driver: default_driver(),
            mig: true,
        }
    }
}

impl State {
    /// A fresh state: the given models, MIG on, no instances, stable GPU UUIDs.
    ///
    /// # Errors
    /// The name of an unknown model.
    pub fn fresh(models: &[&str], now_ms: u64) -> Result<State, String> {
        State::fresh_with(models, &Fresh::default(), now_ms)
    }

    /// A fresh state with options.
    ///
    /// # Errors
    /// An unknown model or driver generation.
    pub fn fresh_with(models: &[&str], opts: &Fresh, now_ms: u64) -> Result<State, String> {
        if !tables::DRIVERS.contains(&opts.driver) {
            return Err(format!(
                "unknown driver generation {}; known: {}",
                opts.driver,
                tables::DRIVERS
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut gpus = Vec::new();
        for (i, m) in models.iter().enumerate() {
            let model = tables::model_named(m).ok_or_else(|| {
                let known: Vec<&str> = tables::MODELS.iter().map(|m| m.alias).collect();
                format!("unknown fake GPU model {m:?}; known: {}", known.join(", "))
            })?;
            gpus.push(Gpu {
                model: model.alias.to_string(),
                uuid: uuid("GPU", fnv(model.alias) ^ (i as u64)),
                mig_current: opts.mig,
                mig_pending: opts.mig,
                gis: Vec::new(),
                processes: Vec::new(),
                holders: Vec::new(),
                passthrough: false,
                lingering: Vec::new(),
                busy: Vec::new(),
                power_w: default_power(),
            });
        }
        if gpus.is_empty() {
            return Err("no fake GPUs named".into());
        }
        Ok(State {
            gpus,
            driver: opts.driver,
            unprivileged: false,
            all_media: false,
            quirks: Quirks::default(),
            faults: BTreeMap::new(),
            fired: Vec::new(),
            boots: 0,
            created_unix_ms: now_ms,
        })
    }

    /// Models from a comma list such as `A100-40GB,H200` (empty: one A100-40GB).
    ///
    /// # Errors
    /// An unknown model.
    pub fn fresh_from_list(list: &str, now_ms: u64) -> Result<State, String> {
        State::fresh_list_with(list, &Fresh::default(), now_ms)
    }

    /// Models from a comma list, with options.
    ///
    /// # Errors
    /// An unknown model or driver.
    pub fn fresh_list_with(list: &str, opts: &Fresh, now_ms: u64) -> Result<State, String> {
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            State::fresh_with(&["A100-40GB"], opts, now_ms)
        } else {
            State::fresh_with(&names, opts, now_ms)
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
        // Not the last time: it stays and fires again at the next call.
        let again = f.times != 1;
        if f.times > 1 {
            f.times -= 1;
        }
        let fault = if again {
            Some(f.clone())
        } else {
            self.faults.remove(function)
        };
        let Some(fault) = fault else {
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

    /// A GPU instance profile by id, as this driver lists it for the GPU.
    ///
    /// # Errors
    /// NOT_SUPPORTED for an A100 with MIG off (nvml.h: "If device doesn't have MIG mode
    /// enabled"; a Hopper card answers, [h200]); INVALID_ARGUMENT for an unknown id.
    pub fn gi_profile_by_id(&self, gpu: u32, id: u32) -> R<&'static GiProfile> {
        let g = self.gpu(gpu)?;
        let model = g.model()?;
        if model.family == Family::Ampere && !g.mig_current {
            return Err(code::NOT_SUPPORTED);
        }
        model
            .profile_by_id(id, self.driver)
            .filter(|p| self.all_media || p.media != Media::All)
            .ok_or(code::INVALID_ARGUMENT)
    }

    /// A GPU instance profile by NVML profile index.
    ///
    /// # Errors
    /// INVALID_ARGUMENT at or past this driver's `NVML_GPU_INSTANCE_PROFILE_COUNT`;
    /// NOT_SUPPORTED for a profile the GPU lacks, and on an A100 with MIG off.
    pub fn gi_profile_by_index(&self, gpu: u32, index: u32) -> R<&'static GiProfile> {
        if index >= tables::gi_profile_count(self.driver) {
            return Err(code::INVALID_ARGUMENT);
        }
        let g = self.gpu(gpu)?;
        let model = g.model()?;
        if model.family == Family::Ampere && !g.mig_current {
            return Err(code::NOT_SUPPORTED);
        }
        model
            .profile_by_index(index, self.driver)
            .filter(|p| self.all_media || p.media != Media::All)
            .ok_or(code::NOT_SUPPORTED)
    }

    /// Create a GPU instance, at `placement` or where the driver would put it
    /// ([`tables::driver_placement`]).
    ///
    /// # Errors
    /// As the driver: NOT_SUPPORTED (MIG off), INVALID_ARGUMENT (profile, placement),
    /// INSUFFICIENT_RESOURCES (overlap, also with a destroyed instance still listed;
    /// profile exhausted; the all-media rule).
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
        let prof = self.gi_profile_by_id(gpu, profile_id)?;
        let possible = prof.placements();
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
        if same >= prof.instances || !g.media_allows(model, prof) {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let used = g.used_mask();
        if g.used_slices(model) + prof.slices > model.compute_slices {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let (start, size) = match placement {
            Some(pl) => pl,
            None => {
                let listed = model
                    .listed(self.driver)
                    .filter(|p| self.all_media || p.media != Media::All)
                    .map(|p| {
                        let made = g.gis.iter().filter(|gi| gi.profile_id == p.id).count();
                        (p, made as u32)
                    });
                tables::driver_placement(prof, listed, used).ok_or(code::INSUFFICIENT_RESOURCES)?
            }
        };
        if used & mask(start, size) != 0 {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let id = tables::gi_id_for(model.mem_slots, start, size);
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

    /// Create a compute instance of CI profile `ci_profile` in a GPU instance, its MIG
    /// device listed at once.
    ///
    /// # Errors
    /// As [`State::create_ci_at`].
    pub fn create_ci(&mut self, gpu: u32, gi: u32, ci_profile: u32) -> R<u32> {
        self.create_ci_at(gpu, gi, ci_profile, 0)
    }

    /// Create a compute instance at time `now_ms` (Unix ms; its MIG device is listed
    /// [`Quirks::mig_device_delay_ms`] later).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (index past this driver's count), NOT_FOUND (GI gone),
    /// NOT_SUPPORTED (profile not offered), INSUFFICIENT_RESOURCES.
    pub fn create_ci_at(&mut self, gpu: u32, gi: u32, ci_profile: u32, now_ms: u64) -> R<u32> {
        let driver = self.driver;
        let g = self.gpu(gpu)?;
        let model = g.model()?;
        let inst = g.gi(gi)?;
        let gi_slices = g.gi_profile(inst, driver)?.slices;
        let ci_slices = ci_profile_slices(ci_profile, driver)?;
        if !tables::ci_offered(model.family, driver, gi_slices, ci_profile) {
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
        let uuid = mig_uuid(&g.uuid, gi, id);
        let inst = self.gpu_mut(gpu)?.gi_mut(gi)?;
        inst.cis.push(Ci {
            id,
            profile_id: ci_profile,
            slices: ci_slices,
            start,
            uuid,
            created_ms: now_ms,
        });
        inst.cis.sort_by_key(|c| c.id);
        Ok(id)
    }

    /// Destroy a compute instance.
    ///
    /// # Errors
    /// NOT_FOUND; IN_USE while a process runs on it or a holder holds its GPU instance.
    pub fn destroy_ci(&mut self, gpu: u32, gi: u32, ci: u32) -> R<()> {
        let busy_after = self.quirks.busy_after_ci_destroy;
        let g = self.gpu_mut(gpu)?;
        g.gi(gi)?
            .cis
            .iter()
            .find(|c| c.id == ci)
            .ok_or(code::NOT_FOUND)?;
        if g.processes
            .iter()
            .any(|p| p.gi == Some(gi) && p.ci == Some(ci))
        {
            return Err(code::IN_USE);
        }
        if g.held(Some(gi)) {
            return Err(code::IN_USE);
        }
        let inst = g.gi_mut(gi)?;
        inst.cis.retain(|c| c.id != ci);
        if inst.cis.is_empty() && busy_after > 0 {
            g.busy.retain(|(id, _)| *id != gi);
            g.busy.push((gi, busy_after));
        }
        Ok(())
    }

    /// Destroy a GPU instance. With [`Quirks::linger_listings`] it stays listed a while.
    ///
    /// # Errors
    /// NOT_FOUND (also for one destroyed but still listed); IN_USE while it has compute
    /// instances, processes or holders, and for a moment after its last compute instance
    /// went ([`Quirks::busy_after_ci_destroy`]).
    pub fn destroy_gi(&mut self, gpu: u32, gi: u32) -> R<()> {
        let linger = self.quirks.linger_listings;
        let g = self.gpu_mut(gpu)?;
        // One destroyed but still listed is gone all the same: NOT_FOUND.
        let inst = g
            .gis
            .iter()
            .find(|x| x.id == gi)
            .cloned()
            .ok_or(code::NOT_FOUND)?;
        if !inst.cis.is_empty() || g.processes.iter().any(|p| p.gi == Some(gi)) {
            return Err(code::IN_USE);
        }
        if g.held(Some(gi)) {
            return Err(code::IN_USE);
        }
        if let Some(b) = g.busy.iter_mut().find(|(id, _)| *id == gi) {
            b.1 -= 1;
            g.busy.retain(|(_, n)| *n > 0);
            return Err(code::IN_USE);
        }
        g.gis.retain(|x| x.id != gi);
        if linger > 0 {
            g.lingering.push(Lingering {
                gi: inst,
                listings: linger,
            });
        }
        Ok(())
    }

    /// Ask for a MIG mode; returns the activation status (nvml.h nvmlDeviceSetMigMode:
    /// the call succeeds and `activationStatus` says whether the mode took effect).
    ///
    /// - Hopper: takes effect at once, no reset ([guide] "Enable MIG Mode"); only
    ///   processes on the GPU keep it pending (IN_USE).
    /// - A100/A30: the driver resets the GPU itself when it is idle, so the mode takes
    ///   effect at once; any client holding the GPU (a process, nvidia-persistenced,
    ///   nvidia_drm, DCGM) leaves it pending with IN_USE; under passthrough it stays
    ///   pending with RESET_REQUIRED (a VM reboot applies it).
    ///
    /// # Errors
    /// IN_USE when turning MIG off while GPU instances exist (nvidia-smi refuses it too).
    pub fn set_mig(&mut self, gpu: u32, on: bool) -> R<Ret> {
        let g = self.gpu_mut(gpu)?;
        g.drop_exited_holders();
        let family = g.model()?.family;
        if !on && (!g.gis.is_empty() || !g.lingering.is_empty()) {
            return Err(code::IN_USE);
        }
        g.mig_pending = on;
        if g.mig_current == on {
            return Ok(code::SUCCESS);
        }
        let status = match family {
            Family::Hopper if !g.processes.is_empty() => code::IN_USE,
            Family::Hopper => code::SUCCESS,
            Family::Ampere if g.passthrough => code::RESET_REQUIRED,
            Family::Ampere if !g.processes.is_empty() || !g.holders.is_empty() => code::IN_USE,
            Family::Ampere => code::SUCCESS,
        };
        if status == code::SUCCESS {
            g.activate();
        }
        Ok(status)
    }

    /// Reset a GPU (`nvidia-smi -r`): the pending MIG mode takes effect, and no GPU or
    /// compute instance survives it ([guide]: instances are not persistent).
    ///
    /// # Errors
    /// IN_USE while processes run or anything holds the GPU.
    pub fn reset(&mut self, gpu: u32) -> R<()> {
        let g = self.gpu_mut(gpu)?;
        g.drop_exited_holders();
        if !g.processes.is_empty() || !g.holders.is_empty() {
            return Err(code::IN_USE);
        }
        g.activate();
        Ok(())
    }

    /// Reboot the node: processes and holders are gone, no instance survives; an A100
    /// comes up in the MIG mode its InfoROM holds (the pending one), a Hopper card with
    /// MIG off ([guide] "Enable MIG Mode": not persistent across reboots on Hopper).
    pub fn reboot(&mut self) {
        for g in &mut self.gpus {
            g.processes.clear();
            g.holders.clear();
            if g.model().is_ok_and(|m| m.family == Family::Hopper) {
                g.mig_pending = false;
            }
            g.activate();
        }
        self.boots += 1;
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
            mps: None,
        });
        Ok(())
    }

    /// Mark an attached process as an MPS server or client (`None`: no part in MPS).
    ///
    /// # Errors
    /// The pid is not attached to any fake GPU.
    pub fn set_mps_role(&mut self, pid: u32, role: Option<MpsRole>) -> Result<(), String> {
        let mut found = false;
        for p in self.gpus.iter_mut().flat_map(|g| g.processes.iter_mut()) {
            if p.pid == pid {
                p.mps = role;
                found = true;
            }
        }
        if found {
            Ok(())
        } else {
            Err(format!("pid {pid} is not attached to any fake GPU"))
        }
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

    /// Hold a GPU instance (or, with `gi` None, the whole GPU) as something NVML does not
    /// list as a process would: DCGM or dcgm-exporter profiling it, a leaked NVML handle
    /// (issue 16, point 1), nvidia-persistenced.
    ///
    /// # Errors
    /// One line saying what is wrong.
    pub fn hold(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        name: &str,
        release_after: Option<u32>,
    ) -> Result<(), String> {
        self.add_holder(
            gpu,
            Holder {
                gi,
                name: name.to_string(),
                release_after,
                pid: None,
            },
        )
    }

    /// Hold as [`State::hold`], for as long as the real process `pid` runs.
    ///
    /// # Errors
    /// As [`State::hold`].
    pub fn hold_while(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        name: &str,
        pid: u32,
    ) -> Result<(), String> {
        self.add_holder(
            gpu,
            Holder {
                gi,
                name: name.to_string(),
                release_after: None,
                pid: Some(pid),
            },
        )
    }

    fn add_holder(&mut self, gpu: u32, holder: Holder) -> Result<(), String> {
        let gi = holder.gi;
        let n = self.gpus.len();
        let g = self
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        if let Some(id) = gi {
            if g.gis.iter().all(|x| x.id != id) {
                let ids: Vec<String> = g.gis.iter().map(|x| x.id.to_string()).collect();
                return Err(format!(
                    "GPU {gpu} has no GPU instance {id}; it has {}",
                    if ids.is_empty() {
                        "none".to_string()
                    } else {
                        ids.join(", ")
                    }
                ));
            }
        }
        g.holders.push(holder);
        Ok(())
    }

    /// Let go of holders on a GPU (of one GPU instance, or all). Returns how many went.
    pub fn release(&mut self, gpu: u32, gi: Option<u32>) -> usize {
        let Some(g) = self.gpus.get_mut(gpu as usize) else {
            return 0;
        };
        let before = g.holders.len();
        g.holders.retain(|h| gi.is_some() && h.gi != gi);
        before - g.holders.len()
    }

    /// GPU instances `nvmlDeviceGetGpuInstances` lists for a profile: the live ones, then
    /// destroyed ones still listed, each of which counts down one listing.
    pub fn list_gis(&mut self, gpu: u32, profile_id: u32) -> R<Vec<u32>> {
        let g = self.gpu_mut(gpu)?;
        let mut ids: Vec<u32> = g
            .gis
            .iter()
            .filter(|x| x.profile_id == profile_id)
            .map(|x| x.id)
            .collect();
        for l in &mut g.lingering {
            if l.gi.profile_id == profile_id {
                ids.push(l.gi.id);
                l.listings = l.listings.saturating_sub(1);
            }
        }
        g.lingering.retain(|l| l.listings > 0);
        Ok(ids)
    }

    /// The MIG devices of a GPU in NVML enumeration order: (gi id, ci id). A device made
    /// less than [`Quirks::mig_device_delay_ms`] ago is not listed yet.
    pub fn mig_devices(&self, gpu: u32, now_ms: u64) -> R<Vec<(u32, u32)>> {
        let g = self.gpu(gpu)?;
        if !g.mig_current {
            return Ok(Vec::new());
        }
        let delay = self.quirks.mig_device_delay_ms;
        Ok(g.gis
            .iter()
            .flat_map(|gi| {
                gi.cis
                    .iter()
                    .filter(move |c| c.created_ms.saturating_add(delay) <= now_ms)
                    .map(move |c| (gi.id, c.id))
            })
            .collect())
    }
}

/// The slices of a compute instance profile index under this driver.
///
/// # Errors
/// INVALID_ARGUMENT at or past this driver's CI profile count; NOT_SUPPORTED for
/// profiles these GPUs never offer.
pub fn ci_profile_slices(index: u32, driver: u32) -> R<u32> {
    if index >= tables::ci_profile_count(driver) {
        return Err(code::INVALID_ARGUMENT);
    }
    tables::ci_profile_slices(index).ok_or(code::NOT_SUPPORTED)
}

impl Gpu {
    /// The model table of this GPU.
    ///
    /// # Errors
    /// UNKNOWN for a state file naming a model the fake lacks.
    pub fn model(&self) -> R<&'static Model> {
        tables::model_named(&self.model).ok_or(code::UNKNOWN)
    }

    /// A GPU instance by id: a live one, or a destroyed one still listed.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi(&self, id: u32) -> R<&Gi> {
        self.gis
            .iter()
            .find(|g| g.id == id)
            .or_else(|| self.lingering.iter().map(|l| &l.gi).find(|g| g.id == id))
            .ok_or(code::NOT_FOUND)
    }

    /// A live GPU instance by id, mutable.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi_mut(&mut self, id: u32) -> R<&mut Gi> {
        self.gis
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or(code::NOT_FOUND)
    }

    /// Is this GPU instance destroyed but still listed?
    pub fn is_lingering(&self, id: u32) -> bool {
        self.gis.iter().all(|g| g.id != id) && self.lingering.iter().any(|l| l.gi.id == id)
    }

    /// Does a holder hold this GPU instance (`Some`) or the whole GPU? A holder with a
    /// release count counts this refusal and lets go when it reaches zero.
    fn held(&mut self, gi: Option<u32>) -> bool {
        self.drop_exited_holders();
        let mut held = false;
        for h in &mut self.holders {
            if h.gi == gi {
                held = true;
                if let Some(n) = &mut h.release_after {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.holders.retain(|h| h.release_after != Some(0));
        held
    }

    /// Holders standing for a process that has exited let go.
    fn drop_exited_holders(&mut self) {
        self.holders.retain(|h| h.pid.is_none_or(process_alive));
    }

    /// The pending MIG mode takes effect; instances do not survive it.
    fn activate(&mut self) {
        self.mig_current = self.mig_pending;
        self.gis.clear();
        self.lingering.clear();
        self.busy.clear();
    }

    fn used_mask(&self) -> u64 {
        self.gis
            .iter()
            .chain(self.lingering.iter().map(|l| &l.gi))
            .fold(0, |m, g| m | mask(g.start, g.size))
    }

    fn used_slices(&self, model: &Model) -> u32 {
        self.gis
            .iter()
            .chain(self.lingering.iter().map(|l| &l.gi))
            .filter_map(|g| model.profiles.iter().find(|p| p.id == g.profile_id))
            .map(|p| p.slices)
            .sum()
    }

    /// The all-media rule: an all-media instance admits only instances without media
    /// engines beside it, and needs them to be the only kind there.
    fn media_allows(&self, model: &Model, new: &GiProfile) -> bool {
        let media_of = |gi: &Gi| {
            model
                .profiles
                .iter()
                .find(|p| p.id == gi.profile_id)
                .map(|p| p.media)
        };
        let any_all = self.gis.iter().any(|g| media_of(g) == Some(Media::All));
        match new.media {
            Media::All => self.gis.is_empty(),
            Media::Standard => !any_all,
        }
    }

    /// How many more instances of a profile fit now.
    pub fn remaining(&self, prof: &GiProfile) -> u32 {
        if !self.mig_current {
            // With MIG off Hopper answers for an empty GPU (the H200 did: 7 x 1g).
            return prof.instances.min(prof.placements().len() as u32);
        }
        let Ok(model) = self.model() else {
            return 0;
        };
        if !self.media_allows(model, prof) {
            return 0;
        }
        let same = self.gis.iter().filter(|g| g.profile_id == prof.id).count() as u32;
        let left = prof.instances.saturating_sub(same);
        let mut used = self.used_mask();
        let mut slices = self.used_slices(model);
        let mut n = 0;
        // Placements are aligned and listed low to high, so first-fit finds the most.
        for (s, z) in prof.placements() {
            if n < left && used & mask(s, z) == 0 && slices + prof.slices <= model.compute_slices {
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

    /// The profile of a GPU instance.
    ///
    /// # Errors
    /// UNKNOWN for a profile id the model lacks.
    pub fn gi_profile(&self, gi: &Gi, driver: u32) -> R<&'static GiProfile> {
        self.model()?
            .profile_by_id(gi.profile_id, driver)
            .ok_or(code::UNKNOWN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a100() -> State {
        State::fresh(&["A100-40GB"], 0).unwrap()
    }

    fn fresh(models: &str, driver: u32, mig: bool) -> State {
        State::fresh_list_with(models, &Fresh { driver, mig }, 0).unwrap()
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
        assert_eq!(a.driver, 580);
        assert_eq!(
            State::fresh_from_list("", 0).unwrap().gpus[0].model,
            "A100-40GB"
        );
        let err = State::fresh_from_list("V100", 0).unwrap_err();
        assert!(err.contains("V100") && err.contains("H200"), "{err}");
        let opts = Fresh {
            driver: 999,
            mig: true,
        };
        let err = State::fresh_list_with("H200", &opts, 0).unwrap_err();
        assert!(err.contains("535, 550, 570, 580"), "{err}");
        assert!(!fresh("H200", 580, false).gpus[0].mig_current);
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
    fn gpu_instance_ids_follow_the_placement() {
        let mut s = a100();
        // 3g at 4 first, then at 0: ids 2 and 1 whatever the order.
        assert_eq!(s.create_gi(0, 9, Some((4, 4))), Ok(2));
        assert_eq!(s.create_gi(0, 9, Some((0, 4))), Ok(1));
        let mut s = a100();
        for (start, id) in [(6, 13), (0, 7), (3, 10)] {
            assert_eq!(s.create_gi(0, 19, Some((start, 1))), Ok(id));
        }
        let mut s = a100();
        assert_eq!(s.create_gi(0, 0, None), Ok(0), "7g");
        let mut s = a100();
        assert_eq!(s.create_gi(0, 5, None), Ok(1), "4g");
        assert_eq!(s.create_gi(0, 14, Some((4, 2))), Ok(5), "2g at 4");
        // A30: 4 slots.
        let mut s = fresh("A30", 580, true);
        assert_eq!(s.create_gi(0, 5, Some((2, 2))), Ok(2));
        assert_eq!(s.create_gi(0, 14, Some((1, 1))), Ok(4));
        assert_eq!(
            s.create_gi(0, 14, Some((4, 1))),
            Err(code::INVALID_ARGUMENT)
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
        assert_eq!(ids, [7, 8, 9, 10, 11, 12, 13]);
        let mut s = a100();
        s.create_gi(0, 5, Some((0, 4))).unwrap();
        s.create_gi(0, 14, Some((4, 2))).unwrap();
        s.create_gi(0, 19, Some((6, 1))).unwrap();
        let m = tables::model_named("A100-40GB").unwrap();
        assert_eq!(s.gpus[0].remaining(m.profile_by_index(0, 580).unwrap()), 0);
    }

    #[test]
    fn remaining_capacity_counts_what_still_fits() {
        let mut s = a100();
        let m = tables::model_named("A100-40GB").unwrap();
        let one_g = m.profile_by_index(0, 580).unwrap();
        assert_eq!(s.gpus[0].remaining(one_g), 7);
        s.create_gi(0, 9, Some((4, 4))).unwrap();
        assert_eq!(s.gpus[0].remaining(one_g), 4);
        assert_eq!(s.gpus[0].remaining(m.profile_by_index(2, 580).unwrap()), 1);
        assert_eq!(s.gpus[0].remaining(m.profile_by_index(4, 580).unwrap()), 0);
    }

    #[test]
    fn compute_instances_uuids_and_in_use() {
        let mut s = a100();
        let gi = s.create_gi(0, 9, Some((0, 4))).unwrap();
        // A 3g instance offers 1, 2 and 3 slice CIs, not 4 or 7.
        assert_eq!(s.create_ci(0, gi, 3), Err(code::NOT_SUPPORTED));
        assert_eq!(s.create_ci(0, gi, 9), Err(code::INVALID_ARGUMENT));
        assert_eq!(s.create_ci(0, gi, 7), Err(code::NOT_SUPPORTED), "A100");
        let ci = s.create_ci(0, gi, 2).unwrap();
        assert_eq!(ci, 0);
        assert_eq!(s.create_ci(0, gi, 0), Err(code::INSUFFICIENT_RESOURCES));
        let uuid = s.gpus[0].gis[0].cis[0].uuid.clone();
        assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
        assert_eq!(uuid, mig_uuid(&s.gpus[0].uuid, gi, ci));
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
        // Made again at the same place: the same ids and the same UUID.
        let again = s.create_gi(0, 9, Some((0, 4))).unwrap();
        let ci2 = s.create_ci(0, again, 2).unwrap();
        assert_eq!((again, ci2), (gi, ci));
        assert_eq!(s.gpus[0].gis[0].cis[0].uuid, uuid);
        // Hopper 2g instances also offer the revised 1-slice profile; R580 a ninth.
        let mut h = fresh("H100-80GB", 570, true);
        let gi = h.create_gi(0, 14, Some((0, 2))).unwrap();
        h.create_ci(0, gi, 7).unwrap();
        assert_eq!(h.create_ci(0, gi, 8), Err(code::INVALID_ARGUMENT));
        let mut h = fresh("H100-80GB", 580, true);
        let gi = h.create_gi(0, 14, Some((0, 2))).unwrap();
        assert_eq!(h.create_ci(0, gi, 8), Ok(0));
    }

    #[test]
    fn a_holder_standing_for_a_process_lets_go_when_it_exits() {
        let mut s = a100();
        let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        s.hold_while(0, Some(gi), "leftover", child.id()).unwrap();
        assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
        child.kill().unwrap();
        // A zombie has exited too: the hold ends before the parent reaps it.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(s.destroy_gi(0, gi), Ok(()));
        child.wait().unwrap();
    }

    #[test]
    fn holders_refuse_destroys_until_released() {
        let mut s = a100();
        let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
        s.create_ci(0, gi, 0).unwrap();
        s.hold(0, Some(gi), "dcgm", None).unwrap();
        assert!(s.hold(0, Some(99), "dcgm", None).unwrap_err().contains("7"));
        // No process is listed, yet the destroy is refused.
        assert!(s.gpus[0].processes.is_empty());
        assert_eq!(s.destroy_ci(0, gi, 0), Err(code::IN_USE));
        assert_eq!(s.destroy_ci(0, gi, 0), Err(code::IN_USE));
        assert_eq!(s.reset(0), Err(code::IN_USE));
        assert_eq!(s.release(0, Some(gi)), 1);
        s.destroy_ci(0, gi, 0).unwrap();
        s.destroy_gi(0, gi).unwrap();
        // One that lets go by itself after refusing twice.
        let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
        s.hold(0, Some(gi), "leaked handle", Some(2)).unwrap();
        assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
        assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
        assert_eq!(s.destroy_gi(0, gi), Ok(()));
        assert!(s.gpus[0].holders.is_empty());
    }

    #[test]
    fn quirks_linger_busy_and_delay() {
        let mut s = a100();
        s.quirks = Quirks {
            linger_listings: 2,
            busy_after_ci_destroy: 1,
            mig_device_delay_ms: 500,
            no_caps: false,
        };
        let gi = s.create_gi(0, 9, Some((0, 4))).unwrap();
        s.create_ci_at(0, gi, 2, 1000).unwrap();
        assert!(s.mig_devices(0, 1200).unwrap().is_empty(), "not listed yet");
        assert_eq!(s.mig_devices(0, 1500).unwrap(), [(gi, 0)]);
        s.destroy_ci(0, gi, 0).unwrap();
        assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE), "busy a moment");
        s.destroy_gi(0, gi).unwrap();
        // Gone, but listed twice more, and its place stays taken meanwhile.
        assert!(s.gpus[0].is_lingering(gi));
        assert_eq!(s.destroy_gi(0, gi), Err(code::NOT_FOUND));
        assert_eq!(
            s.create_gi(0, 9, Some((0, 4))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
        assert_eq!(s.list_gis(0, 9).unwrap(), [gi]);
        assert_eq!(s.list_gis(0, 19).unwrap(), Vec::<u32>::new());
        assert_eq!(s.list_gis(0, 9).unwrap(), [gi]);
        assert_eq!(s.list_gis(0, 9).unwrap(), Vec::<u32>::new());
        assert_eq!(s.create_gi(0, 9, Some((0, 4))), Ok(gi));
    }

    #[test]
    fn mig_mode_changes_per_family() {
        // Hopper: at once, whatever holds the GPU (no reset needed).
        let mut h = fresh("H100-80GB", 580, false);
        h.hold(0, None, "nvidia-persistenced", None).unwrap();
        assert_eq!(h.set_mig(0, true), Ok(code::SUCCESS));
        assert!(h.gpus[0].mig_current);
        assert_eq!(h.set_mig(0, false), Ok(code::SUCCESS));
        h.attach(0, None, 7, 10, 50).unwrap();
        assert_eq!(h.set_mig(0, true), Ok(code::IN_USE), "a process runs");
        assert!(!h.gpus[0].mig_current && h.gpus[0].mig_pending);
        // A100: at once when idle (the driver resets it), pending while held.
        let mut a = fresh("A100-80GB", 580, false);
        assert_eq!(a.set_mig(0, true), Ok(code::SUCCESS));
        assert!(a.gpus[0].mig_current);
        assert_eq!(a.set_mig(0, false), Ok(code::SUCCESS));
        a.hold(0, None, "nvidia-persistenced", None).unwrap();
        assert_eq!(a.set_mig(0, true), Ok(code::IN_USE));
        assert!(!a.gpus[0].mig_current && a.gpus[0].mig_pending);
        assert_eq!(a.reset(0), Err(code::IN_USE));
        a.release(0, None);
        a.reset(0).unwrap();
        assert!(a.gpus[0].mig_current);
        // Passthrough: a VM reboot applies it.
        let mut p = fresh("A100-40GB", 580, false);
        p.gpus[0].passthrough = true;
        assert_eq!(p.set_mig(0, true), Ok(code::RESET_REQUIRED));
        assert!(!p.gpus[0].mig_current);
        // Turning MIG off with instances is refused.
        let mut s = a100();
        s.create_gi(0, 19, None).unwrap();
        assert_eq!(s.set_mig(0, false), Err(code::IN_USE));
    }

    #[test]
    fn reset_and_reboot_leave_no_instance() {
        let mut s = fresh("A100-40GB,H200", 580, true);
        s.create_gi(0, 9, None).unwrap();
        s.create_gi(1, 9, None).unwrap();
        s.reset(0).unwrap();
        assert!(s.gpus[0].gis.is_empty() && s.gpus[0].mig_current);
        s.gpus[0].mig_pending = false; // an A100 asked to leave MIG, pending
        s.hold(1, None, "dcgm", None).unwrap();
        s.reboot();
        assert_eq!(s.boots, 1);
        assert!(s
            .gpus
            .iter()
            .all(|g| g.gis.is_empty() && g.holders.is_empty()));
        assert!(!s.gpus[0].mig_current, "A100: the pending mode applies");
        assert!(!s.gpus[1].mig_current, "Hopper: MIG is off after a reboot");
    }

    #[test]
    fn profile_queries_per_family_and_driver() {
        let a = fresh("A100-40GB", 580, false);
        assert_eq!(a.gi_profile_by_index(0, 0), Err(code::NOT_SUPPORTED));
        assert_eq!(a.gi_profile_by_id(0, 19), Err(code::NOT_SUPPORTED));
        let h = fresh("H200", 580, false);
        assert_eq!(h.gi_profile_by_index(0, 0).unwrap().name, "1g.18gb");
        assert_eq!(h.gi_profile_by_index(0, 13), Err(code::NOT_SUPPORTED));
        // R580 on the H200 answers NOT_SUPPORTED for the all-media profiles (the probe).
        assert_eq!(h.gi_profile_by_index(0, 15), Err(code::NOT_SUPPORTED));
        let mut h = h;
        h.all_media = true;
        assert_eq!(h.gi_profile_by_index(0, 15).unwrap().name, "1g.18gb+me.all");
        assert_eq!(h.gi_profile_by_index(0, 17), Err(code::INVALID_ARGUMENT));
        let old = fresh("H200", 535, false);
        assert_eq!(old.gi_profile_by_index(0, 10), Err(code::INVALID_ARGUMENT));
        assert_eq!(old.gi_profile_by_id(0, 65), Err(code::INVALID_ARGUMENT));
    }

    #[test]
    fn an_all_media_instance_admits_no_other() {
        let mut s = fresh("H100-80GB", 580, true);
        s.all_media = true;
        s.create_gi(0, 65, Some((0, 1))).unwrap();
        assert_eq!(
            s.create_gi(0, 19, Some((1, 1))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
        let mut s = fresh("H100-80GB", 580, true);
        s.all_media = true;
        s.create_gi(0, 19, Some((1, 1))).unwrap();
        assert_eq!(
            s.create_gi(0, 65, Some((0, 1))),
            Err(code::INSUFFICIENT_RESOURCES)
        );
    }

    #[test]
    fn faults_fire_a_number_of_times_or_until_cleared() {
        let mut s = a100();
        let fault = |times| Fault {
            call: 1,
            code: "NVML_ERROR_IN_USE".into(),
            seen: 0,
            times,
        };
        s.faults.insert("nvmlX".into(), fault(2));
        let fail = Some(FaultAction::Fail(code::IN_USE));
        assert_eq!(s.count_call("nvmlX", 1), (true, fail));
        assert_eq!(s.count_call("nvmlX", 1), (true, fail));
        assert_eq!(s.count_call("nvmlX", 1), (false, None));
        s.faults.insert("nvmlX".into(), fault(0));
        for _ in 0..5 {
            assert_eq!(s.count_call("nvmlX", 1), (true, fail));
        }
        assert_eq!(s.fired.len(), 7);
    }

    #[test]
    fn capability_files_follow_the_instances() {
        let dir = tempfile::tempdir().unwrap();
        let state_path = dir.path().join("state.json");
        let mut s = a100();
        s.gpus[0].mig_current = true;
        s.gpus[0].gis.push(Gi {
            id: 1,
            profile_id: 9,
            start: 0,
            size: 4,
            cis: vec![Ci {
                id: 0,
                profile_id: 2,
                slices: 3,
                start: 0,
                uuid: "MIG-x".into(),
                created_ms: 0,
            }],
        });
        crate::caps::sync(&state_path, &s).unwrap();
        let caps = dir.path().join("proc/driver/nvidia/capabilities");
        let gi = std::fs::read_to_string(caps.join("gpu0/mig/gi1/access")).unwrap();
        assert!(gi.contains("DeviceFileMinor: 12") && gi.contains("DeviceFileMode: 292"));
        let ci = std::fs::read_to_string(caps.join("gpu0/mig/gi1/ci0/access")).unwrap();
        assert!(ci.contains("DeviceFileMinor: 13"), "{ci}");
        let minors =
            std::fs::read_to_string(dir.path().join("proc/driver/nvidia-caps/mig-minors")).unwrap();
        assert!(minors.contains("config 1\n") && minors.contains("gpu0/gi1/ci0/access 13\n"));
        assert!(std::fs::read_to_string(dir.path().join("proc/devices"))
            .unwrap()
            .contains("237 nvidia-caps"));
        s.gpus[0].gis.clear();
        crate::caps::sync(&state_path, &s).unwrap();
        assert!(!caps.join("gpu0/mig/gi1").exists());
        assert!(caps.join("mig/config").exists());
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
                times: 1,
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
        s.hold(0, Some(gi), "dcgm", Some(3)).unwrap();
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
