//! Slurm's accounting on a real cluster (one fake A100) started with its own MariaDB and
//! slurmdbd (tests/slurm/accounting.sh), without `AccountingStorageEnforce`: what `sacct`
//! shows of a test account's job and of root's, and the two ways root writes a job's
//! `AdminComment` there: `scontrol update` while the job runs (slurmctld sends it with the
//! job's record) and `sacctmgr modify job` after it ended (straight into the database).

use std::path::Path;

use colloc_slurm_tests::{ensure_user, run_suite_on, Cluster, ClusterSpec, Test};

/// The unprivileged account whose job is recorded.
const USER: &str = "colloc-acct";

fn main() {
    let tests: &[Test] = &[(
        "a_users_job_reaches_sacct_with_the_admin_comment_root_set_while_it_ran_and_after_it_ended",
        admin_comment_in_sacct,
    )];
    run_suite_on(&ClusterSpec::new(1, 1).with_accounting(), tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A job script that waits for `go` (at most a minute), so that it surely runs while the
/// test looks.
fn gated(go: &Path) -> String {
    format!(
        "for i in $(seq 600); do [ -e {0} ] && break; sleep 0.1; done\n",
        go.display()
    )
}

fn admin_comment_in_sacct(c: &Cluster) {
    ensure_user(USER);
    let go = c.jobs_dir().join("accounting-go");
    let as_user = [format!("--uid={USER}"), format!("--gid={USER}")];
    let id = c.submit(&as_user, &gated(&go));
    let root_job = c.submit(&[] as &[&str], "true");
    c.wait_until(&format!("job {id} to run"), || {
        let state = c.job_info(id)?.get("JobState")?.clone();
        assert!(
            matches!(state.as_str(), "PENDING" | "CONFIGURING" | "RUNNING"),
            "job {id} is {state} before the test let it end: {}",
            c.job_err(id)
        );
        (state == "RUNNING").then_some(())
    });

    // While it runs: slurmctld keeps the comment and sends it with the job's record.
    let out = c
        .slurm("scontrol")
        .args([
            "update",
            &format!("JobId={id}"),
            "AdminComment=hello-from-root",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scontrol update: {}",
        text(&out.stderr)
    );
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));

    let row = c.wait_accounted(id, &["User", "UID", "AdminComment"]);
    assert_eq!(row["JobID"], id.to_string(), "{row:?}");
    assert_eq!(row["State"], "COMPLETED", "{row:?}");
    assert_eq!(row["User"], USER, "{row:?}");
    assert_eq!(row["AdminComment"], "hello-from-root", "{row:?}");
    let out = c.sacct(&[
        "-j",
        &id.to_string(),
        "-X",
        "-n",
        "-P",
        "-o",
        "JobID,State,AdminComment",
    ]);
    assert_eq!(
        text(&out.stdout).trim(),
        format!("{id}|COMPLETED|hello-from-root"),
        "{}",
        text(&out.stderr)
    );

    // Root's own job is recorded as well (no association needed: nothing is enforced).
    let row = c.wait_accounted(root_job, &["User"]);
    assert_eq!(
        (row["State"].as_str(), row["User"].as_str()),
        ("COMPLETED", "root"),
        "{row:?}"
    );

    // After the end: sacctmgr changes the job's row in the database itself.
    let out = c.sacctmgr(&[
        "-i",
        "modify",
        "job",
        "where",
        &format!("jobid={id}"),
        "set",
        "AdminComment=after-end",
    ]);
    assert!(
        out.status.success(),
        "sacctmgr modify job: {}{}\n--- slurmdbd log ---\n{}",
        text(&out.stdout),
        text(&out.stderr),
        c.slurmdbd_log_tail(10)
    );
    let row = c
        .accounted_job(id, &["State", "AdminComment"])
        .expect("the job's row");
    assert_eq!(
        (row["State"].as_str(), row["AdminComment"].as_str()),
        ("COMPLETED", "after-end"),
        "{row:?}; sacctmgr said: {}",
        text(&out.stdout).trim()
    );
}
