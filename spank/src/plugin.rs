//! What the plugin does in each SPANK callback, above the C boundary.
//!
//! | callback | where | what |
//! | --- | --- | --- |
//! | `init` | sbatch/srun/salloc, slurmstepd, slurmd | register `--colloc=MODE`; in slurmd, leave a marker that it loaded colloc (`plugin/slurmd.rs`) |
//! | option callback | sbatch/srun/salloc | parse the value and check it against `allowed_modes`: a bad value fails the command before anything is queued |
//! | `job_prolog` | root, own process | apply the mode to the job's GPUs through colloc-core |
//! | `task_post_fork` | root, the extern step (`PrologFlags=Contain`), once per node before the first task | start the job's MPS daemons inside its container and the extern step's cgroup |
//! | `task_init_privileged` | root, each task | set the task environment from the journal, or fail the task with the refusal |
//! | `init_post_opt` | root, the batch step's slurmstepd | where the job runs under a mode, listen for its packs' reports (`plugin/summary.rs`) |
//! | `exit` | root, the batch step's slurmstepd | write the job's summary into its `AdminComment` (`plugin/summary.rs`) |
//! | `job_epilog` | root, own process | restore what the journal recorded |
//!
//! A user's mistake never fails the prolog (that drains the node): the prolog records it
//! and the job's tasks fail in `task_init_privileged` with the reason on the job's stderr.
//! Neither does trouble with one job's own files or daemons (a full `run_dir`, an MPS
//! daemon that does not start), nor a `state_dir`, `run_dir` or `nvml_library` someone
//! other than root could change: those refuse the job. Only real node faults (NVML, a GPU
//! whose state is unknown, a broken or unsafe node config) fail it.
//!
//! In root's callbacks the config is read only if it, and every directory above it, is
//! root's and writable by no one else (`Config::load_trusted`); whoever could change it
//! could make root load any library.
//!
//! GPU indexes: the job's GPUs are read from `SLURM_JOB_GPUS` (else `CUDA_VISIBLE_DEVICES`)
//! in the prolog's environment, set by Slurm, never by the user. They are taken to be
//! NVML indexes. That holds on colloc nodes, whose gres.conf lists `File=/dev/nvidiaN` in
//! NVML order with no `AutoDetect=nvml` (see slurm-conf/gres.conf): Slurm's GPU index is
//! the device minor, and NVML orders GPUs by PCI bus id as the driver numbers its minors.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use colloc_core::config::{Config, ConfigError, DEFAULT_PATH};
use colloc_core::drain;
use colloc_core::gpu::GpuControl;
use colloc_core::jobenv;
use colloc_core::journal::{self, Phase};
use colloc_core::mode::{Mode, VALID_MODES};
use colloc_core::mps::MpsStart;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, ExternStart, JobSpec, Outcome};
use colloc_core::slurmconf::SlurmFacts;

mod args;
mod node_state;
mod request;
mod slurmd;
mod summary;

use args::test_panic;
pub use args::{parse_args, usage, PluginArgs, TestPanic};
#[cfg(test)]
use request::option_value;
pub use request::Request;
pub use summary::{exit, init_post_opt, BATCH_STEP};

/// What the plugin needs from Slurm in a callback; [`crate::ffi::Spank`] implements it
/// over the SPANK API, tests with a fake.
pub trait Host {
    /// Register `--colloc` with this usage line.
    ///
    /// # Errors
    /// Slurm refused the registration.
    fn register_option(&mut self, usage: &str) -> Result<(), String>;
    /// The raw value of `--colloc`, `None` when the job did not use it.
    ///
    /// # Errors
    /// Not available in this context.
    fn getopt(&self) -> Result<Option<Vec<u8>>, String>;
    /// The job id.
    ///
    /// # Errors
    /// Not available in this context.
    fn job_id(&self) -> Result<u32, String>;
    /// The job's user.
    ///
    /// # Errors
    /// Not available in this context.
    fn job_uid(&self) -> Result<u32, String>;
    /// The job's group.
    ///
    /// # Errors
    /// Not available in this context.
    fn job_gid(&self) -> Result<u32, String>;
    /// Set a variable in the task's environment.
    ///
    /// # Errors
    /// Slurm refused.
    fn setenv(&mut self, name: &str, value: &str) -> Result<(), String>;
    /// A variable of this process's environment (the prolog gets the job's here).
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    /// The step id (`S_JOB_STEPID`): [`EXTERN_STEP`] for the extern step.
    ///
    /// # Errors
    /// Not available in this context.
    fn step_id(&self) -> Result<u32, String> {
        Err("no step here".into())
    }
    /// The running Slurm's version (`S_SLURM_VERSION`, e.g. `22.05.8`).
    ///
    /// # Errors
    /// Slurm did not say.
    fn slurm_version(&self) -> Result<String, String> {
        Err("no Slurm here".into())
    }
    /// Is this callback running inside slurmd (`S_CTX_SLURMD`)?
    fn in_slurmd(&self) -> bool {
        false
    }
    /// Is this callback running in slurmstepd, for a step (`S_CTX_REMOTE`)?
    fn remote(&self) -> bool {
        false
    }
}

