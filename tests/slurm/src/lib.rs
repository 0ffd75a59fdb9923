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
//! production configuration.
//!
//! Paths under test: the plugin from `COLLOC_SPANK_PLUGIN` and the `colloc` binary from
//! `COLLOC_BIN` when set (CI points them at the installed .deb), else `target/debug`.
//! Build first (`cargo build`, or `cargo test` at the workspace root, which builds every
//! default member before running tests).
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("debug")
}

/// An artifact: `$var` when set, else `target/debug/<name>`; see [`visible_to_jobs`].
pub fn artifact(var: &str, name: &str) -> PathBuf {
    visible_to_jobs(match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join(name),
    })
}

/// Where copies of artifacts that lie under `/tmp` go (scripts/test.sh removes it).
pub const ARTIFACT_COPIES: &str = "/var/tmp/colloc-test-artifacts";

/// `path`, or, where it lies under `/tmp` or `/dev/shm` (a checkout cloned under /tmp),
/// a copy of it under [`ARTIFACT_COPIES`]: the production profile's job container gives
/// every job its own `/tmp` and `/dev/shm`, so a job script, an `srun` inside a job, or a
/// colloc.toml could not reach the file there. The copy is refreshed when the file
/// changed, and made aside then renamed, since suites run at the same time.
pub fn visible_to_jobs(path: PathBuf) -> PathBuf {
    let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    if !(real.starts_with("/tmp") || real.starts_with("/dev/shm")) {
        return path;
    }
    let Some(name) = real.file_name() else {
        return path;
    };
    let Ok(meta) = std::fs::metadata(&real) else {
        return path;
    };
    // One folder per source file, so names (and a plugin's file name) stay as they are.
    let key = real
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = Path::new(ARTIFACT_COPIES).join(format!("{key:016x}"));
    let dest = dir.join(name);
    let fresh = std::fs::metadata(&dest)
        .is_ok_and(|d| d.len() == meta.len() && d.modified().ok() >= meta.modified().ok());
    if !fresh {
        std::fs::create_dir_all(&dir).expect("make the artifact copies' folder");
        let tmp = dir.join(format!(
            ".{}.{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        std::fs::copy(&real, &tmp).expect("copy an artifact out of /tmp");
        std::fs::rename(&tmp, &dest).expect("move the artifact copy into place");
    }
    dest
}

/// A file of the checkout that a job runs or reads (a run's script, say), at `rel` from
/// the workspace root; see [`visible_to_jobs`]: where the checkout lies under `/tmp`, the
/// production profile's job container hides it from every process of the job.
pub fn fixture(rel: &str) -> PathBuf {
    visible_to_jobs(repo_root().join(rel))
}

/// The plugin under test.
pub fn plugin_path() -> PathBuf {
    artifact("COLLOC_SPANK_PLUGIN", "libcolloc_spank.so")
}

/// The plugin with the test-only seams (`test_panic=`), for the panic-containment test:
/// `$COLLOC_SPANK_TEST_PLUGIN`, else `target/test-seams/libcolloc_spank.so`, built by
/// `cargo build -p colloc-spank --features test-seams --profile test-seams`. Release and
/// debug plugins do not have the seams.
///
/// # Panics
/// When it has not been built, with the command that builds it.
pub fn test_seams_plugin() -> PathBuf {
    let p = match std::env::var_os("COLLOC_SPANK_TEST_PLUGIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target"))
            .join("test-seams/libcolloc_spank.so"),
    };
    let p = visible_to_jobs(p);
    assert!(
        p.is_file(),
        "no test-seams plugin at {}: build it with `cargo build -p colloc-spank --features \
         test-seams --profile test-seams` (scripts/test.sh does), or set COLLOC_SPANK_TEST_PLUGIN",
        p.display()
    );
    p
}

/// The `colloc` binary under test.
pub fn colloc_bin() -> PathBuf {
    artifact("COLLOC_BIN", "colloc")
}

/// The fake NVML control tool.
pub fn fake_ctl() -> PathBuf {
    artifact("COLLOC_FAKE_NVML_CTL", "fake-nvml-ctl")
}

