//! The arithmetic of a benchmark that is not the common window (that is
//! [`crate::engine::window`]) nor a GPU figure (those are [`colloc_core::telemetry`] and
//! [`colloc_core::energy`], as for `colloc run`): slowdown against solo, whether N copies
//! fit, and the recommendation. No I/O here, so every rule is
//! unit-tested.

use super::plan::MIN_RISE;
use super::stats::{Ratio, Spread};

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

/// Bytes as GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A measured configuration, as the recommendation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Mode name (`solo` for the solo run).
    pub mode: String,
    /// Copies.
    pub n: usize,
    /// Its aggregate throughput over its measurements.
    pub aggregate: Spread,
}

/// Why collocation pays or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The chosen configuration's gain over solo beats `--min-gain` even at the low end
    /// of its uncertainty.
    Pays,
    /// Nothing collocated beats one copy at a time beyond the noise.
    OneAtATime,
    /// The gain is below `--min-gain`.
    BelowMinGain,
    /// The gain reaches `--min-gain` on average but not beyond the noise.
    WithinNoise,
}

/// What colloc recommends.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// The configuration recommended: the fewest copies within the noise of the best.
    pub chosen: Candidate,
    /// The configuration with the most aggregate throughput on average.
    pub best: Candidate,
    /// The others within the noise of the best, that the chosen one stands for.
    pub equivalent: Vec<Candidate>,
    /// The chosen configuration's aggregate relative to solo.
    pub ratio: Ratio,
    /// Does collocation pay?
    pub verdict: Verdict,
    /// How far the low end of the ratio is above what paying needs (the larger of
    /// `--min-gain` and 1); negative where it falls short.
    pub margin: f64,
}

impl Recommendation {
    /// Does collocation pay?
    pub fn pays(&self) -> bool {
        self.verdict == Verdict::Pays
    }
}

/// The plateau rule: of the configurations that cannot be told from the one with the
/// most aggregate throughput — their intervals overlap, or it is less than
/// [`MIN_RISE`] above them — the one with the fewest copies (each run slows less and
/// needs less memory), then the simplest mode ([`mode_rank`]: no daemon before a daemon,
/// no limit before a limit, no reconfiguration before MIG), the higher mean breaking
/// what ties remain. So noise flips neither the count along a plateau nor the mode
/// between modes that cannot be told apart. Returns (best, chosen, the others that cannot be told from the
/// best).
pub fn pick(measured: &[Candidate]) -> Option<(Candidate, Candidate, Vec<Candidate>)> {
    let usable: Vec<&Candidate> = measured
        .iter()
        .filter(|c| c.aggregate.mean.is_finite())
        .collect();
    let best = (*usable
        .iter()
        .max_by(|a, b| a.aggregate.mean.total_cmp(&b.aggregate.mean))?)
    .clone();
    let near: Vec<&Candidate> = usable
        .iter()
        .copied()
        .filter(|c| {
            c.aggregate.hi() >= best.aggregate.lo()
                || best.aggregate.mean <= c.aggregate.mean * (1.0 + MIN_RISE)
        })
        .collect();
    let chosen = (*near
        .iter()
        .min_by(|a, b| {
            a.n.cmp(&b.n)
                .then(mode_rank(&a.mode).cmp(&mode_rank(&b.mode)))
                .then(b.aggregate.mean.total_cmp(&a.aggregate.mean))
        })
        .copied()?)
    .clone();
    let equivalent = near
        .iter()
        .filter(|c| !(c.mode == chosen.mode && c.n == chosen.n))
        .map(|c| (*c).clone())
        .collect();
    Some((best, chosen, equivalent))
}

/// How much a mode asks of the node, least first: solo, naive, mps, `mps:N`, mig.
pub fn mode_rank(mode: &str) -> u8 {
    match mode {
        "solo" => 0,
        "naive" => 1,
        "mps" => 2,
        m if m.starts_with("mps:") => 3,
        "mig" => 4,
        _ => 5,
    }
}

