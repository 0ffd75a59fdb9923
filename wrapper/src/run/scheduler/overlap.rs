//! Starting a slot's next run early, so that its start-up (imports, CUDA context, data
//! loaders: seconds in which its share of the GPU does nothing) overlaps the end of the
//! run before it instead of following it.
//!
//! The rule, asked for a slot whose one run is past its start-up ([`Overlap::decide`]):
//! start the next run now when the running one will end within the next run's start-up.
//! - **Start-up** of a command (its program and script, [`commands_of`]): the
//!   median time from start to the first throughput line of its attempts so far, running
//!   ones included, so a sweep's first wave teaches its second.
//! - **End** of the running attempt: from its own progress lines at the pace so far
//!   ([`crate::engine::scan::Advance`]), else its command's median length among the
//!   attempts that succeeded.
//! - **Memory**: the next run's need is the most its command's attempts took while alone
//!   on their slot (else its declared `gpu_memory`), and it must fit beside what the
//!   slot holds now: a slot of its own size (MIG instance, `mps:N` client limit) beside
//!   the running run's peak; a GPU shared by slots beside every running run's peak (or
//!   command's need, if it is still starting and that is larger) in the usable share of
//!   the GPU. Unknown memory: no early start
//!   (a slot without any GPU has none to overcommit).
//!
//! Nothing is estimated where nothing is known: no start-up or end figure, no early start.

use std::collections::HashMap;

use super::super::fit::{Fit, Room};
use crate::engine::pack::AttemptId;

/// What is known of one command.
#[derive(Debug, Default, Clone)]
struct Command {
    /// Start-ups seen, seconds.
    startups: Vec<f64>,
    /// Lengths of attempts that succeeded, seconds.
    lengths: Vec<f64>,
    /// Most memory an attempt took while alone on its slot, bytes.
    peak: Option<u64>,
}

/// A running attempt as the rule sees it.
#[derive(Debug, Clone)]
struct Attempt {
    slot: usize,
    command: usize,
    start: f64,
    /// Its memory peak so far, bytes.
    peak: Option<u64>,
    /// It shared its slot with another attempt at some time.
    shared: bool,
    /// Its start-up was counted.
    startup_seen: bool,
}

/// What [`Overlap::decide`] is asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// The running attempt.
    pub running: AttemptId,
    /// Seconds until it ends by its own progress lines, if they say.
    pub remaining_by_progress: Option<f64>,
    /// It has printed a throughput line (it is past its start-up).
    pub producing: bool,
    /// The run that would start: its command.
    pub next_command: usize,
    /// Its declared `gpu_memory`, bytes.
    pub next_declared: Option<u64>,
    /// The engine's clock now, seconds.
    pub now: f64,
}

/// Why a slot's next run starts early, for the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Early {
    /// Seconds until the running attempt ends, as estimated.
    pub ends_in: f64,
    /// The next run's start-up, as estimated.
    pub startup: f64,
}

/// The early-start rule and what it has learnt.
#[derive(Debug)]
pub struct Overlap {
    fit: Fit,
    /// Per slot: it has no GPU at all.
    no_gpu: Vec<bool>,
    commands: Vec<Command>,
    running: HashMap<AttemptId, Attempt>,
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

impl Overlap {
    /// The rule over slots of these sizes (`fit`) and devices, for `commands` commands.
    pub fn new(fit: Fit, devices: &[Option<String>], commands: usize) -> Overlap {
        Overlap {
            fit,
            no_gpu: devices.iter().map(Option::is_none).collect(),
            commands: vec![Command::default(); commands],
            running: HashMap::new(),
        }
    }

    /// Attempt `id` of `command` started on `slot` at `start`; whether it started beside
    /// another (early).
    pub fn started(&mut self, id: AttemptId, slot: usize, command: usize, start: f64) -> bool {
        let beside: Vec<AttemptId> = self
            .running
            .iter()
            .filter(|(_, a)| a.slot == slot)
            .map(|(k, _)| *k)
            .collect();
        let shared = !beside.is_empty();
        for k in beside {
            if let Some(a) = self.running.get_mut(&k) {
                a.shared = true;
            }
        }
        self.running.insert(
            id,
            Attempt {
                slot,
                command,
                start,
                peak: None,
                shared,
                startup_seen: false,
            },
        );
        shared
    }

