//! `colloc status --format openmetrics` (issue 38): the node's status ([`NodeStatus`]) in
//! the OpenMetrics text format, for Prometheus through node_exporter's textfile collector
//! (`--output`, [`super::textfile`]) or any scraper of a file.
//!
//! Every family is a gauge, so the file also reads as the Prometheus text format that
//! node_exporter's textfile collector parses (it knows no `info` or `# UNIT`, and takes
//! `# UNIT` and `# EOF` as comments): `_info` families are gauges of value 1, sizes are
//! `_bytes` with a `# UNIT`, as DCGM 4.x exporters say them. The labels a GPU or MIG
//! instance carries are DCGM's own (`gpu`, `UUID`, `modelName`, `GPU_I_ID`,
//! `GPU_I_PROFILE`), so colloc's series join DCGM's on them.
//!
//! Label sets are bounded (each family's doc says why): no process, path,
//! user or message is ever a label value. Where a reading failed, its value is absent and
//! a `…_readable 0` health gauge says so: never a made-up 0.

use std::fmt::Write as _;

use colloc_core::gpu::HoldReason;
use colloc_core::journal::Phase;

use super::model::{GpusError, Instances, JournalEntry, NodeStatus};
use colloc_results::output::Exporter;

/// The OpenMetrics format.
pub struct OpenMetrics;

impl Exporter<NodeStatus> for OpenMetrics {
    fn name(&self) -> &'static str {
        "openmetrics"
    }

    fn render(&self, s: &NodeStatus) -> anyhow::Result<String> {
        let mut d = Doc::default();
        own(&mut d, s.colloc_version, s.colloc_build.as_deref());
        d.set(&CONFIG_VALID, &[], 1);
        d.set(&STATUS_OK, &[], u64::from(s.error.is_none()));
        gpus(&mut d, s);
        jobs(&mut d, s);
        node_files(&mut d, s);
        runs(&mut d, s);
        Ok(d.render())
    }
}

/// What `--format openmetrics` says when the configuration cannot be read: colloc's build
/// and `colloc_config_valid 0`, so a dashboard sees the node's colloc is broken rather
/// than a file gone stale.
pub fn config_invalid(build: Option<&str>) -> String {
    let mut d = Doc::default();
    own(&mut d, env!("CARGO_PKG_VERSION"), build);
    d.set(&CONFIG_VALID, &[], 0);
    d.render()
}

/// One metric family: what the format says of it. Each family's doc says why its label
/// set is bounded.
#[derive(Debug)]
pub struct Def {
    /// Its name (and its samples' name): `colloc_…`, with the unit as its suffix.
    pub name: &'static str,
    /// Its unit (`# UNIT`), where it has one.
    pub unit: Option<&'static str>,
    /// Its `# HELP`.
    pub help: &'static str,
    /// Its labels, in the order they are printed.
    pub labels: &'static [&'static str],
}

macro_rules! def {
    ($id:ident, $name:literal, $unit:expr, [$($l:literal),*], $help:literal, $bound:literal) => {
        #[doc = $help]
        #[doc = ""]
        #[doc = concat!("Bounded: ", $bound)]
        pub const $id: Def = Def {
            name: $name,
            unit: $unit,
            help: $help,
            labels: &[$($l),*],
        };
    };
}

