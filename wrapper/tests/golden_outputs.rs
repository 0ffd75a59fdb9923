//! `colloc status`, `colloc plan` and `colloc report` held byte for byte to golden files
//! (issue 37): the outputs monitoring, admins and users read must not change when the
//! code that builds them does. Each case runs the built binary against the fake
//! libnvidia-ml in a known state (or on a recorded pack, `tests/fixtures/packs/`) and
//! compares stdout (and stderr, where there is any) with
//! `tests/fixtures/golden/<case>.{out,err}`, after putting placeholders for what differs
//! from machine to machine: the test's directory (`<DIR>`), the host name (`<NODE>`), the
//! binary's build id (`<BUILD>`) and version (`<VERSION>`), and when a hold began
//! (`<SINCE>`).
//!
//! `COLLOC_BLESS=1 cargo test -p colloc --test golden_outputs` writes the files instead
//! (only when an output is meant to change; say why in the commit).
//!
//! Every case runs as root (as on a node), with `run_dir` a tmpfs of a fixed size so its
//! figures are the same everywhere; as another user the test says so and passes.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

fn target_dir() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("colloc");
    bin.parent().unwrap().to_path_buf()
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A node: a config aimed at the fake library, a fresh fake GPU state and `run_dir` a
/// tmpfs of its own (unmounted on drop).
struct Node {
    dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path().join("run"))
            .status();
    }
}

