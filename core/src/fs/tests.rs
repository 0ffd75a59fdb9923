//! The trusted walk, fd-relative file work and tree removal, against hostile trees.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use rustix::fs::Mode;

use super::*;
use crate::sys::ChildEnd;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn root() -> bool {
    sys::euid() == 0
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// `levels` nested directories `d/d/d/...` under `dir`, made relative to descriptors (no
/// path grows).
fn deep(dir: &Path, levels: usize) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(dir, flags, Mode::empty()).unwrap();
    for _ in 0..levels {
        rustix::fs::mkdirat(&fd, c"d", Mode::RWXU).unwrap();
        fd = rustix::fs::openat(&fd, c"d", flags, Mode::empty()).unwrap();
    }
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// chown -R, not following links.
fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    if std::fs::symlink_metadata(p).unwrap().is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

#[test]
fn trusted_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    // The temporary directory sits in /tmp (sticky, world-writable): fine above.
    let d = Dir::open_trusted(base).unwrap();
    assert_eq!(d.path(), base);
    // Missing parts are made: parents 0755, the directory itself as asked.
    let made = base.join("a/b/state");
    Dir::create_trusted(&made, 0o700).unwrap();
    assert_eq!(mode_of(&base.join("a")), 0o755);
    assert_eq!(mode_of(&base.join("a/b")), 0o755);
    assert_eq!(mode_of(&made), 0o700);
    // Writable by others, above or at the end: not safe.
    chmod(&base.join("a"), 0o775);
    let err = Dir::open_trusted(&made).unwrap_err().to_string();
    assert!(err.contains("a is not safe"), "{err}");
    assert!(err.contains("(mode 0775)"), "{err}");
    assert!(Dir::create_trusted(&base.join("a/b/other"), 0o700).is_err());
    assert!(
        !base.join("a/b/other").exists(),
        "nothing made under an unsafe parent"
    );
    chmod(&base.join("a"), 0o755);
    // Sticky and world-writable like /tmp: fine above, not at the end.
    chmod(&base.join("a"), 0o1777);
    Dir::open_trusted(&made).unwrap();
    let err = Dir::open_trusted(&base.join("a")).unwrap_err().to_string();
    assert!(err.contains("mode 1777"), "{err}");
    chmod(&base.join("a"), 0o755);
    // Root's own links are followed; a link in a writable directory is not.
    std::os::unix::fs::symlink(base.join("a/b"), base.join("link")).unwrap();
    Dir::open_trusted(&base.join("link/state")).unwrap();
    std::os::unix::fs::symlink("../a/b/state", base.join("a/rel")).unwrap();
    Dir::open_trusted(&base.join("a/rel")).unwrap();
    // A file where a directory belongs.
    std::fs::write(base.join("file"), "").unwrap();
    let err = Dir::open_trusted(&base.join("file"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a regular file, not a directory"), "{err}");
    // A missing tail is fine for a check.
    check_dir_path(&base.join("a/b/not/yet")).unwrap();
    assert!(check_dir_path(Path::new("relative")).is_err());
    if root() {
        std::os::unix::fs::chown(base.join("a/b"), Some(65534), None).unwrap();
        let err = Dir::open_trusted(&made).unwrap_err().to_string();
        assert!(err.contains("owned by uid 65534"), "{err}");
        let err = check_dir_path(&base.join("a/b/not/yet"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("owned by uid 65534"), "{err}");
        std::os::unix::fs::chown(base.join("a/b"), Some(0), None).unwrap();
        // A link owned by someone else is not followed even in a safe directory.
        let l = base.join("a/theirs");
        std::os::unix::fs::symlink(base.join("a/b"), &l).unwrap();
        std::os::unix::fs::lchown(&l, Some(65534), None).unwrap();
        let err = Dir::open_trusted(&l).unwrap_err().to_string();
        assert!(err.contains("a symbolic link owned by uid 65534"), "{err}");
    }
}

#[test]
fn made_directories_are_exactly_as_asked_and_never_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let sub = d.make_dir("x", 0o755).unwrap();
    assert_eq!(mode_of(&tmp.path().join("x")), 0o755);
    assert_eq!(sub.path(), tmp.path().join("x"));
    let err = d.make_dir("x", 0o755).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    // A link in place of a directory is never opened as one.
    std::os::unix::fs::symlink(tmp.path(), tmp.path().join("l")).unwrap();
    let err = d.open_dir("l").unwrap_err().to_string();
    assert!(err.contains("is a symbolic link, not a directory"), "{err}");
    assert!(d.open_dir("missing").unwrap().is_none());
    for bad in ["", ".", "..", "a/b"] {
        assert!(d.make_dir(bad, 0o700).is_err(), "{bad:?}");
    }
    if root() {
        let leaf = sub.make_dir("leaf", 0o700).unwrap();
        leaf.chown(65534, 65534).unwrap();
        let m = std::fs::metadata(tmp.path().join("x/leaf")).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.permissions().mode() & 0o777),
            (65534, 65534, 0o700)
        );
    }
}

