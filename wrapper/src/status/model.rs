//! This node's status as one typed model (issue 37): what `colloc status` could read of
//! the GPUs, their MIG instances, the journals with what Slurm says of each job, the
//! leftovers and `run_dir`, read once and printed by every format (`status::FORMATS`).
//!
//! Its `Serialize` is the `--json` contract monitoring reads: the field names, `null`
//! for a part that could not be read (with an `…error` field beside it) and fields that
//! are missing where they do not apply, as they have always been. Fields only the text
//! says (why NVML failed, the Slurm error on its own, run_dir's lines) are
//! `#[serde(skip)]`.

use std::collections::BTreeMap;

use colloc_core::config::Config;
use colloc_core::gpu::{GpuControl, GpuHold, GpuInfo};
use colloc_core::holders::DeviceUser;
use colloc_core::journal::{self, Journal, JournalError, Phase};
use colloc_core::nvml::NvmlGpus;
use colloc_core::runroom::Room;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::live::{self, LiveRead, Speaker};
use crate::slurm::{self, JobState};

/// What `colloc status` says of an instance list it may not read.
pub const NEEDS_ROOT: &str = "needs root (NVML_ERROR_NO_PERMISSION)";

/// The node's status.
#[derive(Debug, Serialize)]
pub struct NodeStatus {
    /// The node's name.
    pub node: Option<String>,
    /// This colloc's version.
    pub colloc_version: &'static str,
    /// This colloc's build id.
    pub colloc_build: Option<String>,
    /// The GPUs; `None` where NVML could not be opened or asked (`gpus_error` says why).
    pub gpus: Option<Vec<GpuStatus>>,
    /// Why there is no GPU list.
    #[serde(skip)]
    pub gpus_error: Option<GpusError>,
    /// The journals, in `state_dir`'s order; the JSON lists the readable ones.
    #[serde(serialize_with = "readable_journals")]
    pub journals: Vec<JournalEntry>,
    /// Why the journals could not be listed (`needs root …` is no error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journals_error: Option<String>,
    /// Why Slurm could not say which jobs run.
    #[serde(skip)]
    pub slurm_error: Option<String>,
    /// Trees earlier epilogs could not remove; `None` where they cannot be listed.
    pub leftovers: Option<Vec<String>>,
    /// Why the leftovers cannot be listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leftovers_error: Option<String>,
    /// `run_dir`'s room; `None` where it cannot be opened.
    pub run_dir: Option<Room>,
    /// `run_dir`'s room as core says it in lines (they name the configured path).
    #[serde(skip)]
    pub run_dir_lines: Vec<String>,
    /// Processes with NVIDIA device files open, where a journal marks a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_users: Option<Vec<DeviceUser>>,
    /// The runs the node's `colloc run`s are running now, read from their sockets
    /// (issue 38); in JSON only where there are any (or sockets were refused).
    #[serde(skip_serializing_if = "LiveRead::is_empty")]
    pub live: LiveRead,
    /// Everything that could not be read, `; `-joined; the exit status is 1 with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why there is no GPU list.
#[derive(Debug)]
pub enum GpusError {
    /// NVML could not be opened.
    Unavailable(String),
    /// NVML could not list the GPUs.
    Unreadable(String),
}

/// One GPU.
#[derive(Debug, Serialize)]
pub struct GpuStatus {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Its name, as NVML says it.
    pub name: String,
    /// Its memory in bytes, as NVML says it (the metrics say it; the JSON never did).
    #[serde(skip)]
    pub memory_total: u64,
    /// MIG mode on now.
    pub mig_mode: bool,
    /// The MIG mode after the next reset; `None`: no MIG on this GPU.
    pub mig_mode_pending: Option<bool>,
    /// Its MIG instances, or why they cannot be listed.
    #[serde(flatten)]
    pub instances: Instances,
    /// Processes on it.
    pub processes: usize,
    /// Jobs whose restore left it marked.
    pub marked_by: Vec<u32>,
    /// The job kinds it serves now (issue 34).
    pub serves: Vec<&'static str>,
    /// What the other kinds meet there; empty when it serves all.
    pub serves_note: String,
}

impl GpuStatus {
    /// `on`, `off` or `unsupported`, and whether a change is pending.
    pub fn mig_words(&self) -> (&'static str, bool) {
        match self.mig_mode_pending {
            None => ("unsupported", false),
            Some(p) => (if self.mig_mode { "on" } else { "off" }, p != self.mig_mode),
        }
    }
}

/// A GPU's MIG instances as colloc could read them. In JSON: `instances` (a list, or
/// `null`), with `instances_error` and `mig_devices` where it applies.
#[derive(Debug)]
pub enum Instances {
    /// The instances (none with MIG off).
    Listed(Vec<InstanceStatus>),
    /// Listing needs privilege (NVML_ERROR_NO_PERMISSION): the MIG devices anyone sees;
    /// `refused_to_root`: root was refused, so mig jobs are refused here (issue 24), why.
    NeedsRoot {
        /// The MIG devices.
        devices: Vec<MigDevice>,
        /// Why root's refusal matters.
        refused_to_root: Option<String>,
    },
    /// Another NVML failure.
    Failed(String),
}

impl Instances {
    /// Whether this is one of the node status's errors.
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            Instances::Failed(_)
                | Instances::NeedsRoot {
                    refused_to_root: Some(_),
                    ..
                }
        )
    }
}

