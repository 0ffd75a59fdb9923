//! The OpenMetrics format of the node view: what it says of every kind of state, held to a
//! golden file, and read back by a real parser (prometheus_client's), hostile values too.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::*;
use crate::status::model::{GpusError, JournalEntry, NodeStatus};
use crate::status::tests::{every_kind_of_node_status, golden};

/// The families prometheus_client's OpenMetrics parser reads in `text` (as JSON), or
/// `None` where no python3 with the module is found (the caller skips, saying so). A
/// text the parser refuses fails the test.
pub(crate) fn parse(text: &str) -> Option<Value> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/openmetrics_parse.py"
    );
    for python in ["python3", "/usr/bin/python3"] {
        let Ok(mut child) = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            continue;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => return Some(serde_json::from_slice(&out.stdout).unwrap()),
            Some(3) => continue,
            _ => panic!(
                "prometheus_client refused the text: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    eprintln!(
        "skipped: no python3 with prometheus_client (Debian: python3-prometheus-client) \
         to parse the OpenMetrics text"
    );
    None
}

/// The samples of family `name`: (labels, value).
pub(crate) fn samples(families: &Value, name: &str) -> Vec<(Value, f64)> {
    families
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == name)
        .flat_map(|f| f["samples"].as_array().unwrap().clone())
        .map(|s| (s["labels"].clone(), s["value"].as_f64().unwrap()))
        .collect()
}

#[test]
fn label_values_are_escaped_as_openmetrics_says() {
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    assert_eq!(escape("plain 3g.40gb"), "plain 3g.40gb");
}

/// Characters some readers split lines at (Python's universal newlines: CR, NEL, U+2028)
/// and NUL never reach the text raw (the red team saw a `\r` begin a line of its own).
#[test]
fn no_character_a_reader_splits_lines_at_is_left_raw() {
    let got = escape("a\rcolloc_x 1\u{85}b\u{2028}c\u{2029}d\0e");
    assert_eq!(
        got,
        "a\u{FFFD}colloc_x 1\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e"
    );
    assert_eq!(got.lines().count(), 1);
    assert_eq!(got.as_str().split(['\r', '\u{85}', '\u{2028}']).count(), 1);
}

#[test]
fn every_family_is_a_colloc_gauge_named_with_its_unit_and_said_once() {
    let mut names = std::collections::BTreeSet::new();
    for f in FAMILIES {
        assert!(f.name.starts_with("colloc_"), "{}", f.name);
        assert!(names.insert(f.name), "{} twice", f.name);
        if let Some(u) = f.unit {
            assert!(f.name.ends_with(&format!("_{u}")), "{} lacks _{u}", f.name);
        }
        assert!(
            !f.help.contains('\n') && !f.help.contains('"'),
            "{}",
            f.name
        );
    }
}

#[test]
fn the_node_view_of_states_without_a_queue_is_as_recorded_in_openmetrics() {
    let s = every_kind_of_node_status();
    let text = OpenMetrics.render(&s).unwrap();
    golden("node-model.prom", &text);
    assert!(text.ends_with("\n# EOF\n"));
}

