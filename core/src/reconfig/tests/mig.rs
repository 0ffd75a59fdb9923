//! MIG apply and restore: layouts, refusals, undo, holders, driver answers.

use super::*;

#[test]
fn mig_apply_then_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &spec(7, &[0], "mig:3g")).unwrap();
    let env = env_of(&out);
    assert_eq!(env["COLLOC_MODE"], "mig:3g.20gbx2");
    assert_eq!(env["COLLOC_SLOTS"], "2");
    assert_eq!(env["COLLOC_DEVICES"].split(',').count(), 2);
    assert!(env["COLLOC_DEVICES"].starts_with("MIG-"));
    assert_eq!(g.count(0), 2);
    let j = journal::load(&c, 7).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Applied);
    // A second prolog run is idempotent.
    assert_eq!(prolog(&c, &g, &spec(7, &[0], "mig:3g")).unwrap(), out);
    assert_eq!(g.count(0), 2);
    let r = restore(&c, Some(&g), 7).unwrap();
    assert_eq!(r.destroyed, 2);
    assert_eq!(g.count(0), 0);
    assert!(journal::load(&c, 7).unwrap().is_none());
    assert_eq!(restore(&c, Some(&g), 7).unwrap(), RestoreReport::default());
}

#[test]
fn bad_layout_is_refused_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &spec(8, &[0], "mig:4gx2")).unwrap();
    let r = refusal(&out);
    assert!(r.bad_request);
    assert!(
        r.message.contains("layouts that fit include"),
        "{}",
        r.message
    );
    assert_eq!(g.count(0), 0);
    let j = journal::load(&c, 8).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Refused);
    assert!(!j.claims("GPU-00000000"));
    restore(&c, Some(&g), 8).unwrap();
    assert!(journal::load(&c, 8).unwrap().is_none());
}

#[test]
fn busy_or_foreign_gpus_are_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    let me = std::process::id();
    g.gpus.borrow_mut()[0].procs.push(GpuProcess {
        pid: me,
        used_memory: None,
        gi_id: None,
    });
    let t = Instant::now();
    let out = prolog(&c, &g, &spec(9, &[0], "mig:1g")).unwrap();
    assert!(
        refusal(&out)
            .message
            .contains(&format!("busy: process(es) {me} use it")),
        "{out:?}"
    );
    assert!(
        t.elapsed() < EXITING_GRACE / 2,
        "a running process is not waited for"
    );
    assert!(!refusal(&out).bad_request);
    restore(&c, Some(&g), 9).unwrap();

    let g = MemGpus::a100s(1);
    g.create_instance(0, 19, Placement { start: 0, size: 1 })
        .unwrap();
    let out = prolog(&c, &g, &spec(10, &[0], "mig:1g")).unwrap();
    assert!(
        refusal(&out)
            .message
            .contains("does not own (1g.5gb at start 0)"),
        "{out:?}"
    );
    assert_eq!(g.count(0), 1);
    restore(&c, Some(&g), 10).unwrap();
    assert_eq!(g.count(0), 1, "the foreign instance stays");
}

/// The pid of a process that has exited and been reaped.
fn ended_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn processes_that_exited_while_the_driver_still_lists_them_are_waited_for() {
    // Slurm's kill of the extern step leaves a job's MPS server a zombie that the driver
    // lists for about 0.1 s more (H100): the next job waits for it, within the grace.
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let gone = ended_pid();
    let g = MemGpus::a100s(1);
    g.gpus.borrow_mut()[0].procs.push(GpuProcess {
        pid: gone,
        used_memory: None,
        gi_id: None,
    });
    *g.procs_listed.borrow_mut() = Some(3);
    let t = Instant::now();
    let out = prolog(&c, &g, &spec(14, &[0], "mig:1g")).unwrap();
    env_of(&out);
    assert!(t.elapsed() < EXITING_GRACE, "{:?}", t.elapsed());
    restore(&c, Some(&g), 14).unwrap();

    // One the driver keeps listing is refused when the grace is over, named.
    *g.procs_listed.borrow_mut() = None;
    let t = Instant::now();
    let out = prolog(&c, &g, &spec(15, &[0], "mig:1g")).unwrap();
    assert!(
        refusal(&out)
            .message
            .contains(&format!("busy: process(es) {gone} use it")),
        "{out:?}"
    );
    assert!(t.elapsed() >= EXITING_GRACE, "{:?}", t.elapsed());
    assert_eq!(g.count(0), 0);
    restore(&c, Some(&g), 15).unwrap();
}

