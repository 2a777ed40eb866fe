#!/usr/bin/env bash
# The local stack (make dev): moto DynamoDB, the table, the upstream simulator (unless a real
# upstream is configured), and every function under `cargo lambda watch` with the router table
# of Cargo.toml, so http://127.0.0.1:9000/api/... answers on the real paths. Ctrl-C stops all.
#
# The payment rails are the real ones (infra/rails.sh): anvil on RPC_PORT with Circle's USDC at
# Base Sepolia's address, and x402's own facilitator on FACILITATOR_PORT; anvil's ten default
# accounts hold 1,000 USDC each.
#
# Settings (environment): API_PORT (9000), MOTO_PORT (5000), SIM_PORT (4010), FACILITATOR_PORT
# (4020), RPC_PORT (8545), TABLE_NAME (cloud-api-dev), DEV_DIR (.dev: logs and the env file),
# SIM_DEPLOY_SECONDS (20); UPSTREAM_URL + UPSTREAM_TOKEN to use a real upstream; FACILITATOR_URL
# and RPC_URL for another facilitator and chain; X402_PAY_TO; WATCH_FLAGS (more cargo lambda
# watch flags);
# ORDER_LEASE_SECONDS, ORDER_DEADLINE_SECONDS, ORDER_CREATE_ATTEMPTS,
# REQUEST_BUDGET_SECONDS (the time a request has: cargo lambda watch sends no real deadline);
# PAID_PERIOD_SECONDS, EXPIRY_GRACE_SECONDS (watch a lease expire in a minute); SIM_NETWORK_SECONDS
# (8), SSH_PORT (4022: each simulated server's SSH, on its own 127.x.y.z address, where the
# readiness check dials and an agent logs in with its key); RECONCILE_SECONDS (15: how often
# the reconciler and its refresher run, and webhook retries are sent);
# DEPLOY_DEADLINE_VPS_SECONDS, DEPLOY_DEADLINE_BAREMETAL_SECONDS, UPSTREAM_MAX_RPS; the rate limits
# RATE_LIMIT_PER_SECOND, RATE_LIMIT_BURST, SIGN_IN_RATE_PER_SECOND, SIGN_IN_RATE_BURST,
# OWNER_RATE_BURST, ADDRESS_RATE_BURST, FAILED_AUTH_BURST, MAX_WAITS_PER_OWNER.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
export PATH="$BIN:$PATH"
API_PORT=${API_PORT:-9000}
MOTO_PORT=${MOTO_PORT:-5000}
SIM_PORT=${SIM_PORT:-4010}
FACILITATOR_PORT=${FACILITATOR_PORT:-4020}
RPC_PORT=${RPC_PORT:-8545}
TABLE_NAME=${TABLE_NAME:-cloud-api-dev}
DEV_DIR=${DEV_DIR:-.dev}
mkdir -p "$DEV_DIR"
for port in "$API_PORT" "$MOTO_PORT" "$SIM_PORT" "$FACILITATOR_PORT" "$RPC_PORT"; do
  if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)) != 0)"; then
    echo "port $port is in use (another make dev?); set API_PORT/MOTO_PORT/SIM_PORT/FACILITATOR_PORT/RPC_PORT" >&2
    exit 1
  fi
done

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo; echo "stopping the local stack…"
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f "$DEV_DIR/env"
}
trap cleanup EXIT INT TERM
set -m  # each background job in its own process group, so its children stop with it

echo "building the workspace (first run takes a few minutes)…"
cargo build --quiet --workspace --bins
# Where cargo put them: target/, or CARGO_TARGET_DIR, or a build.target-dir of cargo's config.
built="$(infra/target-dir.sh)/debug"

"$BIN/python" infra/moto-server.py -H 127.0.0.1 -p "$MOTO_PORT" >"$DEV_DIR/moto.log" 2>&1 &
pids+=($!)
infra/wait-for.sh "http://127.0.0.1:$MOTO_PORT/moto-api/" 30 "$!"