def!(
    BUILD_INFO,
    "colloc_build_info",
    None,
    ["version", "build"],
    "colloc's version and build id (of the binary that wrote this), value 1.",
    "one series per colloc binary installed."
);
def!(
    CONFIG_VALID,
    "colloc_config_valid",
    None,
    [],
    "1 when colloc.toml could be read and is valid, else 0 (and nothing else is said).",
    "no labels."
);
def!(
    STATUS_OK,
    "colloc_status_ok",
    None,
    [],
    "1 when colloc status exits 0 (all read, run_dir can serve MPS jobs), else 0.",
    "no labels."
);
def!(
    NVML_READABLE,
    "colloc_nvml_readable",
    None,
    [],
    "1 when NVML could be opened and list the GPUs, else 0 (no GPU series then).",
    "no labels."
);
def!(
    NVML_FAILURE,
    "colloc_nvml_failure_info",
    None,
    ["step"],
    "Where NVML failed: step is open (the library) or list (the GPUs), value 1.",
    "step is one of two words."
);
def!(
    GPUS,
    "colloc_gpus",
    None,
    [],
    "The GPUs NVML lists.",
    "no labels."
);
def!(
    GPU_INFO,
    "colloc_gpu_info",
    None,
    ["gpu", "UUID", "modelName"],
    "A GPU: NVML index, UUID and name (DCGM's labels), value 1.",
    "one series per GPU of the node."
);
def!(
    GPU_MEMORY,
    "colloc_gpu_memory_total_bytes",
    Some("bytes"),
    ["gpu", "UUID"],
    "A GPU's memory, as NVML says it.",
    "one series per GPU of the node."
);
def!(
    GPU_MIG_SUPPORTED,
    "colloc_gpu_mig_supported",
    None,
    ["gpu", "UUID"],
    "1 when the GPU has MIG, else 0.",
    "one series per GPU of the node."
);
def!(
    GPU_MIG_MODE,
    "colloc_gpu_mig_mode",
    None,
    ["gpu", "UUID"],
    "1 when MIG mode is on now, else 0 (GPUs with MIG only).",
    "one series per GPU of the node."
);
def!(
    GPU_MIG_PENDING,
    "colloc_gpu_mig_mode_pending",
    None,
    ["gpu", "UUID"],
    "1 when MIG mode will be on after the GPU's next reset, else 0 (GPUs with MIG only).",
    "one series per GPU of the node."
);
def!(
    GPU_SERVES,
    "colloc_gpu_serves",
    None,
    ["gpu", "UUID", "kind"],
    "1 when the GPU serves jobs of this kind now (plain, naive, mps, mig), else 0.",
    "four kinds per GPU."
);
def!(
    GPU_MARKED,
    "colloc_gpu_marked",
    None,
    ["gpu", "UUID"],
    "Jobs whose restore left the GPU marked (later jobs are refused it); 0 when none.",
    "one series per GPU of the node."
);
def!(
    GPU_INSTANCES_READABLE,
    "colloc_gpu_instances_readable",
    None,
    ["gpu", "UUID"],
    "1 when the GPU's MIG instances could be listed, else 0 (needs root, or NVML failed).",
    "one series per GPU of the node."
);
def!(
    GPU_INSTANCES,
    "colloc_gpu_mig_instances",
    None,
    ["gpu", "UUID"],
    "The GPU's MIG instances (0 with MIG off); absent where they could not be listed.",
    "one series per GPU of the node."
);
def!(
    MIG_INSTANCE_INFO,
    "colloc_mig_instance_info",
    None,
    ["gpu", "GPU_I_ID", "GPU_I_PROFILE", "UUID"],
    "A MIG instance: its GPU, GPU instance id, profile and MIG UUID (empty without a \
     compute instance), value 1.",
    "at most seven instances per GPU, their ids and profiles a fixed set per model."
);
def!(
    MIG_DEVICE_INFO,
    "colloc_mig_device_info",
    None,
    ["gpu", "GPU_I_ID", "CI_ID", "UUID"],
    "A MIG device anyone sees where listing the instances needs root, value 1.",
    "at most seven MIG devices per GPU."
);
def!(
    JOURNALS_READABLE,
    "colloc_journals_readable",
    None,
    [],
    "1 when colloc's job journals could be listed, else 0 (no job series then).",
    "no labels."
);
def!(
    JOURNALS,
    "colloc_journals",
    None,
    [],
    "Readable journals: jobs colloc holds the GPUs of.",
    "no labels."
);
def!(
    JOURNALS_UNREADABLE,
    "colloc_journals_unreadable",
    None,
    [],
    "Journals that could not be read (`colloc restore --all` moves them aside).",
    "no labels."
);
def!(
    SLURM_READABLE,
    "colloc_slurm_readable",
    None,
    [],
    "1 when Slurm could say which of the journals' jobs run, else 0 (no job_running then).",
    "no labels."
);
def!(
    JOB_INFO,
    "colloc_job_info",
    None,
    ["job", "mode", "phase"],
    "A job colloc holds GPUs for: its mode (the layout asked, in colloc's grammar) and \
     phase (applying, applied, refused, restoring), value 1.",
    "one series per job that holds this node's GPUs through colloc (a \
     journal lives from prolog to epilog), so a few at a time."
);
def!(
    JOB_RUNNING,
    "colloc_job_running",
    None,
    ["job"],
    "1 when Slurm says the job holds the node, 0 when it ended and its journal is left over.",
    "one series per job that holds this node's GPUs through colloc (a \
     journal lives from prolog to epilog), so a few at a time."
);
def!(
    JOB_GPU,
    "colloc_job_gpu",
    None,
    ["job", "gpu"],
    "A GPU (NVML index) a job's journal holds, value 1.",
    "per job, its GPUs."
);
def!(
    MPS_DAEMON,
    "colloc_mps_daemon_info",
    None,
    ["job", "gpu", "UUID"],
    "An MPS control daemon colloc started for a job: its GPU (NVML index, empty where \
     not found) and the device it serves (GPU or MIG UUID), value 1.",
    "per job, one daemon per GPU or MIG instance."
);
def!(
    JOB_HELD,
    "colloc_job_held_gpu",
    None,
    ["job", "gpu", "UUID", "reason"],
    "A GPU a job's restore could not finish and left marked, and why (in_use, processes, \
     still_listed, driver, mode_pending), value 1.",
    "per job, its GPUs; reason is one of five words."
);
def!(
    LEFTOVERS_READABLE,
    "colloc_leftovers_readable",
    None,
    [],
    "1 when run_dir's leftovers could be listed, else 0.",
    "no labels."
);
def!(
    LEFTOVERS,
    "colloc_leftovers",
    None,
    [],
    "Trees earlier epilogs could not remove (`colloc restore --all` tries again).",
    "no labels."
);
def!(
    RUN_DIR_READABLE,
    "colloc_run_dir_readable",
    None,
    [],
    "1 when run_dir could be opened, else 0 (no run_dir series then).",
    "no labels."
);
def!(
    RUN_DIR_SERVES_MPS,
    "colloc_run_dir_serves_mps",
    None,
    [],
    "1 when run_dir can serve MPS jobs now, 0 when it cannot (full, or in use).",
    "no labels."
);
def!(
    RUN_DIR_SIZE,
    "colloc_run_dir_size_bytes",
    Some("bytes"),
    [],
    "The size of run_dir's file system.",
    "no labels."
);
def!(
    RUN_DIR_FREE,
    "colloc_run_dir_free_bytes",
    Some("bytes"),
    [],
    "Free space on run_dir's file system.",
    "no labels."
);
def!(
    RUN_DIR_INODES,
    "colloc_run_dir_inodes",
    None,
    [],
    "Inodes of run_dir's file system.",
    "no labels."
);
def!(
    RUN_DIR_FREE_INODES,
    "colloc_run_dir_free_inodes",
    None,
    [],
    "Free inodes on run_dir's file system.",
    "no labels."
);
def!(
    RUN_DIR_OWN_FS,
    "colloc_run_dir_own_fs",
    None,
    [],
    "1 when run_dir is a file system of its own (then the hidden figures are said).",
    "no labels."
);
def!(
    RUN_DIR_HIDDEN_BYTES,
    "colloc_run_dir_hidden_bytes",
    Some("bytes"),
    [],
    "Bytes in use on run_dir's own file system that no entry accounts for.",
    "no labels."
);