    /// What a running attempt shows now: its first throughput line's time (engine
    /// clock), and its memory peak so far.
    pub fn seen(&mut self, id: AttemptId, first_line: Option<f64>, peak: Option<u64>) {
        let Some(a) = self.running.get_mut(&id) else {
            return;
        };
        if let (false, Some(t)) = (a.startup_seen, first_line) {
            a.startup_seen = true;
            if let Some(c) = self.commands.get_mut(a.command) {
                c.startups.push((t - a.start).max(0.0));
            }
        }
        if let Some(p) = peak {
            a.peak = Some(a.peak.unwrap_or(0).max(p));
            if !a.shared {
                if let Some(c) = self.commands.get_mut(a.command) {
                    c.peak = Some(c.peak.unwrap_or(0).max(p));
                }
            }
        }
    }

    /// Attempt `id` ended at `end`; `succeeded`: its length counts for its command.
    pub fn ended(&mut self, id: AttemptId, end: f64, succeeded: bool, peak: Option<u64>) {
        self.seen(id, None, peak);
        if let Some(a) = self.running.remove(&id) {
            if let (true, Some(c)) = (succeeded, self.commands.get_mut(a.command)) {
                c.lengths.push((end - a.start).max(0.0));
            }
        }
    }

    /// The median start-up of `command`'s attempts so far.
    pub fn startup(&self, command: usize) -> Option<f64> {
        self.commands.get(command).and_then(|c| median(&c.startups))
    }

    /// Should the next run (`ask`) start now beside `ask.running`? `Some` with the
    /// figures when so.
    pub fn decide(&self, ask: &Ask) -> Option<Early> {
        let cur = self.running.get(&ask.running)?;
        if !ask.producing {
            return None;
        }
        let startup = self.startup(ask.next_command)?;
        let ends_in = ask.remaining_by_progress.or_else(|| {
            let len = median(&self.commands.get(cur.command)?.lengths)?;
            Some((len - (ask.now - cur.start)).max(0.0))
        })?;
        if ends_in > startup {
            return None;
        }
        self.fits(cur, ask).then_some(Early { ends_in, startup })
    }

    /// Does the next run fit beside what its slot holds now?
    fn fits(&self, cur: &Attempt, ask: &Ask) -> bool {
        let learnt = self.commands.get(ask.next_command).and_then(|c| c.peak);
        let need = match (learnt, ask.next_declared) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        match self
            .fit
            .rooms
            .get(cur.slot)
            .copied()
            .unwrap_or(Room::Unknown)
        {
            Room::Own(bytes) => match (need, cur.peak) {
                (Some(n), Some(p)) => n.saturating_add(p) <= bytes,
                _ => false,
            },
            Room::Shared { pool } => {
                let (Some(n), Some(&usable)) = (need, self.fit.pools.get(pool)) else {
                    return false;
                };
                let mut held: u64 = 0;
                for a in self.running.values() {
                    let same = matches!(
                        self.fit.rooms.get(a.slot),
                        Some(Room::Shared { pool: p }) if *p == pool
                    );
                    if !same {
                        continue;
                    }
                    // Past its start-up a run holds what it holds (its own peak);
                    // before, what its command's runs took (it may still be loading).
                    let its_need = self.commands.get(a.command).and_then(|c| c.peak);
                    let counted = match (a.startup_seen, a.peak) {
                        (true, Some(p)) => Some(p),
                        (_, p) => p.max(its_need),
                    };
                    match counted {
                        Some(b) => held = held.saturating_add(b),
                        None => return false,
                    }
                }
                held.saturating_add(n) <= usable
            }
            Room::Unknown => self.no_gpu.get(cur.slot).copied().unwrap_or(false),
        }
    }
}

/// Which command each run is, for its start-up and length figures: its program and the
/// first argument that is not an option (`python3 -u train.py --lr 0.1` is
/// `python3 train.py`), so the runs of one script share what is learnt.
pub fn commands_of<'a>(runs: impl Iterator<Item = &'a [String]>) -> (Vec<usize>, usize) {
    let mut ids: HashMap<Vec<&'a str>, usize> = HashMap::new();
    let mut out = Vec::new();
    for argv in runs {
        let mut key: Vec<&str> = argv.first().map(String::as_str).into_iter().collect();
        key.extend(
            argv.iter()
                .skip(1)
                .find(|a| !a.starts_with('-'))
                .map(String::as_str),
        );
        let n = ids.len();
        out.push(*ids.entry(key).or_insert(n));
    }
    (out, ids.len())
}

