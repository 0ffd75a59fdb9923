//! Jobs on a [`Cluster`]: submitting them, reading what Slurm says of them and of the
//! nodes, and waiting for them ([`HANG_GUARD`] bounds every wait).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::{run, text, Cluster};

/// Longest any single wait may take before the suite gives up (a hang guard, not a
/// speed check).
pub const HANG_GUARD: Duration = Duration::from_secs(180);

/// One step of a job, as `squeue --steps` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `JOBID.STEPID`, e.g. `12.0`, `12.batch`, `12.extern`.
    pub id: String,
    /// The step's name (`srun --job-name`, else the program).
    pub name: String,
    /// The nodes it runs on, as Slurm writes the list (`n[1-3]`).
    pub nodes: String,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// Slurm's job state, e.g. `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`.
    pub state: String,
    /// `ExitCode=` as Slurm shows it, `code:signal`.
    pub exit_code: String,
}

impl Cluster {
    /// `sbatch ARGS SCRIPT` with output to `jobs/<id>.out` and `.err`. `Ok(job id)` or the
    /// failed command's output.
    ///
    /// # Errors
    /// sbatch refused the job.
    pub fn sbatch<S: AsRef<OsStr>>(&self, args: &[S], script: &str) -> Result<u32, Output> {
        let n = self.script_seq.get() + 1;
        self.script_seq.set(n);
        let path = self.jobs_dir().join(format!("script-{n}.sh"));
        let mut f = std::fs::File::create(&path).expect("write job script");
        writeln!(f, "#!/bin/bash\n{script}").expect("write job script");
        drop(f);
        let jobs = self.jobs_dir();
        let out = run(self
            .slurm("sbatch")
            .arg("--parsable")
            .arg(format!("--output={}/%j.out", jobs.display()))
            .arg(format!("--error={}/%j.err", jobs.display()))
            .args(args)
            .arg(&path));
        if !out.status.success() {
            return Err(out);
        }
        let id = text(&out.stdout);
        let id = id.trim().split(';').next().unwrap_or_default();
        Ok(id
            .parse()
            .unwrap_or_else(|_| panic!("sbatch printed {id:?}, not a job id")))
    }

    /// The state job `id` ended in, while other jobs may still run on the node
    /// ([`Cluster::wait_done`] also waits for the node to be idle).
    pub fn wait_ended(&self, id: u32) -> String {
        self.wait_until(&format!("job {id} to end"), || {
            let state = self.job_info(id)?.get("JobState")?.clone();
            (!matches!(
                state.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED"
            ))
            .then_some(state)
        })
    }

    /// `sbatch` that must succeed.
    ///
    /// # Panics
    /// When sbatch fails.
    pub fn submit<S: AsRef<OsStr>>(&self, args: &[S], script: &str) -> u32 {
        self.sbatch(args, script)
            .unwrap_or_else(|o| panic!("sbatch failed ({}): {}", o.status, text(&o.stderr).trim()))
    }

    /// `scontrol -o show job ID` as key=value pairs; `None` once Slurm forgot the job.
    pub fn job_info(&self, id: u32) -> Option<BTreeMap<String, String>> {
        let out = run(self
            .slurm("scontrol")
            .args(["-o", "show", "job", &id.to_string()]));
        if !out.status.success() {
            return None;
        }
        Some(parse_kv(&text(&out.stdout)))
    }

