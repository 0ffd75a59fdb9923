//! Sweeps longer than the job's time limit (issue 25), without Slurm: a fake `scontrol`
//! on PATH says how long the job has left and takes the requeue. colloc warns its runs
//! `--warn-before` the end (or when it gets SIGUSR1), gives them `--warn-grace` to
//! checkpoint, stops the rest, records every one as interrupted, and requeues the job only
//! when it may; the requeued start resumes from the checkpoints. colloc whose parent dies
//! stops its runs and exits.

mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use run_support::{fixture, kill, processes_with_env, run, wait_for, Env};

/// A fake `scontrol` in `env`'s folder: `-o show job ID` prints `$MARK/job.txt`,
/// `requeue ID` succeeds; every call is appended to `$MARK/scontrol.calls`.
fn fake_scontrol(env: &Env) -> PathBuf {
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join("scontrol");
    std::fs::write(
        &p,
        // RunTime goes on from the `run_s` of job.txt, counted from the file's change.
        r#"#!/bin/bash
echo "$*" >>"$MARK/scontrol.calls"
if [ "$1" = -o ]; then
  read -r base rest <"$MARK/job.txt"
  t=$((base + $(date +%s) - $(stat -c %Y "$MARK/job.txt")))
  printf '%s RunTime=%02d:%02d:%02d
' "$rest" $((t / 3600)) $((t / 60 % 60)) $((t % 60))
fi
"#,
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

/// What the fake `scontrol -o show job 77` says: the job has run `run_s` seconds now.
fn job_says(env: &Env, requeue: u8, restarts: u32, run_s: u32, limit: &str) {
    std::fs::write(
        env.mark().join("job.txt"),
        format!("{run_s} JobId=77 JobName=sweep JobState=RUNNING Reason=None Requeue={requeue} Restarts={restarts} BatchFlag=1 TimeLimit={limit} NodeList=n1\n"),
    )
    .unwrap();
}

fn calls(env: &Env) -> String {
    std::fs::read_to_string(env.mark().join("scontrol.calls")).unwrap_or_default()
}

fn lines(env: &Env, file: &str) -> Vec<String> {
    std::fs::read_to_string(env.mark().join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs ck1, ck2 (checkpoint on SIGUSR1) and deaf (ignores it), `steps` steps of 0.1 s.
fn checkpoint_sweep(env: &Env, steps: u32) -> PathBuf {
    env.manifest(&format!(
        "[defaults]\nenv = {{ CKPT_DIR = '{mark}', STEPS = '{steps}', STEP_S = '0.1' }}\n\
         [[sweep]]\nname = 'ck{{i}}'\ncommand = ['{ck}']\ngrid = {{ i = [1, 2] }}\n\
         [[run]]\nname = 'deaf'\ncommand = ['{ck}']\nenv = {{ IGNORE_USR1 = '1' }}\n",
        mark = env.mark().display(),
        ck = fixture("checkpoint.sh"),
    ))
}

/// `colloc run ARGS -f MANIFEST` as job 77's batch script would start it.
fn in_job(env: &Env, bin: &Path, restart: Option<u32>, args: &[&str], m: &Path) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("colloc"));
    c.args(env.colloc().get_args())
        .args(args)
        .arg("-f")
        .arg(m)
        .current_dir(env.path())
        .env("COLLOC_CONFIG", env.path().join("none.toml"))
        .env("MARK", env.mark())
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("SLURM_JOB_ID", "77")
        .env_remove("SLURM_STEP_ID")
        .env_remove("SLURM_CONF")
        .env_remove("COLLOC_MODE")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("COLLOC_WARN_BEFORE")
        .env_remove("COLLOC_WARN_GRACE")
        .env_remove("COLLOC_WARN_SIGNAL")
        .env_remove("COLLOC_REQUEUE_LIMIT");
    match restart {
        Some(n) => c.env("SLURM_RESTART_COUNT", n.to_string()),
        None => c.env_remove("SLURM_RESTART_COUNT"),
    };
    c
}

#[test]
fn the_end_time_warns_runs_which_checkpoint_and_the_job_is_requeued_and_resumed() {
    let env = Env::new();
    let bin = fake_scontrol(&env);
    let m = checkpoint_sweep(&env, 150);
    // 15 s left; warned 10 s ahead, so 5 s in: every run is at about step 40 of 150.
    job_says(&env, 1, 0, 45, "00:01:00");
    let flags = [
        "-j",
        "3",
        "--warn-before",
        "10s",
        "--warn-grace",
        "2s",
        "--grace",
        "1s",
    ];
    let out = in_job(&env, &bin, None, &flags, &m).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the job's time limit is near: sending SIGUSR1 to 3 running run(s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("deaf: still running 2s after SIGUSR1; sending SIGTERM"),
        "{stderr}"
    );
    assert!(
        stderr.contains("job 77 requeued (1 of at most 3): 3 run(s) left"),
        "{stderr}"
    );
    assert!(
        calls(&env).lines().any(|l| l == "requeue 77"),
        "{}",
        calls(&env)
    );
    let mut ck = lines(&env, "checkpoints");
    ck.sort();
    assert_eq!(ck.len(), 2, "{ck:?}");
    assert!(
        ck[0].starts_with("ck1 ") && ck[1].starts_with("ck2 "),
        "{ck:?}"
    );
    assert!(lines(&env, "done").is_empty());
    let rep = env.report();
    for name in ["ck1", "ck2", "deaf"] {
        assert_eq!(run(&rep, name)["state"], "interrupted", "{name}");
    }
    // The requeued start (same job id, SLURM_RESTART_COUNT=1) resumes by itself, each run
    // from its checkpoint.
    job_says(&env, 1, 1, 1, "01:00:00");
    let out = in_job(&env, &bin, Some(1), &flags, &m).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !calls(&env).contains("requeue 77\nrequeue"),
        "{}",
        calls(&env)
    );
    let mut done = lines(&env, "done");
    done.sort();
    assert_eq!(done, ["ck1", "ck2", "deaf"]);
    let starts = lines(&env, "starts");
    for name in ["ck1", "ck2", "deaf"] {
        let s: Vec<u32> = starts
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
            })
            .collect();
        assert_eq!(s.len(), 2, "{name}: {starts:?}");
        assert!(s[0] == 0 && s[1] > 5, "{name} did not resume: {starts:?}");
    }
    let rep = env.report();
    assert_eq!(rep["summary"]["succeeded"], 3, "{}", rep["summary"]);
    let a = run(&rep, "deaf")["attempts"].as_array().unwrap().clone();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["state"], "interrupted");
    assert_eq!(a[1]["state"], "succeeded");
    assert!(processes_with_env(&env.tag()).is_empty());
}

