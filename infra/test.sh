#!/usr/bin/env bash
# make test: the lint (as make lint), every test of the workspace against a moto DynamoDB and
# the real payment rails (anvil with Circle's USDC, x402's facilitator: infra/rails.sh) started
# for the run, and beside them the conformance run (API, MCP, console in Chromium) on the same
# kind of stack as make dev.
#
# The dependency graph compiles once: clippy and rustdoc check the workspace's crates while they
# build, in the compiler cargo runs for them (infra/lint-rustc.sh as RUSTC_WORKSPACE_WRAPPER;
# CLIPPY_ARGS=-Dwarnings is `cargo clippy`'s `-- -D warnings`), so the test build is also make
# lint, on the libraries, binaries, examples (the benchmarks) and tests.
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
export RUSTC_WORKSPACE_WRAPPER=$PWD/infra/lint-rustc.sh CLIPPY_ARGS=-Dwarnings
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
phase tests infra/with-moto.sh infra/rails.sh with infra/run-tests.sh built
phase doctests joined "$doctests" target/doctests.log
phase conformance joined "$conformance" target/conformance.log
grep '^conformance:' target/conformance.log
echo "make test: every phase passed"
printf '  %s\n' "${phases[@]}"
