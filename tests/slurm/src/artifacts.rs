//! Where the artifacts under test are (the plugin, the `colloc` binary, the fake NVML and
//! its control tool, the SPANK probe plugin), and copies of them that a job can reach.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{run, text};

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("debug")
}

/// An artifact: `$var` when set, else `target/debug/<name>`; see [`visible_to_jobs`].
pub fn artifact(var: &str, name: &str) -> PathBuf {
    visible_to_jobs(match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join(name),
    })
}

/// Where copies of artifacts that lie under `/tmp` go (scripts/test.sh removes it).
pub const ARTIFACT_COPIES: &str = "/var/tmp/colloc-test-artifacts";

/// `path`, or, where it lies under `/tmp` or `/dev/shm` (a checkout cloned under /tmp),
/// a copy of it under [`ARTIFACT_COPIES`]: the production profile's job container gives
/// every job its own `/tmp` and `/dev/shm`, so a job script, an `srun` inside a job, or a
/// colloc.toml could not reach the file there. The copy is refreshed when the file
/// changed, and made aside then renamed, since suites run at the same time.
pub fn visible_to_jobs(path: PathBuf) -> PathBuf {
    let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    if !(real.starts_with("/tmp") || real.starts_with("/dev/shm")) {
        return path;
    }
    let Some(name) = real.file_name() else {
        return path;
    };
    let Ok(meta) = std::fs::metadata(&real) else {
        return path;
    };
    // One folder per source file, so names (and a plugin's file name) stay as they are.
    let key = real
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = Path::new(ARTIFACT_COPIES).join(format!("{key:016x}"));
    let dest = dir.join(name);
    let fresh = std::fs::metadata(&dest)
        .is_ok_and(|d| d.len() == meta.len() && d.modified().ok() >= meta.modified().ok());
    if !fresh {
        std::fs::create_dir_all(&dir).expect("make the artifact copies' folder");
        let tmp = dir.join(format!(
            ".{}.{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        std::fs::copy(&real, &tmp).expect("copy an artifact out of /tmp");
        std::fs::rename(&tmp, &dest).expect("move the artifact copy into place");
    }
    dest
}

/// A file of the checkout that a job runs or reads (a run's script, say), at `rel` from
/// the workspace root; see [`visible_to_jobs`]: where the checkout lies under `/tmp`, the
/// production profile's job container hides it from every process of the job.
pub fn fixture(rel: &str) -> PathBuf {
    visible_to_jobs(repo_root().join(rel))
}

/// The plugin under test.
pub fn plugin_path() -> PathBuf {
    artifact("COLLOC_SPANK_PLUGIN", "libcolloc_spank.so")
}

/// The plugin with the test-only seams (`test_panic=`), for the panic-containment test:
/// `$COLLOC_SPANK_TEST_PLUGIN`, else `target/test-seams/libcolloc_spank.so`, built by
/// `cargo build -p colloc-spank --features test-seams --profile test-seams`. Release and
/// debug plugins do not have the seams.
///
/// # Panics
/// When it has not been built, with the command that builds it.
pub fn test_seams_plugin() -> PathBuf {
    let p = match std::env::var_os("COLLOC_SPANK_TEST_PLUGIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target"))
            .join("test-seams/libcolloc_spank.so"),
    };
    let p = visible_to_jobs(p);
    assert!(
        p.is_file(),
        "no test-seams plugin at {}: build it with `cargo build -p colloc-spank --features \
         test-seams --profile test-seams` (scripts/test.sh does), or set COLLOC_SPANK_TEST_PLUGIN",
        p.display()
    );
    p
}

/// The `colloc` binary under test.
pub fn colloc_bin() -> PathBuf {
    artifact("COLLOC_BIN", "colloc")
}

/// The fake NVML control tool.
pub fn fake_ctl() -> PathBuf {
    artifact("COLLOC_FAKE_NVML_CTL", "fake-nvml-ctl")
}

/// Build the SPANK probe plugin (`tests/slurm/probes/spank_probe.c`, which records where
/// Slurm calls each callback) with the C compiler (`$CC`, else `gcc`) into the target
/// folder, and return its path.
///
/// # Panics
/// When the compiler is missing or fails.
pub fn build_spank_probe() -> PathBuf {
    let src = repo_root().join("tests/slurm/probes/spank_probe.c");
    // Named after the Slurm whose headers it is built against: suites of two Slurm
    // releases may run at once from one checkout (scripts/test.sh), and one's build in
    // the other's place fails to load ("Incompatible Slurm plugin", seen in CI).
    let version = std::fs::read_to_string("/usr/include/slurm/slurm_version.h")
        .ok()
        .and_then(|h| {
            h.lines()
                .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    let out = target_dir().join(format!("spank_probe-{version}.so"));
    // Another test process may build it at the same time: compile aside, then rename.
    let tmp = target_dir().join(format!("spank_probe.so.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let built = run(Command::new(&cc)
        .args([
            "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&tmp)
        .arg(&src));
    assert!(
        built.status.success(),
        "{cc} {}: {}",
        src.display(),
        text(&built.stderr).trim()
    );
    std::fs::rename(&tmp, &out).expect("move the probe plugin into place");
    visible_to_jobs(out)
}
