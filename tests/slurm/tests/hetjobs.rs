//! Heterogeneous jobs and job arrays (issue 35): each component of `sbatch --colloc=A … :
//! --colloc=B …`, and each task of an array, gets what it asked for on its own GPUs, and
//! the nodes end clean; a het job's summary (issue 38) is its leader's alone. One cluster of two nodes with two GPUs each; tests run in order.

use colloc_slurm_tests::{parse_kv, run_suite_on, Cluster, ClusterSpec, Test};

fn main() {
    let tests: &[Test] = &[
        (
            "each_component_of_a_heterogeneous_job_gets_its_own_mode",
            het_components,
        ),
        ("each_task_of_a_job_array_gets_its_own_daemon", array_tasks),
    ];
    // Two nodes: a node of this host has too few CPUs for both components at once.
    run_suite_on(&ClusterSpec::new(2, 2), tests, &[]);
}

fn assert_clean(c: &Cluster) {
    let states = c.node_state();
    assert!(
        !states.contains("drain") && !states.contains("down"),
        "nodes: {states} ({})",
        c.node_reason()
    );
    // Every component's epilog restores its GPUs (a het job's components end one by one).
    c.wait_until("every component's epilog", || {
        c.journals().is_empty().then_some(())
    });
}

/// Component 0 asks for `mps` on one GPU, component 1 for `mps:2` on another; the batch
/// script (component 0) and a step of component 1 each say what they got.
fn het_components(c: &Cluster) {
    let _whole = c.whole_gpus();
    let id = c.submit(
        &[
            "--colloc=mps",
            "--gres=gpu:1",
            ":",
            "--colloc=mps:2",
            "--gres=gpu:1",
        ],
        "echo C0_MODE=$COLLOC_MODE\necho C0_DEVICES=$COLLOC_DEVICES\necho C0_PIPES=$COLLOC_MPS_PIPES\n\
         srun --het-group=1 sh -c 'echo C1_MODE=$COLLOC_MODE; echo C1_DEVICES=$COLLOC_DEVICES; \
         echo C1_PIPES=$COLLOC_MPS_PIPES'\n",
    );
    let end = c.wait_done(id);
    // Component 1 has its own job id (id + 1); wait for its epilog too.
    let _ = c.wait_done(id + 1);
    let out = c.job_out(id);
    println!("{out}");
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let v = c.job_vars(id);
    assert_eq!(v.get("C0_MODE").map(String::as_str), Some("mps"), "{out}");
    assert_eq!(v.get("C1_MODE").map(String::as_str), Some("mps:2"), "{out}");
    let (d0, d1) = (&v["C0_DEVICES"], &v["C1_DEVICES"]);
    assert!(!d0.is_empty() && !d1.is_empty() && d0 != d1, "{out}");
    assert_ne!(v["C0_PIPES"], v["C1_PIPES"], "{out}");
    // The job's summary in its AdminComment (issue 38), from the batch step, which is
    // component 0's: on component 0 alone (`scontrol update JobId=<leader>` would write
    // every component), with component 0's mode.
    let out = c
        .slurm("scontrol")
        .args(["-o", "show", "job", &id.to_string()])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let comments: Vec<(String, String)> = shown
        .lines()
        .map(parse_kv)
        .map(|kv| {
            (
                kv.get("HetJobOffset").cloned().unwrap_or_default(),
                kv.get("AdminComment").cloned().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        comments,
        vec![
            ("0".to_string(), "colloc/1;mode=mps;gpus=1".to_string()),
            ("1".to_string(), String::new()),
        ],
        "{shown}"
    );
    assert_clean(c);
}

/// `--array=0-2`, each task `mps` on one GPU: each runs with a daemon of its own.
fn array_tasks(c: &Cluster) {
    let _whole = c.whole_gpus();
    let id = c.submit(
        &["--array=0-2", "--colloc=mps", "--gres=gpu:1"],
        "echo MODE=$COLLOC_MODE\necho PIPES=$COLLOC_MPS_PIPES\nsleep 1\n",
    );
    c.wait_until("the array to end", || c.squeue().is_empty().then_some(()));
    let mut pipes = Vec::new();
    for task in id..id + 3 {
        let _ = c.wait_done(task);
        let v = c.job_vars(task);
        assert_eq!(
            v.get("MODE").map(String::as_str),
            Some("mps"),
            "task job {task}: {}; {}",
            c.job_out(task),
            c.job_err(task)
        );
        pipes.push(v["PIPES"].clone());
    }
    pipes.sort();
    pipes.dedup();
    assert_eq!(pipes.len(), 3, "{pipes:?}");
    assert_clean(c);
}
