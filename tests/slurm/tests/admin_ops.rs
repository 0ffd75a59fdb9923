//! What an admin does to colloc on a live cluster (issue 28), on a real Slurm cluster
//! with two fake A100s: an admin's node comment survives colloc's record, a broken
//! colloc.toml refuses `--colloc` jobs without draining the node (and the epilog still
//! restores with the last good copy), and `enabled = false` switches colloc off while a
//! job runs with MPS, leaving no GPU reconfigured. Turning colloc on (issue 34): a
//! `--colloc` job on a node whose slurmd started before the plugstack line was added is
//! refused with that cause and its fix, and runs once slurmd restarted; under an
//! `optional` line a job colloc refuses runs anyway, without collocation.

use std::path::{Path, PathBuf};

use colloc_slurm_tests::{pid_alive, processes_of_pipe_dir, run_suite, Cluster, ClusterSpec, Test};

fn main() {
    let tests: &[Test] = &[
        ("an_admins_node_comment_survives_colloc_jobs", admin_comment),
        (
            "a_broken_colloc_toml_refuses_colloc_jobs_with_the_parse_error_and_drains_nothing",
            broken_config,
        ),
        (
            "enabled_false_switches_colloc_off_while_an_mps_job_runs_and_on_again",
            switch_off_and_on,
        ),
        (
            "a_slurmd_started_before_colloc_was_enabled_is_named_and_a_restart_fixes_it",
            enable_needs_restart,
        ),
        (
            "under_an_optional_plugstack_line_a_refused_job_runs_without_collocation",
            optional_line,
        ),
    ];
    run_suite(2, None, tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The node's Slurm comment as `scontrol show node` prints it (`""` when unset).
fn comment(c: &Cluster) -> String {
    let out = c
        .slurm("scontrol")
        .args(["show", "node", &c.node_names()[0]])
        .output()
        .unwrap();
    colloc_core::publish::parse_comment(&text(&out.stdout))
}

fn set_comment(c: &Cluster, value: &str) {
    let out = c
        .slurm("scontrol")
        .args([
            "update",
            &format!("NodeName={}", c.node_names()[0]),
            &format!("Comment={value}"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn assert_idle_and_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.squeue(), "");
}

/// Puts colloc.toml back however the test ends.
struct Restore {
    path: PathBuf,
    text: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        std::fs::write(&self.path, &self.text).expect("restore colloc.toml");
    }
}

fn keep_config(c: &Cluster) -> Restore {
    let path = c.colloc_config();
    let text = std::fs::read_to_string(&path).unwrap();
    Restore { path, text }
}

/// A job script that writes its MPS pipe directory to `ready`, then waits for `go` (at
/// most two minutes).
fn gated(ready: &Path, go: &Path) -> String {
    format!(
        "printf '%s\\n' \"$CUDA_MPS_PIPE_DIRECTORY\" >{0}.tmp && mv {0}.tmp {0}\n\
         for i in $(seq 600); do [ -e {1} ] && break; sleep 0.2; done\n",
        ready.display(),
        go.display()
    )
}

fn admin_comment(c: &Cluster) {
    let _whole = c.whole_gpus();
    let admin = "rack 4, fan replaced";
    set_comment(c, admin);
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    // The prolog and epilog published their record beside the admin's words.
    let now = comment(c);
    let (kept, record) = colloc_core::publish::split_comment(&now);
    assert_eq!(kept, admin, "comment now: {now}");
    let record = record.unwrap_or_else(|| panic!("no colloc record in {now:?}"));
    let rec = colloc_core::publish::NodeRecord::decode(record)
        .expect("a colloc record")
        .expect("one this version reads");
    assert!(rec.by.starts_with("plugin/"), "{rec:?}");
    assert!(rec.jobs.is_empty(), "{rec:?}");
    // The admin edits the comment between jobs: the next job keeps that too, and colloc
    // still keeps one record, not two.
    set_comment(c, &format!("see ticket 12 {record}"));
    let id = c.submit(&["--colloc=mps", "--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    let now = comment(c);
    let (kept, record) = colloc_core::publish::split_comment(&now);
    assert_eq!(kept, "see ticket 12", "comment now: {now}");
    assert!(record.is_some(), "{now}");
    assert_eq!(now.matches("{\"colloc\":").count(), 1, "{now}");
    set_comment(c, "");
    assert_idle_and_clean(c);
}

fn broken_config(c: &Cluster) {
    let _whole = c.whole_gpus();
    let cfg = c.colloc_config();
    let restore = keep_config(c);
    let ready = c.jobs_dir().join("broken-ready");
    let go = c.jobs_dir().join("broken-go");
    let _ = std::fs::remove_file(&go);
    // A job under the good config: its prolog starts MPS (and keeps the config's copy).
    let running = c.submit(&["--colloc=mps", "--gres=gpu:1"], &gated(&ready, &go));
    c.wait_for_file(running, &ready);
    let pipe = std::fs::read_to_string(&ready).unwrap().trim().to_string();
    assert!(
        !pipe.is_empty(),
        "the running job has no MPS pipe directory"
    );
    let daemons = processes_of_pipe_dir(&pipe);
    assert!(!daemons.is_empty(), "no MPS daemon for {pipe}");
    assert_eq!(c.journals().len(), 1);
    let last_good = colloc_core::lastgood::path(&cfg);
    assert_eq!(
        std::fs::read_to_string(&last_good).unwrap(),
        restore.text,
        "the prolog kept the config that loaded"
    );

    // The admin pushes a typo.
    std::fs::write(&cfg, top_key(&restore.text, "bogus_key = 1")).unwrap();
    let line = top_key(&restore.text, "bogus_key = 1")
        .lines()
        .position(|l| l == "bogus_key = 1")
        .unwrap()
        + 1;
    let want = format!("{}:{line}:1: unknown field `bogus_key`", cfg.display());
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_ended(id), "FAILED");
    assert!(!c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("colloc is not available on this node, its configuration is broken"),
        "stderr: {err}"
    );
    assert!(err.contains(&want), "stderr: {err}\nwant: {want}");
    assert!(
        c.slurmd_log_tail(400).contains(&want),
        "slurmd log:\n{}",
        c.slurmd_log_tail(40)
    );
    let state = c.node_state();
    assert!(
        !state.contains("drain") && !state.contains("down"),
        "node {state}: {}",
        c.node_reason()
    );
    // Jobs that ask for nothing run as usual.
    let plain = c.submit(&["--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_ended(plain), "COMPLETED");
    // The running job ends while the config is broken: its epilog restores with the last
    // good copy: no journal, no MPS daemon left.
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.wait_done(running).state, "COMPLETED");
    c.wait_until("the epilog to restore", || {
        c.journals().is_empty().then_some(())
    });
    assert!(
        daemons.iter().all(|&p| !pid_alive(p)),
        "MPS daemons left: {daemons:?}"
    );
    assert_eq!(c.node_state(), "idle", "node: {}", c.node_reason());
    assert!(
        c.slurmd_log_tail(400).contains(&format!(
            "the epilog restores with the last good copy {}",
            last_good.display()
        )),
        "slurmd log:\n{}",
        c.slurmd_log_tail(40)
    );

    // Fixed: the next job works.
    drop(restore);
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1"], "echo RAN $COLLOC_MODE");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    assert!(c.job_out(id).contains("RAN naive"), "{}", c.job_out(id));
    std::fs::remove_file(&go).unwrap();
    assert_idle_and_clean(c);
}

fn switch_off_and_on(c: &Cluster) {
    let _whole = c.whole_gpus();
    let cfg = c.colloc_config();
    let restore = keep_config(c);
    let ready = c.jobs_dir().join("off-ready");
    let go = c.jobs_dir().join("off-go");
    let _ = std::fs::remove_file(&go);
    let running = c.submit(&["--colloc=mps", "--gres=gpu:1"], &gated(&ready, &go));
    c.wait_for_file(running, &ready);
    let pipe = std::fs::read_to_string(&ready).unwrap().trim().to_string();
    let daemons = processes_of_pipe_dir(&pipe);
    assert!(!daemons.is_empty(), "no MPS daemon for {pipe}");

    // Switch off: the admin's one line.
    std::fs::write(&cfg, top_key(&restore.text, "enabled = false")).unwrap();
    let off = "colloc is switched off here for now (enabled = false in";
    // At submission, where the config is readable (here: the same file).
    match c.sbatch(&["--colloc=mig:3g", "--gres=gpu:1"], "echo RAN") {
        Err(out) => assert!(text(&out.stderr).contains(off), "{}", text(&out.stderr)),
        Ok(id) => panic!("job {id} was queued while colloc is off"),
    }
    // A job that slipped past submission (a submit host without the file) is refused
    // when it starts, with the same line; the node stays up.
    std::fs::write(&cfg, &restore.text).unwrap();
    let held = c.submit(&["--colloc=naive", "--gres=gpu:1", "--hold"], "echo RAN");
    std::fs::write(&cfg, top_key(&restore.text, "enabled = false")).unwrap();
    let out = c
        .slurm("scontrol")
        .args(["release", &held.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(c.wait_ended(held), "FAILED");
    let err = c.job_err(held);
    assert!(
        err.contains(&format!("--colloc=naive: {off}")),
        "stderr: {err}"
    );
    assert!(!c.job_out(held).contains("RAN"));
    // The running MPS job ends while colloc is off: its epilog restores its GPU.
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.wait_done(running).state, "COMPLETED");
    c.wait_until("the epilog to restore", || {
        c.journals().is_empty().then_some(())
    });
    assert!(
        daemons.iter().all(|&p| !pid_alive(p)),
        "MPS daemons left: {daemons:?}"
    );
    assert_eq!(c.node_state(), "idle", "node: {}", c.node_reason());

    // Switch on again: the next job gets its mode.
    drop(restore);
    let id = c.submit(&["--colloc=mps", "--gres=gpu:1"], "echo RAN $COLLOC_MODE");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    assert!(c.job_out(id).contains("RAN mps"), "{}", c.job_out(id));
    std::fs::remove_file(&go).unwrap();
    assert_idle_and_clean(c);
}

/// `text` (a colloc.toml) with a top-level `line` added before its first table (`[mig]`),
/// where TOML keeps it top-level.
fn top_key(text: &str, line: &str) -> String {
    match text.find("\n[") {
        Some(at) => format!("{}\n{line}{}", &text[..at], &text[at..]),
        None => format!("{text}{line}\n"),
    }
}

/// The admin adds colloc's plugstack line to nodes whose slurmd already runs: sbatch
/// accepts `--colloc` at once, but that slurmd runs no colloc prolog until it restarts.
/// On its own two-node cluster: n1's slurmd starts with no plugstack line, n2's with it.
fn enable_needs_restart(_shared: &Cluster) {
    let c = Cluster::start_with(&ClusterSpec::new(2, 1));
    let _whole = c.whole_gpus();
    let plugstack = c.dir().join("etc/plugstack.conf");
    let line = std::fs::read_to_string(&plugstack).unwrap();
    let n1 = c.node("n1");
    std::fs::write(&plugstack, "").unwrap();
    // A restart (as after a reboot) while plugstack.conf has no colloc line.
    n1.crash();
    n1.start_again();
    std::fs::write(&plugstack, &line).unwrap();

    let script = "echo RAN \"$COLLOC_MODE\"";
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1", "-w", "n1"], script);
    assert_eq!(c.wait_done(id).state, "FAILED", "{}", c.job_story(id));
    let err = c.job_err(id);
    assert!(
        err.contains("--colloc=naive: the slurmd of node n1 (pid ")
            && err.contains("started before colloc's plugstack.conf line was added")
            && err.contains("restart slurmd"),
        "stderr: {err}"
    );
    assert!(!err.contains("state_dir"), "blames state_dir: {err}");
    assert!(!c.job_out(id).contains("RAN"), "{}", c.job_out(id));
    assert_eq!(n1.state(), "idle", "n1: {}", n1.reason());
    // n2's slurmd loaded colloc when it started: the same job runs there.
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1", "-w", "n2"], script);
    assert_eq!(c.wait_done(id).state, "COMPLETED", "{}", c.job_story(id));
    assert!(c.job_out(id).contains("RAN naive"), "{}", c.job_out(id));

    // The fix the line names: restart n1's slurmd.
    n1.crash();
    n1.start_again();
    let id = c.submit(&["--colloc=naive", "--gres=gpu:1", "-w", "n1"], script);
    assert_eq!(c.wait_done(id).state, "COMPLETED", "{}", c.job_story(id));
    assert!(c.job_out(id).contains("RAN naive"), "{}", c.job_out(id));
}

/// What `optional` in plugstack.conf means for a job colloc refuses (a MIG layout that
/// does not fit the node's A100, seen in the prolog): Slurm ignores the task's failure,
/// and the job runs on its whole GPU with no COLLOC_MODE. Under `required` it fails.
fn optional_line(c: &Cluster) {
    let plugstack = c.dir().join("etc/plugstack.conf");
    let line = std::fs::read_to_string(&plugstack).unwrap();
    struct Put(PathBuf, String);
    impl Drop for Put {
        fn drop(&mut self) {
            std::fs::write(&self.0, &self.1).expect("restore plugstack.conf");
        }
    }
    let _restore = Put(plugstack.clone(), line.clone());
    let script = "echo RAN \"mode=$COLLOC_MODE\"";
    let args = ["--colloc=mig:7gx2", "--gres=gpu:1"];
    let id = c.submit(&args, script);
    assert_eq!(c.wait_done(id).state, "FAILED", "{}", c.job_story(id));
    assert!(!c.job_out(id).contains("RAN"), "{}", c.job_out(id));

    // slurmstepd reads plugstack.conf for each step: no restart needed for this change.
    std::fs::write(&plugstack, line.replacen("required", "optional", 1)).unwrap();
    let id = c.submit(&args, script);
    assert_eq!(c.wait_done(id).state, "COMPLETED", "{}", c.job_story(id));
    assert!(c.job_out(id).contains("RAN mode=\n"), "{}", c.job_out(id));
    assert_idle_and_clean(c);
}
