//! MPS control daemons with private pipe and log directories: one per GPU and job in the
//! prolog (run as the job's user), one per `colloc run` / `colloc bench` outside Slurm.
//!
//! The daemon is started with `nvidia-cuda-mps-control -d` and stopped with `quit` on the
//! control program's stdin, both with `CUDA_MPS_PIPE_DIRECTORY`/`CUDA_MPS_LOG_DIRECTORY`
//! set. Whatever is still running afterwards is found by that environment variable in
//! `/proc/<pid>/environ` and killed, so a daemon never outlives its job.
//!
//! Everything the control program and the daemon do runs as the job's user, who can stop,
//! trace or replace them: every wait on them has a deadline, their output is read from an
//! anonymous memory file with a size limit (root opens nothing in the user's
//! directories), and only processes running wholly as that user are killed, through a
//! pidfd, so a pid reused by someone else's process is never hit.

use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::container::Entry;
use crate::jobenv;
use crate::sys::{ChildEnd, PidHandle};

/// How long one job's daemons together may take to start (the prolog's share).
pub const START_TIME: Duration = Duration::from_secs(20);
/// How long the daemons of a job get to answer `quit` and exit, all at once.
pub const QUIT_TIME: Duration = Duration::from_secs(10);
/// How long processes killed after that get to disappear.
pub const KILL_TIME: Duration = Duration::from_secs(5);
/// Most bytes of the control program's output colloc reads.
const OUTPUT_LIMIT: u64 = 4096;
/// Most bytes of a process's environment read when looking for daemons.
const ENVIRON_LIMIT: u64 = 1 << 20;

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
    #[error("{program} {what} did not answer: stopped after waiting {secs:.1} s")]
    Timeout {
        /// The program.
        program: PathBuf,
        /// What was asked.
        what: String,
        /// How long it was waited for (from its start to the deadline).
        secs: f64,
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

/// Where a job's MPS daemons are started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MpsStart {
    /// By the prolog (or `colloc apply`), in its own mount namespace and cgroup.
    #[default]
    Prolog,
    /// By the job's extern step (`PrologFlags=Contain`), inside the job's container and
    /// its extern step's cgroup, after the prolog and before the first task.
    ExternStep,
}

impl MpsStart {
    /// Is it the prolog (the default, left out of journals)?
    pub fn is_prolog(&self) -> bool {
        *self == MpsStart::Prolog
    }
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
                jobenv::MPS_PIPE_DIRECTORY.into(),
                self.pipe_dir.display().to_string(),
            ),
            (
                jobenv::MPS_LOG_DIRECTORY.into(),
                self.log_dir.display().to_string(),
            ),
        ]
    }
}

/// Who the daemon runs as: `None` for the calling user.
pub type AsUser = Option<(u32, u32)>;

/// Variables of colloc's own environment passed on to the control program: where the
/// driver's libraries are, and the fake NVML's state for tests. The prolog's environment
/// is slurmd's and `colloc apply`'s is the admin's: neither comes from a job. A user's
/// `CUDA_*`, `LD_PRELOAD` and the like never reach the daemon.
const PASSED_ON: &[&str] = &["LD_LIBRARY_PATH", "HOME", "COLLOC_FAKE_NVML_STATE"];

/// The control program's whole environment: `PATH`, the daemon's variables and
/// [`PASSED_ON`] from ours.
fn control_env(d: &MpsDaemon) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
        (
            "PATH".into(),
            "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin".into(),
        ),
        (jobenv::VISIBLE.into(), d.devices.clone().into()),
    ];
    env.extend(d.env().into_iter().map(|(k, v)| (k.into(), v.into())));
    for key in PASSED_ON {
        if let Some(v) = std::env::var_os(key) {
            env.push(((*key).into(), v));
        }
    }
    env
}

