//! Retries where runs are declared (issue 39): `retries` and `retry_on` in `runs.toml`'s
//! `[defaults]`, a `[[sweep]]` or a `[[run]]`, over the `--retries`/`--retry-on` flags,
//! over the built-in (no retries, on CUDA out of memory). A stand-in fails every attempt
//! (with an out-of-memory message, or plainly) and counts its attempts.

mod run_support;

use run_support::{fixture, run, Env};

/// How many times each run started (the stand-in's count) and how many attempts the
/// report holds; they must agree.
fn attempts(env: &Env, name: &str) -> usize {
    let counted = std::fs::read_to_string(env.mark().join(name))
        .unwrap_or_default()
        .lines()
        .count();
    let rep = env.report();
    let recorded = run(&rep, name)["attempts"].as_array().unwrap().len();
    assert_eq!(
        counted, recorded,
        "{name}: started {counted} times, recorded {recorded}"
    );
    counted
}

/// `colloc run -j 4 FLAGS -f MANIFEST` of runs that all fail: exit 1.
fn pack(env: &Env, flags: &[&str], manifest: &str) {
    let m = env.manifest(manifest);
    let out = env
        .colloc()
        .args(["-j", "4"])
        .args(flags)
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One run failing each way (`oom`, `plain`) with nothing about retries in the manifest.
fn two_runs() -> String {
    let fails = fixture("fails.sh");
    format!(
        "[[run]]\nname = 'oom'\ncommand = ['{fails}']\nenv = {{ FAIL = 'oom' }}\n\
         [[run]]\nname = 'plain'\ncommand = ['{fails}']\n"
    )
}

#[test]
fn without_settings_the_built_in_retries_nothing() {
    let env = Env::new();
    pack(&env, &[], &two_runs());
    assert_eq!((attempts(&env, "oom"), attempts(&env, "plain")), (1, 1));
}

#[test]
fn the_flags_apply_where_the_manifest_sets_nothing() {
    let env = Env::new();
    pack(&env, &["--retries", "2"], &two_runs());
    // --retry-on's default is oom: the plain failure is not retried.
    assert_eq!((attempts(&env, "oom"), attempts(&env, "plain")), (3, 1));
    let env = Env::new();
    pack(&env, &["--retries", "1", "--retry-on", "any"], &two_runs());
    assert_eq!((attempts(&env, "oom"), attempts(&env, "plain")), (2, 2));
}

/// Each level over the one below: `[defaults]` over the flags, a sweep over
/// `[defaults]`, a run over `[defaults]`, and within a level `retries` and `retry_on`
/// each on its own.
#[test]
fn each_manifest_level_overrides_the_one_below_and_the_flags() {
    let env = Env::new();
    let fails = fixture("fails.sh");
    let manifest = format!(
        r#"
[defaults]
retries = 1
retry_on = "any"
[[run]]
name = "defaults-plain"
command = ["{fails}"]
[[run]]
name = "run-retries"
command = ["{fails}"]
retries = 2
[[run]]
name = "run-none"
command = ["{fails}"]
env = {{ FAIL = "oom" }}
retries = 0
[[run]]
name = "run-oom-only"
command = ["{fails}"]
retry_on = "oom"
[[sweep]]
name = "sweep-{{f}}"
command = ["{fails}"]
env = {{ FAIL = "{{f}}" }}
grid = {{ f = ["oom", "plain"] }}
retries = 3
retry_on = "oom"
"#
    );
    // The flags would give every run 4 retries on out of memory only.
    pack(&env, &["--retries", "4", "--retry-on", "oom"], &manifest);
    let got: Vec<(&str, usize)> = [
        "defaults-plain",
        "run-retries",
        "run-none",
        "run-oom-only",
        "sweep-oom",
        "sweep-plain",
    ]
    .into_iter()
    .map(|n| (n, attempts(&env, n)))
    .collect();
    assert_eq!(
        got,
        [
            // [defaults] over the flags: 1 retry, and on any failure.
            ("defaults-plain", 2),
            // a run's retries over [defaults]', its retry_on still [defaults]' (any).
            ("run-retries", 3),
            ("run-none", 1),
            // a run's retry_on over [defaults]': a plain failure is not retried.
            ("run-oom-only", 1),
            // a sweep's over [defaults]': 3 retries, on out of memory only.
            ("sweep-oom", 4),
            ("sweep-plain", 1),
        ]
    );
}

/// A retried attempt is said as such, with the run's own count.
#[test]
fn the_retry_warning_counts_the_runs_own_attempts() {
    let env = Env::new();
    let fails = fixture("fails.sh");
    let m = env.manifest(&format!(
        "[[run]]\nname = 'a'\ncommand = ['{fails}']\nretries = 1\nretry_on = 'any'\n"
    ));
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("a: failed (exit code 3); retrying (attempt 2 of 2)"),
        "{stderr}"
    );
}
