//! Apply/restore against an in-memory GPU that enforces placements like the driver.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::*;
use crate::container;
use crate::gpu::{
    GpuControl, GpuInfo, GpuProcess, GpuResult, HoldReason, Instance, MigMode, MigModeChange,
};
use crate::journal::Phase;
use crate::mig::{builtin_catalog, Catalog, Placement};
use crate::mps::MpsStart;
use crate::slurmconf::SlurmFacts;

#[derive(Default)]
struct Gpu {
    name: String,
    mig: Option<MigMode>,
    instances: Vec<Instance>,
    procs: Vec<GpuProcess>,
}

#[derive(Default)]
struct MemGpus {
    gpus: RefCell<Vec<Gpu>>,
    next_gi: RefCell<u32>,
    creates: RefCell<usize>,
    /// Fail the n-th create (1-based) with insufficient resources.
    fail_create: Option<usize>,
    /// Panic at the n-th create (a crash of the process, for restore tests).
    crash_create: Option<usize>,
    /// MIG mode changes stay pending (an A100 that something holds).
    mig_change_pending: bool,
    /// Holders that are not processes: (GPU, GI id, destroys left to refuse; `None`:
    /// until removed). DCGM profiling an instance, a leaked NVML handle.
    holders: RefCell<Vec<(usize, u32, Option<u32>)>>,
    /// Destroy calls made.
    destroys: RefCell<usize>,
    /// Driver answers to give once each, in order, by C call (issue 24's faults):
    /// `(call, code, times)`; `times` `None`: every time.
    answers: RefCell<Vec<(&'static str, u32, Option<u32>)>>,
}

impl MemGpus {
    fn a100s(n: usize) -> MemGpus {
        let m = MemGpus::default();
        for _ in 0..n {
            m.gpus.borrow_mut().push(Gpu {
                name: "NVIDIA A100-SXM4-40GB".into(),
                mig: Some(MigMode {
                    current: true,
                    pending: true,
                }),
                ..Gpu::default()
            });
        }
        m
    }
    fn count(&self, gpu: usize) -> usize {
        self.gpus.borrow()[gpu].instances.len()
    }
}

impl MemGpus {
    /// The fault set for `call`, if any (counted down).
    fn answer(&self, call: &'static str) -> GpuResult<()> {
        let mut a = self.answers.borrow_mut();
        let Some(i) = a.iter().position(|x| x.0 == call) else {
            return Ok(());
        };
        let code = a[i].1;
        if let Some(n) = &mut a[i].2 {
            *n -= 1;
            if *n == 0 {
                a.remove(i);
            }
        }
        Err(call_err(call, code))
    }
}

fn call_err(call: &'static str, code: u32) -> GpuError {
    GpuError::Call {
        call,
        gpu: "0".into(),
        message: "x".into(),
        code,
    }
}

impl GpuControl for MemGpus {
    fn makes_device_files(&self) -> bool {
        false
    }

