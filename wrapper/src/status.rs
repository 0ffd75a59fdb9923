//! `colloc status`: this node's GPUs, instances, MPS daemons and journals, with what
//! Slurm says of each journal's job; and `colloc status --cluster`: every node's colloc
//! state as its prolog and epilog published it (see `colloc_core::publish`), merged with
//! Slurm's queue into one table of node × GPU × job × mode.
//!
//! Monitoring reads `--json`. Neither view ever says "nothing" where it could not look:
//! a part that could not be read is `null` with an `error`, and the exit status is 1.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::journal::{Journal, JournalError};
use colloc_core::nvml::NvmlGpus;
use colloc_core::publish::NodeRecord;
use colloc_core::{buildid, journal};
use serde_json::{json, Value};

use crate::slurm::{self, JobState, NodeFilter};
use crate::Global;

/// `colloc status [--json] [--cluster [--nodes LIST | --partition NAME]]`
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print JSON (for monitoring: a part that could not be read is null, with "error").
    #[arg(long)]
    json: bool,
    /// Every node's colloc state as its prolog and epilog published it in the Slurm node
    /// comment, with what Slurm says of each job: one row per node, GPU and job.
    #[arg(long)]
    cluster: bool,
    /// With --cluster: only these nodes (a Slurm node list, e.g. gpu[01-04]).
    #[arg(
        short = 'w',
        long,
        value_name = "LIST",
        requires = "cluster",
        conflicts_with = "partition"
    )]
    nodes: Option<String>,
    /// With --cluster: only the nodes of this partition.
    #[arg(short = 'p', long, value_name = "NAME", requires = "cluster")]
    partition: Option<String>,
}

/// `colloc status`.
pub fn main(a: StatusArgs, g: &Global) -> anyhow::Result<ExitCode> {
    if a.cluster {
        return cluster(&a);
    }
    let cfg = crate::admin::config_or_default(g)?;
    node(&cfg, a.json)
}

/// What `colloc status` could read about one GPU's MIG instances.
enum InstanceView {
    /// The instances (empty with MIG off).
    Listed(Vec<colloc_core::gpu::Instance>),
    /// Listing needs privilege (NVML_ERROR_NO_PERMISSION); the MIG devices anyone sees.
    NeedsRoot(Vec<(u32, u32, String)>),
    /// Another NVML failure.
    Failed(String),
}

fn instance_view(ctl: &NvmlGpus, gpu: u32) -> InstanceView {
    match ctl.instances(gpu) {
        Ok(list) => InstanceView::Listed(list),
        Err(e) if e.is_no_permission() => {
            InstanceView::NeedsRoot(ctl.mig_device_list(gpu).unwrap_or_default())
        }
        Err(e) => InstanceView::Failed(e.to_string()),
    }
}

const NEEDS_ROOT: &str = "needs root (NVML_ERROR_NO_PERMISSION)";

