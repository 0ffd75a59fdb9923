//! Pure arithmetic of a benchmark: the common steady-state window of collocated copies,
//! samples integrated over it, and the recommendation. No I/O here, so every rule is
//! unit-tested.
//!
//! Each copy prints a throughput (samples per second) at intervals. A line received at
//! time `t_k` with rate `r_k` is taken to describe the interval since the copy's previous
//! line, `(t_{k-1}, t_k]`. The copies' rates are integrated over one window in which
//! every copy is running past its warm-up: it starts `warmup` after the last copy's first
//! line (its training loop has begun) and ends at the earliest last line of any copy.
//! Aggregate throughput is the total samples of all copies in that window divided by its
//! length; summing per-run averages over staggered runs would overstate the overlap.

/// One throughput line of one copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the benchmark started, when colloc read the line.
    pub t: f64,
    /// Samples per second the line reported.
    pub rate: f64,
}

/// The window over which collocated copies are compared, in seconds since start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start: every copy is past its warm-up.
    pub start: f64,
    /// End: the first copy's last throughput line.
    pub end: f64,
}

impl Window {
    /// Length in seconds.
    pub fn len(&self) -> f64 {
        self.end - self.start
    }
}

/// Why no common window exists.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    /// A copy printed no throughput line at all.
    #[error("copy {0} printed no throughput line")]
    NoSamples(usize),
    /// The copies did not all run together past the warm-up.
    #[error(
        "the copies did not run together past the warm-up ({overlap:.1} s of overlap); \
         let the workload run longer or lower --warmup"
    )]
    NoOverlap {
        /// Seconds of overlap (may be negative).
        overlap: f64,
    },
}

/// The common window of copies given their throughput lines (each sorted by time).
/// `min_len`: the shortest window accepted.
///
/// # Errors
/// [`WindowError`] when a copy has no lines or the overlap is shorter than `min_len`.
pub fn common_window(
    copies: &[Vec<Sample>],
    warmup: f64,
    min_len: f64,
) -> Result<Window, WindowError> {
    let mut start = f64::NEG_INFINITY;
    let mut end = f64::INFINITY;
    for (i, s) in copies.iter().enumerate() {
        let (Some(first), Some(last)) = (s.first(), s.last()) else {
            return Err(WindowError::NoSamples(i));
        };
        start = start.max(first.t + warmup);
        end = end.min(last.t);
    }
    let w = Window { start, end };
    if copies.is_empty() || w.len().is_nan() || w.len() < min_len || w.len() <= 0.0 {
        return Err(WindowError::NoOverlap {
            overlap: if copies.is_empty() { 0.0 } else { w.len() },
        });
    }
    Ok(w)
}

/// Samples a copy processed inside `w`: its piecewise-constant rate integrated over the
/// window. The interval before the first line is unknown and not counted.
pub fn integrate(samples: &[Sample], w: Window) -> f64 {
    samples
        .windows(2)
        .map(|pair| {
            let (a, b) = (pair[0].t, pair[1].t);
            let overlap = b.min(w.end) - a.max(w.start);
            if overlap > 0.0 {
                pair[1].rate * overlap
            } else {
                0.0
            }
        })
        .sum()
}

/// Throughput figures of one configuration (a mode and a number of copies).
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    /// The window.
    pub window: Window,
    /// Samples per copy in the window.
    pub samples: Vec<f64>,
}

impl Throughput {
    /// Compute from each copy's throughput lines.
    ///
    /// # Errors
    /// As [`common_window`].
    pub fn measure(copies: &[Vec<Sample>], warmup: f64, min_len: f64) -> Result<Self, WindowError> {
        let window = common_window(copies, warmup, min_len)?;
        let samples = copies.iter().map(|s| integrate(s, window)).collect();
        Ok(Throughput { window, samples })
    }

    /// Total samples of all copies in the window.
    pub fn total(&self) -> f64 {
        self.samples.iter().sum()
    }

    /// Aggregate throughput: total samples per second of window.
    pub fn aggregate(&self) -> f64 {
        self.total() / self.window.len()
    }

    /// Each copy's throughput in the window.
    pub fn per_copy(&self) -> Vec<f64> {
        let len = self.window.len();
        self.samples.iter().map(|s| s / len).collect()
    }
}

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