impl Node {
    fn new(gpus: &str, nvml: Option<&str>, run_dir_options: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        let lib = target_dir().join("libfake_nvml.so");
        assert!(lib.exists(), "run `cargo build -p fake-nvml` first");
        let lib = nvml.map_or_else(|| lib.display().to_string(), str::to_string);
        let cfg = format!(
            "version = 1\nstate_dir = \"{0}/state\"\nrun_dir = \"{0}/run\"\nnvml_library = \"{1}\"\n\
             node_comment = false\n[mig]\ncaps_dev_dir = \"{0}/dev/nvidia-caps\"\n\
             caps_proc_dir = \"{0}/proc/driver/nvidia/capabilities\"\n\
             mig_minors = \"{0}/proc/driver/nvidia-caps/mig-minors\"\n\
             proc_devices = \"{0}/proc/devices\"\nnvidia_modprobe = \"{0}/no-nvidia-modprobe\"\n",
            dir.path().display(),
            lib
        );
        std::fs::write(dir.path().join("colloc.toml"), cfg).unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", run_dir_options, "colloc-golden"])
            .arg(&run)
            .status()
            .unwrap();
        assert!(st.success(), "mount a tmpfs at {}", run.display());
        let n = Node { dir };
        n.ctl(&["init", "--gpus", gpus]);
        n
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("fake-state.json")
    }
    fn command(&self, user: Option<&str>) -> Command {
        let mut c = match user {
            None => Command::cargo_bin("colloc").unwrap(),
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"])
                    .arg(assert_cmd::cargo::cargo_bin("colloc"));
                c
            }
        };
        c.env("COLLOC_FAKE_NVML_STATE", self.state())
            .env("SLURM_CONF", "/nonexistent/slurm.conf")
            .env_remove("SLURMD_NODENAME")
            .env_remove("COLLOC_CONFIG")
            .arg("--config")
            .arg(self.dir.path().join("colloc.toml"));
        c
    }
    fn colloc(&self, args: &[&str]) -> Output {
        self.command(None).args(args).output().unwrap()
    }
    fn as_user(&self, user: &str, args: &[&str]) -> Output {
        self.command(Some(user)).args(args).output().unwrap()
    }
    fn ctl(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(target_dir().join("fake-nvml-ctl"))
            .env("COLLOC_FAKE_NVML_STATE", self.state())
            .args(args)
            .output()
            .expect("fake-nvml-ctl (cargo build -p fake-nvml)");
        assert!(
            out.status.success(),
            "fake-nvml-ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn ok(&self, args: &[&str]) {
        let out = self.colloc(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    /// Status's text and JSON, each held to its golden file with its exit status.
    fn status_cases(&self, name: &str, code: i32, user: Option<&str>) {
        for (suffix, args) in [("", &["status"][..]), ("-json", &["status", "--json"])] {
            let out = match user {
                None => self.colloc(args),
                Some(u) => self.as_user(u, args),
            };
            check(&format!("status/{name}{suffix}"), &out, code, Some(self));
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What differs from machine to machine, as placeholders.
fn normalize(s: &str, node: Option<&Node>) -> String {
    let mut s = s.to_string();
    if let Some(n) = node {
        s = s.replace(&n.dir.path().display().to_string(), "<DIR>");
    }
    // The fields, not the values wherever they occur: a build id or a host name could be
    // any string.
    let re_field = |s: &str, key: &str, placeholder: &str| -> String {
        let pat = format!("\"{key}\": \"");
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find(&pat) {
            let start = i + pat.len();
            out.push_str(&rest[..start]);
            let end = rest[start..].find('"').map_or(rest.len(), |e| start + e);
            out.push_str(placeholder);
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    };
    s = re_field(&s, "node", "<NODE>");
    s = re_field(&s, "colloc_build", "<BUILD>");
    s = re_field(&s, "colloc_version", "<VERSION>");
    // When a hold was recorded (seconds since the epoch).
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(i) = rest.find("\"since\": ") {
        let start = i + "\"since\": ".len();
        out.push_str(&rest[..start]);
        rest = rest[start..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push_str("<SINCE>");
    }
    out.push_str(rest);
    out
}

/// Compare (or, with `COLLOC_BLESS=1`, write) the golden files of one case.
fn check(name: &str, out: &Output, code: i32, node: Option<&Node>) {
    check_in(name, out, code, node, None);
}

/// [`check`], with `dir` (a report directory) also said as `<DIR>`.
fn check_in(name: &str, out: &Output, code: i32, node: Option<&Node>, dir: Option<&Path>) {
    assert_eq!(out.status.code(), Some(code), "{name}: {}", text(out));
    let said = |b: &[u8]| {
        let s = normalize(&String::from_utf8_lossy(b), node);
        match dir {
            Some(d) => s.replace(&d.display().to_string(), "<DIR>"),
            None => s,
        }
    };
    let stdout = said(&out.stdout);
    let stderr = said(&out.stderr);
    let dir = golden_dir();
    let files = [("out", stdout), ("err", stderr)];
    if std::env::var_os("COLLOC_BLESS").is_some() {
        for (ext, body) in &files {
            let path = dir.join(format!("{name}.{ext}"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            if body.is_empty() && *ext == "err" {
                let _ = std::fs::remove_file(&path);
            } else {
                std::fs::write(&path, body).unwrap();
            }
        }
        return;
    }
    for (ext, body) in &files {
        let path = dir.join(format!("{name}.{ext}"));
        let want = match std::fs::read_to_string(&path) {
            Ok(w) => w,
            Err(_) if *ext == "err" => String::new(),
            Err(e) => panic!("{}: {e} (COLLOC_BLESS=1 writes it)", path.display()),
        };
        assert!(
            *body == want,
            "{name}.{ext} differs from {}:\n--- want\n{want}\n--- got\n{body}",
            path.display()
        );
    }
}

/// A tmpfs of 1 MiB and 64 inodes.
const ROOMY: &str = "size=1m,nr_inodes=64,mode=0755";

#[test]
fn node_status_is_as_recorded_in_every_state() {
    if !is_root() {
        eprintln!("skipped: the golden states take root (journals, a tmpfs run_dir)");
        return;
    }
    // No NVML: the error, never "no GPUs".
    let n = Node::new("A100-40GB", Some("libnvidia-ml-nowhere.so.1"), ROOMY);
    n.status_cases("no-nvml", 1, None);

    // Idle GPUs: MIG on with a foreign instance, MIG off with a process, no journals.
    let n = Node::new("A100-40GB,H200,A30", None, ROOMY);
    n.ctl(&[
        "create-foreign",
        "--gpu",
        "0",
        "--profile",
        "1g.5gb",
        "--start",
        "6",
    ]);
    n.ctl(&["set-mig", "--gpu", "1", "off"]);
    n.ctl(&["attach", "--gpu", "1", "--pid", "4242"]);
    n.status_cases("idle", 0, None);

    // A MIG job, a corrupt journal beside it; Slurm cannot be asked.
    let n = Node::new("A100-40GB,A100-40GB", None, ROOMY);
    n.ok(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]);
    n.status_cases("mig-job", 1, None);
    std::fs::write(n.dir.path().join("state/jobs/99.json"), "{not json").unwrap();
    n.status_cases("corrupt-journal", 1, None);

    // A naive job and an MPS job's journal (its daemon's directories named).
    let n = Node::new("A100-40GB,H200", None, ROOMY);
    n.ctl(&["set-mig", "--gpu", "0", "off"]);
    n.ctl(&["set-mig", "--gpu", "1", "off"]);
    n.ok(&["apply", "naive", "--gpu", "0", "--job", "71"]);
    let jobs = n.dir.path().join("state/jobs");
    let naive = std::fs::read_to_string(jobs.join("71.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&naive).unwrap();
    let dir = n.dir.path().join("run/job-72");
    v["job"] = 72.into();
    v["uid"] = 65534.into();
    v["mode"] = "mps:2".into();
    v["mps"] = serde_json::json!([{
        "pipe_dir": dir.join("gpu1/pipe"), "log_dir": dir.join("gpu1/log"),
        "devices": "GPU-placeholder",
    }]);
    std::fs::write(jobs.join("72.json"), v.to_string()).unwrap();
    n.status_cases("naive-and-mps", 1, None);

    // A user: instances need root; the MIG devices anyone sees.
    let n = Node::new("H200", None, ROOMY);
    n.ok(&["apply", "mig:3g", "--gpu", "0", "--job", "61"]);
    n.status_cases("needs-root", 1, Some("nobody"));

    // DCGM holds an instance: the GPU is marked, the journal stays.
    let n = Node::new("A100-80GB", None, ROOMY);
    n.ok(&["apply", "mig:4g,3g", "--gpu", "0", "--job", "62"]);
    n.ctl(&["hold", "--gpu", "0", "--gi", "1", "--name", "dcgm"]);
    assert_eq!(n.colloc(&["restore", "--job", "62"]).status.code(), Some(1));
    n.status_cases("marked", 1, None);

    // Trees earlier epilogs moved aside.
    let n = Node::new("H200", None, ROOMY);
    let left = n.dir.path().join("run/.leftovers");
    for name in ["job-8.1700000000.0", "job-9.1700000000.0"] {
        std::fs::create_dir_all(left.join(name).join("gpu0/log")).unwrap();
    }
    chmod(&left, 0o700);
    n.status_cases("leftovers", 0, None);
    n.status_cases("leftovers-as-user", 0, Some("nobody"));

    // run_dir full: no MPS job can be served.
    let n = Node::new("H200", None, "size=64k,nr_inodes=1,mode=0755");
    n.status_cases("run-dir-full", 1, None);
}

#[test]
fn status_cluster_without_slurm_is_as_recorded() {
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env("SLURM_CONF", "/nonexistent/slurm.conf")
        .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
        .args(["status", "--cluster", "--json"])
        .output()
        .unwrap();
    check("status/cluster-no-slurm", &out, 1, None);
}

#[test]
fn plan_is_as_recorded_for_every_mode_kind() {
    let plan = |args: &[&str]| {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
            .arg("plan")
            .args(args)
            .output()
            .unwrap()
    };
    for (name, args) in [
        ("mig-3g-a100", &["mig:3g", "--gpu-model", "A100-40GB"][..]),
        (
            "mig-mixed-h100",
            &["mig:4g,2g,1g", "--gpu-model", "H100-80GB"],
        ),
        ("mig-mps-h200", &["mig:3g:mps:4", "--gpu-model", "H200"]),
        ("mig-mps-unlimited", &["mig:2g:mps", "--gpu-model", "A30"]),
        ("mps-4-h200", &["mps:4", "--gpu-model", "H200"]),
        ("mps-unlimited", &["mps", "--gpu-model", "A100-80GB"]),
        ("naive", &["naive", "--gpu-model", "B200"]),
        ("off", &["off", "--gpu-model", "H200"]),
    ] {
        check(&format!("plan/{name}"), &plan(args), 0, None);
        let mut json = args.to_vec();
        json.push("--json");
        check(&format!("plan/{name}-json"), &plan(&json), 0, None);
    }
    check(
        "plan/bad-layout",
        &plan(&["mig:4gx2", "--gpu-model", "A100-40GB"]),
        2,
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("runs.toml");
    std::fs::write(
        &m,
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
    )
    .unwrap();
    let m = m.display().to_string();
    check(
        "plan/fit-a100",
        &plan(&["--fit", &m, "--gpu-model", "A100-40GB"]),
        0,
        None,
    );
    check(
        "plan/fit-a100-json",
        &plan(&["--fit", &m, "--gpu-model", "A100-40GB", "--json"]),
        0,
        None,
    );
}

#[test]
fn plan_of_a_nodes_gpu_is_as_recorded() {
    if !is_root() {
        eprintln!("skipped: the golden states take root (a tmpfs run_dir)");
        return;
    }
    let n = Node::new("H200,A100-40GB", None, ROOMY);
    for (name, args) in [
        ("gpu-h200-mig", &["plan", "mig:3g", "--gpu", "0"][..]),
        ("gpu-a100-mig-mps", &["plan", "mig:3g:mps:2", "--gpu", "1"]),
        ("gpu-h200-mps", &["plan", "mps:2", "--gpu", "0"]),
    ] {
        check(&format!("plan/{name}"), &n.colloc(args), 0, Some(&n));
        let mut json = args.to_vec();
        json.push("--json");
        check(&format!("plan/{name}-json"), &n.colloc(&json), 0, Some(&n));
    }
    check(
        "plan/gpu-missing",
        &n.colloc(&["plan", "mig:3g", "--gpu", "7"]),
        2,
        Some(&n),
    );
}

/// `--format NAME` prints what the flag of that name always printed; an unknown name is
/// one line naming the formats there are, exit 2.
#[test]
fn status_formats_are_chosen_by_name_and_the_flags_keep_their_output() {
    if !is_root() {
        eprintln!("skipped: the golden states take root (a tmpfs run_dir)");
        return;
    }
    let n = Node::new("A100-40GB,H200,A30", None, ROOMY);
    n.ctl(&[
        "create-foreign",
        "--gpu",
        "0",
        "--profile",
        "1g.5gb",
        "--start",
        "6",
    ]);
    n.ctl(&["set-mig", "--gpu", "1", "off"]);
    n.ctl(&["attach", "--gpu", "1", "--pid", "4242"]);
    let json = n.colloc(&["status", "--format", "json"]);
    check("status/idle-json", &json, 0, Some(&n));
    let plain = n.colloc(&["status", "--format", "text"]);
    check("status/idle", &plain, 0, Some(&n));
    let out = n.colloc(&["status", "--format", "xml"]);
    check("status/unknown-format", &out, 2, Some(&n));
    let out = n.colloc(&["status", "--cluster", "--format", "yaml"]);
    check("status/cluster-unknown-format", &out, 2, Some(&n));
    let out = n.colloc(&["status", "--json", "--format", "text"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

fn packs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/packs")
}

/// `colloc report` of recorded packs in each of its formats: `two-sessions` (a pack of a
/// sweep with throughput, a run that failed with CUDA out of memory twice and a run
/// without throughput, resumed once), `killed` (its first session cut by a `kill -9`:
/// two runs interrupted).
#[test]
fn report_is_as_recorded_in_every_format() {
    for pack in ["two-sessions", "killed"] {
        let dir = packs().join(pack);
        for (suffix, args) in [
            ("", &["--no-write"][..]),
            ("-json", &["--json"]),
            ("-csv", &["--csv"]),
            ("-quiet", &["-q", "--no-write"]),
        ] {
            let out = Command::cargo_bin("colloc")
                .unwrap()
                .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
                .arg("report")
                .args(args)
                .arg(&dir)
                .output()
                .unwrap();
            check_in(&format!("report/{pack}{suffix}"), &out, 0, None, Some(&dir));
        }
    }
}

/// `colloc report --format NAME` prints what the flag of that name always printed, and
/// writes as it did: json and csv only print, table and quiet rewrite a DIR of the
/// caller's; an unknown name is one line naming the formats, exit 2, nothing read.
#[test]
fn report_formats_are_chosen_by_name_and_the_flags_keep_their_meaning() {
    let fixture = packs().join("two-sessions");
    let report = |args: &[&str], dir: &Path| {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
            .arg("report")
            .args(args)
            .arg(dir)
            .output()
            .unwrap()
    };
    for (name, args) in [
        ("", &["--format", "table", "--no-write"][..]),
        ("-json", &["--format", "json"]),
        ("-csv", &["--format", "csv"]),
        ("-quiet", &["--format", "quiet", "--no-write"]),
    ] {
        let out = report(args, &fixture);
        check_in(
            &format!("report/two-sessions{name}"),
            &out,
            0,
            None,
            Some(&fixture),
        );
    }
    let out = report(&["--format", "xml"], Path::new("/nonexistent"));
    check("report/unknown-format", &out, 2, None);
    let out = report(&["--format", "csv", "-q"], &fixture);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // A copy of the caller's own: json and csv leave it as it is, quiet rewrites it.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("pack");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    for f in ["1.main.jsonl", "2.main.jsonl"] {
        std::fs::copy(fixture.join("events").join(f), dir.join("events").join(f)).unwrap();
    }
    let written = || dir.join("colloc-report.json").exists();
    for format in ["json", "csv"] {
        assert!(report(&["--format", format], &dir).status.success());
        assert!(!written(), "--format {format} wrote the report");
    }
    let out = report(&["--format", "quiet"], &dir);
    check_in("report/two-sessions-quiet", &out, 0, None, Some(&dir));
    assert!(
        written(),
        "--format quiet rewrites the caller's DIR, as -q does"
    );
}

/// `colloc plan --format NAME` prints what `--json` and the default always printed; an
/// unknown name is one line naming the formats, exit 2.
#[test]
fn plan_formats_are_chosen_by_name() {
    let plan = |args: &[&str]| {
        Command::cargo_bin("colloc")
            .unwrap()
            .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
            .arg("plan")
            .args(args)
            .output()
            .unwrap()
    };
    let a100 = ["mig:3g", "--gpu-model", "A100-40GB", "--format"];
    let out = plan(&[&a100[..], &["json"]].concat());
    check("plan/mig-3g-a100-json", &out, 0, None);
    let out = plan(&[&a100[..], &["text"]].concat());
    check("plan/mig-3g-a100", &out, 0, None);
    let out = plan(&[&a100[..], &["yaml"]].concat());
    check("plan/unknown-format", &out, 2, None);
    let out = plan(&["mps:4", "--gpu-model", "H200", "--json", "--format", "text"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// The families prometheus_client's OpenMetrics parser (`tests/fixtures/openmetrics_parse.py`)
/// reads in `text`, as JSON; `None` where no python3 with the module is found (the caller
/// skips, saying so). A text the parser refuses fails the test.
fn parse_openmetrics(text: &[u8]) -> Option<serde_json::Value> {
    use std::io::Write as _;
    use std::process::Stdio;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openmetrics_parse.py");
    for python in ["python3", "/usr/bin/python3"] {
        let Ok(mut child) = std::process::Command::new(python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            continue;
        };
        child.stdin.take().unwrap().write_all(text).unwrap();
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => return Some(serde_json::from_slice(&out.stdout).unwrap()),
            Some(3) => continue,
            _ => panic!(
                "prometheus_client refused the text: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(text)
            ),
        }
    }
    eprintln!(
        "skipped: no python3 with prometheus_client (Debian: python3-prometheus-client) to \
         parse `colloc status --format openmetrics`"
    );
    None
}

/// The label sets of family `name`, each with its value.
fn om_samples(families: &serde_json::Value, name: &str) -> Vec<(serde_json::Value, f64)> {
    families
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == name)
        .flat_map(|f| f["samples"].as_array().unwrap().clone())
        .map(|s| (s["labels"].clone(), s["value"].as_f64().unwrap()))
        .collect()
}

/// `status --format openmetrics` of a node, parsed (exit status `code`).
fn openmetrics_of(n: &Node, code: i32) -> Option<serde_json::Value> {
    let out = n.colloc(&["status", "--format", "openmetrics"]);
    assert_eq!(out.status.code(), Some(code), "{}", text(&out));
    assert!(out.stdout.ends_with(b"\n# EOF\n"), "{}", text(&out));
    parse_openmetrics(&out.stdout)
}

/// `colloc status --format openmetrics` on the fake NVML's states, read back by a real
/// OpenMetrics parser (Python's prometheus_client): the GPUs, a MIG instance's labels, a
/// job and its MPS daemon, NVML missing; a GPU UUID with quotes, backslashes and a
/// newline round-trips. The idle state is held to a golden file.
#[test]
fn node_openmetrics_parses_with_prometheus_client_in_every_state() {
    if !is_root() {
        eprintln!("skipped: the golden states take root (journals, a tmpfs run_dir)");
        return;
    }
    let n = Node::new("A100-40GB", Some("libnvidia-ml-nowhere.so.1"), ROOMY);
    if let Some(f) = openmetrics_of(&n, 1) {
        assert_eq!(om_samples(&f, "colloc_nvml_readable")[0].1, 0.0);
        assert!(
            om_samples(&f, "colloc_gpus").is_empty(),
            "no made-up 0 GPUs"
        );
        assert_eq!(om_samples(&f, "colloc_run_dir_serves_mps")[0].1, 1.0);
    }

    let n = Node::new("A100-40GB,H200,A30", None, ROOMY);
    n.ctl(&[
        "create-foreign",
        "--gpu",
        "0",
        "--profile",
        "1g.5gb",
        "--start",
        "6",
    ]);
    n.ctl(&["set-mig", "--gpu", "1", "off"]);
    let out = n.colloc(&["status", "--format", "openmetrics"]);
    let mut said = normalize(&String::from_utf8_lossy(&out.stdout), Some(&n));
    for key in ["version", "build"] {
        let pat = format!("{key}=\"");
        if let Some(i) = said.find(&pat) {
            let start = i + pat.len();
            let end = start + said[start..].find('"').unwrap();
            said.replace_range(start..end, &format!("<{}>", key.to_uppercase()));
        }
    }
    let normalized = Output {
        stdout: said.into_bytes(),
        ..out.clone()
    };
    check("status/idle-openmetrics", &normalized, 0, Some(&n));
    if let Some(f) = parse_openmetrics(&out.stdout) {
        assert_eq!(om_samples(&f, "colloc_gpus")[0].1, 3.0);
        let inst = om_samples(&f, "colloc_mig_instance_info");
        assert_eq!(inst.len(), 1, "{inst:?}");
        assert_eq!(inst[0].0["gpu"], "0");
        assert_eq!(inst[0].0["GPU_I_PROFILE"], "1g.5gb");
        assert!(inst[0].0["UUID"].as_str().unwrap().starts_with("MIG-"));
        let mig = om_samples(&f, "colloc_gpu_mig_mode");
        assert!(
            mig.iter().any(|(l, v)| l["gpu"] == "1" && *v == 0.0),
            "{mig:?}"
        );
        let mem = om_samples(&f, "colloc_gpu_memory_total_bytes");
        assert!(mem
            .iter()
            .all(|(_, v)| *v >= 24.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(om_samples(&f, "colloc_run_dir_size_bytes")[0].1, 1048576.0);
    }

    // A MIG job: its journal, its GPU and its instances; Slurm cannot be asked.
    let n = Node::new("A100-40GB,A100-40GB", None, ROOMY);
    n.ok(&["apply", "mig:3g", "--gpu", "0", "--job", "7"]);
    if let Some(f) = openmetrics_of(&n, 1) {
        let info = om_samples(&f, "colloc_job_info");
        assert_eq!(
            info[0].0,
            serde_json::json!({"job": "7", "mode": "mig:3g", "phase": "applied"})
        );
        assert_eq!(
            om_samples(&f, "colloc_job_gpu"),
            [(serde_json::json!({"job": "7", "gpu": "0"}), 1.0)]
        );
        assert_eq!(om_samples(&f, "colloc_slurm_readable")[0].1, 0.0);
        assert!(om_samples(&f, "colloc_job_running").is_empty());
        let count = om_samples(&f, "colloc_gpu_mig_instances");
        assert!(
            count.iter().any(|(l, v)| l["gpu"] == "0" && *v == 2.0),
            "{count:?}"
        );
    }

    // An MPS job's daemon on GPU 1, whose UUID is hostile.
    let n = Node::new("A100-40GB,H200", None, ROOMY);
    let hostile = "GPU-x\"y\\z\nw} 1\ncolloc_fake 1";
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(n.state()).unwrap()).unwrap();
    state["gpus"][1]["uuid"] = hostile.into();
    std::fs::write(n.state(), state.to_string()).unwrap();
    n.ctl(&["set-mig", "--gpu", "0", "off"]);
    n.ctl(&["set-mig", "--gpu", "1", "off"]);
    n.ok(&["apply", "naive", "--gpu", "0", "--job", "71"]);
    let jobs = n.dir.path().join("state/jobs");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(jobs.join("71.json")).unwrap()).unwrap();
    let dir = n.dir.path().join("run/job-72");
    v["job"] = 72.into();
    v["mode"] = "mps:2".into();
    v["mps"] = serde_json::json!([{
        "pipe_dir": dir.join("gpu1/pipe"), "log_dir": dir.join("gpu1/log"), "devices": hostile,
    }]);
    std::fs::write(jobs.join("72.json"), v.to_string()).unwrap();
    if let Some(f) = openmetrics_of(&n, 1) {
        let mps = om_samples(&f, "colloc_mps_daemon_info");
        assert_eq!(
            mps,
            [(
                serde_json::json!({"job": "72", "gpu": "1", "UUID": hostile}),
                1.0
            )]
        );
        let gpus = om_samples(&f, "colloc_gpu_info");
        assert!(gpus.iter().any(|(l, _)| l["UUID"] == hostile), "{gpus:?}");
        assert!(om_samples(&f, "colloc_fake").is_empty());
        assert_eq!(om_samples(&f, "colloc_journals")[0].1, 2.0);
    }
}

/// `--output FILE`: the same text as stdout, written whole with mode 0644 and nothing on
/// stdout; a directory others may write is refused (one line, exit 2, nothing written).
#[test]
fn status_output_writes_the_file_atomically_and_refuses_an_unsafe_directory() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: the golden states take root (a tmpfs run_dir)");
        return;
    }
    let n = Node::new("H200", None, ROOMY);
    let dir = n.dir.path().join("textfile");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o755);
    let file = dir.join("colloc.prom");
    let f = file.display().to_string();
    let out = n.colloc(&["status", "--format", "openmetrics", "--output", &f]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let written = std::fs::read(&file).unwrap();
    let stdout = n.colloc(&["status", "--format", "openmetrics"]).stdout;
    assert_eq!(written, stdout);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["colloc.prom"]);
    if let Some(f) = parse_openmetrics(&written) {
        assert_eq!(om_samples(&f, "colloc_gpus")[0].1, 1.0);
    }

    chmod(&dir, 0o777);
    std::fs::remove_file(&file).unwrap();
    let out = n.colloc(&["status", "--format", "openmetrics", "--output", &f]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("writable by group or others"), "{err}");
    assert!(!file.exists(), "nothing written");
    let out = n.colloc(&["status", "--output", "colloc.prom"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // A broken colloc.toml: the file says so rather than going stale; exit 2 as before.
    chmod(&dir, 0o755);
    std::fs::write(n.dir.path().join("colloc.toml"), "version = 1\nbogus = [\n").unwrap();
    let out = n.colloc(&["status", "--format", "openmetrics", "--output", &f]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("\ncolloc_config_valid 0\n"), "{written}");
    assert!(!written.contains("colloc_gpus"), "{written}");
}

/// A `colloc run` in job 51 on a node whose journal gives job 51 to root: root's metrics
/// show its running runs, with their device and throughput, read from its socket; a
/// socket another user (nobody) serves under job 51's name is left out and counted, and
/// nobody reading the real socket is told nothing (issue 38).
#[test]
fn running_runs_are_in_the_node_metrics_from_their_own_user_only() {
    if !is_root() {
        eprintln!("skipped: the metrics of a job's runs take root (journals, a tmpfs run_dir)");
        return;
    }
    let n = Node::new("H100-80GB", None, ROOMY);
    n.ctl(&["set-mig", "--gpu", "0", "off"]);
    n.ok(&["apply", "naive", "--gpu", "0", "--job", "51"]);
    let manifest = n.dir.path().join("runs.toml");
    std::fs::write(
        &manifest,
        "[[sweep]]\nname = 'seed{s}'\ncommand = ['sh', '-c', 'while :; do echo img/s=100.5; sleep 0.2; done']\ngrid = { s = ['1', '2'] }\n",
    )
    .unwrap();
    let mut run = std::process::Command::new(assert_cmd::cargo::cargo_bin("colloc"))
        .env("COLLOC_FAKE_NVML_STATE", n.state())
        .env("SLURM_CONF", "/nonexistent/slurm.conf")
        .env("SLURM_JOB_ID", "51")
        .env_remove("SLURMD_NODENAME")
        .env_remove("COLLOC_CONFIG")
        .arg("--config")
        .arg(n.dir.path().join("colloc.toml"))
        .args([
            "run",
            "-q",
            "-j",
            "2",
            "--mode",
            "naive",
            "--interval",
            "200ms",
        ])
        .arg("--report-dir")
        .arg(n.dir.path().join("report"))
        .arg("-f")
        .arg(&manifest)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // nobody, in job 51's name: a snapshot of a run that does not exist.
    let forged = r#"{"schema":1,"job":51,"runs":[{"name":"forged","index":0,"attempt":1,"slot":0,"device":null,"started_unix":1.0,"throughput":1e9,"unit":"img/s","memory_peak_bytes":null,"util_ratio":null,"energy_joules":null}]}"#;
    let server = format!(
        "import socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind('\\0colloc-live/51/forged.1')\ns.listen(4)\nwhile True:\n c,_=s.accept()\n try:\n  c.sendall(b'{forged}')\n except OSError:\n  pass\n c.close()\n"
    );
    let as_nobody = [
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "/usr/bin/python3",
        "-c",
    ];
    let mut nobody = std::process::Command::new("setpriv")
        .args(as_nobody)
        .arg(&server)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .contains("@colloc-live/51/forged.1")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let f = loop {
        let out = n.colloc(&["status", "--format", "openmetrics"]);
        let f = parse_openmetrics(&out.stdout);
        let running = f
            .as_ref()
            .map_or(0, |f| om_samples(f, "colloc_run_throughput").len());
        if running == 2 || std::time::Instant::now() > deadline {
            break f;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    // What nobody reads of the real socket: nothing.
    let names = std::fs::read_to_string("/proc/net/unix").unwrap();
    let real = names
        .split_whitespace()
        .find(|w| w.starts_with("@colloc-live/51/") && !w.contains("forged"))
        .map(|w| w[1..].to_string());
    let peek = real.as_ref().map(|name| {
        std::process::Command::new("setpriv")
            .args(as_nobody)
            .arg(format!(
                "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect('\\0{name}')\nsys.stdout.write(repr(s.recv(65536)))\n"
            ))
            .output()
            .unwrap()
    });
    let text_view = n.colloc(&["status"]);
    let _ = nobody.kill();
    let _ = nobody.wait();
    unsafe_free_kill(run.id());
    let _ = run.wait();
    let Some(f) = f else { return };
    let peek = peek.expect("colloc run's socket is listed in /proc/net/unix");
    assert_eq!(String::from_utf8_lossy(&peek.stdout), "b''", "{peek:?}");
    let info = om_samples(&f, "colloc_run_info");
    let mut runs: Vec<String> = info
        .iter()
        .map(|(l, _)| l["run"].as_str().unwrap().to_string())
        .collect();
    runs.sort();
    assert_eq!(runs, ["seed1", "seed2"], "{info:?}");
    for (l, _) in &info {
        assert_eq!(l["job"], "51");
        assert!(l["UUID"].as_str().unwrap().starts_with("GPU-"), "{l}");
    }
    let mut slots: Vec<&str> = info
        .iter()
        .map(|(l, _)| l["slot"].as_str().unwrap())
        .collect();
    slots.sort();
    assert_eq!(slots, ["0", "1"]);
    for (l, v) in om_samples(&f, "colloc_run_throughput") {
        assert_eq!((l["unit"].as_str(), v), (Some("img/s"), 100.5));
    }
    assert_eq!(om_samples(&f, "colloc_job_runs_running")[0].1, 2.0);
    let said = String::from_utf8_lossy(&text_view.stdout);
    assert!(
        said.contains("  running 2 run(s) (colloc run): seed") && said.contains(" 100.5 img/s"),
        "{said}"
    );
    assert!(
        om_samples(&f, "colloc_live_refused")[0].1 >= 1.0,
        "{:?}",
        om_samples(&f, "colloc_live_refused")
    );
}

/// SIGTERM to a child process by pid (`colloc run` stops its runs and exits).
fn unsafe_free_kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}