/// Recommend from the measured configurations (the solo run among them, as `solo`):
/// the configuration [`pick`] chooses. Collocation pays when it runs more than one copy
/// and its ratio to solo beats `min_gain` and 1 even at the low end of its uncertainty.
pub fn recommend(solo: &Spread, measured: &[Candidate], min_gain: f64) -> Option<Recommendation> {
    // Nothing collocated measured (a budget spent on solo and the reference): nothing
    // to recommend either way.
    if !positive(solo.mean) || !measured.iter().any(|c| c.n > 1) {
        return None;
    }
    let (best, chosen, equivalent) = pick(measured)?;
    let ratio = super::stats::ratio(&chosen.aggregate, solo)?;
    let need = min_gain.max(1.0);
    let margin = ratio.lo() - need;
    let verdict = if chosen.n <= 1 {
        Verdict::OneAtATime
    } else if ratio.value < min_gain {
        Verdict::BelowMinGain
    } else if ratio.lo() < need || ratio.lo() <= 1.0 {
        Verdict::WithinNoise
    } else {
        Verdict::Pays
    };
    Some(Recommendation {
        chosen,
        best,
        equivalent,
        ratio,
        verdict,
        margin,
    })
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
            "solo moves with the host: its runs were {:.1} % apart, the reference's {:.1} %: a solo run bound by the host's CPU (a Python process launching small kernels) runs as fast as the host lets it, so the ratios to solo will not repeat on another machine or day to better than that; compare by the fractions of the reference",
            s.apart() * 100.0,
            r.apart() * 100.0
        ),
        None => format!(
            "solo moves with the host: its runs were {:.1} % apart: a solo run bound by the host's CPU (a Python process launching small kernels) runs as fast as the host lets it, so the ratios to solo will not repeat on another machine or day to better than that; a --reference that saturates the GPU in one process gives figures that do",
            s.apart() * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::Obs;

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

    fn c(mode: &str, n: usize, values: &[f64], se: f64) -> Candidate {
        let obs: Vec<Obs> = values
            .iter()
            .map(|&value| Obs {
                value,
                se: Some(se),
            })
            .collect();
        Candidate {
            mode: mode.into(),
            n,
            aggregate: Spread::of(&obs).unwrap(),
        }
    }

    #[test]
    fn the_fewest_copies_within_the_noise_of_the_best_are_chosen() {
        let solo = c("solo", 1, &[100.0, 100.0], 1.0);
        let all = [
            solo.clone(),
            c("mps", 2, &[200.0], 2.0),
            c("mps", 4, &[395.0], 4.0),
            c("mps", 7, &[402.0], 4.0),
            c("naive", 4, &[250.0], 3.0),
        ];
        let r = recommend(&solo.aggregate, &all, 1.1).unwrap();
        assert_eq!((r.best.mode.as_str(), r.best.n), ("mps", 7));
        assert_eq!((r.chosen.mode.as_str(), r.chosen.n), ("mps", 4));
        assert_eq!(r.equivalent.len(), 1);
        assert_eq!(r.equivalent[0].n, 7);
        assert!(r.pays() && (r.ratio.value - 3.95).abs() < 1e-9);
        assert!(r.margin > 2.5, "{r:?}");
    }

    #[test]
    fn nothing_collocated_measured_recommends_nothing_either_way() {
        // A budget spent on solo (and the reference): no verdict, not "does not pay".
        let solo = c("solo", 1, &[100.0, 101.0], 1.0);
        let only_single = [solo.clone(), c("mps", 1, &[99.0], 1.0)];
        assert!(recommend(&solo.aggregate, &only_single, 1.1).is_none());
        // One collocated cell is enough for a verdict.
        let with_two = [solo.clone(), c("mps", 2, &[150.0], 1.0)];
        assert!(recommend(&solo.aggregate, &with_two, 1.1).is_some());
    }

    #[test]
    fn noise_does_not_flip_the_choice_along_a_plateau() {
        // True aggregates: 200 at N=2, 400 from N=4 on; each measurement jitters by up to
        // ±2.5 % (a fixed pseudo-random sequence), with the windows' own noise 0.2 %,
        // which underestimates it: the least rise worth more copies holds the choice.
        let mut seed = 12345u64;
        let mut jitter = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.05
        };
        for _ in 0..200 {
            let solo_v = 100.0 * (1.0 + jitter());
            let solo = c("solo", 1, &[solo_v], 0.2);
            let naive4 = 400.0 * (1.0 + jitter());
            let mut m = |n: usize, truth: f64| {
                let v = truth * (1.0 + jitter());
                c("mps", n, &[v], truth * 0.002)
            };
            let all = [
                solo.clone(),
                m(2, 200.0),
                m(4, 400.0),
                m(7, 400.0),
                m(10, 400.0),
                c("naive", 4, &[naive4], 0.8),
            ];
            let r = recommend(&solo.aggregate, &all, 1.1).unwrap();
            // Naive and MPS with 4 copies cannot be told apart: the simpler one, always.
            assert_eq!((r.chosen.mode.as_str(), r.chosen.n), ("naive", 4), "{r:?}");
            assert!(r.pays());
        }
    }

    #[test]
    fn collocation_pays_only_beyond_min_gain_and_the_noise() {
        let solo = c("solo", 1, &[100.0, 100.0], 0.5);
        // 1.15x, measured tightly: pays.
        let tight = [solo.clone(), c("naive", 2, &[115.0, 115.0], 0.5)];
        let r = recommend(&solo.aggregate, &tight, 1.1).unwrap();
        assert_eq!(r.verdict, Verdict::Pays, "{r:?}");
        // 1.15x with ±10 % noise: solo is within the noise of it, so one at a time.
        let noisy = [solo.clone(), c("naive", 2, &[105.0, 125.0], 6.0)];
        let r = recommend(&solo.aggregate, &noisy, 1.1).unwrap();
        assert_eq!(r.verdict, Verdict::OneAtATime, "{r:?}");
        // 1.15x ± 7 %: above solo beyond the noise, but not above 1.10 beyond it.
        let solo_tight = c("solo", 1, &[100.0, 100.0], 0.0);
        let mid = [solo_tight.clone(), c("naive", 2, &[111.0, 119.0], 1.0)];
        let r = recommend(&solo_tight.aggregate, &mid, 1.1).unwrap();
        assert_eq!(r.verdict, Verdict::WithinNoise, "{r:?}");
        assert!(r.margin < 0.0);
        // 1.08x, tight: below --min-gain.
        let low = [solo.clone(), c("naive", 2, &[108.0, 108.0], 0.1)];
        let r = recommend(&solo.aggregate, &low, 1.1).unwrap();
        assert_eq!(r.verdict, Verdict::BelowMinGain, "{r:?}");
        // 1.04x, tight: not worth a second copy at all, whatever --min-gain says.
        let tiny = [solo.clone(), c("naive", 2, &[104.0, 104.0], 0.1)];
        let r = recommend(&solo.aggregate, &tiny, 1.01).unwrap();
        assert_eq!(r.verdict, Verdict::OneAtATime, "{r:?}");
        // Solo best.
        let worse = [solo.clone(), c("naive", 2, &[90.0, 90.0], 0.1)];
        let r = recommend(&solo.aggregate, &worse, 1.1).unwrap();
        assert_eq!(
            (r.verdict, r.chosen.mode.as_str()),
            (Verdict::OneAtATime, "solo")
        );
        let zero = c("solo", 1, &[0.0], 0.0);
        assert!(recommend(&zero.aggregate, &worse, 1.1).is_none());
        let only_solo: Vec<Candidate> = worse.iter().filter(|c| c.n == 1).cloned().collect();
        assert!(recommend(&solo.aggregate, &only_solo, 1.1).is_none());
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
