//! The few libc calls colloc-core needs that std does not offer. All `unsafe` of the crate
//! outside the NVML layer lives here.

/// Send `sig` to process `pid`. Returns false if the process does not exist (or is not
/// ours to signal).
pub fn kill(pid: u32, sig: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false; // never signal a process group or every process by accident
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Is there a process with this pid (zombies included)?
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The real group id of this process.
pub fn gid() -> u32 {
    // SAFETY: getgid(2) cannot fail and touches no memory.
    unsafe { libc::getgid() }
}

/// The real user id of this process.
pub fn uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    unsafe { libc::getuid() }
}