def!(
    LIVE_REFUSED,
    "colloc_live_refused",
    None,
    [],
    "Sockets in the name of a job colloc serves here that colloc status left out this \
     time: of a user who is not their job's, an answer that is not a snapshot of that job, \
     or none in time.",
    "no labels."
);
def!(
    JOB_RUNS,
    "colloc_job_runs_running",
    None,
    ["job"],
    "Runs a job's colloc run says are running now (read from its own socket, checked to \
     be the job user's).",
    "one series per job with a colloc run, so a few at a time."
);
def!(
    RUN_INFO,
    "colloc_run_info",
    None,
    ["job", "slot", "run", "index", "UUID"],
    "A run colloc run is running now: its job, the slot it runs on, its name and index in \
     the manifest, and its slot's device (GPU or MIG UUID; empty where it is none of the \
     job's here), value 1. The other colloc_run_ families are per slot: join on job and \
     slot for the run's name.",
    "per job, the runs running now (at most one per slot, slots below 256, 8 colloc runs \
     per job); a run's info ends when it ends, so a sweep of 5,000 runs has only its \
     slots' runs at a time, and its figures' series are its slots', for the whole pack."
);
def!(
    RUN_START,
    "colloc_run_start_time_seconds",
    Some("seconds"),
    ["job", "slot"],
    "When the run's current attempt started, Unix seconds.",
    "per job, its slots (below 256), for the whole pack."
);
def!(
    RUN_ATTEMPT,
    "colloc_run_attempt",
    None,
    ["job", "slot"],
    "The run's current attempt (1 the first; more after retries).",
    "per job, its slots (below 256), for the whole pack."
);
def!(
    RUN_THROUGHPUT,
    "colloc_run_throughput",
    None,
    ["job", "slot", "unit"],
    "The last throughput sample of the run on the slot, in the unit its output names \
     (img/s, it/s, …).",
    "per job, its slots; a run prints one unit."
);
def!(
    RUN_MEMORY,
    "colloc_run_memory_peak_bytes",
    Some("bytes"),
    ["job", "slot"],
    "The most GPU memory the run's processes held at once so far (its MIG instance's \
     memory on a MIG slot).",
    "per job, its slots (below 256), for the whole pack."
);
def!(
    RUN_UTIL,
    "colloc_run_gpu_utilization_ratio",
    Some("ratio"),
    ["job", "slot"],
    "Mean SM utilization of the run's own processes so far, 0 to 1 (absent where NVML \
     cannot say: under MPS and on MIG).",
    "per job, its slots (below 256), for the whole pack."
);
def!(
    RUN_ENERGY,
    "colloc_run_energy_joules",
    Some("joules"),
    ["job", "slot"],
    "The run's time share of its GPU's energy so far.",
    "per job, its slots (below 256), for the whole pack."
);

