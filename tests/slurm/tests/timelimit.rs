//! Sweeps longer than the job's time limit (issue 25), on a real Slurm cluster, under the
//! profile of `COLLOC_CLUSTER_PROFILE` (CI runs both): the recipe of README.md and
//! colloc(1) — `--requeue`, `--signal=B:USR1@…`, `exec colloc run -f runs.toml` — with
//! the times shortened (`--time=1`; colloc warns 35 s ahead, `COLLOC_WARN_BEFORE`, and
//! gives the runs 10 s, `COLLOC_WARN_GRACE`). The runs checkpoint on SIGUSR1 and resume
//! from their checkpoint; one ignores SIGUSR1 and is stopped after the grace. colloc
//! requeues its own job until every run has succeeded; after each start of the job no
//! process of it is left (under proctrack/linuxproc too). A plain `colloc run` line (no
//! `exec`, no `--signal`) is warned by colloc's own watch of the end time, and the job
//! does not end early. Where the recipe is got wrong (`--signal=B:USR1` without `exec`:
//! bash dies of it), colloc sees its parent go and leaves nothing running after the job.
//!
//! Slurm holds a requeued job for its credential lifetime (2 minutes) before it may start
//! again; the test lets it start as soon as the node is idle (`StartTime=now`), which
//! changes nothing of what colloc does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use colloc_slurm_tests::{colloc_bin, fixture, pids, run_suite, Cluster, Profile, Test};
use serde_json::Value;

fn main() {
    // Each mostly waits for its job's time limit: one on the shared cluster, the other on
    // one of its own, at the same time.
    let tests: &[Test] = &[
        (
            "a_plain_colloc_run_line_is_warned_and_requeued_without_ending_early",
            plain_line,
        ),
        (
            "a_batch_shell_killed_by_b_usr1_leaves_no_process_of_the_job",
            shell_killed,
        ),
    ];
    let alone: &[Test] = &[(
        "the_documented_recipe_finishes_a_sweep_longer_than_its_time_limit",
        recipe,
    )];
    run_suite(1, None, tests, alone);
}

/// sbatch options of the test, not of the recipe: every start's output in one file (Slurm
/// truncates it when a requeued job starts again), to check what each start said.
const KEEP_OUTPUT: [&str; 1] = ["--open-mode=append"];

/// A folder for one test's job, with `runs.toml`: runs `ck1`.. checkpoint on SIGUSR1;
/// `deaf` (if asked) ignores it. Each has `steps` steps of 1 s.
fn sweep(c: &Cluster, name: &str, ck: u32, deaf: bool, steps: u32) -> PathBuf {
    let dir = c.jobs_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let script = fixture("wrapper/tests/fixtures/run/checkpoint.sh");
    let mut m = format!(
        "[defaults]\nenv = {{ CKPT_DIR = '{}', STEPS = '{steps}', STEP_S = '1' }}\n\
         [[sweep]]\nname = 'ck{{i}}'\ncommand = ['{}']\ngrid = {{ i = [{}] }}\n",
        dir.display(),
        script.display(),
        (1..=ck)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if deaf {
        m += &format!(
            "[[run]]\nname = 'deaf'\ncommand = ['{}']\nenv = {{ IGNORE_USR1 = '1' }}\n",
            script.display()
        );
    }
    std::fs::write(dir.join("runs.toml"), m).unwrap();
    dir
}

/// The job script: `sbatch` lines, the shortened times and the test's tag (in every
/// process of the job), then `colloc_line`.
fn job(dir: &Path, sbatch: &str, colloc_line: &str) -> String {
    format!(
        "{sbatch}\
         export COLLOC_CONFIG=/nonexistent/colloc.toml COLLOC_WARN_BEFORE=35s COLLOC_WARN_GRACE=10s\n\
         export TL_TAG={dir}\n\
         cd {dir}\n\
         {colloc_line}\n",
        dir = dir.display()
    )
}

/// Processes that carry the test's tag in their environment (not zombies).
fn tagged(dir: &Path) -> Vec<(u32, String)> {
    let needle = format!("TL_TAG={}", dir.display());
    pids()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|e| e.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            (state != "Z").then(|| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                (p, String::from_utf8_lossy(&cmd).replace('\0', " "))
            })
        })
        .collect()
}

