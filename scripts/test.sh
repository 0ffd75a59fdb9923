#!/usr/bin/env bash
# Run every test colloc has on a machine without a GPU, from a fresh clone anywhere (also
# under /tmp): installs the Debian packages it needs, checks formatting and lints, runs
# the unit and CLI tests, builds and checks the .deb/.rpm, installs the .deb and runs the
# real-Slurm tests against the installed plugin, under a simple and a production-like
# Slurm configuration, then the same suites on Debian 13's Slurm 24.11 in a cached
# debootstrap root (tests/slurm/slurm-root.sh). Needs root (Slurm daemons, dpkg, chroot).
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
  rm -f "$log" "$log".* /run/colloc-test-users.lock
}
trap cleanup EXIT

run_step "system packages" scripts/install-deps.sh

run_step "format" cargo fmt --all -- --check
run_step "lints" cargo clippy --workspace --all-targets --locked -- -D warnings

step "build (the fake libnvidia-ml and stand-ins the tests load)"
build_ok=1
cargo build --workspace --locked || build_ok=0
# The plugin with the test-only seam test_panic= (never packaged), for the real-Slurm
# panic-containment test: target/test-seams/libcolloc_spank.so.
cargo build --locked -p colloc-spank --features test-seams --profile test-seams || build_ok=0
((build_ok)) || { failed_steps+=("build"); echo "step failed: build"; }

tally "unit and CLI tests" cargo test --workspace --locked --no-fail-fast --exclude colloc-slurm-tests

# Builds the release binaries for glibc 2.28 (cargo zigbuild), the .deb and .rpm from
# them, installs the .deb and checks it.
tally "packages: build .deb and .rpm, install the .deb, check it" packaging/test-packages.sh

step "real Slurm cluster tests, against the installed .deb, under two Slurm configurations"
# The same suites under the simple configuration and the production one (cgroups,
# ConstrainDevices, PrologFlags=Contain, job_container/tmpfs: tests/slurm/cluster.sh), at
# the same time: the suites mostly wait for Slurm, and each cluster has its own ports,
# folders, mount namespaces and job ids. Each run's output is shown once both are done.
plugin="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm/libcolloc_spank.so"
if [ ! -f "$plugin" ] || [ ! -x /usr/bin/colloc ]; then
  echo "the .deb is not installed (see the package step): no real-Slurm tests"
  failed_steps+=("real Slurm tests (no installed package)")
elif ! cargo build --locked -p colloc-slurm-tests --tests; then
  failed_steps+=("build the real-Slurm tests")
else
  slurm_suites() {
    COLLOC_CLUSTER_PROFILE=$1 COLLOC_SPANK_PLUGIN=$plugin COLLOC_BIN=/usr/bin/colloc \
      cargo test --locked --no-fail-fast -p colloc-slurm-tests --tests -- --test-threads=1 >"$log.$1" 2>&1
  }
  # Meanwhile the Slurm 24.11 root and the plugin built against its headers, for the
  # step after this one (the suites mostly wait on Slurm: the processors are free).
  tests/slurm/slurm-root.sh prepare >"$log.prepare" 2>&1 &
  prepare_pid=$!
  slurm_rc=0
  slurm_suites simple &
  simple_pid=$!
  slurm_suites production &
  production_pid=$!
  wait "$simple_pid" || slurm_rc=1
  wait "$production_pid" || slurm_rc=1
  for profile in simple production; do
    printf '\n-- %s configuration --\n' "$profile"
    tee -a "$log" <"$log.$profile"
    rm -f "$log.$profile"
  done
  ((slurm_rc == 0)) || counted_steps+=("real Slurm tests")
fi

step "real Slurm cluster tests on Slurm 24.11 (a Debian 13 root), under two Slurm configurations"
# The same suites on Debian 13's Slurm 24.11, in a root made by debootstrap from Debian's
# archive and cached (tests/slurm/slurm-root.sh; /var/cache/colloc-test/slurm-24.11,
# kept between runs): the plugin built against its headers, the workspace's colloc, each
# suite in a mount namespace chrooted into an overlay of the root (accounts the suites
# make there go with it). Both profiles at once, after the 22.05 runs, as those run.
slurm_root=tests/slurm/slurm-root.sh
prepared=1
if [[ -n ${prepare_pid:-} ]]; then
  # Made during the 22.05 runs (above).
  wait "$prepare_pid" || prepared=0
  cat "$log.prepare"
else
  "$slurm_root" prepare || prepared=0
fi
if ((prepared == 0)); then
  failed_steps+=("Slurm 24.11: the root or its builds")
else
  root_suites() {
    COLLOC_CLUSTER_PROFILE=$1 "$slurm_root" test >"$log.2411-$1" 2>&1
  }
  root_rc=0
  started=$SECONDS
  root_suites simple &
  simple_pid=$!
  root_suites production &
  production_pid=$!
  wait "$simple_pid" || root_rc=1
  wait "$production_pid" || root_rc=1
  for profile in simple production; do
    printf '\n-- Slurm 24.11, %s configuration --\n' "$profile"
    tee -a "$log" <"$log.2411-$profile"
    rm -f "$log.2411-$profile"
  done
  echo "Slurm 24.11 suites: $((SECONDS - started)) s"
  ((root_rc == 0)) || counted_steps+=("real Slurm tests on 24.11")
fi

# Slurm's cgroup/v2 (ConstrainDevices through its eBPF program, PrologFlags=Contain,
# job_container/tmpfs) on Slurm 24.11, in the Debian 13 root of tests/slurm/slurm-root.sh:
# the production-v2 profile of tests/slurm/cluster.sh (docs/admin.md, "cgroup v2"). Only
# the suites whose paths depend on the cgroup version, to keep CI's time: production
# (where the MPS daemons land, what they may open, a cancel ends them and their cgroup)
# and cluster_profiles (three nodes: namespaces, /dev/shm, the devices a job reaches).
# After the 24.11 runs above, whose builds it reuses (none where those could not be made).
if [[ -n ${root_rc:-} ]]; then
  tally "real Slurm 24.11 under cgroup v2 (production-v2: production, cluster_profiles)" \
    env COLLOC_CLUSTER_PROFILE=production-v2 "$slurm_root" test production cluster_profiles
fi

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
