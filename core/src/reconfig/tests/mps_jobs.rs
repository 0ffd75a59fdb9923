//! MPS jobs: the job's tree under `run_dir`, its daemons (prolog and extern step), and
//! directories others can write.

use super::*;

fn victim(dir: &Path) -> std::path::PathBuf {
    let v = dir.join("victim");
    std::fs::create_dir_all(v.join("pipe")).unwrap();
    std::fs::create_dir_all(v.join("log")).unwrap();
    std::fs::write(v.join("file"), "precious").unwrap();
    v
}

fn assert_intact(v: &Path) {
    assert!(
        v.join("pipe").is_dir() && v.join("log").is_dir(),
        "victim touched"
    );
    assert_eq!(std::fs::read_to_string(v.join("file")).unwrap(), "precious");
}

#[test]
fn the_user_owns_only_the_leaves_of_the_mps_tree() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(2).with_mig_off(&[0, 1]);
    let s = user_spec(40, &[0, 1], "mps");
    env_of(&prolog(&c, &g, &s).unwrap());
    let me = crate::sys::euid();
    for (p, owner, mode) in [
        ("run/job-40", me, 0o755),
        ("run/job-40/gpu1", me, 0o755),
        ("run/job-40/gpu1/pipe", s.uid, 0o700),
        ("run/job-40/gpu0/log", s.uid, 0o700),
    ] {
        let m = std::fs::symlink_metadata(tmp.path().join(p)).unwrap();
        assert_eq!(
            (m.uid(), m.permissions().mode() & 0o7777),
            (owner, mode),
            "{p}"
        );
    }
    restore(&c, None, 40).unwrap();
    assert!(!tmp.path().join("run/job-40").exists());
}

#[test]
fn a_link_swapped_in_before_the_restore_is_not_followed() {
    // What a user could do to the old layout (job-N and gpuK were theirs); done here as
    // root: the restore must not remove the victim's pipe and log through the link.
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let v = victim(tmp.path());
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    env_of(&prolog(&c, &g, &user_spec(41, &[0], "mps")).unwrap());
    let gpu0 = tmp.path().join("run/job-41/gpu0");
    std::fs::rename(&gpu0, tmp.path().join("run/job-41/gpu0.old")).unwrap();
    std::os::unix::fs::symlink(&v, &gpu0).unwrap();
    std::os::unix::fs::symlink(&v, tmp.path().join("run/job-41/gpu0.old/pipe/evil")).unwrap();
    restore(&c, None, 41).unwrap();
    assert_intact(&v);
    assert!(!tmp.path().join("run/job-41").exists());
}

#[test]
fn a_job_dir_of_the_old_layout_owned_by_the_user_is_removed_as_the_user() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let v = victim(tmp.path());
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    let s = user_spec(42, &[0], "mps");
    env_of(&prolog(&c, &g, &s).unwrap());
    // An earlier colloc gave the user job-N and gpuK as well.
    let job = tmp.path().join("run/job-42");
    for p in [job.clone(), job.join("gpu0")] {
        std::os::unix::fs::chown(&p, Some(s.uid), Some(s.gid)).unwrap();
    }
    std::os::unix::fs::symlink(&v, job.join("gpu0/pipe/link")).unwrap();
    restore(&c, None, 42).unwrap();
    assert!(!job.exists());
    assert_intact(&v);
}

#[test]
fn an_mps_failure_refuses_the_job_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("nvidia-cuda-mps-control");
    std::fs::write(&prog, "#!/bin/sh\necho 'cannot start: quota' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let c = Config {
        mps_control: prog.display().to_string(),
        ..cfg(tmp.path())
    };
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    let out = prolog(&c, &g, &user_spec(43, &[0], "mps")).unwrap();
    let r = refusal(&out);
    assert!(!r.bad_request);
    assert!(
        r.message.contains("the MPS daemon did not start"),
        "{}",
        r.message
    );
    assert!(r.message.contains("cannot start: quota"), "{}", r.message);
    assert!(!tmp.path().join("run/job-43").exists());
    let j = journal::load(&c, 43).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Refused, "the tasks are told why");
    // No control program at all: the same, not a node fault.
    let c = Config {
        mps_control: "/nonexistent/nvidia-cuda-mps-control".into(),
        ..cfg(tmp.path())
    };
    let out = prolog(&c, &g, &user_spec(44, &[0], "mps")).unwrap();
    assert!(
        refusal(&out).message.contains("MPS control program"),
        "{out:?}"
    );
}

