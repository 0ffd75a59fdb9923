#!/usr/bin/env bash
# Memory of `colloc run` and `colloc report` on a sweep at the manifest's run cap: a
# runs.toml of N runs of `true` (one [[sweep]], one grid value and one env variable a
# run, as a learning-rate x seed sweep has), J at once; each tool's peak resident set
# (GNU time's maximum RSS) R times, medians printed. Target (issue 39): the 100,000-run
# cap packs within 256 MB.
#
#   bash bench/overhead/memory.sh                 # N=100000 J=8 R=3
#   N=20000 R=1 bash bench/overhead/memory.sh
#
# Use a release build: target/release/colloc is taken first. Needs GNU time
# (/usr/bin/time, Debian's `time` package). Writes the packs into a temporary folder,
# removed at the end (N log files each).
set -euo pipefail

N=${N:-100000}
J=${J:-8}
R=${R:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -z "${COLLOC:-}" ]]; then
  for c in "$HERE/../../target/release/colloc" "$HERE/../../target/debug/colloc"; do
    if [[ -x "$c" ]]; then COLLOC=$c; break; fi
  done
fi
: "${COLLOC:?no colloc binary: cargo build --release -p colloc, or set COLLOC}"
[[ -x /usr/bin/time ]] || { echo "GNU time is missing (apt-get install time)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export COLLOC_CONFIG="$tmp/none.toml"
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

{
  echo "[[sweep]]"
  echo "name = 'lr{lr}'"
  echo "command = ['true']"
  echo "env = { LR = '{lr}' }"
  printf 'grid = { lr = ['
  seq -s, 1 "$N"
  echo '] }'
} >"$tmp/runs.toml"

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# peak KIND DIR ARGS...: run colloc with ARGS, print its maximum resident set, KiB.
peak() {
  local what=$1
  shift
  /usr/bin/time -f '%M %e' -o "$tmp/time" "$COLLOC" "$@" >"$tmp/$what.out" 2>"$tmp/$what.err" ||
    { echo "colloc $* failed:" >&2; tail -5 "$tmp/$what.err" >&2; exit 1; }
  read -r kib secs <"$tmp/time"
  echo "$kib $secs"
}

run_kib=() run_s=() report_kib=() report_s=()
for i in $(seq "$R"); do
  read -r k s < <(peak run run -q -j "$J" --status-every 1h --report-dir "$tmp/pack-$i" -f "$tmp/runs.toml")
  run_kib+=("$k") run_s+=("$s")
  read -r k s < <(peak report report -q "$tmp/pack-$i")
  report_kib+=("$k") report_s+=("$s")
  rm -rf "$tmp/pack-$i"
done

mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
rk=$(printf '%s\n' "${run_kib[@]}" | median)
pk=$(printf '%s\n' "${report_kib[@]}" | median)
echo "machine: $(nproc) CPUs; $N runs of true in one sweep, -j $J, $R repetitions"
echo "colloc run    : median peak RSS $(mib "$rk") MiB (all KiB: ${run_kib[*]}; seconds: ${run_s[*]})"
echo "colloc report : median peak RSS $(mib "$pk") MiB (all KiB: ${report_kib[*]}; seconds: ${report_s[*]})"
awk -v r="$rk" -v p="$pk" 'BEGIN {
  printf "run %s 256 MiB, report %s 256 MiB: %s\n", (r <= 262144) ? "<=" : ">", (p <= 262144) ? "<=" : ">", (r <= 262144 && p <= 262144) ? "met" : "NOT met"
}'
