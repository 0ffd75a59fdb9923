//! The control protocol between colloc and a slot's supervisor ([`super::launch`] says
//! where each sits): what colloc asks ([`Request`], framed JSON with descriptors
//! attached) and what a supervisor answers ([`Msg`], one text line each). Below both
//! ends, so neither imports the other for it.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// How long a finished run's leftover processes get to disappear (after SIGKILL) before
/// its supervisor gives up on them and its slot is handed on.
pub const GROUP_EXIT_WAIT: Duration = Duration::from_secs(3);

/// Largest request accepted on a control socket.
const MAX_REQUEST: usize = 64 << 20;

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment changes, applied in order over colloc's own environment.
    pub env: Vec<(String, String)>,
    /// Working directory (`None`: colloc's).
    pub cwd: Option<PathBuf>,
}

/// What colloc asks a supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Start attempt `id`. Attached: its output pipe's write end, then its stdin's read
    /// end (when `stdin`), then its stderr's write end (when `stderr`).
    Run {
        /// Attempt id.
        id: u64,
        /// What to start.
        spec: LaunchSpec,
        /// Its stdin is a pipe colloc writes (else it is empty).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stdin: bool,
        /// Its stderr is a pipe of its own (else it goes with stdout into the output).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stderr: bool,
    },
    /// Send `sig` to attempt `id`'s process group (while its leader lives).
    Signal {
        /// Attempt id.
        id: u64,
        /// Signal number.
        sig: i32,
    },
    /// Kill attempt `id`'s process group and every descendant now.
    Kill {
        /// Attempt id.
        id: u64,
    },
}

/// What colloc asks about a running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// Send this signal to its process group.
    Signal(i32),
    /// Kill its process group and every descendant now.
    Kill,
}

/// What a supervisor tells colloc about an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// The run's leader started with this pid (its session and process group id).
    Pid(u32),
    /// The program could not be started.
    Error(String),
    /// The leader exited with this code.
    Exit(i32),
    /// The leader was killed by this signal.
    Signaled(i32),
    /// A process of the run had left its session; it was killed.
    Escaped {
        /// Its pid.
        pid: u32,
        /// Its command name.
        comm: String,
    },
    /// Nothing of the run is left (`left` processes could not be made to exit in time).
    Done {
        /// Processes still there when the supervisor gave up.
        left: u32,
    },
}

impl Msg {
    /// The protocol line for attempt `id`.
    pub fn line(&self, id: u64) -> String {
        let one = |s: &str| s.replace(['\n', '\r'], " ");
        match self {
            Msg::Pid(p) => format!("{id} pid {p}\n"),
            Msg::Error(e) => format!("{id} error {}\n", one(e)),
            Msg::Exit(c) => format!("{id} exit {c}\n"),
            Msg::Signaled(s) => format!("{id} signal {s}\n"),
            Msg::Escaped { pid, comm } => format!("{id} escaped {pid} {}\n", one(comm)),
            Msg::Done { left } => format!("{id} done {left}\n"),
        }
    }

    /// Parse a protocol line: attempt id and message.
    pub fn parse(line: &str) -> Option<(u64, Msg)> {
        let (id, rest) = line.split_once(' ')?;
        let id: u64 = id.parse().ok()?;
        let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
        let uint = || v.trim().parse::<u32>().ok();
        let int = || v.trim().parse::<i32>().ok();
        let m = match k {
            "pid" => uint().map(Msg::Pid),
            "error" => Some(Msg::Error(v.to_string())),
            "exit" => int().map(Msg::Exit),
            "signal" => int().map(Msg::Signaled),
            "escaped" => {
                let (p, c) = v.split_once(' ').unwrap_or((v, "?"));
                Some(Msg::Escaped {
                    pid: p.parse().ok()?,
                    comm: c.to_string(),
                })
            }
            "done" => uint().map(|left| Msg::Done { left }),
            _ => None,
        }?;
        Some((id, m))
    }
}

/// Split complete lines off a buffer; the rest stays.
pub(super) fn take_lines(buf: &mut Vec<u8>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(i) = buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = buf.drain(..=i).collect();
        out.push(String::from_utf8_lossy(&line[..i]).into_owned());
    }
    out
}

/// Most descriptors one request carries (output, stdin, stderr).
const MAX_FDS: usize = 3;

/// Send one framed request, with `fds` attached (at most three).
pub fn send_request(sock: &impl AsFd, req: &Request, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let payload = serde_json::to_vec(req).map_err(io::Error::other)?;
    let header = u32::try_from(payload.len())
        .map_err(|_| io::Error::other("request too large"))?
        .to_le_bytes();
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for one request"));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        cmsg.push(SendAncillaryMessage::ScmRights(fds));
    }
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(&payload);
    // The descriptor goes with the first byte; the rest follows as plain data.
    let mut sent = loop {
        match sendmsg(
            sock,
            &[IoSlice::new(&bytes)],
            &mut cmsg,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    while sent < bytes.len() {
        match rustix::net::send(sock, &bytes[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Read one framed request and the descriptors attached to it, in the order sent.
/// `Ok(None)` at end of file.
pub fn recv_request(sock: &OwnedFd) -> io::Result<Option<(Request, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS + 1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut header)],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::WAITALL,
        ) {
            Ok(r) => break r.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if got == 0 {
        return Ok(None);
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if got != 4 {
        return Err(io::Error::other("malformed request"));
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_REQUEST {
        return Err(io::Error::other("request too large"));
    }
    let mut payload = vec![0u8; len];
    let mut s = UnixStream::from(sock.try_clone()?);
    s.read_exact(&mut payload)?;
    let req: Request = serde_json::from_slice(&payload).map_err(io::Error::other)?;
    Ok(Some((req, fds)))
}
