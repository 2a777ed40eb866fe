#!/usr/bin/env bash
# What the console's browser tests need (make test runs this): Chromium from Debian's packages
# (installed with apt-get when missing; CI and developer machines run as root) and the pinned npm
# packages of tests/browser (puppeteer-core, viem) and tests/mcp-client (the MCP TypeScript SDK,
# x402's client), installed from their lock files.
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
# The pinned npm packages of the browser tests and of the TypeScript MCP session, each from its
# lock file.
for dir in tests/browser tests/mcp-client; do
  stamp=$dir/node_modules/.installed
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    touch "$stamp"
  fi
done
