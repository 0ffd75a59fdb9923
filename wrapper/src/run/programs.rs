//! Preflight of programs: before anything starts, each distinct command's program is
//! found the way the run's start will find it, so a misspelled `pyhton3` is one line and
//! exit 2 instead of a failed run at every point of a sweep.
//!
//! A run starts through `execvp` after its `chdir`: a program with a `/` is taken
//! relative to the run's working directory (or is absolute); any other is searched in
//! the PATH the run gets (its own `env` PATH where its manifest entry sets one, else
//! colloc's; unset, glibc's `/bin:/usr/bin`), an empty or relative PATH entry again
//! relative to the working directory. Like `execvp`, the search takes the first entry
//! that is a regular file (after symlinks) the user may execute.
//!
//! A command run through a shell (`command = "…"`, or `["sh", "-c", SCRIPT]`) gets its
//! shell checked, and the script's first program where that is sure: see
//! [`shell_program`].

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::manifest::RunSpec;

/// glibc's search path for `execvp` when PATH is unset.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Whose PATH a program was searched in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathFrom {
    /// The run's own `env` (its manifest entry or `[defaults]`).
    Run,
    /// colloc's own environment, which the runs inherit.
    Colloc,
    /// Neither sets PATH: the default of `execvp`.
    Default,
}

impl fmt::Display for PathFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathFrom::Run => "the run's env PATH",
            PathFrom::Colloc => "colloc's PATH",
            PathFrom::Default => "the default PATH (PATH is unset)",
        })
    }
}

/// The PATH a run gets, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SearchPath {
    /// Its value.
    pub value: OsString,
    /// Where it comes from.
    pub from: PathFrom,
}

impl SearchPath {
    /// The PATH of a run with `env` (later entries win, as when the run starts), in a
    /// colloc whose own PATH is `colloc`.
    pub fn of(env: &[(String, String)], colloc: Option<OsString>) -> SearchPath {
        if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == "PATH") {
            return SearchPath {
                value: v.into(),
                from: PathFrom::Run,
            };
        }
        match colloc {
            Some(value) => SearchPath {
                value,
                from: PathFrom::Colloc,
            },
            None => SearchPath {
                value: DEFAULT_PATH.into(),
                from: PathFrom::Default,
            },
        }
    }
}

/// Why a path is not a program that can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Nothing there.
    Absent,
    /// Something other than a regular file (named).
    NotAFile(&'static str),
    /// A regular file the user may not execute.
    NotExecutable,
    /// A directory on the way may not be searched.
    Unreachable,
}

/// A program that would not start, and where it was looked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A program with a `/` that is not there.
    #[error("program {program:?} not found: {} does not exist{}", at.display(), relative_note(program, cwd))]
    Missing {
        /// As written.
        program: String,
        /// Where it was looked for.
        at: PathBuf,
        /// The run's working directory.
        cwd: PathBuf,
    },
    /// A bare name in no PATH entry.
    #[error("program {program:?} not found in {} ({})", path.from, path.value.to_string_lossy())]
    NotInPath {
        /// As written.
        program: String,
        /// The PATH searched.
        path: SearchPath,
    },
    /// Found, but it is no regular file (a directory, a device).
    #[error("program {program:?} is {}, a {kind}, not a program", at.display())]
    NotAFile {
        /// As written.
        program: String,
        /// What was found.
        at: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Found, but the user may not execute it.
    #[error("program {program:?} is {}, which you may not execute: chmod +x it, or put its interpreter first (e.g. [\"python3\", {program:?}])", at.display())]
    NotExecutable {
        /// As written.
        program: String,
        /// What was found.
        at: PathBuf,
    },
    /// A directory on the way to it may not be searched.
    #[error("program {program:?}: {} cannot be reached (permission denied on a directory on the way)", at.display())]
    Unreachable {
        /// As written.
        program: String,
        /// Where it was looked for.
        at: PathBuf,
    },
}

