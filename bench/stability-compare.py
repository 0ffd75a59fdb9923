#!/usr/bin/env python3
"""Compare two runs of bench/stability.sh (two device calls) and print the check of issue 15.

    python3 bench/stability-compare.py RUN_A RUN_B [--earlier bench/results]

For each workload folder found in both (small-b128, medium-b128): the host of each call,
how long each took, solo and the reference with their spread, the recommendation of each
call and whether the two agree (recommended ratio to solo within 5 %; chosen N the same
or one step of --counts auto apart), the same for the fraction of the reference, every
configuration measured in both, and the same workload in the earlier study
(EARLIER/<workload>/bench.json, schema 2: solo measured once, first, counts 1,2,3,7).

Exit 0 when every workload passes both checks, 1 when one fails, 2 on bad input. The
same checks with the fraction of the reference in place of the ratio to solo are
printed too (a solo run bound by the host moves with the host; the reference does
not), but do not decide the exit status.
"""
import argparse
import json
import os
import sys

# The counts of `colloc bench --counts auto` (1 is solo), as steps.
STEPS = [1, 2, 4, 7, 10, 14, 20, 28, 40, 48, 56, 64]
RATIO_TOLERANCE = 0.05


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"stability-compare: cannot read {path}: {e}") from None
    if not isinstance(j, dict) or "results" not in j:
        raise SystemExit(f"stability-compare: {path} is not a colloc bench report")
    return j


def timing(run_dir):
    """{workload: (exit, wall_s)} from timing.txt."""
    out = {}
    try:
        with open(os.path.join(run_dir, "timing.txt")) as f:
            for line in f:
                p = line.split()
                if len(p) >= 5 and p[1] == "exit" and p[3] == "wall_s":
                    out[p[0]] = (int(p[2]), float(p[4]))
    except OSError:
        pass
    return out


def row(j, mode, n):
    for r in j["results"]:
        if r.get("mode") == mode and r.get("n") == n and r.get("status") == "measured":
            return r
    return None


def pm(v, u, d=1):
    if v is None:
        return "-"
    return f"{v:,.{d}f}" + (f" ± {u:,.{d}f}" if u is not None else "")


def spread_pct(r):
    lo, hi, m = r.get("aggregate_min"), r.get("aggregate_max"), r.get("aggregate")
    if lo is None or hi is None or not m or r.get("repeats", 1) < 2:
        return ""
    return f" ({r.get('repeats')} runs, min-max {100 * (hi - lo) / m:.1f} %)"


def host(j):
    h = j.get("host") or {}
    g = j.get("gpu") or {}
    return (
        f"{h.get('hostname', '?')}: {h.get('cpu_model', '?')}, {h.get('cpus_usable', '?')} CPUs, "
        f"{g.get('name', h.get('gpu', '?'))}, driver {h.get('driver') or g.get('driver', '?')}"
    )


def step_of(n):
    """Index of n in STEPS (between two steps: the lower one + 0.5)."""
    for i, s in enumerate(STEPS):
        if n == s:
            return float(i)
        if n < s:
            return i - 0.5
    return float(len(STEPS))


def rec(j):
    r = j.get("recommendation") or {}
    return r


def earlier_line(path):
    if not os.path.exists(path):
        return f"  earlier study: no {path}"
    e = load(path)
    solo = e.get("solo")
    r = rec(e)
    best = (
        f"{r.get('mode')} {r.get('n')} at {r.get('vs_solo', 0):.2f}x solo"
        f"{'' if r.get('pays') else ' (does not pay)'}"
        if r
        else "none"
    )
    cells = []
    for res in e["results"]:
        if res.get("status") == "measured" and res.get("mode") not in ("solo",):
            cells.append(f"{res['mode']} {res['n']}: {res.get('vs_solo', 0):.2f}x")
    return (
        f"  earlier study ({path}, schema {e.get('schema')}, solo measured once, first): "
        f"solo {pm(solo, None)}; recommended {best}\n"
        f"    {'; '.join(cells)}"
    )


