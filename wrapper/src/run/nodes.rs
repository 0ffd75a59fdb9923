//! The slots of every node of a multi-node job: one `srun --overlap -N<n>
//! --ntasks-per-node=1` step runs `colloc step discover` on each node (the plugin's task
//! hook gives each task its own node's `COLLOC_*` variables), and each node's answer goes
//! through the same slot rules as on one node ([`super::slots::layout`]). `-j` counts per
//! node. The slots of all nodes make one list, node after node, in Slurm's order.

use std::path::PathBuf;
use std::time::Duration;

use colloc_core::mode::Mode;

use super::slots::{self, Layout, Source};
use crate::bad_input;
use crate::engine::pack::Slot;
use crate::slurm;
use crate::step::discover::{self, NodeReport};
use colloc_results::record::events::SlotRecord;

/// Longest wait for the discovery step (an `srun -N<n>` naming a node the job lost waits
/// for ever).
pub const DISCOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// One node's part.
#[derive(Debug, Clone)]
pub struct NodeSlots {
    /// Its name.
    pub name: String,
    /// What it reported.
    pub report: NodeReport,
    /// Its slots.
    pub layout: Layout,
    /// Index of its first slot in the whole list.
    pub first: usize,
}

/// Every node's slots.
#[derive(Debug, Clone)]
pub struct Topology {
    /// The nodes, in Slurm's order.
    pub nodes: Vec<NodeSlots>,
    /// Each slot's node (index into `nodes`).
    pub slot_node: Vec<usize>,
}

/// How to start a program on the nodes: `srun` and the `colloc` binary, and the options
/// every step gets.
#[derive(Debug, Clone)]
pub struct StepCommand {
    /// The `srun` program.
    pub srun: String,
    /// The job.
    pub job_id: String,
    /// colloc itself, as the nodes find it (the same path as here).
    pub colloc: PathBuf,
    /// `--config` to pass on, if given.
    pub config: Option<PathBuf>,
}

impl StepCommand {
    /// `srun` in job `job_id`, with this colloc binary.
    pub fn new(job_id: &str, config: Option<PathBuf>) -> anyhow::Result<StepCommand> {
        let colloc = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot tell where the colloc binary is: {e}"))?;
        Ok(StepCommand {
            srun: std::env::var("COLLOC_SRUN").unwrap_or_else(|_| "srun".into()),
            job_id: job_id.to_string(),
            colloc,
            config,
        })
    }

    /// The options every step of colloc's gets: in this job, sharing its resources with
    /// the other steps (`--overlap`), all of the node's CPUs and memory of the job (no
    /// `--exact`), no MPI set-up, output passed on unbuffered.
    pub fn common(&self) -> Vec<String> {
        vec![
            format!("--jobid={}", self.job_id),
            "--overlap".into(),
            "--mpi=none".into(),
            "--unbuffered".into(),
        ]
    }

    /// `colloc [--config FILE] step WHAT`.
    pub fn colloc_step(&self, what: &str) -> Vec<String> {
        let mut v = vec![self.colloc.display().to_string()];
        if let Some(c) = &self.config {
            v.push("--config".into());
            v.push(c.display().to_string());
        }
        v.push("step".into());
        v.push(what.into());
        v
    }
}

/// What `colloc run` knows to lay the nodes' slots out.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// `--mode`.
    pub mode: Option<String>,
    /// `-j`: runs at once on each node.
    pub jobs: Option<usize>,
}

/// The slots of each node from what it reported.
///
/// # Errors
/// A node's slots do not fit what was asked (bad input), or none answered.
pub fn topology(reports: Vec<NodeReport>, w: &Wanted) -> anyhow::Result<Topology> {
    let mut nodes: Vec<NodeSlots> = Vec::new();
    let mut slot_node = Vec::new();
    for r in reports {
        let layout = slots::layout(&slots::Inputs {
            job_mode: r.env.mode.clone(),
            job_devices: r.env.devices.clone(),
            job_slots: r.env.slots.clone(),
            visible: r.env.visible.clone(),
            mode: w.mode.clone(),
            jobs: w.jobs,
            nvml_gpus: r.nvml_gpus.clone(),
            cpus: r.cpus,
        })
        .map_err(|e| bad_input(format!("node {}: {e}", r.node)))?;
        if matches!(layout.mode, Mode::Mps { .. }) && layout.source == Source::Own {
            return Err(bad_input(format!(
                "--mode {} across nodes needs a colloc job that starts MPS on each node: submit with --colloc={}, or give --steps=off to use this node only",
                layout.mode, layout.mode
            )));
        }
        let first = slot_node.len();
        slot_node.extend(std::iter::repeat_n(nodes.len(), layout.slots.len()));
        nodes.push(NodeSlots {
            name: r.node.clone(),
            report: r,
            layout,
            first,
        });
    }
    if nodes.is_empty() {
        return Err(anyhow::anyhow!("no node of the job reported its slots"));
    }
    Ok(Topology { nodes, slot_node })
}

