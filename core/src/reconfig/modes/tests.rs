//! Every mode's environment, exactly as the task hook sets it.

use std::path::Path;

use super::job_env;
use crate::gpu::GpuInfo;
use crate::gpu::Instance;
use crate::journal::GpuRecord;
use crate::journal::Journal;
use crate::mig::{self, Catalog};
use crate::mode::Mode;
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
