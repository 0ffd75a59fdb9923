//! The SPANK plugin on a real one-node Slurm cluster with one fake A100 40GB
//! (issue 3, "What it must show"). One cluster for the whole file; tests run in order.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use colloc_slurm_tests::{pid_alive, processes_of_pipe_dir, run_suite, Cluster, Test};

fn main() {
    let tests: &[Test] = &[
        ("help_lists_colloc", help_lists_colloc),
        (
            "hostile_values_rejected_before_queueing",
            hostile_values_rejected_before_queueing,
        ),
        (
            "modes_the_node_does_not_allow_rejected_at_submission",
            not_allowed_rejected,
        ),
        (
            "mig_3g_job_sees_two_instances_and_gpu_is_restored",
            mig_3g_job,
        ),
        ("mps_job_gets_private_daemon_removed_after", mps_job),
        ("naive_job_sees_gpu_uuid", naive_job),
        (
            "srun_and_salloc_jobs_configure_and_restore",
            srun_and_salloc,
        ),
        ("mig_4gx2_fails_job_not_node", mig_4gx2_refused),
        (
            "a_panic_in_the_plugin_fails_the_submission_or_task_only",
            plugin_panic_contained,
        ),
        (
            "job_without_gres_is_refused_with_a_clear_message",
            no_gres_refused,
        ),
        ("scancel_of_running_mig_1g_job_restores", scancel_restores),
        (
            "foreign_instances_refused_untouched",
            foreign_instances_refused,
        ),
        (
            "prolog_killed_half_way_is_undone_by_the_epilog",
            prolog_killed_half_way,
        ),
        (
            "a_jobs_running_runs_are_in_the_node_metrics_while_they_run",
            running_runs_in_metrics,
        ),
    ];
    // The time-limit test mostly waits for slurmctld's periodic check: it runs on its
    // own cluster while the others run.
    run_suite(
        1,
        None,
        tests,
        &[("time_limit_restores", time_limit_restores)],
    );
}

/// The plugin's environment dump: what a job saw.
const SHOW_ENV: &str = "env | grep -E '^(COLLOC_|CUDA_|SLURM_JOB_GPUS=)' | sort";

fn assert_idle_and_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.squeue(), "");
}

fn assert_no_instances(c: &Cluster) {
    for g in 0..c.gpus() {
        assert!(
            c.instances(g).is_empty(),
            "GPU {g} still has {:?}",
            c.instances(g)
        );
    }
}

fn help_lists_colloc(c: &Cluster) {
    for prog in ["sbatch", "srun", "salloc"] {
        let out = c.slurm(prog).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--colloc=MODE"), "{prog} --help:\n{help}");
        assert!(
            help.contains("mig:P[,P...]"),
            "{prog} --help lacks the modes:\n{help}"
        );
        assert!(
            help.contains("mps:N"),
            "{prog} --help lacks the modes:\n{help}"
        );
    }
}

fn hostile_values_rejected_before_queueing(c: &Cluster) {
    let marker = c.dir().join("pwned");
    let mut values: Vec<OsString> = [
        "",
        "mig:",
        "mps:0",
        "mps:49",
        "mig:0g",
        "mig:3gx0",
        "MIG:3G",
        "mig:3g;touch PWNED",
        "$(touch PWNED)",
        "`touch PWNED`",
        "mig:3g|touch PWNED",
        "mig:3g && touch PWNED",
        "../../../etc/passwd",
        "mig:../../etc/shadow",
        "mps\nmig:3g",
        "mïg:3g",
        "mig:3g\u{202e}",
        "💥",
        "off ",
        " naive",
        "mps:-1",
        "mig:3g,",
        "gpu",
    ]
    .iter()
    .map(|v| OsString::from(v.replace("PWNED", &marker.display().to_string())))
    .collect();
    values.push(OsString::from("a".repeat(10 * 1024)));
    values.push(OsString::from(format!("mig:{}", "1g,".repeat(3000))));
    values.push(OsString::from_vec(vec![b'm', b'p', b's', 0xff, 0xfe]));
    for v in values {
        let mut arg = OsString::from("--colloc=");
        arg.push(&v);
        let shown: String = v.to_string_lossy().chars().take(40).collect();
        match c.sbatch(&[arg.clone(), "--gres=gpu:1".into()], "true") {
            Ok(id) => panic!("sbatch --colloc={shown:?} was accepted as job {id}"),
            Err(out) => {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains("--colloc: invalid mode")
                        && err.contains("valid modes: off, naive, mps"),
                    "sbatch --colloc={shown:?}: {err}"
                );
                // One message line (plus Slurm's own lines), no control characters.
                let ours: Vec<&str> = err.lines().filter(|l| l.contains("invalid mode")).collect();
                assert_eq!(ours.len(), 1, "{err}");
                assert!(
                    !ours[0].contains('\u{202e}') && ours[0].len() < 600,
                    "{err}"
                );
            }
        }
        assert_eq!(c.squeue(), "", "a job was queued for --colloc={shown:?}");
        // srun and salloc fail the same way, before any allocation.
        for prog in ["srun", "salloc"] {
            let out = c.slurm(prog).arg(&arg).arg("true").output().unwrap();
            assert!(!out.status.success(), "{prog} --colloc={shown:?} succeeded");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("--colloc: invalid mode"), "{prog}: {err}");
        }
    }
    assert!(!marker.exists(), "a hostile value ran a command");
    assert_idle_and_clean(c);
}