/// Every family, in the order the format prints them.
pub const FAMILIES: &[&Def] = &[
    &BUILD_INFO,
    &CONFIG_VALID,
    &STATUS_OK,
    &NVML_READABLE,
    &NVML_FAILURE,
    &GPUS,
    &GPU_INFO,
    &GPU_MEMORY,
    &GPU_MIG_SUPPORTED,
    &GPU_MIG_MODE,
    &GPU_MIG_PENDING,
    &GPU_SERVES,
    &GPU_MARKED,
    &GPU_INSTANCES_READABLE,
    &GPU_INSTANCES,
    &MIG_INSTANCE_INFO,
    &MIG_DEVICE_INFO,
    &JOURNALS_READABLE,
    &JOURNALS,
    &JOURNALS_UNREADABLE,
    &SLURM_READABLE,
    &JOB_INFO,
    &JOB_RUNNING,
    &JOB_GPU,
    &MPS_DAEMON,
    &JOB_HELD,
    &LEFTOVERS_READABLE,
    &LEFTOVERS,
    &RUN_DIR_READABLE,
    &RUN_DIR_SERVES_MPS,
    &RUN_DIR_SIZE,
    &RUN_DIR_FREE,
    &RUN_DIR_INODES,
    &RUN_DIR_FREE_INODES,
    &RUN_DIR_OWN_FS,
    &RUN_DIR_HIDDEN_BYTES,
    &LIVE_REFUSED,
    &JOB_RUNS,
    &RUN_INFO,
    &RUN_START,
    &RUN_ATTEMPT,
    &RUN_THROUGHPUT,
    &RUN_MEMORY,
    &RUN_UTIL,
    &RUN_ENERGY,
];

