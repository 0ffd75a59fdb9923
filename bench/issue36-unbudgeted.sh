#!/usr/bin/env bash
# Issue 36's comparison on a lent GPU: the unbudgeted search of the counts the budgeted
# calls tried (bench/results/issue36-budget: mps 4, 7 and 10, and mps:7 at the chosen N),
# each measured twice, with no --budget, by the same workload and settings:
#
#   colloc bench --modes mps --counts 4,7,10 --repeat 2 --warmup 5s --duration 10s \
#     --startup-timeout 90s --reference 'train.py --workload small ... --batch 2048' \
#     -- train.py --workload small ... --batch 128
#
# (WARMUP, DURATION and REPEAT override the 5s, 10s and 2 where device time is short)
# run through bench/h200-answer.sh (bench/stability.sh) with COUNTS=4,7,10 NO_BUDGET=1;
# CAP seconds (440) only bound colloc's wall time (SIGTERM: it still writes what it
# measured). The solo run's GPM SM activity and occupancy (Hopper) are in bench.json and
# stderr.txt. Writes OUTDIR/answer.txt, OUTDIR/gpu.txt and OUTDIR/call.tar.gz (the whole
# run folder but the copies' logs), few files, as the device tool brings back.
#
#   bash bench/issue36-unbudgeted.sh COLLOC_BINARY OUTDIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
COLLOC=${1:?usage: bench/issue36-unbudgeted.sh COLLOC_BINARY OUTDIR}
OUTDIR=${2:?usage: bench/issue36-unbudgeted.sh COLLOC_BINARY OUTDIR}
CAP=${CAP:-440}
RUN=$(mktemp -d /tmp/issue36-unbudgeted.XXXXXX)
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode \
  --format=csv >"$OUTDIR/gpu.txt" 2>&1 || true
rc=0
COUNTS=4,7,10 NO_BUDGET=1 BUDGET=$CAP WARMUP=${WARMUP:-5s} DURATION=${DURATION:-10s} REPEAT=${REPEAT:-2} \
  bash "$HERE/h200-answer.sh" "$COLLOC" "$RUN" >"$OUTDIR/answer.txt" 2>&1 || rc=$?
tar -C "$RUN" --exclude=logs -czf "$OUTDIR/call.tar.gz" .
echo "issue36-unbudgeted.sh: exit $rc after $SECONDS s" >>"$OUTDIR/answer.txt"
exit "$rc"
