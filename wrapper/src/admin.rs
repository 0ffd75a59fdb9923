//! Admin subcommands: `apply`, `restore`, `check-config`, and what `plan` and `status`
//! share with them (the config rule, opening NVML, a GPU's MIG catalog).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::journal;
use colloc_core::journal::JournalError;
use colloc_core::mig::Catalog;
use colloc_core::mode::Mode;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, NodeFault, Outcome};

use crate::{bad_input, Global};

/// `colloc apply MODE --gpu INDEX --job ID`
#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// The mode to apply.
    mode: String,
    /// GPU(s) to reconfigure: NVML index, or a comma list.
    #[arg(
        long,
        value_name = "INDEX[,INDEX...]",
        value_delimiter = ',',
        required = true
    )]
    gpu: Vec<u32>,
    /// The job id the journal is kept under.
    #[arg(long, value_name = "ID")]
    job: u32,
    /// Run MPS daemons as this user id (default: the caller).
    #[arg(long)]
    uid: Option<u32>,
    /// ... and this group id.
    #[arg(long)]
    gid: Option<u32>,
}

/// `colloc restore (--job ID | --all)`
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["job", "all"])))]
pub struct RestoreArgs {
    /// Restore this job's GPUs.
    #[arg(long, value_name = "ID")]
    job: Option<u32>,
    /// Restore every journal on this node.
    #[arg(long)]
    all: bool,
}

/// `colloc check-config [--fix] [FILE]`
#[derive(clap::Args, Debug)]
pub struct CheckConfigArgs {
    /// The file to check (default: --config, $COLLOC_CONFIG, /etc/slurm/colloc.toml).
    file: Option<PathBuf>,
    /// Also make what jobs need before they come (root, at install and at boot, before
    /// slurmd starts): state_dir with its directories and a lock file per GPU, and run_dir
    /// as a tmpfs of its own capped at run_dir_size_mib and run_dir_inodes.
    #[arg(long)]
    fix: bool,
}

pub(crate) fn parse_mode(s: &str) -> anyhow::Result<Mode> {
    s.parse::<Mode>().map_err(|e| bad_input(e.to_string()))
}

/// The config for read-only commands: the one rule of every user command.
pub(crate) fn config_or_default(g: &Global) -> anyhow::Result<Config> {
    crate::nodecfg::config_or_default(g)
}

/// The config for commands that act as root (`apply`, `restore`, `check-config`): read
/// only if no one but root could have changed it (else exit 2, nothing done).
fn trusted_config(g: &Global) -> anyhow::Result<Config> {
    load_trusted(&g.config_path())
}

/// [`Config::load_trusted`] of a path an admin typed, which may be relative to the
/// current directory (`colloc check-config colloc.toml` in /etc/slurm).
fn load_trusted(path: &std::path::Path) -> anyhow::Result<Config> {
    let path = std::path::absolute(path)
        .map_err(|e| bad_input(format!("cannot read {}: {e}", path.display())))?;
    Config::load_trusted(&path).map_err(|e| bad_input(e.to_string()))
}

/// `state_dir`, `run_dir`, `nvml_library`, `mps_control` must be root's alone: one line
/// naming each that is not (exit 2).
fn refuse_unsafe_paths(cfg: &Config) -> anyhow::Result<()> {
    let problems: Vec<String> = cfg.unsafe_paths().iter().map(ToString::to_string).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(bad_input(problems.join("; ")))
    }
}

pub(crate) fn open_gpus(cfg: &Config) -> anyhow::Result<NvmlGpus> {
    NvmlGpus::open(&cfg.nvml_library).map_err(anyhow::Error::from)
}

pub(crate) fn catalog_of(ctl: &dyn GpuControl, gpu: u32) -> anyhow::Result<Catalog> {
    let info = ctl
        .gpus()?
        .into_iter()
        .find(|g| g.index == gpu)
        .ok_or_else(|| bad_input(format!("no GPU with index {gpu} on this node")))?;
    reconfig::catalog_for(ctl, &info).map_err(bad_input)
}

/// Publish the node's journals in its Slurm node comment, as the prolog and epilog do
/// (for `colloc status --cluster`); a failure is a warning.
fn publish(cfg: &Config) {
    let by = concat!("colloc/", env!("CARGO_PKG_VERSION"));
    if let Err(e) = colloc_core::publish::publish(cfg, by, None) {
        errln!(
            "colloc: warning: the node comment for `colloc status --cluster` was not updated: {e}"
        );
    }
}

