//! Shared helpers of the `colloc run` tests (and `succeeded` of the bench tests): a temp
//! dir, a clean environment (no GPU, no node config, no colloc job) and the report reader;
//! [`bench`]: the `colloc bench` command lines.
#![allow(dead_code)]

pub mod bench;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mark")).unwrap();
        Env { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn mark(&self) -> PathBuf {
        self.dir.path().join("mark")
    }

    pub fn report_dir(&self) -> PathBuf {
        self.dir.path().join("report")
    }

    /// Write a manifest into the temp dir.
    pub fn manifest(&self, text: &str) -> PathBuf {
        let p = self.dir.path().join("runs.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `colloc run` with a clean environment and the report in `report/`.
    pub fn colloc(&self) -> Command {
        let mut c = Command::cargo_bin("colloc").unwrap();
        for k in [
            "COLLOC_MODE",
            "COLLOC_DEVICES",
            "COLLOC_SLOTS",
            "CUDA_VISIBLE_DEVICES",
            "SLURM_JOB_ID",
            "SLURM_RESTART_COUNT",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_MPS_LOG_DIRECTORY",
            "COLLOC_MPS_PIPES",
        ] {
            c.env_remove(k);
        }
        c.env("COLLOC_CONFIG", self.dir.path().join("no-config.toml"))
            .env("MARK", self.mark())
            .current_dir(self.dir.path())
            .arg("run")
            .arg("--report-dir")
            .arg(self.report_dir());
        c
    }

    pub fn report(&self) -> Value {
        let text = std::fs::read_to_string(self.report_dir().join("colloc-report.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Files in the mark dir (what the runs left).
    pub fn marks(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.mark())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// Absolute path of a fixture under tests/fixtures/run.
pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/run")
        .join(name)
        .display()
        .to_string()
}

/// The runs of a report by name.
pub fn run<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no run {name} in the report"))
}

/// Wait until `cond` holds (a cap of 60 s only guards against a hang).
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let cap = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < cap,
            "gave up waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Send a signal to a process.
pub fn kill(pid: u32, sig: i32) {
    // SAFETY: kill takes plain integers; the pid is the test's own child.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill {pid} {sig}");
}

/// Processes whose environment holds `entry` (`NAME=value`): every process a run started,
/// grandchildren included, inherits the tag the test gave the runs.
pub fn processes_with_env(entry: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let zombie = colloc_core::sys::ProcStat::of(*pid).is_some_and(|s| s.ended());
            !zombie
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|&b| b == 0).any(|kv| kv == entry.as_bytes()))
                    .unwrap_or(false)
        })
        .collect()
}

impl Env {
    /// The tag every run of this test gets in its environment (see [`processes_with_env`]).
    pub fn tag(&self) -> String {
        format!("COLLOC_TEST_TAG={}", self.path().display())
    }

    /// `colloc run ARGS` in the background, with the test's tag in the runs' environment;
    /// killed if the test ends (or fails) before it does.
    pub fn spawn(&self, args: &[&str]) -> Background {
        let (k, v) = self
            .tag()
            .split_once('=')
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .unwrap();
        let c = self.colloc();
        std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"))
            .args(c.get_args())
            .args(args)
            .current_dir(self.path())
            .env("COLLOC_CONFIG", self.path().join("no-config.toml"))
            .env("MARK", self.mark())
            .env(k, v)
            .env_remove("COLLOC_MODE")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_RESTART_COUNT")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map(|c| Background(Some(c)))
            .unwrap()
    }

    /// The report if it exists and is whole JSON.
    pub fn try_report(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.report_dir().join("colloc-report.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Does the test run as root?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Env {
    /// The colloc binary with a clean environment (no subcommand).
    pub fn colloc_bin(&self) -> Command {
        let mut c = Command::cargo_bin("colloc").unwrap();
        c.env("COLLOC_CONFIG", self.dir.path().join("no-config.toml"))
            .env("MARK", self.mark())
            .current_dir(self.dir.path());
        c
    }
}

/// A colloc in the background that a failing test does not leave running.
pub struct Background(Option<std::process::Child>);

impl Background {
    /// Its pid.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    /// Wait for it to end.
    pub fn wait_with_output(mut self) -> std::io::Result<std::process::Output> {
        self.0.take().expect("running").wait_with_output()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Asserts that a finished colloc exited 0, showing what it printed otherwise; its
/// stdout and stderr.
#[track_caller]
pub fn succeeded(out: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}