/// The job kinds a GPU may serve (`mig_fit`'s words), each said 1 or 0.
const KINDS: [&str; 4] = ["plain", "naive", "mps", "mig"];

/// The samples, by family.
#[derive(Default)]
struct Doc {
    samples: Vec<(&'static str, String)>,
}

impl Doc {
    /// A sample of `def` with these label values (in `def.labels`' order). A label set
    /// said twice keeps its first value (OpenMetrics allows each once).
    fn set(&mut self, def: &'static Def, values: &[&str], value: u64) {
        self.put(def, values, &value.to_string());
    }

    /// [`Doc::set`] of a finite figure (Rust's `f64` display: no exponent, `.` decimal).
    fn set_f(&mut self, def: &'static Def, values: &[&str], value: f64) {
        if value.is_finite() {
            self.put(def, values, &value.to_string());
        }
    }

    fn put(&mut self, def: &'static Def, values: &[&str], value: &str) {
        debug_assert_eq!(def.labels.len(), values.len(), "{}", def.name);
        let mut line = def.name.to_string();
        if !values.is_empty() {
            line.push('{');
            for (i, (k, v)) in def.labels.iter().zip(values).enumerate() {
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{k}=\"{}\"", escape(v));
            }
            line.push('}');
        }
        let prefix = format!("{line} ");
        if !self
            .samples
            .iter()
            .any(|(n, l)| *n == def.name && l.starts_with(&prefix))
        {
            self.samples.push((def.name, format!("{prefix}{value}")));
        }
    }

    /// The text: each family with samples, its metadata first, then `# EOF`.
    fn render(&self) -> String {
        let mut t = String::new();
        for def in FAMILIES {
            let mut lines = self
                .samples
                .iter()
                .filter(|(n, _)| *n == def.name)
                .peekable();
            if lines.peek().is_none() {
                continue;
            }
            let _ = writeln!(t, "# TYPE {} gauge", def.name);
            if let Some(u) = def.unit {
                let _ = writeln!(t, "# UNIT {} {u}", def.name);
            }
            let _ = writeln!(t, "# HELP {} {}", def.name, escape(def.help));
            for (_, l) in lines {
                let _ = writeln!(t, "{l}");
            }
        }
        t.push_str("# EOF\n");
        t
    }
}

/// A label value (or help text) escaped as OpenMetrics says: backslash, double quote and
/// line feed, each with a backslash; carriage return, NUL, NEL and the Unicode line and
/// paragraph separators become U+FFFD (legal raw, but some readers split lines there).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            // Legal raw, but a reader that splits lines on them (Python's universal
            // newlines) would see a new line: none of them is ever a real value.
            '\r' | '\0' | '\u{85}' | '\u{2028}' | '\u{2029}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn own(d: &mut Doc, version: &str, build: Option<&str>) {
    d.set(&BUILD_INFO, &[version, build.unwrap_or("")], 1);
}

