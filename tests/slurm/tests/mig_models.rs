//! `--colloc=mig:*` by the profile names drivers changed, on a real Slurm node whose fake
//! GPU is an A100 80GB (issue 24): R535/R545 drivers call its 3g profile 3g.39gb and some
//! drivers its 7g profile 7g.79gb; a job may name either form and gets the same
//! instances, whatever the node's driver says. A name of another model's table fails the
//! job, not the node.

use colloc_slurm_tests::{run_suite, Cluster, Test};

fn main() {
    let tests: &[Test] = &[
        (
            "old_and_new_profile_names_make_the_same_instances",
            both_names,
        ),
        (
            "another_models_profile_fails_the_job_not_the_node",
            other_model,
        ),
    ];
    run_suite(1, Some("A100-80GB"), tests, &[]);
}

const SHOW_ENV: &str = "env | grep -E '^COLLOC_' | sort";

fn assert_idle_and_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.squeue(), "");
    assert!(c.instances(0).is_empty(), "{:?}", c.instances(0));
}

fn both_names(c: &Cluster) {
    let before = c.gpu_layout();
    for (asked, mode, slots) in [
        ("mig:3g.39gb", "mig:3g.40gbx2", "2"),
        ("mig:3g.40gb", "mig:3g.40gbx2", "2"),
        ("mig:7g.79gb", "mig:7g.80gbx1", "1"),
        ("mig:3g.39gbx1,2g,1g", "mig:3g.40gb,2g.20gb,1g.10gb", "3"),
    ] {
        let id = c.submit(
            &[format!("--colloc={asked}"), "--gres=gpu:1".into()],
            SHOW_ENV,
        );
        let end = c.wait_done(id);
        assert_eq!(
            end.state,
            "COMPLETED",
            "{asked}: {end:?}; stderr: {}",
            c.job_err(id)
        );
        let vars = c.job_vars(id);
        assert_eq!(
            vars.get("COLLOC_MODE").map(String::as_str),
            Some(mode),
            "{asked}: {vars:?}"
        );
        assert_eq!(
            vars.get("COLLOC_SLOTS").map(String::as_str),
            Some(slots),
            "{asked}"
        );
        assert_eq!(c.gpu_layout(), before, "{asked}: GPU not restored");
        assert_idle_and_clean(c);
    }
}

fn other_model(c: &Cluster) {
    let id = c.submit(&["--colloc=mig:3g.20gb", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    let err = c.job_err(id);
    assert!(
        err.contains("NVIDIA A100-SXM4-80GB has no MIG profile 3g.20gb"),
        "stderr: {err}"
    );
    assert!(err.contains("3g.40gb"), "the valid names are listed: {err}");
    assert!(!c.job_out(id).contains("RAN"));
    assert_idle_and_clean(c);
}
