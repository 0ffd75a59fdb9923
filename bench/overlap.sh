#!/usr/bin/env bash
# Start-up overlap on a real GPU (issue 39): 14 runs of bench/train.py (each 30 s of
# training counted from its first step) under MPS, 7 at once (colloc starts and stops its
# own MPS daemon), with --no-overlap and with colloc's default overlap, alternately REPEAT
# times each, for each of WORKLOADS (train.py's presets: small is timm's ResNet-26, tiny a
# plain PyTorch CNN without timm's import). A warm-up pack comes first (a cold machine's
# first start-ups take twice as long). Prints per pack: makespan, work over makespan,
# steady aggregate, their ratio, runs started early, failed runs and attempts with CUDA
# out of memory.
#
#   COLLOC=target/release/colloc bash bench/overlap.sh [OUTDIR]
#
# OUTDIR (default bench/results/overlap): env.txt, runs-WORKLOAD.toml, colloc.toml, and
# per pack NAME/ (the report directory), NAME.console.txt; summary.txt (one line per
# pack) and the medians. About 7 minutes on an H100 with REPEAT=1 and two workloads.
# Env: PYTHON (python3), REPEAT (1), WORKLOADS ("small tiny"), VARIANTS ("no-overlap
# overlap"), RUNS (14), DURATION (30), JOBS (7), BATCH (128). Never changes a GPU setting.
set -euo pipefail

OUT=${1:-bench/results/overlap}
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-1}
WORKLOADS=${WORKLOADS:-small tiny}
VARIANTS=${VARIANTS:-no-overlap overlap}
RUNS=${RUNS:-14}
DURATION=${DURATION:-30}
JOBS=${JOBS:-7}
BATCH=${BATCH:-128}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
find_colloc
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

write_node_config "$OUT/colloc.toml"
export COLLOC_CONFIG=$OUT/colloc.toml
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

half=$(( (RUNS + 1) / 2 ))
seeds=$(seq -s ', ' 1 "$half")
# manifest WORKLOAD DURATION SEEDS LRS: a learning-rate x seed sweep of a train.py preset.
manifest() {
  cat <<EOF
# bench/overlap.sh: a learning-rate x seed sweep of train.py's $1 preset, $2 s each.
[defaults]
env = { PYTHONUNBUFFERED = "1" }

[[sweep]]
name = "$1-lr{lr}-s{seed}"
command = ["$PYTHON", "$HERE/train.py", "--workload", "$1", "--batch", "$BATCH", "--duration", "$2", "--lr", "{lr}", "--seed", "{seed}", "--epoch-size", "100000"]
grid = { lr = [$4], seed = [$3] }
EOF
}
for w in $WORKLOADS; do manifest "$w" "$DURATION" "$seeds" '"0.05", "0.1"' >"$OUT/runs-$w.toml"; done
manifest small 5 "$(seq -s ', ' 1 "$JOBS")" '"0.05"' >"$OUT/runs-warmup.toml"

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv,noheader || true
  "$PYTHON" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' || true
  "$COLLOC" --version
  nproc
} >"$OUT/env.txt" 2>&1
# A warm machine, as a sweep's second pack would find it: one short pack first.
"$COLLOC" run --mode mps -j "$JOBS" --no-overlap -q --report-dir "$OUT/warmup" -f "$OUT/runs-warmup.toml" \
  >>"$OUT/env.txt" 2>&1 || true
rm -rf "${OUT:?}/warmup"

summary() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))["summary"]
agg, st = s.get("aggregate_throughput"), s.get("steady_throughput")
ratio = agg / st if agg and st else float("nan")
print(f"{name}: makespan {s['makespan_s']:.1f} s, work over makespan {agg or 0:.0f}, "
      f"steady {st or 0:.0f} img/s, ratio {ratio:.3f}, started early {s.get('early_starts', 0)}, "
      f"succeeded {s['succeeded']}, failed {s['failed']}, oom attempts {s['oom_attempts']}, "
      f"at most {s['max_concurrent']} at once")
PY
}

: >"$OUT/summary.txt"
for w in $WORKLOADS; do
  for i in $(seq 1 "$REPEAT"); do
    for variant in $VARIANTS; do
      name=$w-$variant-$i
      flags=(--mode mps -j "$JOBS" --interval 1s --status-every 20s --report-dir "$OUT/$name" -f "$OUT/runs-$w.toml")
      [[ $variant == no-overlap ]] && flags+=(--no-overlap)
      rm -rf "${OUT:?}/$name"
      set +e
      COLLOC_LOG=info "$COLLOC" run "${flags[@]}" >"$OUT/$name.console.txt" 2>&1
      rc=$?
      set -e
      echo "$name: colloc exit $rc" >>"$OUT/summary.txt"
      summary "$name" "$OUT/$name/colloc-report.json" | tee -a "$OUT/summary.txt"
    done
  done
done
"$PYTHON" - "$OUT/summary.txt" <<'PY' | tee -a "$OUT/summary.txt"
import re, statistics, sys
by = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+-(?:no-overlap|overlap))-\d+: .*ratio ([0-9.]+)", line)
    if m:
        by.setdefault(m.group(1), []).append(float(m.group(2)))
for k, v in sorted(by.items()):
    print(f"median ratio {k}: {statistics.median(v):.3f} over {len(v)} packs {v}")
PY
