//! Progress through a whole run, from its output lines, and when it will end at its pace
//! so far (the forms are listed in the parent module's docs).

use std::sync::OnceLock;

use regex::Regex;

/// The progress forms, in the order they are tried on a line.
fn progress_res() -> &'static [(ProgressForm, Regex); 4] {
    static P: OnceLock<[(ProgressForm, Regex); 4]> = OnceLock::new();
    P.get_or_init(|| {
        let re = |p: &str| Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        [
            (
                ProgressForm::Stated,
                re(r"(?i)\bprogress\s*[=:]\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)"),
            ),
            (
                ProgressForm::Epoch,
                re(r"(?i)\bepoch\b[\s:=\[#]*([0-9]+)\s*/\s*([0-9]+)"),
            ),
            (
                ProgressForm::Step,
                re(r"(?i)\b(?:step|iter|iteration)\b[\s:=\[#]*([0-9]+)\s*/\s*([0-9]+)"),
            ),
            (ProgressForm::Bar, re(r"\b([0-9]{1,3})%\|")),
        ]
    })
}

/// Which form a progress figure came in; an attempt follows the first it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressForm {
    /// `progress=F` or `progress=P%`.
    Stated,
    /// `Epoch N/M`.
    Epoch,
    /// `step N/M`, `iter N/M`.
    Step,
    /// tqdm's `P%|`.
    Bar,
}

/// One line's progress figure: `done` of `total` (same unit), in `form`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressFact {
    /// The form it came in.
    pub form: ProgressForm,
    /// Done so far.
    pub done: f64,
    /// The whole.
    pub total: f64,
}

pub(super) fn progress_of_line(line: &str) -> Option<ProgressFact> {
    if !(line.contains("rogress") || line.contains('/') || line.contains("%|")) {
        return None;
    }
    for (form, re) in progress_res() {
        let Some(c) = re.captures(line) else { continue };
        let a: f64 = c[1].parse().ok()?;
        let (done, total) = match form {
            ProgressForm::Stated if &c[2] == "%" => (a, 100.0),
            ProgressForm::Stated => (a, 1.0),
            // Epoch N of M has begun: N - 1 are done (counted from 1; a count from 0
            // ends one epoch sooner than estimated, the safe side).
            ProgressForm::Epoch => ((a - 1.0).max(0.0), c[2].parse().ok()?),
            ProgressForm::Step => (a, c[2].parse().ok()?),
            ProgressForm::Bar => (a, 100.0),
        };
        if total > 0.0 && done <= total && done.is_finite() && total.is_finite() {
            return Some(ProgressFact {
                form: *form,
                done,
                total,
            });
        }
        return None;
    }
    None
}

/// Least time over which a run's progress gives its pace, seconds.
pub const MIN_PACE_S: f64 = 2.0;

/// How far an attempt is through its whole run, from its progress lines, and when it
/// will end at the pace so far (measured over at least [`MIN_PACE_S`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Advance {
    form: Option<ProgressForm>,
    total: f64,
    /// (done, seconds) when the first figure was seen.
    first: Option<(f64, f64)>,
    /// (done, seconds) when the figure last changed.
    last: Option<(f64, f64)>,
    /// The count went back or the whole changed: not whole-run progress.
    broken: bool,
}

impl Advance {
    /// Fold one line's figure seen at `t` seconds.
    pub fn see(&mut self, f: ProgressFact, t: f64) {
        if self.broken {
            return;
        }
        match self.form {
            None => {
                self.form = Some(f.form);
                self.total = f.total;
                self.first = Some((f.done, t));
                self.last = Some((f.done, t));
            }
            Some(form) if form != f.form => {}
            Some(_) => {
                let Some((done, _)) = self.last else { return };
                if f.total != self.total || f.done < done {
                    self.broken = true;
                } else if f.done > done {
                    self.last = Some((f.done, t));
                }
            }
        }
    }

