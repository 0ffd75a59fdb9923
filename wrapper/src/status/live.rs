//! The running runs of the node's `colloc run`s, as the node's metrics show them (issue
//! 38): read from each one's abstract socket ([`crate::run::live`]), never from a file a
//! user could swap.
//!
//! Which sockets: the listening ones named `colloc-live/<job>/…` (the kernel's list,
//! [`super::unixdiag`], never the text of `/proc/net/unix`, where a name can forge lines)
//! for a job that holds GPUs here through colloc (a journal of it) and that Slurm does
//! not say has ended, and whose owner the kernel says is the job's user, as the journal
//! says. A socket someone else made in a job's name costs a comparison, never a
//! connection, however many there are; one named for a job that does not speak here is
//! passed over and not counted. On the connection the peer's credentials are
//! checked again (`SO_PEERCRED`). A socket of another uid, an answer that is not a
//! snapshot of that job, or one not read in time is left out and counted
//! ([`LiveRead::refused`]). Every socket is read at once, side by side, within one
//! deadline, so one that never answers delays nothing else. What a snapshot says is its
//! user's claim about their own runs, checked for size and form
//! ([`colloc_results::live::Live::parse`]); a device it names that is none of the job's
//! is dropped.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use colloc_results::live::{self, Live, LiveRun};

use super::unixdiag::{self, Listening};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// The most sockets read for one job (a pack is one `colloc run`; a few more are fine).
const PER_JOB: usize = 8;
/// The most sockets read in all.
const ALL: usize = 256;
/// How long all of them may take together.
pub const DEADLINE: Duration = Duration::from_millis(500);

/// A job that may speak: its id, its user, and the devices it holds here.
#[derive(Debug, Clone)]
pub struct Speaker {
    /// The job.
    pub job: u32,
    /// Its user, as root's journal says.
    pub uid: u32,
    /// Its devices on this node (GPU and MIG UUIDs; a map, so that another name of a
    /// device could be given its UUID).
    pub devices: BTreeMap<String, String>,
}

/// The running runs of one job.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobRuns {
    /// The job.
    pub job: u32,
    /// Its `colloc run`s that answered.
    pub sources: u32,
    /// Their running runs, each name once.
    pub runs: Vec<LiveRun>,
}

/// What was read.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LiveRead {
    /// Per job, in job order; only jobs with an answering `colloc run`.
    pub jobs: Vec<JobRuns>,
    /// Sockets under colloc's names left out: of another user, not a snapshot of their
    /// job, or not read in time.
    pub refused: u32,
}

impl LiveRead {
    /// Nothing answered and nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.refused == 0
    }
}

/// Read the snapshots of `speakers`' `colloc run`s.
pub fn read(speakers: &[Speaker]) -> LiveRead {
    if speakers.is_empty() {
        return LiveRead::default();
    }
    // Only sockets the kernel says are a speaking job's user's are kept: what others make
    // in a speaking job's name is counted, never held. A socket of a job that does not
    // speak here (a `colloc run` in a job without `--colloc`, one of another node's job
    // when nodes share a network namespace) is no one's refusal: passed over, not counted.
    let mut elsewhere = 0u32;
    let mut theirs = |l: &Listening| {
        let speaker = std::str::from_utf8(&l.name)
            .ok()
            .and_then(live::job_of_name)
            .and_then(|job| speakers.iter().find(|s| s.job == job));
        if speaker.is_none() {
            elsewhere = elsewhere.saturating_add(1);
        }
        speaker.is_some_and(|s| l.uid == Some(s.uid))
    };
    match unixdiag::listening_abstract(live::SOCKET_PREFIX.as_bytes(), &mut theirs) {
        Ok((list, others)) => {
            let mut got = read_listed(&list, speakers);
            got.refused = got.refused.saturating_add(others.saturating_sub(elsewhere));
            got
        }
        Err(e) => {
            log::warn!("no live metrics: the kernel's list of sockets: {e}");
            LiveRead::default()
        }
    }
}

