use super::*;
use crate::export::files::Source;
use crate::record::model::Report;
use crate::record::Best;

fn id(name: &str, cmd: &str) -> RunIdentity {
    RunIdentity {
        name: name.into(),
        command: vec![cmd.into()],
        env: vec![],
        workdir: None,
        grid: None,
        metrics: vec![("loss".into(), Best::Min)],
        metric: None,
        gpu_memory_mib: None,
    }
}

fn session(n: u32, ts: f64, runs: Vec<RunIdentity>) -> Event {
    Event::Session {
        ts,
        version: 1,
        session: n,
        colloc_version: "t".into(),
        host: "h".into(),
        pid: 1,
        job_id: None,
        restart_count: None,
        mode: "naive".into(),
        source: "plain".into(),
        steps: false,
        slots: vec![],
        interval_s: 1.0,
        runs,
    }
}

fn start(run: &str, attempt: u32, session: u32, ts: f64) -> Event {
    Event::Start {
        ts,
        run: run.into(),
        kind: Kind::Run,
        attempt,
        session,
        slot: 0,
        device: None,
        node: None,
        log: format!("logs/{run}.log"),
        early: false,
    }
}

/// Samples every second from `from` to `to` at `rate`, as a progress body.
fn samples(from: f64, to: f64, rate: f64) -> Progress {
    let mut stats = Stats::default();
    let mut s = Vec::new();
    let mut t = from;
    while t <= to + 1e-9 {
        stats.push(t, rate);
        s.push((t, rate));
        t += 1.0;
    }
    Progress {
        unit: Some("img/s".into()),
        samples: s,
        stats,
        ..Progress::default()
    }
}

fn end(run: &str, attempt: u32, ts: f64, state: State, p: Progress) -> Event {
    Event::End {
        ts,
        run: run.into(),
        kind: Kind::Run,
        attempt,
        state,
        exit_code: Some(if state == State::Succeeded { 0 } else { 1 }),
        signal: None,
        error: None,
        pid: None,
        escaped: vec![],
        gpu: None,
        step: None,
        progress: p,
    }
}

fn solo(key: &str, v: f64) -> Event {
    Event::Solo {
        ts: 0.0,
        key: key.into(),
        run: "x".into(),
        throughput: v,
        unit: "img/s".into(),
        source: "test".into(),
    }
}

