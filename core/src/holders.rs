//! Who has NVIDIA device files open: the processes that may hold a GPU or its MIG
//! instances without NVML listing them as compute processes (nv-hostengine and
//! dcgm-exporter of DCGM, nvidia-persistenced, a process with a leftover NVML handle).
//! `colloc status` names them next to a GPU a restore left marked. Root sees every
//! process; a user only their own.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A process with matching files open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUser {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub name: String,
    /// The matching paths it has open, sorted, without duplicates.
    pub devices: Vec<String>,
}

/// Processes under `proc_root` (a `/proc`) with an open file whose path `matches`,
/// sorted by pid. This process is left out; unreadable processes are skipped.
pub fn device_users(proc_root: &Path, matches: impl Fn(&str) -> bool) -> Vec<DeviceUser> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out: Vec<DeviceUser> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let dir = proc_root.join(pid.to_string());
            let mut devices: Vec<String> = std::fs::read_dir(dir.join("fd"))
                .ok()?
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|p| p.to_str().map(str::to_string))
                .filter(|p| matches(p))
                .collect();
            if devices.is_empty() {
                return None;
            }
            devices.sort();
            devices.dedup();
            let name = std::fs::read_to_string(dir.join("comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            Some(DeviceUser { pid, name, devices })
        })
        .collect();
    out.sort_by_key(|u| u.pid);
    out
}

/// Processes of this node with an NVIDIA device open (`/dev/nvidia*`, including the MIG
/// capability files under `/dev/nvidia-caps/`).
pub fn nvidia_device_users() -> Vec<DeviceUser> {
    device_users(Path::new("/proc"), |p| p.starts_with("/dev/nvidia"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn finds_a_process_by_the_file_it_holds_open() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("nvidia-caps-stand-in");
        std::fs::write(&dev, b"").unwrap();
        // A stand-in for nv-hostengine: a process that holds the file open.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1\"; exec sleep 30")
            .arg("sh")
            .arg(&dev)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let want = dev.to_str().unwrap().to_string();
        let mut found = Vec::new();
        for _ in 0..100 {
            found = device_users(Path::new("/proc"), |p| p == want);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id());
        assert_eq!(found[0].name, "sleep");
        assert_eq!(found[0].devices, [want]);
        assert!(device_users(Path::new("/nonexistent"), |_| true).is_empty());
    }
}
