#!/usr/bin/env bash
# The OpenAPI conformance run (make conformance; make test runs it beside the tests): the local
# stack of `make dev` on ports and a folder of its own (.dev/conformance), an API key and a
# session, then
# schemathesis against the served document (GET /api/openapi.json): every operation with the
# key, and with the session those only a session gets past the door with; then what an x402
# indexer and a cataloguing facilitator read (infra/discovery-check.py); then an MCP client
# session with the official SDKs (infra/mcp-session.py: the x402 MCP client pays;
# tests/mcp-client: the TypeScript SDK, which checks every result against the tool's output
# schema; tests/mcp-client/oauth.mjs: the SDK's own OAuth client, its human consenting in the
# console in Chromium), then smart wallets that sign in and pay with x402's fetch client
# (tests/mcp-client/smart-wallet.mjs), then the web console in headless Chromium
# (infra/browser-tests.sh); last, the provider's simulator, the service's server objects and every
# body the run wrote to the provider held to the provider's own Python SDK
# (infra/provider-contract.py). Payments go over the stack's real rails (anvil, Circle's USDC,
# x402's facilitator), from anvil's funded accounts. It fails on a server error,
# a status code the document does not list, a response that breaks its schema, content type or
# documented headers. Settings: CONFORMANCE_PORT (9300, and the five ports after it),
# CONFORMANCE_MAX_EXAMPLES (25 per operation and phase; CONFORMANCE_SESSION_EXAMPLES, 10, for the
# session's run), CONFORMANCE_SEED (20261123; `random`
# for a new one each run). One worker: hypothesis is not thread-safe (seen: an internal KeyError).
# The rate limits are raised out of the way (their 429 is documented and tested in ratelimits.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
base=${CONFORMANCE_PORT:-9300}
export API_PORT=$base MOTO_PORT=$((base + 1)) SIM_PORT=$((base + 2)) \
  FACILITATOR_PORT=$((base + 3)) SSH_PORT=$((base + 4)) RPC_PORT=$((base + 5)) DEV_DIR=.dev/conformance \
  TABLE_NAME=cloud-api-conformance SIM_DEPLOY_SECONDS=2 SIM_NETWORK_SECONDS=1 RECONCILE_SECONDS=5 \
  WATCH_FLAGS=--ignore-changes RATE_LIMIT_BURST=1000000 SIGN_IN_RATE_BURST=1000000 \
  OWNER_RATE_BURST=1000000 ADDRESS_RATE_BURST=1000000 FAILED_AUTH_BURST=1000000
mkdir -p "$DEV_DIR"
# The stack in its own process group (setsid), so that stopping it stops all of it.
setsid infra/dev.sh >"$DEV_DIR/stack.log" 2>&1 &
stack=$!
stop() {
  # The runs still going (a failure elsewhere ends the run); not the stack, which gets one TERM
  # only: a second one while its cleanup runs would end it before it stops its services.
  local pid
  for pid in $(jobs -p); do [ "$pid" = "$stack" ] || kill "$pid" 2>/dev/null || true; done
  kill -TERM -- "-$stack" 2>/dev/null || true
  wait "$stack" 2>/dev/null || true
}
trap 'stop; rm -rf "${work:-}"' EXIT
started=$(date +%s)
# Says what comes next, with the seconds since the run started (where the time goes).
step() { echo "conformance: [$(($(date +%s) - started)) s] $1"; }
if ! infra/wait-for.sh "http://127.0.0.1:$API_PORT/api/cloud/status" 900 "$stack"; then
  tail -40 "$DEV_DIR/stack.log" "$DEV_DIR/watch.log" 2>/dev/null
  exit 1
fi
echo "conformance: the stack answered after $(($(date +%s) - started)) s"
built="$(infra/target-dir.sh)/debug"
export SVCCTL="$built/svcctl"
key=$(set -a; . "$DEV_DIR/env"; set +a
  "$SVCCTL" create-key --owner 0x1111111111111111111111111111111111111111 \
    --name conformance | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["key"])')