#[test]
fn runs_across_nodes_energy_nodes_and_failed_steps() {
    use crate::telemetry::GpuId;
    let mut f = Fold::new();
    let (a, b) = (id("a", "x"), id("b", "y"));
    let mut s = session(1, 0.0, vec![a, b]);
    if let Event::Session { steps, slots, .. } = &mut s {
        *steps = true;
        *slots = (0..4)
            .map(|i| SlotRecord {
                index: i,
                device: Some(format!("MIG-{i}")),
                node: Some(if i < 2 { "n1" } else { "n2" }.into()),
                memory_mib: None,
            })
            .collect();
    }
    f.apply(s);
    let gpu = GpuId {
        index: 0,
        uuid: "GPU-n2".into(),
        name: "A100".into(),
    };
    let on = |run: &str, attempt: u32, slot: usize, node: &str, ts: f64| Event::Start {
        ts,
        run: run.into(),
        kind: Kind::Run,
        attempt,
        session: 1,
        slot,
        device: Some(format!("MIG-{slot}")),
        node: Some(node.into()),
        log: format!("logs/{run}.log"),
        early: false,
    };
    // a's first attempt on n1: its step failed (the node went away).
    f.apply(on("a", 1, 0, "n1", 0.0));
    let mut e = end("a", 1, 2.0, State::Failed, Progress::default());
    if let Event::End { step, .. } = &mut e {
        *step = Some(Box::new(StepInfo {
            id: Some("7.1".into()),
            dispatch_s: Some(0.2),
            failed: Some("srun: error: Node failure on n1".into()),
            ..StepInfo::default()
        }));
    }
    f.apply(e);
    f.apply(Event::NodeOut {
        ts: 2.0,
        node: "n1".into(),
        reason: "it left the job".into(),
    });
    // a again and b, side by side on n2's one GPU, 10..20 and 10..30; the two steps
    // read the GPU's counter: 100 W all along (100,000 mJ a second).
    let reading = |t: f64| (t, (t * 100_000.0) as u64, Some(50), Some(1 << 30));
    for (run, att, slot, from, to, disp) in
        [("a", 2, 2, 10.0, 20.0, 0.1), ("b", 1, 3, 10.0, 30.0, 0.3)]
    {
        f.apply(on(run, att, slot, "n2", from));
        let mut e = end(run, att, to, State::Succeeded, Progress::default());
        if let Event::End { step, gpu: g, .. } = &mut e {
            *g = Some(AttemptGpu::default());
            *step = Some(Box::new(StepInfo {
                id: Some(format!("7.{slot}")),
                dispatch_s: Some(disp),
                failed: None,
                span: Some((from, to)),
                gpu: Some(gpu.clone()),
                readings: (from as i64..=to as i64)
                    .map(|t| reading(t as f64))
                    .collect(),
            }));
        }
        f.apply(e);
    }
    let r = report_of(&f, 40.0, None);
    // 10..20 shared by two runs (500 J each), 20..30 b alone (1 kJ).
    let ea = r.runs[0].gpu.as_ref().unwrap().energy_j.unwrap();
    let eb = r.runs[1].gpu.as_ref().unwrap().energy_j.unwrap();
    assert!((ea - 500.0).abs() < 1e-6, "{ea}");
    assert!((eb - 1500.0).abs() < 1e-6, "{eb}");
    let g = &r.gpus.as_ref().unwrap()[0];
    assert_eq!(g.id.uuid, "GPU-n2");
    assert!((g.energy_j.unwrap() - 2000.0).abs() < 1e-6);
    assert_eq!(g.mean_util_percent, Some(50.0));
    assert_eq!(g.peak_used_bytes, Some(1 << 30));
    assert!((g.idle_energy_j.unwrap()).abs() < 1e-6);
    assert_eq!(r.runs[0].node.as_deref(), Some("n2"));
    assert_eq!(r.runs[0].attempts.len(), 2);
    assert_eq!(r.summary.step_failures, 1);
    // Median of 0.2, 0.1, 0.3.
    assert_eq!(r.summary.median_dispatch_s, Some(0.2));
    assert_eq!(r.nodes.len(), 2);
    let (n1, n2) = (&r.nodes[0], &r.nodes[1]);
    assert_eq!((n1.name.as_str(), n1.slots.clone()), ("n1", vec![0, 1]));
    assert_eq!((n1.attempts, n1.succeeded, n1.step_failures), (1, 0, 1));
    assert_eq!(n1.out.as_deref(), Some("it left the job"));
    assert_eq!(n1.out_s, Some(2.0));
    assert_eq!((n2.attempts, n2.succeeded, n2.out.clone()), (2, 2, None));
    let t = crate::export::runs::table(&r);
    assert!(
        t.contains("node n1: 2 slots, 1 attempts (0 succeeded, 1 steps failed); given no more runs after 2 s: it left the job"),
        "{t}"
    );
    assert!(
        t.contains("node n2: 2 slots, 2 attempts (2 succeeded)"),
        "{t}"
    );
    assert!(t.contains("1 step(s) failed (not their runs)"), "{t}");
    assert!(t.contains("median start of a run's step: 0.20 s"), "{t}");
    let csv = String::from_utf8(crate::export::runs::csv(&r).unwrap()).unwrap();
    assert!(
        csv.lines().next().unwrap().contains(",slot,device,node,"),
        "{csv}"
    );
    assert!(csv.contains(",2,MIG-2,n2,"), "{csv}");
}

#[test]
fn single_sample_runs_add_no_work_and_retries_count_in_time() {
    let mut f = Fold::new();
    let (a, b) = (id("a", "x"), id("b", "y"));
    f.apply(session(1, 100.0, vec![a.clone(), b.clone()]));
    // a: OOM at once (one sample of 11,000), then a retry 1..11 s at 100/s
    f.apply(start("a", 1, 1, 100.0));
    let mut one = samples(100.5, 100.5, 11_000.0);
    one.oom = true;
    f.apply(end("a", 1, 100.7, State::Failed, one));
    f.apply(start("a", 2, 1, 101.0));
    f.apply(end(
        "a",
        2,
        111.0,
        State::Succeeded,
        samples(101.0, 111.0, 100.0),
    ));
    // b: never started
    let r = report_of(&f, 200.0, None);
    let ra = &r.runs[0];
    assert_eq!(ra.attempts.len(), 2);
    assert!(ra.oom);
    assert!((ra.wall_s.unwrap() - 10.7).abs() < 1e-9, "{:?}", ra.wall_s);
    assert_eq!(r.summary.makespan_s, 11.0);
    // 1,000 images over 11 s; the single sample of 11,000/s adds nothing
    let agg = r.summary.aggregate_throughput.unwrap();
    assert!((agg - 1000.0 / 11.0).abs() < 1e-9, "{agg}");
    assert_eq!(r.runs[1].state, State::NotStarted);
    assert_eq!(r.summary.oom_attempts, 1);
    assert_eq!(r.summary.attempts, 2);
}

