//! MPS control daemons with private pipe and log directories: one per GPU and job in the
//! prolog (run as the job's user), one per `colloc run` / `colloc bench` outside Slurm.
//!
//! The daemon is started with `nvidia-cuda-mps-control -d` and stopped with `quit` on the
//! control program's stdin, both with `CUDA_MPS_PIPE_DIRECTORY`/`CUDA_MPS_LOG_DIRECTORY`
//! set. Whatever is still running afterwards is found by that environment variable in
//! `/proc/<pid>/environ` and killed, so a daemon never outlives its job.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long the control program may take to answer one command.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(15);

/// Errors from starting or talking to an MPS daemon.
#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    /// The control program could not be run.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The control program exited with an error.
    #[error("{program} {what} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: PathBuf,
        /// What was asked (`-d`, `quit`, …).
        what: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr (one line).
        stderr: String,
    },
    /// The control program did not answer in time.
    #[error("{program} {what} did not answer within {secs} s")]
    Timeout {
        /// The program.
        program: PathBuf,
        /// What was asked.
        what: String,
        /// The limit.
        secs: u64,
    },
    /// A directory could not be made or set up.
    #[error("cannot prepare {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One MPS daemon's directories, as recorded in a job journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpsDaemon {
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    pub pipe_dir: PathBuf,
    /// `CUDA_MPS_LOG_DIRECTORY`.
    pub log_dir: PathBuf,
    /// `CUDA_VISIBLE_DEVICES` the daemon was started with (GPU UUIDs).
    pub devices: String,
}

impl MpsDaemon {
    /// A daemon whose directories are `<dir>/pipe` and `<dir>/log`.
    pub fn in_dir(dir: &Path, devices: &str) -> MpsDaemon {
        MpsDaemon {
            pipe_dir: dir.join("pipe"),
            log_dir: dir.join("log"),
            devices: devices.to_string(),
        }
    }

    /// The environment a client (or the control program) needs.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".into(),
                self.pipe_dir.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".into(),
                self.log_dir.display().to_string(),
            ),
        ]
    }
}

/// Who the daemon runs as: `None` for the calling user.
pub type AsUser = Option<(u32, u32)>;

