//! The harness itself, on a real three-node Slurm cluster with two fake A100 40GB per node
//! (issues 17 and 18): each node reconfigures its own fake GPUs; what Slurm reports when a
//! node goes away; where a job's tasks, colloc's MPS daemons and every SPANK callback run
//! (mount namespace, cgroup, user, time), under the profile of `COLLOC_CLUSTER_PROFILE`
//! (CI runs this file under both `simple` and `production`).
//!
//! Facts asserted here hold on Slurm 22.05 as Debian 12 ships it; docs/slurm-callbacks.md
//! has them as a table. colloc's MPS daemons run in their job's mount namespace under both
//! profiles (issue 17: under the production one they are started from the extern step,
//! inside the job container).
//!
//! One file, though long: its tests share one three-node cluster with the SPANK probe
//! plugin in its plugstack (`main`, `run_suite_on`); a second file would cost another
//! cluster start, and another build of the probe, under each of the two profiles
//! scripts/test.sh runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use colloc_slurm_tests::{
    build_spank_probe, pid_alive, pid_mount_ns, processes_of_pipe_dir, repo_root, run_suite_on,
    skip, Cluster, ClusterSpec, Node, Profile, Test,
};
use serde_json::Value;

fn main() {
    let probe = build_spank_probe();
    let spec = ClusterSpec::new(3, 2).spank_line(&format!(
        "required {} log=@DIR@/probe/log ctl=@DIR@/probe/ctl jc=@DIR@/slurm/job-containers",
        probe.display()
    ));
    let tests: &[Test] = &[
        ("cluster_sh_refuses_bad_input", cluster_sh_refuses_bad_input),
        (
            "three_nodes_mig_each_node_its_own_instances",
            three_nodes_mig,
        ),
        ("three_nodes_mps_each_node_its_own_daemons", three_nodes_mps),
        (
            "mps_daemon_shares_the_jobs_namespace_and_dev_shm",
            mps_daemon_shares_the_jobs_namespace,
        ),
        ("spank_callbacks_where_who_when", spank_callbacks),
        (
            "devices_a_job_reaches_and_the_gpu_colloc_picks",
            devices_and_gpu_numbering,
        ),
    ];
    // Taking a node away mostly waits for slurmctld to notice: each on its own cluster,
    // while the others run.
    run_suite_on(
        &spec,
        tests,
        &[
            (
                "a_node_taken_away_mid_job_requeues_it_and_keeps_its_gpus",
                node_taken_away,
            ),
            (
                "no_kill_job_runs_on_without_the_lost_node",
                no_kill_job_loses_a_node,
            ),
        ],
    );
}

/// `KEY node rest…` lines of a job's output, by node.
fn lines_by_node(out: &str, key: &str) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in out.lines() {
        let mut w = l.split_whitespace();
        if w.next() == Some(key) {
            if let Some(node) = w.next() {
                by.entry(node.to_string())
                    .or_default()
                    .push(w.collect::<Vec<_>>().join(" "));
            }
        }
    }
    by
}

fn sorted(v: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = v.into_iter().collect();
    v.sort();
    v
}

/// A job script that prints, then waits for `go` after creating `ready`.
fn hold(c: &Cluster, name: &str, body: &str) -> (String, PathBuf, PathBuf) {
    let ready = c.jobs_dir().join(format!("{name}-ready"));
    let go = c.jobs_dir().join(format!("{name}-go"));
    let script = format!(
        "{body}\ntouch {}\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
        ready.display(),
        go.display()
    );
    (script, ready, go)
}

fn assert_all_idle_and_clean(c: &Cluster) {
    for node in c.nodes() {
        assert_eq!(node.state(), "idle", "{}: {}", node.name(), node.reason());
        assert!(
            node.journals().is_empty(),
            "{}: journals left: {:?}",
            node.name(),
            node.journals()
        );
    }
    assert_eq!(c.squeue(), "");
}

