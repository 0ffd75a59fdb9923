//! The `[mig]` table of `colloc.toml`: how long colloc waits for and retries the driver,
//! the hooks it runs around a reconfiguration, and where the MIG device files live.
//! Every key has a default that fits a production node; tests point the paths elsewhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The largest value `retry_s` and `listing_wait_s` may take.
pub const MAX_WAIT_S: u64 = 60;
/// The largest value `apply_budget_s` may take.
pub const MAX_APPLY_BUDGET_S: u64 = 120;
/// The most `apply_budget_s` and both hooks (`2 * hook_timeout_s`) may add up to: with
/// the undo ([`crate::reconfig::MIG_RESTORE_BUDGET`], 15 s) and the node record (5 s) the
/// MIG part of a prolog stays at 200 s, inside the advised `PrologEpilogTimeout` (300 s).
pub const MAX_PROLOG_MIG_S: u64 = 180;
/// The largest value `hook_timeout_s` may take.
pub const MAX_HOOK_TIMEOUT_S: u64 = 60;

/// `[mig]` in colloc.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigConfig {
    /// How long transient driver answers to one create, destroy or MIG mode change are
    /// retried (INSUFFICIENT_RESOURCES, IN_USE, UNKNOWN), seconds.
    #[serde(default = "default_retry_s")]
    pub retry_s: u64,
    /// How long a new MIG device may take to be listed by the driver, seconds.
    #[serde(default = "default_listing_wait_s")]
    pub listing_wait_s: u64,
    /// The whole MIG part of a prolog (creates, retries, listing waits), seconds: past it
    /// the job is refused and what was made is undone.
    #[serde(default = "default_apply_budget_s")]
    pub apply_budget_s: u64,
    /// Run before a reconfiguration: a root-owned program and its arguments (no shell).
    #[serde(default)]
    pub pre_hook: Vec<String>,
    /// Run after a reconfiguration, also one that failed.
    #[serde(default)]
    pub post_hook: Vec<String>,
    /// Each hook is killed after this many seconds.
    #[serde(default = "default_hook_timeout_s")]
    pub hook_timeout_s: u64,
    /// Drain the node (scontrol) when a GPU cannot be brought back and the node's plain
    /// jobs would get a broken GPU.
    #[serde(default = "default_true")]
    pub drain_broken: bool,
    /// Where the MIG capability device files are (`nvidia-capN`).
    #[serde(default = "default_caps_dev_dir")]
    pub caps_dev_dir: PathBuf,
    /// The driver's capabilities tree (`gpuG/mig/giI/access`, `.../ciC/access`).
    #[serde(default = "default_caps_proc_dir")]
    pub caps_proc_dir: PathBuf,
    /// The driver's table of capability minors.
    #[serde(default = "default_mig_minors")]
    pub mig_minors: PathBuf,
    /// The kernel's device majors (the `nvidia-caps` line).
    #[serde(default = "default_proc_devices")]
    pub proc_devices: PathBuf,
    /// The program that creates capability device files (`nvidia-modprobe -f ACCESS`):
    /// a path, or a bare name looked up in the system directories. Where it is not
    /// installed colloc makes the files itself.
    #[serde(default = "default_nvidia_modprobe")]
    pub nvidia_modprobe: String,
}

fn default_true() -> bool {
    true
}
fn default_retry_s() -> u64 {
    10
}
fn default_listing_wait_s() -> u64 {
    10
}
fn default_apply_budget_s() -> u64 {
    60
}
fn default_hook_timeout_s() -> u64 {
    30
}
fn default_caps_dev_dir() -> PathBuf {
    PathBuf::from("/dev/nvidia-caps")
}
fn default_caps_proc_dir() -> PathBuf {
    PathBuf::from("/proc/driver/nvidia/capabilities")
}
fn default_mig_minors() -> PathBuf {
    PathBuf::from("/proc/driver/nvidia-caps/mig-minors")
}
fn default_proc_devices() -> PathBuf {
    PathBuf::from("/proc/devices")
}
fn default_nvidia_modprobe() -> String {
    "nvidia-modprobe".into()
}

impl Default for MigConfig {
    fn default() -> Self {
        MigConfig {
            retry_s: default_retry_s(),
            listing_wait_s: default_listing_wait_s(),
            apply_budget_s: default_apply_budget_s(),
            pre_hook: Vec::new(),
            post_hook: Vec::new(),
            hook_timeout_s: default_hook_timeout_s(),
            drain_broken: true,
            caps_dev_dir: default_caps_dev_dir(),
            caps_proc_dir: default_caps_proc_dir(),
            mig_minors: default_mig_minors(),
            proc_devices: default_proc_devices(),
            nvidia_modprobe: default_nvidia_modprobe(),
        }
    }
}

