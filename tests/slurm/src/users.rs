//! Unprivileged accounts for tests.

use std::io::{Read as _, Seek as _, Write as _};
use std::process::Command;

use crate::{run, text};

/// The first uid (and gid) the registry hands out: above the accounts a machine's own
/// users get from `useradd` (1000 up), below `UID_MAX` (60000).
const FIRST_UID: u32 = 42_000;

/// An unprivileged account for tests, made with `useradd` if missing (with a group of
/// its own, of the same id where that is free; no home directory). Returns its uid and
/// gid, as the system says them.
///
/// Suites run at the same time, on the host and in Slurm 24.11 roots whose `/etc/passwd`
/// is a copy of the host's taken when the root's namespace started (scripts/test.sh,
/// tests/slurm/slurm-root.sh). Each `useradd` picking the next free uid of its own
/// passwd file gave two different accounts of two lanes the same uid: seen in CI, the
/// 24.11 simple lane's stopper (`kill -STOP` on every process of its uid) froze the
/// 24.11 production lane's MPS daemon. So every account gets its uid from one registry
/// that all lanes share (`$COLLOC_TEST_USERS.uids`, else `/tmp/colloc-test-uids`: /tmp
/// is the same in every root), `NAME UID` a line, read and extended under an exclusive
/// `flock` of the registry itself: one name has one uid everywhere, two names never share
/// one. The look-up and `useradd` happen under the same lock, so two suites never race to
/// make the same account or fight over `/etc/passwd`'s own lock. An account made here is
/// written to the file `$COLLOC_TEST_USERS` when that is set, one name a line, so that
/// scripts/test.sh can remove what the tests made.
///
/// # Panics
/// When the account cannot be made, or the registry cannot be read or written.
pub fn ensure_user(name: &str) -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).arg(name).output().ok()?;
        if !out.status.success() {
            return None;
        }
        text(&out.stdout).trim().parse().ok()
    };
    let ledger = std::env::var_os("COLLOC_TEST_USERS");
    let path = match &ledger {
        Some(l) => {
            let mut p = l.clone();
            p.push(".uids");
            std::path::PathBuf::from(p)
        }
        None => std::path::PathBuf::from("/tmp/colloc-test-uids"),
    };
    let mut registry = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock(2) on a descriptor this function owns; released when `registry`
        // drops.
        let rc = unsafe { libc::flock(registry.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}", path.display());
    }
    if id("-u").is_none() {
        let mut known = String::new();
        registry
            .read_to_string(&mut known)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let entries = parse_registry(&known);
        let uid = match entries.iter().find(|(n, _)| n == name) {
            Some((_, uid)) => *uid,
            None => {
                let uid = next_uid(&entries, |u| id_taken("passwd", u) || id_taken("group", u));
                registry
                    .seek(std::io::SeekFrom::End(0))
                    .and_then(|_| writeln!(registry, "{name} {uid}"))
                    .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
                uid
            }
        };
        // The account's own group: one left by an earlier run is taken as it is; a new
        // one gets the uid as its gid where that is free.
        if !name_taken("group", name) {
            let mut groupadd = Command::new("groupadd");
            if !id_taken("group", uid) {
                groupadd.args(["--gid", &uid.to_string()]);
            }
            let out = run(groupadd.arg(name));
            assert!(
                out.status.success() || name_taken("group", name),
                "groupadd {name}: {}",
                text(&out.stderr).trim()
            );
        }
        let out = run(Command::new("useradd")
            .args(["--no-create-home", "--no-user-group", "--shell", "/bin/sh"])
            .args(["--uid", &uid.to_string(), "--gid", name])
            .arg(name));
        assert!(
            out.status.success() || id("-u").is_some(),
            "useradd {name} (uid {uid}): {}",
            text(&out.stderr).trim()
        );
        if out.status.success() {
            if let Some(ledger) = &ledger {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(ledger)
                    .expect("open $COLLOC_TEST_USERS");
                writeln!(f, "{name}").expect("write $COLLOC_TEST_USERS");
            }
        }
    }
    let ids = (
        id("-u").unwrap_or_else(|| panic!("no uid for {name}")),
        id("-g").unwrap_or_else(|| panic!("no gid for {name}")),
    );
    drop(registry);
    ids
}

/// The registry's `NAME UID` lines (others skipped).
fn parse_registry(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter_map(|l| {
            let (n, u) = l.split_once(' ')?;
            Some((n.to_string(), u.trim().parse().ok()?))
        })
        .collect()
}

/// The lowest id from [`FIRST_UID`] that no registry entry has and `taken` does not
/// refuse (an account or group of this machine's own).
fn next_uid(entries: &[(String, u32)], taken: impl Fn(u32) -> bool) -> u32 {
    (FIRST_UID..60_000)
        .find(|u| !entries.iter().any(|(_, e)| e == u) && !taken(*u))
        .expect("no free test uid below 60000")
}

/// Whether `getent DB ID` finds an entry (`passwd` or `group`).
fn id_taken(db: &str, id: u32) -> bool {
    name_taken(db, &id.to_string())
}

/// Whether `getent DB KEY` finds an entry (a name, or an id).
fn name_taken(db: &str, key: &str) -> bool {
    Command::new("getent")
        .arg(db)
        .arg(key)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_hands_each_name_its_own_uid_past_taken_ones() {
        let entries = parse_registry("a 42000\nbroken line\nb 42002\nc x\n");
        assert_eq!(
            entries,
            vec![("a".to_string(), 42000), ("b".to_string(), 42002)]
        );
        // 42001 is free in the registry but taken on this machine: skipped.
        assert_eq!(next_uid(&entries, |u| u == 42001), 42003);
        assert_eq!(next_uid(&entries, |_| false), 42001);
        assert_eq!(next_uid(&[], |_| false), FIRST_UID);
    }
}