/// An anonymous file in memory: the control program's stdin, stdout and stderr. A daemon
/// keeps its stdout and stderr open, so pipes would never reach end of file; a memory
/// file lives in no directory a user can touch.
fn memory_file(name: &std::ffi::CStr) -> std::io::Result<std::fs::File> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(std::fs::File::from(fd))
}

/// What the control program wrote, up to [`OUTPUT_LIMIT`] bytes. Read at offset 0 without
/// moving the file offset, which a daemon still holding the file shares.
fn written(f: &std::fs::File) -> String {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0u8; OUTPUT_LIMIT as usize];
    let mut len = 0;
    while len < bytes.len() {
        match f.read_at(&mut bytes[len..], len as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    bytes.truncate(len);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Run the control program with `args` and `input` on stdin, until `deadline`; return its
/// stdout.
fn control(
    program: &Path,
    d: &MpsDaemon,
    as_user: AsUser,
    entry: Option<&Entry>,
    args: &[&str],
    input: &str,
    deadline: Instant,
) -> Result<String, MpsError> {
    let what = if input.is_empty() {
        args.join(" ")
    } else {
        input.trim().to_string()
    };
    let spawn_err = |source| MpsError::Spawn {
        program: program.to_path_buf(),
        source,
    };
    let mut stdin = memory_file(c"colloc-mps-in").map_err(spawn_err)?;
    stdin
        .write_all(input.as_bytes())
        .and_then(|()| stdin.seek(std::io::SeekFrom::Start(0)).map(|_| ()))
        .map_err(spawn_err)?;
    let out = memory_file(c"colloc-mps-out").map_err(spawn_err)?;
    let err = memory_file(c"colloc-mps-err").map_err(spawn_err)?;
    let env = control_env(d);
    let plan = crate::sys::ExecPlan::new(
        program,
        args,
        env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())),
    )
    .map_err(spawn_err)?;
    // Into the job's namespace and cgroup first (as root), then the user. With an entry
    // and no user, the caller's own ids (a daemon of root's, for `colloc apply`).
    let ids = match (entry, as_user) {
        (Some(_), None) => Some((crate::sys::euid(), crate::sys::gid())),
        (_, ids) => ids,
    };
    let place = crate::sys::Placement {
        // Only `-d` leaves something running, the daemon; after anything else nothing of
        // the user's program may stay behind (it runs outside the job's cgroup and mount
        // namespace, and the user can trace it once it has exec'd and make it fork). Run
        // as the caller (`colloc run`'s own daemon, root's `colloc apply`) there is no
        // other user to contain, and the program stays where the caller's children are
        // reaped.
        contained: as_user.is_some() && args != ["-d"],
        ns: entry.and_then(|e| e.ns.as_ref()).map(AsFd::as_fd),
        procs: entry.and_then(|e| e.step_procs.as_ref()).map(AsFd::as_fd),
        ids,
    };
    let started = Instant::now();
    // Spawned without waiting for its exec (the user can stop the child before it), so
    // the deadline holds from the fork on.
    let pid = crate::sys::spawn(&plan, [stdin.as_fd(), out.as_fd(), err.as_fd()], place)
        .map_err(spawn_err)?;
    let status = match crate::sys::wait_child(pid, deadline).map_err(spawn_err)? {
        ChildEnd::Exited(0) => None,
        ChildEnd::Exited(code) => Some(format!("exit status: {code}")),
        ChildEnd::Signaled(sig) => Some(format!("signal: {sig}")),
        ChildEnd::Lost => Some("reaped by another part of the process".into()),
        ChildEnd::TimedOut => {
            return Err(MpsError::Timeout {
                program: program.to_path_buf(),
                what,
                secs: started.elapsed().as_secs_f64(),
            })
        }
    };
    if let Some(status) = status {
        return Err(MpsError::Failed {
            program: program.to_path_buf(),
            what,
            status,
            // The user's words, bound for slurmd's log and the job's refusal: one line,
            // its control characters written as escapes.
            stderr: crate::text::escape(&written(&err).trim().replace('\n', " ")).into_owned(),
        });
    }
    Ok(written(&out))
}