#[test]
fn files_root_reads_are_plain_root_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    d.write_file("j.json", b"{}").unwrap();
    assert_eq!(d.read_file("j.json", 10).unwrap().unwrap(), b"{}");
    assert_eq!(mode_of(&tmp.path().join("j.json")), 0o600);
    assert!(d.read_file("none", 10).unwrap().is_none());
    let err = d.read_file("j.json", 1).unwrap_err().to_string();
    assert!(err.contains("larger than 1 bytes"), "{err}");
    // A link to a file: never followed.
    std::fs::write(tmp.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("secret"), tmp.path().join("link.json")).unwrap();
    let err = d.read_file("link.json", 10).unwrap_err().to_string();
    assert!(
        err.contains("is a symbolic link, not a regular file"),
        "{err}"
    );
    // A FIFO: no hang.
    mkfifo(&tmp.path().join("fifo.json"));
    let err = d.read_file("fifo.json", 10).unwrap_err().to_string();
    assert!(err.contains("is a FIFO, not a regular file"), "{err}");
    // Writable by others.
    std::fs::write(tmp.path().join("open.json"), "{}").unwrap();
    chmod(&tmp.path().join("open.json"), 0o666);
    let err = d.read_file("open.json", 10).unwrap_err().to_string();
    assert!(err.contains("mode 0666"), "{err}");
    if root() {
        std::os::unix::fs::chown(tmp.path().join("j.json"), Some(65534), None).unwrap();
        let err = d.read_file("j.json", 10).unwrap_err().to_string();
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}

#[test]
fn a_file_written_with_a_mode_has_exactly_that_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    // The temporary file is made 0600 (nothing readable before it is whole): 0644 is set.
    d.write_file_mode("m.prom", b"# EOF\n", 0o644).unwrap();
    assert_eq!(mode_of(&tmp.path().join("m.prom")), 0o644);
    d.write_file("j.json", b"{}").unwrap();
    assert_eq!(mode_of(&tmp.path().join("j.json")), 0o600);
    let left = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(left, 2, "no temporary file left");
}

/// A rename that fails (a directory where the file goes) leaves no temporary file.
#[test]
fn a_failed_rename_leaves_no_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    std::fs::create_dir(tmp.path().join("m.prom")).unwrap();
    assert!(d.write_file_mode("m.prom", b"# EOF\n", 0o644).is_err());
    assert!(
        !tmp.path().join(".m.prom.tmp").exists(),
        "temporary file left"
    );
    assert!(tmp.path().join("m.prom").is_dir());
}

#[test]
fn writing_replaces_a_link_at_the_temporary_name_without_following_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, tmp.path().join(".5.json.tmp")).unwrap();
    d.write_file("5.json", b"new").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("5.json")).unwrap(),
        "new"
    );
    assert!(!tmp.path().join(".5.json.tmp").exists());
    // A lock file: made once, a link in its place refused.
    d.open_or_create_file("g.lock").unwrap();
    d.open_or_create_file("g.lock").unwrap();
    std::os::unix::fs::symlink(&victim, tmp.path().join("h.lock")).unwrap();
    assert!(d.open_or_create_file("h.lock").is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn moving_never_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let to = d.make_dir("to", 0o700).unwrap();
    std::fs::write(tmp.path().join("a"), "a").unwrap();
    std::fs::write(tmp.path().join("to/a"), "old").unwrap();
    let err = d.move_to("a", &to, "a").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    d.move_to("a", &to, "a.1").unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("to/a")).unwrap(),
        "old"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("to/a.1")).unwrap(),
        "a"
    );
}

