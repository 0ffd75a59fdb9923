//! The environment contract of a colloc job, typed (docs/design.md, "The environment
//! contract"): what the plugin's task hook gives every task of the job on its node, as
//! `colloc run` reads it — from its own environment on one node, and across nodes from
//! each node's report of its own (each node's prolog set up its own GPUs, so each node's
//! values differ). The plugin writes these variables in [`crate::reconfig`] (the MPS
//! ones in [`crate::mps`]), `colloc run` a run's own; writers and readers alike name
//! them by the constants here.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `COLLOC_MODE`: the job's mode as applied (`mig:3g.20gbx2`, `mps:2`, `naive`).
pub const MODE: &str = "COLLOC_MODE";
/// `COLLOC_DEVICES`: one CUDA id per slot (MIG or GPU UUIDs), comma-separated.
pub const DEVICES: &str = "COLLOC_DEVICES";
/// `COLLOC_SLOTS`: how many runs fit at once.
pub const SLOTS: &str = "COLLOC_SLOTS";
/// `COLLOC_MPS_PIPES`: one MPS daemon per GPU, `GPU-uuid=pipe_dir,...`.
pub const MPS_PIPES: &str = "COLLOC_MPS_PIPES";
/// `CUDA_VISIBLE_DEVICES`, as Slurm (or the plugin) set it; `colloc run` sets a run's.
pub const VISIBLE: &str = "CUDA_VISIBLE_DEVICES";
/// `CUDA_MPS_PIPE_DIRECTORY`: the MPS daemon a CUDA program talks to.
pub const MPS_PIPE_DIRECTORY: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// `CUDA_MPS_LOG_DIRECTORY`: that daemon's log directory.
pub const MPS_LOG_DIRECTORY: &str = "CUDA_MPS_LOG_DIRECTORY";
/// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: an MPS client's share of the SMs (`mps:N`).
pub const MPS_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`: an MPS client's memory per device (`mps:N`).
pub const MPS_MEMORY_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
/// `COLLOC_RUN_NAME`: a run's name, which `colloc run` gives each run.
pub const RUN_NAME: &str = "COLLOC_RUN_NAME";
/// `COLLOC_RUN_INDEX`: a run's position in the manifest.
pub const RUN_INDEX: &str = "COLLOC_RUN_INDEX";
/// `COLLOC_RUN_ATTEMPT`: which attempt of the run this is (1 first).
pub const RUN_ATTEMPT: &str = "COLLOC_RUN_ATTEMPT";

/// A node's job environment; `None` where the variable is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnv {
    /// `COLLOC_MODE`.
    pub mode: Option<String>,
    /// `COLLOC_DEVICES`.
    pub devices: Option<String>,
    /// `COLLOC_SLOTS`.
    pub slots: Option<String>,
    /// `COLLOC_MPS_PIPES`.
    pub mps_pipes: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub visible: Option<String>,
}

impl JobEnv {
    /// From a lookup of variables by name.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> JobEnv {
        JobEnv {
            mode: get(MODE),
            devices: get(DEVICES),
            slots: get(SLOTS),
            mps_pipes: get(MPS_PIPES),
            visible: get(VISIBLE),
        }
    }

    /// From this process's environment, as it is (a variable set empty stays `Some("")`).
    pub fn from_process() -> JobEnv {
        JobEnv::from_lookup(|k| std::env::var(k).ok())
    }

    /// From this process's environment, a variable set empty counting as not set.
    pub fn from_process_set() -> JobEnv {
        JobEnv::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    }

    /// From `(name, value)` pairs, such as the plugin's prolog hands the task hook.
    pub fn from_pairs(pairs: &[(String, String)]) -> JobEnv {
        JobEnv::from_lookup(|k| {
            pairs
                .iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        })
    }

    /// The MPS daemons of `COLLOC_MPS_PIPES`: (GPU UUID, its pipe directory), one per GPU
    /// of the job on this node. Entries without a UUID or an absolute path are left out.
    pub fn mps_pipes(&self) -> Vec<(String, PathBuf)> {
        parse_mps_pipes(self.mps_pipes.as_deref().unwrap_or(""))
    }
}

/// `COLLOC_MPS_PIPES` (`GPU-uuid=pipe_dir,...`) as (GPU UUID, pipe directory) pairs.
pub fn parse_mps_pipes(v: &str) -> Vec<(String, PathBuf)> {
    v.split(',')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, p)| !k.is_empty() && p.starts_with('/'))
        .map(|(k, p)| (k.to_string(), PathBuf::from(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_the_last_value_wins_and_pipes_parse() {
        let pairs: Vec<(String, String)> = [
            (MODE, "mps:2"),
            (DEVICES, "GPU-a,GPU-a,GPU-b,GPU-b"),
            (SLOTS, "4"),
            (
                MPS_PIPES,
                "GPU-a=/run/colloc/job-1/gpu0/pipe,GPU-b=relative,=/x,GPU-c=/run/c",
            ),
            (VISIBLE, "0"),
            (VISIBLE, "0,1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = JobEnv::from_pairs(&pairs);
        assert_eq!(e.mode.as_deref(), Some("mps:2"));
        assert_eq!(e.slots.as_deref(), Some("4"));
        assert_eq!(e.visible.as_deref(), Some("0,1"));
        assert_eq!(
            e.mps_pipes(),
            vec![
                (
                    "GPU-a".to_string(),
                    PathBuf::from("/run/colloc/job-1/gpu0/pipe")
                ),
                ("GPU-c".to_string(), PathBuf::from("/run/c")),
            ]
        );
        assert_eq!(JobEnv::from_pairs(&[]), JobEnv::default());
        // Its JSON form is what a node reports across nodes.
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<JobEnv>(&j).unwrap(), e);
    }
}
