//! A GPU whose MIG mode does not fit the job is never handed out silently (issue 34).
//!
//! With MIG enabled, CUDA sees only MIG devices: a process given the whole GPU finds
//! none. So on a GPU in MIG mode:
//! - `naive` and `mps` need MIG off. Where the node allows mode changes
//!   (`allow_mig_mode_change = true`) and the GPU's family changes mode without a reset
//!   (Hopper and later), colloc turns MIG off for the job (journaled; the epilog turns it
//!   back on). Where it may not, or the GPU is an Ampere A100/A30 (whose mode change needs
//!   a GPU reset, which a node with persistenced, DCGM or a display driver does not get,
//!   and whose switch back at the epilog would then stay pending), the job is refused with
//!   a line naming `--colloc=mig:7g` / `--colloc=mig:7g:mps`: one full-size instance, the
//!   same GPU minus what MIG itself takes (on an A100 40GB 98 of 108 SMs), asked for by
//!   name rather than given silently in place of the whole GPU the user asked for.
//! - a plain job (no `--colloc`) is told at the start of its tasks, on its stderr
//!   ([`plain_notice`], recorded by the prolog, read by `task_init_privileged`): it runs,
//!   as Slurm gave it the GPU, but CUDA will find no device.
//!
//! [`fits`] names each GPU's mode and the job kinds it serves (`colloc status`,
//! `colloc check-config`).

use std::time::Instant;

use super::{create, run_post_hook, Failure};
use crate::config::Config;
use crate::gpu::{nvml_code, GpuControl, GpuInfo, GpuResult};
use crate::hooks;
use crate::journal::Journal;
use crate::mode::Mode;
use crate::retry::{self, Backoff, Op};
use crate::statedir;

/// The directory in `state_dir` where the prolog leaves a plain job's notice.
const NOTICE_DIR: &str = "notices";
/// Largest notice read.
const NOTICE_LIMIT: u64 = 64 << 10;

/// How a GPU family changes MIG mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSwitch {
    /// No MIG on this GPU.
    NoMig,
    /// Hopper and later: the driver switches at once when no process uses the GPU.
    Live,
    /// Ampere (A100, A30): the switch needs a GPU reset.
    NeedsReset,
}

/// How the GPU named `name` (as NVML reports it) changes MIG mode. Ampere's MIG GPUs
/// are the A100 and A30; every later MIG family (H100, H200, GH200, B200, …) switches
/// without a reset.
pub fn mode_switch(g: &GpuInfo) -> ModeSwitch {
    if g.mig_mode.is_none() {
        return ModeSwitch::NoMig;
    }
    let n = g.name.to_ascii_uppercase();
    if n.contains("A100") || n.contains("A30") {
        ModeSwitch::NeedsReset
    } else {
        ModeSwitch::Live
    }
}

/// Is GPU `g` in MIG mode now (CUDA sees only its instances)?
pub fn mig_on(g: &GpuInfo) -> bool {
    g.mig_mode.is_some_and(|m| m.current)
}

/// A `naive`/`mps` job on GPU `g` in MIG mode: `Ok(true)` where colloc turns MIG off for
/// it, else the refusal.
///
/// # Errors
/// The line for the job's stderr.
pub fn non_mig_job(cfg: &Config, g: &GpuInfo, mode: &Mode) -> Result<bool, String> {
    if !mig_on(g) {
        return Ok(false);
    }
    let instead = match mode {
        Mode::Mps { .. } => "--colloc=mig:7g:mps (MPS inside one full-size instance)",
        _ => "--colloc=mig:7g (one full-size instance)",
    };
    let why = match (cfg.allow_mig_mode_change, mode_switch(g)) {
        (true, ModeSwitch::Live) => return Ok(true),
        (_, ModeSwitch::NeedsReset) => {
            "its MIG mode changes only with a GPU reset, so colloc does not switch it per job"
        }
        _ => "this node does not switch MIG mode (allow_mig_mode_change = false)",
    };
    Err(format!(
        "GPU {} ({}) is in MIG mode, where CUDA sees no whole GPU, and {why}; \
         --colloc={mode} cannot run on it: use {instead}, or ask for a node whose GPUs \
         are not in MIG mode",
        g.index, g.name
    ))
}

