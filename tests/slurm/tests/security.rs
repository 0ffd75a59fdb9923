//! Root-side code against a hostile local user (issue 11, SECURITY.md), on a real Slurm
//! cluster with four fake GPUs. Jobs run as unprivileged accounts the suite makes
//! (`sec-attacker`, `sec-victim`). Each test is one of the issue's findings 1–7, and after
//! each: the victim paths are as they were, the node is idle (not drained), the GPUs are
//! as before and no MPS daemon is left.
//!
//! One file, though long: its tests share one cluster (`main` hands them all to one
//! `run_suite` on one four-GPU cluster, and each ends with the same checks,
//! `assert_node_clean`); a second file would cost another cluster start under each of the
//! two profiles scripts/test.sh runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use colloc_slurm_tests::{
    ensure_user, pid_alive, processes_of_pipe_dir, run_suite, Cluster, JobEnd, Test,
};
use serde_json::Value;

#[path = "security/holders.rs"]
mod holders;

const ATTACKER: &str = "sec-attacker";
const VICTIM: &str = "sec-victim";
/// The MPS part of an epilog, whatever the GPU count (colloc_core::reconfig::
/// MPS_RESTORE_BUDGET: 10 s quit + 5 s kill + 5 s cleanup).
const MPS_RESTORE_BUDGET: Duration = Duration::from_secs(20);

fn main() {
    let tests: &[Test] = &[
        (
            "a_link_swapped_in_by_the_job_is_not_followed_by_the_epilog",
            swap_via_job,
        ),
        (
            "a_link_swapped_in_before_colloc_restore_is_not_followed",
            swap_via_restore,
        ),
        ("a_symlink_spinner_never_wins_against_mps_prologs", spinner),
        (
            "a_tree_as_deep_as_the_jobs_tmpfs_allows_goes_with_it_without_draining",
            deep_tree,
        ),
        (
            "a_full_state_dir_neither_stops_the_epilog_nor_drains_the_node",
            full_state_dir,
        ),
        (
            "a_setsid_writer_left_in_the_job_dir_is_killed_and_the_dir_removed",
            setsid_writer,
        ),
        (
            "a_user_filling_their_jobs_dir_never_refuses_another_users_job",
            full_run_dir,
        ),
        (
            "a_run_dir_without_room_refuses_the_job_with_the_figures_not_the_node",
            no_room_in_run_dir,
        ),
        (
            "stopped_daemons_on_four_gpus_are_stopped_within_the_budget",
            stopped_daemons,
        ),
        (
            "a_world_writable_state_dir_is_refused_and_forgeries_ignored",
            open_state_dir,
        ),
        (
            "misnamed_truncated_and_forged_journals_are_moved_aside",
            bad_journals,
        ),
        (
            "hostile_mig_mps_values_are_refused_with_one_line",
            mig_mps_bad_values,
        ),
        (
            "links_fifos_and_locked_dirs_in_mig_mps_instance_dirs_harm_no_one",
            mig_mps_hostile_leaves,
        ),
        (
            "stopped_daemons_in_fourteen_mig_instances_are_stopped_within_the_budget",
            mig_mps_stopped_daemons,
        ),
        (
            "daemons_replaced_by_the_users_own_processes_are_gone_after_the_job",
            mig_mps_replaced_daemons,
        ),
        (
            "a_run_dir_without_room_refuses_a_mig_mps_job_not_the_node",
            mig_mps_run_dir_full,
        ),
        (
            "two_users_mig_mps_jobs_cannot_touch_each_other",
            mig_mps_two_users,
        ),
        (
            "a_mig_mps_prolog_killed_after_one_daemon_started_leaves_nothing",
            mig_mps_prolog_killed,
        ),
        (
            "two_users_mig_mps_jobs_racing_get_their_own_instances_and_daemons",
            mig_mps_racing_users,
        ),
        (
            "a_user_stopping_collocs_children_neither_stalls_the_epilog_nor_drains",
            mig_mps_user_stops_colloc_children,
        ),
        (
            "a_user_slowing_the_mps_part_of_the_epilog_leaves_the_mig_part_its_budget",
            mig_mps_slow_mps_part_keeps_mig_budget,
        ),
        (
            "a_user_tracing_the_epilogs_quit_leaves_nothing_running_outside_the_job",
            quit_taken_over,
        ),
        (
            "a_writer_in_a_user_namespace_with_a_bind_mount_is_killed_and_run_dir_kept",
            holders::bind_mounted_writer,
        ),
        (
            "unlinked_open_files_filling_the_jobs_tmpfs_never_take_run_dirs_inodes",
            holders::unlinked_open_files,
        ),
        (
            "descriptors_in_flight_keep_only_the_jobs_detached_tmpfs",
            holders::descriptors_in_flight,
        ),
        (
            "a_user_namespace_full_of_mounts_never_refuses_another_users_job",
            holders::full_mount_namespace,
        ),
        (
            "a_user_namespace_full_of_mounts_never_refuses_a_job_under_a_shared_root",
            holders::full_mount_namespace_plain_run_dir,
        ),
    ];
    run_suite(4, None, tests, &[]);
}

/// `--uid`/`--gid` arguments that make a job run as `user`.
fn as_user(user: &str) -> [String; 2] {
    ensure_user(user);
    [format!("--uid={user}"), format!("--gid={user}")]
}

fn args<'a>(mode_and_gres: &[&'a str], user: &'a [String; 2]) -> Vec<&'a str> {
    let mut a: Vec<&str> = mode_and_gres.to_vec();
    a.extend(user.iter().map(String::as_str));
    a
}

/// A root-owned directory (with `pipe/` and `log/`, as an MPS daemon's) and file that a
/// hostile user points links at.
struct Victim {
    dir: PathBuf,
}

impl Victim {
    fn new(c: &Cluster, name: &str) -> Victim {
        let dir = c.dir().join("victims").join(name);
        for d in [dir.join("pipe"), dir.join("log")] {
            std::fs::create_dir_all(&d).unwrap();
        }
        for d in [
            c.dir().join("victims"),
            dir.clone(),
            dir.join("pipe"),
            dir.join("log"),
        ] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(dir.join("file"), "precious").unwrap();
        std::fs::set_permissions(dir.join("file"), std::fs::Permissions::from_mode(0o644)).unwrap();
        Victim { dir }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("file")
    }

    fn assert_intact(&self) {
        for d in [
            self.dir.clone(),
            self.dir.join("pipe"),
            self.dir.join("log"),
        ] {
            let m = std::fs::symlink_metadata(&d)
                .unwrap_or_else(|e| panic!("victim {} is gone: {e}", d.display()));
            assert!(m.is_dir(), "victim {} replaced", d.display());
            assert_eq!(
                (m.uid(), m.permissions().mode() & 0o7777),
                (0, 0o755),
                "victim {} given away",
                d.display()
            );
        }
        let m = std::fs::symlink_metadata(self.file()).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o7777), (0, 0o644));
        assert_eq!(std::fs::read_to_string(self.file()).unwrap(), "precious");
    }
}

/// What the node sees in `run_dir` (a tmpfs mounted there is the node's alone).
fn run_dir_entries(c: &Cluster) -> Vec<String> {
    std::fs::read_dir(c.node_path(&c.run_dir()))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn assert_node_clean(c: &Cluster, before: &Value) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.gpu_layout(), *before, "a GPU was changed");
    let left = run_dir_entries(c);
    assert!(left.is_empty(), "left in run_dir: {left:?}");
}

fn assert_gone(pids: &[u32]) {
    for &p in pids {
        assert!(!pid_alive(p), "MPS daemon {p} still runs");
    }
}