fn relative_note(program: &str, cwd: &Path) -> String {
    if Path::new(program).is_absolute() {
        String::new()
    } else {
        format!(
            " (relative to the run's working directory {})",
            cwd.display()
        )
    }
}

/// Is `p` a program the user can start?
///
/// # Errors
/// Why not.
pub fn usable(p: &Path) -> Result<(), Unusable> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(Unusable::Unreachable),
        Err(_) => return Err(Unusable::Absent),
    };
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_dir() {
            "directory"
        } else if ft.is_fifo() {
            "FIFO"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "device"
        } else {
            "special file"
        };
        return Err(Unusable::NotAFile(kind));
    }
    rustix::fs::access(p, rustix::fs::Access::EXEC_OK).map_err(|_| Unusable::NotExecutable)
}

/// Find `program` as the run's start will: with a `/` in `cwd`, else in `path`.
///
/// # Errors
/// It would not start, with where it was looked for.
pub fn resolve(program: &str, cwd: &Path, path: &SearchPath) -> Result<PathBuf, ProgramError> {
    let found = |at: PathBuf, why: Unusable| match why {
        Unusable::Absent => ProgramError::Missing {
            program: program.to_string(),
            at,
            cwd: cwd.to_path_buf(),
        },
        Unusable::NotAFile(kind) => ProgramError::NotAFile {
            program: program.to_string(),
            at,
            kind,
        },
        Unusable::NotExecutable => ProgramError::NotExecutable {
            program: program.to_string(),
            at,
        },
        Unusable::Unreachable => ProgramError::Unreachable {
            program: program.to_string(),
            at,
        },
    };
    if program.contains('/') {
        let at = cwd.join(program);
        return match usable(&at) {
            Ok(()) => Ok(at),
            Err(why) => Err(found(at, why)),
        };
    }
    // As execvp: the first usable entry wins; one that holds the name but cannot run it
    // is what the start reports when no entry can.
    let mut first_unusable: Option<(PathBuf, Unusable)> = None;
    for dir in std::env::split_paths(&path.value) {
        let at = cwd.join(dir).join(program);
        match usable(&at) {
            Ok(()) => return Ok(at),
            Err(Unusable::Absent) => {}
            Err(why) => {
                first_unusable.get_or_insert((at, why));
            }
        }
    }
    Err(match first_unusable {
        Some((at, why)) => found(at, why),
        None => ProgramError::NotInPath {
            program: program.to_string(),
            path: path.clone(),
        },
    })
}

/// Shell words that are no program on PATH: POSIX and bash builtins and reserved words.
/// A script starting with one of them is not checked (what it runs is not sure).
#[rustfmt::skip]
const SHELL_WORDS: &[&str] = &[
    ".", ":", "[", "[[", "]]", "!", "{", "}", "alias", "bg", "break", "builtin", "caller",
    "case", "cd", "command", "compgen", "complete", "continue", "coproc", "declare", "dirs",
    "disown", "do", "done", "echo", "elif", "else", "enable", "esac", "eval", "exit", "export",
    "false", "fc", "fg", "fi", "for", "function", "getopts", "hash", "help", "history", "if",
    "in", "jobs", "kill", "let", "local", "logout", "mapfile", "popd", "printf", "pushd", "pwd",
    "read", "readarray", "readonly", "return", "select", "set", "shift", "shopt", "source",
    "suspend", "test", "then", "time", "times", "trap", "true", "type", "typeset", "ulimit",
    "umask", "unalias", "unset", "until", "wait", "while",
];

/// Shells whose `-c SCRIPT` colloc reads for its first program.
const SHELLS: &[&str] = &["sh", "bash", "dash"];

