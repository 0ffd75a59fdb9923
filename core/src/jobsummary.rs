//! A colloc job's summary in Slurm's accounting (issue 38): at the end of a batch job
//! that ran under a colloc mode, root writes one word into the job's `AdminComment`,
//! which `scontrol show job` shows while slurmctld keeps the job and `sacct` shows from
//! the accounting database for good:
//!
//! ```text
//! colloc/1;mode=mps:4;gpus=2;packs=1;ok=18;failed=2;steady=69900;unit=img/s;energy_j=1234567
//! ```
//!
//! `mode` and `gpus` are root's own: the job's journal, which the prolog wrote. The rest
//! (`packs` onwards) is what the job's own `colloc run`s said when each pack ended, and
//! only that: a user can make their own job's figures up, never another job's.
//!
//! **How the figures reach root.** The batch step's slurmstepd (root, in the plugin's
//! `init_post_opt`) listens on the Unix socket `run_dir/summary/job-<id>.sock`
//! ([`socket_path`]; `run_dir` and `summary/` are root's, so no one else can make, swap or
//! remove a name there), which it gives to the job's user with mode 0600 before it
//! listens: no other user can connect (the kernel asks for write permission on the
//! socket's file), so no one can fill its queue or send a report for another's job. It
//! never accepts while the job runs; its tasks get the path in [`SOCKET_ENV`] (and so do
//! the steps they start). `colloc run` connects when a pack ends, checks that the
//! listener is root's (`SO_PEERCRED`), writes one line of at most [`REPORT_LIMIT`] bytes
//! and closes. The kernel keeps the line with the queued connection. At the step's end
//! (`slurm_spank_exit`, before slurmstepd tells slurmctld the batch script ended, so the
//! job still runs) root takes at most [`MAX_CONNECTIONS`] queued connections, keeps those
//! whose peer was the job's user (any other is counted as a stranger: only root could
//! make one), reads each within
//! [`READ_TIME`] and checks the line's form strictly ([`PackReport::parse`]). Nothing a
//! user wrote is a path root opens, and nothing but digits, a unit of letters, and the
//! separators reaches the comment: the word's characters are checked again as a whole
//! before it is written ([`word_is_clean`]), since slurmdbd puts the comment into SQL
//! between single quotes without escaping it.
//!
//! **Writing.** `scontrol update JobId=N AdminComment=…` while the job runs (slurmctld
//! then sends it to the database with the job's end); a job slurmctld already counts as
//! ended (cancelled, out of time) refuses updates, so there colloc asks slurmdbd itself:
//! `sacctmgr -i modify job where jobid=N set AdminComment=…`. Whatever else the comment
//! holds (a site's own tooling) stays: colloc reads it first (`scontrol --json show job`;
//! on 22.05, whose scontrol has no JSON, `squeue --json`, which lists every job; never
//! `scontrol show job`'s text, where a user's job name can forge a line) and replaces
//! only its own word; an array task is named `ARRAY_TASK` (its bare id may be the
//! array's, which `scontrol update` takes for every task). The tools run from the system
//! directories only, where root's alone, with an environment of their own, each killed
//! after [`WRITE_TIMEOUT`].
//!
//! **What another user can do**: nothing to the socket (an earlier abstract socket, whose
//! name `/proc/net/unix` shows, let another user fill its queue: our red team). The
//! socket is removed at the step's end, and by the epilog where the step was killed
//! first ([`remove_socket`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::fs::Dir;
use crate::jobfs::Space;
use crate::publish::{merge_comment, run_tool, run_tool_with, ToolFailure};

