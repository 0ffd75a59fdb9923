//! Root-side code against a hostile local user (issue 11, SECURITY.md), on a real Slurm
//! cluster with four fake GPUs. Jobs run as unprivileged accounts the suite makes
//! (`sec-attacker`, `sec-victim`). Each test is one of the issue's findings 1–7, and after
//! each: the victim paths are as they were, the node is idle (not drained), the GPUs are
//! as before and no MPS daemon is left.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use colloc_slurm_tests::{
    ensure_user, pid_alive, processes_of_pipe_dir, run_suite, Cluster, JobEnd, Test,
};
use serde_json::Value;

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
            "a_tree_deeper_than_131072_levels_is_removed_without_draining",
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
            "a_full_run_dir_refuses_the_next_job_not_the_node",
            full_run_dir,
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
    c.wait_until(&format!("job {id} to end"), || {
        let node = c.node_state();
        if node.contains("drain") {
            panic!(
                "the node drained ({}) while job {id} ran\n--- slurmd log ---\n{}",
                c.node_reason(),
                c.slurmd_log_tail(20)
            );
        }
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
    })
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

/// Finding 3 (issue 11), and issue 23 finding 5: a tree 140,000 directories deep in the
/// job's log directory, past the 131,072 levels removal used to stop at. run_dir is a
/// tmpfs (/run) on real nodes: so it is here, in the node's namespace. The epilog removes
/// it within its 5 s, or moves it aside for the next prolog or `restore --all` (each
/// attempt removes from the bottom up, so each makes progress); it goes in the end, and
/// the node stays in service throughout.
fn deep_tree(c: &Cluster) {
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=256m,mode=0755");
    let user = as_user(ATTACKER);
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        r#"cd "$CUDA_MPS_LOG_DIRECTORY" && perl -e 'for (1..140000) { mkdir "d" or die "mkdir: $!"; chdir "d" or die "chdir: $!" }' && echo DEEP=done"#,
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert_eq!(c.job_vars(id).get("DEEP").map(String::as_str), Some("done"));
    assert_eq!(c.node_state(), "idle", "{}", c.node_reason());
    let left = run_dir_entries(c);
    assert!(left.iter().all(|e| e == ".leftovers"), "{left:?}");
    let mut out = None;
    for _ in 0..10 {
        if run_dir_entries(c).is_empty() {
            break;
        }
        // In the node's namespace, where run_dir is the tmpfs.
        let o = c.nodes()[0]
            .command(colloc_slurm_tests::colloc_bin())
            .args(["restore", "--all"])
            .output()
            .unwrap();
        println!(
            "restore --all: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        out = Some(o);
    }
    assert!(
        run_dir_entries(c).is_empty(),
        "never removed: {:?}",
        out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
    );
    assert_node_clean(c, &before);
}

/// Issue 23, finding 4: a job fills the inodes of the file system that holds state_dir
/// (through a directory users can write on it, as /var/tmp often is). The epilogs' journal
/// writes fail, yet they undo what their jobs had (a MIG layout, an MPS daemon) and the
/// node stays in service; the next job's prolog cannot write its journal and refuses it
/// (its tasks fail with why), not the node; once there is room, jobs run again.
fn full_state_dir(c: &Cluster) {
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

/// Finding 4: one user's files fill run_dir; another user's MPS job is refused, the node
/// stays in service.
fn full_run_dir(c: &Cluster) {
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
    assert_eq!(end.state, "FAILED", "{end:?}; stderr: {}", c.job_err(id));
    assert_eq!(end.exit_code, "1:0", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the refused job ran");
    let err = c.job_err(id);
    assert!(
        err.contains("cannot set up the job's MPS directories")
            && err.contains("No space left on device"),
        "{err}"
    );
    assert!(!c.node_state().contains("drain"), "{}", c.node_reason());
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(filler);
    assert_eq!(
        end.state,
        "COMPLETED",
        "{end:?}; stderr: {}",
        c.job_err(filler)
    );
    assert_node_clean(c, &before);
}

/// Finding 5: the job stops (SIGSTOP) its daemons on four GPUs; the epilog still ends
/// within one budget, and no daemon is left.
fn stopped_daemons(c: &Cluster) {
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