# A signed-in human's session, for the session-only routes (keys): a throwaway wallet.
wallet=0x$("$BIN/python" -c 'import secrets; print(secrets.token_hex(32))')
session=$(PRIVATE_KEY=$wallet "$SVCCTL" sign-in --api "http://127.0.0.1:$API_PORT" \
  | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
# schemathesis keeps its examples database in the working directory: a scratch one.
work=$(mktemp -d -t conformance.XXXXXX)
# The document, fetched once (a function's first invocation under `cargo lambda watch` has been
# seen to answer 500 from the emulator itself; a retry gets the function's answer).
"$BIN/python" - "http://127.0.0.1:$API_PORT/api/openapi.json" "$work/openapi.json" <<'PY'
import sys, time, urllib.request
for attempt in range(10):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=30) as answer:
            open(sys.argv[2], "wb").write(answer.read())
            sys.exit(0)
    except Exception as error:
        print(f"conformance: the document is not served yet ({error}); retrying", file=sys.stderr)
        time.sleep(2)
sys.exit("conformance: the document was never served")
PY
# A fixed seed unless told otherwise, so that CI runs the same cases each time.
seed=(--seed "${CONFORMANCE_SEED:-20261123}")
[ "${CONFORMANCE_SEED:-}" = random ] && seed=()
checks=not_a_server_error,status_code_conformance,content_type_conformance
checks+=,response_headers_conformance,response_schema_conformance
# One schemathesis run (`once <folder> <args…>`): in a scratch folder of its own, where it keeps
# its examples database, so that runs side by side share nothing but the stack.
once() {
  mkdir -p "$1"
  (cd "$1" && PYTHONPATH="$OLDPWD/infra" SCHEMATHESIS_HOOKS=conformance_hooks \
    "$BIN/schemathesis" run "$work/openapi.json" --url "http://127.0.0.1:$API_PORT" \
    --checks "$checks" \
    --phases examples,coverage,fuzzing \
    --max-examples "${CONFORMANCE_MAX_EXAMPLES:-25}" \
    --request-timeout 30 \
    --workers 1 \
    --suppress-health-check all \
    "${seed[@]}" "${@:2}")
}
# One seeded run (`run <name> <args…>`), its output in $DEV_DIR/<name>.log: its summary when it
# passes, all of it when it fails. If it fails only on cargo lambda watch's own 500 (its body's
# type is https://httpstatuses.com/500; the functions' problem types are /problems/…), the same
# seeded cases of the operations that failed, up to twice more. The emulator answers a function's
# `/response` before it has read the response's body, so a large body (the document: 120 KB) is
# now and then cut off under it and it answers 500 without the function having failed (measured:
# 5 in 2,700 calls of the document from three clients at once, none from one client; none in
# 1,200 calls of a 19-byte answer from three). A failure of the service's own fails every time.
run() {
  local name=$1 log="$DEV_DIR/$1.log" attempt op skip=
  shift
  # The run's arguments without its include filters: schemathesis ORs include filters, and a
  # retry names its operations (a name carries its method and path).
  local args=("$@") base=()
  for op in "$@"; do
    if [ -n "$skip" ]; then skip=
    elif [ "$op" = --include-method ] || [ "$op" = --include-path-regex ]; then skip=1
    else base+=("$op"); fi
  done
  for attempt in 1 2 3; do
    if once "$work/$name" "${args[@]}" >"$log" 2>&1; then
      echo "conformance: $name: $(grep -A1 '^Test cases:' "$log" | tail -1 | xargs), $(tail -1 "$log" | tr -d '=' | xargs)"
      return 0
    fi
    grep -q 'httpstatuses.com/500' "$log" && ! grep -q '/problems/internal' "$log" || break
    [ "$attempt" -lt 3 ] || break
    # Only the operations that failed (their sections, `___ GET /api/… ___`): the others passed.
    local ops=() only=()
    while read -r op; do ops+=("$op") && only+=(--include-name "$op"); done \
      < <(sed -nE 's/^_+ ([A-Z]+ [^ ]+) _+$/\1/p' "$log" | sort -u)
    echo "conformance: $name: the emulator answered 500 by itself; the same seeded cases once" \
      "more, of ${ops[*]:-every operation}"
    cp "$log" "$log.$attempt"
    [ ${#ops[@]} -eq 0 ] || args=("${base[@]}" "${only[@]}")
  done
  cat "$log"
  return 1
}

# How many 500s the emulator has answered so far (its own, and any function's: a function's
# own fails again when tried again).
emulator_500s() {
  grep -c 'response failed classification=Status code: 500' "$DEV_DIR/watch.log" 2>/dev/null || true
}
# One client session (`client <name> <command…>`), its output in $DEV_DIR/<name>.log, shown
# when it fails. Like a schemathesis run (above), once more when it failed only on the
# emulator's own 500 (seen on an MCP client's request right after the function answered the
# one before it): the session starts over, with a payment of its own.
client() {
  local name=$1 log="$DEV_DIR/$1.log" before after
  shift
  before=$(emulator_500s)
  "$@" >"$log" 2>&1 && return 0
  after=$(emulator_500s)
  # The Python SDK reports an error response without its body: the emulator's log tells.
  if { grep -q 'httpstatuses.com/500' "$log" || [ "${after:-0}" -gt "${before:-0}" ]; } \
    && ! grep -q '/problems/internal' "$log"; then
    echo "conformance: $name: the emulator answered 500 by itself; the session once more"
    "$@" >"$log" 2>&1 && return 0
  fi
  cat "$log"
  return 1
}
# Waits for every job given (`all <pid>…`) and fails when any of them failed.
all() {
  local failed=0 pid
  for pid in "$@"; do wait "$pid" || failed=1; done
  return "$failed"
}
# The key's operations run three sets at a time, split by the functions that serve them (each
# run retries the emulator's own 500, above), so that no function is called by two at once: the
# emulator has one instance of each function, and calls of one function side by side are what
# cut its answers off (above). Everything else runs alone. The sandboxes' long polls hold their
# set for most of its time without work (measured: 131 s for the sandboxes, payments, keys,
# notifications and MCP together, against under 40 s for the provider's routes).
sandboxes='^/api/sandboxes([/?]|$)'
cloud='^/api/(cloud|openapi\.json|auth|payments)([/?]|$)'
step "every operation with an API key: three sets of functions side by side"
run key-sandboxes --header "X-API-Key: $key" --include-path-regex "$sandboxes" &
first=$!
run key-cloud --header "X-API-Key: $key" --include-path-regex "$cloud" &
second=$!
run key-rest --header "X-API-Key: $key" \
  --exclude-path-regex '^/api/(sandboxes|cloud|openapi\.json|auth|payments)([/?]|$)' &
all "$first" "$second" $!
step "every operation only a session answers (but logout, which would end it)"
# Who each route lets in, with either credential, is a test's (every row, four ways:
# callers::every_row_admits_exactly_the_callers_its_column_names); this run checks the answers
# of the routes only a session gets past the door with (keys, approvals, who is signed in),
# with fewer examples.
run session --header "Authorization: Bearer $session" --exclude-operation-id logout \
  --include-path-regex '^/api/(keys|approvals|auth/me)([/?]|$)' \
  --max-examples "${CONFORMANCE_SESSION_EXAMPLES:-10}"
# The payments go over the real rails (anvil, Circle's USDC, x402's facilitator): each payer is
# one of anvil's default accounts, funded with 1,000 USDC when the rails start.
anvil_key() {
  case $1 in
    1) echo 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d ;;
    2) echo 0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a ;;
    3) echo 0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6 ;;
    4) echo 0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a ;;
    5) echo 0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba ;;
  esac
}
# A key of the signed-in owner whose policy refuses every paid server: each MCP session asks with
# it, the owner approves (signing with the wallet), and the same call pays.
approval_key=$("$BIN/python" - "http://127.0.0.1:$API_PORT/api/keys/generate" "$session" <<'PY'
import json, sys, urllib.request
body = json.dumps({"name": "needs approval", "policy": {"dailySpendLimit": 0.000001}}).encode()
request = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
    "content-type": "application/json", "authorization": f"Bearer {sys.argv[2]}"})
