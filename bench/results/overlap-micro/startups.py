#!/usr/bin/env python3
"""Start-ups and the two-wave bound from colloc reports (bench/results/overlap-micro).

    python3 startups.py call*/*/colloc-report.json

Per pack: S per attempt = the attempt's `startup_s` (seconds from its start to its first
throughput sample; checked against the run's first `throughput.samples` time minus its
`start_s`), for the first wave (the 7 attempts started at 0 s) and the second; T per
attempt = end_s - start_s - startup_s (its time from the first throughput line to its
end). Bounds, with S1/S2 the medians of the waves and T the median of all 14:
with overlap 2T / (S1 + 2T) (nothing overlaps the first wave's start-up), without
overlap 2T / (S1 + S2 + 2T) (each wave's start-up on its own).
"""
import json
import statistics as st
import sys


def span(v):
    return f"{st.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"


for path in sys.argv[1:]:
    r = json.load(open(path))
    s = r["summary"]
    rows = []
    for run in r["runs"]:
        samples = (run.get("throughput") or {}).get("samples") or []
        for a in run["attempts"]:
            first = samples[0][0] - a["start_s"] if samples and len(run["attempts"]) == 1 else None
            if first is not None:
                assert abs(first - a["startup_s"]) < 0.01, (path, run["name"])
            rows.append((a["start_s"], a["startup_s"], a["end_s"] - a["start_s"] - a["startup_s"], a.get("started_early", False)))
    w1 = [x for x in rows if x[0] < 1.0]
    w2 = [x for x in rows if x[0] >= 1.0]
    s1, s2 = st.median(x[1] for x in w1), st.median(x[1] for x in w2)
    t = st.median(x[2] for x in rows)
    ratio = s["aggregate_throughput"] / s["steady_throughput"]
    print(
        f"{path}: makespan {s['makespan_s']:.1f} s, work over makespan {s['aggregate_throughput']:.0f}, "
        f"steady {s['steady_throughput']:.0f} img/s, ratio {ratio:.3f}; "
        f"S wave 1 {span([x[1] for x in w1])} s ({len(w1)}), S wave 2 {span([x[1] for x in w2])} s "
        f"({len(w2)}, {sum(x[3] for x in w2)} early); T {span([x[2] for x in rows])} s; "
        f"bound with overlap 2T/(S1+2T) {2 * t / (s1 + 2 * t):.3f}, "
        f"without 2T/(S1+S2+2T) {2 * t / (s1 + s2 + 2 * t):.3f}"
    )