#[test]
fn a_run_dir_others_can_write_refuses_the_job_not_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    std::fs::create_dir(&c.run_dir).unwrap();
    std::fs::set_permissions(
        &c.run_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    let out = prolog(&c, &g, &user_spec(45, &[0], "mps")).unwrap();
    let r = refusal(&out);
    assert!(
        r.message
            .contains("cannot set up the job's MPS directories"),
        "{}",
        r.message
    );
    assert!(r.message.contains("mode 1777"), "{}", r.message);
    assert!(!c.run_dir.join("job-45").exists());
    assert_eq!(
        journal::load(&c, 45).unwrap().unwrap().phase,
        Phase::Refused
    );
}

#[test]
fn a_state_dir_others_can_write_refuses_unrecorded_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    std::fs::create_dir(&c.state_dir).unwrap();
    std::fs::set_permissions(
        &c.state_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &spec(46, &[0], "mig:3g")).unwrap();
    let r = refusal(&out);
    assert!(r.message.contains("state"), "{}", r.message);
    assert!(r.message.contains("mode 0777"), "{}", r.message);
    assert_eq!(g.count(0), 0);
    assert!(!c.jobs_dir().exists(), "nothing written into it");
    // The tasks find out the same way.
    let err = job_state(&c, 46).unwrap_err();
    assert!(err.is_unsafe_state_dir(), "{err}");
}

#[test]
fn restore_all_goes_by_file_and_moves_unusable_journals_aside() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(50, &[0], "mig:3g")).unwrap();
    let body = |job: u32| serde_json::to_vec(&Journal::new(job, 0, 0, "naive".into())).unwrap();
    std::fs::write(journal::path(&c, 5), body(6)).unwrap();
    std::fs::write(c.jobs_dir().join("0120.json"), body(120)).unwrap();
    std::fs::write(journal::path(&c, 7), b"{\"version\": 1, \"job\"").unwrap();
    // By hand, one job: never renamed, never rewritten under another id.
    let err = restore(&c, Some(&g), 5).unwrap_err().to_string();
    assert!(err.contains("names job 6"), "{err}");
    assert!(journal::path(&c, 5).exists());
    assert!(!journal::path(&c, 6).exists());
    let r = restore_all(&c, Some(&g)).unwrap();
    assert_eq!(r.jobs, vec![50]);
    assert_eq!(g.count(0), 0);
    let moved: Vec<String> = r
        .quarantined
        .iter()
        .map(|q| {
            q.moved_to
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(moved, vec!["5.json", "7.json", "0120.json"]);
    assert!(
        r.quarantined[1].why.contains("EOF"),
        "{:?}",
        r.quarantined[1]
    );
    assert!(journal::list(&c).unwrap().is_empty());
    // Cleared: the next restore has nothing to do, and the GPUs can be used again.
    assert_eq!(restore_all(&c, Some(&g)).unwrap(), RestoreReport::default());
    env_of(&prolog(&c, &g, &spec(51, &[0], "mig:1g")).unwrap());
}

#[test]
fn under_contain_the_extern_step_starts_the_daemons_where_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let c = fake_mps(tmp.path());
    let g = MemGpus::a100s(2).with_mig_off(&[0, 1]);
    let out = prolog_with(&c, &g, &user_spec(50, &[0, 1], "mps"), MpsStart::ExternStep).unwrap();
    let env = env_of(&out);
    let pipe = std::path::PathBuf::from(&env["CUDA_MPS_PIPE_DIRECTORY"]);
    assert!(pipe.is_dir(), "the prolog makes the directories");
    let j = journal::load(&c, 50).unwrap().unwrap();
    assert_eq!((j.mps_start, j.mps_mount_ns), (MpsStart::ExternStep, None));
    assert!(daemons_of(&j).is_empty(), "the prolog started a daemon");
    // A task before the extern step ran (no Contain after all): refused, naming it.
    let own = container::own_mount_ns().unwrap();
    let e = mps_reachable(&j, own).unwrap_err();
    assert!(
        e.contains("the job's MPS daemons were not started") && e.contains("PrologFlags=Contain"),
        "{e}"
    );
    // The extern step: no job container here, so its own namespace.
    let r = start_mps_in_extern_step(&c, 50, SlurmFacts::default).unwrap();
    assert_eq!(
        r,
        ExternStart::Started {
            daemons: 2,
            mount_ns: own,
            holder: None,
            in_step_cgroup: false
        }
    );
    let j = journal::load(&c, 50).unwrap().unwrap();
    assert_eq!(j.mps_mount_ns, Some(own));
    assert_eq!(j.phase, Phase::Applied);
    mps_reachable(&j, own).unwrap();
    let e = mps_reachable(&j, own + 1).unwrap_err();
    assert!(
        e.contains("run in another mount namespace than its tasks")
            && e.contains("JobContainerType=job_container/tmpfs"),
        "{e}"
    );
    let running = daemons_of(&j);
    assert_eq!(running.len(), 2, "one daemon per GPU");
    // Another task_post_fork of the extern step (or a late one) starts nothing more.
    assert_eq!(
        start_mps_in_extern_step(&c, 50, SlurmFacts::default).unwrap(),
        ExternStart::Nothing
    );
    assert_eq!(daemons_of(&j).len(), 2);
    // The epilog kills what Slurm left of them (here, all) and removes their directories.
    // It never asks them to quit: that would run the control program as the user outside
    // the job's cgroups and namespace, where the user may trace it and use it.
    let r = restore(&c, None, 50).unwrap();
    assert_eq!(r.mps_stopped, 2);
    let mut killed = r.killed.clone();
    killed.sort_unstable();
    let mut pids: Vec<u32> = running.iter().map(crate::sys::PidHandle::pid).collect();
    pids.sort_unstable();
    assert_eq!(killed, pids, "asked to quit instead of killed");
    assert!(running.iter().all(crate::sys::PidHandle::gone));
    assert!(!tmp.path().join("run/job-50").exists());
    // Nothing to do for a job without a journal, or one of another mode.
    assert_eq!(
        start_mps_in_extern_step(&c, 50, SlurmFacts::default).unwrap(),
        ExternStart::Nothing
    );
    env_of(&prolog_with(&c, &g, &user_spec(51, &[0], "naive"), MpsStart::ExternStep).unwrap());
    assert_eq!(
        start_mps_in_extern_step(&c, 51, SlurmFacts::default).unwrap(),
        ExternStart::Nothing
    );
    restore(&c, None, 51).unwrap();
}

