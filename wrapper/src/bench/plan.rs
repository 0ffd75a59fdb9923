//! What `colloc bench` measures, in which order, and what fits its time budget. No I/O
//! here: every rule is unit-tested.
//!
//! - **Counts.** `--counts auto` walks [`AUTO_STEPS`] (2, 4, 7, 10, 14, …, then the
//!   mode's limit, or what the GPU's memory holds over the solo run's peak), starting
//!   where the solo run puts the answer ([`auto_plan`]: a workload keeping a seventh of
//!   the SMs busy starts at 7; read from GPM's SM activity on Hopper and later, else from
//!   utilization, [`colloc_results::bench::busy`]); up while each step raises the aggregate by more than the
//!   noise and by at least [`MIN_RISE`] ([`step_rises`]), then down while fewer copies
//!   stay as good. One copy is the solo run. MIG takes the counts of the GPU's largest
//!   equal layouts instead.
//! - **Order.** The search measures each count once; rounds 2 to R then measure again
//!   what could still change the answer ([`colloc_results::bench::answer::could_matter`]), every other
//!   round in reverse, so a drift that runs through the benchmark falls on every
//!   configuration alike ([`in_round_order`]); under MPS `mps:N` at the chosen N
//!   follows. The solo run opens the search and closes the benchmark.
//! - **Budget.** With `--budget`, a count is tried only when one measurement of it fits
//!   with the closing solo run kept (and, under MPS, one `mps:N`: [`kept_for_limit`]);
//!   repeats get what is left, each started only if it fits. Costs are estimated from
//!   what was measured so far, start-up included ([`Budget`]). Wide cells are measured
//!   again with what is left after that ([`colloc_results::bench::answer`]).

use colloc_results::bench::busy::{Busy, BusySource};
use colloc_results::bench::stats::{Obs, COVERAGE};

/// The steps of `--counts auto` before a mode's limit.
pub const AUTO_STEPS: [usize; 9] = [2, 4, 7, 10, 14, 20, 28, 40, 56];

/// Least rise of the aggregate worth more copies: a step of `--counts auto` must raise
/// it by this much (besides beating the noise) for the search to go on (the
/// recommendation's like line is [`colloc_results::bench::answer::AS_GOOD`]). More copies for less gain
/// slow every run down for little.
pub const MIN_RISE: f64 = 0.05;

/// Most clients one MPS server serves per GPU (Volta and later).
pub const MPS_MAX_CLIENTS: usize = 48;

/// The counts `--counts auto` tries up to `limit`: [`AUTO_STEPS`] below it, then the
/// limit itself.
pub fn auto_counts(limit: usize) -> Vec<usize> {
    let mut out: Vec<usize> = AUTO_STEPS.iter().copied().filter(|&n| n < limit).collect();
    if limit >= 2 {
        out.push(limit);
    }
    out
}

/// The MIG counts of `--counts auto`: the number of instances of each largest equal
/// layout (`mig:Xg` as many as fit), two or more, each count once, from
/// `(slices, instances)` of the GPU's layouts.
pub fn mig_auto_counts(layouts: &[(u32, usize)]) -> Vec<usize> {
    let mut sorted = layouts.to_vec();
    sorted.sort_by_key(|l| std::cmp::Reverse(l.0));
    let mut out: Vec<usize> = Vec::new();
    for (_, n) in sorted {
        if n >= 2 && !out.contains(&n) {
            out.push(n);
        }
    }
    out.sort_unstable();
    out
}

/// Where `--counts auto` starts and how far it may go ([`auto_plan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AutoPlan {
    /// Counts tried upwards from the start while the aggregate rises.
    pub up: Vec<usize>,
    /// Counts below the start, tried downwards while they stay as good as the best.
    pub down: Vec<usize>,
    /// Why the search starts where it does, for the report.
    pub why_start: String,
    /// Why the largest count is what it is, where memory bounds it.
    pub why_top: Option<String>,
}

