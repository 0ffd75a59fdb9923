//! Admin hooks around a MIG reconfiguration (`[mig] pre_hook`/`post_hook` in colloc.toml),
//! like mig-parted's pre/post-apply hooks: clients that hold MIG instances (DCGM's
//! nv-hostengine, dcgm-exporter, nvsm, nvidia-persistenced) make destroys answer IN_USE
//! and mode changes stay pending; an admin pauses them before colloc changes the GPU and
//! resumes them afterwards (slurm-conf/examples/colloc-dcgm-hook).
//!
//! Root runs the program directly (no shell) only when it and its directories are root's
//! alone, with a fixed environment, stdin closed, in its own process group that is killed
//! at `[mig] hook_timeout_s`. The post-hook runs also after a reconfiguration that failed.
//! A hook's failure is logged and never fails the node: a failed pre-hook refuses the
//! job in a prolog (nothing was changed) and is only a warning in an epilog (the restore
//! must still try).
//!
//! What the hooks pause (DCGM, dcgm-exporter) serves the whole node, while colloc
//! reconfigures per job: so the pause is counted per node ([`pause`], [`resume`]). The
//! first reconfiguration to start runs the pre-hook, the last to end runs the post-hook;
//! in between others run neither (one needing a mode change where the pause was made
//! without runs the pre-hook once more, with `COLLOC_MODE_CHANGE=1`). Which jobs hold the
//! pause is journaled in `state_dir/node/hooks.json` (root-only, under a lock): a job
//! whose epilog was killed keeps holding it until its journal is restored (the next
//! prolog on its GPU, or `colloc restore`), and a holder whose journal is gone is dropped.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::journal::{self, GpuLock};

/// Before or after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the GPUs change.
    Pre,
    /// After, whatever happened.
    Post,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Pre => "pre",
            Phase::Post => "post",
        }
    }
}

/// What is about to change (or changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `create` (prolog) or `destroy` (epilog, undo).
    pub action: &'static str,
    /// MIG mode is switched too.
    pub mode_change: bool,
    /// The job.
    pub job: u32,
    /// NVML indexes of the GPUs.
    pub gpus: Vec<u32>,
    /// Their UUIDs.
    pub uuids: Vec<String>,
}

/// Run the configured hook of `phase`, if any. `ok` tells a post-hook whether the
/// reconfiguration succeeded.
///
/// # Errors
/// One line: why the hook could not run, or how it ended.
pub fn run(cfg: &Config, phase: Phase, change: &Change, ok: bool) -> Result<(), String> {
    let argv = match phase {
        Phase::Pre => &cfg.mig.pre_hook,
        Phase::Post => &cfg.mig.post_hook,
    };
    let Some((program, args)) = argv.split_first() else {
        return Ok(());
    };
    let what = format!("{}_hook {program}", phase.as_str());
    check_program(Path::new(program)).map_err(|e| format!("mig.{what}: {e}"))?;
    let list = |v: &[String]| v.join(",");
    let idx: Vec<String> = change.gpus.iter().map(u32::to_string).collect();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("COLLOC_HOOK", phase.as_str())
        .env("COLLOC_ACTION", change.action)
        .env(
            "COLLOC_MODE_CHANGE",
            if change.mode_change { "1" } else { "0" },
        )
        .env("COLLOC_JOB_ID", change.job.to_string())
        .env("COLLOC_GPUS", list(&idx))
        .env("COLLOC_GPU_UUIDS", list(&change.uuids))
        .env("COLLOC_RESULT", if ok { "ok" } else { "failed" })
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::no_inherited_fds(&mut cmd);
    crate::sys::default_signals(&mut cmd);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("mig.{what}: cannot run it: {e}"))?;
    let deadline = started + cfg.mig.hook_timeout();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("mig.{what}: {e}")),
        }
    };
    // The whole group: a hook's children (systemctl) go with it.
    let pgid = child.id();
    crate::sys::kill_group(pgid, libc::SIGKILL);
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "mig.{what} did not end within {} s (mig.hook_timeout_s) and was killed",
            cfg.mig.hook_timeout_s
        ));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read as _;
        let _ = (&mut e).take(2048).read_to_string(&mut stderr);
    }
    if status.success() {
        log::info!(
            "job {}: mig.{what} ran ({} ms)",
            change.job,
            started.elapsed().as_millis()
        );
        return Ok(());
    }
    Err(format!(
        "mig.{what} failed ({status}): {}",
        stderr.trim().replace('\n', " ")
    ))
}