#[test]
fn a_failed_start_in_the_extern_step_refuses_the_job_never_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("nvidia-cuda-mps-control");
    std::fs::write(
        &prog,
        "#!/bin/sh\nif [ \"$1\" = -d ]; then echo 'cannot start: quota' >&2; exit 1; fi\n\
         cat >/dev/null\n",
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let c = Config {
        mps_control: prog.display().to_string(),
        ..cfg(tmp.path())
    };
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    env_of(&prolog_with(&c, &g, &user_spec(52, &[0], "mps"), MpsStart::ExternStep).unwrap());
    let ExternStart::Refused(why) = start_mps_in_extern_step(&c, 52, SlurmFacts::default).unwrap()
    else {
        panic!("not refused");
    };
    assert!(
        why.contains("the MPS daemon did not start") && why.contains("cannot start: quota"),
        "{why}"
    );
    let j = journal::load(&c, 52).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Refused, "the tasks are told why");
    assert_eq!(j.refused.as_deref(), Some(why.as_str()));
    // The job container's namespace is not there: refused, naming where colloc looked.
    let c2 = quiet_control(tmp.path());
    env_of(&prolog_with(&c2, &g, &user_spec(53, &[0], "mps"), MpsStart::ExternStep).unwrap());
    let facts = SlurmFacts {
        slurm_conf: "/etc/slurm/slurm.conf".into(),
        contain: true,
        tmpfs_container: true,
        base_paths: vec![tmp.path().join("containers")],
        ..SlurmFacts::default()
    };
    let ExternStart::Refused(why) = start_mps_in_extern_step(&c2, 53, || facts).unwrap() else {
        panic!("not refused");
    };
    assert!(
        why.contains(&format!(
            "job 53's container namespace ({}/[<node>/]53/.ns) was not found",
            tmp.path().join("containers").display()
        )) && why.contains("(JobContainerType=job_container/tmpfs in /etc/slurm/slurm.conf"),
        "{why}"
    );
    // The epilogs clear both.
    for job in [52, 53] {
        restore(&c2, None, job).unwrap();
        assert!(journal::load(&c2, job).unwrap().is_none());
        assert!(!tmp.path().join(format!("run/job-{job}")).exists());
    }
}