#[test]
fn not_allowed_and_not_mig() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(tmp.path());
    c.allowed_modes = vec![ModeKind::Mps];
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &spec(11, &[0], "mig:3g")).unwrap();
    assert!(refusal(&out).message.contains("not allowed"), "{out:?}");

    let c = cfg(tmp.path());
    g.gpus.borrow_mut()[0].mig = Some(MigMode {
        current: false,
        pending: false,
    });
    let out = prolog(&c, &g, &spec(12, &[0], "mig:3g")).unwrap();
    assert!(refusal(&out).message.contains("not in MIG mode"), "{out:?}");
    assert!(!g.gpus.borrow()[0].mig.unwrap().current);

    let c = Config {
        allow_mig_mode_change: true,
        ..cfg(tmp.path())
    };
    let out = prolog(&c, &g, &spec(13, &[0], "mig:3g")).unwrap();
    env_of(&out);
    assert!(g.gpus.borrow()[0].mig.unwrap().current);
    restore(&c, Some(&g), 13).unwrap();
    assert!(
        !g.gpus.borrow()[0].mig.unwrap().current,
        "MIG mode switched back"
    );
}

#[test]
fn failure_part_way_undoes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus {
        fail_create: Some(2),
        ..MemGpus::a100s(1)
    };
    // A compute instance that does not fit is no busy GPU: asked once, then the job is
    // refused (issue 24: no driver answer drains the node), the GPU as before.
    let out = prolog(&c, &g, &spec(14, &[0], "mig:3g")).unwrap();
    let r = refusal(&out);
    assert!(
        r.message.contains("nvmlGpuInstanceCreateComputeInstance")
            && r.message.contains("left as it was"),
        "{r:?}"
    );
    assert_eq!(g.count(0), 0);
    assert_eq!(
        journal::load(&c, 14).unwrap().unwrap().phase,
        Phase::Refused
    );
}

#[test]
fn crash_at_any_point_is_restored() {
    for crash_at in 1..=7 {
        let tmp = tempfile::tempdir().unwrap();
        let c = cfg(tmp.path());
        let g = MemGpus {
            crash_create: Some(crash_at),
            ..MemGpus::a100s(1)
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            prolog(&c, &g, &spec(15, &[0], "mig:1g"))
        }));
        assert!(r.is_err(), "crash {crash_at}");
        assert_eq!(g.count(0), crash_at - 1);
        assert_eq!(
            journal::load(&c, 15).unwrap().unwrap().phase,
            Phase::Applying
        );
        restore(&c, Some(&g), 15).unwrap();
        assert_eq!(g.count(0), 0, "crash {crash_at}");
        // The journal of a crashed prolog also lets a rerun of the prolog recover.
    }
    // Instances made but not yet recorded in `created` (crash between the driver call
    // and the journal write) are found through `planned`.
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(16, &[0], "mig:2g")).unwrap();
    let mut j = journal::load(&c, 16).unwrap().unwrap();
    j.gpus[0].created.clear();
    j.phase = Phase::Applying;
    journal::write(&c, &j).unwrap();
    // A rerun of the prolog restores first, then applies again.
    let out = prolog(&c, &g, &spec(16, &[0], "mig:2g")).unwrap();
    assert_eq!(env_of(&out)["COLLOC_SLOTS"], "3");
    assert_eq!(g.count(0), 3);
    restore(&c, Some(&g), 16).unwrap();
    assert_eq!(g.count(0), 0);
}

