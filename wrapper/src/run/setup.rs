//! Everything `colloc run` decides before the first run starts: the runs, the report
//! directory (a fresh one, or the record it resumes), the slots and their environment,
//! NVML, the MPS daemon, the GPU sampler and the solo figures of a baseline report.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::Context;
use colloc_core::jobenv;
use colloc_core::mode::Mode;
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_results::telemetry::{self, Sampler, SlotMap};

use super::args::RunArgs;
use super::manifest::{self, RunSpec};
use super::slots::{self, Layout, Source};
use crate::bad_input;
use crate::engine::pack::Slot;
use crate::engine::scan::{Scanner, Throughput};
use colloc_results::record::events::RunIdentity;
use colloc_results::record::fold::Fold;
use colloc_results::record::model::{Report, SCHEMA};
use colloc_results::record::store::{self, RecordError, ReportDir};
use colloc_results::userfs::UserFsError;

/// Largest report read as a `--baseline`.
const MAX_BASELINE_BYTES: u64 = 256 * 1024 * 1024;

/// The runs of `-f FILE` or `-- CMD`.
///
/// # Errors
/// Bad input: the manifest, the command, the metric regex.
pub fn specs(a: &RunArgs, default_copies: usize) -> anyhow::Result<Vec<RunSpec>> {
    if let Some(f) = &a.file {
        return manifest::load(f).map_err(|e| bad_input(e.to_string()));
    }
    if a.command.first().is_none_or(|c| c.trim().is_empty()) {
        return Err(bad_input(
            "nothing to run: give -f runs.toml or -- CMD [ARGS...]",
        ));
    }
    let copies = a.count.map_or(default_copies, |n| n as usize);
    let throughput = match &a.metric {
        Some(m) => Throughput::custom(m, a.unit.as_deref())
            .map_err(|e| bad_input(format!("--metric: {e}")))?,
        None => Throughput::Builtin,
    };
    let scanner = Arc::new(Scanner {
        throughput,
        metrics: Vec::new(),
    });
    Ok((0..copies)
        .map(|i| {
            let mut s = RunSpec::plain(format!("run{}", i + 1), a.command.clone());
            s.scanner = Arc::clone(&scanner);
            s
        })
        .collect())
}

/// The identity of each run, for the record and for resuming.
pub fn identities(specs: &[RunSpec]) -> Vec<RunIdentity> {
    specs
        .iter()
        .map(|s| RunIdentity {
            name: s.name.clone(),
            command: s.command.clone(),
            env: s.env.clone(),
            workdir: s.workdir.as_ref().map(|w| w.display().to_string()),
            grid: s.grid.clone(),
            metrics: s
                .scanner
                .metrics
                .iter()
                .map(|m| (m.name.clone(), m.best))
                .collect(),
            metric: match &s.scanner.throughput {
                Throughput::Custom { pattern, .. } => Some(pattern.as_str().to_string()),
                Throughput::Builtin => None,
            },
            gpu_memory_mib: s.gpu_memory.map(|b| b.div_ceil(super::memsize::MIB)),
        })
        .collect()
}

/// How the record starts.
#[derive(Debug)]
pub enum Start {
    /// A new record.
    Fresh,
    /// The record already in the directory, folded.
    Resume(Box<Fold>),
}

/// How this manifest differs from the one recorded (empty: the same runs).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Runs new in this manifest.
    pub added: Vec<String>,
    /// Runs whose definition changed, and what of it (the first found).
    pub changed: Vec<(String, &'static str)>,
    /// Recorded runs this manifest no longer has.
    pub removed: Vec<String>,
    /// Runs in both, changed or not.
    pub common: usize,
}

impl Diff {
    /// The same runs, each with the same definition.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// Nothing in common: no run of one is in the other (a different sweep altogether).
    pub fn disjoint(&self) -> bool {
        self.common == 0
    }

    /// Each difference in words, changed first, then new, then gone.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .changed
            .iter()
            .map(|(n, what)| format!("{n}'s {what} changed"))
            .collect();
        out.extend(self.added.iter().map(|n| format!("{n} is new")));
        out.extend(self.removed.iter().map(|n| format!("{n} is gone")));
        out
    }
}

