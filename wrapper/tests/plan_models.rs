//! `colloc plan` for every current MIG GPU, by the names users type, against what NVIDIA
//! documents (`tests/fake-nvml/fixtures/documented-mig-models.json`); the same plans
//! from the fake GPU of each model (`--gpu 0`, what its driver answers); and the profile
//! names drivers changed, accepted in both forms by `plan` and by `apply` (what the
//! prolog does). Needs `cargo build -p fake-nvml` (the library and fake-nvml-ctl).

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

fn documented() -> Vec<Value> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-nvml/fixtures/documented-mig-models.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    v["models"].as_array().unwrap().clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn colloc(args: &[&str]) -> Output {
    Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("COLLOC_CONFIG")
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn plan_json(args: &[&str]) -> Value {
    let out = colloc(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out)))
}

/// `(profile, start, size)` of each planned instance: the JSON contract of `colloc plan`.
type Layout = Vec<(String, u64, u64)>;

fn instances(v: &Value) -> Layout {
    v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["profile"].as_str().unwrap().to_string(),
                u(&i["start"]),
                u(&i["size"]),
            )
        })
        .collect()
}

/// The documented standard profile of `slices` slices (no media variant; the smaller
/// memory of two 1-slice profiles) and its memory.
fn standard(m: &Value, slices: u64) -> Option<(String, u64)> {
    m["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| u(&p["slices"]) == slices && !p["name"].as_str().unwrap().contains('+'))
        .min_by_key(|p| u(&p["memory_mib"]))
        .map(|p| (p["name"].as_str().unwrap().to_string(), u(&p["memory_mib"])))
}

/// What `mig:1g`, `mig:3g` and `mig:4g,2g,1g` plan on a model, from its documented
/// profiles (`None`: refused, the A30 has no 3g and only four slices).
fn expected(m: &Value) -> Vec<(&'static str, Option<Layout>)> {
    let slots = u(&m["mem_slots"]);
    let one = standard(m, 1).unwrap().0;
    let ones = (0..slots.min(7)).map(|s| (one.clone(), s, 1)).collect();
    let three = standard(m, 3).map(|(t, _)| vec![(t.clone(), 0, 4), (t, 4, 4)]);
    let mixed = standard(m, 3).map(|_| {
        vec![
            (standard(m, 4).unwrap().0, 0, 4),
            (standard(m, 2).unwrap().0, 4, 2),
            (one.clone(), 6, 1),
        ]
    });
    vec![
        ("mig:1g", Some(ones)),
        ("mig:3g", three),
        ("mig:4g,2g,1g", mixed),
    ]
}

#[test]
fn plan_by_every_name_users_type_matches_the_documented_profiles() {
    let models = documented();
    assert_eq!(models.len(), 13);
    for m in &models {
        let nvml_name = m["nvml_name"].as_str().unwrap();
        for name in m["typed_names"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            for (mode, want) in expected(m) {
                let args = ["plan", mode, "--gpu-model", name, "--json"];
                match want {
                    Some(want) => {
                        let v = plan_json(&args);
                        assert_eq!(v["mode"], mode, "{args:?}");
                        assert_eq!(v["gpu_model"], nvml_name, "{args:?}");
                        assert_eq!(instances(&v), want, "{args:?}");
                        // Each instance carries its documented memory.
                        for i in v["instances"].as_array().unwrap() {
                            let doc = m["profiles"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .find(|p| p["name"] == i["profile"])
                                .unwrap();
                            assert_eq!(i["memory_mib"], doc["memory_mib"], "{args:?}");
                            assert_eq!(i["profile_id"], doc["id"], "{args:?}");
                        }
                    }
                    None => {
                        let out = colloc(&args);
                        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
                        let err = String::from_utf8_lossy(&out.stderr);
                        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
                        assert!(err.contains(nvml_name), "{err}");
                    }
                }
            }
        }
    }
    // A name colloc has no table for names the ones it has.
    let out = colloc(&["plan", "mig:1g", "--gpu-model", "GH200", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for listed in [
        "NVIDIA GH200 480GB (GH200-96GB)",
        "NVIDIA GH200 144G HBM3e (GH200-144GB)",
        "NVIDIA B200 (B200)",
    ] {
        assert!(err.contains(listed), "{err}");
    }
}

#[test]
fn renamed_profiles_plan_alike_in_both_forms() {
    let mut checked = 0;
    for m in &documented() {
        let alias = m["alias"].as_str().unwrap();
        for (other, current) in m["renamed"].as_object().unwrap() {
            let current = current.as_str().unwrap();
            let a = plan_json(&[
                "plan",
                &format!("mig:{current}"),
                "--gpu-model",
                alias,
                "--json",
            ]);
            let b = plan_json(&[
                "plan",
                &format!("mig:{other}"),
                "--gpu-model",
                alias,
                "--json",
            ]);
            assert_eq!(instances(&a), instances(&b), "{alias}: {other} = {current}");
            assert!(!instances(&a).is_empty());
            assert!(instances(&a).iter().all(|i| i.0 == current), "{a}");
            assert_eq!(b["mode"], format!("mig:{other}"));
            checked += 1;
        }
    }
    assert!(checked >= 5);
}

// ---- the fake GPU of each model: what its driver answers ----

fn target_dir() -> PathBuf {
    assert_cmd::cargo::cargo_bin("colloc")
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A node with the fake library and one fake GPU of `model`.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(model: &str) -> Node {
        let lib = target_dir().join("libfake_nvml.so");
        assert!(
            lib.exists(),
            "{} missing: cargo build -p fake-nvml",
            lib.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = format!(
            "version = 1\nallowed_modes = [\"mig\"]\nstate_dir = \"{0}/state\"\n\
             run_dir = \"{0}/run\"\nnvml_library = \"{1}\"\nnode_comment = false\n\
             [mig]\ncaps_dev_dir = \"{0}/dev/nvidia-caps\"\n\
             caps_proc_dir = \"{0}/proc/driver/nvidia/capabilities\"\n\
             mig_minors = \"{0}/proc/driver/nvidia-caps/mig-minors\"\n\
             proc_devices = \"{0}/proc/devices\"\nnvidia_modprobe = \"{0}/no-nvidia-modprobe\"\n",
            dir.path().display(),
            lib.display()
        );
        std::fs::write(dir.path().join("colloc.toml"), cfg).unwrap();
        let out = std::process::Command::new(target_dir().join("fake-nvml-ctl"))
            .env("COLLOC_FAKE_NVML_STATE", dir.path().join("fake.json"))
            .args(["init", "--gpus", model])
            .output()
            .expect("fake-nvml-ctl (cargo build -p fake-nvml)");
        assert!(out.status.success(), "{}", text(&out));
        Node { dir }
    }

    fn colloc(&self, args: &[&str]) -> Output {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_FAKE_NVML_STATE", self.dir.path().join("fake.json"))
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(self.dir.path().join("colloc.toml"))
            .args(args)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.colloc(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `colloc status --json` (which exits 1 here, where no Slurm answers for the job,
    /// but still reports the GPUs).
    fn status(&self) -> Value {
        let out = self.colloc(&["status", "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
    }
}

#[test]
fn each_fake_model_plans_as_its_documented_table() {
    for m in &documented() {
        let alias = m["alias"].as_str().unwrap();
        let node = Node::new(alias);
        for (mode, want) in expected(m) {
            let args = ["plan", mode, "--gpu", "0", "--json"];
            match want {
                Some(want) => {
                    let v = node.json(&args);
                    assert_eq!(v["gpu_model"], m["nvml_name"], "{alias} {mode}");
                    assert_eq!(instances(&v), want, "{alias} {mode}");
                }
                None => assert_eq!(node.colloc(&args).status.code(), Some(2), "{alias} {mode}"),
            }
        }
    }
}

#[test]
fn apply_takes_the_old_name_of_a_renamed_profile() {
    let node = Node::new("A100-80GB");
    let out = node.colloc(&["apply", "mig:3g.39gb", "--gpu", "0", "--job", "31"]);
    assert!(out.status.success(), "{}", text(&out));
    let status = node.status();
    let made: Vec<(String, u64)> = status["gpus"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["profile"].as_str().unwrap().to_string(), u(&i["start"])))
        .collect();
    assert_eq!(made, [("3g.40gb".into(), 0), ("3g.40gb".into(), 4)]);
    let out = node.colloc(&["restore", "--job", "31"]);
    assert!(out.status.success(), "{}", text(&out));
    let status = node.status();
    assert_eq!(status["gpus"][0]["instances"], Value::Array(vec![]));
}

#[test]
fn plan_mps_inside_mig_instances() {
    // mig:3g:mps:4 on an A100 40GB: the layout of mig:3g, one daemon per instance, four
    // clients in each, each limited to a quarter of its instance.
    let v = plan_json(&["plan", "mig:3g:mps:4", "--gpu-model", "A100-40GB", "--json"]);
    assert_eq!(v["mode"], "mig:3g:mps:4");
    assert_eq!(
        instances(&v),
        [("3g.20gb".into(), 0, 4), ("3g.20gb".into(), 4, 4)]
    );
    assert_eq!(v["mps"]["clients_per_instance"], 4);
    assert_eq!(v["mps"]["slots"], 8);
    for i in v["instances"].as_array().unwrap() {
        assert_eq!(i["mps_clients"], 4);
        assert_eq!(i["active_thread_percentage"], 25);
        assert_eq!(i["pinned_mem_limit_mib"], 19968 / 4);
    }
    // Without N: unlimited clients, no slot count.
    let v = plan_json(&["plan", "mig:4g,2g,1g:mps", "--gpu-model", "H200", "--json"]);
    assert_eq!(instances(&v).len(), 3);
    assert_eq!(v["mps"]["slots"], Value::Null);
    assert_eq!(v["instances"][0]["mps_clients"], Value::Null);
    // Human output says what each client gets.
    let out = colloc(&["plan", "mig:2g:mps:3", "--gpu-model", "B200"]);
    assert!(out.status.success(), "{}", text(&out));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(
        human.contains("one MPS daemon per instance, 3 client slot(s) in each (9 in all)"),
        "{human}"
    );
    assert!(human.contains("2g.45gb"), "{human}");
    // More clients than MPS serves in the smallest instance: one line, exit 2.
    let out = colloc(&["plan", "mig:4g,2g,1g:mps:7", "--gpu-model", "A100-40GB"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("1g.5gb instance serves at most 6 MPS client(s)"),
        "{err}"
    );
    assert!(
        plan_json(&["plan", "mig:1g:mps:6", "--gpu-model", "A100-40GB", "--json"])["mps"]["slots"]
            == 42
    );
    // A malformed MPS part: the grammar's one line, exit 2.
    let out = colloc(&["plan", "mig:3g:mps:0", "--gpu-model", "A100-40GB"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn apply_refuses_mps_inside_mig_and_changes_nothing() {
    let node = Node::new("A100-40GB");
    let out = node.colloc(&["apply", "mig:3g:mps:2", "--gpu", "0", "--job", "32"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    // This node offers mig only; MPS inside MIG needs mps allowed too.
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("needs both mig and mps allowed on this cluster, and mps is not"),
        "{err}"
    );
    assert_eq!(node.status()["gpus"][0]["instances"], Value::Array(vec![]));
}

#[test]
fn apply_makes_mps_inside_mig_where_the_node_allows_both_and_restore_undoes_it() {
    let node = Node::new("A100-40GB");
    let cfg = node.dir.path().join("colloc.toml");
    let fake_mps = std::fs::canonicalize(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fake-mps/nvidia-cuda-mps-control"),
    )
    .unwrap();
    let conf = std::fs::read_to_string(&cfg).unwrap().replace(
        "allowed_modes = [\"mig\"]\n",
        &format!(
            "allowed_modes = [\"mig\", \"mps\"]\nmps_control = \"{}\"\n",
            fake_mps.display()
        ),
    );
    std::fs::write(&cfg, conf).unwrap();
    // The run_dir's parent must let the daemon's user through.
    std::fs::set_permissions(
        node.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = node.colloc(&["apply", "mig:3g:mps:2", "--gpu", "0", "--job", "33"]);
    assert!(out.status.success(), "{}", text(&out));
    let status = node.status();
    assert_eq!(status["gpus"][0]["instances"].as_array().unwrap().len(), 2);
    let pipes: Vec<String> = status["journals"][0]["mps"]
        .as_array()
        .unwrap_or_else(|| panic!("{status}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(pipes.len(), 2, "one daemon per instance: {status}");
    let mut daemons = Vec::new();
    let mut served = Vec::new();
    for p in &pipes {
        let pid = std::fs::read_to_string(format!("{p}/nvidia-cuda-mps-control.pid"))
            .unwrap_or_else(|e| panic!("{p}: {e}"));
        let pid: u32 = pid.trim().parse().unwrap();
        assert!(
            colloc_core::sys::ProcStat::of(pid).is_some(),
            "daemon {pid} not running"
        );
        daemons.push(pid);
        let d = std::fs::read_to_string(format!("{p}/devices")).unwrap();
        assert!(d.starts_with("MIG-"), "{p} serves {d}");
        served.push(d);
    }
    assert_ne!(served[0], served[1], "two daemons serve one instance");
    let out = node.colloc(&["restore", "--job", "33"]);
    assert!(out.status.success(), "{}", text(&out));
    let status = node.status();
    assert_eq!(status["gpus"][0]["instances"], Value::Array(vec![]));
    for p in &pipes {
        assert!(!std::path::Path::new(p).exists(), "{p} left");
    }
    for d in &daemons {
        // Gone, or a zombie of this test's children that is never reaped.
        let stat = colloc_core::sys::ProcStat::of(*d);
        assert!(
            stat.as_ref().is_none_or(|s| s.state() == Some('Z')),
            "daemon {d} still runs: {stat:?}"
        );
    }
}
