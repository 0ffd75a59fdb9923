#!/usr/bin/env bash
# Run every test colloc has on a machine without a GPU, from a fresh clone:
# installs the Debian packages it needs, checks formatting and lints, runs the unit and
# CLI tests, builds and checks the .deb/.rpm, installs the .deb and runs the real-Slurm
# tests against the installed plugin, under a simple and a production-like Slurm
# configuration. Needs root (Slurm daemons, dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }
# Every test runner's output also goes to a log, so the closing line can add them all up.
log=$(mktemp /tmp/colloc-test-log.XXXXXX)
trap 'rm -f "$log" "$log".*' EXIT
tally() { "$@" 2>&1 | tee -a "$log"; }

step "system packages"
scripts/install-deps.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build (the fake libnvidia-ml and stand-ins the tests load)"
cargo build --workspace --locked
# The plugin with the test-only seam test_panic= (never packaged), for the real-Slurm
# panic-containment test: target/test-seams/libcolloc_spank.so.
cargo build --locked -p colloc-spank --features test-seams --profile test-seams

step "unit and CLI tests"
tally cargo test --workspace --locked --no-fail-fast --exclude colloc-slurm-tests

step "packages: build .deb and .rpm, install the .deb, check it"
tally packaging/test-packages.sh

step "real Slurm cluster tests, against the installed .deb, under two Slurm configurations"
# The same suites under the simple configuration and the production one (cgroups,
# ConstrainDevices, PrologFlags=Contain, job_container/tmpfs: tests/slurm/cluster.sh), at
# the same time: the suites mostly wait for Slurm, and each cluster has its own ports,
# folders, mount namespaces and job ids. Each run's output is shown once both are done.
cargo build --locked -p colloc-slurm-tests --tests
slurm_suites() {
  COLLOC_CLUSTER_PROFILE=$1 \
  COLLOC_SPANK_PLUGIN="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm/libcolloc_spank.so" \
  COLLOC_BIN=/usr/bin/colloc \
    cargo test --locked --no-fail-fast -p colloc-slurm-tests --tests -- --test-threads=1 >"$log.$1" 2>&1
}
slurm_rc=0
slurm_suites simple &
simple_pid=$!
slurm_suites production &
production_pid=$!
wait "$simple_pid" || slurm_rc=1
wait "$production_pid" || slurm_rc=1
for profile in simple production; do
  printf '\n-- %s configuration --\n' "$profile"
  tally cat "$log.$profile"
  rm -f "$log.$profile"
done
((slurm_rc == 0)) || echo "real Slurm tests failed (see above)"

# One closing line for the whole run: cargo's "test result" lines, the package checks'
# and the cluster tests' own "N passed, N failed".
awk -v slurm_rc="$slurm_rc" '
  /^test result: .* passed; .* failed/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
  END { printf "\ntotal: %d passed, %d failed\n", p, f; exit (f > 0 || slurm_rc != 0) }
' "$log"
