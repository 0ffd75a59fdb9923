//! Which driver answers are worth asking again, and how: a bounded backoff.
//!
//! Real drivers give answers beyond what nvml.h documents, once, and then succeed
//! (issue 24): an occupied placement answers INSUFFICIENT_RESOURCES (a GPU instance that
//! lingers after its destroy), DCGM or another NVML client makes a create or destroy
//! answer IN_USE or UNKNOWN for a moment, a mode change answers IN_USE until the caller
//! "idles the device and retries" (nvml.h). None of them may drain a node: colloc asks
//! again with growing pauses until a deadline, then refuses the job (prolog) or marks the
//! GPU (epilog).

use std::time::{Duration, Instant};

use crate::gpu::nvml_code::{INSUFFICIENT_RESOURCES, IN_USE, UNKNOWN};
use crate::gpu::GpuError;

/// What colloc asked the driver to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Create a GPU instance (and its compute instance, and find its MIG device).
    Create,
    /// Destroy a GPU instance and its compute instances.
    Destroy,
    /// Switch MIG mode.
    ModeChange,
}

/// Is this answer to `op` one a later call may not give? Only answers the driver gives
/// for a busy or occupied GPU: INSUFFICIENT_RESOURCES (create of a GPU instance only: an
/// occupied placement), IN_USE and UNKNOWN. Anything else (INVALID_ARGUMENT,
/// NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST…) is asked once.
pub fn is_transient(op: Op, e: &GpuError) -> bool {
    let GpuError::Call { call, code, .. } = e else {
        return false;
    };
    match (op, *code) {
        (_, IN_USE | UNKNOWN) => true,
        (Op::Create, INSUFFICIENT_RESOURCES) => *call == "nvmlDeviceCreateGpuInstanceWithPlacement",
        _ => false,
    }
}

/// Growing pauses (doubling from [`Backoff::FIRST`] up to [`Backoff::MAX`]) until a
/// deadline.
#[derive(Debug, Clone)]
pub struct Backoff {
    deadline: Instant,
    pause: Duration,
    tries: u32,
}

impl Backoff {
    /// The first pause.
    pub const FIRST: Duration = Duration::from_millis(100);
    /// The longest pause.
    pub const MAX: Duration = Duration::from_secs(2);

    /// Pauses until `deadline`.
    pub fn until(deadline: Instant) -> Backoff {
        Backoff {
            deadline,
            pause: Backoff::FIRST,
            tries: 1,
        }
    }

    /// Pauses for at most `within` from now.
    pub fn within(within: Duration) -> Backoff {
        Backoff::until(Instant::now() + within)
    }

    /// The deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How many attempts were made so far (the first counts).
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The next pause, or `None` when it would end past the deadline.
    pub fn next_pause(&mut self, now: Instant) -> Option<Duration> {
        if now + self.pause > self.deadline {
            return None;
        }
        let p = self.pause;
        self.pause = (self.pause * 2).min(Backoff::MAX);
        self.tries += 1;
        Some(p)
    }

    /// Sleep the next pause and return true, or return false at once when it would end
    /// past the deadline.
    pub fn wait(&mut self) -> bool {
        match self.next_pause(Instant::now()) {
            Some(p) => {
                std::thread::sleep(p);
                true
            }
            None => false,
        }
    }
}

/// Call `f` until it succeeds, fails with an answer that is not transient for `op`, or
/// `backoff` runs out; the last answer is returned. Each transient answer is logged with
/// `what`.
///
/// # Errors
/// The last error.
pub fn retry<T>(
    op: Op,
    what: &str,
    backoff: &mut Backoff,
    mut f: impl FnMut() -> Result<T, GpuError>,
) -> Result<T, GpuError> {
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(op, &e) => {
                log::info!("{what}: {e}; trying again");
                if !backoff.wait() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn call(call: &'static str, code: u32) -> GpuError {
        GpuError::Call {
            call,
            gpu: "0".into(),
            message: "m".into(),
            code,
        }
    }

    #[test]
    fn transient_answers_by_operation() {
        let gi = "nvmlDeviceCreateGpuInstanceWithPlacement";
        let ci = "nvmlGpuInstanceCreateComputeInstance";
        assert!(is_transient(Op::Create, &call(gi, INSUFFICIENT_RESOURCES)));
        assert!(is_transient(Op::Create, &call(gi, UNKNOWN)));
        assert!(is_transient(Op::Create, &call(ci, IN_USE)));
        // A compute instance that does not fit is not a busy GPU.
        assert!(!is_transient(Op::Create, &call(ci, INSUFFICIENT_RESOURCES)));
        assert!(is_transient(
            Op::Destroy,
            &call("nvmlGpuInstanceDestroy", UNKNOWN)
        ));
        assert!(is_transient(
            Op::ModeChange,
            &call("nvmlDeviceSetMigMode", IN_USE)
        ));
        assert!(!is_transient(
            Op::Destroy,
            &call("nvmlGpuInstanceDestroy", INSUFFICIENT_RESOURCES)
        ));
        for code in [2, 3, 4, 6, 15] {
            assert!(!is_transient(Op::Create, &call(gi, code)), "{code}");
        }
        assert!(!is_transient(Op::Create, &GpuError::NotMig(0)));
    }

    #[test]
    fn pauses_double_up_to_the_maximum_and_stop_at_the_deadline() {
        let start = Instant::now();
        let mut b = Backoff::until(start + Duration::from_secs(10));
        let mut pauses = Vec::new();
        let mut now = start;
        while let Some(p) = b.next_pause(now) {
            pauses.push(p.as_millis());
            now += p;
        }
        assert_eq!(
            pauses,
            [100, 200, 400, 800, 1600, 2000, 2000, 2000],
            "sum 9100 ms; the next 2 s would pass the deadline"
        );
        assert_eq!(b.tries(), 9);
        assert!(now <= b.deadline());
    }

    #[test]
    fn retry_stops_at_success_at_a_lasting_answer_and_at_the_deadline() {
        // Once busy, then done.
        let n = Cell::new(0);
        let mut b = Backoff::within(Duration::from_secs(5));
        let r = retry(Op::Destroy, "t", &mut b, || {
            n.set(n.get() + 1);
            if n.get() == 1 {
                Err(call("nvmlGpuInstanceDestroy", UNKNOWN))
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.unwrap(), 7);
        assert_eq!(n.get(), 2);
        // NOT_SUPPORTED is asked once.
        n.set(0);
        let r: Result<(), _> = retry(
            Op::Create,
            "t",
            &mut Backoff::within(Duration::from_secs(5)),
            || {
                n.set(n.get() + 1);
                Err(call("nvmlDeviceCreateGpuInstanceWithPlacement", 3))
            },
        );
        assert!(r.is_err());
        assert_eq!(n.get(), 1);
        // Always busy: asked until the deadline (100 + 200 ms fit in 350 ms, 400 does not).
        n.set(0);
        let r: Result<(), _> = retry(
            Op::ModeChange,
            "t",
            &mut Backoff::within(Duration::from_millis(350)),
            || {
                n.set(n.get() + 1);
                Err(call("nvmlDeviceSetMigMode", IN_USE))
            },
        );
        assert!(r.unwrap_err().to_string().contains("code 19"));
        assert_eq!(n.get(), 3);
    }
}
