//! The MIG half of a prolog: switch MIG mode where colloc may, create the planned
//! instances, make their device files. Transient driver answers are retried
//! ([`crate::retry`]) within `[mig] retry_s` per instance and `[mig] apply_budget_s` for
//! the whole prolog; an occupied placement (INSUFFICIENT_RESOURCES) is first tried at the
//! profile's other free placements, as mig-parted does. Whatever the driver answers in the
//! end, the job is refused (after the undo), never the node.

use std::time::{Duration, Instant};

use super::Failure;
use crate::config::Config;
use crate::devfiles;
use crate::gpu::{nvml_code, GpuControl, GpuError, GpuInfo};
use crate::journal::{self, Journal};
use crate::mig::{self, Catalog, Placement};
use crate::retry::{self, Backoff, Op};

/// What an admin does about a create the driver kept refusing.
fn admin_hint(gpu: u32) -> String {
    format!(
        "an admin looks for what occupies or holds the GPU (`colloc status`, \
         `nvidia-smi mig -lgi -i {gpu}`, DCGM or dcgm-exporter: see [mig] pre_hook/post_hook \
         in colloc.toml)"
    )
}

/// A job refused because the driver keeps answering `e`.
pub(super) fn driver_refusal(cfg: &Config, gpu: u32, doing: &str, e: &GpuError) -> Failure {
    let answer = answer_name(e);
    if e.is_no_permission() {
        return Failure::Refuse(format!(
            "GPU {gpu}: the driver refuses MIG control to root: {answer} ({e}); {}",
            devfiles::no_permission_hint(cfg)
        ));
    }
    Failure::Refuse(held_hint(
        format!(
            "GPU {gpu}: {doing}: the driver answered {answer} ({e}); the GPU was left as it \
             was; {}",
            admin_hint(gpu)
        ),
        e.is_in_use(),
    ))
}

/// `message`, where the driver answered IN_USE (`in_use`) with no process of the job's
/// listed, followed by what on this node likely holds NVML open: Slurm's GPU accounting
/// and GPU energy plugin (read from the node's slurm.conf) and DCGM processes (from
/// /proc). Slurm's gres documentation: while slurmstepd keeps NVML open for GPU
/// accounting, "any other process can not configure the GPU".
pub(super) fn held_hint(message: String, in_use: bool) -> String {
    if !in_use {
        return message;
    }
    let facts = crate::slurmconf::SlurmFacts::of_node().ok().flatten();
    let likely = nvml_holders(facts.as_ref(), &running_programs(HOLDER_PROGRAMS));
    if likely.is_empty() {
        return format!(
            "{message}; NVML is held with no process listed: look for Slurm's GPU accounting \
             (set JobAcctGatherParams=DisableGPUAcct), AcctGatherEnergyType=acct_gather_energy/gpu \
             or DCGM"
        );
    }
    format!(
        "{message}; NVML is held with no process listed, likely by {}",
        likely.join(", ")
    )
}

/// Programs that keep NVML or MIG handles open.
const HOLDER_PROGRAMS: &[&str] = &["nv-hostengine", "dcgm-exporter", "nvsm"];

/// What of `facts` and `running` holds NVML, one phrase each with its fix.
pub(super) fn nvml_holders(
    facts: Option<&crate::slurmconf::SlurmFacts>,
    running: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(f) = facts {
        let conf = f.slurm_conf.display();
        if f.gpu_acct {
            out.push(format!(
                "Slurm's GPU accounting in each job's slurmstepd ({conf} has a \
                 JobAcctGatherType without JobAcctGatherParams=DisableGPUAcct: add it)"
            ));
        }
        if f.energy_gpu {
            out.push(format!(
                "slurmd's GPU energy plugin ({conf}: AcctGatherEnergyType=acct_gather_energy/gpu; \
                 use another or none on colloc's MIG nodes)"
            ));
        }
    }
    for p in running {
        out.push(format!(
            "{p}, which runs on this node (pause it with [mig] pre_hook/post_hook, see \
             slurm-conf/examples/colloc-dcgm-hook)"
        ));
    }
    out
}

/// Which of `names` run on this node (by `/proc/PID/comm`).
fn running_programs(names: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        // comm is cut to 15 bytes: compare that much.
        if let Some(n) = names.iter().find(|n| n.get(..15).unwrap_or(n) == comm) {
            if !found.iter().any(|f| f == n) {
                found.push((*n).to_string());
            }
        }
    }
    found
}

/// What the driver answered, as nvml.h names it.
fn answer_name(e: &GpuError) -> &'static str {
    match e {
        GpuError::Call { code, .. } => crate::gpu::nvml_code_name(*code),
        _ => "an error",
    }
}

fn overlaps(a: Placement, b: Placement) -> bool {
    a.start < b.start + b.size && b.start < a.start + a.size
}

