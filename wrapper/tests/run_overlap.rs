//! A slot's next run starts while its current one ends, so that the next run's start-up
//! overlaps the current run's last seconds (issue 39): with a stand-in whose start-up,
//! length and throughput are known (`rate.py`: STARTUP s of silence, then DURATION s of
//! `img/s=... progress=F` lines; the "GPU" is saturated by two: each of n copies past
//! start-up gets 100, 100, 66.7, 50 img/s for n = 1..4, so the aggregate is at most 200).

mod run_support;

use run_support::{fixture, Env};
use serde_json::Value;

/// Four runs of 1.5 s start-up and 5 s of work on two slots (no GPU), with or without
/// `--no-overlap`; the report.
fn two_waves(extra: &[&str]) -> (Value, String) {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ RATE_DIR = '{}', BASE = '100', FACTORS = '1,1,0.66667,0.5', STARTUP = '1.5', DURATION = '5', PROGRESS = '1' }}\n\
         [[sweep]]\nname = 'r{{k}}'\ncommand = ['python3', '{rate}', '{{k}}']\ngrid = {{ k = [1, 2, 3, 4] }}\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args(["-j", "2"])
        .args(extra)
        .arg("-f")
        .arg(&m)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (env.report(), format!("{stdout}\n{stderr}"))
}

/// Each attempt as (slot, start s, end s, run name).
fn spans(rep: &Value) -> Vec<(u64, f64, f64, String)> {
    let mut v = Vec::new();
    for r in rep["runs"].as_array().unwrap() {
        for a in r["attempts"].as_array().unwrap() {
            v.push((
                a["slot"].as_u64().unwrap(),
                a["start_s"].as_f64().unwrap(),
                a["end_s"].as_f64().unwrap(),
                r["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}

/// How long each second-wave attempt started before the first-wave attempt on its slot
/// ended (negative: after).
fn leads(rep: &Value) -> Vec<f64> {
    let s = spans(rep);
    let mut out = Vec::new();
    for later in &s[2..] {
        let before = s
            .iter()
            .filter(|e| e.0 == later.0 && e.1 < later.1)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("an attempt before it on its slot");
        out.push(before.2 - later.1);
    }
    out
}

/// The first wave's start-ups as the report records them (from each attempt's start to
/// its first throughput line): what colloc learnt before it started the second wave.
fn first_wave_startups(rep: &Value) -> Vec<f64> {
    let first: Vec<String> = spans(rep)[..2].iter().map(|e| e.3.clone()).collect();
    rep["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| first.iter().any(|n| r["name"] == n.as_str()))
        .map(|r| r["attempts"][0]["startup_s"].as_f64().unwrap())
        .collect()
}

#[test]
fn a_slots_next_run_starts_over_the_end_of_the_one_before() {
    let (rep, out) = two_waves(&[]);
    let s = &rep["summary"];
    assert_eq!(s["succeeded"], 4, "{out}");
    // The second wave learnt the start-up from the first (the stand-in's 1.5 s of silence,
    // plus Python's own start, which a loaded machine stretches: 2.8 s seen in CI) and
    // started when the first wave's progress said it had about that long left. So each
    // lead is the learnt start-up (the median of the first wave's), give or take the
    // progress lines' spacing and the scheduler's tick.
    let startups = first_wave_startups(&rep);
    assert!(
        startups.iter().all(|&t| t >= 1.5),
        "a start-up shorter than the stand-in's 1.5 s of silence: {startups:?}\n{out}"
    );
    let learnt = (startups[0] + startups[1]) / 2.0;
    let leads = leads(&rep);
    for l in &leads {
        assert!(
            *l >= 0.5 && (l - learnt).abs() <= 1.0,
            "a second-wave run started {l:.2} s before the end of the run before it on its slot \
             (expected about the {learnt:.2} s start-up the first wave showed)\n{:?}\n{out}",
            spans(&rep)
        );
    }
    // The record says which started early: the second wave, never a first-wave run.
    assert_eq!(s["early_starts"], 2, "{out}");
    for r in rep["runs"].as_array().unwrap() {
        let a = &r["attempts"][0];
        let second_wave = spans(&rep)[2..]
            .iter()
            .any(|e| e.3 == r["name"].as_str().unwrap());
        assert_eq!(
            a["started_early"].as_bool().unwrap_or(false),
            second_wave,
            "{r}"
        );
    }
    assert!(
        out.contains("2 started early over the end of the one before"),
        "{out}"
    );
    // The makespan is the span from the first start to the last end, and shorter than
    // the same attempts one after another on their slots would take.
    let steady = s["steady_throughput"].as_f64().unwrap();
    let over = s["aggregate_throughput"].as_f64().unwrap();
    let makespan = s["makespan_s"].as_f64().unwrap();
    let sp = spans(&rep);
    let first = sp.iter().map(|e| e.1).fold(f64::INFINITY, f64::min);
    let last = sp.iter().map(|e| e.2).fold(0.0, f64::max);
    assert!(
        (makespan - (last - first)).abs() < 0.05,
        "makespan {makespan:.2} s, attempts from {first:.2} to {last:.2} s\n{sp:?}\n{out}"
    );
    let serial = (0..2)
        .map(|slot| {
            sp.iter()
                .filter(|e| e.0 == slot)
                .map(|e| e.2 - e.1)
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    assert!(
        makespan < serial - 0.5,
        "makespan {makespan:.2} s, not shorter than its slots' attempts one after another ({serial:.2} s)\n{sp:?}\n{out}"
    );
    let share = format!("work over makespan {:.2} of steady", over / steady);
    assert!(out.contains(&share), "{share}\n{out}");
    assert!(
        steady < 205.0,
        "the stand-in's GPU gives at most 200: {steady}\n{out}"
    );
}

#[test]
fn no_overlap_starts_each_run_after_the_one_before() {
    let (rep, out) = two_waves(&["--no-overlap"]);
    for l in leads(&rep) {
        assert!(
            l <= 0.0,
            "a run started {l:.2} s before the one before it ended\n{out}"
        );
    }
    let s = &rep["summary"];
    assert_eq!(s["max_concurrent"], 2, "{out}");
    assert!(s.get("early_starts").is_none(), "{out}");
    let makespan = s["makespan_s"].as_f64().unwrap();
    assert!(makespan >= 13.0, "makespan {makespan:.2} s\n{out}");
}
