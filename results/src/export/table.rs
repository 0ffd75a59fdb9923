//! Plain-text tables: left-aligned text columns, right-aligned numbers, two spaces
//! between columns.

/// A table being built.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; `right[i]`: column i is right-aligned.
    pub fn new(headers: Vec<String>, right: Vec<bool>) -> Table {
        Table {
            headers,
            right,
            rows: Vec::new(),
        }
    }

    /// Add a row (missing cells are empty). Control characters in a cell (a run or host
    /// name) are escaped.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| crate::text::escape(&c).into_owned())
                .collect(),
        );
    }

    /// The table as text, one line per row, header first.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, w) in widths.iter_mut().enumerate() {
                *w = (*w).max(cell(r, i).chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            let line: Vec<String> = (0..n)
                .map(|i| {
                    let c = cell(r, i);
                    let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
                    if self.right.get(i).copied().unwrap_or(false) {
                        format!("{pad}{c}")
                    } else {
                        format!("{c}{pad}")
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// A number in a CSV cell with `decimals` places; empty when unknown. One formatter for
/// both commands' CSVs.
pub fn csv_num(v: Option<f64>, decimals: usize) -> String {
    v.map(|v| format!("{v:.decimals$}")).unwrap_or_default()
}

/// Text of a user's (a run's name, a grid value, an error, a host) fit for a CSV cell that
/// a spreadsheet opens: control characters escaped as for a terminal (newlines stay; the
/// CSV writer quotes them, with commas and quotes), and a cell a spreadsheet would take
/// for a formula (`=`, `+`, `-`, `@`, a tab or a carriage return first, and not a
/// plain number such as `-3`) prefixed with `'`, so opening the CSV never runs it.
pub fn csv_text(s: &str) -> String {
    let s = crate::text::escape_lines(s);
    let formula =
        s.starts_with(['=', '+', '-', '@', '\t', '\r']) && s.trim().parse::<f64>().is_err();
    if formula {
        format!("'{s}")
    } else {
        s.into_owned()
    }
}

/// Any value in a CSV cell; empty when unknown.
pub fn csv_opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// A text table cell: the value, or `-` when unknown.
pub fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// A number in a text table cell through `f`, or `-` when unknown.
pub fn dash_or(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_text_defuses_formulas_and_control_characters() {
        assert_eq!(csv_text("=1+2"), "'=1+2");
        assert_eq!(csv_text("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_text("+x"), "'+x");
        assert_eq!(csv_text("-x"), "'-x");
        assert_eq!(csv_text("-3"), "-3");
        assert_eq!(csv_text("1e-3"), "1e-3");
        assert_eq!(csv_text("a\u{1b}[2J\nb"), "a\\u{1b}[2J\nb");
        assert_eq!(csv_text("run-1"), "run-1");
    }

    #[test]
    fn columns_line_up() {
        let mut t = Table::new(vec!["run".into(), "img/s".into()], vec![false, true]);
        t.row(vec!["a".into(), "1.0".into()]);
        t.row(vec!["longer".into(), "100.5".into()]);
        assert_eq!(t.render(), "run     img/s\na         1.0\nlonger  100.5\n");
    }
}
