//! Views of the records of `colloc run` and `colloc bench`: text tables ([`table`]), the
//! run report's CSV, table and one-line summary ([`runs`]), and PNG charts with an
//! embedded font ([`chart`], [`font`]).

pub mod chart;
pub mod font;
pub mod runs;
pub mod table;
