//! A hostile local user's tracer, for the security tests: run as an unprivileged account,
//! it waits for a process of its own whose stdin is colloc's control-program input memory
//! file holding WHAT (`quit`: the epilog's), attaches to it with `ptrace` (allowed to the
//! same user where Yama is absent or `ptrace_scope` is 0, once the program has exec'd), and
//! makes it exec `/bin/sh -c CMD` in place of the program's next system call. Prints
//! `injected PID` and exits 0; exits 3 when the kernel refuses the attach (Yama), 2 on a
//! bad command line or an architecture it does not know.
//!
//! ```text
//! colloc-sec-tracer WHAT CMD
//! ```

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(what), Some(cmd)) = (args.first(), args.get(1)) else {
        eprintln!("usage: colloc-sec-tracer WHAT CMD");
        std::process::exit(2);
    };
    #[cfg(target_arch = "x86_64")]
    {
        let me = std::process::id();
        loop {
            if let Some(pid) = find(what, me) {
                match inject(pid, cmd) {
                    Ok(()) => {
                        println!("injected {pid}");
                        std::process::exit(0);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                        println!("ptrace refused: {e}");
                        std::process::exit(3);
                    }
                    // Gone meanwhile: wait for the next one.
                    Err(e) => eprintln!("{pid}: {e}"),
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (what, cmd);
        println!("not on x86_64");
        std::process::exit(2);
    }
}

/// A process of ours (not `me`) whose stdin is colloc's input memory file holding `what`.
#[cfg(target_arch = "x86_64")]
fn find(what: &str, me: u32) -> Option<u32> {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let owner = std::os::unix::fs::MetadataExt::uid(&e.metadata().ok()?);
        if owner != uid {
            continue;
        }
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/0")) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("/memfd:colloc-mps-in") {
            continue;
        }
        let input = std::fs::read_to_string(format!("/proc/{pid}/fd/0")).unwrap_or_default();
        if input.trim() == what {
            return Some(pid);
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
fn inject(pid: u32, cmd: &str) -> std::io::Result<()> {
    let pid = pid as libc::pid_t;
    let err = std::io::Error::last_os_error;
    let wait = || {
        let mut status = 0;
        // SAFETY: waitpid(2) writes the status into the local.
        if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } != pid {
            return Err(err());
        }
        Ok(status)
    };
    // SAFETY: ptrace(2) requests on integers and on locals passed by pointer.
    unsafe {
        if libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) != 0 {
            return Err(err());
        }
        wait()?;
        // On to the entry of its next system call (an interrupted one is restarted):
        // there rax is -ENOSYS and orig_rax the call, which we replace with execve.
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        for _ in 0..100 {
            if libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, 0) != 0 {
                return Err(err());
            }
            let status = wait()?;
            if !libc::WIFSTOPPED(status) {
                return Err(std::io::Error::other("it ended"));
            }
            if libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) != 0 {
                return Err(err());
            }
            if regs.rax == (-libc::ENOSYS) as u64 {
                break;
            }
        }
        // "/bin/sh", "-c", CMD and argv, over its stack (it execs, so what was there is
        // not needed).
        let strings: [&[u8]; 3] = [b"/bin/sh\0", b"-c\0", cmd.as_bytes()];
        let mut blob = Vec::new();
        let mut at = Vec::new();
        let base = (regs.rsp + 64) & !15;
        for s in strings {
            at.push(base + blob.len() as u64);
            blob.extend_from_slice(s);
            if !s.ends_with(b"\0") {
                blob.push(0);
            }
        }
        blob.resize(blob.len().next_multiple_of(8), 0);
        let argv = base + blob.len() as u64;
        for p in [at[0], at[1], at[2], 0] {
            blob.extend_from_slice(&p.to_ne_bytes());
        }
        for (i, word) in blob.chunks(8).enumerate() {
            let w = u64::from_ne_bytes(word.try_into().unwrap());
            let addr = base + 8 * i as u64;
            if libc::ptrace(libc::PTRACE_POKEDATA, pid, addr, w) != 0 {
                return Err(err());
            }
        }
        regs.orig_rax = libc::SYS_execve as u64;
        regs.rdi = at[0];
        regs.rsi = argv;
        regs.rdx = 0;
        if libc::ptrace(libc::PTRACE_SETREGS, pid, 0, &regs) != 0 {
            return Err(err());
        }
        if libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) != 0 {
            return Err(err());
        }
    }
    Ok(())
}
