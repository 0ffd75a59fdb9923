//! Unprivileged accounts for tests.

use std::process::Command;

use crate::{run, text};

/// An unprivileged account for tests, made with `useradd` if missing (with a group of
/// its own, no home directory). Returns its uid and gid, as the system says them (never
/// assumed: another suite may have made its accounts first).
///
/// Suites run at the same time (scripts/test.sh runs both cluster profiles at once): the
/// look-up and `useradd` happen under one lock (`flock` on `/run/colloc-test-users.lock`),
/// so two of them never race to make the same account or fight over `/etc/passwd`'s own
/// lock. An account made here is written to the file `$COLLOC_TEST_USERS` when that is
/// set, one name a line, so that scripts/test.sh can remove what the tests made.
///
/// # Panics
/// When the account cannot be made.
pub fn ensure_user(name: &str) -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).arg(name).output().ok()?;
        if !out.status.success() {
            return None;
        }
        text(&out.stdout).trim().parse().ok()
    };
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/colloc-test-users.lock")
        .expect("open /run/colloc-test-users.lock");
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock(2) on a descriptor this function owns; released when `lock` drops.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock /run/colloc-test-users.lock");
    }
    if id("-u").is_none() {
        let out = run(Command::new("useradd")
            .args(["--no-create-home", "--user-group", "--shell", "/bin/sh"])
            .arg(name));
        assert!(
            out.status.success() || id("-u").is_some(),
            "useradd {name}: {}",
            text(&out.stderr).trim()
        );
        if out.status.success() {
            if let Some(ledger) = std::env::var_os("COLLOC_TEST_USERS") {
                use std::io::Write as _;
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
    drop(lock);
    ids
}
