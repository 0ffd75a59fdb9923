//! A solo figure is `n = 1` of the copies' path: the common window of one copy
//! ([`super::window::Measured`]), which leaves out a warm-up after the first throughput
//! line. `colloc run --solo-baseline` and `colloc bench` take theirs this way, with the
//! same default warm-up, so one workload gives both the same number.

use super::throughput::Sample;
use super::window::{Measured, WindowError};

/// The warm-up after the first throughput line left out of every measurement, unless
/// the user sets one (`colloc bench --warmup`, `colloc run --solo-warmup`).
pub const DEFAULT_WARMUP: &str = "10s";

/// The solo figure of one run's samples: its work from `warmup` after its first sample
/// to its last, over that time.
///
/// # Errors
/// No samples, or none past the warm-up.
pub fn figure(samples: &[Sample], warmup: f64) -> Result<f64, WindowError> {
    Measured::over(&[samples.to_vec()], warmup, f64::MIN_POSITIVE).map(|m| m.aggregate())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_is_left_out() {
        // 20/s for the first 2 s after the first line, then 100/s.
        let s: Vec<Sample> = (0..=10)
            .map(|i| Sample {
                t: f64::from(i),
                rate: if i <= 2 { 20.0 } else { 100.0 },
            })
            .collect();
        assert!((figure(&s, 2.0).unwrap() - 100.0).abs() < 1e-9);
        // Counting the warm-up in reads low: (20 * 2 + 100 * 8) / 10.
        assert!((figure(&s, 0.0).unwrap() - 84.0).abs() < 1e-9);
        assert!(figure(&s, 10.0).is_err());
        assert!(figure(&[], 0.0).is_err());
    }
}