/// A tree full of traps: links to a victim directory and file, a hard link to the victim
/// file, FIFOs, directories without permissions, and a sticky one.
fn hostile_tree(top: &Path, victim: &Path) {
    std::fs::create_dir_all(top.join("sub/deeper")).unwrap();
    std::os::unix::fs::symlink(victim, top.join("to-victim")).unwrap();
    std::os::unix::fs::symlink(victim, top.join("sub/deeper/to-victim")).unwrap();
    std::os::unix::fs::symlink(victim.join("file"), top.join("sub/file-link")).unwrap();
    mkfifo(&top.join("fifo"));
    mkfifo(&top.join("sub/deeper/fifo"));
    std::fs::create_dir(top.join("locked")).unwrap();
    std::fs::write(top.join("locked/f"), "x").unwrap();
    chmod(&top.join("locked"), 0o000);
    std::fs::create_dir(top.join("readonly")).unwrap();
    std::fs::write(top.join("readonly/f"), "x").unwrap();
    chmod(&top.join("readonly"), 0o500);
    std::fs::create_dir(top.join("sticky")).unwrap();
    std::fs::write(top.join("sticky/f"), "x").unwrap();
    chmod(&top.join("sticky"), 0o1777);
}

/// A hard link to the victim's file (made after any chown of the tree, which would
/// change the victim's owner through it).
fn hard_link(top: &Path, victim: &Path) {
    std::fs::hard_link(victim.join("file"), top.join("sub/hard")).unwrap();
}

fn victim(tmp: &Path) -> PathBuf {
    let v = tmp.join("victim");
    std::fs::create_dir_all(v.join("pipe")).unwrap();
    std::fs::write(v.join("file"), "precious").unwrap();
    v
}

fn assert_victim_intact(v: &Path) {
    assert!(v.join("pipe").is_dir(), "victim directory touched");
    assert_eq!(std::fs::read_to_string(v.join("file")).unwrap(), "precious");
}

#[test]
fn a_hostile_tree_is_removed_without_touching_what_it_points_at() {
    let tmp = tempfile::tempdir().unwrap();
    let v = victim(tmp.path());
    let d = Dir::open_trusted(tmp.path()).unwrap();
    hostile_tree(&tmp.path().join("leaf"), &v);
    if root() {
        // The leaf and all in it belong to a user: emptied by a child running as them.
        chown_tree(&tmp.path().join("leaf"), 65534);
    }
    hard_link(&tmp.path().join("leaf"), &v);
    d.remove_tree("leaf", 0, soon()).unwrap();
    assert!(!tmp.path().join("leaf").exists());
    assert_victim_intact(&v);
    let hard = std::fs::metadata(v.join("file")).unwrap().nlink();
    assert_eq!(hard, 1, "only the hard link's name went");
}

#[test]
fn root_levels_are_walked_here_and_user_leaves_by_their_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let v = victim(tmp.path());
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let job = d.make_dir("job-1", 0o755).unwrap();
    let gpu = job.make_dir("gpu0", 0o755).unwrap();
    for leaf in ["pipe", "log"] {
        gpu.make_dir(leaf, 0o700).unwrap();
        hostile_tree(&tmp.path().join("job-1/gpu0").join(leaf), &v);
    }
    // Something unexpected at a root level: a link and a FIFO are only unlinked.
    std::os::unix::fs::symlink(&v, tmp.path().join("job-1/gpu1")).unwrap();
    mkfifo(&tmp.path().join("job-1/fifo"));
    if root() {
        chown_tree(&tmp.path().join("job-1/gpu0/pipe"), 65534);
        chown_tree(&tmp.path().join("job-1/gpu0/log"), 65534);
    }
    hard_link(&tmp.path().join("job-1/gpu0/log"), &v);
    d.remove_tree("job-1", 2, soon()).unwrap();
    assert!(!tmp.path().join("job-1").exists());
    assert_victim_intact(&v);
}

#[test]
fn fifty_thousand_levels_are_removed() {
    // run_dir is a tmpfs (/run): measure there where one is at hand.
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let d = Dir::open_trusted(tmp.path()).unwrap();
    std::fs::create_dir(tmp.path().join("leaf")).unwrap();
    deep(&tmp.path().join("leaf"), 50_000);
    let t = Instant::now();
    d.remove_tree("leaf", 0, soon()).unwrap();
    assert!(!tmp.path().join("leaf").exists());
    eprintln!(
        "removed 50,000 levels in {:.2} s",
        t.elapsed().as_secs_f64()
    );
}

