#!/usr/bin/env bash
# Runs the operator CLI (svcctl) against the dev stack's table (.dev/env, written by make dev),
# or, with AWS=1, against AWS with the caller's credentials and TABLE_NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${AWS:-0}" != 1 ] && [ "${1:-}" != sign-in ] && [ "${1:-}" != provision ] && [ "${1:-}" != renew ]; then
  if [ ! -f .dev/env ]; then
    echo "no dev stack found (.dev/env): start one with 'make dev', or set AWS=1 TABLE_NAME=… for AWS" >&2
    exit 2
  fi
  set -a; . .dev/env; set +a
fi
exec cargo run --quiet -p infra --bin svcctl -- "$@"
