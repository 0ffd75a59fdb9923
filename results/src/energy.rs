//! The one rule for a GPU's energy, whichever command shows it.
//!
//! NVML gives energy only per physical GPU, as a counter. Between two readings of it, the
//! energy of the interval is shared out among the attempts (runs, bench copies) that were
//! active on the GPU: the part of the interval in which at least one was active
//! ([`share`]'s `busy_s`) goes to them in proportion to the time each was active in it;
//! the rest is idle energy, nobody's. So the shares plus the idle energy add up to the
//! counter's difference exactly.
//!
//! Three callers, one rule:
//! - the one-node sampler ([`crate::telemetry::Fold`]) shares each interval as it reads it;
//! - across nodes, each run's Slurm step reads the counter while its run runs, and
//!   [`split`] shares the merged readings out afterwards;
//! - `colloc bench` wants the whole GPU's energy during a measurement window
//!   ([`energy_in`]): device-wide by design (every copy of the cell is on that GPU).

/// One reading in a GPU's history.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Seconds since the sampler's base instant.
    pub t: f64,
    /// Energy measured since the first reading, joules (where read at this tick).
    pub energy_j: Option<f64>,
    /// Memory in use on the whole GPU, bytes.
    pub used_bytes: Option<u64>,
    /// GPM's SM activity over the interval this reading ends, percent (Hopper and later).
    pub sm_activity: Option<f64>,
    /// GPM's SM occupancy over that interval, percent.
    pub sm_occupancy: Option<f64>,
}

/// One interval's energy `de` (joules) over `span_s` seconds, of which `busy_s` had at
/// least one attempt active, shared among attempts active `times[i]` seconds in it.
/// Returns each attempt's share and the part shared out (the rest of `de` is idle).
pub fn share(de: f64, span_s: f64, busy_s: f64, times: &[f64]) -> (Vec<f64>, f64) {
    let weights: f64 = times.iter().sum();
    if weights <= 0.0 || span_s <= 0.0 {
        return (vec![0.0; times.len()], 0.0);
    }
    let busy = de * (busy_s / span_s).clamp(0.0, 1.0);
    (times.iter().map(|t| busy * t / weights).collect(), busy)
}

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

/// Most (interval, span) pairs [`split`] shares out: a bound on its time whatever the
/// record says (a forged record of 20,000 attempts all active at once on one GPU, each
/// with its own readings, was 800 million pairs).
pub const MAX_SPLIT_PAIRS: usize = 100_000_000;

/// Share out the energy of one GPU, read at `readings` ((time, counter in mJ), any order,
/// from any number of processes), among `spans` (start, end, same clock) by [`share`].
/// `None` without two readings, or past [`MAX_SPLIT_PAIRS`]. A counter that goes back (a
/// driver reload) skips that interval. Each interval looks only at the spans active in
/// it (a sweep over the spans by start), so the work is the pairs that overlap.
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
    let mut by_start: Vec<usize> = (0..spans.len()).collect();
    by_start.sort_by(|&a, &b| spans[a].0.total_cmp(&spans[b].0));
    let mut next = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut pairs = 0usize;
    for w in r.windows(2) {
        let ((t0, e0), (t1, e1)) = (w[0], w[1]);
        // Intervals come in time order: a span that ended by t0 is done with.
        while next < by_start.len() && spans[by_start[next]].0 < t1 {
            active.push(by_start[next]);
            next += 1;
        }
        active.retain(|&i| spans[i].1 > t0);
        pairs += active.len();
        if pairs > MAX_SPLIT_PAIRS {
            return None;
        }
        if t1 <= t0 || e1 < e0 {
            continue;
        }
        let de = (e1 - e0) as f64 / 1000.0;
        out.total_j += de;
        // In the spans' own order, as the shares were always summed.
        let mut here: Vec<usize> = active
            .iter()
            .copied()
            .filter(|&i| spans[i].0 < t1 && spans[i].1 > t0)
            .collect();
        here.sort_unstable();
        let clipped: Vec<(f64, f64)> = here
            .iter()
            .map(|&i| (spans[i].0.max(t0), spans[i].1.min(t1)))
            .collect();
        let times: Vec<f64> = clipped.iter().map(|(a, b)| (b - a).max(0.0)).collect();
        let (shares, busy) = share(de, t1 - t0, union_len(clipped), &times);
        for (&i, s) in here.iter().zip(shares) {
            out.shares[i] += s;
        }
        out.runs_j += busy;
        out.idle_j += de - busy;
    }
    Some(out)
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

