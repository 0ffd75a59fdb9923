//! The mode grammar shared by `--colloc`, `colloc run --mode` and `colloc plan`.
//!
//! ```text
//! off | naive | mps | mps:N | mig:P[,P...] | mig:P[,P...]:mps | mig:P[,P...]:mps:N
//! P = 1g | 2g | 3g | 4g | 7g | <slices>g.<mem>gb   optionally followed by xK
//! ```
//! A single profile without a count means "as many as fit"; a list is a mixed layout.
//! `:mps` after a layout puts one MPS daemon in each MIG instance (`:mps:N`: N clients
//! per instance). A profile list never holds a `:`, so the first `:` after the layout
//! ends it whatever its profile names look like (media variants such as `1g.10gb+me`
//! included, should the grammar take them one day).
//! Input is at most [`MAX_LEN`] bytes of `[a-z0-9.:,x]`.

use std::fmt;
use std::str::FromStr;

/// Longest accepted mode string, in bytes.
pub const MAX_LEN: usize = 64;
/// Most MPS clients one `mps:N` may ask for (the MPS limit per GPU on Volta and later).
pub const MAX_MPS_CLIENTS: u32 = 48;
/// Largest `xK` count in a MIG layout (no GPU has more than 7 compute slices).
pub const MAX_MIG_COUNT: u32 = 7;
/// Slice counts that name a MIG profile.
pub const MIG_SLICES: [u32; 5] = [1, 2, 3, 4, 7];

/// The one-line summary of what is valid, used in every rejection.
pub const VALID_MODES: &str = "valid modes: off, naive, mps, mps:N (N = 1..48), \
mig:P[,P...] with P a profile 1g, 2g, 3g, 4g, 7g or a full name such as 3g.20gb, \
optionally with a count xK (e.g. mig:3g, mig:2gx3, mig:4g,2g,1g), and \
mig:P[,P...]:mps or :mps:N for MPS inside each MIG instance (e.g. mig:3g:mps:4)";

/// A parsed collocation mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Nothing happens.
    Off,
    /// Runs share the GPU(s) as plain processes.
    Naive,
    /// One MPS control daemon per GPU; `clients` sizes each client's share.
    Mps {
        /// `mps:N`: N clients, each limited to 1/N of the SMs and memory. `None`: unlimited.
        clients: Option<u32>,
    },
    /// MIG instances on each allocated GPU.
    Mig(MigRequest),
    /// MIG instances with one MPS control daemon in each (`mig:LAYOUT:mps`,
    /// `mig:LAYOUT:mps:N`; the MIG guide's "MIG with CUDA MPS").
    MigMps {
        /// The MIG layout.
        layout: MigRequest,
        /// `:mps:N`: N clients per instance, each limited to 1/N of its instance's SMs
        /// and memory. `None`: unlimited.
        clients: Option<u32>,
    },
}

/// The broad kind of a mode, as named in `allowed_modes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModeKind {
    /// `off`
    Off,
    /// `naive`
    Naive,
    /// `mps`, `mps:N`
    Mps,
    /// `mig:…`
    Mig,
}

impl ModeKind {
    /// The name used in `allowed_modes` and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ModeKind::Off => "off",
            ModeKind::Naive => "naive",
            ModeKind::Mps => "mps",
            ModeKind::Mig => "mig",
        }
    }
}

impl FromStr for ModeKind {
    type Err = ModeError;
    fn from_str(s: &str) -> Result<Self, ModeError> {
        match s {
            "off" => Ok(ModeKind::Off),
            "naive" => Ok(ModeKind::Naive),
            "mps" => Ok(ModeKind::Mps),
            "mig" => Ok(ModeKind::Mig),
            _ => Err(ModeError::new(
                s,
                "unknown mode kind; valid kinds: off, naive, mps, mig",
            )),
        }
    }
}

impl fmt::Display for ModeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A MIG request: fill the GPU with one profile, or an explicit layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MigRequest {
    /// `mig:3g`: as many instances of one profile as fit.
    Fill(ProfileSel),
    /// `mig:4g,2g,1g`, `mig:2gx3`: exactly these instances. Normalized: one item per
    /// profile, sorted by slices (largest first), then name.
    Layout(Vec<MigItem>),
}

/// One entry of a MIG layout: a profile and how many instances of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigItem {
    /// Which profile.
    pub profile: ProfileSel,
    /// How many instances (at least 1).
    pub count: u32,
}

