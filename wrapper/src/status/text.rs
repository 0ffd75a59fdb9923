//! `colloc status`'s text: the node's status ([`NodeStatus`]) as lines for an admin,
//! with what to do where something is marked or left over. Process names (anyone's),
//! Slurm's messages and paths reach no terminal raw.

use std::fmt::Write as _;

use colloc_core::gpu::HoldReason;

use super::model::{GpuStatus, GpusError, Instances, JournalEntry, JournalStatus, NodeStatus};
use crate::slurm::JobState;
use colloc_results::output::Exporter;

/// The text format, `colloc status`'s default.
pub struct Text;

impl Exporter<NodeStatus> for Text {
    fn name(&self) -> &'static str {
        "text"
    }

    fn render(&self, s: &NodeStatus) -> anyhow::Result<String> {
        let mut t = String::new();
        match (&s.gpus, &s.gpus_error) {
            (_, Some(GpusError::Unreadable(e))) => {
                let _ = writeln!(t, "GPUs: unreadable: {e}");
            }
            (_, Some(GpusError::Unavailable(e))) => {
                let _ = writeln!(t, "GPUs: unavailable: {e}");
            }
            (Some(gpus), None) => {
                for g in gpus {
                    gpu(&mut t, g);
                }
            }
            (None, None) => {}
        }
        for j in &s.journals {
            match j {
                JournalEntry::Read(j) => {
                    journal(&mut t, j);
                    if let Some(r) = s.live.jobs.iter().find(|r| r.job == j.job) {
                        runs(&mut t, r);
                    }
                }
                JournalEntry::Unreadable(e) => {
                    let _ = writeln!(
                        t,
                        "unreadable journal: {e} (`colloc restore --all` moves it aside)"
                    );
                }
            }
        }
        if let Some(why) = &s.slurm_error {
            let _ = writeln!(t, "Slurm could not say which jobs run: {why}");
        }
        let none_read = s.readable().next().is_none();
        match &s.journals_error {
            Some(e) => {
                let _ = writeln!(t, "journals: {e}");
            }
            None if none_read && !s.missed_gpus_or_journals() => {
                let _ = writeln!(t, "no colloc journals on this node");
            }
            None if none_read => {
                let _ = writeln!(t, "no readable colloc journals on this node");
            }
            None => {}
        }
        for l in s.leftovers.iter().flatten() {
            let _ = writeln!(
                t,
                "LEFTOVER FILES: {l} could not be removed after its job; `colloc restore --all` \
                 tries again (and so does every prolog)"
            );
        }
        if let Some(e) = &s.leftovers_error {
            let _ = writeln!(t, "leftovers: {e}");
        }
        for l in &s.run_dir_lines {
            let _ = writeln!(t, "{l}");
        }
        holders(&mut t, s);
        Ok(colloc_results::text::escape_lines(&t).into_owned())
    }
}

/// A GPU's lines: MIG mode, instances, processes, what it serves, who marked it.
fn gpu(t: &mut String, g: &GpuStatus) {
    let what = match &g.instances {
        Instances::Listed(list) => format!("{} instance(s)", list.len()),
        Instances::NeedsRoot {
            refused_to_root: Some(why),
            ..
        } => why.clone(),
        Instances::NeedsRoot { devices, .. } => format!(
            "instances: {}, {} MIG device(s) visible",
            super::model::NEEDS_ROOT,
            devices.len()
        ),
        Instances::Failed(e) => format!("instances unreadable: {e}"),
    };
    let (mig, pending) = g.mig_words();
    let _ = writeln!(
        t,
        "GPU {} {} {}: MIG {mig}{}, {what}, {} process(es)",
        g.index,
        g.name,
        g.uuid,
        if pending { " (change pending)" } else { "" },
        g.processes
    );
    let note = if g.serves_note.is_empty() {
        String::new()
    } else {
        format!(" ({})", g.serves_note)
    };
    let _ = writeln!(t, "  serves: {}{note}", g.serves.join(", "));
    match &g.instances {
        Instances::Listed(list) => {
            for i in list {
                let _ = writeln!(
                    t,
                    "  {:<12} start {} size {}  GI {}  {}",
                    i.profile,
                    i.start,
                    i.size,
                    i.gi_id,
                    i.uuid.as_deref().unwrap_or("-")
                );
            }
        }
        Instances::NeedsRoot { devices, .. } => {
            for d in devices {
                let _ = writeln!(t, "  MIG device {}  GI {} CI {}", d.uuid, d.gi_id, d.ci_id);
            }
        }
        Instances::Failed(_) => {}
    }
    for job in &g.marked_by {
        let _ = writeln!(
            t,
            "  MARKED by job {job}: later jobs are refused this GPU until \
             `colloc restore --job {job}` succeeds"
        );
    }
}

/// A journal's lines: its job's state, what it holds, what is left over.
fn journal(t: &mut String, j: &JournalStatus) {
    let _ = writeln!(
        t,
        "job {} of {} ({}): {} on GPU(s) {:?}, {:?}{}",
        j.job,
        j.user_text(),
        state_text(&j.state.0),
        j.mode,
        j.gpus,
        j.phase,
        j.mps
            .iter()
            .map(|d| format!(", MPS daemon in {d}"))
            .collect::<String>()
    );
    if j.state.0.live() == Some(false) {
        let _ = writeln!(
            t,
            "  LEFTOVER: the job no longer runs but its journal is here; \
             `colloc restore --job {}` undoes what it recorded",
            j.job
        );
    }
    for h in &j.held {
        let _ = writeln!(
            t,
            "  MARKED: {}. Stop it, then run `colloc restore --job {}`.",
            h.describe(),
            j.job
        );
    }
}

/// What a job's `colloc run` says it is running: one line, each run with its last
/// throughput (the whole text is escaped for the terminal at the end).
fn runs(t: &mut String, r: &super::live::JobRuns) {
    let list: Vec<String> = r
        .runs
        .iter()
        .map(|x| match (x.throughput, &x.unit) {
            (Some(v), Some(u)) => format!("{} {v:.1} {u}", x.name),
            _ => x.name.clone(),
        })
        .collect();
    let _ = writeln!(
        t,
        "  running {} run(s) (colloc run): {}",
        r.runs.len(),
        list.join(", ")
    );
}

/// Who may hold a marked GPU: processes with NVIDIA device files open (DCGM's
/// nv-hostengine, dcgm-exporter, a process with a leftover NVML handle), said where a GPU
/// is marked in use.
fn holders(t: &mut String, s: &NodeStatus) {
    let in_use = s
        .readable()
        .flat_map(|j| &j.held)
        .any(|h| h.reason == HoldReason::InUse);
    if !in_use {
        return;
    }
    let users = s.device_users.as_deref().unwrap_or_default();
    let _ = writeln!(
        t,
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

fn state_text(s: &JobState) -> String {
    match s {
        JobState::Known(w) => w.clone(),
        JobState::NotInQueue => "GONE: Slurm no longer knows it".into(),
        JobState::Unknown(_) => "Slurm state unknown".into(),
    }
}
