//! What `colloc status` asks Slurm: which jobs still run (`squeue`), and the nodes with
//! the colloc record each publishes in its comment (`scontrol show node`). The output of
//! each tool is parsed by a pure function; errors carry the command and what it said.
//! [`job`]: what a job's own colloc asks near its time limit, and its requeue.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod job;

/// The longest colloc waits for a Slurm client command (a client that cannot reach
/// slurmctld retries for up to a minute).
pub const SLURM_TIMEOUT: Duration = Duration::from_secs(10);

/// A Slurm command that could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` {what}")]
pub struct SlurmError {
    /// The command line.
    pub command: String,
    /// What went wrong: exit status and its stderr, or why it did not run.
    pub what: String,
}

/// What came back from a finished command.
#[derive(Debug, Clone)]
pub struct Answer {
    /// It exited 0.
    pub ok: bool,
    /// What it printed.
    pub stdout: String,
    /// What it printed on stderr (after its exit status, when it failed).
    pub stderr: String,
}

/// Run a Slurm client with [`SLURM_TIMEOUT`].
fn ask(program: &str, args: &[&str]) -> Result<Answer, SlurmError> {
    ask_within(program, args, SLURM_TIMEOUT)
}

/// Run a Slurm client (killed after `timeout`).
///
/// # Errors
/// It could not be run, or gave no answer in time.
pub fn ask_within(program: &str, args: &[&str], timeout: Duration) -> Result<Answer, SlurmError> {
    let command = format!("{program} {}", args.join(" "));
    let fail = |what: String| SlurmError {
        command: command.clone(),
        what,
    };
    if let Some(conf) = std::env::var_os("SLURM_CONF") {
        if !std::path::Path::new(&conf).exists() {
            return Err(fail(format!(
                "not run: SLURM_CONF={} does not exist",
                conf.to_string_lossy()
            )));
        }
    }
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("could not be run: {e}")))?;
    // Read both pipes in threads so a long answer cannot block the child.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(64 << 20).read_to_string(&mut s);
        }
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.take(1 << 20).read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    match status {
        None => Err(fail(format!(
            "gave no answer within {} s",
            timeout.as_secs()
        ))),
        Some(s) => Ok(Answer {
            ok: s.success(),
            stdout,
            stderr: if s.success() {
                stderr
            } else {
                format!("{s}: {}", one_line(&stderr))
            },
        }),
    }
}

fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What Slurm says of a job that has a colloc journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Slurm's state of it (`squeue -t all`), e.g. `RUNNING`, `COMPLETED`.
    Known(String),
    /// Slurm does not know the job (any more): it ended.
    NotInQueue,
    /// Slurm could not be asked; why.
    Unknown(String),
}

impl JobState {
    /// Does the job still hold its node: running, or being set up or cleaned up there?
    /// `None` where Slurm could not tell.
    pub fn live(&self) -> Option<bool> {
        match self {
            JobState::Known(s) => Some(matches!(
                s.as_str(),
                "RUNNING"
                    | "CONFIGURING"
                    | "COMPLETING"
                    | "SUSPENDED"
                    | "STOPPED"
                    | "SIGNALING"
                    | "RESIZING"
                    | "STAGE_OUT"
            )),
            JobState::NotInQueue => Some(false),
            JobState::Unknown(_) => None,
        }
    }

    /// The state as a word for tables and JSON: Slurm's, `GONE`, or `unknown`.
    pub fn word(&self) -> &str {
        match self {
            JobState::Known(s) => s,
            JobState::NotInQueue => "GONE",
            JobState::Unknown(_) => "unknown",
        }
    }
}

/// Parse `squeue -h -o %A|%T` lines: job id to state.
pub fn parse_squeue(out: &str) -> BTreeMap<u32, String> {
    out.lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            Some((id.trim().parse().ok()?, state.trim().to_string()))
        })
        .collect()
}

