//! Issue 24 on a real Slurm node with one fake A100 40GB: every driver answer of the
//! issue's table, injected once (as real drivers give them) or for good, and what must
//! hold after each: the node stays in service (`sinfo`: idle, not drained), the job's
//! outcome is what the case says, and the GPU is whole (no instance, no journal). Then
//! the cases the issue adds: a GPU that cannot be brought back for the node's plain jobs
//! drains the node with a reason naming the GPU, its holder and the clearing command;
//! admin hooks pause DCGM around a reconfiguration (the example hook, with a stand-in
//! systemctl); the device files of new instances; a root without the mig-config
//! capability.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use colloc_slurm_tests::{ensure_user, repo_root, run_suite, Cluster, Test};
use serde_json::Value;

fn main() {
    let tests: &[Test] = &[
        (
            "gi_create_insufficient_resources_once_is_retried",
            gi_insufficient_once,
        ),
        ("gi_create_unknown_once_is_retried", gi_unknown_once),
        ("ci_create_in_use_once_is_retried", ci_in_use_once),
        (
            "a_mig_device_listed_after_4_s_is_waited_for",
            listing_delayed,
        ),
        (
            "gi_destroy_unknown_once_at_epilog_is_retried",
            destroy_unknown_once,
        ),
        (
            "every_call_no_permission_refuses_mig_jobs_naming_the_capability",
            no_permission,
        ),
        (
            "mig_mode_off_in_use_once_at_epilog_is_retried",
            mode_off_in_use_once,
        ),
        (
            "a_create_the_driver_keeps_refusing_refuses_the_job_not_the_node",
            lasting_create_refusal,
        ),
        (
            "new_instances_get_their_device_files_and_a_missing_one_refuses_the_job",
            device_files,
        ),
        (
            "the_dcgm_hook_pauses_and_resumes_around_create_destroy_and_failure",
            dcgm_hook,
        ),
        (
            "a_gpu_left_broken_for_plain_jobs_drains_the_node_naming_gpu_holder_and_command",
            broken_for_plain_jobs,
        ),
        (
            "an_unknown_gpu_state_at_epilog_drains_with_colloc_s_reason_not_epilog_error",
            unknown_state_at_epilog,
        ),
        (
            "the_jobs_leftover_holding_an_instance_is_killed_at_epilog_and_the_gpu_restored",
            leftover_holder_killed,
        ),
    ];
    run_suite(1, Some("A100-40GB"), tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The node in service, nothing queued, the GPU whole: no instance, no journal.
fn assert_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert_eq!(c.squeue(), "");
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert!(c.instances(0).is_empty(), "GPU 0: {:?}", c.instances(0));
}

fn fired(c: &Cluster) -> Vec<String> {
    c.fake_state()["fired"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| format!("{} {}", f["function"].as_str().unwrap_or(""), f["code"]))
                .collect()
        })
        .unwrap_or_default()
}

/// colloc.toml with `extra` lines added to its `[mig]` table (the file's last table),
/// put back by [`Config::drop`].
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
    fn mig(c: &Cluster, extra: &str) -> Config {
        Config::with(c, |t| {
            assert!(t.contains("[mig]"), "no [mig] table: {t}");
            format!("{t}{extra}\n")
        })
    }
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

/// A job that signals it runs, then waits for the test's go-ahead before ending.
fn gated_job(c: &Cluster, args: &[&str]) -> (u32, PathBuf) {
    let jobs = c.jobs_dir();
    let script = format!(
        "echo \"SLOTS=$COLLOC_SLOTS\"\ntouch {0}/started-$SLURM_JOB_ID\n\
         while [ ! -e {0}/go-$SLURM_JOB_ID ]; do sleep 0.1; done",
        jobs.display()
    );
    let id = c.submit(args, &script);
    c.wait_for_file(id, &jobs.join(format!("started-{id}")));
    (id, jobs.join(format!("go-{id}")))
}

/// One answer once, at the prolog's creates: the job runs with its whole layout.
fn create_fault_once(c: &Cluster, function: &str, code: &str) {
    c.fake_ctl(&["fault", function, "--code", code]);
    let id = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:1"],
        "echo SLOTS=$COLLOC_SLOTS",
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(c.job_out(id).contains("SLOTS=2"), "{}", c.job_out(id));
    assert!(
        fired(c)
            .iter()
            .any(|f| f.contains(function) && f.contains(code)),
        "the fault fired: {:?}",
        fired(c)
    );
    assert!(
        c.slurmd_log_tail(400).contains(code),
        "the retry is logged with the driver's answer"
    );
    assert_clean(c);
}

fn gi_insufficient_once(c: &Cluster) {
    create_fault_once(
        c,
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "NVML_ERROR_INSUFFICIENT_RESOURCES",
    );
}

