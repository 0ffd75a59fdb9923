//! The suite runner: runs a suite's tests on shared and separate clusters and reports
//! like libtest.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::time::Instant;

use crate::{Cluster, ClusterSpec};

/// A test asked to be skipped on this cluster (see [`skip`]): the panic payload
/// [`run_suite`] recognizes.
#[derive(Debug)]
pub struct Skipped(pub String);

/// Skip the calling test on this cluster, with the reason; [`run_suite`] reports it as
/// ignored, not failed. For a test that cannot pass under one [`Profile`] because of a
/// known defect: name the issue in the reason.
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

/// Run one test on `cluster`, report it like libtest, and leave the nodes usable for the
/// next test when it failed (no jobs, not drained, fresh fake GPUs).
fn run_one(cluster: &Cluster, (name, test): &Test) -> Outcome {
    let t = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| test(cluster)));
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
        "test {name} ... FAILED ({secs:.1}s)\n--- slurmd log (last lines) ---\n{}",
        cluster.slurmd_log_tail(25)
    );
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
    let select = |list: &[Test]| -> Vec<Test> {
        list.iter()
            .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| matches(name, f)))
            .filter(|(name, _)| !skips.iter().any(|f| matches(name, f)))
            .copied()
            .collect()
    };
    let shared = select(tests);
    let separate = select(alone);
    let total = shared.len() + separate.len();
    if args.iter().any(|a| a == "--ignored") || total == 0 {
        // None of these is a GPU-only (ignored) test; a `--ignored` run has nothing here.
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed\n");
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        let msg = "the real-Slurm tests need root (slurmd, mknod, mount namespaces)";
        if std::env::var("COLLOC_SLURM_TESTS").as_deref() == Ok("require") {
            eprintln!("error: {msg}");
            std::process::exit(1);
        }
        println!("\nskipped {total} tests: {msg}; run them as root\n");
        return;
    }
    println!(
        "\nrunning {total} tests on a real Slurm cluster ({} profile)",
        spec.profile.name()
    );
    let started = Instant::now();
    let start_cluster = |what: &str| {
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
    };
    let mut outcomes: Vec<Outcome> = Vec::new();
    let one_after_another = |outcomes: &mut Vec<Outcome>| {
        for t in &separate {
            let c = start_cluster(&format!("{}'s own", t.0));
            outcomes.push(run_one(&c, t));
        }
    };
    if shared.is_empty() {
        one_after_another(&mut outcomes);
    } else {
        // The shared cluster first; the separate ones (each with its own munged, slurmctld
        // and slurmds) start beside it where the fake NVML state allows.
        let cluster = start_cluster("shared");
        if cluster.shares_default_state() {
            for t in &shared {
                outcomes.push(run_one(&cluster, t));
            }
            drop(cluster);
            one_after_another(&mut outcomes);
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = separate
                    .iter()
                    .map(|t| {
                        let start_cluster = &start_cluster;
                        scope.spawn(move || {
                            let result = catch_unwind(AssertUnwindSafe(|| {
                                let c = start_cluster(&format!("{}'s own", t.0));
                                run_one(&c, t)
                            }));
                            result.unwrap_or((t.0, Verdict::Failed, 0.0))
                        })
                    })
                    .collect();
                for t in &shared {
                    outcomes.push(run_one(&cluster, t));
                }
                for h in handles {
                    outcomes.push(
                        h.join()
                            .unwrap_or(("a separate test", Verdict::Failed, 0.0)),
                    );
                }
            });
            drop(cluster);
        }
    }
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
