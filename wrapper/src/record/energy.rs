//! A GPU's energy shared out among the runs on it, from the readings of several processes.
//!
//! Across nodes each run is its own Slurm step, and the step side samples only its own
//! run's GPU while its run runs ([`crate::step::side`]). Runs on one GPU (MIG instances,
//! MPS or naive slots) are therefore read by different processes; each sees the GPU's one
//! energy counter. Put together, their readings give the GPU's energy over time, and the
//! rule of the one-node sampler ([`colloc_core::telemetry`]) shares it out: the energy of
//! each interval between two readings, for the part of the interval in which at least one
//! run was active, goes to the runs active in it in proportion to their time in it; the
//! rest is idle energy. (Here the active part is the union of the runs' times in the
//! interval; the one-node sampler, which keeps no history, takes the longest of them.)
//! The shares and the idle energy add up to the counter's difference from the first
//! reading to the last.

/// How a GPU's energy was shared out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    /// Each span's share, joules, in the order given.
    pub shares: Vec<f64>,
    /// The counter's difference from the first reading to the last, joules.
    pub total_j: f64,
    /// The part of it shared out.
    pub runs_j: f64,
    /// The part with no run active.
    pub idle_j: f64,
}

/// Length of the union of intervals (each already clipped).
fn union_len(mut iv: Vec<(f64, f64)>) -> f64 {
    iv.retain(|(a, b)| b > a);
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (a, b) in iv {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0.0, |(a, b)| b - a)
}

/// Share out the energy of one GPU, read at `readings` (any order, from any number of
/// processes), among `spans` (start, end: Unix seconds). `None` without two readings.
/// A counter that goes back (a driver reload) skips that interval.
pub fn split(readings: &[(f64, u64)], spans: &[(f64, f64)]) -> Option<Split> {
    let mut r: Vec<(f64, u64)> = readings.to_vec();
    r.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    r.dedup_by(|b, a| b.0 == a.0);
    if r.len() < 2 {
        return None;
    }
    let mut out = Split {
        shares: vec![0.0; spans.len()],
        ..Split::default()
    };
    for w in r.windows(2) {
        let ((t0, e0), (t1, e1)) = (w[0], w[1]);
        if t1 <= t0 || e1 < e0 {
            continue;
        }
        let de = (e1 - e0) as f64 / 1000.0;
        out.total_j += de;
        let clipped: Vec<(f64, f64)> = spans.iter().map(|&(s, e)| (s.max(t0), e.min(t1))).collect();
        let times: Vec<f64> = clipped.iter().map(|(a, b)| (b - a).max(0.0)).collect();
        let weights: f64 = times.iter().sum();
        if weights <= 0.0 {
            out.idle_j += de;
            continue;
        }
        let busy = de * (union_len(clipped) / (t1 - t0)).clamp(0.0, 1.0);
        for (share, t) in out.shares.iter_mut().zip(&times) {
            *share += busy * t / weights;
        }
        out.runs_j += busy;
        out.idle_j += de - busy;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings of a GPU drawing `watts` from time 0, every `dt` seconds from `from` to
    /// `to`.
    fn counter(watts: u64, from: f64, to: f64, dt: f64) -> Vec<(f64, u64)> {
        let mut v = Vec::new();
        let mut t = from;
        while t <= to + 1e-9 {
            v.push((t, (t * 1000.0) as u64 * watts));
            t += dt;
        }
        v
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn two_runs_side_by_side_share_the_overlap_and_have_the_rest_alone() {
        // 100 W. a runs 0..10, b runs 5..15, each step read the counter every second
        // while its run ran: a's readings 0..10, b's 5..15.
        let mut r = counter(100, 0.0, 10.0, 1.0);
        r.extend(counter(100, 5.0, 15.0, 1.0));
        let s = split(&r, &[(0.0, 10.0), (5.0, 15.0)]).unwrap();
        // a: 5 s alone (500 J) + half of 5 s together (250 J); b likewise.
        assert!(close(s.shares[0], 750.0), "{s:?}");
        assert!(close(s.shares[1], 750.0), "{s:?}");
        assert!(close(s.total_j, 1500.0));
        assert!(close(s.idle_j, 0.0));
        assert!(close(s.runs_j + s.idle_j, s.total_j));
    }

    #[test]
    fn a_gap_between_runs_is_idle_and_counts_once() {
        // a 0..4, b 6..10; nobody between 4 and 6.
        let mut r = counter(50, 0.0, 4.0, 0.5);
        r.extend(counter(50, 6.0, 10.0, 0.5));
        let s = split(&r, &[(0.0, 4.0), (6.0, 10.0)]).unwrap();
        assert!(close(s.shares[0], 200.0), "{s:?}");
        assert!(close(s.shares[1], 200.0), "{s:?}");
        assert!(close(s.idle_j, 100.0), "{s:?}");
        assert!(close(s.total_j, 500.0));
    }

    #[test]
    fn part_of_an_interval_active_is_part_busy() {
        // Readings at 0 and 10 only; one run 2..7: half the interval busy.
        let s = split(&[(0.0, 0), (10.0, 1_000_000)], &[(2.0, 7.0)]).unwrap();
        assert!(close(s.shares[0], 500.0), "{s:?}");
        assert!(close(s.idle_j, 500.0));
        // Two runs over the same half: the union is still half, shared equally.
        let s = split(&[(0.0, 0), (10.0, 1_000_000)], &[(2.0, 7.0), (2.0, 7.0)]).unwrap();
        assert!(
            close(s.shares[0], 250.0) && close(s.shares[1], 250.0),
            "{s:?}"
        );
        assert!(close(s.idle_j, 500.0));
    }

    #[test]
    fn too_few_readings_or_a_reset_counter() {
        assert_eq!(split(&[(1.0, 5)], &[(0.0, 2.0)]), None);
        assert_eq!(split(&[(1.0, 5), (1.0, 7)], &[(0.0, 2.0)]), None);
        // The counter went back between 1 and 2: that interval is skipped.
        let s = split(
            &[(0.0, 0), (1.0, 1000), (2.0, 10), (3.0, 1010)],
            &[(0.0, 3.0)],
        )
        .unwrap();
        assert!(close(s.total_j, 2.0), "{s:?}");
        assert!(close(s.shares[0], 2.0));
    }
}