/// Slurm's step id of a job's extern step (`SLURM_EXTERN_CONT` in `<slurm/slurm.h>`).
pub const EXTERN_STEP: u32 = 0xffff_fffc;

/// Environment variable through which Slurm hands the option to prolog and epilog.
pub const OPTION_ENV: &str = "SPANK__SLURM_SPANK_OPTION_colloc_colloc";

/// The arguments `init` saw, for the option callback of the same process (sbatch/srun).
static SUBMIT_ARGS: OnceLock<PluginArgs> = OnceLock::new();

/// `slurm_spank_init`: register `--colloc` (every context). No NVML, no threads.
///
/// # Errors
/// Bad plugstack arguments, or Slurm refused the option.
pub fn init(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    crate::slurm_version::check(
        crate::sys::BUILT_FOR,
        crate::sys::SUPPORTED_SLURM,
        &host.slurm_version()?,
    )?;
    let parsed = parse_args(args)?;
    let line = usage(&parsed);
    if host.in_slurmd() {
        slurmd::record_loaded(&parsed);
    }
    // A second init in one process (not expected) keeps the first arguments.
    let _ = SUBMIT_ARGS.set(parsed);
    host.register_option(&line)
}

/// The message for a value the grammar rejects.
pub fn option_error(raw: &[u8]) -> String {
    match Mode::parse_bytes(raw) {
        Err(e) => format!("--colloc: {e}"),
        Ok(m) => format!("--colloc: unexpected value {m}; {VALID_MODES}"),
    }
}

/// The option callback. In sbatch/srun/salloc (`remote` false): parse and check against
/// the node's `allowed_modes` (from the `config=` that `init` saw), so a bad value fails
/// before the job is queued. In slurmstepd (`remote` true) nothing is checked here:
/// `task_init_privileged` does it for the job.
///
/// # Errors
/// The grammar's one-line message, or the allowed-modes message.
pub fn option_given(raw: &[u8], remote: bool) -> Result<(), String> {
    if remote {
        return Ok(());
    }
    let args = SUBMIT_ARGS.get();
    if let Some(a) = args {
        test_panic(a, TestPanic::Option);
    }
    let config = args.map_or_else(|| PathBuf::from(DEFAULT_PATH), |a| a.config.clone());
    check_at_submission(raw, &config)
}

/// Check a `--colloc` value where the job is submitted. Where the config cannot be read
/// (a submit host without it, or one only root may read), the grammar alone decides.
///
/// # Errors
/// The grammar's one-line message, or the allowed-modes message.
pub fn check_at_submission(raw: &[u8], config: &Path) -> Result<(), String> {
    let mode = Mode::parse_bytes(raw).map_err(|e| format!("--colloc: {e}"))?;
    if mode == Mode::Off {
        // Always allowed: no need to read the config (keeps sbatch --colloc=off as fast
        // as plain sbatch).
        return Ok(());
    }
    match Config::load(config) {
        Ok(cfg) if !cfg.enabled => Err(switched_off(&mode, config)),
        Ok(cfg) => cfg
            .check_allowed(&mode)
            .map_err(|e| format!("--colloc: {e}")),
        Err(ConfigError::Read { .. }) => {
            log::debug!(
                "{} not readable here: checked --colloc={mode} against the grammar only",
                config.display()
            );
            Ok(())
        }
        Err(e) => {
            log::warn!("ignoring {e}; checked --colloc={mode} against the grammar only");
            Ok(())
        }
    }
}