#[test]
fn restore_kills_leftovers_and_a_stuck_instance_marks_the_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(17, &[0], "mig:3g")).unwrap();
    let gi = g.gpus.borrow()[0].instances[0].gi_id;
    // pid 0 is never signalled; the fake process stays, so the instance stays in use.
    g.gpus.borrow_mut()[0].procs.push(GpuProcess {
        pid: 0,
        used_memory: None,
        gi_id: Some(gi),
    });
    let r = restore_within(&c, Some(&g), 17, Duration::from_millis(300)).unwrap();
    assert!(r.jobs.is_empty());
    assert_eq!(r.held.len(), 1);
    assert_eq!(r.held[0].reason, HoldReason::Processes { pids: vec![0] });
    let j = journal::load(&c, 17).unwrap().expect("journal kept");
    assert_eq!(j.held, r.held, "the hold is recorded");
    g.gpus.borrow_mut()[0].procs.clear();
    let r = restore(&c, Some(&g), 17).unwrap();
    assert_eq!((r.jobs.as_slice(), r.held.len()), (&[17][..], 0));
    assert_eq!(g.count(0), 0);
}

#[test]
fn instances_held_by_dcgm_mark_the_gpu_without_a_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(40, &[0], "mig:3g")).unwrap();
    let gis: Vec<u32> = g.gpus.borrow()[0]
        .instances
        .iter()
        .map(|i| i.gi_id)
        .collect();
    // Something that is not a listed process (DCGM) holds the first instance.
    g.holders.borrow_mut().push((0, gis[0], None));
    let t = Instant::now();
    let r = restore_within(&c, Some(&g), 40, Duration::from_millis(500)).unwrap();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "bounded: {took:?}");
    assert!(*g.destroys.borrow() > 3, "retried with backoff");
    assert_eq!(r.held.len(), 1, "{r:?}");
    let h = &r.held[0];
    assert_eq!(
        (h.gi_ids.as_slice(), &h.reason),
        (&gis[..1], &HoldReason::InUse)
    );
    assert!(h.describe().contains("DCGM"), "{}", h.describe());
    assert_eq!(g.count(0), 1, "the other instance is destroyed");
    assert!(journal::load(&c, 40).unwrap().is_some(), "journal kept");
    // The next job on that GPU is refused with the reason, and nothing changes.
    let out = prolog(&c, &g, &spec(41, &[0], "mig:1g")).unwrap();
    let msg = &refusal(&out).message;
    assert!(
        msg.contains("job 40") && msg.contains("colloc restore --job 40"),
        "{msg}"
    );
    assert!(msg.contains("NVML_ERROR_IN_USE"), "{msg}");
    assert_eq!(g.count(0), 1);
    restore(&c, Some(&g), 41).unwrap();
    // Once the holder is gone, the next prolog finishes the restore itself and runs.
    g.holders.borrow_mut().clear();
    let out = prolog(&c, &g, &spec(42, &[0], "mig:1g")).unwrap();
    assert_eq!(env_of(&out)["COLLOC_SLOTS"], "7");
    assert!(
        journal::load(&c, 40).unwrap().is_none(),
        "marked journal cleared"
    );
    restore(&c, Some(&g), 42).unwrap();
    assert_eq!(g.count(0), 0);
}

#[test]
fn a_holder_that_lets_go_is_outlasted_by_the_retries() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(43, &[0], "mig:1g")).unwrap();
    let gi = g.gpus.borrow()[0].instances[3].gi_id;
    // A GPU instance busy for a moment (the DRA driver's ~1 s), or DCGM letting go.
    g.holders.borrow_mut().push((0, gi, Some(3)));
    let r = restore(&c, Some(&g), 43).unwrap();
    assert_eq!(
        (r.destroyed, r.held.len(), r.jobs.as_slice()),
        (7, 0, &[43][..])
    );
    assert_eq!(g.count(0), 0);
}

