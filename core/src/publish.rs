//! What a node tells the cluster about colloc, for `colloc status --cluster`.
//!
//! A node's colloc state changes only in the job prolog and epilog (and by hand with
//! `colloc apply`/`restore`), and busy nodes (the ones that matter) cannot take a job
//! that would look. So whatever changes the state also publishes it, as one compact
//! JSON record in the node's Slurm `Comment` (`scontrol update NodeName=N Comment=…`),
//! beside whatever the admin wrote there: the record is one word that starts with
//! `{"colloc":` (it has no spaces), and colloc reads the comment first
//! (`scontrol show node N`) and replaces only that word, keeping the admin's text
//! (`rack 4, fan replaced {"colloc":1,…}`). A comment it cannot read is not written.
//! which slurmctld keeps across restarts and anyone can read back with `sinfo` or
//! `scontrol show node`. The record is built from the journals alone, so it says what
//! colloc holds on the node: each job's mode and GPUs, and GPUs left marked.
//!
//! Publishing is best effort: it never fails a prolog or epilog, and it is bounded by
//! [`PUBLISH_TIMEOUT`]. Root runs `scontrol` only from the system directories and only
//! where it is root's alone, never through a shell, with an environment of its own; what
//! it writes comes from root's journals. A record can be stale (slurmctld was unreachable, a node died);
//! `colloc status --cluster` therefore shows when each was written and compares its jobs
//! with what Slurm says runs.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::journal::{self, GpuLock, Phase};

/// Record format version (the value of the `colloc` key).
pub const RECORD_VERSION: u32 = 1;
/// The longest one publication may take: `scontrol` is killed after it. Prologs and
/// epilogs on one node publish one at a time (a lock), each within this bound.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest comment colloc writes; past it the per-job entries are cut (and `cut` set).
pub const RECORD_LIMIT: usize = 4000;

/// One node's colloc state, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRecord {
    /// Format version ([`RECORD_VERSION`]); also how a colloc record is recognized.
    pub colloc: u32,
    /// When it was written (seconds since the epoch).
    pub at: u64,
    /// Who wrote it: `plugin/<version>` from the prolog or epilog, `colloc/<version>` by
    /// hand (no spaces).
    pub by: String,
    /// The GNU build id of the plugin that wrote it (first 12 hex digits); `None` when
    /// written by the `colloc` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// The jobs that have journals on the node.
    pub jobs: Vec<JobEntry>,
    /// Journal files that could not be read (their GPUs may be reconfigured).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: u32,
    /// Entries left out to stay under [`RECORD_LIMIT`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut: u32,
    /// `run_dir`'s room ([`crate::runroom`]), where it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<RunDirRoom>,
}

/// `run_dir`'s room, in short, for `colloc status --cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDirRoom {
    /// Inodes free.
    pub free_inodes: u64,
    /// Inodes in all.
    pub inodes: u64,
    /// KiB free.
    pub free_kib: u64,
    /// KiB in all.
    pub kib: u64,
    /// Inodes used out of sight (files removed while open, trees held elsewhere).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub held_inodes: u64,
    /// No MPS job can be served (run_dir full).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