/// Start the daemon of `d` (its directories must exist and belong to `as_user`), waiting
/// for the control program until `deadline`.
///
/// # Errors
/// [`MpsError`] when the control program fails or does not answer in time; whatever it
/// started is killed then.
pub fn start_daemon(
    program: &Path,
    d: &MpsDaemon,
    as_user: AsUser,
    deadline: Instant,
) -> Result<(), MpsError> {
    start_daemon_in(program, d, as_user, None, deadline)
}

/// [`start_daemon`], the control program (and so the daemon it forks) first put where
/// `entry` says: the job's mount namespace and the extern step's cgroup (see
/// [`crate::container`]), then made the user.
///
/// # Errors
/// As [`start_daemon`].
pub fn start_daemon_in(
    program: &Path,
    d: &MpsDaemon,
    as_user: AsUser,
    entry: Option<&Entry>,
    deadline: Instant,
) -> Result<(), MpsError> {
    if let Err(e) = control(program, d, as_user, entry, &["-d"], "", deadline) {
        let uid = as_user.map_or_else(crate::sys::euid, |(u, _)| u);
        kill_daemon(d, uid, Instant::now() + KILL_TIME);
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
/// [`MpsError`] when the control program fails (e.g. no daemon runs) or takes over
/// [`QUIT_TIME`].
pub fn server_list(program: &Path, d: &MpsDaemon, as_user: AsUser) -> Result<Vec<u32>, MpsError> {
    let deadline = Instant::now() + QUIT_TIME;
    let out = control(
        program,
        d,
        as_user,
        None,
        &[],
        "get_server_list\n",
        deadline,
    )?;
    Ok(parse_server_list(&out))
}

/// Parse `get_server_list` output: one pid per line.
pub fn parse_server_list(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// What [`stop_daemon`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// The daemon answered `quit`.
    pub quit_ok: bool,
    /// Processes that had to be killed afterwards.
    pub killed: Vec<u32>,
    /// Processes still there after SIGKILL and [`KILL_TIME`] (stuck in the kernel).
    pub survived: Vec<u32>,
}

/// Stop a daemon: `quit` (through `program`; without one, straight to the kill) and wait
/// for its processes to end until `quit_deadline`, then kill what remains and wait for it
/// until `kill_deadline`. Safe to call when no daemon runs. Its directories are left to
/// the caller.
pub fn stop_daemon(
    program: Option<&Path>,
    d: &MpsDaemon,
    as_user: AsUser,
    quit_deadline: Instant,
    kill_deadline: Instant,
) -> StopReport {
    let uid = as_user.map_or_else(crate::sys::euid, |(u, _)| u);
    let mut report = StopReport::default();
    if let Some(program) = program {
        match control(program, d, as_user, None, &[], "quit\n", quit_deadline) {
            Ok(_) => report.quit_ok = true,
            Err(e) => log::debug!("MPS quit for {}: {e}", d.pipe_dir.display()),
        }
    }
    while program.is_some()
        && Instant::now() < quit_deadline
        && !daemon_processes(d, uid).is_empty()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (killed, survived) = kill_daemon(d, uid, kill_deadline);
    report.killed = killed;
    report.survived = survived;
    report
}

/// Stop the daemons of one job all at once (one thread each), so the whole stop takes
/// at most [`QUIT_TIME`] + [`KILL_TIME`] from `start` whatever the number of GPUs.
pub fn stop_all(
    program: Option<&Path>,
    daemons: &[MpsDaemon],
    as_user: AsUser,
    start: Instant,
) -> Vec<StopReport> {
    let quit_deadline = start + QUIT_TIME;
    let kill_deadline = quit_deadline + KILL_TIME;
    let stop = |d: &MpsDaemon| stop_daemon(program, d, as_user, quit_deadline, kill_deadline);
    std::thread::scope(|scope| {
        let running: Vec<_> = daemons
            .iter()
            .map(|d| {
                std::thread::Builder::new()
                    .name("colloc-mps-stop".into())
                    .spawn_scoped(scope, move || stop(d))
                    .map_err(|e| (d, e))
            })
            .collect();
        running
            .into_iter()
            .map(|r| match r {
                Ok(handle) => handle.join().unwrap_or_default(),
                // No thread to be had: stop this one here, within what is left.
                Err((d, e)) => {
                    log::warn!(
                        "no thread to stop {} ({e}); stopping it in turn",
                        d.pipe_dir.display()
                    );
                    stop(d)
                }
            })
            .collect()
    })
}

/// Processes of this daemon: named `nvidia-cuda-mps…`, running wholly as `uid` (real,
/// effective, saved and file system ids), with `CUDA_MPS_PIPE_DIRECTORY=<its pipe dir>` in
/// their environment. Each is pinned (pidfd) before it is inspected and checked to be
/// alive after, so what was read is that process's.
pub fn daemon_processes(d: &MpsDaemon, uid: u32) -> Vec<PidHandle> {
    let needle = format!("CUDA_MPS_PIPE_DIRECTORY={}", d.pipe_dir.display());
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !is_mps_process(pid) {
            continue;
        }
        let Some(handle) = PidHandle::open(pid) else {
            continue;
        };
        if !runs_wholly_as(pid, uid) || !environ_has(pid, needle.as_bytes()) {
            continue;
        }
        if handle.signal(0) {
            found.push(handle);
        }
    }
    found
}

/// Only MPS programs are killed by environment match: a job's own clients carry the same
/// variable and are not ours to kill here.
fn is_mps_process(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    // comm is cut at 15 bytes: "nvidia-cuda-mps" covers -control and -server.
    comm.trim().starts_with("nvidia-cuda-mps")
}

/// Are all four user ids of `pid` (`Uid:` in its status) `uid`? A set-uid program a user
/// started is not: root never kills a process that holds anyone else's privileges.
pub(crate) fn runs_wholly_as(pid: u32, uid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    parse_uid_line(&status).is_some_and(|ids| ids.iter().all(|&i| i == uid))
}

/// The four ids of the `Uid:` line of `/proc/<pid>/status`.
fn parse_uid_line(status: &str) -> Option<[u32; 4]> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let ids: Vec<u32> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    ids.try_into().ok()
}

