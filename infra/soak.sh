#!/usr/bin/env bash
# make soak: the seeded simulation of the money (tests/tests/e2e/simulation.rs) over SEEDS seeds
# from SEED_FROM, in chunks of CHUNK seeds, SHARDS chunks at a time. Each chunk runs in a
# process of its own with a moto of its own: moto keeps some memory of every table it ever
# held (about 5 MB a seed, even deleted), and one seed keeps a core about 90 % busy (moto 60 %,
# the test 30 %), so two chunks side by side use both cores. SEED=n replays one seed exactly.
# Prints each chunk's figures as it ends, then the totals (infra/soak-summary.py, which also
# sums the chunks that finished of an interrupted run: `.venv/bin/python infra/soak-summary.py
# <logs>`); fails if any seed violated.
#   SEEDS=10000 SEED_FROM=100000 infra/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# REPLAY=1: each seed twice, its digests compared (`a_seed_replays_to_the_same_digest`).
if [ -n "${REPLAY:-}" ]; then
  export FILTER='test(=simulation::a_seed_replays_to_the_same_digest)'
else
  export FILTER='test(=simulation::simulation_seeds_0_to_4)'
fi
sim() {
  infra/with-moto.sh cargo nextest run -p e2e --no-capture --hide-progress-bar -E "$FILTER"
}
export -f sim
if [ -n "${SEED:-}" ]; then
  SEED="$SEED" sim
  exit
fi
seeds=${SEEDS:-500} from=${SEED_FROM:-1000} chunk=${CHUNK:-250} shards=${SHARDS:-2}
cargo nextest run -p e2e --no-run --cargo-quiet
logs=$(mktemp -d -t soak.XXXXXX)
export LOGS=$logs END=$((from + seeds))
echo "soak: $seeds seeds from $from, chunks of $chunk, $shards at a time; logs in $logs"
started=$(date +%s)
# A chunk: its figures line, or FAILED with its log's path.
chunk() {
  local start=$1 count=$((END - $1 < CHUNK ? END - $1 : CHUNK))
  if SEEDS=$count SEED_FROM=$start sim >"$LOGS/$start.log" 2>&1; then
    grep '^simulation: [0-9]' "$LOGS/$start.log" || echo "chunk $start: no figures"
  else
    grep '^simulation: [0-9]' "$LOGS/$start.log" || true
    echo "chunk $start: FAILED (log: $LOGS/$start.log)"
  fi
}
export -f chunk
export CHUNK=$chunk
seq "$from" "$chunk" $((END - 1)) | xargs -P "$shards" -I{} bash -c 'chunk {}' | tee "$logs/chunks"
elapsed=$(($(date +%s) - started))
.venv/bin/python infra/soak-summary.py "$logs" "$elapsed"