/// What Slurm says of each of these jobs, in one `squeue` call.
pub fn job_states(ids: &[u32]) -> BTreeMap<u32, JobState> {
    if ids.is_empty() {
        return BTreeMap::new();
    }
    let list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let answer = ask("squeue", &["-h", "-t", "all", "-j", &list, "-o", "%A|%T"]);
    let known = match answer {
        Ok(a) if a.ok => Ok(parse_squeue(&a.stdout)),
        // Every id unknown: squeue fails with this (one known id is enough to succeed).
        Ok(a) if a.stderr.contains("Invalid job id") => Ok(BTreeMap::new()),
        Ok(a) => Err(format!("squeue {list}: {}", a.stderr)),
        Err(e) => Err(e.to_string()),
    };
    ids.iter()
        .map(|&id| {
            let state = match &known {
                Ok(k) => k
                    .get(&id)
                    .map_or(JobState::NotInQueue, |s| JobState::Known(s.clone())),
                Err(e) => JobState::Unknown(e.clone()),
            };
            (id, state)
        })
        .collect()
}

/// `NodeList=` of `scontrol -o show job` (`None` while it has none, e.g. pending).
pub fn parse_job_nodelist(out: &str) -> Option<String> {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("NodeList="))
        .filter(|l| !l.is_empty() && *l != "(null)")
        .map(str::to_string)
}

/// The nodes job `id` holds now, as Slurm names them (`scontrol show job`, then
/// `scontrol show hostnames`): a node Slurm took away (a `--no-kill` job that lost it) is
/// not among them.
///
/// # Errors
/// Slurm could not be asked, or the job holds no node.
pub fn job_nodes(id: &str) -> Result<Vec<String>, SlurmError> {
    let a = ask("scontrol", &["-o", "show", "job", id])?;
    let fail = |what: String| SlurmError {
        command: format!("scontrol -o show job {id}"),
        what,
    };
    if !a.ok {
        return Err(fail(a.stderr));
    }
    let list = parse_job_nodelist(&a.stdout).ok_or_else(|| fail("shows no NodeList".into()))?;
    hostnames(&list)
}

/// A Slurm node list (`n[1-3],gpu07`) as names (`scontrol show hostnames`).
///
/// # Errors
/// Slurm could not be asked.
pub fn hostnames(list: &str) -> Result<Vec<String>, SlurmError> {
    let a = ask("scontrol", &["show", "hostnames", list])?;
    if !a.ok {
        return Err(SlurmError {
            command: format!("scontrol show hostnames {list}"),
            what: a.stderr,
        });
    }
    Ok(a.stdout.split_whitespace().map(str::to_string).collect())
}

/// One node as `scontrol -o show node` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Slurm's node name.
    pub name: String,
    /// Its state, e.g. `IDLE`, `MIXED`, `DOWN+DRAIN`.
    pub state: String,
    /// colloc's record word of its comment (the record has no spaces and may follow an
    /// admin's text), else the comment's first word; `None` when unset.
    pub comment: Option<String>,
}

/// Parse `scontrol -o show node` (one node per line, `Key=Value` words).
pub fn parse_show_node(out: &str) -> Vec<NodeInfo> {
    out.lines()
        .filter_map(|line| {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key).map(str::to_string))
            };
            Some(NodeInfo {
                name: field("NodeName=")?,
                state: field("State=").unwrap_or_default(),
                comment: line.split_once(" Comment=").and_then(|(_, c)| {
                    let mut words = c.split_whitespace();
                    let first = words.next().filter(|w| *w != "(null)")?;
                    Some(
                        std::iter::once(first)
                            .chain(words)
                            .find(|w| w.starts_with("{\"colloc\":"))
                            .unwrap_or(first)
                            .to_string(),
                    )
                }),
            })
        })
        .collect()
}

/// Which nodes `status --cluster` looks at.
#[derive(Debug, Clone, Default)]
pub struct NodeFilter {
    /// A Slurm node list (`gpu[01-04],gpu07`).
    pub nodes: Option<String>,
    /// A partition's nodes.
    pub partition: Option<String>,
}

