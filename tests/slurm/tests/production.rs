//! colloc on a production-configured node (issue 17), on a real one-node Slurm cluster with
//! two fake GPUs, under the profile of `COLLOC_CLUSTER_PROFILE` (CI runs it under both):
//! where the job's MPS daemons run and are charged (under the production profile: inside
//! the job container, in the extern step's cgroups, killed by Slurm with the job), what
//! they may open under `ConstrainDevices`, the epilog after a cancelled job, colloc's
//! paths inside directories a job container makes private, a `run_dir` the job's user
//! cannot reach, a node whose slurm.conf colloc cannot read, a daemon that does not start,
//! a requeued MPS job, a killed extern step, and `PrologFlags=Serial`. None of them may
//! drain the node. Under the simple profile the same jobs must simply work (no false
//! refusal).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use colloc_slurm_tests::{
    pid_alive, pid_mount_ns, pids_by_cmdline, processes_of_pipe_dir, run_suite_on, Cluster,
    ClusterSpec, Profile, Test,
};

/// The MPS part of an epilog (colloc_core::reconfig::MPS_RESTORE_BUDGET) plus the 5 s the
/// node record may take: the epilog of an MPS job never takes longer.
const EPILOG_BOUND: Duration = Duration::from_secs(25);

fn main() {
    let spec = ClusterSpec::new(1, 2);
    let tests: &[Test] = &[
        (
            "mps_daemons_run_where_the_tasks_run_and_a_cancel_stops_them",
            daemons_where_tasks_run,
        ),
        (
            "colloc_paths_a_job_container_hides_refuse_the_job_not_the_node",
            private_paths,
        ),
        (
            "a_run_dir_the_user_cannot_reach_refuses_the_job_not_the_node",
            unreachable_run_dir,
        ),
        (
            "without_slurm_conf_a_daemon_outside_the_container_is_refused_at_task_start",
            unreadable_slurm_conf,
        ),
        (
            "an_mps_daemon_that_does_not_start_refuses_the_job_not_the_node",
            failed_start,
        ),
        (
            "a_requeued_mps_job_gets_fresh_daemons_where_its_new_tasks_run",
            requeued,
        ),
        (
            "the_epilog_stops_the_daemons_of_a_killed_extern_step",
            killed_extern_step,
        ),
        (
            "a_later_job_of_the_same_user_lives_through_the_first_ones_epilog",
            later_job_of_the_same_user,
        ),
    ];
    run_suite_on(&spec, tests, &[]);
    // The profile's PrologFlags with Serial, on a cluster of its own.
    let flags = match spec.profile_of() {
        Profile::Simple => "Alloc,Serial",
        Profile::Production | Profile::ProductionV2 => "Alloc,Contain,Serial",
    };
    run_suite_on(
        &ClusterSpec::new(1, 2).prolog_flags(flags),
        &[],
        &[("prolog_flags_serial_mps_jobs_side_by_side", serial)],
    );
}

/// Puts a file back as it was when dropped (also when the test fails).
struct Restore {
    path: PathBuf,
    text: String,
    mode: u32,
}

impl Restore {
    fn keep(path: &Path) -> Restore {
        Restore {
            path: path.to_path_buf(),
            text: std::fs::read_to_string(path).unwrap(),
            mode: std::fs::metadata(path).unwrap().permissions().mode() & 0o7777,
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.text);
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode));
    }
}

/// Replace `key = …` in colloc.toml (keeping the rest).
fn set_key(c: &Cluster, key: &str, value: &str) {
    let path = c.colloc_config();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{key} =")))
        .map(str::to_string)
        .collect();
    // A top-level key goes before the first table (`[mig]`), or TOML puts it in there.
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .unwrap_or(lines.len());
    lines.insert(at, format!("{key} = \"{value}\""));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

fn assert_idle_and_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.squeue(), "");
    let left: Vec<PathBuf> = std::fs::read_dir(c.run_dir())
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in run_dir: {left:?}");
}

/// Lines of `/proc/PID/cgroup` as controller → path.
fn cgroups_of(pid: u32) -> Vec<(String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            Some((ctl.to_string(), path.to_string()))
        })
        .collect()
}

fn cgroup_of(pid: u32, ctl: &str) -> String {
    cgroups_of(pid)
        .into_iter()
        .find(|(c, _)| c.split(',').any(|x| x == ctl))
        .map(|(_, p)| p)
        .unwrap_or_default()
}

