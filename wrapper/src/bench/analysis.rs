//! The arithmetic of a benchmark that is not the common window (that is
//! [`crate::engine::window`]): slowdown against solo, energy in a window from the GPU's
//! readings, whether N copies fit, and the recommendation. No I/O here, so every rule is
//! unit-tested.

use colloc_core::telemetry::Reading;

use crate::engine::window::Window;

/// Per-run slowdown against the solo run: how much longer an epoch takes.
/// `(mean, max)` over copies; `None` where a copy made no progress or solo is unknown.
pub fn slowdown(solo_rate: f64, per_copy: &[f64]) -> Option<(f64, f64)> {
    if !positive(solo_rate) || per_copy.is_empty() || !per_copy.iter().all(|r| positive(*r)) {
        return None;
    }
    let s: Vec<f64> = per_copy.iter().map(|r| solo_rate / r).collect();
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    Some((mean, max))
}

/// A finite number above zero (false for NaN).
fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// Energy counter (joules since the first reading) at time `t`, linear between
/// readings. `None` outside them.
pub fn energy_at(readings: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = readings.partition_point(|(rt, _)| *rt < t);
    if i < readings.len() && readings[i].0 == t {
        return Some(readings[i].1);
    }
    if i == 0 || i >= readings.len() {
        return None;
    }
    let (t0, e0) = readings[i - 1];
    let (t1, e1) = readings[i];
    Some(e0 + (e1 - e0) * (t - t0) / (t1 - t0))
}

/// Joules the GPU used during `w`, from its readings.
pub fn energy_in(readings: &[Reading], w: Window) -> Option<f64> {
    let pts: Vec<(f64, f64)> = readings
        .iter()
        .filter_map(|r| r.energy_j.map(|e| (r.t, e)))
        .collect();
    let a = energy_at(&pts, w.start)?;
    let b = energy_at(&pts, w.end)?;
    (b >= a).then_some(b - a)
}

/// Most memory in use on the GPU between `from` and `to`, above `baseline`.
pub fn peak_memory(readings: &[Reading], from: f64, to: f64, baseline: u64) -> Option<u64> {
    readings
        .iter()
        .filter(|r| r.t >= from && r.t <= to)
        .filter_map(|r| r.used_bytes)
        .max()
        .map(|p| p.saturating_sub(baseline))
}

/// Would `n` copies of a run that peaked at `solo_peak` bytes fit in `total` bytes?
/// `Err` carries the reason to show in the table.
pub fn memory_fits(solo_peak: Option<u64>, total: Option<u64>, n: usize) -> Result<(), String> {
    let (Some(peak), Some(total)) = (solo_peak, total) else {
        return Ok(());
    };
    let need = peak as u128 * n as u128;
    if need > total as u128 {
        return Err(format!(
            "would not fit: solo peak {} x {n} = {} > {} GPU memory",
            gib(peak),
            gib(need as u64),
            gib(total)
        ));
    }
    Ok(())
}

/// Bytes as GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A measured configuration, as the recommendation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Mode name.
    pub mode: String,
    /// Copies.
    pub n: usize,
    /// Aggregate throughput.
    pub aggregate: f64,
}

/// What colloc recommends.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// The best configuration measured.
    pub best: Candidate,
    /// Its aggregate throughput relative to solo.
    pub speedup: f64,
    /// Does collocation pay (speedup at least the threshold, with more than one copy)?
    pub pays: bool,
}

/// Pick the configuration with the most aggregate throughput; collocation pays when it
/// runs more than one copy and beats solo by at least `min_gain` (e.g. 1.1).
pub fn recommend(solo: f64, measured: &[Candidate], min_gain: f64) -> Option<Recommendation> {
    if !positive(solo) {
        return None;
    }
    let best = measured
        .iter()
        .filter(|c| c.aggregate.is_finite())
        .max_by(|a, b| a.aggregate.total_cmp(&b.aggregate))?
        .clone();
    let speedup = best.aggregate / solo;
    let pays = best.n > 1 && speedup >= min_gain;
    Some(Recommendation {
        best,
        speedup,
        pays,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowdown_is_solo_over_copy_rate() {
        let (mean, max) = slowdown(100.0, &[50.0, 25.0]).unwrap();
        assert!((mean - 3.0).abs() < 1e-9 && (max - 4.0).abs() < 1e-9);
        assert_eq!(slowdown(100.0, &[0.0]), None);
        assert_eq!(slowdown(0.0, &[1.0]), None);
    }

    #[test]
    fn energy_interpolates_between_readings() {
        let pts = vec![(0.0, 0.0), (1.0, 1.0), (3.0, 5.0)];
        assert_eq!(energy_at(&pts, 2.0), Some(3.0));
        assert_eq!(energy_at(&pts, 4.0), None);
        let r: Vec<Reading> = pts
            .iter()
            .map(|&(t, e)| Reading {
                t,
                energy_j: Some(e),
                used_bytes: Some((t * 10.0) as u64),
            })
            .collect();
        let j = energy_in(
            &r,
            Window {
                start: 0.5,
                end: 3.0,
            },
        )
        .unwrap();
        assert!((j - 4.5).abs() < 1e-9);
        assert_eq!(peak_memory(&r, 0.5, 2.0, 5), Some(5));
    }

    #[test]
    fn memory_rule() {
        let g = 1u64 << 30;
        assert!(memory_fits(Some(20 * g), Some(141 * g), 7).is_ok());
        let e = memory_fits(Some(25 * g), Some(141 * g), 7).unwrap_err();
        assert_eq!(
            e,
            "would not fit: solo peak 25.0 GiB x 7 = 175.0 GiB > 141.0 GiB GPU memory"
        );
        assert!(memory_fits(None, Some(g), 100).is_ok());
    }

    #[test]
    fn recommendation_picks_most_aggregate_or_says_it_does_not_pay() {
        let c = |mode: &str, n, aggregate| Candidate {
            mode: mode.into(),
            n,
            aggregate,
        };
        let all = [
            c("naive", 1, 100.0),
            c("naive", 2, 150.0),
            c("mps", 3, 180.0),
        ];
        let r = recommend(100.0, &all, 1.1).unwrap();
        assert_eq!((r.best.mode.as_str(), r.best.n), ("mps", 3));
        assert!(r.pays && (r.speedup - 1.8).abs() < 1e-9);
        let flat = [c("naive", 1, 100.0), c("naive", 2, 105.0)];
        let r = recommend(100.0, &flat, 1.1).unwrap();
        assert!(!r.pays);
        let solo_best = [c("naive", 1, 100.0), c("naive", 2, 90.0)];
        let r = recommend(100.0, &solo_best, 1.1).unwrap();
        assert!(!r.pays && r.best.n == 1);
        assert!(recommend(0.0, &all, 1.1).is_none());
    }
}