#[test]
fn multi_gpu_touches_only_the_jobs_gpus() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(4);
    let out = prolog(&c, &g, &spec(18, &[1, 3], "mig:3g")).unwrap();
    let env = env_of(&out);
    assert_eq!(env["COLLOC_SLOTS"], "4");
    assert_eq!(
        (g.count(0), g.count(1), g.count(2), g.count(3)),
        (0, 2, 0, 2)
    );
    // Another job on an overlapping GPU is refused while this one holds it.
    let out2 = prolog(&c, &g, &spec(19, &[3], "mig:1g")).unwrap();
    assert!(refusal(&out2).message.contains("job 18"), "{out2:?}");
    let r = restore_all(&c, Some(&g)).unwrap();
    assert_eq!((g.count(1), g.count(3)), (0, 0));
    assert_eq!(
        (r.jobs.as_slice(), r.destroyed),
        (&[18, 19][..], 4),
        "{r:?}"
    );
}

#[test]
fn naive_and_mps_environments() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("nvidia-cuda-mps-control");
    std::fs::write(&prog, "#!/bin/sh\ncat >/dev/null\nexit 0\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let c = Config {
        mps_control: prog.display().to_string(),
        ..cfg(tmp.path())
    };
    let g = MemGpus::a100s(2).with_mig_off(&[0, 1]);
    let env = env_of(&prolog(&c, &g, &spec(20, &[0, 1], "naive")).unwrap());
    assert_eq!(env["COLLOC_DEVICES"], "GPU-00000000,GPU-00000001");
    assert!(!env.contains_key("COLLOC_SLOTS"));
    restore(&c, Some(&g), 20).unwrap();

    let out = prolog(&c, &g, &spec(21, &[0], "mps:4")).unwrap();
    let env = env_of(&out);
    assert_eq!(env["COLLOC_SLOTS"], "4");
    // What colloc run reads of it (crate::jobenv), typed.
    if let Outcome::Applied(pairs) = &out {
        let je = crate::jobenv::JobEnv::from_pairs(pairs);
        assert_eq!(je.mode.as_deref(), Some("mps:4"));
        assert_eq!(je.slots.as_deref(), Some("4"));
        let pipes = je.mps_pipes();
        assert_eq!(pipes.len(), 1, "{pipes:?}");
        assert_eq!(pipes[0].0, "GPU-00000000");
        assert_eq!(
            pipes[0].1,
            std::path::PathBuf::from(&env["CUDA_MPS_PIPE_DIRECTORY"])
        );
    }
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    let pipe = std::path::PathBuf::from(&env["CUDA_MPS_PIPE_DIRECTORY"]);
    assert!(pipe.starts_with(tmp.path().join("run/job-21")));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&pipe).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let r = restore(&c, None, 21).unwrap();
    assert_eq!(r.mps_stopped, 1);
    assert!(!tmp.path().join("run/job-21").exists());
}

#[test]
fn off_does_nothing_and_no_gpus_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    assert_eq!(
        prolog(&c, &g, &spec(22, &[0], "off")).unwrap(),
        Outcome::Off
    );
    assert!(journal::load(&c, 22).unwrap().is_none());
    let out = prolog(&c, &g, &spec(23, &[], "mps")).unwrap();
    assert!(refusal(&out).message.contains("--gres=gpu:N"));
}

#[test]
fn journals_of_an_earlier_boot_do_not_hold_gpus() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(30, &[0], "mig:3g")).unwrap();
    // A reboot: the instances are gone, the journal (in /var/lib) is not.
    g.gpus.borrow_mut()[0].instances.clear();
    let mut j = journal::load(&c, 30).unwrap().unwrap();
    j.boot_id = Some("an-earlier-boot".into());
    journal::write(&c, &j).unwrap();
    let out = prolog(&c, &g, &spec(31, &[0], "mig:1g")).unwrap();
    assert_eq!(env_of(&out)["COLLOC_SLOTS"], "7");
    assert!(journal::load(&c, 30).unwrap().is_none());
}