/// Build the SPANK probe plugin (`tests/slurm/probes/spank_probe.c`, which records where
/// Slurm calls each callback) with the C compiler (`$CC`, else `gcc`) into the target
/// folder, and return its path.
///
/// # Panics
/// When the compiler is missing or fails.
pub fn build_spank_probe() -> PathBuf {
    let src = repo_root().join("tests/slurm/probes/spank_probe.c");
    let out = target_dir().join("spank_probe.so");
    // Another test process may build it at the same time: compile aside, then rename.
    let tmp = target_dir().join(format!("spank_probe.so.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let built = run(Command::new(&cc)
        .args([
            "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&tmp)
        .arg(&src));
    assert!(
        built.status.success(),
        "{cc} {}: {}",
        src.display(),
        text(&built.stderr).trim()
    );
    std::fs::rename(&tmp, &out).expect("move the probe plugin into place");
    visible_to_jobs(out)
}

/// Longest any single wait may take before the suite gives up (a hang guard, not a
/// speed check).
pub const HANG_GUARD: Duration = Duration::from_secs(180);

/// The Slurm configuration a cluster runs (`cluster.sh start --profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `proctrack/linuxproc`, `task/none`, no cgroups, no job container,
    /// `PrologFlags=Alloc`: the simplest setup Slurm runs with.
    Simple,
    /// What university clusters run: `proctrack/cgroup`, `task/cgroup,task/affinity`,
    /// `jobacct_gather/cgroup`, `CR_Core_Memory`, cgroup v1 with
    /// `ConstrainCores/RAMSpace/Devices=yes`, `PrologFlags=Alloc,Contain` and
    /// `job_container/tmpfs` (each job has a private `/tmp` and `/dev/shm`). The cluster's
    /// folder is under `/var/tmp`, since the job container hides `/tmp` from jobs.
    Production,
}

impl Profile {
    /// The name `cluster.sh --profile` and `COLLOC_CLUSTER_PROFILE` take.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Simple => "simple",
            Profile::Production => "production",
        }
    }

    /// `COLLOC_CLUSTER_PROFILE` (`simple` when unset or empty).
    ///
    /// # Panics
    /// On another value, naming the valid ones.
    pub fn from_env() -> Profile {
        match std::env::var("COLLOC_CLUSTER_PROFILE").as_deref() {
            Err(_) | Ok("" | "simple") => Profile::Simple,
            Ok("production") => Profile::Production,
            Ok(other) => panic!("COLLOC_CLUSTER_PROFILE={other:?}: valid: simple, production"),
        }
    }
}

/// The shape of a cluster to start: nodes, fake GPUs per node, their models, the profile,
/// and further plugstack.conf lines.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    nodes: u32,
    gpus: u32,
    models: Option<String>,
    profile: Profile,
    spank_extra: Vec<String>,
    prolog_flags: Option<String>,
}

impl ClusterSpec {
    /// `nodes` nodes (1: one node named after this host; more: `n1..nN`) with `gpus` fake
    /// A100 40GB each, under the profile of `COLLOC_CLUSTER_PROFILE`.
    pub fn new(nodes: u32, gpus: u32) -> ClusterSpec {
        ClusterSpec {
            nodes,
            gpus,
            models: None,
            profile: Profile::from_env(),
            spank_extra: Vec::new(),
            prolog_flags: None,
        }
    }

    /// The profile this spec starts.
    pub fn profile_of(&self) -> Profile {
        self.profile
    }

    /// `PrologFlags` instead of the profile's (e.g. `Alloc,Contain,Serial`).
    #[must_use]
    pub fn prolog_flags(mut self, flags: &str) -> ClusterSpec {
        self.prolog_flags = Some(flags.to_string());
        self
    }

    /// One node's GPU models for the fake NVML (comma list, one per GPU).
    #[must_use]
    pub fn models(mut self, models: Option<&str>) -> ClusterSpec {
        self.models = models.map(str::to_string);
        self
    }

    /// Run this profile, whatever `COLLOC_CLUSTER_PROFILE` says.
    #[must_use]
    pub fn profile(mut self, profile: Profile) -> ClusterSpec {
        self.profile = profile;
        self
    }

