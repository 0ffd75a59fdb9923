//! The common-window analysis of copies running side by side (`colloc bench`, and any
//! caller of the pack engine that runs N copies at once): one window in which every copy
//! runs past its warm-up, and the work of each copy in it, by the rule of
//! [`super::throughput`].
//!
//! The window starts `warmup` after the last copy's first sample (its training loop has
//! begun) and ends at the earliest last sample of any copy. Aggregate throughput is the
//! total work of all copies in the window over its length; summing per-run averages over
//! staggered runs would overstate the overlap.

use super::throughput::{integrate, Sample};

/// A window, in seconds on the caller's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start: every copy is past its warm-up.
    pub start: f64,
    /// End: the first copy's last sample.
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

/// The common window of copies given their samples (each sorted by time). `min_len`: the
/// shortest window accepted.
///
/// # Errors
/// [`WindowError`] when a copy has no samples or the overlap is shorter than `min_len`.
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

/// Figures of copies over their common window.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The window.
    pub window: Window,
    /// Work of each copy in the window.
    pub work: Vec<f64>,
}

impl Measured {
    /// Measure copies over their common window.
    ///
    /// # Errors
    /// As [`common_window`].
    pub fn over(copies: &[Vec<Sample>], warmup: f64, min_len: f64) -> Result<Self, WindowError> {
        let window = common_window(copies, warmup, min_len)?;
        let work = copies
            .iter()
            .map(|s| integrate(s, window.start, window.end))
            .collect();
        Ok(Measured { window, work })
    }

    /// Total work of all copies in the window.
    pub fn total(&self) -> f64 {
        self.work.iter().sum()
    }

    /// Aggregate throughput: total work per second of window.
    pub fn aggregate(&self) -> f64 {
        self.total() / self.window.len()
    }

    /// Each copy's throughput in the window.
    pub fn per_copy(&self) -> Vec<f64> {
        let len = self.window.len();
        self.work.iter().map(|s| s / len).collect()
    }

    /// Aggregate throughput in each of `k` equal parts of the window (batch means, for
    /// the noise of the measurement): the copies' summed work in the part over its
    /// length. `copies` are the samples the window was measured from.
    pub fn blocks(&self, copies: &[Vec<Sample>], k: usize) -> Vec<f64> {
        let len = self.window.len() / k.max(1) as f64;
        (0..k)
            .map(|i| {
                let from = self.window.start + len * i as f64;
                let to = from + len;
                copies.iter().map(|s| integrate(s, from, to)).sum::<f64>() / len
            })
            .collect()
    }
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
        let t = Measured::over(&[a.clone(), b.clone()], 2.0, 1.0).unwrap();
        assert!((t.work[0] - 700.0).abs() < 1e-9);
        assert!((t.work[1] - 350.0).abs() < 1e-9);
        assert!((t.aggregate() - 150.0).abs() < 1e-9);
        assert_eq!(t.per_copy(), vec![100.0, 50.0]);
        let b = t.blocks(&[a, b], 7);
        assert_eq!(b.len(), 7);
        assert!(b.iter().all(|v| (v - 150.0).abs() < 1e-9), "{b:?}");
    }

    #[test]
    fn blocks_follow_a_rate_that_changes_inside_the_window() {
        // 100/s until t = 5, then 200/s; window (0, 10]
        let s: Vec<Sample> = (0..=10)
            .map(|k| Sample {
                t: f64::from(k),
                rate: if k <= 5 { 100.0 } else { 200.0 },
            })
            .collect();
        let m = Measured::over(std::slice::from_ref(&s), 0.0, 1.0).unwrap();
        assert_eq!(m.blocks(&[s], 2), vec![100.0, 200.0]);
    }

    #[test]
    fn staggered_runs_do_not_count_time_outside_the_overlap() {
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
}