#[test]
fn a_reused_job_id_with_another_request_is_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(2);
    prolog(&c, &g, &spec(32, &[0], "mig:3g")).unwrap();
    // Same id, other mode and GPU (slurmctld -c, id wrap): not the old environment.
    let out = prolog(&c, &g, &spec(32, &[1], "mig:1g")).unwrap();
    assert_eq!(env_of(&out)["COLLOC_SLOTS"], "7");
    assert_eq!((g.count(0), g.count(1)), (0, 7));
    restore(&c, Some(&g), 32).unwrap();
    assert_eq!(g.count(1), 0);
}

#[test]
fn an_unreadable_journal_blocks_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    std::fs::create_dir_all(c.jobs_dir()).unwrap();
    std::fs::write(journal::path(&c, 33), b"{garbage").unwrap();
    let out = prolog(&c, &g, &spec(34, &[0], "mig:3g")).unwrap();
    let r = refusal(&out);
    assert!(r.message.contains("33.json is unreadable"), "{}", r.message);
    assert!(!r.bad_request);
    assert_eq!(g.count(0), 0);
}

#[test]
fn a_mig_mode_change_pending_a_reset_marks_the_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Config {
        allow_mig_mode_change: true,
        ..cfg(tmp.path())
    };
    let g = MemGpus::a100s(1);
    prolog(&c, &g, &spec(35, &[0], "mig:3g")).unwrap();
    // The job ends; colloc had switched the GPU to MIG (it was off before).
    let mut j = journal::load(&c, 35).unwrap().unwrap();
    j.gpus[0].mig_mode_changed = true;
    j.gpus[0].mig_before = Some(MigMode {
        current: false,
        pending: false,
    });
    journal::write(&c, &j).unwrap();
    let g = MemGpus {
        mig_change_pending: true,
        ..g
    };
    let r = restore(&c, Some(&g), 35).unwrap();
    assert_eq!(g.count(0), 0, "instances destroyed all the same");
    assert_eq!(
        r.held[0].reason,
        HoldReason::ModePending {
            activation: "NVML_ERROR_IN_USE".into()
        }
    );
    assert!(
        journal::load(&c, 35).unwrap().is_some(),
        "journal kept until the reset"
    );
}

#[test]
fn a_mode_change_that_stays_pending_refuses_the_job_not_the_node() {
    // An A100 with MIG off that nvidia-persistenced holds: switching MIG on stays
    // pending. The job is refused with the reason; nothing is left changed.
    let tmp = tempfile::tempdir().unwrap();
    let c = Config {
        allow_mig_mode_change: true,
        ..cfg(tmp.path())
    };
    let g = MemGpus {
        mig_change_pending: true,
        ..MemGpus::a100s(1)
    };
    g.gpus.borrow_mut()[0].mig = Some(MigMode {
        current: false,
        pending: false,
    });
    let out = prolog(&c, &g, &spec(36, &[0], "mig:3g")).unwrap();
    let msg = &refusal(&out).message;
    assert!(
        msg.contains("pending") && msg.contains("NVML_ERROR_IN_USE"),
        "{msg}"
    );
    assert!(!refusal(&out).bad_request);
    assert_eq!(g.count(0), 0);
    assert_eq!(
        g.gpus.borrow()[0].mig.map(|m| m.pending),
        Some(false),
        "the mode request is taken back"
    );
    let j = journal::load(&c, 36).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Refused);
    restore(&c, Some(&g), 36).unwrap();
}

// Issue 24: what real drivers answer once, and what they keep answering.

fn quick(dir: &Path) -> Config {
    let mut c = cfg(dir);
    c.mig.retry_s = 1;
    c.mig.apply_budget_s = 5;
    c
}