/// Summary format version (after `colloc/`).
pub const SUMMARY_VERSION: u32 = 1;
/// How colloc's word is recognised in an `AdminComment`.
pub const WORD_START: &str = "colloc/";
/// The directory in `run_dir` where the batch steps' sockets are.
pub const SOCKET_DIR: &str = "summary";
/// Longest path a Unix socket's address holds (`sun_path` less its closing NUL).
const SOCKET_PATH_MAX: usize = 107;
/// Free inodes of `run_dir` that summary sockets never take, at the least (besides its
/// last quarter).
const SOCKET_INODE_FLOOR: u64 = 8;
/// Longest pack report taken.
pub const REPORT_LIMIT: usize = 512;
/// Queued connections taken at the step's end (more are closed unread).
pub const MAX_CONNECTIONS: usize = 64;
/// How long reading the queued reports may take in all.
pub const READ_TIME: Duration = Duration::from_millis(300);
/// How long each `scontrol`/`sacctmgr` may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long 22.05's `squeue --json` may take: it lists every job of the cluster, and a
/// user who queues thousands of held jobs with long fields makes that seconds (our red
/// team: 6,200 jobs, 56 MB, 4.4 to 8.8 s); 20 s holds slurmctld's default 10,000 jobs.
pub const QUEUE_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest count a report may give (runs of a pack: the manifest cap is 100,000).
const COUNT_LIMIT: u64 = 1_000_000;
/// Largest figure a report may give (2^53: exact in a double).
const FIGURE_LIMIT: f64 = 9_007_199_254_740_992.0;

/// The variable that tells the batch step's tasks (and the steps they start) the
/// socket's path.
pub const SOCKET_ENV: &str = "COLLOC_SUMMARY_SOCKET";

/// The socket's file name in [`SOCKET_DIR`]: `job-<id>.sock`.
pub fn socket_file_name(job: u32) -> String {
    format!("job-{job}.sock")
}

/// Where `job`'s batch step listens: `run_dir/summary/job-<id>.sock`.
pub fn socket_path(run_dir: &Path, job: u32) -> PathBuf {
    run_dir.join(SOCKET_DIR).join(socket_file_name(job))
}

/// Is `path` one [`socket_path`] makes (as [`SOCKET_ENV`] gives it to `colloc run`)?
pub fn is_socket_path(path: &str) -> bool {
    let p = Path::new(path);
    p.is_absolute()
        && path.len() <= SOCKET_PATH_MAX
        && p.parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == SOCKET_DIR)
        && p.file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_prefix("job-"))
            .and_then(|f| f.strip_suffix(".sock"))
            .is_some_and(|id| !id.is_empty() && id.parse::<u32>().is_ok())
}

/// What one `colloc run` pack said when it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct PackReport {
    /// Runs that succeeded.
    pub ok: u64,
    /// Runs that failed (after their retries).
    pub failed: u64,
    /// The pack's steady aggregate throughput, with its unit.
    pub steady: Option<(f64, String)>,
    /// GPU energy the pack's runs used, joules.
    pub energy_j: Option<f64>,
}

impl PackReport {
    /// The line `colloc run` writes: `pack ok=N failed=N [steady=F unit=U] [energy_j=F]`.
    pub fn to_line(&self) -> String {
        let mut s = format!("pack ok={} failed={}", self.ok, self.failed);
        if let Some((v, unit)) = &self.steady {
            s.push_str(&format!(" steady={} unit={unit}", figure(*v)));
        }
        if let Some(e) = self.energy_j {
            s.push_str(&format!(" energy_j={}", figure(e)));
        }
        s.push('\n');
        s
    }

