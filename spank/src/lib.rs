//! colloc's SPANK plugin, `libcolloc_spank.so`: `--colloc=MODE` on sbatch/srun/salloc,
//! GPU reconfiguration in the job prolog, the task environment, restore in the epilog.
//!
//! - [`ffi`]: the C boundary (bindgen output, exported symbols, the guard); the only
//!   module with `unsafe`.
//! - [`plugin`]: what each callback does, over the [`plugin::Host`] trait.
//! - [`logger`]: `log` records to Slurm's logging.
//! - [`slurm_version`]: the running Slurm against the one the plugin was built for.
//!
//! Enable it with a plugstack.conf line (see slurm-conf/plugstack.conf and colloc-spank(8)):
//! `optional /usr/lib/x86_64-linux-gnu/slurm-wlm/libcolloc_spank.so config=/etc/slurm/colloc.toml`
//! (`required` once every host has it). How it works: docs/design.md.
#![deny(missing_docs)]

#[cfg(colloc_build_note)]
pub mod build_note;
pub mod ffi;
pub mod logger;
pub mod plugin;
pub mod slurm_version;
mod sys;
