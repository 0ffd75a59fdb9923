#!/usr/bin/env bash
# Run every test colloc has on a machine without a GPU, from a fresh clone:
# installs the Debian packages it needs, checks formatting and lints, runs the unit and
# CLI tests, builds and checks the .deb/.rpm, installs the .deb and runs the real-Slurm
# tests against the installed plugin. Needs root (Slurm daemons, dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }

step "system packages"
scripts/install-deps.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build (the fake libnvidia-ml and stand-ins the tests load)"
cargo build --workspace --locked

step "unit and CLI tests"
cargo test --workspace --locked --exclude colloc-slurm-tests

step "packages: build .deb and .rpm, install the .deb, check it"
packaging/test-packages.sh

step "real Slurm cluster tests, against the installed .deb"
COLLOC_SPANK_PLUGIN="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm/libcolloc_spank.so" \
COLLOC_BIN=/usr/bin/colloc \
  cargo test --locked -p colloc-slurm-tests -- --test-threads=1