impl Serialize for Instances {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            Instances::Listed(list) => m.serialize_entry("instances", list)?,
            Instances::NeedsRoot { devices, .. } => {
                m.serialize_entry("instances", &())?;
                m.serialize_entry("instances_error", NEEDS_ROOT)?;
                m.serialize_entry("mig_devices", devices)?;
            }
            Instances::Failed(e) => {
                m.serialize_entry("instances", &())?;
                m.serialize_entry("instances_error", e)?;
            }
        }
        m.end()
    }
}

/// A MIG instance.
#[derive(Debug, Serialize)]
pub struct InstanceStatus {
    /// Its profile's name.
    pub profile: String,
    /// Its `MIG-…` UUID, where it has a compute instance.
    pub uuid: Option<String>,
    /// First memory slot.
    pub start: u32,
    /// Memory slots.
    pub size: u32,
    /// GPU instance id.
    pub gi_id: u32,
}

/// A MIG device anyone may see.
#[derive(Debug, Serialize)]
pub struct MigDevice {
    /// GPU instance id.
    pub gi_id: u32,
    /// Compute instance id.
    pub ci_id: u32,
    /// Its `MIG-…` UUID.
    pub uuid: String,
}

/// A journal in `state_dir`.
#[derive(Debug)]
pub enum JournalEntry {
    /// One that could be read.
    Read(JournalStatus),
    /// One that could not, and why.
    Unreadable(String),
}

/// A readable journal, with what Slurm says of its job.
#[derive(Debug, Serialize)]
pub struct JournalStatus {
    /// The Slurm job.
    pub job: u32,
    /// Its user's uid.
    pub uid: u32,
    /// Its user's name, where the uid has one.
    pub user: Option<String>,
    /// What Slurm says of the job: `job_state`, `running`.
    #[serde(flatten)]
    pub state: SlurmState,
    /// Its GPUs (NVML indexes).
    pub gpus: Vec<u32>,
    /// Its mode, as asked.
    pub mode: String,
    /// How far it got.
    pub phase: Phase,
    /// Its MPS daemons' pipe directories.
    pub mps: Vec<String>,
    /// Its MPS daemons' devices (`CUDA_VISIBLE_DEVICES`: GPU or MIG UUIDs), one entry per
    /// daemon, in `mps`'s order (the metrics say it; the JSON never did).
    #[serde(skip)]
    pub mps_devices: Vec<String>,
    /// What holds the GPUs its restore could not finish.
    pub held: Vec<GpuHold>,
}

impl JournalStatus {
    /// The user's name, else `uid N`.
    pub fn user_text(&self) -> String {
        self.user
            .clone()
            .unwrap_or_else(|| format!("uid {}", self.uid))
    }
}

/// A job's Slurm state; in JSON `job_state` (Slurm's word, `GONE` or `unknown`) and
/// `running` (`null` where Slurm could not be asked).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmState(pub JobState);

impl Serialize for SlurmState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("job_state", self.0.word())?;
        m.serialize_entry("running", &self.0.live())?;
        m.end()
    }
}

fn readable_journals<S: Serializer>(list: &[JournalEntry], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(None)?;
    for j in list {
        if let JournalEntry::Read(j) = j {
            seq.serialize_element(j)?;
        }
    }
    seq.end()
}