/// Follow job `id` through its starts until it has ended for good: after each start no
/// process of it may be left, and a requeued job is let start at once. The job's end, and
/// how many times it started.
fn follow(c: &Cluster, id: u32, dir: &Path) -> (colloc_slurm_tests::JobEnd, u32) {
    let mut starts = 0;
    // Starts that Slurm's job container failed after a requeue (they count in Restarts
    // but never ran: Cluster::release_if_container_failed).
    let mut failed: u32 = 0;
    let mut handled = 0;
    loop {
        c.wait_until(&format!("job {id} to start (start {})", starts + 1), || {
            let i = c.job_info(id)?;
            if c.release_if_container_failed(id, &mut handled) {
                failed += 1;
                return None;
            }
            let restarts: u32 = i.get("Restarts")?.parse().ok()?;
            (restarts == starts + failed && i.get("JobState")? != "PENDING").then_some(())
        });
        starts += 1;
        let expected = starts + failed;
        // It ends, or goes back to the queue (Restarts counts up), and its node is idle; or
        // Slurm's job container failed this start (it never ran: start it again).
        let mut lost = false;
        let (state, restarts) = c.wait_until(&format!("start {starts} of job {id} to end"), || {
            if c.release_if_container_failed(id, &mut handled) {
                lost = true;
                return Some((String::new(), 0));
            }
            let i = c.job_info(id)?;
            let state = i.get("JobState")?.clone();
            let restarts: u32 = i.get("Restarts")?.parse().ok()?;
            let idle = {
                let s = c.node_state();
                !s.contains("comp") && !s.contains("alloc") && !s.contains("mix")
            };
            ((restarts == expected || !matches!(state.as_str(), "RUNNING" | "COMPLETING")) && idle)
                .then_some((state, restarts))
        });
        if lost {
            starts -= 1;
            failed += 1;
            continue;
        }
        // Nothing of this start outlives it: not colloc, not a run, not a run's sleep.
        // (A process Slurm sent SIGKILL may take a moment to go.)
        let mut left = tagged(dir);
        for _ in 0..40 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            left = tagged(dir);
        }
        assert!(
            left.is_empty(),
            "start {starts} of job {id} left processes behind: {left:?}\n{}",
            c.job_out(id)
        );
        if restarts < expected {
            assert!(!matches!(state.as_str(), "PENDING" | "RUNNING"), "{state}");
            return (c.wait_done(id), starts);
        }
        assert!(
            starts <= 3,
            "requeued more often than --requeue-limit allows"
        );
        // Slurm holds a requeued job 2 minutes (its credential lifetime); the test starts it
        // sooner, but not in the second of the requeue: slurmd refuses a job whose new
        // credential is no newer than the revoked one ("Job N already killed, do not
        // launch batch job": the job FAILS). Under PrologFlags=Contain a job allocated
        // again within a second of its epilog gets no extern step (see run_requeue.rs).
        std::thread::sleep(Duration::from_secs(match c.profile() {
            Profile::Production | Profile::ProductionV2 => 10,
            _ => 2,
        }));
        let _ = c
            .slurm("scontrol")
            .args(["update", &format!("JobId={id}"), "StartTime=now"])
            .output();
    }
}

