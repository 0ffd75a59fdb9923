//! Several GPUs in one allocation (issue 7) on a real one-node Slurm cluster with four
//! fake A100 40GB (`Gres=gpu:4`, four device files). One cluster; tests run in order.

use colloc_slurm_tests::{processes_of_pipe_dir, run_suite, Cluster, Test};

fn main() {
    let tests: &[Test] = &[
        (
            "gres4_mig_3g_makes_8_instances_restored_after",
            gres4_mig_3g,
        ),
        ("two_gres2_jobs_each_touch_only_their_gpus", two_gres2_jobs),
        ("gres4_mps_one_daemon_per_gpu", gres4_mps),
    ];
    run_suite(
        4,
        Some("A100-40GB,A100-40GB,A100-40GB,A100-40GB"),
        tests,
        &[],
    );
}

const SHOW_ENV: &str = "env | grep -E '^(COLLOC_|CUDA_|SLURM_JOB_GPUS=)' | sort";

fn assert_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    for g in 0..c.gpus() {
        assert!(
            c.instances(g).is_empty(),
            "GPU {g} still has {:?}",
            c.instances(g)
        );
    }
}

/// MIG UUIDs of the instances on fake GPU `g`.
fn uuids_on(c: &Cluster, g: u32) -> Vec<String> {
    c.instances(g)
        .iter()
        .flat_map(|gi| gi["cis"].as_array().cloned().unwrap_or_default())
        .filter_map(|ci| ci["uuid"].as_str().map(str::to_string))
        .collect()
}

fn gres4_mig_3g(c: &Cluster) {
    let before = c.gpu_layout();
    let ready = c.jobs_dir().join("g4-ready");
    let go = c.jobs_dir().join("g4-go");
    let id = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:4"],
        &format!(
            "{SHOW_ENV}\ntouch {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
            ready.display(),
            go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    let vars = c.job_vars(id);
    let devices: Vec<String> = vars["COLLOC_DEVICES"]
        .split(',')
        .map(str::to_string)
        .collect();
    assert_eq!(devices.len(), 8, "{vars:?}");
    assert_eq!(vars.get("COLLOC_SLOTS").map(String::as_str), Some("8"));
    let mut made = Vec::new();
    for g in 0..4 {
        let on = uuids_on(c, g);
        assert_eq!(on.len(), 2, "GPU {g} should have 2 x 3g.20gb: {on:?}");
        made.extend(on);
    }
    let mut a = devices.clone();
    a.sort();
    made.sort();
    assert_eq!(a, made, "the job's devices are not the instances made");
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert_eq!(c.gpu_layout(), before);
    assert_clean(c);
}

fn two_gres2_jobs(c: &Cluster) {
    let before = c.gpu_layout();
    let go = c.jobs_dir().join("g2-go");
    let mut jobs = Vec::new();
    for n in 0..2 {
        let ready = c.jobs_dir().join(format!("g2-ready-{n}"));
        let id = c.submit(
            &["--colloc=mig:3g", "--gres=gpu:2"],
            &format!(
                "{SHOW_ENV}\ntouch {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
                ready.display(),
                go.display()
            ),
        );
        c.wait_for_file(id, &ready);
        jobs.push(id);
    }
    let mut seen_gpus = Vec::new();
    for &id in &jobs {
        let vars = c.job_vars(id);
        let gpus: Vec<u32> = vars["SLURM_JOB_GPUS"]
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(gpus.len(), 2, "{vars:?}");
        let devices: Vec<&str> = vars["COLLOC_DEVICES"].split(',').collect();
        assert_eq!(devices.len(), 4, "{vars:?}");
        // The job's instances are on its own two GPUs, and only there.
        let mut mine: Vec<String> = gpus.iter().flat_map(|&g| uuids_on(c, g)).collect();
        mine.sort();
        let mut d: Vec<String> = devices.iter().map(|s| s.to_string()).collect();
        d.sort();
        assert_eq!(d, mine, "job {id} on GPUs {gpus:?}");
        seen_gpus.extend(gpus);
    }
    seen_gpus.sort();
    assert_eq!(seen_gpus, vec![0, 1, 2, 3]);
    // Let the first job end alone: only its GPUs are restored.
    let first_gpus: Vec<u32> = c.job_vars(jobs[0])["SLURM_JOB_GPUS"]
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let out = c
        .slurm("scancel")
        .arg(jobs[0].to_string())
        .output()
        .unwrap();
    assert!(out.status.success());
    c.wait_until("the first job's epilog", || {
        c.journals().len().eq(&1).then_some(())
    });
    for g in 0..4 {
        let n = c.instances(g).len();
        if first_gpus.contains(&g) {
            assert_eq!(n, 0, "GPU {g} of the cancelled job not restored");
        } else {
            assert_eq!(n, 2, "GPU {g} of the running job was touched");
        }
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(jobs[1]);
    assert_eq!(
        end.state,
        "COMPLETED",
        "{end:?}; stderr: {}",
        c.job_err(jobs[1])
    );
    assert_eq!(c.gpu_layout(), before);
    assert_clean(c);
}

fn gres4_mps(c: &Cluster) {
    let _whole = c.whole_gpus();
    let ready = c.jobs_dir().join("mps4-ready");
    let go = c.jobs_dir().join("mps4-go");
    let id = c.submit(
        &["--colloc=mps:2", "--gres=gpu:4"],
        &format!(
            "{SHOW_ENV}\ntouch {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
            ready.display(),
            go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    let vars = c.job_vars(id);
    assert_eq!(
        vars.get("COLLOC_SLOTS").map(String::as_str),
        Some("8"),
        "{vars:?}"
    );
    assert_eq!(vars["COLLOC_DEVICES"].split(',').count(), 8);
    assert_eq!(
        vars.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            .map(String::as_str),
        Some("50")
    );
    let pipes: Vec<String> = vars["COLLOC_MPS_PIPES"]
        .split(',')
        .filter_map(|p| p.split_once('=').map(|(_, d)| d.to_string()))
        .collect();
    assert_eq!(pipes.len(), 4, "one MPS daemon per GPU: {vars:?}");
    for p in &pipes {
        assert_eq!(processes_of_pipe_dir(p).len(), 1, "daemon of {p}");
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    for p in &pipes {
        assert!(
            processes_of_pipe_dir(p).is_empty(),
            "daemon of {p} still runs"
        );
        assert!(!std::path::Path::new(p).exists(), "{p} left behind");
    }
    assert_clean(c);
}
