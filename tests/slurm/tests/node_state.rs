//! Issue 34 on real Slurm nodes (two nodes, two fake GPUs each: an H100 and an A100): a
//! GPU whose MIG mode does not fit the job is never handed out silently; an epilog killed
//! with slurmd at each step of its restore is finished by the next prolog, a plain job's
//! as much as a colloc job's; the `[mig]` hooks pause node-wide monitoring once for two
//! concurrent MIG jobs and resume it after the last; a MIG change the driver answers
//! "in use" for names Slurm's GPU accounting.

use std::path::{Path, PathBuf};

use colloc_slurm_tests::{repo_root, run_suite_on, Cluster, ClusterSpec, Node, Test};
use serde_json::Value;

fn main() {
    let spec = ClusterSpec::new(2, 2).models(Some("H100-80GB,A100-40GB"));
    let tests: &[Test] = &[
        (
            "a_plain_job_on_a_gpu_in_mig_mode_is_told_at_start_and_runs",
            plain_job_told,
        ),
        (
            "naive_and_mps_on_a_gpu_in_mig_mode_get_mig_off_on_hopper_or_are_refused",
            non_mig_jobs_on_mig_gpus,
        ),
        (
            "a_mig_change_answered_in_use_names_slurm_s_gpu_accounting",
            held_nvml_named,
        ),
        (
            "an_epilog_killed_with_slurmd_at_each_restore_step_is_finished_by_the_next_job",
            interrupted_epilogs,
        ),
        (
            "two_mig_jobs_on_one_node_pause_monitoring_once_and_the_last_resumes_it",
            node_wide_hooks,
        ),
    ];
    run_suite_on(&spec, tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// colloc.toml changed for one test, put back on drop.
struct Config {
    path: PathBuf,
    original: String,
}

impl Config {
    fn with(c: &Cluster, edit: impl FnOnce(&str) -> String) -> Config {
        let path = c.colloc_config();
        let original = std::fs::read_to_string(&path).unwrap();
        let changed = edit(&original);
        assert_ne!(changed, original, "the edit changed nothing");
        std::fs::write(&path, changed).unwrap();
        Config { path, original }
    }
    /// `allow_mig_mode_change = true`, and `extra` added to the `[mig]` table.
    fn mode_change(c: &Cluster, extra: &str) -> Config {
        Config::with(c, |t| {
            format!(
                "{}{extra}\n",
                t.replace(
                    "allow_mig_mode_change = false",
                    "allow_mig_mode_change = true"
                )
            )
        })
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.original);
    }
}

fn set_mig(n: &Node, gpu: u32, on: bool) {
    let out = n.fake_ctl(&[
        "set-mig",
        "--gpu",
        &gpu.to_string(),
        if on { "on" } else { "off" },
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn mig_current(n: &Node, gpu: usize) -> bool {
    n.fake_state()["gpus"][gpu]["mig_current"] == Value::Bool(true)
}

/// What a CUDA program given `visible` would find on node `n` (the fake's CUDA probe).
fn cuda_devices(n: &Node, visible: &str) -> Vec<String> {
    let out = n.fake_ctl(&["cuda-devices", "--visible", visible]);
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The node in service with no journal and no MIG instance, both GPUs in `mig` mode.
fn assert_whole(n: &Node, mig: [bool; 2]) {
    assert_eq!(n.state(), "idle", "{}: {}", n.name(), n.reason());
    assert!(n.journals().is_empty(), "journals left: {:?}", n.journals());
    assert!(
        n.mig_uuids().is_empty(),
        "instances left: {:?}",
        n.mig_uuids()
    );
    for (g, want) in mig.iter().enumerate() {
        assert_eq!(mig_current(n, g), *want, "{}: GPU {g} MIG mode", n.name());
    }
}

/// A job on `node` that signals it runs, then waits for the test's go-ahead.
fn gated(c: &Cluster, node: &str, args: &[&str], name: &str) -> (u32, PathBuf) {
    let jobs = c.jobs_dir();
    let (ready, go) = (
        jobs.join(format!("{name}-ready")),
        jobs.join(format!("{name}-go")),
    );
    let script = format!(
        "touch {}\nwhile [ ! -e {} ]; do sleep 0.1; done",
        ready.display(),
        go.display()
    );
    let mut all = vec!["-w", node];
    all.extend_from_slice(args);
    let id = c.submit(&all, &script);
    c.wait_until(&format!("job {id} to run"), || ready.exists().then_some(()));
    (id, go)
}

fn plain_job_told(c: &Cluster) {
    let n1 = c.node("n1");
    set_mig(&n1, 0, true);
    set_mig(&n1, 1, false);
    // CUDA finds no whole GPU in MIG mode: the fake's probe answers as the driver does.
    assert!(cuda_devices(&n1, "0").is_empty());
    assert_eq!(cuda_devices(&n1, "1").len(), 1);
    let id = c.submit(&["-w", "n1", "--gres=gpu:2"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("GPU(s) 0 (NVIDIA H100 80GB HBM3") && err.contains("MIG mode"),
        "the plain job was not told: {err}"
    );
    // Told about GPU 0 only, and nothing for a job on whole GPUs.
    assert!(!err.contains("A100"), "{err}");
    set_mig(&n1, 0, false);
    let id = c.submit(&["-w", "n1", "--gres=gpu:2"], "echo RAN");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    assert!(!c.job_err(id).contains("MIG mode"), "{}", c.job_err(id));
    assert_whole(&n1, [false, false]);
}

fn non_mig_jobs_on_mig_gpus(c: &Cluster) {
    let n1 = c.node("n1");
    set_mig(&n1, 0, true);
    set_mig(&n1, 1, false);
    // Not allowed to switch: refused with a line naming the mig way, node in service.
    let id = c.submit(&["-w", "n1", "--gres=gpu:2", "--colloc=mps:4"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("allow_mig_mode_change = false") && err.contains("mig:7g:mps"),
        "{err}"
    );
    assert_whole(&n1, [true, false]);

    // Allowed, on a Hopper: MIG off for the job, on again after it.
    let _cfg = Config::mode_change(c, "");
    let (id, go) = gated(c, "n1", &["--gres=gpu:2", "--colloc=mps:4"], "mps-on-mig");
    assert!(!mig_current(&n1, 0), "MIG still on while the mps job runs");
    assert_eq!(
        cuda_devices(&n1, "0").len(),
        1,
        "no CUDA device for the job"
    );
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert_whole(&n1, [true, false]);

    // An A100 in MIG mode changes mode only with a reset: refused, naming it.
    set_mig(&n1, 0, false);
    set_mig(&n1, 1, true);
    let id = c.submit(&["-w", "n1", "--gres=gpu:2", "--colloc=naive"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("GPU 1 (NVIDIA A100-SXM4-40GB)")
            && err.contains("GPU reset")
            && err.contains("--colloc=mig:7g"),
        "{err}"
    );
    assert_whole(&n1, [false, true]);
    set_mig(&n1, 1, false);
}

fn held_nvml_named(c: &Cluster) {
    let n1 = c.node("n1");
    set_mig(&n1, 0, true);
    set_mig(&n1, 1, false);
    let _cfg = Config::mode_change(c, "retry_s = 1");
    n1.fake_ctl(&[
        "fault",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "--times",
        "0",
        "--code",
        "NVML_ERROR_IN_USE",
    ]);
    let id = c.submit(&["-w", "n1", "--gres=gpu:1", "--colloc=mig:3g"], "echo RAN");
    let end = c.wait_done(id);
    n1.fake_ctl(&["clear-faults"]);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(err.contains("NVML is held"), "{err}");
    // The production profile gathers job accounting (JobAcctGatherType=jobacct_gather/cgroup
    // with no DisableGPUAcct): named, with its slurm.conf; elsewhere the setting to look for.
    assert!(
        err.contains("JobAcctGatherParams=DisableGPUAcct"),
        "the setting is not named: {err}"
    );
    if c.profile().production() {
        assert!(
            err.contains("Slurm's GPU accounting in each job's slurmstepd")
                && err.contains("slurm.conf has a JobAcctGatherType"),
            "not read from slurm.conf: {err}"
        );
    }
    assert_whole(&n1, [true, false]);
    set_mig(&n1, 0, false);
}

/// Wait until node `n`'s fake driver holds a caller in a `stall` fault.
fn wait_stalled(c: &Cluster, n: &Node, step: &str) {
    c.wait_until(&format!("the epilog to reach {step}"), || {
        (n.fake_state()["stalled"] == Value::Bool(true)).then_some(())
    });
}

/// A MIG job (MIG switched on for it) whose epilog is killed with slurmd at `step` (an
/// NVML call held there), slurmd started again: the node is back in service with the
/// job's instances and journal still there.
fn kill_epilog_at(c: &Cluster, step: &str, mode: &str) -> u32 {
    let n1 = c.node("n1");
    let tag = format!("kill-{step}{}", mode.replace([':', '='], "-"));
    let (id, go) = gated(c, "n1", &["--gres=gpu:2", mode], &tag);
    assert!(
        !n1.mig_uuids().is_empty(),
        "no instances made for {mode}: {}",
        c.job_err(id)
    );
    n1.fake_ctl(&["fault", step, "--code", "stall"]);
    std::fs::write(&go, "").unwrap();
    wait_stalled(c, &n1, step);
    n1.crash();
    n1.fake_ctl(&["go"]);
    n1.fake_ctl(&["clear-faults"]);
    n1.start_again();
    let end = c.wait_done(id);
    println!("  epilog killed at {step}: job {id} {}", end.state);
    assert_eq!(n1.journals().len(), 1, "the journal of job {id} is gone");
    assert!(
        mig_current(&n1, 0),
        "the GPU is not left reconfigured: no test"
    );
    id
}

fn interrupted_epilogs(c: &Cluster) {
    let n1 = c.node("n1");
    set_mig(&n1, 0, false);
    set_mig(&n1, 1, false);
    let _cfg = Config::mode_change(c, "");
    for step in [
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
        "nvmlDeviceSetMigMode",
    ] {
        // A plain job next: its prolog finishes the restore; it gets whole GPUs.
        kill_epilog_at(c, step, "--colloc=mig:3g");
        let id = c.submit(&["-w", "n1", "--gres=gpu:2"], "echo RAN");
        let end = c.wait_done(id);
        assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
        assert!(
            !c.job_err(id).contains("MIG mode"),
            "the plain job got a GPU in MIG mode: {}",
            c.job_err(id)
        );
        assert_whole(&n1, [false, false]);
        assert_eq!(cuda_devices(&n1, "0,1").len(), 2);
    }
    // A colloc job next, after an epilog killed in the MPS-in-MIG case.
    kill_epilog_at(c, "nvmlGpuInstanceDestroy", "--colloc=mig:3g:mps");
    let id = c.submit(
        &["-w", "n1", "--gres=gpu:2", "--colloc=naive"],
        "echo DEVICES=$COLLOC_DEVICES",
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(c.job_out(id).contains("DEVICES=GPU-"), "{}", c.job_out(id));
    assert_whole(&n1, [false, false]);
    let log = n1.slurmd_log_tail(400);
    assert!(
        log.contains("ended with its restore unfinished"),
        "the prolog did not say what it finished"
    );
}

/// A stand-in `systemctl` that logs its calls (with the hook's phase) and says every
/// service is active.
fn systemctl_standin(c: &Cluster) -> (PathBuf, PathBuf) {
    let calls = c.dir().join("node-state-systemctl-calls");
    let standin = c.dir().join("node-state-systemctl");
    std::fs::write(
        &standin,
        format!(
            "#!/bin/sh\necho \"$* $COLLOC_HOOK $COLLOC_ACTION $COLLOC_JOB_ID\" >> {}\n",
            calls.display()
        ),
    )
    .unwrap();
    chmod(&standin, 0o755);
    (standin, calls)
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

fn node_wide_hooks(c: &Cluster) {
    let n2 = c.node("n2");
    set_mig(&n2, 0, true);
    set_mig(&n2, 1, true);
    let hook = repo_root().join("slurm-conf/examples/colloc-dcgm-hook");
    let (standin, calls) = systemctl_standin(c);
    let argv = format!(
        "[\"{}\", \"--systemctl\", \"{}\", \"--state-dir\", \"{}\"]",
        hook.display(),
        standin.display(),
        c.dir().join("node-state-hook").display()
    );
    let _cfg = Config::with(c, |t| format!("{t}pre_hook = {argv}\npost_hook = {argv}\n"));
    let calls_now = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                // The job id varies: keep the call, the phase and the action.
                l.rsplit_once(' ').map_or(l, |(a, _)| a).to_string()
            })
            .collect::<Vec<_>>()
    };
    // Two MIG jobs on one node, one GPU each, whose reconfigurations overlap: B's prolog
    // is held in the driver while A's epilog runs.
    let pause = [
        "is-active --quiet dcgm-exporter pre create",
        "stop dcgm-exporter pre create",
    ];
    let (a, go_a) = gated(c, "n2", &["--gres=gpu:1", "--colloc=mig:3g"], "hooks-a");
    assert_eq!(
        calls_now(),
        [&pause[..], &["start dcgm-exporter post create"]].concat()
    );
    std::fs::remove_file(&calls).unwrap();
    n2.fake_ctl(&[
        "fault",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "--code",
        "stall",
    ]);
    let b = c.submit(
        &["-w", "n2", "--gres=gpu:1", "--colloc=mig:3g"],
        &format!(
            "touch {0}/hooks-b-ready\nwhile [ ! -e {0}/hooks-b-go ]; do sleep 0.1; done",
            c.jobs_dir().display()
        ),
    );
    wait_stalled(c, &n2, "B's creates");
    assert_eq!(calls_now(), pause, "B's prolog did not pause monitoring");
    // A ends while B is creating instances: A's epilog neither pauses nor resumes.
    std::fs::write(&go_a, "").unwrap();
    assert_eq!(c.wait_done(a).state, "COMPLETED", "{}", c.job_err(a));
    assert_eq!(
        calls_now(),
        pause,
        "A's epilog touched monitoring while B was reconfiguring"
    );
    n2.fake_ctl(&["go"]);
    c.wait_until("B to run", || {
        c.jobs_dir().join("hooks-b-ready").exists().then_some(())
    });
    // B's reconfiguration was the last: it resumes.
    assert_eq!(
        calls_now(),
        [&pause[..], &["start dcgm-exporter post create"]].concat()
    );
    std::fs::write(c.jobs_dir().join("hooks-b-go"), "").unwrap();
    assert_eq!(c.wait_done(b).state, "COMPLETED", "{}", c.job_err(b));
    assert!(n2.journals().is_empty() && n2.mig_uuids().is_empty());

    // An epilog killed with slurmd mid-restore: monitoring stays paused until the next
    // prolog on that GPU finishes the restore, which resumes it.
    let (id, go) = gated(c, "n2", &["--gres=gpu:2", "--colloc=mig:3g"], "hooks-c");
    std::fs::remove_file(&calls).unwrap();
    n2.fake_ctl(&["fault", "nvmlGpuInstanceDestroy", "--code", "stall"]);
    std::fs::write(&go, "").unwrap();
    wait_stalled(c, &n2, "nvmlGpuInstanceDestroy");
    n2.crash();
    n2.fake_ctl(&["go"]);
    n2.fake_ctl(&["clear-faults"]);
    n2.start_again();
    c.wait_done(id);
    assert_eq!(
        calls_now(),
        [
            "is-active --quiet dcgm-exporter pre destroy",
            "stop dcgm-exporter pre destroy"
        ],
        "resumed without a restore"
    );
    let plain = c.submit(&["-w", "n2", "--gres=gpu:2"], "echo RAN");
    c.wait_done(plain);
    assert_eq!(
        calls_now().last().map(String::as_str),
        Some("start dcgm-exporter post destroy"),
        "{:?}",
        calls_now()
    );
    assert!(n2.journals().is_empty() && n2.mig_uuids().is_empty());
}
