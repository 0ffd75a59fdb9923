//! Tests of run/programs.rs (finding each program before anything starts).

use super::*;
use std::os::unix::fs::PermissionsExt;

/// A file at `p` with `mode`.
fn file(p: &Path, mode: u32) {
    std::fs::write(p, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn path_of(dirs: &[&Path]) -> SearchPath {
    SearchPath {
        value: std::env::join_paths(dirs).unwrap(),
        from: PathFrom::Colloc,
    }
}

#[test]
fn a_bare_name_is_the_first_usable_path_entry() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    file(&b.join("train"), 0o755);
    let path = path_of(&[&a, &b]);
    assert_eq!(resolve("train", t.path(), &path).unwrap(), b.join("train"));
    // An earlier entry that holds the name as a directory, or not executable, is
    // passed over as execvp passes it over.
    std::fs::create_dir(a.join("train")).unwrap();
    assert_eq!(resolve("train", t.path(), &path).unwrap(), b.join("train"));
    let e = resolve("pyhton3", t.path(), &path).unwrap_err();
    assert!(matches!(e, ProgramError::NotInPath { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("program \"pyhton3\" not found in colloc's PATH (")
            && msg.contains(&a.display().to_string())
            && msg.contains(&b.display().to_string()),
        "{msg}"
    );
}

#[test]
fn a_name_found_only_where_it_cannot_run_says_so() {
    let t = tempfile::tempdir().unwrap();
    file(&t.path().join("notes.py"), 0o644);
    let path = path_of(&[t.path()]);
    let e = resolve("notes.py", Path::new("/"), &path).unwrap_err();
    // Root too may execute a file only where some execute bit is set.
    assert!(matches!(e, ProgramError::NotExecutable { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("which you may not execute: chmod +x"),
        "{e}"
    );
    std::fs::create_dir(t.path().join("tool")).unwrap();
    let e = resolve("tool", Path::new("/"), &path).unwrap_err();
    assert!(e.to_string().contains("a directory, not a program"), "{e}");
}

#[test]
fn a_program_with_a_slash_is_taken_in_the_runs_working_directory() {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("exp");
    std::fs::create_dir(&work).unwrap();
    file(&work.join("train.sh"), 0o755);
    let none = path_of(&[]);
    assert_eq!(
        resolve("./train.sh", &work, &none).unwrap(),
        work.join("./train.sh")
    );
    // Not where colloc itself runs.
    let e = resolve("./train.sh", t.path(), &none).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("does not exist (relative to the run's working directory")
            && msg.contains(&t.path().display().to_string()),
        "{msg}"
    );
    // An absolute one is itself wherever the run works.
    let abs = work.join("train.sh").display().to_string();
    assert!(resolve(&abs, Path::new("/"), &none).is_ok());
    let e = resolve("/nonexistent/train.sh", &work, &none).unwrap_err();
    assert_eq!(
        e.to_string(),
        "program \"/nonexistent/train.sh\" not found: /nonexistent/train.sh does not exist"
    );
}

#[test]
fn empty_and_relative_path_entries_are_the_runs_working_directory() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("bin")).unwrap();
    file(&t.path().join("bin/tool"), 0o755);
    file(&t.path().join("here"), 0o755);
    let p = |v: &str| SearchPath {
        value: v.into(),
        from: PathFrom::Run,
    };
    assert!(resolve("tool", t.path(), &p("/nonexistent:bin")).is_ok());
    assert!(resolve("here", t.path(), &p("/nonexistent::/usr/bin")).is_ok());
    assert!(resolve("here", t.path(), &p("/nonexistent:/usr/bin")).is_err());
}

#[test]
fn the_runs_own_path_wins_over_collocs() {
    let env = vec![
        ("PATH".to_string(), "/first".to_string()),
        ("A".to_string(), "1".to_string()),
        ("PATH".to_string(), "/opt/venv/bin".to_string()),
    ];
    let p = SearchPath::of(&env, Some("/usr/bin".into()));
    assert_eq!(p.value, OsString::from("/opt/venv/bin"));
    assert_eq!(p.from, PathFrom::Run);
    let p = SearchPath::of(&[], Some("/usr/bin".into()));
    assert_eq!(p.from, PathFrom::Colloc);
    let p = SearchPath::of(&[], None);
    assert_eq!(
        (p.value.to_str(), p.from),
        (Some("/bin:/usr/bin"), PathFrom::Default)
    );
}

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_shell_scripts_first_program_only_where_it_is_sure() {
    let sure = [
        ("python3 train.py --lr 0.1", "python3"),
        ("  ./train.sh > out.log 2>&1", "./train.sh"),
        ("python3 x &>log", "python3"),
        ("exec python3 train.py", "python3"),
        ("pyhton3 -c 'import a; print(1)'", "pyhton3"),
        ("python3 \"a;b\" 'c|d' e\\;f", "python3"),
        ("python3<in", "python3"),
    ];
    for (script, want) in sure {
        assert_eq!(
            shell_program(&argv(&["sh", "-c", script])),
            Some(want),
            "{script}"
        );
    }
    assert_eq!(
        shell_program(&argv(&["/bin/bash", "-c", "train x", "arg0"])),
        Some("train")
    );
    let unsure = [
        "pyhton3 x || python3 x",
        "a; b",
        "a | tee log",
        "a && b",
        "a &",
        "a\nb",
        "cd sub",
        "FOO=1 python3 x",
        "$PYTHON x",
        "\"python3\" x",
        "~/bin/x",
        "> log python3",
        "2>log python3",
        "exec >log python3",
        "exec -a x python3",
        "if true; then x; fi",
        "( x )",
        "echo 'unclosed",
        "echo \"unclosed",
        "time python3 x",
        "",
        "   ",
    ];
    for script in unsure {
        assert_eq!(
            shell_program(&argv(&["sh", "-c", script])),
            None,
            "{script:?}"
        );
    }
    // Not `SHELL -c SCRIPT`: no script to read.
    assert_eq!(shell_program(&argv(&["sh", "train.sh"])), None);
    assert_eq!(shell_program(&argv(&["sh", "-lc", "x"])), None);
    assert_eq!(shell_program(&argv(&["zsh", "-c", "x"])), None);
    assert_eq!(shell_program(&argv(&["python3", "-c", "x"])), None);
}

fn spec(name: &str, command: &[&str], line: usize) -> RunSpec {
    let mut s = RunSpec::plain(name.into(), argv(command));
    s.line = Some(line);
    s
}

#[test]
fn the_check_names_file_line_and_run_and_stops_at_the_first() {
    let t = tempfile::tempdir().unwrap();
    file(&t.path().join("ok"), 0o755);
    let path = t.path().as_os_str();
    let specs = [
        spec("a", &["ok"], 3),
        spec("b", &["pyhton3", "x"], 7),
        spec("c", &["missing-too"], 9),
    ];
    let e = check(&specs, Origin::Manifest("runs.toml"), t.path(), Some(path)).unwrap_err();
    assert_eq!(
        e,
        format!(
            "runs.toml:7: run \"b\": program \"pyhton3\" not found in colloc's PATH ({})",
            t.path().display()
        )
    );
    assert!(!e.contains('\n'));
    let shell = [spec("s", &["sh", "-c", "pyhton3 x.py"], 2)];
    let with_sh =
        std::env::join_paths([t.path(), Path::new("/bin"), Path::new("/usr/bin")]).unwrap();
    let e = check(&shell, Origin::Manifest("m.toml"), t.path(), Some(&with_sh)).unwrap_err();
    assert!(
        e.starts_with("m.toml:2: run \"s\" (the first program of its sh -c script): program \"pyhton3\" not found"),
        "{e}"
    );
    let e = check(
        &[RunSpec::plain("run1".into(), argv(&["pyhton3"]))],
        Origin::CommandLine,
        t.path(),
        Some(path),
    )
    .unwrap_err();
    assert!(
        e.starts_with("the command after --: program \"pyhton3\" not found in colloc's PATH"),
        "{e}"
    );
    assert!(check(&specs[..1], Origin::CommandLine, t.path(), Some(path)).is_ok());
}

#[test]
fn a_workdir_and_env_path_of_the_run_are_used() {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("w");
    let venv = t.path().join("venv");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&venv).unwrap();
    file(&work.join("run.sh"), 0o755);
    file(&venv.join("python9"), 0o755);
    let mut s = spec("a", &["./run.sh"], 1);
    s.workdir = Some(PathBuf::from("w"));
    assert!(check(&[s], Origin::Manifest("m"), t.path(), None).is_ok());
    let mut s = spec("b", &["python9"], 1);
    s.env = vec![("PATH".into(), venv.display().to_string())];
    assert!(check(
        &[s.clone()],
        Origin::Manifest("m"),
        t.path(),
        Some(OsStr::new("/usr/bin"))
    )
    .is_ok());
    s.env.clear();
    let e = check(
        &[s],
        Origin::Manifest("m"),
        t.path(),
        Some(OsStr::new("/usr/bin")),
    )
    .unwrap_err();
    assert!(e.contains("not found in colloc's PATH (/usr/bin)"), "{e}");
}
