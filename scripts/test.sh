#!/usr/bin/env bash
# Run every test colloc has on a machine without a GPU, from a fresh clone anywhere (also
# under /tmp): installs the Debian packages it needs, builds, checks formatting and
# lints, runs the unit and CLI tests, builds and checks the .deb/.rpm, installs the .deb
# and runs the real-Slurm tests, under a simple (against the installed plugin) and a
# production-like Slurm configuration, and at the same time the same suites on Debian
# 13's Slurm 24.11 in a cached debootstrap root (tests/slurm/slurm-root.sh), also under
# cgroup v2. Needs root (Slurm daemons, dpkg, chroot).
#
# Every step runs, whatever failed before it; the last line is always
# "total: N passed, N failed" (a step that fails without test counts of its own, such as
# the format check, counts as one failure), and the exit status is 0 only when nothing
# failed. The host is left as it was found: the test accounts the suites made are
# removed, the .deb is purged again if it was not installed before, and no mount of the
# test clusters stays behind (checked).
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# colloc report --html is read by a real browser (wrapper/tests/report_html.rs): it must be there.
export COLLOC_REQUIRE_BROWSER=1

# Each step's name and, when the next begins, its time: listed at the end (CI's time).
step_times=()
step_name=
step_start=$SECONDS
step() {
  [[ -z $step_name ]] || step_times+=("$(printf '%5d s  %s' "$((SECONDS - step_start))" "$step_name")")
  step_name=$*
  step_start=$SECONDS
  printf '\n== %s\n' "$*"
}
# Every test runner's output also goes to a log, so the closing line can add them all up.
log=$(mktemp /tmp/colloc-test-log.XXXXXX)
# The accounts the real-Slurm tests make (tests/slurm ensure_user), to remove at the end.
export COLLOC_TEST_USERS=$log.users
: >"$COLLOC_TEST_USERS"
failed_steps=()
# run_step NAME CMD...: run it; a non-zero exit is recorded, and the suite goes on.
run_step() {
  local name=$1
  shift
  step "$name"
  if ! "$@"; then
    failed_steps+=("$name")
    echo "step failed: $name"
  fi
}
# A step whose failures show as test counts in the log (cargo test, the package checks):
# its exit status is not counted again.
counted_steps=()
tally() {
  local name=$1
  shift
  step "$name"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    counted_steps+=("$name")
    echo "step failed: $name"
  fi
  return 0
}

colloc_was_installed=0
dpkg -s colloc >/dev/null 2>&1 && colloc_was_installed=1

cleanup() {
  step "leave the host as it was found"
  local u
  # The test accounts made by this run (and their groups).
  sort -u "$COLLOC_TEST_USERS" 2>/dev/null | while read -r u; do
    [ -n "$u" ] || continue
    userdel "$u" 2>/dev/null && echo "removed test account $u"
    getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
  done
  if ((colloc_was_installed == 0)) && dpkg -s colloc >/dev/null 2>&1; then
    # Nothing of the tests is on a GPU here (fake GPUs): no restore to wait for.
    COLLOC_FORCE_REMOVE=1 DEBIAN_FRONTEND=noninteractive dpkg --purge colloc >/dev/null &&
      echo "purged the colloc package the tests installed"
  fi
  # Copies of build artifacts the tests made outside /tmp for a checkout under /tmp
  # (tests/slurm visible_to_jobs).
  rm -rf /var/tmp/colloc-test-artifacts
  rm -f "$log" "$log".*
}
trap cleanup EXIT

run_step "system packages" scripts/install-deps.sh

step "build (the plugin, colloc, the fake libnvidia-ml and stand-ins the tests load, the real-Slurm suites)"
build_ok=1
cargo build --workspace --locked || build_ok=0
# What the real-Slurm suites load, copied aside now: later cargo runs (the unit tests)
# build target/debug's plugin and fake libnvidia-ml again with other features, while the
# lanes below run (a plugin replaced under a starting slurmstepd fails its step). The
# 24.11 root uses these too, all but the plugin (tests/slurm/slurm-root.sh prepare).
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
builds=$target_dir/ci-builds
rm -rf "$builds" && mkdir -p "$builds" || build_ok=0
for f in colloc libcolloc_spank.so libfake_nvml.so fake-nvml-ctl; do
  cp "$target_dir/debug/$f" "$builds/$f" || build_ok=0