fn cluster_sh_refuses_bad_input(c: &Cluster) {
    let sh = repo_root().join("tests/slurm/cluster.sh");
    let fresh = tempfile::tempdir().unwrap();
    let target = fresh.path().join("never");
    for (args, want) in [
        (
            vec!["--profile", "bogus"],
            "--profile bogus (COLLOC_CLUSTER_PROFILE): valid: simple, production",
        ),
        (
            vec!["--nodes", "0"],
            "--nodes 0 (COLLOC_CLUSTER_NODES): give 1 to 16",
        ),
        (
            vec!["--gpus", "9"],
            "--gpus 9 (COLLOC_CLUSTER_GPUS): give 1 to 8",
        ),
        (
            vec!["--profile", "production"],
            "which job_container/tmpfs makes private to each job",
        ),
        (vec!["--nodes"], "usage: cluster.sh"),
        (vec!["--colour", "blue"], "usage: cluster.sh"),
    ] {
        let out = Command::new(&sh)
            .arg("start")
            .arg(&target)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "start {args:?}: {err}");
        assert!(err.contains(want), "start {args:?}: {err}");
        assert!(
            !target.exists(),
            "start {args:?} created {}",
            target.display()
        );
    }
    // A node the cluster does not have.
    let out = Command::new(&sh)
        .args(["env"])
        .arg(c.dir())
        .args(["--node", "n9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no node n9 in this cluster (nodes: n1 n2 n3)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And one it has: its own fake GPU state, from outside.
    let out = Command::new(&sh)
        .args(["env"])
        .arg(c.dir())
        .args(["--node", "n2"])
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(
        env.contains(&format!(
            "export COLLOC_FAKE_NVML_STATE={}",
            c.node("n2").fake_state_path().display()
        )),
        "{env}"
    );
}

/// `sbatch -N3 --gres=gpu:2 --colloc=mig:3g`: a step on all three nodes and one
/// `srun --overlap -w nK` step per node, at once; each node's task sees its own node name
/// and the MIG devices of its own node's fake GPUs, which hold them during the job and
/// none after.
fn three_nodes_mig(c: &Cluster) {
    let before: Vec<Value> = c.nodes().iter().map(Node::gpu_layout).collect();
    let show = r#"bash -c 'echo "$0 $SLURMD_NODENAME $COLLOC_SLOTS $COLLOC_DEVICES"'"#;
    let (script, ready, go) = hold(
        c,
        "mig3",
        &format!(
            "srun -N3 --ntasks-per-node=1 {show} STEP\n\
             for n in n1 n2 n3; do srun --overlap -N1 -n1 -w $n {show} OVERLAP & done\n\
             wait"
        ),
    );
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mig:3g"], &script);
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let steps = lines_by_node(&out, "STEP");
    let overlaps = lines_by_node(&out, "OVERLAP");
    let mut all = BTreeSet::new();
    for node in c.nodes() {
        let name = node.name();
        let made = sorted(node.mig_uuids());
        assert_eq!(
            made.len(),
            4,
            "{name}: 2 GPUs x 2 x 3g.20gb: {made:?}; {}",
            node_account(c, &node, id, &out)
        );
        for (what, seen) in [("srun -N3", &steps), ("srun --overlap", &overlaps)] {
            let lines = seen
                .get(name)
                .unwrap_or_else(|| panic!("no {what} task on {name}:\n{out}"));
            assert_eq!(lines.len(), 1, "{what} on {name}: {lines:?}");
            let (slots, devices) = lines[0].split_once(' ').unwrap();
            assert_eq!(slots, "4", "{what} on {name}: {lines:?}");
            let devices = sorted(devices.split(',').map(str::to_string));
            assert_eq!(devices, made, "{what} on {name}: not its node's instances");
        }
        assert_eq!(node.journals().len(), 1, "{name}: one journal");
        all.extend(made);
    }
    assert_eq!(all.len(), 12, "each node has instances of its own");
    // The job's steps as Slurm lists them: the batch step on the first node.
    let listed = c.job_steps(id);
    assert!(
        listed
            .iter()
            .any(|s| s.id == format!("{id}.batch") && s.nodes == "n1"),
        "{listed:?}"
    );
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    for (node, before) in c.nodes().iter().zip(&before) {
        assert_eq!(&node.gpu_layout(), before, "{} not restored", node.name());
    }
    assert_all_idle_and_clean(c);
}

/// `--colloc=mps:2` on three nodes: each node runs one MPS daemon per GPU of its own, in
/// its own run folder; all are gone after the job.
fn three_nodes_mps(c: &Cluster) {
    let _whole = c.whole_gpus();
    let (script, ready, go) = hold(
        c,
        "mps3",
        r#"srun -N3 --ntasks-per-node=1 bash -c 'echo "PIPES $SLURMD_NODENAME $COLLOC_MPS_PIPES"'"#,
    );
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mps:2"], &script);
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let pipes = lines_by_node(&out, "PIPES");
    let mut daemons = BTreeSet::new();
    for node in c.nodes() {
        let name = node.name();
        let line = &pipes.get(name).unwrap_or_else(|| panic!("{out}"))[0];
        let dirs: Vec<&str> = line
            .split(',')
            .filter_map(|p| p.split_once('=').map(|(_, d)| d))
            .collect();
        assert_eq!(dirs.len(), 2, "{name}: one daemon per GPU: {line}");
        for d in &dirs {
            assert!(
                Path::new(d).starts_with(c.run_dir()),
                "{name}: {d} not under run_dir"
            );
            // The same path on every node; each node's folder behind it is its own (and
            // the job's directory a tmpfs mounted in the node's namespace: seen through
            // its slurmd's root).
            let pid = node.slurmd_pid().expect("the node's slurmd");
            let seen = PathBuf::from(format!("/proc/{pid}/root")).join(d.trim_start_matches('/'));
            assert!(seen.is_dir(), "{name}: {} missing", seen.display());
            let mine: Vec<u32> = processes_of_pipe_dir(d)
                .into_iter()
                .filter(|&p| node.owns_pid(p))
                .collect();
            assert_eq!(mine.len(), 1, "{name}: daemons of {d}: {mine:?}");
            daemons.extend(mine);
        }
    }
    assert_eq!(daemons.len(), 6, "3 nodes x 2 GPUs, each its own daemon");
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    for pid in daemons {
        assert!(!pid_alive(pid), "MPS daemon {pid} still runs");
    }
    for node in c.nodes() {
        let left: Vec<_> = std::fs::read_dir(node.run_dir())
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{}: left in run_dir: {left:?}",
            node.name()
        );
    }
    assert_all_idle_and_clean(c);
}

