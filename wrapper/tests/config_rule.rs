//! One config-or-default rule for every command (issue 26): a broken node configuration
//! is bad input for `colloc run` and `colloc bench` alike (one line naming the file, exit
//! 2, nothing run); a configuration that is simply absent (`$COLLOC_CONFIG` or the
//! default path) means the defaults.

use std::process::Output;

use assert_cmd::Command;

fn colloc(dir: &std::path::Path, env_config: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::cargo_bin("colloc").unwrap();
    c.env_remove("COLLOC_CONFIG")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("SLURM_JOB_ID")
        .env_remove("COLLOC_MODE")
        .current_dir(dir);
    if let Some(p) = env_config {
        c.env("COLLOC_CONFIG", p);
    }
    c.args(args).output().unwrap()
}

#[test]
fn a_broken_config_is_exit_2_for_run_and_bench() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("colloc.toml");
    std::fs::write(&cfg, "version = 1\nnvml_libary = 'typo'\n").unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let c = cfg.display().to_string();
    for (how, args) in [
        (
            "run --config",
            vec!["--config", &c, "run", "--", "sh", "-c", &touch],
        ),
        (
            "bench --config",
            vec!["--config", &c, "bench", "--", "sh", "-c", &touch],
        ),
        ("run $COLLOC_CONFIG", vec!["run", "--", "sh", "-c", &touch]),
        (
            "bench $COLLOC_CONFIG",
            vec!["bench", "--", "sh", "-c", &touch],
        ),
    ] {
        let out = colloc(dir.path(), how.contains('$').then_some(c.as_str()), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{how}: one line: {err}");
        assert!(
            lines[0].contains("colloc.toml"),
            "{how}: names the file: {err}"
        );
        assert!(!marker.exists(), "{how}: nothing may run");
    }
}

#[test]
fn an_absent_config_is_the_defaults_and_a_missing_config_option_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("none.toml").display().to_string();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = colloc(
        dir.path(),
        Some(&absent),
        &[
            "run",
            "-j",
            "1",
            "--report-dir",
            "r",
            "--",
            "sh",
            "-c",
            &touch,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists());
    // A file typed on the command line must exist.
    let out = colloc(
        dir.path(),
        None,
        &["--config", &absent, "run", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