/// A `/proc/PID/status` field as a hex mask.
fn sig_mask(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

/// How opening `dev` fails for a process in the devices cgroup `devices`: "No such device
/// or address" where the cgroup allows it (no driver serves the fake GPU), "Operation not
/// permitted" where it denies it.
fn open_in_devices_cgroup(devices: &str, dev: &Path) -> String {
    let procs = format!("/sys/fs/cgroup/devices{devices}/cgroup.procs");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {procs} && {{ exec 3<>{} ; }} 2>&1; true",
            dev.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.rsplit(": ").next().unwrap_or("").trim().to_string()
}

/// An `--colloc=mps:2` job of user nobody on one of the node's two GPUs: its two daemon
/// processes (one per GPU of the job: one) run where its tasks run, with no signal
/// blocked or ignored. Under the production profile they run in the job's mount namespace
/// (they see a file a task made in the job's private /dev/shm), in the extern step's
/// freezer and memory cgroups (charged to the job), and may open the job's GPU and not the
/// other; the job is then cancelled: Slurm kills the daemons with the extern step, the
/// epilog finds nothing left within its budget, and the job's cgroups are gone. Under the
/// simple profile the daemon runs in slurmd's namespace, where the tasks are too, and the
/// epilog stops it after the cancel.
fn daemons_where_tasks_run(c: &Cluster) {
    let _whole = c.whole_gpus();
    let production = c.profile().production();
    let ready = c.jobs_dir().join("where-ready");
    let script = format!(
        "f=/dev/shm/colloc-prod-$SLURM_JOB_ID; touch $f\n\
         echo \"TASK $(readlink /proc/self/ns/mnt) $SLURM_JOB_GPUS $CUDA_MPS_PIPE_DIRECTORY\"\n\
         touch {}\nsleep 300\n",
        ready.display()
    );
    let id = c.submit(
        &[
            "--gres=gpu:1",
            "--colloc=mps:2",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let task: Vec<&str> = out
        .lines()
        .find_map(|l| l.strip_prefix("TASK "))
        .unwrap_or_else(|| panic!("no TASK line: {out}"))
        .split_whitespace()
        .collect();
    let (task_ns, gpu, pipe) = (task[0], task[1], task[2]);
    let daemons = processes_of_pipe_dir(pipe);
    assert_eq!(daemons.len(), 1, "one daemon for {pipe}: {daemons:?}");
    let daemon = daemons[0];
    let node = &c.nodes()[0];
    let slurmd_ns = node.mount_ns().unwrap();
    let daemon_ns = pid_mount_ns(daemon).unwrap();
    let shm = format!("/dev/shm/colloc-prod-{id}");
    let sees = Path::new(&format!("/proc/{daemon}/root{shm}")).exists();
    let freezer = cgroup_of(daemon, "freezer");
    let memory = cgroup_of(daemon, "memory");
    let devices = cgroup_of(daemon, "devices");
    let (blocked, ignored) = (sig_mask(daemon, "SigBlk"), sig_mask(daemon, "SigIgn"));
    println!(
        "  daemon {daemon}: mount namespace {daemon_ns} (tasks {task_ns}, slurmd {slurmd_ns}), \
         sees the task's {shm}: {sees}; freezer {freezer}, memory {memory}, devices {devices}; \
         signals blocked {blocked:x}, ignored {ignored:x}"
    );
    assert_eq!(daemon_ns, task_ns, "the daemon is not where the tasks are");
    assert!(sees, "the daemon does not see the tasks' /dev/shm");
    assert_eq!(blocked, 0, "the daemon has signals blocked");
    assert_eq!(
        ignored & (1 << (libc::SIGTERM - 1)),
        0,
        "the daemon ignores SIGTERM"
    );
    let me = c.nodes()[0].name().to_string();
    let nobody = String::from_utf8_lossy(
        &Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    let job_cg = format!("/slurm_{me}/uid_{nobody}/job_{id}");
    let dev = |i: &str| c.dir().join(format!("dev/fakegpu{i}"));
    let other = if gpu == "0" { "1" } else { "0" };
    if c.profile() == Profile::ProductionV2 {
        // cgroup v2: the extern step's leaf that Slurm kills with the step, and Slurm's
        // eBPF device program on the job's and the step's cgroups.
        assert_ne!(task_ns, slurmd_ns, "no job container");
        let cg = node.cgroup2_of(daemon).unwrap_or_default();
        assert_eq!(
            cg,
            format!("{}/step_extern/user/task_special", node.job_cgroup2(id)),
            "the daemon's cgroup"
        );
        let mine = node.open_in_cgroup2(&cg, &dev(gpu));
        let theirs = node.open_in_cgroup2(&cg, &dev(other));
        println!("  in the daemon's cgroup {cg}: its GPU {gpu}: {mine}; GPU {other}: {theirs}");
        assert_eq!(mine, "No such device or address", "the job's GPU");
        assert_eq!(theirs, "Operation not permitted", "another job's GPU");
    } else if production {
        assert_ne!(task_ns, slurmd_ns, "no job container");
        assert_eq!(freezer, format!("{job_cg}/step_extern"), "freezer cgroup");
        assert_eq!(memory, format!("{job_cg}/step_extern"), "memory cgroup");
        // What the daemon (and the MPS server it forks) may open: the job's GPU, not the
        // node's other one.
        let mine = open_in_devices_cgroup(&devices, &dev(gpu));
        let theirs = open_in_devices_cgroup(&devices, &dev(other));
        println!("  in the daemon's devices cgroup: its GPU {gpu}: {mine}; GPU {other}: {theirs}");
        assert_eq!(mine, "No such device or address", "the job's GPU");
        assert_eq!(theirs, "Operation not permitted", "another job's GPU");
    } else {
        assert_eq!(task_ns, slurmd_ns);
        let _ = std::fs::remove_file(&shm);
    }
    // Cancelled mid-run: the daemons go, and the epilog stays within its budget.
    let t = Instant::now();
    let cancel = c.slurm("scancel").arg(id.to_string()).status().unwrap();
    assert!(cancel.success());
    let end = c.wait_done(id);
    let took = t.elapsed();
    println!(
        "  cancelled: job {} and its epilog done {:.1}s after scancel",
        end.state,
        took.as_secs_f64()
    );
    assert_eq!(end.state, "CANCELLED", "{end:?}");
    assert!(took < EPILOG_BOUND, "epilog took {took:?}");
    assert!(!pid_alive(daemon), "daemon {daemon} outlived the job");
    assert!(processes_of_pipe_dir(pipe).is_empty());
    if c.profile() == Profile::ProductionV2 {
        let job = node.job_cgroup2(id);
        assert!(!node.has_cgroup2(&job), "the job's cgroup {job} stays");
    } else if production {
        let left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|ctl| ctl.path().join(job_cg.trim_start_matches('/')))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        assert!(left.is_empty(), "the job's cgroups stay: {left:?}");
    }
    assert_idle_and_clean(c);
}

/// colloc's files where a job container hides them from the job. `state_dir` inside the
/// container's BasePath: `colloc check-config` (exit 2) and the plugin refuse it, naming
/// it and the setting; the job fails with that on its stderr and the node stays in
/// service. colloc.toml itself under /tmp: the task says it is hidden, not missing. Under
/// the simple profile (no job container) both work.
fn private_paths(c: &Cluster) {
    let _whole = c.whole_gpus();
    let production = c.profile().production();
    let cfg = c.colloc_config();
    let _back = Restore::keep(&cfg);
    let base = c.dir().join("slurm/job-containers");
    std::fs::create_dir_all(&base).unwrap();
    let state = base.join("colloc-state");
    set_key(c, "state_dir", &state.display().to_string());
    let check = Command::new(colloc_slurm_tests::colloc_bin())
        .args(["check-config"])
        .arg(&cfg)
        .env("SLURM_CONF", c.dir().join("etc/slurm.conf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr).into_owned();
    let id = c.submit(&["--gres=gpu:1", "--colloc=naive"], "echo RAN");
    let end = c.wait_done(id);
    if production {
        assert_eq!(check.status.code(), Some(2), "check-config: {err}");
        for want in [
            format!("state_dir {} lies in {}", state.display(), base.display()),
            "JobContainerType=job_container/tmpfs makes private to each job".to_string(),
        ] {
            assert!(err.contains(&want), "check-config: {err}");
        }
        assert_eq!(end.state, "FAILED", "{end:?}");
        let job_err = c.job_err(id);
        assert!(
            job_err.contains(&format!("state_dir {} lies in", state.display())),
            "stderr: {job_err}"
        );
        assert!(!c.job_out(id).contains("RAN"));
    } else {
        assert_eq!(check.status.code(), Some(0), "check-config: {err}");
        assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    }
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    let _ = std::fs::remove_dir_all(&state);
    drop(_back);

    // colloc.toml itself under /tmp (the plugstack line names it).
    let plugstack = c.dir().join("etc/plugstack.conf");
    let _plug = Restore::keep(&plugstack);
    let tmp_cfg = tempfile::Builder::new()
        .prefix("prod-colloc-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(tmp_cfg.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let moved = tmp_cfg.path().join("colloc.toml");
    std::fs::copy(&cfg, &moved).unwrap();
    let text = std::fs::read_to_string(&plugstack).unwrap();
    std::fs::write(
        &plugstack,
        text.replace(
            &format!("config={}", cfg.display()),
            &format!("config={}", moved.display()),
        ),
    )
    .unwrap();
    let id = c.submit(&["--gres=gpu:1", "--colloc=naive"], "echo RAN");
    let end = c.wait_done(id);
    if production {
        assert_eq!(end.state, "FAILED", "{end:?}");
        let job_err = c.job_err(id);
        assert!(
            job_err.contains(&format!(
                "the node's colloc.toml {} lies in /tmp, which JobContainerType=job_container/tmpfs makes private",
                moved.display()
            )),
            "stderr: {job_err}"
        );
    } else {
        assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    }
    drop(_plug);
    assert_idle_and_clean(c);
}

/// A `run_dir` whose parent does not exist, or whose parent the job's user cannot pass
/// (mode 0700): check-config says so (exit 2) and an MPS job is refused with the reason on
/// its stderr, the node stays in service and nothing is made there.
fn unreachable_run_dir(c: &Cluster) {
    let _whole = c.whole_gpus();
    let cfg = c.colloc_config();
    let _back = Restore::keep(&cfg);
    let closed = c.dir().join("closed");
    std::fs::create_dir_all(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    for (run_dir, want) in [
        (
            c.dir().join("nowhere/run"),
            "does not exist; colloc makes run_dir itself",
        ),
        (closed.join("run"), "has mode 0700"),
    ] {
        set_key(c, "run_dir", &run_dir.display().to_string());
        let check = Command::new(colloc_slurm_tests::colloc_bin())
            .args(["check-config"])
            .arg(&cfg)
            .env("SLURM_CONF", c.dir().join("etc/slurm.conf"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&check.stderr).into_owned();
        assert_eq!(check.status.code(), Some(2), "{}: {err}", run_dir.display());
        assert!(err.contains(want), "{err}");
        let id = c.submit(
            &[
                "--gres=gpu:1",
                "--colloc=mps",
                "--uid=nobody",
                "--gid=nogroup",
            ],
            "echo RAN",
        );
        let end = c.wait_done(id);
        assert_eq!(end.state, "FAILED", "{end:?}");
        let job_err = c.job_err(id);
        assert!(job_err.contains(want), "stderr: {job_err}");
        assert!(!run_dir.exists(), "{} was made", run_dir.display());
        assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    }
    drop(_back);
    assert_idle_and_clean(c);
}

/// Where colloc cannot read slurm.conf (here: made writable by others, which colloc does
/// not trust), it cannot know of the job container and starts the daemons from the
/// prolog. Under the production profile they then run outside the job's namespace: the
/// task is refused with a message naming the setting, the node stays in service, nothing
/// is left. Under the simple profile the job runs.
fn unreadable_slurm_conf(c: &Cluster) {
    let _whole = c.whole_gpus();
    let conf = c.dir().join("etc/slurm.conf");
    let _back = Restore::keep(&conf);
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o666)).unwrap();
    let id = c.submit(
        &[
            "--gres=gpu:1",
            "--colloc=mps",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        "echo RAN",
    );
    let end = c.wait_done(id);
    drop(_back);
    if c.profile().production() {
        assert_eq!(end.state, "FAILED", "{end:?}");
        let err = c.job_err(id);
        for want in [
            "MPS daemons run in another mount namespace than its tasks",
            "JobContainerType=job_container/tmpfs",
            "PrologFlags=Contain",
        ] {
            assert!(err.contains(want), "stderr: {err}");
        }
    } else {
        assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
        assert!(c.job_out(id).contains("RAN"));
    }
    assert_idle_and_clean(c);
}

/// An MPS control program that cannot start its daemon (here a stand-in that says why
/// and fails): under the production profile it fails in the extern step, under the simple
/// one in the prolog. Either way the job fails with the program's own words on its stderr,
/// the node stays in service, no daemon runs and the epilog leaves nothing.
fn failed_start(c: &Cluster) {
    let _whole = c.whole_gpus();
    let cfg = c.colloc_config();
    let _back = Restore::keep(&cfg);
    let prog = c.dir().join("failing-mps-control");
    std::fs::write(
        &prog,
        "#!/bin/sh\nif [ \"$1\" = -d ]; then echo 'cannot start: no MPS on this GPU' >&2; \
         exit 1; fi\ncat >/dev/null\n",
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    set_key(c, "mps_control", &prog.display().to_string());
    let id = c.submit(
        &[
            "--gres=gpu:1",
            "--colloc=mps",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        "echo RAN",
    );
    let end = c.wait_done(id);
    drop(_back);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    for want in [
        "the MPS daemon did not start",
        "cannot start: no MPS on this GPU",
    ] {
        assert!(err.contains(want), "{want:?} not in stderr: {err}");
    }
    assert!(!c.job_out(id).contains("RAN"));
    let log = c.slurmd_log_tail(400);
    if c.profile().production() {
        assert!(
            log.contains(&format!("job {id}: refused: the MPS daemon did not start")),
            "slurmd log: {log}"
        );
    }
    assert_idle_and_clean(c);
}

/// An MPS job requeued while it runs: the epilog stops the first run's daemon (under the
/// production profile Slurm has already killed it with the extern step), and the second
/// run gets a fresh one where its tasks run (its own job container under the production
/// profile: the extern step's log line names the namespace). The node never drains and
/// nothing is left. (Slurm 22.05 gives a job re-allocated within about a second of its
/// epilog no prolog and no extern step; the test lets 2 s pass first.)
fn requeued(c: &Cluster) {
    let _whole = c.whole_gpus();
    let production = c.profile().production();
    let ready = c.jobs_dir().join("requeue-ready");
    let script = format!(
        "echo \"TASK ${{SLURM_RESTART_COUNT:-0}} $(readlink /proc/self/ns/mnt) \
         $CUDA_MPS_PIPE_DIRECTORY\"\n\
         if [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then touch {}; sleep 300; fi\n",
        ready.display()
    );
    let id = c.submit(
        &[
            "--gres=gpu:1",
            "--colloc=mps",
            "--uid=nobody",
            "--gid=nogroup",
            "--requeue",
            "--open-mode=append",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let tasks = |out: &str| -> Vec<Vec<String>> {
        out.lines()
            .filter_map(|l| l.strip_prefix("TASK "))
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    let first = tasks(&c.job_out(id));
    assert_eq!(first.len(), 1, "{first:?}");
    let daemons = processes_of_pipe_dir(&first[0][2]);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    assert_eq!(
        pid_mount_ns(daemons[0]).as_deref(),
        Some(first[0][1].as_str())
    );
    let out = c
        .slurm("scontrol")
        .args(["requeue", &id.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scontrol requeue: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_until("the job to be requeued and its epilog done", || {
        let pending = c.job_info(id)?.get("JobState").map(String::as_str) == Some("PENDING");
        (pending && c.node_state() == "idle").then_some(())
    });
    assert!(!pid_alive(daemons[0]), "the first run's daemon outlived it");
    assert!(c.journals().is_empty(), "{:?}", c.journals());
    std::thread::sleep(Duration::from_secs(2));
    let _ = c
        .slurm("scontrol")
        .args(["update", &format!("JobId={id}"), "StartTime=now"])
        .output();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let runs = tasks(&c.job_out(id));
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1][0], "1", "{runs:?}");
    if production {
        // (The first run's namespace is gone: the kernel may give the new one its number.)
        let ns = runs[1][1]
            .trim_start_matches("mnt:[")
            .trim_end_matches(']')
            .to_string();
        let log = c.slurmd_log_tail(2000);
        let started: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains(&format!(
                    "job {id}: started 1 MPS daemon(s) in mount namespace"
                ))
            })
            .collect();
        assert_eq!(started.len(), 2, "one start per run: {started:?}");
        assert!(
            started[1].contains(&format!("mount namespace {ns} (job container ")),
            "the second run's daemon is not in its tasks' namespace {ns}: {started:?}"
        );
    }
    assert_idle_and_clean(c);
}

/// The pids of processes whose command line starts with `prefix` (e.g. a slurmstepd's
/// `slurmstepd: [J.extern]`).
fn pids_named(prefix: &str) -> Vec<u32> {
    pids_by_cmdline(|c| String::from_utf8_lossy(c).starts_with(prefix))
}

/// The extern step's slurmstepd SIGKILLed while an MPS job runs (under the production
/// profile, where it started the daemon; under the simple one there is none and the
/// test checks only the end): the job still ends, the epilog stops the daemon the
/// extern step started and removes its files, and the node stays in service.
fn killed_extern_step(c: &Cluster) {
    let _whole = c.whole_gpus();
    let ready = c.jobs_dir().join("killed-ready");
    let go = c.jobs_dir().join("killed-go");
    let script = format!(
        "echo \"TASK $CUDA_MPS_PIPE_DIRECTORY\"\ntouch {}\n\
         while [ ! -e {} ]; do sleep 0.1; done\n",
        ready.display(),
        go.display()
    );
    let id = c.submit(
        &[
            "--gres=gpu:1",
            "--colloc=mps",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let pipe = out
        .lines()
        .find_map(|l| l.strip_prefix("TASK "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let daemons = processes_of_pipe_dir(&pipe);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    let stepds = pids_named(&format!("slurmstepd: [{id}.extern]"));
    if c.profile().production() {
        assert_eq!(stepds.len(), 1, "the extern step: {stepds:?}");
        let st = Command::new("kill")
            .args(["-KILL", &stepds[0].to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t = Instant::now();
        while pid_alive(stepds[0]) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(pid_alive(daemons[0]), "the daemon went with its slurmstepd");
    } else {
        assert!(stepds.is_empty(), "{stepds:?}");
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    println!(
        "  job {}, node {} ({}); daemon {} alive after the epilog: {}",
        end.state,
        c.node_state(),
        c.node_reason(),
        daemons[0],
        pid_alive(daemons[0])
    );
    assert!(
        !pid_alive(daemons[0]),
        "daemon {} outlived the job",
        daemons[0]
    );
    assert!(processes_of_pipe_dir(&pipe).is_empty());
    // What Slurm leaves of the job's cgroups without its extern slurmstepd (a fact, not
    // colloc's to clear).
    let node_cg = format!("slurm_{}", c.nodes()[0].name());
    let left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|ctl| std::fs::read_dir(ctl.path().join(&node_cg)).ok())
        .flat_map(|uids| uids.flatten().map(|u| u.path().join(format!("job_{id}"))))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    // Slurm leaves the extern step's placeholder `sleep` in them; cleared here so that
    // the host keeps nothing of the test.
    let mut dirs: Vec<PathBuf> = left.iter().map(PathBuf::from).collect();
    let mut i = 0;
    while i < dirs.len() {
        let subs: Vec<PathBuf> = std::fs::read_dir(&dirs[i])
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.extend(subs);
        i += 1;
    }
    let mut stray: Vec<u32> = dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    stray.sort_unstable();
    stray.dedup();
    let named: Vec<String> = stray
        .iter()
        .map(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            format!(
                "{p} {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ").trim()
            )
        })
        .collect();
    println!("  the job's cgroup folders left: {left:?}, with processes {named:?}");
    assert!(!stray.contains(&daemons[0]));
    for p in &stray {
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    let t = Instant::now();
    while stray.iter().any(|p| pid_alive(*p)) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
    assert_idle_and_clean(c);
}

/// Two jobs of one user: an MPS job, then a plain one that began while the first one's
/// tmpfs was mounted, so that under `job_container/tmpfs` its container holds a copy of
/// that tmpfs. The first job's epilog detaches the copy there and kills nothing of the
/// second job, which ends COMPLETED (CI of 2026-12-06, `PrologFlags=Serial`: the second
/// of two MPS jobs of one user ended FAILED 0:9, killed by the first one's epilog).
fn later_job_of_the_same_user(c: &Cluster) {
    let _whole = c.whole_gpus();
    let file = |n: &str| c.jobs_dir().join(format!("later-{n}"));
    let script = |k: &str| {
        format!(
            "echo \"PID $$\"\ntouch {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
            file(&format!("{k}-ready")).display(),
            file(&format!("{k}-go")).display()
        )
    };
    let user = ["--uid=nobody", "--gid=nogroup"];
    let first = c.submit(
        &[&["--gres=gpu:1", "--colloc=mps"][..], &user].concat(),
        &script("a"),
    );
    c.wait_for_file(first, &file("a-ready"));
    let second = c.submit(&user, &script("b"));
    c.wait_for_file(second, &file("b-ready"));
    let out = c.job_out(second);
    let pid: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("PID "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    let job_dir = c.run_dir().join(format!("job-{first}"));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let copied = mounts
        .lines()
        .any(|l| l.split(' ').nth(4) == job_dir.to_str());
    println!("  the second job's namespace holds a copy of the first one's tmpfs: {copied}");
    if c.profile().production() {
        assert!(copied, "no copy: the test shows nothing\n{mounts}");
    }
    std::fs::write(file("a-go"), "").unwrap();
    c.wait_until("the first job's epilog", || {
        let state = c.job_info(first)?.get("JobState")?.clone();
        (state == "COMPLETED" && !job_dir.exists()).then_some(())
    });
    let state = c.job_info(second).and_then(|i| i.get("JobState").cloned());
    assert_eq!(state.as_deref(), Some("RUNNING"), "{}", c.job_err(second));
    assert!(pid_alive(pid), "the second job's shell was killed");
    // Removing the first job's directory took the copy away there too.
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    assert!(
        !mounts
            .lines()
            .any(|l| l.split(' ').nth(4) == job_dir.to_str()),
        "the copy outlived the first job\n{mounts}"
    );
    std::fs::write(file("b-go"), "").unwrap();
    let end = c.wait_done(second);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(second));
    assert_idle_and_clean(c);
}

/// `PrologFlags=Serial` (prologs and epilogs of the node one at a time) with the profile's
/// other flags: two MPS jobs on the node's two GPUs run side by side, each with its own
/// daemon where its tasks are, and both end clean.
fn serial(c: &Cluster) {
    let _whole = c.whole_gpus();
    let flags = std::fs::read_to_string(c.dir().join("etc/slurm.conf"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PrologFlags=").map(str::to_string))
        .unwrap_or_default();
    assert!(flags.contains("Serial"), "PrologFlags={flags}");
    let mut jobs = Vec::new();
    for k in 0..2 {
        let ready = c.jobs_dir().join(format!("serial-{k}-ready"));
        let go = c.jobs_dir().join(format!("serial-{k}-go"));
        let script = format!(
            "echo \"TASK $(readlink /proc/self/ns/mnt) $CUDA_MPS_PIPE_DIRECTORY\"\ntouch {}\n\
             while [ ! -e {} ]; do sleep 0.1; done\n",
            ready.display(),
            go.display()
        );
        let id = c.submit(
            &[
                "--gres=gpu:1",
                "--colloc=mps",
                "--uid=nobody",
                "--gid=nogroup",
            ],
            &script,
        );
        jobs.push((id, ready, go));
    }
    for (id, ready, _) in &jobs {
        c.wait_for_file(*id, ready);
        let out = c.job_out(*id);
        let f: Vec<&str> = out
            .lines()
            .find_map(|l| l.strip_prefix("TASK "))
            .unwrap_or_else(|| panic!("job {id}: {out}"))
            .split_whitespace()
            .collect();
        let daemons = processes_of_pipe_dir(f[1]);
        assert_eq!(daemons.len(), 1, "job {id}: {daemons:?}");
        assert_eq!(
            pid_mount_ns(daemons[0]).as_deref(),
            Some(f[0]),
            "job {id}: the daemon is not where the tasks are"
        );
    }
    // Both let go first: on one node wait_done waits until the node is idle.
    for (_, _, go) in &jobs {
        std::fs::write(go, "").unwrap();
    }
    for (id, _, _) in &jobs {
        let end = c.wait_done(*id);
        assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(*id));
    }
    assert_idle_and_clean(c);
}
