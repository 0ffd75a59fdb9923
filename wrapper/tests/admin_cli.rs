//! The built `colloc` binary's admin commands, against the fake libnvidia-ml
//! (`cargo build -p fake-nvml` first; `scripts/test.sh` does).
//!
//! One file, though long: its tests share the `Node` fixture here (a colloc.toml aimed at
//! the fake library and a fresh fake GPU state, driven through `fake-nvml-ctl`) and the
//! output helpers after it; split by command, that fixture would have to move to a shared
//! module and each part would be one more test binary to build and link.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

fn target_dir() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("colloc");
    bin.parent().unwrap().to_path_buf()
}

fn fake_lib() -> PathBuf {
    let lib = target_dir().join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} missing: run `cargo build -p fake-nvml` first",
        lib.display()
    );
    lib
}

/// A node: a config pointing at the fake library and a fresh fake GPU state.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(gpus: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        // The job's user passes through it to run_dir's MPS directories.
        chmod(dir.path(), 0o755);
        // node_comment off: these tests run no Slurm (the real-Slurm suite tests it).
        // [mig]: the device files of instances from the fake driver's capability tree
        // (beside its state file) into a folder of the test's.
        let cfg = format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\nnvml_library = \"{1}\"\n\
             node_comment = false\n[mig]\ncaps_dev_dir = \"{0}/dev/nvidia-caps\"\n\
             caps_proc_dir = \"{0}/proc/driver/nvidia/capabilities\"\n\
             mig_minors = \"{0}/proc/driver/nvidia-caps/mig-minors\"\n\
             proc_devices = \"{0}/proc/devices\"\nnvidia_modprobe = \"{0}/no-nvidia-modprobe\"\n",
            dir.path().display(),
            fake_lib().display()
        );
        std::fs::write(dir.path().join("colloc.toml"), cfg).unwrap();
        let n = Node { dir };
        n.ctl(&["init", "--gpus", gpus]);
        n
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("fake-state.json")
    }
    fn colloc(&self, args: &[&str]) -> Output {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_FAKE_NVML_STATE", self.state())
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(self.dir.path().join("colloc.toml"))
            .args(args)
            .output()
            .unwrap()
    }
    fn ctl(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(target_dir().join("fake-nvml-ctl"))
            .env("COLLOC_FAKE_NVML_STATE", self.state())
            .args(args)
            .output()
            .expect("fake-nvml-ctl (cargo build -p fake-nvml)");
        assert!(
            out.status.success(),
            "fake-nvml-ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn status(&self) -> Value {
        let out = self.colloc(&["status", "--json"]);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json: {e}: {}", text(&out)))
    }
    fn instances(&self, gpu: usize) -> Vec<(String, u64)> {
        self.status()["gpus"][gpu]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["profile"].as_str().unwrap().to_string(),
                    i["start"].as_u64().unwrap(),
                )
            })
            .collect()
    }
    fn journal_exists(&self, job: u32) -> bool {
        self.dir
            .path()
            .join(format!("state/jobs/{job}.json"))
            .exists()
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// No slurm.conf of this host's: check-config reads it (`SLURM_CONF`); tests that need
/// one write their own.
const NO_SLURM_CONF: &str = "/nonexistent/slurm.conf";

fn colloc(args: &[&str]) -> Output {
    colloc_with_slurm_conf(args, Path::new(NO_SLURM_CONF))
}

fn colloc_with_slurm_conf(args: &[&str], slurm_conf: &Path) -> Output {
    Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("COLLOC_CONFIG")
        .env("SLURM_CONF", slurm_conf)
        .args(args)
        .output()
        .unwrap()
}

fn one_line_error(o: &Output, code: i32) -> String {
    assert_eq!(o.status.code(), Some(code), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn plan_every_model_and_profile() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("A100-40GB", "mig:3g", &["3g.20gb", "3g.20gb"]),
        ("A100-40GB", "mig:2g", &["2g.10gb"; 3]),
        ("A100-40GB", "mig:1g", &["1g.5gb"; 7]),
        ("NVIDIA A100-SXM4-40GB", "mig:4g", &["4g.20gb"]),
        ("A100-40GB", "mig:7g", &["7g.40gb"]),
        ("A100-80GB", "mig:3g", &["3g.40gb"; 2]),
        ("NVIDIA A100-SXM4-80GB", "mig:1g.20gb", &["1g.20gb"; 4]),
        ("H100-80GB", "mig:1g", &["1g.10gb"; 7]),
        ("NVIDIA H100 80GB HBM3", "mig:2g", &["2g.20gb"; 3]),
        ("H200", "mig:3g", &["3g.71gb"; 2]),
        ("NVIDIA H200", "mig:1g", &["1g.18gb"; 7]),
        ("H200", "mig:7g", &["7g.141gb"]),
        // The models of university clusters, by the names NVML reports.
        ("NVIDIA A100-PCIE-40GB", "mig:3g", &["3g.20gb"; 2]),
        ("NVIDIA A100 80GB PCIe", "mig:2g", &["2g.20gb"; 3]),
        ("NVIDIA H100 PCIe", "mig:1g", &["1g.10gb"; 7]),
        ("NVIDIA H100 NVL", "mig:3g", &["3g.47gb"; 2]),
        ("NVIDIA A30", "mig:2g", &["2g.12gb"; 2]),
        ("NVIDIA A30", "mig:1g", &["1g.6gb"; 4]),
        ("NVIDIA H200 NVL", "mig:2g", &["2g.35gb"; 3]),
        (
            "A100-40GB",
            "mig:4g,2g,1g",
            &["4g.20gb", "2g.10gb", "1g.5gb"],
        ),
        (
            "A100-40GB",
            "mig:3g,2g,1g,1g",
            &["2g.10gb", "1g.5gb", "1g.5gb", "3g.20gb"],
        ),
    ];
    for (model, mode, want) in cases {
        let out = colloc(&["plan", mode, "--gpu-model", model, "--json"]);
        assert!(out.status.success(), "{model} {mode}: {}", text(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let got: Vec<&str> = v["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["profile"].as_str().unwrap())
            .collect();
        assert_eq!(&got, want, "{model} {mode}");
        let normalized = mode.parse::<colloc_core::mode::Mode>().unwrap().to_string();
        assert_eq!(v["mode"], normalized);
        assert!(v["gpu_model"].as_str().unwrap().starts_with("NVIDIA"));
    }
    // Human output names the layout, and calls a MIG placement a placement (a "slot"
    // is where `colloc run` puts a run).
    let out = colloc(&["plan", "mig:3g", "--gpu-model", "A100-40GB"]);
    let human = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(human.contains("COLLOC_MODE=mig:3g.20gbx2"), "{human}");
    assert!(human.contains("placement"), "{human}");
    assert!(human.contains("start 4 size 4"), "{human}");
    assert!(human.contains("19968 MiB"), "{human}");
    assert!(!human.contains("slot"), "{human}");
    let out = colloc(&["plan", "mig:7g", "--gpu-model", "H100-80GB", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["instances"][0]["memory_mib"], 81152,
        "the driver's -lgip figure"
    );
    let out = colloc(&["plan", "mps:4", "--gpu-model", "H200", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["active_thread_percentage"], 25);
}

#[test]
fn plan_rejects_bad_layouts_and_input_with_exit_2() {
    for (mode, model, want) in [
        ("mig:4gx2", "A100-40GB", "4g.20gb fits at most 1 time"),
        ("mig:7g,1g", "A100-40GB", "does not fit"),
        ("mig:3gx3", "A100-40GB", "fits at most 2"),
        ("mig:3g.40gb", "A100-40GB", "has no MIG profile 3g.40gb"),
        ("mig:", "A100-40GB", "invalid mode"),
        ("mps:0", "A100-40GB", "invalid mode"),
        ("mig:3g;reboot", "A100-40GB", "not allowed"),
        ("mig:3g", "GeForce GTX 1080", "unknown GPU model"),
        ("mig:3g", "GeForce GTX 1080", "the driver's own tables"),
        ("mig:3g", "Tesla V100", "NVIDIA H100 NVL (H100-NVL)"),
    ] {
        let err = one_line_error(&colloc(&["plan", mode, "--gpu-model", model]), 2);
        assert!(err.contains(want), "{mode}: {err}");
    }
    let long = "x".repeat(10_000);
    one_line_error(&colloc(&["plan", &long, "--gpu-model", "H200"]), 2);
    // Usage errors are exit 2 too.
    let out = colloc(&["plan", "mig:3g"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn check_config_accepts_and_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "version = 1\nallowed_modes = [\"mps\"]\n").unwrap();
    let out = colloc(&["check-config", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    for (body, want) in [
        ("version = 1\nbogus = 1\n", "unknown field `bogus`"),
        ("allowed_modes = []\n", "missing `version`"),
        ("version = 9\n", "unknown version 9"),
    ] {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, body).unwrap();
        let err = one_line_error(&colloc(&["check-config", bad.to_str().unwrap()]), 2);
        assert!(err.contains(want), "{err}");
    }
    let err = one_line_error(&colloc(&["check-config", "/nonexistent/colloc.toml"]), 2);
    assert!(err.contains("cannot read"), "{err}");
}

/// `check-config FILE` with `body` (paths of its own): exit code, stdout, stderr.
fn check_config(body: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let file = dir.path().join("colloc.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\n{body}",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = colloc(&["check-config", file.to_str().unwrap()]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_takes_a_path_relative_to_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("colloc.toml"),
        "version = 1\nnode_comment = false\n",
    )
    .unwrap();
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("COLLOC_CONFIG")
        .current_dir(dir.path())
        .args(["check-config", "colloc.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("colloc.toml: ok ("), "{stdout}");
}

#[test]
fn check_config_says_where_as_line_and_column() {
    let (code, _, err) = check_config("allowed_modes = [\"mps\",\n  \"gpu\"]\n");
    assert_eq!(code, Some(2));
    assert!(
        err.contains("colloc.toml:4:17: allowed_modes: unknown mode \"gpu\""),
        "{err}"
    );
    assert!(!err.contains("byte"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn check_config_nvml_library_missing_path_is_an_error_unloadable_a_warning() {
    // A path that does not exist: exit 2, one line.
    let (code, out, err) = check_config("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("nvml_library /nonexistent/libnvidia-ml.so.1 does not exist"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A name the loader cannot find here (a login node without the driver): a warning
    // with what dlopen said, exit 0.
    let (code, out, err) = check_config("nvml_library = \"libnvidia-ml-nowhere.so.1\"\n");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(": ok ("), "{out}");
    assert!(
        err.contains("colloc: warning: cannot load NVML from libnvidia-ml-nowhere.so.1"),
        "{err}"
    );
    assert!(err.contains("cannot open shared object file"), "{err}");
    // A file that is there but no library: a warning naming why too.
    let (code, _, err) = check_config("nvml_library = \"/etc/hostname\"\n");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("cannot load NVML from /etc/hostname"), "{err}");
    // The fake library loads: no NVML warning.
    let lib = fake_lib();
    let (code, _, err) = check_config(&format!("nvml_library = \"{}\"\n", lib.display()));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("NVML"), "{err}");
}

#[test]
fn check_config_warns_that_empty_allowed_modes_refuse_every_job() {
    let lib = fake_lib();
    let (code, out, err) = check_config(&format!(
        "allowed_modes = []\nnvml_library = \"{}\"\n",
        lib.display()
    ));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("allowed modes: none but off"), "{out}");
    assert!(!out.contains("allowed modes: ,"), "{out}");
    assert!(
        err.contains(
            "allowed_modes is empty: every job that asks for a mode with --colloc will be refused"
        ),
        "{err}"
    );
}

#[test]
fn check_config_names_a_missing_mps_control_only_where_mps_is_allowed() {
    let lib = fake_lib();
    let missing = "mps_control = \"/nonexistent/nvidia-cuda-mps-control\"\n";
    let (code, _, err) = check_config(&format!(
        "allowed_modes = [\"mig\", \"naive\"]\nnvml_library = \"{}\"\n{missing}",
        lib.display()
    ));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("mps_control"), "{err}");
    let (code, _, err) = check_config(&format!(
        "allowed_modes = [\"mps\"]\nnvml_library = \"{}\"\n{missing}",
        lib.display()
    ));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "warning: mps_control /nonexistent/nvidia-cuda-mps-control is not installed here"
        ),
        "{err}"
    );
}

#[test]
fn status_without_nvml_is_an_error_never_no_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("colloc.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\n\
             nvml_library = \"libnvidia-ml-nowhere.so.1\"\nnode_comment = false\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::cargo_bin("colloc")
            .unwrap()
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpus"], Value::Null, "{v}");
    let e = v["error"].as_str().expect("an error field");
    assert!(
        e.contains("cannot load NVML from libnvidia-ml-nowhere.so.1"),
        "{e}"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out));
    // Text: the error once, exit 1.
    let out = run(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(all.matches("cannot load NVML").count(), 1, "{all}");
}

#[test]
fn status_names_each_journals_user_and_whether_slurm_still_runs_it() {
    let n = Node::new("A100-40GB");
    // naive needs a whole GPU: with MIG on, CUDA sees none (and colloc refuses).
    n.ctl(&["set-mig", "--gpu", "0", "off"]);
    let out = n.colloc(&["apply", "naive", "--gpu", "0", "--job", "71"]);
    assert!(out.status.success(), "{}", text(&out));
    // No Slurm here: said so, never taken for "not running".
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env("COLLOC_FAKE_NVML_STATE", n.state())
        .env("SLURM_CONF", "/nonexistent/slurm.conf")
        .arg("--config")
        .arg(n.dir.path().join("colloc.toml"))
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let j = &v["journals"][0];
    assert_eq!(j["job"], 71);
    assert_eq!(j["user"], "root");
    assert_eq!(j["uid"], 0);
    assert_eq!(j["job_state"], "unknown");
    assert_eq!(j["running"], Value::Null);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("SLURM_CONF=/nonexistent/slurm.conf does not exist"));
    assert!(v["gpus"].is_array(), "{v}");
    let out = n.colloc(&["restore", "--job", "71"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn apply_status_restore() {
    let n = Node::new("A100-40GB");
    let out = n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("COLLOC_MODE=mig:3g.20gbx2"), "{stdout}");
    assert!(stdout.contains("COLLOC_SLOTS=2"), "{stdout}");
    assert_eq!(
        n.instances(0),
        vec![("3g.20gb".into(), 0), ("3g.20gb".into(), 4)]
    );
    let st = n.status();
    assert_eq!(st["gpus"][0]["mig_mode"], true);
    assert!(st["gpus"][0]["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert!(st["gpus"][0]["instances"][0]["uuid"]
        .as_str()
        .unwrap()
        .starts_with("MIG-"));
    assert_eq!(st["journals"][0]["job"], 7);
    assert_eq!(st["journals"][0]["gpus"], serde_json::json!([0]));
    let out = n.colloc(&["restore", "--job", "7"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(n.instances(0).is_empty());
    assert!(!n.journal_exists(7));
    // Idempotent.
    let out = n.colloc(&["restore", "--job", "7"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to restore"));
}

#[test]
fn apply_refusals_change_nothing() {
    let n = Node::new("A100-40GB");
    let err = one_line_error(
        &n.colloc(&["apply", "mig:4gx2", "--gpu", "0", "--job", "8"]),
        2,
    );
    assert!(err.contains("layouts that fit include"), "{err}");
    assert!(n.instances(0).is_empty());
    assert!(!n.journal_exists(8));

    n.ctl(&[
        "create-foreign",
        "--gpu",
        "0",
        "--profile",
        "1g.5gb",
        "--start",
        "6",
    ]);
    let err = one_line_error(
        &n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "9"]),
        1,
    );
    assert!(err.contains("does not own"), "{err}");
    assert_eq!(n.instances(0), vec![("1g.5gb".into(), 6)]);

    let n = Node::new("A100-40GB");
    n.ctl(&["attach", "--gpu", "0", "--pid", "4242"]);
    let err = one_line_error(
        &n.colloc(&["apply", "mig:1g", "--gpu", "0", "--job", "10"]),
        1,
    );
    assert!(err.contains("4242"), "{err}");
    assert!(n.instances(0).is_empty());

    let err = one_line_error(
        &n.colloc(&["apply", "mig:1g\n", "--gpu", "0", "--job", "11"]),
        2,
    );
    assert!(err.contains("invalid mode"), "{err}");
}

#[test]
fn fault_at_second_compute_instance_leaves_gpu_as_it_was() {
    let n = Node::new("A100-40GB");
    n.ctl(&[
        "fault",
        "nvmlGpuInstanceCreateComputeInstance",
        "--call",
        "2",
        "--code",
        "NVML_ERROR_INSUFFICIENT_RESOURCES",
    ]);
    let err = one_line_error(
        &n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]),
        1,
    );
    assert!(
        err.contains("nvmlGpuInstanceCreateComputeInstance"),
        "{err}"
    );
    assert!(err.contains("Insufficient"), "{err}");
    assert!(n.instances(0).is_empty());
    assert!(!n.journal_exists(7));
}

/// `kill -9` of `apply` at every NVML call that changes the GPU, then `restore`.
#[test]
fn crash_at_any_point_then_restore() {
    for (func, call) in [
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 1),
        ("nvmlGpuInstanceCreateComputeInstance", 1),
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 2),
        ("nvmlGpuInstanceCreateComputeInstance", 2),
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 5),
        ("nvmlGpuInstanceCreateComputeInstance", 7),
    ] {
        let n = Node::new("A100-40GB");
        let c = call.to_string();
        n.ctl(&["fault", func, "--call", &c, "--code", "crash"]);
        let out = n.colloc(&["apply", "mig:1g", "--gpu", "0", "--job", "7"]);
        assert_eq!(
            out.status.code(),
            None,
            "{func}#{call} should have been killed: {}",
            text(&out)
        );
        assert!(
            n.journal_exists(7),
            "{func}#{call}: journal written before any change"
        );
        let out = n.colloc(&["restore", "--job", "7"]);
        assert!(out.status.success(), "{func}#{call}: {}", text(&out));
        assert!(
            n.instances(0).is_empty(),
            "{func}#{call}: {:?}",
            n.instances(0)
        );
        assert!(!n.journal_exists(7));
    }
}

#[test]
fn four_gpus_only_the_jobs_are_touched() {
    let n = Node::new("A100-40GB,A100-40GB,A100-40GB,A100-40GB");
    let out = n.colloc(&["apply", "mig:3g", "--gpu", "1,2", "--job", "12"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("COLLOC_SLOTS=4"));
    let counts: Vec<usize> = (0..4).map(|g| n.instances(g).len()).collect();
    assert_eq!(counts, vec![0, 2, 2, 0]);
    let out = n.colloc(&["restore", "--all"]);
    assert!(out.status.success(), "{}", text(&out));
    let counts: Vec<usize> = (0..4).map(|g| n.instances(g).len()).collect();
    assert_eq!(counts, vec![0, 0, 0, 0]);
}

#[test]
fn help_and_usage() {
    for sub in [
        "run",
        "bench",
        "plan",
        "status",
        "apply",
        "restore",
        "check-config",
    ] {
        let out = colloc(&[sub, "--help"]);
        assert!(out.status.success(), "{sub}: {}", text(&out));
    }
    let out = colloc(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn status_as_an_unprivileged_user_says_needs_root_not_zero_instances() {
    let n = Node::new("H200");
    let out = n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "61"]);
    assert!(out.status.success(), "{}", text(&out));
    // NVML refuses to list instances to an unprivileged caller (the driver, and the
    // fake, decide by the caller's euid): `nobody` runs status. (Root refused the same is
    // a node without the mig-config capability: tests/slurm/tests/mig_faults.rs.)
    let as_nobody = |args: &[&str]| {
        Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(assert_cmd::cargo::cargo_bin("colloc"))
            .env("COLLOC_FAKE_NVML_STATE", n.state())
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(n.dir.path().join("colloc.toml"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = as_nobody(&["status"]);
    let human = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(human.contains("needs root"), "{human}{}", text(&out));
    assert!(!human.contains("0 instance(s)"), "{human}");
    assert!(human.contains("2 MIG device(s) visible"), "{human}");
    let out = as_nobody(&["status", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}: {}", text(&out)));
    assert_eq!(v["gpus"][0]["instances"], Value::Null, "{v}");
    assert!(v["gpus"][0]["instances_error"]
        .as_str()
        .unwrap()
        .contains("NVML_ERROR_NO_PERMISSION"));
    assert_eq!(v["gpus"][0]["mig_devices"].as_array().unwrap().len(), 2);
    assert_eq!(n.instances(0).len(), 2);
    let out = n.colloc(&["restore", "--job", "61"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn status_and_restore_of_a_gpu_dcgm_holds() {
    let n = Node::new("A100-80GB");
    let out = n.colloc(&["apply", "mig:4g,3g", "--gpu", "0", "--job", "62"]);
    assert!(out.status.success(), "{}", text(&out));
    // 4g at slot 0 is GPU instance 1 (ids follow placements).
    n.ctl(&["hold", "--gpu", "0", "--gi", "1", "--name", "dcgm"]);
    let out = n.colloc(&["restore", "--job", "62"]);
    let err = one_line_error(&out, 1);
    assert!(err.contains("GI 1") && err.contains("DCGM"), "{err}");
    assert!(n.journal_exists(62), "the journal stays");
    let human = String::from_utf8_lossy(&n.colloc(&["status"]).stdout).into_owned();
    assert!(human.contains("MARKED by job 62"), "{human}");
    assert!(human.contains("colloc restore --job 62"), "{human}");
    assert!(human.contains("nv-hostengine"), "{human}");
    let v = n.status();
    assert_eq!(v["gpus"][0]["marked_by"], serde_json::json!([62]));
    assert_eq!(v["journals"][0]["held"][0]["reason"]["kind"], "in_use");
    assert_eq!(
        v["journals"][0]["held"][0]["gi_ids"],
        serde_json::json!([1])
    );
    assert!(v["device_users"].is_array());
    // Once the holder is gone, restore finishes.
    n.ctl(&["release", "--gpu", "0"]);
    let out = n.colloc(&["restore", "--job", "62"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!n.journal_exists(62));
    assert!(n.instances(0).is_empty());
}

fn chmod(p: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn check_config_refuses_paths_others_could_change() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let cfg = dir.path().join("colloc.toml");
    for (body, want) in [
        (
            format!("version = 1\nstate_dir = \"{}/state\"\n", open.display()),
            "open is not safe for colloc's root-side files: writable by group or others (mode 0777)",
        ),
        (
            format!("version = 1\nrun_dir = \"{}\"\n", open.display()),
            "(mode 0777)",
        ),
        (
            "version = 1\nstate_dir = \"/var/lib/col\\u0000loc\"\n".to_string(),
            "state_dir contains a NUL character",
        ),
        (
            "version = 1\nmps_control = \"bin/mps\"\n".to_string(),
            "a relative path would depend on the current directory",
        ),
    ] {
        std::fs::write(&cfg, body).unwrap();
        let err = one_line_error(&colloc(&["check-config", cfg.to_str().unwrap()]), 2);
        assert!(err.contains(want), "{err}");
    }
    // The file itself writable by others: whoever can change it picks what root loads.
    std::fs::write(&cfg, "version = 1\n").unwrap();
    chmod(&cfg, 0o666);
    let err = one_line_error(&colloc(&["check-config", cfg.to_str().unwrap()]), 2);
    assert!(err.contains("(mode 0666)"), "{err}");
    // Something that never ends, or never answers: refused at once.
    let err = one_line_error(&colloc(&["check-config", "/dev/zero"]), 2);
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn apply_and_restore_refuse_an_unsafe_state_dir() {
    let n = Node::new("A100-40GB");
    let state = n.dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    chmod(&state, 0o777);
    let err = one_line_error(
        &n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]),
        2,
    );
    assert!(err.contains("(mode 0777)"), "{err}");
    assert!(n.instances(0).is_empty());
    let err = one_line_error(&n.colloc(&["restore", "--all"]), 2);
    assert!(err.contains("no journal there can be trusted"), "{err}");
}

#[test]
fn restore_all_moves_unusable_journals_aside_and_says_to_check_the_gpus() {
    let n = Node::new("A100-40GB");
    let out = n.colloc(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]);
    assert!(out.status.success(), "{}", text(&out));
    let jobs = n.dir.path().join("state/jobs");
    let seven = std::fs::read_to_string(jobs.join("7.json")).unwrap();
    // The journal of job 7 under job 5's name, a padded name, a truncated one, one whose
    // job_dir points elsewhere.
    std::fs::write(jobs.join("5.json"), &seven).unwrap();
    std::fs::write(jobs.join("0120.json"), &seven).unwrap();
    std::fs::write(jobs.join("8.json"), &seven[..seven.len() / 2]).unwrap();
    let forged = seven.replace("\"job\": 7", "\"job\": 9").replace(
        "\"mode\"",
        &format!("\"job_dir\": \"{}\",\n  \"mode\"", n.dir.path().display()),
    );
    std::fs::write(jobs.join("9.json"), forged).unwrap();
    // By hand, one job: an error, and the file stays as it is (never renamed).
    let err = one_line_error(&n.colloc(&["restore", "--job", "5"]), 1);
    assert!(
        err.contains("names job 7 but is the file of job 5"),
        "{err}"
    );
    assert!(err.contains("colloc restore --all"), "{err}");
    assert!(jobs.join("5.json").exists() && n.journal_exists(7));
    let out = n.colloc(&["restore", "--all"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["5.json", "8.json", "9.json", "0120.json"] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("jobs/{name} was unusable")))
            .unwrap_or_else(|| panic!("{name} not reported: {err}"));
        assert!(line.contains(&format!("state/corrupt/{name}")), "{line}");
        assert!(line.contains("colloc status"), "{line}");
        assert!(n.dir.path().join("state/corrupt").join(name).exists());
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("restored job(s) [7]"),
        "{}",
        text(&out)
    );
    assert!(n.instances(0).is_empty());
    assert_eq!(std::fs::read_dir(&jobs).unwrap().count(), 0);
    let out = n.colloc(&["restore", "--all"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to restore"));
}

/// A node's Slurm configuration with `job_container/tmpfs` (BasePath `dir/containers`)
/// and `flags`, in `dir`: the slurm.conf.
fn job_container_node(dir: &Path, flags: &str) -> PathBuf {
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!("ClusterName=c\nJobContainerType=job_container/tmpfs\nPrologFlags={flags}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("job_container.conf"),
        format!("AutoBasePath=true\nBasePath={}/containers\n", dir.display()),
    )
    .unwrap();
    conf
}

#[test]
fn check_config_refuses_paths_a_job_container_hides() {
    // Outside /tmp, which a job container hides too.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    chmod(dir.path(), 0o755);
    let d = dir.path().display();
    let conf = job_container_node(dir.path(), "Alloc,Contain");
    let cfg = dir.path().join("colloc.toml");
    let check = |body: &str| {
        std::fs::write(&cfg, format!("version = 1\nnode_comment = false\n{body}")).unwrap();
        colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &conf)
    };
    // Everything outside: ok, no warning about the container.
    let out = check(&format!(
        "state_dir = \"{d}/state\"\nrun_dir = \"{d}/run\"\n"
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("job_container"), "{}", text(&out));
    for (body, want) in [
        (
            format!("state_dir = \"{d}/containers/colloc\"\nrun_dir = \"{d}/run\"\n"),
            format!("state_dir {d}/containers/colloc lies in {d}/containers, which JobContainerType=job_container/tmpfs makes private to each job"),
        ),
        (
            format!("state_dir = \"{d}/state\"\nrun_dir = \"/dev/shm/colloc\"\n"),
            "run_dir /dev/shm/colloc lies in /dev/shm".to_string(),
        ),
        (
            format!(
                "state_dir = \"{d}/state\"\nrun_dir = \"{d}/run\"\n\
                 mps_control = \"/tmp/nvidia-cuda-mps-control\"\n"
            ),
            "mps_control /tmp/nvidia-cuda-mps-control lies in /tmp".to_string(),
        ),
    ] {
        let err = one_line_error(&check(&body), 2);
        assert!(err.contains(&want), "{want:?} not in {err}");
        assert!(err.contains(&format!("keep colloc.toml, state_dir, run_dir and mps_control outside /tmp, /dev/shm, {d}/containers")), "{err}");
    }
    // colloc.toml itself under /tmp.
    let tmp = tempfile::tempdir().unwrap();
    let in_tmp = tmp.path().join("colloc.toml");
    std::fs::write(
        &in_tmp,
        format!(
            "version = 1\nnode_comment = false\nstate_dir = \"{d}/state\"\nrun_dir = \"{d}/run\"\n"
        ),
    )
    .unwrap();
    let err = one_line_error(
        &colloc_with_slurm_conf(&["check-config", in_tmp.to_str().unwrap()], &conf),
        2,
    );
    assert!(
        err.contains(&format!("colloc.toml {} lies in /tmp", in_tmp.display())),
        "{err}"
    );
    // Without a job container the same paths are fine.
    std::fs::write(&conf, "ClusterName=c\nPrologFlags=Alloc,Contain\n").unwrap();
    let out = colloc_with_slurm_conf(&["check-config", in_tmp.to_str().unwrap()], &conf);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A node's Slurm configuration in `dir`: slurm.conf with `settings` and its
/// PlugStackConfig, plugstack.conf with `plugstack`, and gres.conf with `gres`.
fn slurm_node(dir: &Path, settings: &str, plugstack: &str, gres: &str) -> PathBuf {
    let conf = dir.join("slurm.conf");
    let stack = dir.join("plugstack.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=c\nPlugStackConfig={}\n{settings}",
            stack.display()
        ),
    )
    .unwrap();
    std::fs::write(&stack, plugstack).unwrap();
    std::fs::write(dir.join("gres.conf"), gres).unwrap();
    conf
}

#[test]
fn check_config_names_the_slurm_settings_that_defeat_colloc_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let d = dir.path().display();
    let cfg = dir.path().join("colloc.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\nnode_comment = false\nstate_dir = \"{d}/state\"\n\
             run_dir = \"{d}/run\"\nallowed_modes = [\"mig\", \"naive\"]\n"
        ),
    )
    .unwrap();
    let line = format!("libcolloc_spank.so config={}\n", cfg.display());
    let bad = slurm_node(
        dir.path(),
        "PrologFlags=Contain\nJobAcctGatherType=jobacct_gather/cgroup\n\
         AcctGatherEnergyType=acct_gather_energy/gpu\nPrologEpilogTimeout=100\n",
        &format!("optional /usr/lib/slurm/{line}"),
        "AutoDetect=nvml\n",
    );
    let out = colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &bad);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "loads colloc as optional: Slurm then ignores colloc's refusals",
        "AcctGatherEnergyType=acct_gather_energy/gpu keeps NVML open",
        "set JobAcctGatherParams=DisableGPUAcct (Slurm 23.02.7 and later)",
        "gres.conf has AutoDetect=nvml",
        "PrologFlags has no Alloc",
        "PrologEpilogTimeout=100 is shorter than colloc's longest prolog with this \
         configuration (137 s",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    // Set up as the docs say: not one word about Slurm's settings.
    let good = slurm_node(
        dir.path(),
        "PrologFlags=Alloc,Contain\nJobAcctGatherType=jobacct_gather/cgroup\n\
         PrologEpilogTimeout=300\n",
        &format!("include {d}/plugstack.conf.d/*.conf\n"),
        "Name=gpu File=/dev/nvidia0\n",
    );
    std::fs::create_dir(dir.path().join("plugstack.conf.d")).unwrap();
    std::fs::write(
        dir.path().join("plugstack.conf.d/colloc.conf"),
        format!("required /usr/lib/slurm/{line}"),
    )
    .unwrap();
    let out = colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &good);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for word in [
        "plugstack",
        "PrologFlags",
        "AutoDetect",
        "GPUAcct",
        "PrologEpilogTimeout",
    ] {
        assert!(!err.contains(word), "{word}: {err}");
    }
    // No colloc line at all: the fix says a restart is needed.
    std::fs::remove_file(dir.path().join("plugstack.conf.d/colloc.conf")).unwrap();
    let out = colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &good);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no line that loads colloc") && err.contains("restart slurmd"),
        "{err}"
    );
}

#[test]
fn check_config_warns_of_a_job_container_without_contain_where_mps_is_allowed() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    chmod(dir.path(), 0o755);
    let d = dir.path().display();
    let conf = job_container_node(dir.path(), "Alloc");
    let cfg = dir.path().join("colloc.toml");
    // A copy beside the config: the checkout may lie under /tmp (a clone there), which
    // the job container hides, and check-config says so for a library there.
    let lib = dir.path().join("libfake_nvml.so");
    std::fs::copy(fake_lib(), &lib).unwrap();
    for (modes, warned) in [("\"mps\", \"naive\"", true), ("\"naive\"", false)] {
        std::fs::write(
            &cfg,
            format!(
                "version = 1\nnode_comment = false\nstate_dir = \"{d}/state\"\n\
                 run_dir = \"{d}/run\"\nallowed_modes = [{modes}]\nnvml_library = \"{}\"\n\
                 mps_control = \"/bin/true\"\n",
                lib.display()
            ),
        )
        .unwrap();
        let out = colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &conf);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "colloc: warning: {} has JobContainerType=job_container/tmpfs without \
             PrologFlags=Contain",
            conf.display()
        );
        assert_eq!(err.contains(&want), warned, "{modes}: {err}");
    }
    // A slurm.conf others may change is not trusted: a warning, not read.
    chmod(&conf, 0o666);
    let out = colloc_with_slurm_conf(&["check-config", cfg.to_str().unwrap()], &conf);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: cannot read the node's Slurm configuration (")
            && err.contains("not checked against its job container, nor its settings"),
        "{err}"
    );
}

#[test]
fn check_config_refuses_a_run_dir_the_jobs_user_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    chmod(&closed, 0o700);
    let cfg = dir.path().join("colloc.toml");
    for (run, want) in [
        (
            dir.path().join("nowhere/run"),
            format!(
                "{}/nowhere does not exist; colloc makes run_dir itself but not the \
                 directories above it",
                dir.path().display()
            ),
        ),
        (
            closed.join("run"),
            format!("{} has mode 0700", closed.display()),
        ),
    ] {
        std::fs::write(
            &cfg,
            format!(
                "version = 1\nnode_comment = false\nstate_dir = \"{}/state\"\nrun_dir = \"{}\"\n",
                dir.path().display(),
                run.display()
            ),
        )
        .unwrap();
        let err = one_line_error(&colloc(&["check-config", cfg.to_str().unwrap()]), 2);
        assert!(err.contains(&want), "{want:?} not in {err}");
        assert!(err.contains(&format!("run_dir {}", run.display())), "{err}");
        assert!(!run.exists());
    }
    // A parent that is the user's (root's alone it must be), as root can make one.
    let euid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    if euid == 0 {
        let users = dir.path().join("users");
        std::fs::create_dir(&users).unwrap();
        std::os::unix::fs::chown(&users, Some(65534), None).unwrap();
        std::fs::write(
            &cfg,
            format!(
                "version = 1\nnode_comment = false\nstate_dir = \"{}/state\"\nrun_dir = \"{}/run\"\n",
                dir.path().display(),
                users.display()
            ),
        )
        .unwrap();
        let err = one_line_error(&colloc(&["check-config", cfg.to_str().unwrap()]), 2);
        assert!(
            err.contains(&format!("{} is not safe", users.display()))
                && err.contains("owned by uid 65534"),
            "{err}"
        );
    }
}

/// Issue 23: root's `status` and `plan --gpu` load NVML, so as root they read only a
/// configuration no one else can change, naming a library no one else can change.
#[test]
fn status_and_plan_as_root_refuse_a_users_config_and_library() {
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
        return; // Only root is held to it; a user's own config hurts only that user.
    }
    let n = Node::new("H200");
    // The fake library, copied where a user could change it.
    let open = n.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let lib = open.join("libnvidia-ml.so.1");
    std::fs::copy(fake_lib(), &lib).unwrap();
    // A user's own file (nobody's), naming that library.
    let user_cfg = n.dir.path().join("user.toml");
    let body = format!(
        "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\nnvml_library = \"{1}\"\n\
         node_comment = false\n",
        n.dir.path().display(),
        lib.display()
    );
    std::fs::write(&user_cfg, &body).unwrap();
    std::os::unix::fs::chown(&user_cfg, Some(65534), Some(65534)).unwrap();
    let run = |cfg: &Path, args: &[&str]| {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_FAKE_NVML_STATE", n.state())
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(cfg)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["plan", "mig:3g", "--gpu", "0"],
    ] {
        let err = one_line_error(&run(&user_cfg, args), 2);
        assert!(err.contains("owned by uid 65534"), "{args:?}: {err}");
        assert!(err.contains("as root colloc uses only"), "{args:?}: {err}");
    }
    // Root's own file naming the library in the open directory: refused, not loaded.
    let root_cfg = n.dir.path().join("root.toml");
    std::fs::write(&root_cfg, &body).unwrap();
    for args in [&["status"][..], &["plan", "mps:2", "--gpu", "0"]] {
        let err = one_line_error(&run(&root_cfg, args), 2);
        assert!(
            err.contains("open is not safe") && err.contains("(mode 0777)"),
            "{args:?}: {err}"
        );
    }
    // The same library in a directory only root can change is used.
    std::fs::remove_file(&lib).unwrap();
    chmod(&open, 0o755);
    std::fs::copy(fake_lib(), &lib).unwrap();
    let out = run(&root_cfg, &["plan", "mps:2", "--gpu", "0"]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Issue 23: `check-config --fix` makes the GPUs' lock files before any job (a prolog
/// never has to make one on a full disk) and mounts run_dir as a capped tmpfs of its own;
/// check-config warns about file systems users can fill.
#[test]
fn check_config_fix_makes_lock_files_and_a_capped_run_dir() {
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
        return; // mounting takes root
    }
    let n = Node::new("A100-40GB,H200");
    let cfg = n.dir.path().join("colloc.toml");
    let body = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        // Top-level keys go before the node config's [mig] table.
        format!("run_dir_size_mib = 8\nrun_dir_inodes = 500\n{body}"),
    )
    .unwrap();
    let run = n.dir.path().join("run");
    // Unmounted whatever happens below.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(run.clone());
    let out = n.colloc(&["check-config"]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("is not a file system of its own"), "{err}");
    assert!(
        err.contains("state_dir") && err.contains("shares a file system with"),
        "{err}"
    );
    let out = n.colloc(&["check-config", "--fix"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("mounted a tmpfs at"), "{stdout}");
    let locks: Vec<_> = std::fs::read_dir(n.dir.path().join("state/locks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(locks.len(), 2, "{locks:?}");
    assert!(locks.iter().all(|l| l.ends_with(".lock")), "{locks:?}");
    let vfs = rustix::fs::statvfs(&run).unwrap();
    assert_eq!(vfs.f_files, 500, "the inode cap");
    assert_eq!(vfs.f_blocks * vfs.f_frsize, 8 << 20, "the size cap");
    let m = std::fs::metadata(&run).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777,
        0o755
    );
    // Again: nothing left to make, nothing mounted twice; no warning about run_dir now.
    let out = n.colloc(&["check-config", "--fix"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("made"),
        "{}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("mounted"),
        "{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("run_dir"), "{err}");
    // Jobs work on it (naive on a whole GPU: MIG off).
    n.ctl(&["set-mig", "--gpu", "0", "off"]);
    let out = n.colloc(&["apply", "naive", "--gpu", "0", "--job", "70"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = n.colloc(&["restore", "--job", "70"]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Issue 23: what earlier epilogs moved to run_dir/.leftovers is shown by `status`
/// (text and JSON); `restore --all` removes what it can, names the rest and exits 1 while
/// anything remains.
#[test]
fn leftovers_are_shown_and_restore_all_says_what_it_could_not_remove() {
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
        return; // a tree its user cannot remove takes root to make
    }
    let n = Node::new("H200");
    let run = n.dir.path().join("run");
    let left = run.join(".leftovers");
    std::fs::create_dir_all(&left).unwrap();
    chmod(&run, 0o755);
    chmod(&left, 0o700);
    // One tree its user can remove, one with another user's directory inside.
    for (name, stuck) in [("job-8.1700000000.0", false), ("job-9.1700000000.0", true)] {
        let log = left.join(name).join("gpu0/log");
        std::fs::create_dir_all(log.join("sub")).unwrap();
        std::fs::write(log.join("sub/f"), "x").unwrap();
        for p in [log.clone(), log.join("sub"), log.join("sub/f")] {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
        if stuck {
            std::os::unix::fs::chown(log.join("sub"), Some(0), Some(0)).unwrap();
        }
    }
    let human = String::from_utf8_lossy(&n.colloc(&["status"]).stdout).into_owned();
    assert!(
        human.contains("LEFTOVER FILES") && human.contains("job-8.1700000000.0"),
        "{human}"
    );
    assert!(human.contains("job-9.1700000000.0"), "{human}");
    let v = n.status();
    assert_eq!(v["leftovers"].as_array().unwrap().len(), 2, "{v}");

    let out = n.colloc(&["restore", "--all"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("job-9.1700000000.0 could not be removed")
            && err.contains("Permission denied"),
        "{err}"
    );
    assert!(!err.contains("job-8"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("nothing to restore"));
    assert!(
        !left.join("job-8.1700000000.0").exists(),
        "removed what it could"
    );
    let v = n.status();
    assert_eq!(
        v["leftovers"],
        serde_json::json!([left.join("job-9.1700000000.0").display().to_string()])
    );
    // Again: still there, still exit 1 (not "nothing to restore", 0, every time).
    assert_eq!(n.colloc(&["restore", "--all"]).status.code(), Some(1));
    // Once its obstacle is gone, it goes, and all is well.
    std::os::unix::fs::chown(
        left.join("job-9.1700000000.0/gpu0/log/sub"),
        Some(65534),
        Some(65534),
    )
    .unwrap();
    let out = n.colloc(&["restore", "--all"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!left.exists());
    let v = n.status();
    assert_eq!(v["leftovers"], serde_json::json!([]));
}
