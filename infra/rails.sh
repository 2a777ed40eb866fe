#!/usr/bin/env bash
# The real payment rails (infra/rails/rails.mjs): anvil with Circle's USDC at Base Sepolia's
# address and x402's own facilitator, from the pinned npm packages of infra/rails (installed
# from its lock file on first use).
#
#   infra/rails.sh install                 install the pinned packages only
#   infra/rails.sh run RPC_PORT FAC_PORT   run in the foreground (make dev)
#   infra/rails.sh with CMD…               run CMD with a pair of its own on free ports, its
#                                          addresses in RAILS_RPC_URL, RAILS_FACILITATOR_URL,
#                                          RAILS_SMART_WALLET_FACTORY, RAILS_ORIGIN_WALLET and
#                                          RAILS_FACILITATOR_SIGNER (make test), then stop them
set -euo pipefail
cd "$(dirname "$0")/.."
install() {
  local stamp=infra/rails/node_modules/.installed
  if [ ! -f "$stamp" ] || [ infra/rails/package-lock.json -nt "$stamp" ]; then
    npm ci --prefix infra/rails --no-audit --no-fund --loglevel=error
    touch "$stamp"
  fi
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
case "${1:-}" in
  install) install ;;
  run)
    install
    exec node infra/rails/rails.mjs --rpc-port "$2" --facilitator-port "$3"
    ;;
  with)
    shift
    install
    rpc=$(free_port); fac=$(free_port)
    log=$(mktemp -t rails.XXXXXX.log)
    node infra/rails/rails.mjs --rpc-port "$rpc" --facilitator-port "$fac" >"$log" 2>&1 &
    rails=$!
    trap 'kill "$rails" 2>/dev/null || true; wait "$rails" 2>/dev/null || true; rm -f "$log"' EXIT
    for _ in $(seq 1 300); do
      grep -q '"facilitatorUrl"' "$log" && break
      kill -0 "$rails" 2>/dev/null || { cat "$log"; exit 1; }
      sleep 0.2
    done
    grep -q '"facilitatorUrl"' "$log" || { cat "$log"; echo "the rails did not start" >&2; exit 1; }
    started() {
      python3 -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"): print(json.loads(line)[sys.argv[2]])' "$log" "$1"
    }
    RAILS_SMART_WALLET_FACTORY=$(started smartWalletFactory)
    RAILS_ORIGIN_WALLET=$(started originWallet)
    RAILS_FACILITATOR_SIGNER=$(started facilitator)
    export RAILS_RPC_URL="http://127.0.0.1:$rpc" RAILS_FACILITATOR_URL="http://127.0.0.1:$fac" \
      RAILS_SMART_WALLET_FACTORY RAILS_ORIGIN_WALLET RAILS_FACILITATOR_SIGNER
    echo "payment rails: anvil $RAILS_RPC_URL, x402 facilitator $RAILS_FACILITATOR_URL (pid $rails)"
    "$@"
    ;;
  *) echo "usage: infra/rails.sh install | run RPC_PORT FAC_PORT | with CMD…" >&2; exit 2 ;;
esac