#[test]
fn speedup_uses_each_runs_own_solo_figure_and_says_what_it_covers() {
    let mut f = Fold::new();
    let (a, b, c) = (id("a", "bs32"), id("b", "bs64"), id("c", "bs128"));
    f.apply(session(1, 0.0, vec![a.clone(), b.clone(), c.clone()]));
    for (n, rate) in [("a", 60.0), ("b", 30.0), ("c", 10.0)] {
        f.apply(start(n, 1, 1, 0.0));
        f.apply(end(n, 1, 10.0, State::Succeeded, samples(0.0, 10.0, rate)));
    }
    // alone a does 100/s, b 50/s; c has no solo figure
    f.apply(solo(&a.solo_key(), 100.0));
    f.apply(solo(&b.solo_key(), 50.0));
    let r = report_of(&f, 20.0, None);
    assert_eq!(r.runs[0].solo_throughput, Some(100.0));
    assert_eq!(r.runs[1].solo_throughput, Some(50.0));
    assert_eq!(r.runs[2].solo_throughput, None);
    let s = &r.summary;
    // a: 600 images at 100/s = 6 s; b: 300 at 50/s = 6 s; over a 10 s makespan
    assert_eq!(s.sequential_s, Some(12.0));
    assert!((s.speedup.unwrap() - 1.2).abs() < 1e-9);
    assert_eq!((s.speedup_runs, s.speedup_of), (Some(2), Some(3)));
}

/// A run faster packed than its solo figure is named in the summary, by every way of
/// making the report (the fold given up names it too).
#[test]
fn a_run_faster_packed_than_alone_is_named() {
    let mut f = Fold::new();
    let (a, b) = (id("a", "bs32"), id("b", "bs64"));
    f.apply(session(1, 0.0, vec![a.clone(), b.clone()]));
    for (n, rate) in [("a", 60.0), ("b", 30.0)] {
        f.apply(start(n, 1, 1, 0.0));
        f.apply(end(n, 1, 10.0, State::Succeeded, samples(0.0, 10.0, rate)));
    }
    f.apply(solo(&a.solo_key(), 40.0));
    f.apply(solo(&b.solo_key(), 50.0));
    let r = report_of(&f, 20.0, None);
    let named: Vec<(&str, f64, f64)> = r
        .summary
        .faster_than_solo
        .iter()
        .map(|x| (x.run.as_str(), x.throughput, x.solo))
        .collect();
    assert_eq!(named, [("a", 60.0, 40.0)]);
}

/// `f`'s report at `now`, made three ways that must agree: from the fold kept
/// ([`Fold::report`]), from the fold given up ([`Fold::into_report`]), and written as its
/// runs are made ([`Fold::streamed`]).
fn report_of(f: &Fold, now: f64, live: Option<u32>) -> Report {
    let r = f.report(now, live);
    assert_eq!(f.clone().into_report(now, live), r, "into_report differs");
    // And its files written as the runs are made ([`Fold::streamed`]): the same bytes.
    let streamed = f.streamed(now, live);
    for file in crate::export::files::RUN_FILES {
        let (mut whole, mut made) = (Vec::new(), Vec::new());
        (file.render)(Source::Whole(&r), &mut whole).unwrap();
        (file.render)(Source::Streamed(&streamed), &mut made).unwrap();
        assert_eq!(
            String::from_utf8(made).unwrap(),
            String::from_utf8(whole).unwrap(),
            "{}",
            file.name
        );
    }
    r
}