/// Turn MIG off on the GPUs of `j` that [`non_mig_job`] marked for it, inside the hooks'
/// pause (a mode change: DCGM must let go of the GPU). A switch that fails or stays
/// pending refuses the job; the undo turns MIG back on.
pub(super) fn switch_off(cfg: &Config, ctl: &dyn GpuControl, j: &Journal) -> Result<(), Failure> {
    let gpus: Vec<(u32, String)> = j
        .gpus
        .iter()
        .filter(|g| g.mig_mode_changed)
        .map(|g| (g.index, g.uuid.clone()))
        .collect();
    if gpus.is_empty() {
        return Ok(());
    }
    let change = hooks::Change {
        action: "create",
        mode_change: true,
        job: j.job,
        gpus: gpus.iter().map(|g| g.0).collect(),
        uuids: gpus.iter().map(|g| g.1.clone()).collect(),
    };
    let deadline = Instant::now() + cfg.mig.retry();
    let result = hooks::pause(cfg, &change)
        .map_err(|e| Failure::Refuse(format!("{e}; nothing was changed, ask the admin")))
        .and_then(|()| {
            gpus.iter().try_for_each(|&(index, _)| {
                let mut backoff = Backoff::until(deadline);
                let done = retry::retry(
                    Op::ModeChange,
                    &format!("GPU {index}: MIG mode off"),
                    &mut backoff,
                    || ctl.set_mig_mode(index, false),
                )
                .map_err(|e| create::driver_refusal(cfg, index, "switching MIG mode off", &e))?;
                if done.took_effect(false) {
                    log::info!("job {}: GPU {index}: MIG mode off for the job", j.job);
                    Ok(())
                } else {
                    Err(Failure::Refuse(create::held_hint(
                        done.why_pending(index, false),
                        done.activation == nvml_code::IN_USE,
                    )))
                }
            })
        });
    run_post_hook(cfg, &change, result.is_ok());
    result
}

/// The line a plain job (no `--colloc`) gets on GPUs in MIG mode; `None` when none is.
pub fn plain_notice(gpus: &[GpuInfo]) -> Option<String> {
    let on: Vec<String> = gpus
        .iter()
        .filter(|g| mig_on(g))
        .map(|g| format!("{} ({})", g.index, g.name))
        .collect();
    if on.is_empty() {
        return None;
    }
    Some(format!(
        "colloc: note: GPU(s) {} of this job are in MIG mode: CUDA sees no whole GPU there, \
         only MIG instances, and this job asked for none; submit with --colloc=mig:7g (or \
         another mig layout) to get instances, or ask for a node whose GPUs are not in \
         MIG mode",
        on.join(", ")
    ))
}

/// Record `notice` for `job`'s tasks (`None` removes an old one of a reused id).
///
/// # Errors
/// `state_dir` is unsafe or cannot be written.
pub fn write_notice(cfg: &Config, job: u32, notice: Option<&str>) -> Result<(), String> {
    let dir = statedir::sub_dir(&cfg.state_dir, NOTICE_DIR, notice.is_some())
        .map_err(|e| e.to_string())?;
    let Some(dir) = dir else {
        return Ok(());
    };
    let name = job.to_string();
    match notice {
        Some(n) => dir.write_file(&name, n.as_bytes()),
        None => dir.unlink(&name).map(|_| ()),
    }
    .map_err(|e| e.to_string())
}

/// The notice the prolog recorded for `job`, if any.
pub fn read_notice(cfg: &Config, job: u32) -> Option<String> {
    let dir = statedir::sub_dir(&cfg.state_dir, NOTICE_DIR, false).ok()??;
    let bytes = dir.read_file(&job.to_string(), NOTICE_LIMIT).ok()??;
    Some(String::from_utf8_lossy(&bytes).trim().to_string())
}

/// One GPU's MIG mode and the job kinds it serves now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuFit {
    /// NVML index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// `on`, `off`, `on (pending off)`, `off (pending on)` or `unsupported`.
    pub mig: String,
    /// The job kinds it serves: `plain`, `naive`, `mps`, `mig`.
    pub serves: Vec<&'static str>,
    /// What the others meet there, in one sentence; empty when it serves all.
    pub note: String,
}

/// Each GPU's MIG mode and the job kinds it serves under this node's configuration.
///
/// # Errors
/// NVML failed.
pub fn fits(cfg: &Config, ctl: &dyn GpuControl) -> GpuResult<Vec<GpuFit>> {
    Ok(ctl.gpus()?.iter().map(|g| fit(cfg, g)).collect())
}

