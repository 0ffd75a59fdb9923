//! Tests of the SPANK callbacks over a fake [`Host`](super::Host).

use super::*;

#[test]
fn plugstack_arguments() {
    let a = parse_args(&[]).unwrap();
    assert_eq!(a.config, PathBuf::from(DEFAULT_PATH));
    assert_eq!(a.default, None);
    let a = parse_args(&["config=/etc/x.toml", "default=mps:2"]).unwrap();
    assert_eq!(a.config, PathBuf::from("/etc/x.toml"));
    assert_eq!(a.default, Some(Mode::Mps { clients: Some(2) }));
    assert_eq!(a.test_panic, None);
    for (bad, want) in [
        (&["config=rel.toml"][..], "must be an absolute path"),
        (&["default=mig:"][..], "default=mig:: invalid mode"),
        (&["verbose"][..], "unknown argument \"verbose\""),
        (&["conf=/x"][..], "valid: config=PATH, default=MODE"),
    ] {
        let e = parse_args(bad).unwrap_err();
        assert!(e.contains(want), "{bad:?}: {e}");
    }
}

/// The panic seam exists only in the test suite's plugin (`--features test-seams`).
#[cfg(feature = "test-seams")]
#[test]
fn the_test_build_takes_test_panic() {
    let a = parse_args(&["test_panic=task"]).unwrap();
    assert_eq!(a.test_panic, Some(TestPanic::Task));
    let e = parse_args(&["test_panic=prolog"]).unwrap_err();
    assert!(
        e.contains("test_panic=\"prolog\": valid: option, task"),
        "{e}"
    );
}

/// A release plugin refuses `test_panic=` like any unknown argument, and does not name
/// it among the valid ones.
#[cfg(not(feature = "test-seams"))]
#[test]
fn a_release_build_refuses_test_panic() {
    for arg in ["test_panic=task", "test_panic=option"] {
        let e = parse_args(&[arg]).unwrap_err();
        assert!(e.contains("unknown argument \"test_panic="), "{e}");
        assert!(e.ends_with("valid: config=PATH, default=MODE"), "{e}");
    }
}

#[test]
fn the_epilog_says_restored_only_when_nothing_is_held() {
    let mut report = reconfig::RestoreReport {
        jobs: vec![5],
        destroyed: 2,
        ..Default::default()
    };
    let line = epilog_summary(5, &report);
    assert!(
        line.starts_with("job 5: restored (2 MIG instances"),
        "{line}"
    );
    report.jobs.clear();
    report.held.push(colloc_core::gpu::GpuHold {
        index: 0,
        uuid: "GPU-0".into(),
        gi_ids: vec![1],
        reason: colloc_core::gpu::HoldReason::InUse,
        since: 0,
        holders: Vec::new(),
        breaks_plain_jobs: false,
    });
    let line = epilog_summary(5, &report);
    assert!(!line.starts_with("job 5: restored"), "{line}");
    assert!(line.contains("not fully restored"), "{line}");
    assert!(line.contains("stay marked"), "{line}");
    assert!(line.contains("colloc restore --job 5"), "{line}");
    assert!(line.contains("GPU 0: MIG instance(s) GI 1"), "{line}");
}

#[test]
fn usage_lists_modes() {
    let u = usage(&parse_args(&[]).unwrap());
    for m in ["off", "naive", "mps", "mps:N", "mig:P"] {
        assert!(u.contains(m), "{u}");
    }
    assert!(!u.contains('\n'));
    assert!(usage(&parse_args(&["default=naive"]).unwrap()).ends_with("Default: naive."));
}

#[test]
fn gpu_lists() {
    assert_eq!(job_gpus(Some("2,0"), Some("0,1")).unwrap(), vec![0, 2]);
    assert_eq!(job_gpus(None, Some("3")).unwrap(), vec![3]);
    assert_eq!(job_gpus(Some(""), Some("1,1")).unwrap(), vec![1]);
    assert_eq!(job_gpus(None, None).unwrap(), Vec::<u32>::new());
    assert_eq!(
        job_gpus(None, Some("NoDevFiles")).unwrap(),
        Vec::<u32>::new()
    );
    let e = job_gpus(Some("GPU-abc"), None).unwrap_err();
    assert!(e.starts_with("SLURM_JOB_GPUS=\"GPU-abc\" is not"), "{e}");
    assert!(job_gpus(None, Some("0,,1")).is_err());
}