    /// Read a report, strictly: at most [`REPORT_LIMIT`] bytes, one line, the keys above
    /// once each in that order, counts up to 1,000,000, figures finite from 0 to 2^53, a
    /// unit of 1 to 24 letters, digits and `/ _ . % -`.
    ///
    /// # Errors
    /// What is wrong with it, in a few words.
    pub fn parse(bytes: &[u8]) -> Result<PackReport, String> {
        if bytes.len() > REPORT_LIMIT {
            return Err(format!("longer than {REPORT_LIMIT} bytes"));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let text = text.strip_suffix('\n').unwrap_or(text);
        if text.contains(['\n', '\r', '\0']) {
            return Err("more than one line".into());
        }
        let mut words = text.split(' ');
        if words.next() != Some("pack") {
            return Err("not a pack report".into());
        }
        let mut kv: Vec<(&str, &str)> = Vec::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("{w:?} is not KEY=VALUE"))?;
            kv.push((k, v));
        }
        let keys: Vec<&str> = kv.iter().map(|(k, _)| *k).collect();
        let order = ["ok", "failed", "steady", "unit", "energy_j"];
        let mut at = 0;
        for k in &keys {
            let Some(pos) = order[at..].iter().position(|o| o == k) else {
                return Err(format!("key {k:?} unknown, repeated or out of order"));
            };
            at += pos + 1;
        }
        let get = |k: &str| kv.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let ok = count(get("ok").ok_or("no ok=")?)?;
        let failed = count(get("failed").ok_or("no failed=")?)?;
        let steady = match (get("steady"), get("unit")) {
            (Some(v), Some(u)) => Some((parse_figure(v)?, unit(u)?)),
            (None, None) => None,
            _ => return Err("steady= and unit= go together".into()),
        };
        let energy_j = get("energy_j").map(parse_figure).transpose()?;
        Ok(PackReport {
            ok,
            failed,
            steady,
            energy_j,
        })
    }
}

fn count(s: &str) -> Result<u64, String> {
    let digits = !s.is_empty() && s.len() <= 7 && s.bytes().all(|b| b.is_ascii_digit());
    match s.parse::<u64>() {
        Ok(n) if digits && n <= COUNT_LIMIT => Ok(n),
        _ => Err(format!("count {s:?} is not 0 to {COUNT_LIMIT}")),
    }
}

fn parse_figure(s: &str) -> Result<f64, String> {
    let plain =
        !s.is_empty() && s.len() <= 24 && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    match s.parse::<f64>() {
        Ok(v) if plain && v.is_finite() && (0.0..=FIGURE_LIMIT).contains(&v) => Ok(v),
        _ => Err(format!("figure {s:?} is not a plain number from 0 to 2^53")),
    }
}

fn unit(s: &str) -> Result<String, String> {
    let ok = (1..=24).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_.%-".contains(&b));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "unit {s:?} is not 1 to 24 letters, digits and / _ . % -"
        ))
    }
}

