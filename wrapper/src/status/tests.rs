//! Tests of status.rs (`colloc status --cluster`: nodes merged with the queue).

use std::collections::BTreeMap;

use colloc_core::journal::Phase;
use colloc_core::publish::{JobEntry, NodeRecord};
use serde_json::{json, Value};

use super::cluster::{self, when, ClusterStatus, NodeView};
use crate::slurm::{self, JobState};
use colloc_results::output::{Exporter, Json};

fn view(name: &str, comment: Option<&str>) -> NodeView {
    NodeView {
        info: slurm::NodeInfo {
            name: name.into(),
            state: "MIXED".into(),
            comment: comment.map(str::to_string),
        },
        record: comment.and_then(NodeRecord::decode),
    }
}

fn record(build: &str, jobs: Vec<JobEntry>) -> String {
    NodeRecord {
        colloc: 1,
        at: 1_700_000_000,
        by: "plugin/0.1.0".into(),
        build: Some(build.into()),
        jobs,
        unreadable: 0,
        cut: 0,
        run_dir: None,
    }
    .encode()
}

fn job(job: u32, mode: &str, gpus: Vec<u32>, marked: Vec<u32>) -> JobEntry {
    JobEntry {
        job,
        uid: 0,
        mode: mode.into(),
        gpus,
        phase: Phase::Applied,
        marked,
    }
}

#[test]
fn nodes_gpus_and_jobs_are_merged_with_the_queue() {
    let views = vec![
        view(
            "n1",
            Some(&record(
                "aaaaaaaaaaaa",
                vec![
                    job(5, "mig:3g.20gbx2", vec![0, 1], vec![]),
                    job(6, "mps", vec![2], vec![2]),
                ],
            )),
        ),
        view("n2", Some(&record("bbbbbbbbbbbb", vec![]))),
        view("n3", None),
        view("n4", Some("replaced DIMM")),
    ];
    let states: BTreeMap<u32, JobState> = [
        (5, JobState::Known("RUNNING".into())),
        (6, JobState::NotInQueue),
    ]
    .into();
    let r = ClusterStatus::new(&views, &states);
    // Job 5 on two GPUs: two rows; job 6 one, marked.
    let rows: Vec<String> = r
        .rows
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {} {} {:?}",
                r.node,
                r.gpu,
                r.job,
                r.marked,
                r.state.0.live()
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "n1 Some(0) 5 false Some(true)",
            "n1 Some(1) 5 false Some(true)",
            "n1 Some(2) 6 true Some(false)",
        ]
    );
    let notes = r.notes.join("\n");
    assert!(notes.contains("n1: job 6 is GONE in Slurm"), "{notes}");
    assert!(notes.contains("colloc restore --job 6"), "{notes}");
    assert!(notes.contains("n1: GPU(s) [2] MARKED by job 6"), "{notes}");
    assert!(notes.contains("n3: no colloc record"), "{notes}");
    assert!(notes.contains("n4: no colloc record"), "{notes}");
    assert!(notes.contains("2 different plugin builds"), "{notes}");
    assert!(r.error.is_none());
    let text = cluster::Text.render(&r).unwrap();
    assert!(text.lines().next().unwrap().starts_with("NODE"), "{text}");
    assert!(text.contains("mig:3g.20gbx2"), "{text}");
    assert!(text.contains("2!"), "{text}");
    assert!(
        text.contains("plugin build aaaaaaaaaaaa (plugin/0.1.0): n1"),
        "{text}"
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 3);
    assert_eq!(v["rows"][2]["running"], json!(false));
    assert_eq!(v["rows"][2]["job_state"], "GONE");
    assert_eq!(v["nodes"][2]["record"], Value::Null);
    assert!(v.get("error").is_none());
}

