//! `colloc run` across nodes without a Slurm cluster: a stand-in `srun` (`COLLOC_SRUN`)
//! runs each step's command here with the node's name in `SLURMD_NODENAME`, and a
//! stand-in `scontrol` names the job's nodes. The whole path runs (discovery, one step
//! per run, the step side's protocol, the record), and a node whose steps fail is taken
//! out of service while its runs go elsewhere. Real Slurm: tests/slurm/tests/multinode.rs.

mod run_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use run_support::{succeeded, Env};

/// Stand-ins for `srun` and `scontrol` in `DIR/bin`; steps on a node named in
/// `DIR/bin/broken` fail as Slurm's do when a node is gone.
fn fake_slurm(env: &Env) -> PathBuf {
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let srun = r#"#!/bin/bash
# Options are --name=value; then the program and its arguments.
nodes=
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) nodes=${1#--nodelist=} ;;
    --job-name=*) echo "${1#--job-name=}" >> "$(dirname "$0")/step-names" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
IFS=, read -ra list <<< "$nodes"
if [ ${#list[@]} -gt 1 ]; then
  for n in "${list[@]}"; do SLURMD_NODENAME=$n "$@" & done
  wait
  exit 0
fi
if grep -qx "$nodes" "$(dirname "$0")/broken" 2>/dev/null; then
  cat > /dev/null &
  echo "srun: error: Node failure on $nodes" >&2
  exit 1
fi
SLURMD_NODENAME=$nodes SLURM_JOB_ID=5 SLURM_STEP_ID=$$ exec "$@"
"#;
    let scontrol = r#"#!/bin/bash
case "$1 $2 $3" in
  "-o show job") echo "JobId=5 JobState=RUNNING NodeList=n[1-2] NumNodes=2" ;;
  "show hostnames "*) echo n1; echo n2 ;;
  *) echo "scontrol stand-in: $*" >&2; exit 1 ;;