#[test]
fn the_epilog_stops_daemons_an_extern_step_started_but_never_recorded() {
    // The extern step killed after the daemons started, before it wrote the journal.
    let tmp = tempfile::tempdir().unwrap();
    let c = fake_mps(tmp.path());
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    env_of(&prolog_with(&c, &g, &user_spec(54, &[0], "mps"), MpsStart::ExternStep).unwrap());
    let j = journal::load(&c, 54).unwrap().unwrap();
    let prog = PathBuf::from(&c.mps_control);
    let deadline = Instant::now() + mps::START_TIME;
    mps::start_daemon(&prog, &j.mps[0], Some((j.uid, j.gid)), deadline).unwrap();
    let running = daemons_of(&j);
    assert_eq!(running.len(), 1);
    assert_eq!(journal::load(&c, 54).unwrap().unwrap().mps_mount_ns, None);
    let r = restore(&c, None, 54).unwrap();
    assert_eq!(r.mps_stopped, 1);
    assert!(running.iter().all(crate::sys::PidHandle::gone));
    assert!(!tmp.path().join("run/job-54").exists());
}

/// The MPS part is undone from either of its two records alone: a prolog that died after
/// it made the job's directory but before it listed the daemons leaves only `job_dir`; a
/// journal from before `job_dir` was recorded lists only the daemons. A clean restore
/// warns of nothing.
#[test]
fn the_mps_part_is_undone_from_either_record_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(2).with_mig_off(&[0, 1]);
    env_of(&prolog(&c, &g, &user_spec(42, &[0, 1], "mps")).unwrap());
    let mut j = journal::load(&c, 42).unwrap().unwrap();
    j.mps.clear();
    journal::write(&c, &j).unwrap();
    restore(&c, None, 42).unwrap();
    assert!(!tmp.path().join("run/job-42").exists(), "job_dir alone");
    env_of(&prolog(&c, &g, &user_spec(43, &[0, 1], "mps")).unwrap());
    let mut j = journal::load(&c, 43).unwrap().unwrap();
    j.job_dir = None;
    journal::write(&c, &j).unwrap();
    // By `colloc restore --all`, which adds up what each job's restore did.
    let r = restore_all(&c, None).unwrap();
    assert_eq!(
        (r.jobs.as_slice(), r.mps_stopped),
        (&[43][..], 2),
        "the daemons alone: {r:?}"
    );
    assert!(!tmp.path().join("run/job-43").exists());
    // Daemons that all went and a tree removed in time: nothing to warn about, nothing
    // moved aside.
    assert!(r.warnings.is_empty(), "{r:?}");
    assert!(!c.run_dir.join(".leftovers").exists());
}

/// A process the job's user left in its MPS tree (here only its working directory there)
/// is killed by the restore, within the cleanup's budget, before the tree goes: left, it
/// could keep adding files there.
#[test]
fn a_process_left_in_the_job_tree_is_killed_by_the_restore() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    if crate::sys::euid() != 0 {
        return; // a process of another user takes root to start
    }
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(1).with_mig_off(&[0]);
    let s = user_spec(44, &[0], "mps");
    env_of(&prolog(&c, &g, &s).unwrap());
    let mut left = std::process::Command::new("sleep")
        .arg("60")
        .current_dir(tmp.path().join("run/job-44/gpu0/pipe"))
        .uid(s.uid)
        .gid(s.gid)
        .spawn()
        .unwrap();
    let r = restore(&c, None, 44).unwrap();
    let ended = left.try_wait().unwrap();
    if ended.is_none() {
        let _ = left.kill();
        let _ = left.wait();
    }
    assert_eq!(ended.and_then(|e| e.signal()), Some(libc::SIGKILL), "{r:?}");
    assert!(!tmp.path().join("run/job-44").exists());
}
