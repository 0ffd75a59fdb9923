//! Unit tests of [`super`].

use super::*;

fn parse(s: &str) -> Result<Config, ConfigError> {
    Config::parse(s, Path::new("test.toml"))
}

#[test]
fn full_example_parses() {
    let c = parse(
        r#"
version = 1
allowed_modes = ["naive", "mps", "mig"]
default_mode = "off"
state_dir = "/var/lib/colloc"
run_dir = "/run/colloc"
nvml_library = "libnvidia-ml.so.1"
mps_control = "nvidia-cuda-mps-control"
allow_mig_mode_change = false
node_comment = true
"#,
    )
    .unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn minimal_takes_defaults() {
    assert_eq!(parse("version = 1").unwrap(), Config::default());
}

#[test]
fn rejections() {
    let cases = [
        ("", "missing `version`"),
        ("version = 2", "unknown version 2"),
        ("version = \"1\"", "unknown version \"1\""),
        ("version = 1\nbogus = 3", "unknown field `bogus`"),
        (
            "version = 1\nallowed_modes = [\"gpu\"]",
            "unknown mode \"gpu\"",
        ),
        (
            "version = 1\ndefault_mode = \"mig:\"",
            "default_mode: invalid mode",
        ),
        (
            "version = 1\nstate_dir = \"rel\"",
            "state_dir must be an absolute path",
        ),
        (
            "version = 1\nallowed_modes = [\"mps\"]\ndefault_mode = \"naive\"",
            "not in allowed_modes",
        ),
        (
            "version = 1\nallow_mig_mode_change = \"yes\"",
            "invalid type",
        ),
        ("version = [", "invalid"),
        (
            "version = 1\njob_dir_inodes = 10",
            "job_dir_inodes must be between 64 and 16777216, got 10",
        ),
        (
            "version = 1\njob_dir_size_mib = 0",
            "job_dir_size_mib must be between 1 and 65536, got 0",
        ),
        (
            "version = 1\nstate_dir = \"/var/lib/col\\u0000loc\"",
            "state_dir contains a NUL character",
        ),
        (
            "version = 1\nrun_dir = \"/run/../tmp\"",
            "run_dir must be an absolute path without . or ..",
        ),
        ("version = 1\nrun_dir = \"/\"", "(and not /)"),
        (
            "version = 1\nrun_dir = \"/var/lib/colloc/run\"",
            "must not lie inside one another",
        ),
        (
            "version = 1\nmps_control = \"bin/nvidia-cuda-mps-control\"",
            "a relative path would depend on the current directory",
        ),
        (
            "version = 1\nnvml_library = \"./libnvidia-ml.so.1\"",
            "a relative path would depend on the current directory",
        ),
        (
            "version = 1\nnvml_library = \"lib\\u0000\"",
            "nvml_library must be a file name",
        ),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.contains(want), "{text:?}: {err}");
        assert!(!err.contains('\n'), "{text:?}: {err}");
        assert!(err.starts_with("test.toml:"), "{err}");
    }
}

#[test]
fn errors_say_where_as_line_and_column() {
    for (text, want) in [
        (
            "version = 1\nbogus = 3\n",
            "test.toml:2:1: unknown field `bogus`",
        ),
        (
            "version = 1\nallowed_modes = [\"mps\", \"gpu\"]\n",
            "test.toml:2:17: allowed_modes: unknown mode \"gpu\"",
        ),
        ("version = 1\n# é\nrun_dir = @\n", "test.toml:3:11: "),
        (
            "version = 1\nallow_mig_mode_change = \"yes\"",
            "test.toml:2:25: invalid type",
        ),
        (
            "# colloc\nversion = 7\n",
            "test.toml:2:11: unknown version 7",
        ),
        ("allowed_modes = []\n", "test.toml:1:1: missing `version`"),
        ("version = 1\n[x\n", "test.toml:2:3: "),
    ] {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.starts_with(want), "{text:?}: {err}");
        assert!(!err.contains("byte"), "{err}");
    }
    assert_eq!(line_column("ab\ncd", 0), (1, 1));
    assert_eq!(line_column("ab\ncd", 4), (2, 2));
    assert_eq!(line_column("é\nxé=", 6), (2, 3));
    assert_eq!(line_column("é\nxé=", 5), (2, 2), "inside é: its start");
    assert_eq!(line_column("é", 1), (1, 1), "inside a character: its start");
    assert_eq!(line_column("ab", 99), (1, 3));
}

