//! Unit tests of [`super`].

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn cfg(dir: &Path) -> Config {
    Config {
        state_dir: dir.join("state"),
        run_dir: dir.join("run"),
        ..Config::default()
    }
}

fn names(c: &Config) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(c.jobs_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn write_load_list_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    assert!(load(&c, 7).unwrap().is_none());
    assert!(list(&c).unwrap().is_empty());
    let mut j = Journal::new(7, 1000, 1000, "mig:3g".into());
    j.gpus.push(GpuRecord {
        index: 0,
        uuid: "GPU-a".into(),
        name: "NVIDIA A100-SXM4-40GB".into(),
        mig_before: Some(MigMode {
            current: true,
            pending: true,
        }),
        mig_mode_changed: false,
        preexisting: vec![],
        planned: vec![],
        created: vec![],
    });
    write(&c, &j).unwrap();
    write(&c, &Journal::new(3, 0, 0, "mps".into())).unwrap();
    assert_eq!(load(&c, 7).unwrap().unwrap(), j);
    let all: Vec<u32> = list(&c)
        .unwrap()
        .into_iter()
        .map(|j| j.unwrap().job)
        .collect();
    assert_eq!(all, vec![3, 7]);
    assert!(j.claims("GPU-a"));
    assert!(!j.claims("GPU-b"));
    // No temporary files left behind; the directories are private.
    assert_eq!(names(&c), vec!["3.json", "7.json"]);
    for d in [c.state_dir.clone(), c.jobs_dir()] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", d.display());
    }
    remove(&c, 7).unwrap();
    remove(&c, 7).unwrap();
    assert!(load(&c, 7).unwrap().is_none());
}

#[test]
fn corrupt_journal_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    write(&c, &Journal::new(1, 0, 0, "mps".into())).unwrap();
    std::fs::write(path(&c, 9), b"{not json").unwrap();
    let err = load(&c, 9).unwrap_err();
    // A bad journal is not a bad state_dir: the callers refuse only its job for it.
    assert!(!err.is_unsafe_state_dir(), "{err}");
    let err = err.to_string();
    assert!(err.contains("9.json is unreadable"), "{err}");
    assert!(list(&c).unwrap()[1].is_err());
}

#[test]
fn journals_are_known_by_their_file_names_only() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    write(&c, &Journal::new(4, 0, 0, "naive".into())).unwrap();
    let body = |job: u32| serde_json::to_vec(&Journal::new(job, 0, 0, "naive".into())).unwrap();
    // A journal of job 6 in the file of job 5, a padded name, a stray file.
    std::fs::write(path(&c, 5), body(6)).unwrap();
    std::fs::write(c.jobs_dir().join("0120.json"), body(120)).unwrap();
    std::fs::write(c.jobs_dir().join("notes.txt"), "x").unwrap();
    // A crash's temporary file is colloc's own, not reported.
    std::fs::write(c.jobs_dir().join(".8.json.tmp"), "{").unwrap();
    let err = load(&c, 5).unwrap_err().to_string();
    assert!(
        err.contains("it names job 6 but is the file of job 5"),
        "{err}"
    );
    assert!(
        load(&c, 120).unwrap().is_none(),
        "0120.json is not job 120's file"
    );
    let scanned = scan(&c).unwrap();
    let seen: Vec<(&str, bool)> = scanned
        .iter()
        .map(|s| (s.name.as_str(), s.journal.is_ok()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("4.json", true),
            ("5.json", false),
            ("0120.json", false),
            ("notes.txt", false)
        ]
    );
    let misnamed = scanned[2].journal.as_ref().unwrap_err().to_string();
    assert!(misnamed.contains("not a journal's name"), "{misnamed}");
    assert_eq!(job_of_file_name("12.json"), Some(12));
    for bad in [
        "012.json",
        "+1.json",
        "1.json.bak",
        ".json",
        "4294967296.json",
        "1 .json",
    ] {
        assert_eq!(job_of_file_name(bad), None, "{bad}");
    }
}

