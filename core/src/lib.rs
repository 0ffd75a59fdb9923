//! colloc-core: the logic shared by the `colloc` command and the SPANK plugin.
//!
//! - [`mode`]: the `--colloc` mode grammar.
//! - [`mig`]: MIG profiles of the supported GPU models and the layout planner.
//! - [`config`]: the node configuration (`colloc.toml`); [`migconf`] its `[mig]` table.
//! - [`gpu`]: the GPU control interface; [`nvml`] implements it over libnvidia-ml.
//! - [`holders`]: which processes have NVIDIA device files open.
//! - [`retry`]: which driver answers are asked again, and the bounded backoff.
//! - [`hooks`]: admin hooks around a MIG reconfiguration (pause DCGM).
//! - [`devfiles`]: the `/dev/nvidia-caps` device files of MIG instances.
//! - [`drain`]: draining the node (scontrol) when a GPU cannot be brought back.
//! - [`journal`]: per-job journals and per-GPU locks; [`statedir`] the directories they
//!   live in.
//! - [`reconfig`]: apply a mode to a job's GPUs and restore them.
//! - [`mps`]: per-job MPS control daemons.
//! - [`rundir`]: the per-job MPS directories under `run_dir`.
//! - [`dirholders`]: processes of a job's user that keep its `run_dir` tree busy.
//! - [`slurmconf`]: what colloc needs of the node's Slurm configuration (extern step, job
//!   container and its `BasePath`).
//! - [`container`]: entering a job's container and extern-step cgroup (MPS daemons).
//! - [`sharedfs`]: directories users can write on the file systems of `state_dir` and
//!   `run_dir` (a full one refuses jobs).
//! - [`fs`]: root-side file system work that never follows a path a user can change.
//! - [`sys`]: the libc calls std does not offer (signals, pidfds, a forked child as a user).
//! - [`text`]: the one escape rule for names shown to people.
//! - [`publish`]: the node's colloc state in its Slurm node comment, for the cluster view.
//! - [`buildid`]: the GNU build id of an ELF file (which plugin build runs where).
#![deny(missing_docs)]

pub mod buildid;
pub mod config;
pub mod container;
pub mod devfiles;
pub mod dirholders;
pub mod drain;
pub mod fs;
pub mod gpu;
pub mod holders;
pub mod hooks;
pub mod jobenv;
pub mod jobfs;
pub mod jobsummary;
pub mod journal;
pub mod lastgood;
pub mod mig;
pub mod migconf;
pub mod migmps;
pub mod mode;
pub mod mps;
pub mod nvml;
pub mod publish;
pub mod reconfig;
pub mod retry;
pub mod rundir;
pub mod runroom;
pub mod sharedfs;
pub mod slurmconf;
pub mod slurmdmark;
pub mod statedir;
pub mod sys;
pub mod text;