#[test]
fn files_are_read_with_a_size_limit_and_never_block() {
    let tmp = tempfile::tempdir().unwrap();
    // A character device that never ends, and a FIFO nobody writes to.
    let err = Config::load(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a regular file"), "{err}");
    let fifo = tmp.path().join("fifo.toml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = Config::load(&fifo).unwrap_err().to_string();
    assert!(err.contains("a FIFO, not a regular file"), "{err}");
    let big = tmp.path().join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(CONFIG_LIMIT + 1).unwrap();
    let err = Config::load(&big).unwrap_err().to_string();
    assert!(err.contains("larger than 16777216 bytes"), "{err}");
    let ok = tmp.path().join("ok.toml");
    std::fs::write(&ok, "version = 1\n").unwrap();
    assert_eq!(Config::load(&ok).unwrap(), Config::default());
    std::fs::write(&ok, b"version = 1\n\xff\n").unwrap();
    assert!(Config::load(&ok)
        .unwrap_err()
        .to_string()
        .contains("not UTF-8"));
}

#[test]
fn root_reads_only_a_config_no_one_else_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("colloc.toml");
    std::fs::write(&p, "version = 1\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(Config::load_trusted(&p).unwrap(), Config::default());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Config::load_trusted(&p).unwrap_err();
    assert!(matches!(err, ConfigError::Unsafe(_)), "{err}");
    assert!(
        err.to_string()
            .contains("writable by group or others (mode 0666)"),
        "{err}"
    );
    // The same file through a link in a directory others can write: refused too.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&p, open.join("colloc.toml")).unwrap();
    let err = Config::load_trusted(&open.join("colloc.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("mode 0777"), "{err}");
    // A missing file stays a read error the plugin can tell apart.
    let err = Config::load_trusted(&tmp.path().join("missing.toml")).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err}"
    );
}

#[test]
fn unsafe_paths_are_named() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lib = tmp.path().join("libfake.so");
    std::fs::write(&lib, "").unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = Config {
        state_dir: tmp.path().join("state"),
        run_dir: tmp.path().join("run"),
        nvml_library: lib.display().to_string(),
        mps_control: "/nonexistent/nvidia-cuda-mps-control".into(),
        ..Config::default()
    };
    assert!(c.unsafe_paths().is_empty(), "{:?}", c.unsafe_paths());
    let c = Config {
        state_dir: open.join("state"),
        run_dir: open.clone(),
        nvml_library: open.join("lib.so").display().to_string(),
        ..c
    };
    std::fs::write(open.join("lib.so"), "").unwrap();
    let found: Vec<String> = c.unsafe_paths().iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.iter().all(|f| f.contains("mode 0777")), "{found:?}");
}

#[test]
fn allowed_modes_check() {
    let c = parse("version = 1\nallowed_modes = [\"mps\"]").unwrap();
    assert!(c.check_allowed(&Mode::Off).is_ok());
    assert!(c.check_allowed(&"mps:2".parse().unwrap()).is_ok());
    let err = c.check_allowed(&"mig:3g".parse().unwrap()).unwrap_err();
    assert_eq!(
        err,
        "mode mig:3g is not allowed on this cluster; allowed: off, mps"
    );
    // MPS inside MIG instances: where both mig and mps are allowed.
    let c = parse("version = 1\nallowed_modes = [\"mps\", \"mig\"]").unwrap();
    assert!(c.check_allowed(&"mig:3g".parse().unwrap()).is_ok());
    assert!(c.check_allowed(&"mig:4g,2g:mps:2".parse().unwrap()).is_ok());
    let c = parse("version = 1\nallowed_modes = [\"mig\"]").unwrap();
    let err = c
        .check_allowed(&"mig:4g,2g:mps:2".parse().unwrap())
        .unwrap_err();
    assert_eq!(
        err,
        "mode mig:4g,2g:mps:2 (MPS inside MIG instances) needs both mig and mps allowed \
             on this cluster, and mps is not; allowed: off, mig"
    );
    let c = parse("version = 1\nallowed_modes = [\"naive\"]").unwrap();
    let err = c.check_allowed(&"mig:3g:mps".parse().unwrap()).unwrap_err();
    assert!(err.contains("and mig and mps is not"), "{err}");
}