/// A figure as the word and the line write it: an integer where it is one, else with at
/// most 3 decimals (trailing zeros dropped).
fn figure(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < FIGURE_LIMIT {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A colloc job's summary: root's facts and what its packs reported, folded.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    /// The mode the job ran under (its journal's).
    pub mode: String,
    /// GPUs colloc set up for it on the batch node.
    pub gpus: u32,
    /// Packs that reported (their reports follow, folded); 0: none did.
    pub packs: u32,
    /// Runs that succeeded, over all packs.
    pub ok: u64,
    /// Runs that failed, over all packs.
    pub failed: u64,
    /// The steady aggregate of the last pack that had one.
    pub steady: Option<(f64, String)>,
    /// Energy over the packs that measured it.
    pub energy_j: Option<f64>,
    /// Connections to the job's socket from other users (left unread).
    pub strangers: u32,
}

impl JobSummary {
    /// Root's facts with the packs' reports folded in (in the order they came).
    pub fn new(mode: &str, gpus: u32, reports: &[PackReport]) -> JobSummary {
        let mut s = JobSummary {
            mode: mode.to_string(),
            gpus,
            packs: 0,
            ok: 0,
            failed: 0,
            steady: None,
            energy_j: None,
            strangers: 0,
        };
        for r in reports {
            s.packs += 1;
            s.ok = (s.ok + r.ok).min(COUNT_LIMIT * MAX_CONNECTIONS as u64);
            s.failed = (s.failed + r.failed).min(COUNT_LIMIT * MAX_CONNECTIONS as u64);
            if r.steady.is_some() {
                s.steady.clone_from(&r.steady);
            }
            if let Some(e) = r.energy_j {
                s.energy_j = Some(s.energy_j.unwrap_or(0.0) + e);
            }
        }
        s
    }

    /// The word (no spaces, only [`word_is_clean`] characters).
    pub fn encode(&self) -> String {
        let mut w = format!(
            "{WORD_START}{SUMMARY_VERSION};mode={};gpus={}",
            self.mode, self.gpus
        );
        if self.packs > 0 {
            w.push_str(&format!(
                ";packs={};ok={};failed={}",
                self.packs, self.ok, self.failed
            ));
            if let Some((v, u)) = &self.steady {
                w.push_str(&format!(";steady={};unit={u}", figure(*v)));
            }
            if let Some(e) = self.energy_j {
                w.push_str(&format!(";energy_j={}", figure(e)));
            }
        }
        if self.strangers > 0 {
            w.push_str(&format!(";strangers={}", self.strangers));
        }
        w
    }

    /// Read a word back (`colloc status --cluster --since`); `None` for one that is not
    /// colloc's or not of this version.
    pub fn decode(word: &str) -> Option<JobSummary> {
        let rest = word.strip_prefix(WORD_START)?;
        let mut parts = rest.split(';');
        if parts.next()? != SUMMARY_VERSION.to_string() {
            return None;
        }
        let mut s = JobSummary::new("", 0, &[]);
        let (mut steady, mut unit_) = (None, None);
        for p in parts {
            let (k, v) = p.split_once('=')?;
            match k {
                "mode" => s.mode = v.to_string(),
                "gpus" => s.gpus = v.parse().ok()?,
                "packs" => s.packs = v.parse().ok()?,
                "ok" => s.ok = v.parse().ok()?,
                "failed" => s.failed = v.parse().ok()?,
                "steady" => steady = Some(v.parse::<f64>().ok()?),
                "unit" => unit_ = Some(v.to_string()),
                "energy_j" => s.energy_j = Some(v.parse().ok()?),
                "strangers" => s.strangers = v.parse().ok()?,
                _ => {}
            }
        }
        if let (Some(v), Some(u)) = (steady, unit_) {
            s.steady = Some((v, u));
        }
        (!s.mode.is_empty()).then_some(s)
    }
}

/// Only letters, digits and `; = : , . / _ + % -`: nothing a shell, SQL or `sacct -P`
/// reads as more than text, and no space (the comment is split on spaces).
pub fn word_is_clean(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b";=:,./_+%-".contains(&b))
}

/// An `AdminComment` split into the text beside colloc's word (spaces folded) and the
/// word, if there is one.
pub fn split_comment(comment: &str) -> (String, Option<&str>) {
    crate::publish::split_word(comment, WORD_START)
}

/// A non-blocking, close-on-exec Unix stream socket and the address `path`.
fn stream_socket(path: &Path) -> std::io::Result<(OwnedFd, SocketAddrUnix)> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    Ok((fd, SocketAddrUnix::new(path)?))
}

/// Root's end of the socket: listening, never accepting until [`Collector::collect`];
/// its file is removed when it is dropped.
#[derive(Debug)]
pub struct Collector {
    fd: OwnedFd,
    /// `run_dir`, the socket's directory in it (root's) and the socket's name there.
    run: Dir,
    dir: Dir,
    file: String,
}

/// What the queued connections held.
#[derive(Debug, Default)]
pub struct Collected {
    /// Reports from the job's user, in the order they came.
    pub reports: Vec<PackReport>,
    /// Connections from anyone else (closed unread).
    pub strangers: u32,
    /// Reports from the job's user that were refused, with why.
    pub bad: Vec<String>,
}

