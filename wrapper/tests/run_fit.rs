//! Right-sized slots (`gpu_memory` in runs.toml) against the fake libnvidia-ml: runs go to
//! the smallest slot that holds them, a shared GPU admits runs while their declared
//! memory fits, and a run no slot can hold is refused before anything starts.

mod run_support;

use std::path::PathBuf;

use fake_nvml::state::State;
use fake_nvml::store::{now_ms, Locked};
use run_support::{run, succeeded, Env};

/// A fake GPU of `model` written to the env's state file, and a node config that loads
/// the fake library. Returns the state and the config path.
fn fake_gpu(env: &Env, model: &str, edit: impl FnOnce(&mut State)) -> (State, PathBuf, PathBuf) {
    let state_path = env.path().join("nvml-state.json");
    let mut st = State::fresh_from_list(model, now_ms()).unwrap();
    edit(&mut st);
    Locked::open(&state_path).unwrap().write(&st).unwrap();
    let config = env.path().join("colloc.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\nallowed_modes = [\"naive\", \"mps\", \"mig\"]\nnvml_library = \"{}\"\n",
            fake_nvml::locate::library().display()
        ),
    )
    .unwrap();
    (st, state_path, config)
}

/// Report figures of a run: (start_s, end_s, device, slot_memory_mib).
fn placed(rep: &serde_json::Value, name: &str) -> (f64, f64, String, Option<u64>) {
    let r = run(rep, name);
    (
        r["start_s"].as_f64().unwrap(),
        r["end_s"].as_f64().unwrap(),
        r["device"].as_str().unwrap_or_default().to_string(),
        r["slot_memory_mib"].as_u64(),
    )
}