#[test]
fn an_occupied_placement_moves_the_instance_to_a_free_one() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quick(tmp.path());
    let g = MemGpus::a100s(1);
    g.answers
        .borrow_mut()
        .push(("nvmlDeviceCreateGpuInstanceWithPlacement", 23, Some(1)));
    // One 3g: planned at slot 0, occupied once: made at slot 4, and recorded there.
    let env = env_of(&prolog(&c, &g, &spec(60, &[0], "mig:3gx1")).unwrap());
    assert_eq!(env["COLLOC_SLOTS"], "1");
    let made = g.instances(0).unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].placement.start, 4);
    let j = journal::load(&c, 60).unwrap().unwrap();
    assert_eq!(j.gpus[0].planned[0].placement.start, 4);
    restore(&c, Some(&g), 60).unwrap();
    assert_eq!(g.count(0), 0);
}

#[test]
fn transient_create_answers_are_retried_and_a_lasting_one_refuses_the_job() {
    for (call, code) in [
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 23),
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 999),
        ("nvmlGpuInstanceCreateComputeInstance", 19),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let c = quick(tmp.path());
        let g = MemGpus::a100s(1);
        g.answers.borrow_mut().push((call, code, Some(1)));
        // The full layout has no other placement: asked again at the same one.
        let env = env_of(&prolog(&c, &g, &spec(61, &[0], "mig:3g")).unwrap());
        assert_eq!(env["COLLOC_SLOTS"], "2", "{call} {code}");
        restore(&c, Some(&g), 61).unwrap();

        g.answers.borrow_mut().push((call, code, None));
        let out = prolog(&c, &g, &spec(62, &[0], "mig:3g")).unwrap();
        let r = refusal(&out);
        assert!(
            r.message.contains(call)
                && r.message.contains("an admin")
                && r.message.contains("left as it was"),
            "{r:?}"
        );
        assert_eq!(g.count(0), 0, "the GPU is whole again");
        g.answers.borrow_mut().clear();
        restore(&c, Some(&g), 62).unwrap();
    }
}

#[test]
fn no_permission_refuses_mig_jobs_naming_the_capability() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quick(tmp.path());
    let g = MemGpus::a100s(1);
    g.answers
        .borrow_mut()
        .push(("nvmlDeviceCreateGpuInstanceWithPlacement", 4, None));
    let out = prolog(&c, &g, &spec(63, &[0], "mig:1g")).unwrap();
    let r = refusal(&out);
    assert!(
        r.message.contains("mig-config capability")
            && r.message.contains("/dev/nvidia-caps/nvidia-cap1")
            && r.message
                .contains("nvidia-modprobe -f /proc/driver/nvidia/capabilities/mig/config"),
        "{r:?}"
    );
    assert_eq!(g.count(0), 0);
}

/// Listing a GPU's MIG instances refused to root (NVML_ERROR_NO_PERMISSION, issue 24)
/// does not stop a job that makes no instance; any other failure to list them is a node
/// fault, for every mode (the preflight cannot tell an idle GPU from one it cannot read).
#[test]
fn an_instance_list_refused_to_root_stops_only_mig_jobs_and_other_failures_stop_all() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quick(tmp.path());
    let g = MemGpus::a100s(1);
    g.gpus.borrow_mut()[0].mig = Some(MigMode {
        current: false,
        pending: false,
    });
    g.answers.borrow_mut().push(("list instances", 4, None));
    let env = env_of(&prolog(&c, &g, &spec(66, &[0], "naive")).unwrap());
    assert_eq!(env["COLLOC_MODE"], "naive");
    restore(&c, Some(&g), 66).unwrap();
    g.answers.borrow_mut().clear();
    g.answers.borrow_mut().push(("list instances", 999, None));
    let out = prolog(&c, &g, &spec(67, &[0], "naive"));
    assert!(out.is_err(), "an unreadable GPU is a node fault: {out:?}");
    g.answers.borrow_mut().clear();
}