    /// Slurm 24.11's `job_container/tmpfs` at times cannot make the namespace of a job
    /// that was requeued and is started again on its node ("_create_ns: ns base mount
    /// failed: Invalid argument" in slurmd's log, the extern step gone; the job goes back
    /// to the queue held, `launch_failed_requeued_held`). Seen with jobs without
    /// `--colloc` as well: not colloc's doing. Where job `id` is held so and its nodes'
    /// logs name more such failures for it than `handled`, release it and start it now,
    /// count the failures into `handled` and return true; else false.
    pub fn release_if_container_failed(&self, id: u32, handled: &mut usize) -> bool {
        let held = self
            .job_info(id)
            .and_then(|i| i.get("Reason").cloned())
            .is_some_and(|r| r == "launch_failed_requeued_held");
        if !held {
            return false;
        }
        let needle = format!("[{id}.extern] error: _create_ns: ns base mount failed");
        let failures: usize = self
            .nodes()
            .iter()
            .map(|n| {
                std::fs::read_to_string(n.slurmd_log())
                    .unwrap_or_default()
                    .matches(&needle)
                    .count()
            })
            .sum();
        if failures <= *handled {
            return false;
        }
        *handled = failures;
        eprintln!(
            "job {id}: Slurm's job_container/tmpfs could not make its namespace on a start after a requeue (ns base mount failed); released it to start again"
        );
        std::thread::sleep(std::time::Duration::from_secs(5));
        let id = id.to_string();
        let _ = self.slurm("scontrol").args(["release", &id]).output();
        let _ = self
            .slurm("scontrol")
            .args(["update", &format!("JobId={id}"), "StartTime=now"])
            .output();
        true
    }

    /// Wait until the job has ended and its epilog has finished on every node (the job's
    /// nodes are no longer completing it); a start that Slurm's job container failed
    /// after a requeue is started again ([`Cluster::release_if_container_failed`]).
    ///
    /// # Panics
    /// After [`HANG_GUARD`], or when Slurm forgets the job before it ends.
    pub fn wait_done(&self, id: u32) -> JobEnd {
        let mut nodes = String::new();
        let mut container_failures = 0;
        let end = self.wait_until_telling(
            &format!("job {id} to end"),
            || self.job_story(id),
            || {
                let info = self.job_info(id)?;
                let state = info.get("JobState")?.clone();
                if state == "PENDING"
                    && self.release_if_container_failed(id, &mut container_failures)
                {
                    return None;
                }
                if let Some(n) = info.get("NodeList").filter(|n| *n != "(null)") {
                    nodes.clone_from(n);
                }
                if state == "PENDING" && self.node_state().contains("drain") {
                    panic!(
                        "job {id} cannot start: node drained ({})\n--- slurmd log ---\n{}",
                        self.node_reason(),
                        self.slurmd_log_tail(20)
                    );
                }
                let busy = matches!(
                    state.as_str(),
                    "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED"
                );
                (!busy).then(|| JobEnd {
                    state,
                    exit_code: info.get("ExitCode").cloned().unwrap_or_default(),
                })
            },
        );
        if self.several() {
            // Other jobs may hold other nodes: only this job's must be done completing.
            let nodes = self.hostnames(&nodes);
            self.wait_until("the job's nodes to finish the epilog", || {
                let states = self.node_states();
                (!nodes
                    .iter()
                    .any(|n| states.get(n).is_some_and(|s| s.contains("comp"))))
                .then_some(())
            });
        } else {
            self.wait_until("the node to finish the epilog", || {
                let s = self.node_state();
                (!s.contains("comp") && !s.contains("alloc") && !s.contains("mix")).then_some(())
            });
        }
        end
    }

