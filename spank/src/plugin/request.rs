//! What a job asked for with `--colloc`, read from Slurm and validated once per callback
//! ([`Request::read`]); every decision of the callback reads this, never the raw bytes.

use colloc_core::mode::{Mode, ModeError};

use super::{Host, OPTION_ENV};

/// A job's `--colloc`, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// No `--colloc`: the plugstack's `default=`, else the node's `default_mode`.
    Unset,
    /// A value of the grammar (`off` included).
    Mode(Mode),
    /// A value the grammar rejects (only a client that skipped the submission check gets
    /// one to a node): the job's tasks fail with its line.
    Invalid(ModeError),
}

impl Request {
    /// The job's `--colloc`: SPANK's getopt, else the environment Slurm gives the prolog
    /// and epilog.
    pub fn read(host: &dyn Host) -> Request {
        Request::from_raw(option_value(host).as_deref())
    }

    /// The request of a raw option value (`None`: not given).
    pub fn from_raw(raw: Option<&[u8]>) -> Request {
        match raw.map(Mode::parse_bytes) {
            None => Request::Unset,
            Some(Ok(m)) => Request::Mode(m),
            Some(Err(e)) => Request::Invalid(e),
        }
    }

    /// Did the job ask for a mode? `--colloc=off` and invalid values do not count.
    pub fn asked(&self) -> bool {
        matches!(self, Request::Mode(m) if *m != Mode::Off)
    }

    /// The mode the job named, if it named a valid one.
    pub fn named(&self) -> Option<&Mode> {
        match self {
            Request::Mode(m) => Some(m),
            _ => None,
        }
    }

    /// The mode that applies: the one named, else `default()` where none was given;
    /// `None` for an invalid value.
    pub fn mode_or(&self, default: impl FnOnce() -> Mode) -> Option<Mode> {
        match self {
            Request::Mode(m) => Some(m.clone()),
            Request::Unset => Some(default()),
            Request::Invalid(_) => None,
        }
    }
}

/// The raw option value: SPANK's getopt, else the environment Slurm gives the prolog.
pub fn option_value(host: &dyn Host) -> Option<Vec<u8>> {
    match host.getopt() {
        Ok(v) => v,
        Err(e) => {
            log::debug!("{e}; reading {OPTION_ENV}");
            host.env(OPTION_ENV).map(String::into_bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_raw_value_is_one_request() {
        assert_eq!(Request::from_raw(None), Request::Unset);
        let mps = Request::from_raw(Some(b"mps"));
        assert_eq!(mps, Request::Mode(Mode::Mps { clients: None }));
        assert!(mps.asked());
        let off = Request::from_raw(Some(b"off"));
        assert_eq!(off.named(), Some(&Mode::Off));
        assert!(!off.asked());
        for bad in [&b"mps:0"[..], b"\xff", b"bogus"] {
            let r = Request::from_raw(Some(bad));
            assert!(matches!(r, Request::Invalid(_)), "{r:?}");
            assert!(!r.asked());
            assert_eq!(r.named(), None);
            assert_eq!(r.mode_or(|| Mode::Naive), None);
        }
        assert_eq!(Request::Unset.mode_or(|| Mode::Naive), Some(Mode::Naive));
        assert_eq!(mps.mode_or(|| Mode::Naive), mps.named().cloned());
        assert!(!Request::Unset.asked());
    }
}
