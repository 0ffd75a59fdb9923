//! The environment a job's tasks get (docs/design.md, "The environment contract"), built
//! once for every mode from what the prolog made; [`crate::jobenv`] reads it back.

use crate::gpu::GpuInfo;
use crate::jobenv::{DEVICES, MODE, MPS_PIPES, SLOTS};
use crate::journal::Journal;
use crate::mig::{self, Catalog, PlannedInstance};
use crate::migmps;
use crate::mode::Mode;
use crate::mps;

/// The environment of the job's tasks, in the order the task hook sets it.
///
/// - `mig:LAYOUT`: `COLLOC_MODE` (the layout made), `COLLOC_SLOTS` (instances),
///   `COLLOC_DEVICES` (their `MIG-…` UUIDs).
/// - `mig:LAYOUT:mps[:N]`: `COLLOC_MODE` (the layout made, then `:mps` or `:mps:N`),
///   `COLLOC_SLOTS` (instances × N; unset with `:mps`, as for plain `mps`),
///   `COLLOC_DEVICES` (the instances' UUIDs, all of them N times over, so one entry is one
///   slot), the MPS daemons' variables and, with `:mps:N`, the client limits of the
///   smallest instance (`colloc run` sets each run's from its own instance).
/// - `mps[:N]`: `COLLOC_MODE`, with N `COLLOC_SLOTS` and the client limits of the first
///   GPU, `COLLOC_DEVICES` (each GPU's UUID, N times over with N), the MPS daemons'
///   variables.
/// - `naive`: `COLLOC_MODE`, `COLLOC_DEVICES` (the GPUs' UUIDs).
///
/// The MPS daemons' variables: the first daemon's `CUDA_MPS_PIPE_DIRECTORY` and
/// `CUDA_MPS_LOG_DIRECTORY`, and `COLLOC_MPS_PIPES` (`DEVICES=PIPE_DIR` per daemon).
/// `catalogs` (the journal's GPUs' MIG catalogs, in its GPU order) size the instances'
/// client limits.
pub(super) fn job_env(
    j: &Journal,
    gpus: &[GpuInfo],
    mode: &Mode,
    catalogs: &[Catalog],
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    match mode {
        Mode::Mig(_) => {
            let planned: Vec<PlannedInstance> = j
                .gpus
                .iter()
                .flat_map(|g| g.planned.iter().cloned())
                .collect();
            let devices: Vec<String> = j
                .gpus
                .iter()
                .flat_map(|g| g.created.iter().filter_map(|i| i.uuid.clone()))
                .collect();
            // With one GPU the summary is the exact layout; with several it is per GPU.
            let per_gpu = j
                .gpus
                .first()
                .map_or(planned.as_slice(), |g| g.planned.as_slice());
            env.push((MODE.into(), mig::layout_mode_string(per_gpu)));
            env.push((SLOTS.into(), devices.len().to_string()));
            env.push((DEVICES.into(), devices.join(",")));
        }
        Mode::MigMps { clients, .. } => {
            let planned: Vec<PlannedInstance> = j
                .gpus
                .first()
                .map(|g| g.planned.clone())
                .unwrap_or_default();
            let suffix = match clients {
                Some(n) => format!(":mps:{n}"),
                None => ":mps".to_string(),
            };
            env.push((
                MODE.to_string(),
                format!("{}{suffix}", mig::layout_mode_string(&planned)),
            ));
            let per = clients.unwrap_or(1) as usize;
            // Round the instances N times, so the lowest free slots spread runs over them.
            let devices: Vec<String> = (0..per)
                .flat_map(|_| j.mps.iter().map(|d| d.devices.clone()))
                .collect();
            if clients.is_some() {
                env.push((SLOTS.into(), devices.len().to_string()));
            }
            env.push((DEVICES.into(), devices.join(",")));
            mps_daemons(j, &mut env);
            if let Some(n) = clients {
                let memory = migmps::instance_memory(j, catalogs);
                let smallest: Vec<u64> = memory.iter().map(|(_, m)| *m).min().into_iter().collect();
                env.extend(mps::client_limits(*n, &smallest));
            }
        }
        Mode::Mps { clients } => {
            env.push((MODE.into(), mode.to_string()));
            let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
            let mut devices = Vec::new();
            if let Some(n) = clients {
                for u in &uuids {
                    devices.extend(std::iter::repeat_n(u.clone(), *n as usize));
                }
                env.push((SLOTS.into(), devices.len().to_string()));
                let mem: Vec<u64> = gpus
                    .iter()
                    .map(|g| g.memory_total / (1024 * 1024))
                    .collect();
                // Limits are per client device; a client sees one GPU (its slot's).
                let first = mem.first().copied().unwrap_or(0);
                env.extend(mps::client_limits(*n, &[first]));
            } else {
                devices = uuids;
            }
            env.push((DEVICES.into(), devices.join(",")));
            mps_daemons(j, &mut env);
        }
        Mode::Naive => {
            env.push((MODE.into(), "naive".into()));
            let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
            env.push((DEVICES.into(), uuids.join(",")));
        }
        Mode::Off => {}
    }
    env
}

