//! Which directories that users can write share a file system with colloc's own
//! (`state_dir`, `run_dir`)? A user who fills such a file system (blocks or inodes) leaves
//! colloc no room: journals cannot be written and jobs are refused until it is freed
//! (never a drain, see `SECURITY.md`, rule 5), and a full `run_dir` refuses every MPS job.
//! `colloc check-config` warns with what is found here.
//!
//! The search is cheap and bounded: the usual places (`/tmp`, `/var/tmp`, `/dev/shm`,
//! `/run/lock`, home directories) and a breadth-first walk of the file system from its
//! mount point, a few levels deep and a few thousand directories at most, for directories
//! anyone can write or that belong to an ordinary user.

use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Places users can usually write.
pub const USUAL: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run/shm",
    "/run/lock",
    "/var/lock",
    "/var/mail",
    "/var/spool/mail",
    "/var/crash",
    "/home",
];

/// The lowest uid of an ordinary user (`UID_MIN` of login.defs on Debian and Red Hat).
const UID_MIN: u32 = 1000;
/// How deep and how wide the walk from the mount point goes.
const WALK_DEPTH: usize = 4;
const WALK_LIMIT: usize = 5000;

/// The device of `path`, or of the nearest directory above it that exists (a
/// `state_dir` not made yet will be made there).
fn device_of(path: &Path) -> Option<(u64, PathBuf)> {
    path.ancestors().find_map(|p| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.dev(), p.to_path_buf()))
    })
}

/// Can an ordinary user write this directory (world-writable, or an ordinary user's)?
fn user_writable(m: &std::fs::Metadata) -> bool {
    m.is_dir() && (m.mode() & 0o002 != 0 || (m.uid() >= UID_MIN && m.mode() & 0o200 != 0))
}

/// Home directories of ordinary users in `/etc/passwd` (a bounded read).
fn homes() -> Vec<PathBuf> {
    let Ok(text) = crate::fs::read_capped(Path::new("/etc/passwd"), 4 << 20) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let uid: u32 = f.get(2)?.parse().ok()?;
            let home = PathBuf::from(f.get(5)?);
            (uid >= UID_MIN && uid != 65534).then_some(home)
        })
        .take(WALK_LIMIT)
        .collect()
}

/// Directories users can write on the file system that holds `path` (outside `path`
/// itself), sorted, at most `max` of them.
pub fn user_writable_on_same_fs(path: &Path, max: usize) -> Vec<PathBuf> {
    let Some((dev, existing)) = device_of(path) else {
        return Vec::new();
    };
    let mut found = std::collections::BTreeSet::new();
    let mut consider = |p: &Path, m: &std::fs::Metadata| {
        if m.dev() == dev && user_writable(m) && !p.starts_with(path) {
            found.insert(p.to_path_buf());
        }
    };
    for p in USUAL.iter().map(PathBuf::from).chain(homes()) {
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            consider(&p, &m);
        }
    }
    // The mount point: the highest directory above `path` on the same device.
    let top = existing
        .ancestors()
        .take_while(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == dev))
        .last()
        .map_or(existing.clone(), Path::to_path_buf);
    let mut queue = VecDeque::from([(top, 0usize)]);
    let mut seen = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > WALK_LIMIT {
                break;
            }
            let p = e.path();
            // Not followed: a link, another file system, colloc's own directory.
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if !m.is_dir() || m.dev() != dev || p.starts_with(path) {
                continue;
            }
            consider(&p, &m);
            if depth + 1 < WALK_DEPTH {
                queue.push_back((p, depth + 1));
            }
        }
    }
    found.into_iter().take(max).collect()
}

/// Is `path` the root of a file system of its own (its device differs from its
/// parent's)? `None` where it does not exist.
pub fn is_mount_point(path: &Path) -> Option<bool> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let pm = std::fs::symlink_metadata(parent).ok()?;
    Some(m.dev() != pm.dev() || m.ino() == pm.ino())
}

/// `check-config`'s warning for `key` (`state_dir` or `run_dir`) at `path`, if users can
/// write somewhere on its file system.
pub fn warning(key: &str, path: &Path) -> Option<String> {
    let shared = user_writable_on_same_fs(path, 4);
    if shared.is_empty() {
        return None;
    }
    let list: Vec<String> = shared.iter().map(|p| p.display().to_string()).collect();
    Some(format!(
        "{key} {} shares a file system with {}, which users can write: a user who fills it \
         (blocks or inodes) leaves colloc no room, and {} until it is freed; give {key} a \
         file system of its own{}",
        path.display(),
        list.join(", "),
        if key == "run_dir" {
            "MPS jobs are refused"
        } else {
            "jobs asking for a mode are refused (the node is not drained)"
        },
        if key == "run_dir" {
            " (`colloc check-config --fix` mounts a capped tmpfs there)"
        } else {
            " or a user quota on this one"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_world_writable_directory_on_the_same_file_system_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("a/state");
        std::fs::create_dir_all(tmp.path().join("a")).unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let found = user_writable_on_same_fs(&state, usize::MAX);
        // The temporary directory lies in /tmp (or $TMPDIR): found either way, as itself
        // or through the walk.
        assert!(!found.is_empty());
        let w = warning("state_dir", &state).unwrap();
        assert!(w.contains("shares a file system with"), "{w}");
        assert!(w.contains("not drained"), "{w}");
    }

    #[test]
    fn a_file_system_of_its_own_shares_nothing() {
        if crate::sys::euid() != 0 {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mnt = tmp.path().join("own");
        std::fs::create_dir(&mnt).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return;
        }
        std::fs::create_dir(mnt.join("state")).unwrap();
        assert_eq!(is_mount_point(&mnt), Some(true));
        assert_eq!(is_mount_point(&mnt.join("state")), Some(false));
        assert!(warning("state_dir", &mnt.join("state")).is_none());
        // A directory anyone can write there is named.
        let open = mnt.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            user_writable_on_same_fs(&mnt.join("state"), 9),
            vec![open.clone()]
        );
        let _ = std::process::Command::new("umount").arg(&mnt).status();
    }
}
