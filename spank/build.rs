//! Generate the SPANK bindings from the installed Slurm headers, so the plugin matches the
//! Slurm it is built against (`plugin_version` comes from `SLURM_VERSION_NUMBER`), and
//! check that header against what colloc relies on.
//!
//! The support matrix: [`SUPPORTED`] lists the Slurm releases (major.minor) whose
//! `<slurm/spank.h>` and `<slurm/slurm_errno.h>` were read, tag by tag, from SchedMD's
//! repository (first and last micro release of each), and [`FACTS`] the values colloc
//! relies on. They were the same in every one of them. A header of another release fails
//! the build with a message that says so; a header whose values differ from [`FACTS`]
//! fails it at compile time (assertions generated into `bindings.rs`). Only 22.05 is also
//! run here, on a real Slurm; the others are supported by these header facts.
//!
//! Environment: `SLURM_INCLUDE_DIR` (default `/usr/include`) is where `slurm/spank.h`
//! lies; only its `slurm/` folder is used (the C library's headers stay the host's).
//! Under cargo-zigbuild, whose clang uses zig's own C library headers, it is added after
//! them (`-idirafter`), so only Slurm's headers come from there.

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

const HEADER: &str =
    "#include <stdint.h>\n#include <slurm/spank.h>\n#include <slurm/slurm_version.h>\n";

/// Slurm releases (major, minor) whose headers were checked against [`FACTS`].
const SUPPORTED: &[(u32, u32)] = &[
    (22, 5),
    (23, 2),
    (23, 11),
    (24, 5),
    (24, 11),
    (25, 5),
    (25, 11),
];

/// The spank.h / slurm_errno.h values colloc relies on, identical in every release of
/// [`SUPPORTED`] (slurm-22-05-0-1 … slurm-25-11-7-1): the `spank_item_t` items it asks
/// for (ffi.rs), the ESPANK codes it compares with, the context enum.
const FACTS: &[(&str, i64)] = &[
    ("S_JOB_UID", 0),
    ("S_JOB_GID", 1),
    ("S_JOB_ID", 2),
    ("S_JOB_STEPID", 3),
    ("S_SLURM_VERSION", 20),
    ("ESPANK_SUCCESS", 0),
    ("ESPANK_ERROR", 3000),
    ("ESPANK_BAD_ARG", 3001),
    ("ESPANK_NOT_AVAIL", 3009),
    ("S_CTX_ERROR", 0),
    ("S_CTX_LOCAL", 1),
    ("S_CTX_REMOTE", 2),
    ("S_CTX_ALLOCATOR", 3),
    ("S_CTX_SLURMD", 4),
    ("S_CTX_JOB_SCRIPT", 5),
];

/// Values that only later releases' headers define: (name, value, first release). Where
/// the header is of that release or later, it must define the name with that value
/// (checked like [`FACTS`]); older headers lack it and the plugin uses the value as is.
/// `ESPANK_JOB_FAILURE` (slurm_errno.h, slurm-25-05-0-1 … slurm-25-11-7-1: the
/// `spank_err_t` after `ESPANK_NODE_FAILURE` 3011) is what the plugin's
/// `slurm_spank_init_failure_mode` holds.
const LATER_FACTS: &[(&str, i64, (u32, u32))] = &[
    ("ESPANK_NODE_FAILURE", 3011, (25, 5)),
    ("ESPANK_JOB_FAILURE", 3012, (25, 5)),
];

/// `struct spank_option` as every supported release declares it: `char *name, *arginfo,
/// *usage; int has_arg, val; spank_opt_cb_f cb;` (x86_64/aarch64 LP64 offsets).
const OPTION_LAYOUT: &[(&str, usize)] = &[
    ("name", 0),
    ("arginfo", 8),
    ("usage", 16),
    ("has_arg", 24),
    ("val", 28),
    ("cb", 32),
];
const OPTION_SIZE: usize = 40;

fn fail(msg: &str) -> ! {
    eprintln!("colloc-spank: {msg}");
    std::process::exit(1);
}

fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|(a, b)| format!("{a}.{b:02}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `SLURM_VERSION_NUMBER` from slurm_version.h: (major, minor, micro).
fn header_version(include: &std::path::Path) -> (u32, u32, u32) {
    let path = include.join("slurm/slurm_version.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        fail(&format!(
            "cannot read {} ({e}); install the Debian package libslurm-dev (or slurm-devel), \
             or set SLURM_INCLUDE_DIR",
            path.display()
        ))
    });
    let number = text
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some("SLURM_VERSION_NUMBER"))
                .then(|| w.next())
                .flatten()
        })
        .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| fail(&format!("no SLURM_VERSION_NUMBER in {}", path.display())));
    (number >> 16, (number >> 8) & 0xff, number & 0xff)
}

/// 20 bytes that change with anything that goes into the plugin: the sources of the
/// plugin and of colloc-core, Cargo.lock, the Slurm headers' version, the target and
/// profile. (FNV-1a, five lanes: an identifier of a build, not a security measure.)
fn build_note_id() -> [u8; 20] {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut files = Vec::new();
    for d in ["src", "../core/src"] {
        walk(&manifest.join(d), &mut files);
    }
    for f in [
        "build.rs",
        "Cargo.toml",
        "../Cargo.lock",
        "../Cargo.toml",
        "../core/Cargo.toml",
    ] {
        files.push(manifest.join(f));
    }
    files.sort();
    let mut lanes = [0xcbf2_9ce4_8422_2325_u64; 5];
    for (i, lane) in lanes.iter_mut().enumerate() {
        *lane ^= i as u64;
    }
    let mut feed = |bytes: &[u8]| {
        for (i, lane) in lanes.iter_mut().enumerate() {
            for &b in bytes {
                *lane = (*lane ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3 + 2 * i as u64);
            }
        }
    };
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        feed(f.to_string_lossy().as_bytes());
        feed(&std::fs::read(f).unwrap_or_default());
    }
    for var in ["TARGET", "PROFILE", "CARGO_CFG_TARGET_FEATURE"] {
        feed(env::var(var).unwrap_or_default().as_bytes());
    }
    let mut id = [0u8; 20];
    for (i, lane) in lanes.iter().enumerate() {
        id[i * 4..i * 4 + 4].copy_from_slice(&lane.to_be_bytes()[..4]);
    }
    id
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let include =
        PathBuf::from(env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into()));
    println!(
        "cargo:rerun-if-changed={}",
        include.join("slurm/spank.h").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        include.join("slurm/slurm_version.h").display()
    );
    let (major, minor, micro) = header_version(&include);
    if !SUPPORTED.contains(&(major, minor)) {
        fail(&format!(
            "the Slurm headers in {} are Slurm {major}.{minor:02}.{micro}, which colloc does \
             not know; supported: {}. For a newer Slurm, compare its slurm/spank.h and \
             slurm/slurm_errno.h with FACTS and OPTION_LAYOUT in spank/build.rs and add the \
             release to SUPPORTED",
            include.display(),
            supported_list()
        ));
    }
    let zig = env::var("RUSTC_LINKER").is_ok_and(|l| l.contains("zig"));
    if !zig {
        // sbatch/srun/salloc dlopen the plugin on every call. Depending on libgcc_s.so.1
        // (Rust's unwinder on linux-gnu) made each of them load one more shared library:
        // ~0.5 ms, 5-10 % of an sbatch, measured with a minimal C plugin with and without
        // it. So the unwinder is linked in from libgcc_eh.a, its symbols kept local to the
        // plugin (--exclude-libs), and --as-needed then drops libgcc_s from the plugin's
        // NEEDED. (zig links its own libunwind statically: nothing to do there.)
        for arg in [
            "-Wl,--as-needed",
            "-Wl,--whole-archive",
            "-l:libgcc_eh.a",
            "-Wl,--no-whole-archive",
            "-Wl,--exclude-libs,libgcc_eh.a",
        ] {
            println!("cargo:rustc-link-arg-cdylib={arg}");
        }
    } else {
        // zig's linker (0.13) writes no GNU build id, which `colloc status --cluster` tells
        // plugin builds apart by: the plugin carries its own note (src/build_note.rs),
        // a hash of what went into it, computed here.
        println!("cargo:rustc-cfg=colloc_build_note");
        let id = build_note_id();
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        println!("cargo:rustc-env=COLLOC_BUILD_NOTE_ID={hex}");
    }
    println!("cargo:rustc-check-cfg=cfg(colloc_build_note)");
    let mut builder = bindgen::Builder::default()
        .header_contents("colloc_spank.h", HEADER)
        .allowlist_function("spank_.*")
        .allowlist_type("spank_.*")
        .allowlist_function("slurm_(info|error|verbose|debug|spank_log)")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("S_CTX_.*")
        .prepend_enum_name(false)
        .layout_tests(false);
    if zig {
        builder = builder.clang_arg(format!("-idirafter{}", include.display()));
    } else if include != std::path::Path::new("/usr/include") {
        // Only Slurm's headers from there: a folder with just a `slurm` link to them, so
        // that another system's root (a Debian 13 root with its own libc headers, for the
        // Slurm 24.11 tests) does not give this build its C library headers.
        let only =
            PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("slurm-only");
        let link = only.join("slurm");
        let _ = std::fs::remove_file(&link);
        std::fs::create_dir_all(&only)
            .and_then(|()| std::os::unix::fs::symlink(include.join("slurm"), &link))
            .unwrap_or_else(|e| fail(&format!("cannot link {}: {e}", link.display())));
        builder = builder.clang_arg(format!("-I{}", only.display()));
    }
    let bindings = match builder.generate() {
        Ok(b) => b,
        Err(e) => {
            // One actionable line instead of clang's wall of text.
            fail(&format!(
                "cannot generate bindings from <slurm/spank.h> ({e}); install the Debian \
                 packages libslurm-dev libclang1-14 libclang-common-14-dev (or run \
                 tests/slurm/cluster.sh deps)"
            ));
        }
    };
    let mut code = bindings.to_string();
    // The facts, checked by the compiler against the values bindgen read from the header.
    let release = format!("{major}.{minor:02}");
    code.push_str("\n// Generated by build.rs: the header facts colloc relies on.\n");
    for (name, value) in FACTS {
        let _ = writeln!(
            code,
            "const _: () = assert!({name} as i64 == {value}, \"spank.h of Slurm {release}: \
             {name} is not {value}, the value colloc was written for (spank/build.rs FACTS)\");"
        );
    }
    for (name, value, since) in LATER_FACTS {
        if (major, minor) >= *since {
            let _ = writeln!(
                code,
                "const _: () = assert!({name} as i64 == {value}, \"spank.h of Slurm {release}: \
                 {name} is not {value}, the value colloc was written for (spank/build.rs \
                 LATER_FACTS)\");"
            );
        }
        let _ = writeln!(
            code,
            "/// `{name}` ({value}), defined by Slurm {}.{:02} and later.\npub const \
             COLLOC_{name}: i32 = {value};",
            since.0, since.1
        );
    }
    for (field, offset) in OPTION_LAYOUT {
        let _ = writeln!(
            code,
            "const _: () = assert!(::core::mem::offset_of!(spank_option, {field}) == {offset}, \
             \"spank.h of Slurm {release}: struct spank_option.{field} is not at offset \
             {offset} (spank/build.rs OPTION_LAYOUT)\");"
        );
    }
    let _ = writeln!(
        code,
        "const _: () = assert!(::core::mem::size_of::<spank_option>() == {OPTION_SIZE}, \
         \"spank.h of Slurm {release}: struct spank_option is not {OPTION_SIZE} bytes \
         (spank/build.rs OPTION_LAYOUT)\");"
    );
    let _ = writeln!(
        code,
        "const _: () = assert!(SLURM_VERSION_NUMBER == {:#x}, \"slurm_version.h changed \
         between build.rs and bindgen\");",
        (major << 16) | (minor << 8) | micro
    );
    // The releases, for the plugin's own check of the Slurm that loads it.
    let _ = writeln!(
        code,
        "/// Slurm releases (major, minor) colloc's header facts cover.\npub const \
         COLLOC_SUPPORTED_SLURM: &[(u32, u32)] = &{SUPPORTED:?};"
    );
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(e) = std::fs::write(out.join("bindings.rs"), code) {
        fail(&format!("cannot write bindings: {e}"));
    }
}