impl RunDirRoom {
    fn of(r: &crate::runroom::Room) -> RunDirRoom {
        RunDirRoom {
            free_inodes: r.space.free_inodes,
            inodes: r.space.total_inodes,
            free_kib: r.space.free_bytes / 1024,
            kib: r.space.total_bytes / 1024,
            held_inodes: r.hidden_inodes,
            full: r.cannot_serve.is_some(),
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One job's journal, in short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    /// Slurm job id.
    pub job: u32,
    /// The job's user id.
    pub uid: u32,
    /// The normalized mode (what `COLLOC_MODE` says, or the request when refused).
    pub mode: String,
    /// The job's GPUs (NVML indexes).
    pub gpus: Vec<u32>,
    /// How far its setup got.
    pub phase: Phase,
    /// GPUs a restore left marked (instances something still holds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marked: Vec<u32>,
}

/// Why a record could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// `scontrol` is not installed in the system directories.
    #[error("scontrol not found in {}", crate::config::SYSTEM_BIN_DIRS.join(", "))]
    NoScontrol,
    /// It is not a file only root can change: root does not run it.
    #[error("not running {0}")]
    Untrusted(crate::fs::FsError),
    /// It could not be started or waited for.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It failed.
    #[error("`scontrol {}` failed ({status}): {stderr}", if *reading { format!("show node {node}") } else { format!("update NodeName={node} Comment=…") })]
    Failed {
        /// Reading the comment (`show node`), not writing it.
        reading: bool,
        /// The node.
        node: String,
        /// Exit status, or "timed out".
        status: String,
        /// What it said.
        stderr: String,
    },
    /// The journals could not be read.
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl NodeRecord {
    /// The record of this node's journals now.
    ///
    /// # Errors
    /// `state_dir` cannot be read.
    pub fn from_journals(
        cfg: &Config,
        by: &str,
        build: Option<&str>,
    ) -> Result<NodeRecord, journal::JournalError> {
        let mut rec = NodeRecord {
            colloc: RECORD_VERSION,
            at: now(),
            by: by.split_whitespace().collect::<Vec<_>>().join("_"),
            build: build.map(|b| crate::buildid::short(b).to_string()),
            jobs: Vec::new(),
            unreadable: 0,
            cut: 0,
            // A glance: the publish has its own 5 s for scontrol.
            run_dir: crate::runroom::room_with(cfg, false, std::time::Duration::from_millis(200))
                .ok()
                .map(|r| RunDirRoom::of(&r)),
        };
        for j in journal::list(cfg)? {
            match j {
                Ok(j) => rec.jobs.push(JobEntry {
                    job: j.job,
                    uid: j.uid,
                    gpus: if j.gpus.is_empty() {
                        j.requested.clone()
                    } else {
                        j.gpu_indexes()
                    },
                    // The layout made (COLLOC_MODE, e.g. mig:3g.20gbx2), else the request.
                    mode: j
                        .env
                        .iter()
                        .find(|(k, _)| k == crate::jobenv::MODE)
                        .map_or(j.mode, |(_, v)| v.clone()),
                    phase: j.phase,
                    marked: j.held.iter().map(|h| h.index).collect(),
                }),
                Err(_) => rec.unreadable += 1,
            }
        }
        Ok(rec)
    }

    /// The comment text: compact JSON without whitespace (so `scontrol -o show node`
    /// prints it as one word), at most [`RECORD_LIMIT`] bytes.
    pub fn encode(&self) -> String {
        let mut rec = self.clone();
        loop {
            let text = serde_json::to_string(&rec).unwrap_or_default();
            if text.len() <= RECORD_LIMIT || rec.jobs.is_empty() {
                return text;
            }
            rec.jobs.pop();
            rec.cut += 1;
        }
    }

    /// Read a node's comment. `None`: no colloc record in it (empty, or only an admin's
    /// text); `Some(Err)`: colloc's, but not one this version reads.
    pub fn decode(comment: &str) -> Option<Result<NodeRecord, String>> {
        let (_, c) = split_comment(comment);
        let c = c?;
        Some(match serde_json::from_str::<NodeRecord>(c) {
            Ok(r) if r.colloc == RECORD_VERSION => Ok(r),
            Ok(r) => Err(format!(
                "a colloc record of version {} (this colloc reads {RECORD_VERSION})",
                r.colloc
            )),
            Err(e) => Err(format!("an unreadable colloc record ({e})")),
        })
    }
}

/// How colloc's record is recognized in a comment: the start of its one word.
const RECORD_START: &str = "{\"colloc\":";

/// A node comment split into the admin's text (the comment without colloc's record,
/// runs of spaces folded) and colloc's record word, if there is one.
pub fn split_comment(comment: &str) -> (String, Option<&str>) {
    split_word(comment, RECORD_START)
}

/// A Slurm comment split into its other words (spaces folded) and the first word that
/// starts with `start` (colloc's, in a node's or a job's comment).
pub fn split_word<'a>(comment: &'a str, start: &str) -> (String, Option<&'a str>) {
    let mut word = None;
    let mut other: Vec<&str> = Vec::new();
    for w in comment.split_whitespace() {
        if w.starts_with(start) {
            word.get_or_insert(w);
        } else {
            other.push(w);
        }
    }
    (other.join(" "), word)
}

/// The comment to write: the admin's text, then colloc's record.
pub fn merge_comment(admin: &str, record: &str) -> String {
    let admin = admin.trim();
    if admin.is_empty() {
        record.to_string()
    } else {
        format!("{admin} {record}")
    }
}

/// The node's current comment from `scontrol show node NODE` (multi-line form, where
/// `Comment=` is a line of its own), `""` when it has none.
pub fn parse_comment(show_node: &str) -> String {
    show_node
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Comment="))
        .filter(|c| *c != "(null)")
        .unwrap_or("")
        .trim_end()
        .to_string()
}

/// The Slurm node name colloc runs on: `SLURMD_NODENAME` (set for prologs, epilogs and
/// job steps), else the short host name.
pub fn node_name() -> Option<String> {
    if let Ok(n) = std::env::var("SLURMD_NODENAME") {
        if !n.trim().is_empty() {
            return Some(n.trim().to_string());
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    host.trim()
        .split('.')
        .next()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// Publish this node's journals in its Slurm comment, where `cfg.node_comment` allows.
/// Best effort: the caller logs an error, never fails for it.
///
/// `scontrol` is run from the system directories with an environment of its own (only
/// `SLURM_CONF` is passed on), one publication at a time per node (a lock in
/// `state_dir/locks`), and killed after [`PUBLISH_TIMEOUT`].
///
/// # Errors
/// [`PublishError`].
pub fn publish(cfg: &Config, by: &str, build: Option<&str>) -> Result<(), PublishError> {
    if !cfg.node_comment {
        return Ok(());
    }
    let Some(node) = node_name() else {
        return Err(PublishError::Failed {
            reading: false,
            node: "?".into(),
            status: "no node name".into(),
            stderr: "neither SLURMD_NODENAME nor a host name".into(),
        });
    };
    let start = Instant::now();
    // Two prologs at once: each reads the journals and writes; the lock makes the last
    // writer one that saw the other's journal.
    let _lock = GpuLock::acquire_within(cfg, "node-comment", PUBLISH_TIMEOUT)?;
    let rec = NodeRecord::from_journals(cfg, by, build)?;
    let conf = std::env::var_os("SLURM_CONF");
    // The admin's text stays: read the comment, replace colloc's word only.
    let program = crate::config::resolve_program("scontrol").ok_or(PublishError::NoScontrol)?;
    let left = PUBLISH_TIMEOUT.saturating_sub(start.elapsed());
    let shown = run_scontrol(
        &program,
        &node,
        &["show", "node", &node],
        left,
        conf.as_deref(),
    )?;
    let (admin, _) = split_comment(&parse_comment(&shown));
    let left = PUBLISH_TIMEOUT.saturating_sub(start.elapsed());
    set_comment(
        &node,
        &merge_comment(&admin, &rec.encode()),
        left,
        conf.as_deref(),
    )
}

/// `scontrol update NodeName=NODE Comment=TEXT` with `SLURM_CONF=slurm_conf` where given,
/// killed after `timeout`.
///
/// # Errors
/// [`PublishError`].
pub fn set_comment(
    node: &str,
    text: &str,
    timeout: Duration,
    slurm_conf: Option<&std::ffi::OsStr>,
) -> Result<(), PublishError> {
    let program = crate::config::resolve_program("scontrol").ok_or(PublishError::NoScontrol)?;
    run_scontrol(
        &program,
        node,
        &[
            "update",
            &format!("NodeName={node}"),
            &format!("Comment={text}"),
        ],
        timeout,
        slurm_conf,
    )
    .map(|_| ())
}

/// `scontrol update NodeName=NODE SETTINGS...` (no shell), killed after `timeout`: root
/// runs it only where it and its directories are root's alone.
///
/// # Errors
/// [`PublishError`].
pub fn scontrol_update(
    program: &std::path::Path,
    node: &str,
    settings: &[String],
    timeout: Duration,
    slurm_conf: Option<&std::ffi::OsStr>,
) -> Result<(), PublishError> {
    let node_arg = format!("NodeName={node}");
    let mut args: Vec<&str> = vec!["update", &node_arg];
    args.extend(settings.iter().map(String::as_str));
    run_scontrol(program, node, &args, timeout, slurm_conf).map(|_| ())
}

/// Run `scontrol ARGS` (about `node`, for messages), killed after `timeout`; its
/// standard output on success.
pub(crate) fn run_scontrol(
    program: &std::path::Path,
    node: &str,
    args: &[&str],
    timeout: Duration,
    slurm_conf: Option<&std::ffi::OsStr>,
) -> Result<String, PublishError> {
    run_tool(program, args, timeout, slurm_conf).map_err(|f| match f.kind {
        ToolFault::Untrusted(e) => PublishError::Untrusted(*e),
        ToolFault::Spawn(source) => PublishError::Spawn {
            program: program.to_path_buf(),
            source,
        },
        ToolFault::Failed => PublishError::Failed {
            reading: args.first() == Some(&"show"),
            node: node.to_string(),
            status: f.status,
            stderr: f.stderr,
        },
    })
}

/// Why a Slurm tool root ran did not succeed.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` {}", match &self.kind {
    ToolFault::Untrusted(e) => format!("not run: {e}"),
    ToolFault::Spawn(e) => format!("could not be started: {e}"),
    ToolFault::Failed => format!("failed ({}): {}", self.status, self.stderr),
})]
pub struct ToolFailure {
    /// The program and its first two arguments.
    pub command: String,
    /// What went wrong.
    pub kind: ToolFault,
    /// Exit status, or "timed out after N s".
    pub status: String,
    /// What it said on stderr (one line, at most 4 KiB).
    pub stderr: String,
}

/// How a tool failed.
#[derive(Debug)]
pub enum ToolFault {
    /// It is not a file only root can change: root does not run it.
    Untrusted(Box<crate::fs::FsError>),
    /// It could not be started or waited for.
    Spawn(std::io::Error),
    /// It ran and failed, or timed out.
    Failed,
}

/// Run a Slurm tool as root: only where it and its directories are root's alone, never
/// through a shell, with an environment of its own (`PATH` and `SLURM_CONF` where given),
/// killed after `timeout`. Its standard output (at most 64 MiB) on success.
///
/// # Errors
/// [`ToolFailure`].
pub(crate) fn run_tool(
    program: &std::path::Path,
    args: &[&str],
    timeout: Duration,
    slurm_conf: Option<&std::ffi::OsStr>,
) -> Result<String, ToolFailure> {
    run_tool_with(program, args, timeout, slurm_conf, |pipe| {
        use std::io::Read as _;
        let mut buf = Vec::new();
        let _ = pipe.take(64 << 20).read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// [`run_tool`], its standard output read by `read` as it comes (on a thread of its own,
/// so that the tool never blocks on a full pipe): a long answer is taken in whatever
/// memory `read` keeps, not held whole. `read` must read to the end (a tool whose
/// output is left unread may fail on a closed pipe). `read`'s answer on success.
///
/// # Errors
/// [`ToolFailure`].
pub(crate) fn run_tool_with<T: Send + 'static>(
    program: &std::path::Path,
    args: &[&str],
    timeout: Duration,
    slurm_conf: Option<&std::ffi::OsStr>,
    read: impl FnOnce(Box<dyn std::io::Read + Send>) -> T + Send + 'static,
) -> Result<T, ToolFailure> {
    let command = std::iter::once(program.file_name().map_or_else(
        || program.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    ))
    .chain(args.iter().take(2).map(|a| (*a).to_string()))
    .collect::<Vec<_>>()
    .join(" ");
    let fail = |kind| ToolFailure {
        command: command.clone(),
        kind,
        status: String::new(),
        stderr: String::new(),
    };
    // Root runs it: only if it and its directories are root's alone (as mps_control).
    crate::fs::open_trusted_file(program).map_err(|e| fail(ToolFault::Untrusted(Box::new(e))))?;
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(conf) = slurm_conf {
        cmd.env("SLURM_CONF", conf);
    }
    crate::sys::no_inherited_fds(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| fail(ToolFault::Spawn(e)))?;
    // Both pipes are read while it runs: a long answer (a big `squeue --json`) must not
    // block it until the timeout.
    let stdout: Box<dyn std::io::Read + Send> = match child.stdout.take() {
        Some(p) => Box::new(p),
        None => Box::new(std::io::empty()),
    };
    let out_t = std::thread::spawn(move || read(stdout));
    let stderr_pipe = child.stderr.take();
    let err_t = std::thread::spawn(move || {
        use std::io::Read as _;
        let mut buf = Vec::new();
        if let Some(p) = stderr_pipe {
            // Its first 4 KiB are kept; the rest is read and dropped.
            let mut p = p;
            let _ = (&mut p).take(4096).read_to_end(&mut buf);
            let _ = std::io::copy(&mut p, &mut std::io::sink());
        }
        String::from_utf8_lossy(&buf).into_owned()
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().map_err(|e| fail(ToolFault::Spawn(e)))? {
            Some(s) => break Some(s),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    // The tool has ended (or was killed): its pipes reach their end.
    let stdout = out_t.join();
    let stderr = err_t.join().unwrap_or_default();
    match (status, stdout) {
        (Some(s), Ok(out)) if s.success() => Ok(out),
        (Some(s), Err(_)) if s.success() => Err(ToolFailure {
            status: "its output could not be read".into(),
            stderr: stderr.trim().replace('\n', " "),
            ..fail(ToolFault::Failed)
        }),
        (other, _) => Err(ToolFailure {
            status: other.map_or_else(
                || format!("timed out after {} s", timeout.as_secs()),
                |s| s.to_string(),
            ),
            stderr: stderr.trim().replace('\n', " "),
            ..fail(ToolFault::Failed)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(jobs: usize) -> NodeRecord {
        NodeRecord {
            colloc: RECORD_VERSION,
            at: 1_700_000_000,
            by: "plugin/0.1.0".into(),
            build: Some("59d51dd03d65".into()),
            jobs: (0..jobs)
                .map(|i| JobEntry {
                    job: 1000 + i as u32,
                    uid: 1001,
                    mode: "mig:3g.20gbx2".into(),
                    gpus: vec![0, 1],
                    phase: Phase::Applied,
                    marked: if i == 0 { vec![1] } else { vec![] },
                })
                .collect(),
            unreadable: 0,
            cut: 0,
            run_dir: None,
        }
    }

    #[test]
    fn the_admins_text_stays_beside_the_record() {
        let rec = r#"{"colloc":1,"at":5,"by":"plugin/0.1.0","jobs":[]}"#;
        // No comment yet, or only the admin's: the record goes after it.
        assert_eq!(merge_comment("", rec), rec);
        let (admin, old) = split_comment("rack 4, fan replaced");
        assert_eq!((admin.as_str(), old), ("rack 4, fan replaced", None));
        let c = merge_comment(&admin, rec);
        assert_eq!(c, format!("rack 4, fan replaced {rec}"));
        // The next publication replaces colloc's word only, wherever the admin wrote
        // around it since.
        let later = format!("see ticket 12 {rec} rack 4, fan replaced");
        let (admin, old) = split_comment(&later);
        assert_eq!(admin, "see ticket 12 rack 4, fan replaced");
        assert_eq!(old, Some(rec));
        let newer = r#"{"colloc":1,"at":9,"by":"plugin/0.1.0","jobs":[]}"#;
        assert_eq!(
            merge_comment(&admin, newer),
            format!("see ticket 12 rack 4, fan replaced {newer}")
        );
        // Decoding finds the record among the admin's words.
        let r = NodeRecord::decode(&format!("rack 4 {newer}"))
            .unwrap()
            .unwrap();
        assert_eq!(r.at, 9);
        assert!(NodeRecord::decode("rack 4, fan replaced").is_none());
    }

    #[test]
    fn the_comment_is_read_from_show_node() {
        let out = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   OS=Linux 6.1 #1 SMP\n   \
                   Comment=rack 4, fan replaced {\"colloc\":1}\n   Extra=x\n   \
                   Reason=none\n";
        assert_eq!(parse_comment(out), "rack 4, fan replaced {\"colloc\":1}");
        assert_eq!(parse_comment("NodeName=n1 State=IDLE\n"), "");
        assert_eq!(parse_comment("NodeName=n1\n   Comment=(null)\n"), "");
    }

    #[test]
    fn records_round_trip_as_one_word() {
        let r = rec(2);
        let text = r.encode();
        assert!(!text.contains(char::is_whitespace), "{text}");
        assert!(text.starts_with("{\"colloc\":1,"), "{text}");
        assert_eq!(NodeRecord::decode(&text), Some(Ok(r)));
        // Someone else's comment, or none: not ours.
        assert_eq!(NodeRecord::decode(""), None);
        assert_eq!(NodeRecord::decode("replaced DIMM 3 (ticket 42)"), None);
        assert_eq!(NodeRecord::decode("{\"other\":1}"), None);
        // Ours but from a newer colloc, or damaged: said so.
        let newer = text.replacen("{\"colloc\":1,", "{\"colloc\":2,", 1);
        let e = NodeRecord::decode(&newer).unwrap().unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        let e = NodeRecord::decode("{\"colloc\":1,\"at\":")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("unreadable"), "{e}");
    }

    #[test]
    fn a_long_record_is_cut_and_says_so() {
        let r = rec(200);
        let text = r.encode();
        assert!(text.len() <= RECORD_LIMIT, "{}", text.len());
        let back = NodeRecord::decode(&text).unwrap().unwrap();
        assert_eq!(back.jobs.len() + back.cut as usize, 200);
        assert!(back.cut > 0);
        assert_eq!(back.jobs[0], r.jobs[0], "the first jobs are kept");
    }

    #[test]
    fn by_has_no_whitespace() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            state_dir: dir.path().join("state"),
            run_dir: dir.path().join("run"),
            ..Config::default()
        };
        let r = NodeRecord::from_journals(&cfg, "colloc restore 0.1.0", None).unwrap();
        assert_eq!(r.by, "colloc_restore_0.1.0");
        assert!(r.jobs.is_empty());
    }

    #[test]
    fn an_scontrol_others_could_change_is_not_run() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let fake = dir.path().join("scontrol");
        std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = run_scontrol(
            &fake,
            "n1",
            &["update", "NodeName=n1", "Comment={}"],
            Duration::from_secs(3),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, PublishError::Untrusted(_)), "{e}");
        assert!(e.to_string().contains("mode 0777"), "{e}");
        assert!(!marker.exists(), "it ran");
        // The same program, root's alone: run (where the test runs as root).
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        if crate::sys::euid() == 0 && crate::fs::open_trusted_file(&fake).is_ok() {
            run_scontrol(
                &fake,
                "n1",
                &["update", "NodeName=n1", "Comment={}"],
                Duration::from_secs(3),
                None,
            )
            .unwrap();
            assert!(marker.exists());
        }
    }

    #[test]
    fn a_failing_scontrol_is_an_error_within_the_time() {
        if crate::config::resolve_program("scontrol").is_none() {
            return; // no Slurm client on this machine
        }
        // No controller answers at this configuration: scontrol fails (or, where the
        // connection hangs, is killed at the deadline), and the error says which node.
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        std::fs::write(
            &conf,
            "ClusterName=x\nSlurmctldHost=nohost(127.0.0.1)\nSlurmctldPort=1\n",
        )
        .unwrap();
        let t = Instant::now();
        let e = set_comment(
            "n1",
            "{\"colloc\":1}",
            Duration::from_secs(3),
            Some(conf.as_os_str()),
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(
            e.to_string()
                .starts_with("`scontrol update NodeName=n1 Comment=…` failed"),
            "{e}"
        );
    }
}