/// An MPS daemon must share its clients' mount namespace and /dev/shm (NVIDIA's own MPS
/// daemon for Kubernetes mounts /dev/shm for this reason). A two-node `--colloc=mps` job:
/// each node's task creates a file in /dev/shm; the node's MPS daemon must run in the
/// task's mount namespace and see the file. Also the Slurm facts around it: under the
/// production profile each node's tasks have a namespace of their own with a private
/// /dev/shm, hidden from the host and from other jobs.
///
/// Under the production profile the prolog leaves the daemons to the job's extern step,
/// which starts them inside the job container (issue 17); they are then also in the
/// job's cgroups.
fn mps_daemon_shares_the_jobs_namespace(c: &Cluster) {
    let _whole = c.whole_gpus();
    let (script, ready, go) = hold(
        c,
        "ns",
        r#"srun -N2 --ntasks-per-node=1 bash -c 'f=/dev/shm/colloc-ns-$SLURM_JOB_ID-$SLURMD_NODENAME; touch $f; echo "TASK $SLURMD_NODENAME $(readlink /proc/self/ns/mnt) $(cat $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid) $(test -e $f && echo seen)"'"#,
    );
    let id = c.submit(
        &[
            "-N2",
            "--gres=gpu:1",
            "--colloc=mps",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let tasks = lines_by_node(&out, "TASK");
    let production = c.profile().production();
    let mut task_ns = BTreeSet::new();
    let mut cleanup = Vec::new();
    // (node, daemon's namespace, task's namespace, slurmd's, daemon sees the file)
    let mut seen = Vec::new();
    for name in ["n1", "n2"] {
        let node = c.node(name);
        let f: Vec<&str> = tasks
            .get(name)
            .unwrap_or_else(|| panic!("no task on {name}:\n{out}"))[0]
            .split_whitespace()
            .collect();
        let (task, daemon, shm_seen) = (f[0], f[1].parse::<u32>().unwrap(), f[2]);
        let slurmd = node.mount_ns().unwrap();
        let daemon_ns = pid_mount_ns(daemon).unwrap();
        let file = format!("/dev/shm/colloc-ns-{id}-{name}");
        let daemon_sees = PathBuf::from(format!("/proc/{daemon}/root{file}")).exists();
        let cgroup = std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap();
        let charged = cgroup.contains(&format!("/job_{id}"));
        if production {
            assert!(
                charged,
                "{name}: daemon {daemon} not in job {id}'s cgroups: {cgroup}"
            );
        }
        println!(
            "  {name}: task in {task}, slurmd in {slurmd}, MPS daemon {daemon} in {daemon_ns} \
             (in the job's cgroup: {charged}); it sees the task's {file}: {daemon_sees}"
        );
        assert_eq!(shm_seen, "seen", "{name}: the task sees its own file");
        if production {
            assert_ne!(task, slurmd, "{name}: the task runs in slurmd's namespace");
            assert!(!Path::new(&file).exists(), "{file} leaked to the host");
        } else {
            assert_eq!(
                task, slurmd,
                "{name}: no job container, no namespace of its own"
            );
            cleanup.push(file);
        }
        task_ns.insert(task.to_string());
        seen.push((name, daemon_ns, task.to_string(), slurmd, daemon_sees));
    }
    assert_eq!(
        task_ns.len(),
        2,
        "each node's tasks in their node's namespace"
    );
    if production {
        // Another job on the same node gets /dev/shm of its own.
        let other = c.submit(
            &["-N1", "-w", "n1", "--gres=gpu:1"],
            &format!("ls /dev/shm | grep -c colloc-ns-{id} || true"),
        );
        assert_eq!(c.wait_done(other).state, "COMPLETED");
        assert_eq!(
            c.job_out(other).trim(),
            "0",
            "job {other} sees job {id}'s /dev/shm"
        );
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    for f in cleanup {
        let _ = std::fs::remove_file(f);
    }
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert_all_idle_and_clean(c);
    // What MPS needs, last, once the cluster is clean again.
    let apart: Vec<String> = seen
        .iter()
        .filter(|(_, d, t, _, sees)| d != t || !sees)
        .map(|(n, d, t, _, _)| format!("{n}: daemon in {d}, tasks in {t}"))
        .collect();
    assert!(apart.is_empty(), "MPS daemon and clients apart: {apart:?}");
}

/// What a job may open, and which GPU colloc sets up, with `ConstrainDevices=yes`
/// (production) and without: a second job on a node gets the second GPU; Slurm renumbers
/// `CUDA_VISIBLE_DEVICES` to 0 inside it under ConstrainDevices, `SLURM_JOB_GPUS` keeps
/// the node's number, and colloc sets up the GPU that number names. The job may open its
/// own GPU's device file, not the other job's, and a character device that is no GRES file
/// (as the MIG capability files /dev/nvidia-caps/* are) stays reachable.
fn devices_and_gpu_numbering(c: &Cluster) {
    let _whole = c.whole_gpus();
    let node = c.node("n1");
    // A character device that no driver serves and gres.conf does not list: open gives
    // ENXIO where the devices cgroup allows it, EPERM where it denies it.
    let cap = c.dir().join("dev/fake-nvidia-cap1");
    let made = Command::new("mknod")
        .arg(&cap)
        .args(["c", "240", "1"])
        .status()
        .unwrap();
    assert!(made.success());
    let dev = |i: u32| c.dir().join(format!("nodes/n1/dev/fakegpu{i}"));
    let (first, ready, go) = hold(c, "dev-first", "true");
    let a = c.submit(
        &["-N1", "-w", "n1", "--gres=gpu:1", "--colloc=naive"],
        &first,
    );
    c.wait_for_file(a, &ready);
    // bash reports a failed open as "bash: PATH: REASON".
    let probe_open = |p: &Path| {
        format!(
            "m=$( {{ exec 3<>{}; }} 2>&1 ); echo \"OPEN {} ${{m##*: }}\"",
            p.display(),
            p.file_name().unwrap().to_string_lossy()
        )
    };
    let script = format!(
        "env | grep -E '^(SLURM_JOB_GPUS|CUDA_VISIBLE_DEVICES|COLLOC_DEVICES)=' \n{}\n{}\n{}",
        probe_open(&dev(0)),
        probe_open(&dev(1)),
        probe_open(&cap)
    );
    let b = c.submit(
        &["-N1", "-w", "n1", "--gres=gpu:1", "--colloc=naive"],
        &script,
    );
    let end = c.wait_done(b);
    std::fs::write(&go, "").unwrap();
    let end_a = c.wait_done(a);
    let _ = std::fs::remove_file(&cap);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(b));
    assert_eq!(end_a.state, "COMPLETED", "{end_a:?}");
    let vars = c.job_vars(b);
    let out = c.job_out(b);
    let production = c.profile().production();
    let (mine, other) = match vars.get("SLURM_JOB_GPUS").map(String::as_str) {
        Some("1") => ("fakegpu1", "fakegpu0"),
        Some("0") => ("fakegpu0", "fakegpu1"),
        v => panic!("SLURM_JOB_GPUS={v:?}: {vars:?}"),
    };
    assert_eq!(mine, "fakegpu1", "the first job holds GPU 0: {vars:?}");
    let uuid = node.fake_state()["gpus"][1]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        vars.get("COLLOC_DEVICES"),
        Some(&uuid),
        "colloc set up a GPU other than Slurm's GPU 1: {vars:?}"
    );
    let cvd = vars.get("CUDA_VISIBLE_DEVICES").map(String::as_str);
    let opened = |f: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("OPEN {f} ")))
            .unwrap_or("")
            .to_string()
    };
    // Every open fails (no driver); how it fails tells what the devices cgroup allows.
    assert_eq!(opened(mine), "No such device or address", "{out}");
    assert_eq!(
        opened("fake-nvidia-cap1"),
        "No such device or address",
        "{out}"
    );
    if production {
        assert_eq!(cvd, Some("0"), "ConstrainDevices renumbers: {vars:?}");
        assert_eq!(opened(other), "Operation not permitted", "{out}");
    } else {
        assert_eq!(cvd, Some("1"), "{vars:?}");
        assert_eq!(opened(other), "No such device or address", "{out}");
    }
    assert_all_idle_and_clean(c);
}