/// Energy counter value at time `t`, linear between readings `(t, millijoules)`.
/// `None` outside the readings.
pub fn energy_at(readings: &[(f64, u64)], t: f64) -> Option<f64> {
    let i = readings.partition_point(|(rt, _)| *rt < t);
    if i < readings.len() && readings[i].0 == t {
        return Some(readings[i].1 as f64);
    }
    if i == 0 || i >= readings.len() {
        return None;
    }
    let (t0, e0) = (readings[i - 1].0, readings[i - 1].1 as f64);
    let (t1, e1) = (readings[i].0, readings[i].1 as f64);
    Some(e0 + (e1 - e0) * (t - t0) / (t1 - t0))
}

/// Joules the GPU used during `w`, from energy counter readings in millijoules.
pub fn energy_in(readings: &[(f64, u64)], w: Window) -> Option<f64> {
    let a = energy_at(readings, w.start)?;
    let b = energy_at(readings, w.end)?;
    (b >= a).then(|| (b - a) / 1000.0)
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

    fn series(start: f64, step: f64, n: usize, rate: f64) -> Vec<Sample> {
        (0..n)
            .map(|k| Sample {
                t: start + step * k as f64,
                rate,
            })
            .collect()
    }

    #[test]
    fn window_starts_after_last_copy_warms_up_and_ends_at_first_stop() {
        let a = series(1.0, 1.0, 20, 100.0); // 1..20
        let b = series(5.0, 1.0, 10, 50.0); // 5..14
        let w = common_window(&[a.clone(), b.clone()], 2.0, 1.0).unwrap();
        assert_eq!(
            w,
            Window {
                start: 7.0,
                end: 14.0
            }
        );
        let t = Throughput::measure(&[a, b], 2.0, 1.0).unwrap();
        assert!((t.samples[0] - 700.0).abs() < 1e-9);
        assert!((t.samples[1] - 350.0).abs() < 1e-9);
        assert!((t.aggregate() - 150.0).abs() < 1e-9);
        assert_eq!(t.per_copy(), vec![100.0, 50.0]);
    }

    #[test]
    fn partial_intervals_are_prorated_with_the_rate_of_their_end() {
        let s = vec![
            Sample { t: 0.0, rate: 1.0 },
            Sample { t: 2.0, rate: 10.0 },
            Sample { t: 4.0, rate: 20.0 },
        ];
        let w = Window {
            start: 1.0,
            end: 3.0,
        };
        // (1,2] at 10/s, (2,3] at 20/s
        assert!((integrate(&s, w) - 30.0).abs() < 1e-9);
    }

    #[test]
    fn staggered_runs_do_not_count_time_outside_the_overlap() {
        // A alone at 100/s from 0..10, then B alone 10..20: no overlap at all.
        let a = series(0.0, 1.0, 11, 100.0);
        let b = series(10.0, 1.0, 11, 100.0);
        let e = common_window(&[a, b], 1.0, 0.5).unwrap_err();
        assert!(matches!(e, WindowError::NoOverlap { .. }), "{e}");
        assert!(e.to_string().contains("--warmup"));
    }

    #[test]
    fn missing_lines_name_the_copy() {
        let e = common_window(&[series(0.0, 1.0, 5, 1.0), vec![]], 0.0, 0.1).unwrap_err();
        assert_eq!(e, WindowError::NoSamples(1));
    }

    #[test]
    fn slowdown_is_solo_over_copy_rate() {
        let (mean, max) = slowdown(100.0, &[50.0, 25.0]).unwrap();
        assert!((mean - 3.0).abs() < 1e-9 && (max - 4.0).abs() < 1e-9);
        assert_eq!(slowdown(100.0, &[0.0]), None);
        assert_eq!(slowdown(0.0, &[1.0]), None);
    }

    #[test]
    fn energy_interpolates_between_readings() {
        let r = vec![(0.0, 0), (1.0, 1000), (3.0, 5000)];
        assert_eq!(energy_at(&r, 2.0), Some(3000.0));
        assert_eq!(energy_at(&r, 4.0), None);
        let j = energy_in(
            &r,
            Window {
                start: 0.5,
                end: 3.0,
            },
        )
        .unwrap();
        assert!((j - 4.5).abs() < 1e-9);
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