fn environ_has(pid: u32, needle: &[u8]) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut env = Vec::new();
    if f.take(ENVIRON_LIMIT).read_to_end(&mut env).is_err() {
        return false;
    }
    env.split(|&b| b == 0).any(|v| v == needle)
}

/// SIGKILL the daemon's processes and wait for them to go until `deadline`. Returns the
/// killed pids and those still there at the deadline.
fn kill_daemon(d: &MpsDaemon, uid: u32, deadline: Instant) -> (Vec<u32>, Vec<u32>) {
    let procs = daemon_processes(d, uid);
    for p in &procs {
        log::warn!(
            "killing MPS process {} of {}",
            p.pid(),
            d.pipe_dir.display()
        );
        p.signal(libc::SIGKILL);
    }
    let killed: Vec<u32> = procs.iter().map(PidHandle::pid).collect();
    loop {
        let left: Vec<u32> = procs
            .iter()
            .filter(|p| !p.gone())
            .map(PidHandle::pid)
            .collect();
        if left.is_empty() || Instant::now() >= deadline {
            return (killed, left);
        }
        std::thread::sleep(Duration::from_millis(20));
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
    /// Make `<base>/<prefix>-<16 random hex digits>` ([`private_dir`]) and start a daemon
    /// for `devices` in it.
    ///
    /// # Errors
    /// [`MpsError`]; nothing is left running and the directory is removed.
    pub fn start(program: &Path, prefix: &str, devices: &str) -> Result<PrivateDaemon, MpsError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = private_dir(&private_base(), prefix)?;
        let guard = PrivateDaemon {
            program: program.to_path_buf(),
            daemon: MpsDaemon::in_dir(&dir, devices),
            dir,
        };
        for sub in [&guard.daemon.pipe_dir, &guard.daemon.log_dir] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(sub)
                .map_err(|source| MpsError::Dir {
                    path: sub.clone(),
                    source,
                })?;
        }
        start_daemon(
            &guard.program,
            &guard.daemon,
            None,
            Instant::now() + START_TIME,
        )?;
        log::info!("started MPS daemon ({})", guard.dir.display());
        Ok(guard)
    }

    /// The daemon's directories and the environment its clients need.
    pub fn daemon(&self) -> &MpsDaemon {
        &self.daemon
    }
}

