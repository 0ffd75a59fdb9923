//! `colloc status`: this node's GPUs, instances, MPS daemons and journals, with what
//! Slurm says of each journal's job ([`model::NodeStatus`]); and `colloc status
//! --cluster`: every node's colloc state as its prolog and epilog published it, merged
//! with Slurm's queue into one table of node × GPU × job × mode
//! ([`cluster::ClusterStatus`]). Each view is read once into its model, then printed by
//! the format chosen by name ([`FORMATS`], [`CLUSTER_FORMATS`]; `--json` is `json`).
//!
//! `--format openmetrics` is the node view for Prometheus ([`openmetrics`]); `--output
//! FILE` writes any node format atomically where node_exporter's textfile collector reads
//! it ([`textfile`]).
//!
//! Monitoring reads `--json`. Neither view ever says "nothing" where it could not look:
//! a part that could not be read is `null` with an `error`, and the exit status is 1.

use std::process::ExitCode;

use colloc_core::buildid;
use colloc_core::publish::NodeRecord;

use crate::slurm::{self, NodeFilter};
use crate::Global;
use colloc_results::output::{self, Formats, Json};

use cluster::{ClusterStatus, NodeView};
use model::NodeStatus;

/// The formats of `colloc status`, the default first: one line each.
pub const FORMATS: Formats<NodeStatus> = Formats {
    command: "colloc status",
    list: &[&text::Text, &Json::SORTED, &openmetrics::OpenMetrics],
};

/// The formats of `colloc status --cluster`.
pub const CLUSTER_FORMATS: Formats<ClusterStatus> = Formats {
    command: "colloc status --cluster",
    list: &[&cluster::Text, &Json::SORTED],
};

/// `colloc status [--json | --format NAME] [--output FILE]
/// [--cluster [--nodes LIST | --partition NAME]]`
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print JSON (for monitoring: a part that could not be read is null, with "error");
    /// the same as --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// The output format: text (the default), json, or openmetrics (this node's view for
    /// Prometheus; not with --cluster).
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// Write the output to FILE instead of stdout: whole or not at all (a temporary file
    /// beside it, fsync, rename), mode 0644, for node_exporter's textfile collector. FILE's
    /// directory must be root's and writable by no one else (or sticky and root's).
    #[arg(long, value_name = "FILE", conflicts_with = "cluster")]
    output: Option<std::path::PathBuf>,
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
    /// With --cluster: instead of the nodes now, what colloc jobs did from DATE on, from
    /// Slurm's accounting (sacct): jobs, users, GPU-hours, runs per GPU-hour and energy
    /// per mode. DATE: YYYY-MM-DD[THH:MM[:SS]].
    #[arg(
        long,
        value_name = "DATE",
        requires = "cluster",
        conflicts_with_all = ["nodes", "partition"]
    )]
    since: Option<String>,
    /// With --since: the period's end (default: now).
    #[arg(long, value_name = "DATE", requires = "since")]
    until: Option<String>,
}

impl StatusArgs {
    /// The format asked for by name: `--json` is `json`; none is the default.
    fn format_name(&self) -> Option<&str> {
        if self.json {
            Some("json")
        } else {
            self.format.as_deref()
        }
    }
}

/// `colloc status`.
pub fn main(a: StatusArgs, g: &Global) -> anyhow::Result<ExitCode> {
    if let Some(since) = &a.since {
        return period(&a, since);
    }
    if a.cluster {
        return cluster(&a);
    }
    // Bad input first: an unknown format, before anything is read.
    let format = FORMATS.pick(a.format_name())?;
    // And a FILE that cannot be written: its directory is opened and checked first.
    let target = match &a.output {
        Some(file) => Some(textfile::Target::open(file).map_err(output_error)?),
        None => None,
    };
    let cfg = match crate::admin::config_or_default(g) {
        Ok(cfg) => cfg,
        Err(e) => {
            // The metrics say the configuration is broken rather than going stale.
            if let (Some(t), "openmetrics") = (&target, format.name()) {
                let text = openmetrics::config_invalid(own_build_id().as_deref());
                if let Err(w) = t.write(&text) {
                    log::warn!("{w}");
                }
            }
            return Err(e);
        }
    };
    let status = NodeStatus::read(&cfg, own_build_id());
    match &target {
        None => output::print(format, &status)?,
        Some(t) => t.write(&format.render(&status)?).map_err(output_error)?,
    }
    Ok(if status.error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A refused `--output` is bad input (exit 2); a failed write is an error (exit 1).
fn output_error(e: textfile::OutputError) -> anyhow::Error {
    if e.is_bad_input() {
        crate::bad_input(e.to_string())
    } else {
        e.into()
    }
}

/// A user's name, else `uid N`.
fn user(uid: u32) -> String {
    colloc_core::sys::user_name(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// `colloc status --cluster`.
fn cluster(a: &StatusArgs) -> anyhow::Result<ExitCode> {
    let format = CLUSTER_FORMATS.pick(a.format_name())?;
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
    let status = ClusterStatus::new(&views, &states);
    output::print(format, &status)?;
    Ok(if status.error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// How long `sacct` may take over a period (a month of a busy cluster is a big query).
const SACCT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `colloc status --cluster --since DATE [--until DATE]`.
fn period(a: &StatusArgs, since: &str) -> anyhow::Result<ExitCode> {
    let format = period::PERIOD_FORMATS.pick(a.format_name())?;
    let since = period::check_date("--since", since).map_err(crate::bad_input)?;
    let until = period::check_date("--until", a.until.as_deref().unwrap_or("now"))
        .map_err(crate::bad_input)?;
    let args = period::sacct_args(&since, &until);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answer = slurm::ask_within("sacct", &args, SACCT_TIMEOUT)?;
    if !answer.ok {
        let hint = if answer.stderr.contains("accounting storage is disabled") {
            "; the period summary reads Slurm's accounting database \
             (AccountingStorageType=accounting_storage/slurmdbd)"
        } else {
            ""
        };
        anyhow::bail!(
            "`sacct {}` failed: {}{hint}",
            args.join(" ").replace(period::SEP, "\\x1f"),
            answer.stderr
        );
    }
    let p = period::Period::new(&since, &until, &period::parse_sacct(&answer.stdout));
    output::print(format, &p)?;
    Ok(ExitCode::SUCCESS)
}

/// The `colloc` binary's own build id, for `status --json` (which build runs here).
pub fn own_build_id() -> Option<String> {
    std::env::current_exe()
        .ok()
        .and_then(|p| buildid::of_file(&p))
}

mod cluster;
pub mod live;
mod model;
mod openmetrics;
pub mod period;
mod rundir;
#[cfg(test)]
mod tests;
mod text;
mod textfile;
pub mod unixdiag;