/// The job's GPUs as NVML indexes, from Slurm's variables in the prolog environment:
/// `SLURM_JOB_GPUS` (the global gres indexes), else `CUDA_VISIBLE_DEVICES`. Unset, empty
/// or Slurm's `NoDevFiles` mean no GPUs. Sorted, without duplicates.
///
/// # Errors
/// A value that is not a list of indexes (a node or Slurm configuration fault).
pub fn job_gpus(
    slurm_job_gpus: Option<&str>,
    cuda_visible: Option<&str>,
) -> Result<Vec<u32>, String> {
    let (name, value) = match (slurm_job_gpus, cuda_visible) {
        (Some(v), _) if !v.trim().is_empty() => ("SLURM_JOB_GPUS", v),
        (_, Some(v)) => (jobenv::VISIBLE, v),
        _ => return Ok(Vec::new()),
    };
    let value = value.trim();
    if value.is_empty() || value == "NoDevFiles" {
        return Ok(Vec::new());
    }
    let mut gpus = value
        .split(',')
        .map(|s| s.trim().parse::<u32>())
        .collect::<Result<Vec<u32>, _>>()
        .map_err(|_| {
            format!(
                "{name}={} is not a list of GPU indexes; colloc nodes need gres.conf with \
                 static File= lines (see slurm-conf/gres.conf)",
                colloc_core::mode::show_input(value)
            )
        })?;
    gpus.sort_unstable();
    gpus.dedup();
    Ok(gpus)
}

