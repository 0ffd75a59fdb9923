//! The one throughput estimator of colloc, for `colloc run` and `colloc bench`.
//!
//! **The window rule.** A run prints its rate at intervals. A sample read at time `t_k`
//! with rate `r_k` describes the interval since the run's previous sample,
//! `(t_{k-1}, t_k]`, so its work there is `r_k · (t_k − t_{k-1})`. The time before a run's
//! first sample (start-up, data loading, autotuning) is not described by any sample and
//! counts as **no work**; so does a run with a single sample. A run's throughput is its
//! work over its sampled span (first to last sample); the work in any window is the
//! integral of this piecewise-constant rate over the window ([`integrate`]). Aggregate
//! throughput is summed work over elapsed time, never a sum of per-run averages.

use serde::{Deserialize, Serialize};

/// Most samples kept per attempt; beyond this every other one is dropped (the running
/// figures still see all of them).
pub const MAX_KEPT: usize = 4096;

/// One throughput sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds (on the caller's clock) when colloc read the line.
    pub t: f64,
    /// The rate the line reported.
    pub rate: f64,
}

/// The running figures of a series, exact whatever was dropped from `samples`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Samples seen.
    pub count: u64,
    /// Time of the first sample.
    pub first_t: Option<f64>,
    /// Time of the last sample.
    pub last_t: Option<f64>,
    /// Work done: each rate times the time since the previous sample.
    pub work: f64,
    /// Largest sample.
    pub max: Option<f64>,
    /// Latest sample.
    pub last: Option<f64>,
}

impl Stats {
    /// Seconds from the first to the last sample.
    pub fn span(&self) -> f64 {
        match (self.first_t, self.last_t) {
            (Some(a), Some(b)) => (b - a).max(0.0),
            _ => 0.0,
        }
    }

    /// The throughput: work over the sampled span; with a single sample, that sample
    /// (which does no work in any total).
    pub fn rate(&self) -> Option<f64> {
        rate(self.count, self.work, self.span(), self.last)
    }

    /// Add one sample.
    pub fn push(&mut self, t: f64, v: f64) {
        if let Some(prev) = self.last_t {
            self.work += v * (t - prev).max(0.0);
        } else {
            self.first_t = Some(t);
        }
        self.last_t = Some(t);
        self.count += 1;
        self.max = Some(self.max.map_or(v, |m| m.max(v)));
        self.last = Some(v);
    }
}

/// The throughput rule, for one attempt ([`Stats::rate`]) or a run's attempts together:
/// `work` over the sampled time `span` from `count` samples; with fewer than two samples
/// or no time between them, the `last` sample (which does no work in any total).
pub fn rate(count: u64, work: f64, span: f64, last: Option<f64>) -> Option<f64> {
    match count {
        0 => None,
        _ if count >= 2 && span > 0.0 => Some(work / span),
        _ => last,
    }
}

/// A run's throughput samples: the running [`Stats`] and the kept samples (thinned past
/// [`MAX_KEPT`]). Samples newly kept are also queued in `fresh` for the durable record.
#[derive(Debug, Default, Clone)]
pub struct Series {
    /// Unit of the first sample; samples in another unit are ignored.
    pub unit: Option<String>,
    /// Running figures.
    pub stats: Stats,
    /// Kept samples: (time, rate).
    pub samples: Vec<(f64, f64)>,
    stride: u64,
    fresh: Vec<(f64, f64)>,
}

/// Append to a kept list, thinning it past [`MAX_KEPT`]. The same steps rebuild the list
/// from the samples appended to it.
pub fn keep(samples: &mut Vec<(f64, f64)>, s: (f64, f64)) -> bool {
    samples.push(s);
    if samples.len() >= MAX_KEPT {
        let mut i = 0;
        samples.retain(|_| {
            i += 1;
            i % 2 == 1
        });
        return true;
    }
    false
}

impl Series {
    /// Add a sample seen at `t`; false (and ignored) when its unit differs.
    pub fn push(&mut self, t: f64, v: f64, unit: &str) -> bool {
        match &self.unit {
            None => self.unit = Some(unit.to_string()),
            Some(u) if u != unit => return false,
            Some(_) => {}
        }
        self.stats.push(t, v);
        let stride = self.stride.max(1);
        if self.stats.count.is_multiple_of(stride) {
            self.fresh.push((t, v));
            if keep(&mut self.samples, (t, v)) {
                self.stride = stride * 2;
            }
        }
        true
    }

