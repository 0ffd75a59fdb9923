//! `colloc status --cluster` as one typed model ([`ClusterStatus`]): every node's colloc
//! state as its prolog and epilog published it (see `colloc_core::publish`), merged with
//! Slurm's queue into rows of node × GPU × job, with notes on what to do. Its `Serialize`
//! is the `--cluster --json` contract; [`Text`] is the table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use colloc_core::publish::NodeRecord;
use serde::Serialize;

use super::model::SlurmState;
use crate::slurm::{self, JobState};
use colloc_results::output::Exporter;

/// A node of the cluster view: its Slurm state and what it published.
pub struct NodeView {
    /// What Slurm says of it.
    pub info: slurm::NodeInfo,
    /// Its record: none, one that could not be read (why), or the record.
    pub record: Option<Result<NodeRecord, String>>,
}

/// The merged view.
#[derive(Debug, Serialize)]
pub struct ClusterStatus {
    /// Each node, with its record's header.
    pub nodes: Vec<NodeEntry>,
    /// A row per job and GPU.
    pub rows: Vec<Row>,
    /// The plugin builds the nodes run, each with its nodes.
    pub builds: Vec<Build>,
    /// What to look at, one sentence each.
    pub notes: Vec<String>,
    /// Slurm could not say which jobs run; the exit status is 1 with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A node and its record's header.
#[derive(Debug, Serialize)]
pub struct NodeEntry {
    /// Slurm's name.
    pub name: String,
    /// Slurm's state.
    pub state: String,
    /// Its record's header; `null` without a readable record.
    pub record: Option<RecordHeader>,
    /// Why its record could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_error: Option<String>,
}

/// When and by whom a node's record was written.
#[derive(Debug, Serialize)]
pub struct RecordHeader {
    /// Seconds since the epoch.
    pub at: u64,
    /// `plugin/<version>` or `colloc/<version>`.
    pub by: String,
    /// The plugin's build id.
    pub build: Option<String>,
    /// Journals the node could not read.
    pub unreadable: u32,
    /// Jobs left out of the record.
    pub cut: u32,
}

/// A job on one GPU of one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The node.
    pub node: String,
    /// The GPU (NVML index); `None` for a job without GPUs.
    pub gpu: Option<u32>,
    /// The job.
    pub job: u32,
    /// Its user's uid.
    pub uid: u32,
    /// Its user's name, else `uid N`.
    pub user: String,
    /// Its mode.
    pub mode: String,
    /// How far its reconfiguration got.
    pub phase: String,
    /// Whether its restore left this GPU marked.
    pub marked: bool,
    /// What Slurm says of the job: `job_state`, `running`.
    #[serde(flatten)]
    pub state: SlurmState,
}

/// A plugin build and the nodes that run it.
#[derive(Debug, Serialize)]
pub struct Build {
    /// Its build id.
    pub build: String,
    /// Who published it first.
    pub by: String,
    /// Its nodes.
    pub nodes: Vec<String>,
}

impl ClusterStatus {
    /// Merge the nodes' records with Slurm's job states.
    pub fn new(views: &[NodeView], states: &BTreeMap<u32, JobState>) -> ClusterStatus {
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        let mut builds: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for v in views {
            let name = &v.info.name;
            let rec = match &v.record {
                None => {
                    notes.push(format!(
                        "{name}: no colloc record in its node comment (no colloc job has run \
                         there since the plugin was enabled, node_comment = false, or the \
                         comment is an admin's)"
                    ));
                    continue;
                }
                Some(Err(e)) => {
                    notes.push(format!("{name}: {e}"));
                    continue;
                }
                Some(Ok(r)) => r,
            };
            if let Some(b) = &rec.build {
                builds
                    .entry(b.clone())
                    .or_insert_with(|| (rec.by.clone(), Vec::new()))
                    .1
                    .push(name.clone());
            }
            node_rows(name, rec, states, &mut rows, &mut notes);
        }
        if builds.len() > 1 {
            notes.push(format!(
                "the nodes run {} different plugin builds (see below): install one build \
                 everywhere",
                builds.len()
            ));
        }
        let slurm_error = states.values().find_map(|s| match s {
            JobState::Unknown(why) => Some(why.clone()),
            _ => None,
        });
        if let Some(e) = &slurm_error {
            notes.push(format!("Slurm could not say which jobs run: {e}"));
        }
        ClusterStatus {
            nodes: views.iter().map(node_entry).collect(),
            rows,
            builds: builds
                .into_iter()
                .map(|(build, (by, nodes))| Build { build, by, nodes })
                .collect(),
            notes,
            error: slurm_error.map(|e| format!("Slurm could not say which jobs run: {e}")),
        }
    }
}

fn node_entry(v: &NodeView) -> NodeEntry {
    let (record, record_error) = match &v.record {
        Some(Ok(r)) => (
            Some(RecordHeader {
                at: r.at,
                by: r.by.clone(),
                build: r.build.clone(),
                unreadable: r.unreadable,
                cut: r.cut,
            }),
            None,
        ),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, None),
    };
    NodeEntry {
        name: v.info.name.clone(),
        state: v.info.state.clone(),
        record,
        record_error,
    }
}