/// [`fits`] for one GPU.
pub fn fit(cfg: &Config, g: &GpuInfo) -> GpuFit {
    let mig = match g.mig_mode {
        None => "unsupported".to_string(),
        Some(m) if m.current == m.pending => if m.current { "on" } else { "off" }.to_string(),
        Some(m) if m.current => "on (pending off)".to_string(),
        Some(_) => "off (pending on)".to_string(),
    };
    let switch = mode_switch(g);
    let (serves, note): (Vec<&'static str>, &str) = match (mig_on(g), switch) {
        (_, ModeSwitch::NoMig) => (
            vec!["plain", "naive", "mps"],
            "no MIG on this GPU: mig jobs are refused",
        ),
        (false, ModeSwitch::Live) if cfg.allow_mig_mode_change => {
            (vec!["plain", "naive", "mps", "mig"], "")
        }
        (false, _) if cfg.allow_mig_mode_change => (
            vec!["plain", "naive", "mps", "mig"],
            "mig jobs switch MIG on, which on this GPU needs a reset and may stay pending",
        ),
        (false, _) => (
            vec!["plain", "naive", "mps"],
            "MIG off and allow_mig_mode_change = false: mig jobs are refused",
        ),
        (true, ModeSwitch::Live) if cfg.allow_mig_mode_change => (
            vec!["naive", "mps", "mig"],
            "in MIG mode: colloc turns it off for naive/mps jobs; plain jobs find no CUDA \
             device (they are told at start)",
        ),
        (true, _) => (
            vec!["mig"],
            "in MIG mode: naive/mps jobs are refused (use mig:7g or mig:7g:mps); plain jobs \
             find no CUDA device (they are told at start)",
        ),
    };
    GpuFit {
        index: g.index,
        name: g.name.clone(),
        mig,
        serves,
        note: note.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::MigMode;

    fn gpu(name: &str, mig: Option<bool>) -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-x".into(),
            name: name.into(),
            mig_mode: mig.map(|m| MigMode {
                current: m,
                pending: m,
            }),
            memory_total: 1 << 30,
        }
    }

    #[test]
    fn hopper_switches_live_ampere_needs_a_reset() {
        assert_eq!(
            mode_switch(&gpu("NVIDIA H100 80GB HBM3", Some(true))),
            ModeSwitch::Live
        );
        assert_eq!(
            mode_switch(&gpu("NVIDIA H200", Some(false))),
            ModeSwitch::Live
        );
        assert_eq!(
            mode_switch(&gpu("NVIDIA A100-SXM4-40GB", Some(true))),
            ModeSwitch::NeedsReset
        );
        assert_eq!(
            mode_switch(&gpu("NVIDIA A30", Some(true))),
            ModeSwitch::NeedsReset
        );
        assert_eq!(mode_switch(&gpu("NVIDIA L40S", None)), ModeSwitch::NoMig);
    }

    #[test]
    fn a_non_mig_job_on_a_mig_gpu_switches_only_where_allowed_and_live() {
        let mps: Mode = "mps:4".parse().unwrap();
        let mut cfg = Config {
            allow_mig_mode_change: true,
            ..Config::default()
        };
        assert_eq!(
            non_mig_job(&cfg, &gpu("NVIDIA H100 80GB HBM3", Some(true)), &mps),
            Ok(true)
        );
        assert_eq!(
            non_mig_job(&cfg, &gpu("NVIDIA H100 80GB HBM3", Some(false)), &mps),
            Ok(false)
        );
        let e = non_mig_job(&cfg, &gpu("NVIDIA A100-SXM4-40GB", Some(true)), &mps).unwrap_err();
        assert!(e.contains("GPU reset") && e.contains("mig:7g:mps"), "{e}");
        cfg.allow_mig_mode_change = false;
        let e = non_mig_job(&cfg, &gpu("NVIDIA H200", Some(true)), &Mode::Naive).unwrap_err();
        assert!(
            e.contains("allow_mig_mode_change = false") && e.contains("--colloc=mig:7g "),
            "{e}"
        );
    }

    #[test]
    fn plain_jobs_are_told_only_about_gpus_in_mig_mode() {
        assert_eq!(plain_notice(&[gpu("NVIDIA H200", Some(false))]), None);
        let n = plain_notice(&[gpu("NVIDIA A100-SXM4-40GB", Some(true))]).unwrap();
        assert!(n.contains("GPU(s) 0 (NVIDIA A100-SXM4-40GB)"), "{n}");
    }

    #[test]
    fn each_mode_serves_the_job_kinds_it_can() {
        let cfg = Config::default();
        let f = fit(&cfg, &gpu("NVIDIA A100-SXM4-40GB", Some(true)));
        assert_eq!((f.mig.as_str(), f.serves.clone()), ("on", vec!["mig"]));
        let f = fit(&cfg, &gpu("NVIDIA H200", Some(false)));
        assert_eq!(f.serves, vec!["plain", "naive", "mps"]);
        assert!(f.note.contains("allow_mig_mode_change"), "{}", f.note);
    }
}
