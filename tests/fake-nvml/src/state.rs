//! The fake driver's state and the rules it applies, as plain Rust: no C types, no I/O.
//! Every function answers with the `nvmlReturn_t` code a real driver would give.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::tables::{self, Family, GiProfile, Media};

mod gpm;
mod gpu;
mod instances;
mod processes;

pub use gpm::{gpm_metric, GpmCounters, GpmLoad, METRIC_MAX, METRIC_SM_OCCUPANCY, METRIC_SM_UTIL};

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
    /// A `stall` fault fired and is not yet let go (`fake-nvml-ctl go`): its caller waits.
    #[serde(default)]
    pub stalled: bool,
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
    /// What GPM (Hopper and later) reads of the SMs, as a test set it
    /// (`fake-nvml-ctl gpm`); `None`: idle SMs (0 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpm: Option<GpmLoad>,
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
    /// Block the calling process (state lock released) until `fake-nvml-ctl go`, then
    /// answer as the driver would: a caller stuck in the driver, for tests that kill it
    /// (or its parent) at a known step.
    Stall,
}

/// Check a fault code as written in the state file or on the command line.
pub fn parse_fault_code(s: &str) -> Option<FaultAction> {
    if s.trim().eq_ignore_ascii_case("crash") {
        Some(FaultAction::Crash)
    } else if s.trim().eq_ignore_ascii_case("stall") {
        Some(FaultAction::Stall)
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
                gpm: None,
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
            stalled: false,
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

#[cfg(test)]
mod tests;
