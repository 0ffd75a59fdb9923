//! The GPU control interface. [`crate::nvml::NvmlGpus`] implements it over libnvidia-ml
//! (the real driver's or the fake one in `tests/fake-nvml`); unit tests use an in-memory
//! implementation. Everything above this trait (planner, journal, apply, restore) is
//! the same for both.

use serde::{Deserialize, Serialize};

use crate::mig::{Catalog, Placement};

/// The NVML return codes (`nvmlReturn_t`, nvml.h's `NVML_SUCCESS` and `NVML_ERROR_*`) that
/// colloc names: the one list of them. [`GpuError::Call`] keeps the raw code, so codes of a
/// newer driver pass through unnamed.
pub mod nvml_code {
    use nvml_wrapper_sys::bindings as nvml_h;

    /// `NVML_SUCCESS`.
    pub const SUCCESS: u32 = nvml_h::nvmlReturn_enum_NVML_SUCCESS;
    /// `NVML_ERROR_UNINITIALIZED`.
    pub const UNINITIALIZED: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    /// `NVML_ERROR_INVALID_ARGUMENT`.
    pub const INVALID_ARGUMENT: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    /// `NVML_ERROR_NOT_SUPPORTED`.
    pub const NOT_SUPPORTED: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
    /// `NVML_ERROR_NO_PERMISSION`.
    pub const NO_PERMISSION: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
    /// `NVML_ERROR_NOT_FOUND`.
    pub const NOT_FOUND: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
    /// `NVML_ERROR_INSUFFICIENT_SIZE`.
    pub const INSUFFICIENT_SIZE: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    /// `NVML_ERROR_INSUFFICIENT_POWER`.
    pub const INSUFFICIENT_POWER: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER;
    /// `NVML_ERROR_DRIVER_NOT_LOADED`.
    pub const DRIVER_NOT_LOADED: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
    /// `NVML_ERROR_TIMEOUT`.
    pub const TIMEOUT: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_TIMEOUT;
    /// `NVML_ERROR_IRQ_ISSUE`.
    pub const IRQ_ISSUE: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE;
    /// `NVML_ERROR_LIBRARY_NOT_FOUND`.
    pub const LIBRARY_NOT_FOUND: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND;
    /// `NVML_ERROR_FUNCTION_NOT_FOUND`.
    pub const FUNCTION_NOT_FOUND: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND;
    /// `NVML_ERROR_CORRUPTED_INFOROM`.
    pub const CORRUPTED_INFOROM: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM;
    /// `NVML_ERROR_GPU_IS_LOST`.
    pub const GPU_IS_LOST: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
    /// `NVML_ERROR_RESET_REQUIRED`.
    pub const RESET_REQUIRED: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED;
    /// `NVML_ERROR_OPERATING_SYSTEM`.
    pub const OPERATING_SYSTEM: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM;
    /// `NVML_ERROR_LIB_RM_VERSION_MISMATCH`.
    pub const LIB_RM_VERSION_MISMATCH: u32 =
        nvml_h::nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    /// `NVML_ERROR_IN_USE`: a process still runs on the instance or GPU.
    pub const IN_USE: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_IN_USE;
    /// `NVML_ERROR_MEMORY`.
    pub const MEMORY: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_MEMORY;
    /// `NVML_ERROR_NO_DATA`.
    pub const NO_DATA: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_NO_DATA;
    /// `NVML_ERROR_VGPU_ECC_NOT_SUPPORTED`.
    pub const VGPU_ECC_NOT_SUPPORTED: u32 =
        nvml_h::nvmlReturn_enum_NVML_ERROR_VGPU_ECC_NOT_SUPPORTED;
    /// `NVML_ERROR_INSUFFICIENT_RESOURCES`.
    pub const INSUFFICIENT_RESOURCES: u32 =
        nvml_h::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
    /// `NVML_ERROR_UNKNOWN`.
    pub const UNKNOWN: u32 = nvml_h::nvmlReturn_enum_NVML_ERROR_UNKNOWN;
}

