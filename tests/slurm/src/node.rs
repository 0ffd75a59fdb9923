//! [`Node`]: one node of a [`Cluster`], looked at from outside its mount namespace, and
//! taken away ([`Node::crash`]) and brought back.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{cluster_sh, colloc_bin, fake_ctl, pid_alive, pid_mount_ns, run, text, Cluster};

/// What Slurm reported once a node was taken away ([`Node::crash`]).
#[derive(Debug, Clone)]
pub struct NodeLoss {
    /// The node's state as `sinfo -o %T` prints it, e.g. `down*` (`*`: not responding).
    pub state: String,
    /// Why, as `sinfo -o %E` prints it, e.g. `Not responding`.
    pub reason: String,
    /// From the crash until slurmctld marked the node down (about `SlurmdTimeout`).
    pub noticed_after: Duration,
}

/// One node of a [`Cluster`]. On a cluster of several, each node's slurmd runs in its own
/// mount namespace in which the paths colloc.toml names (journals, MPS folders) and the
/// fake GPU state are that node's own; the methods here read them from outside, and
/// [`Node::command`] runs a program inside.
pub struct Node<'c> {
    pub(crate) cluster: &'c Cluster,
    pub(crate) name: String,
}

impl Node<'_> {
    /// The node's name (`SLURMD_NODENAME` in its jobs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where this node's own folders are, from outside: the cluster's folder for a
    /// one-node cluster, else `nodes/<name>` in it.
    pub(crate) fn own(&self, rel: &str) -> PathBuf {
        if self.cluster.several() {
            self.cluster.dir().join("nodes").join(&self.name).join(rel)
        } else {
            self.cluster.dir().join(rel)
        }
    }

    /// The node's fake NVML state file.
    pub fn fake_state_path(&self) -> PathBuf {
        self.own("fake-nvml/state.json")
    }

    /// The node's fake NVML state, as JSON.
    pub fn fake_state(&self) -> Value {
        let out = self.fake_ctl(&["show", "--json"]);
        serde_json::from_slice(&out.stdout).expect("fake-nvml-ctl show --json prints JSON")
    }

    /// Run `fake-nvml-ctl --state <this node's state> ARGS`; it must succeed.
    ///
    /// # Panics
    /// When it fails.
    pub fn fake_ctl(&self, args: &[&str]) -> Output {
        let out = run(Command::new(fake_ctl())
            .arg("--state")
            .arg(self.fake_state_path())
            .args(args));
        assert!(
            out.status.success(),
            "fake-nvml-ctl {args:?} on {}: {}",
            self.name,
            text(&out.stderr).trim()
        );
        out
    }

    /// MIG GPU instances on the node's fake GPU `gpu`.
    pub fn instances(&self, gpu: u32) -> Vec<Value> {
        self.fake_state()["gpus"][gpu as usize]["gis"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// UUIDs of the MIG devices (compute instances) on every GPU of the node.
    pub fn mig_uuids(&self) -> Vec<String> {
        let st = self.fake_state();
        st["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["gis"].as_array().cloned().unwrap_or_default())
            .flat_map(|gi| gi["cis"].as_array().cloned().unwrap_or_default())
            .filter_map(|ci| ci["uuid"].as_str().map(str::to_string))
            .collect()
    }

    /// The node's GPUs: MIG mode and instances.
    pub fn gpu_layout(&self) -> Value {
        let st = self.fake_state();
        let gpus = st["gpus"].as_array().cloned().unwrap_or_default();
        Value::Array(
            gpus.iter()
                .map(|g| {
                    serde_json::json!({
                        "uuid": g["uuid"],
                        "mig_current": g["mig_current"],
                        "mig_pending": g["mig_pending"],
                        "gis": g["gis"],
                    })
                })
                .collect(),
        )
    }

    /// colloc's journal folder on this node, from outside.
    pub fn journal_dir(&self) -> PathBuf {
        self.own("state/jobs")
    }

    /// Journals colloc left on this node.
    pub fn journals(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.journal_dir()) {
            Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// colloc's run folder (MPS pipe and log directories) on this node, from outside.
    pub fn run_dir(&self) -> PathBuf {
        self.own("run")
    }

    /// The node's state as `sinfo -o %T` prints it (`idle`, `mixed`, `down*`, …).
    ///
    /// From the listing of all nodes: `sinfo -n NODE` (Slurm 22.05) keeps showing a node
    /// that went away as `mixed*` for a minute or more after slurmctld set it DOWN.
    pub fn state(&self) -> String {
        self.cluster
            .node_states()
            .remove(&self.name)
            .unwrap_or_default()
    }

    /// Why the node is down or drained, if it is (`sinfo -o %E`).
    pub fn reason(&self) -> String {
        let out = run(self
            .cluster
            .slurm("sinfo")
            .args(["-h", "-N", "-o", "%N|%E"]));
        text(&out.stdout)
            .lines()
            .find_map(|l| {
                l.split_once('|')
                    .filter(|(n, _)| *n == self.name)
                    .map(|(_, r)| r.trim().to_string())
            })
            .unwrap_or_default()
    }

    /// The node's slurmd log.
    pub fn slurmd_log(&self) -> PathBuf {
        if self.cluster.several() {
            self.cluster
                .dir()
                .join(format!("slurm/slurmd-{}.log", self.name))
        } else {
            self.cluster.dir().join("slurm/slurmd.log")
        }
    }

    /// Last `n` lines of the node's slurmd log.
    pub fn slurmd_log_tail(&self, n: usize) -> String {
        self.last_log_lines(n, |_| true)
    }

    /// The last `n` lines of the node's slurmd log that tell what happened to jobs there:
    /// colloc's own, Slurm's errors, and its prolog, epilog and drain lines (a debug log's
    /// last lines are mostly a step's start-up, which says nothing of why a test failed).
    pub fn slurmd_log_story(&self, n: usize) -> String {
        // colloc's lines start "colloc: " (its paths, in every step's start-up, do not).
        let telling = |l: &&str| {
            l.contains("colloc: ") || {
                let l = l.to_ascii_lowercase();
                ["error:", "prolog", "epilog", "drain", "fatal", "killed"]
                    .iter()
                    .any(|w| l.contains(w))
            }
        };
        self.last_log_lines(n, telling)
    }

    /// The last `n` lines of the node's slurmd log that `keep` keeps.
    fn last_log_lines(&self, n: usize, keep: impl Fn(&&str) -> bool) -> String {
        let log = std::fs::read_to_string(self.slurmd_log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(keep).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The pid of the node's slurmd, while it runs.
    pub fn slurmd_pid(&self) -> Option<u32> {
        let file = if self.cluster.several() {
            format!("slurm/slurmd-{}.pid", self.name)
        } else {
            "slurm/slurmd.pid".to_string()
        };
        std::fs::read_to_string(self.cluster.dir().join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|&pid| pid_alive(pid))
    }

    /// The mount namespace of the node's slurmd (`mnt:[…]`): where its prolog, epilog and
    /// slurmstepds run, and, without a job container, its jobs.
    pub fn mount_ns(&self) -> Option<String> {
        pid_mount_ns(self.slurmd_pid()?)
    }

    /// Does process `pid` belong to this node: in its slurmd's mount namespace, or in its
    /// cgroups (`/slurm_<node>/…` under cgroup v1, the node's own `/colloc-v2-…-<node>`
    /// under v2: where the production profiles' job tasks are, in their job's own
    /// namespace)? Another cluster on this host may have a node of the same
    /// name: pick the candidates by something of this cluster first (e.g.
    /// [`processes_of_pipe_dir`](crate::processes_of_pipe_dir) with this cluster's run
    /// folder).
    pub fn owns_pid(&self, pid: u32) -> bool {
        let in_ns = self
            .mount_ns()
            .is_some_and(|ns| pid_mount_ns(pid).as_deref() == Some(ns.as_str()));
        let marker = format!(":/slurm_{}/", self.name);
        in_ns
            || std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cg| cg.contains(&marker))
            || self.cgroup2_of(pid).is_some()
    }

    /// `program` to run inside the node's mount namespace (through `nsenter`), with the
    /// cluster's `SLURM_CONF`, `COLLOC_CONFIG` and the node's fake GPU state: what an admin
    /// logged in on that node would run.
    ///
    /// # Panics
    /// When the node's slurmd does not run.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let pid = self
            .slurmd_pid()
            .unwrap_or_else(|| panic!("node {}'s slurmd does not run", self.name));
        let mut c = Command::new("nsenter");
        c.arg(format!("--mount=/proc/{pid}/ns/mnt"))
            .arg("--")
            .arg(program)
            .env("SLURM_CONF", self.cluster.dir().join("etc/slurm.conf"))
            .env("COLLOC_CONFIG", self.cluster.colloc_config())
            .env(
                "COLLOC_FAKE_NVML_STATE",
                self.cluster.dir().join("fake-nvml/state.json"),
            );
        c
    }

    /// Run `colloc ARGS` on this node: against its config, journals and fake GPUs.
    pub fn colloc(&self, args: &[&str]) -> Output {
        if self.cluster.several() {
            return run(self.command(colloc_bin()).args(args));
        }
        run(Command::new(colloc_bin())
            .args(args)
            .env("COLLOC_CONFIG", self.cluster.colloc_config())
            .env("COLLOC_FAKE_NVML_STATE", self.fake_state_path()))
    }

    /// Take the node away as a power cut would (`cluster.sh node-crash`): its slurmd, its
    /// slurmstepds, its jobs' processes and the daemons its prologs started are killed
    /// with SIGKILL, no epilog runs, the fake GPU state stays as it was. Then wait until
    /// slurmctld has marked the node down, and say what Slurm reported.
    ///
    /// What Slurm 22.05 does then (asserted in `cluster_profiles.rs`): the node becomes
    /// `down*` ("Not responding") after about `SlurmdTimeout` (6 s here); a job on it ends
    /// `NODE_FAIL` unless it was submitted with `--no-kill`, in which case it runs on
    /// without that node.
    ///
    /// # Panics
    /// When `cluster.sh node-crash` fails, or after [`HANG_GUARD`](crate::HANG_GUARD).
    pub fn crash(&self) -> NodeLoss {
        let t = Instant::now();
        let out = run(cluster_sh()
            .args(["node-crash"])
            .arg(self.cluster.dir())
            .arg(&self.name));
        assert!(
            out.status.success(),
            "cluster.sh node-crash {}: {}",
            self.name,
            text(&out.stderr).trim()
        );
        let state =
            self.cluster
                .wait_until(&format!("node {} to be marked down", self.name), || {
                    let s = self.state();
                    s.starts_with("down").then_some(s)
                });
        NodeLoss {
            state,
            reason: self.reason(),
            noticed_after: t.elapsed(),
        }
    }

    /// Start the node's slurmd again after [`Node::crash`] (in a fresh mount namespace,
    /// as after a reboot; the fake GPU state is as the crash left it), and wait until
    /// Slurm takes the node back (`ReturnToService=2`).
    ///
    /// # Panics
    /// When `cluster.sh node-start` fails, or after [`HANG_GUARD`](crate::HANG_GUARD).
    pub fn start_again(&self) {
        let out = run(cluster_sh()
            .arg("node-start")
            .arg(self.cluster.dir())
            .arg(&self.name));
        assert!(
            out.status.success(),
            "cluster.sh node-start {}: {}",
            self.name,
            text(&out.stderr).trim()
        );
        self.cluster
            .wait_until(&format!("node {} to be back", self.name), || {
                let s = self.state();
                (!s.starts_with("down") && !s.ends_with('*')).then_some(())
            });
    }
}