/// Attempts that shared a slot, for tests.
#[cfg(test)]
impl Overlap {
    fn shared(&self) -> std::collections::HashSet<AttemptId> {
        self.running
            .iter()
            .filter(|(_, a)| a.shared)
            .map(|(k, _)| *k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn own(n: usize, bytes: u64) -> Overlap {
        let fit = Fit {
            rooms: vec![Room::Own(bytes); n],
            pools: Vec::new(),
        };
        Overlap::new(fit, &vec![Some("MIG-x".to_string()); n], 1)
    }

    /// `n` slots sharing one GPU of `usable` bytes, attempts 1..=`running` on slots
    /// 0.. started at 0 s.
    fn shared_gpu(n: usize, usable: u64, running: u64) -> Overlap {
        let fit = Fit {
            rooms: vec![Room::Shared { pool: 0 }; n],
            pools: vec![usable],
        };
        let mut o = Overlap::new(fit, &vec![Some("GPU-x".to_string()); n], 1);
        for id in 1..=running {
            o.started(id, (id - 1) as usize, 0, 0.0);
        }
        o
    }

    fn ask(running: AttemptId, now: f64) -> Ask {
        Ask {
            running,
            remaining_by_progress: None,
            producing: true,
            next_command: 0,
            next_declared: None,
            now,
        }
    }

    #[test]
    fn a_first_wave_teaches_the_second_its_start_up_and_the_end_comes_from_progress() {
        let mut o = own(2, 10 * GIB);
        o.started(1, 0, 0, 0.0);
        o.started(2, 1, 0, 0.0);
        // Nothing known yet: no start-up figure.
        assert_eq!(
            o.decide(&Ask {
                remaining_by_progress: Some(1.0),
                ..ask(1, 1.0)
            }),
            None
        );
        // Their first lines at 10 s and 14 s: start-up 12 s (the median of two).
        o.seen(1, Some(10.0), Some(2 * GIB));
        o.seen(2, Some(14.0), Some(2 * GIB));
        assert_eq!(o.startup(0), Some(12.0));
        // Ends in 20 s by its progress: not yet; in 12 s: now.
        let a = |r| Ask {
            remaining_by_progress: Some(r),
            ..ask(1, 30.0)
        };
        assert_eq!(o.decide(&a(20.0)), None);
        assert_eq!(
            o.decide(&a(12.0)),
            Some(Early {
                ends_in: 12.0,
                startup: 12.0
            })
        );
        // Without progress lines and with no attempt finished, the end is unknown.
        assert_eq!(o.decide(&ask(1, 30.0)), None);
        // Not past its start-up: never.
        assert_eq!(
            o.decide(&Ask {
                producing: false,
                ..a(1.0)
            }),
            None
        );
    }

    #[test]
    fn without_progress_the_end_is_the_commands_median_length() {
        let mut o = own(1, 10 * GIB);
        o.started(1, 0, 0, 0.0);
        o.seen(1, Some(5.0), Some(GIB));
        o.ended(1, 40.0, true, Some(GIB));
        // A failed attempt's length does not count.
        o.started(2, 0, 0, 40.0);
        o.ended(2, 41.0, false, None);
        o.started(3, 0, 0, 41.0);
        o.seen(3, Some(46.0), Some(GIB));
        // Length 40 s, start-up 5 s: at 41 + 34 it ends in 6 s, at 41 + 35 in 5 s.
        assert_eq!(o.decide(&ask(3, 75.0)), None);
        assert_eq!(
            o.decide(&ask(3, 76.0)),
            Some(Early {
                ends_in: 5.0,
                startup: 5.0
            })
        );
        // Overdue: it ends "now".
        assert_eq!(o.decide(&ask(3, 200.0)).map(|e| e.ends_in), Some(0.0));
    }

    #[test]
    fn the_next_run_must_fit_beside_what_the_slot_holds() {
        // A slot of its own size (a MIG instance): running peak + the next's need.
        let mut o = own(1, 10 * GIB);
        o.started(1, 0, 0, 0.0);
        o.seen(1, Some(1.0), Some(6 * GIB));
        let a = Ask {
            remaining_by_progress: Some(0.5),
            ..ask(1, 10.0)
        };
        assert_eq!(o.decide(&a), None, "6 + 6 GiB in 10");
        let mut o = own(1, 12 * GIB);
        o.started(1, 0, 0, 0.0);
        o.seen(1, Some(1.0), Some(6 * GIB));
        assert!(o.decide(&a).is_some(), "6 + 6 GiB in 12");
        // A declared need larger than what was seen counts.
        assert_eq!(
            o.decide(&Ask {
                next_declared: Some(7 * GIB),
                ..a
            }),
            None
        );

        // A shared GPU: every running run's peak (or its command's, if larger) + the need.
        let mut o = shared_gpu(3, 20 * GIB, 3);
        o.seen(1, Some(1.0), Some(5 * GIB));
        o.seen(2, Some(1.0), Some(5 * GIB));
        // Attempt 3 has no reading yet: its command's 5 GiB stands for it.
        assert!(o.decide(&a).is_some(), "3 x 5 + 5 GiB in 20");
        let mut p = shared_gpu(3, 19 * GIB, 3);
        p.seen(1, Some(1.0), Some(5 * GIB));
        p.seen(2, Some(1.0), Some(5 * GIB));
        assert_eq!(p.decide(&a), None, "20 GiB in 19");

        // One run of the command once took 6 GiB (a cuDNN workspace): a run still
        // starting counts that, runs past their start-up count their own peak.
        let mut q = shared_gpu(4, 12 * GIB, 3);
        for id in 1..=3 {
            q.seen(id, Some(1.0), Some(GIB));
        }
        q.seen(3, None, Some(6 * GIB));
        q.ended(3, 2.0, true, Some(6 * GIB));
        // 1 + 1 held, 6 needed: fits in 12.
        assert!(q.decide(&a).is_some());
        // A fourth run still starting counts 6: 1 + 1 + 6 + 6 > 12.
        q.started(4, 3, 0, 2.0);
        assert_eq!(q.decide(&a), None);
    }

    #[test]
    fn unknown_memory_starts_nothing_early_unless_there_is_no_gpu() {
        let unknown = |devices: Vec<Option<String>>| {
            let fit = Fit {
                rooms: vec![Room::Unknown; devices.len()],
                pools: Vec::new(),
            };
            let mut o = Overlap::new(fit, &devices, 1);
            o.started(1, 0, 0, 0.0);
            o.seen(1, Some(1.0), None);
            o.decide(&Ask {
                remaining_by_progress: Some(0.5),
                ..ask(1, 10.0)
            })
        };
        assert_eq!(unknown(vec![Some("0".into())]), None, "a GPU without NVML");
        assert!(
            unknown(vec![None]).is_some(),
            "no GPU: no memory to overcommit"
        );
    }

    #[test]
    fn an_attempt_beside_another_is_shared_and_teaches_no_memory() {
        let mut o = own(1, 40 * GIB);
        o.started(1, 0, 0, 0.0);
        o.seen(1, Some(1.0), Some(2 * GIB));
        assert!(o.started(2, 0, 0, 5.0), "it started early");
        assert_eq!(o.shared(), std::collections::HashSet::from([1, 2]));
        // A MIG instance's figure while both ran is both runs': not learnt as one's.
        o.seen(2, Some(8.0), Some(30 * GIB));
        assert_eq!(o.commands[0].peak, Some(2 * GIB));
        assert_eq!(o.startup(0), Some(2.0), "start-ups 1 and 3: median 2");
    }

    #[test]
    fn a_command_is_its_program_and_script() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let runs = [
            argv("python3 -u train.py --lr 0.1"),
            argv("python3 train.py --lr 0.2"),
            argv("python3 eval.py --lr 0.1"),
            argv("./a.sh"),
            argv("./a.sh 3"),
            argv("python3 -m pkg.main"),
        ];
        let (ids, n) = commands_of(runs.iter().map(Vec::as_slice));
        assert_eq!(ids, vec![0, 0, 1, 2, 3, 4]);
        assert_eq!(n, 5);
    }
}