/// The node config for a job callback. `Ok(None)`: nothing to do here — there is no
/// config and `missing_ok` (the prolog and epilog: colloc is not offered on this node, or
/// nothing can have been applied), or the job asked for nothing (no `--colloc` other than
/// `off`, no plugstack default) and the config cannot be used.
///
/// A config that loads is also kept as its last good copy ([`colloc_core::lastgood`]),
/// which the epilog uses when the file turns out broken later.
fn job_config(
    args: &PluginArgs,
    asked: bool,
    missing_ok: bool,
) -> Result<Option<Config>, ConfigError> {
    match Config::load_trusted_text(&args.config) {
        Ok((c, text)) => {
            if let Err(e) = colloc_core::lastgood::remember(&args.config, &text) {
                log::warn!(
                    "cannot keep {} for the epilog: {e}",
                    colloc_core::lastgood::path(&args.config).display()
                );
            }
            Ok(Some(c))
        }
        Err(ConfigError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound && missing_ok =>
        {
            if asked {
                log::info!(
                    "{} does not exist: colloc is not offered on this node",
                    args.config.display()
                );
            }
            Ok(None)
        }
        // A job that asked for nothing must not fail (and drain the node) over colloc's
        // configuration: it runs on its whole GPUs as usual; the admin sees the error.
        Err(e) if !asked && args.default.is_none() => {
            if !matches!(&e, ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            {
                log::error!("node configuration: {e} (jobs without --colloc run unaffected)");
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The line for a job that asked for a mode on a node whose colloc.toml is broken: the
/// parse error (`FILE:LINE:COL: …`) and how the admin checks the file.
fn broken_config(mode: &str, e: &ConfigError, config: &Path) -> String {
    format!(
        "--colloc{mode}: colloc is not available on this node, its configuration is broken: \
         {e} (the admin checks it with `colloc check-config {}`)",
        config.display()
    )
}

/// The line for a job that asked for a mode while colloc is switched off.
fn switched_off(mode: &Mode, config: &Path) -> String {
    format!(
        "--colloc={mode}: colloc is switched off here for now (enabled = false in {}); \
         submit without --colloc, or ask your admin when it is back",
        config.display()
    )
}

/// Group of the job's MPS directories when the job's own cannot be found.
const NOGROUP: u32 = 65534;

/// The mode of a job that gave no `--colloc`: the plugstack's `default=`, else the node's
/// `default_mode`.
fn default_mode(args: &PluginArgs, cfg: &Config) -> Mode {
    args.default
        .clone()
        .unwrap_or_else(|| cfg.default_mode.clone())
}

fn env_u32(host: &dyn Host, name: &str) -> Option<u32> {
    host.env(name).and_then(|v| v.trim().parse().ok())
}

fn job_id(host: &dyn Host) -> Result<u32, String> {
    host.job_id()
        .or_else(|e| env_u32(host, "SLURM_JOB_ID").ok_or(e))
}

/// `slurm_spank_job_prolog` (root): apply the mode to the job's GPUs.
///
/// # Errors
/// Real node faults only.
pub fn job_prolog(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    let args = parse_args(args)?;
    let request = Request::read(host);
    let cfg = match job_config(&args, request.asked(), true) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(()),
        // The file's own fault is not the node's: nothing is changed, the job's tasks
        // fail with the same line (task_init_privileged), the node stays up.
        Err(e) if Config::is_broken(&e) => {
            let job = job_id(host).map_or_else(|_| "?".to_string(), |j| j.to_string());
            log::error!(
                "job {job}: refused: {}",
                broken_config("", &e, &args.config)
            );
            return Ok(());
        }
        Err(e) => return Err(format!("node configuration: {e}")),
    };
    let job = job_id(host)?;
    let mode = match &request {
        Request::Invalid(e) => {
            // Only a client that skipped the submission check gets here; the tasks fail
            // with this message (task_init_privileged reads the same request).
            log::info!("job {job}: --colloc: {e}");
            return Ok(());
        }
        r => r.mode_or(|| default_mode(&args, &cfg)).unwrap_or(Mode::Off),
    };
    let gpus = job_gpus(
        host.env("SLURM_JOB_GPUS").as_deref(),
        host.env(jobenv::VISIBLE).as_deref(),
    );
    // Every job's (plain ones too): an interrupted epilog's leftovers on its GPUs first.
    if node_state::before_job(host, &cfg, job, &mode, gpus.as_deref().unwrap_or_default())? {
        return Ok(());
    }
    if !cfg.enabled {
        // Switched off: nothing is applied or recorded; the tasks refuse the job.
        log::info!(
            "job {job}: not applied: {}",
            switched_off(&mode, &args.config)
        );
        return Ok(());
    }
    let uid = env_u32(host, "SLURM_JOB_UID")
        .ok_or(())
        .or_else(|()| host.job_uid())?;
    // The group only owns the job's 0700 MPS directories, so a failed password-database
    // lookup (sssd/LDAP down) must not fail the prolog and drain the node.
    let gid = env_u32(host, "SLURM_JOB_GID")
        .or_else(|| colloc_core::sys::primary_gid(uid))
        .or_else(|| host.job_gid().ok())
        .unwrap_or_else(|| {
            log::warn!(
                "job {job}: no group for uid {uid}; its MPS directories get group {NOGROUP}"
            );
            NOGROUP
        });
    let gpus = gpus?;
    let spec = JobSpec {
        job,
        uid,
        gid,
        gpus,
        mode,
    };
    // Nothing can be trusted in (or recorded into) a state_dir others can change: the
    // job is refused, unrecorded; its tasks meet the same error reading its journal.
    if let Err(e) = journal::check_state_dir(&cfg) {
        log::error!("job {job}: refused: {e}");
        return Ok(());
    }
    // Where the job's tasks run in a container of their own, colloc's files must be
    // visible there, and the MPS daemons are started inside it (from the extern step).
    let facts = slurm_facts();
    if let Some(problem) = facts
        .as_ref()
        .and_then(|f| cfg.private_path_problem(&args.config, &f.private_dirs()))
    {
        log::error!("job {job}: refused: {problem}");
        reconfig::record_refusal(&cfg, &spec, problem);
        publish(&cfg, job);
        return Ok(());
    }
    let mps_start = if facts.as_ref().is_some_and(|f| f.contain) {
        MpsStart::ExternStep
    } else {
        MpsStart::Prolog
    };
    // Root loads this library: not one someone else could have replaced. Nothing has
    // changed, so the job is refused, not the node.
    if let Err(e) = cfg.check_nvml_library() {
        log::error!("job {job}: refused: nvml_library: {e}");
        reconfig::record_refusal(&cfg, &spec, format!("nvml_library: {e}"));
        publish(&cfg, job);
        return Ok(());
    }
    let ctl = NvmlGpus::open(&cfg.nvml_library).map_err(|e| format!("job {job}: {e}"))?;
    let result = match reconfig::prolog_with(&cfg, &ctl, &spec, mps_start) {
        Ok(Outcome::Applied(env)) => {
            log::info!("job {job}: applied {} on GPUs {:?}", spec.mode, spec.gpus);
            log::debug!("job {job}: task environment {env:?}");
            Ok(())
        }
        Ok(Outcome::Refused(r)) => {
            log::info!("job {job}: refused --colloc={}: {}", spec.mode, r.message);
            Ok(())
        }
        Ok(Outcome::Off) => return Ok(()),
        Err(fault) => Err(format!("job {job}: {fault}")),
    };
    publish(&cfg, job);
    result
}

/// The node's Slurm facts (extern step, job container), `None` where slurm.conf cannot
/// be read: then colloc acts as on a node without either, and a job whose tasks turn out
/// to run in a container of their own is refused at task start
/// ([`reconfig::mps_reachable`]).
fn slurm_facts() -> Option<SlurmFacts> {
    match SlurmFacts::of_node() {
        Ok(f) => f,
        Err(e) => {
            log::warn!("cannot read the node's Slurm configuration: {e}");
            None
        }
    }
}

/// `slurm_spank_task_post_fork` (root, slurmstepd): in the job's extern step (task -1,
/// after the prolog, before the first task), start the job's MPS daemons inside its
/// container where the prolog left that to it. Never fails: a daemon that does not start
/// refuses the job through its journal, and its tasks report why.
///
/// # Errors
/// Bad plugstack arguments only.
pub fn task_post_fork(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    if host.step_id() != Ok(EXTERN_STEP) {
        return Ok(());
    }
    let args = parse_args(args)?;
    let cfg = match Config::load_trusted(&args.config) {
        Ok(c) => c,
        Err(ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(());
        }
        Err(e) => {
            log::error!("extern step: node configuration: {e}");
            return Ok(());
        }
    };
    let job = match job_id(host) {
        Ok(j) => j,
        Err(e) => {
            log::error!("extern step: {e}");
            return Ok(());
        }
    };
    match reconfig::start_mps_in_extern_step(&cfg, job, || slurm_facts().unwrap_or_default()) {
        Ok(ExternStart::Nothing) => {}
        Ok(ExternStart::Started {
            daemons,
            mount_ns,
            holder,
            in_step_cgroup,
        }) => log::info!(
            "job {job}: started {daemons} MPS daemon(s) in mount namespace {mount_ns}{}{}",
            holder.map_or_else(String::new, |h| format!(" (job container {})", h.display())),
            if in_step_cgroup {
                ", in the extern step's cgroup"
            } else {
                ""
            }
        ),
        // Logged where it was decided; the node's record shows the refusal.
        Ok(ExternStart::Refused(_)) => publish(&cfg, job),
        Err(e) => log::error!("job {job}: extern step: {e}"),
    }
    Ok(())
}

/// Who publishes: this plugin's version, for `colloc status --cluster`.
const PUBLISHER: &str = concat!("plugin/", env!("CARGO_PKG_VERSION"));

/// How to read this plugin's own build id as loaded: set by the FFI layer (which reads
/// it from the loaded object) before any callback, so this module does not import it.
pub static BUILD_ID: OnceLock<fn() -> Option<String>> = OnceLock::new();

/// Publish the node's colloc state in its Slurm node comment (`colloc status --cluster`).
/// Best effort and bounded: a failure is logged, never the job's or the node's problem.
fn publish(cfg: &Config, job: u32) {
    let build = BUILD_ID.get().and_then(|read| read());
    if let Err(e) = colloc_core::publish::publish(cfg, PUBLISHER, build.as_deref()) {
        log::warn!("job {job}: node comment for `colloc status --cluster` not updated: {e}");
    }
}

/// Why a task may not start, in one line. The guard logs it through `slurm_error`, which
/// slurmstepd writes both to its log and to the task's stderr, the job's error file.
fn refuse_task(job: u32, reason: &str) -> String {
    format!("job {job} cannot run: {reason}")
}

/// `slurm_spank_task_init_privileged` (root, each task): set the task environment the
/// prolog recorded, or fail the task with the reason it recorded.
///
/// # Errors
/// The job was refused, its setup did not complete, or the journal cannot be read.
pub fn task_init_privileged(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    let args = parse_args(args)?;
    test_panic(&args, TestPanic::Task);
    let request = Request::read(host);
    let asked = request.asked();
    let job = job_id(host)?;
    if let Request::Invalid(e) = &request {
        return Err(refuse_task(job, &format!("--colloc: {e}")));
    }
    if asked && !args.config.exists() {
        if let Some(dir) = slurm_facts().and_then(|f| {
            f.private_dirs()
                .into_iter()
                .find(|d| args.config.starts_with(d))
        }) {
            // Not missing: hidden by the job's container.
            return Err(refuse_task(
                job,
                &format!(
                    "the node's colloc.toml {} lies in {}, which \
                     JobContainerType=job_container/tmpfs makes private to each job; the \
                     admin must keep it outside /tmp, /dev/shm and BasePath",
                    args.config.display(),
                    dir.display()
                ),
            ));
        }
        // A node without colloc.toml does not offer colloc: its prolog changed nothing.
        let node = host
            .env("SLURMD_NODENAME")
            .map_or_else(|| "this node".to_string(), |n| format!("node {n}"));
        let mode = request.named().cloned().unwrap_or(Mode::Off);
        return Err(refuse_task(
            job,
            &format!(
                "--colloc={mode} is not offered on {node} (it has no {}); ask your admin \
                 which nodes offer colloc",
                args.config.display()
            ),
        ));
    }
    let cfg = match job_config(&args, asked, false) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(()),
        Err(e) if Config::is_broken(&e) => {
            let mode = request
                .named()
                .map_or_else(String::new, |m| format!("={m}"));
            return Err(refuse_task(job, &broken_config(&mode, &e, &args.config)));
        }
        Err(e) => return Err(format!("node configuration: {e}")),
    };
    let mode = request
        .mode_or(|| default_mode(&args, &cfg))
        .unwrap_or(Mode::Off);
    if mode != Mode::Off {
        if let Some(problem) =
            slurm_facts().and_then(|f| cfg.private_path_problem(&args.config, &f.private_dirs()))
        {
            return Err(refuse_task(job, &problem));
        }
    }
    let journal = reconfig::job_state(&cfg, job).map_err(|e| refuse_task(job, &e.to_string()))?;
    let Some(j) = journal else {
        if mode == Mode::Off {
            // A plain job on GPUs in MIG mode is told, on its stderr; it runs.
            if let Some(n) = reconfig::mig_fit::read_notice(&cfg, job) {
                eprintln!("{n}");
            }
            return Ok(());
        }
        if !cfg.enabled {
            return Err(refuse_task(job, &switched_off(&mode, &args.config)));
        }
        let facts = slurm_facts();
        return Err(refuse_task(
            job,
            &slurmd::no_prolog(host, &cfg, facts.as_ref(), &mode),
        ));
    };
    match j.phase {
        Phase::Applied => {
            // This runs in the task's mount namespace: the job's MPS daemons must too.
            let own_ns = colloc_core::container::own_mount_ns()
                .map_err(|e| refuse_task(job, &format!("cannot read its mount namespace: {e}")))?;
            reconfig::mps_reachable(&j, own_ns).map_err(|e| refuse_task(job, &e))?;
            for (name, value) in &j.env {
                host.setenv(name, value)?;
            }
            if let Some((name, value)) = summary::socket_env() {
                host.setenv(name, &value)?;
            }
            Ok(())
        }
        Phase::Refused => Err(refuse_task(
            job,
            j.refused.as_deref().unwrap_or("refused by the node"),
        )),
        Phase::Applying | Phase::Restoring => Err(refuse_task(
            job,
            &format!("--colloc={}: the GPU setup did not complete", j.mode),
        )),
    }
}

/// `slurm_spank_job_epilog` (root): restore the job's GPUs per its journal. Nothing to do
/// without one (mode off, or the prolog never ran); idempotent.
///
/// # Errors
/// A GPU could not be brought back, or the journal cannot be read (the node drains).
pub fn job_epilog(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    let args = parse_args(args)?;
    let asked = Request::read(host).asked();
    let cfg = match job_config(&args, asked, true) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(()),
        // A broken config must not strand the GPUs of jobs that ran under a good one:
        // restore with the last good copy (or the packaged defaults).
        Err(e) if Config::is_broken(&e) => {
            let (c, from) = colloc_core::lastgood::recall(&args.config);
            log::error!("node configuration: {e}; the epilog restores with {from}");
            c
        }
        Err(e) => return Err(format!("node configuration: {e}")),
    };
    let job = job_id(host)?;
    if let Err(e) = reconfig::mig_fit::write_notice(&cfg, job, None) {
        log::debug!("job {job}: {e}");
    }
    match reconfig::job_state(&cfg, job) {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(()),
        // An unsafe state_dir: the prolog refused the job and wrote nothing. A journal of
        // root's at its place may stand for GPUs colloc changed before the directory was
        // opened up: their state is unknown. Anything else there is someone's forgery:
        // ignored (a user must not be able to drain the node with it).
        Err(e) if e.is_unsafe_state_dir() => {
            if journal::roots_file_present(&cfg, job) {
                return Err(format!(
                    "job {job}: {e}; its journal there cannot be trusted, so the state of its \
                     GPUs is unknown"
                ));
            }
            log::error!("job {job}: {e}");
            return Ok(());
        }
        Err(e) => return Err(format!("job {job}: {e}")),
    }
    // NVML is needed for MIG journals only; restore says so if it was needed and missing.
    let ctl = match cfg
        .check_nvml_library()
        .map_err(|e| e.to_string())
        .and_then(|()| NvmlGpus::open(&cfg.nvml_library).map_err(|e| e.to_string()))
    {
        Ok(c) => Some(c),
        Err(e) => {
            log::warn!("job {job}: {e}");
            None
        }
    };
    let report = reconfig::restore(&cfg, ctl.as_ref().map(|c| c as &dyn GpuControl), job);
    publish(&cfg, job);
    let node = colloc_core::publish::node_name().unwrap_or_else(|| "?".into());
    let report = match report {
        Ok(r) => r,
        // An unknown GPU state: colloc drains the node itself with a reason an admin can
        // act on; only where it cannot does the epilog fail (Slurm's "Epilog error").
        Err(fault) => {
            let line = format!("job {job}: restore failed: {fault}");
            log::error!("{line}");
            return drain_node(
                &node,
                &drain::reason_for_fault(&node, job, &fault.to_string()),
            )
            .map_err(|e| format!("{line}; {e}"));
        }
    };
    for w in &report.warnings {
        log::warn!("{w}");
    }
    log::info!("{}", epilog_summary(job, &report));
    // A GPU left broken for the node's plain jobs (colloc switched it into MIG mode and
    // it stays so): drain, naming the GPU, its holder and what clears it.
    if let Some(h) = drain::broken_holds(&cfg, &report.held).first() {
        drain_node(&node, &drain::reason_for_hold(&node, job, h))
            .map_err(|e| format!("job {job}: {}; {e}", h.describe()))?;
    }
    Ok(())
}

/// Drain this node with `reason`, logging it.
///
/// # Errors
/// Where scontrol could not drain it (the epilog then fails, which drains it too).
fn drain_node(node: &str, reason: &str) -> Result<(), String> {
    match drain::drain(node, reason) {
        Ok(()) => {
            log::error!("drained node {node}: {reason}");
            Ok(())
        }
        Err(e) => Err(format!(
            "colloc could not drain node {node} itself ({e}); reason: {reason}"
        )),
    }
}

/// The epilog's one log line: "restored" only when nothing is left; a GPU whose instances
/// something still holds stays marked (journal kept), and the line says so.
fn epilog_summary(job: u32, report: &reconfig::RestoreReport) -> String {
    let counts = format!(
        "{} MIG instances destroyed, {} MPS daemons stopped, {} processes killed",
        report.destroyed,
        report.mps_stopped,
        report.killed.len()
    );
    if report.held.is_empty() {
        return format!("job {job}: restored ({counts})");
    }
    let held: Vec<String> = report.held.iter().map(|h| h.describe()).collect();
    format!(
        "job {job}: not fully restored ({counts}); GPU(s) stay marked, their journal is kept \
         and later colloc jobs are refused them until `colloc restore --job {job}` succeeds: {}",
        held.join("; ")
    )
}

#[cfg(test)]
mod tests;
