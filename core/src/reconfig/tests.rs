//! Apply/restore against an in-memory GPU that enforces placements like the driver: the
//! fixture here, the cases by subject in `mig`, `mig_mps`, `mps_jobs` and `state`.

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
    /// Each GPU's processes are listed this many more times, then no more (the driver
    /// tearing down the context of a process that exited); `None`: for ever.
    procs_listed: RefCell<Option<usize>>,
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
    /// These GPUs with MIG off (whole GPUs, as naive/mps jobs need them).
    fn with_mig_off(self, gpus: &[usize]) -> MemGpus {
        for &i in gpus {
            self.gpus.borrow_mut()[i].mig = Some(MigMode {
                current: false,
                pending: false,
            });
        }
        self
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
        self.answer("list instances")?;
        Ok(self.gpus.borrow()[gpu as usize].instances.clone())
    }
    fn processes(&self, gpu: u32) -> GpuResult<Vec<GpuProcess>> {
        if let Some(n) = &mut *self.procs_listed.borrow_mut() {
            if *n == 0 {
                return Ok(Vec::new());
            }
            *n -= 1;
        }
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

mod mig;
mod mig_mps;
mod mps_jobs;
mod node_state;
mod state;