def compare(name, a, b, ta, tb, earlier):
    ok = True
    out = [f"== {name}"]
    out.append(f"  call A: {host(a)}; took {ta[1]:.0f} s (exit {ta[0]})" if ta else f"  call A: {host(a)}")
    out.append(f"  call B: {host(b)}; took {tb[1]:.0f} s (exit {tb[0]})" if tb else f"  call B: {host(b)}")
    same_host = (a.get("host") or {}).get("cpu_model") == (b.get("host") or {}).get("cpu_model") and (
        a.get("host") or {}
    ).get("hostname") == (b.get("host") or {}).get("hostname")
    if not same_host:
        out.append("  NOTE: different hosts: compare the fractions of the reference, not the ratios to solo")
    unit = a.get("unit", "")
    for label, mode in (("solo", "solo"), ("reference", "reference")):
        ra, rb = row(a, mode, 1), row(b, mode, 1)
        if ra and rb:
            change = rb["aggregate"] / ra["aggregate"] - 1
            out.append(
                f"  {label}: A {pm(ra['aggregate'], ra.get('aggregate_u'))}{spread_pct(ra)}; "
                f"B {pm(rb['aggregate'], rb.get('aggregate_u'))}{spread_pct(rb)} {unit}; B/A {change:+.1%}"
            )
    pa, pb = rec(a), rec(b)
    if not pa or not pb:
        out.append("  FAIL: a call has no recommendation")
        return False, False, out
    for tag, p in (("A", pa), ("B", pb)):
        vr = p.get("vs_reference")
        out.append(
            f"  recommendation {tag}: {p.get('mode')} N={p.get('n')}: "
            f"{pm(p.get('vs_solo'), p.get('vs_solo_u'), 2)}x solo"
            f"{'' if vr is None else f', {vr:.2f} of the reference'}; verdict {p.get('verdict')}, "
            f"margin {p.get('margin', 0):+.2f}"
        )
    ra, rb = pa["vs_solo"], pb["vs_solo"]
    diff = abs(ra - rb) / ((ra + rb) / 2)
    verdict = "PASS" if diff <= RATIO_TOLERANCE else "FAIL"
    ok &= verdict == "PASS"
    out.append(f"  {verdict}: recommended ratio to solo {ra:.2f}x vs {rb:.2f}x: {diff:.1%} apart (limit {RATIO_TOLERANCE:.0%})")
    fa, fb = pa.get("vs_reference"), pb.get("vs_reference")
    if fa and fb:
        # The same check on the yardstick that does not move with the host (issue 15):
        # reported beside the ratio to solo, not instead of it.
        fd = abs(fa - fb) / ((fa + fb) / 2)
        ref_ok = fd <= RATIO_TOLERANCE
        out.append(
            f"  {'PASS' if ref_ok else 'FAIL'} (against the reference): recommended fraction of the reference "
            f"{fa:.3f} vs {fb:.3f}: {fd:.1%} apart (limit {RATIO_TOLERANCE:.0%})"
        )
    else:
        ref_ok = False
    ga, gb = pa.get("aggregate"), pb.get("aggregate")
    if ga and gb:
        out.append(f"  recommended aggregate {ga:,.1f} vs {gb:,.1f} {a.get('unit', '')}: B/A {gb / ga - 1:+.1%}")
    sa, sb = step_of(pa["n"]), step_of(pb["n"])
    same_mode = pa.get("mode") == pb.get("mode")
    n_ok = abs(sa - sb) <= 1 and same_mode
    ok &= n_ok
    out.append(
        f"  {'PASS' if n_ok else 'FAIL'}: chosen {pa.get('mode')} N={pa['n']} vs {pb.get('mode')} N={pb['n']}: "
        + ("same" if sa == sb and same_mode else f"{abs(sa - sb):g} step(s) of --counts auto apart" if same_mode else "different modes")
    )
    # Every configuration measured in both.
    out.append(f"  {'config':<12} {'A ' + unit:>22} {'B ' + unit:>22} {'B/A':>7} {'A vs solo':>14} {'B vs solo':>14} {'A vs ref':>9} {'B vs ref':>9}")
    for r in a["results"]:
        if r.get("status") != "measured":
            continue
        o = row(b, r["mode"], r["n"])
        if not o:
            continue
        name_c = r["mode"] if r["mode"] in ("solo", "reference") or ":" in r["mode"] else f"{r['mode']} {r['n']}"
        f = lambda x, k: "-" if x.get(k) is None else f"{x[k]:.2f}"
        out.append(
            f"  {name_c:<12} {pm(r['aggregate'], r.get('aggregate_u')):>22} {pm(o['aggregate'], o.get('aggregate_u')):>22} "
            f"{o['aggregate'] / r['aggregate'] - 1:>+7.1%} {pm(r.get('vs_solo'), r.get('vs_solo_u'), 2):>14} "
            f"{pm(o.get('vs_solo'), o.get('vs_solo_u'), 2):>14} {f(r, 'vs_reference'):>9} {f(o, 'vs_reference'):>9}"
        )
    for tag, j in (("A", a), ("B", b)):
        if j.get("skipped"):
            out.append(f"  skipped by the budget in {tag}: " + "; ".join(s.split(": ")[0] for s in j["skipped"]))
        for n in j.get("notes", []):
            if "stopped" in n or "baseline" in n or "cut by the budget" in n:
                out.append(f"  note {tag}: {n}")
        if j.get("mps_limit"):
            out.append(f"  mps limit {tag}: {j['mps_limit'].get('text')}")
    if earlier:
        out.append(earlier_line(os.path.join(earlier, name, "bench.json")))
    return ok, ref_ok and n_ok, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--earlier", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="folder of the earlier study (default: bench/results)")
    args = ap.parse_args()
    for d in (args.run_a, args.run_b):
        if not os.path.isdir(d):
            print(f"stability-compare: {d} is not a folder", file=sys.stderr)
            return 2
    names = [
        n
        for n in sorted(os.listdir(args.run_a))
        if os.path.exists(os.path.join(args.run_a, n, "bench.json"))
        and os.path.exists(os.path.join(args.run_b, n, "bench.json"))
    ]
    if not names:
        print("stability-compare: no workload with a bench.json in both folders", file=sys.stderr)
        return 2
    ta, tb = timing(args.run_a), timing(args.run_b)
    all_ok = True
    all_ref_ok = True
    for n in names:
        a = load(os.path.join(args.run_a, n, "bench.json"))
        b = load(os.path.join(args.run_b, n, "bench.json"))
        ok, ref_ok, lines = compare(n, a, b, ta.get(n), tb.get(n), args.earlier)
        all_ok &= ok
        all_ref_ok &= ref_ok
        print("\n".join(lines))
    print(f"overall: {'PASS' if all_ok else 'FAIL'} ({len(names)} workload(s))")
    print(
        f"overall against the reference (fraction of the reference, chosen N): "
        f"{'PASS' if all_ref_ok else 'FAIL'} (not the exit status)"
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