/// One probe log line, `key=value` words.
type Rec = BTreeMap<String, String>;

fn probe_records(log: &Path, job: u32) -> Vec<Rec> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Rec>()
        })
        .filter(|r| r.get("job").map(String::as_str) == Some(job.to_string().as_str()))
        .collect()
}

fn t(r: &Rec) -> u64 {
    r["t"].parse().unwrap()
}

/// Which node a probe record comes from: its mount namespace is a node's slurmd's, or its
/// cgroup is under a node's.
fn node_of(slurmd_ns: &BTreeMap<String, String>, r: &Rec) -> String {
    for (node, ns) in slurmd_ns {
        if &r["mnt"] == ns || r["freezer"].starts_with(&format!("/slurm_{node}/")) {
            return node.clone();
        }
    }
    "?".to_string()
}

/// Which SPANK callbacks run where, as whom and when, on the real cluster: the probe
/// plugin (tests/slurm/probes/spank_probe.c) logs each call. A two-node job of user
/// nobody, with daemons started (setsid, double fork) from the extern step's
/// task_post_fork (after entering the job's namespace through job_container/tmpfs's
/// holder file), from the job prolog and from the batch step's task_init_privileged.
fn spank_callbacks(c: &Cluster) {
    if c.profile() == Profile::ProductionV2 {
        skip(
            "the probe records and asserts cgroup v1's freezer and memory cgroups (the table of \
             docs/slurm-callbacks.md); under cgroup/v2 where colloc's daemons land is asserted by \
             production.rs (mps_daemons_run_where_the_tasks_run_and_a_cancel_stops_them) and core's recorded v2 tree",
        );
    }
    let probe = c.dir().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    set_mode(&probe, 0o1777);
    let log = probe.join("log");
    std::fs::write(&log, "").unwrap();
    set_mode(&log, 0o666);
    std::fs::write(
        probe.join("ctl"),
        "daemon extern:task_post_fork join\ndaemon -:job_prolog\ndaemon batch:task_init_privileged\n",
    )
    .unwrap();
    let script = r#"touch /dev/shm/colloc-probe-$SLURM_JOB_ID
echo "BATCH $SLURMD_NODENAME $(readlink /proc/self/ns/mnt) $(ls /dev/shm | tr '\n' ' ')"
srun -N2 --ntasks-per-node=1 bash -c 'echo "STEP0 $SLURMD_NODENAME $(readlink /proc/self/ns/mnt) $(ls /dev/shm | tr "\n" " ")"'
"#;
    let id = c.submit(
        &[
            "-N2",
            "--gres=gpu:1",
            "--uid=nobody",
            "--gid=nogroup",
            "--probe-mark=M1",
        ],
        script,
    );
    let end = c.wait_done(id);
    std::fs::write(probe.join("ctl"), "").unwrap();
    // The daemons: their pids, and which still run now that the job is over.
    let mut daemon_pids = Vec::new();
    for e in std::fs::read_dir(&probe).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("daemon-{id}-")) {
            let pid: u32 = std::fs::read_to_string(e.path())
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            daemon_pids.push((name, pid, pid_alive(pid)));
        }
    }
    let kill_daemons = || {
        for (_, pid, _) in &daemon_pids {
            // SIGKILL: they inherited SIGTERM blocked from slurmstepd.
            // SAFETY: kill has no memory preconditions; these are the probe's daemons.
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_callbacks(c, id, &end, &log, &daemon_pids);
    }));
    if result.is_err() {
        // What Slurm said of the job and of its nodes meanwhile (a node taken for down
        // under load is excised from the job before its epilog ran there).
        println!("{}", c.job_story(id));
        let ctld = std::fs::read_to_string(c.slurmctld_log()).unwrap_or_default();
        println!("--- slurmctld: nodes not responding or down ---");
        for l in ctld
            .lines()
            .filter(|l| l.contains("not responding") || l.to_ascii_lowercase().contains("down"))
        {
            println!("{l}");
        }
    }
    kill_daemons();
    // The extern daemons kept the job's cgroups (every controller) after Slurm's cleanup:
    // remove them once the daemons are gone.
    let nobody = text_of(Command::new("id").args(["-u", "nobody"]));
    c.wait_until("the probe's daemons to go", || {
        daemon_pids
            .iter()
            .all(|(_, pid, _)| !pid_alive(*pid))
            .then_some(())
    });
    let leaked = job_cgroups(&nobody, id);
    if c.profile().production() {
        println!(
            "  cgroups the extern step's daemons kept after the job: {}",
            leaked.len()
        );
    }
    for d in leaked.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
    // The files the job and the daemons made in a /dev/shm the host shares: all of them
    // without a job container, the prolog's daemons' with it.
    for f in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if name == format!("colloc-probe-{id}")
            || name.starts_with(&format!("colloc-probe-daemon-{id}-"))
        {
            let _ = std::fs::remove_file(f.path());
        }
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    if c.profile().production() {
        assert!(
            !leaked.is_empty(),
            "the extern daemons kept no cgroup of the job"
        );
        extern_daemon_in_the_step_cgroup(c, &probe, &nobody);
    }
    assert_all_idle_and_clean(c);
}