#[test]
fn paths_a_job_container_hides_are_named() {
    let private = [
        PathBuf::from("/tmp"),
        PathBuf::from("/dev/shm"),
        PathBuf::from("/var/spool/slurm/containers"),
    ];
    let file = Path::new("/etc/slurm/colloc.toml");
    // The defaults lie outside each of them; and no job container, nothing private.
    assert_eq!(Config::default().private_path_problem(file, &private), None);
    let c = Config {
        state_dir: "/var/spool/slurm/containers/colloc".into(),
        run_dir: "/dev/shm/colloc".into(),
        mps_control: "/tmp/bin/nvidia-cuda-mps-control".into(),
        ..Config::default()
    };
    assert_eq!(c.private_path_problem(file, &[]), None);
    let msg = c
        .private_path_problem(Path::new("/tmp/colloc.toml"), &private)
        .unwrap();
    for want in [
        "colloc.toml /tmp/colloc.toml lies in /tmp, ",
        "state_dir /var/spool/slurm/containers/colloc lies in /var/spool/slurm/containers, ",
        "run_dir /dev/shm/colloc lies in /dev/shm, ",
        "mps_control /tmp/bin/nvidia-cuda-mps-control lies in /tmp, ",
        "which JobContainerType=job_container/tmpfs makes private to each job",
        "outside /tmp, /dev/shm, /var/spool/slurm/containers",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    assert_eq!(msg.lines().count(), 1, "{msg}");
    // A name the loader finds is no path; a directory that only starts alike is not
    // inside.
    let c = Config {
        state_dir: "/tmpfiles/colloc".into(),
        mps_control: "nvidia-cuda-mps-control".into(),
        ..Config::default()
    };
    assert_eq!(c.private_path_problem(file, &private), None);
}

#[test]
fn a_path_through_a_link_into_a_private_dir_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let private = tmp.path().join("base");
    std::fs::create_dir(&private).unwrap();
    let link = tmp.path().join("state-link");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    let c = Config {
        state_dir: link.join("colloc"),
        ..Config::default()
    };
    let msg = c
        .private_path_problem(
            Path::new("/etc/slurm/colloc.toml"),
            std::slice::from_ref(&private),
        )
        .unwrap();
    assert!(
        msg.starts_with(&format!(
            "state_dir {} lies in {}",
            link.join("colloc").display(),
            private.display()
        )),
        "{msg}"
    );
}

#[test]
fn run_dir_parents_must_exist_and_let_everyone_through() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(tmp.path(), 0o755);
    let with_run = |run: PathBuf| Config {
        run_dir: run,
        ..Config::default()
    };
    // Parent there and open: run_dir itself need not exist yet.
    assert_eq!(with_run(tmp.path().join("run")).run_dir_problem(), None);
    // Parent missing.
    let missing = tmp.path().join("nowhere");
    let msg = with_run(missing.join("run")).run_dir_problem().unwrap();
    assert!(
        msg.contains(&format!(
            "{} does not exist; colloc makes run_dir itself but not the directories above it",
            missing.display()
        )),
        "{msg}"
    );
    // A parent the job's user cannot pass.
    let closed = tmp.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    mode(&closed, 0o700);
    let msg = with_run(closed.join("run")).run_dir_problem().unwrap();
    assert!(
        msg.contains(&format!("{} has mode 0700", closed.display())),
        "{msg}"
    );
    // run_dir itself there but closed: the same.
    mode(&closed, 0o755);
    let run = closed.join("run");
    std::fs::create_dir(&run).unwrap();
    mode(&run, 0o750);
    let msg = with_run(run.clone()).run_dir_problem().unwrap();
    assert!(
        msg.contains(&format!("{} has mode 0750", run.display())),
        "{msg}"
    );
    mode(&run, 0o755);
    assert_eq!(with_run(run.clone()).run_dir_problem(), None);
    // A file where a parent should be.
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let msg = with_run(file.join("run")).run_dir_problem().unwrap();
    assert!(
        msg.starts_with(&format!("run_dir {}", file.join("run").display()))
            && msg.to_lowercase().contains("not a directory"),
        "{msg}"
    );
}