fn pipes_of(vars: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    vars.get("COLLOC_MPS_PIPES")
        .map(|p| {
            p.split(',')
                .filter_map(|e| e.split_once('=').map(|(_, d)| d.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The id the next job gets (a held probe, cancelled).
fn next_job_id(c: &Cluster) -> u32 {
    let probe = c.submit(&["--hold"], "true");
    c.slurm("scancel").arg(probe.to_string()).status().unwrap();
    c.wait_until("the probe job to go", || {
        c.squeue().is_empty().then_some(())
    });
    probe + 1
}

/// Wait for job `id` to end while other jobs may still run; panics at once when the node
/// drains instead.
fn wait_job_end(c: &Cluster, id: u32) -> JobEnd {
    wait_jobs_end(c, &[id]).remove(0)
}

/// [`wait_job_end`] for several jobs at once, each end taken when it is first seen. Panics
/// at once, saying so, when Slurm forgets a job before its end was seen (after
/// MinJobAge, 300 s as Slurm's default: it was 2 s, and a poll slowed by load lost ends).
fn wait_jobs_end(c: &Cluster, ids: &[u32]) -> Vec<JobEnd> {
    let mut ends: Vec<Option<JobEnd>> = vec![None; ids.len()];
    let what = format!("jobs {ids:?} to end");
    c.wait_until(&what, || {
        let node = c.node_state();
        if node.contains("drain") {
            panic!(
                "the node drained ({}) while jobs {ids:?} ran\n--- slurmd log ---\n{}",
                c.node_reason(),
                c.slurmd_log_tail(20)
            );
        }
        for (id, end) in ids.iter().zip(ends.iter_mut()) {
            if end.is_some() {
                continue;
            }
            let Some(info) = c.job_info(*id) else {
                panic!(
                    "Slurm forgot job {id} before its end was seen\n{}",
                    c.job_story(*id)
                );
            };
            let Some(state) = info.get("JobState") else {
                continue;
            };
            let busy = matches!(
                state.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"
            );
            if !busy {
                *end = Some(JobEnd {
                    state: state.clone(),
                    exit_code: info.get("ExitCode").cloned().unwrap_or_default(),
                });
            }
        }
        ends.iter().all(Option::is_some).then(|| ends.clone())
    })
    .into_iter()
    .map(|e| e.expect("every end was seen"))
    .collect()
}

/// A tmpfs mounted in the node's namespace, unmounted when dropped (also when a test
/// fails).
struct NodeMount<'a> {
    c: &'a Cluster,
    at: PathBuf,
}

impl<'a> NodeMount<'a> {
    fn tmpfs(c: &'a Cluster, at: &Path, options: &str) -> NodeMount<'a> {
        let out = c
            .node_command("mount")
            .args(["-t", "tmpfs", "-o", options, "colloc-sec"])
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount a tmpfs on {}: {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        NodeMount {
            c,
            at: at.to_path_buf(),
        }
    }
}

impl Drop for NodeMount<'_> {
    fn drop(&mut self) {
        let _ = self
            .c
            .node_command("umount")
            .arg("-l")
            .arg(&self.at)
            .status();
    }
}

/// The swap of finding 1, and links, a FIFO and a hard link in the job's own
/// directories; prints what worked, and the daemon's environment.
fn swap_script(victim: &Victim) -> String {
    format!(
        r#"job_dir=$(dirname "$(dirname "$CUDA_MPS_PIPE_DIRECTORY")")
echo PIPE="$CUDA_MPS_PIPE_DIRECTORY"
mv "$job_dir/gpu0" "$job_dir/gpu0.old" 2>/dev/null && echo MOVED=yes
ln -s {v} "$job_dir/gpu0" 2>/dev/null && echo LINKED=yes
ln -s {v} "$job_dir/gpu1" 2>/dev/null && echo LINKED=yes
ln -s {v} "$CUDA_MPS_PIPE_DIRECTORY/victim"
ln -s {v}/file "$CUDA_MPS_LOG_DIRECTORY/colloc-control-start.log"
ln {v}/file "$CUDA_MPS_LOG_DIRECTORY/hard" 2>/dev/null && echo HARD=yes
mkfifo "$CUDA_MPS_LOG_DIRECTORY/fifo" "$CUDA_MPS_PIPE_DIRECTORY/fifo"
daemon=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")
echo DAEMON="$daemon"
tr '\0' '\n' </proc/"$daemon"/environ | sed 's/^/DAEMON_ENV_/'
"#,
        v = victim.dir.display()
    )
}

fn check_swap_job(c: &Cluster, id: u32) -> u32 {
    let vars = c.job_vars(id);
    assert!(
        vars.contains_key("PIPE"),
        "job did not run: {}",
        c.job_err(id)
    );
    // The user owns only the leaves: nothing above them can be moved or replaced.
    assert!(
        !vars.contains_key("MOVED"),
        "job-N/gpu0 could be moved: {vars:?}"
    );
    assert!(
        !vars.contains_key("LINKED"),
        "a link was made in job-N: {vars:?}"
    );
    // Nothing of the job's environment (or of the prolog's) reached root's daemon.
    for (k, v) in vars.iter().filter(|(k, _)| k.starts_with("DAEMON_ENV_")) {
        assert!(!v.contains("evil"), "{k}={v} reached the daemon");
        assert!(
            !k.starts_with("DAEMON_ENV_SPANK_") && !k.starts_with("DAEMON_ENV_SLURM_"),
            "{k} reached the daemon"
        );
    }
    vars["DAEMON"].parse().expect("the daemon's pid")
}

/// Finding 1, through a job: the swap before the epilog.
fn swap_via_job(c: &Cluster) {
    let _whole = c.whole_gpus();
    let victim = Victim::new(c, "swap-job");
    let before = c.gpu_layout();
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(
            &[
                "--colloc=mps",
                "--gres=gpu:1",
                "--export=ALL,LD_LIBRARY_PATH=/nonexistent/evil,CUDA_MPS_LOG_DIRECTORY=/evil",
            ],
            &user,
        ),
        &swap_script(&victim),
    );
    let end = c.wait_done(id);
    victim.assert_intact();
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let daemon = check_swap_job(c, id);
    assert_gone(&[daemon]);
    assert_node_clean(c, &before);
}

/// Finding 1, through `colloc restore --job N` while the job still runs.
fn swap_via_restore(c: &Cluster) {
    let _whole = c.whole_gpus();
    let victim = Victim::new(c, "swap-restore");
    let before = c.gpu_layout();
    let ready = c.jobs_dir().join("swap-restore-ready");
    let go = c.jobs_dir().join("swap-restore-go");
    let user = as_user(ATTACKER);
    let script = format!(
        "{}touch {ready}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
        swap_script(&victim),
        ready = ready.display(),
        go = go.display()
    );
    let id = c.submit(&args(&["--colloc=mps", "--gres=gpu:1"], &user), &script);
    c.wait_for_file(id, &ready);
    let out = c.colloc(&["restore", "--job", &id.to_string()]);
    victim.assert_intact();
    assert!(
        out.status.success(),
        "colloc restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon = check_swap_job(c, id);
    assert_gone(&[daemon]);
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    victim.assert_intact();
    assert_node_clean(c, &before);
}

/// Finding 2: a spinner planting links at every name the prologs of the next jobs make.
/// On the old layout it won on the first two-GPU job (the second GPU's directory is made
/// long after the job's directory became the user's).
fn spinner(c: &Cluster) {
    let _whole = c.whole_gpus();
    let victim = Victim::new(c, "spinner");
    let before = c.gpu_layout();
    let (uid, gid) = ensure_user(ATTACKER);
    let user = as_user(ATTACKER);
    // The spinner runs as the attacker: a copy the attacker can run.
    let tool = c.jobs_dir().join("colloc-sec-spinner");
    std::fs::copy(env!("CARGO_BIN_EXE_colloc-sec-spinner"), &tool).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let first = next_job_id(c);
    let mut spin = Command::new(&tool)
        .arg(c.run_dir())
        .arg(first.to_string())
        .arg((first + 10).to_string())
        .arg(&victim.dir)
        .arg(victim.file())
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..3 {
            let id = c.submit(
                &args(&["--colloc=mps", "--gres=gpu:2"], &user),
                "echo PIPES=$COLLOC_MPS_PIPES",
            );
            let end = c.wait_done(id);
            victim.assert_intact();
            assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
        }
    }));
    let _ = spin.kill();
    let out = spin.wait_with_output().unwrap();
    let planted = String::from_utf8_lossy(&out.stdout);
    if let Err(e) = result {
        eprintln!("the spinner planted:\n{planted}");
        std::panic::resume_unwind(e);
    }
    // Inside the user's own log directory it may plant what it likes (root opens nothing
    // there); nowhere else.
    for line in planted.lines() {
        assert!(
            line.contains("/log/colloc-control-start.log ->"),
            "planted outside the user's leaves: {line}"
        );
    }
    victim.assert_intact();
    // A spinner still planting while the epilog cleans up can keep the user's log
    // directory from emptying: that is moved aside, and the job's name freed.
    let left = run_dir_entries(c);
    assert!(
        left.iter().all(|e| e == ".leftovers"),
        "left in run_dir: {left:?}"
    );
    // Once the spinner is gone, restore --all clears what was moved aside.
    let out = c.colloc(&["restore", "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    victim.assert_intact();
    assert_node_clean(c, &before);
}

/// Finding 2 (a tree deeper than 131,072 levels made the removal fail and drained the
/// node), now: the job's directory is a tmpfs of its own, so the tree is as deep as
/// `job_dir_inodes` (4,096) allows, and the epilog detaches it whole, nothing moved aside.
/// (A deep `.leftovers` tree, from before: `fs::tests`.)
fn deep_tree(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=256m,mode=0755");
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        r#"cd "$CUDA_MPS_LOG_DIRECTORY" && perl -e 'my $n = 0; for (1..140000) { mkdir "d" or last; chdir "d" or last; $n++ } print "DEPTH=$n\n"'"#,
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let depth: u64 = c.job_vars(id)["DEPTH"].parse().unwrap();
    println!("the tree reached {depth} levels in the job's tmpfs");
    assert!((3000..4096).contains(&depth), "{depth} levels");
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    assert_node_clean(c, &before);
}

/// Issue 23, finding 4: a job fills the inodes of the file system that holds state_dir
/// (through a directory users can write on it, as /var/tmp often is). The epilogs' journal
/// writes fail, yet they undo what their jobs had (a MIG layout, an MPS daemon) and the
/// node stays in service; the next job's prolog cannot write its journal and refuses it
/// (its tasks fail with why), not the node; once there is room, jobs run again.
fn full_state_dir(c: &Cluster) {
    // GPU 0 keeps MIG on for the mig job (Slurm gives it the lowest free GPU).
    let whole = c.whole_gpus_but(&[0]);
    let before = c.gpu_layout();
    let state = c.dir().join("state");
    let _fs = NodeMount::tmpfs(c, &state, "size=4m,nr_inodes=64,mode=0755");
    let shared = c.node_path(&state).join("shared-tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let user = as_user(ATTACKER);
    let go = c.jobs_dir().join("full-state-go");
    let wait_go = format!("while [ ! -e {} ]; do sleep 0.1; done\n", go.display());
    let mig_ready = c.jobs_dir().join("full-state-mig");
    let mig = c.submit(
        &args(&["--colloc=mig:3g", "--gres=gpu:1"], &user),
        &format!(
            "echo MODE=$COLLOC_MODE\ntouch {}\n{wait_go}",
            mig_ready.display()
        ),
    );
    c.wait_for_file(mig, &mig_ready);
    assert_ne!(c.gpu_layout(), before, "the MIG job has its instances");
    let filled = c.jobs_dir().join("full-state-filled");
    let mps = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        &format!(
            r#"echo PIPES=$COLLOC_MPS_PIPES
echo DAEMON=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")
cd {shared} || exit 1
i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done
echo FILLED=$i
touch {filled}
{wait_go}"#,
            shared = state.join("shared-tmp").display(),
            filled = filled.display()
        ),
    );
    c.wait_for_file(mps, &filled);
    assert!(
        std::fs::write(c.node_path(&state).join("probe"), "").is_err(),
        "the file system is not full"
    );
    std::fs::write(&go, "").unwrap();
    for id in [mig, mps] {
        let end = wait_job_end(c, id);
        assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    }
    let vars = c.job_vars(mps);
    let daemon: u32 = vars["DAEMON"].parse().expect("the daemon's pid");
    assert_gone(&[daemon]);
    for p in pipes_of(&vars) {
        assert!(processes_of_pipe_dir(&p).is_empty(), "daemon of {p} left");
    }
    assert_eq!(
        c.gpu_layout(),
        before,
        "the MIG instances were not destroyed"
    );
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    // The later mps jobs get GPU 0 too: whole GPUs everywhere from here on.
    drop(whole);
    let _whole = c.whole_gpus();
    // Still full (the journals' inodes went to the filler's neighbours? fill again).
    let refill = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && i=0; while touch g$i 2>/dev/null; do i=$((i+1)); done",
            shared.display()
        ))
        .status()
        .unwrap();
    assert!(refill.success());
    let victim = as_user(VICTIM);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
        "echo RAN",
    );
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the refused job ran");
    let err = c.job_err(id);
    assert!(err.contains("no record of this job's prolog"), "{err}");
    assert!(!c.node_state().contains("drain"), "{}", c.node_reason());
    // Room again: jobs run.
    std::fs::remove_dir_all(&shared).unwrap();
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
        "echo RAN",
    );
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(c.job_out(id).contains("RAN"));
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert!(run_dir_entries(c).is_empty(), "{:?}", run_dir_entries(c));
}

