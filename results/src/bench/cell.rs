//! How a configuration of `colloc bench` is named in its tables and comparisons (below
//! both [`super::report`] and [`super::compare`], so neither imports the other for it).

/// `mps 7`, `naive 2`, `solo`.
pub fn cell_name(mode: &str, n: usize) -> String {
    if mode == "solo" || mode == "reference" || mode.starts_with("mps:") {
        mode.to_string()
    } else {
        format!("{mode} {n}")
    }
}
