//! `colloc run` inside a Slurm job serves what its running runs are doing to the node's
//! metrics (issue 38): a snapshot ([`colloc_results::live::Live`]) refreshed every
//! second, on an abstract Unix socket `colloc-live/<job>/<pid>.<n>`. Root's `colloc
//! status` (the metrics timer) reads it; nothing is written anywhere, and the socket
//! goes with the process.
//!
//! Only root and the run's own user are served (the peer's credentials are the kernel's,
//! `SO_PEERCRED`): another user on the node learns nothing of the runs. Each reader gets
//! the snapshot at once and the connection closes; one that does not read blocks the
//! server for at most a second.

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloc_results::live::{Live, SOCKET_PREFIX};
use rustix::io::Errno;
use rustix::net::{sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// The socket of a running `colloc run` and the snapshot it serves.
pub struct LiveServer {
    snapshot: Arc<Mutex<Vec<u8>>>,
    name: String,
    job: u32,
    /// Each slot's device as NVML names it (GPU or MIG UUID), where known.
    slot_devices: Vec<Option<String>>,
}

impl LiveServer {
    /// Serve job `job`'s snapshots from now on (an empty run list until the first
    /// [`LiveServer::publish`]). `None`, logged, where no socket can be made: the pack
    /// runs on, without metrics.
    pub fn start(job: u32) -> Option<LiveServer> {
        let first = Live {
            schema: colloc_results::live::SCHEMA,
            job,
            runs: Vec::new(),
        };
        let snapshot = Arc::new(Mutex::new(first.to_bytes()));
        let (fd, name) = match bind(job) {
            Ok(x) => x,
            Err(e) => {
                log::info!("no live metrics for the node: cannot serve them: {e}");
                return None;
            }
        };
        let served = Arc::clone(&snapshot);
        let me = rustix::process::getuid();
        let spawned = std::thread::Builder::new()
            .name("colloc-live".into())
            .spawn(move || serve(&fd, &served, me));
        if let Err(e) = spawned {
            log::info!("no live metrics for the node: {e}");
            return None;
        }
        log::debug!("live metrics served on @{name}");
        Some(LiveServer {
            snapshot,
            name,
            job,
            slot_devices: Vec::new(),
        })
    }

    /// Serve `live` from now on.
    pub fn publish(&self, live: &Live) {
        let bytes = live.to_bytes();
        if let Ok(mut s) = self.snapshot.lock() {
            *s = bytes;
        }
    }

    /// Name each slot's device by its UUID (as root's reader knows the job's devices).
    #[must_use]
    pub fn with_slot_devices(mut self, devices: Vec<Option<String>>) -> LiveServer {
        self.slot_devices = devices;
        self
    }

    /// Slot `slot`'s device UUID, where known.
    pub fn slot_device(&self, slot: usize) -> Option<&str> {
        self.slot_devices.get(slot)?.as_deref()
    }

    /// The job it serves.
    pub fn job(&self) -> u32 {
        self.job
    }

    /// The socket's abstract name (without the leading NUL).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A listening socket under a name no one holds yet (one taken is tried again under
/// another).
fn bind(job: u32) -> std::io::Result<(OwnedFd, String)> {
    let pid = std::process::id();
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = Errno::ADDRINUSE;
    for n in 0..16u32 {
        let name = format!(
            "{SOCKET_PREFIX}{job}/{pid}.{:08x}",
            salt.wrapping_add(n.wrapping_mul(0x9e37_79b9))
        );
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes())?;
        match rustix::net::bind(&fd, &addr) {
            Ok(()) => {
                // Room for a burst of readers (another user's connections are dropped at
                // once, but may fill a short queue while root's read waits).
                rustix::net::listen(&fd, 1024)?;
                return Ok((fd, name));
            }
            Err(e) if e == Errno::ADDRINUSE => last = e,
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.into())
}

/// Answer each reader that is root or `me` with the snapshot, then close.
fn serve(fd: &OwnedFd, snapshot: &Mutex<Vec<u8>>, me: rustix::process::Uid) {
    loop {
        let conn = match rustix::net::accept_with(fd, SocketFlags::CLOEXEC) {
            Ok(c) => c,
            Err(Errno::INTR | Errno::CONNABORTED) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let allowed = sockopt::socket_peercred(&conn).is_ok_and(|c| c.uid.is_root() || c.uid == me);
        if !allowed {
            continue;
        }
        let _ = sockopt::set_socket_timeout(
            &conn,
            sockopt::Timeout::Send,
            Some(Duration::from_secs(1)),
        );
        let bytes = snapshot.lock().map(|s| s.clone()).unwrap_or_default();
        let mut f = std::fs::File::from(conn);
        let _ = f.write_all(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn read(name: &str) -> Vec<u8> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
        rustix::net::connect(&fd, &addr).unwrap();
        let mut out = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn its_user_reads_what_was_published_last() {
        let s = LiveServer::start(77).unwrap();
        assert!(s.name().starts_with("colloc-live/77/"), "{}", s.name());
        let empty = Live::parse(&read(s.name())).unwrap();
        assert_eq!((empty.job, empty.runs.len()), (77, 0));
        let live = Live {
            schema: colloc_results::live::SCHEMA,
            job: 77,
            runs: vec![colloc_results::live::LiveRun {
                name: "a".into(),
                index: 0,
                attempt: 1,
                slot: 0,
                started_unix: 1.0,
                throughput: Some(10.0),
                unit: Some("it/s".into()),
                ..Default::default()
            }],
        };
        s.publish(&live);
        assert_eq!(Live::parse(&read(s.name())).unwrap(), live);
        // A second server of the same job gets a name of its own.
        let t = LiveServer::start(77).unwrap();
        assert_ne!(s.name(), t.name());
    }
}
