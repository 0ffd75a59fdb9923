//! The steady aggregate: what the GPU did while every slot was busy with a run past its
//! start-up, beside work over makespan (which counts start-ups, stragglers and the tail
//! in which fewer runs than slots were left).
//!
//! A run is *producing* from its first throughput sample to its last (before its first
//! sample it is starting up: the window rule of [`super::throughput`] counts no work
//! there). The steady periods are the times when at least `slots` runs are producing;
//! the steady aggregate is the work of every run inside them ([`integrate`], the one
//! window rule) over their total length. For N copies started together (`colloc bench`)
//! this is their common window.

use super::throughput::{integrate, Sample};

/// The steady aggregate and how long it was measured over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Steady {
    /// Work per second while every slot was producing.
    pub throughput: f64,
    /// Seconds of such time.
    pub seconds: f64,
}

/// The times at which at least `slots` of `spans` are open, as disjoint intervals.
pub fn full_periods(spans: &[(f64, f64)], slots: usize) -> Vec<(f64, f64)> {
    if slots == 0 {
        return Vec::new();
    }
    let mut ev: Vec<(f64, i32)> = Vec::with_capacity(spans.len() * 2);
    for &(a, b) in spans.iter().filter(|(a, b)| b > a) {
        ev.push((a, 1));
        ev.push((b, -1));
    }
    // Ends before starts at the same instant: touching spans do not overlap.
    ev.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut open, mut since, mut out) = (0usize, None::<f64>, Vec::new());
    for (t, d) in ev {
        if d > 0 {
            open += 1;
            if open == slots {
                since = Some(t);
            }
        } else {
            if open == slots {
                if let Some(s) = since.take() {
                    if t > s {
                        out.push((s, t));
                    }
                }
            }
            open -= 1;
        }
    }
    out
}

/// The steady aggregate of `series` (each run's samples, time-ordered) on `slots` slots;
/// `None` when there never were `slots` runs producing at once.
pub fn steady(series: &[&[Sample]], slots: usize) -> Option<Steady> {
    let spans: Vec<(f64, f64)> = series
        .iter()
        .filter_map(|s| Some((s.first()?.t, s.last()?.t)))
        .collect();
    let periods = full_periods(&spans, slots);
    let seconds: f64 = periods.iter().map(|(a, b)| b - a).sum();
    if seconds <= 0.0 {
        return None;
    }
    let work: f64 = periods
        .iter()
        .map(|&(a, b)| series.iter().map(|s| integrate(s, a, b)).sum::<f64>())
        .sum();
    Some(Steady {
        throughput: work / seconds,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run starting up until `first`, then at `rate` per second until `last`, one
    /// sample a second.
    fn run(first: f64, last: f64, rate: f64) -> Vec<Sample> {
        let mut v = Vec::new();
        let mut t = first;
        while t <= last + 1e-9 {
            v.push(Sample { t, rate });
            t += 1.0;
        }
        v
    }

    #[test]
    fn full_periods_need_every_slot() {
        let p = full_periods(&[(0.0, 10.0), (2.0, 6.0), (5.0, 12.0)], 2);
        assert_eq!(p, vec![(2.0, 10.0)]);
        assert_eq!(full_periods(&[(0.0, 4.0), (4.0, 8.0)], 2), vec![]);
        assert_eq!(full_periods(&[(0.0, 4.0)], 0), vec![]);
        // A gap in the middle: two periods.
        let p = full_periods(&[(0.0, 3.0), (1.0, 9.0), (5.0, 9.0)], 2);
        assert_eq!(p, vec![(1.0, 3.0), (5.0, 9.0)]);
    }

    #[test]
    fn steady_leaves_out_start_up_and_the_tail() {
        // Two slots; each run starts up 12 s, then makes 100/s for 30 s. Runs a and b
        // start at 0; c starts when they end (42 s) and produces from 54 s to 84 s,
        // alone. Steady: 12..42 only (a and b), 200/s.
        let a = run(12.0, 42.0, 100.0);
        let b = run(12.0, 42.0, 100.0);
        let c = run(54.0, 84.0, 100.0);
        let s = steady(&[&a, &b, &c], 2).unwrap();
        assert!((s.throughput - 200.0).abs() < 1e-9, "{s:?}");
        assert!((s.seconds - 30.0).abs() < 1e-9, "{s:?}");
        // Work over makespan would read 9000 / 84 = 107/s: the other figure.
        assert_eq!(steady(&[&a], 2), None);
    }
}