    fn gpus(&self) -> GpuResult<Vec<GpuInfo>> {
        Ok(self
            .gpus
            .borrow()
            .iter()
            .enumerate()
            .map(|(i, g)| GpuInfo {
                index: i as u32,
                uuid: format!("GPU-{i:08}"),
                name: g.name.clone(),
                mig_mode: g.mig,
                memory_total: 40960 << 20,
            })
            .collect())
    }
    fn catalog(&self, gpu: u32) -> GpuResult<Catalog> {
        Ok(builtin_catalog(&self.gpus.borrow()[gpu as usize].name).unwrap())
    }
    fn instances(&self, gpu: u32) -> GpuResult<Vec<Instance>> {
        Ok(self.gpus.borrow()[gpu as usize].instances.clone())
    }
    fn processes(&self, gpu: u32) -> GpuResult<Vec<GpuProcess>> {
        Ok(self.gpus.borrow()[gpu as usize].procs.clone())
    }
    fn create_instance(
        &self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> GpuResult<Instance> {
        *self.creates.borrow_mut() += 1;
        let n = *self.creates.borrow();
        if self.crash_create == Some(n) {
            panic!("simulated crash");
        }
        if self.fail_create == Some(n) {
            return Err(call_err("nvmlGpuInstanceCreateComputeInstance", 23));
        }
        self.answer("nvmlDeviceCreateGpuInstanceWithPlacement")?;
        self.answer("nvmlGpuInstanceCreateComputeInstance")?;
        let mut gpus = self.gpus.borrow_mut();
        let g = &mut gpus[gpu as usize];
        if !g.mig.is_some_and(|m| m.current) {
            return Err(GpuError::NotMig(gpu));
        }
        let overlaps = g.instances.iter().any(|i| {
            i.placement.start < placement.start + placement.size
                && placement.start < i.placement.start + i.placement.size
        });
        if overlaps {
            return Err(call_err("nvmlDeviceCreateGpuInstanceWithPlacement", 23));
        }
        let cat = builtin_catalog(&g.name).unwrap();
        let p = cat.by_id(profile_id).unwrap();
        *self.next_gi.borrow_mut() += 1;
        let gi_id = *self.next_gi.borrow();
        let inst = Instance {
            gi_id,
            profile_id,
            profile: p.name.clone(),
            placement,
            ci_ids: vec![0],
            uuid: Some(format!("MIG-{gpu}-{gi_id}")),
        };
        g.instances.push(inst.clone());
        Ok(inst)
    }
    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> GpuResult<()> {
        *self.destroys.borrow_mut() += 1;
        self.answer("nvmlGpuInstanceDestroy")?;
        let mut gpus = self.gpus.borrow_mut();
        let g = &mut gpus[gpu as usize];
        if g.procs.iter().any(|p| p.gi_id == Some(gi_id)) {
            return Err(call_err("nvmlGpuInstanceDestroy", 19));
        }
        let mut holders = self.holders.borrow_mut();
        if let Some(h) = holders
            .iter_mut()
            .find(|h| h.0 == gpu as usize && h.1 == gi_id)
        {
            if let Some(n) = &mut h.2 {
                *n -= 1;
            }
            holders.retain(|h| h.2 != Some(0));
            return Err(call_err("nvmlComputeInstanceDestroy", 19));
        }
        let before = g.instances.len();
        g.instances.retain(|i| i.gi_id != gi_id);
        if g.instances.len() == before {
            return Err(call_err("nvmlGpuInstanceDestroy", 6));
        }
        Ok(())
    }
    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> GpuResult<MigModeChange> {
        self.answer("nvmlDeviceSetMigMode")?;
        let mut gpus = self.gpus.borrow_mut();
        let current = if self.mig_change_pending {
            gpus[gpu as usize].mig.is_some_and(|m| m.current)
        } else {
            enabled
        };
        let m = MigMode {
            current,
            pending: enabled,
        };
        gpus[gpu as usize].mig = Some(m);
        Ok(MigModeChange {
            mode: m,
            activation: if current == enabled { 0 } else { 19 },
        })
    }
}

fn cfg(dir: &Path) -> Config {
    // The job's user passes through it to run_dir's MPS directories.
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Config {
        state_dir: dir.join("state"),
        run_dir: dir.join("run"),
        ..Config::default()
    }
}

fn spec(job: u32, gpus: &[u32], mode: &str) -> JobSpec {
    JobSpec {
        job,
        uid: crate::sys::uid(),
        gid: crate::sys::gid(),
        gpus: gpus.to_vec(),
        mode: mode.parse().unwrap(),
    }
}

fn env_of(o: &Outcome) -> std::collections::HashMap<String, String> {
    match o {
        Outcome::Applied(env) => env.iter().cloned().collect(),
        other => panic!("not applied: {other:?}"),
    }
}

fn refusal(o: &Outcome) -> &Refusal {
    match o {
        Outcome::Refused(r) => r,
        other => panic!("not refused: {other:?}"),
    }
}

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
    g.gpus.borrow_mut()[0].procs.push(GpuProcess {
        pid: 4242,
        used_memory: None,
        gi_id: None,
    });
    let out = prolog(&c, &g, &spec(9, &[0], "mig:1g")).unwrap();
    assert!(refusal(&out).message.contains("4242"), "{out:?}");
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
    restore_all(&c, Some(&g)).unwrap();
    assert_eq!((g.count(1), g.count(3)), (0, 0));
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
    let g = MemGpus::a100s(2);
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

/// A stand-in MPS control program that starts nothing and answers everything.
fn quiet_control(dir: &Path) -> Config {
    let prog = dir.join("nvidia-cuda-mps-control");
    std::fs::write(&prog, "#!/bin/sh\ncat >/dev/null\nexit 0\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Config {
        mps_control: prog.display().to_string(),
        ..cfg(dir)
    }
}

/// The job's user: nobody where the tests run as root, else the caller.
fn user_spec(job: u32, gpus: &[u32], mode: &str) -> JobSpec {
    let mut s = spec(job, gpus, mode);
    if crate::sys::euid() == 0 {
        (s.uid, s.gid) = (65534, 65534);
    }
    s
}

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
    let g = MemGpus::a100s(2);
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
    let g = MemGpus::a100s(1);
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
    let g = MemGpus::a100s(1);
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
    let g = MemGpus::a100s(1);
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
    let g = MemGpus::a100s(1);
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

/// The stand-in MPS control program of tests/fake-mps (a daemon that really runs).
fn fake_mps(dir: &Path) -> Config {
    let prog =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-mps/nvidia-cuda-mps-control");
    Config {
        mps_control: std::fs::canonicalize(prog).unwrap().display().to_string(),
        ..cfg(dir)
    }
}

fn daemons_of(j: &Journal) -> Vec<crate::sys::PidHandle> {
    j.mps
        .iter()
        .flat_map(|d| mps::daemon_processes(d, j.uid))
        .collect()
}

#[test]
fn under_contain_the_extern_step_starts_the_daemons_where_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let c = fake_mps(tmp.path());
    let g = MemGpus::a100s(2);
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
    // The epilog stops them (they quit when asked) and removes their directories.
    let r = restore(&c, None, 50).unwrap();
    assert_eq!(r.mps_stopped, 2);
    assert!(r.killed.is_empty(), "killed {:?}", r.killed);
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
    let g = MemGpus::a100s(1);
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
    let g = MemGpus::a100s(1);
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
    let g = MemGpus::a100s(3);
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

