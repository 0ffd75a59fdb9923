//! Tests of bench/report.rs (results, recommendation text, CSV forms).

use super::sample::report;
use super::text::below;
use super::*;
use crate::bench::answer::{Candidate, Verdict};

#[test]
fn settle_gives_the_spread_means_and_energy_per_unit() {
    let r = report();
    let solo = &r.results[0];
    assert_eq!(solo.repeats, 2);
    assert_eq!(solo.aggregate, Some(100.0));
    assert_eq!(
        (solo.aggregate_min, solo.aggregate_max),
        (Some(98.0), Some(102.0))
    );
    assert!((solo.aggregate_u.unwrap() - 4.0).abs() < 1e-9, "{solo:?}");
    assert_eq!(solo.per_copy, vec![100.0]);
    assert!((solo.energy_per_sample_j.unwrap() - 0.01).abs() < 1e-12);
    assert_eq!(solo.wall_s, 20.0);
}

#[test]
fn table_shows_spread_time_warm_up_and_reasons() {
    let t = table(&report());
    assert!(t.contains("100.0 ± 4.0"), "{t}");
    assert!(t.contains("1.00x") && t.contains("20 s"), "{t}");
    assert!(t.contains("warm-up") && t.contains("discarded"), "{t}");
    assert!(t.contains("skipped: would not fit: a, b"), "{t}");
    assert_eq!(t.matches("would not fit").count(), 1, "{t}");
    assert!(t.contains("skipped (as above)"), "{t}");
    // Only solo measured: no verdict, and the table says why.
    assert!(
        t.contains("recommendation: none: no collocated configuration was measured"),
        "{t}"
    );
    assert!(!t.contains("does not pay"), "{t}");
    assert!(
        t.contains("solo: 100.0 ± 4.0 img/s over 2 run(s); min 98.0, max 102.0: 4.0 % apart"),
        "{t}"
    );
}

#[test]
fn csvs_carry_the_schema_spread_and_every_measurement() {
    let r = report();
    let c = String::from_utf8(csv(&r).unwrap()).unwrap();
    assert_eq!(c.lines().count(), 4);
    assert!(c
        .lines()
        .next()
        .unwrap()
        .contains("aggregate_u,aggregate_sd"));
    assert!(
        c.lines()
            .nth(1)
            .unwrap()
            .starts_with("3,solo,1,measured,2,100.000000,4.000000"),
        "{c}"
    );
    assert!(
        c.lines()
            .nth(2)
            .unwrap()
            .ends_with("\"would not fit: a, b\""),
        "{c}"
    );
    let m = String::from_utf8(measurements_csv(&r).unwrap()).unwrap();
    let rows: Vec<&str> = m.lines().collect();
    assert_eq!(rows.len(), 4, "{m}");
    assert!(rows[1].starts_with("3,warm-up,1,0,0,"), "{m}");
    assert!(rows[3].starts_with("3,solo,1,2,3,"), "{m}");
}

fn cand(mode: &str, n: usize, values: &[f64], se: f64) -> Candidate {
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
        wide: None,
    }
}

#[test]
fn does_not_pay_never_prints_the_threshold_itself() {
    // Measured on the H200: ResNet-152 b128, 2 copies under MPS, 1.0970x solo.
    let solo = cand("solo", 1, &[1000.75], 0.0);
    let two = cand("mps", 2, &[1097.8], 0.0);
    let r = crate::bench::answer::recommend(&solo.aggregate, &[two], 1.1).unwrap();
    assert_eq!(r.verdict, Verdict::BelowMinGain);
    let t = recommendation_text(&r, 1.1, "img/s", None, false);
    assert!(t.contains("gives only 1.097x solo (< 1.10x)"), "{t}");
    assert_eq!(below(1.0999999, 1.1), "1.0999999");
    assert_eq!(below(0.9, 1.1), "0.90");
    let _ = Ratio {
        value: 1.0,
        u: None,
    };
}

/// The H200 call: the answer leads with the fraction of the reference, the
/// ratio to solo second and flagged where solo moves with the host; the wide mps 4
/// gets a line that says why the answer does not rest on it.
#[test]
fn the_answer_leads_with_the_fraction_of_the_reference_and_names_wide_cells() {
    use crate::bench::answer::{recommend, wide_cells};
    let solo = cand("solo", 1, &[13_315.0, 15_681.0, 14_498.0], 500.0);
    let mut all = vec![
        cand("mps", 4, &[49_710.0, 63_145.0], 300.0),
        cand("mps", 7, &[69_222.0, 69_714.0], 100.0),
        cand("mps", 10, &[65_400.0, 65_720.0], 100.0),
    ];
    let sp: Vec<Spread> = all.iter().map(|c| c.aggregate).collect();
    for (c, w) in all.iter_mut().zip(wide_cells(&sp)) {
        c.wide = w;
    }
    let r = recommend(&solo.aggregate, &all, 1.1).unwrap();
    let t = recommendation_text(&r, 1.1, "img/s", Some((0.722, Some(0.006))), true);
    assert!(
        t.starts_with(
            "recommendation: run 7 copies under mps: 0.72 ± 0.01 of the reference, 4.79x ± "
        ),
        "{t}"
    );
    assert!(
        t.contains(" solo (69468.0 ± 492.0 img/s; solo moves with the host: see its note)"),
        "{t}"
    );
    assert!(t.contains("margin: its low end"), "{t}");
    let w = wide_text(&r.wide[0], &r, "img/s");
    assert!(
        w.starts_with("wide: mps 4 stayed wide after 2 runs (49710.0 to 63145.0 img/s: ± 23.8 % between its repeats, beyond max(2 x the other cells' median ± 0.6 %, 3 %))"),
        "{w}"
    );
    // Its high end (69,862.5) reaches the best: judged by its low end.
    assert!(
        w.ends_with("judged by the low end of its interval (42992.5), not its mean (56427.5), so its noise could not pull the answer its way; more --repeat or a longer --duration may settle it"),
        "{w}"
    );
    // Without a reference: the ratio to solo leads, as before.
    let t = recommendation_text(&r, 1.1, "img/s", None, false);
    assert!(
        t.starts_with("recommendation: run 7 copies under mps: 4.79x ± "),
        "{t}"
    );
}