#[test]
fn no_requeue_past_the_limit_or_without_requeue_each_says_why() {
    for (requeue, restarts, why) in [
        (1, 3, "job 77 not requeued: it was requeued 3 time(s) already, the most --requeue-limit allows (3)"),
        (0, 0, "job 77 not requeued: it may not be requeued (Requeue=0: submit it with --requeue"),
    ] {
        let env = Env::new();
        let bin = fake_scontrol(&env);
        let m = checkpoint_sweep(&env, 1000);
        job_says(&env, requeue, restarts, 55, "00:01:00");
        let restart = (restarts > 0).then_some(restarts);
        let flags = ["--warn-before", "4s", "--warn-grace", "1s", "--grace", "1s"];
        let out = in_job(&env, &bin, restart, &flags, &m).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(stderr.contains("colloc run --resume --report-dir"), "{stderr}");
        assert!(!calls(&env).contains("requeue"), "{}", calls(&env));
    }
}

#[test]
fn sigusr1_to_colloc_is_the_warning_outside_slurm_too() {
    let env = Env::new();
    let m = checkpoint_sweep(&env, 1000);
    let child = env.spawn(&[
        "-j",
        "3",
        "--warn-grace",
        "2s",
        "--grace",
        "1s",
        "-f",
        m.to_str().unwrap(),
    ]);
    wait_for("three runs to start", || lines(&env, "starts").len() == 3);
    kill(child.id(), libc::SIGUSR1);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("colloc received SIGUSR1 (the job's time limit is near): sending SIGUSR1 to 3 running run(s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not requeued: not inside a Slurm job"),
        "{stderr}"
    );
    assert_eq!(lines(&env, "checkpoints").len(), 2);
    let rep = env.report();
    for name in ["ck1", "ck2", "deaf"] {
        assert_eq!(run(&rep, name)["state"], "interrupted", "{name}");
    }
    // The record names the warning.
    assert_eq!(rep["signals"][0]["signal"], "SIGUSR1");
    // --warn-signal picks what the runs get.
    let env = Env::new();
    let m = env.manifest(&format!(
        "[[run]]\nname = 'u2'\ncommand = ['bash', '-c', 'trap \"touch {}/got-usr2; exit 0\" USR2; touch {}/started; while :; do sleep 0.05; done']\n",
        env.mark().display(),
        env.mark().display()
    ));
    let child = env.spawn(&["--warn-signal", "SIGUSR2", "-f", m.to_str().unwrap()]);
    wait_for("the run to start", || env.mark().join("started").exists());
    kill(child.id(), libc::SIGUSR1);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(env.mark().join("got-usr2").exists());
}