/// The directory in `state_dir` for node-wide state.
const NODE_DIR: &str = "node";
/// The file there that records who holds the hooks' pause.
pub const PAUSE_FILE: &str = "hooks.json";
/// The name of the lock (in `state_dir/locks`) that guards [`PAUSE_FILE`].
const PAUSE_LOCK: &str = "node-hooks";
/// Largest pause file read.
const PAUSE_LIMIT: u64 = 1 << 20;

/// Who holds the node-wide pause of the hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    /// The jobs whose reconfigurations run (or were interrupted) under the pause.
    pub jobs: BTreeSet<u32>,
    /// The pre-hook ran with `COLLOC_MODE_CHANGE=1` (mode-change services stopped too).
    pub mode_change: bool,
    /// Seconds since the epoch when the pre-hook first ran.
    pub since: u64,
}

fn hooks_configured(cfg: &Config) -> bool {
    !cfg.mig.pre_hook.is_empty() || !cfg.mig.post_hook.is_empty()
}

/// The pause lock: waits at most for one hook of another colloc process to end.
fn pause_lock(cfg: &Config) -> Result<GpuLock, String> {
    let wait = cfg.mig.hook_timeout() + Duration::from_secs(5);
    GpuLock::acquire_within(cfg, PAUSE_LOCK, wait)
        .map_err(|e| format!("the node's hook pause cannot be locked: {e}"))
}

/// The recorded pause; `None` when no pause is recorded.
///
/// # Errors
/// `state_dir` is unsafe, or the file cannot be read or parsed.
pub fn load_pause(cfg: &Config) -> Result<Option<Pause>, String> {
    let dir =
        crate::statedir::sub_dir(&cfg.state_dir, NODE_DIR, false).map_err(|e| e.to_string())?;
    let Some(dir) = dir else {
        return Ok(None);
    };
    let Some(bytes) = dir
        .read_file(PAUSE_FILE, PAUSE_LIMIT)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{}: {e}", dir.path().join(PAUSE_FILE).display()))
}

fn store_pause(cfg: &Config, p: Option<&Pause>) -> Result<(), String> {
    let dir = crate::statedir::sub_dir(&cfg.state_dir, NODE_DIR, true)
        .map_err(|e| e.to_string())?
        .ok_or("state_dir/node cannot be made")?;
    match p {
        Some(p) => {
            let body = serde_json::to_vec_pretty(p).map_err(|e| e.to_string())?;
            dir.write_file(PAUSE_FILE, &body).map_err(|e| e.to_string())
        }
        None => dir
            .unlink(PAUSE_FILE)
            .map(|_| ())
            .map_err(|e| e.to_string()),
    }
}

/// Drop holders whose journal is gone (restored, or removed by an admin): they hold
/// nothing any more.
fn prune(cfg: &Config, p: &mut Pause, keep: u32) {
    p.jobs
        .retain(|&job| job == keep || !matches!(journal::load(cfg, job), Ok(None)));
}