    /// A Slurm node list (`n[1-3]`) as names.
    pub fn hostnames(&self, list: &str) -> Vec<String> {
        if list.is_empty() {
            return Vec::new();
        }
        let out = run(self.slurm("scontrol").args(["show", "hostnames", list]));
        text(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Each node's state, as `sinfo -o %T` prints it (`idle`, `mixed`, `down*`, …).
    pub fn node_states(&self) -> BTreeMap<String, String> {
        let out = run(self.slurm("sinfo").args(["-h", "-N", "-o", "%N %T"]));
        text(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.trim().to_string()))
            .collect()
    }

    /// The job's steps that run now, as `squeue --steps` lists them (the `extern` and
    /// `batch` steps included).
    pub fn job_steps(&self, id: u32) -> Vec<Step> {
        let out = run(self.slurm("squeue").args([
            "--steps",
            "-h",
            "-j",
            &id.to_string(),
            "-o",
            "%i|%j|%N",
        ]));
        text(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, '|');
                Some(Step {
                    id: f.next()?.trim().to_string(),
                    name: f.next()?.trim().to_string(),
                    nodes: f.next()?.trim().to_string(),
                })
            })
            .collect()
    }

    /// Poll `f` every 50 ms until it gives a value.
    ///
    /// # Panics
    /// After [`HANG_GUARD`], with the slurmd log.
    pub fn wait_until<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        self.wait_until_telling(what, String::new, f)
    }

    /// [`Cluster::wait_until`], whose panic also says what `more` gives (e.g. a job's
    /// story, [`Cluster::job_story`]).
    fn wait_until_telling<T>(
        &self,
        what: &str,
        more: impl FnOnce() -> String,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > HANG_GUARD {
                panic!(
                    "gave up waiting for {what} after {}s\n--- squeue ---\n{}\n{}--- slurmd log ---\n{}",
                    HANG_GUARD.as_secs(),
                    self.squeue(),
                    more(),
                    self.slurmd_log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// slurmctld's log file.
    pub fn slurmctld_log(&self) -> std::path::PathBuf {
        self.dir().join("slurm/slurmctld.log")
    }

    /// What Slurm recorded of job `id`, for a wait that gave up: its record's state and
    /// times, then every line of slurmctld's log and of each node's slurmd log that names
    /// it (the steps' state polls left out), so the excerpt shows which stage took the
    /// time, not only how the job ended.
    pub fn job_story(&self, id: u32) -> String {
        let mut story = String::from("--- job record ---\n");
        match self.job_info(id) {
            Some(info) => {
                let keys = [
                    "JobState",
                    "Reason",
                    "SubmitTime",
                    "StartTime",
                    "EndTime",
                    "Restarts",
                    "NodeList",
                    "ExitCode",
                ];
                let fields: Vec<String> = keys
                    .iter()
                    .filter_map(|k| Some(format!("{k}={}", info.get(*k)?)))
                    .collect();
                story += &fields.join(" ");
            }
            None => story += "(Slurm no longer knows it)",
        }
        story.push('\n');
        let mut logs = vec![("slurmctld".to_string(), self.slurmctld_log())];
        for node in self.nodes() {
            logs.push((format!("slurmd {}", node.name()), node.slurmd_log()));
        }
        for (name, path) in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| names_job(l, id) && !l.contains("REQUEST_STATE"))
                .collect();
            story += &format!("--- {name}: lines about job {id} ---\n");
            // The start and the end of a long story.
            if lines.len() > 120 {
                story += &lines[..60].join("\n");
                story += &format!("\n[... {} lines ...]\n", lines.len() - 100);
                story += &lines[lines.len() - 40..].join("\n");
            } else {
                story += &lines.join("\n");
            }
            story.push('\n');
        }
        story
    }

    /// The node's state as `sinfo -o %T` prints it (`idle`, `drained`, `mixed`, …); one
    /// line per node on a cluster of several.
    pub fn node_state(&self) -> String {
        text(&run(self.slurm("sinfo").args(["-h", "-N", "-o", "%T"])).stdout)
            .trim()
            .to_string()
    }

    /// Why the node is down or drained, if it is.
    pub fn node_reason(&self) -> String {
        text(&run(self.slurm("sinfo").args(["-h", "-N", "-o", "%E"])).stdout)
            .trim()
            .to_string()
    }

    /// `squeue -h` output (empty when no job is queued or running).
    pub fn squeue(&self) -> String {
        text(&run(self.slurm("squeue").arg("-h")).stdout)
            .trim()
            .to_string()
    }

    /// The job's stdout file.
    pub fn job_out(&self, id: u32) -> String {
        std::fs::read_to_string(self.jobs_dir().join(format!("{id}.out"))).unwrap_or_default()
    }

    /// The job's stderr file.
    pub fn job_err(&self, id: u32) -> String {
        std::fs::read_to_string(self.jobs_dir().join(format!("{id}.err"))).unwrap_or_default()
    }

    /// `NAME=value` lines of the job's stdout.
    pub fn job_vars(&self, id: u32) -> BTreeMap<String, String> {
        self.job_out(id)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Wait for a file job `id` creates while it runs.
    ///
    /// # Panics
    /// At once when the job ended or the node drained instead (with why), else after
    /// [`HANG_GUARD`].
    pub fn wait_for_file(&self, id: u32, path: &Path) {
        self.wait_until(&format!("{} to appear", path.display()), || {
            if path.exists() {
                return Some(());
            }
            let node = self.node_state();
            if node.contains("drain") || node.contains("down") {
                panic!(
                    "waiting for job {id}: node {node} ({})\n--- slurmd log ---\n{}",
                    self.node_reason(),
                    self.slurmd_log_tail(20)
                );
            }
            // Slurm forgets an ended job after MinJobAge: that is an end too.
            let info = self.job_info(id);
            let state = info
                .as_ref()
                .and_then(|i| i.get("JobState"))
                .map_or("(forgotten by Slurm)", String::as_str);
            // The job may have made the file and ended between the first look and the
            // job query: look again before calling its end a failure.
            if path.exists() {
                return Some(());
            }
            if !matches!(state, "PENDING" | "RUNNING" | "CONFIGURING") {
                panic!(
                    "job {id} is {state} before creating {}; stderr: {}",
                    path.display(),
                    self.job_err(id)
                );
            }
            None
        });
    }
}

/// Parse `Key=Value Key2=Value2` (as `scontrol -o` prints).
pub fn parse_kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Does this log line name job `id` (`JobId=ID`, `[ID.batch]`, `job ID`, `jobid [ID]`,
/// `job_ID`), with no digit right after the id?
fn names_job(line: &str, id: u32) -> bool {
    // `[ID` must be a step (`[ID.`): `[2026-12-…` begins every line.
    [
        ("JobId=", ""),
        ("[", "."),
        ("job ", ""),
        ("jobid [", ""),
        ("job_", ""),
    ]
    .iter()
    .any(|(prefix, then)| {
        let needle = format!("{prefix}{id}{then}");
        line.match_indices(&needle)
            .any(|(at, _)| !line[at + needle.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::names_job;

    #[test]
    fn log_lines_name_their_job_and_no_other() {
        let id = 26_764_311;
        for line in [
            "[2026-12-04T20:40:20.896] [26764311.extern] Sent signal 15 to StepId=26764311.extern",
            "[2026-12-04T20:40:22.568] debug:  Waiting for job 26764311's prolog to complete",
            "[2026-12-04T20:40:22.571] debug:  Running spank/epilog for jobid [26764311] uid [1001]",
            "[2026-12-04T20:40:22.730] debug:  JobId=26764311: sent epilog complete msg: rc = 0",
            "[2026-12-05T06:56:35.135] sched: Allocate JobId=26764311 NodeList=vm #CPUs=1",
        ] {
            assert!(names_job(line, id), "{line}");
        }
        for line in [
            "[2026-12-04T20:40:20.896] [267643110.batch] task 0 exited",
            "[2026-12-04T20:40:22.730] debug:  JobId=2676431: sent epilog complete msg",
            "[2026-12-04T20:40:22.730] debug:  Handling REQUEST_STATE",
        ] {
            assert!(!names_job(line, id), "{line}");
        }
        // A job numbered like the year is not named by every line's timestamp.
        assert!(!names_job("[2026-12-04T20:40:22.730] slurmd started", 2026));
    }
}
