//! A real one-node Slurm cluster for colloc's tests: started by `cluster.sh start` in a
//! temporary directory (munged, slurmctld and slurmd on loopback, fake GPU device files,
//! the fake libnvidia-ml and the stand-in MPS control program), driven through the real
//! `sbatch`/`squeue`/`scontrol`, and stopped when the suite ends.
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

/// An artifact: `$var` when set, else `target/debug/<name>`.
pub fn artifact(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join(name),
    }
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

/// Longest any single wait may take before the suite gives up (a hang guard, not a
/// speed check).
pub const HANG_GUARD: Duration = Duration::from_secs(180);

/// A running cluster; stopped when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    gpus: u32,
    models: String,
    script_seq: std::cell::Cell<u32>,
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

impl Cluster {
    /// Start a cluster with `gpus` fake GPUs of the given fake NVML models (comma list;
    /// default one A100-40GB per GPU).
    ///
    /// # Panics
    /// When the cluster does not come up (with the reason and the log to read).
    pub fn start(gpus: u32, models: Option<&str>) -> Cluster {
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
        let dir = tempfile::Builder::new()
            .prefix("colloc-slurm-")
            .tempdir()
            .expect("a temporary directory");
        let models = models.map_or_else(
            || vec!["A100-40GB"; gpus as usize].join(","),
            str::to_string,
        );
        let out = run(Command::new(repo_root().join("tests/slurm/cluster.sh"))
            .arg("start")
            .arg(dir.path())
            .env("COLLOC_CLUSTER_GPUS", gpus.to_string())
            .env("COLLOC_FAKE_NVML_GPUS", &models)
            .env("COLLOC_SPANK_PLUGIN", &plugin)
            .env(
                "COLLOC_FAKE_NVML_LIB",
                artifact("COLLOC_FAKE_NVML_LIB", "libfake_nvml.so"),
            )
            .env("COLLOC_FAKE_NVML_CTL", fake_ctl()));
        let c = Cluster {
            dir,
            gpus,
            models,
            script_seq: std::cell::Cell::new(0),
        };
        if !out.status.success() {
            let log = c.slurmd_log_tail(30);
            c.stop();
            panic!(
                "cluster did not start: {}\n--- slurmd log ---\n{log}",
                text(&out.stderr).trim()
            );
        }
        c
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

    /// colloc's journal folder.
    pub fn journal_dir(&self) -> PathBuf {
        self.dir().join("state/jobs")
    }

    /// colloc's run folder (MPS pipe and log directories).
    pub fn run_dir(&self) -> PathBuf {
        self.dir().join("run")
    }

    /// The fake NVML state file (as seen from outside slurmd's mount namespace).
    pub fn fake_state_path(&self) -> PathBuf {
        self.dir().join("fake-nvml/state.json")
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

    /// A Slurm client command aimed at this cluster.
    pub fn slurm(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir().join("etc/slurm.conf"))
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

    /// Wait until the job has ended and its epilog has finished (the node is no longer
    /// completing it).
    ///
    /// # Panics
    /// After [`HANG_GUARD`], or when Slurm forgets the job before it ends.
    pub fn wait_done(&self, id: u32) -> JobEnd {
        let end = self.wait_until(&format!("job {id} to end"), || {
            let info = self.job_info(id)?;
            let state = info.get("JobState")?.clone();
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
        });
        self.wait_until("the node to finish the epilog", || {
            let s = self.node_state();
            (!s.contains("comp") && !s.contains("alloc") && !s.contains("mix")).then_some(())
        });
        end
    }

    /// Poll `f` every 50 ms until it gives a value.
    ///
    /// # Panics
    /// After [`HANG_GUARD`], with the slurmd log.
    pub fn wait_until<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > HANG_GUARD {
                panic!(
                    "gave up waiting for {what} after {}s\n--- squeue ---\n{}\n--- slurmd log ---\n{}",
                    HANG_GUARD.as_secs(),
                    self.squeue(),
                    self.slurmd_log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node's state as `sinfo -o %T` prints it (`idle`, `drained`, `mixed`, …).
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

    /// The fake NVML state, as JSON.
    pub fn fake_state(&self) -> Value {
        let out = self.fake_ctl(&["show", "--json"]);
        serde_json::from_slice(&out.stdout).expect("fake-nvml-ctl show --json prints JSON")
    }

    /// Run `fake-nvml-ctl --state <this cluster's state> ARGS`; it must succeed.
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
            "fake-nvml-ctl {args:?}: {}",
            text(&out.stderr).trim()
        );
        out
    }

    /// MIG GPU instances on fake GPU `gpu`, as the fake driver holds them.
    pub fn instances(&self, gpu: u32) -> Vec<Value> {
        self.fake_state()["gpus"][gpu as usize]["gis"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Each GPU's MIG mode and instances: what "the GPU is untouched/restored" compares.
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

    /// Put the fake GPUs back to a fresh state (between tests that leave things behind
    /// on purpose).
    pub fn reset_fake_gpus(&self) {
        self.fake_ctl(&["init", "--gpus", &self.models]);
    }

    /// Journals colloc left in its state folder.
    pub fn journals(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.journal_dir()) {
            Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Last `n` lines of slurmd's log.
    pub fn slurmd_log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir().join("slurm/slurmd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Run `colloc ARGS` against this node's config and fake GPUs.
    pub fn colloc(&self, args: &[&str]) -> Output {
        run(Command::new(colloc_bin())
            .args(args)
            .env("COLLOC_CONFIG", self.colloc_config())
            .env("COLLOC_FAKE_NVML_STATE", self.fake_state_path()))
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

    /// slurmd's process id (the node's mount namespace is its).
    pub fn slurmd_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir().join("slurm/slurmd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
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

    /// colloc's state folder (journals, locks).
    pub fn state_dir(&self) -> PathBuf {
        self.dir().join("state")
    }

    /// Put a drained node back in service (after a failed test, so the next one runs).
    pub fn resume_node(&self) {
        let node = self.node_state();
        if node.contains("drain") || node.contains("down") {
            let host = text(&run(self.slurm("sinfo").args(["-h", "-N", "-o", "%N"])).stdout);
            let _ = self
                .slurm("scontrol")
                .args([
                    "update",
                    &format!("NodeName={}", host.trim()),
                    "State=RESUME",
                ])
                .status();
        }
    }

    fn stop(&self) {
        let out = Command::new(repo_root().join("tests/slurm/cluster.sh"))
            .arg("stop")
            .arg(self.dir())
            .output();
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

/// Parse `Key=Value Key2=Value2` (as `scontrol -o` prints).
pub fn parse_kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// MPS programs (process name `nvidia-cuda-mps…`) whose environment has
/// `CUDA_MPS_PIPE_DIRECTORY=<dir>`: the daemons of that pipe directory.
pub fn processes_of_pipe_dir(dir: &str) -> Vec<u32> {
    let needle = format!("CUDA_MPS_PIPE_DIRECTORY={dir}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
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
/// its own, no home directory). Returns its uid and gid.
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
    if id("-u").is_none() {
        let out = run(Command::new("useradd")
            .args(["--no-create-home", "--user-group", "--shell", "/bin/sh"])
            .arg(name));
        assert!(
            out.status.success() || id("-u").is_some(),
            "useradd {name}: {}",
            text(&out.stderr).trim()
        );
    }
    (
        id("-u").unwrap_or_else(|| panic!("no uid for {name}")),
        id("-g").unwrap_or_else(|| panic!("no gid for {name}")),
    )
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

/// How one test went: name, passed, seconds.
type Outcome = (&'static str, bool, f64);

/// Run one test on `cluster`, report it like libtest, and leave the node usable for the
/// next test when it failed (no jobs, not drained, fresh fake GPUs).
fn run_one(cluster: &Cluster, (name, test): &Test) -> Outcome {
    let t = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| test(cluster)));
    let secs = t.elapsed().as_secs_f64();
    if result.is_ok() {
        println!("test {name} ... ok ({secs:.1}s)");
        return (name, true, secs);
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
    (name, false, secs)
}

/// Run a suite: `tests` one after another on one shared cluster (they share the node),
/// and each of `alone` on its own cluster of the same shape, at the same time as the
/// shared ones (for tests that mostly wait, such as a job running into its time limit).
/// Reports like libtest. Arguments: name filters (substring), `--skip NAME`, `--exact`,
/// `--list`; other libtest flags are accepted and ignored. Needs root; without it the
/// suite is skipped with a message, unless `COLLOC_SLURM_TESTS=require`.
pub fn run_suite(gpus: u32, models: Option<&str>, tests: &[Test], alone: &[Test]) {
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
    println!("\nrunning {total} tests on a real Slurm cluster");
    let started = Instant::now();
    let models = models.map(str::to_string);
    let start_cluster = |what: &str| {
        let t = Instant::now();
        let c = Cluster::start(gpus, models.as_deref());
        println!(
            "{what} cluster up in {:.1}s ({} fake GPU(s), {})",
            t.elapsed().as_secs_f64(),
            c.gpus(),
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
        // The shared cluster first: it starts munged, which the others then use.
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
                            result.unwrap_or((t.0, false, 0.0))
                        })
                    })
                    .collect();
                for t in &shared {
                    outcomes.push(run_one(&cluster, t));
                }
                for h in handles {
                    outcomes.push(h.join().unwrap_or(("a separate test", false, 0.0)));
                }
            });
            drop(cluster);
        }
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.1).map(|o| o.0).collect();
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.1}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        outcomes.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        println!("failures: {}", failed.join(", "));
        std::process::exit(101);
    }
}
