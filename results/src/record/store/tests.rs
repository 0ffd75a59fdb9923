//! Tests of record/store.rs (ReportDir, the event log, reading and validating records).

use super::read::{check_event_files, index_events, MAX_OPEN};
use super::validate::Validator;
use super::*;
use crate::record::events::Event;

fn events_of(d: &ReportDir) -> (Vec<Event>, usize) {
    let ev = d.dir().subdir(EVENTS_DIR, None).unwrap().unwrap();
    let mut out = Vec::new();
    let bad = read_events(&ev, |e| {
        out.push(e);
        Ok(())
    })
    .unwrap();
    (out, bad)
}

fn session(ts: f64, slots: usize) -> Event {
    Event::Session {
        ts,
        version: 1,
        session: 1,
        colloc_version: "x".into(),
        host: "h".into(),
        pid: 1,
        job_id: None,
        restart_count: None,
        mode: "naive".into(),
        source: "plain".into(),
        steps: false,
        slots: (0..slots)
            .map(|index| crate::record::events::SlotRecord {
                index,
                device: None,
                node: None,
                memory_mib: None,
            })
            .collect(),
        interval_s: 1.0,
        runs: vec![],
    }
}

#[test]
fn events_append_and_read_back_skipping_cut_lines() {
    let t = tempfile::tempdir().unwrap();
    let (d, made) = ReportDir::create(&t.path().join("r")).unwrap();
    assert!(made);
    let mut log = d.event_log(1, "main").unwrap();
    let ev = |ts| Event::Stop {
        ts,
        reason: "x".into(),
    };
    log.append(&ev(2.0));
    log.append(&session(5.0, 1));
    log.append(&ev(1.0));
    // a line cut by a kill or a full disk
    std::fs::OpenOptions::new()
        .append(true)
        .open(t.path().join("r/events/1.main.jsonl"))
        .unwrap()
        .write_all(b"{\"ev\":\"sto")
        .unwrap();
    log.broken = true;
    log.append(&ev(3.0));
    let (events, bad) = events_of(&d);
    assert_eq!(bad, 1);
    let ts: Vec<f64> = events.iter().map(Event::ts).collect();
    assert_eq!(ts, [5.0, 1.0, 2.0, 3.0]);
}

#[test]
fn atomic_writes_replace_whole_files() {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
    d.write("r.json", b"one").unwrap();
    d.write("r.json", b"two").unwrap();
    assert_eq!(std::fs::read(t.path().join("r/r.json")).unwrap(), b"two");
    let names: Vec<String> = d
        .dir()
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, ["r.json"]);
}

#[test]
fn values_colloc_never_writes_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
    let p = t.path().join("r/events/1.main.jsonl");
    let mut log = d.event_log(1, "main").unwrap();
    log.append(&session(5.0, 2));
    drop(log);
    let base = std::fs::read_to_string(&p).unwrap();
    let start = |slot: &str, ts: &str| {
        format!("{{\"ev\":\"start\",\"ts\":{ts},\"run\":\"a\",\"attempt\":1,\"session\":1,\"slot\":{slot},\"device\":null,\"node\":null,\"log\":\"logs/a.log\"}}\n")
    };
    for (line, want) in [
        (
            start("1000000000000000", "6"),
            "slot index 1000000000000000 but its session declares 2 slot(s)",
        ),
        (
            start("1", "1e308"),
            "time 1e308 is not a time colloc writes",
        ),
        (start("1", "-1"), "time -1e0 is not a time"),
    ] {
        std::fs::write(&p, format!("{base}{line}")).unwrap();
        let e = d.fold().unwrap_err();
        assert!(matches!(e, RecordError::Invalid { line: 2, .. }), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
    std::fs::write(&p, format!("{base}{}", start("1", "6"))).unwrap();
    let (f, bad) = d.fold().unwrap().unwrap();
    assert_eq!((f.sessions(), bad), (1, 0));
}

/// A record of one session whose event file holds `lines`.
fn record_with(lines: &str) -> (tempfile::TempDir, ReportDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
    d.event_log(1, "main").unwrap().append(&session(5.0, 1));
    let p = t.path().join("r/events/1.main.jsonl");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    (t, d, p)
}

fn stop(ts: f64) -> String {
    format!("{{\"ev\":\"stop\",\"ts\":{ts},\"reason\":\"x\"}}\n")
}

#[test]
fn a_writer_appending_meanwhile_cannot_make_a_read_run_on() {
    let (_t, d, p) = record_with(&stop(6.0));
    let ev = d.dir().subdir(EVENTS_DIR, None).unwrap().unwrap();
    let files = check_event_files(&ev).unwrap();
    // Someone appends after the record was checked (as fast as they like).
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    for i in 0..1000 {
        f.write_all(stop(7.0 + f64::from(i)).as_bytes()).unwrap();
    }
    let (sessions, bad) = index_events(&ev, &files).unwrap();
    assert_eq!(
        (sessions[0].1.len(), bad),
        (2, 0),
        "read past the checked size"
    );
    // Replaced by another file meanwhile: refused, not read.
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, stop(8.0)).unwrap();
    let e = index_events(&ev, &files).err().unwrap();
    assert!(
        e.to_string().contains("replaced or cut while it was read"),
        "{e}"
    );
}

