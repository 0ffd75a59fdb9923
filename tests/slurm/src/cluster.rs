//! [`Cluster`]: starting and stopping one, its folders and nodes, its fake GPUs, and
//! programs run in its node's mount namespace. Jobs and waits are in `jobs.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::{
    artifact, cluster_sh, colloc_bin, fake_ctl, plugin_path, run, text, ClusterSpec, Node, Profile,
};

/// A running cluster; stopped when dropped. The one-node methods ([`Cluster::fake_state`],
/// [`Cluster::instances`], [`Cluster::slurmd_log_tail`], …) look at the first node of a
/// cluster of several; [`Cluster::node`] looks at any.
pub struct Cluster {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) gpus: u32,
    pub(crate) profile: Profile,
    pub(crate) nodes: Vec<String>,
    pub(crate) script_seq: std::cell::Cell<u32>,
    pub(crate) accounting: bool,
}

impl Cluster {
    /// Start a one-node cluster with `gpus` fake GPUs of the given fake NVML models (comma
    /// list; default one A100-40GB per GPU), under the profile of `COLLOC_CLUSTER_PROFILE`.
    ///
    /// # Panics
    /// When the cluster does not come up (with the reason and the log to read).
    pub fn start(gpus: u32, models: Option<&str>) -> Cluster {
        Cluster::start_with(&ClusterSpec::new(1, gpus).models(models))
    }

    /// Start a cluster of this shape.
    ///
    /// # Panics
    /// When the cluster does not come up (with the reason and the logs to read).
    pub fn start_with(spec: &ClusterSpec) -> Cluster {
        let plugin = plugin_path();
        for (what, p) in [
            ("plugin", plugin.clone()),
            (
                "fake NVML",
                artifact("COLLOC_FAKE_NVML_LIB", "libfake_nvml.so"),
            ),
            ("fake-nvml-ctl", fake_ctl()),
            ("colloc", colloc_bin()),
        ] {
            assert!(
                p.is_file(),
                "no {what} at {}: build the workspace first (`cargo build`), or set the \
                 COLLOC_* path variables",
                p.display()
            );
        }
        // The job container hides /tmp from jobs: colloc.toml's paths, job scripts and the
        // fake GPU state must lie elsewhere under the production profile.
        let base = match spec.profile {
            Profile::Simple => std::env::temp_dir(),
            Profile::Production | Profile::ProductionV2 => PathBuf::from("/var/tmp"),
        };
        let dir = tempfile::Builder::new()
            .prefix("colloc-slurm-")
            .tempdir_in(&base)
            .expect("a temporary directory");
        let gpus = spec.gpus;
        let models = spec
            .models
            .clone()
            .unwrap_or_else(|| vec!["A100-40GB"; gpus as usize].join(","));
        let mut start = cluster_sh();
        match &spec.prolog_flags {
            Some(flags) => start.env("COLLOC_CLUSTER_PROLOG_FLAGS", flags),
            None => start.env_remove("COLLOC_CLUSTER_PROLOG_FLAGS"),
        };
        let out = run(start
            .arg("start")
            .arg(dir.path())
            .args(["--nodes", &spec.nodes.to_string()])
            .args(["--gpus", &gpus.to_string()])
            .args(["--profile", spec.profile.name()])
            .args(spec.accounting.then_some("--accounting"))
            .env("COLLOC_FAKE_NVML_GPUS", &models)
            .env("COLLOC_SPANK_PLUGIN", &plugin)
            .env("COLLOC_SPANK_EXTRA", spec.spank_extra.join("\n"))
            .env(
                "COLLOC_FAKE_NVML_LIB",
                artifact("COLLOC_FAKE_NVML_LIB", "libfake_nvml.so"),
            )
            .env("COLLOC_FAKE_NVML_CTL", fake_ctl()));
        let names = text(&run(cluster_sh().arg("nodes").arg(dir.path())).stdout);
        let c = Cluster {
            dir,
            gpus,
            profile: spec.profile,
            nodes: names.split_whitespace().map(str::to_string).collect(),
            script_seq: std::cell::Cell::new(0),
            accounting: spec.accounting,
        };
        if !out.status.success() || c.nodes.len() != spec.nodes as usize {
            let log = c.slurmd_log_tail(30);
            c.stop();
            panic!(
                "cluster did not start: {}\n--- slurmd log ---\n{log}",
                text(&out.stderr).trim()
            );
        }
        c
    }

    /// The profile this cluster runs.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The node names: this host's name for a one-node cluster, else `n1..nN`.
    pub fn node_names(&self) -> &[String] {
        &self.nodes
    }

