//! The state file: where it is, how it is locked, read and written.
//!
//! Every call takes an exclusive `flock` on `<state>.lock`, reads the JSON, applies the
//! operation and writes the result back through a temporary file and `rename`, so that
//! concurrent processes (and a process killed half way) always see a whole state.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::state::{code, FaultAction, Ret, State};
use crate::sys;

/// Environment variable naming the state file.
pub const STATE_ENV: &str = "COLLOC_FAKE_NVML_STATE";
/// Environment variable listing the GPU models of a fresh state.
pub const GPUS_ENV: &str = "COLLOC_FAKE_NVML_GPUS";
/// State file used when `COLLOC_FAKE_NVML_STATE` is unset.
pub const DEFAULT_STATE: &str = "/run/colloc-fake-nvml/state.json";

/// Errors of the state file, one line each.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The state file path from the environment.
pub fn state_path() -> PathBuf {
    match std::env::var_os(STATE_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_STATE),
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Microseconds since the Unix epoch: what a GPM sample is stamped with.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// An open, locked state file.
pub struct Locked {
    path: PathBuf,
    _lock: File,
}

impl Locked {
    /// Lock the state file at `path`, creating its folder.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn open(path: &Path) -> Result<Locked, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let lp = lock_path(path);
        // An unprivileged caller (`colloc status` run by a user) may only read the lock
        // file root made; flock works on a read-only descriptor too.
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lp)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => File::open(&lp),
                _ => Err(e),
            })
            .map_err(|e| StoreError(format!("cannot open {}: {e}", lp.display())))?;
        sys::lock_exclusive(&lock)
            .map_err(|e| StoreError(format!("cannot lock {}: {e}", lp.display())))?;
        Ok(Locked {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// Read the state; a missing file gives a fresh one from `COLLOC_FAKE_NVML_GPUS`.
    /// Returns the state and whether it is new (not yet on disk).
    ///
    /// # Errors
    /// Unreadable or invalid JSON, unknown model names.
    pub fn read(&self) -> Result<(State, bool), StoreError> {
        match fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map(|s| (s, false))
                .map_err(|e| {
                    StoreError(format!("bad fake NVML state {}: {e}", self.path.display()))
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let list = std::env::var(GPUS_ENV).unwrap_or_default();
                State::fresh_from_list(&list, now_ms())
                    .map(|s| (s, true))
                    .map_err(|e| StoreError(format!("{GPUS_ENV}: {e}")))
            }
            Err(e) => Err(StoreError(format!(
                "cannot read {}: {e}",
                self.path.display()
            ))),
        }
    }

    /// Write the state atomically.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn write(&self, state: &State) -> Result<(), StoreError> {
        let text = serde_json::to_string_pretty(state)
            .map_err(|e| StoreError(format!("cannot encode state: {e}")))?;
        let mut tmp_name = self.path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp.{}", std::process::id()));
        let tmp = self.path.with_file_name(tmp_name);
        let result = File::create(&tmp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())
                    .and_then(|()| f.write_all(b"\n"))
            })
            .and_then(|()| fs::rename(&tmp, &self.path));
        result.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StoreError(format!("cannot write {}: {e}", self.path.display()))
        })?;
        // What the kernel module publishes follows the instances (under the lock).
        crate::caps::sync(&self.path, state).map_err(|e| {
            StoreError(format!(
                "cannot publish the capability files beside {}: {e}",
                self.path.display()
            ))
        })
    }
}

/// Run one NVML call against the state: lock, read, count the call against its fault,
/// apply `op`, write back what changed. An injected fault answers instead of `op`
/// (and `crash` kills the process once the state is saved).
pub fn nvml_call<T>(
    function: &str,
    op: impl FnOnce(&mut State) -> Result<T, Ret>,
) -> Result<T, Ret> {
    let mut stall = false;
    let mut op = Some(op);
    let result = (|| {
        let locked = Locked::open(&state_path())?;
        let (mut state, new) = locked.read()?;
        let (counted, fault) = state.count_call(function, std::process::id());
        if let Some(action) = fault {
            if action == FaultAction::Stall {
                state.stalled = true;
            }
            locked.write(&state)?;
            return Ok(match action {
                FaultAction::Crash => {
                    drop(locked);
                    sys::kill_self()
                }
                FaultAction::Stall => {
                    stall = true;
                    Err(code::UNKNOWN)
                }
                FaultAction::Fail(c) => Err(c),
            });
        }
        let before = state.clone();
        let Some(op) = op.take() else {
            return Ok(Err(code::UNKNOWN));
        };
        let out = op(&mut state);
        // A refusal can change the driver too (a holder counting down, a GPU instance
        // busy one call less): keep what changed either way. Operations change nothing
        // before they know they succeed, unless such a count is the point.
        if state != before || counted || new {
            locked.write(&state)?;
        }
        Ok(out)
    })();
    if let (true, Some(op)) = (stall, op) {
        wait_for_go();
        return nvml_call(function, op);
    }
    match result {
        Ok(out) => out,
        Err(StoreError(msg)) => {
            eprintln!("fake-nvml: {function}: {msg}");
            Err(code::UNKNOWN)
        }
    }
}

/// The longest a `stall` fault holds its caller.
const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Wait (lock released) until the stall is let go, or [`STALL_LIMIT`].
fn wait_for_go() {
    let until = std::time::Instant::now() + STALL_LIMIT;
    while std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let stalled = Locked::open(&state_path())
            .and_then(|l| l.read())
            .is_ok_and(|(st, _)| st.stalled);
        if !stalled {
            return;
        }
    }
}

/// Run a change from the control tool under the lock (no fault counting).
///
/// # Errors
/// State-file errors, or the operation's own message.
pub fn ctl_change<T>(
    path: &Path,
    op: impl FnOnce(&mut State) -> Result<T, String>,
) -> Result<T, String> {
    let locked = Locked::open(path).map_err(|e| e.0)?;
    let (mut state, new) = locked.read().map_err(|e| e.0)?;
    let before = state.clone();
    let out = op(&mut state)?;
    if state != before || new {
        locked.write(&state).map_err(|e| e.0)?;
    }
    Ok(out)
}
