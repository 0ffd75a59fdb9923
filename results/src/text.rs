//! What of a run's output line is text: terminal control sequences (tqdm's cursor moves,
//! colours, window titles) are not, and must reach neither the scanner nor a log reader's
//! screen, where interleaved runs' cursor moves would garble each other.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::OnceLock;

const ESC: char = '\u{1b}';
const BEL: char = '\u{7}';

pub use colloc_core::text::{escape, escape_lines};

/// `line` without control characters and escape sequences; with `keep_colour`, SGR
/// sequences (`ESC [ … m`, colours and bold) stay. Tabs stay.
pub fn plain(line: &str, keep_colour: bool) -> Cow<'_, str> {
    if !line.chars().any(|c| c.is_control() && c != '\t') {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut it = line.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if c != ESC {
            if !c.is_control() || c == '\t' {
                out.push(c);
            }
            continue;
        }
        match it.peek().map(|&(_, n)| n) {
            // CSI: parameters and intermediates, then one final byte in '@'..='~'.
            Some('[') => {
                it.next();
                let mut end = None;
                for (j, n) in it.by_ref() {
                    if ('@'..='~').contains(&n) {
                        end = Some((j, n));
                        break;
                    }
                }
                if let (true, Some((j, 'm'))) = (keep_colour, end) {
                    out.push_str(&line[i..=j]);
                }
            }
            // OSC (titles, links): up to BEL or ESC \.
            Some(']') => {
                it.next();
                while let Some((_, n)) = it.next() {
                    if n == BEL {
                        break;
                    }
                    if n == ESC && it.peek().is_some_and(|&(_, m)| m == '\\') {
                        it.next();
                        break;
                    }
                }
            }
            // Any other escape: intermediates (' '..='/', as in `ESC ( B`), then one
            // final character.
            Some(_) => {
                while it.next_if(|&(_, n)| (' '..='/').contains(&n)).is_some() {}
                it.next();
            }
            None => {}
        }
    }
    Cow::Owned(out)
}

/// JSON text fit for a terminal, with the same meaning: the control characters a JSON
/// encoder may leave raw inside strings (DEL and the C1 range, U+0080–U+009F, where
/// U+009B starts a sequence on some terminals) written as `\u00XX` escapes. Everything
/// else in JSON is printable already (the encoder escapes U+0000–U+001F).
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && !matches!(c, '\n' | '\t' | '\r');
    if !json.chars().any(bad) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if bad(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether the live view may keep colours: stdout is a terminal and `NO_COLOR` is unset
/// or empty (<https://no-color.org>).
pub fn colour_ok() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::{json_for_terminal, plain};

    #[test]
    fn json_keeps_its_meaning_without_raw_control_characters() {
        let v = serde_json::json!({"name": "a\u{9b}2J\u{7f}\u{1b}b"});
        let raw = serde_json::to_string(&v).unwrap();
        let safe = json_for_terminal(&raw);
        assert!(!safe.chars().any(char::is_control), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn tqdm_cursor_moves_and_colours_go() {
        let line = "\u{1b}[A\u{1b}[2K 45%|\u{1b}[32m####\u{1b}[0m | 12.3it/s\u{7}";
        assert_eq!(plain(line, false), " 45%|#### | 12.3it/s");
        assert_eq!(plain(line, true), " 45%|\u{1b}[32m####\u{1b}[0m | 12.3it/s");
    }

    #[test]
    fn titles_and_odd_escapes_go_text_stays() {
        assert_eq!(plain("\u{1b}]0;title\u{7}img/s=5", false), "img/s=5");
        assert_eq!(plain("\u{1b}]8;;http://x\u{1b}\\link", false), "link");
        assert_eq!(plain("a\u{1b}(Bb\tc\u{0}", false), "ab\tc");
        assert_eq!(plain("cut \u{1b}[12", false), "cut ");
        assert_eq!(plain("ESC at end \u{1b}", false), "ESC at end ");
        assert!(matches!(
            plain("plain img/s=3 ü", false),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
