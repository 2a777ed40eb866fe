#!/usr/bin/env bash
# rustdoc over the workspace with warnings as errors (make lint; make test runs it beside the
# tests and the conformance run): every intra-doc link resolves, private items documented too
# (links to them are the workspace's own); then clippy on the examples, which make test's build
# leaves out. Both check the dependencies (rustdoc reads their metadata, not what the build
# compiled), in the build's directory, whose proc macros and build scripts they share.
set -euo pipefail
cd "$(dirname "$0")/.."
# rustdoc runs no clippy: the wrapper the build uses is not rustdoc's.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" \
  cargo doc --workspace --no-deps --document-private-items --keep-going --quiet
# The examples (the benchmarks), which make test's build leaves out: clippy, on the dependencies
# rustdoc just checked.
cargo clippy --workspace --examples --quiet -- -D warnings
