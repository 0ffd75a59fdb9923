//! Slurm's C interface as bindgen reads it from `<slurm/spank.h>` (spank/build.rs), and the
//! Slurm versions the build checked. A leaf: it imports nothing of the crate, so both the C
//! boundary (`ffi`) and the plugin's logic (`plugin`) can use it without importing each
//! other.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// The Slurm release (`SLURM_VERSION_NUMBER`) whose headers the plugin was built from.
pub const BUILT_FOR: u32 = SLURM_VERSION_NUMBER;
/// The Slurm releases (major, minor) whose header facts spank/build.rs checked.
pub const SUPPORTED_SLURM: &[(u32, u32)] = COLLOC_SUPPORTED_SLURM;
/// `ESPANK_JOB_FAILURE` (Slurm 25.05+'s slurm_errno.h; spank/build.rs checks the value
/// against a header that has it).
pub const JOB_FAILURE: i32 = COLLOC_ESPANK_JOB_FAILURE;