/// Issue 23, finding 5: a `setsid` writer whose working directory is the job's log
/// directory keeps creating files after the job (where the job's processes outlive it:
/// without proctrack/cgroup). The epilog kills it (a process of the job's user holding
/// the directory) and removes the tree; nothing is moved aside for it to fill.
fn setsid_writer(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=64m,nr_inodes=100000,mode=0755");
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        r#"cd "$CUDA_MPS_LOG_DIRECTORY" || exit 1
setsid sh -c 'i=0; while :; do i=$((i+1)); mkdir d$i 2>/dev/null; true >d$i/f 2>/dev/null; done' </dev/null >/dev/null 2>&1 &
echo WRITER=$!
sleep 1
"#,
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let writer: u32 = c.job_vars(id)["WRITER"].parse().expect("the writer's pid");
    assert!(!pid_alive(writer), "the writer {writer} still runs");
    // Removed, not moved aside: run_dir is empty (no .leftovers).
    assert_node_clean(c, &before);
}

/// Finding 4, now (issue 35): one user's files fill their job's own tmpfs (its
/// `job_dir_inodes`), inside a run_dir of 48 inodes that the attacker filled before each
/// job had one; another user's MPS job runs beside it.
fn full_run_dir(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=256k,nr_inodes=48,mode=0755");
    let ready = c.jobs_dir().join("full-ready");
    let go = c.jobs_dir().join("full-go");
    let attacker = as_user(ATTACKER);
    let filler = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &attacker),
        &format!(
            r#"cd "$CUDA_MPS_LOG_DIRECTORY" || exit 1
head -c 1048576 /dev/zero >fill 2>/dev/null
i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done
echo FILLED=$i
touch {ready}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            ready = ready.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(filler, &ready);
    let victim = as_user(VICTIM);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
        "echo RAN",
    );
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(
        c.job_out(id).contains("RAN"),
        "the victim's job did not run"
    );
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(filler);
    assert_eq!(
        end.state,
        "COMPLETED",
        "{end:?}; stderr: {}",
        c.job_err(filler)
    );
    let filled: u64 = c.job_vars(filler)["FILLED"].parse().unwrap();
    println!("the filler made {filled} files in its job's tmpfs (job_dir_inodes 4096)");
    assert!((3000..4096).contains(&filled), "{filled} files");
    assert_node_clean(c, &before);
}

/// A run_dir with no inode left for a job's directory (root's own: users put nothing
/// there any more): the job is refused with the figures, on its stderr and in slurmd's
/// log, and the node stays in service.
fn no_room_in_run_dir(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    {
        // 1 inode for the mount's root, 1 free: less than a job's directory needs.
        let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=1m,nr_inodes=2,mode=0755");
        let victim = as_user(VICTIM);
        let id = c.submit(
            &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
            "echo RAN",
        );
        let end = wait_job_end(c, id);
        assert_eq!(end.state, "FAILED", "{end:?}; stderr: {}", c.job_err(id));
        assert!(!c.job_out(id).contains("RAN"), "the refused job ran");
        let err = c.job_err(id);
        assert!(
            err.contains("no space left in run_dir") && err.contains("1 of 2 inodes"),
            "{err}"
        );
        let log = c.slurmd_log_tail(200);
        assert!(log.contains("no space left in run_dir"), "{log}");
        assert!(!c.node_state().contains("drain"), "{}", c.node_reason());
        // The admin is told, with what to do; restore --all is not done while so.
        // In the node's namespace, where run_dir is the tmpfs.
        let on_node = |args: &[&str]| {
            c.nodes()[0]
                .command(colloc_slurm_tests::colloc_bin())
                .args(args)
                .output()
                .unwrap()
        };
        let status = on_node(&["status"]);
        let text = String::from_utf8_lossy(&status.stdout);
        assert!(
            text.contains("CANNOT SERVE MPS JOBS") && text.contains("1 of 2 inodes"),
            "{text}"
        );
        assert_eq!(status.status.code(), Some(1), "{text}");
        let restore = on_node(&["restore", "--all"]);
        let err = String::from_utf8_lossy(&restore.stderr);
        assert!(err.contains("CANNOT SERVE MPS JOBS"), "{err}");
        assert_eq!(restore.status.code(), Some(1), "{err}");
        // And so does the cluster view, from the record the refusing prolog published.
        let cluster = on_node(&["status", "--cluster"]);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&cluster.stdout),
            String::from_utf8_lossy(&cluster.stderr)
        );
        assert!(
            all.contains("run_dir FULL, MPS jobs refused: 1 of 2 inodes"),
            "{all}"
        );
        assert_node_clean(c, &before);
    }
}

