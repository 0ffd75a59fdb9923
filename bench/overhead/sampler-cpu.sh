#!/usr/bin/env bash
# CPU cost of colloc run's GPU sampler at 10 Hz (target: under 1% of one core). Runs
# N processes that only sleep for DURATION seconds under `colloc run --interval 100ms`; all of
# colloc's CPU time then is the sampler's (plus a few ms of start-up and report).
# Prints colloc's user+system seconds divided by the wall seconds.
#
#   bash bench/overhead/sampler-cpu.sh        # on a GPU node; N=4 DURATION=60
set -euo pipefail
N=${N:-4}
DURATION=${DURATION:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
COLLOC=${COLLOC:-$HERE/../../target/release/colloc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export COLLOC_CONFIG=${COLLOC_CONFIG:-$out/none.toml}
/usr/bin/time -f "%U %S %e" -o "$out/time" \
  "$COLLOC" run -q --mode naive -j "$N" -n "$N" --interval 100ms --report-dir "$out/r" -- sleep "$DURATION" > /dev/null
read -r user sys wall < "$out/time"
awk -v u="$user" -v s="$sys" -v w="$wall" 'BEGIN {
  p = (u + s) / w * 100
  printf "colloc CPU %.2f s user + %.2f s system over %.1f s wall = %.3f%% of one core (target < 1%%): %s\n", u, s, w, p, (p < 1) ? "met" : "NOT met"
}'
grep -q '"gpus": null' "$out/r/colloc-report.json" && echo "warning: no NVML here; this measured colloc without the sampler" >&2
true
