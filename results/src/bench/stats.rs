//! How much a figure of `colloc bench` can be trusted: the spread of repeated
//! measurements of one configuration and the uncertainty of a ratio of two of them.
//!
//! **The rule.** A configuration measured `n` times (`--repeat`, and the solo run at the
//! start of every round and at the end) has the mean `m` of its measurements. Its
//! standard error is the larger of
//! - *between repeats*: the sample standard deviation over `√n` (needs `n ≥ 2`), which
//!   sees drift between measurements (a host that slows down, a GPU that warms up);
//! - *within the windows*: `√(Σ seᵢ²) / n`, where `seᵢ` is the standard error of
//!   measurement `i` from its window cut into equal blocks ([`block_se`]), which sees the
//!   jitter inside each window and is known even for one measurement.
//!
//! Its uncertainty `u` is [`COVERAGE`] standard errors (about a 95 % interval where the
//! noise is normal and the measurements many; with two or three repeats the spread
//! between them is itself rough, which the window's noise, taken as a floor, tempers):
//! the table prints `m ± u`. A ratio `a / b` of two independent figures
//! has the relative uncertainty `√((u_a/a)² + (u_b/b)²)`. No I/O here: every rule is
//! unit-tested.

use serde::{Deserialize, Serialize};

/// Standard errors in an uncertainty: ± 2 se is about a 95 % interval.
pub const COVERAGE: f64 = 2.0;

/// One measurement: its value and, where its window allowed, its standard error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Obs {
    /// The measured figure (an aggregate throughput).
    pub value: f64,
    /// Its standard error from the blocks of its window.
    pub se: Option<f64>,
}

/// The spread of a configuration's measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Measurements.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (two or more measurements).
    pub sd: Option<f64>,
    /// Smallest measurement.
    pub min: f64,
    /// Largest measurement.
    pub max: f64,
    /// Uncertainty of the mean: [`COVERAGE`] standard errors; `None` where neither
    /// repeats nor the window could tell.
    pub u: Option<f64>,
}

impl Spread {
    /// How far apart its runs were: (max - min) / mean.
    pub fn apart(&self) -> f64 {
        (self.max - self.min) / self.mean
    }

