//! GPM (GPU Performance Monitoring, Hopper and later): what the SMs do, as a test set it,
//! integrated over time into counters as the GPU's own are, so that the metrics between
//! two samples are the time-weighted mean of what was set in between.

use serde::{Deserialize, Serialize};

use super::{code, State, R};
use crate::tables::Family;

/// `NVML_GPM_METRIC_SM_UTIL`: percentage of SMs that were busy.
pub const METRIC_SM_UTIL: u32 = 2;
/// `NVML_GPM_METRIC_SM_OCCUPANCY`: percentage of warps active against the maximum.
pub const METRIC_SM_OCCUPANCY: u32 = 3;
/// `NVML_GPM_METRIC_MAX` of the nvml.h the fake's struct layouts come from
/// (nvml-wrapper-sys 0.10): the length of `nvmlGpmMetricsGet_t::metrics`.
pub const METRIC_MAX: u32 = 210;

/// The SM activity and occupancy a GPU shows from `since_us` on, and what its counters
/// held then.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpmLoad {
    /// Share of SMs busy, percent (GPM's SM_UTIL, "SM activity").
    pub sm_activity: f64,
    /// Active warps against the maximum, percent (GPM's SM_OCCUPANCY).
    pub sm_occupancy: f64,
    /// When these values were set, µs since the Unix epoch.
    pub since_us: u64,
    /// SM activity integrated up to `since_us`, percent·µs.
    pub active_acc: f64,
    /// SM occupancy integrated up to `since_us`, percent·µs.
    pub occupancy_acc: f64,
}

impl GpmLoad {
    fn at(&self, now_us: u64) -> (f64, f64) {
        let dt = now_us.saturating_sub(self.since_us) as f64;
        (
            self.active_acc + self.sm_activity * dt,
            self.occupancy_acc + self.sm_occupancy * dt,
        )
    }
}

/// What one `nvmlGpmSampleGet` captured of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpmCounters {
    /// The GPU sampled.
    pub gpu: u32,
    /// When, µs since the Unix epoch.
    pub t_us: u64,
    /// SM activity integrated so far, percent·µs.
    pub active: f64,
    /// SM occupancy integrated so far, percent·µs.
    pub occupancy: f64,
}

impl State {
    /// Does GPU `gpu` have GPM? nvml.h: "For Hopper or newer fully supported devices";
    /// an A100 answers the support query with `isSupportedDevice` 0.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for an unknown GPU.
    pub fn gpm_supported(&self, gpu: u32) -> R<bool> {
        Ok(self.gpu(gpu)?.model()?.family != Family::Ampere)
    }

    /// The GPU's GPM counters at `now_us`.
    ///
    /// # Errors
    /// NOT_SUPPORTED on a GPU without GPM; INVALID_ARGUMENT for an unknown GPU.
    pub fn gpm_counters(&self, gpu: u32, now_us: u64) -> R<GpmCounters> {
        if !self.gpm_supported(gpu)? {
            return Err(code::NOT_SUPPORTED);
        }
        let (active, occupancy) = self
            .gpu(gpu)?
            .gpm
            .as_ref()
            .map_or((0.0, 0.0), |l| l.at(now_us));
        Ok(GpmCounters {
            gpu,
            t_us: now_us,
            active,
            occupancy,
        })
    }

    /// From `now_us` on, GPU `gpu`'s SMs are `sm_activity` % busy with `sm_occupancy` %
    /// of their warps active (also on a GPU without GPM, which will not tell).
    ///
    /// # Errors
    /// One line: an unknown GPU or a value outside 0-100.
    pub fn set_gpm(
        &mut self,
        gpu: u32,
        sm_activity: f64,
        sm_occupancy: f64,
        now_us: u64,
    ) -> Result<(), String> {
        for (what, v) in [("SM activity", sm_activity), ("SM occupancy", sm_occupancy)] {
            if !(0.0..=100.0).contains(&v) {
                return Err(format!(
                    "{what} must be a percentage from 0 to 100, not {v}"
                ));
            }
        }
        let n = self.gpus.len();
        let g = self
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        let (active_acc, occupancy_acc) = g.gpm.as_ref().map_or((0.0, 0.0), |l| l.at(now_us));
        g.gpm = Some(GpmLoad {
            sm_activity,
            sm_occupancy,
            since_us: now_us,
            active_acc,
            occupancy_acc,
        });
        Ok(())
    }
}