/// A daemon started from the extern step's task_post_fork that enters the job's namespace
/// and moves itself into the extern step's freezer cgroup: Slurm's SIGKILL of that cgroup
/// at the job's end stops it, and the job's cgroups go with the job.
fn extern_daemon_in_the_step_cgroup(c: &Cluster, probe: &Path, nobody: &str) {
    std::fs::write(
        probe.join("ctl"),
        "daemon extern:task_post_fork join-step\n",
    )
    .unwrap();
    let id = c.submit(
        &[
            "-N1",
            "-w",
            "n1",
            "--gres=gpu:1",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        r#"echo "TASK $(readlink /proc/self/ns/mnt) $(ls /dev/shm | tr '\n' ' ')""#,
    );
    let end = c.wait_done(id);
    std::fs::write(probe.join("ctl"), "").unwrap();
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let recs = probe_records(&probe.join("log"), id);
    let d = recs
        .iter()
        .find(|r| r["cb"] == "daemon")
        .unwrap_or_else(|| panic!("no daemon: {recs:?}"));
    let pid: u32 = d["pid"].parse().unwrap();
    let out = c.job_out(id);
    let task_ns = out.split_whitespace().nth(1).unwrap_or("");
    assert_eq!(d["mnt"], task_ns, "not in the job's namespace: {out}");
    assert!(
        out.contains(&format!("colloc-probe-daemon-{id}-extern-task_post_fork")),
        "the task does not see the daemon's /dev/shm file: {out}"
    );
    assert!(
        !pid_alive(pid),
        "the daemon in step_extern's cgroup outlived the job"
    );
    let epilog = recs.iter().find(|r| r["cb"] == "job_epilog").unwrap();
    assert!(
        epilog["alive"].ends_with(":0"),
        "alive at the epilog: {}",
        epilog["alive"]
    );
    let left = job_cgroups(nobody, id);
    assert!(left.is_empty(), "cgroups left: {left:?}");
}

/// Job `id`'s cgroup folders of user `uid` on nodes n1 and n2, in every v1 controller,
/// parents before children.
fn job_cgroups(uid: &str, id: u32) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        out.push(d.to_path_buf());
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for ctl in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for node in ["n1", "n2"] {
            let d = ctl.path().join(format!("slurm_{node}/uid_{uid}/job_{id}"));
            if d.is_dir() {
                walk(&d, &mut out);
            }
        }
    }
    out
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Check where, as whom and when Slurm called each SPANK callback of job `id` (its probe
/// records in `log`), and what became of the daemons the probe started (`daemon_pids`:
/// name, pid, alive after the job). Prints the records as a table first.
fn check_callbacks(
    c: &Cluster,
    id: u32,
    end: &colloc_slurm_tests::JobEnd,
    log: &Path,
    daemon_pids: &[(String, u32, bool)],
) {
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let production = c.profile().production();
    let cbs = Callbacks::read(c, id, log, daemon_pids);
    cbs.print_table();
    for node in ["n1", "n2"] {
        let times = cbs.check_prolog_tasks_epilog(node);
        if !production {
            cbs.check_no_extern_step(node);
            continue;
        }
        cbs.check_extern_step(node, &times);
        cbs.check_extern_daemon(node);
    }
    check_batch_and_prolog_daemons(daemon_pids);
}

/// What the steps of [`check_callbacks`] look at: job `id`'s output and probe records, the
/// mount namespaces of each node's slurmd and of the job's tasks there, the uid of
/// `nobody` (the job's user), and the probe's daemons.
struct Callbacks<'a> {
    id: u32,
    out: String,
    recs: Vec<Rec>,
    slurmd_ns: BTreeMap<String, String>,
    task_ns: BTreeMap<String, String>,
    nobody: String,
    daemon_pids: &'a [(String, u32, bool)],
    release: (u32, u32),
}

/// When things happened on one node (probe clock): the job prolog, the first task's
/// `task_init_privileged`, the last `task_exit`, and the job epilog.
struct NodeTimes {
    prolog: u64,
    first_task: u64,
    last_task_exit: u64,
    epilog: u64,
}

impl<'a> Callbacks<'a> {
    /// Read job `id`'s output, its probe records from `log`, and the nodes' namespaces.
    fn read(c: &Cluster, id: u32, log: &Path, daemon_pids: &'a [(String, u32, bool)]) -> Self {
        let out = c.job_out(id);
        let recs = probe_records(log, id);
        let slurmd_ns: BTreeMap<String, String> = ["n1", "n2"]
            .iter()
            .map(|n| (n.to_string(), c.node(n).mount_ns().unwrap()))
            .collect();
        let nobody = text_of(Command::new("id").args(["-u", "nobody"]));
        let task_ns: BTreeMap<String, String> = lines_by_node(&out, "STEP0")
            .into_iter()
            .map(|(n, l)| (n, l[0].split_whitespace().next().unwrap_or("").to_string()))
            .collect();
        Callbacks {
            release: c.slurm_release(),
            id,
            out,
            recs,
            slurmd_ns,
            task_ns,
            nobody,
            daemon_pids,
        }
    }