/// How a request names a MIG profile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProfileSel {
    /// `3g`: the model's standard profile with this many compute slices.
    Short(u32),
    /// `3g.20gb`: exactly this profile of the model.
    Full {
        /// Compute slices (the number before `g`).
        slices: u32,
        /// Memory in GB as in the profile's name.
        mem_gb: u32,
    },
}

impl ProfileSel {
    /// Compute slices this profile takes.
    pub fn slices(&self) -> u32 {
        match *self {
            ProfileSel::Short(s) => s,
            ProfileSel::Full { slices, .. } => slices,
        }
    }
}

impl fmt::Display for ProfileSel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileSel::Short(s) => write!(f, "{s}g"),
            ProfileSel::Full { slices, mem_gb } => write!(f, "{slices}g.{mem_gb}gb"),
        }
    }
}

/// Why a mode string was rejected. Its `Display` is one line: the (escaped, shortened)
/// input, what is wrong, and what is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mode {shown}: {reason}; {VALID_MODES}")]
pub struct ModeError {
    shown: String,
    reason: String,
}

impl ModeError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        ModeError {
            shown: show_input(input),
            reason: reason.into(),
        }
    }

    /// What was wrong, without the input or the list of valid modes.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Quote user input for a message: control and non-ASCII characters escaped, long
/// input cut, so hostile values cannot forge log lines or flood a terminal.
pub fn show_input(input: &str) -> String {
    const SHOW: usize = 40;
    let mut out = String::from("\"");
    for (n, c) in input.chars().enumerate() {
        if n == SHOW {
            out.push_str(&format!("…\" ({} bytes)", input.len()));
            return out;
        }
        if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out.push('"');
    out
}

impl Mode {
    /// The broad kind of this mode.
    pub fn kind(&self) -> ModeKind {
        match self {
            Mode::Off => ModeKind::Off,
            Mode::Naive => ModeKind::Naive,
            Mode::Mps { .. } => ModeKind::Mps,
            // MPS inside MIG instances reconfigures the GPU: `mig` is what a node must
            // allow first.
            Mode::Mig(_) | Mode::MigMps { .. } => ModeKind::Mig,
        }
    }

    /// Parse from raw bytes (an option value from C): non-UTF-8 input is an error.
    pub fn parse_bytes(raw: &[u8]) -> Result<Mode, ModeError> {
        match std::str::from_utf8(raw) {
            Ok(s) => s.parse(),
            Err(_) => Err(ModeError::new(
                &String::from_utf8_lossy(raw),
                "not valid UTF-8",
            )),
        }
    }
}

impl FromStr for Mode {
    type Err = ModeError;

    fn from_str(input: &str) -> Result<Mode, ModeError> {
        if input.is_empty() {
            return Err(ModeError::new(input, "empty"));
        }
        if input.len() > MAX_LEN {
            return Err(ModeError::new(
                input,
                format!("longer than {MAX_LEN} characters"),
            ));
        }
        if let Some(bad) = input
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '.' | ':' | ','))
        {
            return Err(ModeError::new(
                input,
                format!(
                    "character {} is not allowed (only a-z 0-9 . : , x)",
                    show_input(&bad.to_string())
                ),
            ));
        }
        let (head, arg) = match input.split_once(':') {
            Some((h, a)) => (h, Some(a)),
            None => (input, None),
        };
        match (head, arg) {
            ("off", None) => Ok(Mode::Off),
            ("naive", None) => Ok(Mode::Naive),
            ("mps", None) => Ok(Mode::Mps { clients: None }),
            ("mps", Some(n)) => parse_mps(input, n),
            ("mig", Some(rest)) => match rest.split_once(':') {
                None => parse_mig(input, rest).map(Mode::Mig),
                Some((list, inner)) => {
                    let layout = parse_mig(input, list)?;
                    let clients = parse_inner_mps(input, inner)?;
                    Ok(Mode::MigMps { layout, clients })
                }
            },
            ("mig", None) => Err(ModeError::new(
                input,
                "mig needs a profile list, e.g. mig:3g",
            )),
            ("off" | "naive", Some(_)) => {
                Err(ModeError::new(input, format!("{head} takes no argument")))
            }
            _ => Err(ModeError::new(
                input,
                format!("unknown mode {}", show_input(head)),
            )),
        }
    }
}

