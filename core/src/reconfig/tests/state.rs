//! A full `state_dir` and the leftovers every prolog retries.

use super::*;

/// A tmpfs of `inodes` inodes mounted at `path` (root's, 0755), unmounted on drop. `None`
/// where this process cannot mount (not root).
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(path: &Path, inodes: u32) -> Option<SmallFs> {
        if crate::sys::euid() != 0 {
            return None;
        }
        std::fs::create_dir_all(path).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size=4m,nr_inodes={inodes},mode=0755"))
            .arg("tmpfs")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallFs(path.to_path_buf()))
    }

    /// Use up every inode left (as a job that fills the file system would).
    fn fill(&self) -> std::path::PathBuf {
        let fill = self.0.join("fill");
        let _ = std::fs::create_dir(&fill);
        for i in 0.. {
            if std::fs::write(fill.join(i.to_string()), "").is_err() {
                break;
            }
        }
        // Nothing more can be made there.
        assert!(std::fs::write(self.0.join("probe"), "").is_err());
        fill
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Issue 23: a job fills the file system of `state_dir`; the epilog's journal writes then
/// fail, yet the undo goes on (MIG instances destroyed, MPS tree removed), and a later
/// prolog refuses its job instead of failing (no drain), whether it fails at its journal
/// or at a GPU lock file it has to make.
#[test]
fn a_full_state_dir_does_not_stop_the_undo_and_refuses_later_jobs_not_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let Some(fs) = SmallFs::mount(&c.state_dir, 64) else {
        return;
    };
    let g = MemGpus::a100s(3).with_mig_off(&[1]);
    env_of(&prolog(&c, &g, &spec(50, &[0], "mig:3g")).unwrap());
    env_of(&prolog(&c, &g, &user_spec(51, &[1], "mps")).unwrap());
    assert_eq!(g.count(0), 2);
    assert!(tmp.path().join("run/job-51/gpu1/pipe").is_dir());
    let fill = fs.fill();

    let r = restore(&c, Some(&g), 50).unwrap();
    assert_eq!((r.destroyed, g.count(0)), (2, 0), "{r:?}");
    assert_eq!(r.jobs, vec![50]);
    assert!(journal::load(&c, 50).unwrap().is_none());
    let r = restore(&c, None, 51).unwrap();
    assert_eq!(r.jobs, vec![51]);
    assert!(!tmp.path().join("run/job-51").exists());

    // The next jobs (the journals' inodes taken too): refused with the reason, nothing
    // changed, no fault.
    fs.fill();
    let out = prolog(&c, &g, &spec(52, &[0], "mig:3g")).unwrap();
    let why = &refusal(&out).message;
    assert!(why.contains("cannot record the job's setup"), "{why}");
    assert!(why.contains("No space left on device"), "{why}");
    assert_eq!(g.count(0), 0);
    // GPU 2 has never had a lock file: making it fails, and so the job is refused.
    let out = prolog(&c, &g, &spec(53, &[2], "mig:3g")).unwrap();
    let why = &refusal(&out).message;
    assert!(why.contains("cannot lock the job's GPUs"), "{why}");
    assert_eq!(g.count(2), 0);
    // A job its checks refuse (a layout that does not fit the GPU) cannot record that
    // either: refused with the reason, unrecorded, never a fault (a fault drains the node).
    let out = prolog(&c, &g, &spec(55, &[0], "mig:4gx2")).unwrap();
    let why = &refusal(&out).message;
    assert!(why.contains("4g"), "{why}");
    assert!(journal::load(&c, 55).unwrap().is_none());
    assert_eq!(g.count(0), 0);

    // Once there is room again, jobs run.
    std::fs::remove_dir_all(&fill).unwrap();
    env_of(&prolog(&c, &g, &spec(54, &[2], "mig:3g")).unwrap());
    restore(&c, Some(&g), 54).unwrap();
    assert_eq!(g.count(2), 0);
}

/// What an earlier epilog of job `job` moved aside and could not remove: its MPS log
/// folder in `run_dir/.leftovers`, holding the file `file` (a relative path), owned by
/// the job's user from the log folder down; `run_dir` 0755, `.leftovers` 0700 (root's).
fn plant_leftovers(c: &Config, s: &JobSpec, job: u32, file: &str) {
    use std::os::unix::fs::PermissionsExt;
    let log = c
        .run_dir
        .join(format!(".leftovers/job-{job}.1700000000.0/gpu0/log"));
    let f = log.join(file);
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "x").unwrap();
    std::fs::set_permissions(&c.run_dir, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        c.run_dir.join(".leftovers"),
        PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    for p in f.ancestors().take_while(|p| p.starts_with(&log)) {
        std::os::unix::fs::chown(p, Some(s.uid), Some(s.gid)).unwrap();
    }
}

/// Issue 23: what an earlier epilog moved to run_dir/.leftovers is tried again at every
/// prolog (briefly): here it can go now, and it does.
#[test]
fn every_prolog_retries_the_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let s = user_spec(60, &[0], "mps");
    plant_leftovers(&c, &s, 59, "a/b/f");
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    env_of(&prolog(&c, &g, &s).unwrap());
    assert!(!c.run_dir.join(".leftovers").exists());
    restore(&c, None, 60).unwrap();
    assert_eq!(std::fs::read_dir(&c.run_dir).unwrap().count(), 0);
}

/// `colloc restore --all` (at boot, or by an admin) clears them too, with no job to run.
#[test]
fn restore_all_clears_the_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let s = user_spec(61, &[0], "mps");
    plant_leftovers(&c, &s, 58, "a/f");
    let r = restore_all(&c, None).unwrap();
    assert!(r.leftovers.is_empty(), "{r:?}");
    assert!(!c.run_dir.join(".leftovers").exists());
}
