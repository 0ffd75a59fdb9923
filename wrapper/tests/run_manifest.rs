//! Manifest handling of `colloc run`: sweeps expand to named runs; every manifest error
//! names the file and line (read through the command's library), exits 2 and starts
//! nothing (through the binary).

mod run_support;

use run_support::{run, succeeded, Env};

#[test]
fn a_2x2_sweep_expands_to_four_named_runs() {
    let env = Env::new();
    let m = env.manifest(
        "[[sweep]]\nname = 'bs{bs}-lr{lr}'\ncommand = ['sh', '-c', 'echo \"$0 $1\" > \"$MARK/$COLLOC_RUN_NAME\"', '{bs}', '{lr}']\ngrid = { bs = ['64', '128'], lr = ['0.1', '0.01'] }\n",
    );
    let out = env
        .colloc()
        .args(["-j", "4", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    assert_eq!(
        env.marks(),
        ["bs128-lr0.01", "bs128-lr0.1", "bs64-lr0.01", "bs64-lr0.1"]
    );
    let got = std::fs::read_to_string(env.mark().join("bs128-lr0.01")).unwrap();
    assert_eq!(got.trim(), "128 0.01");
    let rep = env.report();
    assert_eq!(rep["runs"].as_array().unwrap().len(), 4);
    assert_eq!(run(&rep, "bs64-lr0.1")["index"], 0);
    assert_eq!(run(&rep, "bs128-lr0.01")["index"], 3);
}

/// Each bad manifest's error names the file and line and says what is wrong: read through
/// the command's library (`colloc::run::manifest`), as `colloc run` reads it.
#[test]
fn manifest_errors_say_where() {
    let ok = "command = ['touch', 'STARTED']";
    let cases: &[(&str, String, &str)] = &[
        (
            "unknown key",
            format!("[[run]]\nname = 'a'\n{ok}\ngpus = 2\n"),
            ":4: unknown field `gpus`",
        ),
        (
            "unknown table",
            format!("[[run]]\n{ok}\n[[runs]]\n{ok}\n"),
            ":3: unknown field `runs`",
        ),
        (
            "bad regex",
            format!("[defaults]\nmetric = 'img/s=([0-9.+'\n[[run]]\n{ok}\n"),
            ":2: metric: bad regex",
        ),
        (
            "regex without a group",
            format!("[defaults]\nmetric = 'img/s'\n[[run]]\n{ok}\n"),
            ":2: metric: regex \"img/s\" has no capture group",
        ),
        (
            "empty command",
            "[[run]]\nname = 'a'\ncommand = []\n".to_string(),
            ":3: empty command",
        ),
        (
            "unknown placeholder",
            "[[sweep]]\nname = 'x{lr}'\ncommand = ['touch', 'STARTED', '{bs}']\ngrid = { lr = ['1'] }\n"
                .to_string(),
            ":3: unknown placeholder {bs}",
        ),
        (
            "duplicate names",
            format!("[[run]]\nname = 'a'\n{ok}\n[[sweep]]\nname = 'a'\n{ok}\ngrid = {{ x = ['1'] }}\n"),
            ":5: duplicate run name \"a\"",
        ),
        (
            "bad timeout",
            format!("[[run]]\n{ok}\ntimeout = 'soon'\n"),
            ":3: invalid duration \"soon\"",
        ),
        (
            "timeout past any deadline",
            format!("[[run]]\n{ok}\ntimeout = '1e19'\n"),
            ":3: duration \"1e19\" is longer than a year",
        ),
        (
            // 2^64 combinations: the count must not wrap around to 0 and pass.
            "huge grid",
            format!(
                "[[sweep]]\nname = 'g'\n{ok}\ngrid = {{ {} }}\n",
                (0..64).map(|i| format!("k{i} = ['a', 'b']")).collect::<Vec<_>>().join(", ")
            ),
            ":4: sweep expands to",
        ),
        (
            "bad environment name",
            format!("[[run]]\n{ok}\nenv = {{ \"A=B\" = '1' }}\n"),
            ":3: environment variable name \"A=B\"",
        ),
        (
            "retries out of range",
            format!("[defaults]\nretries = 1000\n[[run]]\n{ok}\n"),
            ":2: retries = 1000 is not valid; use a whole number from 0 to 100",
        ),
        (
            "unknown retry_on",
            format!("[[sweep]]\n{ok}\ngrid = {{ x = ['1'] }}\nretry_on = 'always'\n"),
            ":4: retry_on: \"always\" is not valid; use oom (CUDA out of memory) or any (any failure or timeout)",
        ),
        (
            "NUL in the command",
            "[[run]]\ncommand = ['touch', \"STA\\u0000RTED\"]\n".to_string(),
            ":2: the command contains a NUL character",
        ),
    ];
    for (what, text, want) in cases {
        let e = colloc::run::manifest::parse(text, "sweep.toml", std::path::Path::new("/"))
            .expect_err(what)
            .to_string();
        assert!(
            e.starts_with(&format!("sweep.toml{want}")),
            "{what}: want sweep.toml{want:?} at the start of {e:?}"
        );
        assert!(!e.contains('\n'), "{what}: one line: {e:?}");
    }
}

/// A bad manifest, through the command: its one line on stderr, exit 2, no run started
/// and no report directory made.
#[test]
fn a_bad_manifest_exits_2_and_starts_nothing() {
    let ok = "command = ['touch', 'STARTED']";
    for (what, text, want) in [
        (
            "unknown key",
            format!("[[run]]\nname = 'a'\n{ok}\ngpus = 2\n"),
            ":4: unknown field `gpus`",
        ),
        (
            "bad timeout",
            format!("[[run]]\n{ok}\ntimeout = 'soon'\n"),
            ":3: invalid duration \"soon\"",
        ),
    ] {
        let env = Env::new();
        let m = env.manifest(&text);
        let out = env.colloc().arg("-f").arg(&m).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        let line = format!("{}{want}", m.display());
        assert!(
            stderr.contains(&line),
            "{what}: want {line:?} in {stderr:?}"
        );
        assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
        assert!(
            !env.path().join("STARTED").exists(),
            "{what}: a run started"
        );
        assert!(!env.report_dir().exists(), "{what}: a report dir was made");
    }
}

/// A manifest is read through a bounded reader: `/dev/zero` is refused at once (a device,
/// not read until the OOM killer ends colloc), a file over 16 MiB by its size.
#[test]
fn a_manifest_larger_than_16_mib_is_refused() {
    let env = Env::new();
    let big = env.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(16 * 1024 * 1024 + 1)
        .unwrap();
    for (path, want) in [
        (
            "/dev/zero".to_string(),
            "/dev/zero: cannot read the run manifest: a character device, not a regular file"
                .to_string(),
        ),
        (
            big.display().to_string(),
            format!("{}: the run manifest is larger than 16 MiB", big.display()),
        ),
    ] {
        let out = env.colloc().args(["-f", &path]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&want), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let env = Env::new();
    for args in [
        ["-j", "1000000000000", "--", "true"],
        ["-n", "100000000000", "--", "true"],
        ["--grace", "1e20", "--", "true"],
    ] {
        let out = env.colloc().args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = env
        .colloc()
        .env("COLLOC_MODE", "naive")
        .env("COLLOC_SLOTS", "99999999")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env.colloc().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to run"));
    let out = env
        .colloc()
        .args(["--mode", "mig:3g", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--mode mig works only inside a colloc job")
    );
    let out = env
        .colloc()
        .args(["--timeout", "x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = env
        .colloc()
        .args(["--mode", "mps", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a GPU"));
}

/// A file in the test's directory with `mode`: a script that leaves a mark named for the run.
fn script(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, "#!/bin/sh\ntouch \"$MARK/$COLLOC_RUN_NAME\"\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `colloc run` that must fail before anything starts: exit 2, one line on stderr that
/// holds `want`, no run started, no report directory made.
fn refused(env: &Env, args: &[&str], want: &str) {
    let out = env.colloc().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(want),
        "{args:?}: want {want:?} in {stderr:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
    assert!(env.marks().is_empty(), "{args:?}: a run started");
    assert!(
        !env.path().join("STARTED").exists(),
        "{args:?}: a run started"
    );
    assert!(
        !env.report_dir().exists(),
        "{args:?}: a report dir was made"
    );
}

/// A misspelled program fails the whole pack before anything starts (not every run of
/// the sweep on its own): the manifest's file and the line of the command, the run, and
/// the PATH searched.
#[test]
fn a_misspelled_program_fails_the_pack_before_anything_starts() {
    let env = Env::new();
    let m = env.manifest(
        "[[run]]\nname = 'ok'\ncommand = ['touch', 'STARTED']\n[[sweep]]\nname = 'lr{lr}'\n\
         command = ['pyhton3', 'train.py', '--lr', '{lr}']\ngrid = { lr = ['0.1', '0.01'] }\n",
    );
    let path = std::env::var("PATH").unwrap();
    let file = m.display().to_string();
    refused(
        &env,
        &["-f", &file],
        &format!(
            "{file}:6: run \"lr0.1\": program \"pyhton3\" not found in colloc's PATH ({path})"
        ),
    );
    // A command run through sh: its first program, where that is sure.
    env.manifest("[[run]]\nname = 's'\ncommand = 'pyhton3 train.py > out.log 2>&1'\n");
    refused(
        &env,
        &["-f", &file],
        &format!("{file}:3: run \"s\" (the first program of its sh -c script): program \"pyhton3\" not found"),
    );
    // The command after --.
    refused(
        &env,
        &["--", "pyhton3", "train.py"],
        "the command after --: program \"pyhton3\" not found in colloc's PATH",
    );
}

/// A program that is there but may not be executed is refused with what to do.
#[test]
fn a_program_without_its_execute_bit_is_refused_before_start() {
    let env = Env::new();
    script(&env.path().join("train.sh"), 0o644);
    let m = env.manifest("[[run]]\nname = 'a'\ncommand = ['./train.sh', '--lr', '0.1']\n");
    let file = m.display().to_string();
    refused(
        &env,
        &["-f", &file],
        &format!(
            "{file}:3: run \"a\": program \"./train.sh\" is {}, which you may not execute: chmod +x it",
            env.path().join("./train.sh").display()
        ),
    );
}

/// A program with a slash is found in the run's working directory (where it starts),
/// not in colloc's.
#[test]
fn a_relative_program_is_found_in_the_runs_working_directory() {
    let env = Env::new();
    std::fs::create_dir(env.path().join("exp")).unwrap();
    script(&env.path().join("exp/train.sh"), 0o755);
    let m = env.manifest("[[run]]\nname = 'a'\nworkdir = 'exp'\ncommand = ['./train.sh']\n");
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    succeeded(&out);
    assert_eq!(env.marks(), ["a"]);
    // Without the workdir the same program is looked for (and missing) in colloc's.
    std::fs::remove_dir_all(env.report_dir()).unwrap();
    std::fs::remove_file(env.mark().join("a")).unwrap();
    env.manifest("[[run]]\nname = 'a'\ncommand = ['./train.sh']\n");
    let file = m.display().to_string();
    refused(
        &env,
        &["-f", &file],
        &format!(
            "{file}:3: run \"a\": program \"./train.sh\" not found: {} does not exist (relative to the run's working directory {})",
            env.path().join("./train.sh").display(),
            env.path().display()
        ),
    );
}

/// A bare name is searched in the PATH the run gets: its own `env` PATH over colloc's.
#[test]
fn a_bare_program_is_searched_in_the_path_of_the_runs_env() {
    let env = Env::new();
    let tools = env.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    script(&tools.join("mytrain"), 0o755);
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ PATH = '{}:/usr/bin:/bin' }}\n[[run]]\nname = 'a'\ncommand = ['mytrain']\n",
        tools.display()
    ));
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    succeeded(&out);
    assert_eq!(env.marks(), ["a"]);
    // A run's own PATH without the tools: refused, naming that PATH.
    std::fs::remove_dir_all(env.report_dir()).unwrap();
    std::fs::remove_file(env.mark().join("a")).unwrap();
    env.manifest(&format!(
        "[defaults]\nenv = {{ PATH = '{}:/usr/bin:/bin' }}\n[[run]]\nname = 'a'\ncommand = ['mytrain']\nenv = {{ PATH = '/usr/bin:/bin' }}\n",
        tools.display()
    ));
    let file = m.display().to_string();
    refused(
        &env,
        &["-f", &file],
        &format!("{file}:5: run \"a\": program \"mytrain\" not found in the run's env PATH (/usr/bin:/bin)"),
    );
}