/// A100 40GB with a 4g, a 2g and a 1g instance (A100 GI profile ids 5, 14, 19; CI
/// profile indexes 3, 1, 0): each declared run lands on the smallest instance that holds
/// it, whatever the manifest order, and the fourth waits for a slot that holds it.
#[test]
fn mixed_mig_layout_places_biggest_needs_on_the_smallest_slot_that_fits() {
    let env = Env::new();
    let mut uuids = Vec::new();
    let (st, state, config) = fake_gpu(&env, "A100-40GB", |s| {
        s.gpus[0].mig_current = true;
        for (gi_prof, ci_prof) in [(5u32, 3u32), (14, 1), (19, 0)] {
            let gi = s.create_gi(0, gi_prof, None).unwrap();
            let ci = s.create_ci(0, gi, ci_prof).unwrap();
            let uuid = s.gpus[0]
                .gi(gi)
                .unwrap()
                .cis
                .iter()
                .find(|c| c.id == ci)
                .unwrap()
                .uuid
                .clone();
            uuids.push(uuid);
        }
    });
    drop(st);
    let m = env.manifest(
        r#"
[[run]]
name = "small"
command = ["sleep", "1"]
gpu_memory = "3GiB"
[[run]]
name = "big"
command = ["sleep", "1"]
gpu_memory = "15GiB"
[[run]]
name = "mid"
command = ["sleep", "1"]
gpu_memory = "8GiB"
[[run]]
name = "big2"
command = ["sleep", "1"]
gpu_memory = "12GiB"
"#,
    );
    let out = env
        .colloc()
        .env("COLLOC_CONFIG", &config)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("COLLOC_MODE", "mig:4g.20gb,2g.10gb,1g.5gb")
        .env("COLLOC_DEVICES", uuids.join(","))
        .env("COLLOC_SLOTS", "3")
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    let (stdout, _) = succeeded(&out);
    let rep = env.report();
    let (s_start, _, s_dev, s_mem) = placed(&rep, "small");
    let (b_start, b_end, b_dev, b_mem) = placed(&rep, "big");
    let (m_start, _, m_dev, m_mem) = placed(&rep, "mid");
    let (b2_start, _, b2_dev, _) = placed(&rep, "big2");
    assert_eq!(b_dev, uuids[0], "big needs the 4g instance");
    assert_eq!(m_dev, uuids[1], "mid fits the 2g instance");
    assert_eq!(s_dev, uuids[2], "small goes to the 1g instance");
    // The three start together; big2 (12 GiB) fits only the 4g and waits for it.
    assert!(s_start < b_end && m_start < b_end, "{rep}");
    assert_eq!(b2_dev, uuids[0]);
    assert!(
        b2_start >= b_end,
        "big2 started before big freed the 4g: {rep}"
    );
    assert!(b_start <= s_start + 0.5);
    // Each slot's size is the instance's memory as NVML gives it; the table shows it.
    let (mb, mm, ms) = (b_mem.unwrap(), m_mem.unwrap(), s_mem.unwrap());
    assert!(
        mb > mm && mm > ms && ms >= 4 * 1024 && mb <= 20 * 1024,
        "{mb} {mm} {ms}"
    );
    assert_eq!(run(&rep, "big")["gpu_memory_mib"].as_u64(), Some(15 * 1024));
    assert!(
        stdout.contains("need MiB") && stdout.contains("slot MiB"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(env.report_dir().join("colloc-runs.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with("gpu_memory_mib,slot_memory_mib"),
        "{csv}"
    );
}

/// A run that no instance can ever hold: exit 2 before anything starts, naming its need
/// and the largest slot.
#[test]
fn a_run_no_slot_holds_is_refused_before_anything_starts() {
    let env = Env::new();
    let mut uuids = Vec::new();
    let (_, state, config) = fake_gpu(&env, "A100-40GB", |s| {
        s.gpus[0].mig_current = true;
        for _ in 0..2 {
            let gi = s.create_gi(0, 9, None).unwrap();
            let ci = s.create_ci(0, gi, 2).unwrap();
            uuids.push(
                s.gpus[0]
                    .gi(gi)
                    .unwrap()
                    .cis
                    .iter()
                    .find(|c| c.id == ci)
                    .unwrap()
                    .uuid
                    .clone(),
            );
        }
    });
    let m = env.manifest(
        r#"
[defaults]
gpu_memory = "2GiB"
[[run]]
name = "fits"
command = ["sh", "-c", "touch \"$MARK/fits\""]
[[run]]
name = "huge"
command = ["sh", "-c", "touch \"$MARK/huge\""]
gpu_memory = "30GiB"
"#,
    );
    let out = env
        .colloc()
        .env("COLLOC_CONFIG", &config)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("COLLOC_MODE", "mig:3g.20gbx2")
        .env("COLLOC_DEVICES", uuids.join(","))
        .env("COLLOC_SLOTS", "2")
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"huge\" needs 30.0 GiB"), "{stderr}");
    assert!(stderr.contains("the largest slot here holds"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        env.marks().is_empty(),
        "nothing may start: {:?}",
        env.marks()
    );
    assert!(!env.report_dir().exists());
}

/// Naive runs on one fake H200 share its memory: a run is admitted only while the
/// declared memory of those running, its own included, fits 95 % of the GPU.
#[test]
fn a_shared_gpu_admits_runs_while_their_declared_memory_fits() {
    let env = Env::new();
    let (st, state, config) = fake_gpu(&env, "H200", |s| s.gpus[0].mig_current = false);
    let uuid = st.gpus[0].uuid.clone();
    // 143771 MiB, 95 % usable = ~133 GiB: 100 + 30 fit together; 60 and 20 wait.
    let m = env.manifest(
        r#"
[[run]]
name = "r60"
command = ["sleep", "1"]
gpu_memory = "60GiB"
[[run]]
name = "r100"
command = ["sleep", "1"]
gpu_memory = "100GiB"
[[run]]
name = "r30"
command = ["sleep", "1"]
gpu_memory = "30GiB"
"#,
    );
    let out = env
        .colloc()
        .env("COLLOC_CONFIG", &config)
        .env("COLLOC_FAKE_NVML_STATE", &state)
        .env("CUDA_VISIBLE_DEVICES", &uuid)
        .args(["--mode", "naive", "-j", "3", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env.report();
    let (s100, e100, ..) = placed(&rep, "r100");
    let (s30, ..) = placed(&rep, "r30");
    let (s60, ..) = placed(&rep, "r60");
    assert!(s30 < e100, "30 GiB fits beside 100 GiB: {rep}");
    assert!(s60 >= e100, "60 GiB does not fit beside 100 GiB: {rep}");
    assert!(s100 <= s60);
}

#[test]
fn gpu_memory_errors_name_the_line_and_what_is_valid() {
    let env = Env::new();
    let m = env.manifest("[[run]]\ncommand = [\"true\"]\ngpu_memory = \"12 parsecs\"\n");
    let out = env.colloc().arg("-f").arg(&m).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("runs.toml:3:"), "{stderr}");
    assert!(
        stderr.contains("unknown unit") && stderr.contains("12GiB"),
        "{stderr}"
    );
}

/// `colloc plan --fit`: a MIG layout for a student's sweep of three model sizes, each
/// size class with an instance of its own, and a clear refusal for a run no profile holds.
#[test]
fn plan_fit_proposes_a_layout_for_the_declared_memory() {
    let env = Env::new();
    let m = env.manifest(
        r#"
[[sweep]]
name = "small-{lr}"
command = ["python", "train.py", "--lr", "{lr}"]
grid = { lr = ["0.1", "0.01", "0.001"] }
gpu_memory = "3GiB"
[[sweep]]
name = "medium-{lr}"
command = ["python", "train.py", "--lr", "{lr}"]
grid = { lr = ["0.1", "0.01"] }
gpu_memory = "8GiB"
[[run]]
name = "large"
command = ["python", "train.py"]
gpu_memory = "15GiB"
"#,
    );
    let plan = |extra: &[&str]| {
        let mut c = assert_cmd::Command::cargo_bin("colloc").unwrap();
        c.env("COLLOC_CONFIG", env.path().join("no-config.toml"))
            .args(["plan", "--fit"])
            .arg(&m)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = plan(&["--gpu-model", "A100-40GB", "--json"]);
    let (stdout, _) = succeeded(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["colloc_mode"], "mig:3g.20gb,1g.10gb,1g.5gbx2", "{v}");
    let profile_of = |name: &str| {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()["profile"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(profile_of("large"), "3g.20gb");
    assert_eq!(profile_of("medium-0.1"), "1g.10gb");
    assert_eq!(profile_of("small-0.001"), "1g.5gb");
    let out = plan(&["--gpu-model", "A100-40GB"]);
    let (text, _) = succeeded(&out);
    assert!(
        text.contains("sbatch --colloc=mig:3g.20gb,1g.10gb,1g.5gbx2"),
        "{text}"
    );
    // On an A30 (24 GB) nothing holds a 30 GiB run.
    std::fs::write(
        &m,
        "[[run]]\nname = \"big\"\ncommand = [\"true\"]\ngpu_memory = \"30GiB\"\n",
    )
    .unwrap();
    let out = plan(&["--gpu-model", "A30"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"big\" needs 30.0 GiB") && stderr.contains("largest MIG profile"),
        "{stderr}"
    );
}