    /// Samples kept since the last call.
    pub fn take_fresh(&mut self) -> Vec<(f64, f64)> {
        std::mem::take(&mut self.fresh)
    }

    /// The kept samples as [`Sample`]s.
    pub fn as_samples(&self) -> Vec<Sample> {
        self.samples
            .iter()
            .map(|&(t, rate)| Sample { t, rate })
            .collect()
    }
}

/// Work of a sample list inside `(from, to]`: each sample's rate over the part of its own
/// interval that lies in the window. The interval before the first sample is unknown and
/// counts as none.
pub fn integrate(samples: &[Sample], from: f64, to: f64) -> f64 {
    samples
        .windows(2)
        .map(|pair| {
            let (a, b) = (pair[0].t, pair[1].t);
            let overlap = b.min(to) - a.max(from);
            if overlap > 0.0 {
                pair[1].rate * overlap
            } else {
                0.0
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_integrated_and_start_up_counts_as_none() {
        let mut s = Stats::default();
        s.push(20.0, 100.0);
        assert_eq!(
            (s.work, s.rate()),
            (0.0, Some(100.0)),
            "one sample does no work"
        );
        s.push(21.0, 100.0);
        s.push(23.0, 50.0);
        assert_eq!(s.work, 100.0 * 1.0 + 50.0 * 2.0);
        assert_eq!(s.span(), 3.0);
        assert_eq!(s.rate(), Some(200.0 / 3.0));
        assert_eq!(s.max, Some(100.0));
        assert_eq!(s.last, Some(50.0));
    }

    #[test]
    fn series_keeps_units_thins_and_queues_fresh_samples() {
        let mut s = Series::default();
        assert!(s.push(0.0, 1.0, "img/s"));
        assert!(!s.push(1.0, 5.0, "it/s"));
        assert_eq!(s.stats.count, 1);
        for i in 1..20_000 {
            s.push(f64::from(i), 1.0, "img/s");
        }
        assert!(s.samples.len() < MAX_KEPT);
        assert_eq!(s.stats.count, 20_000);
        assert_eq!(s.stats.rate(), Some(1.0));
        // replaying the fresh samples through `keep` rebuilds the kept list exactly
        let fresh = s.take_fresh();
        let mut rebuilt = Vec::new();
        for f in fresh {
            keep(&mut rebuilt, f);
        }
        assert_eq!(rebuilt, s.samples);
        assert!(s.take_fresh().is_empty());
    }

    #[test]
    fn partial_intervals_are_prorated_with_the_rate_of_their_end() {
        let s = [
            Sample { t: 0.0, rate: 1.0 },
            Sample { t: 2.0, rate: 10.0 },
            Sample { t: 4.0, rate: 20.0 },
        ];
        // (1,2] at 10/s, (2,3] at 20/s
        assert!((integrate(&s, 1.0, 3.0) - 30.0).abs() < 1e-9);
    }

    /// One rule for an attempt and for a run's attempts together: work over sampled time,
    /// else the last sample.
    #[test]
    fn the_rate_rule() {
        assert_eq!(rate(0, 0.0, 0.0, Some(5.0)), None);
        assert_eq!(rate(1, 0.0, 0.0, Some(5.0)), Some(5.0));
        assert_eq!(
            rate(2, 30.0, 0.0, Some(4.0)),
            Some(4.0),
            "no time: the last sample"
        );
        assert_eq!(rate(3, 30.0, 10.0, Some(5.0)), Some(3.0));
        let mut s = Stats::default();
        for (t, v) in [(0.0, 9.0), (1.0, 10.0), (3.0, 20.0)] {
            s.push(t, v);
        }
        // 10/s over (0,1], 20/s over (1,3]: 50 over 3 s
        assert_eq!(s.rate(), rate(3, 50.0, 3.0, Some(20.0)));
        assert!((s.rate().unwrap() - 50.0 / 3.0).abs() < 1e-12);
    }
}