#[test]
fn option_values_checked_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    // No config here: the grammar alone decides.
    assert!(check_at_submission(b"mig:3g", &missing).is_ok());
    assert!(check_at_submission(b"mps:4", &missing).is_ok());
    for bad in [
        &b""[..],
        b"mig:",
        b"mps:0",
        b"x;rm -rf /",
        b"../../etc",
        &[0xff, 0xfe],
    ] {
        let e = check_at_submission(bad, &missing).unwrap_err();
        assert!(e.starts_with("--colloc: invalid mode"), "{e}");
        assert!(e.contains("valid modes:"), "{e}");
    }
    // With a config: allowed_modes too.
    let cfg = dir.path().join("colloc.toml");
    std::fs::write(&cfg, "version = 1\nallowed_modes = [\"mps\"]\n").unwrap();
    assert!(check_at_submission(b"mps:2", &cfg).is_ok());
    assert!(check_at_submission(b"off", &cfg).is_ok());
    let e = check_at_submission(b"mig:3g", &cfg).unwrap_err();
    assert_eq!(
        e,
        "--colloc: mode mig:3g is not allowed on this cluster; allowed: off, mps"
    );
    // A broken config on a submit host: grammar only, with a warning.
    std::fs::write(&cfg, "version = 7\n").unwrap();
    assert!(check_at_submission(b"mig:3g", &cfg).is_ok());
    assert!(check_at_submission(b"mig:", &cfg).is_err());
    // In slurmstepd the value is checked by task_init_privileged instead.
    assert!(option_given(b"bogus", true).is_ok());
}

struct FakeHost {
    opt: Result<Option<Vec<u8>>, String>,
    env: Vec<(&'static str, String)>,
    set: Vec<(String, String)>,
}

impl Host for FakeHost {
    fn register_option(&mut self, _usage: &str) -> Result<(), String> {
        Ok(())
    }
    fn getopt(&self) -> Result<Option<Vec<u8>>, String> {
        self.opt.clone()
    }
    fn job_id(&self) -> Result<u32, String> {
        Err("spank_get_item(S_JOB_ID) failed".into())
    }
    fn job_uid(&self) -> Result<u32, String> {
        Ok(0)
    }
    fn job_gid(&self) -> Result<u32, String> {
        Ok(0)
    }
    fn setenv(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.set.push((name.into(), value.into()));
        Ok(())
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn option_falls_back_to_the_prolog_environment() {
    let h = FakeHost {
        opt: Err("not available".into()),
        env: vec![(OPTION_ENV, "mps".into()), ("SLURM_JOB_ID", "42".into())],
        set: vec![],
    };
    assert_eq!(option_value(&h), Some(b"mps".to_vec()));
    assert_eq!(job_id(&h), Ok(42));
    let h = FakeHost {
        opt: Ok(None),
        env: vec![(OPTION_ENV, "mps".into())],
        set: vec![],
    };
    assert_eq!(option_value(&h), None);
    assert!(job_id(&h).is_err());
}

fn write_config(dir: &Path, extra: &str) -> String {
    let path = dir.join("colloc.toml");
    std::fs::write(
        &path,
        format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\n\
             nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\nnode_comment = false\n{extra}",
            dir.display()
        ),
    )
    .unwrap();
    format!("config={}", path.display())
}

#[test]
fn jobs_without_colloc_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let mut h = FakeHost {
        opt: Ok(None),
        env: vec![("SLURM_JOB_ID", "7".into()), ("SLURM_JOB_GPUS", "0".into())],
        set: vec![],
    };
    // NVML is never loaded for an off job: the bogus library path would fail.
    job_prolog(&mut h, &[&cfg]).unwrap();
    task_init_privileged(&mut h, &[&cfg]).unwrap();
    job_epilog(&mut h, &[&cfg]).unwrap();
    assert!(h.set.is_empty());
    // No config at all and nothing asked: nothing to do either.
    let missing = format!("config={}/missing.toml", dir.path().display());
    job_prolog(&mut h, &[&missing]).unwrap();
    job_epilog(&mut h, &[&missing]).unwrap();
    // A broken config does not fail (and drain the node for) jobs that asked nothing.
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "version = 1\nbogus = 2\n").unwrap();
    let broken = format!("config={}", broken.display());
    job_prolog(&mut h, &[&broken]).unwrap();
    job_epilog(&mut h, &[&broken]).unwrap();
    // A job that asked on a node without colloc.toml: colloc is not offered there. The
    // prolog and epilog succeed (no drain); the job's tasks fail with the reason.
    h.opt = Ok(Some(b"mps".to_vec()));
    job_prolog(&mut h, &[&missing]).unwrap();
    job_epilog(&mut h, &[&missing]).unwrap();
    let e = task_init_privileged(&mut h, &[&missing]).unwrap_err();
    assert!(
        e.starts_with("job 7 cannot run: --colloc=mps is not offered on this node (it has no "),
        "{e}"
    );
    // --colloc=off asks for nothing.
    h.opt = Ok(Some(b"off".to_vec()));
    job_prolog(&mut h, &[&broken]).unwrap();
}

