//! Who has NVIDIA device files open: the processes that may hold a GPU or its MIG
//! instances without NVML listing them as compute processes (nv-hostengine and
//! dcgm-exporter of DCGM, nvidia-persistenced, a process with a leftover NVML handle, a
//! job's leftover). `colloc status` names them next to a GPU a restore left marked, a
//! drain reason names them, and a restore kills the job's own (SECURITY.md, rule 12).
//! Root sees every process; a user only their own.
//!
//! A descriptor is matched by what it is, not by what its link says: each
//! `/proc/PID/fd/N` is stat'ed through the link and its device number (`st_rdev`) is
//! compared with those of the device files looked for. The link's text can be anything a
//! process makes it (a file named `/tmp/dev/nvidia-caps/nvidia-cap12`) and differs for the
//! same device inside another mount namespace (a job container's private `/dev`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::PidHandle;

/// A process with matching files open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUser {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`), as the process set it: escape it before
    /// showing it ([`crate::text::escape`]).
    pub name: String,
    /// The matching device files it has open, by the paths colloc knows them by (not the
    /// process's link text), sorted, without duplicates.
    pub devices: Vec<String>,
}

/// What an open file is, as the kernel says: a character device by its device number,
/// any other file by its file system and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileId {
    /// A character device (`st_rdev`): the same device under any path or mount namespace.
    Device(u64),
    /// Any other file (`st_dev`, `st_ino`).
    Inode(u64, u64),
}

impl FileId {
    fn of(st: &rustix::fs::Stat) -> FileId {
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice
        {
            FileId::Device(st.st_rdev)
        } else {
            FileId::Inode(st.st_dev, st.st_ino)
        }
    }

    /// The file at `path` (links followed, as `/proc/PID/fd/N` must be); `None` when it
    /// cannot be stat'ed.
    pub fn of_path(path: &Path) -> Option<FileId> {
        rustix::fs::stat(path).ok().map(|st| FileId::of(&st))
    }
}

/// The files looked for, each with the path colloc knows it by.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Wanted(BTreeMap<FileId, String>);

impl Wanted {
    /// The files at `paths` that exist (those that do not are left out).
    pub fn from_paths<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Wanted {
        let mut w = BTreeMap::new();
        for p in paths {
            let p = p.as_ref();
            if let Some(id) = FileId::of_path(p) {
                w.entry(id).or_insert_with(|| p.display().to_string());
            }
        }
        Wanted(w)
    }

    /// Nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The path of the file `id`, if it is looked for.
    fn get(&self, id: FileId) -> Option<&String> {
        self.0.get(&id)
    }
}

/// The wanted files process `pid` (under `proc_root`) has open, sorted, without
/// duplicates; `None` when its descriptors cannot be read.
fn open_files(proc_root: &Path, pid: u32, wanted: &Wanted) -> Option<Vec<String>> {
    let fds = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")).ok()?;
    let mut devices: Vec<String> = fds
        .flatten()
        .filter_map(|fd| FileId::of_path(&fd.path()))
        .filter_map(|id| wanted.get(id).cloned())
        .collect();
    devices.sort();
    devices.dedup();
    Some(devices)
}

/// Processes under `proc_root` (a `/proc`) with one of the `wanted` files open, sorted
/// by pid. This process is left out; unreadable processes are skipped.
pub fn device_users(proc_root: &Path, wanted: &Wanted) -> Vec<DeviceUser> {
    if wanted.is_empty() {
        return Vec::new();
    }
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out: Vec<DeviceUser> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let devices = open_files(proc_root, pid, wanted)?;
            if devices.is_empty() {
                return None;
            }
            let name = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
                .map(|s| s.trim_end_matches('\n').to_string())
                .unwrap_or_default();
            Some(DeviceUser { pid, name, devices })
        })
        .collect();
    out.sort_by_key(|u| u.pid);
    out
}

/// The NVIDIA device files under `dev` (a `/dev`): `nvidia*` and `nvidia-caps/*`.
fn nvidia_files(dev: &Path) -> Vec<PathBuf> {
    let list = |dir: &Path, prefix: &str| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut files = list(dev, "nvidia");
    files.extend(list(&dev.join("nvidia-caps"), "nvidia-cap"));
    files
}