#[test]
fn an_unknown_slurm_is_an_error_not_a_quiet_cluster() {
    let views = vec![view(
        "n1",
        Some(&record(
            "aaaaaaaaaaaa",
            vec![job(5, "mps", vec![0], vec![])],
        )),
    )];
    let states: BTreeMap<u32, JobState> =
        [(5, JobState::Unknown("squeue: timed out".into()))].into();
    let r = ClusterStatus::new(&views, &states);
    assert_eq!(r.rows[0].state.0.live(), None);
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["error"].as_str().unwrap().contains("squeue: timed out"));
    assert_eq!(v["rows"][0]["running"], Value::Null);
    // A newer colloc's record is named, not dropped.
    let newer = record("aaaaaaaaaaaa", vec![]).replacen("\"colloc\":1", "\"colloc\":2", 1);
    let views = vec![view("n9", Some(&newer))];
    let r = ClusterStatus::new(&views, &BTreeMap::new());
    assert!(
        r.notes[0].starts_with("n9: a colloc record of version 2"),
        "{:?}",
        r.notes
    );
}

/// `tests/fixtures/golden/status/<name>`, compared byte for byte (or written, with
/// `COLLOC_BLESS=1`); the local time of a record (`when`) is `<WHEN>` there.
pub(super) fn golden(name: &str, got: &str) {
    let got = got.replace(&when(1_700_000_000), "<WHEN>");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden/status")
        .join(name);
    if std::env::var_os("COLLOC_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (COLLOC_BLESS=1 writes it)", path.display()));
    assert!(got == want, "{name}:\n--- want\n{want}\n--- got\n{got}");
}

/// Every kind of node the cluster view shows: jobs on several GPUs, a marked GPU, a job
/// Slurm no longer knows, two builds, no record, an admin's comment, a newer record, a
/// node with its run_dir full, unreadable and cut journals.
fn every_kind_of_node() -> Vec<NodeView> {
    let full = NodeRecord {
        colloc: 1,
        at: 1_700_000_000,
        by: "colloc/0.1.0".into(),
        build: None,
        jobs: vec![job(8, "naive", vec![], vec![])],
        unreadable: 2,
        cut: 3,
        run_dir: Some(colloc_core::publish::RunDirRoom {
            full: true,
            free_inodes: 0,
            inodes: 100,
            free_kib: 4,
            kib: 1024,
            held_inodes: 7,
        }),
    }
    .encode();
    let newer = record("aaaaaaaaaaaa", vec![]).replacen("\"colloc\":1", "\"colloc\":2", 1);
    vec![
        view(
            "n1",
            Some(&record(
                "aaaaaaaaaaaa",
                vec![
                    job(5, "mig:3g.20gbx2", vec![0, 1], vec![]),
                    job(6, "mps", vec![2], vec![2]),
                ],
            )),
        ),
        view("n2", Some(&record("bbbbbbbbbbbb", vec![]))),
        view("n3", None),
        view("n4", Some("replaced DIMM")),
        view("n5", Some(&full)),
        view("n9", Some(&newer)),
    ]
}

#[test]
fn the_cluster_view_is_as_recorded() {
    let views = every_kind_of_node();
    let states: BTreeMap<u32, JobState> = [
        (5, JobState::Known("RUNNING".into())),
        (6, JobState::NotInQueue),
        (8, JobState::Known("COMPLETING".into())),
    ]
    .into();
    let r = ClusterStatus::new(&views, &states);
    golden("cluster.out", &cluster::Text.render(&r).unwrap());
    golden("cluster-json.out", &Json::SORTED.render(&r).unwrap());
    let states: BTreeMap<u32, JobState> = [5, 6, 8]
        .map(|j| (j, JobState::Unknown("squeue: timed out".into())))
        .into();
    let r = ClusterStatus::new(&views, &states);
    golden(
        "cluster-slurm-unknown.out",
        &cluster::Text.render(&r).unwrap(),
    );
    golden(
        "cluster-slurm-unknown-json.out",
        &Json::SORTED.render(&r).unwrap(),
    );
    let r = ClusterStatus::new(&[], &BTreeMap::new());
    golden("cluster-empty.out", &cluster::Text.render(&r).unwrap());
    golden("cluster-empty-json.out", &Json::SORTED.render(&r).unwrap());
}

