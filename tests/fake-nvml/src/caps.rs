//! The driver's MIG capability files, beside the state file: what the kernel module
//! publishes under `/proc` and what `nvidia-modprobe -f` (or colloc) makes device files
//! from (issue 24).
//!
//! - `proc/driver/nvidia-caps/mig-minors`: the minor of every possible capability,
//!   fixed by the driver: `config 1`, `monitor 2`, then per GPU `g` (135 minors each)
//!   and GPU instance `i` (9 each) `gpu{g}/gi{i}/access 3+135g+9i` and its compute
//!   instances `gpu{g}/gi{i}/ci{c}/access` one more each (c < 8), as NVIDIA's driver
//!   numbers them.
//! - `proc/driver/nvidia/capabilities/mig/{config,monitor}` and, for every GPU instance
//!   and compute instance that exists, `.../gpu{g}/mig/gi{i}/access` and
//!   `.../gi{i}/ci{c}/access` (`DeviceFileMinor`, `DeviceFileMode` in decimal,
//!   `DeviceFileModify`), kept in step with the state at every write.
//! - `proc/devices`: the `nvidia-caps` character major.
//!
//! [`crate::state::Quirks::no_caps`] publishes no instance capability (a driver whose
//! capability files are missing), for testing that such a job is refused.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::state::State;

/// The `nvidia-caps` major this fake publishes.
pub const CAPS_MAJOR: u32 = 237;
/// GPU instance ids per GPU in the minor numbering.
const GIS_PER_GPU: u32 = 15;
/// Compute instance ids per GPU instance.
const CIS_PER_GI: u32 = 8;
/// Mode of instance capabilities (0444), as the driver publishes them.
const INSTANCE_MODE: u32 = 0o444;
/// Mode of `mig/config` and `mig/monitor` (0400).
const CONFIG_MODE: u32 = 0o400;

/// The minor of GPU instance `gi` of GPU `gpu`.
pub fn gi_minor(gpu: u32, gi: u32) -> u32 {
    3 + gpu * GIS_PER_GPU * (CIS_PER_GI + 1) + gi * (CIS_PER_GI + 1)
}

/// The minor of compute instance `ci` of GPU instance `gi` of GPU `gpu`.
pub fn ci_minor(gpu: u32, gi: u32, ci: u32) -> u32 {
    gi_minor(gpu, gi) + 1 + ci
}

/// The root of the published files for a state file.
pub fn root(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

fn access(minor: u32, mode: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
}

fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if fs::read_to_string(path).ok().as_deref() == Some(text) {
        // As the kernel's: root's, 0644 (a test harness may have opened the folder up).
        use std::os::unix::fs::PermissionsExt;
        if fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o777 != 0o644) {
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o644));
        }
        return Ok(());
    }
    if let Some(d) = path.parent() {
        fs::create_dir_all(d)?;
    }
    // Whole files only: a reader never sees half of one.
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    fs::write(&tmp, text)?;
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644))?;
    }
    fs::rename(&tmp, path)
}

/// Bring the published files in step with `state`. Files of instances that exist are
/// written first, those of instances that went are removed after, so a reader never
/// misses a live instance's file.
///
/// # Errors
/// I/O errors.
pub fn sync(state_path: &Path, state: &State) -> std::io::Result<()> {
    let root = root(state_path);
    let caps = root.join("proc/driver/nvidia/capabilities");
    let gpus = u32::try_from(state.gpus.len()).unwrap_or(0);
    let mut minors = String::from("config 1\nmonitor 2\n");
    for g in 0..gpus {
        for i in 0..GIS_PER_GPU {
            minors.push_str(&format!("gpu{g}/gi{i}/access {}\n", gi_minor(g, i)));
            for c in 0..CIS_PER_GI {
                minors.push_str(&format!(
                    "gpu{g}/gi{i}/ci{c}/access {}\n",
                    ci_minor(g, i, c)
                ));
            }
        }
    }
    write_if_changed(&root.join("proc/driver/nvidia-caps/mig-minors"), &minors)?;
    write_if_changed(
        &root.join("proc/devices"),
        &format!("Character devices:\n195 nvidia\n{CAPS_MAJOR} nvidia-caps\n\nBlock devices:\n"),
    )?;
    write_if_changed(&caps.join("mig/config"), &access(1, CONFIG_MODE))?;
    write_if_changed(&caps.join("mig/monitor"), &access(2, CONFIG_MODE))?;
    let mut wanted = BTreeSet::new();
    if !state.quirks.no_caps {
        for (g, gpu) in (0u32..).zip(&state.gpus) {
            for gi in &gpu.gis {
                let dir = caps.join(format!("gpu{g}/mig/gi{}", gi.id));
                let file = dir.join("access");
                write_if_changed(&file, &access(gi_minor(g, gi.id), INSTANCE_MODE))?;
                wanted.insert(file);
                for ci in &gi.cis {
                    let file = dir.join(format!("ci{}/access", ci.id));
                    write_if_changed(&file, &access(ci_minor(g, gi.id, ci.id), INSTANCE_MODE))?;
                    wanted.insert(file);
                }
            }
        }
    }
    // Remove what went: gpuG/mig/giI/[ciC/]access not wanted.
    let Ok(list) = fs::read_dir(&caps) else {
        return Ok(());
    };
    for gpu_dir in list.flatten() {
        let name = gpu_dir.file_name();
        if !name.to_string_lossy().starts_with("gpu") {
            continue;
        }
        let mig = gpu_dir.path().join("mig");
        for gi_dir in fs::read_dir(&mig).into_iter().flatten().flatten() {
            let gi_path = gi_dir.path();
            for ci_dir in fs::read_dir(&gi_path).into_iter().flatten().flatten() {
                let p = ci_dir.path();
                if p.is_dir() && !wanted.contains(&p.join("access")) {
                    let _ = fs::remove_dir_all(&p);
                }
            }
            if !wanted.contains(&gi_path.join("access")) {
                let _ = fs::remove_dir_all(&gi_path);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minors_follow_the_drivers_numbering() {
        assert_eq!(gi_minor(0, 0), 3);
        assert_eq!(ci_minor(0, 0, 0), 4);
        assert_eq!(gi_minor(0, 1), 12);
        assert_eq!(ci_minor(0, 1, 0), 13);
        assert_eq!(gi_minor(1, 0), 138);
    }
}
