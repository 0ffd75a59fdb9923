//! `--colloc=mig:*` jobs on a real Slurm node whose fake driver behaves as real ones do
//! (issue 16): one H100 and one A100 per node, instances held by something that is not a
//! listed process (DCGM, dcgm-exporter, a leaked NVML handle), instances that linger or
//! stay busy a moment after destroy, an A100 whose MIG mode cannot switch while
//! nvidia-persistenced holds it. What must hold: no node drains for any of it; a GPU still
//! held after the epilog's bounded retries is marked (journal kept), the next job is
//! refused it with the reason, `colloc status` says who may hold it, and `colloc restore`
//! finishes once the holder is gone.

use std::path::PathBuf;
use std::process::{Command, Output};

use colloc_slurm_tests::{colloc_bin, run_suite, Cluster, Test};
use serde_json::Value;

/// GPU 0 is an H100 (Hopper), GPU 1 an A100 (Ampere).
const MODELS: &str = "H100-80GB,A100-80GB";

fn main() {
    let tests: &[Test] = &[
        (
            "briefly_busy_and_lingering_instances_are_outlasted_by_the_epilog",
            outlasted,
        ),
        (
            "an_a100_held_by_persistenced_refuses_the_job_not_the_node",
            mode_change_pending,
        ),
        (
            "instances_dcgm_holds_mark_the_gpus_not_the_node_until_restored",
            held_by_dcgm,
        ),
    ];
    run_suite(2, Some(MODELS), tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_idle(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert_eq!(c.squeue(), "");
}

fn assert_clean(c: &Cluster) {
    assert_idle(c);
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    for g in 0..c.gpus() {
        assert!(c.instances(g).is_empty(), "GPU {g}: {:?}", c.instances(g));
    }
}

/// A job that signals it runs, then waits for the test's go-ahead before ending.
fn gated_job(c: &Cluster, args: &[&str]) -> (u32, PathBuf) {
    let jobs = c.jobs_dir();
    let script = format!(
        "echo \"DEVICES=$COLLOC_DEVICES\"\ntouch {0}/started-$SLURM_JOB_ID\n\
         while [ ! -e {0}/go-$SLURM_JOB_ID ]; do sleep 0.1; done",
        jobs.display()
    );
    let id = c.submit(args, &script);
    c.wait_for_file(id, &jobs.join(format!("started-{id}")));
    (id, jobs.join(format!("go-{id}")))
}

fn gi_ids(c: &Cluster, gpu: u32) -> Vec<u64> {
    c.instances(gpu)
        .iter()
        .filter_map(|g| g["id"].as_u64())
        .collect()
}

/// `colloc ARGS` as the unprivileged user `nobody`.
fn colloc_as_nobody(c: &Cluster, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(colloc_bin())
        .args(args)
        .env("COLLOC_CONFIG", c.colloc_config())
        .env("COLLOC_FAKE_NVML_STATE", c.fake_state_path())
        .output()
        .expect("runuser")
}

fn outlasted(c: &Cluster) {
    // A GPU instance busy for two destroys after its compute instance went (the DRA
    // driver retries ~1 s), destroyed ones listed three more times (go-nvml#146), and a
    // holder that lets go after three refusals: the epilog retries through all of it.
    c.fake_ctl(&[
        "quirks",
        "--busy-after-ci-destroy",
        "2",
        "--linger-listings",
        "3",
    ]);
    let (id, go) = gated_job(c, &["--colloc=mig:2g", "--gres=gpu:2"]);
    assert_eq!(gi_ids(c, 0), [3, 4, 5], "2g instances at slots 0, 2, 4");
    c.fake_ctl(&["hold", "--gpu", "1", "--gi", "4", "--release-after", "3"]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert_clean(c);
    // The next job gets both GPUs: nothing destroyed-but-listed looks foreign to it.
    let next = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:2"],
        "echo SLOTS=$COLLOC_SLOTS",
    );
    let end = c.wait_done(next);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(next));
    assert!(c.job_out(next).contains("SLOTS=4"), "{}", c.job_out(next));
    c.fake_ctl(&[
        "quirks",
        "--busy-after-ci-destroy",
        "0",
        "--linger-listings",
        "0",
    ]);
    assert_clean(c);
}

fn mode_change_pending(c: &Cluster) {
    let path = c.colloc_config();
    let original = std::fs::read_to_string(&path).unwrap();
    let switching = original.replace(
        "allow_mig_mode_change = false",
        "allow_mig_mode_change = true",
    );
    assert_ne!(
        switching, original,
        "no allow_mig_mode_change line to change"
    );
    // Both GPUs with MIG off, nvidia-persistenced holding each.
    for g in ["0", "1"] {
        c.fake_ctl(&["set-mig", "--gpu", g, "off"]);
        c.fake_ctl(&["hold", "--gpu", g, "--name", "nvidia-persistenced"]);
    }
    let before = c.gpu_layout();
    std::fs::write(&path, &switching).unwrap();
    let id = c.submit(&["--colloc=mig:3g", "--gres=gpu:2"], "echo RAN");
    let end = c.wait_done(id);
    std::fs::write(&path, &original).unwrap();
    // The H100 switched at once (Hopper needs no reset); the A100 stayed pending: the
    // job fails with why, the node stays in service, and both GPUs are as before.
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("MIG mode on is pending") && err.contains("NVML_ERROR_IN_USE"),
        "stderr: {err}"
    );
    assert!(!c.job_out(id).contains("RAN"));
    assert_eq!(c.gpu_layout(), before, "GPUs not as before");
    for g in ["0", "1"] {
        c.fake_ctl(&["release", "--gpu", g]);
    }
    c.reset_fake_gpus();
    assert_clean(c);
}

