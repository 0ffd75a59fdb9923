//! The running runs of the node's `colloc run`s, as the node's metrics show them (issue
//! 38): read from each one's abstract socket ([`crate::run::live`]), never from a file a
//! user could swap.
//!
//! Which sockets: those `/proc/net/unix` lists as listening under
//! `colloc-live/<job>/…` for a job that holds GPUs here through colloc (a journal of
//! it) and that Slurm does not say has ended. Whose: the kernel's credentials of the
//! socket's owner (`SO_PEERCRED`) must be the job's user, as the journal says, so a user
//! can speak only of their own jobs; a socket of another uid, an answer that is not a
//! snapshot of that job, or one not read in time is left out and counted
//! ([`LiveRead::refused`]). Every socket is read at once, side by side, within one
//! deadline, so one that never answers delays nothing else. What a snapshot says is its
//! user's claim about their own runs, checked for size and form
//! ([`colloc_results::live::Live::parse`]); a device it names that is none of the job's
//! is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use colloc_results::live::{self, Live, LiveRun};
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
    let text = std::fs::File::open("/proc/net/unix")
        .ok()
        .and_then(|f| colloc_core::fs::read_at_most(f, 256 << 20).ok().flatten())
        .unwrap_or_default();
    read_names(
        &listening_names(&String::from_utf8_lossy(&text)),
        speakers,
        &mut ProcHolders::default(),
    )
}

/// The listening stream sockets with abstract names under colloc's prefix: each name and
/// its inode, once each.
pub fn listening_names(proc_net_unix: &str) -> Vec<(String, u64)> {
    let mut names = BTreeMap::new();
    for line in proc_net_unix.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num RefCount Protocol Flags Type St Inode Path: listening (__SO_ACCEPTCON),
        // a stream, unconnected, with an abstract name.
        let [_, _, _, flags, kind, st, inode, path] = f[..] else {
            continue;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|x| x & 0x0001_0000 != 0);
        let Ok(inode) = inode.parse::<u64>() else {
            continue;
        };
        if !listening || kind != "0001" || st != "01" {
            continue;
        }
        if let Some(name) = path.strip_prefix('@') {
            if live::job_of_name(name).is_some() {
                names.entry(name.to_string()).or_insert(inode);
            }
        }
    }
    names.into_iter().collect()
}

/// Who holds a socket, as `/proc` says: a process's real uid and the socket inodes among
/// its open files, read once per process and only for processes a name points at.
pub trait Holders {
    /// Process `pid`'s real uid (`None`: no such process).
    fn uid(&mut self, pid: u32) -> Option<u32>;
    /// Whether process `pid` has the socket of inode `inode` open.
    fn holds(&mut self, pid: u32, inode: u64) -> bool;
}

/// [`Holders`] from `/proc`.
#[derive(Default)]
pub struct ProcHolders {
    uids: BTreeMap<u32, Option<u32>>,
    sockets: BTreeMap<u32, BTreeSet<u64>>,
}

/// The most open files read of one process.
const MAX_FDS: usize = 65_536;

impl Holders for ProcHolders {
    fn uid(&mut self, pid: u32) -> Option<u32> {
        *self.uids.entry(pid).or_insert_with(|| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            line.split_whitespace().next()?.parse().ok()
        })
    }

    fn holds(&mut self, pid: u32, inode: u64) -> bool {
        self.sockets
            .entry(pid)
            .or_insert_with(|| {
                let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                    return BTreeSet::new();
                };
                rd.flatten()
                    .take(MAX_FDS)
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter_map(|l| {
                        let l = l.to_str()?;
                        l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
                    })
                    .collect()
            })
            .contains(&inode)
    }
}

/// The pid a socket name says serves it (`colloc-live/<job>/<pid>.<n>`).
fn pid_of_name(name: &str) -> Option<u32> {
    let tail = name.strip_prefix(live::SOCKET_PREFIX)?.split_once('/')?.1;
    tail.split_once('.')?.0.parse().ok()
}