/// `colloc apply`.
pub fn apply(a: ApplyArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let mode = parse_mode(&a.mode)?;
    let cfg = trusted_config(g)?;
    refuse_unsafe_paths(&cfg)?;
    let ctl = open_gpus(&cfg)?;
    let spec = JobSpec {
        job: a.job,
        uid: a.uid.unwrap_or_else(colloc_core::sys::uid),
        gid: a.gid.unwrap_or_else(colloc_core::sys::gid),
        gpus: a.gpu,
        mode,
    };
    match reconfig::prolog(&cfg, &ctl, &spec).context("apply failed; the GPUs are as they were")? {
        Outcome::Off => {
            outln!("mode off: nothing to do");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Applied(env) => {
            publish(&cfg);
            for (k, v) in env {
                outln!("{k}={v}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Refused(r) => {
            // The refusal is on record so task_init can report it; by hand, clear it.
            let _ = reconfig::restore(&cfg, Some(&ctl), a.job);
            if r.bad_request {
                Err(bad_input(r.message))
            } else {
                Err(anyhow::anyhow!(r.message))
            }
        }
    }
}

/// `colloc restore`.
pub fn restore(a: RestoreArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let cfg = trusted_config(g)?;
    match journal::check_state_dir(&cfg) {
        Err(e) if e.is_unsafe_state_dir() => {
            return Err(bad_input(format!(
                "{e}; no journal there can be trusted: make it root's alone, then restore"
            )))
        }
        Err(e) => return Err(e.into()),
        Ok(()) => {}
    }
    // NVML is needed only for MIG journals; MPS/naive journals restore without it.
    let ctl = match open_gpus(&cfg) {
        Ok(c) => Some(c),
        Err(e) => {
            log::info!("NVML unavailable: {e:#}");
            None
        }
    };
    let ctl_ref = ctl.as_ref().map(|c| c as &dyn GpuControl);
    let report = match (a.job, a.all) {
        (Some(job), _) => reconfig::restore(&cfg, ctl_ref, job).map_err(|e| match e {
            NodeFault::Journal(JournalError::Corrupt { .. }) => anyhow::anyhow!(
                "{e}; `colloc restore --all` moves it to {}, then check the GPUs with `colloc status`",
                cfg.state_dir.join(journal::CORRUPT_DIR).display()
            ),
            e => e.into(),
        })?,
        (None, _) => reconfig::restore_all(&cfg, ctl_ref)?,
    };
    publish(&cfg);
    for w in &report.warnings {
        errln!("colloc: warning: {w}");
    }
    if report.jobs.is_empty() && report.leftovers.is_empty() {
        outln!("nothing to restore");
    } else if report.jobs.is_empty() {
        outln!("no journal to restore");
    } else {
        outln!(
            "restored job(s) {:?}: {} MIG instance(s) destroyed, {} MPS daemon(s) stopped{}",
            report.jobs,
            report.destroyed,
            report.mps_stopped,
            if report.killed.is_empty() {
                String::new()
            } else {
                format!(", killed leftover process(es) {:?}", report.killed)
            }
        );
    }
    // Journals that could not be used: their GPUs may still be reconfigured.
    for q in &report.quarantined {
        errln!(
            "colloc: journal {} was unusable ({}); moved it to {}. The GPUs it may describe \
             were not restored: check them with `colloc status`",
            q.file.display(),
            q.why,
            q.moved_to.display()
        );
    }
    // What earlier epilogs moved aside and this restore could not remove either: named,
    // and the exit code says it is not done.
    for left in &report.leftovers {
        errln!(
            "colloc: {} could not be removed: {}; it stays (a process of its user may \
             still use it, or it holds another user's files): remove it by hand",
            left.path.display(),
            left.why
        );
    }
    // run_dir out of room (or held out of sight, issue 35): said, with what to do; while
    // no MPS job can be served the restore is not done.
    let room = colloc_core::runroom::room(&cfg).ok();
    let cannot_serve = room.as_ref().is_some_and(|r| r.cannot_serve.is_some());
    if let Some(r) = room.filter(|r| r.cannot_serve.is_some() || r.hidden_inodes > 0) {
        for l in r.lines(&cfg) {
            errln!("colloc: {l}");
        }
    }
    // Something outside colloc still holding instances keeps their journal: core has said
    // what holds which GPU (one warning line each); the exit code says it is not done.
    if report.quarantined.is_empty()
        && report.held.is_empty()
        && report.leftovers.is_empty()
        && !cannot_serve
    {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

/// `colloc check-config`: errors (exit 2, one line) for what makes the file unusable;
/// warnings on stderr (exit 0) for what works but is likely not meant, or not possible on
/// this host (a login node without the NVIDIA driver), and for the node's Slurm settings
/// that defeat colloc ([`crate::slurmcheck`]). Warnings exit 0 so that the boot unit
/// (`colloc-check.service`) never holds slurmd back over advice.
pub fn check_config(a: CheckConfigArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let path = a.file.unwrap_or_else(|| g.config_path());
    let cfg = load_trusted(&path)?;
    refuse_unsafe_paths(&cfg)?;
    let mut warnings = node_checks(&cfg, &path)?;
    warnings.extend(config_warnings(&cfg)?);
    let file = std::path::absolute(&path).unwrap_or_else(|_| path.clone());
    warnings.extend(crate::slurmcheck::node_warnings(&cfg, &file));
    if a.fix {
        warnings.extend(fix(&cfg)?);
    }
    warnings.extend(space_warnings(&cfg));
    let allowed: Vec<&str> = cfg.allowed_modes.iter().map(|k| k.as_str()).collect();
    outln!(
        "{}: ok (version {}, allowed modes: {}, default {})",
        path.display(),
        cfg.version,
        if allowed.is_empty() {
            "none but off".to_string()
        } else {
            allowed.join(", ")
        },
        cfg.default_mode
    );
    for w in warnings {
        errln!("colloc: warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What the node's Slurm configuration and file system say about `cfg` (read from
/// `path`): paths a job container makes private to each job and a `run_dir` the job's
/// user cannot reach are errors (exit 2, one line); a `slurm.conf` that cannot be read is
/// a warning.
fn node_checks(cfg: &Config, path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    use colloc_core::mode::ModeKind;
    use colloc_core::slurmconf::SlurmFacts;
    let mut warnings = Vec::new();
    let facts = match SlurmFacts::of_node() {
        Ok(f) => f,
        Err(e) => {
            warnings.push(format!(
                "cannot read the node's Slurm configuration ({e}): not checked against its \
                 job container, nor its settings that defeat colloc"
            ));
            None
        }
    };
    let file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(f) = &facts {
        if let Some(problem) = cfg.private_path_problem(&file, &f.private_dirs()) {
            return Err(bad_input(problem));
        }
        if f.tmpfs_container && !f.contain && cfg.allowed_modes.contains(&ModeKind::Mps) {
            warnings.push(format!(
                "{} has JobContainerType=job_container/tmpfs without PrologFlags=Contain: \
                 colloc starts a job's MPS daemons inside its container from the extern \
                 step, which needs Contain; without it mps jobs are refused",
                f.slurm_conf.display()
            ));
        }
    }
    if let Some(problem) = cfg.run_dir_problem() {
        return Err(bad_input(problem));
    }
    Ok(warnings)
}

/// `check-config --fix`: make `state_dir` with its directories and each GPU's lock file
/// (so no prolog has to make one on a full disk), and mount a capped tmpfs at `run_dir`
/// where it is not a file system of its own yet and holds no job's files. Prints what it
/// made; returns warnings for what it could not do that jobs can live without.
fn fix(cfg: &Config) -> anyhow::Result<Vec<String>> {
    use colloc_core::gpu::GpuControl as _;
    let mut warnings = Vec::new();
    let uuids: Vec<String> = match open_gpus(cfg).and_then(|g| Ok(g.gpus()?)) {
        Ok(list) => list.into_iter().map(|g| g.uuid).collect(),
        Err(e) => {
            warnings.push(format!(
                "no GPU lock files made ({e:#}): each prolog makes its GPUs' lock files then"
            ));
            Vec::new()
        }
    };
    for p in journal::prepare(cfg, &uuids).context("cannot prepare state_dir")? {
        outln!("made {}", p.display());
    }
    let run =
        colloc_core::fs::Dir::create_trusted(&cfg.run_dir, 0o755).context("cannot make run_dir")?;
    if colloc_core::sharedfs::is_mount_point(&cfg.run_dir) == Some(false) {
        if run.entries()?.is_empty() {
            let options = format!(
                "size={}m,nr_inodes={},mode=0755",
                cfg.run_dir_size_mib, cfg.run_dir_inodes
            );
            colloc_core::sys::mount_tmpfs(&cfg.run_dir, &options)
                .with_context(|| format!("cannot mount a tmpfs at {}", cfg.run_dir.display()))?;
            outln!("mounted a tmpfs at {} ({options})", cfg.run_dir.display());
        } else {
            warnings.push(format!(
                "run_dir {} holds files (jobs may be running): no tmpfs mounted over them; \
                 run `colloc check-config --fix` again when the node is idle (at boot)",
                cfg.run_dir.display()
            ));
        }
    }
    Ok(warnings)
}

/// Warnings about room: `state_dir` and `run_dir` on a file system users can fill, and a
/// `run_dir` that is not a (capped) file system of its own.
fn space_warnings(cfg: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    if colloc_core::sharedfs::is_mount_point(&cfg.run_dir) != Some(true) {
        warnings.push(format!(
            "run_dir {} is not a file system of its own: the jobs' MPS directories have no \
             cap but that of the file system it lies on; `colloc check-config --fix` mounts \
             a tmpfs there of run_dir_size_mib = {} MiB and run_dir_inodes = {}",
            cfg.run_dir.display(),
            cfg.run_dir_size_mib,
            cfg.run_dir_inodes
        ));
    }
    for (key, path) in [("state_dir", &cfg.state_dir), ("run_dir", &cfg.run_dir)] {
        warnings.extend(colloc_core::sharedfs::warning(key, path));
    }
    warnings
}

/// Whether root may control MIG here (issue 24): a GPU in MIG mode whose instances root
/// may not list means root lacks the mig-config capability, and mig jobs are refused.
fn mig_control_problems(cfg: &Config, ctl: &NvmlGpus) -> Vec<String> {
    use colloc_core::gpu::GpuControl;
    if colloc_core::sys::euid() != 0 {
        return Vec::new();
    }
    let Ok(gpus) = ctl.gpus() else {
        return Vec::new();
    };
    gpus.iter()
        .filter(|g| g.mig_mode.is_some_and(|m| m.current))
        .filter_map(|g| match ctl.instances(g.index) {
            Err(e) if e.is_no_permission() => Some(format!(
                "GPU {}: the driver refuses MIG control to root ({e}): mig jobs are refused \
                 on this node; {}",
                g.index,
                colloc_core::devfiles::no_permission_hint(cfg)
            )),
            _ => None,
        })
        .collect()
}

/// What check-config warns about; an `nvml_library` path that does not exist is an error.
fn config_warnings(cfg: &Config) -> anyhow::Result<Vec<String>> {
    use colloc_core::mode::ModeKind;
    let mut warnings = Vec::new();
    if cfg.allowed_modes.is_empty() {
        warnings.push(
            "allowed_modes is empty: every job that asks for a mode with --colloc will be \
             refused (only off is allowed); list naive, mps or mig to offer them"
                .to_string(),
        );
    }
    if cfg.nvml_library.contains('/') && !std::path::Path::new(&cfg.nvml_library).exists() {
        return Err(bad_input(format!(
            "nvml_library {} does not exist; give the path of libnvidia-ml.so.1, or the bare \
             name libnvidia-ml.so.1 for the dynamic loader to find",
            cfg.nvml_library
        )));
    }
    // Hooks root would not run are errors: the admin meant them to run.
    if let Some(problem) = colloc_core::hooks::problems(cfg).into_iter().next() {
        return Err(bad_input(format!(
            "{problem}; a hook must be an executable that only root can change, in \
             directories only root can change"
        )));
    }
    match NvmlGpus::open(&cfg.nvml_library) {
        Err(e) => warnings.push(format!(
            "{e}. Fine on a host without NVIDIA GPUs (a login node); on a GPU node every job \
             that asks for a mode would fail its prolog and drain the node"
        )),
        Ok(ctl) if cfg.allowed_modes.contains(&ModeKind::Mig) => {
            warnings.extend(mig_control_problems(cfg, &ctl));
        }
        Ok(_) => {}
    }
    let offers_mps = cfg.allowed_modes.contains(&ModeKind::Mps);
    if offers_mps && cfg.mps_control_path().is_none_or(|p| !p.is_file()) {
        warnings.push(format!(
            "mps_control {} is not installed here: mps jobs would be refused on this node \
             (fine on a login node)",
            cfg.mps_control
        ));
    }
    Ok(warnings)
}
