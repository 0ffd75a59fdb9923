//! A colloc job's summary in Slurm's accounting (issue 38), on a real Slurm cluster with
//! two fake A100s and its own slurmdbd: at the end of a `--colloc` batch job root writes
//! one word into the job's `AdminComment` — the mode and GPUs from the job's journal, and
//! what the job's own `colloc run` reported when its pack ended (runs succeeded and
//! failed, steady aggregate, energy) — beside what an admin wrote there, and `sacct`
//! shows it. A malformed report of the job's user and a report another user sends to the
//! job's socket are left out (the latter counted); a job without a colloc mode and a node
//! with `job_summary = false` get none. A job name that forges a line of `scontrol show
//! job` forges nothing; each task of an array gets its own; a cancelled job's goes
//! straight to the database; `colloc status --cluster --since` sums them up.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use colloc_core::jobsummary::{self, JobSummary};
use colloc_slurm_tests::{colloc_bin, ensure_user, run_suite_on, Cluster, ClusterSpec, Test};
use serde_json::Value;

const USER: &str = "sum-user";
const OTHER: &str = "sum-other";

fn main() {
    let tests: &[Test] = &[
        (
            "a_colloc_jobs_admin_comment_has_its_mode_and_what_its_pack_reported",
            summary_of_a_pack,
        ),
        (
            "a_job_without_a_mode_or_on_a_node_that_keeps_none_gets_no_summary",
            no_summary,
        ),
        (
            "forged_names_array_tasks_and_cancelled_jobs_each_get_their_own_summary",
            names_arrays_cancelled,
        ),
        ("the_period_summary_counts_what_sacct_holds", period_summary),
    ];
    run_suite_on(&ClusterSpec::new(1, 2).with_accounting(), tests, &[]);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn as_user(user: &str) -> [String; 2] {
    ensure_user(user);
    [format!("--uid={user}"), format!("--gid={user}")]
}

/// Job `id`'s `AdminComment`, read as colloc reads it (`squeue --json`: a job name may
/// forge a line of `scontrol show job`'s text). `id` may be `ARRAY_TASK`.
fn admin_comment(c: &Cluster, id: impl ToString) -> String {
    queued(c, &id.to_string())["admin_comment"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Job `id` (`N`, `ARRAY_TASK` or `HETJOB+OFFSET`) as `squeue --json` lists it (22.05's
/// lists every job: the one asked is found by its ids).
fn queued(c: &Cluster, id: &str) -> Value {
    let out = c
        .slurm("squeue")
        .args(["--json", "--states=all"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let num = |x: &Value| x.as_u64().or_else(|| x["number"].as_u64());
    let split = |sep| {
        id.split_once(sep)
            .map(|(a, b): (&str, &str)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
    };
    let found = v["jobs"].as_array().unwrap().iter().find(|j| {
        if let Some((a, t)) = split('_') {
            num(&j["array_job_id"]) == Some(a) && num(&j["array_task_id"]) == Some(t)
        } else if let Some((h, o)) = split('+') {
            num(&j["het_job_id"]) == Some(h) && num(&j["het_job_offset"]) == Some(o)
        } else {
            num(&j["job_id"]) == id.parse().ok()
        }
    });
    found
        .unwrap_or_else(|| panic!("no job {id} in squeue --json"))
        .clone()
}

/// Wait until the database has an end and a comment for job `id` (`N` or `ARRAY_TASK`,
/// as sacct's JobID names it); its state and comment.
fn accounted_comment(c: &Cluster, id: &str) -> (String, String) {
    let start = std::time::Instant::now();
    loop {
        let out = c.sacct(&[
            "-j",
            id,
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,State,End,AdminComment",
        ]);
        let stdout = text(&out.stdout);
        let row = stdout
            .lines()
            .map(|l| l.splitn(4, '|').collect::<Vec<_>>())
            .find(|f| f.len() == 4 && f[0] == id);
        if let Some(f) = &row {
            if !f[3].is_empty() && !matches!(f[2], "" | "Unknown" | "None") {
                return (f[1].to_string(), f[3].to_string());
            }
        }
        assert!(
            start.elapsed().as_secs() < 60,
            "no summary in the database for {id}: {stdout}\n{}",
            c.slurmd_log_tail(40000)
                .lines()
                .filter(|l| l.contains("colloc: ") && l.contains(id.split('_').next().unwrap_or(id)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// `colloc ARGS` as root with the cluster's `SLURM_CONF` (as an admin runs it).
fn colloc(c: &Cluster, args: &[&str]) -> std::process::Output {
    c.slurm(&colloc_bin().to_string_lossy())
        .args(args)
        .output()
        .unwrap()
}

/// A folder the job's user can write.
fn job_folder(c: &Cluster, name: &str, user: &str) -> PathBuf {
    let dir = c.jobs_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let (uid, gid) = ensure_user(user);
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    dir
}

/// Python that connects to the summary socket at the path the Python expression `path`
/// gives and writes `line`; it prints `denied` where the kernel refuses the connection.
fn sender(path: &str, line: &str) -> String {
    format!(
        "python3 - <<'PY'\nimport os, socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         try:\n    s.connect({path})\nexcept PermissionError:\n    print('denied')\n    raise SystemExit(0)\n\
         s.sendall({line:?}.encode())\ns.close()\nprint('sent')\nPY\n"
    )
}

/// Three runs: two print their throughput for about 2 s and succeed, one fails.
fn manifest(dir: &Path) {
    let script = "if [ \"$I\" = 3 ]; then exit 3; fi; for k in 1 2 3 4 5 6 7 8; do echo img/s=100; sleep 0.25; done";
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[defaults]\nretries = 0\n\n[[sweep]]\nname = 'r{{i}}'\ncommand = ['sh', '-c', '{script}']\n\
             env = {{ I = '{{i}}' }}\ngrid = {{ i = [1, 2, 3] }}\n"
        ),
    )
    .unwrap();
}

fn summary_of_a_pack(c: &Cluster) {
    let _whole = c.whole_gpus();
    let dir = job_folder(c, "summary", USER);
    manifest(&dir);
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    // The job: waits until the test has set an admin's comment and another user has
    // written to its socket, sends a malformed report of its own, then runs the pack.
    let job = format!(
        "touch {ready}\nfor i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done\n\
         {bad}cd {dir}\n{colloc} run -j 2 -q -f runs.toml\n",
        ready = ready.display(),
        go = go.display(),
        bad = sender(
            "os.environ['COLLOC_SUMMARY_SOCKET']",
            "pack ok=1 failed=0 steady=1 unit=x'--\n"
        ),
        dir = dir.display(),
        colloc = colloc_bin().display(),
    );
    let user = as_user(USER);
    let mut args = vec!["--colloc=mps", "--gres=gpu:1"];
    args.extend(user.iter().map(String::as_str));
    let id = c.submit(&args, &job);
    c.wait_until("the job to start", || ready.exists().then_some(()));
    // An admin's text, set while the job runs, stays beside colloc's word.
    let out = c
        .slurm("scontrol")
        .args(["update", &format!("JobId={id}"), "AdminComment=ticket-7"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The socket is the job's user's alone.
    let sock = jobsummary::socket_path(&c.run_dir(), id);
    let meta =
        std::fs::symlink_metadata(&sock).unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
    assert!(meta.file_type().is_socket(), "{meta:?}");
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777),
        (ensure_user(USER).0, 0o600),
        "{}",
        sock.display()
    );
    // Another user's job cannot even connect to it (the path is no secret).
    let other = as_user(OTHER);
    let mut oargs: Vec<&str> = other.iter().map(String::as_str).collect();
    oargs.push("--gres=gpu:1");
    let forged = c.submit(
        &oargs,
        &sender(
            &format!("{:?}", sock.display().to_string()),
            "pack ok=1000 failed=0 steady=999999 unit=img/s\n",
        ),
    );
    assert_eq!(c.wait_ended(forged), "COMPLETED", "{}", c.job_err(forged));
    assert_eq!(c.job_out(forged).trim(), "denied", "{}", c.job_err(forged));
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.wait_done(id).state, "FAILED", "{}", c.job_err(id));

    let report: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("colloc-{id}/colloc-report.json"))).unwrap(),
    )
    .unwrap();
    let s = &report["summary"];
    assert_eq!(
        (s["succeeded"].as_u64(), s["failed"].as_u64()),
        (Some(2), Some(1)),
        "{s}"
    );
    let comment = admin_comment(c, id);
    let (other_text, word) = jobsummary::split_comment(&comment);
    assert_eq!(other_text, "ticket-7", "{comment}");
    let word = word.unwrap_or_else(|| panic!("no colloc word in {comment:?}"));
    let got = JobSummary::decode(word).unwrap_or_else(|| panic!("unreadable: {word}"));
    assert_eq!((got.mode.as_str(), got.gpus), ("mps", 1), "{word}");
    // One pack: the job's own; the malformed one is not in it, and no one else got in.
    assert_eq!((got.packs, got.ok, got.failed), (1, 2, 1), "{word}");
    assert_eq!(got.strangers, 0, "{word}");
    let steady = s["steady_throughput"].as_f64().expect("a steady figure");
    let (v, unit) = got.steady.clone().expect("the steady figure in the word");
    assert!(
        (v - steady).abs() <= 0.0005 + steady * 1e-12,
        "{v} vs {steady}"
    );
    assert_eq!(unit, "img/s");
    assert_eq!(
        got.energy_j.is_some(),
        s["energy_j"].as_f64().is_some(),
        "{word} {s}"
    );
    if let (Some(e), Some(r)) = (got.energy_j, s["energy_j"].as_f64()) {
        assert!((e - r).abs() <= 0.0005, "{e} vs {r}");
    }
    // The database has what slurmctld had.
    let row = c.wait_accounted(id, &["AdminComment"]);
    assert_eq!(row["AdminComment"], comment, "{row:?}");
    // The node's log says what was left out.
    let log = c.slurmd_log_tail(4000);
    assert!(
        log.contains("a pack report refused"),
        "{log}\n{}",
        c.job_err(id)
    );
    // Gone with the step.
    assert!(!sock.exists(), "{}", sock.display());
}

fn no_summary(c: &Cluster) {
    let _whole = c.whole_gpus();
    let dir = job_folder(c, "none", USER);
    manifest(&dir);
    let job = format!(
        "cd {}\n{} run -j 2 -q -f runs.toml\n",
        dir.display(),
        colloc_bin().display()
    );
    let user = as_user(USER);
    let mut args: Vec<&str> = user.iter().map(String::as_str).collect();
    args.push("--gres=gpu:1");
    let plain = c.submit(&args, &job);
    assert_eq!(c.wait_done(plain).state, "FAILED", "{}", c.job_err(plain));
    assert_eq!(admin_comment(c, plain), "");
    // A node that keeps no summaries.
    let path = c.colloc_config();
    let saved = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{saved}\njob_summary = false\n")).unwrap();
    let mut args = args.clone();
    args.push("--colloc=naive");
    let id = c.submit(&args, &job);
    let end = c.wait_done(id);
    std::fs::write(&path, &saved).unwrap();
    assert_eq!(end.state, "FAILED", "{}", c.job_err(id));
    assert_eq!(admin_comment(c, id), "");
    // The same job where the node keeps them: root's facts and the pack's.
    let id = c.submit(&args, &job);
    assert_eq!(c.wait_done(id).state, "FAILED", "{}", c.job_err(id));
    let comment = admin_comment(c, id);
    let got = JobSummary::decode(&comment).unwrap_or_else(|| panic!("{comment:?}"));
    assert_eq!(
        (got.mode.as_str(), got.packs, got.ok, got.failed),
        ("naive", 1, 2, 1)
    );
}

/// Waits for `go`, then ends.
fn gated(go: &Path) -> String {
    format!(
        "for i in $(seq 600); do [ -e {0} ] && break; sleep 0.1; done\n",
        go.display()
    )
}

fn names_arrays_cancelled(c: &Cluster) {
    let _whole = c.whole_gpus();
    let user = as_user(USER);
    let mut args: Vec<&str> = user.iter().map(String::as_str).collect();
    args.extend(["--colloc=naive", "--gres=gpu:1"]);
    // A name that, in `scontrol show job`'s text, is a line `AdminComment=…`.
    let forged = "x\n   AdminComment=EVIL'`$(id)\n";
    let mut named = args.clone();
    let name_arg = format!("--job-name={forged}");
    named.push(&name_arg);
    let id = c.submit(&named, "true");
    assert_eq!(c.wait_done(id).state, "COMPLETED", "{}", c.job_err(id));
    assert_eq!(admin_comment(c, id), "colloc/1;mode=naive;gpus=1");

    // Two array tasks: an admin's text on task 0 stays on task 0 only.
    let go = c.jobs_dir().join("array-go");
    let mut array = args.clone();
    array.push("--array=0-1");
    let a = c.submit(&array, &gated(&go));
    c.wait_until("both tasks to run", || {
        let out = c
            .slurm("squeue")
            .args(["-h", "-t", "R", "-j", &a.to_string(), "-o", "%i"])
            .output()
            .unwrap();
        (text(&out.stdout).lines().count() == 2).then_some(())
    });
    let out = c
        .slurm("scontrol")
        .args(["update", &format!("JobId={a}_0"), "AdminComment=ticket-42"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(&go, "").unwrap();
    let end = c.wait_done(a);
    assert_eq!(end.state, "COMPLETED", "{end:?}");
    assert_eq!(
        admin_comment(c, format!("{a}_0")),
        "ticket-42 colloc/1;mode=naive;gpus=1"
    );
    assert_eq!(
        admin_comment(c, format!("{a}_1")),
        "colloc/1;mode=naive;gpus=1"
    );

    // Cancelled while it runs: slurmctld takes no update then; the summary goes to the
    // database through sacctmgr.
    let dir = job_folder(c, "cancel", USER);
    let ready = dir.join("ready");
    let id = c.submit(
        &args,
        &format!("touch {}\n{}", ready.display(), gated(&dir.join("never"))),
    );
    c.wait_until("the batch script to run", || ready.exists().then_some(()));
    let out = c.slurm("scancel").arg(id.to_string()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_done(id);
    let (state, comment) = accounted_comment(c, &id.to_string());
    assert!(state.starts_with("CANCELLED"), "{state}");
    assert_eq!(comment, "colloc/1;mode=naive;gpus=1");
    let log = c.slurmd_log_tail(4000);
    assert!(
        log.contains(&format!(
            "job {id}: summary colloc/1;mode=naive;gpus=1 written (Database)"
        )),
        "{log}"
    );
}

fn period_summary(c: &Cluster) {
    let _whole = c.whole_gpus();
    // A job of its own, so that the period has one whatever ran before.
    let dir = job_folder(c, "period", USER);
    manifest(&dir);
    let user = as_user(USER);
    let mut args: Vec<&str> = user.iter().map(String::as_str).collect();
    args.extend(["--colloc=mps", "--gres=gpu:2"]);
    let job = format!(
        "cd {}\n{} run -j 2 -q -f runs.toml\n",
        dir.display(),
        colloc_bin().display()
    );
    let id = c.submit(&args, &job);
    c.wait_done(id);
    c.wait_accounted(id, &["AdminComment"]);
    // What sacct holds, read here on its own: jobs with a colloc word, by mode kind.
    let out = c.sacct(&[
        "-a",
        "-X",
        "-n",
        "-P",
        "-S",
        "2020-01-01",
        "-o",
        "JobIDRaw,User,ElapsedRaw,AllocTRES,AdminComment",
    ]);
    let mut jobs = 0;
    let mut ok = 0;
    let mut users = std::collections::BTreeSet::new();
    let mut gpu_s = 0.0;
    for l in text(&out.stdout).lines() {
        let f: Vec<&str> = l.splitn(5, '|').collect();
        let Some(word) = f[4].split_whitespace().find(|w| w.starts_with("colloc/")) else {
            continue;
        };
        let s = JobSummary::decode(word).unwrap();
        jobs += 1;
        ok += s.ok;
        users.insert(f[1].to_string());
        let gpus: f64 = f[3]
            .split(',')
            .find_map(|t| t.strip_prefix("gres/gpu="))
            .map_or(0.0, |g| g.parse().unwrap());
        gpu_s += gpus * f[2].parse::<f64>().unwrap();
    }
    assert!(jobs >= 1 && ok >= 2, "{}", text(&out.stdout));
    let out = colloc(
        c,
        &["status", "--cluster", "--since", "2020-01-01", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = &v["colloc"];
    assert_eq!(all["jobs"].as_u64(), Some(jobs), "{v}");
    assert_eq!(all["runs_ok"].as_u64(), Some(ok), "{v}");
    assert_eq!(all["users"].as_u64(), Some(users.len() as u64), "{v}");
    assert!(
        (all["gpu_hours"].as_f64().unwrap() - gpu_s / 3600.0).abs() < 1e-9,
        "{v}"
    );
    assert!(
        v["by_mode"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mode"] == "mps"),
        "{v}"
    );
    let human = text(&colloc(c, &["status", "--cluster", "--since", "2020-01-01"]).stdout);
    assert!(
        human.contains(&format!("{jobs} colloc jobs of {} users held", users.len())),
        "{human}"
    );
    // A bad date changes nothing and says what is valid.
    let out = colloc(c, &["status", "--cluster", "--since", "last-week"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("YYYY-MM-DD"),
        "{}",
        text(&out.stderr)
    );
}