/// Start `change.job`'s part of the node-wide pause: the pre-hook runs where no other
/// reconfiguration holds the pause (or where this one needs a mode change and the pause
/// was made without). The job is recorded before the hook runs, so a process killed in
/// between leaves a pause that a later restore resumes.
///
/// # Errors
/// The pause cannot be recorded, or the pre-hook failed (the job stays recorded: its
/// [`resume`] runs the post-hook for what the pre-hook did stop).
pub fn pause(cfg: &Config, change: &Change) -> Result<(), String> {
    if !hooks_configured(cfg) {
        return Ok(());
    }
    let _lock = pause_lock(cfg)?;
    let mut p = load_pause(cfg)?.unwrap_or_default();
    prune(cfg, &mut p, change.job);
    // Alone (or again after an interrupted run of this job): the hook pauses; its pause
    // is idempotent (it stops what runs).
    let alone = p.jobs.iter().all(|&j| j == change.job);
    let run_pre = alone || (change.mode_change && !p.mode_change);
    p.jobs.insert(change.job);
    if run_pre {
        p.mode_change |= change.mode_change;
        if p.since == 0 {
            p.since = now_secs();
        }
    }
    store_pause(cfg, Some(&p))?;
    if !run_pre {
        log::info!(
            "job {}: monitoring already paused by job(s) {:?}; mig.pre_hook not run again",
            change.job,
            p.jobs
                .iter()
                .filter(|&&j| j != change.job)
                .collect::<Vec<_>>()
        );
        return Ok(());
    }
    let mut c = change.clone();
    c.mode_change = p.mode_change;
    run(cfg, Phase::Pre, &c, true)
}

/// End `change.job`'s part of the node-wide pause: the post-hook runs when no other
/// reconfiguration holds it any more, and only then is the record removed (a process
/// killed before leaves it for a later restore to resume).
///
/// # Errors
/// The pause cannot be read or recorded, or the post-hook failed.
pub fn resume(cfg: &Config, change: &Change, ok: bool) -> Result<(), String> {
    if !hooks_configured(cfg) {
        return Ok(());
    }
    let _lock = pause_lock(cfg)?;
    let Some(mut p) = load_pause(cfg)? else {
        return Ok(());
    };
    p.jobs.remove(&change.job);
    prune(cfg, &mut p, u32::MAX);
    if !p.jobs.is_empty() {
        store_pause(cfg, Some(&p))?;
        log::info!(
            "job {}: monitoring stays paused for job(s) {:?}; mig.post_hook not run yet",
            change.job,
            p.jobs
        );
        return Ok(());
    }
    let mut c = change.clone();
    c.mode_change = p.mode_change;
    let result = run(cfg, Phase::Post, &c, ok);
    store_pause(cfg, None)?;
    result
}