/// The GPUs and their MIG instances, or why NVML could not say.
fn gpus(d: &mut Doc, s: &NodeStatus) {
    let list = match (&s.gpus, &s.gpus_error) {
        (Some(list), None) => list,
        (_, e) => {
            d.set(&NVML_READABLE, &[], 0);
            let step = match e {
                Some(GpusError::Unavailable(_)) | None => "open",
                Some(GpusError::Unreadable(_)) => "list",
            };
            d.set(&NVML_FAILURE, &[step], 1);
            return;
        }
    };
    d.set(&NVML_READABLE, &[], 1);
    d.set(&GPUS, &[], list.len() as u64);
    for g in list {
        let index = g.index.to_string();
        let id = [index.as_str(), g.uuid.as_str()];
        d.set(&GPU_INFO, &[&index, &g.uuid, &g.name], 1);
        d.set(&GPU_MEMORY, &id, g.memory_total);
        d.set(
            &GPU_MIG_SUPPORTED,
            &id,
            u64::from(g.mig_mode_pending.is_some()),
        );
        if let Some(pending) = g.mig_mode_pending {
            d.set(&GPU_MIG_MODE, &id, u64::from(g.mig_mode));
            d.set(&GPU_MIG_PENDING, &id, u64::from(pending));
        }
        for kind in KINDS {
            let serves = g.serves.contains(&kind);
            d.set(&GPU_SERVES, &[&index, &g.uuid, kind], u64::from(serves));
        }
        d.set(&GPU_MARKED, &id, g.marked_by.len() as u64);
        match &g.instances {
            Instances::Listed(list) => {
                d.set(&GPU_INSTANCES_READABLE, &id, 1);
                d.set(&GPU_INSTANCES, &id, list.len() as u64);
                for i in list {
                    let gi = i.gi_id.to_string();
                    let uuid = i.uuid.as_deref().unwrap_or("");
                    d.set(&MIG_INSTANCE_INFO, &[&index, &gi, &i.profile, uuid], 1);
                }
            }
            Instances::NeedsRoot { devices, .. } => {
                d.set(&GPU_INSTANCES_READABLE, &id, 0);
                for m in devices {
                    let (gi, ci) = (m.gi_id.to_string(), m.ci_id.to_string());
                    d.set(&MIG_DEVICE_INFO, &[&index, &gi, &ci, &m.uuid], 1);
                }
            }
            Instances::Failed(_) => d.set(&GPU_INSTANCES_READABLE, &id, 0),
        }
    }
}

/// The GPU (NVML index) a device UUID (a GPU's or a MIG instance's) belongs to.
fn gpu_of(s: &NodeStatus, uuid: &str) -> Option<u32> {
    s.gpus.iter().flatten().find_map(|g| {
        let mig = match &g.instances {
            Instances::Listed(l) => l.iter().any(|i| i.uuid.as_deref() == Some(uuid)),
            Instances::NeedsRoot { devices, .. } => devices.iter().any(|m| m.uuid == uuid),
            Instances::Failed(_) => false,
        };
        (g.uuid == uuid || mig).then_some(g.index)
    })
}

