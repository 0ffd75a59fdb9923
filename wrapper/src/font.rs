//! The TrueType font the PNG charts of `colloc run` and `colloc bench` draw their text
//! with, registered with plotters once per process. Looked for in `COLLOC_FONT`, then in
//! the usual places of DejaVu Sans and Liberation Sans, then any `.ttf` under the system
//! font directories (compute nodes often have few fonts). Without one, charts are drawn
//! without text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

const PREFERRED: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

const FONT_DIRS: &[&str] = &["/usr/share/fonts", "/usr/local/share/fonts"];

/// Any `.ttf` file at most three levels below `dir`, in a stable order.
fn any_ttf(dir: &Path, depth: u32) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    if let Some(f) = entries
        .iter()
        .find(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")))
    {
        return Some(f.clone());
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|d| any_ttf(d, depth - 1))
}

/// Register a font once; false when none could be found or read.
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let candidates = std::env::var_os("COLLOC_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(PREFERRED.iter().map(PathBuf::from))
            .chain(FONT_DIRS.iter().filter_map(|d| any_ttf(Path::new(d), 3)));
        for p in candidates {
            if let Ok(bytes) = std::fs::read(&p) {
                // plotters keeps fonts for the life of the program.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    log::debug!("chart font: {}", p.display());
                    return true;
                }
            }
        }
        log::info!("no TrueType font found (set COLLOC_FONT): charts are drawn without text");
        false
    })
}
