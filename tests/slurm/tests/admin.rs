//! What an admin meets, on a real Slurm cluster with two fake A100s (issue 14):
//! `colloc status` and `colloc status --cluster` against live and leftover jobs, the
//! controller refusing `--colloc` without GPUs (slurm-conf/job_submit.lua), and a node
//! without colloc.toml.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use colloc_slurm_tests::{colloc_bin, ensure_user, plugin_path, run_suite, Cluster, Test};
use serde_json::Value;

fn main() {
    let tests: &[Test] = &[
        (
            "status_and_status_cluster_show_running_jobs_their_users_and_the_plugin_build",
            running_jobs,
        ),
        ("a_journal_whose_job_is_gone_shows_as_a_leftover", leftover),
        (
            "job_submit_lua_refuses_colloc_without_gpus_at_submission",
            job_submit_lua,
        ),
        (
            "a_node_without_colloc_toml_refuses_the_job_not_the_node",
            no_colloc_toml,
        ),
    ];
    run_suite(2, None, tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The node's Slurm name.
fn node_name(c: &Cluster) -> String {
    let out = c
        .slurm("sinfo")
        .args(["-h", "-N", "-o", "%N"])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

/// `colloc ARGS` as an admin on the node would run it: this cluster's Slurm, colloc
/// config and fake GPUs, and the node's name.
fn colloc(c: &Cluster, args: &[&str]) -> Output {
    Command::new(colloc_bin())
        .args(args)
        .env("SLURM_CONF", c.dir().join("etc/slurm.conf"))
        .env("COLLOC_CONFIG", c.colloc_config())
        .env("COLLOC_FAKE_NVML_STATE", c.fake_state_path())
        .env("SLURMD_NODENAME", node_name(c))
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// A job script that says it runs, then waits for `go` (at most two minutes).
fn gated(ready: &Path, go: &Path) -> String {
    format!(
        "touch {}\nfor i in $(seq 600); do [ -e {} ] && break; sleep 0.2; done\n",
        ready.display(),
        go.display()
    )
}

fn assert_idle_and_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert_eq!(c.squeue(), "");
}

fn running_jobs(c: &Cluster) {
    let user = ensure_user("admin-alice");
    let ready_a = c.jobs_dir().join("status-ready-a");
    let ready_b = c.jobs_dir().join("status-ready-b");
    let go = c.jobs_dir().join("status-go");
    // A mig job on GPU 0 (in MIG mode), a naive one on GPU 1 (a whole GPU).
    c.fake_ctl(&["set-mig", "--gpu", "1", "off"]);
    let a = c.submit(
        &[
            "--colloc=mig:3g",
            "--gres=gpu:1",
            "--uid=admin-alice",
            "--gid=admin-alice",
        ],
        &gated(&ready_a, &go),
    );
    let b = c.submit(&["--colloc=naive", "--gres=gpu:1"], &gated(&ready_b, &go));
    c.wait_for_file(a, &ready_a);
    c.wait_for_file(b, &ready_b);
    let node = node_name(c);

    // The cluster view: one row per node, GPU and job, with Slurm's word on each job.
    let out = colloc(c, &["status", "--cluster", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    let row_a = rows.iter().find(|r| r["job"] == a).expect("job a's row");
    assert_eq!(row_a["node"], node.as_str());
    assert_eq!(row_a["user"], "admin-alice");
    assert_eq!(row_a["uid"], user.0);
    assert_eq!(
        row_a["mode"], "mig:3g.20gbx2",
        "the layout made, not the request"
    );
    assert_eq!(row_a["phase"], "applied");
    assert_eq!(row_a["job_state"], "RUNNING");
    assert_eq!(row_a["running"], true);
    let row_b = rows.iter().find(|r| r["job"] == b).expect("job b's row");
    assert_eq!(row_b["mode"], "naive");
    assert_eq!(row_b["user"], "root");
    assert_ne!(row_a["gpu"], row_b["gpu"], "{v}");
    assert!(v.get("error").is_none(), "{v}");
    // The build that published is the plugin's, by its GNU build id.
    let build = colloc_core::buildid::of_file(&plugin_path()).expect("the plugin's build id");
    assert_eq!(v["builds"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["builds"][0]["build"], colloc_core::buildid::short(&build));
    assert_eq!(v["builds"][0]["nodes"][0], node.as_str());
    assert!(v["builds"][0]["by"]
        .as_str()
        .unwrap()
        .starts_with("plugin/"));
    let human = text(&colloc(c, &["status", "--cluster"]).stdout);
    assert!(human.starts_with("NODE "), "{human}");
    assert!(human.contains("admin-alice"), "{human}");
    assert!(human.contains("RUNNING"), "{human}");
    assert!(
        human.contains(&format!(
            "plugin build {}",
            colloc_core::buildid::short(&build)
        )),
        "{human}"
    );
    // Filters: the node by name, and its partition.
    let out = colloc(c, &["status", "--cluster", "--json", "-w", &node]);
    assert_eq!(json_of(&out)["rows"].as_array().unwrap().len(), 2);
    let out = colloc(c, &["status", "--cluster", "--json", "-p", "test"]);
    assert_eq!(json_of(&out)["rows"].as_array().unwrap().len(), 2);
    let out = colloc(c, &["status", "--cluster", "-p", "nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("lists no node in partition nonexistent"),
        "{}",
        text(&out.stderr)
    );

    // The node view: each journal's user and what Slurm says of its job.
    let out = colloc(c, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&out);
    let j = v["journals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == a)
        .cloned()
        .expect("job a's journal");
    assert_eq!(j["user"], "admin-alice");
    assert_eq!(j["job_state"], "RUNNING");
    assert_eq!(j["running"], true);
    let human = text(&colloc(c, &["status"]).stdout);
    assert!(
        human.contains(&format!("job {a} of admin-alice (RUNNING)")),
        "{human}"
    );
    assert!(!human.contains("LEFTOVER"), "{human}");

    std::fs::write(&go, "").unwrap();
    assert_eq!(c.wait_done(a).state, "COMPLETED");
    assert_eq!(c.wait_done(b).state, "COMPLETED");
    std::fs::remove_file(&go).unwrap();
    // The epilogs published the emptied node.
    let v = json_of(&colloc(c, &["status", "--cluster", "--json"]));
    assert_eq!(v["rows"], serde_json::json!([]), "{v}");
    assert!(v["nodes"][0]["record"]["by"]
        .as_str()
        .unwrap()
        .starts_with("plugin/"));
    assert_idle_and_clean(c);
    c.fake_ctl(&["set-mig", "--gpu", "1", "on"]);
}

fn leftover(c: &Cluster) {
    let _whole = c.whole_gpus();
    // A journal of a job Slurm does not know, as a crashed epilog would leave: made by
    // hand, which publishes the node's record as the prolog does.
    let job = "3999999";
    let out = colloc(c, &["apply", "naive", "--gpu", "1", "--job", job]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&colloc(c, &["status", "--cluster", "--json"]));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["job"], 3_999_999);
    assert_eq!(rows[0]["gpu"], 1);
    assert_eq!(rows[0]["job_state"], "GONE");
    assert_eq!(rows[0]["running"], false);
    let notes = v["notes"].to_string();
    assert!(notes.contains("a leftover"), "{notes}");
    assert!(
        notes.contains(&format!("colloc restore --job {job}")),
        "{notes}"
    );
    assert!(v["nodes"][0]["record"]["by"]
        .as_str()
        .unwrap()
        .starts_with("colloc/"));
    let out = colloc(c, &["status"]);
    let human = text(&out.stdout);
    assert!(
        human.contains(&format!("job {job} of root (GONE")),
        "{human}"
    );
    assert!(human.contains("LEFTOVER"), "{human}");
    let out = colloc(c, &["restore", "--job", job]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&colloc(c, &["status", "--cluster", "--json"]));
    assert_eq!(v["rows"], serde_json::json!([]), "{v}");
    assert_idle_and_clean(c);
}

/// Puts a file back (or removes what a test added) however the test ends, then makes
/// slurmctld read the configuration again.
struct Restore {
    path: PathBuf,
    text: Option<String>,
    reconfigure: Option<PathBuf>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        match &self.text {
            Some(t) => std::fs::write(&self.path, t).expect("restore a file"),
            None => {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        if let Some(conf) = &self.reconfigure {
            let _ = Command::new("scontrol")
                .arg("reconfigure")
                .env("SLURM_CONF", conf)
                .status();
        }
    }
}

fn job_submit_lua(c: &Cluster) {
    let etc = c.dir().join("etc");
    let slurm_conf = etc.join("slurm.conf");
    let conf = std::fs::read_to_string(&slurm_conf).unwrap();
    let _lua = Restore {
        path: etc.join("job_submit.lua"),
        text: None,
        reconfigure: None,
    };
    let _conf = Restore {
        path: slurm_conf.clone(),
        text: Some(conf.clone()),
        reconfigure: Some(slurm_conf.clone()),
    };
    std::fs::copy(
        colloc_slurm_tests::repo_root().join("slurm-conf/job_submit.lua"),
        etc.join("job_submit.lua"),
    )
    .unwrap();
    std::fs::write(&slurm_conf, format!("{conf}JobSubmitPlugins=lua\n")).unwrap();
    let out = c.slurm("scontrol").arg("reconfigure").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // No GPU asked for: refused before anything is queued, with what to add.
    for args in [&["--colloc=mps"][..], &["--colloc=mig:3g", "--gres=gpu:0"]] {
        let out = c.sbatch(args, "echo RAN").expect_err("queued without GPUs");
        let err = text(&out.stderr);
        assert!(
            err.contains("needs GPUs: ask for them with --gres=gpu:N (or --gpus=N)"),
            "{args:?}: {err}"
        );
        assert_eq!(c.squeue(), "");
    }
    let out = c
        .slurm("srun")
        .args(["--colloc=naive", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--colloc=naive needs GPUs"),
        "{}",
        text(&out.stderr)
    );
    // GPUs asked for in any of Slurm's ways, --colloc=off, or no --colloc: accepted.
    let _whole = c.whole_gpus();
    for (args, id) in [
        &["--colloc=naive", "--gres=gpu:1"][..],
        &["--colloc=naive", "--gpus=1"],
        &["--colloc=naive", "--gpus-per-node=1"],
        &["--colloc=off"],
        &[],
    ]
    .map(|args| {
        let id = c
            .sbatch(args, "echo RAN")
            .unwrap_or_else(|o| panic!("{args:?} refused: {}", text(&o.stderr)));
        (args, id)
    }) {
        assert_eq!(c.wait_done(id).state, "COMPLETED", "{args:?}");
    }
    assert_idle_and_clean(c);
}

fn no_colloc_toml(c: &Cluster) {
    let _whole = c.whole_gpus();
    let cfg = c.colloc_config();
    let kept = std::fs::read_to_string(&cfg).unwrap();
    let _back = Restore {
        path: cfg.clone(),
        text: Some(kept),
        reconfigure: None,
    };
    std::fs::remove_file(&cfg).unwrap();
    let before = c.gpu_layout();
    let id = c.submit(&["--colloc=mps", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"));
    let err = c.job_err(id);
    assert!(
        err.contains("--colloc=mps is not offered on node ")
            || err.contains("--colloc=mps is not offered on this node"),
        "stderr: {err}"
    );
    assert!(err.contains("ask your admin"), "stderr: {err}");
    assert_eq!(c.gpu_layout(), before, "the GPU was touched");
    // Jobs that ask for nothing run as usual there.
    let id = c.submit(&["--gres=gpu:1"], "echo RAN");
    assert_eq!(c.wait_done(id).state, "COMPLETED");
    assert!(c.job_out(id).contains("RAN"));
    assert_idle_and_clean(c);
}
