//! An attempt's output as it is read: into its log, its scanner and the live view.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::Clock;
use super::{AttemptId, Launcher, Running, CR_LINE_EVERY, MAX_LINE};

pub(super) fn note_in_log(r: &mut Running, msg: &str) {
    if let Some(f) = r.log.as_mut() {
        let _ = writeln!(f, "colloc: {msg}");
    }
}

/// Read what the attempt printed: into its log, the scanner and the live view.
pub(super) fn read_output(r: &mut Running, live_view: bool, clock: &Clock) {
    let mut buf = [0u8; 64 * 1024];
    let mut budget = 16; // at most 1 MiB per round, so other runs get their turn
    loop {
        let Some(out) = r.out.as_mut() else { return };
        let n = match out.read(&mut buf) {
            Ok(0) => {
                r.out = None;
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                r.out = None;
                break;
            }
        };
        if let Some(f) = r.log.as_mut() {
            if let Err(e) = f.write_all(&buf[..n]) {
                let msg = format!(
                    "cannot write its log {} any more: {e}",
                    r.job.log.path.display()
                );
                log::warn!("{}: {msg}", r.job.label);
                r.log_error = Some(msg);
                r.log = None;
            }
        }
        r.pending.extend_from_slice(&buf[..n]);
        let mut start = 0;
        let pending = std::mem::take(&mut r.pending);
        while let Some(off) = pending[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + off;
            let cr = pending[end] == b'\r';
            line(r, &pending[start..end], cr, live_view, clock);
            start = end + 1;
        }
        r.pending = pending[start..].to_vec();
        if r.pending.len() > MAX_LINE {
            let long = std::mem::take(&mut r.pending);
            line(r, &long, false, live_view, clock);
        }
        budget -= 1;
        if budget == 0 {
            break;
        }
    }
}

pub(super) fn line(r: &mut Running, raw: &[u8], cr: bool, live_view: bool, clock: &Clock) {
    if raw.is_empty() {
        return;
    }
    let raw_text = String::from_utf8_lossy(raw);
    let text = colloc_results::text::plain(&raw_text, false);
    if text.trim().is_empty() {
        return;
    }
    r.seen.lines += 1;
    let scanner = Arc::clone(&r.job.scanner);
    let facts = scanner.scan(&text);
    let t = clock.now();
    if let Some((v, unit)) = facts.throughput {
        r.seen.series.push(t, v, unit);
    }
    if facts.epoch.is_some() || facts.epoch_time.is_some() {
        r.seen.epochs.see(facts.epoch, facts.epoch_time, t);
    }
    if let Some(p) = facts.progress {
        r.seen.advance.see(p, t);
    }
    r.seen.oom |= facts.oom;
    for (i, v) in facts.metrics {
        if let (Some(m), Some(um)) = (r.seen.metrics.get_mut(i), scanner.metrics.get(i)) {
            m.last = Some(v);
            m.best = Some(m.best.map_or(v, |b| um.best.better(b, v)));
            m.count += 1;
        }
    }
    if live_view {
        if cr {
            let now = Instant::now();
            if r.last_cr
                .is_some_and(|l| now.duration_since(l) < CR_LINE_EVERY)
            {
                return;
            }
            r.last_cr = Some(now);
        }
        let shown = if colloc_results::text::colour_ok() {
            colloc_results::text::plain(&raw_text, true)
        } else {
            std::borrow::Cow::Borrowed(text.as_ref())
        };
        let mut out = io::stdout().lock();
        let _ = out
            .write_all(b"[")
            .and_then(|_| out.write_all(colloc_results::text::escape(&r.job.label).as_bytes()))
            .and_then(|_| out.write_all(b"] "))
            .and_then(|_| out.write_all(shown.as_bytes()))
            .and_then(|_| out.write_all(b"\n"));
    }
}

/// Tell the launcher a new throughput sample of `r`, at most once a second.
pub(super) fn tell_rate(launcher: &mut dyn Launcher, id: AttemptId, r: &mut Running) {
    let stats = &r.seen.series.stats;
    let (Some(v), n) = (stats.last, stats.count) else {
        return;
    };
    let now = Instant::now();
    if r.rate_told
        .is_some_and(|(t, told)| told == n || now < t + Duration::from_secs(1))
    {
        return;
    }
    r.rate_told = Some((now, n));
    launcher.tell_rate(r.lane, id, v, r.seen.series.unit.as_deref());
}
