//! A real Slurm cluster for colloc's tests: started by `cluster.sh start` in a temporary
//! directory (munged, slurmctld and one slurmd per node on loopback, fake GPU device files,
//! the fake libnvidia-ml and the stand-in MPS control program), driven through the real
//! `sbatch`/`squeue`/`scontrol`, and stopped when the suite ends.
//!
//! One node (named after this host, as before) or several (`n1..nN` on this host, each
//! slurmd in its own mount namespace with its own fake GPUs, journals and MPS folders: see
//! [`Node`]), under the simple Slurm configuration or the production one that university
//! clusters run (cgroups, `ConstrainDevices`, `job_container/tmpfs`: see [`Profile`]).
//! `COLLOC_CLUSTER_PROFILE=production` runs a suite written for the simple one under the
//! production configuration, `production-v2` under it on Slurm's `cgroup/v2` (`cgroups`).
//!
//! Paths under test: the plugin from `COLLOC_SPANK_PLUGIN` and the `colloc` binary from
//! `COLLOC_BIN` when set (CI points them at the installed .deb), else `target/debug`.
//! Build first (`cargo build`, or `cargo test` at the workspace root, which builds every
//! default member before running tests).
//!
//! The library is split by subject: `artifacts` (paths of what is under test), `spec` (the
//! cluster's shape), `cluster`, `jobs` (submitting and waiting), `accounting` (`sacct` on
//! a cluster started with Slurm's accounting), `node`, `processes`, `users` and `suite`
//! (the runner); everything is re-exported here, so callers name `colloc_slurm_tests::X`.
#![deny(missing_docs)]

mod accounting;
mod artifacts;
mod cgroups;
mod cluster;
mod jobs;
mod node;
mod processes;
mod spec;
mod suite;
mod users;

pub use accounting::ACCOUNTING_WAIT;
pub use artifacts::{
    artifact, build_spank_probe, colloc_bin, fake_ctl, fixture, plugin_path, repo_root,
    test_seams_plugin, visible_to_jobs, ARTIFACT_COPIES,
};
pub use cgroups::unified_cgroup;
pub use cluster::{Cluster, WholeGpus};
pub use jobs::{parse_kv, JobEnd, Step, HANG_GUARD};
pub use node::{Node, NodeLoss};
pub use processes::{pid_alive, pid_mount_ns, pids, pids_by_cmdline, processes_of_pipe_dir};
pub use spec::{ClusterSpec, Profile};
pub use suite::{run_suite, run_suite_on, skip, Skipped, Test};
pub use users::ensure_user;

use std::process::{Command, Output};

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn cluster_sh() -> Command {
    Command::new(repo_root().join("tests/slurm/cluster.sh"))
}