    /// Seconds from `now` until the attempt ends at its pace so far (0 when overdue);
    /// `None` before its figure has moved, or when its lines are not whole-run progress.
    pub fn remaining(&self, now: f64) -> Option<f64> {
        if self.broken {
            return None;
        }
        let ((d0, t0), (d1, t1)) = (self.first?, self.last?);
        // A pace over less than this is read times more than the run's pace (lines read
        // in a burst have nearly the same time).
        if d1 <= d0 || t1 - t0 < MIN_PACE_S {
            return None;
        }
        let rate = (d1 - d0) / (t1 - t0);
        let end = t1 + (self.total - d1) / rate;
        Some((end - now).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Scanner;
    use super::*;

    fn progress(line: &str) -> Option<(ProgressForm, f64, f64)> {
        Scanner::default()
            .scan(line)
            .progress
            .map(|p| (p.form, p.done, p.total))
    }

    #[test]
    fn progress_forms() {
        use ProgressForm::*;
        assert_eq!(
            progress("t=3.0 step=40 img/s=10 progress=0.25"),
            Some((Stated, 0.25, 1.0))
        );
        assert_eq!(progress("progress: 40%"), Some((Stated, 40.0, 100.0)));
        assert_eq!(progress("Epoch 3/10"), Some((Epoch, 2.0, 10.0)));
        assert_eq!(progress("Epoch [1/5] loss=0.3"), Some((Epoch, 0.0, 5.0)));
        assert_eq!(
            progress("step 120/1000 loss 2.1"),
            Some((Step, 120.0, 1000.0))
        );
        assert_eq!(progress("iter: 5 / 50"), Some((Step, 5.0, 50.0)));
        assert_eq!(
            progress(" 37%|███▋      | 37/100 [00:10<00:17,  3.6it/s]"),
            Some((Bar, 37.0, 100.0))
        );
        // An epoch's bar on the same line as the epoch count: the epoch count wins.
        assert_eq!(
            progress("Epoch 2/4:  50%|█████ | 5/10"),
            Some((Epoch, 1.0, 4.0))
        );
        // Not progress: a rate, a fraction above the whole, a date, a ratio of zero.
        assert_eq!(progress("img/s=1234.5"), None);
        assert_eq!(progress("progress=40"), None);
        assert_eq!(progress("step 12/10"), None);
        assert_eq!(progress("step 0/0"), None);
        assert_eq!(progress("2026/12/07 12:00 started"), None);
    }

    fn fact(form: ProgressForm, done: f64, total: f64) -> ProgressFact {
        ProgressFact { form, done, total }
    }

    #[test]
    fn advance_extrapolates_the_pace_so_far() {
        let mut a = Advance::default();
        assert_eq!(a.remaining(0.0), None);
        // 10 % at 12 s, 20 % at 15 s: 10 % per 3 s, so the last 80 % take 24 s more.
        a.see(fact(ProgressForm::Stated, 0.1, 1.0), 12.0);
        assert_eq!(a.remaining(12.0), None, "one figure says no pace");
        let mut burst = a.clone();
        burst.see(fact(ProgressForm::Stated, 0.15, 1.0), 13.9);
        assert_eq!(burst.remaining(14.0), None, "less than 2 s says no pace");
        a.see(fact(ProgressForm::Stated, 0.2, 1.0), 15.0);
        assert_eq!(a.remaining(15.0), Some(24.0));
        assert_eq!(a.remaining(20.0), Some(19.0));
        // The same figure again moves nothing; an overdue end is 0.
        a.see(fact(ProgressForm::Stated, 0.2, 1.0), 16.0);
        assert_eq!(a.remaining(15.0), Some(24.0));
        assert_eq!(a.remaining(100.0), Some(0.0));
        // Another form on a later line is not mixed in.
        a.see(fact(ProgressForm::Bar, 99.0, 100.0), 17.0);
        assert_eq!(a.remaining(15.0), Some(24.0));
    }

    #[test]
    fn a_count_that_goes_back_is_not_whole_run_progress() {
        // A bar per epoch: 50 %, 90 %, then 10 % of the next epoch.
        let mut a = Advance::default();
        a.see(fact(ProgressForm::Bar, 50.0, 100.0), 1.0);
        a.see(fact(ProgressForm::Bar, 90.0, 100.0), 4.0);
        assert!(a.remaining(4.0).is_some());
        a.see(fact(ProgressForm::Bar, 10.0, 100.0), 5.0);
        assert_eq!(a.remaining(5.0), None);
        a.see(fact(ProgressForm::Bar, 20.0, 100.0), 9.0);
        assert_eq!(a.remaining(9.0), None, "broken stays broken");
        // A whole that changes (steps per epoch) is not one run's whole either.
        let mut b = Advance::default();
        b.see(fact(ProgressForm::Step, 10.0, 100.0), 1.0);
        b.see(fact(ProgressForm::Step, 20.0, 200.0), 5.0);
        assert_eq!(b.remaining(5.0), None);
    }
}
