//! The shape of the code, kept (issue 26): no import circles between the modules of a
//! crate, no source file past 800 lines unless its opening comment says why, no
//! function past 120 lines, and (issue 37) no module importing from a layer above its own. Read from the source tree, so a change that breaks one of
//! these fails here, not in a reviewer's reading.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates' own source trees (tests' suites are not modules of a crate).
const TREES: &[&str] = &[
    "core/src",
    "results/src",
    "wrapper/src",
    "spank/src",
    "tests/fake-nvml/src",
    "tests/slurm/src",
];
/// Each crate's top-level modules in layers, lowest first: a module names modules of its
/// own layer or below, never above. Every top-level module must be placed, so a new one is
/// placed on purpose. (The test crates, fake-nvml and tests/slurm, have no layers.)
const LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "wrapper/src",
        &[
            // the command line's globals, process supervision, the site's config, Slurm's
            // facts (what a pack measured, and every output format, are colloc-results')
            &["cli", "engine", "logger", "nodecfg", "slurm", "slurmcheck"],
            // the commands
            &["run", "bench", "step", "report", "status", "admin", "plan"],
            // the command line and its dispatch (main.rs calls app::main)
            &["app"],
        ],
    ),
    (
        "results/src",
        &[
            // terminal-safe text, durations as users write them, the median, the user's files
            &["text", "duration", "num", "userfs"],
            // what was measured and the rules that make figures of it
            &["telemetry", "energy", "rules"],
            // the record of a pack: its schema, event log and fold into the report's model;
            // what a running pack says of its running runs
            &["record", "live"],
            // the typed bench report, the Exporter trait and the formats every command
            // prints and writes through (a bench report's forms and the formats' bench
            // files name each other)
            &["bench", "output", "export"],
        ],
    ),
    (
        "core/src",
        &[
            // system calls, safe files, text, the mode grammar, names shared with the job
            &["sys", "fs", "text", "mode", "jobenv", "buildid"],
            // the site's configuration and where root keeps state
            &[
                "config",
                "migconf",
                "statedir",
                "slurmconf",
                "container",
                "lastgood",
            ],
            // the node's GPUs, MPS daemons, processes, journals and files
            &[
                "mig",
                "mps",
                "holders",
                "dirholders",
                "gpu",
                "nvml",
                "retry",
                "journal",
                "rundir",
                "jobfs",
                "runroom",
                "devfiles",
                "hooks",
                "publish",
                "jobsummary",
                "sharedfs",
                "slurmdmark",
                "drain",
            ],
            // prolog/epilog reconfiguration and restore
            &["reconfig", "migmps"],
        ],
    ),
    (
        "spank/src",
        &[
            &["sys", "slurm_version", "logger", "build_note"],
            // the validated request and what each callback does with it
            &["plugin"],
            // the C entry points Slurm calls
            &["ffi"],
        ],
    ),
];
const FILE_LINES: usize = 800;
const FN_LINES: usize = 120;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's module path inside its crate (`reconfig/apply.rs` -> `["reconfig", "apply"]`);
/// `None` for test modules.
fn module_of(tree: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(tree).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    if parts.first().is_some_and(|p| p == "bin") || parts.iter().any(|p| p == "tests") {
        return None;
    }
    Some(parts)
}

/// The code of a file without comments and without its inline `#[cfg(test)] mod tests`.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a file names through `crate::` or `super::` (also inside `use crate::{…}`
/// groups), as module paths from the crate root.
fn references(module: &[String], code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut refs = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(['c', 's']) {
        let tail = &rest[i..];
        let boundary = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if boundary && (tail.starts_with("crate::") || tail.starts_with("super::")) {
            let end = tail.find(|c: char| !ident(c)).unwrap_or(tail.len());
            let mut path: Vec<&str> = tail[..end].split("::").filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = Vec::new();
            if path.first() == Some(&"crate") {
                path.remove(0);
            } else {
                let ups = path.iter().take_while(|s| **s == "super").count();
                base = module[..module.len().saturating_sub(ups)].to_vec();
                path.drain(..ups);
            }
            let prefix: Vec<String> = base
                .into_iter()
                .chain(path.iter().map(|s| s.to_string()))
                .collect();
            refs.push(prefix.clone());
            if tail[end..].starts_with('{') {
                let group = &tail[end + 1..tail[end..].find('}').map_or(end + 1, |j| end + j)];
                for item in group.split(',') {
                    let item: Vec<String> = item
                        .trim()
                        .split("::")
                        .filter(|s| !s.is_empty() && *s != "self" && !s.starts_with('{'))
                        .map(str::to_string)
                        .collect();
                    refs.push(prefix.iter().cloned().chain(item).collect());
                }
            }
            rest = &tail[end..];
        } else {
            rest = &tail[1..];
        }
    }
    refs
}