done
# The plugin with the test-only seam test_panic= (never packaged), for the real-Slurm
# panic-containment test: target/test-seams/libcolloc_spank.so.
cargo build --locked -p colloc-spank --features test-seams --profile test-seams || build_ok=0
# The suites' binaries, "name path" a line, and the harness's own unit tests: the lanes
# run them without cargo (tests/slurm/suites.sh).
cargo test --locked -q -p colloc-slurm-tests --tests --no-run --message-format=json |
  tests/slurm/suites.sh list >"$builds/suites" || build_ok=0
[[ -s $builds/suites ]] || build_ok=0
((build_ok)) || { failed_steps+=("build"); echo "step failed: build"; }

# The real-Slurm suites run in lanes: each one runs the suites against one Slurm under
# one configuration (tests/slurm/cluster.sh profiles: simple; production with cgroups,
# ConstrainDevices, PrologFlags=Contain, job_container/tmpfs; production-v2 on
# cgroup/v2). 22.05 is the host's: the simple lane against the installed .deb (the
# package step), the production lanes against this checkout's build. 24.11 runs in a
# root made by debootstrap from Debian's archive and cached (tests/slurm/slurm-root.sh;
# /var/cache/colloc-test/slurm-24.11), with the plugin built against its headers and
# the rest of this build. The suites mostly wait for Slurm (a whole run keeps the 2
# processors about a third busy), so lanes overlap, as far as they can share the host:
# - simple lanes run beside anything (no cgroups, no job containers);
# - production-type clusters run one at a time, all on processor 0 (below): first the
#   22.05 ones (two lanes, one after the other), then the 24.11 ones;
# - no 24.11 lane starts while a 22.05 production cluster runs: a 24.11 lane's mount
#   namespace, made from the host's, holds a copy of the host's mounts of that moment,
#   those of the 22.05 job containers included, and production clusters of both
#   releases at once broke each other's job containers ("ns base mount failed", "launch
#   failed requeued held": seen when they ran at once).
# The production-type lanes are the longest path (about 2,200 s one after the other),
# so they start as soon as the suites are built, beside the lints, the package step and
# the unit tests; the 24.11 simple lane starts with the 24.11 production lanes; the
# 22.05 simple lane once the package step (before the unit tests) installed the .deb.
#
# Each lane's lines are shown as they come, marked with the lane's name (CI keeps only
# the end of its log: a run cut short still shows where each lane was), and kept whole
# in a log of its own for the closing count. A lane still running at the deadline
# (COLLOC_TEST_DEADLINE_S seconds after this script began, 80 minutes unless set; CI
# stops at 90) is stopped, its clusters' daemons with it, and counted as a failure that
# names the test it was in.
deadline=${COLLOC_TEST_DEADLINE_S:-4800}
# Every lane runs on one processor (its clusters' daemons, their namespaces and the jobs'
# with it). On Linux 6.18 (this machine's and CI's kernel) Slurm's job_container/tmpfs
# fails to hold a job's mount namespace ("_create_ns: ns base mount failed: Invalid
# argument", the job requeued held) when that namespace and slurmstepd's were made on
# different processors. The kernel refuses to bind a mount namespace whose sequence
# number is not above the caller's namespace's (fs/namespace.c, mnt_ns_loop); that 6.18
# hands those numbers out of order across processors is our reading of what we measured
# here: 12 of 23 launches of `sbatch --wrap true` under
# the production profile failed, with or without colloc's plugin; 0 of 16 with the
# cluster on one processor. The production-type lanes (one at a time) take processor 0,
# the simple lanes the last one (with every lane on processor 0, two tests with tight
# time budgets, a user's SIGSTOPs against an MPS start-up and two serial MPS jobs,
# failed: we take it for that processor's load).
lane_cpu_production=0
lane_cpu_other=$(($(nproc --all) - 1))
lane_names=()
# lane NAME CMD...: run CMD as the lane NAME in the calling shell (which may be a
# background one): its exit status goes to $log.lane.NAME.rc.
lane() {
  local name=$1
  shift
  local file=$log.lane.$name left=$((deadline - SECONDS))
  ((left > 60)) || left=60
  local cpu=$lane_cpu_other
  [[ $name == *production* ]] && cpu=$lane_cpu_production
  echo "lane $name started at ${SECONDS} s on processor $cpu (until ${deadline} s at the latest): $*"
  timeout --kill-after=30 "$left" taskset -c "$cpu" "$@" 2>&1 | tee "$file" |
    sed -u "s/^/[$name] /"
  local rc=${PIPESTATUS[0]}
  echo "$rc" >"$file.rc"
  echo "lane $name ended at ${SECONDS} s (exit status $rc)"
}
# The lanes' results, in the order they were declared: counted by their test counts,
# or, when stopped at the deadline or ended without a status, as failures of their own.
lanes_timed_out=()
collect_lanes() {
  local name file rc last
  for name in "${lane_names[@]}"; do
    file=$log.lane.$name
    rc=$(cat "$file.rc" 2>/dev/null || echo none)
    [[ -f $file ]] && cat "$file" >>"$log"
    if [[ $rc == none ]]; then
      failed_steps+=("lane $name ended without an exit status")
    elif ((rc == 124 || rc == 137)); then
      last=$(grep -E '^(running [0-9]+ tests|-- .* on Slurm|     Running |test .* \.\.\. )' "$file" | tail -2 | paste -sd' ')
      lanes_timed_out+=("$name")
      failed_steps+=("lane $name stopped at the deadline (${deadline} s): last seen: ${last:-nothing}")
    elif ((rc != 0)); then
      counted_steps+=("real Slurm tests, lane $name")
    fi
  done
}
# After a lane was stopped: the daemons of the clusters it left (their pid files; for
# 24.11 lanes too, whose processes this host sees), with the slurmdbd and MariaDB of
# those started with accounting (tests/slurm/accounting.sh).
stop_left_clusters() {
  local f
  for f in /tmp/colloc-slurm-*/slurm/*.pid /var/tmp/colloc-slurm-*/slurm/*.pid \
    /tmp/colloc-slurm-*/munge/munged.pid /var/tmp/colloc-slurm-*/munge/munged.pid \
    /tmp/colloc-slurm-*/slurmdbd/slurmdbd.pid /var/tmp/colloc-slurm-*/slurmdbd/slurmdbd.pid \
    /tmp/colloc-slurm-*/mariadb/mariadbd.pid /var/tmp/colloc-slurm-*/mariadb/mariadbd.pid; do
    [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null && echo "stopped a daemon the lanes left: $f"
  done
  return 0
}
slurm_root=tests/slurm/slurm-root.sh
# The 24.11 root (most of making it waits on Debian's archive) and its plugin, in the
# background from now on.
if ((build_ok)); then
  (
    COLLOC_SLURM_ROOT_HOST_BUILDS=$builds "$slurm_root" prepare >"$log.prepare" 2>&1
    echo "$?" >"$log.prepare.rc"
  ) &
else
  echo 1 >"$log.prepare.rc"
fi
# The 22.05 production suites in two lanes of about the same length (their times on
# 22.05): these five, and every other suite.
production_a=(security node_state admin_ops mig_driver production)
production_b=()
for f in tests/slurm/tests/*.rs; do
  name=$(basename "$f" .rs)
  [[ " ${production_a[*]} " == *" $name "* ]] || production_b+=("$name")
done
env_2205=(env COLLOC_SPANK_PLUGIN="$builds/libcolloc_spank.so" COLLOC_BIN="$builds/colloc"
  COLLOC_FAKE_NVML_LIB="$builds/libfake_nvml.so" COLLOC_FAKE_NVML_CTL="$builds/fake-nvml-ctl")
env_2411=(env COLLOC_SLURM_ROOT_BUILT=1 COLLOC_SLURM_ROOT_HOST_BUILDS="$builds")
# The production-type lanes, one after the other on processor 0: 22.05's, then (the
# root ready) 24.11's, with the 24.11 simple lane beside them.
(
  if ((build_ok)); then
    lane 22.05-production-a "${env_2205[@]}" COLLOC_CLUSTER_PROFILE=production \
      tests/slurm/suites.sh run "$builds/suites" 22.05 "${production_a[@]}"
    lane 22.05-production-b "${env_2205[@]}" COLLOC_CLUSTER_PROFILE=production \
      tests/slurm/suites.sh run "$builds/suites" 22.05 "${production_b[@]}"
  fi
  while [[ ! -f $log.prepare.rc ]]; do sleep 2; done
  if [[ $(cat "$log.prepare.rc") == 0 ]]; then
    lane 24.11-simple "${env_2411[@]}" COLLOC_CLUSTER_PROFILE=simple "$slurm_root" test &
    # The cgroup-v2 lane: only the suites whose paths depend on the cgroup version
    # (production: where the MPS daemons land, what they may open, a cancel ends them and
    # their cgroup; cluster_profiles: three nodes, namespaces, /dev/shm, the devices a
    # job reaches).
    lane 24.11-production "${env_2411[@]}" COLLOC_CLUSTER_PROFILE=production "$slurm_root" test
    lane 24.11-production-v2 "${env_2411[@]}" COLLOC_CLUSTER_PROFILE=production-v2 \
      "$slurm_root" test production cluster_profiles
    wait
  fi
) &
production_lanes=$!

run_step "format" cargo fmt --all -- --check
run_step "lints" cargo clippy --workspace --all-targets --locked -- -D warnings

# Builds the release binaries for glibc 2.28 (cargo zigbuild), the .deb and .rpm from
# them, installs the .deb and checks it. Before the unit tests: the 22.05 simple lane
# needs the installed .deb, and would be the longest path if it started after them.
tally "packages: build .deb and .rpm, install the .deb, check it" packaging/test-packages.sh

step "real Slurm cluster tests on 22.05's simple profile against the installed .deb: started"
plugin="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm/libcolloc_spank.so"
simple_2205=
if ((!build_ok)); then
  echo "the build failed: no real-Slurm tests on 22.05"
elif [ ! -f "$plugin" ] || [ ! -x /usr/bin/colloc ]; then
  echo "the .deb is not installed (see the package step): no real-Slurm simple lane on 22.05"
  failed_steps+=("real Slurm tests on 22.05 (no installed package)")
else
  lane_names+=(22.05-simple)
  lane 22.05-simple "${env_2205[@]}" COLLOC_SPANK_PLUGIN="$plugin" COLLOC_BIN=/usr/bin/colloc \
    COLLOC_CLUSTER_PROFILE=simple tests/slurm/suites.sh run "$builds/suites" 22.05 &
  simple_2205=$!
fi

tally "unit and CLI tests" cargo test --workspace --locked --no-fail-fast --exclude colloc-slurm-tests

step "real Slurm cluster tests: the lanes still running (production ones since the build, 22.05 simple since the package step)"
((build_ok)) && lane_names+=(22.05-production-a 22.05-production-b)
wait "$production_lanes" 2>/dev/null
[[ -n $simple_2205 ]] && wait "$simple_2205" 2>/dev/null
sed 's/^/[24.11 prepare] /' "$log.prepare" 2>/dev/null
if [[ $(cat "$log.prepare.rc" 2>/dev/null) == 0 ]]; then
  lane_names+=(24.11-simple 24.11-production 24.11-production-v2)
else
  failed_steps+=("Slurm 24.11: the root or its builds")
fi
collect_lanes
((${#lanes_timed_out[@]} == 0)) || stop_left_clusters

# Nothing of the test clusters may stay mounted (each cluster's stop unmounts its own).
step "no test cluster mount left"
left=$(awk '$2 ~ /\/colloc-slurm-|\/colloc-pkgtest\./ { print $2 }' /proc/self/mounts)
if [ -n "$left" ]; then
  printf 'left mounted:\n%s\n' "$left"
  failed_steps+=("mounts left")
else
  echo "none"
fi

# One closing line for the whole run: cargo's "test result" lines, the package checks'
# and the cluster tests' own "N passed, N failed", and one failure per failed step that
# has no counts of its own. Counted before the clean-up (which removes the log), printed
# after it, so that it is the last line.
summary=$(awk -v steps="${#failed_steps[@]}" -v counted="${#counted_steps[@]}" '
  /^test result: .* passed; .* failed/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
  END {
    # A runner that failed without a failing count (it did not build, it crashed) is one failure.
    if (counted > 0 && f == 0) f = counted
    f += steps
    printf "total: %d passed, %d failed\n", p, f; exit (f > 0)
  }
' "$log")
rc=$?
# Why each failed test failed, gathered here: the log of a long run is cut before it
# reaches a reader (CI keeps its end), and a failure's message is far above this line.
# The first lines of each panic's message, at most 12 panics.
why=$(awk '
  / panicked at / { n++; if (n > 12) exit; left = 4; print "--"; print; next }
  left > 0 && !/^stack backtrace:/ { print substr($0, 1, 400); left--; next }
  { left = 0 }
' "$log")
trap - EXIT
cleanup
printf '\n'
step "end"
printf 'time of each step:\n'
printf '  %s\n' "${step_times[@]}"
[[ -z $why ]] || printf 'why tests failed (first lines of each panic):\n%s\n\n' "$why"
((${#failed_steps[@]} == 0)) || printf 'failed step: %s\n' "${failed_steps[@]}"
((${#counted_steps[@]} == 0)) || printf 'step with failures (counted above): %s\n' "${counted_steps[@]}"
echo "$summary"
exit "$rc"
