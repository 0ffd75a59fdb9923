//! A small bench report with known figures, for the tests of this crate and of the
//! `colloc` command (feature `test-support`; never in a release build).

use super::{ConfigResult, Host, Measurement, Report, SCHEMA};

/// Measurement `seq` of round `round`: `aggregate` over a 5 s window, 1 GiB, energy
/// at 5 J per 100 units.
pub fn measurement(round: u32, seq: u32, aggregate: f64) -> Measurement {
    Measurement {
        round,
        seq,
        started_s: f64::from(seq) * 10.0,
        wall_s: 10.0,
        window: [1.0, 6.0],
        aggregate,
        se: Some(1.0),
        per_copy: vec![aggregate],
        peak_memory_bytes: Some(1 << 30),
        copy_peak_memory_bytes: vec![Some(1 << 30)],
        mps_server_bytes: None,
        energy_j: Some(aggregate * 5.0 * 0.01),
        sm_busy_percent: None,
        sm_busy_source: None,
        sm_occupancy_percent: None,
    }
}

/// A settled report of a solo cell measured twice (98 and 102) and two cells skipped
/// for memory.
pub fn report() -> Report {
    let mut solo = ConfigResult::new("solo", 1);
    solo.add(measurement(1, 1, 98.0), vec![]);
    solo.add(measurement(2, 3, 102.0), vec![]);
    solo.settle();
    solo.vs_solo = Some(1.0);
    Report {
        schema: SCHEMA,
        command: vec!["w".into()],
        reference_command: None,
        host: Host::default(),
        gpu: None,
        gpu_note: None,
        started_unix: 0.0,
        modes: vec!["mps".into()],
        counts: "auto".into(),
        repeat: 1,
        rounds: 1,
        duration_s: 1.0,
        warmup_s: 0.0,
        budget_s: None,
        min_gain: 1.1,
        metric: "m".into(),
        unit: "img/s".into(),
        solo: Some(100.0),
        solo_u: solo.aggregate_u,
        reference: None,
        reference_u: None,
        warmup_run: Some(measurement(0, 0, 80.0)),
        warmup_note: None,
        results: vec![
            solo,
            ConfigResult::skipped("mps", 7, "would not fit: a, b"),
            ConfigResult::skipped("mps", 8, "would not fit: a, b"),
        ],
        mps_limit: None,
        recommendation: None,
        notes: vec![],
        skipped: vec![],
        comparison: None,
        wall_s: 1.0,
    }
}