    /// The spread of `obs` (finite values only); `None` without any.
    pub fn of(obs: &[Obs]) -> Option<Spread> {
        let ok: Vec<&Obs> = obs.iter().filter(|o| o.value.is_finite()).collect();
        let n = ok.len();
        if n == 0 {
            return None;
        }
        let mean = ok.iter().map(|o| o.value).sum::<f64>() / n as f64;
        let sd = (n >= 2).then(|| {
            let ss: f64 = ok.iter().map(|o| (o.value - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        let between = sd.map(|s| s / (n as f64).sqrt());
        let within = ok
            .iter()
            .map(|o| o.se.filter(|s| s.is_finite() && *s >= 0.0))
            .collect::<Option<Vec<f64>>>()
            .map(|se| se.iter().map(|s| s * s).sum::<f64>().sqrt() / n as f64);
        let se = match (between, within) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Some(Spread {
            n,
            mean,
            sd,
            min: ok.iter().map(|o| o.value).fold(f64::INFINITY, f64::min),
            max: ok.iter().map(|o| o.value).fold(f64::NEG_INFINITY, f64::max),
            u: se.map(|s| COVERAGE * s),
        })
    }

    /// Uncertainty relative to the mean (0 where unknown or the mean is not positive).
    pub fn rel_u(&self) -> f64 {
        match self.u {
            Some(u) if self.mean > 0.0 => u / self.mean,
            _ => 0.0,
        }
    }

    /// Low end of the interval `mean ± u` (the mean where `u` is unknown).
    pub fn lo(&self) -> f64 {
        self.mean - self.u.unwrap_or(0.0)
    }

    /// High end of the interval.
    pub fn hi(&self) -> f64 {
        self.mean + self.u.unwrap_or(0.0)
    }
}

/// A ratio of two figures and its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// `a / b` of the means.
    pub value: f64,
    /// Its uncertainty (absolute); `None` where neither figure's is known.
    pub u: Option<f64>,
}

impl Ratio {
    /// Low end of `value ± u`.
    pub fn lo(&self) -> f64 {
        self.value - self.u.unwrap_or(0.0)
    }

    /// High end of `value ± u`.
    pub fn hi(&self) -> f64 {
        self.value + self.u.unwrap_or(0.0)
    }
}

/// `a / b` with the uncertainties of both; `None` unless both means are positive.
pub fn ratio(a: &Spread, b: &Spread) -> Option<Ratio> {
    if !(a.mean.is_finite() && b.mean.is_finite() && a.mean > 0.0 && b.mean > 0.0) {
        return None;
    }
    let value = a.mean / b.mean;
    let u = (a.u.is_some() || b.u.is_some())
        .then(|| value * (a.rel_u().powi(2) + b.rel_u().powi(2)).sqrt());
    Some(Ratio { value, u })
}

/// Standard error of a window's mean rate from the rates of its equal blocks (batch
/// means): their standard deviation over `√k`. `None` with fewer than two blocks.
pub fn block_se(blocks: &[f64]) -> Option<f64> {
    let k = blocks.len();
    if k < 2 || blocks.iter().any(|b| !b.is_finite()) {
        return None;
    }
    let mean = blocks.iter().sum::<f64>() / k as f64;
    let ss: f64 = blocks.iter().map(|b| (b - mean).powi(2)).sum();
    Some((ss / (k - 1) as f64).sqrt() / (k as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(values: &[f64]) -> Vec<Obs> {
        values
            .iter()
            .map(|&value| Obs { value, se: None })
            .collect()
    }

    #[test]
    fn repeats_give_mean_sd_range_and_two_standard_errors() {
        let s = Spread::of(&obs(&[90.0, 110.0])).unwrap();
        assert_eq!((s.n, s.mean, s.min, s.max), (2, 100.0, 90.0, 110.0));
        let sd = 200f64.sqrt();
        assert!((s.sd.unwrap() - sd).abs() < 1e-9);
        // se = sd / √2 = 10; u = 2 se
        assert!((s.u.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!((s.lo(), s.hi()), (80.0, 120.0));
        assert!((s.rel_u() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn one_measurement_takes_its_windows_noise_and_the_larger_one_wins() {
        let one = Spread::of(&[Obs {
            value: 100.0,
            se: Some(3.0),
        }])
        .unwrap();
        assert_eq!((one.sd, one.u), (None, Some(6.0)));
        // Two identical values but noisy windows: the windows' noise counts.
        let two = Spread::of(&[
            Obs {
                value: 100.0,
                se: Some(4.0),
            },
            Obs {
                value: 100.0,
                se: Some(4.0),
            },
        ])
        .unwrap();
        assert!((two.u.unwrap() - 2.0 * (32f64).sqrt() / 2.0).abs() < 1e-9);
        // Unknown everywhere: no uncertainty, and the interval is the mean.
        let bare = Spread::of(&obs(&[5.0])).unwrap();
        assert_eq!(
            (bare.u, bare.lo(), bare.hi(), bare.rel_u()),
            (None, 5.0, 5.0, 0.0)
        );
        assert_eq!(Spread::of(&obs(&[f64::NAN])), None);
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn a_ratio_adds_relative_uncertainties_in_quadrature() {
        let a = Spread::of(&[Obs {
            value: 400.0,
            se: Some(6.0),
        }])
        .unwrap(); // u 12 = 3 %
        let b = Spread::of(&[Obs {
            value: 100.0,
            se: Some(2.0),
        }])
        .unwrap(); // u 4 = 4 %
        let r = ratio(&a, &b).unwrap();
        assert_eq!(r.value, 4.0);
        assert!((r.u.unwrap() / r.value - 0.05).abs() < 1e-12, "{r:?}");
        assert!((r.lo() - 3.8).abs() < 1e-9 && (r.hi() - 4.2).abs() < 1e-9);
        let zero = Spread::of(&obs(&[0.0])).unwrap();
        assert!(ratio(&a, &zero).is_none());
        let bare = Spread::of(&obs(&[2.0])).unwrap();
        assert_eq!(ratio(&bare, &bare).unwrap().u, None);
    }

    #[test]
    fn block_noise() {
        assert_eq!(block_se(&[1.0]), None);
        assert_eq!(block_se(&[5.0, 5.0, 5.0]), Some(0.0));
        // sd of (9, 11) is √2; over √2 blocks: 1.
        assert!((block_se(&[9.0, 11.0]).unwrap() - 1.0).abs() < 1e-12);
    }
}