/// A node in states the CLI goldens cannot reach without a Slurm queue or a driver that
/// refuses: a running job, a job Slurm no longer knows (a leftover), a uid without a
/// name, MIG unsupported, a change pending, instances refused to root, an instance list
/// that failed, a marked GPU with the processes that have device files open.
pub(super) fn every_kind_of_node_status() -> super::model::NodeStatus {
    use super::model::*;
    use colloc_core::gpu::{GpuHold, HoldReason};
    use colloc_core::holders::DeviceUser;
    let gpu = |index: u32, mig: Option<(bool, bool)>, instances| GpuStatus {
        index,
        uuid: format!("GPU-{index}"),
        name: "NVIDIA A100-SXM4-40GB".into(),
        memory_total: 40 << 30,
        mig_mode: mig.is_some_and(|m| m.0),
        mig_mode_pending: mig.map(|m| m.1),
        instances,
        processes: index as usize,
        marked_by: if index == 2 { vec![9] } else { vec![] },
        serves: vec!["mig"],
        serves_note: String::new(),
    };
    let journal = |job: u32, uid: u32, user: Option<&str>, state: JobState| {
        JournalEntry::Read(JournalStatus {
            job,
            uid,
            user: user.map(str::to_string),
            state: SlurmState(state),
            gpus: vec![job % 4],
            mode: "mig:3g".into(),
            phase: Phase::Applied,
            mps: vec![],
            mps_devices: vec![],
            held: if job == 9 {
                vec![GpuHold {
                    index: 2,
                    uuid: "GPU-2".into(),
                    gi_ids: vec![1],
                    reason: HoldReason::InUse,
                    since: 1_700_000_000,
                    holders: vec![],
                    breaks_plain_jobs: false,
                }]
            } else {
                vec![]
            },
        })
    };
    NodeStatus {
        node: Some("n1".into()),
        colloc_version: "<VERSION>",
        colloc_build: None,
        gpus: Some(vec![
            gpu(0, None, Instances::Listed(vec![])),
            gpu(
                1,
                Some((true, false)),
                Instances::Listed(vec![InstanceStatus {
                    profile: "7g.40gb".into(),
                    uuid: None,
                    start: 0,
                    size: 8,
                    gi_id: 0,
                }]),
            ),
            gpu(
                2,
                Some((true, true)),
                Instances::NeedsRoot {
                    devices: vec![MigDevice {
                        gi_id: 1,
                        ci_id: 0,
                        uuid: "MIG-1".into(),
                    }],
                    refused_to_root: Some("instances: refused to root".into()),
                },
            ),
            gpu(3, Some((false, false)), Instances::Failed("Unknown".into())),
        ]),
        gpus_error: None,
        journals: vec![
            journal(4, 1000, Some("alice"), JobState::Known("RUNNING".into())),
            journal(9, 4242, None, JobState::NotInQueue),
            JournalEntry::Unreadable("journal 5.json is unreadable".into()),
        ],
        journals_error: None,
        slurm_error: None,
        leftovers: Some(vec![]),
        leftovers_error: None,
        run_dir: None,
        run_dir_lines: vec![],
        device_users: Some(vec![DeviceUser {
            pid: 77,
            name: "nv-hostengine\u{1b}[2J".into(),
            devices: vec!["/dev/nvidia2".into()],
        }]),
        live: crate::status::live::LiveRead::default(),
        error: Some("GPU 2: instances: refused to root; GPU 3 instances: Unknown".into()),
    }
}

/// Recorded from the model after status moved onto it (the CLI goldens were recorded
/// before): what the text and JSON say of each of these states stays as it is.
#[test]
fn the_node_view_of_states_without_a_queue_is_as_recorded() {
    let s = every_kind_of_node_status();
    golden("node-model.out", &super::text::Text.render(&s).unwrap());
    golden("node-model-json.out", &Json::SORTED.render(&s).unwrap());
}