/// What differs between a recorded manifest and this one, by run name.
pub fn differences(old: &[RunIdentity], new: &[RunIdentity]) -> Diff {
    let by_name: HashMap<&str, &RunIdentity> = old.iter().map(|o| (o.name.as_str(), o)).collect();
    let new_names: HashSet<&str> = new.iter().map(|n| n.name.as_str()).collect();
    let mut d = Diff::default();
    for n in new {
        match by_name.get(n.name.as_str()) {
            None => d.added.push(n.name.clone()),
            Some(o) => {
                d.common += 1;
                if let Some(what) = o.changed(n) {
                    d.changed.push((n.name.clone(), what));
                }
            }
        }
    }
    d.removed = old
        .iter()
        .filter(|o| !new_names.contains(o.name.as_str()))
        .map(|o| o.name.clone())
        .collect();
    d
}

/// Say at the start of a resume what of the edited manifest runs again: one line per
/// changed and per removed run, one for the new ones.
fn announce(diff: &Diff, quiet: bool) {
    let mut lines: Vec<String> = diff
        .changed
        .iter()
        .map(|(n, what)| format!("resume: {n}: its {what} changed; it runs again"))
        .collect();
    if !diff.added.is_empty() {
        lines.push(format!(
            "resume: {} new run(s): {}",
            diff.added.len(),
            listed(&diff.added)
        ));
    }
    lines.extend(diff.removed.iter().map(|n| {
        format!("resume: {n} was removed from the manifest; its record is kept and it does not run")
    }));
    for l in lines {
        let l = colloc_results::text::escape(&l);
        if quiet {
            log::info!("{l}");
        } else {
            outln!("colloc: {l}");
        }
    }
}

fn listed(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        s.push_str(&format!(" and {} more", items.len() - 5));
    }
    s
}

/// Does `dir` hold a colloc record? Its fold if so.
fn record_in(dir: &ReportDir) -> anyhow::Result<Option<Fold>> {
    let Some((f, bad)) = dir.fold().map_err(RecordError::into_anyhow)? else {
        return Ok(None);
    };
    if bad > 0 {
        log::warn!(
            "{}: {bad} line(s) of its event log could not be read (cut by a kill or a full disk); skipped",
            dir.path().display()
        );
    }
    Ok((f.sessions() > 0).then_some(f))
}

