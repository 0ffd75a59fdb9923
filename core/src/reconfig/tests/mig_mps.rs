//! MPS inside MIG instances (`mig:LAYOUT:mps[:N]`): one daemon per instance, undone
//! with the instances.

use super::*;

/// `CUDA_VISIBLE_DEVICES` of each running process whose environment names `pipe` as its
/// `CUDA_MPS_PIPE_DIRECTORY` (the daemon, and the control program while it runs).
fn devices_served(pipe: &Path) -> Vec<String> {
    let want = format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let vars: Vec<String> = env
            .split(|&b| b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if vars.contains(&want) {
            if let Some(d) = vars
                .iter()
                .find_map(|v| v.strip_prefix("CUDA_VISIBLE_DEVICES="))
            {
                out.push(d.to_string());
            }
        }
    }
    out
}

#[test]
fn mps_inside_mig_runs_one_daemon_per_instance_and_restores_all() {
    let tmp = tempfile::tempdir().unwrap();
    let c = fake_mps(tmp.path());
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &user_spec(80, &[0], "mig:3g:mps:2")).unwrap();
    let env = env_of(&out);
    assert_eq!(env["COLLOC_MODE"], "mig:3g.20gbx2:mps:2");
    assert_eq!(env["COLLOC_SLOTS"], "4");
    assert_eq!(g.count(0), 2);
    let j = journal::load(&c, 80).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Applied);
    let uuids: Vec<String> = j.gpus[0]
        .created
        .iter()
        .map(|i| i.uuid.clone().unwrap())
        .collect();
    assert_eq!(
        env["COLLOC_DEVICES"],
        format!("{0},{1},{0},{1}", uuids[0], uuids[1])
    );
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
    assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=9984M");
    let pipes = crate::jobenv::parse_mps_pipes(&env["COLLOC_MPS_PIPES"]);
    assert_eq!(pipes.len(), 2);
    // Each instance's daemon: its own directories, started as the job's user, serving
    // only its instance.
    for ((uuid, pipe), d) in pipes.iter().zip(&j.mps) {
        assert_eq!(pipe, &d.pipe_dir);
        assert_eq!(&d.devices, uuid);
        assert!(pipe.is_dir(), "{}", pipe.display());
        assert_eq!(
            devices_served(pipe),
            vec![uuid.clone()],
            "{}",
            pipe.display()
        );
    }
    assert_eq!(pipes.iter().map(|p| p.0.clone()).collect::<Vec<_>>(), uuids);
    let running = daemons_of(&j);
    assert_eq!(running.len(), 2, "one daemon per instance");
    // A second prolog run is idempotent: no third daemon, no more instances.
    assert_eq!(
        prolog(&c, &g, &user_spec(80, &[0], "mig:3g:mps:2")).unwrap(),
        out
    );
    assert_eq!(daemons_of(&j).len(), 2);
    // The epilog: daemons stopped (they quit when asked), then the instances destroyed.
    let r = restore(&c, Some(&g), 80).unwrap();
    assert_eq!((r.mps_stopped, r.destroyed), (2, 2));
    assert!(r.killed.is_empty(), "killed {:?}", r.killed);
    assert!(running.iter().all(crate::sys::PidHandle::gone));
    assert_eq!(g.count(0), 0);
    assert!(!tmp.path().join("run/job-80").exists());
    assert!(journal::load(&c, 80).unwrap().is_none());
}

#[test]
fn mps_inside_mig_without_a_limit_leaves_slots_to_colloc_run() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(1);
    let env = env_of(&prolog(&c, &g, &user_spec(81, &[0], "mig:4g,2g:mps")).unwrap());
    assert_eq!(env["COLLOC_MODE"], "mig:4g.20gb,2g.10gb:mps");
    assert!(!env.contains_key("COLLOC_SLOTS"), "{env:?}");
    assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    assert_eq!(env["COLLOC_DEVICES"].split(',').count(), 2);
    assert!(tmp.path().join("run/job-81/gpu0-gi1/pipe").is_dir());
    assert!(tmp.path().join("run/job-81/gpu0-gi2/log").is_dir());
    restore(&c, Some(&g), 81).unwrap();
    assert_eq!(g.count(0), 0);
}

