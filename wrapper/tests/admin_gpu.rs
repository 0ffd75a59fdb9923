//! `colloc check-config` and `colloc status` on a real NVIDIA GPU (the lent H200),
//! read-only: where the driver is there, check-config warns about nothing and status
//! reports the GPUs with no `error`.
//!
//! Run there as root with `cargo test -p colloc --test admin_gpu -- --ignored` (or the
//! built test binary with `--ignored`, next to the `colloc` binary it runs).
//! `COLLOC_NVML_LIBRARY` names the library (default: `/usr/local/nvidia/lib64/
//! libnvidia-ml.so.1` where it exists, else `libnvidia-ml.so.1`).

use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

fn nvml_library() -> String {
    std::env::var("COLLOC_NVML_LIBRARY").unwrap_or_else(|_| {
        let lib = "/usr/local/nvidia/lib64/libnvidia-ml.so.1";
        if std::path::Path::new(lib).exists() {
            lib.to_string()
        } else {
            "libnvidia-ml.so.1".to_string()
        }
    })
}

fn run(config: &std::path::Path, args: &[&str]) -> Output {
    Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("COLLOC_CONFIG")
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn check_config_and_status_on_a_real_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("colloc.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\n\
             nvml_library = \"{1}\"\nnode_comment = false\n",
            dir.path().display(),
            nvml_library()
        ),
    )
    .unwrap();
    let out = run(&config, &["check-config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The driver loads and nvidia-cuda-mps-control is in a system directory: nothing to
    // warn about.
    assert!(!stderr.contains("cannot load NVML"), "{stderr}");
    assert!(!stderr.contains("mps_control"), "{stderr}");
    println!(
        "check-config: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );

    let out = run(&config, &["status", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("error").is_none(), "{v}");
    let gpus = v["gpus"].as_array().expect("a GPU list");
    assert!(!gpus.is_empty(), "{v}");
    for g in gpus {
        assert!(g["uuid"].as_str().unwrap().starts_with("GPU-"), "{g}");
        assert!(g["name"].as_str().unwrap().starts_with("NVIDIA"), "{g}");
    }
    println!(
        "status --json: {}",
        serde_json::to_string(&v["gpus"]).unwrap()
    );
}
