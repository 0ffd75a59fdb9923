//! The GPU control interface. [`crate::nvml::NvmlGpus`] implements it over libnvidia-ml
//! (the real driver's or the fake one in `tests/fake-nvml`); unit tests use an in-memory
//! implementation. Everything above this trait (planner, journal, apply, restore) is
//! the same for both.

use serde::{Deserialize, Serialize};

use crate::mig::{Catalog, Placement};

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
        matches!(self, GpuError::Call { code: 19, .. })
    }
    /// True for NVML_ERROR_INSUFFICIENT_RESOURCES.
    pub fn is_insufficient_resources(&self) -> bool {
        matches!(self, GpuError::Call { code: 23, .. })
    }
    /// True for NVML_ERROR_NOT_FOUND (e.g. an instance already destroyed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, GpuError::Call { code: 6, .. })
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

    /// Ask for MIG mode on or off. Returns the mode afterwards (the change may be
    /// pending until a GPU reset).
    ///
    /// # Errors
    /// NVML failures.
    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> GpuResult<MigMode>;
}