/// Read the sockets `names` (with their inodes) for `speakers`. Only a socket that the
/// process its name points at holds, and whose user is the job's, is connected to: a
/// socket someone else made in a job's name costs a look-up, not a connection, however
/// many there are.
pub fn read_names(
    names: &[(String, u64)],
    speakers: &[Speaker],
    holders: &mut dyn Holders,
) -> LiveRead {
    let by_job: BTreeMap<u32, &Speaker> = speakers.iter().map(|s| (s.job, s)).collect();
    let mut out = LiveRead::default();
    let mut per_job: BTreeMap<u32, usize> = BTreeMap::new();
    let mut chosen: Vec<(u32, &str)> = Vec::new();
    for (name, inode) in names {
        let Some(job) = live::job_of_name(name) else {
            continue;
        };
        let Some(sp) = by_job.get(&job) else { continue };
        let owned = pid_of_name(name)
            .is_some_and(|pid| holders.uid(pid) == Some(sp.uid) && holders.holds(pid, *inode));
        let n = per_job.entry(job).or_default();
        if !owned || *n >= PER_JOB || chosen.len() >= ALL {
            out.refused += 1;
            continue;
        }
        *n += 1;
        chosen.push((job, name));
    }
    let deadline = Instant::now() + DEADLINE;
    let mut open: Vec<(u32, OwnedFd)> = Vec::new();
    for (job, name) in chosen {
        match connect(name, by_job[&job].uid, deadline) {
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

    #[test]
    fn only_listening_colloc_names_are_taken() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000051dfd720: 00000002 00000000 00010000 0001 01 42687918 @colloc-live/42/7.1\n\
            0000000051dfd721: 00000002 00000000 00010000 0001 01 42687919 @colloc-live/42/7.1\n\
            0000000051dfd722: 00000003 00000000 00000000 0001 03 42687920 @colloc-live/43/8.1\n\
            0000000051dfd723: 00000002 00000000 00010000 0002 01 42687921 @colloc-live/44/9.1\n\
            0000000051dfd724: 00000002 00000000 00010000 0001 01 42687922 /tmp/colloc-live/45/1\n\
            0000000051dfd725: 00000002 00000000 00010000 0001 01 42687923 @other/46/1\n\
            0000000051dfd726: 00000002 00000000 00010000 0001 01 42687924 @colloc-live/47/a b\n\
            0000000051dfd727: 00000002 00000000 00010000 0001 01 42687925\n";
        assert_eq!(
            listening_names(text),
            [("colloc-live/42/7.1".to_string(), 42_687_918)]
        );
        assert_eq!(pid_of_name("colloc-live/42/7.1"), Some(7));
        assert_eq!(pid_of_name("colloc-live/42/x.1"), None);
    }

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

    /// The listed sockets of this process's names, as `/proc/net/unix` has them now.
    fn listed(names: &[&String]) -> Vec<(String, u64)> {
        let text = std::fs::read_to_string("/proc/net/unix").unwrap();
        listening_names(&text)
            .into_iter()
            .filter(|(n, _)| names.contains(&n))
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
        // Served here, but its name says another process (pid 1) serves it.
        let not_its_pid = "colloc-live/900/1.f".to_string();
        let handles = vec![
            serve(&ok, snap(900, &["a", "b"])),
            serve(&twin, snap(900, &["b", "c"])),
            serve(&other_job, snap(900, &["x"])),
            serve(&silent, Vec::new()),
            serve(&wrong_uid_job, snap(903, &["y"])),
            serve(&not_its_pid, snap(900, &["z"])),
        ];
        let speakers = [
            speaker(900, me),
            speaker(901, me),
            speaker(902, me),
            speaker(903, me + 1),
        ];
        let names = listed(&[
            &ok,
            &twin,
            &other_job,
            &silent,
            &wrong_uid_job,
            &not_its_pid,
        ]);
        assert_eq!(names.len(), 6, "{names:?}");
        let t = Instant::now();
        let got = read_names(&names, &speakers, &mut ProcHolders::default());
        assert!(t.elapsed() < DEADLINE * 3, "{:?}", t.elapsed());
        // 900: two sources, "b" once; 901 said it was 900; 902 never answered; 903's
        // socket is not its user's; the one that names pid 1 is not pid 1's.
        assert_eq!(got.jobs.len(), 1, "{got:?}");
        let j = &got.jobs[0];
        assert_eq!((j.job, j.sources), (900, 2));
        let runs: Vec<&str> = j.runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(runs, ["a", "b", "c"]);
        assert_eq!(got.refused, 4, "{got:?}");
        drop(handles);
    }

    /// A job's name on many sockets that are not its user's: each is a look-up, none a
    /// connection (a holder that counts proves it), and the job's own is still read.
    #[test]
    fn sockets_in_a_jobs_name_that_are_not_its_users_are_never_connected_to() {
        struct Counting {
            asked: usize,
            uid: u32,
        }
        impl Holders for Counting {
            fn uid(&mut self, pid: u32) -> Option<u32> {
                self.asked += 1;
                (pid == std::process::id()).then_some(self.uid)
            }
            fn holds(&mut self, pid: u32, _: u64) -> bool {
                pid == std::process::id()
            }
        }
        let me = rustix::process::getuid().as_raw();
        let pid = std::process::id();
        let ok = format!("colloc-live/920/{pid}.a");
        let h = serve(&ok, snap(920, &["a"]));
        let mut names: Vec<(String, u64)> = (0..50_000)
            .map(|i| (format!("colloc-live/920/{}.x", 100_000 + i), 1))
            .collect();
        names.extend(listed(&[&ok]));
        let mut holders = Counting { asked: 0, uid: me };
        let t = Instant::now();
        let got = read_names(&names, &[speaker(920, me)], &mut holders);
        assert!(t.elapsed() < DEADLINE, "{:?}", t.elapsed());
        assert_eq!(got.refused, 50_000);
        assert_eq!(got.jobs[0].runs[0].name, "a");
        assert_eq!(holders.asked, 50_001);
        h.join().unwrap();
    }

    #[test]
    fn a_device_that_is_not_the_jobs_is_dropped() {
        let me = rustix::process::getuid().as_raw();
        let name = format!("colloc-live/910/{}.a", std::process::id());
        let h = serve(&name, snap(910, &["a"]));
        let mut sp = speaker(910, me);
        sp.devices = [("GPU-2".to_string(), "GPU-2".to_string())].into();
        let got = read_names(&listed(&[&name]), &[sp], &mut ProcHolders::default());
        assert_eq!(got.jobs[0].runs[0].device, None);
        h.join().unwrap();
    }
}
