//! Issue 34: a GPU's MIG mode against the job, and an interrupted restore finished by the
//! next prolog.

use super::*;
use crate::reconfig::leftover::{self, JobAlive};

/// `n` Hopper GPUs in MIG mode.
fn hoppers(n: usize) -> MemGpus {
    let g = MemGpus::a100s(n);
    for gpu in g.gpus.borrow_mut().iter_mut() {
        gpu.name = "NVIDIA H100 80GB HBM3".into();
    }
    g
}

fn mig_current(g: &MemGpus, gpu: usize) -> bool {
    g.gpus.borrow()[gpu].mig.is_some_and(|m| m.current)
}

#[test]
fn an_mps_job_on_a_hopper_in_mig_mode_gets_mig_off_and_the_epilog_turns_it_back_on() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Config {
        allow_mig_mode_change: true,
        ..quiet_control(tmp.path())
    };
    let g = hoppers(1);
    let env = env_of(&prolog(&c, &g, &user_spec(80, &[0], "mps:4")).unwrap());
    assert_eq!(env["COLLOC_SLOTS"], "4");
    assert!(!mig_current(&g, 0), "MIG still on for an mps job");
    let j = journal::load(&c, 80).unwrap().unwrap();
    assert!(j.gpus[0].mig_mode_changed, "the switch is journaled");
    assert_eq!(j.gpus[0].mig_before.map(|m| m.current), Some(true));
    let r = restore(&c, Some(&g), 80).unwrap();
    assert!(r.held.is_empty(), "{r:?}");
    assert!(mig_current(&g, 0), "MIG not turned back on");
    assert!(journal::load(&c, 80).unwrap().is_none());
}

#[test]
fn a_naive_job_on_an_a100_in_mig_mode_is_refused_naming_mig_7g() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Config {
        allow_mig_mode_change: true,
        ..quiet_control(tmp.path())
    };
    let g = MemGpus::a100s(1);
    let out = prolog(&c, &g, &spec(81, &[0], "naive")).unwrap();
    let why = &refusal(&out).message;
    assert!(
        why.contains("MIG mode") && why.contains("GPU reset") && why.contains("--colloc=mig:7g"),
        "{why}"
    );
    assert!(mig_current(&g, 0), "the A100's mode was changed");
    // Not allowed to switch at all: a Hopper is refused too, naming the setting.
    let c = Config {
        allow_mig_mode_change: false,
        ..c
    };
    let g = hoppers(1);
    let out = prolog(&c, &g, &user_spec(82, &[0], "mps")).unwrap();
    let why = &refusal(&out).message;
    assert!(
        why.contains("allow_mig_mode_change = false") && why.contains("mig:7g:mps"),
        "{why}"
    );
    assert!(mig_current(&g, 0));
}

#[test]
fn a_switch_off_that_stays_pending_refuses_the_job_naming_what_holds_nvml() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Config {
        allow_mig_mode_change: true,
        ..quiet_control(tmp.path())
    };
    let mut g = hoppers(1);
    g.mig_change_pending = true;
    let out = prolog(&c, &g, &spec(83, &[0], "naive")).unwrap();
    let why = &refusal(&out).message;
    assert!(
        why.contains("pending") && why.contains("NVML is held"),
        "{why}"
    );
    assert!(
        why.contains("DisableGPUAcct") || why.contains("Slurm's GPU accounting"),
        "{why}"
    );
    assert!(mig_current(&g, 0));
    assert!(journal::load(&c, 83)
        .unwrap()
        .is_none_or(|j| j.phase == Phase::Refused));
}

#[test]
fn an_interrupted_restore_of_an_ended_job_is_finished_before_its_gpu_is_used_again() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let g = MemGpus::a100s(2);
    env_of(&prolog(&c, &g, &spec(90, &[0], "mig:3g")).unwrap());
    env_of(&prolog(&c, &g, &spec(91, &[1], "mig:1g")).unwrap());
    // Job 90's epilog was killed part way: its journal says Restoring.
    let mut j = journal::load(&c, 90).unwrap().unwrap();
    j.phase = Phase::Restoring;
    journal::write(&c, &j).unwrap();

    // A job given GPU 1 (job 91's, still running) finds nothing to finish.
    assert!(leftover::leftovers(&c, 92, &[1])
        .unwrap()
        .iter()
        .all(|j| j.job != 90));
    // Where Slurm still calls the job active, its journal is left alone.
    let found = leftover::leftovers(&c, 92, &[0]).unwrap();
    assert_eq!(found.iter().map(|j| j.job).collect::<Vec<_>>(), vec![90]);
    let done = leftover::finish(&c, Some(&g), found, &|_| JobAlive::Running).unwrap();
    assert_eq!((done.running, g.count(0)), (vec![90], 2));
    // Ended: restored before the GPU is used again; job 91 is untouched.
    let found = leftover::leftovers(&c, 92, &[0]).unwrap();
    let done = leftover::finish(&c, Some(&g), found, &|_| JobAlive::Ended).unwrap();
    assert_eq!(done.restored, vec![90]);
    assert_eq!((g.count(0), g.count(1)), (0, 7));
    assert!(journal::load(&c, 90).unwrap().is_none());
    assert!(journal::load(&c, 91).unwrap().is_some());
    // Without NVML a MIG leftover cannot be restored: a fault naming its GPU.
    let mut j = journal::load(&c, 91).unwrap().unwrap();
    j.phase = Phase::Restoring;
    journal::write(&c, &j).unwrap();
    let found = leftover::leftovers(&c, 93, &[1]).unwrap();
    let e = leftover::finish(&c, None, found, &|_| JobAlive::Unknown).unwrap_err();
    assert_eq!((e.job, e.gpus.clone()), (91, vec![1]));
    assert!(e.to_string().contains("GPU(s) [1]"), "{e}");
}

#[test]
fn what_holds_nvml_is_named_from_slurm_conf_and_running_programs() {
    let (pairs, _) = crate::slurmconf::parse_pairs(
        "JobAcctGatherType=jobacct_gather/cgroup\nAcctGatherEnergyType=acct_gather_energy/gpu\n",
    );
    let mut facts = SlurmFacts::from_pairs(&pairs);
    facts.slurm_conf = "/etc/slurm/slurm.conf".into();
    let named = crate::reconfig::create::nvml_holders(Some(&facts), &["nv-hostengine".into()]);
    assert_eq!(named.len(), 3, "{named:?}");
    assert!(named[0].contains("/etc/slurm/slurm.conf") && named[0].contains("DisableGPUAcct"));
    assert!(named[1].contains("acct_gather_energy/gpu"));
    assert!(named[2].starts_with("nv-hostengine"));
    let (pairs, _) = crate::slurmconf::parse_pairs(
        "JobAcctGatherType=jobacct_gather/cgroup\nJobAcctGatherParams=DisableGPUAcct\n",
    );
    assert!(
        crate::reconfig::create::nvml_holders(Some(&SlurmFacts::from_pairs(&pairs)), &[])
            .is_empty()
    );
}