/// Errors from the GPU layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The library could not be loaded or initialised.
    #[error("cannot load NVML from {library}: {reason}")]
    Load {
        /// The library path or name that was tried.
        library: String,
        /// Why it failed.
        reason: String,
    },
    /// The library lacks a function colloc needs (an old driver).
    #[error("NVML library has no {symbol} (driver too old for MIG control?)")]
    MissingSymbol {
        /// The C function name.
        symbol: &'static str,
    },
    /// An NVML call returned an error code.
    #[error("{call} failed on GPU {gpu}: {message} (NVML code {code})")]
    Call {
        /// The C function that failed.
        call: &'static str,
        /// GPU index, or `-` when not about one GPU.
        gpu: String,
        /// NVML's error string.
        message: String,
        /// The raw `nvmlReturn_t`.
        code: u32,
    },
    /// No GPU with this index.
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    /// A MIG operation on a GPU whose MIG mode is off (or only pending).
    #[error("GPU {0} is not in MIG mode")]
    NotMig(u32),
}

impl GpuError {
    /// True for NVML_ERROR_IN_USE: a process still runs on the instance or GPU.
    pub fn is_in_use(&self) -> bool {
        matches!(
            self,
            GpuError::Call {
                code: nvml_code::IN_USE,
                ..
            }
        )
    }
    /// True for NVML_ERROR_INSUFFICIENT_RESOURCES.
    pub fn is_insufficient_resources(&self) -> bool {
        matches!(
            self,
            GpuError::Call {
                code: nvml_code::INSUFFICIENT_RESOURCES,
                ..
            }
        )
    }
    /// True for NVML_ERROR_NOT_FOUND (e.g. an instance already destroyed).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            GpuError::Call {
                code: nvml_code::NOT_FOUND,
                ..
            }
        )
    }
    /// True for NVML_ERROR_NO_PERMISSION: nvml.h reserves instance listing, creation and
    /// destruction to privileged callers.
    pub fn is_no_permission(&self) -> bool {
        matches!(
            self,
            GpuError::Call {
                code: nvml_code::NO_PERMISSION,
                ..
            }
        )
    }
}

/// The nvml.h name of an `nvmlReturn_t`, for messages and JSON.
pub fn nvml_code_name(code: u32) -> &'static str {
    use nvml_code::*;
    match code {
        SUCCESS => "NVML_SUCCESS",
        UNINITIALIZED => "NVML_ERROR_UNINITIALIZED",
        INVALID_ARGUMENT => "NVML_ERROR_INVALID_ARGUMENT",
        NOT_SUPPORTED => "NVML_ERROR_NOT_SUPPORTED",
        NO_PERMISSION => "NVML_ERROR_NO_PERMISSION",
        NOT_FOUND => "NVML_ERROR_NOT_FOUND",
        INSUFFICIENT_SIZE => "NVML_ERROR_INSUFFICIENT_SIZE",
        GPU_IS_LOST => "NVML_ERROR_GPU_IS_LOST",
        RESET_REQUIRED => "NVML_ERROR_RESET_REQUIRED",
        IN_USE => "NVML_ERROR_IN_USE",
        INSUFFICIENT_RESOURCES => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        _ => "NVML_ERROR_UNKNOWN",
    }
}

/// Result of GPU-layer calls.
pub type GpuResult<T> = Result<T, GpuError>;

/// MIG mode of a GPU: what is active now and what applies after the next reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigMode {
    /// MIG mode in effect.
    pub current: bool,
    /// MIG mode after the next GPU reset.
    pub pending: bool,
}

/// What `nvmlDeviceSetMigMode` did: the mode afterwards and the activation status the
/// driver reported (nvml.h: the call succeeds and `activationStatus` says whether the new
/// mode took effect; `NVML_ERROR_IN_USE` when the GPU was not idle,
/// `NVML_ERROR_RESET_REQUIRED` where only a (VM) reboot can apply it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigModeChange {
    /// MIG mode after the call.
    pub mode: MigMode,
    /// The activation status, an `nvmlReturn_t` (0 = done).
    pub activation: u32,
}

impl MigModeChange {
    /// Did the asked-for mode take effect?
    pub fn took_effect(&self, enabled: bool) -> bool {
        self.mode.current == enabled
    }