/// The nodes the filter names (all nodes by default), with their comments.
///
/// # Errors
/// Slurm could not be asked, or the filter names no node.
pub fn nodes(filter: &NodeFilter) -> Result<Vec<NodeInfo>, SlurmError> {
    let mut names: Option<Vec<String>> = None;
    if let Some(p) = &filter.partition {
        let a = ask("sinfo", &["-h", "-N", "-p", p, "-o", "%N"])?;
        if !a.ok {
            return Err(SlurmError {
                command: format!("sinfo -p {p}"),
                what: a.stderr,
            });
        }
        let mut list: Vec<String> = a.stdout.split_whitespace().map(str::to_string).collect();
        list.sort();
        list.dedup();
        if list.is_empty() {
            return Err(SlurmError {
                command: format!("sinfo -h -N -p {p} -o %N"),
                what: format!("lists no node in partition {p}"),
            });
        }
        names = Some(list);
    }
    let mut args = vec!["-o", "show", "node"];
    if let Some(n) = &filter.nodes {
        args.push(n);
    }
    let a = ask("scontrol", &args)?;
    if !a.ok {
        return Err(SlurmError {
            command: format!("scontrol {}", args.join(" ")),
            what: a.stderr,
        });
    }
    let mut found = parse_show_node(&a.stdout);
    if let Some(names) = names {
        found.retain(|n| names.contains(&n.name));
    }
    if found.is_empty() {
        return Err(SlurmError {
            command: format!("scontrol {}", args.join(" ")),
            what: "lists no node".into(),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines() {
        let m = parse_squeue("17|RUNNING\n 18|COMPLETING \n\n19_2|PENDING\nbogus\n");
        assert_eq!(m.len(), 2);
        assert_eq!(m[&17], "RUNNING");
        assert_eq!(m[&18], "COMPLETING");
    }

    #[test]
    fn live_states() {
        assert_eq!(JobState::Known("RUNNING".into()).live(), Some(true));
        assert_eq!(JobState::Known("COMPLETING".into()).live(), Some(true));
        assert_eq!(JobState::Known("COMPLETED".into()).live(), Some(false));
        assert_eq!(JobState::Known("PENDING".into()).live(), Some(false));
        assert_eq!(JobState::NotInQueue.live(), Some(false));
        assert_eq!(JobState::NotInQueue.word(), "GONE");
        assert_eq!(JobState::Unknown("x".into()).live(), None);
        assert_eq!(JobState::Unknown("x".into()).word(), "unknown");
    }

    #[test]
    fn job_node_list() {
        let out = "JobId=12 JobName=sweep UserId=alice(1000) JobState=RUNNING \
                   NodeList=n[1-3] BatchHost=n1 NumNodes=3 ReqNodeList=(null)\n";
        assert_eq!(parse_job_nodelist(out).as_deref(), Some("n[1-3]"));
        assert_eq!(parse_job_nodelist("JobId=13 NodeList=(null) X=1"), None);
        assert_eq!(parse_job_nodelist("JobId=13"), None);
    }

    #[test]
    fn show_node_lines() {
        // As Slurm 22.05 prints them: the comment only where one is set; other values
        // may contain spaces (OS=).
        let out = "NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 Gres=gpu:4 State=MIXED \
                   OS=Linux 6.1 #1 SMP Comment={\"colloc\":1,\"jobs\":[]} Extra=x\n\
                   NodeName=gpu02 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu\n\
                   NodeName=gpu03 State=IDLE Comment=replaced DIMM 3\n\
                   NodeName=gpu04 State=IDLE Comment=rack 4, fan replaced {\"colloc\":1,\"jobs\":[]} Extra=x\n";
        let n = parse_show_node(out);
        assert_eq!(n.len(), 4);
        assert_eq!(n[0].name, "gpu01");
        assert_eq!(n[0].state, "MIXED");
        assert_eq!(n[0].comment.as_deref(), Some("{\"colloc\":1,\"jobs\":[]}"));
        assert_eq!(n[1].state, "IDLE+DRAIN");
        assert_eq!(n[1].comment, None);
        assert_eq!(n[2].comment.as_deref(), Some("replaced"));
        // colloc's record beside an admin's text.
        assert_eq!(n[3].comment.as_deref(), Some("{\"colloc\":1,\"jobs\":[]}"));
    }
}
