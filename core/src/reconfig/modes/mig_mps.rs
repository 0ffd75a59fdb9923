//! `mig:LAYOUT:mps` and `mig:LAYOUT:mps:N` (the MIG guide's "MIG with CUDA MPS"): the
//! instances as for `mig:LAYOUT`, then one MPS control daemon inside each, undone with
//! them; with N, N slots per instance, each client limited to 1/N of its instance.

use super::{mig::Mig, mps_daemons, JobMode, Setup};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuInfo};
use crate::jobenv::{DEVICES, MODE, SLOTS};
use crate::journal::Journal;
use crate::mig::{self, Catalog, PlannedInstance};
use crate::migmps;
use crate::mps;
use crate::reconfig::mps_setup::start_mps;
use crate::reconfig::Failure;

pub(in crate::reconfig) struct MigMps {
    /// `:mps:N`'s N; `None` for unlimited clients.
    pub clients: Option<u32>,
}

impl JobMode for MigMps {
    fn set_up(
        &self,
        cfg: &Config,
        ctl: &dyn GpuControl,
        j: &mut Journal,
        s: &Setup<'_>,
    ) -> Result<(), Failure> {
        Mig.set_up(cfg, ctl, j, s)?;
        let daemons = migmps::daemons(cfg, j).map_err(Failure::Refuse)?;
        start_mps(cfg, j, s.mps_start, daemons)
    }

    fn job_env(&self, j: &Journal, _: &[GpuInfo], catalogs: &[Catalog]) -> Vec<(String, String)> {
        let planned: Vec<PlannedInstance> = j
            .gpus
            .first()
            .map(|g| g.planned.clone())
            .unwrap_or_default();
        let suffix = match self.clients {
            Some(n) => format!(":mps:{n}"),
            None => ":mps".to_string(),
        };
        let mut env = vec![(
            MODE.to_string(),
            format!("{}{suffix}", mig::layout_mode_string(&planned)),
        )];
        let per = self.clients.unwrap_or(1) as usize;
        // Round the instances N times, so the lowest free slots spread runs over them.
        let devices: Vec<String> = (0..per)
            .flat_map(|_| j.mps.iter().map(|d| d.devices.clone()))
            .collect();
        if self.clients.is_some() {
            env.push((SLOTS.into(), devices.len().to_string()));
        }
        env.push((DEVICES.into(), devices.join(",")));
        mps_daemons(j, &mut env);
        if let Some(n) = self.clients {
            let memory = migmps::instance_memory(j, catalogs);
            let smallest: Vec<u64> = memory.iter().map(|(_, m)| *m).min().into_iter().collect();
            env.extend(mps::client_limits(n, &smallest));
        }
        env
    }
}
