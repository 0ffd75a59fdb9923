//! The suite runner: runs a suite's tests on shared and separate clusters and reports
//! like libtest.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{cluster_sh, text, Cluster, ClusterSpec};

/// A test asked to be skipped on this cluster (see [`skip`]): the panic payload
/// [`run_suite`] recognizes.
#[derive(Debug)]
pub struct Skipped(pub String);

/// Skip the calling test on this cluster, with the reason; [`run_suite`] reports it as
/// ignored, not failed. For a test that cannot pass under one [`Profile`](crate::Profile)
/// because of a known defect: name the issue in the reason.
pub fn skip(reason: &str) -> ! {
    std::panic::resume_unwind(Box::new(Skipped(reason.to_string())))
}

/// A test of a suite.
pub type Test = (&'static str, fn(&Cluster));

/// How a test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Passed,
    Failed,
    Skipped,
}

/// How one test went: name, verdict, seconds.
type Outcome = (&'static str, Verdict, f64);

/// A test still running after this long is taken for hung (`COLLOC_TEST_HANG_S` seconds;
/// 600 unless set): every wait of the harness gives up after [`HANG_GUARD`]
/// (crate::HANG_GUARD), so only a command that never returns gets here.
fn hang_limit() -> Duration {
    let secs = std::env::var("COLLOC_TEST_HANG_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// The clusters the watchdog stopped (their folders): their remaining tests fail at once.
static STOPPED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn was_stopped(dir: &Path) -> bool {
    STOPPED
        .lock()
        .map(|s| s.iter().any(|d| d == dir))
        .unwrap_or(false)
}

/// The processes under this one (the test's commands, their children): pid, seconds
/// running, command line, one a line.
fn descendants() -> String {
    let parent_of: Vec<(u32, u32)> = crate::pids()
        .filter_map(|pid| Some((pid, colloc_core::sys::ProcStat::of(pid)?.ppid()?)))
        .collect();
    let mut family = vec![std::process::id()];
    let mut i = 0;
    while i < family.len() {
        let p = family[i];
        family.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    family[1..]
        .iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = text(&cmd).replace('\0', " ");
            format!("{pid} {}", cmd.trim())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Watch the test `name` on the cluster in `dir` until `done` says it ended; past
/// [`hang_limit`], say what it was doing (the queue, the processes it started, slurmd's
/// log) and stop the cluster's daemons, so that what the test waits on fails and the
/// suite goes on (the cluster's other tests then fail at once).
fn watch(name: &str, dir: &Path, done: &mpsc::Receiver<()>) {
    let limit = hang_limit();
    if done.recv_timeout(limit) != Err(RecvTimeoutError::Timeout) {
        return;
    }
    let squeue = Command::new("squeue")
        .arg("-h")
        .env("SLURM_CONF", dir.join("etc/slurm.conf"))
        .output()
        .map(|o| text(&o.stdout))
        .unwrap_or_default();
    let log = std::fs::read_dir(dir.join("slurm"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("slurmd") && n.ends_with(".log")
        })
        .map(|e| {
            let all = std::fs::read_to_string(e.path()).unwrap_or_default();
            let lines: Vec<&str> = all.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n");
    println!(
        "test {name} ... still running after {}s: taken for hung, its cluster is stopped\n\
         --- squeue ---\n{}\n--- processes it started ---\n{}\n--- slurmd log ---\n{log}",
        limit.as_secs(),
        squeue.trim(),
        descendants()
    );
    if let Ok(mut s) = STOPPED.lock() {
        s.push(dir.to_path_buf());
    }
    let _ = cluster_sh().arg("stop").arg(dir).output();
}

/// Run one test on `cluster`, report it like libtest, and leave the nodes usable for the
/// next test when it failed (no jobs, not drained, fresh fake GPUs). A test that runs
/// past [`hang_limit`] fails, and so does every later one on its cluster ([`watch`]).
fn run_one(cluster: &Cluster, (name, test): &Test) -> Outcome {
    if was_stopped(cluster.dir()) {
        println!("test {name} ... FAILED (not run: its cluster was stopped after a hung test)");
        return (name, Verdict::Failed, 0.0);
    }
    let t = Instant::now();
    let (tell, done) = mpsc::channel::<()>();
    let result = std::thread::scope(|scope| {
        let dir = cluster.dir();
        scope.spawn(move || watch(name, dir, &done));
        let result = catch_unwind(AssertUnwindSafe(|| test(cluster)));
        let _ = tell.send(());
        result
    });
    let secs = t.elapsed().as_secs_f64();
    match result {
        Ok(()) => {
            println!("test {name} ... ok ({secs:.1}s)");
            return (name, Verdict::Passed, secs);
        }
        Err(payload) => {
            if let Some(Skipped(why)) = payload.downcast_ref::<Skipped>() {
                println!(
                    "test {name} ... ignored under the {} profile: {why}",
                    cluster.profile().name()
                );
                return (name, Verdict::Skipped, secs);
            }
        }
    }
    println!(
        "test {name} ... FAILED ({secs:.1}s)\n--- slurmd log: colloc, prolog, epilog and error lines ---\n{}\n--- slurmd log (last lines) ---\n{}",
        cluster.slurmd_log_story(25),
        cluster.slurmd_log_tail(10)
    );
    if was_stopped(cluster.dir()) {
        return (name, Verdict::Failed, secs);
    }
    let _ = Command::new("sh")
        .arg("-c")
        .arg("squeue -h -o %i | xargs -r scancel")
        .env("SLURM_CONF", cluster.dir().join("etc/slurm.conf"))
        .status();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        cluster.wait_until("the queue to empty", || {
            cluster.squeue().is_empty().then_some(())
        });
        cluster.resume_node();
        cluster.reset_fake_gpus();
    }));
    (name, Verdict::Failed, secs)
}

/// Run a suite on one-node clusters with `gpus` fake GPUs of these models, under the
/// profile of `COLLOC_CLUSTER_PROFILE`: see [`run_suite_on`].
pub fn run_suite(gpus: u32, models: Option<&str>, tests: &[Test], alone: &[Test]) {
    run_suite_on(&ClusterSpec::new(1, gpus).models(models), tests, alone);
}

/// Run a suite: `tests` one after another on one shared cluster of this shape (they share
/// the nodes), and each of `alone` on its own cluster of the same shape, at the same time
/// as the shared ones (for tests that mostly wait, such as a job running into its time
/// limit). Reports like libtest; a test that calls [`skip`] is reported as ignored, with
/// its reason. Arguments: name filters (substring), `--skip NAME`, `--exact`, `--list`;
/// other libtest flags are accepted and ignored. Needs root; without it the suite is
/// skipped with a message, unless `COLLOC_SLURM_TESTS=require`.
pub fn run_suite_on(spec: &ClusterSpec, tests: &[Test], alone: &[Test]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests.iter().chain(alone) {
            println!("{name}: test");
        }
        return;
    }
    let shared = select(&args, tests);
    let separate = select(&args, alone);
    let total = shared.len() + separate.len();
    if args.iter().any(|a| a == "--ignored") || total == 0 {
        // None of these is a GPU-only (ignored) test; a `--ignored` run has nothing here.
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed\n");
        return;
    }
    if !have_root(total) {
        return;
    }
    println!(
        "\nrunning {total} tests on a real Slurm cluster ({} profile)",
        spec.profile.name()
    );
    let started = Instant::now();
    let outcomes = run_tests(spec, &shared, &separate);
    report(&outcomes, started);
}

/// The tests of `list` that the command line `args` selects: those matching a name filter
/// (substring, or the whole name with `--exact`; every test when there is none) and no
/// `--skip NAME`. The values of libtest's options that take one are not filters.
fn select(args: &[String], list: &[Test]) -> Vec<Test> {
    let mut filters: Vec<&str> = Vec::new();
    let mut skips: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skips.extend(it.next().map(String::as_str)),
            // libtest options with a value.
            "--test-threads" | "--format" | "--color" | "-Z" | "--logfile" | "--shuffle-seed" => {
                it.next();
            }
            f if !f.starts_with('-') => filters.push(f),
            _ => {}
        }
    }
    let exact = args.iter().any(|a| a == "--exact");
    let matches = |name: &str, f: &str| if exact { name == f } else { name.contains(f) };
    list.iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| matches(name, f)))
        .filter(|(name, _)| !skips.iter().any(|f| matches(name, f)))
        .copied()
        .collect()
}