/// [`Fold::state_counts`] (the status line's) says what the report's summary says.
fn assert_counts_as_the_summary(f: &Fold, now: f64, live: Option<u32>) {
    let s = report_of(f, now, live).summary;
    let c = f.state_counts(live);
    assert_eq!(
        [
            c.runs,
            c.succeeded,
            c.failed,
            c.timed_out,
            c.interrupted,
            c.not_started,
            c.running
        ],
        [
            s.runs,
            s.succeeded,
            s.failed,
            s.timed_out,
            s.interrupted,
            s.not_started,
            s.running
        ]
    );
}

#[test]
fn an_attempt_without_an_end_is_running_or_interrupted() {
    let mut f = Fold::new();
    f.apply(session(1, 0.0, vec![id("a", "x")]));
    f.apply(start("a", 1, 1, 1.0));
    f.apply(Event::Progress {
        ts: 5.0,
        run: "a".into(),
        kind: Kind::Run,
        attempt: 1,
        progress: samples(2.0, 5.0, 10.0),
    });
    let live = report_of(&f, 6.0, Some(1));
    assert_eq!(live.runs[0].state, State::Running);
    assert_counts_as_the_summary(&f, 6.0, Some(1));
    assert_counts_as_the_summary(&f, 60.0, None);
    assert!(live.running);
    let dead = report_of(&f, 60.0, None);
    assert_eq!(dead.runs[0].state, State::Interrupted);
    assert!(dead.runs[0].attempts[0]
        .error
        .as_deref()
        .unwrap()
        .contains("killed"));
    assert_eq!(dead.runs[0].wall_s, Some(4.0));
    assert!((dead.runs[0].throughput.as_ref().unwrap().work - 30.0).abs() < 1e-9);
}

#[test]
fn sessions_add_up_and_later_attempts_keep_the_earlier() {
    let mut f = Fold::new();
    f.apply(session(1, 0.0, vec![id("a", "x"), id("b", "x")]));
    f.apply(start("a", 1, 1, 0.0));
    f.apply(end(
        "a",
        1,
        10.0,
        State::Succeeded,
        samples(0.0, 10.0, 10.0),
    ));
    f.apply(start("b", 1, 1, 0.0));
    // colloc killed at 5 s; the job is requeued and resumes an hour later
    f.apply(session(2, 3600.0, vec![id("a", "x"), id("b", "x")]));
    f.apply(start("b", 2, 2, 3600.0));
    f.apply(end(
        "b",
        2,
        3608.0,
        State::Succeeded,
        samples(3600.0, 3608.0, 10.0),
    ));
    let r = report_of(&f, 4000.0, None);
    assert_eq!(r.sessions.len(), 2);
    let b = &r.runs[1];
    assert_eq!(b.attempts.len(), 2);
    assert_eq!(b.attempts[0].state, State::Interrupted);
    assert_eq!(b.state, State::Succeeded);
    // the hour in the queue is not makespan
    assert_eq!(r.summary.makespan_s, 10.0 + 8.0);
    assert_eq!(f.attempts_of("b"), (2, true));
}

#[test]
fn a_resumed_pack_has_each_sessions_span_and_figures_and_the_summary_over_all() {
    // Sessions of one slot (the steady aggregate is while every slot produces).
    let session = |n: u32, ts: f64, runs: Vec<RunIdentity>| {
        let mut ev = session(n, ts, runs);
        if let Event::Session { slots, .. } = &mut ev {
            slots.push(crate::record::events::SlotRecord {
                index: 0,
                device: None,
                node: None,
                memory_mib: None,
            });
        }
        ev
    };
    let mut f = Fold::new();
    f.apply(session(1, 100.0, vec![id("a", "x"), id("b", "x")]));
    f.apply(start("a", 1, 1, 100.0));
    f.apply(end(
        "a",
        1,
        110.0,
        State::Succeeded,
        samples(100.0, 110.0, 10.0),
    ));
    // requeued: back two hours later, b at twice the rate
    f.apply(session(2, 7300.0, vec![id("a", "x"), id("b", "x")]));
    f.apply(start("b", 1, 2, 7300.0));
    f.apply(end(
        "b",
        1,
        7308.0,
        State::Succeeded,
        samples(7300.0, 7308.0, 20.0),
    ));
    let r = report_of(&f, 8000.0, None);
    let (s1, s2) = (&r.sessions[0], &r.sessions[1]);
    assert_eq!((s1.start_s, s1.end_s), (Some(0.0), Some(10.0)));
    assert_eq!((s2.start_s, s2.end_s), (Some(7200.0), Some(7208.0)));
    assert_eq!((s1.makespan_s, s2.makespan_s), (10.0, 8.0));
    let work = |run: usize| r.runs[run].throughput.as_ref().unwrap().work;
    let (wa, wb) = (work(0), work(1));
    assert!(wa > 0.0 && wb > 0.0);
    let close = |x: Option<f64>, want: f64| (x.unwrap() - want).abs() < 1e-9;
    assert!(close(s1.aggregate_throughput, wa / 10.0), "{s1:?}");
    assert!(close(s2.aggregate_throughput, wb / 8.0), "{s2:?}");
    assert!(close(r.summary.aggregate_throughput, (wa + wb) / 18.0));
    // One run alone at a steady rate: each session's steady figure is its rate.
    assert!(close(s1.steady_throughput, 10.0), "{s1:?}");
    assert!(close(s2.steady_throughput, 20.0), "{s2:?}");
    // One session: nothing the summary does not already say.
    let mut g = Fold::new();
    g.apply(session(1, 100.0, vec![id("a", "x")]));
    g.apply(start("a", 1, 1, 100.0));
    g.apply(end(
        "a",
        1,
        110.0,
        State::Succeeded,
        samples(100.0, 110.0, 10.0),
    ));
    let s = &g.report(200.0, None).sessions[0];
    assert_eq!(
        (s.start_s, s.aggregate_throughput, s.steady_throughput),
        (None, None, None)
    );
}