#[test]
fn a_daemon_that_does_not_start_in_one_instance_undoes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let real = fake_mps(tmp.path()).mps_control;
    // The second instance's daemon fails to start; the first one's starts.
    let prog = tmp.path().join("nvidia-cuda-mps-control");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/bash\ncase \"$1:$CUDA_MPS_PIPE_DIRECTORY\" in\n  -d:*-gi2/pipe) \
             echo 'out of client slots' >&2; exit 1 ;;\nesac\nexec {real} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let c = Config {
        mps_control: prog.display().to_string(),
        ..cfg(tmp.path())
    };
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &user_spec(82, &[0], "mig:3g:mps")).unwrap();
    let r = refusal(&out);
    assert!(!r.bad_request);
    assert!(
        r.message
            .starts_with("the MPS daemon did not start in MIG instance MIG-0-2: ")
            && r.message.contains("out of client slots"),
        "{}",
        r.message
    );
    assert_eq!(r.message.lines().count(), 1);
    // Nothing left: no instance, no daemon (the first one's stopped too), no directory.
    assert_eq!(g.count(0), 0);
    let first = mps::MpsDaemon::in_dir(&tmp.path().join("run/job-82/gpu0-gi1"), "MIG-0-1");
    assert!(mps::daemon_processes(&first, user_spec(82, &[0], "naive").uid).is_empty());
    assert!(devices_served(&first.pipe_dir).is_empty());
    assert!(!tmp.path().join("run/job-82").exists());
    let j = journal::load(&c, 82).unwrap().unwrap();
    assert_eq!(j.phase, Phase::Refused, "the tasks are told why");
    // The GPU is free for the next job.
    env_of(&prolog(&c, &g, &user_spec(83, &[0], "mig:3g")).unwrap());
    restore(&c, Some(&g), 83).unwrap();
}

#[test]
fn mps_inside_mig_is_refused_where_it_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(1);
    // More clients than MPS serves in a 1g instance: the request's fault.
    let out = prolog(&c, &g, &user_spec(84, &[0], "mig:1g:mps:7")).unwrap();
    let r = refusal(&out);
    assert!(r.bad_request);
    assert!(
        r.message.contains("serves at most 6 MPS client(s)"),
        "{}",
        r.message
    );
    assert_eq!(g.count(0), 0);
    // No control program on the node: the node's, said before anything changes.
    let c = Config {
        mps_control: "/nonexistent/nvidia-cuda-mps-control".into(),
        ..cfg(tmp.path())
    };
    let out = prolog(&c, &g, &user_spec(85, &[0], "mig:3g:mps")).unwrap();
    let r = refusal(&out);
    assert!(!r.bad_request);
    assert!(
        r.message.contains("the MPS control program") && r.message.contains("use mig:3g"),
        "{}",
        r.message
    );
    assert_eq!(g.count(0), 0);
    assert_eq!(*g.creates.borrow(), 0, "nothing was created");
    // A node that does not offer mps.
    let mut c = quiet_control(tmp.path());
    c.allowed_modes = vec![ModeKind::Mig];
    let r = refusal(&prolog(&c, &g, &user_spec(86, &[0], "mig:3g:mps")).unwrap()).clone();
    assert!(r.bad_request);
    assert!(
        r.message.contains("needs both mig and mps allowed"),
        "{}",
        r.message
    );
}

#[test]
fn under_contain_the_instances_daemons_start_in_the_extern_step_and_a_crash_before_is_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let c = fake_mps(tmp.path());
    let g = MemGpus::a100s(1);
    let s = user_spec(87, &[0], "mig:2gx2:mps");
    let env = env_of(&prolog_with(&c, &g, &s, MpsStart::ExternStep).unwrap());
    assert_eq!(env["COLLOC_MODE"], "mig:2g.10gbx2:mps");
    let j = journal::load(&c, 87).unwrap().unwrap();
    assert_eq!(j.mps.len(), 2);
    assert!(daemons_of(&j).is_empty(), "the prolog started a daemon");
    // Tasks before the extern step ran are refused, as for mps.
    let own = container::own_mount_ns().unwrap();
    assert!(mps_reachable(&j, own).is_err());
    let r = start_mps_in_extern_step(&c, 87, SlurmFacts::default).unwrap();
    assert!(
        matches!(r, ExternStart::Started { daemons: 2, .. }),
        "{r:?}"
    );
    let j = journal::load(&c, 87).unwrap().unwrap();
    mps_reachable(&j, own).unwrap();
    for d in &j.mps {
        assert_eq!(devices_served(&d.pipe_dir), vec![d.devices.clone()]);
    }
    let r = restore(&c, Some(&g), 87).unwrap();
    assert_eq!((r.mps_stopped, r.destroyed), (2, 2));
    assert_eq!(g.count(0), 0);

    // A prolog that died after recording the daemons, before starting them (what the
    // extern-step case leaves too): the restore finds no daemon and still destroys the
    // instances and removes the directories.
    env_of(
        &prolog_with(
            &c,
            &g,
            &user_spec(88, &[0], "mig:3g:mps:2"),
            MpsStart::ExternStep,
        )
        .unwrap(),
    );
    let mut j = journal::load(&c, 88).unwrap().unwrap();
    j.phase = Phase::Applying;
    journal::write(&c, &j).unwrap();
    let r = restore(&c, Some(&g), 88).unwrap();
    assert_eq!(r.destroyed, 2);
    assert!(r.killed.is_empty());
    assert_eq!(g.count(0), 0);
    assert!(!tmp.path().join("run/job-88").exists());
    assert!(journal::load(&c, 88).unwrap().is_none());
}