    /// Add a plugstack.conf line after colloc's (e.g. a probe plugin).
    #[must_use]
    pub fn spank_line(mut self, line: &str) -> ClusterSpec {
        self.spank_extra.push(line.to_string());
        self
    }
}

/// A running cluster; stopped when dropped. The one-node methods ([`Cluster::fake_state`],
/// [`Cluster::instances`], [`Cluster::slurmd_log_tail`], …) look at the first node of a
/// cluster of several; [`Cluster::node`] looks at any.
pub struct Cluster {
    dir: tempfile::TempDir,
    gpus: u32,
    profile: Profile,
    nodes: Vec<String>,
    script_seq: std::cell::Cell<u32>,
}

/// A test asked to be skipped on this cluster (see [`skip`]): the panic payload
/// [`run_suite`] recognizes.
#[derive(Debug)]
pub struct Skipped(pub String);

/// Skip the calling test on this cluster, with the reason; [`run_suite`] reports it as
/// ignored, not failed. For a test that cannot pass under one [`Profile`] because of a
/// known defect: name the issue in the reason.
pub fn skip(reason: &str) -> ! {
    std::panic::resume_unwind(Box::new(Skipped(reason.to_string())))
}

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

/// One step of a job, as `squeue --steps` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `JOBID.STEPID`, e.g. `12.0`, `12.batch`, `12.extern`.
    pub id: String,
    /// The step's name (`srun --job-name`, else the program).
    pub name: String,
    /// The nodes it runs on, as Slurm writes the list (`n[1-3]`).
    pub nodes: String,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// Slurm's job state, e.g. `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`.
    pub state: String,
    /// `ExitCode=` as Slurm shows it, `code:signal`.
    pub exit_code: String,
}

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
            Profile::Production => PathBuf::from("/var/tmp"),
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

    fn first(&self) -> Node<'_> {
        self.node(&self.nodes[0])
    }

    fn several(&self) -> bool {
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

    /// `sbatch ARGS SCRIPT` with output to `jobs/<id>.out` and `.err`. `Ok(job id)` or the
    /// failed command's output.
    ///
    /// # Errors
    /// sbatch refused the job.
    pub fn sbatch<S: AsRef<OsStr>>(&self, args: &[S], script: &str) -> Result<u32, Output> {
        let n = self.script_seq.get() + 1;
        self.script_seq.set(n);
        let path = self.jobs_dir().join(format!("script-{n}.sh"));
        let mut f = std::fs::File::create(&path).expect("write job script");
        writeln!(f, "#!/bin/bash\n{script}").expect("write job script");
        drop(f);
        let jobs = self.jobs_dir();
        let out = run(self
            .slurm("sbatch")
            .arg("--parsable")
            .arg(format!("--output={}/%j.out", jobs.display()))
            .arg(format!("--error={}/%j.err", jobs.display()))
            .args(args)
            .arg(&path));
        if !out.status.success() {
            return Err(out);
        }
        let id = text(&out.stdout);
        let id = id.trim().split(';').next().unwrap_or_default();
        Ok(id
            .parse()
            .unwrap_or_else(|_| panic!("sbatch printed {id:?}, not a job id")))
    }

    /// `sbatch` that must succeed.
    ///
    /// # Panics
    /// When sbatch fails.
    pub fn submit<S: AsRef<OsStr>>(&self, args: &[S], script: &str) -> u32 {
        self.sbatch(args, script)
            .unwrap_or_else(|o| panic!("sbatch failed ({}): {}", o.status, text(&o.stderr).trim()))
    }

    /// `scontrol -o show job ID` as key=value pairs; `None` once Slurm forgot the job.
    pub fn job_info(&self, id: u32) -> Option<BTreeMap<String, String>> {
        let out = run(self
            .slurm("scontrol")
            .args(["-o", "show", "job", &id.to_string()]));
        if !out.status.success() {
            return None;
        }
        Some(parse_kv(&text(&out.stdout)))
    }

    /// Wait until the job has ended and its epilog has finished on every node (the job's
    /// nodes are no longer completing it).
    ///
    /// # Panics
    /// After [`HANG_GUARD`], or when Slurm forgets the job before it ends.
    pub fn wait_done(&self, id: u32) -> JobEnd {
        let mut nodes = String::new();
        let end = self.wait_until_telling(
            &format!("job {id} to end"),
            || self.job_story(id),
            || {
                let info = self.job_info(id)?;
                let state = info.get("JobState")?.clone();
                if let Some(n) = info.get("NodeList").filter(|n| *n != "(null)") {
                    nodes.clone_from(n);
                }
                if state == "PENDING" && self.node_state().contains("drain") {
                    panic!(
                        "job {id} cannot start: node drained ({})\n--- slurmd log ---\n{}",
                        self.node_reason(),
                        self.slurmd_log_tail(20)
                    );
                }
                let busy = matches!(
                    state.as_str(),
                    "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED"
                );
                (!busy).then(|| JobEnd {
                    state,
                    exit_code: info.get("ExitCode").cloned().unwrap_or_default(),
                })
            },
        );
        if self.several() {
            // Other jobs may hold other nodes: only this job's must be done completing.
            let nodes = self.hostnames(&nodes);
            self.wait_until("the job's nodes to finish the epilog", || {
                let states = self.node_states();
                (!nodes
                    .iter()
                    .any(|n| states.get(n).is_some_and(|s| s.contains("comp"))))
                .then_some(())
            });
        } else {
            self.wait_until("the node to finish the epilog", || {
                let s = self.node_state();
                (!s.contains("comp") && !s.contains("alloc") && !s.contains("mix")).then_some(())
            });
        }
        end
    }

    /// A Slurm node list (`n[1-3]`) as names.
    pub fn hostnames(&self, list: &str) -> Vec<String> {
        if list.is_empty() {
            return Vec::new();
        }
        let out = run(self.slurm("scontrol").args(["show", "hostnames", list]));
        text(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Each node's state, as `sinfo -o %T` prints it (`idle`, `mixed`, `down*`, …).
    pub fn node_states(&self) -> BTreeMap<String, String> {
        let out = run(self.slurm("sinfo").args(["-h", "-N", "-o", "%N %T"]));
        text(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.trim().to_string()))
            .collect()
    }

    /// The job's steps that run now, as `squeue --steps` lists them (the `extern` and
    /// `batch` steps included).
    pub fn job_steps(&self, id: u32) -> Vec<Step> {
        let out = run(self.slurm("squeue").args([
            "--steps",
            "-h",
            "-j",
            &id.to_string(),
            "-o",
            "%i|%j|%N",
        ]));
        text(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, '|');
                Some(Step {
                    id: f.next()?.trim().to_string(),
                    name: f.next()?.trim().to_string(),
                    nodes: f.next()?.trim().to_string(),
                })
            })
            .collect()
    }

    /// Poll `f` every 50 ms until it gives a value.
    ///
    /// # Panics
    /// After [`HANG_GUARD`], with the slurmd log.
    pub fn wait_until<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        self.wait_until_telling(what, String::new, f)
    }

    /// [`Cluster::wait_until`], whose panic also says what `more` gives (e.g. a job's
    /// story, [`Cluster::job_story`]).
    fn wait_until_telling<T>(
        &self,
        what: &str,
        more: impl FnOnce() -> String,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > HANG_GUARD {
                panic!(
                    "gave up waiting for {what} after {}s\n--- squeue ---\n{}\n{}--- slurmd log ---\n{}",
                    HANG_GUARD.as_secs(),
                    self.squeue(),
                    more(),
                    self.slurmd_log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What Slurm recorded of job `id`, for a wait that gave up: its record's state and
    /// times, then every line of slurmctld's log and of each node's slurmd log that names
    /// it (the steps' state polls left out), so the excerpt shows which stage took the
    /// time, not only how the job ended.
    pub fn job_story(&self, id: u32) -> String {
        let mut story = String::from("--- job record ---\n");
        match self.job_info(id) {
            Some(info) => {
                let keys = [
                    "JobState",
                    "Reason",
                    "SubmitTime",
                    "StartTime",
                    "EndTime",
                    "Restarts",
                    "NodeList",
                    "ExitCode",
                ];
                let fields: Vec<String> = keys
                    .iter()
                    .filter_map(|k| Some(format!("{k}={}", info.get(*k)?)))
                    .collect();
                story += &fields.join(" ");
            }
            None => story += "(Slurm no longer knows it)",
        }
        story.push('\n');
        let mut logs = vec![(
            "slurmctld".to_string(),
            self.dir().join("slurm/slurmctld.log"),
        )];
        for node in self.nodes() {
            logs.push((format!("slurmd {}", node.name()), node.slurmd_log()));
        }
        for (name, path) in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| names_job(l, id) && !l.contains("REQUEST_STATE"))
                .collect();
            story += &format!("--- {name}: lines about job {id} ---\n");
            // The start and the end of a long story.
            if lines.len() > 120 {
                story += &lines[..60].join("\n");
                story += &format!("\n[... {} lines ...]\n", lines.len() - 100);
                story += &lines[lines.len() - 40..].join("\n");
            } else {
                story += &lines.join("\n");
            }
            story.push('\n');
        }
        story
    }

    /// The node's state as `sinfo -o %T` prints it (`idle`, `drained`, `mixed`, …); one
    /// line per node on a cluster of several.
    pub fn node_state(&self) -> String {
        text(&run(self.slurm("sinfo").args(["-h", "-N", "-o", "%T"])).stdout)
            .trim()
            .to_string()
    }

    /// Why the node is down or drained, if it is.
    pub fn node_reason(&self) -> String {
        text(&run(self.slurm("sinfo").args(["-h", "-N", "-o", "%E"])).stdout)
            .trim()
            .to_string()
    }

    /// `squeue -h` output (empty when no job is queued or running).
    pub fn squeue(&self) -> String {
        text(&run(self.slurm("squeue").arg("-h")).stdout)
            .trim()
            .to_string()
    }

    /// The job's stdout file.
    pub fn job_out(&self, id: u32) -> String {
        std::fs::read_to_string(self.jobs_dir().join(format!("{id}.out"))).unwrap_or_default()
    }

    /// The job's stderr file.
    pub fn job_err(&self, id: u32) -> String {
        std::fs::read_to_string(self.jobs_dir().join(format!("{id}.err"))).unwrap_or_default()
    }

    /// `NAME=value` lines of the job's stdout.
    pub fn job_vars(&self, id: u32) -> BTreeMap<String, String> {
        self.job_out(id)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
        if !self.several() {
            return self.first().slurmd_log_tail(n);
        }
        self.nodes()
            .iter()
            .map(|node| format!("--- {} ---\n{}", node.name(), node.slurmd_log_tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Run `colloc ARGS` against the (first) node's config and fake GPUs.
    pub fn colloc(&self, args: &[&str]) -> Output {
        self.first().colloc(args)
    }

    /// Wait for a file job `id` creates while it runs.
    ///
    /// # Panics
    /// At once when the job ended or the node drained instead (with why), else after
    /// [`HANG_GUARD`].
    pub fn wait_for_file(&self, id: u32, path: &Path) {
        self.wait_until(&format!("{} to appear", path.display()), || {
            if path.exists() {
                return Some(());
            }
            let node = self.node_state();
            if node.contains("drain") || node.contains("down") {
                panic!(
                    "waiting for job {id}: node {node} ({})\n--- slurmd log ---\n{}",
                    self.node_reason(),
                    self.slurmd_log_tail(20)
                );
            }
            // Slurm forgets an ended job after MinJobAge: that is an end too.
            let info = self.job_info(id);
            let state = info
                .as_ref()
                .and_then(|i| i.get("JobState"))
                .map_or("(forgotten by Slurm)", String::as_str);
            // The job may have made the file and ended between the first look and the
            // job query: look again before calling its end a failure.
            if path.exists() {
                return Some(());
            }
            if !matches!(state, "PENDING" | "RUNNING" | "CONFIGURING") {
                panic!(
                    "job {id} is {state} before creating {}; stderr: {}",
                    path.display(),
                    self.job_err(id)
                );
            }
            None
        });
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

/// One node of a [`Cluster`]. On a cluster of several, each node's slurmd runs in its own
/// mount namespace in which the paths colloc.toml names (journals, MPS folders) and the
/// fake GPU state are that node's own; the methods here read them from outside, and
/// [`Node::command`] runs a program inside.
pub struct Node<'c> {
    cluster: &'c Cluster,
    name: String,
}

impl Node<'_> {
    /// The node's name (`SLURMD_NODENAME` in its jobs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where this node's own folders are, from outside: the cluster's folder for a
    /// one-node cluster, else `nodes/<name>` in it.
    fn own(&self, rel: &str) -> PathBuf {
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
        let log = std::fs::read_to_string(self.slurmd_log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
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
    /// cgroups (`/slurm_<node>/…`, where the production profile's job tasks are, in their
    /// job's own namespace)? Another cluster on this host may have a node of the same
    /// name: pick the candidates by something of this cluster first (e.g.
    /// [`processes_of_pipe_dir`] with this cluster's run folder).
    pub fn owns_pid(&self, pid: u32) -> bool {
        let in_ns = self
            .mount_ns()
            .is_some_and(|ns| pid_mount_ns(pid).as_deref() == Some(ns.as_str()));
        let marker = format!(":/slurm_{}/", self.name);
        in_ns
            || std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cg| cg.contains(&marker))
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
    /// When `cluster.sh node-crash` fails, or after [`HANG_GUARD`].
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
    /// When `cluster.sh node-start` fails, or after [`HANG_GUARD`].
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

/// The mount namespace of process `pid` (`mnt:[…]`), while it runs.
pub fn pid_mount_ns(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Parse `Key=Value Key2=Value2` (as `scontrol -o` prints).
pub fn parse_kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The pids of this host's processes (those in `/proc` now).
pub fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
}

/// The pids of processes whose command line (`/proc/PID/cmdline`: the arguments, each
/// ended by a NUL) `keep` accepts.
pub fn pids_by_cmdline(keep: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    pids()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| keep(&c)))
        .collect()
}

/// MPS programs (process name `nvidia-cuda-mps…`) whose environment has
/// `CUDA_MPS_PIPE_DIRECTORY=<dir>`: the daemons of that pipe directory.
pub fn processes_of_pipe_dir(dir: &str) -> Vec<u32> {
    let needle = format!("CUDA_MPS_PIPE_DIRECTORY={dir}");
    pids()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("nvidia-cuda-mps"))
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// An unprivileged account for tests, made with `useradd` if missing (with a group of
/// its own, no home directory). Returns its uid and gid, as the system says them (never
/// assumed: another suite may have made its accounts first).
///
/// Suites run at the same time (scripts/test.sh runs both cluster profiles at once): the
/// look-up and `useradd` happen under one lock (`flock` on `/run/colloc-test-users.lock`),
/// so two of them never race to make the same account or fight over `/etc/passwd`'s own
/// lock. An account made here is written to the file `$COLLOC_TEST_USERS` when that is
/// set, one name a line, so that scripts/test.sh can remove what the tests made.
///
/// # Panics
/// When the account cannot be made.
pub fn ensure_user(name: &str) -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).arg(name).output().ok()?;
        if !out.status.success() {
            return None;
        }
        text(&out.stdout).trim().parse().ok()
    };
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/colloc-test-users.lock")
        .expect("open /run/colloc-test-users.lock");
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock(2) on a descriptor this function owns; released when `lock` drops.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock /run/colloc-test-users.lock");
    }
    if id("-u").is_none() {
        let out = run(Command::new("useradd")
            .args(["--no-create-home", "--user-group", "--shell", "/bin/sh"])
            .arg(name));
        assert!(
            out.status.success() || id("-u").is_some(),
            "useradd {name}: {}",
            text(&out.stderr).trim()
        );
        if out.status.success() {
            if let Some(ledger) = std::env::var_os("COLLOC_TEST_USERS") {
                use std::io::Write as _;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(ledger)
                    .expect("open $COLLOC_TEST_USERS");
                writeln!(f, "{name}").expect("write $COLLOC_TEST_USERS");
            }
        }
    }
    let ids = (
        id("-u").unwrap_or_else(|| panic!("no uid for {name}")),
        id("-g").unwrap_or_else(|| panic!("no gid for {name}")),
    );
    drop(lock);
    ids
}

