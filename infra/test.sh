#!/usr/bin/env bash
# make test: the lint (as make lint), every test of the workspace against a moto DynamoDB and
# the real payment rails (anvil with Circle's USDC, x402's facilitator: infra/rails.sh) started
# for the run, then the conformance run (API, MCP, console in Chromium) on the same kind of
# stack as make dev. One after the other, in one target directory: clippy's check and the test
# build share the build scripts' output (aws-lc-sys and ring compile C once); run side by side in
# two directories they took 6 minutes longer on 2 cores. Each phase prints its time, and the
# run ends with all of them (the figures a change to the build is judged by).
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
phase cfn-lint "$PWD/.venv/bin/cfn-lint" template.yaml
phase fmt cargo fmt --all -- --check
phase clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
phase deps bash -c 'infra/browser-deps.sh && infra/rails.sh install'
phase tests infra/with-moto.sh infra/rails.sh with infra/run-tests.sh
phase conformance infra/conformance.sh
echo "make test: every phase passed"
printf '  %s\n' "${phases[@]}"
