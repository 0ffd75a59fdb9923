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
                .map(|c| crate::engine::text::escape(&c).into_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut t = Table::new(vec!["run".into(), "img/s".into()], vec![false, true]);
        t.row(vec!["a".into(), "1.0".into()]);
        t.row(vec!["longer".into(), "100.5".into()]);
        assert_eq!(t.render(), "run     img/s\na         1.0\nlonger  100.5\n");
    }
}