    /// The table, for the log and docs/slurm-callbacks.md.
    fn print_table(&self) {
        let (id, recs, slurmd_ns, task_ns) = (self.id, &self.recs, &self.slurmd_ns, &self.task_ns);
        let t0 = recs.iter().map(t).min().unwrap_or(0);
        println!(
            "  {:<22} {:<7} {:<4} {:>5}/{:<5} {:<10} {:<34} {:>8}",
            "callback", "step", "node", "uid", "euid", "namespace", "freezer cgroup", "ms"
        );
        let where_ns = |r: &Rec, node: &str| -> &'static str {
            if slurmd_ns.get(node) == Some(&r["mnt"]) {
                "slurmd's"
            } else if task_ns.get(node) == Some(&r["mnt"]) {
                "job's"
            } else {
                "other"
            }
        };
        for r in recs {
            let node = node_of(slurmd_ns, r);
            let cb = match r.get("from") {
                Some(from) => format!("daemon<{from}"),
                None => r["cb"].clone(),
            };
            println!(
                "  {:<22} {:<7} {:<4} {:>5}/{:<5} {:<10} {:<34} {:>8.1}",
                cb,
                r["step"],
                node,
                r["uid"],
                r["euid"],
                where_ns(r, &node),
                r["freezer"].replace(&id.to_string(), "J"),
                (t(r) - t0) as f64 / 1e6
            );
        }
    }

    /// The records of callback `cb` in step `step` on `node`.
    fn find(&self, cb: &str, step: &str, node: &str) -> Vec<&Rec> {
        self.recs
            .iter()
            .filter(|r| r["cb"] == cb && r["step"] == step && node_of(&self.slurmd_ns, r) == node)
            .collect()
    }

    /// The one record of callback `cb` in step `step` on `node`.
    ///
    /// # Panics
    /// When there is none, or more than one.
    fn one(&self, cb: &str, step: &str, node: &str) -> &Rec {
        let v = self.find(cb, step, node);
        if v.len() != 1 {
            // Every record of that callback, with the node it was taken for: a record
            // missing on one node and one whose namespace and cgroup name no node look
            // alike here (seen once in CI, on 22.05's production profile).
            let all: Vec<(String, &Rec)> = self
                .recs
                .iter()
                .filter(|r| r["cb"] == cb)
                .map(|r| (node_of(&self.slurmd_ns, r), r))
                .collect();
            panic!(
                "{cb} of step {step} on {node}: {} record(s) where 1 was due\n\
                 every {cb} record (node, record): {all:?}\n\
                 the nodes' slurmd mount namespaces: {:?}\n\
                 job {}'s records: {}",
                v.len(),
                self.slurmd_ns,
                self.id,
                self.recs.len()
            );
        }
        v[0]
    }

    /// Under both profiles, on `node`: the job prolog runs as root in slurmd's namespace
    /// and reads the option; the first task's callbacks (privileged as root, then as the
    /// job's user) come after it; step 0's task_init runs in the task's namespace; the job
    /// epilog, as root in slurmd's namespace, after the last task's exit. Returns when
    /// these happened, for [`Callbacks::check_extern_step`].
    fn check_prolog_tasks_epilog(&self, node: &str) -> NodeTimes {
        let (recs, slurmd_ns, nobody) = (&self.recs, &self.slurmd_ns, &self.nobody);
        let slurmd = &slurmd_ns[node];
        let tasks = &self.task_ns[node];
        // Job prolog: root, in slurmd's namespace, the option readable.
        let prolog = self.one("job_prolog", "-", node);
        assert_eq!(
            (prolog["uid"].as_str(), prolog["ctx"].as_str()),
            ("0", "job_script")
        );
        assert_eq!(&prolog["mnt"], slurmd, "{node}: prolog");
        assert_eq!(prolog["opt"], "M1", "{node}: prolog reads the option");
        // The first task of the job on this node: the batch step on n1, step 0 on n2.
        let first_step = if node == "n1" { "batch" } else { "0" };
        let priv_init = self.one("task_init_privileged", first_step, node);
        let user_task = self.one("task_init", first_step, node);
        assert_eq!(priv_init["euid"], "0", "task_init_privileged is root");
        assert_eq!(
            user_task["uid"], *nobody,
            "task_init runs as the job's user"
        );
        assert_eq!(priv_init["opt"], "M1");
        let step0 = self.one("task_init", "0", node);
        assert_eq!(
            &step0["mnt"], tasks,
            "{node}: task_init in the task's namespace"
        );
        let epilog = self.one("job_epilog", "-", node);
        let last_task_exit = recs
            .iter()
            .filter(|r| r["cb"] == "task_exit" && node_of(slurmd_ns, r) == node)
            .map(t)
            .max()
            .unwrap();
        assert!(t(prolog) < t(priv_init), "{node}: a task before the prolog");
        assert!(
            last_task_exit < t(epilog),
            "{node}: epilog before a task's exit"
        );
        assert_eq!(
            &epilog["mnt"], slurmd,
            "{node}: epilog in slurmd's namespace"
        );
        assert_eq!(epilog["uid"], "0");
        NodeTimes {
            prolog: t(prolog),
            first_task: t(priv_init),
            last_task_exit,
            epilog: t(epilog),
        }
    }

    /// Simple profile, on `node`: no PrologFlags=Contain, so no extern step and no job
    /// container.
    fn check_no_extern_step(&self, node: &str) {
        let slurmd = &self.slurmd_ns[node];
        let tasks = &self.task_ns[node];
        // No PrologFlags=Contain: no extern step, no job container.
        assert!(
            self.find("init", "extern", node).is_empty(),
            "an extern step"
        );
        assert_eq!(tasks, slurmd, "{node}: no job container");
    }

    /// Production profile, on `node`: the tasks run in a job container; the extern step's
    /// callbacks, which ones run and where, as whom and in which cgroup; and their order
    /// against the prolog, the tasks (`times`) and the epilog.
    fn check_extern_step(&self, node: &str, times: &NodeTimes) {
        let (id, nobody) = (self.id, &self.nobody);
        let slurmd = &self.slurmd_ns[node];
        let tasks = &self.task_ns[node];
        assert_ne!(tasks, slurmd, "{node}: tasks in slurmd's namespace");
        // Extern step (PrologFlags=Contain): init, init_post_opt, task_post_fork, exit;
        // root, in slurmd's namespace (not the job's), in the job's cgroup, without the
        // job's options.
        for cb in ["init", "init_post_opt", "task_post_fork", "exit"] {
            let r = self.one(cb, "extern", node);
            assert_eq!(
                (r["uid"].as_str(), r["ctx"].as_str()),
                ("0", "remote"),
                "{cb}"
            );
            assert_eq!(&r["mnt"], slurmd, "{node}: extern {cb}");
            assert_eq!(r["opt"], "-", "{node}: extern {cb} sees the option");
            assert_eq!(
                r["envopt"], "-",
                "{node}: extern {cb} sees the option's env"
            );
            assert_eq!(
                r["freezer"],
                format!("/slurm_{node}/uid_{nobody}/job_{id}"),
                "{node}: extern {cb}'s freezer cgroup"
            );
        }
        for cb in ["user_init", "task_init_privileged", "task_init"] {
            assert!(
                self.find(cb, "extern", node).is_empty(),
                "extern step calls {cb}"
            );
        }
        // Order: prolog, then the extern step up to its task_post_fork, then the tasks;
        // the extern step's exit after the last task, and the epilog after that.
        let ext_init = self.one("init", "extern", node);
        let ext_fork = self.one("task_post_fork", "extern", node);
        let ext_exit = self.one("exit", "extern", node);
        assert!(
            times.prolog < t(ext_init),
            "{node}: extern step before the prolog"
        );
        assert!(
            t(ext_fork) < times.first_task,
            "{node}: a task before extern's task_post_fork"
        );
        assert!(
            times.last_task_exit < t(ext_exit),
            "{node}: extern ends before a task"
        );
        assert!(
            t(ext_exit) < times.epilog,
            "{node}: epilog before extern's exit"
        );
    }

    /// Production profile, on `node`: the daemon started from the extern step's
    /// task_post_fork, having entered the job's namespace through the holder file: it
    /// shares the tasks' namespace and /dev/shm, and proctrack/cgroup leaves it running
    /// after the job: it sits in the job's freezer cgroup, not the extern step's. It
    /// inherited SIGTERM blocked (Slurm 22.05; not 24.11).
    fn check_extern_daemon(&self, node: &str) {
        let (id, recs, slurmd_ns, nobody) = (self.id, &self.recs, &self.slurmd_ns, &self.nobody);
        let tasks = &self.task_ns[node];
        let d = recs
            .iter()
            .find(|r| {
                r["cb"] == "daemon"
                    && r.get("from").map(String::as_str) == Some("extern:task_post_fork")
                    && node_of(slurmd_ns, r) == node
            })
            .unwrap_or_else(|| panic!("{node}: no daemon from extern task_post_fork"));
        let pid: u32 = d["pid"].parse().unwrap();
        let sigblk = u64::from_str_radix(d["sigblk"].as_str(), 16).unwrap();
        // slurmstepd's signal mask: Slurm 22.05 hands it on with SIGTERM blocked, 24.11
        // with nothing blocked (measured here).
        let term_blocked = sigblk & (1 << (libc::SIGTERM - 1)) != 0;
        assert_eq!(
            term_blocked,
            self.release < (24, 11),
            "daemon from slurmstepd, Slurm {:?}: SIGTERM blocked {term_blocked} ({sigblk:x})",
            self.release
        );
        let still = self
            .daemon_pids
            .iter()
            .find(|(_, p, _)| *p == pid)
            .map(|x| x.2);
        assert_eq!(
            still,
            Some(true),
            "{node}: extern daemon {pid} gone after the job"
        );
        assert_eq!(
            &d["mnt"], tasks,
            "{node}: joined daemon not in the job's namespace"
        );
        assert!(
            d["join"].ends_with(&format!("/{node}/{id}/.ns")),
            "{node}: joined through {}",
            d["join"]
        );
        assert_eq!(
            d["freezer"],
            format!("/slurm_{node}/uid_{nobody}/job_{id}"),
            "{node}: extern daemon's freezer cgroup"
        );
        let step0_line = &lines_by_node(&self.out, "STEP0")[node][0];
        assert!(
            step0_line.contains(&format!("colloc-probe-daemon-{id}-extern-task_post_fork")),
            "{node}: the task does not see the daemon's /dev/shm file: {step0_line}"
        );
    }
}

