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
# Every console file and API function the page uses answers once before the browser asks for
# them at once (`cargo lambda watch` starts a function on its first request; a burst of first
# requests has been seen to stall there).
for path in / /console/app.js /console/api.js /console/wallet.js /console/sha3.js \
  /console/_u64.js /console/utils.js /console/style.css /api/auth/nonce /api/auth/me /api/keys \
  /api/agents /api/sandboxes /api/payments /api/cloud/plans /api/webhooks /api/ssh-keys; do
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$CONSOLE_URL$path" || true)
    case "$status" in 2??|4??) break ;; esac
    echo "browser tests: $path answered ${status:-nothing}; retrying" >&2
    sleep 2
  done
done
cd tests/browser
node --test --test-concurrency=1 --test-reporter=spec console.test.mjs
echo "browser tests: screenshots in $SCREENSHOT_DIR"
