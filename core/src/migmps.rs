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

/// The environment of the job's tasks (design.md, "The environment contract"):
/// `COLLOC_MODE` (the layout made, then `:mps` or `:mps:N`), `COLLOC_DEVICES` (the
/// instances' UUIDs, all of them N times over with `:mps:N`, so one entry is one slot), `COLLOC_SLOTS`
/// (instances × N with `:mps:N`; unset with `:mps`, as for plain `mps`), the first
/// daemon's `CUDA_MPS_PIPE_DIRECTORY`/`CUDA_MPS_LOG_DIRECTORY`, `COLLOC_MPS_PIPES`
/// (`MIG-UUID=PIPE_DIR` per instance) and, with `:mps:N`, the client limits of the
/// smallest instance (`colloc run` sets each run's from its own instance).
pub fn job_env(
    j: &Journal,
    clients: Option<u32>,
    memory: &[(String, u64)],
) -> Vec<(String, String)> {
    let planned: Vec<mig::PlannedInstance> = j
        .gpus
        .first()
        .map(|g| g.planned.clone())
        .unwrap_or_default();
    let suffix = match clients {
        Some(n) => format!(":mps:{n}"),
        None => ":mps".to_string(),
    };
    let mut env = vec![(
        "COLLOC_MODE".to_string(),
        format!("{}{suffix}", mig::layout_mode_string(&planned)),
    )];
    let per = clients.unwrap_or(1) as usize;
    // Round the instances N times, so the lowest free slots spread runs over them.
    let devices: Vec<String> = (0..per)
        .flat_map(|_| j.mps.iter().map(|d| d.devices.clone()))
        .collect();
    if clients.is_some() {
        env.push(("COLLOC_SLOTS".into(), devices.len().to_string()));
    }
    env.push(("COLLOC_DEVICES".into(), devices.join(",")));
    if let Some(d) = j.mps.first() {
        env.extend(d.env());
    }
    let pipes: Vec<String> = j
        .mps
        .iter()
        .map(|d| format!("{}={}", d.devices, d.pipe_dir.display()))
        .collect();
    env.push(("COLLOC_MPS_PIPES".into(), pipes.join(",")));
    if let Some(n) = clients {
        let smallest: Vec<u64> = memory.iter().map(|(_, m)| *m).min().into_iter().collect();
        env.extend(mps::client_limits(n, &smallest));
    }
    env
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

    #[test]
    fn environment_of_mps_n_inside_instances() {
        let cfg = Config::default();
        let mut j = journal(&cfg);
        j.mps = daemons(&cfg, &j)
            .unwrap()
            .into_iter()
            .map(|d| d.1)
            .collect();
        let cat = mig::builtin_catalog("A100-40GB").unwrap();
        let mem = instance_memory(&j, &[cat]);
        assert_eq!(
            mem,
            vec![("MIG-0".to_string(), 19968), ("MIG-1".to_string(), 9856)]
        );
        let env = job_env(&j, Some(2), &mem);
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} missing"))
        };
        assert_eq!(get("COLLOC_MODE"), "mig:3g.20gb,2g.10gb:mps:2");
        assert_eq!(get("COLLOC_SLOTS"), "4");
        assert_eq!(get("COLLOC_DEVICES"), "MIG-0,MIG-1,MIG-0,MIG-1");
        let pipes = get("COLLOC_MPS_PIPES");
        let parsed = crate::jobenv::parse_mps_pipes(&pipes);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, "MIG-1");
        assert_eq!(parsed[1].1, j.mps[1].pipe_dir);
        assert_eq!(
            get("CUDA_MPS_PIPE_DIRECTORY"),
            j.mps[0].pipe_dir.display().to_string()
        );
        assert_eq!(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
        // The smallest instance's half: 9856 / 2.
        assert_eq!(get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4928M");

        let plain = job_env(&j, None, &mem);
        assert!(plain.iter().all(|(k, _)| k != "COLLOC_SLOTS"
            && k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
            && k != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
        assert!(plain
            .iter()
            .any(|(k, v)| k == "COLLOC_MODE" && v == "mig:3g.20gb,2g.10gb:mps"));
        assert!(plain
            .iter()
            .any(|(k, v)| k == "COLLOC_DEVICES" && v == "MIG-0,MIG-1"));
    }
}
