//! `mig:LAYOUT`: the planned MIG instances on each of the job's GPUs, made inside the
//! hooks' pause (the pre-hook first; the prolog runs the post-hook after).

use super::{JobMode, Setup};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuInfo};
use crate::hooks;
use crate::jobenv::{DEVICES, MODE, SLOTS};
use crate::journal::Journal;
use crate::mig::{self, Catalog, PlannedInstance};
use crate::reconfig::{create, Failure};

pub(in crate::reconfig) struct Mig;

impl JobMode for Mig {
    fn set_up(
        &self,
        cfg: &Config,
        ctl: &dyn GpuControl,
        j: &mut Journal,
        s: &Setup<'_>,
    ) -> Result<(), Failure> {
        hooks::pause(cfg, s.hook_change)
            .map_err(|e| Failure::Refuse(format!("{e}; nothing was changed, ask the admin")))
            .and_then(|()| create::make_instances(cfg, ctl, j))
    }

    fn job_env(&self, j: &Journal, _: &[GpuInfo], _: &[Catalog]) -> Vec<(String, String)> {
        let planned: Vec<PlannedInstance> = j
            .gpus
            .iter()
            .flat_map(|g| g.planned.iter().cloned())
            .collect();
        let devices: Vec<String> = j
            .gpus
            .iter()
            .flat_map(|g| g.created.iter().filter_map(|i| i.uuid.clone()))
            .collect();
        // With one GPU the summary is the exact layout; with several it is per GPU.
        let per_gpu = j
            .gpus
            .first()
            .map_or(planned.as_slice(), |g| g.planned.as_slice());
        vec![
            (MODE.into(), mig::layout_mode_string(per_gpu)),
            (SLOTS.into(), devices.len().to_string()),
            (DEVICES.into(), devices.join(",")),
        ]
    }
}
