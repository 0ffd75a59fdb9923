//! What `run_dir` has left, and what in it colloc cannot see (issue 35): for `colloc
//! status` and `colloc restore --all`. Its free space and inodes come from `statfs`; what
//! is used there beyond what colloc's own entries account for (the job directories, each
//! one inode over its own tmpfs, and `.leftovers` trees, counted with a bounded walk) is
//! held by something no name leads to: files unlinked but still open, or a tree moved
//! away through a mount in another namespace. The processes that use `run_dir`'s file
//! system are named, found by device ([`crate::dirholders::fs_users`]).

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::fs::{Dir, FsError};
use crate::jobfs::Space;

/// Entries counted at most in `run_dir` (a bigger tree's figure is a lower bound).
const COUNT_LIMIT: u64 = 200_000;
/// How long counting and looking for processes may take.
const LOOK_TIME: Duration = Duration::from_secs(3);

/// `run_dir`'s room.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Room {
    /// Its file system's figures.
    pub space: Space,
    /// Is `run_dir` a file system of its own (a mount point, as `check-config --fix`
    /// makes it)? Only then do the figures below mean anything.
    pub own_fs: bool,
    /// Inodes in use that no entry of `run_dir` accounts for.
    pub hidden_inodes: u64,
    /// Bytes in use that no entry accounts for (rounded to blocks).
    pub hidden_bytes: u64,
    /// Processes that use `run_dir`'s file system (pid, uid, how).
    pub users: Vec<(u32, u32, String)>,
    /// Why no MPS job can be served now; `None` when one can.
    pub cannot_serve: Option<String>,
}

/// Count the inodes and bytes of the tree at `dir`, staying on `dev`, until `budget`
/// entries or `deadline`.
fn count(dir: &Dir, dev: u64, budget: &mut u64, deadline: Instant) -> (u64, u64, bool) {
    let (mut inodes, mut bytes) = (0u64, 0u64);
    let mut stack = vec![dir.entries().unwrap_or_default()];
    let mut dirs: Vec<Dir> = Vec::new();
    // Iterative, one directory open per level.
    while let Some(top) = stack.last_mut() {
        let Some((name, _)) = top.pop() else {
            stack.pop();
            dirs.pop();
            continue;
        };
        if *budget == 0 || Instant::now() >= deadline {
            return (inodes, bytes, false);
        }
        *budget -= 1;
        let parent = dirs.last().unwrap_or(dir);
        let Some(name) = name.to_str() else { continue };
        let Ok(Some(st)) = parent.lstat(name) else {
            continue;
        };
        if st.st_dev != dev {
            continue;
        }
        inodes += 1;
        #[allow(clippy::unnecessary_cast)]
        {
            bytes += (st.st_blocks as u64).saturating_mul(512);
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if let Ok(Some(sub)) = parent.open_dir(name) {
                if sub.stat().is_ok_and(|s| s.st_dev == dev) {
                    stack.push(sub.entries().unwrap_or_default());
                    dirs.push(sub);
                }
            }
        }
    }
    (inodes, bytes, true)
}

/// `run_dir`'s room, or why it cannot be looked at. Root's view (as a user `run_dir`'s
/// `.leftovers` cannot be read and the hidden figures are not told).
///
/// # Errors
/// [`FsError`]: `run_dir` cannot be opened.
pub fn room(cfg: &Config) -> Result<Room, FsError> {
    room_with(cfg, true, LOOK_TIME)
}

/// [`room`], naming the processes that use `run_dir`'s file system only where `users`
/// (a walk of `/proc`: not for every prolog's published record), looking for at most
/// `look` (past it the hidden figures are not told).
///
/// # Errors
/// As [`room`].
pub fn room_with(cfg: &Config, users: bool, look: Duration) -> Result<Room, FsError> {
    let run = Dir::open_trusted(&cfg.run_dir)?;
    let space = Space::of(run.as_fd()).map_err(|source| FsError::Io {
        what: "statfs",
        path: cfg.run_dir.clone(),
        source,
    })?;
    let st = run.stat()?;
    let own_fs = cfg
        .run_dir
        .parent()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| std::os::unix::fs::MetadataExt::dev(&m) != st.st_dev);
    let deadline = Instant::now() + look;
    let mut room = Room {
        space,
        own_fs,
        hidden_inodes: 0,
        hidden_bytes: 0,
        users: Vec::new(),
        cannot_serve: None,
    };
    if own_fs && crate::sys::euid() == 0 {
        let mut budget = COUNT_LIMIT;
        let (inodes, bytes, complete) = count(&run, st.st_dev, &mut budget, deadline);
        let used_inodes = space.total_inodes.saturating_sub(space.free_inodes);
        let used_bytes = space.total_bytes.saturating_sub(space.free_bytes);
        if complete {
            // The root directory itself is one inode.
            room.hidden_inodes = used_inodes.saturating_sub(inodes + 1);
            room.hidden_bytes = used_bytes.saturating_sub(bytes);
        }
        if users && (room.hidden_inodes > 0 || room.hidden_bytes > 0) {
            room.users = crate::dirholders::fs_users(st.st_dev, None, deadline)
                .into_iter()
                .map(|u| (u.handle.pid(), u.uid, u.how.to_string()))
                .collect();
        }
    }
    if space.free_inodes < 2 || space.free_bytes < 8192 {
        room.cannot_serve = Some(format!(
            "run_dir {} is full ({}): MPS jobs are refused until there is room",
            cfg.run_dir.display(),
            space.describe()
        ));
    }
    Ok(room)
}