fn control_command(program: &Path, d: &MpsDaemon, as_user: AsUser) -> Command {
    let mut cmd = Command::new(program);
    // A clean environment: the prolog has almost none, and a user's stray CUDA_* must not
    // leak into a daemon colloc starts on their behalf.
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
        )
        .env("CUDA_VISIBLE_DEVICES", &d.devices)
        .envs(d.env())
        .current_dir("/");
    for key in ["LD_LIBRARY_PATH", "HOME", "COLLOC_FAKE_NVML_STATE"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    if let Some((uid, gid)) = as_user {
        // std drops supplementary groups (setgroups(0)) when root changes uid.
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// Run the control program with `args` and `input` on stdin; return its stdout.
fn control(
    program: &Path,
    d: &MpsDaemon,
    as_user: AsUser,
    args: &[&str],
    input: &str,
) -> Result<String, MpsError> {
    let what = if input.is_empty() {
        args.join(" ")
    } else {
        input.trim().to_string()
    };
    let daemonize = args.contains(&"-d");
    let mut cmd = control_command(program, d, as_user);
    cmd.args(args).stdin(Stdio::piped());
    // A daemon inherits our stdout/stderr: with pipes, reading them would wait for the
    // daemon to exit. So `-d` writes to a file in its log directory instead.
    let start_log = d.log_dir.join("colloc-control-start.log");
    if daemonize {
        let f = std::fs::File::create(&start_log).map_err(|source| MpsError::Dir {
            path: start_log.clone(),
            source,
        })?;
        if let Some((uid, gid)) = as_user {
            let _ = std::os::unix::fs::chown(&start_log, Some(uid), Some(gid));
        }
        cmd.stdout(Stdio::from(f.try_clone().map_err(|source| {
            MpsError::Dir {
                path: start_log.clone(),
                source,
            }
        })?))
        .stderr(Stdio::from(f));
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|source| MpsError::Spawn {
        program: program.to_path_buf(),
        source,
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A control program that exits early closes its stdin; that shows in its status.
        let _ = stdin.write_all(input.as_bytes());
    }
    // The daemonizing `-d` leaves a child holding our pipes only if it forgets to close
    // them, so read with a deadline rather than to EOF.
    let deadline = Instant::now() + CONTROL_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(MpsError::Timeout {
                    program: program.to_path_buf(),
                    what,
                    secs: CONTROL_TIMEOUT.as_secs(),
                });
            }
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if daemonize {
        err = std::fs::read_to_string(&start_log).unwrap_or_default();
    } else {
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
    }
    if !status.success() {
        return Err(MpsError::Failed {
            program: program.to_path_buf(),
            what,
            status: status.to_string(),
            stderr: err.trim().replace('\n', " "),
        });
    }
    Ok(out)
}

fn make_dir(path: &Path, as_user: AsUser) -> Result<(), MpsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let err = |source| MpsError::Dir {
        path: path.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    if let Some((uid, gid)) = as_user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(err)?;
    }
    Ok(())
}

/// Create the daemon's directories (mode 0700, owned by `as_user`) and start it.
/// `dir_owner_root`: an enclosing per-job directory to create with the same owner and mode.
///
/// # Errors
/// [`MpsError`] when a directory cannot be made or the control program fails; nothing
/// is left running then.
pub fn start(
    program: &Path,
    d: &MpsDaemon,
    job_dir: Option<&Path>,
    as_user: AsUser,
) -> Result<(), MpsError> {
    if let Some(dir) = job_dir {
        make_dir(dir, as_user)?;
    }
    // Each level below the job directory belongs to the job's user too: a root-owned
    // 0700 `gpuN` in between would lock the user out of their own pipe directory.
    for dir in [&d.pipe_dir, &d.log_dir] {
        if let Some(parent) = dir.parent() {
            make_dir(parent, as_user)?;
        }
        make_dir(dir, as_user)?;
    }
    if let Err(e) = control(program, d, as_user, &["-d"], "") {
        kill_remaining(d, Duration::ZERO);
        return Err(e);
    }
    log::info!(
        "started MPS daemon for {} (pipe {})",
        d.devices,
        d.pipe_dir.display()
    );
    Ok(())
}

/// PIDs of MPS servers the daemon reports (`get_server_list`).
///
/// # Errors
/// [`MpsError`] when the control program fails (e.g. no daemon runs).
pub fn server_list(program: &Path, d: &MpsDaemon, as_user: AsUser) -> Result<Vec<u32>, MpsError> {
    let out = control(program, d, as_user, &[], "get_server_list\n")?;
    Ok(parse_server_list(&out))
}

/// Parse `get_server_list` output: one pid per line.
pub fn parse_server_list(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// What [`stop`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// The daemon answered `quit`.
    pub quit_ok: bool,
    /// Processes that had to be killed afterwards.
    pub killed: Vec<u32>,
}

/// Stop a daemon: `quit`, wait up to `grace` for its processes to end, kill what remains,
/// and remove its directories (and `job_dir` if given). Safe to call when no daemon runs.
pub fn stop(
    program: &Path,
    d: &MpsDaemon,
    job_dir: Option<&Path>,
    as_user: AsUser,
    grace: Duration,
) -> StopReport {
    let mut report = StopReport::default();
    if d.pipe_dir.exists() {
        match control(program, d, as_user, &[], "quit\n") {
            Ok(_) => report.quit_ok = true,
            Err(e) => log::debug!("MPS quit for {}: {e}", d.pipe_dir.display()),
        }
    }
    report.killed = kill_remaining(d, grace);
    for dir in [
        Some(d.pipe_dir.as_path()),
        Some(d.log_dir.as_path()),
        job_dir,
    ]
    .into_iter()
    .flatten()
    {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", dir.display());
            }
        }
    }
    report
}

