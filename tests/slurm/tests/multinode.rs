//! `colloc run` over every node of a multi-node job (issue 18), on a real three-node Slurm
//! cluster with two fake A100 40GB per node: each run is a Slurm step of its own on the
//! node that owns its slot, runs spread over every node and never more at once on a node
//! than it has slots, the report names each run's node and slot, and a node taken away
//! mid-sweep costs its runs one attempt each, not the job.
//!
//! The stand-in runs write what they saw (node, device, MPS pipe, step) into a shared
//! folder: all nodes of the test cluster share this host's file system, as a cluster's
//! nodes share the report directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use colloc_slurm_tests::{
    colloc_bin, pids_by_cmdline, run_suite_on, Cluster, ClusterSpec, Node, Test,
};
use serde_json::Value;

fn main() {
    let spec = ClusterSpec::new(3, 2);
    let tests: &[Test] = &[
        (
            "mig_sweep_over_three_nodes_one_step_per_run",
            mig_sweep_over_three_nodes,
        ),
        (
            "mps_sweep_each_run_talks_to_its_nodes_daemon",
            mps_sweep_over_three_nodes,
        ),
        (
            "sigterm_stops_every_nodes_runs_and_resume_finishes",
            sigterm_then_resume,
        ),
        (
            "nothing_of_a_run_outlives_a_killed_colloc_on_any_node",
            sigkill_leaves_nothing,
        ),
        (
            "the_time_limit_warning_reaches_every_nodes_runs",
            warning_reaches_every_node,
        ),
        (
            "each_nodes_metrics_show_the_runs_on_that_node",
            every_nodes_metrics,
        ),
    ];
    // Losing a node mostly waits for slurmctld to notice: on its own cluster, meanwhile.
    run_suite_on(
        &spec,
        tests,
        &[(
            "a_node_lost_mid_sweep_its_runs_go_elsewhere",
            node_lost_mid_sweep,
        )],
    );
}

/// What one attempt of a stand-in run saw.
#[derive(Debug, Clone)]
struct Seen {
    run: String,
    node: String,
    device: String,
    step: String,
    pipe: String,
    pipes: String,
    pipe_dir_there: bool,
    start: f64,
    end: Option<f64>,
}

/// A sweep of `n` stand-in runs of `secs` seconds each: each writes `DIR/seen/RUN.K.start`
/// (what it saw), then `RUN.K.end`, and appends its name to `DIR/succeeded`.
fn sweep(dir: &Path, n: usize, secs: f64, hold: Option<&Path>) -> PathBuf {
    // With `hold`, each run first waits for that file.
    let wait = hold.map_or(String::new(), |h| {
        format!("while [ ! -e {} ]; do sleep 0.1; done; ", h.display())
    });
    std::fs::create_dir_all(dir.join("seen")).unwrap();
    let script = format!(
        r#"f={seen}/$COLLOC_RUN_NAME.$COLLOC_RUN_ATTEMPT; if [ -d "$CUDA_MPS_PIPE_DIRECTORY" ]; then there=yes; else there=no; fi; echo "$SLURMD_NODENAME|$CUDA_VISIBLE_DEVICES|$SLURM_JOB_ID.$SLURM_STEP_ID|$CUDA_MPS_PIPE_DIRECTORY|$COLLOC_MPS_PIPES|$there|$(date +%s.%N)" > $f.start; {wait}sleep {secs}; echo img/s=10; date +%s.%N > $f.end; echo $COLLOC_RUN_NAME >> {ok}"#,
        seen = dir.join("seen").display(),
        ok = dir.join("succeeded").display(),
    );
    let ids: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    let manifest = dir.join("runs.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['bash', '-c', '''{script}''']\ngrid = {{ i = [{}] }}\n",
            ids.join(", ")
        ),
    )
    .unwrap();
    manifest
}

/// The job script: `colloc run` of the sweep, its exit status, then wait for `go` after
/// creating `ready` (so that the test looks at the nodes while the job still holds them).
fn job(c: &Cluster, dir: &Path, extra: &str) -> (String, PathBuf, PathBuf) {
    let ready = dir.join("ready");
    let go = dir.join("go");
    let script = format!(
        "export COLLOC_CONFIG={config}\ncd {dir}\n{colloc} run --grace 2s --status-every 1h --report-dir {dir}/report {extra} -f runs.toml\necho \"COLLOC_RC=$?\"\ntouch {ready}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
        config = c.colloc_config().display(),
        dir = dir.display(),
        colloc = colloc_bin().display(),
        ready = ready.display(),
        go = go.display(),
    );
    (script, ready, go)
}