impl NodeStatus {
    /// Read this node's status. Never fails: a part that cannot be read is said in it.
    pub fn read(cfg: &Config, build: Option<String>) -> NodeStatus {
        // Everything that could not be read, in the order it is found.
        let mut errors: Vec<String> = Vec::new();
        let (journals, journals_error) = read_journals(cfg, &mut errors);
        // GPUs a restore left marked, by UUID: the job and what holds them.
        let marked: Vec<(u32, &GpuHold)> = journals
            .iter()
            .flatten()
            .flat_map(|j| j.held.iter().map(move |h| (j.job, h)))
            .collect();
        let (gpus, gpus_error) = match NvmlGpus::open(&cfg.nvml_library) {
            Ok(ctl) => match ctl.gpus() {
                Ok(list) => (
                    Some(read_gpus(cfg, &ctl, &list, &marked, &mut errors)),
                    None,
                ),
                Err(e) => {
                    errors.push(format!("GPUs: {e}"));
                    (None, Some(GpusError::Unreadable(e.to_string())))
                }
            },
            Err(e) => {
                errors.push(format!("GPUs: {e}"));
                (None, Some(GpusError::Unavailable(e.to_string())))
            }
        };
        let ids: Vec<u32> = journals.iter().flatten().map(|j| j.job).collect();
        let states = slurm::job_states(&ids);
        let device_users = (!marked.is_empty()).then(colloc_core::holders::nvidia_device_users);
        let journals = journal_entries(&journals, &states, &mut errors);
        let slurm_error = states.values().find_map(|s| match s {
            JobState::Unknown(why) => Some(why.clone()),
            _ => None,
        });
        if let Some(why) = &slurm_error {
            errors.push(format!("Slurm: {why}"));
        }
        let live = live::read(&speakers(&journals, gpus.as_deref()));
        let (leftovers, leftovers_error) = read_leftovers(cfg, &mut errors);
        let run_dir = colloc_core::runroom::room(cfg).ok();
        let run_dir_lines = run_dir.as_ref().map(|r| r.lines(cfg)).unwrap_or_default();
        errors.extend(run_dir.as_ref().and_then(|r| r.cannot_serve.clone()));
        NodeStatus {
            node: colloc_core::publish::node_name(),
            colloc_version: env!("CARGO_PKG_VERSION"),
            colloc_build: build,
            gpus,
            gpus_error,
            journals,
            journals_error,
            slurm_error,
            leftovers: leftovers_error.is_none().then_some(leftovers),
            leftovers_error,
            run_dir,
            run_dir_lines,
            device_users,
            live,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        }
    }

    /// Whether something other than the leftovers and `run_dir` could not be read.
    pub fn missed_gpus_or_journals(&self) -> bool {
        self.gpus_error.is_some()
            || self.gpus.iter().flatten().any(|g| g.instances.is_error())
            || self
                .journals
                .iter()
                .any(|j| matches!(j, JournalEntry::Unreadable(_)))
            || self.slurm_error.is_some()
    }