#[test]
fn links_fifos_and_forged_paths_are_unusable() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    write(&c, &Journal::new(1, 0, 0, "mps".into())).unwrap();
    let victim = tmp.path().join("victim.json");
    std::fs::write(
        &victim,
        serde_json::to_vec(&Journal::new(2, 0, 0, "mps".into())).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(&victim, path(&c, 2)).unwrap();
    let err = load(&c, 2).unwrap_err().to_string();
    assert!(err.contains("a symbolic link, not a regular file"), "{err}");
    let fifo = std::ffi::CString::new(path(&c, 3).into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let err = load(&c, 3).unwrap_err().to_string();
    assert!(err.contains("a FIFO, not a regular file"), "{err}");
    let mut j = Journal::new(4, 0, 0, "mps".into());
    j.job_dir = Some(tmp.path().join("victim"));
    std::fs::write(path(&c, 4), serde_json::to_vec(&j).unwrap()).unwrap();
    let err = load(&c, 4).unwrap_err().to_string();
    assert!(err.contains("its job_dir"), "{err}");
    let mut j = Journal::new(5, 0, 0, "mps".into());
    j.job_dir = Some(c.run_dir.join("job-5"));
    j.mps = vec![MpsDaemon::in_dir(
        &c.run_dir.join("job-5/gpu0/../../../victim"),
        "GPU-a",
    )];
    std::fs::write(path(&c, 5), serde_json::to_vec(&j).unwrap()).unwrap();
    let err = load(&c, 5).unwrap_err().to_string();
    assert!(err.contains("is not inside"), "{err}");
    let mut j = Journal::new(6, 0, 0, "mps".into());
    j.job_dir = Some(c.run_dir.join("job-6"));
    j.mps = vec![MpsDaemon::in_dir(&c.run_dir.join("job-6/gpu0"), "GPU-a")];
    std::fs::write(path(&c, 6), serde_json::to_vec(&j).unwrap()).unwrap();
    std::fs::set_permissions(path(&c, 6), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        load(&c, 6).unwrap().unwrap(),
        j,
        "a journal as colloc writes it"
    );
    std::fs::set_permissions(path(&c, 6), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(load(&c, 6).unwrap_err().to_string().contains("mode 0666"));
}

#[test]
fn an_unsafe_state_dir_is_not_read_or_written() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    write(&c, &Journal::new(1, 0, 0, "mps".into())).unwrap();
    std::fs::set_permissions(&c.state_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = load(&c, 1).unwrap_err();
    assert!(err.is_unsafe_state_dir(), "{err}");
    assert!(err.to_string().contains("mode 0777"), "{err}");
    assert!(write(&c, &Journal::new(2, 0, 0, "mps".into())).is_err());
    assert!(list(&c).is_err());
    assert!(check_state_dir(&c).is_err());
    assert!(GpuLock::acquire_within(&c, "GPU-a", Duration::ZERO).is_err());
    assert!(roots_file_present(&c, 1));
    assert!(!roots_file_present(&c, 2));
    std::fs::set_permissions(&c.state_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    check_state_dir(&c).unwrap();
    // The jobs directory itself opened up: the same.
    std::fs::set_permissions(c.jobs_dir(), std::fs::Permissions::from_mode(0o733)).unwrap();
    assert!(load(&c, 1).unwrap_err().is_unsafe_state_dir());
}

#[test]
fn unusable_entries_are_moved_aside_without_replacing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    write(&c, &Journal::new(1, 0, 0, "mps".into())).unwrap();
    std::fs::write(path(&c, 9), b"{").unwrap();
    let to = quarantine(&c, "9.json").unwrap();
    assert_eq!(to, c.state_dir.join("corrupt/9.json"));
    std::fs::write(path(&c, 9), b"[").unwrap();
    let to = quarantine(&c, "9.json").unwrap();
    assert_eq!(to, c.state_dir.join("corrupt/9.json.1"));
    assert_eq!(
        std::fs::read(c.state_dir.join("corrupt/9.json")).unwrap(),
        b"{"
    );
    assert_eq!(names(&c), vec!["1.json"]);
    let mode = std::fs::metadata(c.state_dir.join("corrupt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn lock_is_exclusive() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let held = GpuLock::acquire(&c, "GPU-1/../x").unwrap();
    let err = GpuLock::acquire_within(&c, "GPU-1/../x", Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, JournalError::LockTimeout { .. }), "{err}");
    assert!(
        !err.is_unsafe_state_dir(),
        "a busy lock is not an unsafe state_dir"
    );
    drop(held);
    // Free again once dropped. Not at once, always: another test of this process may
    // have forked a child (run_forked_as) that holds a copy of the descriptor, and with
    // it the flock, until that child exits.
    GpuLock::acquire_within(&c, "GPU-1/../x", Duration::from_secs(10)).unwrap();
    // The UUID cannot escape the locks directory.
    assert!(c.locks_dir().join("GPU-1____x.lock").exists());
}

#[test]
fn boot_id_is_the_kernels_and_marks_journals_of_earlier_boots() {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let now = boot_id().expect("the kernel tells its boot id");
    assert_eq!(now, kernel.trim());
    let mut j = Journal::new(1, 0, 0, "mps".into());
    assert_eq!(j.boot_id.as_deref(), Some(now.as_str()));
    assert!(!j.from_earlier_boot(), "written in this boot");
    j.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
    assert!(j.from_earlier_boot(), "another boot's id");
    j.boot_id = None;
    assert!(!j.from_earlier_boot(), "no boot id counts as current");
}

#[test]
fn gpu_indexes_are_the_journals_gpus_in_order() {
    let mut j = Journal::new(1, 0, 0, "mps".into());
    assert!(j.gpu_indexes().is_empty());
    for index in [3, 1] {
        j.gpus.push(GpuRecord {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            mig_before: None,
            mig_mode_changed: false,
            preexisting: vec![],
            planned: vec![],
            created: vec![],
        });
    }
    assert_eq!(j.gpu_indexes(), vec![3, 1]);
}

#[test]
fn a_lock_released_within_the_wait_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let held = GpuLock::acquire(&c, "GPU-w").unwrap();
    let other = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
    });
    // Another colloc process (here a thread) holds it a moment: waited for, not refused.
    GpuLock::acquire_within(&c, "GPU-w", Duration::from_secs(60)).unwrap();
    other.join().unwrap();
}
