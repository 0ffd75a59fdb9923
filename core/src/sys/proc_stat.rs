//! `/proc/PID/stat`, read by one rule: the command name (field 2) may hold spaces and
//! parentheses, so the fields are counted after its last `)`, each by its number in
//! proc(5).

/// A process's `/proc/PID/stat` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    line: String,
    /// Where the text after the command name's last `)` starts.
    after_comm: usize,
}

impl ProcStat {
    /// Process `pid`'s line; `None` when it does not run (or `/proc` does not say).
    pub fn of(pid: u32) -> Option<ProcStat> {
        ProcStat::parse(std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// A line as `/proc/PID/stat` gives it; `None` without a command name's `)`.
    pub fn parse(line: impl Into<String>) -> Option<ProcStat> {
        let line = line.into();
        let after_comm = line.rfind(')')? + 1;
        Some(ProcStat { line, after_comm })
    }

    /// Field `n` in proc(5)'s numbering (3, the state, is the first after the name).
    fn field(&self, n: usize) -> Option<&str> {
        self.line[self.after_comm..]
            .split_whitespace()
            .nth(n.checked_sub(3)?)
    }

    /// Field 2: the command name, without its parentheses (the kernel cuts it to 15
    /// bytes); `None` without an opening `(`.
    pub fn comm(&self) -> Option<&str> {
        let open = self.line.find('(')?;
        self.line.get(open + 1..self.after_comm - 1)
    }

    /// Field 3: the state (`R`, `S`, `Z` for a zombie, `X` for dead, …).
    pub fn state(&self) -> Option<char> {
        self.field(3)?.chars().next()
    }

    /// Has the process ended (a zombie, or dead)? Also true for a line without a state.
    pub fn ended(&self) -> bool {
        self.field(3).is_none_or(|s| s == "Z" || s == "X")
    }

    /// Field 4: the parent's pid.
    pub fn ppid(&self) -> Option<u32> {
        self.field(4)?.parse().ok()
    }

    /// Field 5: the process group.
    pub fn pgrp(&self) -> Option<u32> {
        self.field(5)?.parse().ok()
    }

    /// Field 6: the session.
    pub fn session(&self) -> Option<u32> {
        self.field(6)?.parse().ok()
    }

    /// Field 22 (`starttime`): when the process started, in clock ticks after boot.
    pub fn start_time(&self) -> Option<u64> {
        self.field(22)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_command_names_last_parenthesis() {
        let s = ProcStat::parse(
            "4242 (slurm d) (x) S 1 4243 4244 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 \
             987654 1000 10 18446744073709551615",
        )
        .unwrap();
        assert_eq!(
            (s.state(), s.ppid(), s.pgrp(), s.session(), s.start_time()),
            (Some('S'), Some(1), Some(4243), Some(4244), Some(987_654))
        );
        assert!(!s.ended());
        assert_eq!(s.comm(), Some("slurm d) (x"));
        assert_eq!(ProcStat::parse("12 x) S").unwrap().comm(), None);
        let short = ProcStat::parse("12 (x) Z 1").unwrap();
        assert_eq!(
            (short.state(), short.pgrp(), short.start_time()),
            (Some('Z'), None, None)
        );
        assert!(short.ended());
        assert!(
            ProcStat::parse("12 (x)").unwrap().ended(),
            "no state: ended"
        );
        assert!(ProcStat::parse("12 (x) X").unwrap().ended());
        assert_eq!(ProcStat::parse("no parenthesis"), None);
    }

    #[test]
    fn our_own_line() {
        let me = ProcStat::of(std::process::id()).unwrap();
        assert!(!me.ended());
        assert_eq!(me.ppid(), Some(std::os::unix::process::parent_id()));
        assert!(me.start_time().is_some_and(|t| t > 0));
        assert_eq!(ProcStat::of(0), None);
    }
}