    /// The readable journals.
    pub fn readable(&self) -> impl Iterator<Item = &JournalStatus> {
        self.journals.iter().filter_map(|j| match j {
            JournalEntry::Read(j) => Some(j),
            JournalEntry::Unreadable(_) => None,
        })
    }
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

/// Each journal with its job's Slurm state.
/// The jobs whose `colloc run`s may speak for them: every job a journal holds GPUs for
/// here that Slurm does not say has ended, with its user and its devices (its GPUs' and
/// their MIG instances' UUIDs, its MPS daemons' devices).
fn speakers(journals: &[JournalEntry], gpus: Option<&[GpuStatus]>) -> Vec<Speaker> {
    journals
        .iter()
        .filter_map(|j| match j {
            JournalEntry::Read(j) if j.state.0.live() != Some(false) => Some(j),
            _ => None,
        })
        .map(|j| {
            let mut devices = BTreeMap::new();
            let mut add = |name: &str, uuid: &str| {
                devices.insert(name.to_string(), uuid.to_string());
            };
            for d in j
                .mps_devices
                .iter()
                .flat_map(|d| d.split(','))
                .map(str::trim)
            {
                if !d.is_empty() {
                    add(d, d);
                }
            }
            for g in gpus
                .unwrap_or_default()
                .iter()
                .filter(|g| j.gpus.contains(&g.index))
            {
                add(&g.uuid, &g.uuid);
                match &g.instances {
                    Instances::Listed(l) => {
                        for u in l.iter().filter_map(|i| i.uuid.as_deref()) {
                            add(u, u);
                        }
                    }
                    Instances::NeedsRoot { devices: d, .. } => {
                        for m in d {
                            add(&m.uuid, &m.uuid);
                        }
                    }
                    Instances::Failed(_) => {}
                }
            }
            Speaker {
                job: j.job,
                uid: j.uid,
                devices,
            }
        })
        .collect()
}

fn journal_entries(
    journals: &[Result<Journal, JournalError>],
    states: &BTreeMap<u32, JobState>,
    errors: &mut Vec<String>,
) -> Vec<JournalEntry> {
    journals
        .iter()
        .map(|j| match j {
            Ok(j) => JournalEntry::Read(JournalStatus {
                job: j.job,
                uid: j.uid,
                user: colloc_core::sys::user_name(j.uid),
                state: SlurmState(
                    states
                        .get(&j.job)
                        .cloned()
                        .unwrap_or(JobState::Unknown("not asked".into())),
                ),
                gpus: j.gpu_indexes(),
                mode: j.mode.clone(),
                phase: j.phase,
                mps: j
                    .mps
                    .iter()
                    .map(|d| d.pipe_dir.display().to_string())
                    .collect(),
                mps_devices: j.mps.iter().map(|d| d.devices.clone()).collect(),
                held: j.held.clone(),
            }),
            Err(e) => {
                errors.push(format!("journal: {e}"));
                JournalEntry::Unreadable(e.to_string())
            }
        })
        .collect()
}

/// Trees earlier epilogs could not remove and moved to run_dir/.leftovers, or why they
/// cannot be listed.
fn read_leftovers(cfg: &Config, errors: &mut Vec<String>) -> (Vec<String>, Option<String>) {
    match colloc_core::rundir::leftovers(cfg) {
        Ok(list) => (list.iter().map(|p| p.display().to_string()).collect(), None),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => (
            Vec::new(),
            Some(format!(
                "needs root to read {}",
                cfg.run_dir.join(colloc_core::rundir::LEFTOVERS).display()
            )),
        ),
        Err(e) => {
            errors.push(format!("leftovers: {e}"));
            (Vec::new(), Some(e.to_string()))
        }
    }
}

/// What colloc can read of one GPU's MIG instances.
fn read_instances(cfg: &Config, ctl: &NvmlGpus, gpu: u32) -> Instances {
    match ctl.instances(gpu) {
        Ok(list) => Instances::Listed(
            list.into_iter()
                .map(|i| InstanceStatus {
                    profile: i.profile,
                    uuid: i.uuid,
                    start: i.placement.start,
                    size: i.placement.size,
                    gi_id: i.gi_id,
                })
                .collect(),
        ),
        Err(e) if e.is_no_permission() => Instances::NeedsRoot {
            devices: ctl
                .mig_device_list(gpu)
                .unwrap_or_default()
                .into_iter()
                .map(|(gi_id, ci_id, uuid)| MigDevice { gi_id, ci_id, uuid })
                .collect(),
            // Root refused: the node cannot run mig jobs (issue 24); say why.
            refused_to_root: (colloc_core::sys::euid() == 0).then(|| {
                format!(
                    "instances: refused to root (NVML_ERROR_NO_PERMISSION): mig jobs are \
                     refused on this node; {}",
                    colloc_core::devfiles::no_permission_hint(cfg)
                )
            }),
        },
        Err(e) => Instances::Failed(e.to_string()),
    }
}

/// Each GPU: its MIG mode, instances, processes, the jobs that marked it, what it serves.
fn read_gpus(
    cfg: &Config,
    ctl: &NvmlGpus,
    list: &[GpuInfo],
    marked: &[(u32, &GpuHold)],
    errors: &mut Vec<String>,
) -> Vec<GpuStatus> {
    list.iter()
        .map(|gi| {
            let instances = read_instances(cfg, ctl, gi.index);
            match &instances {
                Instances::NeedsRoot {
                    refused_to_root: Some(why),
                    ..
                } => errors.push(format!("GPU {}: {why}", gi.index)),
                Instances::Failed(e) => errors.push(format!("GPU {} instances: {e}", gi.index)),
                _ => {}
            }
            let fit = colloc_core::reconfig::mig_fit::fit(cfg, gi);
            GpuStatus {
                index: gi.index,
                uuid: gi.uuid.clone(),
                name: gi.name.clone(),
                memory_total: gi.memory_total,
                mig_mode: gi.mig_mode.is_some_and(|m| m.current),
                mig_mode_pending: gi.mig_mode.map(|m| m.pending),
                instances,
                processes: ctl.processes(gi.index).map(|p| p.len()).unwrap_or(0),
                marked_by: marked
                    .iter()
                    .filter(|(_, h)| h.uuid == gi.uuid)
                    .map(|(job, _)| *job)
                    .collect(),
                serves: fit.serves,
                serves_note: fit.note,
            }
        })
        .collect()
}