/// A user's name, else `uid N`.
fn user(uid: u32) -> String {
    colloc_core::sys::user_name(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// This node's status.
fn node(cfg: &Config, as_json: bool) -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    // Everything that could not be read: the exit status is 1 and `error` names them.
    let mut errors: Vec<String> = Vec::new();
    let (journals, journals_error) = read_journals(cfg, &mut errors);
    // GPUs a restore left marked, by UUID: the job and what holds them.
    let marked: Vec<(u32, &colloc_core::gpu::GpuHold)> = journals
        .iter()
        .flatten()
        .flat_map(|j| j.held.iter().map(move |h| (j.job, h)))
        .collect();
    let gpus_json = match NvmlGpus::open(&cfg.nvml_library) {
        Ok(ctl) => match ctl.gpus() {
            Ok(list) => Some(gpu_lines(cfg, &ctl, &list, &marked, &mut text, &mut errors)),
            Err(e) => {
                let _ = writeln!(text, "GPUs: unreadable: {e}");
                errors.push(format!("GPUs: {e}"));
                None
            }
        },
        Err(e) => {
            // Once, here: not also as a log warning.
            let _ = writeln!(text, "GPUs: unavailable: {e}");
            errors.push(format!("GPUs: {e}"));
            None
        }
    };
    let ids: Vec<u32> = journals.iter().flatten().map(|j| j.job).collect();
    let states = slurm::job_states(&ids);
    let journals_json = journal_lines(&journals, &states, &mut text, &mut errors);
    let slurm_error = states.values().find_map(|s| match s {
        JobState::Unknown(why) => Some(why.clone()),
        _ => None,
    });
    if let Some(why) = &slurm_error {
        let _ = writeln!(text, "Slurm could not say which jobs run: {why}");
        errors.push(format!("Slurm: {why}"));
    }
    match &journals_error {
        Some(e) => {
            let _ = writeln!(text, "journals: {e}");
        }
        None if journals_json.is_empty() && errors.is_empty() => {
            let _ = writeln!(text, "no colloc journals on this node");
        }
        None if journals_json.is_empty() => {
            let _ = writeln!(text, "no readable colloc journals on this node");
        }
        None => {}
    }
    let (leftovers, leftovers_error) = leftover_lines(cfg, &mut text, &mut errors);
    let room = rundir::lines(cfg, &mut text, &mut errors);
    let users = holder_lines(&marked, &mut text);
    if as_json {
        let mut v = json!({
            "node": colloc_core::publish::node_name(),
            "colloc_version": env!("CARGO_PKG_VERSION"),
            "colloc_build": own_build_id(),
            "gpus": gpus_json,
            "journals": journals_json,
        });
        if !errors.is_empty() {
            v["error"] = json!(errors.join("; "));
        }
        if let Some(e) = &journals_error {
            v["journals_error"] = json!(e);
        }
        v["leftovers"] = if leftovers_error.is_some() {
            Value::Null
        } else {
            json!(leftovers)
        };
        if let Some(e) = &leftovers_error {
            v["leftovers_error"] = json!(e);
        }
        v["run_dir"] = json!(room);
        if !marked.is_empty() {
            v["device_users"] = json!(users);
        }
        outln!(
            "{}",
            crate::engine::text::json_for_terminal(&serde_json::to_string_pretty(&v)?)
        );
    } else {
        // Process names (anyone's), Slurm's messages and paths reach no terminal raw.
        out!("{}", crate::engine::text::escape_lines(&text));
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The journals on this node, or why they cannot be read (`needs root …` is no error).
fn read_journals(
    cfg: &Config,
    errors: &mut Vec<String>,
) -> (Vec<Result<Journal, JournalError>>, Option<String>) {
    match journal::list(cfg) {
        Ok(list) => (list, None),
        Err(JournalError::Io { source, path, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            (
                Vec::new(),
                Some(format!("needs root to read {}", path.display())),
            )
        }
        Err(e) => {
            errors.push(format!("journals: {e}"));
            (Vec::new(), Some(e.to_string()))
        }
    }
}

/// A line per journal (its job's state, what it holds, what is left over), into
/// `text`; their JSON.
fn journal_lines(
    journals: &[Result<Journal, JournalError>],
    states: &BTreeMap<u32, JobState>,
    text: &mut String,
    errors: &mut Vec<String>,
) -> Vec<Value> {
    let mut journals_json = Vec::new();
    for j in journals {
        match j {
            Ok(j) => {
                let state = states
                    .get(&j.job)
                    .cloned()
                    .unwrap_or(JobState::Unknown("not asked".into()));
                let name = user(j.uid);
                let _ = writeln!(
                    text,
                    "job {} of {name} ({}): {} on GPU(s) {:?}, {:?}{}",
                    j.job,
                    state_text(&state),
                    j.mode,
                    j.gpu_indexes(),
                    j.phase,
                    j.mps
                        .iter()
                        .map(|d| format!(", MPS daemon in {}", d.pipe_dir.display()))
                        .collect::<String>()
                );
                if state.live() == Some(false) {
                    let _ = writeln!(
                        text,
                        "  LEFTOVER: the job no longer runs but its journal is here; \
                         `colloc restore --job {}` undoes what it recorded",
                        j.job
                    );
                }
                for h in &j.held {
                    let _ = writeln!(
                        text,
                        "  MARKED: {}. Stop it, then run `colloc restore --job {}`.",
                        h.describe(),
                        j.job
                    );
                }
                journals_json.push(json!({
                    "job": j.job, "uid": j.uid, "user": colloc_core::sys::user_name(j.uid),
                    "job_state": state.word(), "running": state.live(),
                    "gpus": j.gpu_indexes(), "mode": j.mode, "phase": j.phase,
                    "mps": j.mps.iter().map(|d| d.pipe_dir.display().to_string()).collect::<Vec<_>>(),
                    "held": j.held,
                }));
            }
            Err(e) => {
                let _ = writeln!(
                    text,
                    "unreadable journal: {e} (`colloc restore --all` moves it aside)"
                );
                errors.push(format!("journal: {e}"));
            }
        }
    }
    journals_json
}

/// Trees earlier epilogs could not remove and moved to run_dir/.leftovers, a line each
/// into `text`; or why they cannot be listed.
fn leftover_lines(
    cfg: &Config,
    text: &mut String,
    errors: &mut Vec<String>,
) -> (Vec<String>, Option<String>) {
    let mut leftovers_error = None;
    let leftovers: Vec<String> = match colloc_core::rundir::leftovers(cfg) {
        Ok(list) => list.iter().map(|p| p.display().to_string()).collect(),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            leftovers_error = Some(format!(
                "needs root to read {}",
                cfg.run_dir.join(colloc_core::rundir::LEFTOVERS).display()
            ));
            Vec::new()
        }
        Err(e) => {
            errors.push(format!("leftovers: {e}"));
            leftovers_error = Some(e.to_string());
            Vec::new()
        }
    };
    for l in &leftovers {
        let _ = writeln!(
            text,
            "LEFTOVER FILES: {l} could not be removed after its job; `colloc restore --all` \
             tries again (and so does every prolog)"
        );
    }
    if let Some(e) = &leftovers_error {
        let _ = writeln!(text, "leftovers: {e}");
    }
    (leftovers, leftovers_error)
}

/// Who may hold a marked GPU: processes with NVIDIA device files open (DCGM's
/// nv-hostengine, dcgm-exporter, a process with a leftover NVML handle), said in `text`
/// where a GPU is marked in use.
fn holder_lines(
    marked: &[(u32, &colloc_core::gpu::GpuHold)],
    text: &mut String,
) -> Vec<colloc_core::holders::DeviceUser> {
    let users = if marked.is_empty() {
        Vec::new()
    } else {
        colloc_core::holders::nvidia_device_users()
    };
    let in_use = marked
        .iter()
        .any(|(_, h)| h.reason == colloc_core::gpu::HoldReason::InUse);
    if in_use {
        let _ = writeln!(
            text,
            "may hold them: {}; processes with NVIDIA device files open: {}",
            colloc_core::gpu::LIKELY_HOLDERS,
            if users.is_empty() {
                "none seen".to_string()
            } else {
                users
                    .iter()
                    .map(|u| format!("{} ({})", u.pid, u.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
    users
}

fn state_text(s: &JobState) -> String {
    match s {
        JobState::Known(w) => w.clone(),
        JobState::NotInQueue => "GONE: Slurm no longer knows it".into(),
        JobState::Unknown(_) => "Slurm state unknown".into(),
    }
}

/// The GPU lines of the text and their JSON.
fn gpu_lines(
    cfg: &Config,
    ctl: &NvmlGpus,
    list: &[colloc_core::gpu::GpuInfo],
    marked: &[(u32, &colloc_core::gpu::GpuHold)],
    text: &mut String,
    errors: &mut Vec<String>,
) -> Vec<Value> {
    let mut gpus_json = Vec::new();
    for gi in list {
        let view = instance_view(ctl, gi.index);
        let processes = ctl.processes(gi.index).map(|p| p.len()).unwrap_or(0);
        let mig_on = gi.mig_mode.is_some_and(|m| m.current);
        let pending = gi.mig_mode.is_some_and(|m| m.pending != m.current);
        let what = match &view {
            InstanceView::Listed(list) => format!("{} instance(s)", list.len()),
            // Root refused: the node cannot run mig jobs (issue 24); say why.
            InstanceView::NeedsRoot(_) if colloc_core::sys::euid() == 0 => {
                let why = format!(
                    "instances: refused to root (NVML_ERROR_NO_PERMISSION): mig jobs are \
                     refused on this node; {}",
                    colloc_core::devfiles::no_permission_hint(cfg)
                );
                errors.push(format!("GPU {}: {why}", gi.index));
                why
            }
            InstanceView::NeedsRoot(devs) => format!(
                "instances: {NEEDS_ROOT}, {} MIG device(s) visible",
                devs.len()
            ),
            InstanceView::Failed(e) => format!("instances unreadable: {e}"),
        };
        let _ = writeln!(
            text,
            "GPU {} {} {}: MIG {}{}, {what}, {} process(es)",
            gi.index,
            gi.name,
            gi.uuid,
            match gi.mig_mode {
                None => "unsupported",
                Some(_) if mig_on => "on",
                Some(_) => "off",
            },
            if pending { " (change pending)" } else { "" },
            processes
        );
        let fit = serves_line(cfg, gi, text);
        let (instances_json, error_json, devices_json) = match &view {
            InstanceView::Listed(list) => {
                for i in list {
                    let _ = writeln!(
                        text,
                        "  {:<12} start {} size {}  GI {}  {}",
                        i.profile,
                        i.placement.start,
                        i.placement.size,
                        i.gi_id,
                        i.uuid.as_deref().unwrap_or("-")
                    );
                }
                let v: Vec<_> = list
                    .iter()
                    .map(|i| {
                        json!({
                            "profile": i.profile, "uuid": i.uuid,
                            "start": i.placement.start, "size": i.placement.size,
                            "gi_id": i.gi_id,
                        })
                    })
                    .collect();
                (json!(v), None, None)
            }
            InstanceView::NeedsRoot(devs) => {
                for (gi_id, ci_id, uuid) in devs {
                    let _ = writeln!(text, "  MIG device {uuid}  GI {gi_id} CI {ci_id}");
                }
                let d: Vec<_> = devs
                    .iter()
                    .map(|(g, c, u)| json!({"gi_id": g, "ci_id": c, "uuid": u}))
                    .collect();
                (Value::Null, Some(NEEDS_ROOT.to_string()), Some(json!(d)))
            }
            InstanceView::Failed(e) => {
                errors.push(format!("GPU {} instances: {e}", gi.index));
                (Value::Null, Some(e.clone()), None)
            }
        };
        let marked_by: Vec<u32> = marked
            .iter()
            .filter(|(_, h)| h.uuid == gi.uuid)
            .map(|(job, _)| *job)
            .collect();
        for job in &marked_by {
            let _ = writeln!(
                text,
                "  MARKED by job {job}: later jobs are refused this GPU until \
                 `colloc restore --job {job}` succeeds"
            );
        }
        let mut v = json!({
            "index": gi.index, "uuid": gi.uuid, "name": gi.name,
            "mig_mode": mig_on, "mig_mode_pending": gi.mig_mode.map(|m| m.pending),
            "instances": instances_json,
            "processes": processes,
            "marked_by": marked_by,
            "serves": fit.serves, "serves_note": fit.note,
        });
        if let Some(e) = error_json {
            v["instances_error"] = json!(e);
        }
        if let Some(d) = devices_json {
            v["mig_devices"] = d;
        }
        gpus_json.push(v);
    }
    gpus_json
}

/// Which job kinds GPU `gi`'s MIG mode serves (issue 34), as a line of `text`.
fn serves_line(
    cfg: &Config,
    gi: &colloc_core::gpu::GpuInfo,
    text: &mut String,
) -> colloc_core::reconfig::mig_fit::GpuFit {
    let fit = colloc_core::reconfig::mig_fit::fit(cfg, gi);
    let note = if fit.note.is_empty() {
        String::new()
    } else {
        format!(" ({})", fit.note)
    };
    let _ = writeln!(text, "  serves: {}{note}", fit.serves.join(", "));
    fit
}

/// One row of the cluster table: a job on one GPU of one node.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    node: String,
    gpu: Option<u32>,
    job: u32,
    uid: u32,
    user: String,
    mode: String,
    phase: String,
    marked: bool,
    state: JobState,
}

/// A node of the cluster view: its Slurm state and what it published.
struct NodeView {
    info: slurm::NodeInfo,
    record: Option<Result<NodeRecord, String>>,
}

/// `colloc status --cluster`.
fn cluster(a: &StatusArgs) -> anyhow::Result<ExitCode> {
    let filter = NodeFilter {
        nodes: a.nodes.clone(),
        partition: a.partition.clone(),
    };
    let infos = slurm::nodes(&filter)?;
    let views: Vec<NodeView> = infos
        .into_iter()
        .map(|info| {
            let record = info.comment.as_deref().and_then(NodeRecord::decode);
            NodeView { info, record }
        })
        .collect();
    let ids: Vec<u32> = views
        .iter()
        .filter_map(|v| v.record.as_ref()?.as_ref().ok())
        .flat_map(|r| r.jobs.iter().map(|j| j.job))
        .collect();
    let states = slurm::job_states(&ids);
    let report = ClusterReport::new(&views, &states);
    if a.json {
        outln!(
            "{}",
            crate::engine::text::json_for_terminal(&serde_json::to_string_pretty(
                &report.json(&views)
            )?)
        );
    } else {
        out!("{}", crate::engine::text::escape_lines(&report.text()));
    }
    Ok(if report.slurm_error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The merged view: rows, notes, builds.
struct ClusterReport {
    rows: Vec<Row>,
    notes: Vec<String>,
    /// Plugin build → (who published it, nodes).
    builds: BTreeMap<String, (String, Vec<String>)>,
    slurm_error: Option<String>,
    states: BTreeMap<String, String>,
}

impl ClusterReport {
    fn new(views: &[NodeView], states: &BTreeMap<u32, JobState>) -> ClusterReport {
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        let mut builds: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        let mut node_states = BTreeMap::new();
        for v in views {
            let name = &v.info.name;
            node_states.insert(name.clone(), v.info.state.clone());
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
            if rec.unreadable > 0 {
                notes.push(format!(
                    "{name}: {} journal(s) it cannot read: run `colloc status` there",
                    rec.unreadable
                ));
            }
            notes.extend(rundir::note(name, rec));
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
                        user: user(j.uid),
                        mode: j.mode.clone(),
                        phase: serde_json::to_value(j.phase)
                            .ok()
                            .and_then(|p| p.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        marked: gpu.is_some_and(|g| j.marked.contains(&g)),
                        state: state.clone(),
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
        ClusterReport {
            rows,
            notes,
            builds,
            slurm_error,
            states: node_states,
        }
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let header = [
            "NODE", "STATE", "GPU", "JOB", "USER", "MODE", "PHASE", "SLURM",
        ];
        let cells: Vec<[String; 8]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.node.clone(),
                    self.states.get(&r.node).cloned().unwrap_or_default(),
                    r.gpu.map_or("-".into(), |g| {
                        format!("{g}{}", if r.marked { "!" } else { "" })
                    }),
                    r.job.to_string(),
                    r.user.clone(),
                    r.mode.clone(),
                    r.phase.clone(),
                    r.state.word().to_string(),
                ]
            })
            .collect();
        if cells.is_empty() {
            let _ = writeln!(t, "no colloc jobs on the nodes that publish a record");
        } else {
            let mut width = header.map(str::len);
            for c in &cells {
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
            line(&mut t, &header);
            for c in &cells {
                line(&mut t, &c.iter().map(String::as_str).collect::<Vec<_>>());
            }
            if self.rows.iter().any(|r| r.marked) {
                let _ = writeln!(t, "(GPU n! = marked)");
            }
        }
        for (build, (by, nodes)) in &self.builds {
            let _ = writeln!(t, "plugin build {build} ({by}): {}", nodes.join(", "));
        }
        for n in &self.notes {
            let _ = writeln!(t, "note: {n}");
        }
        t
    }

    fn json(&self, views: &[NodeView]) -> Value {
        let nodes: Vec<Value> = views
            .iter()
            .map(|v| {
                let (record, error) = match &v.record {
                    Some(Ok(r)) => (
                        json!({"at": r.at, "by": r.by, "build": r.build,
                                            "unreadable": r.unreadable, "cut": r.cut}),
                        None,
                    ),
                    Some(Err(e)) => (Value::Null, Some(e.clone())),
                    None => (Value::Null, None),
                };
                let mut n = json!({"name": v.info.name, "state": v.info.state, "record": record});
                if let Some(e) = error {
                    n["record_error"] = json!(e);
                }
                n
            })
            .collect();
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "node": r.node, "gpu": r.gpu, "job": r.job, "uid": r.uid, "user": r.user,
                    "mode": r.mode, "phase": r.phase, "marked": r.marked,
                    "job_state": r.state.word(), "running": r.state.live(),
                })
            })
            .collect();
        let builds: Vec<Value> = self
            .builds
            .iter()
            .map(|(b, (by, nodes))| json!({"build": b, "by": by, "nodes": nodes}))
            .collect();
        let mut v = json!({"nodes": nodes, "rows": rows, "builds": builds, "notes": self.notes});
        if let Some(e) = &self.slurm_error {
            v["error"] = json!(format!("Slurm could not say which jobs run: {e}"));
        }
        v
    }
}

/// A record's time, as local `YYYY-MM-DD HH:MM:SS`.
fn when(at: u64) -> String {
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

/// The `colloc` binary's own build id, for `status --json` (which build runs here).
pub fn own_build_id() -> Option<String> {
    std::env::current_exe()
        .ok()
        .and_then(|p| buildid::of_file(&p))
}

mod rundir;
#[cfg(test)]
mod tests;