/// Finding 5: the job stops (SIGSTOP) its daemons on four GPUs; the epilog still ends
/// within one budget, and no daemon is left.
fn stopped_daemons(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let stopped = c.jobs_dir().join("stopped");
    let go = c.jobs_dir().join("stopped-go");
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:4"], &user),
        &format!(
            r#"echo COLLOC_MPS_PIPES=$COLLOC_MPS_PIPES
for p in $(echo "$COLLOC_MPS_PIPES" | tr ',' '\n' | cut -d= -f2); do
  pid=$(cat "$p/nvidia-cuda-mps-control.pid")
  kill -STOP "$pid" && echo STOPPED_$pid=yes
done
touch {stopped}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            stopped = stopped.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &stopped);
    std::fs::write(&go, "").unwrap();
    let t = Instant::now();
    let end = c.wait_done(id);
    let took = t.elapsed();
    println!("epilog with 4 stopped daemons: {:.1} s", took.as_secs_f64());
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let vars = c.job_vars(id);
    let pids: Vec<u32> = vars
        .keys()
        .filter_map(|k| k.strip_prefix("STOPPED_")?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 4, "{vars:?}");
    assert!(
        took < MPS_RESTORE_BUDGET + Duration::from_secs(10),
        "the epilog took {took:?}"
    );
    assert_gone(&pids);
    for p in pipes_of(&vars) {
        assert!(processes_of_pipe_dir(&p).is_empty(), "daemon of {p} left");
    }
    assert_node_clean(c, &before);
}

/// Puts state_dir back as colloc needs it (also when the test fails).
struct StateDirBack<'a>(&'a Cluster);

impl Drop for StateDirBack<'_> {
    fn drop(&mut self) {
        let state = self.0.state_dir();
        let _ = std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755));
        if state.join("jobs.real").exists() {
            let _ = std::fs::remove_dir_all(state.join("jobs"));
            let _ = std::fs::rename(state.join("jobs.real"), state.join("jobs"));
        }
    }
}

/// Finding 6: a state_dir others can write. check-config and restore refuse it; a
/// journal the attacker forges there for another user's next job (LD_LIBRARY_PATH in its
/// tasks, a victim as its job directory) reaches nothing, and does not drain the node.
fn open_state_dir(c: &Cluster) {
    let _whole = c.whole_gpus();
    let victim = Victim::new(c, "state");
    let before = c.gpu_layout();
    let (auid, agid) = ensure_user(ATTACKER);
    let (vuid, vgid) = ensure_user(VICTIM);
    let state = c.state_dir();
    std::fs::create_dir_all(state.join("jobs")).unwrap();
    let _back = StateDirBack(c);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = c.colloc_config();
    let out = c.colloc(&["check-config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "check-config accepted it");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(mode 0777)"), "{err}");
    let next = next_job_id(c);
    let forged = serde_json::json!({
        "version": 1, "job": next, "uid": vuid, "gid": vgid, "mode": "mps",
        "phase": "applied", "gpus": [], "mps": [], "job_dir": victim.dir,
        "env": [["COLLOC_MODE", "pwned"], ["LD_LIBRARY_PATH", "/nonexistent/evil"]],
        "created": 0, "requested": [0],
    });
    let mut forge = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "mv {s}/jobs {s}/jobs.real && mkdir {s}/jobs && cat >{s}/jobs/{next}.json",
            s = state.display()
        ))
        .uid(auid)
        .gid(agid)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut forge.stdin.take().unwrap(),
        forged.to_string().as_bytes(),
    )
    .unwrap();
    assert!(
        forge.wait().unwrap().success(),
        "the attacker could not forge"
    );
    let user = as_user(VICTIM);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        "echo MODE=$COLLOC_MODE\necho LIBS=$LD_LIBRARY_PATH",
    );
    assert_eq!(id, next, "the forgery was for another job id");
    let end = c.wait_done(id);
    assert!(!c.job_out(id).contains("pwned"), "{}", c.job_out(id));
    assert!(!c.job_out(id).contains("evil"), "{}", c.job_out(id));
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("is not safe for colloc's root-side files"),
        "{err}"
    );
    let out = c.colloc(&["restore", "--all"]);
    assert_eq!(out.status.code(), Some(2), "restore --all used it");
    victim.assert_intact();
    drop(_back);
    assert_node_clean(c, &before);
}