#[allow(clippy::cast_precision_loss)]
fn kib(b: u64) -> f64 {
    b as f64 / 1024.0
}

impl Room {
    /// Lines for `colloc status` and `restore --all`: the figures, then what is hidden and
    /// who uses the file system, then what the admin does where no MPS job can be served.
    pub fn lines(&self, cfg: &Config) -> Vec<String> {
        let mut out = vec![format!(
            "run_dir {}: {}",
            cfg.run_dir.display(),
            self.space.describe()
        )];
        if self.hidden_inodes > 0 || self.hidden_bytes > 0 {
            out.push(format!(
                "HELD: {} inode(s) and {:.1} KiB of run_dir are used by nothing it holds by \
                 name (files removed while still open, or trees held through a mount \
                 elsewhere); processes that use its file system: {}",
                self.hidden_inodes,
                kib(self.hidden_bytes),
                if self.users.is_empty() {
                    "none found (a descriptor in flight in a socket is out of sight)".to_string()
                } else {
                    self.users
                        .iter()
                        .map(|(pid, uid, how)| format!("{pid} (uid {uid}, {how})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
        }
        if let Some(why) = &self.cannot_serve {
            out.push(format!(
                "CANNOT SERVE MPS JOBS: {why}. `colloc restore --all` removes leftovers; \
                 what is held is freed when its holders end (kill them); with no MPS job \
                 running, remounting run_dir (`umount -l {}`, then `colloc check-config \
                 --fix`) frees it at once",
                cfg.run_dir.display()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }

    /// A stand-in whose truth is known: a run_dir tmpfs of 40 inodes with colloc's own
    /// entries, and a file of 64 KiB unlinked while a process of another user keeps it
    /// open: 1 inode and 64 KiB held out of sight, that process named; filled to the last
    /// inode, no MPS job can be served.
    #[test]
    fn space_held_by_a_removed_file_is_told_with_its_holder() {
        if crate::sys::euid() != 0 {
            return; // mounting is root's
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = Config {
            state_dir: tmp.path().join("state"),
            run_dir: tmp.path().join("run"),
            ..Config::default()
        };
        std::fs::create_dir(&cfg.run_dir).unwrap();
        crate::sys::mount_tmpfs(&cfg.run_dir, "size=1m,nr_inodes=40,mode=0755").unwrap();
        let _m = Unmount(cfg.run_dir.clone());
        std::fs::create_dir_all(cfg.run_dir.join(".leftovers/job-1.5.0/gpu0")).unwrap();
        std::fs::write(cfg.run_dir.join(".leftovers/job-1.5.0/gpu0/x"), [1u8; 4096]).unwrap();
        let r = room(&cfg).unwrap();
        assert!(r.own_fs);
        assert_eq!((r.hidden_inodes, r.hidden_bytes), (0, 0), "{r:?}");
        assert_eq!(r.space.total_inodes, 40);
        assert_eq!(r.cannot_serve, None);
        // 64 KiB in a file that the holder opens, then it is removed.
        let f = cfg.run_dir.join(".leftovers/held");
        std::fs::write(&f, vec![7u8; 65536]).unwrap();
        let mut holder = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(format!("exec 3<{}; echo ok; exec sleep 60", f.display()))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        std::fs::remove_file(&f).unwrap();
        let r = room(&cfg).unwrap();
        assert_eq!(r.hidden_inodes, 1, "{r:?}");
        assert_eq!(r.hidden_bytes, 65536, "{r:?}");
        assert_eq!(
            r.users,
            vec![(holder.id(), 65534, "open file".to_string())],
            "{r:?}"
        );
        let text = r.lines(&cfg).join("\n");
        assert!(text.contains("HELD: 1 inode(s) and 64.0 KiB"), "{text}");
        assert!(
            text.contains(&format!("{} (uid 65534, open file)", holder.id())),
            "{text}"
        );
        // Fill the rest: no MPS job can be served, and the lines say what to do.
        let mut n = 0;
        while std::fs::write(cfg.run_dir.join(format!(".leftovers/f{n}")), "").is_ok() {
            n += 1;
        }
        let r = room(&cfg).unwrap();
        assert_eq!(r.space.free_inodes, 0);
        let why = r.cannot_serve.clone().expect("cannot serve");
        assert!(why.contains("0 of 40 inodes"), "{why}");
        assert!(r.lines(&cfg).join("\n").contains("CANNOT SERVE MPS JOBS"));
        let _ = holder.kill();
        let _ = holder.wait();
    }
}
