//! `naive`: the job's runs share its GPUs as plain processes. The setup only turns MIG
//! off where the node allows it for non-MIG jobs (CUDA sees no whole GPU in MIG mode).

use super::{JobMode, Setup};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuInfo};
use crate::jobenv::{DEVICES, MODE};
use crate::journal::Journal;
use crate::mig::Catalog;
use crate::reconfig::{mig_fit, Failure};

pub(in crate::reconfig) struct Naive;

impl JobMode for Naive {
    fn set_up(
        &self,
        cfg: &Config,
        ctl: &dyn GpuControl,
        j: &mut Journal,
        _: &Setup<'_>,
    ) -> Result<(), Failure> {
        mig_fit::switch_off(cfg, ctl, j)
    }

    fn job_env(&self, _: &Journal, gpus: &[GpuInfo], _: &[Catalog]) -> Vec<(String, String)> {
        let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
        vec![
            (MODE.into(), "naive".into()),
            (DEVICES.into(), uuids.join(",")),
        ]
    }
}