/// Does this log line name job `id` (`JobId=ID`, `[ID.batch]`, `job ID`, `jobid [ID]`,
/// `job_ID`), with no digit right after the id?
fn names_job(line: &str, id: u32) -> bool {
    // `[ID` must be a step (`[ID.`): `[2026-12-…` begins every line.
    [
        ("JobId=", ""),
        ("[", "."),
        ("job ", ""),
        ("jobid [", ""),
        ("job_", ""),
    ]
    .iter()
    .any(|(prefix, then)| {
        let needle = format!("{prefix}{id}{then}");
        line.match_indices(&needle)
            .any(|(at, _)| !line[at + needle.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Is process `pid` alive? A zombie (exited, waiting to be reaped by init) is not.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// A test of a suite.
pub type Test = (&'static str, fn(&Cluster));

/// How a test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Passed,
    Failed,
    Skipped,
}

/// How one test went: name, verdict, seconds.
type Outcome = (&'static str, Verdict, f64);

/// Run one test on `cluster`, report it like libtest, and leave the nodes usable for the
/// next test when it failed (no jobs, not drained, fresh fake GPUs).
fn run_one(cluster: &Cluster, (name, test): &Test) -> Outcome {
    let t = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| test(cluster)));
    let secs = t.elapsed().as_secs_f64();
    match result {
        Ok(()) => {
            println!("test {name} ... ok ({secs:.1}s)");
            return (name, Verdict::Passed, secs);
        }
        Err(payload) => {
            if let Some(Skipped(why)) = payload.downcast_ref::<Skipped>() {
                println!(
                    "test {name} ... ignored under the {} profile: {why}",
                    cluster.profile().name()
                );
                return (name, Verdict::Skipped, secs);
            }
        }
    }
    println!(
        "test {name} ... FAILED ({secs:.1}s)\n--- slurmd log (last lines) ---\n{}",
        cluster.slurmd_log_tail(25)
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg("squeue -h -o %i | xargs -r scancel")
        .env("SLURM_CONF", cluster.dir().join("etc/slurm.conf"))
        .status();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        cluster.wait_until("the queue to empty", || {
            cluster.squeue().is_empty().then_some(())
        });
        cluster.resume_node();
        cluster.reset_fake_gpus();
    }));
    (name, Verdict::Failed, secs)
}

/// Run a suite on one-node clusters with `gpus` fake GPUs of these models, under the
/// profile of `COLLOC_CLUSTER_PROFILE`: see [`run_suite_on`].
pub fn run_suite(gpus: u32, models: Option<&str>, tests: &[Test], alone: &[Test]) {
    run_suite_on(&ClusterSpec::new(1, gpus).models(models), tests, alone);
}

/// Run a suite: `tests` one after another on one shared cluster of this shape (they share
/// the nodes), and each of `alone` on its own cluster of the same shape, at the same time
/// as the shared ones (for tests that mostly wait, such as a job running into its time
/// limit). Reports like libtest; a test that calls [`skip`] is reported as ignored, with
/// its reason. Arguments: name filters (substring), `--skip NAME`, `--exact`, `--list`;
/// other libtest flags are accepted and ignored. Needs root; without it the suite is
/// skipped with a message, unless `COLLOC_SLURM_TESTS=require`.
pub fn run_suite_on(spec: &ClusterSpec, tests: &[Test], alone: &[Test]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests.iter().chain(alone) {
            println!("{name}: test");
        }
        return;
    }
    let mut filters: Vec<&str> = Vec::new();
    let mut skips: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skips.extend(it.next().map(String::as_str)),
            // libtest options with a value.
            "--test-threads" | "--format" | "--color" | "-Z" | "--logfile" | "--shuffle-seed" => {
                it.next();
            }
            f if !f.starts_with('-') => filters.push(f),
            _ => {}
        }
    }
    let exact = args.iter().any(|a| a == "--exact");
    let matches = |name: &str, f: &str| if exact { name == f } else { name.contains(f) };
    let select = |list: &[Test]| -> Vec<Test> {
        list.iter()
            .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| matches(name, f)))
            .filter(|(name, _)| !skips.iter().any(|f| matches(name, f)))
            .copied()
            .collect()
    };
    let shared = select(tests);
    let separate = select(alone);
    let total = shared.len() + separate.len();
    if args.iter().any(|a| a == "--ignored") || total == 0 {
        // None of these is a GPU-only (ignored) test; a `--ignored` run has nothing here.
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed\n");
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        let msg = "the real-Slurm tests need root (slurmd, mknod, mount namespaces)";
        if std::env::var("COLLOC_SLURM_TESTS").as_deref() == Ok("require") {
            eprintln!("error: {msg}");
            std::process::exit(1);
        }
        println!("\nskipped {total} tests: {msg}; run them as root\n");
        return;
    }
    println!(
        "\nrunning {total} tests on a real Slurm cluster ({} profile)",
        spec.profile.name()
    );
    let started = Instant::now();
    let start_cluster = |what: &str| {
        let t = Instant::now();
        let c = Cluster::start_with(spec);
        println!(
            "{what} cluster up in {:.1}s ({} node(s) x {} fake GPU(s), {} profile, {})",
            t.elapsed().as_secs_f64(),
            c.node_names().len(),
            c.gpus(),
            c.profile().name(),
            c.dir().display()
        );
        c
    };
    let mut outcomes: Vec<Outcome> = Vec::new();
    let one_after_another = |outcomes: &mut Vec<Outcome>| {
        for t in &separate {
            let c = start_cluster(&format!("{}'s own", t.0));
            outcomes.push(run_one(&c, t));
        }
    };
    if shared.is_empty() {
        one_after_another(&mut outcomes);
    } else {
        // The shared cluster first; the separate ones (each with its own munged, slurmctld
        // and slurmds) start beside it where the fake NVML state allows.
        let cluster = start_cluster("shared");
        if cluster.shares_default_state() {
            for t in &shared {
                outcomes.push(run_one(&cluster, t));
            }
            drop(cluster);
            one_after_another(&mut outcomes);
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = separate
                    .iter()
                    .map(|t| {
                        let start_cluster = &start_cluster;
                        scope.spawn(move || {
                            let result = catch_unwind(AssertUnwindSafe(|| {
                                let c = start_cluster(&format!("{}'s own", t.0));
                                run_one(&c, t)
                            }));
                            result.unwrap_or((t.0, Verdict::Failed, 0.0))
                        })
                    })
                    .collect();
                for t in &shared {
                    outcomes.push(run_one(&cluster, t));
                }
                for h in handles {
                    outcomes.push(
                        h.join()
                            .unwrap_or(("a separate test", Verdict::Failed, 0.0)),
                    );
                }
            });
            drop(cluster);
        }
    }
    let count = |v: Verdict| outcomes.iter().filter(|o| o.1 == v).count();
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.1 == Verdict::Failed)
        .map(|o| o.0)
        .collect();
    println!(
        "\ntest result: {}. {} passed; {} failed; {} ignored; finished in {:.1}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        count(Verdict::Passed),
        failed.len(),
        count(Verdict::Skipped),
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        println!("failures: {}", failed.join(", "));
        std::process::exit(101);
    }
}