# Quoted values: both bash (svcctl.sh) and cargo-lambda's dotenv parser read this file.
cat >"$DEV_DIR/env" <<ENV
TABLE_NAME="$TABLE_NAME"
AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$MOTO_PORT"
AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$MOTO_PORT"
AWS_REGION="us-east-1"
AWS_ACCESS_KEY_ID="dev"
AWS_SECRET_ACCESS_KEY="dev"
AWS_EC2_METADATA_DISABLED="true"
CURRENCY_RATES="${CURRENCY_RATES:-EUR=1.16}"
PRICE_MARKUP_PERCENT="${PRICE_MARKUP_PERCENT:-0}"
RUST_LOG="${RUST_LOG:-info}"
SIWE_DOMAINS="127.0.0.1:$API_PORT,localhost:$API_PORT"
SIWE_URI_PREFIXES="http://127.0.0.1:$API_PORT,http://localhost:$API_PORT"
SIWE_CHAIN_IDS="8453,84532"
WEB_ORIGIN="${WEB_ORIGIN:-http://localhost:5173}"
X402_NETWORK="${X402_NETWORK:-base-sepolia}"
X402_PAY_TO="${X402_PAY_TO:-0x209693Bc6afc0C5328bA36FaF03C514EF312287C}"
WEBHOOK_LOCAL_RECEIVER="1"
PUBLIC_BASE_URL="${PUBLIC_BASE_URL:-http://127.0.0.1:$API_PORT}"
ENV
if [ -n "${UPSTREAM_URL:-}" ] && [ -n "${UPSTREAM_TOKEN:-}" ]; then
  upstream="$UPSTREAM_URL (configured)"
  printf 'UPSTREAM_URL="%s"\nUPSTREAM_TOKEN="%s"\n' "$UPSTREAM_URL" "$UPSTREAM_TOKEN" >>"$DEV_DIR/env"
else
  token="dev-upstream-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
  # Each simulated server answers SSH on its own 127.x.y.z address (Linux); where only
  # 127.0.0.1 is local (macOS), one listener stands in for them all and lets no one in.
  if [ "$(uname)" = Linux ]; then
    ssh_args=(--ssh-port "${SSH_PORT:-4022}")
    printf 'SSH_PORT="%s"\n' "${SSH_PORT:-4022}" >>"$DEV_DIR/env"
  else
    ssh_args=(--ssh-listen "127.0.0.1:${SSH_PORT:-4022}")
    printf 'SSH_PROBE_TARGET="127.0.0.1:%s"\n' "${SSH_PORT:-4022}" >>"$DEV_DIR/env"
  fi
  "$built"/upstream-sim --listen "127.0.0.1:$SIM_PORT" --token "$token" \
    --deploy-seconds "${SIM_DEPLOY_SECONDS:-20}" --network-seconds "${SIM_NETWORK_SECONDS:-8}" \
    "${ssh_args[@]}" >"$DEV_DIR/upstream-sim.log" 2>&1 &
  pids+=($!)
  infra/wait-for.sh "http://127.0.0.1:$SIM_PORT/v1/plans" 30 "$!"
  upstream="http://127.0.0.1:$SIM_PORT/v1 (simulator; log $DEV_DIR/upstream-sim.log)"
  printf 'UPSTREAM_URL="http://127.0.0.1:%s/v1"\nUPSTREAM_TOKEN="%s"\n' "$SIM_PORT" "$token" >>"$DEV_DIR/env"
fi
if [ -n "${FACILITATOR_URL:-}" ] && [ -n "${RPC_URL:-}" ]; then
  rails="facilitator $FACILITATOR_URL, chain $RPC_URL (configured)"
  printf 'FACILITATOR_URL="%s"\nRPC_URL="%s"\n' "$FACILITATOR_URL" "$RPC_URL" >>"$DEV_DIR/env"
