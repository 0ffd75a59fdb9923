//! `colloc step discover`: what one node of a job offers, printed by each task of the one
//! `srun --overlap -N<n> --ntasks-per-node=1` step that `colloc run` starts to find every
//! node's slots. The plugin's task hook gives each task its own node's `COLLOC_*`
//! variables, so each line describes the node it came from.

use std::sync::Arc;

use colloc_core::nvml::NvmlGpus;
use colloc_core::telemetry::{self, GpuId};
use serde::{Deserialize, Serialize};

/// Prefix of a node's line on the discovery step's stdout.
pub const PREFIX: &str = "@colloc-node ";

/// A device (CUDA id) of the node, as NVML sees it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The CUDA id (index, GPU UUID or MIG UUID).
    pub device: String,
    /// The physical GPU behind it.
    pub gpu: GpuId,
    /// Total memory of the GPU or MIG instance, MiB.
    pub memory_mib: Option<u64>,
}

/// What a node offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// `SLURMD_NODENAME`.
    pub node: String,
    /// The colloc version on the node.
    pub colloc_version: String,
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
    /// CPUs the step may use.
    pub cpus: usize,
    /// GPU indexes NVML lists (`None`: NVML does not answer).
    pub nvml_gpus: Option<Vec<String>>,
    /// The devices of `devices` (else `visible`, else NVML's), resolved.
    pub resolved: Vec<DeviceInfo>,
    /// Why NVML does not answer.
    pub nvml_error: Option<String>,
}

fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// What this node offers, from its environment and NVML.
pub fn gather(nvml_library: &str) -> NodeReport {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let mut r = NodeReport {
        node: crate::run::scheduler::node_name().unwrap_or_default(),
        colloc_version: env!("CARGO_PKG_VERSION").to_string(),
        mode: env("COLLOC_MODE"),
        devices: env("COLLOC_DEVICES"),
        slots: env("COLLOC_SLOTS"),
        mps_pipes: env("COLLOC_MPS_PIPES"),
        visible: env("CUDA_VISIBLE_DEVICES"),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..NodeReport::default()
    };
    match NvmlGpus::open(nvml_library) {
        Ok(n) => {
            let n = Arc::new(n);
            let count = n.nvml().device_count().unwrap_or(0);
            let all: Vec<String> = (0..count).map(|i| i.to_string()).collect();
            let wanted = r
                .devices
                .as_deref()
                .or(r.visible.as_deref())
                .map(split)
                .unwrap_or_else(|| all.clone());
            let slots: Vec<Option<String>> = wanted.iter().cloned().map(Some).collect();
            let map = telemetry::resolve(n.nvml(), &slots);
            for (i, dev) in wanted.iter().enumerate() {
                if let Some(gi) = map.slot_gpu.get(i).copied().flatten() {
                    r.resolved.push(DeviceInfo {
                        device: dev.clone(),
                        gpu: map.gpus[gi].clone(),
                        memory_mib: map.slot_memory_mib.get(i).copied().flatten(),
                    });
                }
            }
            r.nvml_gpus = Some(all);
        }
        Err(e) => r.nvml_error = Some(e.to_string()),
    }
    r
}

/// The discovery step's line for this node.
pub fn line(r: &NodeReport) -> String {
    format!(
        "{PREFIX}{}",
        serde_json::to_string(r).unwrap_or_else(|_| "null".into())
    )
}

/// The node reports in a discovery step's output, and the other lines.
pub fn parse(out: &str) -> (Vec<NodeReport>, Vec<String>) {
    let mut nodes = Vec::new();
    let mut other = Vec::new();
    for l in out.lines() {
        match l
            .trim()
            .strip_prefix(PREFIX)
            .and_then(|j| serde_json::from_str::<NodeReport>(j).ok())
        {
            Some(n) => nodes.push(n),
            None if !l.trim().is_empty() => other.push(l.trim().to_string()),
            None => {}
        }
    }
    (nodes, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_among_other_output() {
        let a = NodeReport {
            node: "n1".into(),
            mode: Some("mig:3g.20gbx2".into()),
            devices: Some("MIG-a,MIG-b".into()),
            cpus: 2,
            ..NodeReport::default()
        };
        let out = format!("hello from a profile script\n{}\n\n", line(&a));
        let (nodes, other) = parse(&out);
        assert_eq!(nodes, vec![a]);
        assert_eq!(other, vec!["hello from a profile script"]);
    }
}
