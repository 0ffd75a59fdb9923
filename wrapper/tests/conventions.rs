//! What users expect of a command-line tool: colloc(1) says what `--help` says (every
//! command and option, both ways), no escape codes where there is no terminal or
//! NO_COLOR is set, and completion scripts for the usual shells.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;

use assert_cmd::Command;

fn colloc(args: &[&str]) -> Output {
    Command::cargo_bin("colloc")
        .unwrap()
        .env_remove("COLLOC_CONFIG")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(args: &[&str]) -> String {
    let out = colloc(args);
    assert!(out.status.success(), "colloc {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// colloc(1) with roff's `\-` as plain `-`.
fn man_page() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/man/colloc.1");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("\\-", "-")
}

/// The lines of a `--help` section ("Commands:", "Options:") up to the next blank line.
fn help_section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| l.trim() != title)
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

/// The subcommands `colloc --help` lists (without clap's `help`).
fn subcommands() -> Vec<String> {
    let help = stdout(&["--help"]);
    help_section(&help, "Commands:")
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The options an option list of `--help` shows: each as "--long" with its short form.
fn options(help: &str) -> BTreeSet<(Option<String>, String)> {
    help_section(help, "Options:")
        .iter()
        .filter_map(|l| {
            let l = l.trim_start();
            if !l.starts_with('-') {
                return None; // a wrapped description line
            }
            let (short, rest) = match l.strip_prefix('-') {
                Some(r) if !r.starts_with('-') => (
                    Some(format!("-{}", &r[..1])),
                    r[1..].trim_start_matches(", "),
                ),
                _ => (None, l),
            };
            let long: String = rest
                .chars()
                .take_while(|c| *c == '-' || c.is_ascii_alphanumeric())
                .collect();
            Some((short, long))
        })
        .collect()
}

/// The man page split at `.SH`/`.SS` headings: (heading, body).
fn sections(man: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in man.lines() {
        if let Some(h) = line
            .strip_prefix(".SH ")
            .or_else(|| line.strip_prefix(".SS "))
        {
            out.push((h.trim_matches('"').to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The options a man page section defines: the words starting with `--` on the line
/// after each `.TP` (roff's tagged paragraphs), and the short ones there.
fn defined(body: &str) -> (BTreeSet<String>, String) {
    let lines: Vec<&str> = body.lines().collect();
    let mut longs = BTreeSet::new();
    let mut tags = String::new();
    for w in lines.windows(2) {
        if w[0].trim() != ".TP" {
            continue;
        }
        tags.push_str(w[1]);
        tags.push('\n');
        for word in w[1].split(|c: char| c.is_whitespace() || c == '"' || c == ',') {
            if word.starts_with("--") {
                longs.insert(word.to_string());
            }
        }
    }
    (longs, tags)
}

#[test]
fn man_page_and_help_agree_on_every_command_and_option() {
    let man = man_page();
    let secs = sections(&man);
    // No heading twice (colloc(1) once had ENVIRONMENT, plan and restore twice).
    let mut seen = BTreeSet::new();
    for (h, _) in &secs {
        assert!(
            seen.insert(h.clone()),
            "colloc(1) has the heading {h:?} twice"
        );
    }
    let body_of = |h: &str| {
        secs.iter()
            .find(|(x, _)| x == h)
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| panic!("colloc(1) has no section {h:?}"))
    };
    let synopsis = body_of("SYNOPSIS");
    let globals_help = options(&stdout(&["--help"]));
    let (global_defs, global_tags) = defined(&body_of("GLOBAL OPTIONS"));
    for (short, long) in &globals_help {
        assert!(
            global_defs.contains(long),
            "colloc --help has {long}; colloc(1) GLOBAL OPTIONS does not define it"
        );
        if let Some(s) = short {
            assert!(global_tags.contains(s.as_str()), "{s} ({long}) missing");
        }
    }
    let global_longs: BTreeSet<String> = globals_help.iter().map(|(_, l)| l.clone()).collect();
    for d in &global_defs {
        assert!(
            global_longs.contains(d),
            "colloc(1) GLOBAL OPTIONS defines {d}; colloc --help has no such option"
        );
    }
    let subs = subcommands();
    assert!(subs.len() >= 8, "{subs:?}");
    for sub in &subs {
        assert!(
            synopsis.contains(&format!("\n.B {sub}\n")),
            "colloc(1) SYNOPSIS lacks {sub}"
        );
        let (defs, tags) = defined(&body_of(&format!("colloc {sub}")));
        let help = options(&stdout(&[sub, "--help"]));
        let longs: BTreeSet<String> = help.iter().map(|(_, l)| l.clone()).collect();
        for (short, long) in &help {
            if global_longs.contains(long) {
                continue; // the global options, defined once
            }
            assert!(
                defs.contains(long),
                "colloc {sub} --help has {long}; colloc(1) \"colloc {sub}\" does not define it"
            );
            if let Some(s) = short {
                assert!(
                    tags.contains(&format!("{s} ")) || tags.contains(&format!("{s}\"")),
                    "colloc(1) \"colloc {sub}\" defines {long} without its short form {s}"
                );
            }
        }
        for d in &defs {
            assert!(
                longs.contains(d),
                "colloc(1) \"colloc {sub}\" defines {d}; colloc {sub} --help has no such option"
            );
        }
    }
    // Every command section of the page is a command colloc has.
    for (h, _) in &secs {
        if let Some(sub) = h.strip_prefix("colloc ") {
            assert!(
                subs.iter().any(|s| s == sub),
                "colloc(1) documents {h:?}: no such command"
            );
        }
    }
}

/// Does this output contain an escape sequence (colour, bold, underline)?
fn has_escape(b: &[u8]) -> bool {
    b.contains(&0x1b)
}

#[test]
fn no_escape_codes_without_a_terminal() {
    // Output to a pipe (a file, a log, `| less`): plain text, whatever the command.
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["frobnicate"],
        &["plan", "mig:9g", "--gpu-model", "A100-40GB"],
        &["plan", "mig:3g", "--gpu-model", "A100-40GB"],
        &["check-config", "/nonexistent/colloc.toml"],
    ] {
        let out = colloc(args);
        assert!(!has_escape(&out.stdout), "colloc {args:?} stdout: {out:?}");
        assert!(!has_escape(&out.stderr), "colloc {args:?} stderr: {out:?}");
    }
}

/// Run colloc on a pseudo-terminal with util-linux `script`; its output, or `None` where
/// `script` is missing.
fn on_a_terminal(args: &str, no_color: bool) -> Option<Vec<u8>> {
    let bin = assert_cmd::cargo::cargo_bin("colloc");
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"])
        .env_remove("CLICOLOR_FORCE")
        .env("TERM", "xterm");
    if no_color {
        cmd.env("NO_COLOR", "1");
    } else {
        cmd.env_remove("NO_COLOR");
    }
    cmd.output().ok().map(|o| o.stdout)
}

#[test]
fn no_color_is_honoured_on_a_terminal() {
    let Some(styled) = on_a_terminal("--help", false) else {
        eprintln!("util-linux script is not installed: no terminal to test on");
        return;
    };
    // On a terminal clap styles its help (so this test can see a difference) ...
    assert!(has_escape(&styled), "{}", String::from_utf8_lossy(&styled));
    // ... and NO_COLOR (https://no-color.org) turns that off, for help and errors alike.
    for args in [
        "--help",
        "status --help",
        "frobnicate",
        "plan mig:9g --gpu-model A100-40GB",
    ] {
        let plain = on_a_terminal(args, true).unwrap();
        assert!(
            !has_escape(&plain),
            "colloc {args}: {}",
            String::from_utf8_lossy(&plain)
        );
        assert!(!plain.is_empty(), "colloc {args} printed nothing");
    }
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    let subs = subcommands();
    for (shell, marker) in [
        ("bash", "complete -F _colloc"),
        ("zsh", "#compdef colloc"),
        ("fish", "complete -c colloc"),
    ] {
        let script = stdout(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in &subs {
            assert!(
                script.contains(sub.as_str()),
                "{shell} completion lacks {sub}"
            );
        }
        assert!(script.contains("check-config"), "{shell}");
    }
    let out = colloc(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Every real-Slurm suite that brings its own `main` (run_suite) is declared
/// `harness = false`: under libtest's harness its `main` is never called and the suite
/// reports "0 passed" while testing nothing (mig_models did, unseen, for a session).
#[test]
fn every_real_slurm_suite_with_its_own_main_runs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/slurm");
    let manifest: toml::Value = std::fs::read_to_string(dir.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let suites = manifest["test"].as_array().expect("[[test]] tables");
    let mut checked = 0;
    for t in suites {
        let path = t["path"].as_str().unwrap();
        let body = std::fs::read_to_string(dir.join(path)).unwrap();
        if body.contains("\nfn main()") {
            assert_eq!(
                t.get("harness").and_then(toml::Value::as_bool),
                Some(false),
                "{path} has its own main but runs under libtest's harness"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} suites found");
}
