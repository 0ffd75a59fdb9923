//! MPS inside MIG instances (`mig:LAYOUT:mps`, `mig:LAYOUT:mps:N`; the MIG user guide's
//! "MIG with CUDA MPS"): one MPS control daemon per MIG instance, started as the job's
//! user with `CUDA_VISIBLE_DEVICES` = that instance's `MIG-…` UUID and its own pipe and
//! log directories (`run_dir/job-<id>/gpu<K>-gi<G>/{pipe,log}`).
//!
//! The prolog creates the instances as for `mig:LAYOUT`, then starts the daemons the way
//! per-job MPS daemons are started (the same checks, the same place: the prolog, or the
//! job's extern step inside its container); the journal lists the daemons before any is
//! started, so a restore (epilog, or after a crash) stops them all before it destroys the
//! instances.

use crate::config::Config;
use crate::journal::Journal;
use crate::mig::{self, Catalog};
use crate::mode::{MigRequest, Mode};
use crate::mps::{self, MpsDaemon};
use crate::rundir;

/// The MIG layout a mode makes: `mig:LAYOUT` and `mig:LAYOUT:mps[:N]` alike.
pub fn layout(mode: &Mode) -> Option<&MigRequest> {
    match mode {
        Mode::Mig(req) | Mode::MigMps { layout: req, .. } => Some(req),
        _ => None,
    }
}

/// What refuses `mig:LAYOUT:mps[:N]` on a GPU before anything changes: more clients per
/// instance than MPS serves in the smallest planned instance, or no MPS control program
/// on the node. `Ok` for other modes.
///
/// # Errors
/// One line (what is wrong and what to ask for), and whether it is the request's fault
/// (`true`) rather than the node's.
pub fn check(
    cfg: &Config,
    mode: &Mode,
    catalog: &Catalog,
    planned: Option<&Vec<mig::PlannedInstance>>,
) -> Result<(), (String, bool)> {
    let Mode::MigMps { clients, .. } = mode else {
        return Ok(());
    };
    if let (Some(n), Some(p)) = (clients, planned) {
        catalog
            .check_mps_clients(&mode.to_string(), p, *n)
            .map_err(|e| (e.to_string(), true))?;
    }
    if let Err(e) = mps::trusted_control(cfg) {
        let layout = layout(mode).map_or(String::new(), |l| l.to_string());
        return Err((format!("--colloc={mode}: {e} (or use mig:{layout})"), false));
    }
    Ok(())
}

/// One daemon per created MIG instance of the journal's GPUs, with the name of its
/// directory inside the job's directory.
///
/// # Errors
/// One line naming an instance without a device UUID (its daemon could not be told which
/// device it serves).
pub fn daemons(cfg: &Config, j: &Journal) -> Result<Vec<(String, MpsDaemon)>, String> {
    let mut out = Vec::new();
    for g in &j.gpus {
        for i in &g.created {
            let Some(uuid) = &i.uuid else {
                return Err(format!(
                    "GPU {}: MIG instance {} ({}) has no compute instance device UUID, so \
                     no MPS daemon can serve it",
                    g.index, i.gi_id, i.profile
                ));
            };
            let name = rundir::instance_dir_name(g.index, i.gi_id);
            let dir = rundir::job_dir(cfg, j.job).join(&name);
            out.push((name, MpsDaemon::in_dir(&dir, uuid)));
        }
    }
    Ok(out)
}

/// The memory of each created instance of the journal's GPUs in MiB, by its `MIG-…`
/// UUID, from each GPU's catalog (`catalogs`, in the journal's GPU order).
pub fn instance_memory(j: &Journal, catalogs: &[Catalog]) -> Vec<(String, u64)> {
    j.gpus
        .iter()
        .zip(catalogs)
        .flat_map(|(g, c)| {
            g.created.iter().filter_map(move |i| {
                let p = c.profiles.iter().find(|p| p.name == i.profile)?;
                Some((i.uuid.clone()?, p.memory_mib))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Instance;
    use crate::journal::GpuRecord;
    use crate::mig::Placement;

    fn journal(cfg: &Config) -> Journal {
        let cat = mig::builtin_catalog("A100-40GB").unwrap();
        let crate::mode::Mode::Mig(req) = "mig:3g,2g".parse().unwrap() else {
            unreachable!()
        };
        let planned = cat.plan(&req).unwrap();
        let mut j = Journal::new(7, 1000, 1000, "mig:3g,2g:mps:2".into());
        let created = planned
            .iter()
            .enumerate()
            .map(|(k, p)| Instance {
                gi_id: k as u32 + 1,
                profile_id: p.profile_id,
                profile: p.profile.clone(),
                placement: Placement {
                    start: p.placement.start,
                    size: p.placement.size,
                },
                ci_ids: vec![0],
                uuid: Some(format!("MIG-{k}")),
            })
            .collect();
        j.gpus = vec![GpuRecord {
            index: 0,
            uuid: "GPU-a".into(),
            name: "NVIDIA A100-SXM4-40GB".into(),
            mig_before: None,
            mig_mode_changed: false,
            preexisting: Vec::new(),
            planned,
            created,
        }];
        let _ = cfg;
        j
    }

    #[test]
    fn one_daemon_per_instance_in_its_own_dirs() {
        let cfg = Config::default();
        let j = journal(&cfg);
        let d = daemons(&cfg, &j).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].0, "gpu0-gi1");
        assert_eq!(d[0].1.devices, "MIG-0");
        assert_eq!(d[1].1.devices, "MIG-1");
        assert_eq!(
            d[1].1.pipe_dir,
            rundir::job_dir(&cfg, 7).join("gpu0-gi2/pipe")
        );
        assert_ne!(d[0].1.pipe_dir, d[1].1.pipe_dir);
        assert_ne!(d[0].1.log_dir, d[1].1.log_dir);
    }

    #[test]
    fn an_instance_without_uuid_is_refused() {
        let cfg = Config::default();
        let mut j = journal(&cfg);
        j.gpus[0].created[1].uuid = None;
        let e = daemons(&cfg, &j).unwrap_err();
        assert!(e.contains("MIG instance 2 (2g.10gb)"), "{e}");
    }
}