/// Issue 23: there is no depth limit (it was 131,072 levels). The tree is built by its
/// owner, an unprivileged user, with mkdirat/openat in a loop, as an attacker would.
#[test]
fn a_tree_deeper_than_the_old_limit_built_by_a_user_is_removed() {
    const LEVELS: u32 = 140_000;
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    chmod(tmp.path(), 0o755);
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let leaf = tmp.path().join("leaf");
    std::fs::create_dir(&leaf).unwrap();
    let (uid, gid) = if root() {
        (65534, 65534)
    } else {
        (sys::euid(), sys::gid())
    };
    std::os::unix::fs::chown(&leaf, Some(uid), Some(gid)).unwrap();
    let top = rustix::fs::open(&leaf, DIR_FLAGS, Mode::empty()).unwrap();
    let end = sys::run_forked_as(uid, gid, soon(), &mut || {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let Ok(mut fd) = rustix::fs::openat(&top, c".", flags, Mode::empty()) else {
            return 1;
        };
        for _ in 0..LEVELS {
            if rustix::fs::mkdirat(&fd, c"d", Mode::RWXU).is_err() {
                return 2;
            }
            match rustix::fs::openat(&fd, c"d", flags, Mode::empty()) {
                Ok(next) => fd = next,
                Err(_) => return 3,
            }
        }
        0
    })
    .unwrap();
    assert_eq!(end, ChildEnd::Exited(0), "the user built the tree");
    assert_eq!(std::fs::metadata(&leaf).unwrap().uid(), uid);
    let t = Instant::now();
    d.remove_tree("leaf", 0, soon()).unwrap();
    assert!(!leaf.exists());
    eprintln!(
        "removed {LEVELS} levels in {:.2} s",
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn a_removal_past_its_deadline_is_stopped_and_says_so() {
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let d = Dir::open_trusted(tmp.path()).unwrap();
    std::fs::create_dir(tmp.path().join("leaf")).unwrap();
    deep(&tmp.path().join("leaf"), 5_000);
    let err = d
        .remove_tree("leaf", 0, Instant::now())
        .unwrap_err()
        .to_string();
    assert!(err.contains("took too long"), "{err}");
    d.remove_tree("leaf", 0, soon()).unwrap();
}

#[test]
fn what_the_owner_cannot_remove_is_reported() {
    if !root() {
        return; // needs a directory owned by someone else inside the user's tree
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    let leaf = tmp.path().join("leaf");
    std::fs::create_dir_all(leaf.join("root-owned")).unwrap();
    std::fs::write(leaf.join("root-owned/f"), "x").unwrap();
    std::fs::write(leaf.join("mine"), "x").unwrap();
    std::os::unix::fs::chown(&leaf, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(leaf.join("mine"), Some(65534), Some(65534)).unwrap();
    let err = d.remove_tree("leaf", 0, soon()).unwrap_err().to_string();
    assert!(err.contains("Permission denied"), "{err}");
    assert!(
        leaf.join("root-owned/f").exists(),
        "the user could not, so neither did we"
    );
    assert!(
        !leaf.join("mine").exists(),
        "what the user could remove is gone"
    );
}

#[test]
fn files_are_read_with_a_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("f");
    std::fs::write(&p, "12345").unwrap();
    assert_eq!(read_capped(&p, 5).unwrap(), b"12345");
    assert!(matches!(
        read_capped(&p, 4),
        Err(FsError::TooLarge { limit: 4, .. })
    ));
    let err = read_capped(Path::new("/dev/zero"), 5)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a character device, not a regular file"),
        "{err}"
    );
}

#[test]
fn a_directory_of_roots_that_others_can_write_is_not_emptied_with_roots_rights() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Dir::open_trusted(tmp.path()).unwrap();
    std::fs::create_dir(tmp.path().join("open")).unwrap();
    std::fs::write(tmp.path().join("open/f"), "x").unwrap();
    chmod(&tmp.path().join("open"), 0o1777);
    let err = d.remove_tree("open", 0, soon()).unwrap_err().to_string();
    assert!(err.contains("left in place"), "{err}");
    assert!(tmp.path().join("open/f").exists());
}

#[test]
fn a_listing_at_most_n_names_stops_at_the_first_name_past_n() {
    let t = tempfile::tempdir().unwrap();
    for name in ["c", "a", "b"] {
        std::fs::write(t.path().join(name), b"").unwrap();
    }
    let dir = std::fs::File::open(t.path()).unwrap();
    let names = |limit| {
        super::dir_entries_at_most(&dir, limit)
            .unwrap()
            .map(|v| v.into_iter().map(|e| e.0).collect::<Vec<_>>())
    };
    assert_eq!(names(3), Some(vec!["a".into(), "b".into(), "c".into()]));
    assert_eq!(names(2), None);
    assert_eq!(names(0), None);
    assert_eq!(super::dir_entries(&dir).unwrap().len(), 3);
}
