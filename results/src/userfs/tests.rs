//! Tests of userfs.rs (checked directories and user files).

use super::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_directory_writable_by_others_is_not_adopted() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("d");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = CheckedDir::create_or_adopt(&p, 0o755).unwrap_err();
    assert!(matches!(e, UserFsError::NotYours { .. }), "{e}");
    assert!(e.to_string().contains("mode 0777"), "{e}");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, made) = CheckedDir::create_or_adopt(&p, 0o755).unwrap();
    assert!(!made);
    let (_, made) = CheckedDir::create_or_adopt(&t.path().join("a/b"), 0o755).unwrap();
    assert!(made);
    // `.` and `..` name the directory itself.
    let (d, made) = CheckedDir::create_or_adopt(&t.path().join("a/b/.."), 0o755).unwrap();
    assert!(!made);
    assert!(d.lstat("b").unwrap().is_some());
}

#[test]
fn a_link_as_the_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("real")).unwrap();
    std::os::unix::fs::symlink(t.path().join("real"), t.path().join("l")).unwrap();
    let e = CheckedDir::create_or_adopt(&t.path().join("l"), 0o755).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
}

#[test]
fn writes_replace_links_and_never_follow_them() {
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let (d, _) = CheckedDir::create_or_adopt(&t.path().join("r"), 0o755).unwrap();
    for name in ["a.png", "log", "ev"] {
        std::os::unix::fs::symlink(&victim, t.path().join("r").join(name)).unwrap();
    }
    d.write_atomic("a.png", b"png").unwrap();
    assert_eq!(std::fs::read(t.path().join("r/a.png")).unwrap(), b"png");
    d.create("log").unwrap().write_all(b"x").unwrap();
    assert!(d
        .append("ev")
        .unwrap_err()
        .to_string()
        .contains("symbolic link"));
    // a hard link is never appended to (the other name would change too)
    std::fs::hard_link(&victim, t.path().join("r/hard")).unwrap();
    assert!(d
        .append("hard")
        .unwrap_err()
        .to_string()
        .contains("2 link(s)"));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let names: Vec<String> = d.entries().unwrap().into_iter().map(|e| e.0).collect();
    assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
}

#[test]
fn fifos_and_devices_are_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = read_user_file(&fifo, 100).unwrap_err();
    assert!(e.is_bad_input() && e.to_string().contains("a FIFO"), "{e}");
    let e = read_user_file(Path::new("/dev/zero"), 100).unwrap_err();
    assert!(e.to_string().contains("character device"), "{e}");
    std::fs::write(t.path().join("big"), [b'x'; 101]).unwrap();
    let e = read_user_file(&t.path().join("big"), 100).unwrap_err();
    assert!(matches!(e, UserFsError::TooLarge { .. }), "{e}");
    let d = CheckedDir::open_read(t.path()).unwrap();
    assert!(d
        .open_file("fifo", 100)
        .unwrap_err()
        .to_string()
        .contains("FIFO"));
    assert!(d.lock_file("fifo").is_err());
}

#[test]
fn a_file_written_as_it_is_made_is_whole_or_not_there() {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = CheckedDir::create_or_adopt(&t.path().join("r"), 0o755).unwrap();
    // Larger than the buffer: written in pieces, read back whole.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    d.write_atomic_with("big.json", &mut |f| {
        for chunk in big.chunks(777) {
            f.write_all(chunk)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(std::fs::read(t.path().join("r/big.json")).unwrap(), big);
    // A failure half-way leaves the file as it was and no temporary file.
    let e = d
        .write_atomic_with("big.json", &mut |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("encoding failed"))
        })
        .unwrap_err();
    assert!(e.to_string().contains("encoding failed"), "{e}");
    assert_eq!(std::fs::read(t.path().join("r/big.json")).unwrap(), big);
    let names: Vec<String> = d.entries().unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(names, ["big.json"]);
}
