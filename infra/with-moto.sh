#!/usr/bin/env bash
# Runs a command with a moto DynamoDB server of its own on a free loopback port, then stops it.
#   infra/with-moto.sh cargo test --workspace
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp -t moto.XXXXXX.log)
"$BIN/python" infra/moto-server.py -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto=$!
trap 'kill "$moto" 2>/dev/null || true; wait "$moto" 2>/dev/null || true; rm -f "$log"' EXIT
infra/wait-for.sh "http://127.0.0.1:$port/moto-api/" 30 "$moto" || { cat "$log"; exit 1; }
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port" AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$port" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true
echo "moto DynamoDB and SQS on $AWS_ENDPOINT_URL_DYNAMODB (pid $moto)"
"$@"