impl Collector {
    /// Listen on [`socket_path`] for `job` (close-on-exec: the job's tasks never hold
    /// it), the socket's file `uid`'s with mode 0600 before anyone can connect. A socket
    /// left there by a step of this job that was killed is replaced. `run_dir` and
    /// `summary/` are made where missing (root's, 0755).
    ///
    /// # Errors
    /// Why the socket could not be made, in a line.
    pub fn bind(run_dir: &Path, job: u32, uid: u32) -> Result<Collector, String> {
        let run = Dir::create_trusted(run_dir, 0o755).map_err(|e| e.to_string())?;
        // Anyone can hold a socket's inode after it is removed (an O_PATH descriptor
        // needs no permission on the file), and the job's user can link their own
        // elsewhere on the file system: sockets never take run_dir's last quarter of
        // inodes, which MPS jobs need.
        let space =
            Space::of(run.as_fd()).map_err(|e| format!("statfs {}: {e}", run.path().display()))?;
        if space.total_inodes > 0
            && space.free_inodes <= (space.total_inodes / 4).max(SOCKET_INODE_FLOOR)
        {
            return Err(format!(
                "{} has {} of {} inodes free: summary sockets leave the last quarter to MPS jobs \
                 (colloc status names what holds them)",
                run.path().display(),
                space.free_inodes,
                space.total_inodes
            ));
        }
        let file = socket_file_name(job);
        let path = run.path().join(SOCKET_DIR).join(&file);
        if path.as_os_str().len() > SOCKET_PATH_MAX {
            return Err(format!(
                "{} is longer than a socket's address holds ({SOCKET_PATH_MAX} bytes)",
                path.display()
            ));
        }
        let made = |e: std::io::Error| format!("cannot listen on {}: {e}", path.display());
        // The directory goes when its last socket does (nothing of colloc's stays in
        // run_dir after a job): where another step removed it between opening and
        // binding, it is made again.
        for attempt in 0.. {
            let dir = socket_dir(&run)?;
            dir.unlink(&file).map_err(|e| e.to_string())?;
            let (fd, _) = stream_socket(&path).map_err(made)?;
            // Bound in the directory held here, by its descriptor (a removed directory
            // takes no new name), so the file is the one made here. Until listen()
            // below, connections are refused, so none is queued before the file is the
            // user's alone.
            let here = PathBuf::from(format!("/proc/self/fd/{}/{file}", dir.as_fd().as_raw_fd()));
            let addr = SocketAddrUnix::new(&here).map_err(|e| made(e.into()))?;
            match rustix::net::bind(&fd, &addr) {
                Ok(()) => {}
                Err(Errno::NOENT) if attempt < 3 => continue,
                Err(e) => return Err(made(e.into())),
            }
            let collector = Collector { fd, run, dir, file };
            collector
                .dir
                .give_entry(&collector.file, uid, 0o600)
                .map_err(|e| e.to_string())?;
            rustix::net::listen(&collector.fd, MAX_CONNECTIONS as i32)
                .map_err(|e| made(e.into()))?;
            return Ok(collector);
        }
        unreachable!("the loop returns")
    }

    /// The socket's path (for [`SOCKET_ENV`]).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.file)
    }

    /// Take the queued connections (at most [`MAX_CONNECTIONS`]), keep those of `uid`,
    /// and read their reports within [`READ_TIME`].
    pub fn collect(&self, uid: u32) -> Collected {
        let mut out = Collected::default();
        let mut open: Vec<OwnedFd> = Vec::new();
        while open.len() + (out.strangers as usize) < MAX_CONNECTIONS {
            let conn = match rustix::net::accept_with(
                &self.fd,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(c) => c,
                Err(Errno::INTR) => continue,
                Err(_) => break,
            };
            match sockopt::socket_peercred(&conn) {
                Ok(c) if c.uid.as_raw() == uid => open.push(conn),
                _ => out.strangers += 1,
            }
        }
        let deadline = Instant::now() + READ_TIME;
        for fd in &open {
            match read_report(fd.as_fd(), deadline) {
                Ok(bytes) => match PackReport::parse(&bytes) {
                    Ok(r) => out.reports.push(r),
                    Err(e) => out.bad.push(e),
                },
                Err(e) => out.bad.push(e),
            }
        }
        out
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Err(e) = self.dir.unlink(&self.file) {
            log::warn!("cannot remove the job summary's socket: {e}");
        }
        // Its directory too, where no other step's socket is in it.
        let _ = self.run.rmdir(SOCKET_DIR);
    }
}