impl MigConfig {
    /// How long transient answers are retried.
    pub fn retry(&self) -> Duration {
        Duration::from_secs(self.retry_s)
    }
    /// How long a new MIG device may take to be listed.
    pub fn listing_wait(&self) -> Duration {
        Duration::from_secs(self.listing_wait_s)
    }
    /// The MIG part of a prolog.
    pub fn apply_budget(&self) -> Duration {
        Duration::from_secs(self.apply_budget_s)
    }
    /// Each hook's time.
    pub fn hook_timeout(&self) -> Duration {
        Duration::from_secs(self.hook_timeout_s)
    }

    /// What is wrong with the values, in one line naming the key and what is valid.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), String> {
        for (key, v, max) in [
            ("mig.retry_s", self.retry_s, MAX_WAIT_S),
            ("mig.listing_wait_s", self.listing_wait_s, MAX_WAIT_S),
            (
                "mig.apply_budget_s",
                self.apply_budget_s,
                MAX_APPLY_BUDGET_S,
            ),
            (
                "mig.hook_timeout_s",
                self.hook_timeout_s,
                MAX_HOOK_TIMEOUT_S,
            ),
        ] {
            if v == 0 || v > max {
                return Err(format!("{key} = {v}: give whole seconds from 1 to {max}"));
            }
        }
        for (key, v) in [
            ("mig.retry_s", self.retry_s),
            ("mig.listing_wait_s", self.listing_wait_s),
        ] {
            if v > self.apply_budget_s {
                return Err(format!(
                    "{key} = {v} is longer than mig.apply_budget_s = {}; keep it within the budget",
                    self.apply_budget_s
                ));
            }
        }
        let sum = self.apply_budget_s + 2 * self.hook_timeout_s;
        if sum > MAX_PROLOG_MIG_S {
            return Err(format!(
                "mig.apply_budget_s + 2 * mig.hook_timeout_s = {sum} s: keep it at most \
                 {MAX_PROLOG_MIG_S} s, so that a prolog stays inside PrologEpilogTimeout"
            ));
        }
        for (key, hook) in [
            ("mig.pre_hook", &self.pre_hook),
            ("mig.post_hook", &self.post_hook),
        ] {
            if let Some(program) = hook.first() {
                if !Path::new(program).is_absolute() {
                    return Err(format!(
                        "{key}: the program must be an absolute path (no shell, no PATH), got {}",
                        crate::mode::show_input(program)
                    ));
                }
            }
            if hook.iter().any(|a| a.contains('\0')) {
                return Err(format!("{key}: an argument contains a NUL character"));
            }
        }
        for (key, dir) in [
            ("mig.caps_dev_dir", &self.caps_dev_dir),
            ("mig.caps_proc_dir", &self.caps_proc_dir),
            ("mig.mig_minors", &self.mig_minors),
            ("mig.proc_devices", &self.proc_devices),
        ] {
            if !dir.is_absolute() {
                return Err(format!(
                    "{key} must be an absolute path, got {}",
                    dir.display()
                ));
            }
        }
        if self.nvidia_modprobe.is_empty()
            || self.nvidia_modprobe.contains('\0')
            || (self.nvidia_modprobe.contains('/')
                && !Path::new(&self.nvidia_modprobe).is_absolute())
        {
            return Err(format!(
                "mig.nvidia_modprobe must be a file name such as nvidia-modprobe or an absolute \
                 path, got {}",
                crate::mode::show_input(&self.nvidia_modprobe)
            ));
        }
        Ok(())
    }

    /// Is any hook configured?
    pub fn has_hooks(&self) -> bool {
        !self.pre_hook.is_empty() || !self.post_hook.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_the_production_paths() {
        let m = MigConfig::default();
        m.validate().unwrap();
        assert_eq!(m.caps_dev_dir, Path::new("/dev/nvidia-caps"));
        assert_eq!(
            m.mig_minors,
            Path::new("/proc/driver/nvidia-caps/mig-minors")
        );
        assert_eq!(m.listing_wait(), Duration::from_secs(10));
    }

    #[test]
    fn bad_values_are_named() {
        let bad = |f: &dyn Fn(&mut MigConfig)| {
            let mut m = MigConfig::default();
            f(&mut m);
            m.validate().unwrap_err()
        };
        assert!(bad(&|m| m.retry_s = 0).contains("mig.retry_s = 0"));
        assert!(bad(&|m| m.listing_wait_s = 61).contains("from 1 to 60"));
        assert!(bad(&|m| {
            m.apply_budget_s = 5;
        })
        .contains("longer than mig.apply_budget_s"));
        assert!(bad(&|m| m.pre_hook = vec!["dcgm-hook".into()]).contains("absolute path"));
        assert!(bad(&|m| {
            m.apply_budget_s = 120;
            m.hook_timeout_s = 60;
        })
        .contains("at most 180 s"));
        assert!(bad(&|m| m.caps_dev_dir = PathBuf::from("dev")).contains("mig.caps_dev_dir"));
        assert!(bad(&|m| m.nvidia_modprobe = "bin/x".into()).contains("mig.nvidia_modprobe"));
    }
}