/// Processes of this node with an NVIDIA device open (`/dev/nvidia*`, including the MIG
/// capability files under `/dev/nvidia-caps/`), matched by device number.
pub fn nvidia_device_users() -> Vec<DeviceUser> {
    let wanted = Wanted::from_paths(
        nvidia_files(Path::new("/dev"))
            .into_iter()
            .filter(|p| matches!(FileId::of_path(p), Some(FileId::Device(_)))),
    );
    device_users(Path::new("/proc"), &wanted)
}

/// Is `uid` an ordinary user's: not a system account (below 1000, where DCGM,
/// nvidia-persistenced and root run) and not `nobody` (65534)?
pub fn ordinary_uid(uid: u32) -> bool {
    uid >= 1000 && uid != 65534
}

/// The most holders a drain reason or refusal names; the rest are counted.
pub const HOLDERS_NAMED: usize = 3;

/// Who holds a hold's instances, as a drain reason or refusal names them: at most
/// [`HOLDERS_NAMED`] by pid and name (escaped: a process chooses its own name), then
/// "and N more".
pub fn holder_text(holders: &[DeviceUser]) -> String {
    if holders.is_empty() {
        return "no process listed".into();
    }
    let names: Vec<String> = holders
        .iter()
        .take(HOLDERS_NAMED)
        .map(|h| format!("pid {} ({})", h.pid, crate::text::escape(&h.name)))
        .collect();
    let more = holders.len().saturating_sub(HOLDERS_NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("held by {}{tail}", names.join(", "))
}

/// The longest [`kill_job_holders`] waits for killed processes to go.
pub const HOLDER_KILL_WAIT: Duration = Duration::from_secs(5);

/// Kill the holders among `users` that are the job's leftovers: processes whose real,
/// effective, saved and file-system user ids are all `job_uid`, an ordinary user
/// ([`ordinary_uid`]). Each is pinned with a pidfd, checked (its user ids, and that it
/// still has one of the `wanted` files open, so a pid reused since the scan is never
/// hit), and killed (SIGKILL) through the pidfd. Waits for them to go until `deadline`
/// (at most [`HOLDER_KILL_WAIT`]). Returns the pids killed. Nothing else is ever killed:
/// a system daemon (DCGM, persistenced) is left to the admin's hooks and named.
pub fn kill_job_holders(
    users: &[DeviceUser],
    job_uid: u32,
    wanted: &Wanted,
    deadline: Instant,
) -> Vec<u32> {
    if !ordinary_uid(job_uid) {
        return Vec::new();
    }
    let proc_root = Path::new("/proc");
    let mut killed = Vec::new();
    for u in users {
        let Some(handle) = PidHandle::open(u.pid) else {
            continue;
        };
        let still_holds =
            || open_files(proc_root, u.pid, wanted).is_some_and(|files| !files.is_empty());
        if !crate::mps::runs_wholly_as(u.pid, job_uid) || !still_holds() {
            continue;
        }
        log::warn!(
            "killing process {} ({}) of the job's user: it holds {}",
            u.pid,
            crate::text::escape(&u.name),
            u.devices.join(", ")
        );
        if handle.signal(libc::SIGKILL) {
            killed.push(handle);
        }
    }
    let deadline = deadline.min(Instant::now() + HOLDER_KILL_WAIT);
    while Instant::now() < deadline && killed.iter().any(|p| !p.gone()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.iter().map(PidHandle::pid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A process that holds `file` open (O_PATH: a device file need not have a driver
    /// behind it), as user `uid` where given, once it has opened it.
    fn hold(file: &Path, uid: Option<u32>) -> Child {
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(
                "import os, sys, time\nfd = os.open(sys.argv[1], os.O_PATH)\n\
                 uid = int(sys.argv[2])\nif uid >= 0:\n    os.setgid(uid); os.setuid(uid)\n\
                 print('held', flush=True)\ntime.sleep(60)",
            )
            .arg(file)
            .arg(uid.map_or("-1".to_string(), |u| u.to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("python3");
        use std::io::BufRead as _;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "held");
        child
    }

    fn mknod(path: &Path, major: u32, minor: u32) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o444),
            rustix::fs::makedev(major, minor),
        )
        .unwrap();
    }

    fn user(pid: u32, name: &str) -> DeviceUser {
        DeviceUser {
            pid,
            name: name.into(),
            devices: vec![],
        }
    }

    #[test]
    fn at_most_three_holders_are_named_escaped_the_rest_counted() {
        let many: Vec<DeviceUser> = (1..=5).map(|i| user(i, "x")).collect();
        assert_eq!(
            holder_text(&many),
            "held by pid 1 (x), pid 2 (x), pid 3 (x) and 2 more"
        );
        assert_eq!(
            holder_text(&many[..3]),
            "held by pid 1 (x), pid 2 (x), pid 3 (x)"
        );
        // A process names itself: a name that would break the reason's line or a
        // terminal is written as escapes.
        let t = holder_text(&[user(7, "a\nState=RESUME\u{1b}[2J")]);
        assert_eq!(t, "held by pid 7 (a\\nState=RESUME\\u{1b}[2J)");
    }

    #[test]
    fn finds_a_process_by_the_file_it_holds_open_not_by_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("nvidia-caps-stand-in");
        std::fs::write(&dev, b"").unwrap();
        // A file of the same name elsewhere: another file, whatever its path says.
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let decoy = dir.path().join("other/nvidia-caps-stand-in");
        std::fs::write(&decoy, b"").unwrap();
        let mut child = hold(&dev, None);
        let mut decoy_holder = hold(&decoy, None);
        let wanted = Wanted::from_paths([&dev, &dir.path().join("absent")]);
        let found = device_users(Path::new("/proc"), &wanted);
        let _ = child.kill();
        let _ = decoy_holder.kill();
        let _ = child.wait();
        let _ = decoy_holder.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id());
        assert!(found[0].name.starts_with("python"), "{found:?}");
        assert_eq!(found[0].devices, [dev.display().to_string()]);
        assert!(device_users(Path::new("/nonexistent"), &wanted).is_empty());
        assert!(device_users(Path::new("/proc"), &Wanted::default()).is_empty());
    }

    #[test]
    fn a_device_is_matched_by_its_number_under_any_path() {
        if crate::sys::euid() != 0 {
            return; // mknod: root only
        }
        let dir = tempfile::tempdir().unwrap();
        // The same device under two paths (the host's /dev and a job container's), and
        // another device.
        let host = dir.path().join("nvidia-cap12");
        let container = dir.path().join("container-nvidia-cap12");
        let other = dir.path().join("nvidia-cap13");
        mknod(&host, 511, 12);
        mknod(&container, 511, 12);
        mknod(&other, 511, 13);
        let mut child = hold(&container, None);
        let mut bystander = hold(&other, None);
        let found = device_users(Path::new("/proc"), &Wanted::from_paths([&host]));
        let _ = child.kill();
        let _ = bystander.kill();
        let _ = child.wait();
        let _ = bystander.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id());
        assert_eq!(found[0].devices, [host.display().to_string()]);
    }

    #[test]
    fn only_the_job_users_holders_are_killed_never_root_or_system_accounts() {
        if crate::sys::euid() != 0 {
            return; // other users' processes: root's view only
        }
        assert!(ordinary_uid(1000) && ordinary_uid(4242));
        assert!(!ordinary_uid(0) && !ordinary_uid(999) && !ordinary_uid(65534));
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let dev = dir.path().join("nvidia-cap12");
        mknod(&dev, 511, 12);
        let wanted = Wanted::from_paths([&dev]);
        let mut leftover = hold(&dev, Some(4242));
        let mut daemon = hold(&dev, None); // root: DCGM's stand-in
        let mut other_user = hold(&dev, Some(4243));
        let mut system = hold(&dev, Some(998));
        let users = device_users(Path::new("/proc"), &wanted);
        assert_eq!(users.len(), 4, "{users:?}");
        let soon = Instant::now() + Duration::from_secs(10);
        // A system account's job is never a reason to kill.
        assert!(kill_job_holders(&users, 998, &wanted, soon).is_empty());
        assert!(system.try_wait().unwrap().is_none());
        let killed = kill_job_holders(&users, 4242, &wanted, soon);
        assert_eq!(killed, [leftover.id()]);
        assert!(leftover.wait().is_ok());
        for c in [&mut daemon, &mut other_user, &mut system] {
            assert!(c.try_wait().unwrap().is_none(), "{} was killed", c.id());
            let _ = c.kill();
            let _ = c.wait();
        }
        // Gone (or its pid reused by a process without the file): nothing to kill.
        assert!(kill_job_holders(&users, 4242, &wanted, soon).is_empty());
    }
}
