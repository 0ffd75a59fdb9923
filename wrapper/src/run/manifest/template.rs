//! Sweep templates: `{key}` placeholders of a sweep's name, command, env values and
//! workdir, checked against its grid keys and filled for each combination of its grid.
//! `{{` and `}}` are literal braces.

use std::collections::BTreeMap;

/// A piece of a sweep template.
enum Piece<'a> {
    Lit(&'a str),
    Key(&'a str),
}

/// Split a template into literal text and `{key}` placeholders.
fn pieces(t: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("{{") {
            out.push(Piece::Lit("{"));
            rest = r;
        } else if let Some(r) = rest.strip_prefix("}}") {
            out.push(Piece::Lit("}"));
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let end = r
                .find('}')
                .ok_or_else(|| format!("unclosed {{ in {t:?} (write {{{{ for a literal brace)"))?;
            let key = &r[..end];
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "bad placeholder {{{key}}} in {t:?}: a placeholder is {{grid_key}} (write {{{{ for a literal brace)"
                ));
            }
            out.push(Piece::Key(key));
            rest = &r[end + 1..];
        } else if rest.starts_with('}') {
            return Err(format!(
                "unmatched }} in {t:?} (write }}}} for a literal brace)"
            ));
        } else {
            let end = rest.find(['{', '}']).unwrap_or(rest.len());
            out.push(Piece::Lit(&rest[..end]));
            rest = &rest[end..];
        }
    }
    Ok(out)
}

/// Check a template's placeholders against the grid keys.
pub(super) fn check_template(t: &str, keys: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for p in pieces(t)? {
        if let Piece::Key(k) = p {
            if !keys.contains_key(k) {
                let known: Vec<&str> = keys.keys().map(String::as_str).collect();
                return Err(format!(
                    "unknown placeholder {{{k}}} in {t:?}; this sweep's grid keys: {}",
                    known.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Fill a checked template.
pub(super) fn fill(t: &str, vals: &BTreeMap<&str, &str>) -> String {
    let mut s = String::new();
    // Templates are checked before filling, so this cannot fail.
    for p in pieces(t).unwrap_or_default() {
        match p {
            Piece::Lit(l) => s.push_str(l),
            Piece::Key(k) => s.push_str(vals.get(k).copied().unwrap_or("")),
        }
    }
    s
}

/// Every combination of grid values, the last key varying fastest.
pub(super) fn combinations(grid: &BTreeMap<String, Vec<String>>) -> Vec<BTreeMap<&str, &str>> {
    let mut out: Vec<BTreeMap<&str, &str>> = vec![BTreeMap::new()];
    for (k, vals) in grid {
        out = out
            .into_iter()
            .flat_map(|c| {
                vals.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(k.as_str(), v.as_str());
                    c
                })
            })
            .collect();
    }
    out
}