/// Make the planned instances of every GPU of `j`, recording each in `j` as it is made.
/// A [`Failure`] leaves the undo to the caller.
pub(super) fn make_instances(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &mut Journal,
) -> Result<(), Failure> {
    let deadline = Instant::now() + cfg.mig.apply_budget();
    for gi in 0..j.gpus.len() {
        let index = j.gpus[gi].index;
        if j.gpus[gi].mig_mode_changed {
            // Hopper switches at once; an A100 only when the driver can reset it (idle):
            // nvidia-persistenced or nvidia_drm holding it leaves the change pending.
            let mut backoff = Backoff::until(deadline.min(Instant::now() + cfg.mig.retry()));
            let change = retry::retry(
                Op::ModeChange,
                &format!("GPU {index}: MIG mode on"),
                &mut backoff,
                || ctl.set_mig_mode(index, true),
            )
            .map_err(|e| driver_refusal(cfg, index, "switching MIG mode on", &e))?;
            if !change.took_effect(true) {
                return Err(Failure::Refuse(held_hint(
                    change.why_pending(index, true),
                    change.activation == nvml_code::IN_USE,
                )));
            }
        }
        for k in 0..j.gpus[gi].planned.len() {
            create_one(cfg, ctl, j, gi, k, deadline)?;
        }
    }
    Ok(())
}

/// Create planned instance `k` of GPU record `gi`, retrying transient answers and moving
/// to another free placement where the planned one is occupied.
fn create_one(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &mut Journal,
    gi: usize,
    k: usize,
    deadline: Instant,
) -> Result<(), Failure> {
    let index = j.gpus[gi].index;
    let started = Instant::now();
    let mut backoff = Backoff::until(deadline.min(started + cfg.mig.retry()));
    let mut tried: Vec<Placement> = Vec::new();
    loop {
        let p = j.gpus[gi].planned[k].clone();
        tried.push(p.placement);
        let doing = format!(
            "creating {} at slot {} ({} tries in {} s)",
            p.profile,
            p.placement.start,
            backoff.tries(),
            started.elapsed().as_secs()
        );
        let left = deadline.saturating_duration_since(Instant::now());
        ctl.set_listing_wait(cfg.mig.listing_wait().min(left.max(Duration::from_secs(1))));
        let e = match ctl.create_instance(index, p.profile_id, p.placement) {
            Ok(inst) => {
                let cis = inst.ci_ids.clone();
                let gi_id = inst.gi_id;
                j.gpus[gi].created.push(inst);
                if !ctl.makes_device_files() {
                    return Ok(());
                }
                // A job whose device file is missing would find no CUDA device: refused.
                let minor = ctl.device_minor(index);
                return devfiles::ensure_instance(cfg, minor, gi_id, &cis, deadline).map_err(
                    |why| {
                        Failure::Refuse(format!(
                        "GPU {index}: the MIG instance {} (GPU instance {gi_id}) has no usable \
                         device file: {why}",
                        p.profile
                    ))
                    },
                );
            }
            Err(e) => e,
        };
        if !retry::is_transient(Op::Create, &e) {
            return Err(driver_refusal(cfg, index, &doing, &e));
        }
        log::info!("GPU {index}: {doing}: {} ({e})", answer_name(&e));
        if e.is_insufficient_resources() {
            if let Some(other) = free_placement(ctl, j, gi, k, &tried) {
                log::info!(
                    "GPU {index}: {} at slot {} is occupied; trying slot {}",
                    p.profile,
                    p.placement.start,
                    other.start
                );
                j.gpus[gi].planned[k].placement = other;
                // Restore goes by `planned`: record the new place before creating there.
                journal::write(cfg, j).map_err(|e| {
                    Failure::Refuse(format!("colloc cannot record the job's setup: {e}"))
                })?;
                continue;
            }
        }
        if !backoff.wait() {
            return Err(driver_refusal(cfg, index, &doing, &e));
        }
    }
}

/// Another placement of instance `k`'s profile that no other planned instance of its GPU
/// takes and that was not tried yet.
fn free_placement(
    ctl: &dyn GpuControl,
    j: &Journal,
    gi: usize,
    k: usize,
    tried: &[Placement],
) -> Option<Placement> {
    let g = &j.gpus[gi];
    let info = GpuInfo {
        index: g.index,
        uuid: g.uuid.clone(),
        name: g.name.clone(),
        mig_mode: None,
        memory_total: 0,
    };
    let catalog = catalog_for(ctl, &info).ok()?;
    let profile = catalog.by_id(g.planned[k].profile_id)?;
    profile
        .placements
        .iter()
        .copied()
        .filter(|pl| !tried.contains(pl))
        .find(|pl| {
            g.planned
                .iter()
                .enumerate()
                .all(|(i, other)| i == k || !overlaps(*pl, other.placement))
        })
}

/// The MIG catalog of a GPU: what NVML reports, or the built-in table where it cannot say.
///
/// # Errors
/// A one-line message when neither knows the GPU's profiles.
pub fn catalog_for(ctl: &dyn GpuControl, g: &GpuInfo) -> Result<Catalog, String> {
    match ctl.catalog(g.index) {
        Ok(c) if c.profiles.iter().any(|p| !p.placements.is_empty()) => Ok(c),
        other => {
            if let Err(e) = &other {
                log::debug!(
                    "GPU {}: NVML has no MIG profiles ({e}); using built-in tables",
                    g.index
                );
            }
            mig::builtin_catalog(&g.name).map_err(|_| {
                format!(
                    "GPU {} ({}) reports no MIG profiles and colloc has no table for it",
                    g.index, g.name
                )
            })
        }
    }
}