/// `--counts auto` from what the solo run showed of the GPU: `busy`, the share of the
/// GPU one copy kept busy (SM activity, 0-1, and what it was read from), puts the first
/// count near `1 / busy` (a workload using a seventh of the GPU starts at 7); memory
/// (`per_copy` bytes of `total`) bounds the largest count; `limit` is the mode's own.
/// Without readings the search starts at the first step.
pub fn auto_plan(
    limit: usize,
    busy_read: Option<Busy>,
    per_copy: Option<u64>,
    total: Option<u64>,
) -> AutoPlan {
    let busy = busy_read.map(|b| b.share);
    let mem_cap = match (per_copy, total) {
        (Some(p), Some(t)) if p > 0 => Some(usize::try_from(t / p).unwrap_or(usize::MAX)),
        _ => None,
    };
    let top = mem_cap.map_or(limit, |m| m.min(limit));
    let why_top = mem_cap.filter(|&m| m < limit).map(|m| {
        format!(
            "the GPU's memory holds about {m} copies ({:.1} GiB each of {:.1} GiB)",
            per_copy.unwrap_or(0) as f64 / GIB,
            total.unwrap_or(0) as f64 / GIB
        )
    });
    let ladder = auto_counts(top);
    let target = busy
        .filter(|b| b.is_finite() && *b > 0.0)
        .map(|b| 1.0 / b.min(1.0));
    let start = match target {
        Some(t) if !ladder.is_empty() => ladder
            .iter()
            .enumerate()
            .min_by(|a, b| {
                let d = |n: usize| ((n as f64) / t).ln().abs();
                d(*a.1).total_cmp(&d(*b.1))
            })
            .map_or(0, |(i, _)| i),
        _ => 0,
    };
    // Named where GPM read it; utilization keeps the wording it always had.
    let source = busy_read
        .filter(|b| b.source == BusySource::Gpm)
        .map_or(String::new(), |b| {
            format!(
                " ({}{})",
                b.source.describe(),
                b.occupancy
                    .map_or(String::new(), |o| format!(", occupancy {o:.0} %"))
            )
        });
    let why_start = match (busy, ladder.get(start)) {
        (Some(b), Some(&n)) if b > 0.0 && b.is_finite() => format!(
            "the solo run kept the GPU's SMs {:.0} % busy{source}: about {:.0} cop{} would fill it, so the search starts at {n}",
            b * 100.0,
            (1.0 / b.min(1.0)).max(1.0),
            if (1.0 / b.min(1.0)).round() as usize == 1 { "y" } else { "ies" }
        ),
        (_, Some(&n)) => format!(
            "no reading of how busy the solo run kept the GPU: the search starts at {n}"
        ),
        _ => String::new(),
    };
    let mut down: Vec<usize> = ladder[..start].to_vec();
    down.reverse();
    AutoPlan {
        up: ladder[start..].to_vec(),
        down,
        why_start,
        why_top,
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// One step of `--counts auto`: how much the aggregate rose and whether to go on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Relative rise of the aggregate (0.1 = 10 %).
    pub rise: f64,
    /// Relative noise of that rise ([`COVERAGE`] standard errors of both measurements).
    pub noise: f64,
    /// Rose by more than the noise and by at least [`MIN_RISE`].
    pub go_on: bool,
}

/// Did the aggregate rise from `prev` to `cur` by more than the noise of both and by at
/// least [`MIN_RISE`]? Unknown noise counts as none.
pub fn step_rises(prev: Obs, cur: Obs) -> Step {
    if !(prev.value > 0.0 && cur.value.is_finite()) {
        return Step {
            rise: 0.0,
            noise: 0.0,
            go_on: false,
        };
    }
    let rel = |o: Obs| o.se.filter(|s| s.is_finite()).unwrap_or(0.0) / o.value.abs().max(1e-300);
    let rise = cur.value / prev.value - 1.0;
    let noise = COVERAGE * (rel(prev).powi(2) + rel(cur).powi(2)).sqrt();
    Step {
        rise,
        noise,
        go_on: rise > noise && rise >= MIN_RISE,
    }
}

/// Items of round `round` (1-based) in its order: as found in round 1 for odd rounds,
/// reversed for even ones.
pub fn in_round_order<T: Clone>(items: &[T], round: u32) -> Vec<T> {
    let mut v = items.to_vec();
    if round.is_multiple_of(2) {
        v.reverse();
    }
    v
}

/// Extra margin on an estimated cost: start-up time varies.
const MARGIN: f64 = 1.1;

/// The time budget and the costs seen so far.
#[derive(Debug, Clone)]
pub struct Budget {
    /// Seconds allowed in all (`None`: no budget).
    pub limit: Option<f64>,
    /// Wall seconds of each measurement so far: (copies, seconds, configuration key).
    seen: Vec<(usize, f64, String)>,
    /// The warm-up run's wall seconds, with its measured time made up to a full one.
    warmup: Option<f64>,
}

impl Budget {
    /// A budget of `limit` seconds.
    pub fn new(limit: Option<f64>) -> Budget {
        Budget {
            limit,
            seen: Vec::new(),
            warmup: None,
        }
    }

    /// The warm-up run took `wall` seconds and measured `short` seconds less than a
    /// configuration does.
    pub fn saw_warmup(&mut self, wall: f64, short: f64) {
        self.warmup = Some(wall + short.max(0.0));
    }

    /// A measurement of configuration `key` with `n` copies took `wall` seconds.
    pub fn saw(&mut self, key: &str, n: usize, wall: f64) {
        self.seen.push((n, wall, key.to_string()));
    }

    /// Estimated wall seconds of one measurement of `key` with `n` copies: its own last
    /// one where there was one; else the longest seen with at most `n` copies (more
    /// copies start no faster); the warm-up's only while nothing else was seen, since it
    /// carries the first start's costs (on a freshly started H200 machine the warm-up
    /// took 48.6 s and every later configuration 21-30 s: counting it cut a 370 s
    /// budget's search at 4 copies); with a margin.
    pub fn estimate(&self, key: &str, n: usize) -> f64 {
        let own = self.seen.iter().rev().find(|(_, _, k)| k == key);
        let base = match own {
            Some((_, w, _)) => *w,
            None => self
                .seen
                .iter()
                .filter(|(m, _, _)| *m <= n)
                .map(|(_, w, _)| *w)
                .reduce(f64::max)
                .or(self.warmup)
                .unwrap_or(0.0),
        };
        base * MARGIN
    }

    /// Does work of `cost` seconds, started at `now` (seconds since the benchmark
    /// began), fit with `reserve` seconds still owed after it?
    pub fn fits(&self, now: f64, cost: f64, reserve: f64) -> bool {
        self.limit.is_none_or(|l| now + cost + reserve <= l)
    }

    /// Seconds left at `now`.
    pub fn left(&self, now: f64) -> Option<f64> {
        self.limit.map(|l| (l - now).max(0.0))
    }
}

/// Seconds kept for `mps:N` (its measurement `key`, `n` copies, `repeat` times) while
/// `--counts auto` searches on under MPS: the configuration a user runs under
/// `--colloc=mps:N` is measured at the chosen N, so a further count is tried only where
/// it and `mps:N` both fit (the count about to be tried is the largest N it could be;
/// the search keeps one measurement's worth).
pub fn kept_for_limit(budget: &Budget, key: &str, n: usize, repeat: u32) -> f64 {
    budget.estimate(key, n) * f64::from(repeat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_counts_grow_to_the_limit() {
        assert_eq!(
            auto_counts(MPS_MAX_CLIENTS),
            [2, 4, 7, 10, 14, 20, 28, 40, 48]
        );
        assert_eq!(auto_counts(64), [2, 4, 7, 10, 14, 20, 28, 40, 56, 64]);
        assert_eq!(auto_counts(7), [2, 4, 7]);
        assert_eq!(auto_counts(3), [2, 3]);
        assert!(auto_counts(1).is_empty());
    }

    /// A workload that keeps a seventh of the SMs busy starts at 7, goes up from there
    /// and down below it; one that fills the GPU starts at the first step; memory for 12
    /// copies makes 12 the largest count, and the report says why each.
    fn util(share: f64) -> Option<Busy> {
        Some(Busy {
            share,
            source: BusySource::ProcessUtil,
            occupancy: None,
        })
    }

    /// Read from GPM the start is the same rule; the reason names GPM and the
    /// occupancy, where utilization's reason stays as it was.
    #[test]
    fn a_start_read_from_gpm_says_so() {
        let gpm = Busy {
            share: 0.14,
            source: BusySource::Gpm,
            occupancy: Some(9.4),
        };
        let p = auto_plan(MPS_MAX_CLIENTS, Some(gpm), None, None);
        assert_eq!(p.up[0], 7);
        assert_eq!(
            p.why_start,
            "the solo run kept the GPU's SMs 14 % busy (SM activity (GPM), occupancy 9 %): \
             about 7 copies would fill it, so the search starts at 7"
        );
        let no_occ = auto_plan(
            MPS_MAX_CLIENTS,
            Some(Busy {
                occupancy: None,
                ..gpm
            }),
            None,
            None,
        );
        assert!(
            no_occ
                .why_start
                .contains("busy (SM activity (GPM)): about 7"),
            "{}",
            no_occ.why_start
        );
        for source in [BusySource::ProcessUtil, BusySource::GpuUtil] {
            let u = auto_plan(MPS_MAX_CLIENTS, Some(Busy { source, ..gpm }), None, None);
            assert_eq!(
                u.why_start,
                "the solo run kept the GPU's SMs 14 % busy: about 7 copies would fill it, so the search starts at 7"
            );
        }
    }

    #[test]
    fn the_search_starts_where_the_solo_run_puts_the_answer() {
        let p = auto_plan(MPS_MAX_CLIENTS, util(1.0 / 7.0), None, None);
        assert_eq!(p.up, [7, 10, 14, 20, 28, 40, 48]);
        assert_eq!(p.down, [4, 2]);
        assert!(
            p.why_start.contains("14 % busy") && p.why_start.ends_with("starts at 7"),
            "{}",
            p.why_start
        );
        let full = auto_plan(MPS_MAX_CLIENTS, util(0.97), None, None);
        assert_eq!(full.up[0], 2);
        assert!(full.down.is_empty());
        let unknown = auto_plan(MPS_MAX_CLIENTS, None, None, None);
        assert_eq!(unknown.up, auto_counts(MPS_MAX_CLIENTS));
        assert!(
            unknown.why_start.starts_with("no reading"),
            "{}",
            unknown.why_start
        );
        // 6 GiB a copy on 80 GiB: 13 copies fit; a third busy: starts at 4 (nearest 3).
        let g = 1u64 << 30;
        let mem = auto_plan(MPS_MAX_CLIENTS, util(0.33), Some(6 * g), Some(80 * g));
        assert_eq!(
            (mem.up.clone(), mem.down.clone()),
            (vec![4, 7, 10, 13], vec![2])
        );
        let top = mem.why_top.unwrap();
        assert!(
            top.contains("about 13 copies (6.0 GiB each of 80.0 GiB)"),
            "{top}"
        );
        // Memory above the mode's limit: the mode's limit, no memory note.
        assert!(auto_plan(7, None, Some(g), Some(80 * g)).why_top.is_none());
    }

    #[test]
    fn mig_counts_are_the_largest_equal_layouts() {
        // H200: 7g x1, 4g x1, 3g x2, 2g x3, 1g x7
        assert_eq!(
            mig_auto_counts(&[(7, 1), (4, 1), (3, 2), (2, 3), (1, 7)]),
            [2, 3, 7]
        );
        // A30: 4g x1, 2g x2, 1g x4
        assert_eq!(mig_auto_counts(&[(4, 1), (2, 2), (1, 4)]), [2, 4]);
    }

    fn o(value: f64, se: f64) -> Obs {
        Obs {
            value,
            se: Some(se),
        }
    }

    #[test]
    fn a_step_must_beat_the_noise_and_the_least_rise() {
        let s = step_rises(o(100.0, 1.0), o(200.0, 2.0));
        assert!(s.go_on && (s.rise - 1.0).abs() < 1e-12, "{s:?}");
        // 4 % up with no noise: below the least rise.
        assert!(!step_rises(o(100.0, 0.0), o(104.0, 0.0)).go_on);
        // 8 % up, but 5 % noise on each: 2 x √(0.05² + 0.046²) ≈ 13.6 % > 8 %.
        let s = step_rises(o(100.0, 5.0), o(108.0, 5.0));
        assert!(!s.go_on && s.noise > 0.13, "{s:?}");
        // Falling never goes on; an unknown noise counts as none.
        assert!(!step_rises(o(100.0, 0.0), o(90.0, 0.0)).go_on);
        let bare = Obs {
            value: 100.0,
            se: None,
        };
        assert!(
            step_rises(
                bare,
                Obs {
                    value: 110.0,
                    se: None
                }
            )
            .go_on
        );
        assert!(!step_rises(o(0.0, 0.0), o(1.0, 0.0)).go_on);
    }

    #[test]
    fn even_rounds_run_backwards() {
        let v = ["a", "b", "c"];
        assert_eq!(in_round_order(&v, 1), ["a", "b", "c"]);
        assert_eq!(in_round_order(&v, 2), ["c", "b", "a"]);
        assert_eq!(in_round_order(&v, 3), ["a", "b", "c"]);
    }

    #[test]
    fn costs_come_from_what_was_seen() {
        let mut b = Budget::new(Some(100.0));
        assert_eq!(b.estimate("mps 2", 2), 0.0);
        b.saw_warmup(20.0, 5.0);
        assert!((b.estimate("mps 2", 2) - 25.0 * MARGIN).abs() < 1e-9);
        b.saw("solo 1", 1, 22.0);
        b.saw("mps 4", 4, 30.0);
        // mps 2: nothing with 2 copies yet; the most with at most 2 is solo's 22, and
        // the warm-up's 25 no longer counts once a measurement was seen.
        assert!((b.estimate("mps 2", 2) - 22.0 * MARGIN).abs() < 1e-9);
        assert!((b.estimate("mps 7", 7) - 30.0 * MARGIN).abs() < 1e-9);
        b.saw("mps 4", 4, 28.0);
        assert!((b.estimate("mps 4", 4) - 28.0 * MARGIN).abs() < 1e-9);
        assert!(b.fits(10.0, 50.0, 40.0));
        assert!(!b.fits(10.0, 50.0, 41.0));
        assert_eq!(b.left(120.0), Some(0.0));
        let none = Budget::new(None);
        assert!(none.fits(1e9, 1e9, 1e9) && none.left(5.0).is_none());
    }

    /// The H200 calls (`--budget 500s`, a cold machine, ~27-30 s a
    /// measurement): the search went on to 10 copies and left no room for mps:7. With
    /// room kept for mps:N, 10 copies are not tried and mps:7 fits.
    #[test]
    fn the_search_keeps_room_for_mps_at_the_chosen_n() {
        let mut b = Budget::new(Some(500.0));
        b.saw_warmup(50.0, 0.0);
        let seen = [
            ("solo 1", 1, 27.0),
            ("reference 1", 1, 30.0),
            ("mps 2", 2, 27.0),
            ("mps 4", 4, 27.0),
            ("mps 7", 7, 28.0),
        ];
        for (k, n, w) in seen {
            b.saw(k, n, w);
        }
        let now = 50.0 + 27.0 + 30.0 + 27.0 + 27.0 + 28.0;
        // Owed: the closing solo run and round 2 (solo, reference, 2, 4, 7 copies).
        let owed =
            b.estimate("solo 1", 1) + seen.iter().map(|(k, n, _)| b.estimate(k, *n)).sum::<f64>();
        let ten = 2.0 * b.estimate("mps 10", 10);
        assert!(
            b.fits(now, ten, owed),
            "without the room kept, 10 copies fit"
        );
        let kept = kept_for_limit(&b, "mps:10 10", 10, 2);
        assert!((kept - 2.0 * 30.0 * MARGIN).abs() < 1e-9, "{kept}");
        assert!(!b.fits(now, ten, owed + kept));
        // Stopped at 7: mps:7 with its repeat fits.
        let seven = 2.0 * b.estimate("mps:7 7", 7);
        assert!(b.fits(now, seven, owed), "{seven} {owed}");
        // Where 10 copies were tried anyway, mps:7 would not have.
        assert!(!b.fits(now + ten, seven, owed + ten / 2.0));
    }

    /// The H200 call that cut the search: a cold warm-up of 48.6 s, then solo,
    /// reference, 2 and 4 copies at 22-30 s each, 147 s in; 370 s budget. 7 copies (and
    /// their repeat) fit with what is owed, as they would have in the 21-24 s they took
    /// on the next call.
    #[test]
    fn a_cold_warm_up_does_not_price_every_configuration() {
        let mut b = Budget::new(Some(370.0));
        b.saw_warmup(48.6, 0.0);
        for (k, n, w) in [
            ("solo 1", 1, 22.3),
            ("reference 1", 1, 30.1),
            ("mps 2", 2, 22.9),
            ("mps 4", 4, 23.2),
        ] {
            b.saw(k, n, w);
        }
        let seven = b.estimate("mps 7", 7);
        assert!((seven - 30.1 * MARGIN).abs() < 1e-9, "{seven}");
        let owed: f64 = ["solo 1", "reference 1", "mps 2", "mps 4"]
            .iter()
            .map(|k| b.estimate(k, 1))
            .sum::<f64>()
            + b.estimate("solo 1", 1);
        assert!(
            b.fits(147.0, 2.0 * seven, owed),
            "7 x2: {} owed {owed}",
            2.0 * seven
        );
        // The old rule (warm-up as a floor: 48.6 x 1.1 = 53.5 s a measurement) did not.
        assert!(!b.fits(147.0, 2.0 * 48.6 * MARGIN, owed));
    }
}