/// Under both profiles, after the job: the batch step's task_init_privileged daemon is
/// reported, and the prolog's daemons must still run.
fn check_batch_and_prolog_daemons(daemon_pids: &[(String, u32, bool)]) {
    // The batch step's task_init_privileged daemon: whether it outlives its step is a
    // race (the task joins the step's freezer cgroup from slurmstepd, after the fork):
    // seen both ways under proctrack/cgroup. Reported, not asserted.
    for (name, pid, alive) in daemon_pids {
        if name.contains("-batch-task_init_privileged-") {
            println!("  daemon {pid} from the batch step's task_init_privileged: alive after the job: {alive}");
        }
    }
    // The prolog's daemons run on after the job under both: only an epilog stops them.
    for (name, pid, alive) in daemon_pids {
        if name.contains("--job_prolog-") {
            assert!(alive, "prolog daemon {pid} gone after the job");
        }
    }
}

fn text_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What a job did on `node`, for a failure's message: the node's state, the job's lines
/// from it, its journals, the job's errors and the node's colloc lines (a MIG layout
/// missing on one node was seen twice in CI, with too little said to tell why).
fn node_account(c: &Cluster, node: &Node<'_>, id: u32, out: &str) -> String {
    let name = node.name();
    let mine: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(name))
        .collect();
    format!(
        "node {} ({}); its lines of job {id}: {mine:?}; journals: {:?}; job stderr: {:?}; \
         its slurmd log:\n{}",
        node.state(),
        node.reason(),
        node.journals(),
        c.job_err(id).lines().take(6).collect::<Vec<_>>(),
        node.slurmd_log_story(15)
    )
}