/// Whether this process runs as root, as the real-Slurm tests need. Without root: say
/// that the `total` tests are skipped and return false, or, under
/// `COLLOC_SLURM_TESTS=require`, exit with status 1.
fn have_root(total: usize) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        let msg = "the real-Slurm tests need root (slurmd, mknod, mount namespaces)";
        if std::env::var("COLLOC_SLURM_TESTS").as_deref() == Ok("require") {
            eprintln!("error: {msg}");
            std::process::exit(1);
        }
        println!("\nskipped {total} tests: {msg}; run them as root\n");
        return false;
    }
    true
}

/// Start a cluster of this shape and say how long it took and what it is; `what` names
/// it in that line (`shared`, `NAME's own`).
fn start_cluster(spec: &ClusterSpec, what: &str) -> Cluster {
    let t = Instant::now();
    let c = Cluster::start_with(spec);
    println!(
        "{what} cluster up in {:.1}s ({} node(s) x {} fake GPU(s), {} profile, {})",
        t.elapsed().as_secs_f64(),
        c.node_names().len(),
        c.gpus(),
        c.profile().name(),
        c.dir().display()
    );
    c
}

/// Run `shared` one after another on one cluster and each of `separate` on its own:
/// beside the shared cluster where the fake NVML state allows, else after it.
fn run_tests(spec: &ClusterSpec, shared: &[Test], separate: &[Test]) -> Vec<Outcome> {
    let mut outcomes: Vec<Outcome> = Vec::new();
    if shared.is_empty() {
        run_separate_in_turn(spec, separate, &mut outcomes);
    } else {
        // The shared cluster first; the separate ones (each with its own munged, slurmctld
        // and slurmds) start beside it where the fake NVML state allows.
        let cluster = start_cluster(spec, "shared");
        if cluster.shares_default_state() {
            for t in shared {
                outcomes.push(run_one(&cluster, t));
            }
            drop(cluster);
            run_separate_in_turn(spec, separate, &mut outcomes);
        } else {
            run_separate_beside(spec, &cluster, shared, separate, &mut outcomes);
            drop(cluster);
        }
    }
    outcomes
}

