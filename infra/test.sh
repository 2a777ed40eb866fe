#!/usr/bin/env bash
# make test: the lint (as make lint), every test of the workspace against a moto DynamoDB and
# the real payment rails (anvil with Circle's USDC, x402's facilitator: infra/rails.sh) started
# for the run, and beside them the conformance run (API, MCP, console in Chromium) on the same
# kind of stack as make dev.
#
# The dependency graph compiles once: clippy lints the workspace's crates while they build, as
# the compiler cargo runs for them (clippy-driver as RUSTC_WORKSPACE_WRAPPER, which is what
# `cargo clippy` does for its check; CLIPPY_ARGS=-Dwarnings is its `-- -D warnings`), so the
# test build is also make lint's clippy, on the libraries, binaries and tests (the examples, the
# benchmarks, are linted beside the tests, with rustdoc: infra/doc-check.sh).
# Both are exported for the whole run: the conformance stack's builds see the same compiler and
# reuse what was built. What needs no compiler goes beside the build: the Python tools (make
# venv), the template's lint, the browser's and the rails' packages. Each phase prints its
# time, and the run ends with all of them (the figures a change to the build is judged by).
set -euo pipefail
cd "$(dirname "$0")/.."
phases=()
# Runs a phase (`phase <name> <command…>`) and records how long it took.
phase() {
  local name=$1 started=$SECONDS
  shift
  "$@"
  phases+=("$(printf '%-12s %4d s' "$name" $((SECONDS - started)))")
  echo "make test: $name took $((SECONDS - started)) s"
}
# Waits for a job started in the background (`joined <pid> <log>`), as a phase of its own: when
# the job failed, its output, and the run fails.
joined() {
  wait "$1" || { cat "$2"; return 1; }
}
# A job still going when a phase fails stops with the run.
# shellcheck disable=SC2046
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
export RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-Dwarnings
phase fmt cargo fmt --all -- --check
mkdir -p target
(make -s venv && "$PWD/.venv/bin/cfn-lint" template.yaml && infra/browser-deps.sh \
  && infra/rails.sh install) >target/beside.log 2>&1 &
beside=$!
phase build infra/run-tests.sh build
phase beside joined "$beside" target/beside.log
# nextest runs no doctests: the faces' show that a store call from a face does not compile. They
# run beside the tests (which wait on moto and the rails), for the whole workspace: its features
# as the build unified them, so nothing is compiled again (`-p faces` alone took 83 s).
cargo test --quiet --workspace --doc >target/doctests.log 2>&1 &
doctests=$!
# The conformance run beside the tests: its stack is its own (ports 9300…, its own moto, rails
# and table; the tests' are on free ports) and needs no build, and each leaves the CPU idle a
# good part of its time (the tests wait on the rails, the conformance run on its clients). Its
# steps are printed once it is done.
infra/conformance.sh >target/conformance.log 2>&1 &
conformance=$!
# rustdoc with warnings as errors and clippy on the examples (make lint's; infra/doc-check.sh),
# once the conformance run is over: in the build's own directory, whose lock the conformance
# stack's `cargo lambda watch` takes while it runs (to start each function), so that the proc
# macros and build scripts the build compiled serve it too (in a directory of its own it
# compiled them again). From a fresh clone: 960 s in all, rustdoc 126 s after the tests; with
# rustdoc first and the conformance run after it, 1,158 s (rustdoc beside the tests took as
# long as they did, and the conformance run came after them).
(while kill -0 "$conformance" 2>/dev/null; do sleep 1; done
  infra/doc-check.sh) >target/doc-check.log 2>&1 &
docs=$!
phase tests infra/with-moto.sh infra/rails.sh with infra/run-tests.sh built
phase doctests joined "$doctests" target/doctests.log
phase conformance joined "$conformance" target/conformance.log
grep '^conformance:' target/conformance.log
phase rustdoc joined "$docs" target/doc-check.log
echo "make test: every phase passed"
printf '  %s\n' "${phases[@]}"