#[test]
fn a_broken_config_refuses_the_job_not_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let path = dir.path().join("colloc.toml");
    let mut h = FakeHost {
        opt: Ok(None),
        env: vec![("SLURM_JOB_ID", "7".into()), ("SLURM_JOB_GPUS", "0".into())],
        set: vec![],
    };
    // A job under the good config: root keeps its text beside it, 0600.
    job_prolog(&mut h, &[&cfg]).unwrap();
    let copy = colloc_core::lastgood::path(&path);
    let good = std::fs::read(&path).unwrap();
    assert_eq!(std::fs::read(&copy).unwrap(), good);
    // The admin pushes a typo.
    std::fs::write(
        &path,
        "version = 1\nstate_dir = \"/elsewhere\"\nbogus = 2\n",
    )
    .unwrap();
    h.opt = Ok(Some(b"mps".to_vec()));
    // The prolog does not fail (a failing prolog drains the node) ...
    job_prolog(&mut h, &[&cfg]).unwrap();
    // ... the job's tasks fail with the parse error, FILE:LINE:COL.
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    let want = format!(
        "job 7 cannot run: --colloc=mps: colloc is not available on this node, its \
         configuration is broken: {}:3:1: unknown field `bogus`",
        path.display()
    );
    assert!(e.starts_with(&want), "{e}");
    assert!(e.contains("colloc check-config"), "{e}");
    // The broken text never replaces the good copy.
    assert_eq!(std::fs::read(&copy).unwrap(), good);
    // The epilog restores with the good copy's state_dir: a journal there is read
    // (this one is unreadable, so the epilog says so and names it).
    let jobs = dir.path().join("state/jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::write(jobs.join("7.json"), "not json").unwrap();
    let e = job_epilog(&mut h, &[&cfg]).unwrap_err();
    assert!(
        e.contains(&dir.path().join("state").display().to_string()),
        "{e}"
    );
    std::fs::remove_file(jobs.join("7.json")).unwrap();
    job_epilog(&mut h, &[&cfg]).unwrap();
}

#[test]
fn switched_off_refuses_new_jobs_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "enabled = false\n");
    let mut h = FakeHost {
        opt: Ok(Some(b"mps".to_vec())),
        env: vec![("SLURM_JOB_ID", "9".into()), ("SLURM_JOB_GPUS", "0".into())],
        set: vec![],
    };
    // No NVML is loaded (the bogus library would fail), nothing is recorded.
    job_prolog(&mut h, &[&cfg]).unwrap();
    assert!(!dir.path().join("state/jobs/9.json").exists());
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    assert!(
        e.starts_with("job 9 cannot run: --colloc=mps: colloc is switched off here for now (enabled = false in "),
        "{e}"
    );
    job_epilog(&mut h, &[&cfg]).unwrap();
    // At submission too, where the config is readable.
    let path = dir.path().join("colloc.toml");
    let e = check_at_submission(b"mps:2", &path).unwrap_err();
    assert!(e.contains("colloc is switched off here for now"), "{e}");
    check_at_submission(b"off", &path).unwrap();
}

/// A [`FakeHost`] in a job's extern step.
struct ExternHost(FakeHost);

impl Host for ExternHost {
    fn register_option(&mut self, usage: &str) -> Result<(), String> {
        self.0.register_option(usage)
    }
    fn getopt(&self) -> Result<Option<Vec<u8>>, String> {
        self.0.getopt()
    }
    fn job_id(&self) -> Result<u32, String> {
        self.0.job_id()
    }
    fn job_uid(&self) -> Result<u32, String> {
        self.0.job_uid()
    }
    fn job_gid(&self) -> Result<u32, String> {
        self.0.job_gid()
    }
    fn setenv(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.0.setenv(name, value)
    }
    fn env(&self, name: &str) -> Option<String> {
        self.0.env(name)
    }
    fn step_id(&self) -> Result<u32, String> {
        Ok(EXTERN_STEP)
    }
}

