//! The node's GPU state at a job's start, for every job (plain ones too): what an
//! interrupted epilog left is restored first (issue 34), and a plain job on GPUs in MIG
//! mode is told at start.

use colloc_core::config::Config;
use colloc_core::drain;
use colloc_core::gpu::GpuControl;
use colloc_core::journal;
use colloc_core::mode::Mode;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec};

use super::{drain_node, env_u32, publish, Host, NOGROUP};

/// What every job's prolog does first: finish the restores an interrupted epilog left on
/// its GPUs (refusing the job where that fails), and for a plain job record the notice
/// its tasks print on GPUs in MIG mode. `Ok(true)`: the prolog is done.
///
/// # Errors
/// Where the node could not be drained.
pub(super) fn before_job(
    host: &dyn Host,
    cfg: &Config,
    job: u32,
    mode: &Mode,
    gpus: &[u32],
) -> Result<bool, String> {
    if let Some(refusal) = finish_interrupted(cfg, job, gpus)? {
        let spec = JobSpec {
            job,
            uid: env_u32(host, "SLURM_JOB_UID").unwrap_or(0),
            gid: env_u32(host, "SLURM_JOB_GID").unwrap_or(NOGROUP),
            gpus: gpus.to_vec(),
            mode: mode.clone(),
        };
        reconfig::record_refusal(cfg, &spec, refusal);
        publish(cfg, job);
        return Ok(true);
    }
    if *mode == Mode::Off {
        note_plain_job(cfg, job, gpus);
        return Ok(true);
    }
    Ok(false)
}

/// Finish the restores an interrupted epilog left on `gpus` (journals of ended jobs that
/// claim them, [`reconfig::leftover`]). `Some(line)` refuses this job: a restore failed
/// (the node is drained with a reason naming the GPU) or left a GPU broken for plain jobs
/// (drained likewise).
///
/// # Errors
/// Where the node could not be drained (the prolog then fails, which drains it).
fn finish_interrupted(cfg: &Config, job: u32, gpus: &[u32]) -> Result<Option<String>, String> {
    use reconfig::leftover;
    if journal::check_state_dir(cfg).is_err() {
        // Reported where it matters (colloc jobs are refused, the epilog says why).
        return Ok(None);
    }
    let found = match leftover::leftovers(cfg, job, gpus) {
        Ok(f) if f.is_empty() => return Ok(None),
        Ok(f) => f,
        Err(e) => {
            log::error!("job {job}: cannot look for unfinished restores: {e}");
            return Ok(None);
        }
    };
    let ctl = match cfg
        .check_nvml_library()
        .map_err(|e| e.to_string())
        .and_then(|()| NvmlGpus::open(&cfg.nvml_library).map_err(|e| e.to_string()))
    {
        Ok(c) => Some(c),
        Err(e) => {
            log::warn!("job {job}: {e}");
            None
        }
    };
    let node = colloc_core::publish::node_name().unwrap_or_else(|| "?".into());
    let result = leftover::finish(
        cfg,
        ctl.as_ref().map(|c| c as &dyn GpuControl),
        found,
        &leftover::slurm_job_state,
    );
    publish(cfg, job);
    match result {
        Ok(done) => {
            for j in &done.restored {
                log::info!("job {job}: job {j}'s unfinished restore completed first");
            }
            let broken: Vec<(u32, colloc_core::gpu::GpuHold)> = done
                .marked
                .into_iter()
                .filter(|(_, h)| !drain::broken_holds(cfg, std::slice::from_ref(h)).is_empty())
                .collect();
            let Some((other, h)) = broken.first() else {
                return Ok(None);
            };
            drain_node(&node, &drain::reason_for_hold(&node, *other, h))?;
            Ok(Some(format!(
                "GPU {} was left reconfigured by job {other} and cannot be restored ({}); the \
                 node is drained for an admin",
                h.index,
                h.describe()
            )))
        }
        Err(f) => {
            let gpus: Vec<String> = f.gpus.iter().map(u32::to_string).collect();
            log::error!("job {job}: {f}");
            drain_node(
                &node,
                &drain::reason_for_fault(
                    &node,
                    f.job,
                    &format!("GPU {} not restored: {}", gpus.join(","), f.fault),
                ),
            )?;
            Ok(Some(format!(
                "GPU {} was left reconfigured by job {} and cannot be restored; the node is \
                 drained for an admin",
                gpus.join(","),
                f.job
            )))
        }
    }
}

/// A plain job (no `--colloc`) on GPUs in MIG mode: record the line its tasks print at
/// start ([`reconfig::mig_fit`]). Best effort: never fails the job or the node.
fn note_plain_job(cfg: &Config, job: u32, gpus: &[u32]) {
    use reconfig::mig_fit;
    // A notice of an earlier job with this id goes.
    if let Err(e) = mig_fit::write_notice(cfg, job, None) {
        log::debug!("job {job}: {e}");
    }
    if gpus.is_empty() || cfg.check_nvml_library().is_err() {
        return;
    }
    let info = match NvmlGpus::open(&cfg.nvml_library).and_then(|c| c.gpus()) {
        Ok(all) => all
            .into_iter()
            .filter(|g| gpus.contains(&g.index))
            .collect::<Vec<_>>(),
        Err(e) => {
            log::debug!("job {job}: MIG mode of its GPUs not checked: {e}");
            return;
        }
    };
    if let Some(n) = mig_fit::plain_notice(&info) {
        log::info!("job {job}: {n}");
        if let Err(e) = mig_fit::write_notice(cfg, job, Some(&n)) {
            log::warn!("job {job}: cannot record its MIG notice: {e}");
        }
    }
}