/// `run_dir/summary`, made where missing (root's, 0755), its mode set back to 0755 where
/// an admin changed it.
fn socket_dir(run: &Dir) -> Result<Dir, String> {
    let dir = match run.open_dir(SOCKET_DIR) {
        Ok(Some(d)) => d,
        Ok(None) => match run.make_dir(SOCKET_DIR, 0o755) {
            Ok(d) => d,
            // Another batch step made it meanwhile.
            Err(e) if e.raw_os_error() == Some(Errno::EXIST.raw_os_error()) => run
                .open_dir(SOCKET_DIR)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{} is gone", run.path().join(SOCKET_DIR).display()))?,
            Err(e) => return Err(e.to_string()),
        },
        Err(e) => return Err(e.to_string()),
    };
    dir.check_private().map_err(|e| e.to_string())?;
    // The job's user must reach their socket: an admin's chmod of root's own directory
    // is undone (and said), not left to cost every summary its figures.
    let mode = dir.stat().map_err(|e| e.to_string())?.st_mode & 0o7777;
    if mode != 0o755 {
        dir.set_mode(0o755).map_err(|e| e.to_string())?;
        log::warn!(
            "{} had mode {mode:04o}: set to 0755, so that jobs reach their sockets",
            dir.path().display()
        );
    }
    Ok(dir)
}