/// The mean of a figure of the readings taken in the window from `start` to `end` (each
/// ends the interval it describes, so those at `start` or before are left out); `None`
/// where none in it has the figure.
pub fn mean_in(
    readings: &[Reading],
    start: f64,
    end: f64,
    figure: impl Fn(&Reading) -> Option<f64>,
) -> Option<f64> {
    let (sum, n) = readings
        .iter()
        .filter(|r| r.t > start && r.t <= end)
        .filter_map(|r| figure(r).filter(|v| v.is_finite()))
        .fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Joules the whole GPU used from `start` to `end` (seconds on the readings' clock),
/// interpolated between its readings.
pub fn energy_in(readings: &[Reading], start: f64, end: f64) -> Option<f64> {
    let pts: Vec<(f64, f64)> = readings
        .iter()
        .filter_map(|r| r.energy_j.map(|e| (r.t, e)))
        .collect();
    let a = energy_at(&pts, start)?;
    let b = energy_at(&pts, end)?;
    (b >= a).then_some(b - a)
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
    fn one_interval_shares_its_busy_part_by_time() {
        // 100 J over 10 s, busy 5 s: 50 J shared 3:1, 50 J idle.
        let (s, busy) = share(100.0, 10.0, 5.0, &[3.0, 1.0]);
        assert!(close(busy, 50.0));
        assert!(close(s[0], 37.5) && close(s[1], 12.5), "{s:?}");
        // Nobody active: all idle.
        assert_eq!(share(100.0, 10.0, 0.0, &[0.0]), (vec![0.0], 0.0));
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

    /// GPM readings at 1, 2, 3 and 4 s: a window from 1 to 3 s holds those ending at 2
    /// and 3 s; one without any reading in it has no mean.
    #[test]
    fn a_mean_in_a_window_takes_the_readings_ending_in_it() {
        let r: Vec<Reading> = [(1.0, 5.0), (2.0, 14.0), (3.0, 16.0), (4.0, 90.0)]
            .iter()
            .map(|&(t, a)| Reading {
                t,
                sm_activity: Some(a),
                ..Reading::default()
            })
            .collect();
        assert_eq!(mean_in(&r, 1.0, 3.0, |r| r.sm_activity), Some(15.0));
        assert_eq!(mean_in(&r, 1.0, 3.0, |r| r.sm_occupancy), None);
        assert_eq!(mean_in(&r, 4.0, 9.0, |r| r.sm_activity), None);
    }

    #[test]
    fn energy_in_a_window_interpolates_between_readings() {
        let pts = vec![(0.0, 0.0), (1.0, 1.0), (3.0, 5.0)];
        assert_eq!(energy_at(&pts, 2.0), Some(3.0));
        assert_eq!(energy_at(&pts, 4.0), None);
        let r: Vec<Reading> = pts
            .iter()
            .map(|&(t, e)| Reading {
                t,
                energy_j: Some(e),
                ..Reading::default()
            })
            .collect();
        let j = energy_in(&r, 0.5, 3.0).unwrap();
        assert!((j - 4.5).abs() < 1e-9);
        assert_eq!(energy_in(&r, 0.5, 4.0), None);
    }
    /// The rule as first written: every span looked at for every interval.
    fn split_naive(readings: &[(f64, u64)], spans: &[(f64, f64)]) -> Option<Split> {
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
            let clipped: Vec<(f64, f64)> =
                spans.iter().map(|&(s, e)| (s.max(t0), e.min(t1))).collect();
            let times: Vec<f64> = clipped.iter().map(|(a, b)| (b - a).max(0.0)).collect();
            let (shares, busy) = share(de, t1 - t0, union_len(clipped), &times);
            for (acc, s) in out.shares.iter_mut().zip(shares) {
                *acc += s;
            }
            out.runs_j += busy;
            out.idle_j += de - busy;
        }
        Some(out)
    }

    #[test]
    fn the_sweep_shares_as_every_span_for_every_interval_did() {
        // A small deterministic generator: spans and readings all over, overlapping,
        // empty, out of order; a counter that goes back once.
        let mut x = 12_345u64;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m
        };
        for _ in 0..50 {
            let spans: Vec<(f64, f64)> = (0..next(30))
                .map(|_| {
                    let s = next(1000) as f64 / 7.0;
                    (s, s + next(300) as f64 / 3.0 - 10.0)
                })
                .collect();
            let mut e = 0u64;
            let readings: Vec<(f64, u64)> = (0..next(60))
                .map(|_| {
                    e = if next(20) == 0 { e / 2 } else { e + next(5000) };
                    (next(1200) as f64 / 5.0, e)
                })
                .collect();
            assert_eq!(
                split(&readings, &spans),
                split_naive(&readings, &spans),
                "{spans:?} {readings:?}"
            );
        }
    }

    #[test]
    fn a_forged_mass_of_overlapping_spans_is_given_up_on_not_spun_on() {
        let spans = vec![(0.0, 1e9); 20_000];
        let readings: Vec<(f64, u64)> = (0..20_000u64).map(|i| (i as f64, i * 1000)).collect();
        let before = thread_cpu_s();
        assert_eq!(split(&readings, &spans), None);
        // Giving up after MAX_SPLIT_PAIRS (a tenth of the 800 million pairs) took 16 s of
        // processor time in a debug build; going through every pair, about 8 times that.
        let used = thread_cpu_s() - before;
        assert!(used < 60.0, "{used} s of processor time");
    }

    /// Processor time of this thread so far, seconds (user and system, in the kernel's
    /// clock ticks of 1/100 s, /proc's fixed USER_HZ): a bound on work done that a loaded
    /// machine does not move, as it moves wall time.
    fn thread_cpu_s() -> f64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The fields after the command's closing parenthesis; utime and stime are the
        // 14th and 15th of the line, the 12th and 13th after it.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|v| v.parse().unwrap())
            .collect();
        (f[0] + f[1]) as f64 / 100.0
    }
}
