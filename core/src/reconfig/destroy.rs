//! The MIG half of a restore: kill what still runs on the job's instances (and the
//! job's own leftovers holding them), destroy them with retries, wait for the driver's
//! listing, set MIG mode back.

use std::time::{Duration, Instant};

use super::{NodeFault, RestoreReport, KILL_WAIT};
use crate::config::Config;
use crate::devfiles;
use crate::gpu::{nvml_code, GpuControl, GpuError, GpuHold, HoldReason};
use crate::holders::{self, DeviceUser, Wanted};
use crate::journal::{GpuRecord, Journal};
use crate::retry;

/// First pause between destroys answered IN_USE; it doubles up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(100);
/// Longest pause between destroys answered IN_USE.
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// The MIG half of a restore: kill what still runs on the job's instances, destroy them
/// (retrying what the driver answers IN_USE for until `deadline`), wait until the driver
/// no longer lists them, and set a MIG mode colloc switched back. What cannot be done in
/// time for a known reason goes to `report.held`; NVML failures are faults.
pub(super) fn restore_mig(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &Journal,
    deadline: Instant,
    report: &mut RestoreReport,
) -> Result<(), NodeFault> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for g in &j.gpus {
        let Some((gi_ids, reason)) = restore_gpu(cfg, ctl, j, g, deadline, report)? else {
            continue;
        };
        let holders = held_by(cfg, ctl, g.index, &gi_ids);
        report.held.push(GpuHold {
            index: g.index,
            uuid: g.uuid.clone(),
            gi_ids,
            reason,
            since,
            holders,
            // Plain jobs expected a whole GPU here: one left in MIG mode is broken for
            // them.
            // (One that was in MIG mode before and stays out of it serves them.)
            breaks_plain_jobs: g.mig_mode_changed && !g.mig_before.is_some_and(|m| m.current),
        });
    }
    Ok(())
}

/// [`restore_mig`] for one GPU: `None` when it is back as it was, else the instances
/// still there and why.
fn restore_gpu(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &Journal,
    g: &GpuRecord,
    deadline: Instant,
    report: &mut RestoreReport,
) -> Result<Option<(Vec<u32>, HoldReason)>, NodeFault> {
    let mine = listed_ours(ctl, g)?;
    if !mine.is_empty() {
        match kill_on_instances(ctl, g.index, &mine, deadline)? {
            Ok(killed) => report.killed.extend(killed),
            Err(survivors) => {
                return Ok(Some((mine, HoldReason::Processes { pids: survivors })));
            }
        }
    }
    // One round first: what the job's own leftovers hold is freed by killing them
    // (never a system daemon's), then the destroys are retried.
    let (mut in_use, mut last) = destroy_with_retries(ctl, g.index, &mine, Instant::now(), report)?;
    if !in_use.is_empty() {
        let killed = kill_job_leftovers(cfg, ctl, j, g.index, &in_use, deadline);
        report.killed.extend(&killed);
        let (again, code) = destroy_with_retries(ctl, g.index, &in_use, deadline, report)?;
        in_use = again;
        last = code.or(last);
    }
    if !in_use.is_empty() {
        let reason = match last {
            Some(code) if code != nvml_code::IN_USE => HoldReason::Driver {
                answer: crate::gpu::nvml_code_name(code).to_string(),
            },
            _ => HoldReason::InUse,
        };
        return Ok(Some((in_use, reason)));
    }
    // A destroy that succeeded can leave the instance listed for a while
    // (go-nvml#146): wait for it rather than leave it to the next job.
    let mut still = listed_ours(ctl, g)?;
    while !still.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        still = listed_ours(ctl, g)?;
    }
    if !still.is_empty() {
        return Ok(Some((still, HoldReason::StillListed)));
    }
    match g.mig_before {
        Some(before) if g.mig_mode_changed => {
            Ok(mode_back(ctl, g.index, before.current, deadline)?.map(|r| (Vec::new(), r)))
        }
        _ => Ok(None),
    }
}

