#!/usr/bin/env bash
# make test: the lint (as make lint), every test of the workspace against a moto DynamoDB and
# the real payment rails (anvil with Circle's USDC, x402's facilitator: infra/rails.sh) started
# for the run, then the conformance run (API, MCP, console in Chromium) on the same kind of
# stack as make dev. One after the other, in one target directory: clippy's check and the test build share the build scripts'
# output (aws-lc-sys and ring compile C once); run side by side in two directories they took
# 6 minutes longer on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/.venv/bin/cfn-lint" template.yaml
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
infra/browser-deps.sh
infra/rails.sh install
infra/with-moto.sh infra/rails.sh with infra/run-tests.sh
infra/conformance.sh