/// Resume a pause no reconfiguration holds any more (its holders' journals are gone):
/// `colloc restore --all` after restoring every journal. Returns whether the post-hook
/// ran.
///
/// # Errors
/// As [`resume`].
pub fn settle(cfg: &Config) -> Result<bool, String> {
    if !hooks_configured(cfg) || load_pause(cfg)?.is_none() {
        return Ok(false);
    }
    let change = Change {
        action: "destroy",
        mode_change: false,
        job: 0,
        gpus: Vec::new(),
        uuids: Vec::new(),
    };
    resume(cfg, &change, true)?;
    Ok(load_pause(cfg)?.is_none())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A hook program root may run: an absolute path to a regular file that only root can
/// change, through directories only root can change.
///
/// # Errors
/// Why not, in one line.
pub fn check_program(program: &Path) -> Result<(), String> {
    if !program.is_absolute() {
        return Err(format!("{} is not an absolute path", program.display()));
    }
    let f = crate::fs::open_trusted_file(program).map_err(|e| e.to_string())?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    if std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 == 0 {
        return Err(format!("{} is not executable", program.display()));
    }
    Ok(())
}

/// Problems with the configured hooks, for `colloc check-config`.
pub fn problems(cfg: &Config) -> Vec<String> {
    [
        ("pre_hook", &cfg.mig.pre_hook),
        ("post_hook", &cfg.mig.post_hook),
    ]
    .into_iter()
    .filter_map(|(key, argv)| {
        let program = argv.first()?;
        check_program(Path::new(program))
            .err()
            .map(|e| format!("mig.{key}: {e}"))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn change() -> Change {
        Change {
            action: "destroy",
            mode_change: false,
            job: 42,
            gpus: vec![0, 1],
            uuids: vec!["GPU-a".into(), "GPU-b".into()],
        }
    }

    #[test]
    fn a_hook_runs_with_a_fixed_environment_and_its_time_is_bounded() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: a trusted hook must be root's");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = dir.path().join("calls");
        let hook = dir.path().join("hook");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\necho \"$1 $COLLOC_HOOK $COLLOC_ACTION $COLLOC_JOB_ID $COLLOC_GPUS \
                 $COLLOC_RESULT ${{HOME:-nohome}}\" >> {}\n[ \"$1\" = slow ] && sleep 30\n\
                 [ \"$1\" = fail ] && {{ echo broke >&2; exit 3; }}\nexit 0\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cfg = Config::default();
        cfg.mig.hook_timeout_s = 1;
        cfg.mig.pre_hook = vec![hook.display().to_string(), "pause".into()];
        cfg.mig.post_hook = vec![hook.display().to_string(), "fail".into()];
        assert!(problems(&cfg).is_empty());
        run(&cfg, Phase::Pre, &change(), true).unwrap();
        let e = run(&cfg, Phase::Post, &change(), false).unwrap_err();
        assert!(e.contains("failed") && e.contains("broke"), "{e}");
        cfg.mig.pre_hook[1] = "slow".into();
        let t = Instant::now();
        let e = run(&cfg, Phase::Pre, &change(), true).unwrap_err();
        assert!(e.contains("was killed"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(20));
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            [
                "pause pre destroy 42 0,1 ok nohome",
                "fail post destroy 42 0,1 failed nohome",
                "slow pre destroy 42 0,1 ok nohome"
            ]
        );
        // Anyone may change it: not run.
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert_eq!(problems(&cfg).len(), 2, "{:?}", problems(&cfg));
        assert!(run(&cfg, Phase::Pre, &change(), true).is_err());
    }

    #[test]
    fn the_pause_is_counted_per_node_and_kept_across_an_interrupted_job() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: a trusted hook must be root's");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = dir.path().join("calls");
        let hook = dir.path().join("hook");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\necho \"$COLLOC_HOOK $COLLOC_JOB_ID $COLLOC_MODE_CHANGE\" >> {}\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cfg = Config {
            state_dir: dir.path().join("state"),
            ..Config::default()
        };
        cfg.mig.pre_hook = vec![hook.display().to_string()];
        cfg.mig.post_hook = vec![hook.display().to_string()];
        let job = |id: u32, mode_change: bool| {
            journal::write(&cfg, &journal::Journal::new(id, 0, 0, "mig:3g".into())).unwrap();
            Change {
                action: "create",
                mode_change,
                job: id,
                gpus: vec![id],
                uuids: vec![],
            }
        };
        let (a, b, c) = (job(1, false), job(2, false), job(3, true));
        pause(&cfg, &a).unwrap();
        pause(&cfg, &b).unwrap();
        // A mode change widens the pause: the pre-hook runs once more, told so.
        pause(&cfg, &c).unwrap();
        resume(&cfg, &a, true).unwrap();
        resume(&cfg, &c, true).unwrap();
        assert_eq!(
            load_pause(&cfg)
                .unwrap()
                .map(|p| p.jobs.into_iter().collect::<Vec<_>>()),
            Some(vec![2])
        );
        // Job 2 is interrupted (its resume never runs): the pause holds until its journal
        // is gone, and `restore --all` (settle) resumes it then.
        assert!(!settle(&cfg).unwrap());
        journal::remove(&cfg, 2).unwrap();
        assert!(settle(&cfg).unwrap());
        assert!(load_pause(&cfg).unwrap().is_none());
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            ["pre 1 0", "pre 3 1", "post 0 1"],
            "{calls}"
        );
    }
}
