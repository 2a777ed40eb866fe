#!/usr/bin/env bash
# What the console's browser tests need (make test runs this): Chromium from Debian's packages
# (installed with apt-get when missing; CI and developer machines run as root) and the pinned npm
# packages of tests/browser (puppeteer-core, viem), installed from its lock file.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "browser tests: install Chromium (sudo apt-get install chromium) or set CHROMIUM" >&2
    exit 1
  fi
  echo "browser tests: installing Chromium (Debian package)…"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
lock=tests/browser/package-lock.json
stamp=tests/browser/node_modules/.installed
if [ ! -f "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
  touch "$stamp"
fi