#[test]
fn every_kind_of_state_parses_and_says_what_the_model_knows() {
    let s = every_kind_of_node_status();
    let Some(f) = parse(&OpenMetrics.render(&s).unwrap()) else {
        return;
    };
    assert_eq!(samples(&f, "colloc_gpus")[0].1, 4.0);
    assert_eq!(samples(&f, "colloc_status_ok")[0].1, 0.0);
    let mem = samples(&f, "colloc_gpu_memory_total_bytes");
    assert_eq!(mem[0].1, 42_949_672_960.0);
    let family = f
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "colloc_gpu_memory_total_bytes")
        .unwrap();
    assert_eq!(family["unit"], "bytes");
    // GPU 1's instance, with DCGM's labels; no UUID without a compute instance.
    let inst = samples(&f, "colloc_mig_instance_info");
    assert_eq!(inst.len(), 1);
    assert_eq!(
        inst[0].0,
        serde_json::json!({"gpu": "1", "GPU_I_ID": "0", "GPU_I_PROFILE": "7g.40gb", "UUID": ""})
    );
    // GPU 2: instances need root (readable 0, no count), its MIG device seen.
    let readable = samples(&f, "colloc_gpu_instances_readable");
    let by_gpu = |v: &[(Value, f64)], g: &str| -> Option<f64> {
        v.iter().find(|(l, _)| l["gpu"] == g).map(|(_, x)| *x)
    };
    assert_eq!(by_gpu(&readable, "2"), Some(0.0));
    assert_eq!(by_gpu(&readable, "3"), Some(0.0));
    let counts = samples(&f, "colloc_gpu_mig_instances");
    assert_eq!(by_gpu(&counts, "2"), None, "no made-up 0 where unreadable");
    assert_eq!(by_gpu(&counts, "1"), Some(1.0));
    assert_eq!(samples(&f, "colloc_mig_device_info")[0].0["UUID"], "MIG-1");
    // GPU 0 has no MIG: no MIG mode said, supported 0.
    assert_eq!(by_gpu(&samples(&f, "colloc_gpu_mig_mode"), "0"), None);
    assert_eq!(
        by_gpu(&samples(&f, "colloc_gpu_mig_supported"), "0"),
        Some(0.0)
    );
    assert_eq!(by_gpu(&samples(&f, "colloc_gpu_marked"), "2"), Some(1.0));
    // Job 4 runs, job 9 is gone and holds GPU 2 (in use); one journal unreadable.
    let running = samples(&f, "colloc_job_running");
    assert_eq!(running.len(), 2);
    assert!(running.contains(&(serde_json::json!({"job": "4"}), 1.0)));
    assert!(running.contains(&(serde_json::json!({"job": "9"}), 0.0)));
    let held = samples(&f, "colloc_job_held_gpu");
    assert_eq!(
        held[0].0,
        serde_json::json!({"job": "9", "gpu": "2", "UUID": "GPU-2", "reason": "in_use"})
    );
    assert_eq!(samples(&f, "colloc_journals_unreadable")[0].1, 1.0);
    let info = samples(&f, "colloc_job_info");
    assert_eq!(info[0].0["phase"], "applied");
    assert_eq!(info[0].0["mode"], "mig:3g");
    // run_dir could not be opened: said, and no figures.
    assert_eq!(samples(&f, "colloc_run_dir_readable")[0].1, 0.0);
    assert!(samples(&f, "colloc_run_dir_free_bytes").is_empty());
    // No per-process label anywhere: the device users are not said.
    let text = OpenMetrics.render(&s).unwrap();
    assert!(!text.contains("nv-hostengine"));
}

#[test]
fn hostile_names_and_modes_round_trip_through_the_parser() {
    let mut s = every_kind_of_node_status();
    let hostile = "NVIDIA \"A100\"\\x\n} 1\ncolloc_fake 2";
    if let Some(g) = s.gpus.as_mut().and_then(|g| g.first_mut()) {
        g.name = hostile.into();
    }
    if let Some(JournalEntry::Read(j)) = s.journals.first_mut() {
        j.mode = "mps:2\"\\\n".into();
        j.mps_devices = vec!["GPU-0,MIG-1".into()];
    }
    let text = OpenMetrics.render(&s).unwrap();
    assert!(
        !text.contains("colloc_fake 2\n"),
        "a name broke out of its label"
    );
    let Some(f) = parse(&text) else {
        return;
    };
    let info = samples(&f, "colloc_gpu_info");
    assert_eq!(info[0].0["modelName"], hostile);
    assert!(samples(&f, "colloc_fake").is_empty());
    assert_eq!(samples(&f, "colloc_job_info")[0].0["mode"], "mps:2\"\\\n");
    // The job's MPS daemons, each on the GPU its device belongs to (MIG-1 is on GPU 2).
    let mps = samples(&f, "colloc_mps_daemon_info");
    assert_eq!(
        mps.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>(),
        [
            serde_json::json!({"job": "4", "gpu": "0", "UUID": "GPU-0"}),
            serde_json::json!({"job": "4", "gpu": "2", "UUID": "MIG-1"}),
        ]
    );
}