    /// Why the mode did not take effect, for an admin, in one sentence.
    pub fn why_pending(&self, gpu: u32, enabled: bool) -> String {
        let mode = if enabled { "on" } else { "off" };
        match self.activation {
            nvml_code::RESET_REQUIRED => format!(
                "GPU {gpu}: MIG mode {mode} is pending: the driver cannot reset this GPU here \
                 (NVML_ERROR_RESET_REQUIRED, e.g. under GPU passthrough); it applies at the next \
                 VM reboot"
            ),
            nvml_code::IN_USE => format!(
                "GPU {gpu}: MIG mode {mode} is pending: the GPU is not idle \
                 (NVML_ERROR_IN_USE: nvidia-persistenced, nvidia_drm, DCGM or another client \
                 holds it; an A100 switches only when the driver can reset it); stop those \
                 clients and reset it (nvidia-smi -r -i {gpu}), or set the mode at boot"
            ),
            c => format!(
                "GPU {gpu}: MIG mode {mode} is pending ({}); reset the GPU \
                 (nvidia-smi -r -i {gpu}) or set the mode at boot",
                nvml_code_name(c)
            ),
        }
    }
}

/// Why colloc could not destroy a job's MIG instances, by what the driver said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HoldReason {
    /// The destroy answered NVML_ERROR_IN_USE and NVML lists no process on them:
    /// something that is not a process NVML lists holds them (DCGM, a leaked handle).
    InUse,
    /// Processes NVML lists on them outlived SIGKILL.
    Processes {
        /// Their pids.
        pids: Vec<u32>,
    },
    /// The driver said they were destroyed but still lists them.
    StillListed,
    /// The driver kept giving another answer than IN_USE to every destroy (UNKNOWN).
    Driver {
        /// Its last answer, as nvml.h names it.
        answer: String,
    },
    /// colloc switched MIG mode on for the job and switching it back stays pending.
    ModePending {
        /// The activation status, as nvml.h names it.
        activation: String,
    },
}

/// A GPU that a restore left *marked*: its leftover MIG instances (or mode) are recorded in
/// the job's journal, the node's next prolog refuses the GPU, and `colloc restore --job`
/// finishes once the holder is gone. A known state, so not a node fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHold {
    /// NVML index.
    pub index: u32,
    /// GPU UUID.
    pub uuid: String,
    /// The job's GPU instances still there.
    pub gi_ids: Vec<u32>,
    /// What the driver said.
    pub reason: HoldReason,
    /// Seconds since the epoch when the restore gave up.
    pub since: u64,
    /// Processes with the instances' device files open when the restore gave up (from
    /// `/proc`): who holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<crate::holders::DeviceUser>,
    /// The GPU was not in MIG mode before the job: the node's plain jobs would get a MIG
    /// GPU instead of a whole one, so colloc drains the node ([`crate::drain`]).
    #[serde(default)]
    pub breaks_plain_jobs: bool,
}

/// What may hold a MIG instance without being a process NVML lists.
pub const LIKELY_HOLDERS: &str = "DCGM (nv-hostengine) or dcgm-exporter collecting MIG \
profiling metrics, or a process with a leftover NVML handle";

impl GpuHold {
    /// One line for logs, refusals and `colloc status`.
    pub fn describe(&self) -> String {
        let gis: Vec<String> = self.gi_ids.iter().map(u32::to_string).collect();
        let what = if gis.is_empty() {
            format!("GPU {}", self.index)
        } else {
            format!(
                "GPU {}: MIG instance(s) GI {} of the job",
                self.index,
                gis.join(", ")
            )
        };
        let held_by = if self.holders.is_empty() {
            LIKELY_HOLDERS.to_string()
        } else {
            crate::holders::holder_text(&self.holders)
        };
        match &self.reason {
            HoldReason::InUse => format!(
                "{what} could not be destroyed: NVML answers In use (NVML_ERROR_IN_USE) with no \
                 process on them, so something outside Slurm holds them: {held_by}"
            ),
            HoldReason::Driver { answer } => format!(
                "{what} could not be destroyed: the driver answered {answer} to every try \
                 ({held_by})"
            ),
            HoldReason::Processes { pids } => format!(
                "{what} could not be destroyed: process(es) {pids:?} still run on them after SIGKILL"
            ),
            HoldReason::StillListed => {
                format!("{what} were destroyed but the driver still lists them")
            }
            HoldReason::ModePending { activation } => format!(
                "{what}: MIG mode could not be set back ({activation}); reset the GPU while idle \
                 (nvidia-smi -r -i {})",
                self.index
            ),
        }
    }
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Name as NVML reports it, e.g. `NVIDIA A100-SXM4-40GB`.
    pub name: String,
    /// MIG mode; `None` where the GPU does not support MIG.
    pub mig_mode: Option<MigMode>,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// One MIG instance: a GPU instance with its (single, full-size) compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// GPU instance id.
    pub gi_id: u32,
    /// NVML GPU instance profile id (e.g. 9 for 3g.20gb on an A100 40GB).
    pub profile_id: u32,
    /// Profile name, e.g. `3g.20gb`.
    pub profile: String,
    /// Placement in the memory-slot space.
    pub placement: Placement,
    /// Compute instance ids inside this GPU instance.
    pub ci_ids: Vec<u32>,
    /// `MIG-…` UUID of the (first) compute instance's device; `None` without one.
    pub uuid: Option<String>,
}

