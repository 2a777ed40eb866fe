#!/usr/bin/env bash
# make test: the lint, every test of the workspace against a moto DynamoDB started for the run,
# then the conformance run (API, MCP, console in Chromium). Clippy checks in a target directory
# of its own (target/clippy) while the tests build: the two share no artefacts, and together
# they keep both cores busy where each alone waits on one crate.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
"$BIN/cfn-lint" template.yaml
cargo fmt --all -- --check
mkdir -p target
CARGO_TARGET_DIR=target/clippy cargo clippy --workspace --all-targets --quiet -- -D warnings \
  >target/clippy.log 2>&1 &
clippy=$!
trap 'kill "$clippy" 2>/dev/null || true' EXIT
infra/browser-deps.sh
# The test binaries, then the functions' binaries as `make dev` builds them (the conformance run).
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --all-targets --no-run --hide-progress-bar
else
  cargo test --workspace --all-targets --no-run --quiet
fi
cargo build --quiet --workspace --bins
if ! wait "$clippy"; then
  cat target/clippy.log
  echo "clippy found problems" >&2
  exit 1
fi
cat target/clippy.log
infra/with-moto.sh infra/run-tests.sh
infra/conformance.sh