/// The runs a job's `colloc run` serves: an info series per run (its name, a hostile one
/// staying inside its label, and device), its figures per slot, as they were served,
/// floats too; a figure not served has no sample.
#[test]
fn the_running_runs_are_series_of_their_job() {
    use colloc_results::live::LiveRun;
    let mut s = every_kind_of_node_status();
    let hostile = "lr\"0.1\"\n} 1\ncolloc_fake 2";
    s.live = crate::status::live::LiveRead {
        jobs: vec![crate::status::live::JobRuns {
            job: 4,
            sources: 1,
            runs: vec![
                LiveRun {
                    name: "seed1".into(),
                    index: 0,
                    attempt: 2,
                    slot: 0,
                    device: Some("MIG-1".into()),
                    started_unix: 1_700_000_000.25,
                    throughput: Some(812.5),
                    unit: Some("img/s".into()),
                    memory_peak_bytes: Some(3 << 30),
                    util_ratio: Some(0.375),
                    energy_joules: Some(1234.5),
                },
                LiveRun {
                    name: hostile.into(),
                    index: 1,
                    attempt: 1,
                    slot: 1,
                    started_unix: 1_700_000_001.0,
                    ..LiveRun::default()
                },
            ],
        }],
        refused: 2,
    };
    let text = OpenMetrics.render(&s).unwrap();
    assert!(
        !text.contains("colloc_fake 2\n"),
        "a name broke out of its label"
    );
    assert!(
        text.contains("\ncolloc_run_throughput{job=\"4\",slot=\"0\",unit=\"img/s\"} 812.5\n"),
        "{text}"
    );
    let Some(f) = parse(&text) else {
        return;
    };
    let one = |name: &str| samples(&f, name);
    assert_eq!(one("colloc_live_refused")[0].1, 2.0);
    assert_eq!(
        one("colloc_job_runs_running")[0],
        (serde_json::json!({"job": "4"}), 2.0)
    );
    let info = one("colloc_run_info");
    assert_eq!(info.len(), 2);
    assert_eq!(
        info[0].0,
        serde_json::json!({"job": "4", "slot": "0", "run": "seed1", "index": "0", "UUID": "MIG-1"})
    );
    assert_eq!(info[1].0["run"], hostile);
    assert_eq!(info[1].0["UUID"], "");
    let seed1 = serde_json::json!({"job": "4", "slot": "0"});
    assert_eq!(
        one("colloc_run_start_time_seconds")[0],
        (seed1.clone(), 1_700_000_000.25)
    );
    assert_eq!(one("colloc_run_attempt")[0], (seed1.clone(), 2.0));
    assert_eq!(
        one("colloc_run_memory_peak_bytes"),
        [(seed1.clone(), f64::from(3u32 << 30))]
    );
    assert_eq!(
        one("colloc_run_gpu_utilization_ratio"),
        [(seed1.clone(), 0.375)]
    );
    assert_eq!(one("colloc_run_energy_joules"), [(seed1, 1234.5)]);
    assert_eq!(
        one("colloc_run_throughput").len(),
        1,
        "the hostile run served none"
    );
    assert!(one("colloc_fake").is_empty());
}

#[test]
fn no_nvml_is_a_health_gauge_not_a_gpu_count_of_zero() {
    let mut s = every_kind_of_node_status();
    s.gpus = None;
    s.gpus_error = Some(GpusError::Unavailable(
        "libnvidia-ml.so.1: not found".into(),
    ));
    let text = OpenMetrics.render(&s).unwrap();
    assert!(text.contains("\ncolloc_nvml_readable 0\n"));
    assert!(text.contains("\ncolloc_nvml_failure_info{step=\"open\"} 1\n"));
    assert!(!text.contains("colloc_gpus "), "{text}");
    assert!(!text.contains("libnvidia-ml"), "no free-text label");
    if let Some(f) = parse(&text) {
        assert!(samples(&f, "colloc_gpu_info").is_empty());
    }
}

#[test]
fn a_broken_configuration_says_so_in_a_document_of_its_own() {
    let text = config_invalid(Some("abc"));
    assert!(text.contains("\ncolloc_config_valid 0\n"), "{text}");
    assert!(text.ends_with("# EOF\n"));
    if let Some(f) = parse(&text) {
        assert_eq!(samples(&f, "colloc_build_info")[0].0["build"], "abc");
    }
}

/// docs/admin.md lists every family (the metric list an admin builds dashboards from).
#[test]
fn every_family_is_in_the_admin_guide() {
    let guide = include_str!("../../../../docs/admin.md");
    for f in FAMILIES {
        assert!(
            guide.contains(&format!("`{}`", f.name)),
            "{} missing",
            f.name
        );
    }
}

/// No journals: counts of 0, no job series and no Slurm health (nothing was asked).
#[test]
fn a_status_with_nothing_read_is_still_a_valid_document() {
    let s = NodeStatus {
        journals: vec![],
        ..every_kind_of_node_status()
    };
    let text = OpenMetrics.render(&s).unwrap();
    assert!(text.contains("\ncolloc_journals 0\n"));
    assert!(!text.contains("colloc_slurm_readable"));
    if let Some(f) = parse(&text) {
        assert!(samples(&f, "colloc_job_info").is_empty());
    }
}
