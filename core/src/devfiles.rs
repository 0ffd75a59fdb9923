//! The `/dev/nvidia-caps/nvidia-capN` device files of MIG instances.
//!
//! A CUDA process (and, with `ConstrainDevices=yes`, the job's device cgroup) needs the
//! capability device file of its GPU instance and compute instance. The driver cannot
//! create device files itself: it publishes each instance's capability under
//! `/proc/driver/nvidia/capabilities/gpuG/mig/giI/access` (and `.../ciC/access`), with the
//! device file's minor and mode, and the minors of every possible instance in
//! `/proc/driver/nvidia-caps/mig-minors`; `nvidia-smi` then runs
//! `nvidia-modprobe -f ACCESS`. colloc creates instances through NVML, so it does the
//! same after each create: `nvidia-modprobe -f` where installed (root-owned), else
//! `mknod` with the same major (the `nvidia-caps` line of `/proc/devices`), minor and mode.
//! All roots come from `[mig]` in colloc.toml, so tests point them at the fake driver's.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Config;

/// Largest capability file colloc reads.
const READ_LIMIT: u64 = 1 << 20;
/// How long `nvidia-modprobe -f` may take.
pub const MODPROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What an `access` file says about its device file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The device file's minor.
    pub minor: u32,
    /// Its mode (permission bits).
    pub mode: u32,
}

/// Parse an `access` file: `DeviceFileMinor: 12`, `DeviceFileMode: 292` (decimal, as the
/// driver writes it), `DeviceFileModify: 1`.
pub fn parse_access(text: &str) -> Option<Access> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == name)
            .and_then(|(_, v)| v.trim().parse::<u32>().ok())
    };
    Some(Access {
        minor: field("DeviceFileMinor")?,
        mode: field("DeviceFileMode")? & 0o777,
    })
}

/// Parse `mig-minors`: lines `config 1`, `monitor 2`, `gpu0/gi1/access 12`,
/// `gpu0/gi1/ci0/access 13`.
pub fn parse_mig_minors(text: &str) -> HashMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let minor = it.next()?.parse().ok()?;
            Some((name.to_string(), minor))
        })
        .collect()
}

/// The major of `name` in a `/proc/devices` text (character devices only).
pub fn device_major(text: &str, name: &str) -> Option<u32> {
    let chars = text.split("Block devices:").next().unwrap_or(text);
    chars.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let major = it.next()?.parse().ok()?;
        (it.next()? == name).then_some(major)
    })
}

/// The capability of GPU instance `gi` of the GPU whose `/dev/nvidiaN` minor is `gpu`,
/// relative to the capabilities root.
pub fn gi_cap(gpu: u32, gi: u32) -> String {
    format!("gpu{gpu}/mig/gi{gi}/access")
}

/// The capability of compute instance `ci` of GPU instance `gi`.
pub fn ci_cap(gpu: u32, gi: u32, ci: u32) -> String {
    format!("gpu{gpu}/mig/gi{gi}/ci{ci}/access")
}

/// The `mig-minors` key of a capability path (`gpu0/mig/gi1/access` → `gpu0/gi1/access`).
fn minors_key(cap: &str) -> String {
    cap.replacen("/mig/", "/", 1)
}

/// Read a file the driver publishes: a regular file (not through a link at its name)
/// that root owns and only root may change, size-capped. The directories above are not
/// walked: procfs is the kernel's, and what is read here only ever names a minor and a
/// mode root's own files state (a file swapped in from elsewhere in the tree makes at most
/// another capability's device file with the driver's mode, never a more open one).
fn read_root_file(path: &Path) -> Result<String, String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("{}: {e}", path.display()))?;
    let regular =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
    if !regular || st.st_uid != 0 || st.st_mode & 0o022 != 0 {
        return Err(format!(
            "{} is not a regular file only root can change",
            path.display()
        ));
    }
    let bytes = crate::fs::read_file_capped(std::fs::File::from(fd), path, READ_LIMIT)
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The minors table, empty where it cannot be read.
pub fn mig_minors(cfg: &Config) -> HashMap<String, u32> {
    read_root_file(&cfg.mig.mig_minors)
        .map(|t| parse_mig_minors(&t))
        .unwrap_or_default()
}