fn report(dir: &Path, id: u32) -> Value {
    let p = dir.join(format!("colloc-{id}/colloc-report.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn lines(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every run succeeded once, after attempts that were all interrupted; and each run's
/// starts resumed from where the previous one left it.
fn check_runs(dir: &Path, id: u32, names: &[&str], starts: u32, out: &str) {
    let r = report(dir, id);
    assert_eq!(
        r["summary"]["succeeded"],
        names.len(),
        "{}\n{out}",
        r["summary"]
    );
    assert_eq!(r["sessions"].as_array().unwrap().len() as u32, starts);
    let done = lines(dir, "done");
    let begun = lines(dir, "starts");
    for name in names {
        assert_eq!(
            done.iter().filter(|d| d == name).count(),
            1,
            "{name}: {done:?}"
        );
        let run = r["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == *name)
            .unwrap();
        let a = run["attempts"].as_array().unwrap();
        assert!(a.len() >= 2, "{name} finished in one start: {run}");
        let (last, before) = a.split_last().unwrap();
        assert_eq!(last["state"], "succeeded", "{name}: {run}");
        assert!(
            before.iter().all(|x| x["state"] == "interrupted"),
            "{name}: {run}"
        );
        // Its starts began at step 0, then ever further on.
        let from: Vec<u32> = begun
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                (w.next() == Some(*name)).then(|| w.next()?.parse().ok())?
            })
            .collect();
        assert_eq!(from.len(), a.len(), "{name}: {begun:?}");
        assert_eq!(from[0], 0, "{name}: {begun:?}");
        assert!(
            from.windows(2).all(|w| w[1] > w[0]),
            "{name} did not resume from its checkpoint: {begun:?}"
        );
    }
}

/// The recipe of README.md ("Sweeps longer than the time limit"), times shortened.
fn recipe(c: &Cluster) {
    let dir = sweep(c, "recipe", 2, true, 40);
    // `@20`: Slurm sends the warning up to 30 s early (its timer's resolution), so a
    // shorter lead keeps it after the job's first 10 s; colloc's own watch warns at 25 s.
    let script = job(
        &dir,
        "#SBATCH --time=1\n#SBATCH --requeue\n#SBATCH --signal=B:USR1@20\n",
        &format!("exec {} run -j 3 -f runs.toml", colloc_bin().display()),
    );
    let id = c.submit(&KEEP_OUTPUT, &script);
    let (end, starts) = follow(c, id, &dir);
    let out = c.job_out(id);
    let err = c.job_err(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}\n{out}\n{err}");
    assert!((2..=4).contains(&starts), "{starts} starts\n{err}");
    assert!(
        err.contains(&format!("job {id} requeued (1 of at most 3)")),
        "{err}"
    );
    // The warning reached the runs (from Slurm's signal or colloc's own watch) and the
    // ones that trap it saved a checkpoint each time.
    assert!(err.contains("sending SIGUSR1 to 3 running run(s)"), "{err}");
    let ck = lines(&dir, "checkpoints");
    for name in ["ck1", "ck2"] {
        assert!(
            ck.iter()
                .filter(|l| l.starts_with(&format!("{name} ")))
                .count() as u32
                >= starts - 1,
            "{name}: {ck:?}"
        );
    }
    // The one that ignores it was stopped after the grace, and ran again.
    assert!(
        err.contains("deaf: still running 10s after SIGUSR1; sending SIGTERM"),
        "{err}"
    );
    check_runs(&dir, id, &["ck1", "ck2", "deaf"], starts, &err);
    assert!(!err.contains("TIME LIMIT"), "{err}");
    assert_eq!(c.node_state(), "idle");
}

/// `colloc run` as a plain line of the batch script, no `--signal`: colloc warns by itself.
fn plain_line(c: &Cluster) {
    let dir = sweep(c, "plain", 1, false, 30);
    let script = job(
        &dir,
        "#SBATCH --time=1\n#SBATCH --requeue\n",
        &format!(
            "{} run -j 1 -f runs.toml\necho after-colloc",
            colloc_bin().display()
        ),
    );
    let id = c.submit(&KEEP_OUTPUT, &script);
    let (end, starts) = follow(c, id, &dir);
    let out = c.job_out(id);
    let err = c.job_err(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}\n{out}\n{err}");
    assert!(
        err.contains("the job's time limit is near: sending SIGUSR1 to 1 running run(s)"),
        "{err}"
    );
    assert!(
        err.contains(&format!("job {id} requeued (1 of at most 3)")),
        "{err}"
    );
    // The batch script went on after colloc on its last start: nothing ended it early.
    assert!(out.contains("after-colloc"), "{out}");
    check_runs(&dir, id, &["ck1"], starts, &err);
    assert_eq!(c.node_state(), "idle");
}

/// `--signal=B:USR1` without `exec`: bash has no trap and dies of it, the job ends (the
/// issue's case: under proctrack/linuxproc colloc and its runs ran on with parent 1).
/// colloc sees its parent go, stops its runs and exits: nothing of the job is left. The
/// signal is sent as `B:` sends it (`scancel --batch`), once both runs are going: Slurm's
/// own may come at any time in the job's first 30 s.
fn shell_killed(c: &Cluster) {
    let dir = sweep(c, "shell-killed", 2, false, 100_000);
    let script = job(
        &dir,
        "#SBATCH --time=1\n",
        &format!(
            "{} run -j 2 --grace 2s -f runs.toml",
            colloc_bin().display()
        ),
    );
    let id = c.submit(&KEEP_OUTPUT, &script);
    c.wait_until("both runs to start", || {
        (lines(&dir, "starts").len() == 2).then_some(())
    });
    let out = c
        .slurm("scancel")
        .args(["--batch", "--signal=USR1", &id.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let end = c.wait_done(id);
    assert_ne!(end.state, "COMPLETED", "{end:?}");
    // colloc's TERM, its --grace and the supervisors' KILL take a few seconds at most.
    let mut left = tagged(&dir);
    for _ in 0..200 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        left = tagged(&dir);
    }
    assert!(
        left.is_empty(),
        "processes outlived job {id}: {left:?}\n{}",
        c.job_err(id)
    );
    // The record says why they stopped (where colloc, not Slurm's cgroup, ended them:
    // under the production profile Slurm kills it first).
    if c.profile() == Profile::Simple {
        let r = report(&dir, id);
        assert!(
            r["stopped_by"]
                .as_str()
                .unwrap_or_default()
                .contains("colloc's parent process"),
            "{}",
            r["stopped_by"]
        );
    }
}
