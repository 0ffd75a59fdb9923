//! `colloc bench` command lines for the tests, built in one place: a test says what its
//! call differs in (the workload, modes, counts, durations, node-config lines, the
//! stand-in's environment) and the builder adds what every call has (a clean
//! environment, a node config that finds no GPU unless told, the report directory, `--`
//! before the workload).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use assert_cmd::prelude::*;
use serde_json::Value;

/// The stand-in workload (tests/fixtures/bench/standin.py).
pub fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bench/standin.py")
}

/// The fake MPS control program (tests/fake-mps).
pub fn fake_mps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-mps/nvidia-cuda-mps-control")
}

/// Write the node config at `path`: one that finds neither NVML nor the MPS control
/// program (unless `extra` sets them), so a test behaves the same on machines with and
/// without a GPU; `extra` after them (top-level keys, then any `[mig]` table).
pub fn write_config(path: &Path, extra: &str) {
    let mut text = String::from("version = 1\n");
    if !extra.contains("nvml_library") {
        text.push_str("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n");
    }
    if !extra.contains("mps_control") {
        text.push_str("mps_control = \"/nonexistent/nvidia-cuda-mps-control\"\n");
    }
    text.push_str(extra);
    std::fs::write(path, text).unwrap();
}

/// One `colloc bench` command line:
/// `colloc [--config FILE] bench [--report-dir DIR] ARGS [-- WORKLOAD]`.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct BenchCmd {
    /// The node config's path and its lines beyond [`write_config`]'s; written when the
    /// command is built.
    config: Option<(PathBuf, String)>,
    report: Option<PathBuf>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    workload: Vec<OsString>,
}

impl BenchCmd {
    /// `colloc bench ARGS`, nothing more: no node config of the test's (and none from
    /// `COLLOC_CONFIG`), no report directory, no workload.
    pub fn bare() -> BenchCmd {
        BenchCmd::default()
    }

    /// `colloc --config CONFIG bench --report-dir REPORT`, the node config written at
    /// `config` by [`write_config`].
    pub fn new(config: &Path, report: &Path) -> BenchCmd {
        BenchCmd {
            config: Some((config.to_path_buf(), String::new())),
            report: Some(report.to_path_buf()),
            ..BenchCmd::default()
        }
    }

    /// Node-config lines besides the defaults (top-level keys before any table).
    pub fn config(mut self, lines: &str) -> BenchCmd {
        let (_, extra) = self.config.as_mut().expect("a bench with a node config");
        extra.push_str(lines);
        self
    }

    /// MPS through the fake control program.
    pub fn with_fake_mps(self) -> BenchCmd {
        let line = format!("mps_control = \"{}\"\n", fake_mps().display());
        self.config(&line)
    }

    /// NVML through the fake library (its state file from `COLLOC_FAKE_NVML_STATE`),
    /// colloc's state and run directories under `dir`.
    pub fn with_fake_nvml(self, dir: &Path) -> BenchCmd {
        let d = dir.display();
        let lines = format!(
            "nvml_library = \"{}\"\nstate_dir = \"{d}/state\"\nrun_dir = \"{d}/run\"\n",
            fake_nvml::locate::library().display()
        );
        self.config(&lines)
    }

    /// The workload after `--`.
    pub fn workload<S: AsRef<OsStr>>(mut self, argv: impl IntoIterator<Item = S>) -> BenchCmd {
        self.workload = argv.into_iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    /// One more argument of `colloc bench`.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> BenchCmd {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// More arguments of `colloc bench`.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> BenchCmd {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `--modes MODES`.
    pub fn modes(self, modes: &str) -> BenchCmd {
        self.args(["--modes", modes])
    }

    /// `--counts COUNTS`.
    pub fn counts(self, counts: &str) -> BenchCmd {
        self.args(["--counts", counts])
    }

    /// `--duration D --warmup W`.
    pub fn times(self, duration: &str, warmup: &str) -> BenchCmd {
        self.args(["--duration", duration, "--warmup", warmup])
    }

    /// `--repeat N`.
    pub fn repeat(self, n: u32) -> BenchCmd {
        self.args(["--repeat", &n.to_string()])
    }

    /// `--budget B`.
    pub fn budget(self, budget: &str) -> BenchCmd {
        self.args(["--budget", budget])
    }

    /// An environment variable of colloc (and so of the workload).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> BenchCmd {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The command, its node config written: neither `CUDA_VISIBLE_DEVICES` nor
    /// `COLLOC_CONFIG` from the test's environment.
    pub fn command(&self) -> Command {
        let mut c = Command::cargo_bin("colloc").unwrap();
        c.env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("COLLOC_CONFIG");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some((path, extra)) = &self.config {
            write_config(path, extra);
            c.arg("--config").arg(path);
        }
        c.arg("bench");
        if let Some(r) = &self.report {
            c.arg("--report-dir").arg(r);
        }
        c.args(&self.args);
        if !self.workload.is_empty() {
            c.arg("--").args(&self.workload);
        }
        c
    }

    /// Run it to the end.
    pub fn output(&self) -> std::io::Result<Output> {
        self.command().output()
    }
}

/// A bench's own temp directory: the node config, the report directory, and the folder
/// the stand-in's copies write their pid and environment files into.
pub struct Bench {
    pub tmp: tempfile::TempDir,
    /// `STANDIN_DIR`.
    pub shared: PathBuf,
    pub report: PathBuf,
}

impl Bench {
    pub fn new() -> Bench {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let report = tmp.path().join("report");
        Bench {
            tmp,
            shared,
            report,
        }
    }

    /// `colloc bench` of `workload` into this bench's report directory.
    pub fn cmd<S: AsRef<OsStr>>(&self, workload: impl IntoIterator<Item = S>) -> BenchCmd {
        BenchCmd::new(&self.tmp.path().join("colloc.toml"), &self.report).workload(workload)
    }

    /// `colloc bench` of the stand-in whose copies run at `factors` of its rate with
    /// 1, 2, … copies alive (`STANDIN_FACTORS`).
    pub fn standin(&self, factors: &str) -> BenchCmd {
        self.cmd([OsString::from("python3"), standin().into()])
            .env("STANDIN_DIR", &self.shared)
            .env("STANDIN_FACTORS", factors)
    }

    /// bench.json as JSON.
    pub fn json(&self) -> Value {
        let text = std::fs::read_to_string(self.report.join("bench.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}