else
  infra/rails.sh run "$RPC_PORT" "$FACILITATOR_PORT" >"$DEV_DIR/rails.log" 2>&1 &
  pids+=($!)
  infra/wait-for.sh "http://127.0.0.1:$FACILITATOR_PORT/supported" 120 "$!" || { cat "$DEV_DIR/rails.log"; exit 1; }
  rails="x402's facilitator http://127.0.0.1:$FACILITATOR_PORT on anvil http://127.0.0.1:$RPC_PORT
               (Base Sepolia, chain 84532; USDC 0x036CbD53842c5426634e7929541eC2318f3dCF7e;
               anvil's ten default accounts hold 1,000 USDC each; log $DEV_DIR/rails.log)"
  printf 'FACILITATOR_URL="http://127.0.0.1:%s"\nRPC_URL="http://127.0.0.1:%s"\n' \
    "$FACILITATOR_PORT" "$RPC_PORT" >>"$DEV_DIR/env"
fi
for name in ORDER_LEASE_SECONDS ORDER_DEADLINE_SECONDS ORDER_CREATE_ATTEMPTS REQUEST_BUDGET_SECONDS \
  PAID_PERIOD_SECONDS EXPIRY_GRACE_SECONDS DEPLOY_DEADLINE_VPS_SECONDS DEPLOY_DEADLINE_BAREMETAL_SECONDS \
  UPSTREAM_MAX_RPS RATE_LIMIT_PER_SECOND RATE_LIMIT_BURST SIGN_IN_RATE_PER_SECOND SIGN_IN_RATE_BURST \
  OWNER_RATE_BURST ADDRESS_RATE_BURST FAILED_AUTH_BURST MAX_WAITS_PER_OWNER; do
  if [ -n "${!name:-}" ]; then printf '%s="%s"\n' "$name" "${!name}" >>"$DEV_DIR/env"; fi
done
chmod 600 "$DEV_DIR/env"

set -a; . "$DEV_DIR/env"; set +a
"$built"/svcctl create-table >/dev/null
# The webhook delivery queue (SQS FIFO) in the same moto.
queue_url=$("$built"/svcctl create-queue | python3 -c 'import json, sys; print(json.load(sys.stdin)["url"])')
printf 'DELIVERY_QUEUE_URL="%s"\n' "$queue_url" >>"$DEV_DIR/env"
export DELIVERY_QUEUE_URL="$queue_url"

# WATCH_FLAGS: more flags for cargo lambda watch (the conformance run adds --ignore-changes).
# shellcheck disable=SC2086
cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$API_PORT" --env-file "$DEV_DIR/env" \
  --disable-cors ${WATCH_FLAGS:-} >"$DEV_DIR/watch.log" 2>&1 &
pids+=($!)
infra/wait-for.sh "http://127.0.0.1:$API_PORT/api/cloud/status" 120 "$!" || { tail -20 "$DEV_DIR/watch.log"; exit 1; }

# The reconciler: what the scheduled function does every minute in AWS, every 15 s here
# (RECONCILE_SECONDS).
( while sleep "${RECONCILE_SECONDS:-15}"; do "$built"/svcctl reconcile >>"$DEV_DIR/reconciler.log" 2>&1 || true; done ) &
pids+=($!)

# The table's stream into the events function's handler (webhook deliveries queued), as the event
# source mapping does in AWS: moto's DynamoDB Streams API, read every half second.
"$built"/svcctl stream >>"$DEV_DIR/events.log" 2>&1 &
pids+=($!)

# The delivery queue into the deliveries function's handler (webhook sends), as the event
# source mapping does in AWS: moto's SQS, received every half second.
"$built"/svcctl deliver >>"$DEV_DIR/deliveries.log" 2>&1 &
pids+=($!)

cat <<INFO

  Local stack is up
    API        http://127.0.0.1:$API_PORT/api/...   (cargo lambda watch; log $DEV_DIR/watch.log)
    DynamoDB   http://127.0.0.1:$MOTO_PORT   (moto; table $TABLE_NAME; log $DEV_DIR/moto.log)
    upstream   $upstream
    x402       $rails
    reconciler a pass every ${RECONCILE_SECONDS:-15} s (log $DEV_DIR/reconciler.log; make reconcile runs one now)
    events     the table's stream into the events function (webhooks queued; log $DEV_DIR/events.log)
    deliveries the delivery queue into the deliveries function (webhooks sent; log $DEV_DIR/deliveries.log)

  Sign in with a wallet, then make a key (shown once):
    PRIVATE_KEY=0x… make sign-in            # prints {address, token, expiresAt}
    curl -s -X POST http://127.0.0.1:$API_PORT/api/keys/generate -H "Authorization: Bearer <token>" \
      -H 'content-type: application/json' -d '{"name":"agent-1"}'
  or, as an operator: make key OWNER=0x1111111111111111111111111111111111111111
  Then, e.g.:
    curl -s http://127.0.0.1:$API_PORT/api/cloud/plans      # anyone: what is sold, its price
    curl -s http://127.0.0.1:$API_PORT/api/cloud/regions -H "X-API-Key: svc_…"

  Ctrl-C stops everything.
INFO
wait
