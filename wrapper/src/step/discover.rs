//! `colloc step discover`: what one node of a job offers, printed by each task of the one
//! `srun --overlap -N<n> --ntasks-per-node=1` step that `colloc run` starts to find every
//! node's slots. The plugin's task hook gives each task its own node's `COLLOC_*`
//! variables, so each line describes the node it came from.

use std::sync::Arc;

use colloc_core::jobenv::JobEnv;
use colloc_core::nvml::NvmlGpus;
use colloc_results::telemetry::{self, GpuId};
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
    /// Its `COLLOC_*` variables and `CUDA_VISIBLE_DEVICES`.
    #[serde(flatten)]
    pub env: JobEnv,
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
    let mut r = NodeReport {
        node: colloc_core::publish::node_name().unwrap_or_default(),
        colloc_version: env!("CARGO_PKG_VERSION").to_string(),
        env: JobEnv::from_process_set(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..NodeReport::default()
    };
    match NvmlGpus::open(nvml_library) {
        Ok(n) => {
            let n = Arc::new(n);
            let count = n.nvml().device_count().unwrap_or(0);
            let all: Vec<String> = (0..count).map(|i| i.to_string()).collect();
            let wanted = r
                .env
                .devices
                .as_deref()
                .or(r.env.visible.as_deref())
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

/// Most bytes of one output line: Slurm forwards a task's output in messages of at most
/// 1 KiB, whole lines where they fit; a longer line is cut, and the pieces of several
/// tasks' lines interleave.
const CHUNK: usize = 800;

/// The discovery step's lines for this node: its report as JSON, in pieces short enough
/// to come through whole (`@colloc-node NODE K N PIECE`, K of N).
pub fn lines(r: &NodeReport) -> Vec<String> {
    let json = serde_json::to_string(r).unwrap_or_else(|_| "null".into());
    let node = if r.node.is_empty() || r.node.contains(char::is_whitespace) {
        "?".to_string()
    } else {
        r.node.clone()
    };
    let mut pieces = Vec::new();
    let mut rest = json.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(CHUNK);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        pieces.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(k, p)| format!("{PREFIX}{node} {} {n} {p}", k + 1))
        .collect()
}

/// The node reports in a discovery step's output, and the other lines.
pub fn parse(out: &str) -> (Vec<NodeReport>, Vec<String>) {
    use std::collections::BTreeMap;
    // Per node: its pieces by number, and how many it said there are.
    let mut parts: BTreeMap<String, (usize, BTreeMap<usize, String>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut other = Vec::new();
    for l in out.lines() {
        let t = l.trim_end_matches(['\r', '\n']);
        let piece = t.trim_start().strip_prefix(PREFIX).and_then(|rest| {
            let mut w = rest.splitn(4, ' ');
            let node = w.next()?.to_string();
            let k: usize = w.next()?.parse().ok()?;
            let n: usize = w.next()?.parse().ok()?;
            Some((node, k, n, w.next().unwrap_or("").to_string()))
        });
        match piece {
            Some((node, k, n, p)) if k >= 1 && k <= n => {
                if !order.contains(&node) {
                    order.push(node.clone());
                }
                let e = parts.entry(node).or_insert((n, BTreeMap::new()));
                e.0 = n;
                e.1.insert(k, p);
            }
            _ if !t.trim().is_empty() => other.push(t.trim().to_string()),
            _ => {}
        }
    }
    let mut nodes = Vec::new();
    for node in order {
        let Some((n, pieces)) = parts.remove(&node) else {
            continue;
        };
        if pieces.len() != n {
            other.push(format!(
                "{node}: {} of the {n} pieces of its report came through",
                pieces.len()
            ));
            continue;
        }
        let json: String = pieces.into_values().collect();
        match serde_json::from_str::<NodeReport>(&json) {
            Ok(r) => nodes.push(r),
            Err(e) => other.push(format!("{node}: its report is not valid ({e})")),
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
            env: JobEnv {
                mode: Some("mig:3g.20gbx2".into()),
                devices: Some("MIG-a,MIG-b".into()),
                ..JobEnv::default()
            },
            cpus: 2,
            ..NodeReport::default()
        };
        let mut b = a.clone();
        b.node = "n2".into();
        // Long enough to come in several pieces.
        b.env.devices = Some(vec!["MIG-0123456789abcdef"; 120].join(","));
        let (la, lb) = (lines(&a), lines(&b));
        assert_eq!(la.len(), 1);
        assert!(lb.len() >= 3, "{}", lb.len());
        assert!(la.iter().chain(&lb).all(|l| l.len() < 1000));
        // Pieces of the two nodes interleaved, as several tasks' output comes.
        let mut out = String::from("hello from a profile script\n");
        out.push_str(&format!("{}\n{}\n", lb[0], la[0]));
        for l in &lb[1..] {
            out.push_str(&format!("{l}\n"));
        }
        let (nodes, other) = parse(&out);
        assert_eq!(nodes, vec![b.clone(), a.clone()]);
        assert_eq!(other, vec!["hello from a profile script"]);
        // A piece missing: that node is left out, with why.
        let out = format!("{}\n{}\n", lb[0], la[0]);
        let (nodes, other) = parse(&out);
        assert_eq!(nodes, vec![a]);
        assert!(other[0].starts_with("n2: 1 of the"), "{other:?}");
    }
}