/// One metric between two samples of the same GPU, `s1` the earlier. Given in reverse
/// order the H200 on driver 580.159.04 answered every metric 100.0 (SUCCESS), so does
/// the fake.
///
/// # Errors
/// Per metric, as the driver writes `nvmlReturn`: INVALID_ARGUMENT for an id outside
/// nvml.h's enum (0, or at or past [`METRIC_MAX`]); NOT_SUPPORTED for metrics the fake
/// does not model (all but SM activity and occupancy).
pub fn gpm_metric(id: u32, s1: &GpmCounters, s2: &GpmCounters) -> R<f64> {
    if id == 0 || id >= METRIC_MAX {
        return Err(code::INVALID_ARGUMENT);
    }
    let dt = s2.t_us.saturating_sub(s1.t_us) as f64;
    let mean = |a: f64, b: f64| {
        if dt > 0.0 {
            ((b - a) / dt).clamp(0.0, 100.0)
        } else {
            100.0
        }
    };
    match id {
        METRIC_SM_UTIL => Ok(mean(s1.active, s2.active)),
        METRIC_SM_OCCUPANCY => Ok(mean(s1.occupancy, s2.occupancy)),
        _ => Err(code::NOT_SUPPORTED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(models: &[&str]) -> State {
        State::fresh(models, 0).unwrap()
    }

    #[test]
    fn hopper_has_gpm_and_an_a100_does_not() {
        let st = fresh(&["H100-80GB", "A100-40GB", "H200"]);
        assert_eq!(st.gpm_supported(0), Ok(true));
        assert_eq!(st.gpm_supported(1), Ok(false));
        assert_eq!(st.gpm_supported(2), Ok(true));
        assert_eq!(st.gpm_supported(3), Err(code::INVALID_ARGUMENT));
        assert_eq!(st.gpm_counters(1, 5), Err(code::NOT_SUPPORTED));
    }

    /// 14 % for 1 s, then 42 % for 1 s: the interval over both reads 28 %, each half its
    /// own value; an idle GPU reads 0.
    #[test]
    fn metrics_are_the_time_weighted_mean_of_what_was_set() {
        let mut st = fresh(&["H100-80GB"]);
        let idle0 = st.gpm_counters(0, 1_000_000).unwrap();
        let idle1 = st.gpm_counters(0, 2_000_000).unwrap();
        assert_eq!(gpm_metric(METRIC_SM_UTIL, &idle0, &idle1), Ok(0.0));
        st.set_gpm(0, 14.0, 9.0, 10_000_000).unwrap();
        let a = st.gpm_counters(0, 10_000_000).unwrap();
        let b = st.gpm_counters(0, 11_000_000).unwrap();
        st.set_gpm(0, 42.0, 30.0, 11_000_000).unwrap();
        let c = st.gpm_counters(0, 12_000_000).unwrap();
        let m = |id, x: &GpmCounters, y: &GpmCounters| gpm_metric(id, x, y).unwrap();
        assert!((m(METRIC_SM_UTIL, &a, &b) - 14.0).abs() < 1e-9);
        assert!((m(METRIC_SM_OCCUPANCY, &a, &b) - 9.0).abs() < 1e-9);
        assert!((m(METRIC_SM_UTIL, &b, &c) - 42.0).abs() < 1e-9);
        assert!((m(METRIC_SM_UTIL, &a, &c) - 28.0).abs() < 1e-9);
        assert!((m(METRIC_SM_OCCUPANCY, &a, &c) - 19.5).abs() < 1e-9);
        assert_eq!(gpm_metric(0, &a, &c), Err(code::INVALID_ARGUMENT));
        assert_eq!(gpm_metric(METRIC_MAX, &a, &c), Err(code::INVALID_ARGUMENT));
        assert_eq!(gpm_metric(5, &a, &c), Err(code::NOT_SUPPORTED));
        // Reversed, as the H200 answered: every metric 100.
        assert_eq!(gpm_metric(METRIC_SM_UTIL, &c, &a), Ok(100.0));
    }

    #[test]
    fn values_outside_a_percentage_are_refused() {
        let mut st = fresh(&["H100-80GB"]);
        let e = st.set_gpm(0, 101.0, 0.0, 0).unwrap_err();
        assert!(e.contains("SM activity must be a percentage"), "{e}");
        assert!(st.set_gpm(0, 1.0, f64::NAN, 0).is_err());
        assert!(st
            .set_gpm(1, 1.0, 1.0, 0)
            .unwrap_err()
            .contains("no fake GPU 1"));
    }
}