/// The jobs colloc holds GPUs for, their MPS daemons and what their restores left.
fn jobs(d: &mut Doc, s: &NodeStatus) {
    if s.journals_error.is_some() {
        d.set(&JOURNALS_READABLE, &[], 0);
        return;
    }
    d.set(&JOURNALS_READABLE, &[], 1);
    d.set(&JOURNALS, &[], s.readable().count() as u64);
    let unreadable = s
        .journals
        .iter()
        .filter(|j| matches!(j, JournalEntry::Unreadable(_)))
        .count();
    d.set(&JOURNALS_UNREADABLE, &[], unreadable as u64);
    if s.readable().next().is_some() {
        d.set(&SLURM_READABLE, &[], u64::from(s.slurm_error.is_none()));
    }
    for j in s.readable() {
        let job = j.job.to_string();
        let phase = match j.phase {
            Phase::Applying => "applying",
            Phase::Applied => "applied",
            Phase::Refused => "refused",
            Phase::Restoring => "restoring",
        };
        d.set(&JOB_INFO, &[&job, &j.mode, phase], 1);
        if let Some(live) = j.state.0.live() {
            d.set(&JOB_RUNNING, &[&job], u64::from(live));
        }
        for g in &j.gpus {
            d.set(&JOB_GPU, &[&job, &g.to_string()], 1);
        }
        for devices in &j.mps_devices {
            for uuid in devices.split(',').map(str::trim).filter(|u| !u.is_empty()) {
                let gpu = gpu_of(s, uuid).map(|g| g.to_string()).unwrap_or_default();
                d.set(&MPS_DAEMON, &[&job, &gpu, uuid], 1);
            }
        }
        for h in &j.held {
            let reason = match h.reason {
                HoldReason::InUse => "in_use",
                HoldReason::Processes { .. } => "processes",
                HoldReason::StillListed => "still_listed",
                HoldReason::Driver { .. } => "driver",
                HoldReason::ModePending { .. } => "mode_pending",
            };
            d.set(&JOB_HELD, &[&job, &h.index.to_string(), &h.uuid, reason], 1);
        }
    }
}

/// The runs `colloc run`s are running now, as their sockets said.
fn runs(d: &mut Doc, s: &NodeStatus) {
    if s.journals_error.is_some() || s.readable().next().is_none() {
        return;
    }
    d.set(&LIVE_REFUSED, &[], u64::from(s.live.refused));
    for j in &s.live.jobs {
        let job = j.job.to_string();
        d.set(&JOB_RUNS, &[&job], j.runs.len() as u64);
        for r in &j.runs {
            let slot = r.slot.to_string();
            let uuid = r.device.as_deref().unwrap_or_default();
            let info = [job.as_str(), &slot, &r.name, &r.index.to_string(), uuid];
            d.set(&RUN_INFO, &info, 1);
            let at = [job.as_str(), &slot];
            d.set_f(&RUN_START, &at, r.started_unix);
            d.set(&RUN_ATTEMPT, &at, u64::from(r.attempt));
            if let Some(t) = r.throughput {
                let unit = r.unit.as_deref().unwrap_or_default();
                d.set_f(&RUN_THROUGHPUT, &[&job, &slot, unit], t);
            }
            if let Some(b) = r.memory_peak_bytes {
                d.set(&RUN_MEMORY, &at, b);
            }
            if let Some(u) = r.util_ratio {
                d.set_f(&RUN_UTIL, &at, u);
            }
            if let Some(e) = r.energy_joules {
                d.set_f(&RUN_ENERGY, &at, e);
            }
        }
    }
}

/// The leftovers and `run_dir`.
fn node_files(d: &mut Doc, s: &NodeStatus) {
    match &s.leftovers {
        Some(list) if s.leftovers_error.is_none() => {
            d.set(&LEFTOVERS_READABLE, &[], 1);
            d.set(&LEFTOVERS, &[], list.len() as u64);
        }
        _ => d.set(&LEFTOVERS_READABLE, &[], 0),
    }
    let Some(room) = &s.run_dir else {
        d.set(&RUN_DIR_READABLE, &[], 0);
        return;
    };
    d.set(&RUN_DIR_READABLE, &[], 1);
    d.set(
        &RUN_DIR_SERVES_MPS,
        &[],
        u64::from(room.cannot_serve.is_none()),
    );
    d.set(&RUN_DIR_SIZE, &[], room.space.total_bytes);
    d.set(&RUN_DIR_FREE, &[], room.space.free_bytes);
    d.set(&RUN_DIR_INODES, &[], room.space.total_inodes);
    d.set(&RUN_DIR_FREE_INODES, &[], room.space.free_inodes);
    d.set(&RUN_DIR_OWN_FS, &[], u64::from(room.own_fs));
    if room.own_fs {
        d.set(&RUN_DIR_HIDDEN_BYTES, &[], room.hidden_bytes);
    }
}

#[cfg(test)]
mod tests;