/// Remove `job`'s socket where its batch step left it (killed before its end): the
/// epilog's, with the job's journal. `Ok(true)` where there was one.
///
/// # Errors
/// `run_dir` or the socket's directory is not root's, or the removal failed.
pub fn remove_socket(run_dir: &Path, job: u32) -> Result<bool, String> {
    let run = match Dir::open_trusted(run_dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let Some(dir) = run.open_dir(SOCKET_DIR).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    dir.check_private().map_err(|e| e.to_string())?;
    let removed = dir
        .unlink(&socket_file_name(job))
        .map_err(|e| e.to_string())?;
    let _ = run.rmdir(SOCKET_DIR);
    Ok(removed)
}

/// One connection's report: to its end, at most [`REPORT_LIMIT`] + 1 bytes, by `deadline`.
fn read_report(fd: BorrowedFd<'_>, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; REPORT_LIMIT + 1];
    loop {
        match rustix::io::read(fd, &mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > REPORT_LIMIT {
                    return Err(format!("longer than {REPORT_LIMIT} bytes"));
                }
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err("not finished in time".into());
                }
                let mut p = [PollFd::new(&fd, PollFlags::IN)];
                let t = Timespec::try_from(left).ok();
                let _ = rustix::event::poll(&mut p, t.as_ref());
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// Tell the job's summary socket at `path` (from [`SOCKET_ENV`]) what a pack did
/// (`colloc run`, as the user). `Ok(false)` where no one listens (another node than the
/// batch step's, or the step has ended) or the listener is not root's (never told).
///
/// # Errors
/// The connection or the write failed.
pub fn send(path: &Path, report: &PackReport) -> std::io::Result<bool> {
    let (fd, addr) = stream_socket(path)?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) => {}
        Err(Errno::CONNREFUSED | Errno::NOENT) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    if sockopt::socket_peercred(&fd)?.uid.as_raw() != 0 {
        return Ok(false);
    }
    // The line fits the socket's buffer: one write, never waiting for root.
    let line = report.to_line();
    let n = rustix::io::write(&fd, line.as_bytes())?;
    if n != line.len() {
        return Err(std::io::Error::other("the report was cut"));
    }
    Ok(true)
}

/// How the word reached Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// `scontrol update` while the job ran: slurmctld sends it with the job's end.
    Controller,
    /// `sacctmgr modify job`: the job had ended for slurmctld.
    Database,
}

/// Why a summary could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The word holds something it may not.
    #[error("the summary {0:?} has characters colloc does not write")]
    Unclean(String),
    /// A tool is not installed in the system directories.
    #[error("{0} not found in {dirs}", dirs = crate::config::SYSTEM_BIN_DIRS.join(", "))]
    Missing(&'static str),
    /// The job had ended and its comment holds what `sacctmgr` would change (it cuts a
    /// value at its first quote and lowercases it).
    #[error("the job has ended and its AdminComment holds a quote or capitals, which sacctmgr would change: left as it is")]
    Quoted,
    /// The comment beside colloc's word holds a control character: not written back.
    #[error("the job's AdminComment holds a control character: left as it is")]
    Control,
    /// `squeue --json` did not say what colloc needs.
    #[error("{0}")]
    Queue(String),
    /// A tool failed.
    #[error("{0}")]
    Tool(#[from] ToolFailure),
}

/// What slurmctld says to an update of a job that has ended (`ESLURM_JOB_FINISHED`):
/// 22.05's text, and 23.02's on.
const FINISHED: [&str; 2] = [
    "Job has already finished",
    "already completing or completed",
];

/// Write `word` into job `job`'s `AdminComment`, keeping what else is there.
///
/// # Errors
/// [`WriteError`].
pub fn write(job: u32, word: &str) -> Result<Written, WriteError> {
    if !word_is_clean(word) || !word.starts_with(WORD_START) {
        return Err(WriteError::Unclean(word.to_string()));
    }
    let conf = std::env::var_os("SLURM_CONF");
    let program =
        |name: &'static str| crate::config::resolve_program(name).ok_or(WriteError::Missing(name));
    let id = job.to_string();
    let scontrol = program("scontrol")?;
    // 23.02 and later: the job alone. 22.05's scontrol has no --json, and its squeue
    // --json lists every job whatever else it is asked: slower on a long queue, but the
    // only form where no field of the user's can pass for the comment.
    let find = move |mut out: Box<dyn std::io::Read + Send>| {
        let found = read_squeue_json(&mut out, job);
        // What is left after a fault is read to its end: the tool must not fail on a
        // closed pipe, or wait on a full one.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
        found
    };
    let queued = match run_tool_with(
        &scontrol,
        &["--json", "show", "job", &id],
        WRITE_TIMEOUT,
        conf.as_deref(),
        find,
    ) {
        Err(e) if e.stderr.contains("unrecognized option") => run_tool_with(
            &program("squeue")?,
            &["--json", "--states=all", "-j", &id],
            QUEUE_TIMEOUT,
            conf.as_deref(),
            find,
        )?,
        other => other?,
    }
    .map_err(WriteError::Queue)?;
    let (other, _) = split_comment(&queued.admin_comment);
    if other.chars().any(char::is_control) {
        return Err(WriteError::Control);
    }
    let text = merge_comment(&other, word);
    let update = run_tool(
        &scontrol,
        &[
            "update",
            &format!("JobId={}", queued.target),
            &format!("AdminComment={text}"),
        ],
        WRITE_TIMEOUT,
        conf.as_deref(),
    );
    match update {
        Ok(_) => Ok(Written::Controller),
        Err(e) if FINISHED.iter().any(|f| e.stderr.contains(f)) => {
            // sacctmgr cuts a value at its first quote and lowercases it: the other
            // text goes only where that changes nothing, colloc's word lowercased.
            if other.contains(['"', '\'']) || other != other.to_lowercase() {
                return Err(WriteError::Quoted);
            }
            let text = merge_comment(&other, &word.to_lowercase());
            let sacctmgr = program("sacctmgr")?;
            let target = format!("jobid={}", queued.target);
            let set = format!("AdminComment={text}");
            // slurmctld sends a job's records to slurmdbd on its own time: a job the
            // database does not hold yet is "Nothing modified"; asked again, twice.
            let mut tries = 0;
            loop {
                let args = ["-i", "modify", "job", "where", &target, "set", &set];
                match run_tool(&sacctmgr, &args, WRITE_TIMEOUT, conf.as_deref()) {
                    Err(e) if tries < 2 && e.stderr.contains("Nothing modified") => {
                        tries += 1;
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    other => {
                        other?;
                        return Ok(Written::Database);
                    }
                }
            }
        }
        Err(e) => Err(e.into()),
    }
}

mod queue;
pub use queue::{parse_squeue_json, read_squeue_json, Queued};

#[cfg(test)]
mod tests;