/// The MPS daemons' variables: the first daemon's directories (what a plain CUDA program
/// of the job connects to) and every daemon's pipe directory in `COLLOC_MPS_PIPES`.
fn mps_daemons(j: &Journal, env: &mut Vec<(String, String)>) {
    if let Some(d) = j.mps.first() {
        env.extend(d.env());
    }
    let pipes: Vec<String> = j
        .mps
        .iter()
        .map(|d| format!("{}={}", d.devices, d.pipe_dir.display()))
        .collect();
    env.push((MPS_PIPES.into(), pipes.join(",")));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::gpu::Instance;
    use crate::journal::GpuRecord;
    use crate::mps::MpsDaemon;

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA A100-SXM4-40GB".into(),
            mig_mode: None,
            memory_total: 40 * GIB,
        }
    }

    /// Job 7 on two A100s, `layout` planned and made on each (the second GPU's instances
    /// without device UUIDs past the first), with one MPS daemon per instance or per GPU.
    fn journal(layout: &str, daemon_per_instance: bool) -> (Journal, Vec<Catalog>) {
        let cat = mig::builtin_catalog("A100-40GB").unwrap();
        let Mode::Mig(req) = layout.parse().unwrap() else {
            unreachable!()
        };
        let planned = cat.plan(&req).unwrap();
        let mut j = Journal::new(7, 1000, 1000, layout.into());
        for index in 0..2u32 {
            let created = planned
                .iter()
                .enumerate()
                .map(|(k, p)| Instance {
                    gi_id: k as u32 + 1,
                    profile_id: p.profile_id,
                    profile: p.profile.clone(),
                    placement: p.placement,
                    ci_ids: vec![0],
                    uuid: (index == 0 || k == 0).then(|| format!("MIG-{index}-{k}")),
                })
                .collect();
            j.gpus.push(GpuRecord {
                index,
                uuid: format!("GPU-{index}"),
                name: "NVIDIA A100-SXM4-40GB".into(),
                mig_before: None,
                mig_mode_changed: false,
                preexisting: Vec::new(),
                planned: planned.clone(),
                created,
            });
        }
        let run = Path::new("/run/colloc/job-7");
        j.mps = if daemon_per_instance {
            j.gpus
                .iter()
                .flat_map(|g| g.created.iter().filter_map(|i| i.uuid.clone()))
                .map(|u| MpsDaemon::in_dir(&run.join(&u), &u))
                .collect()
        } else {
            (0..2)
                .map(|i| MpsDaemon::in_dir(&run.join(format!("gpu{i}")), &format!("GPU-{i}")))
                .collect()
        };
        (j, vec![cat.clone(), cat])
    }

    fn env(mode: &str) -> Vec<(String, String)> {
        let mode: Mode = mode.parse().unwrap();
        let (j, catalogs) = journal("mig:3g,2g", matches!(mode, Mode::MigMps { .. }));
        job_env(&j, &[gpu(0), gpu(1)], &mode, &catalogs)
    }

    #[test]
    fn every_modes_variables_in_the_order_the_task_hook_sets_them() {
        // Two GPUs, each with a 3g and a 2g; the second GPU's 2g has no device UUID.
        for (mode, want) in [
        (
            "mig:3g,2g",
            "\
COLLOC_MODE=mig:3g.20gb,2g.10gb
COLLOC_SLOTS=3
COLLOC_DEVICES=MIG-0-0,MIG-0-1,MIG-1-0
",
        ),
        (
            "mig:3g,2g:mps",
            "\
COLLOC_MODE=mig:3g.20gb,2g.10gb:mps
COLLOC_DEVICES=MIG-0-0,MIG-0-1,MIG-1-0
CUDA_MPS_PIPE_DIRECTORY=/run/colloc/job-7/MIG-0-0/pipe
CUDA_MPS_LOG_DIRECTORY=/run/colloc/job-7/MIG-0-0/log
COLLOC_MPS_PIPES=MIG-0-0=/run/colloc/job-7/MIG-0-0/pipe,MIG-0-1=/run/colloc/job-7/MIG-0-1/pipe,MIG-1-0=/run/colloc/job-7/MIG-1-0/pipe
",
        ),
        (
            "mig:3g,2g:mps:2",
            "\
COLLOC_MODE=mig:3g.20gb,2g.10gb:mps:2
COLLOC_SLOTS=6
COLLOC_DEVICES=MIG-0-0,MIG-0-1,MIG-1-0,MIG-0-0,MIG-0-1,MIG-1-0
CUDA_MPS_PIPE_DIRECTORY=/run/colloc/job-7/MIG-0-0/pipe
CUDA_MPS_LOG_DIRECTORY=/run/colloc/job-7/MIG-0-0/log
COLLOC_MPS_PIPES=MIG-0-0=/run/colloc/job-7/MIG-0-0/pipe,MIG-0-1=/run/colloc/job-7/MIG-0-1/pipe,MIG-1-0=/run/colloc/job-7/MIG-1-0/pipe
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4928M
",
        ),
        (
            "mps",
            "\
COLLOC_MODE=mps
COLLOC_DEVICES=GPU-0,GPU-1
CUDA_MPS_PIPE_DIRECTORY=/run/colloc/job-7/gpu0/pipe
CUDA_MPS_LOG_DIRECTORY=/run/colloc/job-7/gpu0/log
COLLOC_MPS_PIPES=GPU-0=/run/colloc/job-7/gpu0/pipe,GPU-1=/run/colloc/job-7/gpu1/pipe
",
        ),
        (
            "mps:2",
            "\
COLLOC_MODE=mps:2
COLLOC_SLOTS=4
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M
COLLOC_DEVICES=GPU-0,GPU-0,GPU-1,GPU-1
CUDA_MPS_PIPE_DIRECTORY=/run/colloc/job-7/gpu0/pipe
CUDA_MPS_LOG_DIRECTORY=/run/colloc/job-7/gpu0/log
COLLOC_MPS_PIPES=GPU-0=/run/colloc/job-7/gpu0/pipe,GPU-1=/run/colloc/job-7/gpu1/pipe
",
        ),
        (
            "naive",
            "\
COLLOC_MODE=naive
COLLOC_DEVICES=GPU-0,GPU-1
",
        ),
        ("off", ""),
        ] {
            let got: String = env(mode).iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            assert_eq!(got, want, "{mode}");
        }
    }
}