fn parse_seen(dir: &Path) -> Vec<Seen> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.join("seen")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".start") else {
            continue;
        };
        let text = std::fs::read_to_string(e.path()).unwrap();
        let f: Vec<&str> = text.trim().split('|').collect();
        assert_eq!(f.len(), 7, "{name}: {text}");
        let end = std::fs::read_to_string(dir.join("seen").join(format!("{stem}.end")))
            .ok()
            .and_then(|t| t.trim().parse().ok());
        out.push(Seen {
            run: stem.rsplit_once('.').unwrap().0.to_string(),
            node: f[0].into(),
            device: f[1].into(),
            step: f[2].into(),
            pipe: f[3].into(),
            pipes: f[4].into(),
            pipe_dir_there: f[5] == "yes",
            start: f[6].parse().unwrap(),
            end,
        });
    }
    out
}

fn succeeded(dir: &Path) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in std::fs::read_to_string(dir.join("succeeded"))
        .unwrap_or_default()
        .lines()
    {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

/// Most runs at once on each node (by their own start and end times).
fn most_at_once(seen: &[Seen]) -> BTreeMap<String, usize> {
    let mut by: BTreeMap<String, Vec<(f64, i32)>> = BTreeMap::new();
    for s in seen {
        let Some(end) = s.end else { continue };
        let ev = by.entry(s.node.clone()).or_default();
        ev.push((s.start, 1));
        ev.push((end, -1));
    }
    by.into_iter()
        .map(|(node, mut ev)| {
            // Ends before starts at the same time.
            ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (mut cur, mut max) = (0i32, 0i32);
            for (_, d) in ev {
                cur += d;
                max = max.max(cur);
            }
            (node, max as usize)
        })
        .collect()
}

/// Step names Slurm lists for the job while it runs, with their nodes.
fn watch_steps(c: &Cluster, id: u32, ready: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    c.wait_until("the sweep to end", || {
        for s in c.job_steps(id) {
            names.entry(s.name).or_default().insert(s.nodes);
        }
        ready.exists().then_some(())
    });
    names
}

fn report(dir: &Path) -> Value {
    let p = dir.join("report/colloc-report.json");
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// Each run's attempts in one short line (`r1: interrupted@n1 succeeded@n2; …`), so a
/// failure says what happened before the report's full text.
fn attempts_line(rep: &Value) -> String {
    let mut parts = Vec::new();
    for r in rep["runs"].as_array().into_iter().flatten() {
        let atts: Vec<String> = r["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let failed = a["step"]["failed"]
                    .as_str()
                    .map_or(String::new(), |f| format!(" ({f})"));
                format!(
                    "{}@{}{failed}",
                    a["state"].as_str().unwrap_or("?"),
                    a["node"].as_str().unwrap_or("?")
                )
            })
            .collect();
        parts.push(format!(
            "{}: {}",
            r["name"].as_str().unwrap_or("?"),
            atts.join(" ")
        ));
    }
    parts.join("; ")
}

/// What every sweep must show: each run succeeded exactly once, as a step of its own
/// (named after it where Slurm was seen listing it) on the node the report names, in the
/// slot the report names, never more runs at once on a node than it has slots.
fn check_sweep(
    c: &Cluster,
    id: u32,
    dir: &Path,
    runs: usize,
    slots_per_node: usize,
    steps_seen: &BTreeMap<String, BTreeSet<String>>,
) -> (Vec<Seen>, Value) {
    let out = c.job_out(id);
    assert!(
        out.contains("COLLOC_RC=0"),
        "{out}\nstderr: {}",
        c.job_err(id)
    );
    let ok = succeeded(dir);
    assert_eq!(ok.len(), runs, "{ok:?}");
    assert!(
        ok.values().all(|&n| n == 1),
        "a run succeeded twice: {ok:?}"
    );
    let seen = parse_seen(dir);
    let rep = report(dir);
    assert_eq!(rep["summary"]["succeeded"], runs, "{}", rep["summary"]);
    let by_name: BTreeMap<&str, &Value> = rep["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r))
        .collect();
    let slots = rep["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 3 * slots_per_node, "{slots:?}");
    // Each successful attempt is its own step of this job.
    let done: Vec<&Seen> = seen.iter().filter(|s| s.end.is_some()).collect();
    assert_eq!(done.len(), runs, "{done:?}");
    let step_ids: BTreeSet<&str> = done.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(step_ids.len(), runs, "one step per run: {step_ids:?}");
    for s in &done {
        assert!(s.step.starts_with(&format!("{id}.")), "{s:?}");
        assert!(
            !s.step.ends_with(".batch") && !s.step.ends_with('.'),
            "{s:?}"
        );
        let r = by_name[s.run.as_str()];
        assert_eq!(r["node"], s.node.as_str(), "{}: {r}", s.run);
        let slot = r["slot"].as_u64().unwrap() as usize;
        assert_eq!(
            slots[slot]["node"],
            s.node.as_str(),
            "{}: slot {slot}",
            s.run
        );
        assert_eq!(
            slots[slot]["device"],
            s.device.as_str(),
            "{}: slot {slot}",
            s.run
        );
        let att = r["attempts"].as_array().unwrap().last().unwrap();
        assert_eq!(att["step"]["id"], s.step.as_str(), "{}: {att}", s.run);
    }
    // Runs on every node, never more at once than its slots.
    let most = most_at_once(&seen);
    assert_eq!(
        most.keys().cloned().collect::<Vec<_>>(),
        ["n1", "n2", "n3"],
        "{most:?}"
    );
    assert!(most.values().all(|&m| m <= slots_per_node), "{most:?}");
    assert!(
        most.values().any(|&m| m >= 2),
        "no node ran two at once: {most:?}"
    );
    // Slurm listed them as steps named after their runs, on their runs' nodes.
    let runs_listed: Vec<(&String, &BTreeSet<String>)> = steps_seen
        .iter()
        .filter(|(n, _)| by_name.contains_key(n.as_str()))
        .collect();
    assert!(
        !runs_listed.is_empty(),
        "squeue --steps never listed a run: {steps_seen:?}"
    );
    for (name, nodes) in runs_listed {
        let ran_on: BTreeSet<String> = seen
            .iter()
            .filter(|s| &s.run == name)
            .map(|s| s.node.clone())
            .collect();
        assert!(
            nodes.is_subset(&ran_on),
            "{name}: step on {nodes:?}, ran on {ran_on:?}"
        );
    }
    // The report's nodes and the table printed.
    let nodes = rep["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for n in nodes {
        assert_eq!(n["slots"].as_array().unwrap().len(), slots_per_node, "{n}");
    }
    assert!(
        out.contains("node n2: 4 slots") || slots_per_node != 4,
        "{out}"
    );
    for l in out.lines().filter(|l| {
        l.starts_with("node ") || l.starts_with("median start") || l.contains(" slots on ")
    }) {
        println!("  {l}");
    }
    (seen, rep)
}

fn mig_sweep_over_three_nodes(c: &Cluster) {
    let dir = c.jobs_dir().join("mig-sweep");
    sweep(&dir, 30, 1.5, None);
    let before: Vec<Value> = c.nodes().iter().map(Node::gpu_layout).collect();
    let (script, ready, go) = job(c, &dir, "");
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mig:3g"], &script);
    let steps = watch_steps(c, id, &ready);
    let (seen, _) = check_sweep(c, id, &dir, 30, 4, &steps);
    // Each run's device is one of its own node's MIG instances (while the job holds them).
    for node in c.nodes() {
        let mine: BTreeSet<String> = node.mig_uuids().into_iter().collect();
        assert_eq!(mine.len(), 4, "{}", node.name());
        for s in seen.iter().filter(|s| s.node == node.name()) {
            assert!(mine.contains(&s.device), "{s:?} not on {mine:?}");
        }
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    for (node, before) in c.nodes().iter().zip(&before) {
        assert_eq!(&node.gpu_layout(), before, "{} not restored", node.name());
        assert!(node.journals().is_empty(), "{}", node.name());
    }
}

fn mps_sweep_over_three_nodes(c: &Cluster) {
    let _whole = c.whole_gpus();
    let dir = c.jobs_dir().join("mps-sweep");
    sweep(&dir, 24, 1.5, None);
    let (script, ready, go) = job(c, &dir, "");
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mps:2"], &script);
    let steps = watch_steps(c, id, &ready);
    let (seen, _) = check_sweep(c, id, &dir, 24, 4, &steps);
    let mut pipes_used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &seen {
        // The daemon of its own GPU, as its own node's prolog listed them, and there.
        let own: BTreeMap<&str, &str> = s
            .pipes
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        assert_eq!(own.len(), 2, "{s:?}");
        assert_eq!(own.get(s.device.as_str()), Some(&s.pipe.as_str()), "{s:?}");
        assert!(s.pipe_dir_there, "{s:?}: no pipe folder on its node");
        pipes_used
            .entry(s.node.clone())
            .or_default()
            .insert(s.device.clone());
    }
    // Both GPUs of every node served runs; the GPUs of different nodes differ.
    let mut all = BTreeSet::new();
    for (node, gpus) in &pipes_used {
        assert_eq!(gpus.len(), 2, "{node}: {gpus:?}");
        all.extend(gpus.iter().cloned());
    }
    assert_eq!(all.len(), 6, "{pipes_used:?}");
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    for node in c.nodes() {
        assert!(node.journals().is_empty(), "{}", node.name());
    }
}

/// Under job_container/tmpfs Slurm ends the job's extern step on every node when one
/// fails, and no new step can start on the others (cluster_profiles.rs): colloc takes
/// every node out of service, ends with the runs left undone (exit 1, no run twice), and
/// the report says why for each node; `--resume` in a new job would finish them.
fn production_loses_every_node(c: &Cluster, id: u32, dir: &Path, out: &str, go: &Path) {
    assert!(
        out.contains("COLLOC_RC=1"),
        "{out}\nstderr: {}",
        c.job_err(id)
    );
    let ok = succeeded(dir);
    assert!(ok.values().all(|&n| n == 1), "{ok:?}");
    let rep = report(dir);
    let s = &rep["summary"];
    assert!(s["succeeded"].as_u64().unwrap() < 18, "{s}");
    assert_eq!(s["succeeded"].as_u64().unwrap() as usize, ok.len(), "{s}");
    for n in rep["nodes"].as_array().unwrap() {
        assert!(n["out"].is_string(), "{n}");
    }
    assert!(out.contains("no more runs"), "{out}");
    println!(
        "  production: {} of 18 runs done before every node was out: {}",
        ok.len(),
        rep["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| format!("{}: {}", n["name"], n["out"]))
            .collect::<Vec<_>>()
            .join("; ")
    );
    std::fs::write(go, "").unwrap();
    c.wait_done(id);
}

fn node_lost_mid_sweep(c: &Cluster) {
    let dir = c.jobs_dir().join("lost-sweep");
    // The first runs hold their slots until n3 is gone: two of them on n3.
    let release = dir.join("release");
    sweep(&dir, 18, 1.0, Some(&release));
    let (script, ready, go) = job(c, &dir, "");
    let id = c.submit(
        &["-N3", "--no-kill", "--gres=gpu:1", "--colloc=mig:3g"],
        &script,
    );
    // n3 runs some of them: take it away.
    let seen_dir = dir.join("seen");
    c.wait_until("runs to start on n3", || {
        let n = std::fs::read_dir(&seen_dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".start"))
            .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.starts_with("n3|")))
            .count();
        (n >= 2).then_some(())
    });
    let n3 = c.node("n3");
    let loss = n3.crash();
    assert!(loss.state.starts_with("down"), "{loss:?}");
    std::fs::write(&release, "").unwrap();
    // (Not Cluster::wait_for_file: it gives up on a cluster with a node down.)
    let requeued = || {
        c.job_info(id)
            .is_some_and(|i| i.get("JobState").map(String::as_str) == Some("PENDING"))
    };
    c.wait_until("the sweep to end, or the job to be requeued", || {
        (ready.exists() || requeued()).then_some(())
    });
    if !ready.exists() && c.slurm_release() >= (24, 11) {
        production_requeues_the_job(c, id, &n3);
        return;
    }
    let out = c.job_out(id);
    // Slurm 24.11 under the job container starts new steps on the remaining nodes (as
    // without it): the sweep goes on as under the simple profile.
    if c.profile().production() && c.slurm_release() < (24, 11) {
        production_loses_every_node(c, id, &dir, &out, &go);
        n3.start_again();
        assert!(n3.colloc(&["restore", "--all"]).status.success());
        return;
    }
    assert!(
        out.contains("COLLOC_RC=0"),
        "{out}\nstderr: {}",
        c.job_err(id)
    );
    let ok = succeeded(&dir);
    assert_eq!(ok.len(), 18, "{ok:?}");
    assert!(ok.values().all(|&n| n == 1), "{ok:?}");
    let seen = parse_seen(&dir);
    let lost: Vec<&Seen> = seen.iter().filter(|s| s.end.is_none()).collect();
    assert_eq!(lost.len(), 2, "the two runs n3 held: {seen:?}");
    assert!(lost.iter().all(|s| s.node == "n3"), "{lost:?}");
    for l in &lost {
        let again: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.run == l.run && s.end.is_some())
            .collect();
        assert_eq!(again.len(), 1, "{}: {again:?}", l.run);
        assert_ne!(again[0].node, "n3", "{}", l.run);
    }
    let rep = report(&dir);
    assert_eq!(rep["summary"]["succeeded"], 18, "{}", rep["summary"]);
    assert!(
        rep["summary"]["step_failures"].as_u64().unwrap_or(0) >= lost.len() as u64,
        "{}",
        rep["summary"]
    );
    let n3r = rep["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n3")
        .unwrap()
        .clone();
    assert!(n3r["out"].is_string(), "{n3r}");
    // Each lost run's report: a failed attempt on n3 saying why, then one that worked.
    for l in &lost {
        let r = rep["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == l.run.as_str())
            .unwrap();
        let atts = r["attempts"].as_array().unwrap();
        assert!(atts.len() >= 2, "{r}");
        assert!(atts[0]["step"]["failed"].is_string(), "{r}");
        assert_eq!(atts.last().unwrap()["state"], "succeeded", "{r}");
    }
    assert!(
        out.contains("node n3:") && out.contains("no more runs"),
        "{out}"
    );
    println!(
        "  n3 down after {:.1}s; {} run(s) cut short there and re-run elsewhere; n3: {}",
        loss.noticed_after.as_secs_f64(),
        lost.len(),
        n3r["out"]
    );
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    n3.start_again();
    let restored = n3.colloc(&["restore", "--all"]);
    assert!(restored.status.success());
}

/// Slurm 24.11: the node lost while the sweep's steps ran on it may end the `--no-kill`
/// job and requeue it (seen under the production profile in one of two runs, and once
/// under the simple profile in CI, 2026-12-06; otherwise the sweep goes on without the
/// node; 22.05 under the production profile kept the job running with every new step
/// failing). colloc's part: the
/// other nodes' epilogs restore their GPUs, and the lost node's once it is back.
fn production_requeues_the_job(c: &Cluster, id: u32, lost: &Node<'_>) {
    println!("  Slurm 24.11: the --no-kill job {id} was requeued after n3's loss");
    c.slurm("scancel").arg(id.to_string()).status().unwrap();
    c.wait_until("the queue to empty", || c.squeue().is_empty().then_some(()));
    for name in ["n1", "n2"] {
        let node = c.node(name);
        let restored = || node.journals().is_empty() && node.mig_uuids().is_empty();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !restored() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if restored() {
            continue;
        }
        // Where its epilog ran, colloc's restore must have worked. Slurm 24.11 once ran
        // none on one of the remaining nodes for the requeued, then cancelled job (CI,
        // 2026-12-06: its steps and extern step ended, no epilog in its slurmd log for
        // 120 s and more): colloc cannot act where Slurm calls nothing, and the GPU is
        // restored as an admin would (the journal names the job).
        let log = std::fs::read_to_string(node.slurmd_log()).unwrap_or_default();
        assert!(
            !log.contains(&format!("spank/epilog for jobid [{id}]")),
            "{name}: its epilog ran for job {id} and left the GPUs reconfigured\n{}",
            node.slurmd_log_tail(40)
        );
        println!(
            "  Slurm ran no epilog on {name} for job {id}: `colloc restore --all` restores it"
        );
        assert!(node.colloc(&["restore", "--all"]).status.success());
        assert!(
            restored(),
            "{name}: still reconfigured after colloc restore --all"
        );
    }
    lost.start_again();
    assert!(lost.colloc(&["restore", "--all"]).status.success());
    c.wait_until("n3's GPUs restored", || {
        (lost.journals().is_empty() && lost.mig_uuids().is_empty()).then_some(())
    });
}

/// A `sleep` length that marks this cluster's runs: `base` with digits of this cluster's
/// own, so that the same test on another cluster at the same time (CI runs both profiles
/// at once) is not counted.
fn marker_for(c: &Cluster, base: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    c.dir().hash(&mut h);
    format!("{base}{:06}", h.finish() % 1_000_000)
}

/// Runs in their long sleep: processes whose command line is `sleep MARKER`. (Not
/// [`processes_with`]: the sruns and step-side colloc that launch a run carry the marker
/// in their arguments too, before the run itself has started.)
fn sleeping(marker: &str) -> usize {
    let want = format!("sleep\0{marker}\0");
    pids_by_cmdline(|c| c == want.as_bytes()).len()
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    pids_by_cmdline(|c| {
        String::from_utf8_lossy(c)
            .replace('\0', " ")
            .contains(marker)
    })
}

/// SIGTERM to colloc in a sweep over three nodes: every node's runs get it and end
/// interrupted, nothing of them is left on any node, colloc exits 1; `--resume` in the
/// same job then runs the interrupted ones (and only those) again, as on one node.
fn sigterm_then_resume(c: &Cluster) {
    let dir = c.jobs_dir().join("term-sweep");
    std::fs::create_dir_all(dir.join("seen")).unwrap();
    // Long runs until `fast` exists; a marker in their sleep to find them.
    let marker = &marker_for(c, "31.4159");
    let script = format!(
        r#"f={seen}/$COLLOC_RUN_NAME.$COLLOC_RUN_ATTEMPT; echo "$SLURMD_NODENAME|$CUDA_VISIBLE_DEVICES|$SLURM_JOB_ID.$SLURM_STEP_ID||||$(date +%s.%N)" > $f.start; if [ -e {fast} ]; then sleep 0.5; else sleep {marker}; fi; echo img/s=10; date +%s.%N > $f.end; echo $COLLOC_RUN_NAME >> {ok}"#,
        seen = dir.join("seen").display(),
        fast = dir.join("fast").display(),
        ok = dir.join("succeeded").display(),
    );
    let grid: Vec<String> = (1..=15).map(|i| i.to_string()).collect();
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['bash', '-c', '''{script}''']\ngrid = {{ i = [{}] }}\n",
            grid.join(", ")
        ),
    )
    .unwrap();
    let run = format!(
        "{} run --grace 2s --status-every 1h --report-dir {}/report -f runs.toml",
        colloc_bin().display(),
        dir.display()
    );
    let job = format!(
        "export COLLOC_CONFIG={config}\ncd {dir}\n{run} & echo $! > pid\nwait $!\necho \"FIRST_RC=$?\"\n{run} --resume\necho \"RESUME_RC=$?\"\n",
        config = c.colloc_config().display(),
        dir = dir.display(),
    );
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mig:3g"], &job);
    c.wait_until("12 runs to hold the 12 slots", || {
        let n = std::fs::read_dir(dir.join("seen")).ok()?.count();
        (n >= 12 && sleeping(marker) >= 12).then_some(())
    });
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(dir.join("fast"), "").unwrap();
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    let out = c.job_out(id);
    assert!(out.contains("FIRST_RC=1"), "{out}");
    assert!(
        out.contains("RESUME_RC=0"),
        "{out}\nstderr: {}",
        c.job_err(id)
    );
    assert!(
        processes_with(marker).is_empty(),
        "left: {:?}",
        processes_with(marker)
    );
    let ok = succeeded(&dir);
    assert_eq!(ok.len(), 15, "{ok:?}");
    assert!(ok.values().all(|&n| n == 1), "{ok:?}");
    let rep = report(&dir);
    let sessions = rep["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert!(
        sessions[0]["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains("SIGTERM")),
        "{sessions:?}"
    );
    // The 12 runs that held slots were interrupted on all three nodes, then ran again.
    let mut interrupted_on = BTreeSet::new();
    let mut again = 0;
    for r in rep["runs"].as_array().unwrap() {
        assert_eq!(r["state"], "succeeded", "{r}");
        let atts = r["attempts"].as_array().unwrap();
        if atts.len() > 1 {
            again += 1;
            assert_eq!(atts[0]["state"], "interrupted", "{r}");
            assert!(
                atts[0]["step"]["failed"].is_null(),
                "not a step failure: {r}"
            );
            interrupted_on.insert(atts[0]["node"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(again, 12, "{}\n{}", attempts_line(&rep), rep["runs"]);
    assert_eq!(
        interrupted_on.into_iter().collect::<Vec<_>>(),
        ["n1", "n2", "n3"]
    );
}

/// `kill -9` of colloc mid-sweep over three nodes: its sruns die with its supervisors,
/// each step side sees its stdin close and kills its run: within seconds nothing of any
/// run is left on any node, and the job ends normally.
fn sigkill_leaves_nothing(c: &Cluster) {
    let dir = c.jobs_dir().join("kill-sweep");
    std::fs::create_dir_all(&dir).unwrap();
    let marker = &marker_for(c, "27.1828");
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['bash', '-c', 'sleep {marker}']\ngrid = {{ i = [{}] }}\n",
            (1..=14).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
        ),
    )
    .unwrap();
    let job = format!(
        "export COLLOC_CONFIG={config}\ncd {dir}\n{colloc} run --report-dir {dir}/report -f runs.toml & echo $! > pid\nwait $!\necho \"RC=$?\"\n",
        config = c.colloc_config().display(),
        dir = dir.display(),
        colloc = colloc_bin().display(),
    );
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mig:3g"], &job);
    c.wait_until("12 runs to hold the 12 slots", || {
        (sleeping(marker) >= 12).then_some(())
    });
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let t = std::time::Instant::now();
    while !processes_with(marker).is_empty() {
        assert!(
            t.elapsed().as_secs() < 30,
            "runs still there 30 s after colloc was killed: {:?}",
            processes_with(marker)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!(
        "  every run gone {:.1}s after kill -9 of colloc",
        t.elapsed().as_secs_f64()
    );
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    assert!(c.job_out(id).contains("RC=137"), "{}", c.job_out(id));
}

/// The time-limit warning (issue 25) in a sweep over three nodes, colloc started as the
/// recipe starts it (`exec colloc run`): SIGUSR1 to the batch shell, as
/// `--signal=B:USR1` sends it, reaches colloc, and through each step every run on every
/// node, which saves its checkpoint and exits; every run ends interrupted, no requeue
/// (`--requeue-limit 0`, and one line says so), and nothing is left on any node.
fn warning_reaches_every_node(c: &Cluster) {
    // The sweep killed before this one can leave its nodes completing a while (seen once
    // on Slurm 24.11, production profile: this job then pended on "Nodes required for job
    // are DOWN, DRAINED or reserved" until the hang guard): start on idle nodes, and if
    // one does not become idle, say which and why (a drain would be a failure of its own).
    let start = std::time::Instant::now();
    while c.nodes().iter().any(|n| n.state() != "idle") {
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let states: Vec<String> = c
                .nodes()
                .iter()
                .map(|n| format!("{}: {} ({})", n.name(), n.state(), n.reason()))
                .collect();
            panic!("nodes not idle 120 s after the killed sweep: {states:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let dir = c.jobs_dir().join("warn-sweep");
    std::fs::create_dir_all(&dir).unwrap();
    let ck = colloc_slurm_tests::fixture("wrapper/tests/fixtures/run/checkpoint.sh");
    let grid: Vec<String> = (1..=12).map(|i| i.to_string()).collect();
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[defaults]\nenv = {{ CKPT_DIR = '{}', STEPS = '100000', STEP_S = '0.2' }}\n[[sweep]]\nname = 'ck{{i}}'\ncommand = ['{}']\ngrid = {{ i = [{}] }}\n",
            dir.display(),
            ck.display(),
            grid.join(", ")
        ),
    )
    .unwrap();
    let job = format!(
        "export COLLOC_CONFIG={config}\ncd {dir}\nexec {colloc} run --grace 2s --warn-grace 20s --requeue-limit 0 --status-every 1h --report-dir {dir}/report -f runs.toml\n",
        config = c.colloc_config().display(),
        dir = dir.display(),
        colloc = colloc_bin().display(),
    );
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=mig:3g"], &job);
    let lines = |f: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(f))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    c.wait_until("12 runs to hold the 12 slots", || {
        (lines("starts").len() >= 12).then_some(())
    });
    let out = c
        .slurm("scancel")
        .args(["--batch", "--signal=USR1", &id.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let end = c.wait_done(id);
    let err = c.job_err(id);
    assert_eq!(end.exit_code, "1:0", "{end:?}\n{err}");
    assert!(
        err.contains("sending SIGUSR1 to 12 running run(s)"),
        "{err}"
    );
    assert!(
        !err.contains("sending SIGTERM"),
        "a run needed the grace: {err}"
    );
    assert!(err.contains("the most --requeue-limit allows (0)"), "{err}");
    let mut saved: Vec<String> = lines("checkpoints")
        .iter()
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect();
    saved.sort();
    saved.dedup();
    assert_eq!(saved.len(), 12, "{saved:?}");
    let rep = report(&dir);
    let mut nodes = BTreeSet::new();
    for r in rep["runs"].as_array().unwrap() {
        assert_eq!(r["state"], "interrupted", "{r}");
        nodes.insert(r["node"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(nodes.into_iter().collect::<Vec<_>>(), ["n1", "n2", "n3"]);
    // This test's runs only: both profiles' suites run at once in CI, and the other's
    // time-limit tests run the same script.
    let ck = ck.display().to_string();
    let tag = format!("CKPT_DIR={}", dir.display());
    let left = || {
        processes_with(&ck)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/environ"))
                    .is_ok_and(|e| e.split(|&b| b == 0).any(|kv| kv == tag.as_bytes()))
            })
            .collect::<Vec<_>>()
    };
    assert!(left().is_empty(), "left: {:?}", left());
}

/// A pack across three nodes: each run is served to the metrics of the node it runs on
/// (`colloc status --format openmetrics`, as its metrics timer runs it, as root) by its
/// own step: name, slot, that node's GPU, and the throughput colloc run read from the
/// run's output and sent back (issue 38). The test's nodes share one network namespace,
/// so every node's metrics list every run; only on its own node does a run carry its GPU
/// (a device that is none of the node's job's is left out of the label).
fn every_nodes_metrics(c: &Cluster) {
    let _whole = c.whole_gpus();
    let dir = c.jobs_dir().join("metrics-sweep");
    std::fs::create_dir_all(&dir).unwrap();
    let stop = dir.join("stop");
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['sh', '-c', 'while [ ! -e {} ]; do echo img/s=2$COLLOC_RUN_INDEX.5; sleep 0.2; done']\ngrid = {{ i = [1, 2, 3, 4, 5, 6] }}\n",
            stop.display()
        ),
    )
    .unwrap();
    let (script, ready, go) = job(c, &dir, "-j 2");
    let id = c.submit(&["-N3", "--gres=gpu:2", "--colloc=naive"], &script);
    let metrics = |node: &colloc_slurm_tests::Node<'_>| {
        let out = node.colloc(&["status", "--format", "openmetrics"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let nodes = c.nodes();
    let gpus_of = |node: &colloc_slurm_tests::Node<'_>| -> BTreeSet<String> {
        node.fake_state()["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["uuid"].as_str().unwrap().to_string())
            .collect()
    };
    let label = |l: &str, key: &str| {
        l.split(&format!("{key}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string()
    };
    // (node, run) for each run that shows its node's GPU there, once all six have a
    // throughput.
    let placed = c.wait_until("each run with its GPU and throughput on its node", || {
        let mut placed: Vec<(String, String, String, String)> = Vec::new();
        for node in &nodes {
            let text = metrics(node);
            let own = gpus_of(node);
            let rates: BTreeMap<String, String> = text
                .lines()
                .filter(|l| l.starts_with("colloc_run_throughput{"))
                .map(|l| (label(l, "slot"), l.rsplit(' ').next().unwrap().to_string()))
                .collect();
            for l in text.lines().filter(|l| l.starts_with("colloc_run_info{")) {
                if own.contains(&label(l, "UUID")) {
                    let rate = rates.get(&label(l, "slot")).cloned().unwrap_or_default();
                    placed.push((
                        node.name().to_string(),
                        label(l, "run"),
                        label(l, "index"),
                        rate,
                    ));
                }
            }
        }
        (placed.len() == 6 && placed.iter().all(|p| !p.3.is_empty())).then_some(placed)
    });
    std::fs::write(&stop, "").unwrap();
    let runs: BTreeSet<&str> = placed.iter().map(|p| p.1.as_str()).collect();
    assert_eq!(runs.len(), 6, "{placed:?}");
    for node in &nodes {
        let here = placed.iter().filter(|p| p.0 == node.name()).count();
        assert_eq!(here, 2, "{}: {placed:?}", node.name());
    }
    // Each run's throughput is what it printed: 2<index>.5.
    for (_, run, index, rate) in &placed {
        assert_eq!(rate, &format!("2{index}.5"), "{run}: {placed:?}");
    }
    c.wait_until("the pack to end", || ready.exists().then_some(()));
    for node in &nodes {
        let after = metrics(node);
        assert!(
            !after.contains("colloc_run_info{"),
            "{}: {after}",
            node.name()
        );
    }
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
}