/// Finding 7: journals that cannot be used are named, moved aside by `restore --all` (exit
/// 1, pointing at `colloc status`), never renamed by `restore --job`; then the node works.
fn bad_journals(c: &Cluster) {
    let _whole = c.whole_gpus();
    let victim = Victim::new(c, "journals");
    let before = c.gpu_layout();
    let jobs = c.journal_dir();
    std::fs::create_dir_all(&jobs).unwrap();
    let journal = |job: u32, job_dir: Option<&Path>| {
        let mut j = serde_json::json!({
            "version": 1, "job": job, "uid": 0, "gid": 0, "mode": "naive",
            "phase": "applied", "created": 0,
        });
        if let Some(d) = job_dir {
            j["job_dir"] = serde_json::json!(d);
        }
        j.to_string()
    };
    let files = [
        ("900005.json", journal(900_006, None)),
        ("0900120.json", journal(900_120, None)),
        ("900007.json", journal(900_007, None)[..20].to_string()),
        ("900009.json", journal(900_009, Some(&victim.dir))),
    ];
    for (name, body) in &files {
        std::fs::write(jobs.join(name), body).unwrap();
    }
    // Until they are cleared, colloc changes no GPU: the job is refused, not the node.
    let id = c.submit(&["--colloc=mps", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("is unreadable") && err.contains("colloc restore --all"),
        "{err}"
    );
    let out = c.colloc(&["restore", "--job", "900005"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("names job 900006"), "{err}");
    assert!(jobs.join("900005.json").exists() && !jobs.join("900006.json").exists());
    let out = c.colloc(&["restore", "--all"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    for (name, _) in &files {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("jobs/{name} was unusable")))
            .unwrap_or_else(|| panic!("{name} not named: {err}"));
        assert!(line.contains("colloc status"), "{line}");
        assert!(c.state_dir().join("corrupt").join(name).exists(), "{name}");
    }
    let out = c.colloc(&["restore", "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    victim.assert_intact();
    let id = c.submit(&["--colloc=mps", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(c.job_out(id).contains("RAN"));
    assert_node_clean(c, &before);
}

// --- MPS inside MIG instances (issue 29): the same hostile user against mig:LAYOUT:mps ---

/// `KEY=VALUE` of `COLLOC_MPS_PIPES`: (MIG UUID, pipe directory) per instance.
fn mig_pipes(vars: &std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    vars.get("COLLOC_MPS_PIPES")
        .map(|p| {
            p.split(',')
                .filter_map(|e| e.split_once('='))
                .map(|(u, d)| (u.to_string(), d.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// No MPS program of the job's (its daemons, and any the user started in its directories)
/// runs any more: none has a `CUDA_MPS_PIPE_DIRECTORY` under the job's directory.
fn assert_no_mps_under(c: &Cluster, id: u32) {
    let job_dir = format!("{}/job-{id}", c.run_dir().display());
    let left: Vec<u32> = colloc_slurm_tests::pids()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0).any(|v| {
                    v.strip_prefix(b"CUDA_MPS_PIPE_DIRECTORY=")
                        .is_some_and(|d| d.starts_with(job_dir.as_bytes()))
                })
            })
        })
        .filter(|&pid| pid_alive(pid))
        .collect();
    assert!(left.is_empty(), "MPS processes of job {id} left: {left:?}");
}

/// Hostile `--colloc` values around `mig:LAYOUT:mps[:N]`: refused by sbatch with one line,
/// nothing queued. `mig:1g:mps:48` is well formed but more clients than MPS serves in a
/// 1g instance: the job is refused with one line, the GPU untouched, the node in service.
fn mig_mps_bad_values(c: &Cluster) {
    let before = c.gpu_layout();
    for v in [
        "mig:3g:mps:0",
        "mig:3g:mps:49",
        "mig:3g:mps:4294967297",
        "mig:3g:mps:99999999999999999999",
        "mig:3g:mps:-1",
        "mig:3g:mps:+2",
        "mig:3g:mps:0x2",
        "mig:3g:mps:2.5",
        "mig:3g:mps: 2",
        "mig:3g:mps:",
        "mig:3g:mps:2:2",
        "mig:3g:mps:mps",
        "mig:3g:mps,mps",
        "mig:3g::mps",
        "mig:3g:MPS",
        "mig:3g:mpsx2",
        "mig:3g:naive",
        "mig:3g:mig:3g",
        "mig:3g,:mps",
        "mig::mps",
        "mig:mps",
        "mig:mps:2",
        "mps:2:mig:3g",
        "mig:1g.10gb+me:mps",
        "mig:1g.5gb+me:mps:2",
        "mig:3g;mps",
        "mig:3g:mps\n:2",
        "mig:3g:mps:2\u{7f}",
    ] {
        match c.sbatch(&[format!("--colloc={v}"), "--gres=gpu:1".into()], "true") {
            Ok(id) => panic!("sbatch --colloc={v:?} was accepted as job {id}"),
            Err(out) => {
                let err = String::from_utf8_lossy(&out.stderr);
                let ours: Vec<&str> = err.lines().filter(|l| l.contains("invalid mode")).collect();
                assert_eq!(ours.len(), 1, "--colloc={v:?}: {err}");
                assert!(
                    ours[0].contains("--colloc: invalid mode") && ours[0].len() < 600,
                    "--colloc={v:?}: {err}"
                );
            }
        }
        assert_eq!(c.squeue(), "", "a job was queued for --colloc={v:?}");
    }
    // Well formed, but the GPU cannot: refused at the prolog, in one line.
    let id = c.submit(&["--colloc=mig:1g:mps:48", "--gres=gpu:1"], "echo RAN");
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert_eq!(end.exit_code, "1:0", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the refused job ran");
    let err = c.job_err(id);
    // colloc's line (Slurm adds its own about the failed plugin call).
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("colloc: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("mig:1g:mps:48") && lines[0].contains("at most 6 MPS client"),
        "{err}"
    );
    assert_node_clean(c, &before);
}

/// The attack of finding 1 on the directories of `mig:LAYOUT:mps`: in each instance's
/// `gpu<K>-gi<G>` the job tries to move or replace its leaves and plant links in root's
/// directories, and fills its leaves with links to a victim, a hard link, FIFOs and
/// unreadable directories; one pipe directory ends mode 000. The epilog follows nothing,
/// removes everything, stops every daemon and destroys the instances.
fn mig_mps_hostile_leaves(c: &Cluster) {
    let victim = Victim::new(c, "mig-mps-leaves");
    let before = c.gpu_layout();
    let user = as_user(ATTACKER);
    let script = format!(
        r#"echo COLLOC_MPS_PIPES=$COLLOC_MPS_PIPES
for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  p=${{kv#*=}}; g=$(dirname "$p"); j=$(dirname "$g"); l=$g/log; n=$(basename "$g")
  echo "DAEMON_$n=$(cat "$p/nvidia-cuda-mps-control.pid")"
  mv "$g" "$g.old" 2>/dev/null && echo MOVED=$n
  mv "$p" "$g/p2" 2>/dev/null && echo MOVED=$n
  rm -rf "$l" 2>/dev/null; [ -d "$l" ] || echo MOVED=$n
  ln -s {v} "$g/evil" 2>/dev/null && echo LINKED=$n
  ln -s {v} "$j/evil-$n" 2>/dev/null && echo LINKED=$n
  ln -s {v} "$p/victim"; ln -s {v}/file "$l/control.log"
  ln {v}/file "$l/hard" 2>/dev/null && echo HARD=$n
  mkfifo "$p/fifo" "$l/fifo"
  mkdir -p "$l/a/b/c" && touch "$l/a/b/c/f" && chmod 000 "$l/a/b" "$l/a"
done
chmod 000 "$p"
"#,
        v = victim.dir.display()
    );
    let id = c.submit(
        &args(&["--colloc=mig:3g:mps", "--gres=gpu:1"], &user),
        &script,
    );
    let end = wait_job_end(c, id);
    victim.assert_intact();
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let vars = c.job_vars(id);
    assert_eq!(mig_pipes(&vars).len(), 2, "{vars:?}");
    for k in ["MOVED", "LINKED", "HARD"] {
        assert!(!vars.contains_key(k), "{k}: {vars:?}");
    }
    let daemons: Vec<u32> = vars
        .iter()
        .filter(|(k, _)| k.starts_with("DAEMON_"))
        .map(|(_, v)| v.parse().expect("a daemon pid"))
        .collect();
    assert_eq!(daemons.len(), 2, "{vars:?}");
    assert_gone(&daemons);
    assert_no_mps_under(c, id);
    assert_node_clean(c, &before);
}

/// Finding 5 on `mig:1g:mps` over two GPUs: the job stops (SIGSTOP) its fourteen
/// daemons, one per instance; the epilog stops them all within one MPS budget (plus the
/// MIG part), destroys the instances, and the node stays in service.
fn mig_mps_stopped_daemons(c: &Cluster) {
    let before = c.gpu_layout();
    let stopped = c.jobs_dir().join("mig-stopped");
    let go = c.jobs_dir().join("mig-stopped-go");
    let user = as_user(ATTACKER);
    let t = Instant::now();
    let id = c.submit(
        &args(&["--colloc=mig:1g:mps", "--gres=gpu:2"], &user),
        &format!(
            r#"echo COLLOC_MPS_PIPES=$COLLOC_MPS_PIPES
for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  pid=$(cat "${{kv#*=}}/nvidia-cuda-mps-control.pid")
  kill -STOP "$pid" && echo STOPPED_$pid=yes
done
touch {stopped}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            stopped = stopped.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &stopped);
    println!(
        "mig:1g:mps on 2 GPUs (14 daemons) up after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    std::fs::write(&go, "").unwrap();
    let t = Instant::now();
    let end = wait_job_end(c, id);
    let took = t.elapsed();
    println!(
        "epilog with 14 stopped daemons in MIG instances: {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let vars = c.job_vars(id);
    let pids: Vec<u32> = vars
        .keys()
        .filter_map(|k| k.strip_prefix("STOPPED_")?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 14, "{vars:?}");
    // The MPS part (20 s) and the MIG part (15 s at most), with room for Slurm.
    assert!(
        took < MPS_RESTORE_BUDGET + Duration::from_secs(25),
        "the epilog took {took:?}"
    );
    assert_gone(&pids);
    assert_no_mps_under(c, id);
    assert_node_clean(c, &before);
}

/// The MIG instance (GPU 0) whose compute instance has this UUID.
fn gi_of(c: &Cluster, uuid: &str) -> u64 {
    c.instances(0)
        .iter()
        .find(|gi| {
            gi["cis"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|ci| ci["uuid"].as_str() == Some(uuid))
        })
        .and_then(|gi| gi["id"].as_u64())
        .unwrap_or_else(|| panic!("no instance {uuid} in {:?}", c.instances(0)))
}

/// The job kills its daemons and puts its own processes in their place: in the first
/// instance its own control daemon (the same program, its pipe directory spelt
/// `PIPE/.`, so the environment differs from the one colloc started), holding the
/// instance's FIFO; in the second a `setsid` process named like an MPS server outside
/// the job's directories, on that instance as the driver lists it. After the job none of
/// them runs, the instances are destroyed and the node is in service.
fn mig_mps_replaced_daemons(c: &Cluster) {
    let before = c.gpu_layout();
    let ready = c.jobs_dir().join("mig-replaced-ready");
    let go = c.jobs_dir().join("mig-replaced-go");
    let user = as_user(ATTACKER);
    let mps = c.jobs_dir().join("nvidia-cuda-mps-control");
    std::fs::copy(
        colloc_slurm_tests::repo_root().join("tests/fake-mps/nvidia-cuda-mps-control"),
        &mps,
    )
    .unwrap();
    std::fs::set_permissions(&mps, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = c.submit(
        &args(&["--colloc=mig:3g:mps", "--gres=gpu:1"], &user),
        &format!(
            r#"set -- ${{COLLOC_MPS_PIPES//,/ }}
u1=${{1%%=*}}; p1=${{1#*=}}; u2=${{2%%=*}}; p2=${{2#*=}}
echo U1=$u1; echo U2=$u2
kill -9 "$(cat "$p1/nvidia-cuda-mps-control.pid")" "$(cat "$p2/nvidia-cuda-mps-control.pid")"
sleep 0.5
rm -f "$p1/nvidia-cuda-mps-control.pid"
CUDA_VISIBLE_DEVICES=$u1 CUDA_MPS_PIPE_DIRECTORY="$p1/." CUDA_MPS_LOG_DIRECTORY="$(dirname "$p1")/log" \
  setsid {mps} -d </dev/null >/dev/null 2>&1
echo OWN1=$(cat "$p1/nvidia-cuda-mps-control.pid")
cd /
CUDA_VISIBLE_DEVICES=$u2 CUDA_MPS_PIPE_DIRECTORY=/dev/null \
  setsid bash -c 'exec -a nvidia-cuda-mps-server sleep 1000' </dev/null >/dev/null 2>&1 &
echo OWN2=$!
(exec 3<"$p2"; CUDA_MPS_PIPE_DIRECTORY=/dev/null exec setsid sleep 1000 </dev/null >/dev/null 2>&1) &
echo OWN3=$!
touch {ready}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            mps = mps.display(),
            ready = ready.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    let vars = c.job_vars(id);
    let own1: u32 = vars["OWN1"].parse().expect("the user's own daemon");
    let own2: u32 = vars["OWN2"].parse().expect("the user's own server");
    let own3: u32 = vars["OWN3"]
        .parse()
        .expect("the user's holder of a pipe dir");
    assert!(
        pid_alive(own1) && pid_alive(own2) && pid_alive(own3),
        "{vars:?}"
    );
    // The driver lists the user's process on the second instance, as it would a CUDA
    // process there; it drops it once the process is gone.
    let gi = gi_of(c, &vars["U2"]).to_string();
    let own2_s = own2.to_string();
    c.fake_ctl(&[
        "attach", "--gpu", "0", "--gi", &gi, "--pid", &own2_s, "--mps", "server",
    ]);
    std::fs::write(&go, "").unwrap();
    let mut detached = false;
    let end = c.wait_until(&format!("job {id} to end"), || {
        if !detached && !pid_alive(own2) {
            // The driver drops a killed process's context.
            c.fake_ctl(&["detach", "--pid", &own2_s]);
            detached = true;
        }
        assert!(
            !c.node_state().contains("drain"),
            "the node drained: {}",
            c.node_reason()
        );
        let info = c.job_info(id)?;
        let state = info.get("JobState")?.clone();
        let busy = matches!(
            state.as_str(),
            "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"
        );
        (!busy).then(|| JobEnd {
            state,
            exit_code: info.get("ExitCode").cloned().unwrap_or_default(),
        })
    });
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(!pid_alive(own1), "the user's own daemon {own1} still runs");
    assert!(
        !pid_alive(own2),
        "the user's process {own2} on the instance still runs"
    );
    assert!(
        !pid_alive(own3),
        "the user's process {own3} holding a pipe dir still runs"
    );
    assert_no_mps_under(c, id);
    assert_node_clean(c, &before);
}

/// Finding 4 on `mig:1g:mps`: run_dir (a capped tmpfs) has no room for the job's
/// directory (each job's is a tmpfs of its own since issue 35, so run_dir gives one inode
/// per job). The job is refused with the figures, its instances destroyed, nothing is
/// left in run_dir, and the node stays in service.
fn mig_mps_run_dir_full(c: &Cluster) {
    let before = c.gpu_layout();
    let run = c.run_dir();
    {
        // 1 for the mount's root, 1 free: not enough for a job's directory.
        let _run = NodeMount::tmpfs(c, &run, "size=1m,nr_inodes=2,mode=0755");
        let victim = as_user(VICTIM);
        let id = c.submit(
            &args(&["--colloc=mig:1g:mps", "--gres=gpu:1"], &victim),
            "echo RAN",
        );
        let end = wait_job_end(c, id);
        assert_eq!(end.state, "FAILED", "{end:?}; stderr: {}", c.job_err(id));
        assert_eq!(end.exit_code, "1:0", "{end:?}");
        assert!(!c.job_out(id).contains("RAN"), "the refused job ran");
        let err = c.job_err(id);
        assert!(
            err.contains("cannot set up the job's MPS directories")
                && err.contains("no space left in run_dir"),
            "{err}"
        );
        assert_no_mps_under(c, id);
        assert_node_clean(c, &before);
    }
    // With room again the same job runs.
    let victim = as_user(VICTIM);
    let id = c.submit(
        &args(&["--colloc=mig:1g:mps", "--gres=gpu:1"], &victim),
        "echo SLOTS=${COLLOC_DEVICES//[^,]/}",
    );
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert_eq!(c.job_vars(id)["SLOTS"], ",,,,,,", "{}", c.job_out(id));
    assert_node_clean(c, &before);
}

/// Two users' `mig:…:mps` jobs on two GPUs of the node at once. The attacker's job goes
/// through everything in run_dir that is not its own (the victim's instance directories,
/// pipes, daemons) trying to read, write, signal and send `quit`, and ends first: its
/// epilog leaves the victim's daemons and instances alone; the victim's job then ends
/// normally and the node is clean.
fn mig_mps_two_users(c: &Cluster) {
    let before = c.gpu_layout();
    let vready = c.jobs_dir().join("two-users-victim-ready");
    let vgo = c.jobs_dir().join("two-users-victim-go");
    let victim = as_user(VICTIM);
    let attacker = as_user(ATTACKER);
    let vid = c.submit(
        &args(&["--colloc=mig:3g:mps:2", "--gres=gpu:1"], &victim),
        &format!(
            r#"echo COLLOC_MPS_PIPES=$COLLOC_MPS_PIPES
for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  p=${{kv#*=}}; echo "DAEMON_$(basename "$(dirname "$p")")=$(cat "$p/nvidia-cuda-mps-control.pid")"
done
touch {vready}
while [ ! -e {vgo} ]; do sleep 0.1; done
for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  p=${{kv#*=}}; pid=$(cat "$p/nvidia-cuda-mps-control.pid" 2>/dev/null)
  [ "$(cat "$p/devices" 2>/dev/null)" = "${{kv%%=*}}" ] && kill -0 "$pid" 2>/dev/null && echo STILL_$pid=yes
done
"#,
            vready = vready.display(),
            vgo = vgo.display()
        ),
    );
    c.wait_for_file(vid, &vready);
    let vvars = c.job_vars(vid);
    let vdaemons: Vec<u32> = vvars
        .iter()
        .filter(|(k, _)| k.starts_with("DAEMON_"))
        .map(|(_, v)| v.parse().expect("a daemon pid"))
        .collect();
    assert_eq!(vdaemons.len(), 2, "{vvars:?}");
    let mine = format!("job-{}", vid + 1);
    let aid = c.submit(
        &args(&["--colloc=mig:1g:mps", "--gres=gpu:1"], &attacker),
        &format!(
            r#"run={run}
for j in "$run"/job-*; do
  [ "$(basename "$j")" = {mine} ] && continue
  for g in "$j"/*; do
    for p in "$g/pipe" "$g/log"; do
      ls "$p" >/dev/null 2>&1 && echo BREACH_LS_$(basename "$g")=yes
      touch "$p/x" 2>/dev/null && echo BREACH_WRITE=yes
      echo quit 2>/dev/null >"$p/control" && echo BREACH_QUIT=yes
      chmod 777 "$p" 2>/dev/null && echo BREACH_CHMOD=yes
    done
    rm -rf "$g" 2>/dev/null; [ -d "$g" ] || echo BREACH_RM=yes
  done
done
for pid in {pids}; do kill -STOP $pid 2>/dev/null && echo BREACH_STOP=yes; kill -9 $pid 2>/dev/null && echo BREACH_KILL=yes; done
for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  CUDA_MPS_PIPE_DIRECTORY=${{kv#*=}} timeout 5 {mps} <<<quit
done
echo DONE=yes
"#,
            run = c.run_dir().display(),
            mine = mine,
            pids = vdaemons
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            mps = colloc_slurm_tests::repo_root()
                .join("tests/fake-mps/nvidia-cuda-mps-control")
                .display(),
        ),
    );
    assert_eq!(aid, vid + 1, "another job came between");
    let end = wait_job_end(c, aid);
    assert_eq!(
        end.state,
        "COMPLETED",
        "{end:?}; stderr: {}",
        c.job_err(aid)
    );
    let avars = c.job_vars(aid);
    assert!(avars.contains_key("DONE"), "{avars:?}\n{}", c.job_err(aid));
    let breaches: Vec<&String> = avars.keys().filter(|k| k.starts_with("BREACH")).collect();
    assert!(
        breaches.is_empty(),
        "the attacker got through: {breaches:?}"
    );
    assert_no_mps_under(c, aid);
    // The attacker's epilog has run: the victim's daemons and instances are untouched.
    for &pid in &vdaemons {
        assert!(pid_alive(pid), "the victim's daemon {pid} is gone");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        assert_ne!(state, "T", "the victim's daemon {pid} is stopped");
    }
    let victim_instances = c.nodes()[0].mig_uuids();
    assert_eq!(victim_instances.len(), 2, "{victim_instances:?}");
    std::fs::write(&vgo, "").unwrap();
    let end = wait_job_end(c, vid);
    assert_eq!(
        end.state,
        "COMPLETED",
        "{end:?}; stderr: {}",
        c.job_err(vid)
    );
    let still = c
        .job_vars(vid)
        .keys()
        .filter(|k| k.starts_with("STILL_"))
        .count();
    assert_eq!(still, 2, "{}", c.job_out(vid));
    assert_gone(&vdaemons);
    assert_no_mps_under(c, vid);
    assert_node_clean(c, &before);
}

/// Puts colloc.toml back (also when a test fails).
struct ConfigBack<'a> {
    c: &'a Cluster,
    text: String,
}

impl Drop for ConfigBack<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.c.colloc_config(), &self.text);
    }
}

/// The prolog of a `mig:3g:mps` job dies (SIGKILL) after the first instance's daemon
/// started, while the second one's control program runs. A dead prolog is a node fault
/// for Slurm (it drains the node); what colloc must do is leave nothing: the epilog Slurm
/// runs stops the started daemon and whatever the killed prolog had started, destroys
/// both instances and removes the journal and the job's directories. Simple profile only
/// (the production profile starts the daemons in the job's extern step, not the prolog).
fn mig_mps_prolog_killed(c: &Cluster) {
    if c.profile().production() {
        colloc_slurm_tests::skip("the daemons start in the extern step there, not the prolog");
    }
    let before = c.gpu_layout();
    // The instances mig:3g makes (the same placements, so the same UUIDs).
    let probe = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:1"],
        "echo DEVICES=$COLLOC_DEVICES",
    );
    let end = wait_job_end(c, probe);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(probe));
    let devices = c.job_vars(probe)["DEVICES"].clone();
    let uuids: Vec<&str> = devices.split(',').collect();
    assert_eq!(uuids.len(), 2, "{devices}");
    // A control program (root's, as colloc requires) that stalls for the second instance
    // and says which process started it.
    let config = c.colloc_config();
    let text = std::fs::read_to_string(&config).unwrap();
    let _back = ConfigBack {
        c,
        text: text.clone(),
    };
    let real = text
        .lines()
        .find_map(|l| l.strip_prefix("mps_control = "))
        .expect("mps_control in colloc.toml")
        .trim_matches('"')
        .to_string();
    let bin = c.dir().join("stall-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = bin.join("nvidia-cuda-mps-control");
    let parent = c.jobs_dir().join("stalled-prolog-pid");
    let _ = std::fs::remove_file(&parent);
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/bash\nif [[ ${{1:-}} == -d && ${{CUDA_VISIBLE_DEVICES-}} == {u} ]]; then\n\
             echo $PPID >{parent}\nexec 9<> <(:)\nread -t 60 -u 9\nexit 1\nfi\nexec {real} \"$@\"\n",
            u = uuids[1],
            parent = parent.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &config,
        text.replace(
            &format!("mps_control = \"{real}\""),
            &format!("mps_control = \"{}\"", wrapper.display()),
        ),
    )
    .unwrap();
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(&["--colloc=mig:3g:mps", "--gres=gpu:1"], &user),
        "echo RAN",
    );
    let prolog: u32 = c.wait_until("the second daemon's start", || {
        std::fs::read_to_string(&parent).ok()?.trim().parse().ok()
    });
    let comm = std::fs::read_to_string(format!("/proc/{prolog}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "slurmstepd", "the prolog is {prolog} ({comm})");
    // The first instance's daemon runs.
    let job_dir = c.node_path(&c.run_dir().join(format!("job-{id}")));
    let first: Vec<u32> = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            std::fs::read_to_string(e.path().join("pipe/nvidia-cuda-mps-control.pid")).ok()
        })
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    assert_eq!(first.len(), 1, "started daemons: {first:?}");
    let stalled: Vec<u32> = colloc_slurm_tests::pids_by_cmdline(|cmd| {
        cmd.starts_with(b"/bin/bash\0") && cmd.windows(9).any(|w| w == b"stall-bin")
    });
    assert!(
        !stalled.is_empty(),
        "the stalled control program is not found"
    );
    kill(prolog);
    c.wait_until("the epilog to restore the GPU", || {
        (c.journals().is_empty() && c.instances(0).is_empty() && !job_dir.exists()).then_some(())
    });
    assert!(!c.job_out(id).contains("RAN"));
    assert_gone(&first);
    for p in &stalled {
        assert!(!pid_alive(*p), "the stalled control program {p} still runs");
    }
    assert_no_mps_under(c, id);
    c.slurm("scancel").arg(id.to_string()).status().unwrap();
    c.wait_until("the held job to go", || c.squeue().is_empty().then_some(()));
    c.resume_node();
    c.wait_until("the node to resume", || {
        (c.node_state() == "idle").then_some(())
    });
    assert_node_clean(c, &before);
}

fn kill(pid: u32) {
    let rc = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(rc.success(), "kill -KILL {pid}");
}

/// Two users' `mig:…:mps` jobs submitted at the same moment, three times over: their
/// prologs and epilogs race on the node (two GPUs each, 14 and 4 daemons). Each job gets
/// its own instances and daemons, completes, and the node ends clean every time.
fn mig_mps_racing_users(c: &Cluster) {
    let before = c.gpu_layout();
    let attacker = as_user(ATTACKER);
    let victim = as_user(VICTIM);
    let script = r#"echo DEVICES=$COLLOC_DEVICES
for kv in ${COLLOC_MPS_PIPES//,/ }; do
  p=${kv#*=}; [ "$(cat "$p/devices")" = "${kv%%=*}" ] && echo SERVES=yes || echo SERVES=no
done
sleep 1
"#;
    for round in 0..3 {
        let a = c.submit(
            &args(&["--colloc=mig:1g:mps", "--gres=gpu:2"], &attacker),
            script,
        );
        let v = c.submit(
            &args(&["--colloc=mig:3g:mps:2", "--gres=gpu:2"], &victim),
            script,
        );
        let mut devices = Vec::new();
        // Both at once: each end is taken when first seen, whichever job ends first.
        let ends = wait_jobs_end(c, &[a, v]);
        for ((id, n), end) in [(a, 14), (v, 8)].into_iter().zip(ends) {
            assert_eq!(
                end.state,
                "COMPLETED",
                "round {round}, job {id}: {end:?}; stderr: {}",
                c.job_err(id)
            );
            let out = c.job_out(id);
            assert!(!out.contains("SERVES=no"), "round {round}: {out}");
            let vars = c.job_vars(id);
            let d: Vec<String> = vars["DEVICES"].split(',').map(str::to_string).collect();
            assert_eq!(d.len(), n, "round {round}: {out}");
            devices.push(d);
        }
        assert!(
            devices[0].iter().all(|d| !devices[1].contains(d)),
            "round {round}: both jobs were given an instance: {devices:?}"
        );
        assert_no_mps_under(c, a);
        assert_no_mps_under(c, v);
        assert_node_clean(c, &before);
    }
}

/// The user, from a shell on the node (outside Slurm), stops (SIGSTOP) every process of
/// theirs as soon as it appears: the control program colloc runs as them to `quit` the
/// daemons, and the child that empties their leaves as them. The epilog still ends within
/// its budget and the node stays in service; another user's job that follows runs; what
/// could not be removed is moved aside and goes once the user's processes are gone.
fn mig_mps_user_stops_colloc_children(c: &Cluster) {
    stop_colloc_children(c, false);
}

/// Puts the fake driver's timing quirks back (also when a test fails).
struct QuirksBack<'a>(&'a Cluster);

impl Drop for QuirksBack<'_> {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.0.fake_ctl(&[
                "quirks",
                "--linger-listings",
                "0",
                "--busy-after-ci-destroy",
                "0",
            ]);
        }));
    }
}

/// The same stopper, on a driver that (as real ones do) keeps a destroyed GPU instance
/// listed for a while and answers IN_USE to the first destroys of a GPU instance whose
/// compute instance just went. The user's stopper makes the MPS part of the epilog take
/// its whole 20 s; the MIG part must still get its own 15 s to wait and retry, so the
/// GPU is not left marked (refused to every later job until an admin runs `colloc
/// restore`; drained where colloc switched its MIG mode).
fn mig_mps_slow_mps_part_keeps_mig_budget(c: &Cluster) {
    let _quirks = QuirksBack(c);
    c.fake_ctl(&[
        "quirks",
        "--linger-listings",
        "20",
        "--busy-after-ci-destroy",
        "3",
    ]);
    stop_colloc_children(c, true);
}

/// The account of an attacker that acts on every process of its user host-wide (the
/// stopper stops them, the tracer takes over any `quit` of theirs): one per role and
/// cluster profile, used by no other test, because scripts/test.sh runs both profiles'
/// suites at once. With the shared attacker account, the simple profile's stopper froze
/// the production profile's `mig:…:mps` daemons of another test (its prolog's start and
/// its epilog's quit then waited out their budgets).
fn profile_account(c: &Cluster, role: &str) -> String {
    // Its Slurm's release too: the suites of two releases run at once (scripts/test.sh),
    // and a test that looks for the account's processes must see only its own cluster's.
    let (major, minor) = c.slurm_release();
    format!("sec-{role}-{}-{major}{minor:02}", c.profile().name())
}

fn stop_colloc_children(c: &Cluster, check_gpu_right_after: bool) {
    let before = c.gpu_layout();
    let account = profile_account(c, "stopper");
    let (uid, gid) = ensure_user(&account);
    let user = as_user(&account);
    let ready = c.jobs_dir().join("stop-children-ready");
    let go = c.jobs_dir().join("stop-children-go");
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&go);
    let id = c.submit(
        &args(&["--colloc=mig:3g:mps", "--gres=gpu:1"], &user),
        &format!(
            r#"for kv in ${{COLLOC_MPS_PIPES//,/ }}; do
  l=$(dirname "${{kv#*=}}")/log; mkdir "$l/many" && (cd "$l/many" && seq 20000 | xargs touch)
done
touch {ready}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            ready = ready.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    // The stopper: every process of the user but itself, over and over.
    let mut stopper = Command::new("bash")
        .arg("-c")
        .arg(
            r#"while :; do for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue
  [ -O "$d" ] && kill -STOP "$p" 2>/dev/null; done; done"#,
        )
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::fs::write(&go, "").unwrap();
        // The job's own processes are stopped too: cancel it, as its user would find.
        std::thread::sleep(Duration::from_secs(1));
        c.slurm("scancel").arg(id.to_string()).status().unwrap();
        let t = Instant::now();
        let end = wait_job_end(c, id);
        let took = t.elapsed();
        println!(
            "epilog with the user stopping colloc's children: {:.1} s",
            took.as_secs_f64()
        );
        assert!(
            took < MPS_RESTORE_BUDGET + Duration::from_secs(25),
            "the epilog took {took:?}: {end:?}"
        );
        println!(
            "left in run_dir while the stopper runs: {:?}",
            run_dir_entries(c)
        );
        if check_gpu_right_after {
            assert!(
                c.journals().is_empty(),
                "the GPU was left marked: {:?}\n{}",
                c.journals(),
                c.slurmd_log_tail(30)
            );
            assert!(c.instances(0).is_empty(), "{:?}", c.instances(0));
        }
        let victim = as_user(VICTIM);
        let t = Instant::now();
        let v = c.submit(
            &args(&["--colloc=mig:3g:mps", "--gres=gpu:1"], &victim),
            "echo RAN",
        );
        let end = wait_job_end(c, v);
        println!(
            "the next user's job took {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(v));
        assert!(c.job_out(v).contains("RAN"));
        assert!(!c.node_state().contains("drain"), "{}", c.node_reason());
    }));
    let _ = stopper.kill();
    let _ = stopper.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // With the stopper gone, an admin's restore --all removes what was moved aside (the
    // stopped processes of the user that keep it busy are killed).
    let out = c.colloc(&["restore", "--all"]);
    println!(
        "restore --all: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_no_mps_under(c, id);
    assert_node_clean(c, &before);
}

/// The user, from a shell on the node, takes over the epilog's `quit`: the control program
/// ran as the user outside the job's cgroup and mount namespace, and once it has exec'd
/// the user may trace it (no Yama, or `ptrace_scope` 0) and make it exec anything. The user
/// keeps it waiting (the daemon's pid file names a live process of theirs) and makes it run
/// a `setsid sleep`. That outlived the epilog, in root's mount namespace and slurmd's
/// cgroups, past the job's end, while root killed only the control program's pid. Now,
/// under Contain (production), the epilog runs no control program at all (it kills what
/// Slurm left of the daemons); elsewhere what the taken-over `quit` starts ends with it.
fn quit_taken_over(c: &Cluster) {
    let _whole = c.whole_gpus();
    let contain = c.profile().production();
    let before = c.gpu_layout();
    let account = profile_account(c, "tracer");
    let (uid, gid) = ensure_user(&account);
    let user = as_user(&account);
    let ready = c.jobs_dir().join("tracer-ready");
    let go = c.jobs_dir().join("tracer-go");
    let escaped = c
        .jobs_dir()
        .join(format!("tracer-escaped-{}", c.profile().name()));
    for f in [&ready, &go, &escaped] {
        let _ = std::fs::remove_file(f);
    }
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        &format!(
            "echo COLLOC_MPS_PIPES=$COLLOC_MPS_PIPES\ntouch {ready}\n\
             while [ ! -e {go} ]; do sleep 0.1; done\n",
            ready = ready.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    let pipes = pipes_of(&c.job_vars(id));
    assert_eq!(pipes.len(), 1, "{}", c.job_out(id));
    let tool = c.jobs_dir().join("colloc-sec-tracer");
    std::fs::copy(env!("CARGO_BIN_EXE_colloc-sec-tracer"), &tool).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = escaped.display();
    let cmd = format!(
        "setsid sh -c 'read -r p r </proc/self/stat; echo $p >{e}.tmp; mv {e}.tmp {e}; \
         exec sleep 600' </dev/null >/dev/null 2>&1 & \
         while [ ! -e {e} ]; do sleep 0.01; done"
    );
    let mut tracer = Command::new(&tool)
        .args(["quit", &cmd])
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The daemon's pid file names the tracer, alive: a quit waits for it to exit.
    let pidfile = format!("{}/nvidia-cuda-mps-control.pid", pipes[0]);
    // In the node's namespace: the job's directory is a tmpfs mounted there.
    let planted = c
        .node_command("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            &format!("echo {} >{pidfile}", tracer.id()),
        ])
        .status()
        .unwrap();
    assert!(planted.success());
    std::fs::write(&go, "").unwrap();
    let t = Instant::now();
    let end = c.wait_done(id);
    let took = t.elapsed();
    // The tracer ends once it has taken over a quit (or was refused); one that found none
    // is stopped here.
    let waited = Instant::now();
    while tracer.try_wait().unwrap().is_none() && waited.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let found_none = tracer.try_wait().unwrap().is_none();
    if found_none {
        let _ = tracer.kill();
    }
    let out = tracer.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!(
        "epilog with a tracer waiting for its quit: {:.1} s; tracer: {}",
        took.as_secs_f64(),
        if found_none { "found no quit" } else { &said }
    );
    let left = std::fs::read_to_string(&escaped)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok());
    let alive = left.filter(|&p| {
        pid_alive(p)
            && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x00600\x00")
    });
    let seen = alive.map(|p| {
        let cgroups = std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
        let ns = colloc_slurm_tests::pid_mount_ns(p);
        kill(p);
        format!(
            "pid {p}, mount ns {ns:?}, cgroups {}",
            cgroups.replace('\n', " ")
        )
    });
    assert!(
        seen.is_none(),
        "what the user made the epilog's quit start outlived it: {}",
        seen.unwrap_or_default()
    );
    let refused = out.status.code() == Some(3);
    if contain {
        assert!(
            found_none,
            "under Contain the epilog ran the control program as the user: {said}"
        );
    } else if !refused {
        assert!(out.status.success(), "tracer: {said}");
        assert!(
            left.is_some(),
            "the taken-over quit never ran the user's command"
        );
    }
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(
        took < MPS_RESTORE_BUDGET + Duration::from_secs(10),
        "the epilog took {took:?}"
    );
    assert!(!c.node_state().contains("drain"), "{}", c.node_reason());
    assert_node_clean(c, &before);
    if refused && !contain {
        colloc_slurm_tests::skip(&format!("the kernel refuses ptrace here: {said}"));
    }
}