/// Read the listed sockets of `speakers`' jobs: only those the job's user owns.
pub fn read_listed(list: &[Listening], speakers: &[Speaker]) -> LiveRead {
    let by_job: BTreeMap<u32, &Speaker> = speakers.iter().map(|s| (s.job, s)).collect();
    let mut out = LiveRead::default();
    let mut per_job: BTreeMap<u32, usize> = BTreeMap::new();
    let mut chosen: Vec<(u32, &str)> = Vec::new();
    // In name order: the kernel lists them in no order that means anything.
    let mut list: Vec<&Listening> = list.iter().collect();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    for l in list {
        let Ok(name) = std::str::from_utf8(&l.name) else {
            continue;
        };
        let Some(job) = live::job_of_name(name) else {
            continue;
        };
        let Some(sp) = by_job.get(&job) else { continue };
        let n = per_job.entry(job).or_default();
        if l.uid != Some(sp.uid)
            || name.chars().any(char::is_control)
            || *n >= PER_JOB
            || chosen.len() >= ALL
        {
            out.refused += 1;
            continue;
        }
        *n += 1;
        chosen.push((job, name));
    }
    let deadline = Instant::now() + DEADLINE;
    let mut open: Vec<(u32, OwnedFd)> = Vec::new();
    for (job, name) in chosen {
        // Each socket's full queue is tried again for a share of the time, never all.
        let until = deadline.min(Instant::now() + DEADLINE / 8);
        match connect(name, by_job[&job].uid, until) {
            Some(fd) => open.push((job, fd)),
            None => out.refused += 1,
        }
    }
    let answers = read_all(open, Instant::now() + DEADLINE);
    let mut runs: BTreeMap<u32, JobRuns> = BTreeMap::new();
    for (job, bytes) in answers {
        let Some(sp) = by_job.get(&job) else { continue };
        let snap = bytes
            .and_then(|b| Live::parse(&b).ok())
            .filter(|l| l.job == job);
        let Some(snap) = snap else {
            out.refused += 1;
            continue;
        };
        let entry = runs.entry(job).or_insert_with(|| JobRuns {
            job,
            sources: 0,
            runs: Vec::new(),
        });
        entry.sources += 1;
        for mut r in snap.runs {
            if entry.runs.len() >= live::MAX_RUNS || entry.runs.iter().any(|x| x.name == r.name) {
                continue;
            }
            r.device = r.device.and_then(|d| sp.devices.get(&d).cloned());
            entry.runs.push(r);
        }
    }
    out.jobs = runs.into_values().collect();
    out
}

/// A connection to the socket `name` whose owner is `uid`. A queue that is full (someone
/// flooding it) is tried again until `deadline`.
fn connect(name: &str, uid: u32, deadline: Instant) -> Option<OwnedFd> {
    let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).ok()?;
    loop {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .ok()?;
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => {
                let cred = sockopt::socket_peercred(&fd).ok()?;
                return (cred.uid.as_raw() == uid).then_some(fd);
            }
            Err(Errno::AGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return None,
        }
    }
}

/// Each connection's whole answer (at most [`live::MAX_BYTES`] + 1 bytes), or `None`
/// where it was not complete by `deadline` or failed.
fn read_all(open: Vec<(u32, OwnedFd)>, deadline: Instant) -> Vec<(u32, Option<Vec<u8>>)> {
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); open.len()];
    let mut done: Vec<Option<bool>> = vec![None; open.len()];
    loop {
        let pending: Vec<usize> = (0..open.len()).filter(|&i| done[i].is_none()).collect();
        let left = deadline.saturating_duration_since(Instant::now());
        if pending.is_empty() || left.is_zero() {
            break;
        }
        let mut fds: Vec<PollFd<'_>> = pending
            .iter()
            .map(|&i| PollFd::new(&open[i].1, PollFlags::IN))
            .collect();
        let timeout = Timespec::try_from(left).ok();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => break,
        }
        let ready: Vec<bool> = fds.iter().map(|p| !p.revents().is_empty()).collect();
        drop(fds);
        for (k, &i) in pending.iter().enumerate() {
            if ready[k] {
                done[i] = drain(open[i].1.as_fd(), &mut bufs[i]);
            }
        }
    }
    open.into_iter()
        .zip(bufs)
        .zip(done)
        .map(|(((job, _), buf), d)| (job, (d == Some(true)).then_some(buf)))
        .collect()
}

