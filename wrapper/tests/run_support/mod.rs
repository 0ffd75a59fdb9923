//! Shared helpers of the `colloc run` tests: a temp dir, a clean environment (no GPU, no
//! node config, no colloc job) and the report reader.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
