#!/usr/bin/env bash
# Runs every test of the workspace: with cargo-nextest when it is installed (one summary line at
# the end), else with cargo test. Arguments go to the test runner.
#
# `run-tests.sh build` builds every test binary (and the functions' binaries, which the
# conformance stack runs, and the examples, the benchmarks, which hold no test but are linted in
# the build: infra/lint-rustc.sh) and records where they are (target/nextest-reuse/); `run-tests.sh
# built …` then runs them without cargo, so that cargo can do something else in target/ meanwhile
# (make test checks with clippy there while the tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
reuse=target/nextest-reuse
if ! command -v cargo-nextest >/dev/null 2>&1; then
  case ${1:-} in
    build) exec cargo test --workspace --tests --no-run ;;
    built) shift ;;
  esac
  # One test at a time: the end-to-end tests of one process share one clock.
  exec cargo test --workspace --tests --no-fail-fast "$@" -- --test-threads=1
fi
case ${1:-} in
  build)
    mkdir -p "$reuse"
    cargo build --quiet --workspace --bins --examples
    cargo nextest list --workspace --tests --list-type binaries-only \
      --message-format json >"$reuse/binaries.json"
    cargo metadata --format-version 1 --no-deps >"$reuse/cargo-metadata.json"
    ;;
  built)
    shift
    exec cargo nextest run --no-fail-fast --hide-progress-bar \
      --binaries-metadata "$reuse/binaries.json" --cargo-metadata "$reuse/cargo-metadata.json" \
      --workspace-remap . "$@"
    ;;
  *) exec cargo nextest run --workspace --tests --no-fail-fast --hide-progress-bar "$@" ;;
esac
