//! Where a test finds the fake library: the one helper every test crate uses.

use std::path::PathBuf;

/// `libfake_nvml.so` for a test binary: `COLLOC_FAKE_NVML_LIB` if set, else next to the
/// test binary (`target/debug/deps/`, where cargo builds a dev-dependency's cdylib) or in
/// the target directory above it.
///
/// # Panics
/// Not found: the test cannot run, and says how to build it.
pub fn library() -> PathBuf {
    if let Some(p) = std::env::var_os("COLLOC_FAKE_NVML_LIB") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().expect("target dir")] {
        let p = dir.join("libfake_nvml.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libfake_nvml.so not found next to {}; run `cargo build -p fake-nvml` or set COLLOC_FAKE_NVML_LIB",
        exe.display()
    );
}
