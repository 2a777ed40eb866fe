#!/usr/bin/env bash
# The console in headless Chromium (tests/browser/console.test.mjs) against a running stack:
# CONSOLE_URL (default the stack of `make dev`, http://127.0.0.1:9000). The conformance run calls
# it on its own stack. Screenshots of every page, desktop and phone width, go to
# target/console-screenshots (SCREENSHOT_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
infra/browser-deps.sh
export CONSOLE_URL=${CONSOLE_URL:-http://127.0.0.1:9000}
export SCREENSHOT_DIR=${SCREENSHOT_DIR:-$PWD/target/console-screenshots}
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
cd tests/browser
node --test --test-concurrency=1 --test-reporter=spec console.test.mjs
echo "browser tests: screenshots in $SCREENSHOT_DIR"