/// Run each of `separate` on its own cluster, one after another.
fn run_separate_in_turn(spec: &ClusterSpec, separate: &[Test], outcomes: &mut Vec<Outcome>) {
    for t in separate {
        let c = start_cluster(spec, &format!("{}'s own", t.0));
        outcomes.push(run_one(&c, t));
    }
}

/// Run `shared` one after another on `cluster` while each of `separate` runs on its own
/// cluster in a thread of its own; a separate test whose cluster did not start, or whose
/// thread panicked, is a failure.
fn run_separate_beside(
    spec: &ClusterSpec,
    cluster: &Cluster,
    shared: &[Test],
    separate: &[Test],
    outcomes: &mut Vec<Outcome>,
) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = separate
            .iter()
            .map(|t| {
                scope.spawn(move || {
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        let c = start_cluster(spec, &format!("{}'s own", t.0));
                        run_one(&c, t)
                    }));
                    result.unwrap_or((t.0, Verdict::Failed, 0.0))
                })
            })
            .collect();
        for t in shared {
            outcomes.push(run_one(cluster, t));
        }
        for h in handles {
            outcomes.push(
                h.join()
                    .unwrap_or(("a separate test", Verdict::Failed, 0.0)),
            );
        }
    });
}

/// Print the suite's result line (and the failed tests' names) like libtest, and exit
/// with status 101 when a test failed.
fn report(outcomes: &[Outcome], started: Instant) {
    let count = |v: Verdict| outcomes.iter().filter(|o| o.1 == v).count();
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.1 == Verdict::Failed)
        .map(|o| o.0)
        .collect();
    println!(
        "\ntest result: {}. {} passed; {} failed; {} ignored; finished in {:.1}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        count(Verdict::Passed),
        failed.len(),
        count(Verdict::Skipped),
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        println!("failures: {}", failed.join(", "));
        std::process::exit(101);
    }
}
