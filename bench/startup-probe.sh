#!/usr/bin/env bash
# Start-up per phase on a real GPU (issue 39): N copies of bench/train.py started at once
# under an MPS daemon of this script's own (private pipe and log directories; stopped at
# the end), each with --startup-trace, so each prints seconds from its process's start to
# the import of torch, the CUDA context, the model, the data, the first step and the first
# throughput line. Prints one line per copy and the median of each phase per case.
#
#   bash bench/startup-probe.sh [OUTFILE]      (default: stdout only)
#
# Env: PYTHON (python3), CASES ("micro:7 micro:1 tiny:1 micro:7 tiny:7": WORKLOAD:COPIES
# or WORKLOAD:COPIES:ARG,ARG... (more train.py arguments, e.g. micro:7:--optim=torch), in
# order; the first case also pays the MPS server's start), BATCH (128), DURATION (2).
# Never changes a GPU setting.
set -uo pipefail

PYTHON=${PYTHON:-python3}
CASES=${CASES:-micro:7 micro:1 tiny:1 micro:7 tiny:7}
BATCH=${BATCH:-128}
DURATION=${DURATION:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
OUTFILE=${1:-/dev/null}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1

ctl=nvidia-cuda-mps-control
for p in /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control; do
  if [[ -x $p ]]; then ctl=$p; break; fi
done
work=$(mktemp -d /tmp/startup-probe.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
"$ctl" -d || { echo "startup-probe: no MPS daemon" >&2; exit 1; }
stop_mps() { echo quit | "$ctl" >/dev/null 2>&1 || true; sleep 1; }
trap stop_mps EXIT

i=0
for c in $CASES; do
  IFS=: read -r w n extra <<<"$c"
  IFS=, read -r -a args <<<"${extra:-}"
  i=$((i + 1))
  pids=()
  for k in $(seq 1 "$n"); do
    "$PYTHON" "$HERE/train.py" --workload "$w" --batch "$BATCH" --duration "$DURATION" --seed "$k" \
      --startup-trace "${args[@]}" >"$work/$i-$k.out" 2>"$work/$i-$k.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "startup-probe: case $i ($c) pid $p exit $?" >&2; done
  "$PYTHON" - "$i" "$c" "$work" <<'PY'
import glob, re, statistics, sys
i, case, work = sys.argv[1:4]
rows = []
for f in sorted(glob.glob(f"{work}/{i}-*.err")):
    for line in open(f):
        if "startup-trace" in line:
            rows.append(dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.]+)", line) if k != "pid"))
            print(f"case {i} {case}: {line.strip()}")
        elif "Error" in line or "error" in line:
            print(f"case {i} {case}: {f}: {line.strip()}")
if rows:
    keys = list(rows[0])
    med = " ".join(f"{k}={statistics.median(r[k] for r in rows):.2f}" for k in keys)
    print(f"case {i} {case}: median of {len(rows)}: {med} (s since process start)")
else:
    print(f"case {i} {case}: no trace line")
PY
done 2>&1 | tee "$OUTFILE"
