//! colloc drains a node itself, with a reason an admin can act on, where a GPU cannot be
//! brought back and the node's plain jobs (no `--colloc`, which colloc does not check)
//! would get a broken GPU; never Slurm's bare "Epilog error" (docs/design.md, "When a GPU
//! cannot be brought back").
//!
//! Which case gives which:
//! - instances something holds on a GPU that was in MIG mode before the job: the GPU is
//!   *marked* (colloc jobs are refused it with the reason); plain jobs get what they got
//!   before (a MIG-mode GPU): no drain.
//! - a GPU colloc switched into MIG mode for the job that stays in MIG mode (instances
//!   held, or the switch back pending): plain jobs would get a MIG GPU instead of a whole
//!   one: marked **and drained** with the reason below.
//! - an unknown GPU state (NVML cannot be loaded for a MIG journal, a driver answer that
//!   is not a busy GPU): drained with the error as the reason; only where `scontrol`
//!   cannot drain it does the epilog fail (Slurm then drains with "Epilog error" and the
//!   reason is in slurmd's log).

use std::time::Duration;

use crate::config::Config;
use crate::gpu::GpuHold;
use crate::holders::holder_text;
use crate::publish::PublishError;

/// The longest `scontrol update ... State=DRAIN` may take.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Slurm keeps reasons short in `sinfo -R`; longer ones are cut here (with "…").
const REASON_LIMIT: usize = 400;

/// The drain reason for a GPU a job's restore left broken for plain jobs: first what
/// clears it, then the GPU, then who holds it (Slurm shows the reason's start where
/// space is short).
pub fn reason_for_hold(node: &str, job: u32, h: &GpuHold) -> String {
    let gis: Vec<String> = h.gi_ids.iter().map(u32::to_string).collect();
    let what = if gis.is_empty() {
        format!("GPU {} ({}) left in MIG mode", h.index, h.uuid)
    } else {
        format!(
            "GPU {} ({}) left in MIG mode, GI {} of job {job}",
            h.index,
            h.uuid,
            gis.join(",")
        )
    };
    cut(format!(
        "colloc: to clear, stop the holder, run `colloc restore --job {job}`, then \
         `scontrol update NodeName={node} State=RESUME`; {what}; {}",
        holder_text(&h.holders)
    ))
}

/// The drain reason for an unknown GPU state met restoring `job`: first what clears it,
/// then what was met.
pub fn reason_for_fault(node: &str, job: u32, fault: &str) -> String {
    cut(format!(
        "colloc: to clear, run `colloc restore --job {job}`, check `colloc status`, then \
         `scontrol update NodeName={node} State=RESUME`; job {job}'s GPUs in an unknown \
         state: {fault}"
    ))
}

fn cut(s: String) -> String {
    // One line: Slurm shows the reason as is.
    let mut s = crate::text::escape(&s.replace(['\n', '"'], " ")).into_owned();
    if s.chars().count() > REASON_LIMIT {
        s = s.chars().take(REASON_LIMIT - 1).collect::<String>() + "…";
    }
    s
}

/// Drain this node with `reason` (`scontrol update NodeName=… State=DRAIN Reason=…`),
/// `scontrol` from the system directories only where root's alone, killed after
/// [`DRAIN_TIMEOUT`].
///
/// # Errors
/// Why the node could not be drained.
pub fn drain(node: &str, reason: &str) -> Result<(), PublishError> {
    let program = crate::config::resolve_program("scontrol").ok_or(PublishError::NoScontrol)?;
    let conf = std::env::var_os("SLURM_CONF");
    crate::publish::scontrol_update(
        &program,
        node,
        &["State=DRAIN".to_string(), format!("Reason={reason}")],
        DRAIN_TIMEOUT,
        conf.as_deref(),
    )
}

/// Should colloc drain for these holds? Only where `[mig] drain_broken` is on and a hold
/// leaves a GPU broken for plain jobs.
pub fn broken_holds<'a>(cfg: &Config, holds: &'a [GpuHold]) -> Vec<&'a GpuHold> {
    if !cfg.mig.drain_broken {
        return Vec::new();
    }
    holds.iter().filter(|h| h.breaks_plain_jobs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::HoldReason;
    use crate::holders::DeviceUser;

    fn user(pid: u32, name: &str) -> DeviceUser {
        DeviceUser {
            pid,
            name: name.into(),
            devices: vec![],
        }
    }

    #[test]
    fn reasons_name_the_gpu_the_holder_and_the_command() {
        let mut h = GpuHold {
            index: 1,
            uuid: "GPU-x".into(),
            gi_ids: vec![2],
            reason: HoldReason::InUse,
            since: 0,
            holders: vec![user(77, "nv-hostengine")],
            breaks_plain_jobs: true,
        };
        let r = reason_for_hold("n1", 9, &h);
        // What clears it comes first, then the GPU, then the holder.
        let clear = r.find("colloc restore --job 9").unwrap();
        let gpu = r.find("GPU 1 (GPU-x)").unwrap();
        let holder = r.find("pid 77 (nv-hostengine)").unwrap();
        assert!(clear < gpu && gpu < holder, "{r}");
        assert!(r.contains("GI 2 of job 9") && r.contains("NodeName=n1 State=RESUME"));
        h.holders.clear();
        assert!(reason_for_hold("n1", 9, &h).contains("no process listed"));
        let f = reason_for_fault("n1", 9, &"x\"y\n".repeat(300));
        assert!(f.chars().count() <= REASON_LIMIT && !f.contains('\n') && !f.contains('"'));
        assert!(
            f.find("colloc restore --job 9") < f.find("unknown state"),
            "{f}"
        );
        let mut cfg = Config::default();
        assert_eq!(broken_holds(&cfg, std::slice::from_ref(&h)).len(), 1);
        cfg.mig.drain_broken = false;
        assert!(broken_holds(&cfg, &[h]).is_empty());
    }

    #[test]
    fn a_reason_with_many_holders_stays_within_slurms_length() {
        let h = GpuHold {
            index: 0,
            uuid: "GPU-y".into(),
            gi_ids: vec![1],
            reason: HoldReason::InUse,
            since: 0,
            holders: (1..=500).map(|i| user(i, &"n".repeat(15))).collect(),
            breaks_plain_jobs: true,
        };
        let r = reason_for_hold("node-with-a-long-name", 123_456, &h);
        assert!(r.chars().count() <= REASON_LIMIT, "{r}");
        assert!(r.ends_with("and 497 more") && !r.contains('\n'), "{r}");
    }
}