    /// Every node.
    pub fn nodes(&self) -> Vec<Node<'_>> {
        self.nodes.iter().map(|n| self.node(n)).collect()
    }

    /// Node `name`.
    ///
    /// # Panics
    /// When the cluster has no such node.
    pub fn node(&self, name: &str) -> Node<'_> {
        assert!(
            self.nodes.iter().any(|n| n == name),
            "no node {name} in this cluster ({:?})",
            self.nodes
        );
        Node {
            cluster: self,
            name: name.to_string(),
        }
    }

    pub(crate) fn first(&self) -> Node<'_> {
        self.node(&self.nodes[0])
    }

    pub(crate) fn several(&self) -> bool {
        self.nodes.len() > 1
    }

    /// The cluster's folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where job scripts and job output go (world-writable, sticky).
    pub fn jobs_dir(&self) -> PathBuf {
        self.dir().join("jobs")
    }

    /// The colloc config the node uses.
    pub fn colloc_config(&self) -> PathBuf {
        self.dir().join("etc/colloc.toml")
    }

    /// colloc's journal folder (the first node's, as seen from outside its namespace).
    pub fn journal_dir(&self) -> PathBuf {
        self.first().journal_dir()
    }

    /// colloc's run folder (MPS pipe and log directories) as colloc.toml names it, so as
    /// jobs see it. On a cluster of several nodes each node has its own behind this path
    /// ([`Node::run_dir`]).
    pub fn run_dir(&self) -> PathBuf {
        self.dir().join("run")
    }

    /// The fake NVML state file (the first node's, as seen from outside its namespace).
    pub fn fake_state_path(&self) -> PathBuf {
        self.first().fake_state_path()
    }

    /// True where slurmd could not get its own mount namespace and the fake NVML state
    /// sits in the fake's machine-wide default place: two such clusters cannot run at once.
    pub fn shares_default_state(&self) -> bool {
        self.dir().join("fake-nvml/shared-default").exists()
    }

    /// Number of fake GPUs.
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// The running Slurm's release (major, minor), from `scontrol --version` ("slurm
    /// 24.11.5"): the host's 22.05, or 24.11 in the root of tests/slurm/slurm-root.sh.
    /// Where the releases behave differently, a test says which it saw.
    ///
    /// # Panics
    /// When scontrol does not say its version.
    pub fn slurm_release(&self) -> (u32, u32) {
        let out = run(self.slurm("scontrol").arg("--version"));
        let said = text(&out.stdout);
        said.split_whitespace()
            .nth(1)
            .and_then(|v| {
                let mut n = v.split('.').map(|p| p.parse::<u32>().ok());
                Some((n.next()??, n.next()??))
            })
            .unwrap_or_else(|| panic!("scontrol --version said {said:?}"))
    }

    /// A Slurm client command aimed at this cluster. Jobs it submits get
    /// `COLLOC_FAKE_NVML_STATE` naming the path behind which each node has its own fake
    /// GPU state, outside `/tmp` (which the job container hides).
    pub fn slurm(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir().join("etc/slurm.conf"))
            .env(
                "COLLOC_FAKE_NVML_STATE",
                self.dir().join("fake-nvml/state.json"),
            )
            .current_dir(self.jobs_dir());
        c
    }

    /// The fake NVML state (the first node's), as JSON.
    pub fn fake_state(&self) -> Value {
        self.first().fake_state()
    }

    /// Run `fake-nvml-ctl --state <the first node's state> ARGS`; it must succeed.
    ///
    /// # Panics
    /// When it fails.
    pub fn fake_ctl(&self, args: &[&str]) -> Output {
        self.first().fake_ctl(args)
    }

    /// MIG GPU instances on the first node's fake GPU `gpu`, as the fake driver holds them.
    pub fn instances(&self, gpu: u32) -> Vec<Value> {
        self.first().instances(gpu)
    }

    /// The first node's GPUs: MIG mode and instances, what "the GPU is
    /// untouched/restored" compares.
    pub fn gpu_layout(&self) -> Value {
        self.first().gpu_layout()
    }

    /// Every GPU of every node out of MIG mode (whole GPUs, as `naive`/`mps` jobs need
    /// them: with MIG on, CUDA sees no whole GPU and colloc refuses those jobs where it may
    /// not switch), until the guard is dropped, which puts MIG back on (the clusters start
    /// with it on, as `mig` jobs on a node with `allow_mig_mode_change = false` need it).
    ///
    /// # Panics
    /// When the fake driver refuses (a GPU with instances).
    pub fn whole_gpus(&self) -> WholeGpus<'_> {
        self.whole_gpus_but(&[])
    }

    /// As [`Cluster::whole_gpus`], but the GPUs of `keep` (indexes on every node) stay in
    /// MIG mode: for a test that runs a `mig` job beside `naive`/`mps` ones (Slurm gives
    /// the first job the lowest free GPU).
    ///
    /// # Panics
    /// When the fake driver refuses (a GPU with instances).
    pub fn whole_gpus_but(&self, keep: &[u32]) -> WholeGpus<'_> {
        self.set_mig_everywhere(false, keep);
        WholeGpus(self, keep.to_vec())
    }

    fn set_mig_everywhere(&self, on: bool, keep: &[u32]) {
        for n in self.nodes() {
            for g in (0..self.gpus()).filter(|g| !keep.contains(g)) {
                let out = n.fake_ctl(&[
                    "set-mig",
                    "--gpu",
                    &g.to_string(),
                    if on { "on" } else { "off" },
                ]);
                assert!(out.status.success(), "set-mig on {}", n.name());
            }
        }
    }

    /// Put every node's fake GPUs back to a fresh state (between tests that leave things
    /// behind on purpose).
    ///
    /// # Panics
    /// When `cluster.sh reset-gpus` fails.
    pub fn reset_fake_gpus(&self) {
        let out = run(cluster_sh()
            .arg("reset-gpus")
            .arg(self.dir())
            .env("COLLOC_FAKE_NVML_CTL", fake_ctl()));
        assert!(
            out.status.success(),
            "cluster.sh reset-gpus: {}",
            text(&out.stderr).trim()
        );
    }

    /// Journals colloc left in its state folder, on every node.
    pub fn journals(&self) -> Vec<PathBuf> {
        self.nodes().iter().flat_map(Node::journals).collect()
    }

    /// Last `n` lines of slurmd's log; of each node's, one after another, on a cluster of
    /// several.
    pub fn slurmd_log_tail(&self, n: usize) -> String {
        self.each_node(|node| node.slurmd_log_tail(n))
    }

    /// [`Node::slurmd_log_story`], of each node in turn on a cluster of several.
    pub fn slurmd_log_story(&self, n: usize) -> String {
        self.each_node(|node| node.slurmd_log_story(n))
    }

    /// `what` of the only node; of each node under its name, on a cluster of several.
    fn each_node(&self, what: impl Fn(&Node<'_>) -> String) -> String {
        if !self.several() {
            return what(&self.first());
        }
        self.nodes()
            .iter()
            .map(|node| format!("--- {} ---\n{}", node.name(), what(node)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Run `colloc ARGS` against the (first) node's config and fake GPUs.
    pub fn colloc(&self, args: &[&str]) -> Output {
        self.first().colloc(args)
    }

    /// The (first) node's slurmd process id: its mount namespace is the node's.
    pub fn slurmd_pid(&self) -> Option<u32> {
        self.first().slurmd_pid()
    }

    /// `program` run in the node's mount namespace, where the prolog, the epilog and the
    /// jobs run (a mount made there is theirs alone).
    pub fn node_command(&self, program: &str) -> Command {
        match self.slurmd_pid() {
            Some(pid) if !self.shares_default_state() => {
                let mut c = Command::new("nsenter");
                c.arg("-t")
                    .arg(pid.to_string())
                    .arg("-m")
                    .arg("--")
                    .arg(program);
                c
            }
            _ => Command::new(program),
        }
    }

    /// Where `path` is as the node sees it (through slurmd's root in /proc), for looking
    /// at what lies on a file system mounted in the node's namespace only.
    pub fn node_path(&self, path: &Path) -> PathBuf {
        match self.slurmd_pid() {
            Some(pid) if !self.shares_default_state() => {
                let rel = path.strip_prefix("/").unwrap_or(path);
                PathBuf::from(format!("/proc/{pid}/root")).join(rel)
            }
            _ => path.to_path_buf(),
        }
    }

    /// colloc's state folder (journals, locks) of the (first) node, from outside.
    pub fn state_dir(&self) -> PathBuf {
        self.first().own("state")
    }

    /// Put drained or down nodes back in service (after a failed test, so the next one
    /// runs).
    pub fn resume_node(&self) {
        for (name, state) in self.node_states() {
            if state.contains("drain") || state.contains("down") {
                let _ = self
                    .slurm("scontrol")
                    .args(["update", &format!("NodeName={name}"), "State=RESUME"])
                    .status();
            }
        }
    }

    fn stop(&self) {
        let out = cluster_sh().arg("stop").arg(self.dir()).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("cluster stop: {}", text(&o.stderr).trim()),
            Err(e) => eprintln!("cluster stop: {e}"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if std::env::var_os("COLLOC_KEEP_CLUSTER").is_some() {
            let kept = std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().expect("a temporary directory"),
            );
            eprintln!("kept the cluster folder {}", kept.keep().display());
        }
    }
}

/// MIG off on every GPU while it lives ([`Cluster::whole_gpus`]).
pub struct WholeGpus<'a>(&'a Cluster, Vec<u32>);

impl Drop for WholeGpus<'_> {
    fn drop(&mut self) {
        // A failed test may leave a GPU with instances: its own cleanup resets the GPUs.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.0.set_mig_everywhere(true, &self.1);
        }));
    }
}
