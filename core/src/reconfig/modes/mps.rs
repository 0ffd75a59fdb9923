//! `mps` and `mps:N`: one MPS control daemon per GPU, started for the job (MIG off first
//! where the node allows it); with N, N slots per GPU, each client limited to 1/N.

use super::{mps_daemons, JobMode, Setup};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuInfo};
use crate::jobenv::{DEVICES, MODE, SLOTS};
use crate::journal::Journal;
use crate::mig::Catalog;
use crate::mps::{self as mpsd, MpsDaemon};
use crate::reconfig::mps_setup::start_mps;
use crate::reconfig::{mig_fit, Failure};
use crate::rundir;

pub(in crate::reconfig) struct Mps {
    /// `mps:N`'s N; `None` for unlimited clients.
    pub clients: Option<u32>,
}

impl JobMode for Mps {
    fn set_up(
        &self,
        cfg: &Config,
        ctl: &dyn GpuControl,
        j: &mut Journal,
        s: &Setup<'_>,
    ) -> Result<(), Failure> {
        mig_fit::switch_off(cfg, ctl, j)?;
        let d = j
            .gpus
            .iter()
            .map(|g| {
                let dir = rundir::gpu_dir(cfg, j.job, g.index);
                (
                    rundir::gpu_dir_name(g.index),
                    MpsDaemon::in_dir(&dir, &g.uuid),
                )
            })
            .collect();
        start_mps(cfg, j, s.mps_start, d)
    }

    fn job_env(&self, j: &Journal, gpus: &[GpuInfo], _: &[Catalog]) -> Vec<(String, String)> {
        let mode = match self.clients {
            Some(n) => format!("mps:{n}"),
            None => "mps".to_string(),
        };
        let mut env = vec![(MODE.into(), mode)];
        let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
        let mut devices = Vec::new();
        if let Some(n) = self.clients {
            for u in &uuids {
                devices.extend(std::iter::repeat_n(u.clone(), n as usize));
            }
            env.push((SLOTS.into(), devices.len().to_string()));
            let mem: Vec<u64> = gpus
                .iter()
                .map(|g| g.memory_total / (1024 * 1024))
                .collect();
            // Limits are per client device; a client sees one GPU (its slot's).
            let first = mem.first().copied().unwrap_or(0);
            env.extend(mpsd::client_limits(n, &[first]));
        } else {
            devices = uuids;
        }
        env.push((DEVICES.into(), devices.join(",")));
        mps_daemons(j, &mut env);
        env
    }
}