/// The device file of capability minor `minor`.
pub fn cap_file(cfg: &Config, minor: u32) -> PathBuf {
    cfg.mig.caps_dev_dir.join(format!("nvidia-cap{minor}"))
}

/// The device files of an instance's capabilities (GPU instance, then each compute
/// instance) where the minors are known; for naming holders.
pub fn instance_files(cfg: &Config, gpu: u32, gi: u32, cis: &[u32]) -> Vec<PathBuf> {
    let minors = mig_minors(cfg);
    std::iter::once(gi_cap(gpu, gi))
        .chain(cis.iter().map(|&ci| ci_cap(gpu, gi, ci)))
        .filter_map(|c| minors.get(&minors_key(&c)).map(|&m| cap_file(cfg, m)))
        .collect()
}

/// Make sure the device files of GPU instance `gi` and its compute instances `cis` on GPU
/// `gpu` exist with the driver's minor and mode.
///
/// # Errors
/// One line saying which file is missing and why it could not be made.
/// `nvidia-modprobe` runs end by `deadline` (past it colloc uses `mknod` at once).
pub fn ensure_instance(
    cfg: &Config,
    gpu: u32,
    gi: u32,
    cis: &[u32],
    deadline: Instant,
) -> Result<(), String> {
    let mut caps = vec![gi_cap(gpu, gi)];
    caps.extend(cis.iter().map(|&ci| ci_cap(gpu, gi, ci)));
    for cap in caps {
        ensure_cap(cfg, &cap, deadline)?;
    }
    Ok(())
}

fn ensure_cap(cfg: &Config, cap: &str, deadline: Instant) -> Result<(), String> {
    let access_path = cfg.mig.caps_proc_dir.join(cap);
    let access = read_root_file(&access_path)
        .map_err(|e| {
            format!(
                "the driver publishes no capability {} ({e})",
                access_path.display()
            )
        })
        .and_then(|t| {
            parse_access(&t).ok_or_else(|| {
                format!(
                    "{} has no DeviceFileMinor/DeviceFileMode",
                    access_path.display()
                )
            })
        })?;
    if let Some(&m) = mig_minors(cfg).get(&minors_key(cap)) {
        if m != access.minor {
            log::warn!(
                "{}: minor {} in {} but {m} in {}; using the capability's",
                cap,
                access.minor,
                access_path.display(),
                cfg.mig.mig_minors.display()
            );
        }
    }
    let major = read_root_file(&cfg.mig.proc_devices)
        .ok()
        .and_then(|t| device_major(&t, "nvidia-caps"));
    let file = cap_file(cfg, access.minor);
    // One look decides: the file may appear between two looks (another node's prolog
    // making the same capability where the folder is shared, as in the test clusters),
    // and a second look that finds it must not call it a wrong file.
    match device_state(&file, major, access.minor) {
        Device::Right => return Ok(()),
        Device::Missing => {}
        Device::Wrong => {
            return Err(format!(
                "{} exists but is not the character device of {} (minor {}); an admin removes it \
             and runs `nvidia-modprobe -f {}`",
                file.display(),
                cap,
                access.minor,
                access_path.display()
            ))
        }
    }
    let left = deadline
        .saturating_duration_since(Instant::now())
        .min(MODPROBE_TIMEOUT);
    let made = match modprobe(cfg) {
        Some(_) if left.is_zero() => Err("no time left for nvidia-modprobe".to_string()),
        Some(program) => run_modprobe(&program, &access_path, left),
        None => Err("nvidia-modprobe is not installed".to_string()),
    };
    if let Err(why) = made {
        log::debug!("{}: {why}; making it with mknod", file.display());
        let major = major.ok_or_else(|| {
            format!(
                "cannot make {}: no nvidia-caps line in {} and {why}",
                file.display(),
                cfg.mig.proc_devices.display()
            )
        })?;
        if let Err(e) = mknod(&cfg.mig.caps_dev_dir, &file, major, access) {
            // Another prolog may have made the same file meanwhile.
            if !device_ok(&file, Some(major), access.minor) {
                return Err(e);
            }
        }
    }
    if device_ok(&file, major, access.minor) {
        log::info!("made {} for {cap}", file.display());
        Ok(())
    } else {
        Err(format!(
            "{} is missing after making it for {cap}; an admin runs `nvidia-modprobe -f {}`",
            file.display(),
            access_path.display()
        ))
    }
}