/// A node's rows, and its notes: journals it cannot read, run_dir, jobs left out, jobs
/// Slurm no longer runs, marked GPUs.
fn node_rows(
    name: &String,
    rec: &NodeRecord,
    states: &BTreeMap<u32, JobState>,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    if rec.unreadable > 0 {
        notes.push(format!(
            "{name}: {} journal(s) it cannot read: run `colloc status` there",
            rec.unreadable
        ));
    }
    notes.extend(super::rundir::note(name, rec));
    if rec.cut > 0 {
        notes.push(format!(
            "{name}: {} more job(s) than its comment holds: run `colloc status` there",
            rec.cut
        ));
    }
    for j in &rec.jobs {
        let state = states
            .get(&j.job)
            .cloned()
            .unwrap_or(JobState::Unknown("not asked".into()));
        let gpus: Vec<Option<u32>> = if j.gpus.is_empty() {
            vec![None]
        } else {
            j.gpus.iter().copied().map(Some).collect()
        };
        for gpu in gpus {
            rows.push(Row {
                node: name.clone(),
                gpu,
                job: j.job,
                uid: j.uid,
                user: super::user(j.uid),
                mode: j.mode.clone(),
                phase: serde_json::to_value(j.phase)
                    .ok()
                    .and_then(|p| p.as_str().map(str::to_string))
                    .unwrap_or_default(),
                marked: gpu.is_some_and(|g| j.marked.contains(&g)),
                state: SlurmState(state.clone()),
            });
        }
        if state.live() == Some(false) {
            notes.push(format!(
                "{name}: job {} is {} in Slurm but its journal is on the node \
                 (published {}): a leftover, or a record not yet updated; on {name}: \
                 `colloc status`, then `colloc restore --job {}`",
                j.job,
                state.word(),
                when(rec.at),
                j.job
            ));
        }
        if !j.marked.is_empty() {
            notes.push(format!(
                "{name}: GPU(s) {:?} MARKED by job {}: something still holds its MIG \
                 instances; on {name}: `colloc status` says what, then `colloc \
                 restore --job {}`",
                j.marked, j.job, j.job
            ));
        }
    }
}

/// The cluster view's table, its builds and notes.
pub struct Text;

impl Exporter<ClusterStatus> for Text {
    fn name(&self) -> &'static str {
        "text"
    }

    fn render(&self, c: &ClusterStatus) -> anyhow::Result<String> {
        let mut t = String::new();
        let header = [
            "NODE", "STATE", "GPU", "JOB", "USER", "MODE", "PHASE", "SLURM",
        ];
        // A node's Slurm state (the last entry of a name, as Slurm listed it).
        let node_state = |name: &str| {
            c.nodes
                .iter()
                .rev()
                .find(|n| n.name == name)
                .map(|n| n.state.clone())
                .unwrap_or_default()
        };
        let cells: Vec<[String; 8]> = c
            .rows
            .iter()
            .map(|r| {
                [
                    r.node.clone(),
                    node_state(&r.node),
                    r.gpu.map_or("-".into(), |g| {
                        format!("{g}{}", if r.marked { "!" } else { "" })
                    }),
                    r.job.to_string(),
                    r.user.clone(),
                    r.mode.clone(),
                    r.phase.clone(),
                    r.state.0.word().to_string(),
                ]
            })
            .collect();
        if cells.is_empty() {
            let _ = writeln!(t, "no colloc jobs on the nodes that publish a record");
        } else {
            table(&mut t, &header, &cells);
            if c.rows.iter().any(|r| r.marked) {
                let _ = writeln!(t, "(GPU n! = marked)");
            }
        }
        for b in &c.builds {
            let _ = writeln!(
                t,
                "plugin build {} ({}): {}",
                b.build,
                b.by,
                b.nodes.join(", ")
            );
        }
        for n in &c.notes {
            let _ = writeln!(t, "note: {n}");
        }
        Ok(colloc_results::text::escape_lines(&t).into_owned())
    }
}

/// Columns as wide as their widest cell, two spaces apart, no trailing blanks.
fn table(t: &mut String, header: &[&str; 8], cells: &[[String; 8]]) {
    let mut width = header.map(str::len);
    for c in cells {
        for (w, v) in width.iter_mut().zip(c) {
            *w = (*w).max(v.len());
        }
    }
    let line = |t: &mut String, c: &[&str]| {
        let s: Vec<String> = c
            .iter()
            .zip(width)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        let _ = writeln!(t, "{}", s.join("  ").trim_end());
    };
    line(t, header);
    for c in cells {
        line(t, &c.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

/// A record's time, as local `YYYY-MM-DD HH:MM:SS`.
pub(super) fn when(at: u64) -> String {
    let Ok(t) = libc::time_t::try_from(at) else {
        return at.to_string();
    };
    // SAFETY: localtime_r reads `t` and fills the zeroed `tm` passed by pointer.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return at.to_string();
        }
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}