#[test]
fn task_post_fork_acts_only_in_the_extern_step_and_never_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let host = || FakeHost {
        opt: Ok(None),
        env: vec![("SLURM_JOB_ID", "7".into())],
        set: vec![],
    };
    // Any other step (batch, srun steps): nothing, whatever the arguments.
    task_post_fork(&mut host(), &["bogus=1"]).unwrap();
    let mut ext = ExternHost(host());
    // The extern step reads its plugstack arguments: bad ones are an error there.
    let e = task_post_fork(&mut ext, &["bogus=1"]).unwrap_err();
    assert!(e.contains("bogus"), "{e}");
    // No colloc.toml, a broken one, or no journal for the job: nothing, no failure
    // (a failing extern step would fail the job's setup).
    let missing = format!("config={}/missing.toml", dir.path().display());
    task_post_fork(&mut ext, &[&missing]).unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "version = 1\nbogus = 2\n").unwrap();
    task_post_fork(&mut ext, &[&format!("config={}", broken.display())]).unwrap();
    task_post_fork(&mut ext, &[&cfg]).unwrap();
    assert!(ext.0.set.is_empty());
    assert!(!dir.path().join("state/jobs/7.json").exists());
}

#[test]
fn hostile_values_in_the_prolog_do_not_fail_it_but_fail_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let mut h = FakeHost {
        opt: Ok(Some(b"mig:$(reboot)".to_vec())),
        env: vec![("SLURM_JOB_ID", "8".into()), ("SLURM_JOB_GPUS", "0".into())],
        set: vec![],
    };
    job_prolog(&mut h, &[&cfg]).unwrap();
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    assert!(
        e.starts_with("job 8 cannot run: --colloc: invalid mode"),
        "{e}"
    );
}

#[test]
fn an_unsafe_state_dir_fails_the_job_not_the_node() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut h = FakeHost {
        opt: Ok(Some(b"mps".to_vec())),
        env: vec![
            ("SLURM_JOB_ID", "12".into()),
            ("SLURM_JOB_GPUS", "0".into()),
            ("SLURM_JOB_UID", "0".into()),
        ],
        set: vec![],
    };
    job_prolog(&mut h, &[&cfg]).unwrap();
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    assert!(e.starts_with("job 12 cannot run: "), "{e}");
    assert!(e.contains("mode 0777"), "{e}");
    assert!(
        h.set.is_empty(),
        "a forged environment must not reach the task"
    );
    job_epilog(&mut h, &[&cfg]).unwrap();
    // A file of someone else's at the journal's place: a forgery, ignored.
    std::fs::create_dir(state.join("jobs")).unwrap();
    std::fs::write(state.join("jobs/12.json"), "{}").unwrap();
    if colloc_core::sys::euid() == 0 {
        std::os::unix::fs::chown(state.join("jobs/12.json"), Some(65534), None).unwrap();
        job_epilog(&mut h, &[&cfg]).unwrap();
        std::os::unix::fs::chown(state.join("jobs/12.json"), Some(0), None).unwrap();
    }
    // A journal of root's there: its GPUs' state is unknown.
    let e = job_epilog(&mut h, &[&cfg]).unwrap_err();
    assert!(e.contains("cannot be trusted"), "{e}");
}

#[test]
fn an_unsafe_config_is_not_used_by_root() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let file = dir.path().join("colloc.toml");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut h = FakeHost {
        opt: Ok(Some(b"mps".to_vec())),
        env: vec![
            ("SLURM_JOB_ID", "13".into()),
            ("SLURM_JOB_GPUS", "0".into()),
        ],
        set: vec![],
    };
    let e = job_prolog(&mut h, &[&cfg]).unwrap_err();
    assert!(e.contains("mode 0666"), "{e}");
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    assert!(e.contains("mode 0666"), "{e}");
    // Jobs that asked for nothing are not held up by it.
    h.opt = Ok(None);
    job_prolog(&mut h, &[&cfg]).unwrap();
    job_epilog(&mut h, &[&cfg]).unwrap();
}

#[test]
fn a_missing_prolog_record_fails_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let mut h = FakeHost {
        opt: Ok(Some(b"mps".to_vec())),
        env: vec![("SLURM_JOB_ID", "9".into())],
        set: vec![],
    };
    let e = task_init_privileged(&mut h, &[&cfg]).unwrap_err();
    assert!(e.contains("no record of this job's prolog"), "{e}");
    // A prolog that cannot load NVML is a node fault.
    h.env.push(("SLURM_JOB_GPUS", "0".into()));
    h.env.push(("SLURM_JOB_UID", "0".into()));
    let e = job_prolog(&mut h, &[&cfg]).unwrap_err();
    assert!(e.starts_with("job 9: "), "{e}");
    assert!(e.contains("/nonexistent/libnvidia-ml.so.1"), "{e}");
}
