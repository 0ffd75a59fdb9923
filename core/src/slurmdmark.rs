//! Which running slurmd has loaded colloc's plugin (issue 34).
//!
//! slurmd decides once, when it starts, whether any SPANK plugin has a prolog or an
//! epilog; a plugstack line added to a running slurmd reaches sbatch and slurmstepd at
//! once, but slurmd runs no colloc prolog until it restarts. A `--colloc` job on such a
//! node finds no journal in `task_init_privileged`. To tell that apart from a real
//! `state_dir` problem, the plugin's `init` in slurmd (no threads, no NVML: a file made)
//! leaves a marker named for that slurmd in `state_dir/slurmd/`: boot id, pid and the
//! process's start time (field 22 of `/proc/PID/stat`), so neither a reused pid nor a
//! reboot can pass for the slurmd that wrote it. Markers of slurmds that are gone are
//! removed when the next one is written.

use std::path::Path;

use crate::fs::FsError;
use crate::statedir;
use crate::sys::ProcStat;

/// The directory in `state_dir` that holds one marker per slurmd that loaded colloc.
pub use crate::statedir::SLURMD_DIR;

/// A process as a marker names it: pid and start time (clock ticks after boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStart {
    /// Its pid.
    pub pid: u32,
    /// Field 22 (`starttime`) of its `/proc/PID/stat`.
    pub start: u64,
}

impl ProcessStart {
    /// Process `pid` now; `None` when it does not run (or `/proc` does not say).
    pub fn of(pid: u32) -> Option<ProcessStart> {
        Some(ProcessStart {
            pid,
            start: ProcStat::of(pid)?.start_time()?,
        })
    }

    /// The marker's file name for this process in this boot.
    fn marker(self, boot: &str) -> String {
        format!("{boot}.{}.{}", self.pid, self.start)
    }
}

/// Whether the slurmd that runs this node's jobs loaded colloc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmdLoaded {
    /// It left its marker: it runs colloc's prolog and epilog.
    Yes,
    /// It runs and left no marker: it started before colloc's plugstack line was added.
    No {
        /// Its pid.
        pid: u32,
    },
    /// It could not be told (no pid file, no such process, no boot id).
    Unknown,
}

/// This boot's id, a name part for markers (`_` where the kernel does not tell).
fn boot() -> String {
    crate::journal::boot_id().unwrap_or_else(|| "_".to_string())
}

/// Record that the calling process (slurmd, in `slurm_spank_init`) loaded colloc, and
/// remove the markers of slurmds that no longer run. Makes `state_dir` and its `slurmd`
/// directory (root's, 0700) where they are missing.
///
/// # Errors
/// [`FsError`]: `state_dir` is not safe, or cannot be made or written.
pub fn record_this_slurmd(state_dir: &Path) -> Result<(), FsError> {
    let Some(me) = ProcessStart::of(std::process::id()) else {
        return Ok(());
    };
    let Some(dir) = statedir::sub_dir(state_dir, SLURMD_DIR, true)? else {
        return Ok(());
    };
    let boot = boot();
    for (name, _) in dir.entries()? {
        let Some(name) = name.to_str() else { continue };
        if !marker_alive(name, &boot) {
            let _ = dir.unlink(name);
        }
    }
    dir.write_file(&me.marker(&boot), b"")
}

/// Whether marker `name` names a process of this boot that still runs with its start time.
fn marker_alive(name: &str, boot: &str) -> bool {
    let mut parts = name.rsplitn(3, '.');
    let (Some(start), Some(pid), Some(b)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(start), Ok(pid)) = (start.parse::<u64>(), pid.parse::<u32>()) else {
        return false;
    };
    b == boot && ProcessStart::of(pid).is_some_and(|p| p.start == start)
}

/// Whether the slurmd with pid `pid` (from its pid file) left its marker in `state_dir`.
pub fn slurmd_loaded(state_dir: &Path, pid: u32) -> SlurmdLoaded {
    let Some(p) = ProcessStart::of(pid) else {
        return SlurmdLoaded::Unknown;
    };
    match statedir::sub_dir(state_dir, SLURMD_DIR, false) {
        Ok(Some(dir)) => match dir.lstat(&p.marker(&boot())) {
            Ok(Some(_)) => SlurmdLoaded::Yes,
            Ok(None) => SlurmdLoaded::No { pid },
            Err(_) => SlurmdLoaded::Unknown,
        },
        // No marker directory at all: state_dir was made anew since (an admin's tmpfs, a
        // wiped disk) or by no install step (`check-config --fix` makes it): no marker
        // says nothing then.
        Ok(None) => SlurmdLoaded::Unknown,
        Err(_) => SlurmdLoaded::Unknown,
    }
}

/// The pid in a slurmd pid file's text (a number, optionally followed by a newline).
pub fn parse_pid_file(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|&p| p > 0)
}

/// The pid of this node's slurmd, from its pid file (`SlurmdPidFile` with `%n` and `%h`
/// filled in); `None` where it cannot be read.
pub fn slurmd_pid(pid_file: &Path) -> Option<u32> {
    let f = crate::fs::open_trusted_file(pid_file).ok()?;
    let bytes = crate::fs::read_file_capped(f, pid_file, 64).ok()?;
    parse_pid_file(&String::from_utf8_lossy(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_start_is_its_start_time() {
        let own = ProcessStart::of(std::process::id()).unwrap();
        assert!(own.start > 0);
        assert_eq!(ProcessStart::of(0), None);
    }

    #[test]
    fn pid_files() {
        assert_eq!(parse_pid_file("1234\n"), Some(1234));
        assert_eq!(parse_pid_file("0\n"), None);
        assert_eq!(parse_pid_file("x"), None);
    }

    #[test]
    fn a_marker_names_only_the_process_that_wrote_it() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let me = std::process::id();
        // No marker directory at all (a state_dir made anew, e.g. a tmpfs mounted over
        // it since slurmd started): no marker proves nothing.
        assert_eq!(slurmd_loaded(&state, me), SlurmdLoaded::Unknown);
        // A marker of a process that is gone, and one of another boot.
        std::fs::create_dir_all(state.join(SLURMD_DIR)).unwrap();
        let dead = state.join(SLURMD_DIR).join(format!("{}.999999.1", boot()));
        let other_boot = state.join(SLURMD_DIR).join(format!("x.{me}.1"));
        std::fs::write(&dead, "").unwrap();
        std::fs::write(&other_boot, "").unwrap();
        assert_eq!(slurmd_loaded(&state, me), SlurmdLoaded::No { pid: me });
        record_this_slurmd(&state).unwrap();
        assert_eq!(slurmd_loaded(&state, me), SlurmdLoaded::Yes);
        assert!(!dead.exists() && !other_boot.exists(), "stale markers kept");
        // A pid that does not run cannot be told.
        assert_eq!(slurmd_loaded(&state, 999_999), SlurmdLoaded::Unknown);
    }
}
