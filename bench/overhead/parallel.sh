#!/usr/bin/env bash
# Launch overhead of `colloc run` against GNU parallel and `xargs -P`: N runs of `true`
# with J at once, each tool timed R times (interleaved, so a noisy neighbour hits all
# three alike), medians and ratios printed side by side. Targets (issue 12): colloc's
# median wall time at most a third of GNU parallel's, and at most 1.3x xargs's (colloc
# also writes a log per run, the event log and the report; xargs writes nothing).
#
#   bash bench/overhead/parallel.sh            # N=2000 J=8 R=5
#   N=500 R=3 COLLOC=target/debug/colloc bash bench/overhead/parallel.sh
#
# colloc runs with -q (no live view; `true` prints nothing anyway) and writes its full
# record (event log, JSON, CSV, 2,000 log files, timeline chart) into a temp dir, as a
# real pack would. Use a release build: target/release/colloc is taken first.
set -euo pipefail

N=${N:-2000}
J=${J:-8}
R=${R:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -z "${COLLOC:-}" ]]; then
  for c in "$HERE/../../target/release/colloc" "$HERE/../../target/debug/colloc"; do
    if [[ -x "$c" ]]; then COLLOC=$c; break; fi
  done
fi
: "${COLLOC:?no colloc binary: cargo build --release -p colloc, or set COLLOC}"
command -v parallel >/dev/null || { echo "GNU parallel not installed" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# No node config, no colloc job: plain process slots (NVML, if present, is still opened).
export COLLOC_CONFIG="$tmp/none.toml"
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

colloc_times=()
parallel_times=()
xargs_times=()
for i in $(seq "$R"); do
  s=$(ms)
  "$COLLOC" run -q -j "$J" -n "$N" --status-every 1h --report-dir "$tmp/colloc-$i" -- true \
    > "$tmp/colloc-$i.out" 2> "$tmp/colloc-$i.err" || { echo "colloc run failed:" >&2; cat "$tmp/colloc-$i.err" >&2; exit 1; }
  colloc_times+=($(( $(ms) - s )))
  # Reports stay until the end: deleting 2,000 files just before the next repetition
  # sends ext4's inode allocator through its recently-deleted checks and made the next
  # repetition's log-file creation about twice as slow (seen with perf on this machine).

  s=$(ms)
  seq "$N" | parallel --will-cite -j"$J" true > /dev/null
  parallel_times+=($(( $(ms) - s )))

  s=$(ms)
  seq "$N" | xargs -P "$J" -n 1 true
  xargs_times+=($(( $(ms) - s )))
done

c=$(printf '%s\n' "${colloc_times[@]}" | median)
p=$(printf '%s\n' "${parallel_times[@]}" | median)
x=$(printf '%s\n' "${xargs_times[@]}" | median)
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $N runs of true, -j $J, $R repetitions each"
echo "colloc run      : median ${c} ms  (all: ${colloc_times[*]})"
echo "GNU parallel    : median ${p} ms  (all: ${parallel_times[*]})"
echo "xargs -P $J      : median ${x} ms  (all: ${xargs_times[*]})"
awk -v c="$c" -v p="$p" -v x="$x" 'BEGIN {
  rp = c / p; rx = c / x
  printf "colloc / parallel = %.3f (target <= 0.333): %s\n", rp, (rp <= 1 / 3) ? "met" : "NOT met"
  printf "colloc / xargs    = %.3f (target <= 1.3): %s\n", rx, (rx <= 1.3) ? "met" : "NOT met"
}'
