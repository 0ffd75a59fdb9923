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

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Config;

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
}