/// colloc started in the background by a shell that is then killed, inside a Slurm job (a
/// batch shell that died of `--signal=B:USR1` under proctrack/linuxproc): it must not run
/// on as an orphan. Outside Slurm an orphan goes on (`nohup colloc run … &`).
#[test]
fn colloc_whose_parent_dies_stops_its_runs_and_exits() {
    let env = Env::new();
    let m = checkpoint_sweep(&env, 100_000);
    let pidfile = env.path().join("colloc.pid");
    let (k, v) = env
        .tag()
        .split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .unwrap();
    let mut shell: Child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "\"$0\" \"$@\" >/dev/null 2>&1 & echo $! > {}; wait",
            pidfile.display()
        ))
        .arg(assert_cmd::cargo::cargo_bin("colloc"))
        .args(env.colloc().get_args())
        .args([
            "-j",
            "3",
            "--grace",
            "1s",
            "--warn-before",
            "off",
            "-f",
            m.to_str().unwrap(),
        ])
        .current_dir(env.path())
        .env("COLLOC_CONFIG", env.path().join("none.toml"))
        .env("MARK", env.mark())
        .env(k, v)
        .env("SLURM_JOB_ID", "77")
        .env_remove("SLURM_STEP_ID")
        .env_remove("SLURM_RESTART_COUNT")
        .env_remove("COLLOC_MODE")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("three runs to start", || lines(&env, "starts").len() == 3);
    let colloc: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    shell.kill().unwrap();
    shell.wait().unwrap();
    wait_for("colloc and every run to end", || {
        !Path::new(&format!("/proc/{colloc}")).exists() && processes_with_env(&env.tag()).is_empty()
    });
    let rep = env.report();
    assert!(
        rep["stopped_by"]
            .as_str()
            .unwrap_or_default()
            .contains("colloc's parent process"),
        "{}",
        rep
    );
    for name in ["ck1", "ck2", "deaf"] {
        assert_eq!(run(&rep, name)["state"], "interrupted", "{name}");
    }
}

#[test]
fn bad_time_limit_settings_are_one_line_and_exit_2() {
    let env = Env::new();
    let m = env.manifest("[[run]]\nname = 'a'\ncommand = ['true']\n");
    for (args, want) in [
        (
            vec!["--warn-before", "5m", "--warn-grace", "5m"],
            "--warn-grace (5m) plus --grace (10s) must be shorter than --warn-before (5m)",
        ),
        (
            vec!["--warn-signal", "KILL"],
            "--warn-signal: \"KILL\" is not valid; use USR1, USR2, TERM, INT, HUP or QUIT",
        ),
        (
            vec!["--warn-before", "soon"],
            "--warn-before: invalid duration",
        ),
    ] {
        let out = env.colloc().args(&args).arg("-f").arg(&m).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    // `off` turns the watch off; the settings then need no lead.
    let out = env
        .colloc()
        .args(["--warn-before", "off", "--warn-grace", "1h"])
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