#[test]
fn a_destroy_answered_unknown_once_and_a_mode_change_in_use_once_are_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = quick(tmp.path());
    c.allow_mig_mode_change = true;
    let g = MemGpus::a100s(1);
    g.gpus.borrow_mut()[0].mig = Some(MigMode {
        current: false,
        pending: false,
    });
    env_of(&prolog(&c, &g, &spec(64, &[0], "mig:2g")).unwrap());
    g.answers.borrow_mut().extend([
        ("nvmlGpuInstanceDestroy", 999, Some(1)),
        ("nvmlDeviceSetMigMode", 19, Some(1)),
    ]);
    let r = restore(&c, Some(&g), 64).unwrap();
    assert!(r.held.is_empty(), "{r:?}");
    assert_eq!(g.count(0), 0);
    assert!(
        !g.gpus.borrow()[0].mig.unwrap().current,
        "MIG mode back off"
    );
    assert!(g.answers.borrow().is_empty(), "both faults fired");
}

#[test]
fn answers_that_last_past_the_budget_mark_the_gpu_and_say_if_plain_jobs_break() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = quick(tmp.path());
    c.allow_mig_mode_change = true;
    let g = MemGpus::a100s(1);
    g.gpus.borrow_mut()[0].mig = Some(MigMode {
        current: false,
        pending: false,
    });
    env_of(&prolog(&c, &g, &spec(65, &[0], "mig:3g")).unwrap());
    g.answers
        .borrow_mut()
        .push(("nvmlGpuInstanceDestroy", 999, None));
    let r = restore_within(&c, Some(&g), 65, Duration::from_millis(400)).unwrap();
    assert_eq!(r.held.len(), 1, "{r:?}");
    let h = &r.held[0];
    assert_eq!(
        h.reason,
        HoldReason::Driver {
            answer: "NVML_ERROR_UNKNOWN".into()
        }
    );
    assert!(
        h.breaks_plain_jobs,
        "colloc switched MIG on: plain jobs need it off"
    );
    assert!(
        h.describe().contains("NVML_ERROR_UNKNOWN"),
        "{}",
        h.describe()
    );
    g.answers.borrow_mut().clear();
    let r = restore(&c, Some(&g), 65).unwrap();
    assert!(r.held.is_empty());
}

#[test]
fn a_restore_waits_for_a_gpu_lock_another_colloc_process_holds() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    env_of(&prolog(&c, &g, &spec(20, &[0], "mig:3g")).unwrap());
    let uuid = journal::load(&c, 20).unwrap().unwrap().gpus[0].uuid.clone();
    let held = journal::GpuLock::acquire(&c, &uuid).unwrap();
    let released = std::sync::Arc::new(AtomicBool::new(false));
    let flag = released.clone();
    let other = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(1));
        flag.store(true, Ordering::SeqCst);
        drop(held);
    });
    // A prolog (here a thread) holds the GPU: the restore changes nothing until it lets go.
    restore(&c, Some(&g), 20).unwrap();
    assert!(
        released.load(Ordering::SeqCst),
        "restored under another's lock"
    );
    assert_eq!(g.count(0), 0);
    other.join().unwrap();
}

#[test]
fn the_epilog_removes_a_summary_socket_its_batch_step_left() {
    let tmp = tempfile::tempdir().unwrap();
    let c = cfg(tmp.path());
    let g = MemGpus::a100s(1);
    env_of(&prolog(&c, &g, &spec(21, &[0], "mig:3g")).unwrap());
    // The batch step listened, and was killed before its end.
    let left = crate::jobsummary::Collector::bind(&c.run_dir, 21, crate::sys::uid()).unwrap();
    std::mem::forget(left);
    // Another job's socket stays.
    let other = crate::jobsummary::Collector::bind(&c.run_dir, 22, crate::sys::uid()).unwrap();
    let sock = crate::jobsummary::socket_path(&c.run_dir, 21);
    assert!(sock.exists());
    restore(&c, Some(&g), 21).unwrap();
    assert!(!sock.exists(), "{}", sock.display());
    assert!(other.path().exists());
    assert_eq!(g.count(0), 0);
    // The last socket takes the directory with it.
    drop(other);
    assert!(!c.run_dir.join(crate::jobsummary::SOCKET_DIR).exists());
}
