//! The font of colloc's PNG charts: DejaVu Sans, embedded in the binary (its licence is
//! `results/assets/DejaVuSans-LICENSE.txt`, and in the packages' copyright), so text is
//! drawn on compute nodes that have no fonts at all. Registered with plotters once.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

/// DejaVu Sans 2.37.
static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The family name charts ask for.
pub const FAMILY: &str = "sans-serif";

/// Register the embedded font (once); false if plotters refused it.
pub fn ready() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(
        || match register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS) {
            Ok(()) => true,
            Err(_) => {
                log::warn!("cannot load the embedded chart font; charts are drawn without text");
                false
            }
        },
    )
}
