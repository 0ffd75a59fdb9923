//! Names fit for a terminal, a table cell or a Slurm reason: one escape rule for every
//! command and for root's drain reasons.

use std::borrow::Cow;

/// `name` (of a run, a host, a node, a path, a process) fit for a terminal or a table
/// cell: every control character, newlines and escape sequences included, written as an
/// escape (`\n`, `\u{1b}`), so a name never moves the cursor, clears the screen or breaks
/// a table's lines.
pub fn escape(name: &str) -> Cow<'_, str> {
    escape_but(name, None)
}

/// Text of several lines fit for a terminal: as [`escape`], but newlines stay.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_but(text, Some('\n'))
}

fn escape_but(s: &str, keep: Option<char>) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && Some(c) != keep;
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if bad(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_written_as_escapes() {
        assert_eq!(escape("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(escape_lines("a\nb\t"), "a\nb\\t");
        assert!(matches!(escape("plain ü"), Cow::Borrowed(_)));
    }
}
