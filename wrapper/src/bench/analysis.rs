//! The arithmetic of a benchmark that is not the common window (that is
//! [`colloc_results::rules::window`]) nor a GPU figure (those are [`colloc_results::telemetry`] and
//! [`colloc_results::energy`], as for `colloc run`): slowdown against solo, whether N copies
//! fit, and whether the solo figure can be trusted (the recommendation is
//! [`colloc_results::bench::answer`]). No I/O here, so every rule is unit-tested.

use super::plan::MIN_RISE;
use colloc_results::bench::report::gib;
use colloc_results::bench::stats::Spread;

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

/// Is a configuration's per-copy slowdown below 1 by more than the noise and by
/// [`MIN_RISE`] or more (each copy ran clearly faster collocated than the solo run did)?
/// Then the solo figure is too low: a baseline problem, not a speed-up. `rel_u`:
/// relative uncertainty of the slowdown.
pub fn baseline_problem(slowdown_mean: f64, rel_u: f64) -> bool {
    slowdown_mean.is_finite()
        && slowdown_mean * (1.0 + rel_u) < 1.0
        && slowdown_mean <= 1.0 - MIN_RISE
}

/// How far apart (max - min over the mean) a figure's runs may be before it counts as
/// moving with the host. On the H200 the runs of a configuration that fills the GPU,
/// and of a one-process reference at a batch that fills it, came within 2 %; the solo
/// runs of a small ResNet, bound by the host's CPU, 18-37 % apart in one call (and +51 %
/// from one machine to another).
pub const UNSTEADY: f64 = 0.10;

/// How the note of [`solo_unsteady`] begins.
pub const SOLO_MOVES: &str = "solo moves with the host";

/// Does the solo figure move with the host? Its runs are more than [`UNSTEADY`] apart
/// and, where the reference was run twice or more, more than three times as far apart
/// as the reference's. Then ratios to solo will not repeat on another machine or day to
/// better than that spread, whatever the repeats: the note says so and points to the
/// reference. `None`: steady, or too few runs to tell.
pub fn solo_unsteady(solo: Option<Spread>, reference: Option<Spread>) -> Option<String> {
    let runs = |s: &Spread| s.n > 1 && s.mean > 0.0 && s.apart().is_finite();
    let s = solo.filter(runs)?;
    if s.apart() <= UNSTEADY {
        return None;
    }
    let r = reference.filter(runs);
    if r.is_some_and(|r| r.apart() * 3.0 >= s.apart()) {
        return None;
    }
    Some(match r {
        Some(r) => format!(
            "{SOLO_MOVES}: its runs were {:.1} % apart, the reference's {:.1} %: a solo run bound by the host's CPU (a Python process launching small kernels) runs as fast as the host lets it, so the ratios to solo will not repeat on another machine or day to better than that; compare by the fractions of the reference",
            s.apart() * 100.0,
            r.apart() * 100.0
        ),
        None => format!(
            "{SOLO_MOVES}: its runs were {:.1} % apart: a solo run bound by the host's CPU (a Python process launching small kernels) runs as fast as the host lets it, so the ratios to solo will not repeat on another machine or day to better than that; a --reference that saturates the GPU in one process gives figures that do",
            s.apart() * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(min: f64, max: f64, mean: f64) -> Option<Spread> {
        Some(Spread {
            n: 3,
            mean,
            sd: None,
            min,
            max,
            u: None,
        })
    }

    /// The H200's figures (bench/results/stability-4, -5): medium solo 6,716-8,436
    /// (22.7 %) against its reference 19,948-20,028 (0.4 %); the small model's solo
    /// 12,540-15,665 (21.9 %), here without its reference; a steady solo says nothing.
    #[test]
    fn a_solo_that_moves_with_the_host_is_named() {
        let n = solo_unsteady(
            runs(6716.0, 8436.1, 7564.2),
            runs(19948.5, 20028.0, 19988.3),
        )
        .unwrap();
        assert!(n.contains("22.7 % apart, the reference's 0.4 %"), "{n}");
        assert!(
            n.contains("compare by the fractions of the reference"),
            "{n}"
        );
        let n = solo_unsteady(runs(12540.4, 15664.6, 14265.3), None).unwrap();
        assert!(
            n.contains("21.9 % apart") && n.contains("a --reference"),
            "{n}"
        );
        // Steady solo; too few runs; a reference as unsteady as solo (the host moved
        // everything, not solo alone).
        assert_eq!(solo_unsteady(runs(990.0, 1010.0, 1000.0), None), None);
        assert_eq!(solo_unsteady(None, runs(1.0, 2.0, 1.5)), None);
        assert_eq!(
            solo_unsteady(runs(80.0, 100.0, 90.0), runs(70.0, 85.0, 80.0)),
            None
        );
        // Exactly at the line: not named.
        assert_eq!(solo_unsteady(runs(95.0, 105.0, 100.0), None), None);
    }

    #[test]
    fn slowdown_is_solo_over_copy_rate() {
        let (mean, max) = slowdown(100.0, &[50.0, 25.0]).unwrap();
        assert!((mean - 3.0).abs() < 1e-9 && (max - 4.0).abs() < 1e-9);
        assert_eq!(slowdown(100.0, &[0.0]), None);
        assert_eq!(slowdown(0.0, &[1.0]), None);
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
    fn a_slowdown_below_one_beyond_the_noise_is_a_baseline_problem() {
        assert!(baseline_problem(0.8, 0.05));
        assert!(!baseline_problem(0.98, 0.05));
        // 3 % faster, measured tightly: beyond the noise, but within what start-up and
        // sampling leave.
        assert!(!baseline_problem(0.97, 0.001));
        assert!(baseline_problem(0.94, 0.01));
        assert!(!baseline_problem(1.2, 0.0));
        assert!(!baseline_problem(f64::NAN, 0.0));
    }
}