/// What one look at a capability's device file finds.
#[derive(Debug, PartialEq, Eq)]
enum Device {
    /// A character device with the capability's minor (and major, where known).
    Right,
    /// Nothing there (or nothing colloc may look at).
    Missing,
    /// Something else under that name.
    Wrong,
}

fn device_state(file: &Path, major: Option<u32>, minor: u32) -> Device {
    let Ok(m) = std::fs::symlink_metadata(file) else {
        return Device::Missing;
    };
    let rdev = m.rdev();
    let right = m.file_type().is_char_device()
        && rustix::fs::minor(rdev) == minor
        && major.is_none_or(|maj| rustix::fs::major(rdev) == maj);
    if right {
        Device::Right
    } else {
        Device::Wrong
    }
}

/// Is `file` a character device with this minor (and major, where known)?
fn device_ok(file: &Path, major: Option<u32>, minor: u32) -> bool {
    device_state(file, major, minor) == Device::Right
}

/// `nvidia-modprobe` where installed and root's alone.
fn modprobe(cfg: &Config) -> Option<PathBuf> {
    let p = crate::config::resolve_program(&cfg.mig.nvidia_modprobe)?;
    crate::fs::open_trusted_file(&p).ok().map(|_| p)
}

fn run_modprobe(program: &Path, access: &Path, timeout: Duration) -> Result<(), String> {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("-f")
        .arg(access)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crate::sys::no_inherited_fds(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err(format!("{} -f failed ({s})", program.display())),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} -f timed out", program.display()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn mknod(dir: &Path, file: &Path, major: u32, access: Access) -> Result<(), String> {
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    // Root makes device files only in a directory chain that is root's alone.
    crate::fs::check_dir_path(dir).map_err(|e| format!("cannot make {}: {e}", file.display()))?;
    rustix::fs::mknodat(
        rustix::fs::CWD,
        file,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(access.mode),
        rustix::fs::makedev(major, access.minor),
    )
    .map_err(|e| format!("cannot make {}: {e}", file.display()))?;
    // The umask may have taken bits: set the driver's mode exactly.
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(access.mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", file.display()))
}

/// Why root may not control MIG on this node, for a driver that answered NO_PERMISSION:
/// the `mig-config` capability's device file, and what an admin does.
pub fn no_permission_hint(cfg: &Config) -> String {
    let config_cap = cfg.mig.caps_proc_dir.join("mig/config");
    let file = mig_minors(cfg).get("config").map_or_else(
        || cfg.mig.caps_dev_dir.join("nvidia-cap1"),
        |&m| cap_file(cfg, m),
    );
    let state = match std::fs::metadata(&file) {
        Ok(_) => "exists but root may not use it",
        Err(_) => "is missing",
    };
    format!(
        "root lacks the mig-config capability: its device file {} {state} (slurmd in a \
         container: pass /dev/nvidia-caps in); an admin runs `nvidia-modprobe -f {}` (or \
         `nvidia-smi mig -lgi` once) on the node",
        file.display(),
        config_cap.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    /// What the driver publishes for GPU 0's GPU instance 1 and its compute instance 0
    /// (minors 12 and 13, mode 0444, nvidia-caps major 237) under `root`, and a config
    /// that reads it there and makes device files in `root/dev/nvidia-caps` with `mknod`
    /// (no nvidia-modprobe).
    fn driver_files(root: &Path) -> Config {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cfg = Config::default();
        cfg.mig.caps_proc_dir = root.join("caps");
        cfg.mig.mig_minors = root.join("mig-minors");
        cfg.mig.proc_devices = root.join("devices");
        cfg.mig.caps_dev_dir = root.join("dev/nvidia-caps");
        cfg.mig.nvidia_modprobe = root.join("no-such-modprobe").display().to_string();
        std::fs::create_dir_all(root.join("caps/gpu0/mig/gi1/ci0")).unwrap();
        std::fs::create_dir_all(root.join("dev")).unwrap();
        for (cap, minor) in [("gi1/access", 12), ("gi1/ci0/access", 13)] {
            std::fs::write(
                root.join("caps/gpu0/mig").join(cap),
                format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
            )
            .unwrap();
        }
        std::fs::write(
            root.join("mig-minors"),
            "config 1\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n",
        )
        .unwrap();
        std::fs::write(
            root.join("devices"),
            "Character devices:\n237 nvidia-caps\n",
        )
        .unwrap();
        cfg
    }

    #[test]
    fn parses_what_the_driver_publishes() {
        assert_eq!(
            parse_access("DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
            Some(Access {
                minor: 12,
                mode: 0o444
            })
        );
        assert_eq!(parse_access("DeviceFileMinor: x\n"), None);
        let m =
            parse_mig_minors("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi1/ci0/access 13\n");
        assert_eq!(m["config"], 1);
        assert_eq!(m["gpu0/gi1/ci0/access"], 13);
        assert_eq!(minors_key(&ci_cap(0, 1, 0)), "gpu0/gi1/ci0/access");
        let devices = "Character devices:\n  1 mem\n195 nvidia\n237 nvidia-caps\n\nBlock devices:\n237 nvidia-caps\n";
        assert_eq!(device_major(devices, "nvidia-caps"), Some(237));
        assert_eq!(device_major(devices, "nvidia-uvm"), None);
    }

    #[test]
    fn makes_the_device_file_with_the_drivers_minor_and_mode() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: mknod needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cfg = driver_files(root);
        ensure_instance(&cfg, 0, 1, &[0], far()).unwrap();
        for minor in [12, 13] {
            let m = std::fs::symlink_metadata(cap_file(&cfg, minor)).unwrap();
            assert!(m.file_type().is_char_device());
            assert_eq!(rustix::fs::major(m.rdev()), 237);
            assert_eq!(rustix::fs::minor(m.rdev()), minor);
            assert_eq!(m.mode() & 0o777, 0o444);
        }
        // Again: nothing to do.
        ensure_instance(&cfg, 0, 1, &[0], far()).unwrap();
        assert_eq!(
            instance_files(&cfg, 0, 1, &[0]),
            [cap_file(&cfg, 12), cap_file(&cfg, 13)]
        );
        // No capability published: said, never silently passed.
        let e = ensure_instance(&cfg, 0, 2, &[0], far()).unwrap_err();
        assert!(e.contains("publishes no capability"), "{e}");
        // A plain file in the device file's place is named.
        std::fs::write(cap_file(&cfg, 30), "").unwrap();
        std::fs::create_dir_all(root.join("caps/gpu0/mig/gi3")).unwrap();
        std::fs::write(
            root.join("caps/gpu0/mig/gi3/access"),
            "DeviceFileMinor: 30\nDeviceFileMode: 292\n",
        )
        .unwrap();
        let e = ensure_instance(&cfg, 0, 3, &[], far()).unwrap_err();
        assert!(e.contains("is not the character device"), "{e}");
    }

    /// Prologs making the same instance's device files at once (the nodes of a test
    /// cluster share the folder; CI saw a three-node MIG job refused on one node): each
    /// succeeds, whoever makes a file first. Once, a file another made between two looks
    /// was taken for a wrong one ("exists but is not the character device").
    #[test]
    fn prologs_making_the_same_device_files_at_once_all_succeed() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: mknod needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cfg = driver_files(dir.path());
        std::fs::create_dir_all(&cfg.mig.caps_dev_dir).unwrap();
        const PROLOGS: usize = 4;
        let mut failures = Vec::new();
        for _ in 0..2000 {
            for minor in [12, 13] {
                let _ = std::fs::remove_file(cap_file(&cfg, minor));
            }
            let start = std::sync::Barrier::new(PROLOGS);
            let results: Vec<Result<(), String>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..PROLOGS)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            ensure_instance(&cfg, 0, 1, &[0], far())
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            failures.extend(results.into_iter().filter_map(Result::err));
            for minor in [12, 13] {
                assert!(device_ok(&cap_file(&cfg, minor), Some(237), minor));
            }
        }
        assert!(
            failures.is_empty(),
            "{} refused: {:?}",
            failures.len(),
            &failures[..1]
        );
    }
}