/// A node taken away mid-job (its slurmd, slurmstepds and job processes killed, as a power
/// cut would): what Slurm reports, and what it leaves on the node.
fn node_taken_away(c: &Cluster) {
    // A plain batch job: Slurm requeues it (JobRequeue=1 is the default) and it waits.
    let (script, ready, _go) = hold(c, "crash1", "echo started");
    let id = c.submit(&["-N3", "--gres=gpu:1", "--colloc=mig:3g"], &script);
    c.wait_for_file(id, &ready);
    let n2 = c.node("n2");
    let loss = n2.crash();
    println!(
        "  n2 taken away: {} ({}) after {:.1}s",
        loss.state,
        loss.reason,
        loss.noticed_after.as_secs_f64()
    );
    assert_eq!(loss.state, "down*");
    assert_eq!(loss.reason, "Not responding");
    let info = c.wait_until("the job to be requeued", || {
        let info = c.job_info(id)?;
        (info.get("JobState").map(String::as_str) == Some("PENDING")).then_some(info)
    });
    assert_eq!(
        info.get("Restarts").map(String::as_str),
        Some("1"),
        "{info:?}"
    );
    assert!(
        c.job_err(id).contains("DUE TO NODE FAILURE"),
        "{}",
        c.job_err(id)
    );
    c.slurm("scancel").arg(id.to_string()).status().unwrap();
    c.wait_until("the queue to empty", || c.squeue().is_empty().then_some(()));
    // The other nodes run their epilog of the first start (the requeued job may leave
    // the queue, cancelled while pending, before they end: seen under 24.11 and
    // cgroup/v2); the lost node never does: its journal and MIG instances stay until an
    // admin restores them (or the node does at boot).
    for name in ["n1", "n3"] {
        let node = c.node(name);
        c.wait_until(&format!("{name}'s epilog to end"), || {
            node.journals().is_empty().then_some(())
        });
        assert!(node.mig_uuids().is_empty(), "{name} not restored");
    }
    assert_eq!(n2.journals().len(), 1, "n2's journal of job {id}");
    assert_eq!(n2.mig_uuids().len(), 2, "n2's instances of job {id}");
    n2.start_again();
    assert_eq!(n2.state(), "idle", "n2 back in service (ReturnToService=2)");
    restore_after_return(c, &n2, id);
}

/// `colloc restore --all` on a node taken away mid-job (job `id`) and back, and its GPUs
/// restored. A restarted slurmd restores nothing by itself (its journal stays for this
/// restore), but slurmctld may send the returning slurmd the job's termination where it
/// still had one to deliver (seen on 24.11 for a job requeued or cancelled meanwhile, and
/// on 22.05 when the job's kill on the other node ended as the node came back), and the
/// node then runs the job's epilog, which restores the GPU, possibly while this restore
/// runs: either finishes it, so the test waits for the GPUs to be restored.
fn restore_after_return(c: &Cluster, node: &Node<'_>, id: u32) {
    let restored = node.colloc(&["restore", "--all"]);
    assert!(
        restored.status.success(),
        "colloc restore --all on {}: {}",
        node.name(),
        String::from_utf8_lossy(&restored.stderr)
    );
    c.wait_until(
        &format!("{}'s GPUs restored after job {id}", node.name()),
        || (node.journals().is_empty() && node.mig_uuids().is_empty()).then_some(()),
    );
}

/// `sbatch --no-kill`: the job runs on without a node taken away; the lost node leaves the
/// job's node list. Whether a new step can start on the remaining nodes depends on the
/// job container (production: no).
fn no_kill_job_loses_a_node(c: &Cluster) {
    let probe = r#"srun -N2 --ntasks-per-node=1 -w n1,n2 bash -c 'echo "AFTER $SLURMD_NODENAME"'; echo "SRUN_RC=$?""#;
    let (script, ready, go) = hold(c, "crash2", "echo started");
    let id = c.submit(
        &[
            "-N3",
            "--no-kill",
            "--no-requeue",
            "--gres=gpu:1",
            "--colloc=mig:3g",
        ],
        &format!("{script}\n{probe}\n"),
    );
    c.wait_for_file(id, &ready);
    let n3 = c.node("n3");
    let loss = n3.crash();
    assert_eq!(loss.state, "down*");
    let info = c.wait_until("n3 to leave the job", || {
        let info = c.job_info(id)?;
        (info.get("NodeList").map(String::as_str) == Some("n[1-2]")).then_some(info)
    });
    assert_eq!(info.get("JobState").map(String::as_str), Some("RUNNING"));
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    let out = c.job_out(id);
    // Slurm 24.11 may take the job's remaining nodes for failed as its batch step ends
    // (seen once in CI: "_step_partial_comp: batch step received … This should never
    // happen", "Removing failed node n1", the job requeued; --no-requeue ends it
    // instead). The script ran to its end all the same; such a node gets no epilog from
    // Slurm, and colloc's part is that `restore --all` puts its GPU back (below).
    let ctld = std::fs::read_to_string(c.slurmctld_log()).unwrap_or_default();
    let failed_too: Vec<&str> = ["n1", "n2"]
        .into_iter()
        .filter(|n| ctld.contains(&format!("Removing failed node {n} from JobId={id}")))
        .collect();
    let slurm_race = c.slurm_release() >= (24, 11) && !failed_too.is_empty();
    if slurm_race {
        println!(
            "  Slurm took {failed_too:?} for failed as the job ended: {}",
            end.state
        );
    } else {
        assert_eq!(end.state, "COMPLETED", "{end:?}; {out}");
    }
    let after = lines_by_node(&out, "AFTER");
    println!(
        "  after losing n3 under --no-kill: new step's tasks on {:?}; {}",
        after.keys().collect::<Vec<_>>(),
        out.lines().find(|l| l.starts_with("SRUN_RC")).unwrap_or("")
    );
    if c.profile().production() && c.slurm_release() < (24, 11) {
        // Slurm 22.05 kills the job's extern step on every node when one fails, and with
        // it the job container: no new step can start on the remaining nodes. (24.11
        // starts it on the remaining nodes, as without a job container.)
        assert!(after.is_empty(), "{out}");
        assert!(out.contains("SRUN_RC=1"), "{out}");
        assert!(
            c.job_err(id).contains("container_g_join failed")
                || out.contains("container_g_join failed"),
            "stderr: {}",
            c.job_err(id)
        );
    } else {
        assert_eq!(after.keys().collect::<Vec<_>>(), ["n1", "n2"], "{out}");
        assert!(out.contains("SRUN_RC=0"), "{out}");
    }
    n3.start_again();
    restore_after_return(c, &n3, id);
    for n in &failed_too {
        restore_after_return(c, &c.node(n), id);
    }
    for node in c.nodes() {
        assert!(
            node.journals().is_empty() && node.mig_uuids().is_empty(),
            "{}",
            node.name()
        );
    }
}