/// `SLURM_RESTART_COUNT` when above 0: this job was requeued.
pub fn restart_count() -> Option<u32> {
    std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

fn default_base() -> PathBuf {
    let stamp = match std::env::var("SLURM_JOB_ID") {
        Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
        _ => humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(['-', ':'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_string(),
    };
    PathBuf::from(format!("colloc-{stamp}"))
}

/// Longest wait for the lock of a report directory that another colloc still holds,
/// in a requeued job or with `--resume` (the job's previous start shutting down).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Lock `dir` for this pack; with `wait`, wait up to [`LOCK_WAIT`] for a colloc that
/// still writes it to end.
///
/// # Errors
/// Bad input: another colloc writes it (and did not end in time), or the lock file is a
/// link or someone else's; or the lock file cannot be made.
fn lock(dir: &ReportDir, wait: bool) -> anyhow::Result<store::DirLock> {
    let deadline = Instant::now() + LOCK_WAIT;
    let mut said = false;
    loop {
        if let Some(l) = dir.lock().map_err(UserFsError::into_anyhow)? {
            return Ok(l);
        }
        if !wait || Instant::now() >= deadline {
            return Err(bad_input(format!(
                "another colloc run is writing {}; give another --report-dir",
                dir.path().display()
            )));
        }
        if !said {
            log::warn!(
                "waiting for the colloc run that still writes {} to end (the job's previous start?)",
                dir.path().display()
            );
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Open (or make) a report directory for writing: a directory of someone else's, or one
/// others can write (a planted `colloc-<job id>`), is refused (exit 2).
fn open_dir(path: &Path) -> anyhow::Result<ReportDir> {
    ReportDir::create(path)
        .map(|(d, _)| d)
        .map_err(UserFsError::into_anyhow)
}

/// Where the record goes and how it starts (the directory locked for this pack).
///
/// - `--report-dir DIR`: a new or empty DIR starts fresh. A DIR with a record is resumed
///   with `--resume`, or by itself in a requeued job (`SLURM_RESTART_COUNT` > 0) when it
///   holds this manifest's record; otherwise it is refused, naming both ways out.
/// - No `--report-dir`: `./colloc-<job id or time>`, or `-2`, `-3`, … when taken; the
///   first of them holding this manifest's record is resumed with `--resume` or in a
///   requeued job.
/// - Either way, a directory that exists is used only when it is the caller's own and
///   writable by no one else.
///
/// # Errors
/// Bad input (exit 2), changing nothing.
pub fn report_dir(
    a: &RunArgs,
    ids: &[RunIdentity],
    restarted: bool,
) -> anyhow::Result<(ReportDir, Start, store::DirLock)> {
    let wait = a.resume || restarted;
    if let Some(path) = &a.report_dir {
        let dir = open_dir(path)?;
        if !dir.non_empty() {
            if a.resume {
                log::warn!(
                    "--resume: {} holds no record yet; starting a new one",
                    path.display()
                );
            }
            let l = lock(&dir, false)?;
            return Ok((dir, Start::Fresh, l));
        }
        if !dir.has_events() {
            return Err(bad_input(format!(
                "{} is not empty and holds no colloc record; give a new or empty --report-dir",
                path.display()
            )));
        }
        // Read the record only once nobody writes it any more.
        let l = lock(&dir, wait)?;
        let Some(fold) = record_in(&dir)? else {
            return Err(bad_input(format!(
                "{} is not empty and holds no colloc record; give a new or empty --report-dir",
                path.display()
            )));
        };
        let diff = differences(&fold.identities(), ids);
        if a.resume {
            if !diff.is_empty() && diff.disjoint() {
                return Err(bad_input(format!(
                    "--resume: {} holds the record of another manifest (none of its runs is in this one: {}); nothing was mixed or started: run it with another --report-dir",
                    path.display(),
                    listed(&diff.lines())
                )));
            }
            announce(&diff, a.quiet);
            return Ok((dir, Start::Resume(Box::new(fold)), l));
        }
        if restarted && diff.is_empty() {
            log::warn!(
                "requeued job (SLURM_RESTART_COUNT > 0): resuming the record in {}",
                path.display()
            );
            return Ok((dir, Start::Resume(Box::new(fold)), l));
        }
        let (done, all) = {
            let c = fold.state_counts(None);
            (c.succeeded, c.runs)
        };
        let other = if diff.is_empty() {
            String::new()
        } else {
            " of another manifest".to_string()
        };
        return Err(bad_input(format!(
            "{} already holds a colloc record{other} ({done} of {all} runs succeeded): add --resume to continue it, or give another --report-dir",
            path.display()
        )));
    }
    let base = default_base();
    let mut k = 1;
    loop {
        let p = if k == 1 {
            base.clone()
        } else {
            PathBuf::from(format!("{}-{k}", base.display()))
        };
        let fresh = !p.exists();
        if fresh && a.resume {
            return Err(bad_input(format!(
                "--resume: no record of this manifest in {} (or its -2, -3, … siblings); give the directory with --report-dir",
                base.display()
            )));
        }
        let dir = open_dir(&p)?;
        if !dir.non_empty() {
            if a.resume {
                return Err(bad_input(format!(
                    "--resume: no record of this manifest in {} (or its -2, -3, … siblings); give the directory with --report-dir",
                    base.display()
                )));
            }
            let l = lock(&dir, false)?;
            return Ok((dir, Start::Fresh, l));
        }
        if wait && dir.has_events() {
            let l = lock(&dir, true)?;
            if let Some(fold) = record_in(&dir)? {
                // A requeued job resumes its own manifest; --resume also an edited one.
                let diff = differences(&fold.identities(), ids);
                if diff.is_empty() || (a.resume && !diff.disjoint()) {
                    log::info!("resuming the record in {}", p.display());
                    announce(&diff, a.quiet);
                    return Ok((dir, Start::Resume(Box::new(fold)), l));
                }
            }
        }
        k += 1;
    }
}

/// The node configuration by the one rule of every command
/// ([`crate::nodecfg::config_or_default`]): a broken file is bad input (exit 2), and as
/// root a file others could change is refused.
///
/// # Errors
/// As that rule.
pub fn config(g: &crate::Global) -> anyhow::Result<Option<colloc_core::config::Config>> {
    crate::nodecfg::config_or_default(g).map(Some)
}

/// The MPS control program, by the one lookup of every command.
fn mps_control_program(config: Option<&colloc_core::config::Config>) -> anyhow::Result<PathBuf> {
    let default = colloc_core::config::Config::default();
    crate::nodecfg::mps_control(config.unwrap_or(&default))
        .map_err(|e| anyhow::anyhow!("--mode mps: {e}"))
}

/// The GPUs, slots and the environment of each slot.
pub struct Gpus {
    /// The layout.
    pub layout: Layout,
    /// Each slot's environment (once started).
    pub slots: Vec<Slot>,
    /// colloc's own MPS daemon, stopped when dropped.
    pub own_mps: Option<mps::PrivateDaemon>,
    /// NVML and the slots' GPUs, where NVML answers.
    pub nvml: Option<(Arc<NvmlGpus>, SlotMap)>,
    /// Why there is no NVML (warned about once everything the user wrote is checked).
    pub nvml_note: Option<String>,
}

/// Work out the slots from the job environment or `--mode`/`-j` and the GPUs behind them
/// (nothing is started yet: see [`Gpus::start`]).
///
/// # Errors
/// Bad input: a mode or slot count that does not fit.
pub fn gpus(a: &RunArgs, config: Option<&colloc_core::config::Config>) -> anyhow::Result<Gpus> {
    let nvml_lib = config
        .map(|c| c.nvml_library.clone())
        .unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let (nvml, nvml_note) = match NvmlGpus::open(&nvml_lib) {
        Ok(n) => (Some(Arc::new(n)), None),
        Err(e) => (
            None,
            Some(format!(
                "NVML unavailable ({e}); runs go on without GPU figures"
            )),
        ),
    };
    let job = jobenv::JobEnv::from_process();
    let mut layout = slots::layout(&slots::Inputs {
        job_mode: job.mode,
        job_devices: job.devices,
        job_slots: job.slots,
        visible: job.visible,
        mode: a.mode.clone(),
        jobs: a.jobs.map(|j| j as usize),
        nvml_gpus: nvml.as_ref().map(|n| {
            let c = n.nvml().device_count().unwrap_or(0);
            (0..c).map(|i| i.to_string()).collect()
        }),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
    .map_err(bad_input)?;
    let mut map = nvml
        .as_ref()
        .map(|n| telemetry::resolve(n.nvml(), &layout.slots));
    if let (Mode::Mps { .. }, Source::Own, Some(m)) = (&layout.mode, &layout.source, &map) {
        // MPS clients number devices within the daemon's CUDA_VISIBLE_DEVICES, so an
        // index such as "2" would name another GPU (or none) for them: use UUIDs.
        for (slot, gi) in layout.slots.iter_mut().zip(&m.slot_gpu) {
            if let Some(g) = gi.and_then(|gi| m.gpus.get(gi)) {
                *slot = Some(g.uuid.clone());
            }
        }
        let mut devices: Vec<String> = Vec::new();
        for d in layout.slots.iter().flatten() {
            if !devices.contains(d) {
                devices.push(d.clone());
            }
        }
        layout.devices = devices;
        if let Some(m) = map.as_mut() {
            m.slot_device = layout.slots.clone();
        }
    }
    let nvml = match (nvml, map) {
        (Some(n), Some(m)) if !m.gpus.is_empty() => Some((n, m)),
        _ => None,
    };
    Ok(Gpus {
        layout,
        slots: Vec::new(),
        own_mps: None,
        nvml,
        nvml_note,
    })
}

impl Gpus {
    /// Start colloc's own MPS daemon where the layout needs one, and give each slot its
    /// environment.
    ///
    /// # Errors
    /// The MPS daemon does not start.
    pub fn start(&mut self, config: Option<&colloc_core::config::Config>) -> anyhow::Result<()> {
        let layout = &self.layout;
        let own_mps = match (&layout.mode, &layout.source) {
            (Mode::Mps { .. }, Source::Own) => {
                let program = mps_control_program(config)?;
                Some(
                    mps::PrivateDaemon::start(&program, "colloc-mps", &layout.devices.join(","))
                        .context("cannot start the MPS daemon")?,
                )
            }
            _ => None,
        };
        let job_pipes = match (&layout.mode, &layout.source) {
            (Mode::Mps { .. } | Mode::MigMps { .. }, Source::Job) => {
                jobenv::JobEnv::from_process().mps_pipes()
            }
            _ => Vec::new(),
        };
        let map = self.nvml.as_ref().map(|(_, m)| m);
        let own_env = own_mps.as_ref().map(|m| m.daemon().env());
        self.slots = layout
            .slots
            .iter()
            .enumerate()
            .map(|(si, dev)| Slot {
                env: slot_env(
                    &layout.mode,
                    dev.as_deref(),
                    own_env.as_deref(),
                    &job_pipes,
                    map.and_then(|m| m.slot_memory_mib.get(si).copied().flatten()),
                ),
            })
            .collect();
        self.own_mps = own_mps;
        Ok(())
    }
}

/// The environment of a slot on `device`: `CUDA_VISIBLE_DEVICES`, the MPS daemon to talk
/// to (colloc's own, `own_mps`, or the job's daemon of the device's GPU among
/// `job_pipes`, as `COLLOC_MPS_PIPES` lists them: with `mig:…:mps` one per MIG instance,
/// keyed by its UUID), and for `mps:N` (`mig:…:mps:N`) each client's share of the
/// device's (the instance's) memory (`memory_mib`, where NVML told it).
pub fn slot_env(
    mode: &Mode,
    device: Option<&str>,
    own_mps: Option<&[(String, String)]>,
    job_pipes: &[(String, PathBuf)],
    memory_mib: Option<u64>,
) -> Vec<(String, String)> {
    let mut e = Vec::new();
    if let Some(d) = device {
        e.push((jobenv::VISIBLE.to_string(), d.to_string()));
    }
    if let Some(m) = own_mps {
        e.extend(m.iter().cloned());
    } else if let Some((_, pipe)) =
        device.and_then(|d| job_pipes.iter().find(|(uuid, _)| uuid == d))
    {
        // A job with several GPUs (MIG instances) has one MPS daemon per GPU (instance);
        // the job-wide CUDA_MPS_PIPE_DIRECTORY names the first. Each run talks to its
        // device's.
        e.push((
            jobenv::MPS_PIPE_DIRECTORY.into(),
            pipe.display().to_string(),
        ));
        if let Some(dir) = pipe.parent() {
            e.push((
                jobenv::MPS_LOG_DIRECTORY.into(),
                dir.join("log").display().to_string(),
            ));
        }
    }
    if let Mode::Mps { clients: Some(n) }
    | Mode::MigMps {
        clients: Some(n), ..
    } = mode
    {
        let mem: Vec<u64> = memory_mib.into_iter().collect();
        e.extend(mps::client_limits(*n, &mem));
    }
    e
}

/// Start the GPU sampler over the slots' GPUs.
pub fn sampler(g: &Gpus, interval: std::time::Duration, base: Instant) -> Option<Sampler> {
    let (nvml, map) = g.nvml.as_ref()?;
    Some(colloc_results::telemetry::attempts::sampler(
        nvml,
        map.clone(),
        matches!(g.layout.mode, Mode::Mps { .. } | Mode::MigMps { .. }),
        interval,
        base,
    ))
}

/// Solo figures of an earlier report: its runs' `solo_throughput`, or their throughput
/// when that report ran one run at a time; keyed by command, environment and working
/// directory. (key, throughput, unit) triples.
///
/// # Errors
/// A message: unreadable, too big, not a colloc report of this schema, no solo figures.
pub fn baseline(path: &Path) -> Result<Vec<(String, f64, String)>, String> {
    let shown = path.display();
    let text = colloc_results::userfs::read_user_file(path, MAX_BASELINE_BYTES)
        .map_err(|e| format!("baseline report: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("baseline report {shown} is not JSON: {e}"))?;
    match v.get("schema").and_then(serde_json::Value::as_u64) {
        Some(s) if s == u64::from(SCHEMA) => {}
        Some(s) => {
            return Err(format!(
                "baseline report {shown} has \"schema\": {s}; this colloc reads {SCHEMA}: make it again with this colloc"
            ))
        }
        None => return Err(format!("baseline report {shown} is not a colloc report")),
    }
    let r: Report =
        serde_json::from_value(v).map_err(|e| format!("baseline report {shown}: {e}"))?;
    let alone = r.summary.max_concurrent <= 1;
    let mut out: Vec<(String, f64, String)> = Vec::new();
    for run in &r.runs {
        let Some(t) = &run.throughput else { continue };
        let fig = run.solo_throughput.or(alone.then_some(t.mean));
        let Some(f) = fig.filter(|f| *f > 0.0 && *f <= store::MAX_VALUE) else {
            continue;
        };
        let id = RunIdentity {
            name: run.name.clone(),
            command: run.command.clone(),
            env: run
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            workdir: run.workdir.clone(),
            grid: None,
            metrics: Vec::new(),
            metric: None,
            gpu_memory_mib: None,
        };
        out.push((id.solo_key(), f, t.unit.clone()));
    }
    if out.is_empty() {
        return Err(format!(
            "baseline report {shown} has no solo figures: make it with -j 1 or --solo-baseline"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, cmd: &str) -> RunIdentity {
        RunIdentity {
            name: name.into(),
            command: vec![cmd.into()],
            env: vec![],
            workdir: None,
            grid: None,
            metrics: vec![],
            metric: None,
            gpu_memory_mib: None,
        }
    }

    #[test]
    fn manifest_changes_are_named() {
        let old = vec![id("a", "x"), id("b", "x"), id("c", "x")];
        let new = vec![id("a", "x"), id("b", "y"), id("d", "x")];
        let d = differences(&old, &new);
        assert_eq!(d.lines(), ["b's command changed", "d is new", "c is gone"]);
        assert_eq!(d.common, 2);
        assert!(!d.disjoint());
        assert!(differences(&old, &old).is_empty());
        let other = vec![id("x", "x"), id("y", "x")];
        assert!(differences(&old, &other).disjoint());
    }

    #[test]
    fn colloc_scaffolding_alone_is_an_empty_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("logs")).unwrap();
        std::fs::write(d.path().join(store::LOCK_FILE), "").unwrap();
        assert!(!ReportDir::open_read(d.path()).unwrap().non_empty());
        std::fs::write(d.path().join("logs/a.log"), "x").unwrap();
        assert!(ReportDir::open_read(d.path()).unwrap().non_empty());
    }

    #[test]
    fn a_run_inside_a_mig_instance_talks_to_its_instance_daemon() {
        let pipes = jobenv::parse_mps_pipes(
            "MIG-a=/run/colloc/job-1/gpu0-gi1/pipe,MIG-b=/run/colloc/job-1/gpu0-gi2/pipe",
        );
        let mode: Mode = "mig:3g.20gbx2:mps:2".parse().unwrap();
        let env: std::collections::HashMap<String, String> =
            slot_env(&mode, Some("MIG-b"), None, &pipes, Some(19968))
                .into_iter()
                .collect();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "MIG-b");
        assert_eq!(
            env["CUDA_MPS_PIPE_DIRECTORY"],
            "/run/colloc/job-1/gpu0-gi2/pipe"
        );
        assert_eq!(
            env["CUDA_MPS_LOG_DIRECTORY"],
            "/run/colloc/job-1/gpu0-gi2/log"
        );
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=9984M");
        // Without :N no limits; the instance's own daemon all the same.
        let mode: Mode = "mig:3g.20gbx2:mps".parse().unwrap();
        let env = slot_env(&mode, Some("MIG-a"), None, &pipes, Some(19968));
        assert_eq!(env.len(), 3, "{env:?}");
        assert_eq!(env[1].1, "/run/colloc/job-1/gpu0-gi1/pipe");
    }

    #[test]
    fn mps_pipes_parse() {
        assert_eq!(
            jobenv::parse_mps_pipes("GPU-a=/r/a/pipe,bad,GPU-b=rel,=/x"),
            vec![("GPU-a".to_string(), PathBuf::from("/r/a/pipe"))]
        );
    }
}