#[test]
fn user_metrics_keep_the_last_value_and_the_best() {
    let mut f = Fold::new();
    f.apply(session(1, 0.0, vec![id("a", "x")]));
    f.apply(start("a", 1, 1, 0.0));
    let mut p = Progress::default();
    p.metrics.insert(
        "loss".into(),
        MetricValue {
            last: Some(0.5),
            best: Some(0.2),
            count: 3,
        },
    );
    f.apply(end("a", 1, 1.0, State::Failed, p));
    f.apply(start("a", 2, 1, 2.0));
    let mut p = Progress::default();
    p.metrics.insert(
        "loss".into(),
        MetricValue {
            last: Some(0.3),
            best: Some(0.3),
            count: 1,
        },
    );
    f.apply(end("a", 2, 3.0, State::Succeeded, p));
    let m = &report_of(&f, 4.0, None).runs[0].metrics["loss"];
    assert_eq!((m.last, m.best, m.count), (Some(0.3), Some(0.2), 4));
}

/// A resume of an edited manifest: an unchanged run that succeeded stays done, a changed
/// one runs again and its earlier attempt keeps the definition it ran, a removed one is
/// kept (marked, last, out of the counts), a new one is listed in manifest order.
#[test]
fn an_edited_manifest_keeps_each_attempt_with_its_definition() {
    let mut f = Fold::new();
    f.apply(session(
        1,
        100.0,
        vec![id("a", "x"), id("b", "x"), id("c", "x")],
    ));
    for (i, r) in ["a", "b", "c"].into_iter().enumerate() {
        let t = 100.0 + i as f64;
        f.apply(start(r, 1, 1, t));
        f.apply(end(r, 1, t + 1.0, State::Succeeded, Progress::default()));
    }
    f.apply(session(
        2,
        200.0,
        vec![id("d", "x"), id("a", "x"), id("b", "y")],
    ));
    assert_eq!(f.attempts_of("a"), (1, true), "unchanged: done");
    assert_eq!(f.attempts_of("b"), (1, false), "changed: runs again");
    assert_eq!(f.attempts_of("d"), (0, false));
    let names: Vec<String> = f.identities().into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["d", "a", "b"], "the latest manifest, without c");
    f.apply(start("b", 2, 2, 201.0));
    f.apply(end("b", 2, 202.0, State::Succeeded, Progress::default()));
    assert_eq!(f.attempts_of("b"), (2, true));
    let rep = report_of(&f, 300.0, None);
    let order: Vec<(&str, bool)> = rep
        .runs
        .iter()
        .map(|r| (r.name.as_str(), r.removed))
        .collect();
    assert_eq!(
        order,
        [("d", false), ("a", false), ("b", false), ("c", true)]
    );
    let b = &rep.runs[2];
    assert_eq!(b.command, ["y"]);
    assert_eq!(
        b.attempts[0].definition.as_ref().map(|d| d.command.clone()),
        Some(vec!["x".to_string()])
    );
    assert_eq!(b.attempts[1].definition, None);
    assert!(rep.runs[1].attempts[0].definition.is_none());
    assert_eq!(
        (rep.summary.runs, rep.summary.removed, rep.summary.succeeded),
        (3, 1, 2)
    );
    assert_eq!(rep.summary.not_started, 1);
    assert_eq!(rep.summary.attempts, 4, "c's attempt still counts");
    assert_counts_as_the_summary(&f, 300.0, None);
    // Back to the first definition: a third session, the history holds both.
    f.apply(session(3, 400.0, vec![id("b", "x")]));
    assert_eq!(f.attempts_of("b"), (2, false));
    let rep = report_of(&f, 500.0, None);
    let b = rep.runs.iter().find(|r| r.name == "b").unwrap();
    assert_eq!(b.attempts[0].definition, None, "ran x, and b is x again");
    assert_eq!(
        b.attempts[1].definition.as_ref().map(|d| d.command.clone()),
        Some(vec!["y".to_string()])
    );
}