#[test]
fn many_writers_of_a_session_merge_by_time_with_few_files_open() {
    // More writers than files kept open, their lines interleaved in time: every
    // line is read from a file opened again and sought to.
    let (t, d, _) = record_with("");
    let writers = MAX_OPEN as u32 + 36;
    for w in 0..writers {
        let lines: String = (0..3).map(|k| stop(f64::from(10 + k * 1000 + w))).collect();
        std::fs::write(t.path().join(format!("r/events/1.w{w}.jsonl")), lines).unwrap();
    }
    let (events, bad) = events_of(&d);
    assert_eq!((events.len(), bad), (1 + 3 * writers as usize, 0));
    let ts: Vec<f64> = events.iter().skip(1).map(Event::ts).collect();
    let mut sorted = ts.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(ts, sorted);
    assert_eq!(ts[writers as usize], 1010.0);
}

#[test]
fn an_event_file_with_another_link_is_refused() {
    let (t, d, p) = record_with("");
    std::fs::hard_link(&p, t.path().join("elsewhere")).unwrap();
    let e = d.fold().unwrap_err();
    assert!(
        e.to_string()
            .contains("1.main.jsonl is a file with 2 hard links, not an event file with one link"),
        "{e}"
    );
    assert!(
        matches!(e, RecordError::File(ref f) if f.is_bad_input()),
        "{e}"
    );
}

#[test]
fn a_record_past_the_total_caps_is_refused_with_a_clear_line() {
    // Bytes: two sparse files, each under the per-file cap, together over 4 GiB.
    let (t, d, _) = record_with("");
    for w in ["a", "b"] {
        let f = std::fs::File::create(t.path().join(format!("r/events/1.{w}.jsonl"))).unwrap();
        f.set_len(2 << 30).unwrap();
    }
    let e = d.fold().unwrap_err();
    assert!(matches!(e, RecordError::TooLarge { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("its event files hold more than 4 GiB together, more than colloc reads"),
        "{e}"
    );
    // Lines: one more than 16 Mi short lines.
    let (_t, d, _) = record_with(&"x\n".repeat(MAX_EVENT_LINES));
    let e = d.fold().unwrap_err();
    assert!(
        e.to_string()
            .contains("it holds more than 16777216 event lines"),
        "{e}"
    );
}

#[test]
fn a_record_of_more_runs_than_a_pack_has_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
    let mut s = session(5.0, 1);
    if let Event::Session { runs, .. } = &mut s {
        *runs = (0..=MAX_RUNS)
            .map(|i| crate::record::events::RunIdentity {
                name: format!("r{i}"),
                command: vec![],
                env: vec![],
                workdir: None,
                grid: None,
                metrics: vec![],
                metric: None,
                gpu_memory_mib: None,
            })
            .collect();
    }
    d.event_log(1, "main").unwrap().append(&s);
    let e = d.fold().unwrap_err();
    assert!(
        e.to_string()
            .contains("line 1: more than 100000 distinct runs"),
        "{e}"
    );
}

#[test]
fn more_sessions_session_ends_or_attempts_than_colloc_writes_are_refused() {
    let start = || {
        serde_json::from_str::<Event>(
            r#"{"ev":"start","ts":6,"run":"a","attempt":1,"session":1,"slot":0,"log":"l"}"#,
        )
        .unwrap()
    };
    let end = || {
        serde_json::from_str::<Event>(
            r#"{"ev":"session_end","ts":6,"session":1,"stopped_by":null,"max_concurrent":1}"#,
        )
        .unwrap()
    };
    let mut v = Validator::default();
    for _ in 0..MAX_SESSIONS {
        v.event(&session(5.0, 1)).unwrap();
        v.event(&end()).unwrap();
    }
    let e = v.event(&session(5.0, 1)).unwrap_err();
    assert!(e.contains("more than 4096 session events"), "{e}");
    let e = v.event(&end()).unwrap_err();
    assert!(e.contains("more than 4096 session end events"), "{e}");
    for _ in 0..MAX_ATTEMPTS {
        v.event(&start()).unwrap();
    }
    let e = v.event(&start()).unwrap_err();
    assert!(e.contains("more than 1048576 attempts"), "{e}");
}

#[test]
fn the_lock_is_held_by_one_and_seen_by_others() {
    let t = tempfile::tempdir().unwrap();
    let (d, _) = ReportDir::create(&t.path().join("r")).unwrap();
    assert_eq!(d.lock_state().unwrap(), LockState::Free);
    let l = d.lock().unwrap().unwrap();
    assert_eq!(d.lock_state().unwrap(), LockState::Held);
    assert!(d.lock().unwrap().is_none());
    drop(l);
    assert_eq!(d.lock_state().unwrap(), LockState::Free);
}