print(json.load(urllib.request.urlopen(request))["key"])
PY
)
export APPROVAL_KEY=$approval_key OWNER_PRIVATE_KEY=$wallet OWNER_SESSION=$session
step "what an x402 indexer and a cataloguing facilitator read (x402's own bazaar code)"
client discovery "$BIN/python" infra/discovery-check.py "http://127.0.0.1:$API_PORT" "$key"
grep '^discovery: ' "$DEV_DIR/discovery.log"
step "an MCP client session with the official SDKs (lists tools, quotes, pays; an approval)"
MCP_URL="http://127.0.0.1:$API_PORT/mcp" API_KEY=$key PRIVATE_KEY=$(anvil_key 1) \
  client mcp-session "$BIN/python" infra/mcp-session.py
grep -E '^== |"transaction"|"state"' "$DEV_DIR/mcp-session.log"
step "the same with the official TypeScript SDK (checks every result against its output schema)"
MCP_URL="http://127.0.0.1:$API_PORT/mcp" API_KEY=$key PRIVATE_KEY=$(anvil_key 2) \
  client mcp-session-ts node tests/mcp-client/session.mjs
grep -E '^== |"transaction"' "$DEV_DIR/mcp-session-ts.log"
step "MCP over OAuth with the TypeScript SDK's own client: consent in Chromium, a paid server"
MCP_URL="http://127.0.0.1:$API_PORT/mcp" PRIVATE_KEY=$(anvil_key 1) \
  CHROMIUM=${CHROMIUM:-$(command -v chromium)} client mcp-oauth node tests/mcp-client/oauth.mjs