/// A run's attempts by number: in order without a map, and any other order (numbers
/// skipped, repeated, going back) with one; the latest of a repeated number wins.
#[test]
fn the_latest_attempt_of_each_number_is_found_in_any_order() {
    let mut l = Latest::default();
    for at in 0..3 {
        l.insert(at as u32 + 1, at);
    }
    assert!(matches!(l, Latest::InOrder));
    assert_eq!(
        [0, 1, 2, 3, 4].map(|n| l.get(n, 3)),
        [None, Some(0), Some(1), Some(2), None]
    );
    // 5 after 3, then 2 again, then 5 again.
    l.insert(5, 3);
    assert!(matches!(l, Latest::Map(_)));
    l.insert(2, 4);
    l.insert(5, 5);
    assert_eq!(
        [1, 2, 3, 4, 5].map(|n| l.get(n, 6)),
        [Some(0), Some(4), Some(2), None, Some(5)]
    );
    // A first attempt not numbered 1.
    let mut l = Latest::default();
    l.insert(7, 0);
    assert_eq!((l.get(1, 1), l.get(7, 1)), (None, Some(0)));
}

/// An attempt started early (beside its slot's previous one) says so in its record and
/// the summary counts it; records written before the field existed read as not early, and
/// reports without early starts do not mention them.
#[test]
fn early_starts_are_recorded_and_counted() {
    let line = r#"{"ev":"start","ts":1.0,"run":"a","kind":"run","attempt":1,"session":1,"slot":0,"device":null,"node":null,"log":"logs/a.log"}"#;
    let old: Event = serde_json::from_str(line).unwrap();
    assert!(matches!(old, Event::Start { early: false, .. }));
    let plain = serde_json::to_string(&old).unwrap();
    assert!(!plain.contains("early"), "{plain}");

    let mut f = Fold::new();
    f.apply(session(1, 0.0, vec![id("a", "x"), id("b", "x")]));
    f.apply(start("a", 1, 1, 0.0));
    f.apply(end(
        "a",
        1,
        10.0,
        State::Succeeded,
        samples(2.0, 10.0, 50.0),
    ));
    let mut b = start("b", 1, 1, 8.0);
    if let Event::Start { early, .. } = &mut b {
        *early = true;
    }
    let text = serde_json::to_string(&b).unwrap();
    assert!(text.contains(r#""early":true"#), "{text}");
    f.apply(serde_json::from_str(&text).unwrap());
    f.apply(end(
        "b",
        1,
        18.0,
        State::Succeeded,
        samples(10.0, 18.0, 50.0),
    ));
    let r = f.report(100.0, None);
    assert_eq!(r.summary.early_starts, 1);
    let started_early: Vec<bool> = r.runs.iter().map(|x| x.attempts[0].started_early).collect();
    assert_eq!(started_early, vec![false, true]);
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains(r#""early_starts":1"#) && json.contains(r#""started_early":true"#));

    let mut g = Fold::new();
    g.apply(session(1, 0.0, vec![id("a", "x")]));
    g.apply(start("a", 1, 1, 0.0));
    g.apply(end(
        "a",
        1,
        10.0,
        State::Succeeded,
        samples(2.0, 10.0, 50.0),
    ));
    let json = serde_json::to_string(&g.report(100.0, None)).unwrap();
    assert!(!json.contains("early"), "{json}");
}
