//! This host's processes, from `/proc`: which run, their command lines, environments and
//! mount namespaces.

/// The mount namespace of process `pid` (`mnt:[…]`), while it runs.
pub fn pid_mount_ns(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The pids of this host's processes (those in `/proc` now).
pub fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
}

/// The pids of processes whose command line (`/proc/PID/cmdline`: the arguments, each
/// ended by a NUL) `keep` accepts.
pub fn pids_by_cmdline(keep: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    pids()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| keep(&c)))
        .collect()
}

/// MPS programs (process name `nvidia-cuda-mps…`) whose environment has
/// `CUDA_MPS_PIPE_DIRECTORY=<dir>`: the daemons of that pipe directory.
pub fn processes_of_pipe_dir(dir: &str) -> Vec<u32> {
    let needle = format!("CUDA_MPS_PIPE_DIRECTORY={dir}");
    pids()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("nvidia-cuda-mps"))
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Is process `pid` alive? A zombie (exited, waiting to be reaped by init) is not.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}