fn held_by_dcgm(c: &Cluster) {
    let (id, go) = gated_job(c, &["--colloc=mig:3g", "--gres=gpu:2"]);
    // 3g instances at slots 0 and 4 are GPU instances 1 and 2 on both models.
    assert_eq!((gi_ids(c, 0), gi_ids(c, 1)), (vec![1, 2], vec![1, 2]));
    c.fake_ctl(&["hold", "--gpu", "0", "--gi", "1", "--name", "dcgm-exporter"]);
    c.fake_ctl(&["hold", "--gpu", "1", "--gi", "2", "--name", "leaked handle"]);
    std::fs::write(go, b"").unwrap();
    let end = c.wait_done(id);
    // The epilog retried for its bounded time, then left both GPUs marked: the job is
    // done, the node is not drained.
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    assert_idle(c);
    assert_eq!((gi_ids(c, 0), gi_ids(c, 1)), (vec![1], vec![2]));
    let journal: Value = serde_json::from_str(
        &std::fs::read_to_string(c.journal_dir().join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    let held = journal["held"].as_array().expect("holds recorded");
    assert_eq!(held.len(), 2, "{journal}");
    assert!(
        held.iter().all(|h| h["reason"]["kind"] == "in_use"),
        "{journal}"
    );
    assert!(
        c.slurmd_log_tail(200).contains("stays marked"),
        "the epilog says so in slurmd's log"
    );

    // The next job on those GPUs is refused with the reason; the node stays in service.
    let next = c.submit(&["--colloc=mig:1g", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(next);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(next);
    assert!(
        err.contains("not available") && err.contains(&format!("colloc restore --job {id}")),
        "stderr: {err}"
    );
    assert!(!c.job_out(next).contains("RAN"));
    assert_idle(c);

    // colloc status: root sees the marks and who may hold them; a user is told that
    // listing instances needs root, not that there are none.
    let st = c.colloc(&["status"]);
    let out = text(&st.stdout);
    assert!(out.contains(&format!("MARKED by job {id}")), "{out}");
    assert!(
        out.contains("DCGM") && out.contains("dcgm-exporter"),
        "{out}"
    );
    let user = colloc_as_nobody(c, &["status"]);
    let out = text(&user.stdout);
    assert!(
        out.contains("needs root (NVML_ERROR_NO_PERMISSION)"),
        "{out}\n{}",
        text(&user.stderr)
    );
    assert!(!out.contains(" 0 instance(s)"), "{out}");
    let v: Value = serde_json::from_slice(&colloc_as_nobody(c, &["status", "--json"]).stdout)
        .expect("status --json as a user");
    assert_eq!(v["gpus"][0]["instances"], Value::Null, "{v}");
    assert_eq!(
        v["gpus"][0]["mig_devices"].as_array().map(Vec::len),
        Some(1)
    );

    // status --cluster: the epilog published the marks, for the whole cluster to see.
    let bin = colloc_slurm_tests::colloc_bin();
    let out = c
        .slurm(bin.to_str().unwrap())
        .args(["status", "--cluster", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("status --cluster --json");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert!(
        rows.iter()
            .all(|r| r["job"] == id && r["marked"] == true && r["running"] == false),
        "{v}"
    );
    assert!(
        v["notes"]
            .to_string()
            .contains(&format!("MARKED by job {id}")),
        "{v}"
    );

    // Once the holders are gone, a restore by hand finishes (while held it fails and
    // keeps the mark: wrapper/tests/admin_cli.rs, without another 15 s wait here).
    for g in ["0", "1"] {
        c.fake_ctl(&["release", "--gpu", g]);
    }
    let r = c.colloc(&["restore", "--job", &id.to_string()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_clean(c);
    let after = c.submit(
        &["--colloc=mig:1g", "--gres=gpu:2"],
        "echo SLOTS=$COLLOC_SLOTS",
    );
    let end = c.wait_done(after);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(after));
    assert!(
        c.job_out(after).contains("SLOTS=14"),
        "{}",
        c.job_out(after)
    );
    assert_clean(c);
}