fn parse_number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_mps(input: &str, n: &str) -> Result<Mode, ModeError> {
    match parse_number(n) {
        Some(k) if (1..=MAX_MPS_CLIENTS).contains(&k) => Ok(Mode::Mps { clients: Some(k) }),
        _ => Err(ModeError::new(
            input,
            format!(
                "mps:N needs a client count N from 1 to {MAX_MPS_CLIENTS}, got {}",
                show_input(n)
            ),
        )),
    }
}

/// What may follow a MIG layout: `mps` or `mps:N`.
fn parse_inner_mps(input: &str, inner: &str) -> Result<Option<u32>, ModeError> {
    match inner.split_once(':') {
        None if inner == "mps" => Ok(None),
        Some(("mps", n)) => match parse_mps(input, n)? {
            Mode::Mps { clients } => Ok(clients),
            _ => unreachable!("parse_mps gives Mode::Mps"),
        },
        _ => Err(ModeError::new(
            input,
            format!(
                "after a MIG layout only :mps or :mps:N (MPS inside each instance) may \
                 follow, not :{}",
                show_input(inner).trim_matches('"')
            ),
        )),
    }
}

fn parse_profile(input: &str, p: &str) -> Result<ProfileSel, ModeError> {
    let bad = || {
        ModeError::new(
            input,
            format!(
                "{} is not a MIG profile (1g, 2g, 3g, 4g, 7g or a full name such as 3g.20gb)",
                show_input(p)
            ),
        )
    };
    let (slices, rest) = p.split_once('g').ok_or_else(bad)?;
    let slices = parse_number(slices).ok_or_else(bad)?;
    if !MIG_SLICES.contains(&slices) {
        return Err(ModeError::new(
            input,
            format!("no MIG profile has {slices} compute slices (1g, 2g, 3g, 4g, 7g)"),
        ));
    }
    if rest.is_empty() {
        return Ok(ProfileSel::Short(slices));
    }
    let mem = rest
        .strip_prefix('.')
        .and_then(|r| r.strip_suffix("gb"))
        .ok_or_else(bad)?;
    match parse_number(mem) {
        Some(mem_gb) if mem_gb > 0 => Ok(ProfileSel::Full { slices, mem_gb }),
        _ => Err(bad()),
    }
}

fn parse_mig(input: &str, list: &str) -> Result<MigRequest, ModeError> {
    if list.is_empty() {
        return Err(ModeError::new(
            input,
            "mig: needs at least one profile, e.g. mig:3g",
        ));
    }
    let mut items: Vec<MigItem> = Vec::new();
    let mut uncounted_single = false;
    let parts: Vec<&str> = list.split(',').collect();
    for part in &parts {
        if part.is_empty() {
            return Err(ModeError::new(input, "empty entry in the profile list"));
        }
        let (prof, count) = match part.split_once('x') {
            Some((p, k)) => {
                let k = match parse_number(k) {
                    Some(k) if (1..=MAX_MIG_COUNT).contains(&k) => k,
                    _ => {
                        return Err(ModeError::new(
                            input,
                            format!(
                                "count {} in {} must be from 1 to {MAX_MIG_COUNT}",
                                show_input(k),
                                show_input(part)
                            ),
                        ))
                    }
                };
                (p, k)
            }
            None => {
                uncounted_single = parts.len() == 1;
                (*part, 1)
            }
        };
        let profile = parse_profile(input, prof)?;
        match items.iter_mut().find(|i| i.profile == profile) {
            Some(item) => item.count += count,
            None => items.push(MigItem { profile, count }),
        }
    }
    if uncounted_single {
        return Ok(MigRequest::Fill(items.remove(0).profile));
    }
    let total: u32 = items.iter().map(|i| i.count).sum();
    if total > MAX_MIG_COUNT {
        return Err(ModeError::new(
            input,
            format!("{total} instances asked for; a GPU holds at most {MAX_MIG_COUNT}"),
        ));
    }
    items.sort_by(|a, b| {
        b.profile
            .slices()
            .cmp(&a.profile.slices())
            .then(a.profile.cmp(&b.profile))
    });
    Ok(MigRequest::Layout(items))
}