impl Topology {
    /// All slots as one layout: the first node's mode and source (the mode of each node
    /// where they differ, e.g. MIG instances of different GPU models), every node's
    /// devices and slots in order.
    pub fn layout(&self) -> Layout {
        let first = &self.nodes[0].layout;
        let mut l = Layout {
            mode: first.mode.clone(),
            source: first.source.clone(),
            devices: Vec::new(),
            slots: Vec::new(),
        };
        for n in &self.nodes {
            l.devices.extend(n.layout.devices.iter().cloned());
            l.slots.extend(n.layout.slots.iter().cloned());
        }
        l
    }

    /// The mode for the record: one, or each node's where they differ.
    pub fn mode_text(&self) -> String {
        let first = self.nodes[0].layout.mode.to_string();
        if self
            .nodes
            .iter()
            .all(|n| n.layout.mode.to_string() == first)
        {
            return first;
        }
        self.nodes
            .iter()
            .map(|n| format!("{}: {}", n.name, n.layout.mode))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Node of slot `slot`.
    pub fn node_of(&self, slot: usize) -> &NodeSlots {
        &self.nodes[self.slot_node[slot]]
    }

    /// Each slot's environment, worked out from its node's own variables (the MPS daemon
    /// of its GPU on that node, the memory of its device there).
    pub fn slot_envs(&self) -> Vec<Slot> {
        let mut out = Vec::new();
        for n in &self.nodes {
            let pipes = n.report.env.mps_pipes();
            for dev in &n.layout.slots {
                let mem = dev.as_deref().and_then(|d| {
                    n.report
                        .resolved
                        .iter()
                        .find(|r| r.device == d)
                        .and_then(|r| r.memory_mib)
                });
                out.push(Slot {
                    env: super::setup::slot_env(&n.layout.mode, dev.as_deref(), None, &pipes, mem),
                });
            }
        }
        out
    }

    /// Each slot's device memory (MiB: a MIG instance's own, else its GPU's), as its
    /// node's NVML told it.
    pub fn slot_memory_mib(&self) -> Vec<Option<u64>> {
        let mut out = Vec::new();
        for n in &self.nodes {
            for dev in &n.layout.slots {
                out.push(dev.as_deref().and_then(|d| {
                    n.report
                        .resolved
                        .iter()
                        .find(|r| r.device == d)
                        .and_then(|r| r.memory_mib)
                }));
            }
        }
        out
    }

    /// The slots for the record, each with its node.
    pub fn slot_records(&self) -> Vec<SlotRecord> {
        let mut out = Vec::new();
        for n in &self.nodes {
            for (k, dev) in n.layout.slots.iter().enumerate() {
                out.push(SlotRecord {
                    index: n.first + k,
                    device: dev.clone(),
                    node: Some(n.name.clone()),
                    memory_mib: None,
                });
            }
        }
        out
    }
}

/// Ask every node of the job what it offers: one step with one task per node.
///
/// Nodes that do not answer (gone, or the step could not start there) are left out with
/// a warning; none answering is an error with srun's own words.
///
/// # Errors
/// Slurm could not be asked, or no node answered.
pub fn discover(cmd: &StepCommand) -> anyhow::Result<Vec<NodeReport>> {
    // The job's nodes now: a `--no-kill` job that lost one holds fewer than it started
    // with, and an `srun -N<n>` over a node it lost would wait for ever.
    let names = match slurm::job_nodes(&cmd.job_id) {
        Ok(n) => n,
        Err(e) => {
            let list = std::env::var("SLURM_JOB_NODELIST").unwrap_or_default();
            log::debug!("{e}; using SLURM_JOB_NODELIST={list}");
            slurm::hostnames(&list).map_err(|e| anyhow::anyhow!("{e}"))?
        }
    };
    if names.is_empty() {
        return Err(anyhow::anyhow!("job {} holds no node", cmd.job_id));
    }
    // Without --unbuffered: Slurm then forwards each task's output in whole lines, so the
    // nodes' lines cannot interleave.
    let mut args: Vec<String> = cmd
        .common()
        .into_iter()
        .filter(|a| a != "--unbuffered")
        .collect();
    args.extend([
        format!("--nodes={}", names.len()),
        format!("--ntasks={}", names.len()),
        "--ntasks-per-node=1".into(),
        format!("--nodelist={}", names.join(",")),
        "--job-name=colloc-discover".into(),
        // One node that cannot start the task must not end the others' before they speak.
        "--kill-on-bad-exit=0".into(),
    ]);
    args.extend(cmd.colloc_step("discover"));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = slurm::ask_within(&cmd.srun, &refs, DISCOVER_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("cannot find the slots of the job's nodes: {e}"))?;
    let (mut reports, other) = discover::parse(&a.stdout);
    reports.retain(|r| names.contains(&r.node));
    reports.sort_by_key(|r| names.iter().position(|n| *n == r.node));
    reports.dedup_by(|a, b| a.node == b.node);
    let said = || {
        let mut lines: Vec<String> = a.stderr.lines().map(str::trim).map(String::from).collect();
        lines.extend(other.iter().cloned());
        lines.retain(|l| !l.is_empty());
        lines.join("; ")
    };
    if reports.is_empty() {
        return Err(anyhow::anyhow!(
            "no node of job {} reported its slots (`{} {}`: {})",
            cmd.job_id,
            cmd.srun,
            args.join(" "),
            said()
        ));
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !reports.iter().any(|r| &r.node == *n))
        .collect();
    if !missing.is_empty() {
        log::warn!(
            "node(s) {} did not report their slots and get no runs ({})",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            said()
        );
    }
    for r in &reports {
        if r.colloc_version != env!("CARGO_PKG_VERSION") {
            log::warn!(
                "node {} has colloc {} at {}; this is {}: install the same colloc on every node",
                r.node,
                r.colloc_version,
                cmd.colloc.display(),
                env!("CARGO_PKG_VERSION")
            );
        }
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::discover::DeviceInfo;
    use colloc_core::jobenv::JobEnv;
    use colloc_results::telemetry::GpuId;

    fn node(name: &str, devices: &str) -> NodeReport {
        NodeReport {
            node: name.into(),
            colloc_version: env!("CARGO_PKG_VERSION").into(),
            env: JobEnv {
                mode: Some("mps:2".into()),
                devices: Some(devices.into()),
                slots: Some("4".into()),
                mps_pipes: Some(format!("GPU-{name}a=/run/colloc/job-1/gpu0/pipe")),
                visible: None,
            },
            cpus: 8,
            resolved: vec![DeviceInfo {
                device: format!("GPU-{name}a"),
                gpu: GpuId {
                    index: 0,
                    uuid: format!("GPU-{name}a"),
                    name: "A100".into(),
                },
                memory_mib: Some(40960),
            }],
            ..NodeReport::default()
        }
    }

    #[test]
    fn every_nodes_slots_in_order_with_their_own_environment() {
        let t = topology(
            vec![
                node("n1", "GPU-n1a,GPU-n1a,GPU-n1b,GPU-n1b"),
                node("n2", "GPU-n2a,GPU-n2a,GPU-n2b,GPU-n2b"),
            ],
            &Wanted::default(),
        )
        .unwrap();
        assert_eq!(t.slot_node, vec![0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(t.node_of(5).name, "n2");
        let l = t.layout();
        assert_eq!(l.slots.len(), 8);
        assert_eq!(l.slots[4].as_deref(), Some("GPU-n2a"));
        let recs = t.slot_records();
        assert_eq!(recs[6].index, 6);
        assert_eq!(recs[6].node.as_deref(), Some("n2"));
        let env = t.slot_envs();
        let get = |s: usize, k: &str| {
            env[s]
                .env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get(4, "CUDA_VISIBLE_DEVICES").as_deref(), Some("GPU-n2a"));
        // n2's slot on its first GPU talks to n2's daemon of that GPU.
        assert_eq!(
            get(4, "CUDA_MPS_PIPE_DIRECTORY").as_deref(),
            Some("/run/colloc/job-1/gpu0/pipe")
        );
        // mps:2: half of the device's memory, as NVML told it on that node.
        assert_eq!(
            get(4, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT").as_deref(),
            Some("0=20480M")
        );
        // A GPU whose memory the node did not report: no memory limit made up.
        assert_eq!(get(6, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), None);
        assert_eq!(t.mode_text(), "mps:2");
    }

    #[test]
    fn per_node_limits_and_modes() {
        // -j counts per node.
        let t = topology(
            vec![node("n1", "GPU-a,GPU-b"), node("n2", "GPU-c,GPU-d")],
            &Wanted {
                jobs: Some(3),
                ..Wanted::default()
            },
        )
        .unwrap();
        assert_eq!(t.slot_node, vec![0, 0, 0, 1, 1, 1]);
        let mut a = node("n1", "MIG-a,MIG-b");
        a.env.mode = Some("mig:3g.20gbx2".into());
        let mut b = node("n2", "MIG-c,MIG-d");
        b.env.mode = Some("mig:3g.40gbx2".into());
        let e = topology(
            vec![a.clone(), b.clone()],
            &Wanted {
                jobs: Some(3),
                ..Wanted::default()
            },
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("node n1: -j 3 is more than the job's 2 MIG instances"),
            "{e}"
        );
        let t = topology(vec![a, b], &Wanted::default()).unwrap();
        assert_eq!(t.mode_text(), "n1: mig:3g.20gbx2; n2: mig:3g.40gbx2");
        // colloc's own MPS daemon cannot serve other nodes.
        let mut plain = node("n1", "");
        plain.env.mode = None;
        plain.env.devices = None;
        plain.env.visible = Some("0".into());
        let e = topology(
            vec![plain],
            &Wanted {
                mode: Some("mps".into()),
                ..Wanted::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("--steps=off"), "{e}");
        assert!(topology(vec![], &Wanted::default()).is_err());
    }
}