#[cfg(test)]
mod tests {
    use super::names_job;

    #[test]
    fn log_lines_name_their_job_and_no_other() {
        let id = 26_764_311;
        for line in [
            "[2026-12-04T20:40:20.896] [26764311.extern] Sent signal 15 to StepId=26764311.extern",
            "[2026-12-04T20:40:22.568] debug:  Waiting for job 26764311's prolog to complete",
            "[2026-12-04T20:40:22.571] debug:  Running spank/epilog for jobid [26764311] uid [1001]",
            "[2026-12-04T20:40:22.730] debug:  JobId=26764311: sent epilog complete msg: rc = 0",
            "[2026-12-05T06:56:35.135] sched: Allocate JobId=26764311 NodeList=vm #CPUs=1",
        ] {
            assert!(names_job(line, id), "{line}");
        }
        for line in [
            "[2026-12-04T20:40:20.896] [267643110.batch] task 0 exited",
            "[2026-12-04T20:40:22.730] debug:  JobId=2676431: sent epilog complete msg",
            "[2026-12-04T20:40:22.730] debug:  Handling REQUEST_STATE",
        ] {
            assert!(!names_job(line, id), "{line}");
        }
        // A job numbered like the year is not named by every line's timestamp.
        assert!(!names_job("[2026-12-04T20:40:22.730] slurmd started", 2026));
    }
}