impl fmt::Display for MigRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MigRequest::Fill(p) => write!(f, "{p}"),
            MigRequest::Layout(items) => {
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}", item.profile)?;
                    // A lone item with count 1 keeps its `x1`: without it, it would read
                    // back as "as many as fit".
                    if item.count != 1 || items.len() == 1 {
                        write!(f, "x{}", item.count)?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Off => f.write_str("off"),
            Mode::Naive => f.write_str("naive"),
            Mode::Mps { clients: None } => f.write_str("mps"),
            Mode::Mps { clients: Some(n) } => write!(f, "mps:{n}"),
            Mode::Mig(req) => write!(f, "mig:{req}"),
            Mode::MigMps {
                layout,
                clients: None,
            } => write!(f, "mig:{layout}:mps"),
            Mode::MigMps {
                layout,
                clients: Some(n),
            } => write!(f, "mig:{layout}:mps:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Mode {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn simple_modes() {
        assert_eq!(p("off"), Mode::Off);
        assert_eq!(p("naive"), Mode::Naive);
        assert_eq!(p("mps"), Mode::Mps { clients: None });
        assert_eq!(p("mps:4"), Mode::Mps { clients: Some(4) });
        assert_eq!(p("mps:48").to_string(), "mps:48");
    }

    #[test]
    fn mig_fill_and_layouts() {
        assert_eq!(
            p("mig:3g"),
            Mode::Mig(MigRequest::Fill(ProfileSel::Short(3)))
        );
        assert_eq!(
            p("mig:3g.20gb"),
            Mode::Mig(MigRequest::Fill(ProfileSel::Full {
                slices: 3,
                mem_gb: 20
            }))
        );
        assert_eq!(p("mig:2gx3").to_string(), "mig:2gx3");
        assert_eq!(p("mig:1g,4g,2g").to_string(), "mig:4g,2g,1g");
        assert_eq!(p("mig:1g,1g,3g,2g").to_string(), "mig:3g,2g,1gx2");
        assert_eq!(p("mig:3gx1").to_string(), "mig:3gx1");
        assert_ne!(p("mig:3gx1"), p("mig:3g"));
        assert_eq!(p("mig:3g.20gbx2").to_string(), "mig:3g.20gbx2");
    }

    #[test]
    fn mps_inside_mig_instances() {
        let fill3 = MigRequest::Fill(ProfileSel::Short(3));
        assert_eq!(
            p("mig:3g:mps"),
            Mode::MigMps {
                layout: fill3.clone(),
                clients: None
            }
        );
        assert_eq!(
            p("mig:3g:mps:4"),
            Mode::MigMps {
                layout: fill3,
                clients: Some(4)
            }
        );
        assert_eq!(p("mig:3g:mps:4").kind(), ModeKind::Mig);
        // The layout keeps its own grammar and normal form; the MPS part follows it.
        assert_eq!(p("mig:1g,4g,2g:mps:2").to_string(), "mig:4g,2g,1g:mps:2");
        assert_eq!(p("mig:3gx1:mps").to_string(), "mig:3gx1:mps");
        assert_eq!(
            p("mig:3g.20gbx2:mps:48").to_string(),
            "mig:3g.20gbx2:mps:48"
        );
        let Mode::MigMps { layout, clients } = p("mig:1g.10gbx2,2g:mps:3") else {
            panic!()
        };
        assert_eq!(clients, Some(3));
        assert_eq!(layout.to_string(), "2g,1g.10gbx2");
        // Not the same as the layout alone, nor as plain MPS.
        assert_ne!(p("mig:3g:mps"), p("mig:3g"));
        assert_ne!(p("mig:3g:mps:4"), p("mps:4"));
        for bad in [
            "mig:3g:mps:0",
            "mig:3g:mps:49",
            "mig:3g:mps:",
            "mig:3g:mps:4:2",
            "mig:3g:mps:x2",
            "mig:3g:naive",
            "mig:3g:mig:2g",
            "mig:3g:",
            "mig::mps",
            "mig:3g,:mps",
            "mig:mps",
            "mig:3gx0:mps",
            "mps:4:mig:3g",
            "mig:3g:mpsx2",
        ] {
            let err = bad.parse::<Mode>().expect_err(bad).to_string();
            assert!(err.starts_with("invalid mode"), "{bad}: {err}");
            assert!(err.contains("mig:P[,P...]:mps or :mps:N"), "{bad}: {err}");
            assert!(!err.contains('\n'), "{bad}: {err}");
        }
        let err = "mig:3g:naive".parse::<Mode>().unwrap_err();
        assert!(
            err.reason().contains("only :mps or :mps:N"),
            "{}",
            err.reason()
        );
        let err = "mig:3g:mps:49".parse::<Mode>().unwrap_err();
        assert!(err.reason().contains("from 1 to 48"), "{}", err.reason());
        // A media variant's name cannot be mistaken for the MPS part: `+` is outside the
        // grammar's characters, refused as such, wherever it stands.
        for media in ["mig:1g.10gb+me:mps", "mig:1g.10gb+me", "mig:3g:mps+me"] {
            let err = media.parse::<Mode>().unwrap_err();
            assert!(
                err.reason().contains("\"+\" is not allowed"),
                "{}",
                err.reason()
            );
        }
    }

    #[test]
    fn rejections_say_what_is_valid() {
        for bad in [
            "",
            "mig:",
            "mps:0",
            "mps:49",
            "mps:",
            "mig:5g",
            "mig:3gx0",
            "mig:3gx",
            "mig:,3g",
            "mig:3g,",
            "bogus",
            "MPS",
            "off:1",
            "naive:2",
            "mig",
            "mig:3g.gb",
            "mig:3g.0gb",
            "mig:g",
            "mig:1gx4,1gx4",
            "mps:-1",
            "mps:1.5",
            "mig:3g;rm -rf /",
            "../../etc/passwd",
            "mig:x3",
            "mig:1g.5gbx",
            "mps:00000000001",
        ] {
            let err = bad.parse::<Mode>().expect_err(bad).to_string();
            assert!(err.starts_with("invalid mode"), "{bad}: {err}");
            assert!(err.contains("valid modes: off, naive, mps"), "{bad}: {err}");
            assert!(!err.contains('\n'), "{bad}: {err}");
        }
    }

    #[test]
    fn hostile_input_is_escaped_and_cut() {
        let long = "a".repeat(10_000);
        let err = long.parse::<Mode>().unwrap_err().to_string();
        assert!(err.len() < 600, "{}", err.len());
        assert!(err.contains("10000 bytes"));
        let err = "mig:3g\n[fake] log line"
            .parse::<Mode>()
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'));
        assert!(err.contains("\\n"));
        let err = "mïg:3g".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("\\u{ef}"), "{err}");
        assert!(Mode::parse_bytes(b"mig:\xff").is_err());
    }

    fn profile_strategy() -> impl Strategy<Value = ProfileSel> {
        prop_oneof![
            prop::sample::select(MIG_SLICES.to_vec()).prop_map(ProfileSel::Short),
            (prop::sample::select(MIG_SLICES.to_vec()), 1u32..200)
                .prop_map(|(slices, mem_gb)| ProfileSel::Full { slices, mem_gb }),
        ]
    }

    fn mode_strategy() -> impl Strategy<Value = Mode> {
        prop_oneof![
            Just(Mode::Off),
            Just(Mode::Naive),
            Just(Mode::Mps { clients: None }),
            (1..=MAX_MPS_CLIENTS).prop_map(|n| Mode::Mps { clients: Some(n) }),
            profile_strategy().prop_map(|p| Mode::Mig(MigRequest::Fill(p))),
            (profile_strategy(), prop::option::of(1..=MAX_MPS_CLIENTS)).prop_map(|(p, clients)| {
                Mode::MigMps {
                    layout: MigRequest::Fill(p),
                    clients,
                }
            }),
            prop::collection::vec((profile_strategy(), 1u32..3), 1..4).prop_filter_map(
                "layout too long",
                |items| {
                    let s = items
                        .iter()
                        .map(|(p, k)| format!("{p}x{k}"))
                        .collect::<Vec<_>>()
                        .join(",");
                    format!("mig:{s}").parse::<Mode>().ok()
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn display_round_trips(m in mode_strategy()) {
            let shown = m.to_string();
            prop_assert!(shown.len() <= MAX_LEN);
            prop_assert_eq!(shown.parse::<Mode>().unwrap(), m);
        }

        #[test]
        fn no_bytes_panic(raw in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = Mode::parse_bytes(&raw);
        }

        #[test]
        fn no_grammar_like_string_panics(s in "[a-z0-9.:,x]{0,70}") {
            if let Ok(m) = s.parse::<Mode>() {
                prop_assert_eq!(m.to_string().parse::<Mode>().unwrap(), m);
            }
        }
    }
}