/// The module graph of one crate: an edge from a file to every other file it names,
/// leaving out a module's own ancestors and descendants.
fn graph(tree: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(tree, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter_map(|f| Some((module_of(tree, f)?, f.clone())))
        .collect();
    let mut g = BTreeMap::new();
    for (m, f) in &modules {
        let text = code(&std::fs::read_to_string(f).unwrap());
        let mut to = BTreeSet::new();
        for r in references(m, &text) {
            let Some(target) = (1..=r.len())
                .rev()
                .map(|n| r[..n].to_vec())
                .find(|p| modules.contains_key(p))
            else {
                continue;
            };
            if !target.starts_with(m) && !m.starts_with(&target) {
                to.insert(target);
            }
        }
        g.insert(m.clone(), to);
    }
    g
}

/// A module that can reach itself again through the graph, with the way round.
fn circle(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    for start in g.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((m, way)) = stack.pop() {
            for next in &g[&m] {
                if next == start {
                    return Some(way);
                }
                if seen.insert(next.clone()) {
                    let mut w = way.clone();
                    w.push(next.clone());
                    stack.push((next.clone(), w));
                }
            }
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_circle() {
    for tree in TREES {
        let g = graph(&root().join(tree));
        assert!(g.len() > 3, "{tree}: only {} modules found", g.len());
        if let Some(way) = circle(&g) {
            let way: Vec<String> = way.iter().map(|m| m.join("::")).collect();
            panic!("{tree}: import circle {} -> back", way.join(" -> "));
        }
    }
}

/// The circle finder finds one (a check that cannot fail is no check).
#[test]
fn the_circle_finder_sees_a_circle() {
    let m = |s: &str| vec![s.to_string()];
    let refs = references(&m("a"), "use crate::{b, c::d};\nfn f() { super::e::g(); }");
    assert!(
        refs.contains(&m("b")) && refs.contains(&vec!["c".into(), "d".into()]),
        "{refs:?}"
    );
    let mut g = BTreeMap::new();
    g.insert(m("a"), BTreeSet::from([m("b")]));
    g.insert(m("b"), BTreeSet::from([m("c")]));
    g.insert(m("c"), BTreeSet::from([m("a")]));
    assert!(circle(&g).is_some());
    g.insert(m("c"), BTreeSet::new());
    assert!(circle(&g).is_none());
}

/// Every edge of `g` that climbs: `from -> to` where `to`'s layer is above `from`'s, and
/// every top-level module that no layer names.
fn layer_breaks(
    g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    layers: &[&[&str]],
) -> Vec<String> {
    let layer = |m: &[String]| {
        let top = m.first()?;
        layers.iter().position(|l| l.contains(&top.as_str()))
    };
    let mut breaks = BTreeSet::new();
    for (from, to) in g {
        if from.is_empty() {
            continue; // the crate root declares every module
        }
        let Some(lf) = layer(from) else {
            breaks.insert(format!("{} is in no layer", from[0]));
            continue;
        };
        for t in to {
            match layer(t) {
                Some(lt) if lt > lf => {
                    breaks.insert(format!(
                        "{} (layer {lf}) imports {} (layer {lt})",
                        from.join("::"),
                        t.join("::")
                    ));
                }
                Some(_) => {}
                None => {
                    breaks.insert(format!("{} is in no layer", t[0]));
                }
            }
        }
    }
    breaks.into_iter().collect()
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    for (tree, layers) in LAYERS {
        let g = graph(&root().join(tree));
        let placed: usize = layers.iter().map(|l| l.len()).sum();
        let tops: BTreeSet<&String> = g.keys().filter_map(|m| m.first()).collect();
        assert_eq!(
            tops.len(),
            placed,
            "{tree}: top-level modules {tops:?} against the layers {layers:?}"
        );
        let breaks = layer_breaks(&g, layers);
        assert!(breaks.is_empty(), "{tree}: {}", breaks.join("; "));
    }
}

/// The layer check sees a climb and an unplaced module (a check that cannot fail is none).
#[test]
fn the_layer_check_sees_a_climb() {
    let m = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let layers: &[&[&str]] = &[&["low"], &["high"]];
    let mut g = BTreeMap::new();
    g.insert(m(&["high", "a"]), BTreeSet::from([m(&["low"])]));
    g.insert(m(&["low"]), BTreeSet::new());
    assert!(layer_breaks(&g, layers).is_empty());
    g.insert(m(&["low"]), BTreeSet::from([m(&["high", "a"])]));
    assert_eq!(
        layer_breaks(&g, layers),
        ["low (layer 0) imports high::a (layer 1)"]
    );
    g.insert(m(&["stray"]), BTreeSet::new());
    assert!(layer_breaks(&g, layers).contains(&"stray is in no layer".to_string()));
}

#[test]
fn long_files_say_why_and_no_function_is_long() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for tree in TREES {
        let mut files = Vec::new();
        rust_files(&root().join(tree), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            checked += 1;
            let opening: String = lines
                .iter()
                .take_while(|l| l.starts_with("//!") || l.is_empty())
                .copied()
                .collect();
            if lines.len() > FILE_LINES && !opening.contains("800 lines") {
                problems.push(format!(
                    "{}: {} lines, and its opening comment does not say why it passes 800 lines",
                    f.display(),
                    lines.len()
                ));
            }
            for (start, len, name) in functions(&lines) {
                if len > FN_LINES {
                    problems.push(format!("{}:{start}: fn {name} is {len} lines", f.display()));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} files found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each `fn` of a file as (line, length, name): from its line to the first line after it
/// that closes at the same indentation.
fn functions(lines: &[&str]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let Some(pos) = t.find("fn ") else { continue };
        let head = &t[..pos];
        let keywords = [
            "pub",
            "pub(crate)",
            "pub(super)",
            "const",
            "async",
            "unsafe",
            "extern",
            "\"C\"",
        ];
        if !head.split_whitespace().all(|w| keywords.contains(&w)) || t.ends_with(';') {
            continue;
        }
        let name: String = t[pos + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(j) = lines[i + 1..].iter().position(|x| *x == close) {
            out.push((i + 1, j + 2, name));
        }
    }
    out
}