esac
"#;
    for (name, text) in [("srun", srun), ("scontrol", scontrol)] {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn colloc(env: &Env, bin: &Path) -> assert_cmd::Command {
    let mut c = env.colloc();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.env("PATH", path)
        .env("COLLOC_SRUN", bin.join("srun"))
        .env("SLURM_JOB_ID", "5")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env_remove("SLURM_STEP_ID")
        .env_remove("SLURM_NNODES");
    c
}

/// Each run writes its node into MARK/NAME.node.
fn manifest(env: &Env, n: usize) -> PathBuf {
    env.manifest(&format!(
        "[[sweep]]\nname = 'r{{i}}'\ncommand = ['sh', '-c', 'echo \"$SLURMD_NODENAME $SLURM_STEP_ID\" > $MARK/$COLLOC_RUN_NAME.node; echo img/s=10; sleep 0.3']\ngrid = {{ i = [{}] }}\n",
        (1..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
    ))
}

fn node_of(env: &Env, run: &str) -> (String, String) {
    let t = std::fs::read_to_string(env.mark().join(format!("{run}.node"))).unwrap();
    let (n, s) = t.trim().split_once(' ').unwrap();
    (n.to_string(), s.to_string())
}

#[test]
fn every_nodes_slots_one_step_per_run_and_the_report_names_the_node() {
    let env = Env::new();
    let bin = fake_slurm(&env);
    let m = manifest(&env, 8);
    let out = colloc(&env, &bin)
        .args(["-j", "2", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    assert!(
        stdout.contains("4 slots on 2 node(s) (n1: 2, n2: 2)"),
        "{stdout}"
    );
    let rep = env.report();
    assert_eq!(rep["summary"]["succeeded"], 8);
    let slots = rep["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 4);
    let mut steps = std::collections::BTreeSet::new();
    for r in rep["runs"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        let (node, step) = node_of(&env, name);
        assert_eq!(r["node"], node.as_str(), "{r}");
        let slot = r["slot"].as_u64().unwrap() as usize;
        assert_eq!(slots[slot]["node"], node.as_str(), "{r}");
        let att = &r["attempts"][0];
        assert_eq!(att["step"]["id"], format!("5.{step}").as_str(), "{r}");
        assert!(att["step"]["dispatch_s"].as_f64().is_some(), "{r}");
        // Its output came back through the step's stdout into its log.
        let log =
            std::fs::read_to_string(env.report_dir().join(r["log"].as_str().unwrap())).unwrap();
        assert!(log.contains("img/s=10"), "{log}");
        assert_eq!(r["throughput"]["mean"], 10.0, "{r}");
        steps.insert(step);
    }
    assert_eq!(steps.len(), 8, "one step per run");
    // Every run's step was named after it (and one discovery step).
    let names = std::fs::read_to_string(bin.join("step-names")).unwrap();
    let mut names: Vec<&str> = names.lines().collect();
    names.sort();
    assert_eq!(names.iter().filter(|n| **n == "colloc-discover").count(), 1);
    names.retain(|n| *n != "colloc-discover");
    let mut want: Vec<String> = (1..=8).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(names, want);
    let nodes = rep["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let attempts: u64 = nodes.iter().map(|n| n["attempts"].as_u64().unwrap()).sum();
    assert_eq!(attempts, 8);
    assert!(stdout.contains("node n1: 2 slots"), "{stdout}");
    let csv = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains(",node,"), "{csv}");
}

#[test]
fn a_node_whose_steps_fail_gets_no_more_runs_and_its_runs_go_elsewhere() {
    let env = Env::new();
    let bin = fake_slurm(&env);
    std::fs::write(bin.join("broken"), "n2\n").unwrap();
    let m = manifest(&env, 6);
    let out = colloc(&env, &bin)
        .args(["-j", "2", "--retries", "0", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, stderr) = succeeded(&out);
    let rep = env.report();
    assert_eq!(rep["summary"]["succeeded"], 6, "{}", rep["summary"]);
    for r in rep["runs"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        assert_eq!(node_of(&env, name).0, "n1", "{r}");
        assert_eq!(r["node"], "n1", "{r}");
        let atts = r["attempts"].as_array().unwrap();
        for a in &atts[..atts.len() - 1] {
            assert_eq!(a["node"], "n2", "{r}");
            assert!(
                a["step"]["failed"]
                    .as_str()
                    .is_some_and(|f| f.contains("Node failure on n2")),
                "{r}"
            );
        }
    }
    // n2 is out at its first failure (srun says the node failed); the two runs that
    // went there first came back.
    let n2 = rep["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n2")
        .unwrap()
        .clone();
    assert!(
        n2["out"]
            .as_str()
            .is_some_and(|o| o.contains("left the job")),
        "{n2}"
    );
    assert_eq!(n2["succeeded"], 0, "{n2}");
    let failures = n2["step_failures"].as_u64().unwrap();
    assert!((1..=2).contains(&failures), "{n2}");
    assert_eq!(rep["summary"]["step_failures"], failures);
    assert!(stdout.contains("node n2: 2 slots"), "{stdout}");
    assert!(stdout.contains("given no more runs"), "{stdout}");
    assert!(stderr.contains("no more runs go there"), "{stderr}");
}

#[test]
fn steps_flag_bad_values_and_where_auto_stays_on_this_node() {
    let env = Env::new();
    let bin = fake_slurm(&env);
    let m = manifest(&env, 2);
    let out = env
        .colloc()
        .args(["--steps", "maybe", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--steps: \"maybe\" is not valid"), "{err}");
    let out = env
        .colloc()
        .args(["--steps", "on", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a Slurm job"));
    // Inside a step's task (one colloc per node), and with --steps off: this node only.
    for extra in [&["--steps", "auto"][..], &["--steps", "off"][..]] {
        let mut c = colloc(&env, &bin);
        if extra[1] == "auto" {
            c.env("SLURM_STEP_ID", "0");
        }
        let _ = std::fs::remove_dir_all(env.report_dir());
        let out = c.args(extra).arg("-f").arg(&m).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("node(s)"),
            "{extra:?}"
        );
        assert!(env.report()["nodes"].is_null(), "{extra:?}");
        assert!(!bin.join("step-names").exists(), "{extra:?}: srun was used");
    }
}

#[test]
fn a_time_limit_stops_a_run_in_its_step_as_on_one_node() {
    let env = Env::new();
    let bin = fake_slurm(&env);
    let m = env.manifest(
        "[[run]]\nname = 'slow'\ncommand = ['sh', '-c', 'echo $$ > $MARK/pid; exec sleep 30']\ntimeout = '1s'\n[[run]]\nname = 'quick'\ncommand = ['true']\n",
    );
    let t = std::time::Instant::now();
    let out = colloc(&env, &bin)
        .args(["-j", "1", "--grace", "1s", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(t.elapsed().as_secs() < 15, "{:?}", t.elapsed());
    let rep = env.report();
    let slow = &rep["runs"][0];
    assert_eq!(slow["state"], "timed_out", "{slow}");
    assert_eq!(slow["attempts"].as_array().unwrap().len(), 1, "{slow}");
    assert!(slow["attempts"][0]["step"]["failed"].is_null(), "{slow}");
    assert_eq!(rep["runs"][1]["state"], "succeeded");
    // Its process is gone.
    let pid = std::fs::read_to_string(env.mark().join("pid")).unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "run {pid} still there"
    );
}

/// The time-limit warning (SIGUSR1 to colloc, issue 25) reaches each step's run on its
/// node through the step side; each saves its checkpoint and is recorded as interrupted.
#[test]
fn the_time_limit_warning_reaches_every_steps_run() {
    let env = Env::new();
    let bin = fake_slurm(&env);
    let ck = run_support::fixture("checkpoint.sh");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ CKPT_DIR = '{}', STEPS = '100000', STEP_S = '0.1' }}\n[[sweep]]\nname = 'ck{{i}}'\ncommand = ['{ck}']\ngrid = {{ i = [1, 2] }}\n",
        env.mark().display()
    ));
    let c = colloc(&env, &bin);
    let mut cmd = std::process::Command::new(c.get_program());
    cmd.args(c.get_args())
        .args(["-j", "1", "--warn-grace", "5s", "--grace", "1s", "-f"])
        .arg(&m)
        .current_dir(env.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let child = cmd.spawn().unwrap();
    let starts = || {
        std::fs::read_to_string(env.mark().join("starts"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    run_support::wait_for("both runs to start", || starts() == 2);
    run_support::kill(child.id(), libc::SIGUSR1);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("sending SIGUSR1 to 2 running run(s)"),
        "{stderr}"
    );
    // Neither needed the grace: both saved a checkpoint at once.
    assert!(!stderr.contains("sending SIGTERM"), "{stderr}");
    let mut saved: Vec<String> = std::fs::read_to_string(env.mark().join("checkpoints"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect();
    saved.sort();
    assert_eq!(saved, ["ck1", "ck2"]);
    let rep = env.report();
    let mut nodes = Vec::new();
    for r in rep["runs"].as_array().unwrap() {
        assert_eq!(r["state"], "interrupted", "{r}");
        nodes.push(r["node"].as_str().unwrap_or_default().to_string());
    }
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
}
