//! Views of the records of `colloc run` and `colloc bench`: the files a run report
//! directory holds ([`files`], one line each), text tables ([`table`]), the
//! run report's CSV, table and one-line summary ([`runs`]) and the formats `colloc report`
//! prints them in ([`printed`]), the report as one HTML page ([`html`]), and PNG charts
//! with an embedded font ([`chart`], [`font`]); what `colloc bench` prints and writes
//! ([`bench`](mod@bench)).

pub mod bench;
pub mod chart;
pub mod files;
pub mod font;
pub mod html;
pub mod printed;
pub mod runs;
pub mod table;