/// Where a user's own MPS directories go: `$XDG_RUNTIME_DIR` where it is a directory of
/// the caller's alone (mode 0700, as logind makes it), else `$TMPDIR` (`/tmp`).
pub fn private_base() -> PathBuf {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if x.is_absolute() {
            if let Ok(m) = std::fs::symlink_metadata(&x) {
                if m.is_dir()
                    && m.uid() == crate::sys::euid()
                    && m.permissions().mode() & 0o077 == 0
                {
                    return x;
                }
            }
        }
    }
    std::env::temp_dir()
}

/// Make a fresh directory `base/<prefix>-<16 random hex digits>`, mode 0700 (issue 35:
/// a name no one else can guess and plant first, as they could `<prefix>-<pid>-<n>` in a
/// shared `/tmp`). `mkdir` never follows or reuses what is there; a name taken (by
/// chance) is replaced by another random one, at most 100 times.
///
/// # Errors
/// [`MpsError::Dir`]: it cannot be made.
pub fn private_dir(base: &Path, prefix: &str) -> Result<PathBuf, MpsError> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..100 {
        let p = base.join(format!("{prefix}-{:016x}", random_u64()));
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((p, e)),
            Err(source) => return Err(MpsError::Dir { path: p, source }),
        }
    }
    let (path, source) = last.unwrap_or_else(|| {
        (
            base.to_path_buf(),
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        )
    });
    Err(MpsError::Dir { path, source })
}

/// 64 bits no other user can predict: from the kernel (`getrandom`), else the secret
/// keys of std's hasher (themselves from the kernel).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        let quit = Instant::now() + QUIT_TIME;
        let r = stop_daemon(
            Some(&self.program),
            &self.daemon,
            None,
            quit,
            quit + KILL_TIME,
        );
        if r.killed.is_empty() {
            log::info!("stopped MPS daemon in {}", self.dir.display());
        } else {
            log::warn!("MPS daemon did not quit; killed {:?}", r.killed);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", self.dir.display());
            }
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
        jobenv::MPS_THREAD_PERCENTAGE.to_string(),
        (100 / n).to_string(),
    )];
    if !limits.is_empty() {
        env.push((jobenv::MPS_MEMORY_LIMIT.into(), limits.join(",")));
    }
    env
}

/// The MPS control program, if it is one root may run for a user: a regular file only
/// root can change (else whoever can change it runs code as every MPS job's user).
///
/// # Errors
/// Why it may not be run: not installed, or someone other than root can change it.
pub fn trusted_control(cfg: &crate::config::Config) -> Result<PathBuf, String> {
    let program = cfg.mps_control_path().ok_or_else(|| {
        format!(
            "the MPS control program {} is not installed on this node (looked in {}); \
             ask the admin",
            cfg.mps_control,
            crate::config::SYSTEM_BIN_DIRS.join(":")
        )
    })?;
    crate::fs::open_trusted_file(&program)
        .map(|_| program)
        .map_err(|e| format!("the MPS control program: {e}"))
}

#[cfg(test)]
mod tests;
