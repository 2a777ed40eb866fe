#!/usr/bin/env bash
# Prints the folder cargo builds into for this workspace: target/, CARGO_TARGET_DIR, or a
# build.target-dir of cargo's configuration (`cargo metadata`'s answer, so every way counts).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