grep -E '^== ' "$DEV_DIR/mcp-oauth.log"
step "smart wallets, one deployed (ERC-1271) and one not yet (ERC-6492), sign in and pay with x402's fetch client"
factory=$("$BIN/python" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"): print(json.loads(line)["smartWalletFactory"])' "$DEV_DIR/rails.log")
API_URL="http://127.0.0.1:$API_PORT" RPC_URL="http://127.0.0.1:$RPC_PORT" SMART_WALLET_FACTORY=$factory \
  GAS_KEY=$(anvil_key 5) client smart-wallet node tests/mcp-client/smart-wallet.mjs
grep -E '^== ' "$DEV_DIR/smart-wallet.log"
step "the console in headless Chromium (sign-in, keys, agents, servers, renewal)"
CONSOLE_URL="http://127.0.0.1:$API_PORT" OWNER_KEY=$(anvil_key 3) PAYER_KEY=$(anvil_key 4) \
  RPC_URL="http://127.0.0.1:$RPC_PORT" SMART_WALLET_FACTORY=$factory infra/browser-tests.sh
step "the simulator, our server objects and all the run wrote to the provider, held to its SDK"
sim_url=$(set -a; . "$DEV_DIR/env"; echo "$UPSTREAM_URL")
sim_token=$(set -a; . "$DEV_DIR/env"; echo "$UPSTREAM_TOKEN")
client provider-contract "$BIN/python" infra/provider-contract.py "$sim_url" "$sim_token" \
  "http://127.0.0.1:$API_PORT" "$key"
grep '^== ' "$DEV_DIR/provider-contract.log"
echo "conformance: done in $(($(date +%s) - started)) s"