fn mig_3g_job(c: &Cluster) {
    let before = c.gpu_layout();
    let ctl = colloc_slurm_tests::fake_ctl();
    let script = format!("{SHOW_ENV}\n{} show\n", ctl.display());
    let id = c.submit(&["--colloc=mig:3g", "--gres=gpu:1"], &script);
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let vars = c.job_vars(id);
    assert_eq!(
        vars.get("COLLOC_MODE").map(String::as_str),
        Some("mig:3g.20gbx2"),
        "{vars:?}"
    );
    assert_eq!(
        vars.get("COLLOC_SLOTS").map(String::as_str),
        Some("2"),
        "{vars:?}"
    );
    let devices: Vec<&str> = vars["COLLOC_DEVICES"].split(',').collect();
    assert_eq!(devices.len(), 2, "{devices:?}");
    let out = c.job_out(id);
    for d in &devices {
        assert!(d.starts_with("MIG-"), "{d}");
        // The fake driver, as the job saw it, had exactly these instances.
        assert_eq!(
            out.matches(d).count(),
            2,
            "{d} not among the job's instances:\n{out}"
        );
    }
    // Slurm's own variable is left as Slurm set it.
    assert_eq!(
        vars.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0")
    );
    assert_no_instances(c);
    assert_eq!(c.gpu_layout(), before, "GPU not restored");
    assert_idle_and_clean(c);
    // colloc status agrees: nothing owned.
    let st = c.colloc(&["status", "--json"]);
    assert!(
        st.status.success(),
        "colloc status: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

fn mps_job(c: &Cluster) {
    let _whole = c.whole_gpus();
    let ready = c.jobs_dir().join("mps-ready");
    let go = c.jobs_dir().join("mps-go");
    let script = format!(
        "{SHOW_ENV}\n\
         echo PIPE_STAT=$(stat -c '%U:%a' \"$CUDA_MPS_PIPE_DIRECTORY\")\n\
         echo LOG_STAT=$(stat -c '%U:%a' \"$CUDA_MPS_LOG_DIRECTORY\")\n\
         echo DAEMON_PID=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\")\n\
         echo ME=$(id -un)\n\
         touch {ready}\n\
         while [ ! -e {go} ]; do sleep 0.1; done\n",
        ready = ready.display(),
        go = go.display()
    );
    // As an ordinary user: the pipe directory must be that user's, mode 0700.
    let id = c.submit(
        &[
            "--colloc=mps",
            "--gres=gpu:1",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let vars = c.job_vars(id);
    let pipe = vars
        .get("CUDA_MPS_PIPE_DIRECTORY")
        .cloned()
        .unwrap_or_default();
    assert!(
        Path::new(&pipe).starts_with(c.run_dir()),
        "pipe dir {pipe:?} not under {}: {vars:?}",
        c.run_dir().display()
    );
    assert!(
        pipe.contains(&id.to_string()),
        "pipe dir {pipe} is not per job"
    );
    assert_eq!(vars.get("ME").map(String::as_str), Some("nobody"));
    assert_eq!(
        vars.get("PIPE_STAT").map(String::as_str),
        Some("nobody:700"),
        "{vars:?}"
    );
    assert_eq!(
        vars.get("LOG_STAT").map(String::as_str),
        Some("nobody:700"),
        "{vars:?}"
    );
    assert_eq!(vars.get("COLLOC_MODE").map(String::as_str), Some("mps"));
    let daemon: u32 = vars["DAEMON_PID"].parse().expect("daemon pid");
    assert!(pid_alive(daemon), "MPS daemon not running");
    assert!(processes_of_pipe_dir(&pipe).contains(&daemon));
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(
        !Path::new(&pipe).exists(),
        "pipe directory {pipe} left behind"
    );
    assert!(!pid_alive(daemon), "MPS daemon {daemon} still runs");
    assert!(processes_of_pipe_dir(&pipe).is_empty());
    let leftovers: Vec<_> = std::fs::read_dir(c.run_dir())
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "left in run_dir: {leftovers:?}");
    assert_idle_and_clean(c);
}

fn naive_job(c: &Cluster) {
    let _whole = c.whole_gpus();
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], SHOW_ENV);
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let vars = c.job_vars(id);
    assert_eq!(vars.get("COLLOC_MODE").map(String::as_str), Some("naive"));
    let uuid = c.fake_state()["gpus"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(vars.get("COLLOC_DEVICES"), Some(&uuid), "{vars:?}");
    assert_idle_and_clean(c);
}

fn mig_4gx2_refused(c: &Cluster) {
    let before = c.gpu_layout();
    let id = c.submit(&["--colloc=mig:4gx2", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert_eq!(end.exit_code, "1:0", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the job's script ran");
    let err = c.job_err(id);
    assert!(err.contains("mig:4gx2 does not fit"), "stderr: {err}");
    assert!(err.contains("layouts that fit include"), "stderr: {err}");
    assert!(err.contains("mig:"), "stderr names no layout: {err}");
    assert_eq!(c.gpu_layout(), before, "the GPU was touched");
    assert_idle_and_clean(c);
}

/// Puts the cluster's plugstack.conf back however the test ends.
struct RestoreFile {
    path: std::path::PathBuf,
    text: String,
}

impl Drop for RestoreFile {
    fn drop(&mut self) {
        std::fs::write(&self.path, &self.text).expect("restore plugstack.conf");
    }
}

/// A panic inside the loaded plugin (forced with the `test_panic=` plugstack argument of
/// the test suite's own plugin build, `--features test-seams`) is caught at the FFI
/// boundary: sbatch reports it and exits normally without queueing the job; in
/// slurmstepd it fails that job's task with the message, and the node stays up and idle,
/// with no core dump of sbatch or slurmstepd. The plugin under test (the packaged one in
/// CI) refuses the argument.
fn plugin_panic_contained(c: &Cluster) {
    let _whole = c.whole_gpus();
    use std::os::unix::process::ExitStatusExt;
    let etc = c.dir().join("etc");
    let plugstack = etc.join("plugstack.conf");
    let live = std::fs::read_to_string(&plugstack).unwrap();
    let live = live.trim().to_string();
    assert!(live.starts_with("required "), "plugstack.conf: {live}");
    // The same line with the test-seams plugin in place of the one under test.
    let line = live.replacen(
        &colloc_slurm_tests::plugin_path().display().to_string(),
        &colloc_slurm_tests::test_seams_plugin()
            .display()
            .to_string(),
        1,
    );
    assert_ne!(
        line, live,
        "plugstack.conf does not name the plugin under test"
    );

    // sbatch with a plugstack line of its own, through a copy of slurm.conf so the daemons
    // keep the real plugstack.
    let sbatch_with = |name: &str, plugstack_line: &str| {
        let stack = etc.join(format!("plugstack-{name}.conf"));
        std::fs::write(&stack, format!("{plugstack_line}\n")).unwrap();
        let conf = std::fs::read_to_string(etc.join("slurm.conf")).unwrap();
        let conf: String = conf
            .lines()
            .map(|l| {
                if l.starts_with("PlugStackConfig=") {
                    format!("PlugStackConfig={}\n", stack.display())
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let slurm_conf = etc.join(format!("slurm-{name}.conf"));
        std::fs::write(&slurm_conf, conf).unwrap();
        c.slurm("sbatch")
            .env("SLURM_CONF", &slurm_conf)
            .args(["--colloc=naive", "--gres=gpu:1", "--wrap", "echo RAN"])
            .output()
            .unwrap()
    };
    // The plugin under test has no seam: test_panic= is an unknown argument there.
    let out = sbatch_with("release", &format!("{live} test_panic=option"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "sbatch queued the job: {err}");
    assert!(
        err.contains("unknown argument \"test_panic=option\"; valid: config=PATH, default=MODE"),
        "sbatch stderr: {err}"
    );
    assert_eq!(c.squeue(), "");

    // sbatch, the --colloc option callback of the test-seams plugin.
    let out = sbatch_with("panic", &format!("{line} test_panic=option"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), None, "sbatch died of a signal: {err}");
    assert!(!out.status.success(), "sbatch queued the job: {err}");
    assert!(
        err.contains("colloc: internal error in the --colloc option: test_panic=option"),
        "sbatch stderr: {err}"
    );
    assert_eq!(c.squeue(), "");

    // slurmstepd, task_init_privileged: the live plugstack.conf, for one job.
    let _restore = RestoreFile {
        path: plugstack.clone(),
        text: format!("{live}\n"),
    };
    std::fs::write(&plugstack, format!("{line} test_panic=task\n")).unwrap();
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    drop(_restore);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the job's script ran");
    let err = c.job_err(id);
    assert!(
        err.contains("colloc: internal error in slurm_spank_task_init_privileged: test_panic=task"),
        "job stderr: {err}"
    );
    assert_idle_and_clean(c);
    // The node still runs jobs with the plugin.
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    assert!(c.job_out(id).contains("RAN"));
    assert_idle_and_clean(c);
}

fn no_gres_refused(c: &Cluster) {
    let id = c.submit(&["--colloc=mig:3g"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(
        c.job_err(id).contains("--gres=gpu:N"),
        "stderr: {}",
        c.job_err(id)
    );
    assert_idle_and_clean(c);
}

fn scancel_restores(c: &Cluster) {
    let before = c.gpu_layout();
    let ready = c.jobs_dir().join("scancel-ready");
    let id = c.submit(
        &["--colloc=mig:1g", "--gres=gpu:1"],
        &format!("{SHOW_ENV}\ntouch {}\nsleep 300\n", ready.display()),
    );
    c.wait_for_file(id, &ready);
    assert_eq!(c.instances(0).len(), 7, "mig:1g should make 7 instances");
    assert_eq!(
        c.job_vars(id).get("COLLOC_SLOTS").map(String::as_str),
        Some("7")
    );
    assert_eq!(c.journals().len(), 1);
    let out = c.slurm("scancel").arg(id.to_string()).output().unwrap();
    assert!(out.status.success());
    let end = c.wait_done(id);
    assert_eq!(end.state, "CANCELLED", "{end:?}");
    assert_eq!(c.gpu_layout(), before, "GPU not restored after scancel");
    assert_idle_and_clean(c);
}

fn foreign_instances_refused(c: &Cluster) {
    c.fake_ctl(&["create-foreign", "--gpu", "0", "--profile", "3g.20gb"]);
    let before = c.gpu_layout();
    assert_eq!(c.instances(0).len(), 1);
    let id = c.submit(&["--colloc=mig:1g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("has MIG instances colloc does not own (3g.20gb at start 4"),
        "stderr: {err}"
    );
    assert!(!c.job_out(id).contains("RAN"));
    assert_eq!(
        c.gpu_layout(),
        before,
        "the other owner's instance was touched"
    );
    assert_idle_and_clean(c);
    c.reset_fake_gpus();
}

fn time_limit_restores(c: &Cluster) {
    let before = c.gpu_layout();
    let ready = c.jobs_dir().join("timeout-ready");
    let id = c.submit(
        &["--colloc=mig:1g", "--gres=gpu:1", "--time=5"],
        &format!("touch {}\nsleep 600\n", ready.display()),
    );
    c.wait_for_file(id, &ready);
    assert_eq!(c.instances(0).len(), 7);
    // Slurm's smallest limit is a minute; pulling the end time to now makes slurmctld's
    // own time-limit check (every 30 s) end the job as TIMEOUT, the same path as a job
    // that ran out of time. `now+5` (seconds): scontrol reads "now" from its own clock and
    // slurmctld refuses an end time already past by its own ("Invalid time specified",
    // seen when the second turned between the two).
    let out = c
        .slurm("scontrol")
        .args(["update", &format!("JobId={id}"), "EndTime=now+5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "TIMEOUT", "{end:?}");
    assert_eq!(
        c.gpu_layout(),
        before,
        "GPU not restored after the time limit"
    );
    assert_idle_and_clean(c);
}

fn srun_and_salloc(c: &Cluster) {
    let before = c.gpu_layout();
    // An interactive step: the prolog runs at allocation, the task gets the environment.
    let out = c
        .slurm("srun")
        .args([
            "--colloc=mig:3g",
            "--gres=gpu:1",
            "printenv",
            "COLLOC_SLOTS",
            "COLLOC_MODE",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "srun: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["2", "mig:3g.20gbx2"],
        "{stdout}"
    );
    // A refused step fails with the reason, srun exits non-zero.
    let out = c
        .slurm("srun")
        .args(["--colloc=mig:4gx2", "--gres=gpu:1", "echo", "RAN"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "srun of a refused job succeeded");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"));
    assert!(
        stderr.contains("mig:4gx2 does not fit"),
        "srun stderr: {stderr}"
    );
    // salloc with no step at all: with PrologFlags=Alloc the prolog still runs, and the
    // epilog restores when the allocation ends.
    let snapshot = c.jobs_dir().join("salloc-state.json");
    let probe = format!(
        "{} --state {} show --json >{}",
        colloc_slurm_tests::fake_ctl().display(),
        c.fake_state_path().display(),
        snapshot.display()
    );
    let out = c
        .slurm("salloc")
        .args(["--colloc=mig:1g", "--gres=gpu:1", "sh", "-c", &probe])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "salloc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let during: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&snapshot).unwrap()).unwrap();
    let gis = during["gpus"][0]["gis"].as_array().map_or(0, Vec::len);
    assert_eq!(gis, 7, "MIG instances during the salloc");
    c.wait_until("the salloc job's epilog", || {
        (c.squeue().is_empty() && c.node_state() == "idle" && c.journals().is_empty()).then_some(())
    });
    assert_eq!(c.gpu_layout(), before, "GPU not restored after salloc");
    assert_idle_and_clean(c);
}

fn not_allowed_rejected(c: &Cluster) {
    let path = c.colloc_config();
    let original = std::fs::read_to_string(&path).unwrap();
    let only_mps = original.replace(
        "allowed_modes = [\"naive\", \"mps\", \"mig\"]",
        "allowed_modes = [\"mps\"]",
    );
    assert_ne!(
        only_mps, original,
        "test config has no allowed_modes line to change"
    );
    std::fs::write(&path, only_mps).unwrap();
    let refused = c.sbatch(&["--colloc=mig:3g", "--gres=gpu:1"], "true");
    let accepted_off = c.sbatch(&["--colloc=off", "--hold"], "true");
    // MPS inside MIG instances (issue 29) needs mig allowed as well as mps.
    let refused_mig_mps = c.sbatch(&["--colloc=mig:3g:mps:2", "--gres=gpu:1"], "true");
    std::fs::write(&path, original).unwrap();
    let err = refused.expect_err("mig accepted though only mps is allowed");
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(
        err.contains("--colloc: mode mig:3g is not allowed on this cluster; allowed: off, mps"),
        "{err}"
    );
    let err = refused_mig_mps.expect_err("mig:3g:mps:2 queued though mig is not allowed");
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(
        err.contains(
            "--colloc: mode mig:3g:mps:2 (MPS inside MIG instances) needs both mig and mps \
             allowed on this cluster, and mig is not"
        ),
        "{err}"
    );
    let held = accepted_off.expect("--colloc=off is always allowed");
    c.slurm("scancel").arg(held.to_string()).status().unwrap();
    c.wait_until("the held job to go", || c.squeue().is_empty().then_some(()));
    assert_idle_and_clean(c);
}

fn prolog_killed_half_way(c: &Cluster) {
    let before = c.gpu_layout();
    // The prolog process dies (SIGKILL inside NVML) while creating the second instance:
    // one instance exists and the journal says "applying".
    c.fake_ctl(&[
        "fault",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "--call",
        "2",
        "--code",
        "crash",
    ]);
    let id = c.submit(&["--colloc=mig:3g", "--gres=gpu:1"], "echo RAN");
    // A dead prolog is a node fault: Slurm drains the node and holds the job; the
    // epilog Slurm runs for it restores the GPU from the journal.
    c.wait_until("the node to drain", || {
        c.node_state().contains("drain").then_some(())
    });
    c.wait_until("the epilog to restore the GPU", || {
        (c.journals().is_empty() && c.instances(0).is_empty()).then_some(())
    });
    assert_eq!(c.node_reason(), "Prolog error");
    assert!(!c.job_out(id).contains("RAN"));
    assert_eq!(
        c.gpu_layout(),
        before,
        "GPU not restored after the prolog died"
    );
    let fired = c.fake_state()["fired"].as_array().map_or(0, Vec::len);
    assert_eq!(fired, 1, "the injected crash did not happen");
    c.slurm("scancel").arg(id.to_string()).status().unwrap();
    c.wait_until("the held job to go", || c.squeue().is_empty().then_some(()));
    c.resume_node();
    c.wait_until("the node to resume", || {
        (c.node_state() == "idle").then_some(())
    });
    c.reset_fake_gpus();
    assert_idle_and_clean(c);
}

/// `colloc run` in a `--colloc=naive` job serves its running runs; root's `colloc status
/// --format openmetrics` on the node shows them under the job's id, with their slot's
/// device (the job's GPU) and throughput, and no longer once the job ended (issue 38).
fn running_runs_in_metrics(c: &Cluster) {
    let _whole = c.whole_gpus();
    let dir = c.jobs_dir().join("live-metrics");
    std::fs::create_dir_all(&dir).unwrap();
    let stop = dir.join("stop");
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['sh', '-c', 'while [ ! -e {} ]; do echo img/s=12.5; sleep 0.2; done']\ngrid = {{ i = [1, 2] }}\n",
            stop.display()
        ),
    )
    .unwrap();
    let job = format!(
        "export COLLOC_CONFIG=/nonexistent/colloc.toml\ncd {}\nexec {} run -j 2 -q --grace 2s -f runs.toml\n",
        dir.display(),
        colloc_slurm_tests::colloc_bin().display()
    );
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], &job);
    let uuid = c.fake_state()["gpus"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let metrics = || {
        let out = c.colloc(&["status", "--format", "openmetrics"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = c.wait_until("both runs in the node's metrics", || {
        let t = metrics();
        (t.matches("\ncolloc_run_info{").count() == 2
            && t.matches("\ncolloc_run_throughput{").count() == 2)
            .then_some(t)
    });
    std::fs::write(&stop, "").unwrap();
    for run in ["r1", "r2"] {
        let line = text.lines().find(|l| {
            l.starts_with(&format!("colloc_run_info{{job=\"{id}\",slot=\""))
                && l.contains(&format!(",run=\"{run}\","))
        });
        assert!(
            line.is_some_and(|l| l.ends_with(&format!(",UUID=\"{uuid}\"}} 1"))),
            "{run}: {line:?}\n{text}"
        );
    }
    for slot in ["0", "1"] {
        let tp =
            format!("colloc_run_throughput{{job=\"{id}\",slot=\"{slot}\",unit=\"img/s\"}} 12.5");
        assert!(text.lines().any(|l| l == tp), "{tp}\n{text}");
    }
    assert!(
        text.contains(&format!("\ncolloc_job_runs_running{{job=\"{id}\"}} 2\n")),
        "{text}"
    );
    assert!(text.contains("\ncolloc_live_refused 0\n"), "{text}");
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let after = metrics();
    assert!(!after.contains("colloc_run_info{"), "{after}");
    assert_idle_and_clean(c);
}