/// Read what is there: `Some(true)` at the end of the answer, `Some(false)` on an error
/// or an answer too long, `None` for more to come.
fn drain(fd: std::os::fd::BorrowedFd<'_>, buf: &mut Vec<u8>) -> Option<bool> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match rustix::io::read(fd, &mut chunk) {
            Ok(0) => return Some(true),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > live::MAX_BYTES {
                    return Some(false);
                }
            }
            Err(Errno::AGAIN) => return None,
            Err(Errno::INTR) => {}
            Err(_) => return Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket of this process under `name`, answering `answer` once (or holding the
    /// connection open without a word where it is empty).
    fn serve(name: &str, answer: Vec<u8>) -> std::thread::JoinHandle<()> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
        rustix::net::bind(&fd, &addr).unwrap();
        rustix::net::listen(&fd, 4).unwrap();
        std::thread::spawn(move || {
            let c = rustix::net::accept(&fd).unwrap();
            if !answer.is_empty() {
                let _ = rustix::io::write(&c, &answer);
                drop(c);
            } else {
                // Never answers: held open past the reader's deadline.
                std::thread::sleep(DEADLINE * 2);
            }
        })
    }

    fn snap(job: u32, names: &[&str]) -> Vec<u8> {
        Live {
            schema: live::SCHEMA,
            job,
            runs: names
                .iter()
                .map(|n| LiveRun {
                    name: (*n).into(),
                    device: Some("GPU-1".into()),
                    started_unix: 5.0,
                    ..LiveRun::default()
                })
                .collect(),
        }
        .to_bytes()
    }

    /// The kernel's list of this process's sockets among `names`.
    fn listed(names: &[&String]) -> Vec<Listening> {
        unixdiag::listening_abstract(live::SOCKET_PREFIX.as_bytes(), &mut |_| true)
            .unwrap()
            .0
            .into_iter()
            .filter(|l| names.iter().any(|n| n.as_bytes() == l.name))
            .collect()
    }

    fn speaker(job: u32, uid: u32) -> Speaker {
        Speaker {
            job,
            uid,
            devices: [("GPU-1".to_string(), "GPU-1".to_string())].into(),
        }
    }

    #[test]
    fn the_jobs_own_sockets_are_read_and_the_rest_refused() {
        let me = rustix::process::getuid().as_raw();
        let pid = std::process::id();
        let ok = format!("colloc-live/900/{pid}.a");
        let twin = format!("colloc-live/900/{pid}.b");
        let other_job = format!("colloc-live/901/{pid}.c");
        let silent = format!("colloc-live/902/{pid}.d");
        let wrong_uid_job = format!("colloc-live/903/{pid}.e");
        let handles = vec![
            serve(&ok, snap(900, &["a", "b"])),
            serve(&twin, snap(900, &["b", "c"])),
            serve(&other_job, snap(900, &["x"])),
            serve(&silent, Vec::new()),
            serve(&wrong_uid_job, snap(903, &["y"])),
        ];
        let speakers = [
            speaker(900, me),
            speaker(901, me),
            speaker(902, me),
            speaker(903, me + 1),
        ];
        let list = listed(&[&ok, &twin, &other_job, &silent, &wrong_uid_job]);
        assert_eq!(list.len(), 5, "{list:?}");
        let t = Instant::now();
        let got = read_listed(&list, &speakers);
        assert!(t.elapsed() < DEADLINE * 3, "{:?}", t.elapsed());
        // 900: two sources, "b" once; 901 said it was 900; 902 never answered; 903's
        // socket is not its user's.
        assert_eq!(got.jobs.len(), 1, "{got:?}");
        let j = &got.jobs[0];
        assert_eq!((j.job, j.sources), (900, 2));
        let runs: Vec<&str> = j.runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(runs, ["a", "b", "c"]);
        assert_eq!(got.refused, 3, "{got:?}");
        drop(handles);
    }

    /// Many sockets in a job's name that the kernel says are not its user's (or carry a
    /// control character): each refused by a comparison, and the job's own still read.
    #[test]
    fn sockets_in_a_jobs_name_that_are_not_its_users_are_never_connected_to() {
        let me = rustix::process::getuid().as_raw();
        let pid = std::process::id();
        let ok = format!("colloc-live/920/{pid}.a");
        let h = serve(&ok, snap(920, &["a"]));
        // Names of sockets that do not exist: a connection would fail and count the same,
        // but none is tried (the time bound says so: 50,000 connects take longer).
        let mut list: Vec<Listening> = (0..50_000)
            .map(|i| Listening {
                name: format!("colloc-live/920/{i}.x").into_bytes(),
                inode: i,
                uid: Some(me + 1),
            })
            .collect();
        list.push(Listening {
            name: format!("colloc-live/920/{pid}.a\n").into_bytes(),
            inode: 1,
            uid: Some(me),
        });
        list.extend(listed(&[&ok]));
        let t = Instant::now();
        let got = read_listed(&list, &[speaker(920, me)]);
        assert!(t.elapsed() < DEADLINE, "{:?}", t.elapsed());
        assert_eq!(got.refused, 50_001);
        assert_eq!(got.jobs[0].runs[0].name, "a");
        h.join().unwrap();
    }

    /// Through the kernel's list: a socket of a job that does not speak here (a `colloc
    /// run` without `--colloc`, or another test node's in the same network namespace) is
    /// passed over and not counted as refused; one in a speaking job's name that is not
    /// its user's still is. (CI: two test clusters side by side on one host counted each
    /// other's runs as refused.)
    #[test]
    fn a_socket_of_a_job_that_does_not_speak_here_is_not_refused() {
        let me = rustix::process::getuid().as_raw();
        let pid = std::process::id();
        // Job ids no other test (nor a real job here) uses.
        let quiet = 3_000_000_000 + pid;
        let speaking = 3_500_000_000 + pid;
        let elsewhere = format!("colloc-live/{quiet}/{pid}.a");
        let forged = format!("colloc-live/{speaking}/{pid}.b");
        let h1 = serve(&elsewhere, snap(quiet, &["a"]));
        let h2 = serve(&forged, snap(speaking, &["b"]));
        assert_eq!(listed(&[&elsewhere, &forged]).len(), 2);
        let got = read(&[speaker(speaking, me + 1)]);
        assert_eq!(got.jobs, [], "{got:?}");
        assert_eq!(got.refused, 1, "{got:?}");
        drop((h1, h2));
    }

    #[test]
    fn a_device_that_is_not_the_jobs_is_dropped() {
        let me = rustix::process::getuid().as_raw();
        let name = format!("colloc-live/910/{}.a", std::process::id());
        let h = serve(&name, snap(910, &["a"]));
        let mut sp = speaker(910, me);
        sp.devices = [("GPU-2".to_string(), "GPU-2".to_string())].into();
        let got = read_listed(&listed(&[&name]), &[sp]);
        assert_eq!(got.jobs[0].runs[0].device, None);
        h.join().unwrap();
    }
}
