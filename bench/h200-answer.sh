#!/usr/bin/env bash
# Issue 27's check on the lent H200: does `colloc bench` give the same answer twice?
#
#   bash bench/h200-answer.sh COLLOC_BINARY [OUTDIR]       # one call (OUTDIR: $OUT)
#   bash bench/h200-answer.sh --compare RUN_1 RUN_2         # the two calls side by side
#
# One call runs exactly the issue's command through bench/stability.sh (WORKLOADS=small):
# ResNet-26 at 32x32, batch 128 (bench/train.py --workload small), under
#
#   colloc bench --modes mps --counts auto --repeat 2 --budget ${BUDGET}s \
#     --warmup 2s --duration 4s --startup-timeout 90s \
#     --reference 'train.py --workload small ... --batch 2048' -- train.py ... --batch 128
#
# and prints the answer: the recommendation line, the cells that stayed wide and why the
# answer does not rest on them, every cell's fraction of the reference, and one line
#
#   ANSWER <configuration> fraction_of_reference <f> vs_solo <r> wall_s <s>
#
# Run it twice, each in a device call of its own (a fresh machine each time), then
# `--compare` the two OUTDIRs here: the check passes when both name the same
# configuration and their fractions of the reference agree within 5 % (max/min - 1).
#
# Time: the whole call must end within 540 s. BUDGET defaults to 470 s: on a fresh H200
# the warm-up run took 48.6 s and each configuration 21-30 s (bench/results/stability-4;
# warm, 16-28 s: stability-5, whose full search with a 370 s budget took 323 s), so the
# full search (solo 3 times, the reference twice, mps 2, 4, 7 and 10 and mps:7 twice
# each: 15 measurements) needs about 48.6 + 15 x 25 = 424 s cold, leaving ~45 s for the
# wide cells' extra measurements; where it is tighter, the planner drops mps 10 (lower
# than mps 7 on the H200) before mps:7. colloc starts a measurement only if it fits the
# budget with the closing solo run kept, so it ends near 470 s. stability.sh caps colloc
# at BUDGET + 20 s (SIGTERM, SIGKILL 15 s later; colloc reports what it measured) and
# its setup and MPS cleanup take ~10 s (up to ~20 s after a kill): typically ~480 s, at
# worst 470 + 20 + 15 + 20 = 525 s. (The issue's two calls used --budget 500s and the
# old planner, which skipped mps:7.)
# OUTDIR gets stability.sh's files (colloc.toml, env.txt, timing.txt, stability.log,
# mps-left.txt, small-b128/ with bench.json, bench.csv, bench-measurements.csv,
# table.txt, stderr.txt, command.txt, logs/) and answer.txt (what this script prints).
# Env: BUDGET (470), and stability.sh's (PYTHON, WARMUP, DURATION, MPS_CONTROL, TRAIN).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

summary() { # RUN_DIR: print the answer of one call
  python3 - "$1/small-b128/bench.json" "$1/timing.txt" <<'PY'
import json, sys
path, timing = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
except (OSError, ValueError) as e:
    sys.exit(f"h200-answer: no report: {path}: {e}")
def name(mode, n):
    return mode if mode in ("solo", "reference") or mode.startswith("mps:") else f"{mode} {n}"
def pm(v, u, d):
    return "-" if v is None else (f"{v:.{d}f}" if u is None else f"{v:.{d}f} ± {u:.{d}f}")
wall = None
try:
    for line in open(timing):
        p = line.split()
        if p and p[0] == "small-b128":
            wall = p[4]
except OSError:
    pass
print(f"host: {j['host'].get('cpu_model')}; gpu: {(j.get('gpu') or {}).get('name')}; budget {j.get('budget_s')} s; colloc took {j['wall_s']:.0f} s; script wall {wall} s")
print(f"{'cell':<10} {'runs':>4} {'aggregate img/s':>20} {'fraction of ref':>16} {'vs solo':>14}")
for r in j["results"]:
    if r["status"] != "measured":
        print(f"{name(r['mode'], r['n']):<10} {r['status']}: {r.get('reason')}")
        continue
    print(f"{name(r['mode'], r['n']):<10} {r['repeats']:>4} {pm(r['aggregate'], r['aggregate_u'], 1):>20} "
          f"{pm(r.get('vs_reference'), r.get('vs_reference_u'), 3):>16} {pm(r.get('vs_solo'), r.get('vs_solo_u'), 2):>14}")
for n in j.get("notes", []):
    print(f"note: {n}")
for s in j.get("skipped", []):
    print(f"skipped: {s}")
rec = j.get("recommendation")
if not rec:
    print("ANSWER none (no recommendation)")
    sys.exit(0)
print(rec["text"])
for w in rec.get("wide", []):
    print(w)
f = rec.get("vs_reference")
print(f"ANSWER {name(rec['mode'], rec['n']).replace(' ', '-')} pays {str(rec['pays']).lower()} "
      f"fraction_of_reference {'-' if f is None else f'{f:.4f}'} vs_solo {rec['vs_solo']:.3f} wall_s {wall}")
PY
}

if [[ ${1:-} == --compare ]]; then
  A=${2:?usage: h200-answer.sh --compare RUN_1 RUN_2}
  B=${3:?usage: h200-answer.sh --compare RUN_1 RUN_2}
  for r in "$A" "$B"; do echo "== $r"; summary "$r"; done
  python3 - "$A/small-b128/bench.json" "$B/small-b128/bench.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.get("recommendation") or {}, b.get("recommendation") or {}
ca, cb = (ra.get("mode"), ra.get("n")), (rb.get("mode"), rb.get("n"))
fa, fb = ra.get("vs_reference"), rb.get("vs_reference")
same = ca == cb and None not in ca
apart = max(fa, fb) / min(fa, fb) - 1 if fa and fb else float("inf")
print(f"configuration: {ca[0]} {ca[1]} vs {cb[0]} {cb[1]}: {'SAME' if same else 'DIFFERENT'}")
print(f"fraction of the reference: {fa} vs {fb}: {apart:.1%} apart (limit 5 %)")
ok = same and apart <= 0.05
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
  exit
fi

COLLOC=${1:?usage: bash bench/h200-answer.sh COLLOC_BINARY [OUTDIR]}
DIR=${2:-${OUT:?no OUTDIR and no \$OUT}}
BUDGET=${BUDGET:-470}
if ! [[ -x $COLLOC ]]; then
  echo "h200-answer.sh: $COLLOC is not an executable colloc (cargo build --release -p colloc; carry target/release/colloc)" >&2
  exit 2
fi
COLLOC=$(cd "$(dirname "$COLLOC")" && pwd)/$(basename "$COLLOC")
mkdir -p "$DIR"
rc=0
WORKLOADS=small SMALL_BUDGET=$BUDGET SMALL_REF_BATCH=2048 MODES=mps COLLOC=$COLLOC \
  bash "$HERE/stability.sh" "$DIR" >"$DIR/stability.out" 2>&1 || rc=$?
summary "$DIR" | tee "$DIR/answer.txt"
echo "h200-answer.sh: stability.sh exit $rc after $SECONDS s; outputs in $DIR"
exit "$rc"