/// A process that holds a GPU context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Host pid.
    pub pid: u32,
    /// GPU memory used, bytes (when NVML knows).
    pub used_memory: Option<u64>,
    /// GPU instance the process runs on (MIG only).
    pub gi_id: Option<u32>,
}

/// What colloc needs from a node's GPUs.
pub trait GpuControl {
    /// All GPUs of the node.
    ///
    /// # Errors
    /// NVML failures.
    fn gpus(&self) -> GpuResult<Vec<GpuInfo>>;

    /// MIG profiles and possible placements of a GPU, as the driver reports them.
    /// Answers also with MIG mode off where the driver does (Hopper does).
    ///
    /// # Errors
    /// NVML failures; [`GpuError::NoSuchGpu`].
    fn catalog(&self, gpu: u32) -> GpuResult<Catalog>;

    /// Existing MIG instances of a GPU (empty when MIG is off).
    ///
    /// # Errors
    /// NVML failures.
    fn instances(&self, gpu: u32) -> GpuResult<Vec<Instance>>;

    /// Processes with a compute context on the GPU (on any of its instances).
    ///
    /// # Errors
    /// NVML failures.
    fn processes(&self, gpu: u32) -> GpuResult<Vec<GpuProcess>>;

    /// Create a GPU instance of `profile_id` at `placement` and one compute instance
    /// spanning it; return it with its MIG UUID. On failure after the GPU instance was
    /// made, destroys it again before returning the error.
    ///
    /// # Errors
    /// NVML failures (insufficient resources, not in MIG mode, …).
    fn create_instance(
        &self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> GpuResult<Instance>;

    /// Destroy a GPU instance and all its compute instances.
    ///
    /// # Errors
    /// NVML failures; `is_in_use()` while a process runs on it; `is_not_found()` if gone.
    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> GpuResult<()>;

    /// How long the next [`GpuControl::create_instance`] waits for the driver to list the
    /// new MIG device (`[mig] listing_wait_s`). The default ignores it.
    fn set_listing_wait(&self, _wait: std::time::Duration) {}

    /// The minor of the GPU's `/dev/nvidiaN`, which numbers it in the driver's MIG
    /// capability tree (`/proc/driver/nvidia/capabilities/gpuN`). The default, and a
    /// driver that cannot say, is the NVML index.
    fn device_minor(&self, gpu: u32) -> u32 {
        gpu
    }

    /// Do the instances it makes need `/dev/nvidia-caps` device files ([`crate::devfiles`])?
    /// A driver's (and the fake driver's) do; an in-memory stand-in does not.
    fn makes_device_files(&self) -> bool {
        true
    }

    /// Ask for MIG mode on or off. Returns the mode afterwards and the driver's
    /// activation status: Hopper switches at once; an A100 at once when idle, else the
    /// change stays pending (IN_USE, or RESET_REQUIRED under passthrough).
    ///
    /// # Errors
    /// NVML failures (the call itself refused, e.g. IN_USE while instances exist).
    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> GpuResult<MigModeChange>;
}

#[cfg(test)]
mod tests {
    use super::nvml_code::*;
    use super::*;

    #[test]
    fn nvml_codes_are_nvml_hs() {
        assert_eq!(nvml_code_name(IN_USE), "NVML_ERROR_IN_USE");
        assert_eq!(
            nvml_code_name(TIMEOUT),
            "NVML_ERROR_UNKNOWN",
            "not named in messages"
        );
        let call = |code| GpuError::Call {
            call: "nvmlDeviceDestroyGpuInstance",
            gpu: "0".into(),
            message: "m".into(),
            code,
        };
        assert!(call(IN_USE).is_in_use() && !call(NOT_FOUND).is_in_use());
        assert!(call(NOT_FOUND).is_not_found() && !call(IN_USE).is_not_found());
        assert!(call(NO_PERMISSION).is_no_permission());
        assert!(call(INSUFFICIENT_RESOURCES).is_insufficient_resources());
    }
}
