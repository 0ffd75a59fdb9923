//! The listening Unix sockets with abstract names, their inodes and owners, as the kernel
//! says them through `NETLINK_SOCK_DIAG` (unix_diag(7): `UDIAG_SHOW_NAME`,
//! `UDIAG_SHOW_UID`, Linux 5.3 and later).
//!
//! Not `/proc/net/unix`: there a name is printed byte for byte, so a name holding a
//! newline forges whole lines (another socket's inode, a name of the attacker's choice).
//! Here each name is a length-delimited attribute of its own socket's record, and the
//! owner is the kernel's word, so root decides whose a socket is before connecting to it.

use std::io;

use rustix::net::netlink::{SocketAddrNetlink, SOCK_DIAG};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// A listening stream socket with an abstract name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// Its abstract name, without the leading NUL.
    pub name: Vec<u8>,
    /// Its inode.
    pub inode: u32,
    /// Its owner's uid (the creator's), where the kernel says it.
    pub uid: Option<u32>,
}

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const AF_UNIX: u8 = 1;
const TCP_LISTEN: u32 = 10;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_UID: u32 = 0x40;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_UID: u16 = 7;
const SOCK_STREAM: u8 = 1;
/// The most sockets kept (those `keep` takes).
const MAX_KEPT: usize = 4096;

/// Every listening stream socket whose abstract name starts with `prefix`: those `keep`
/// takes (at most 4,096: a caller that keeps only what it will use is bounded by that,
/// not by how many sockets others make), and how many it did not.
///
/// # Errors
/// The netlink socket could not be made or asked, or the kernel refused the dump.
pub fn listening_abstract(
    prefix: &[u8],
    keep: &mut dyn FnMut(&Listening) -> bool,
) -> io::Result<(Vec<Listening>, u32)> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(SOCK_DIAG),
    )?;
    rustix::net::sendto(
        &fd,
        &request(),
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut out = Vec::new();
    let mut left = 0u32;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (n, _) = rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty())?;
        if n == 0 {
            return Ok((out, left));
        }
        let mut found = Vec::new();
        let done = parse(&buf[..n.min(buf.len())], prefix, &mut found)?;
        for l in found {
            if keep(&l) && out.len() < MAX_KEPT {
                out.push(l);
            } else {
                left = left.saturating_add(1);
            }
        }
        if done {
            return Ok((out, left));
        }
    }
}

/// The dump request: every AF_UNIX socket in the listening state, with its name and uid.
fn request() -> Vec<u8> {
    let mut r = Vec::with_capacity(40);
    r.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    r.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    r.extend_from_slice(&1u32.to_ne_bytes()); // seq
    r.extend_from_slice(&0u32.to_ne_bytes()); // pid
    r.extend_from_slice(&[AF_UNIX, 0, 0, 0]); // family, protocol, pad
    r.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes()); // states
    r.extend_from_slice(&0u32.to_ne_bytes()); // ino
    r.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_UID).to_ne_bytes());
    r.extend_from_slice(&[0u8; 8]); // cookie
    r
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parse one datagram of netlink messages into `out` (those named under `prefix`);
/// true at the end of the dump.
fn parse(buf: &[u8], prefix: &[u8], out: &mut Vec<Listening>) -> io::Result<bool> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed sock_diag answer");
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32_at(buf, at).ok_or_else(bad)? as usize;
        let kind = u16_at(buf, at + 4).ok_or_else(bad)?;
        if len < 16 || at + len > buf.len() {
            return Err(bad());
        }
        let msg = &buf[at + 16..at + len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(msg, 0).map_or(0, |e| e as i32);
                if errno != 0 {
                    return Err(io::Error::from_raw_os_error(-errno));
                }
            }
            SOCK_DIAG_BY_FAMILY => out.extend(listening(msg, prefix)),
            _ => {}
        }
        at += align4(len);
    }
    Ok(false)
}

/// One `unix_diag_msg` and its attributes, where it is a stream socket named under
/// `prefix`.
fn listening(msg: &[u8], prefix: &[u8]) -> Option<Listening> {
    // family, type, state, pad, ino, cookie[2]
    if *msg.get(1)? != SOCK_STREAM {
        return None;
    }
    let inode = u32_at(msg, 4)?;
    let (mut name, mut uid) = (None, None);
    let mut at = 16;
    while at + 4 <= msg.len() {
        let len = usize::from(u16_at(msg, at)?);
        let kind = u16_at(msg, at + 2)?;
        if len < 4 || at + len > msg.len() {
            return None;
        }
        let data = &msg[at + 4..at + len];
        match kind {
            UNIX_DIAG_NAME => name = Some(data),
            UNIX_DIAG_UID => uid = u32_at(data, 0),
            _ => {}
        }
        at += align4(len);
    }
    let abstract_name = name?.strip_prefix(&[0u8])?;
    abstract_name.starts_with(prefix).then(|| Listening {
        name: abstract_name.to_vec(),
        inode,
        uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::SocketAddrUnix;

    fn listen(name: &str) -> std::os::fd::OwnedFd {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
        rustix::net::bind(&fd, &addr).unwrap();
        rustix::net::listen(&fd, 1).unwrap();
        fd
    }

    /// The kernel's own answer: our listening sockets under the prefix, with our uid;
    /// a name holding a newline is one name, not a second record; one that only binds
    /// (does not listen) is not listed.
    #[test]
    fn the_kernel_lists_our_listening_sockets_by_name_and_owner() {
        let me = rustix::process::getuid().as_raw();
        let tag = format!("colloc-diag-test/{}/", std::process::id());
        let a = format!("{tag}a");
        let forged = format!("{tag}b\n0: 00000002 00000000 00010000 0001 01 1 @{tag}c");
        let _fa = listen(&a);
        let _fb = listen(&forged);
        let bound_only = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let addr = SocketAddrUnix::new_abstract_name(format!("{tag}d").as_bytes()).unwrap();
        rustix::net::bind(&bound_only, &addr).unwrap();
        let (mut got, left) = listening_abstract(tag.as_bytes(), &mut |_| true).unwrap();
        assert_eq!(left, 0);
        got.sort_by(|x, y| x.name.cmp(&y.name));
        let names: Vec<String> = got
            .iter()
            .map(|l| String::from_utf8_lossy(&l.name).into_owned())
            .collect();
        assert_eq!(names, [a, forged]);
        assert!(
            got.iter().all(|l| l.uid == Some(me) && l.inode > 1),
            "{got:?}"
        );
    }

    #[test]
    fn a_malformed_answer_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        let mut m = 100u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&[0u8; 20]);
        assert!(parse(&m, b"", &mut out).is_err());
        assert!(parse(&[1, 2, 3], b"", &mut out).is_ok_and(|done| !done));
        // A record whose attribute runs past its end is skipped.
        let mut rec = Vec::new();
        rec.extend_from_slice(&36u32.to_ne_bytes());
        rec.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        rec.extend_from_slice(&[0u8; 10]);
        rec.extend_from_slice(&[AF_UNIX, SOCK_STREAM, 10, 0]);
        rec.extend_from_slice(&[0u8; 12]);
        rec.extend_from_slice(&200u16.to_ne_bytes());
        rec.extend_from_slice(&UNIX_DIAG_NAME.to_ne_bytes());
        assert!(parse(&rec, b"", &mut out).is_ok());
        assert!(out.is_empty());
    }
}
