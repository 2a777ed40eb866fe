#!/usr/bin/env bash
# Runs every test of the workspace: with cargo-nextest when it is installed (one summary line at
# the end), else with cargo test.
set -euo pipefail
if command -v cargo-nextest >/dev/null 2>&1; then
  exec cargo nextest run --workspace --all-targets --no-fail-fast --hide-progress-bar "$@"
else
  # One test at a time: the end-to-end tests of one process share one clock.
  exec cargo test --workspace --all-targets --no-fail-fast "$@" -- --test-threads=1
fi