fn gi_unknown_once(c: &Cluster) {
    create_fault_once(
        c,
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "NVML_ERROR_UNKNOWN",
    );
}

fn ci_in_use_once(c: &Cluster) {
    create_fault_once(
        c,
        "nvmlGpuInstanceCreateComputeInstance",
        "NVML_ERROR_IN_USE",
    );
}

fn listing_delayed(c: &Cluster) {
    c.fake_ctl(&["quirks", "--mig-device-delay-ms", "4000"]);
    let id = c.submit(
        &["--colloc=mig:7g", "--gres=gpu:1"],
        "echo SLOTS=$COLLOC_SLOTS",
    );
    let end = c.wait_done(id);
    c.fake_ctl(&["quirks", "--mig-device-delay-ms", "0"]);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(c.job_out(id).contains("SLOTS=1"), "{}", c.job_out(id));
    assert_clean(c);
}

fn destroy_unknown_once(c: &Cluster) {
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:1"]);
    assert_eq!(c.instances(0).len(), 2);
    c.fake_ctl(&[
        "fault",
        "nvmlGpuInstanceDestroy",
        "--code",
        "NVML_ERROR_UNKNOWN",
    ]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(
        fired(c)
            .iter()
            .any(|f| f.contains("nvmlGpuInstanceDestroy")),
        "{:?}",
        fired(c)
    );
    // Both instances went, none stays marked.
    assert_clean(c);
}

fn no_permission(c: &Cluster) {
    // Root without /dev/nvidia-caps access (slurmd in a container): every privileged call
    // answers NO_PERMISSION.
    c.fake_ctl(&["unprivileged", "on"]);
    let before = c.gpu_layout();
    let id = c.submit(&["--colloc=mig:1g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    // naive needs a whole GPU (MIG off).
    let whole = c.whole_gpus();
    let naive = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN");
    let naive_end = c.wait_done(naive);
    drop(whole);
    let check = c.colloc(&["check-config"]);
    let status = c.colloc(&["status"]);
    c.fake_ctl(&["unprivileged", "off"]);

    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("NVML_ERROR_NO_PERMISSION")
            && err.contains("mig-config capability")
            && err.contains("nvidia-modprobe -f")
            && err.contains("capabilities/mig/config"),
        "stderr: {err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("cannot run")).count(),
        1,
        "one line: {err}"
    );
    // Jobs that make no instance run.
    assert_eq!(naive_end.state, "COMPLETED", "{}", c.job_err(naive));
    assert_eq!(c.gpu_layout(), before, "GPU untouched");
    // check-config and status say so too.
    let warn = text(&check.stderr);
    assert!(check.status.success(), "{warn}");
    assert!(
        warn.contains("refuses MIG control to root") && warn.contains("mig-config capability"),
        "check-config: {warn}"
    );
    let out = text(&status.stdout);
    assert!(
        out.contains("refused to root (NVML_ERROR_NO_PERMISSION)")
            && out.contains("mig jobs are refused"),
        "status: {out}"
    );
    assert_clean(c);
}

fn mode_off_in_use_once(c: &Cluster) {
    let _cfg = Config::mode_change(c, "");
    c.fake_ctl(&["set-mig", "--gpu", "0", "off"]);
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:1"]);
    assert_eq!(c.fake_state()["gpus"][0]["mig_current"], true);
    c.fake_ctl(&[
        "fault",
        "nvmlDeviceSetMigMode",
        "--code",
        "NVML_ERROR_IN_USE",
    ]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert!(
        fired(c).iter().any(|f| f.contains("nvmlDeviceSetMigMode")),
        "{:?}",
        fired(c)
    );
    assert_eq!(
        c.fake_state()["gpus"][0]["mig_current"],
        false,
        "MIG mode back off"
    );
    assert_clean(c);
    c.fake_ctl(&["set-mig", "--gpu", "0", "on"]);
}

fn lasting_create_refusal(c: &Cluster) {
    let _cfg = Config::mig(c, "retry_s = 2");
    let before = c.gpu_layout();
    // The second instance's compute instance: one GPU instance and its compute instance
    // are made first, so the undo has something to take back.
    c.fake_ctl(&[
        "fault",
        "nvmlGpuInstanceCreateComputeInstance",
        "--call",
        "2",
        "--times",
        "0",
        "--code",
        "NVML_ERROR_IN_USE",
    ]);
    let id = c.submit(&["--colloc=mig:3g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    c.fake_ctl(&["clear-faults"]);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("nvmlGpuInstanceCreateComputeInstance")
            && err.contains("NVML_ERROR_IN_USE")
            && err.contains("left as it was")
            && err.contains("an admin"),
        "stderr: {err}"
    );
    // All or nothing: the GPU as before, the node in service.
    assert_eq!(c.gpu_layout(), before);
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    // The refusal's journal goes with the epilog.
    assert_clean(c);
}

fn device_files(c: &Cluster) {
    let dev = c.dir().join("dev/nvidia-caps");
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:1"]);
    // GPU instances 1 and 2 (3g at slots 0 and 4) and their compute instances 0: minors
    // 3 + 9*gi and one more, as mig-minors says.
    for minor in [12u32, 13, 21, 22] {
        let f = dev.join(format!("nvidia-cap{minor}"));
        let m = std::fs::symlink_metadata(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        assert!(m.file_type().is_char_device(), "{}", f.display());
        assert_eq!(m.mode() & 0o777, 0o444, "the driver's mode");
        assert_eq!(m.rdev() & 0xff, u64::from(minor));
    }
    std::fs::write(go, b"").unwrap();
    assert_eq!(c.wait_done(id).state, "COMPLETED", "{}", c.job_err(id));
    assert_clean(c);

    // A driver that publishes no capability: the job is never started silently.
    c.fake_ctl(&["quirks", "--no-caps", "on"]);
    let id = c.submit(&["--colloc=mig:2g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    c.fake_ctl(&["quirks", "--no-caps", "off"]);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("no usable device file") && err.contains("publishes no capability"),
        "stderr: {err}"
    );
    assert_clean(c);
}

/// The example hook with a systemctl stand-in that records its calls and says every
/// service is active.
fn dcgm_hook(c: &Cluster) {
    let hook = repo_root().join("slurm-conf/examples/colloc-dcgm-hook");
    let calls = c.dir().join("systemctl-calls");
    let standin = c.dir().join("systemctl-standin");
    std::fs::write(
        &standin,
        format!(
            "#!/bin/sh\necho \"$* $COLLOC_HOOK $COLLOC_ACTION $COLLOC_RESULT\" >> {}\n",
            calls.display()
        ),
    )
    .unwrap();
    chmod(&standin, 0o755);
    let argv = format!(
        "[\"{}\", \"--systemctl\", \"{}\", \"--state-dir\", \"{}\"]",
        hook.display(),
        standin.display(),
        c.dir().join("hook-state").display()
    );
    let _cfg = Config::mig(
        c,
        &format!("pre_hook = {argv}\npost_hook = {argv}\nretry_s = 1"),
    );
    let check = c.colloc(&["check-config"]);
    assert!(check.status.success(), "{}", text(&check.stderr));

    let id = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:1"],
        "echo SLOTS=$COLLOC_SLOTS",
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert_clean(c);
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "is-active --quiet dcgm-exporter pre create ok",
            "stop dcgm-exporter pre create ok",
            "start dcgm-exporter post create ok",
            "is-active --quiet dcgm-exporter pre destroy ok",
            "stop dcgm-exporter pre destroy ok",
            "start dcgm-exporter post destroy ok",
        ],
        "{log}"
    );

    // A reconfiguration that fails: the post-hook runs all the same, told so.
    std::fs::remove_file(&calls).unwrap();
    c.fake_ctl(&[
        "fault",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "--times",
        "0",
        "--code",
        "NVML_ERROR_UNKNOWN",
    ]);
    let id = c.submit(&["--colloc=mig:7g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    c.fake_ctl(&["clear-faults"]);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        log.contains("stop dcgm-exporter pre create ok")
            && log.contains("start dcgm-exporter post create failed"),
        "{log}"
    );
    assert_clean(c);

    // A hook anyone could change is refused by check-config.
    chmod(&standin, 0o755);
    let loose = c.dir().join("loose-hook");
    std::fs::copy(&hook, &loose).unwrap();
    chmod(&loose, 0o777);
    let _cfg2 = Config::with(c, |t| {
        t.replace(&hook.display().to_string(), &loose.display().to_string())
    });
    let check = c.colloc(&["check-config"]);
    assert_eq!(check.status.code(), Some(2), "{}", text(&check.stderr));
    assert!(
        text(&check.stderr).contains("mig.pre_hook"),
        "{}",
        text(&check.stderr)
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// A stand-in for nv-hostengine: a process holding `file` open (O_PATH: the device
/// file has no driver behind it here).
fn hold_open(file: &Path) -> Child {
    hold_open_as(file, 0)
}

/// A process holding `file` open (O_PATH), then running as user `uid` (0: stays root).
fn hold_open_as(file: &Path, uid: u32) -> Child {
    Command::new("python3")
        .arg("-c")
        .arg(
            "import os, sys, time\nfd = os.open(sys.argv[1], os.O_PATH)\n\
             uid = int(sys.argv[2])\nif uid:\n    os.setgid(uid); os.setuid(uid)\n\
             print('held', flush=True)\ntime.sleep(600)",
        )
        .arg(file)
        .arg(uid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// Wait for a [`hold_open_as`] process to say it holds its file.
fn wait_held(holder: &mut Child) {
    use std::io::BufRead as _;
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
}

fn broken_for_plain_jobs(c: &Cluster) {
    // colloc switches MIG on for the job; the node's plain jobs expect a whole GPU.
    let _cfg = Config::mode_change(c, "");
    c.fake_ctl(&["set-mig", "--gpu", "0", "off"]);
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:1"]);
    // DCGM holds GPU instance 1 (no process NVML lists), and has its device file open.
    c.fake_ctl(&["hold", "--gpu", "0", "--gi", "1", "--name", "dcgm"]);
    let file = c.dir().join("dev/nvidia-caps/nvidia-cap12");
    let mut holder = hold_open(&file);
    wait_held(&mut holder);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    // colloc drained the node itself, with a reason, not Slurm's "Epilog error".
    let state = c.wait_until("the node to drain", || {
        let s = c.node_state();
        s.starts_with("drain").then_some(s)
    });
    let reason = c.node_reason();
    assert!(
        reason.contains("GPU 0")
            && reason.contains("GI 1")
            && reason.contains(&format!("pid {}", holder.id()))
            && reason.contains(&format!("colloc restore --job {id}"))
            && reason.contains("State=RESUME"),
        "{state}: {reason}"
    );
    assert!(!reason.contains("Epilog error"), "{reason}");
    let journal: Value = serde_json::from_str(
        &std::fs::read_to_string(c.journal_dir().join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(journal["held"][0]["breaks_plain_jobs"], true, "{journal}");

    // The admin's clearing: stop the holder, restore, resume.
    let _ = holder.kill();
    let _ = holder.wait();
    c.fake_ctl(&["release", "--gpu", "0", "--gi", "1"]);
    let r = c.colloc(&["restore", "--job", &id.to_string()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    resume(c);
    assert_eq!(c.fake_state()["gpus"][0]["mig_current"], false);
    assert_clean(c);
    c.fake_ctl(&["set-mig", "--gpu", "0", "on"]);
}

fn resume(c: &Cluster) {
    let node = c.node_names()[0].clone();
    let out = c
        .slurm("scontrol")
        .args(["update", &format!("NodeName={node}"), "State=RESUME"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_until("the node to be idle", || {
        (c.node_state() == "idle").then_some(())
    });
}

fn unknown_state_at_epilog(c: &Cluster) {
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:1"]);
    // An answer that is no busy GPU: the state of the GPU is unknown.
    c.fake_ctl(&[
        "fault",
        "nvmlGpuInstanceDestroy",
        "--code",
        "NVML_ERROR_GPU_IS_LOST",
    ]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    c.wait_until("the node to drain", || {
        c.node_state().starts_with("drain").then_some(())
    });
    let reason = c.node_reason();
    assert!(
        reason.contains(&format!("job {id}'s GPUs in an unknown state"))
            && reason.contains("NVML code 15")
            && reason.contains(&format!("colloc restore --job {id}")),
        "{reason}"
    );
    assert!(!reason.contains("Epilog error"), "{reason}");
    // The journal stays for the admin's restore, which now finishes.
    assert_eq!(c.journals().len(), 1);
    let r = c.colloc(&["restore", "--job", &id.to_string()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    resume(c);
    assert_clean(c);
}

/// A job's leftover (its user's process, outside Slurm's tracking, with the job's MIG
/// device file open and the instance held) makes the destroy answer IN_USE: the epilog
/// kills it through a pidfd and destroys again; the node stays in service.
fn leftover_holder_killed(c: &Cluster) {
    let (uid, gid) = ensure_user("colloc-leftover");
    let as_user = [format!("--uid={uid}"), format!("--gid={gid}")];
    let mut args = vec!["--colloc=mig:3g", "--gres=gpu:1"];
    args.extend(as_user.iter().map(String::as_str));
    let (id, go) = gated_job(c, &args);
    // GPU instance 1 (3g at slot 4 on the A100 40GB: minor 3 + 9*1), held by the job's
    // user's leftover.
    let file = c.dir().join("dev/nvidia-caps/nvidia-cap12");
    let mut leftover = hold_open_as(&file, uid);
    wait_held(&mut leftover);
    let pid = leftover.id().to_string();
    c.fake_ctl(&[
        "hold", "--gpu", "0", "--gi", "1", "--name", "leftover", "--pid", &pid,
    ]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    let mut gone = None;
    for _ in 0..100 {
        gone = leftover.try_wait().unwrap();
        if gone.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let Some(gone) = gone else {
        let _ = leftover.kill();
        let _ = leftover.wait();
        panic!("the leftover still runs: {}", c.node_reason());
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(gone.signal(), Some(libc::SIGKILL), "{gone:?}");
    assert!(
        c.fake_state()["gpus"][0]["holders"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{}",
        c.fake_state()
    );
    assert_clean(c);
}