/// The job's instances GPU `g` lists now. Ours: a planned placement (everything created
/// was planned first) that was not there before. The profile and start must match: GI
/// ids follow placements, so another instance at the same place would have the same id.
fn listed_ours(ctl: &dyn GpuControl, g: &GpuRecord) -> Result<Vec<u32>, NodeFault> {
    let ours = |gi_id: u32, profile_id: u32, start: u32| {
        !g.preexisting.contains(&gi_id)
            && g.planned
                .iter()
                .any(|p| p.profile_id == profile_id && p.placement.start == start)
    };
    match ctl.instances(g.index) {
        Ok(list) => Ok(list
            .iter()
            .filter(|i| ours(i.gi_id, i.profile_id, i.placement.start))
            .map(|i| i.gi_id)
            .collect()),
        Err(GpuError::NotMig(_)) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Set GPU `gpu`'s MIG mode back to `current` (colloc switched it for the job). A GPU
/// left in MIG mode without instances has no CUDA device for the next whole-GPU job: if
/// switching back stays pending, the GPU stays marked (the returned reason). nvml.h:
/// IN_USE means "idle the device and retry".
fn mode_back(
    ctl: &dyn GpuControl,
    gpu: u32,
    current: bool,
    deadline: Instant,
) -> Result<Option<HoldReason>, NodeFault> {
    let mut backoff = retry::Backoff::until(deadline);
    let change = match retry::retry(
        retry::Op::ModeChange,
        &format!("GPU {gpu}: MIG mode back"),
        &mut backoff,
        || ctl.set_mig_mode(gpu, current),
    ) {
        Ok(c) => c,
        Err(e @ GpuError::Call { code, .. }) if retry::is_transient(retry::Op::ModeChange, &e) => {
            log::warn!("GPU {gpu}: MIG mode not set back: {e}");
            return Ok(Some(HoldReason::ModePending {
                activation: crate::gpu::nvml_code_name(code).to_string(),
            }));
        }
        Err(e) => return Err(e.into()),
    };
    if change.took_effect(current) {
        return Ok(None);
    }
    log::warn!("{}", change.why_pending(gpu, current));
    let activation = crate::gpu::nvml_code_name(change.activation).to_string();
    Ok(Some(HoldReason::ModePending { activation }))
}

/// Destroy the GPU instances `gis` of GPU `gpu`, retrying those the driver answers
/// IN_USE or UNKNOWN for (with no process on them: something that is not a process holds
/// them, or the GPU instance is still busy from its compute instance's destroy) with
/// growing pauses until `deadline`. Returns the ones still there and the last answer.
pub(super) fn destroy_with_retries(
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
    deadline: Instant,
    report: &mut RestoreReport,
) -> Result<(Vec<u32>, Option<u32>), NodeFault> {
    let mut left = gis.to_vec();
    let mut pause = RETRY_PAUSE_FIRST;
    let mut last = None;
    loop {
        let mut in_use = Vec::new();
        for &gi_id in &left {
            match ctl.destroy_instance(gpu, gi_id) {
                Ok(()) => report.destroyed += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) if retry::is_transient(retry::Op::Destroy, &e) => {
                    if let GpuError::Call { code, .. } = e {
                        last = Some(code);
                    }
                    in_use.push(gi_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        left = in_use;
        if left.is_empty() || Instant::now() + pause > deadline {
            return Ok((left, last));
        }
        log::info!(
            "GPU {gpu}: GPU instance(s) {left:?} in use with no process on them; trying again in {} ms",
            pause.as_millis()
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(RETRY_PAUSE_MAX);
    }
}

/// The device files of GPU `gpu` that a holder of its instances `gis` has open: the
/// GPU's own (`/dev/nvidiaN`, beside the configured `nvidia-caps` directory) and the
/// instances' `/dev/nvidia-caps` files, identified by device number.
pub(super) fn gpu_files(cfg: &Config, ctl: &dyn GpuControl, gpu: u32, gis: &[u32]) -> Wanted {
    let listed = ctl.instances(gpu).unwrap_or_default();
    let minor = ctl.device_minor(gpu);
    let dev = cfg
        .mig
        .caps_dev_dir
        .parent()
        .unwrap_or(std::path::Path::new("/dev"));
    let mut files = vec![dev.join(format!("nvidia{minor}"))];
    for &gi in gis {
        let cis = listed
            .iter()
            .find(|i| i.gi_id == gi)
            .map(|i| i.ci_ids.clone())
            .unwrap_or_default();
        files.extend(devfiles::instance_files(cfg, minor, gi, &cis));
    }
    Wanted::from_paths(files)
}

/// Who has the device files of GPU `gpu`'s instances `gis` open (from `/proc`), for
/// naming the holder of a GPU that cannot be brought back.
pub(super) fn held_by(
    cfg: &Config,
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
) -> Vec<DeviceUser> {
    holders::device_users(
        std::path::Path::new("/proc"),
        &gpu_files(cfg, ctl, gpu, gis),
    )
}

/// Kill what of the job's user still holds GPU `gpu`'s instances `gis` (a leftover with
/// a device file or NVML handle open, which NVML does not list as a process) through
/// pidfds ([`holders::kill_job_holders`], SECURITY.md rule 12). Returns the pids killed.
pub(super) fn kill_job_leftovers(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &Journal,
    gpu: u32,
    gis: &[u32],
    deadline: Instant,
) -> Vec<u32> {
    if !holders::ordinary_uid(j.uid) {
        return Vec::new();
    }
    let wanted = gpu_files(cfg, ctl, gpu, gis);
    let users = holders::device_users(std::path::Path::new("/proc"), &wanted);
    holders::kill_job_holders(&users, j.uid, &wanted, deadline)
}

/// Kill processes still running on the job's instances (the job is over) and wait until
/// NVML no longer lists them, at most [`KILL_WAIT`] and not past `deadline`. `Ok(Ok(pids
/// killed))`, or `Ok(Err(pids still listed))`.
pub(super) fn kill_on_instances(
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
    deadline: Instant,
) -> Result<Result<Vec<u32>, Vec<u32>>, NodeFault> {
    let on_ours = || -> Result<Vec<u32>, GpuError> {
        Ok(ctl
            .processes(gpu)?
            .into_iter()
            .filter(|p| p.gi_id.is_some_and(|g| gis.contains(&g)))
            .map(|p| p.pid)
            .collect())
    };
    let pids = on_ours()?;
    for &pid in &pids {
        log::warn!("GPU {gpu}: killing leftover process {pid} on the job's MIG instance");
        crate::sys::kill(pid, libc::SIGKILL);
    }
    let deadline = deadline.min(Instant::now() + KILL_WAIT);
    loop {
        let left = on_ours()?;
        if left.is_empty() {
            return Ok(Ok(pids));
        }
        if Instant::now() >= deadline {
            return Ok(Err(left));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
