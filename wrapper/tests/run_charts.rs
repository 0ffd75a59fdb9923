//! The PNG charts of a run report (issue 12): their text is drawn with the font inside
//! colloc, so it shows on a node with no fonts at all (checked with every system font
//! directory hidden behind an empty tmpfs in a private mount namespace: needs root), and
//! one run's lone outlier does not squash the others' lines.

mod run_support;

use std::path::Path;

use run_support::{fixture, is_root, succeeded, Env};

struct Image {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Image {
    fn open(p: &Path) -> Image {
        let decoder = png::Decoder::new(std::fs::File::open(p).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb, "{}", p.display());
        buf.truncate(info.buffer_size());
        Image {
            w: info.width as usize,
            h: info.height as usize,
            px: buf,
        }
    }

    fn at(&self, x: usize, y: usize) -> (u8, u8, u8) {
        let i = (y * self.w + x) * 3;
        (self.px[i], self.px[i + 1], self.px[i + 2])
    }

    /// Pixels in the box that match `f`.
    fn count(
        &self,
        x: std::ops::Range<usize>,
        y: std::ops::Range<usize>,
        f: impl Fn((u8, u8, u8)) -> bool,
    ) -> usize {
        let mut n = 0;
        for yy in y.start..y.end.min(self.h) {
            for xx in x.start..x.end.min(self.w) {
                if f(self.at(xx, yy)) {
                    n += 1;
                }
            }
        }
        n
    }
}

fn dark(p: (u8, u8, u8)) -> bool {
    p.0 < 90 && p.1 < 90 && p.2 < 90
}

fn coloured(p: (u8, u8, u8)) -> bool {
    let max = p.0.max(p.1).max(p.2);
    let min = p.0.min(p.1).min(p.2);
    max - min >= 80
}

#[test]
fn charts_have_text_without_system_fonts_and_a_lone_outlier_does_not_squash_the_rest() {
    if !is_root()
        || std::process::Command::new("unshare")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipped: needs root and unshare");
        return;
    }
    let env = Env::new();
    // Nine runs at about 100 img/s, and one that printed 11,000 once and crashed.
    let m = env.manifest(
        "[[sweep]]\nname = 'r{i}'\ncommand = ['sh', '-c', 'j=0; while [ $j -lt 12 ]; do echo img/s=$((95 + I)); sleep 0.05; j=$((j+1)); done']\nenv = { I = '{i}' }\ngrid = { i = [1, 2, 3, 4, 5, 6, 7, 8, 9] }\n[[run]]\nname = 'crash'\ncommand = ['sh', '-c', 'echo img/s=11000; exit 1']\n",
    );
    let out = env
        .colloc()
        .args(["-j", "10", "-q", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let dir = env.report_dir();
    for png in [
        "colloc-timeline.png",
        "colloc-runs.png",
        "colloc-throughput.png",
    ] {
        std::fs::remove_file(dir.join(png)).unwrap();
    }
    let colloc = assert_cmd::cargo::cargo_bin("colloc");
    let fonts = env.path().join("fonts-seen");
    let script = format!(
        "for d in /usr/share/fonts /usr/local/share/fonts; do [ -d $d ] && mount -t tmpfs tmpfs $d; done; find /usr/share/fonts /usr/local/share/fonts -type f 2>/dev/null | wc -l > {fonts}; exec {colloc} report -q {dir}",
        fonts = fonts.display(),
        colloc = colloc.display(),
        dir = dir.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    succeeded(&out);
    assert_eq!(
        std::fs::read_to_string(&fonts).unwrap().trim(),
        "0",
        "system fonts were still visible"
    );
    for png in [
        "colloc-timeline.png",
        "colloc-runs.png",
        "colloc-throughput.png",
    ] {
        let img = Image::open(&dir.join(png));
        // The title is the only thing in the top band of the plot side.
        let ink = img.count(0..img.w - 240, 0..36, dark);
        assert!(ink > 150, "{png}: no title text drawn ({ink} dark pixels)");
        // The legend beside the plot has its text too.
        let legend = img.count(img.w - 230..img.w, 0..200, dark);
        assert!(legend > 100, "{png}: no legend text ({legend} dark pixels)");
    }
    // Throughput over time, lower panel (each run): the nine runs at ~100 are drawn in
    // the upper part of the panel, not squashed to its bottom by the 11,000.
    let img = Image::open(&dir.join("colloc-throughput.png"));
    let (top, bottom) = (372, 848);
    let band = (top + (bottom - top) / 12)..(top + (bottom - top) * 6 / 10);
    let lines = img.count(100..940, band.clone(), coloured);
    assert!(
        lines > 300,
        "run lines in rows {band:?}: {lines} coloured pixels (axis set by the outlier?)"
    );
}

/// `--solo-baseline` measures runs alone before the pack starts: the timeline shows
/// those calibrations as bars of their own colour on their slot, and the throughput
/// chart shades their span (no run of the pack ran then), instead of an unexplained gap.
#[test]
fn solo_calibrations_are_drawn_where_they_ran() {
    let env = Env::new();
    let rate = fixture("rate.py");
    let m = env.manifest(&format!(
        "[defaults]\nenv = {{ RATE_DIR = '{}', BASE = '100', FACTORS = '1,0.5', DURATION = '2' }}\n[[run]]\nname = 'a'\ncommand = ['python3', '{rate}', 'a']\n[[run]]\nname = 'b'\ncommand = ['python3', '{rate}', 'b']\n",
        env.mark().display()
    ));
    let out = env
        .colloc()
        .args([
            "-j",
            "2",
            "-q",
            "--solo-baseline",
            "--solo-warmup",
            "0s",
            "-f",
        ])
        .arg(&m)
        .output()
        .unwrap();
    succeeded(&out);
    let rep = env.report();
    assert_eq!(rep["calibrations"].as_array().unwrap().len(), 2, "{rep}");
    let dir = env.report_dir();
    let calibration = |p: (u8, u8, u8)| p == (158, 202, 225);
    let band = |p: (u8, u8, u8)| p == (226, 238, 246);
    // Timeline: slot 0's row holds the two calibrations, in the left part of the time
    // axis (about 4 s of some 8 s); the legend names them.
    let img = Image::open(&dir.join("colloc-timeline.png"));
    let plot = img.w - 230;
    let left = img.count(0..plot / 2, 0..img.h, calibration);
    let right = img.count(plot * 3 / 4..plot, 0..img.h, calibration);
    assert!(left > 2000, "calibration bars: {left} pixels");
    assert_eq!(right, 0, "calibration colour late in the timeline");
    assert!(
        img.count(plot..img.w, 0..img.h, calibration) > 50,
        "no legend key"
    );
    // Throughput over time: the calibrations' span shaded in both panels.
    let img = Image::open(&dir.join("colloc-throughput.png"));
    let top = img.count(0..plot, 40..340, band);
    let bottom = img.count(0..plot, 400..840, band);
    assert!(
        top > 5000 && bottom > 5000,
        "bands: {top} and {bottom} pixels"
    );
    assert_eq!(img.count(plot * 3 / 4..plot, 0..img.h, band), 0);
}

/// Add `by` seconds to every time of an event (its `ts`, its samples' times, its
/// stats' first and last) in a JSON Lines event log.
fn shift_times(events: &str, by: f64) -> String {
    fn add(v: &mut serde_json::Value, by: f64) {
        if let Some(t) = v.as_f64() {
            *v = serde_json::json!(t + by);
        }
    }
    events
        .lines()
        .map(|line| {
            let mut ev: serde_json::Value = serde_json::from_str(line).unwrap();
            add(&mut ev["ts"], by);
            if let Some(samples) = ev.get_mut("samples").and_then(|s| s.as_array_mut()) {
                for s in samples {
                    add(&mut s[0], by);
                }
            }
            if let Some(stats) = ev.get_mut("stats").filter(|s| s.is_object()) {
                add(&mut stats["first_t"], by);
                add(&mut stats["last_t"], by);
            }
            format!("{ev}\n")
        })
        .collect()
}

/// A pack resumed after an hour back in the queue (issue 39): the report says when each
/// session ran, the gap before the second and each session's own figures; the charts
/// draw the hour as a narrow grey gap, so the runs of both sessions keep the width.
#[test]
fn a_resumed_pack_draws_its_hour_in_the_queue_as_a_short_gap() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/packs/two-sessions");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("pack");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::fs::copy(
        fixture.join("events/1.main.jsonl"),
        dir.join("events/1.main.jsonl"),
    )
    .unwrap();
    let second = std::fs::read_to_string(fixture.join("events/2.main.jsonl")).unwrap();
    std::fs::write(
        dir.join("events/2.main.jsonl"),
        shift_times(&second, 3600.0),
    )
    .unwrap();
    let colloc = assert_cmd::cargo::cargo_bin("colloc");
    let out = std::process::Command::new(&colloc)
        .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("session 1: runs from 0.0 s"), "{text}");
    assert!(
        text.contains("session 2: runs from 36") && text.contains("(resumed after a gap of 1h "),
        "{text}"
    );
    // The makespan still leaves the hour out (2.8 s over both sessions, as recorded).
    assert!(text.contains("makespan 2.8 s (over 2 sessions)"), "{text}");
    let json = std::process::Command::new(&colloc)
        .env("COLLOC_CONFIG", "/nonexistent/colloc.toml")
        .args(["report", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let rep: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let s2 = &rep["sessions"][1];
    assert!(s2["start_s"].as_f64().unwrap() > 3600.0, "{s2}");
    assert!(
        s2["aggregate_throughput"].is_number() || s2["makespan_s"].as_f64() == Some(0.0),
        "{s2}"
    );
    let gap = |p: (u8, u8, u8)| p == (232, 232, 232);
    for png in ["colloc-timeline.png", "colloc-throughput.png"] {
        let img = Image::open(&dir.join(png));
        let plot = img.w - 230;
        // The columns of the plot that show the gap: some, and at most a tenth of it
        // (drawn to scale the hour would take all but a few pixels of the width).
        let columns = (0..plot)
            .filter(|&x| img.count(x..x + 1, 0..img.h, gap) > 20)
            .count();
        assert!(
            columns > 3 && columns < plot / 10,
            "{png}: the gap takes {columns} of {plot} columns"
        );
        // Runs are drawn on both sides of it.
        let first = (0..plot)
            .find(|&x| img.count(x..x + 1, 0..img.h, gap) > 20)
            .unwrap();
        let ran = |xs: std::ops::Range<usize>| img.count(xs, 40..img.h - 40, coloured);
        assert!(ran(0..first) > 200, "{png}: nothing drawn before the gap");
        assert!(
            ran(first + columns..plot) > 50,
            "{png}: nothing drawn after the gap"
        );
    }
}