/// The program that `sh -c SCRIPT` (also `bash`/`dash`, as `["sh", "-c", SCRIPT, …]`)
/// runs, where that is sure, else `None`:
///
/// - the script is one command: no `;`, `&`, `|` or newline outside quotes (a list,
///   pipeline or `||` may run on, or succeed, without its first program);
/// - its first word is a plain name or path (letters, digits, `_ . / + , @ % -`), not an
///   assignment, builtin or reserved word; `exec PROGRAM` counts as PROGRAM.
pub fn shell_program(argv: &[String]) -> Option<&str> {
    let [shell, flag, script, ..] = argv else {
        return None;
    };
    let base = shell.rsplit('/').next().unwrap_or(shell);
    if !SHELLS.contains(&base) || flag != "-c" || !one_command(script) {
        return None;
    }
    let (mut first, rest) = first_word(script)?;
    if first == "exec" {
        first = first_word(rest)?.0;
    }
    let plain = !first.starts_with('-')
        && first
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./+,@%-".contains(c));
    (plain && !SHELL_WORDS.contains(&first)).then_some(first)
}

/// The first word of `s` and what follows it; `None` when `s` is empty or starts with a
/// redirection (`>log prog`, `2>log prog`: its first word is no program).
fn first_word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.trim_start_matches(|c: char| c.is_ascii_digit())
        .starts_with(['<', '>'])
    {
        return None;
    }
    let end = s
        .find(|c: char| c.is_ascii_whitespace() || c == '<' || c == '>')
        .unwrap_or(s.len());
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// Is `script` one command: no `;`, `&`, `|` or newline outside quotes (an `&` of a
/// redirection, `2>&1`, `&>log`, is no operator)?
fn one_command(script: &str) -> bool {
    let mut chars = script.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        let redirect = c == '&' && (matches!(prev, '<' | '>') || chars.peek() == Some(&'>'));
        prev = c;
        match c {
            '&' if redirect => {}
            '\\' => {
                chars.next();
            }
            '\'' => {
                let closed = chars.by_ref().any(|c| c == '\'');
                if !closed {
                    return false;
                }
            }
            '"' => loop {
                match chars.next() {
                    None => return false,
                    Some('\\') => {
                        chars.next();
                    }
                    Some('"') => break,
                    Some(_) => {}
                }
            },
            ';' | '&' | '|' | '\n' => return false,
            _ => {}
        }
    }
    true
}

/// Where the runs came from, for the error line.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A manifest (its path as shown): errors are `FILE:LINE: …`.
    Manifest(&'a str),
    /// The command after `--`.
    CommandLine,
}

/// Every distinct program of `specs`, resolved as its start will (see the module's
/// comment), with colloc's own working directory `here` and PATH `colloc_path`.
///
/// # Errors
/// One line for the first program that would not start: the manifest's file and the
/// line of its command, which run, what is wrong and where it was looked for.
pub fn check(
    specs: &[RunSpec],
    origin: Origin<'_>,
    here: &Path,
    colloc_path: Option<&OsStr>,
) -> Result<(), String> {
    let mut seen: HashSet<(&str, PathBuf, SearchPath)> = HashSet::new();
    for s in specs {
        let cwd = s
            .workdir
            .as_ref()
            .map_or_else(|| here.to_path_buf(), |w| here.join(w));
        let path = SearchPath::of(&s.env, colloc_path.map(OsStr::to_os_string));
        let Some(program) = s.command.first() else {
            continue;
        };
        let mut programs = vec![(program.as_str(), false)];
        if let Some(p) = shell_program(&s.command) {
            programs.push((p, true));
        }
        for (p, in_shell) in programs {
            if !seen.insert((p, cwd.clone(), path.clone())) {
                continue;
            }
            if let Err(e) = resolve(p, &cwd, &path) {
                let shell = if in_shell {
                    format!(" (the first program of its {} -c script)", s.command[0])
                } else {
                    String::new()
                };
                return Err(match origin {
                    Origin::Manifest(file) => {
                        let at = s.line.map_or(String::new(), |l| format!(":{l}"));
                        format!("{file}{at}: run {:?}{shell}: {e}", s.name)
                    }
                    Origin::CommandLine => format!("the command after --{shell}: {e}"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
