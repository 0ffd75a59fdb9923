//! Does the Slurm that loaded the plugin match the one it was built for?
//!
//! Slurm itself refuses a plugin whose `plugin_version` has another major.minor
//! ("Incompatible Slurm plugin version"), but only in the processes that check it, and
//! with a line that does not say what to do. `slurm_spank_init` asks the running Slurm
//! for its version (`S_SLURM_VERSION`, valid in every context) and refuses to load, with
//! one line for the admin, where it is another release than the headers the plugin was
//! built from, or one outside colloc's support matrix (spank/build.rs).

/// Check the running Slurm's version string (`"22.05.8"`) against the build's
/// `SLURM_VERSION_NUMBER` and the supported releases.
///
/// # Errors
/// One line naming both versions and what to do.
pub fn check(built: u32, supported: &[(u32, u32)], running: &str) -> Result<(), String> {
    let (bmaj, bmin) = (built >> 16, (built >> 8) & 0xff);
    let list = supported
        .iter()
        .map(|(a, b)| format!("{a}.{b:02}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut parts = running.trim().split('.');
    let parsed = match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
        _ => None,
    };
    let Some((maj, min)) = parsed else {
        return Err(format!(
            "this plugin was built for Slurm {bmaj}.{bmin:02}, but the running Slurm reports \
             the version {running:?}, which colloc cannot read; not loading (supported: {list})"
        ));
    };
    if (maj, min) != (bmaj, bmin) {
        return Err(format!(
            "this plugin was built for Slurm {bmaj}.{bmin:02}, but Slurm {} is running; not \
             loading: rebuild and reinstall colloc against this Slurm's headers (supported: \
             {list})",
            running.trim()
        ));
    }
    if !supported.contains(&(maj, min)) {
        return Err(format!(
            "Slurm {} is not a release colloc supports ({list}); not loading",
            running.trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &[(u32, u32)] = &[(22, 5), (23, 2), (25, 11)];

    #[test]
    fn the_release_it_was_built_for_loads() {
        check(0x16_05_08, S, "22.05.8").unwrap();
        check(0x16_05_08, S, "22.05.11").unwrap();
        check(0x19_0b_00, S, "25.11.0\n").unwrap();
    }

    #[test]
    fn another_release_is_refused_naming_both() {
        let e = check(0x16_05_08, S, "23.02.1").unwrap_err();
        assert!(
            e.contains("built for Slurm 22.05, but Slurm 23.02.1 is running"),
            "{e}"
        );
        assert!(e.contains("supported: 22.05, 23.02, 25.11"), "{e}");
    }

    #[test]
    fn unknown_or_unreadable_versions_are_refused() {
        let e = check(0x1a_02_00, S, "26.02.0").unwrap_err();
        assert!(e.contains("not a release colloc supports"), "{e}");
        for v in ["", "22", "x.y.z", "22.x"] {
            let e = check(0x16_05_08, S, v).unwrap_err();
            assert!(e.contains("which colloc cannot read"), "{v:?}: {e}");
        }
    }
}
