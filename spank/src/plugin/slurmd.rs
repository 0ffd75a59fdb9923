//! The plugin inside slurmd, and the one line for a job whose node's slurmd runs no colloc
//! prolog (issue 34).
//!
//! slurmd decides when it starts whether any SPANK plugin has a prolog or an epilog. A
//! plugstack line added while it runs reaches sbatch (the option is accepted) and
//! slurmstepd (`task_init_privileged` runs) at once, but no colloc prolog runs until
//! slurmd restarts (`scontrol reconfigure` is not enough on Slurm 22.05). So `init` in
//! slurmd leaves a marker ([`colloc_core::slurmdmark`]); a task that finds no journal asks
//! whether the node's running slurmd left one, and names that cause and its fix instead of
//! blaming `state_dir`.

use colloc_core::config::Config;
use colloc_core::mode::Mode;
use colloc_core::slurmconf::SlurmFacts;
use colloc_core::slurmdmark::{self, SlurmdLoaded};

use super::{Host, PluginArgs};

/// In slurmd's `slurm_spank_init`: record that this slurmd loaded colloc, in `state_dir`
/// of the node config. Never fails slurmd: a node without colloc.toml has nothing to
/// record, and trouble is logged (the jobs' own messages then say what they find).
pub(super) fn record_loaded(args: &PluginArgs) {
    let cfg = match Config::load_trusted(&args.config) {
        Ok(c) => c,
        Err(e) => {
            log::debug!("no slurmd marker: {e}");
            return;
        }
    };
    if let Err(e) = slurmdmark::record_this_slurmd(&cfg.state_dir) {
        log::warn!(
            "cannot record in {} that this slurmd loaded colloc: {e}",
            cfg.state_dir.display()
        );
    }
}

/// The line for a `--colloc=MODE` task that finds no record of its job's prolog.
pub(super) fn no_prolog(
    host: &dyn Host,
    cfg: &Config,
    facts: Option<&SlurmFacts>,
    mode: &Mode,
) -> String {
    let node = host.env("SLURMD_NODENAME");
    let where_ = node
        .as_deref()
        .map_or_else(|| "this node".to_string(), |n| format!("node {n}"));
    match loaded(node.as_deref(), cfg, facts) {
        SlurmdLoaded::No { pid } => format!(
            "--colloc={mode}: the slurmd of {where_} (pid {pid}) started before colloc's \
             plugstack.conf line was added, so it runs no colloc prolog; the admin must \
             restart slurmd there (`systemctl restart slurmd`)"
        ),
        SlurmdLoaded::Yes => format!(
            "--colloc={mode}: the node did not set up the GPUs (no record of this job's \
             prolog: its state_dir {} may be full or unusable; the node's log says why)",
            cfg.state_dir.display()
        ),
        SlurmdLoaded::Unknown => format!(
            "--colloc={mode}: the node did not set up the GPUs (no record of this job's \
             prolog): either slurmd on {where_} started before colloc's plugstack.conf line \
             was added (the admin restarts slurmd) or its state_dir {} is full or unusable \
             (the node's log says why)",
            cfg.state_dir.display()
        ),
    }
}

/// Whether the node's running slurmd (from its pid file) loaded colloc.
fn loaded(node: Option<&str>, cfg: &Config, facts: Option<&SlurmFacts>) -> SlurmdLoaded {
    let Some(facts) = facts else {
        return SlurmdLoaded::Unknown;
    };
    let host = short_hostname();
    let template = facts.slurmd_pid_file.as_deref().unwrap_or("");
    if node.is_none() && template.contains("%n") {
        return SlurmdLoaded::Unknown;
    }
    let pid_file = facts.slurmd_pid_file(node.unwrap_or(&host), &host);
    match slurmdmark::slurmd_pid(&pid_file) {
        Some(pid) => slurmdmark::slurmd_loaded(&cfg.state_dir, pid),
        None => {
            log::debug!("no slurmd pid in {}", pid_file.display());
            SlurmdLoaded::Unknown
        }
    }
}

/// This host's name up to its first dot (Slurm's `%h`).
fn short_hostname() -> String {
    let full = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    full.trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string()
}