/// Processes whose environment names this daemon's pipe directory.
pub fn daemon_processes(d: &MpsDaemon) -> Vec<u32> {
    let needle = format!("CUDA_MPS_PIPE_DIRECTORY={}", d.pipe_dir.display());
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) && is_mps_process(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Only MPS programs are killed by environment match: a job's own clients carry the same
/// variable and are not ours to kill here.
fn is_mps_process(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    // comm is cut at 15 bytes: "nvidia-cuda-mps" covers -control and -server.
    comm.starts_with("nvidia-cuda-mps")
}

fn kill_remaining(d: &MpsDaemon, grace: Duration) -> Vec<u32> {
    let deadline = Instant::now() + grace;
    loop {
        let pids = daemon_processes(d);
        if pids.is_empty() {
            return Vec::new();
        }
        if Instant::now() >= deadline {
            for &pid in &pids {
                log::warn!("killing MPS process {pid} of {}", d.pipe_dir.display());
                crate::sys::kill(pid, libc::SIGKILL);
            }
            return pids;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An MPS daemon of the calling user in a fresh private (0700) directory under the
/// temporary directory, for `colloc run` and `colloc bench` outside Slurm. Stopped, and its
/// directory removed, when dropped: also on errors and after a signal.
#[derive(Debug)]
pub struct PrivateDaemon {
    program: PathBuf,
    daemon: MpsDaemon,
    dir: PathBuf,
}

impl PrivateDaemon {
    /// Make `$TMPDIR/<prefix>-<pid>-<n>` and start a daemon for `devices` in it.
    ///
    /// # Errors
    /// [`MpsError`]; nothing is left running and the directory is removed.
    pub fn start(program: &Path, prefix: &str, devices: &str) -> Result<PrivateDaemon, MpsError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut n = 0u32;
        let dir = loop {
            let p = base.join(format!("{prefix}-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => break p,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(MpsError::Dir { path: p, source }),
            }
        };
        let guard = PrivateDaemon {
            program: program.to_path_buf(),
            daemon: MpsDaemon::in_dir(&dir, devices),
            dir,
        };
        start(&guard.program, &guard.daemon, None, None)?;
        log::info!("started MPS daemon ({})", guard.dir.display());
        Ok(guard)
    }

    /// The daemon's directories and the environment its clients need.
    pub fn daemon(&self) -> &MpsDaemon {
        &self.daemon
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        let r = stop(
            &self.program,
            &self.daemon,
            Some(&self.dir),
            None,
            Duration::from_secs(5),
        );
        if r.killed.is_empty() {
            log::info!("stopped MPS daemon in {}", self.dir.display());
        } else {
            log::warn!("MPS daemon did not quit; killed {:?}", r.killed);
        }
    }
}

/// Client limits for `mps:N`: each client gets floor(100/N) % of the SMs and 1/N of each
/// GPU's memory (`memory_mib`, in the client's device order).
pub fn client_limits(clients: u32, memory_mib: &[u64]) -> Vec<(String, String)> {
    let n = u64::from(clients.max(1));
    let limits: Vec<String> = memory_mib
        .iter()
        .enumerate()
        .map(|(i, m)| format!("{i}={}M", m / n))
        .collect();
    let mut env = vec![(
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
        (100 / n).to_string(),
    )];
    if !limits.is_empty() {
        env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), limits.join(",")));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(
            client_limits(4, &[40960]),
            vec![
                (
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
                    "25".to_string()
                ),
                (
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                    "0=10240M".to_string()
                ),
            ]
        );
        assert_eq!(client_limits(3, &[])[0].1, "33");
        assert_eq!(client_limits(2, &[100, 200])[1].1, "0=50M,1=100M");
    }

    #[test]
    fn server_list_parsing() {
        assert_eq!(
            parse_server_list("1234\n 5678 \n\nnot a pid\n"),
            vec![1234, 5678]
        );
        assert!(parse_server_list("").is_empty());
    }

    #[test]
    fn start_and_stop_with_a_shell_stand_in() {
        let tmp = tempfile::tempdir().unwrap();
        // A stand-in control program: `-d` fails, so start must report it and leave
        // nothing behind.
        let prog = tmp.path().join("ctl");
        std::fs::write(&prog, "#!/bin/sh\necho 'no GPU' >&2\nexit 3\n").unwrap();
        std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let d = MpsDaemon::in_dir(&tmp.path().join("job"), "GPU-x");
        let err = start(&prog, &d, None, None).unwrap_err().to_string();
        assert!(err.contains("-d failed"), "{err}");
        assert!(err.contains("no GPU"), "{err}");
        let report = stop(&prog, &d, None, None, Duration::ZERO);
        assert!(!report.quit_ok);
        assert!(!d.pipe_dir.exists());
    }
}
