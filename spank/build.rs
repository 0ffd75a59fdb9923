//! Generate the SPANK bindings from the installed Slurm headers, so the plugin matches the
//! Slurm it is built against (`plugin_version` comes from `SLURM_VERSION_NUMBER`).

use std::env;
use std::path::PathBuf;

const HEADER: &str =
    "#include <stdint.h>\n#include <slurm/spank.h>\n#include <slurm/slurm_version.h>\n";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/include/slurm/spank.h");
    println!("cargo:rerun-if-changed=/usr/include/slurm/slurm_version.h");
    // sbatch/srun/salloc dlopen the plugin on every call. Depending on libgcc_s.so.1
    // (Rust's unwinder on linux-gnu) made each of them load one more shared library: ~0.5
    // ms, 5-10 % of an sbatch, measured with a minimal C plugin with and without it. So the
    // unwinder is linked in from libgcc_eh.a, its symbols kept local to the plugin
    // (--exclude-libs), and --as-needed then drops libgcc_s from the plugin's NEEDED.
    for arg in [
        "-Wl,--as-needed",
        "-Wl,--whole-archive",
        "-l:libgcc_eh.a",
        "-Wl,--no-whole-archive",
        "-Wl,--exclude-libs,libgcc_eh.a",
    ] {
        println!("cargo:rustc-link-arg-cdylib={arg}");
    }
    let bindings = bindgen::Builder::default()
        .header_contents("colloc_spank.h", HEADER)
        .allowlist_function("spank_.*")
        .allowlist_type("spank_.*")
        .allowlist_function("slurm_(info|error|verbose|debug|spank_log)")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("S_CTX_.*")
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => {
            // One actionable line instead of clang's wall of text.
            eprintln!(
                "colloc-spank: cannot generate bindings from <slurm/spank.h> ({e}); install the \
                 Debian packages libslurm-dev libclang1-14 libclang-common-14-dev \
                 (or run tests/slurm/cluster.sh deps)"
            );
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        eprintln!("colloc-spank: cannot write bindings: {e}");
        std::process::exit(1);
    }
}