    // Once there is room again, jobs run.
    std::fs::remove_dir_all(&fill).unwrap();
    env_of(&prolog(&c, &g, &spec(54, &[2], "mig:3g")).unwrap());
    restore(&c, Some(&g), 54).unwrap();
    assert_eq!(g.count(2), 0);
}

/// Issue 23: what an earlier epilog moved to run_dir/.leftovers is tried again at every
/// prolog (briefly): here it can go now, and it does.
#[test]
fn every_prolog_retries_the_leftovers() {
    let tmp = tempfile::tempdir().unwrap();
    let c = quiet_control(tmp.path());
    let s = user_spec(60, &[0], "mps");
    let log = c.run_dir.join(".leftovers/job-59.1700000000.0/gpu0/log");
    std::fs::create_dir_all(log.join("a/b")).unwrap();
    std::fs::write(log.join("a/b/f"), "x").unwrap();
    for p in [c.run_dir.clone(), c.run_dir.join(".leftovers")] {
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    std::fs::set_permissions(
        &c.run_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for p in [
        log.clone(),
        log.join("a"),
        log.join("a/b"),
        log.join("a/b/f"),
    ] {
        std::os::unix::fs::chown(&p, Some(s.uid), Some(s.gid)).unwrap();
    }
    let g = MemGpus::a100s(1);
    env_of(&prolog(&c, &g, &s).unwrap());
    assert!(!c.run_dir.join(".leftovers").exists());
    restore(&c, None, 60).unwrap();
    assert_eq!(std::fs::read_dir(&c.run_dir).unwrap().count(), 0);
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
