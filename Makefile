# Developer and operator commands. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: help venv dev test generate soak conformance browser mcp-session bench hostile lint fmt build build-x86 deploy table key keys revoke-key sign-in payments payment refund reconcile leases renew provision

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# Two of anvil's default accounts, which the local rails fund with 1,000 USDC each: the payers of
# make mcp-session unless PRIVATE_KEY is given.
ANVIL_KEY_1 := 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
ANVIL_KEY_2 := 0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a

# uv (pinned) installs the pinned tools: it resolves and downloads in parallel (~15 s cold
# where pip took ~2 min).
UV_VERSION := 0.13.9

$(VENV)/.installed: infra/requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r infra/requirements.txt
	touch $@

venv: $(VENV)/.installed ## Install the pinned dev tools (moto, cargo-lambda, cfn-lint) into .venv

dev: venv ## Run the whole API locally on http://127.0.0.1:9000 (Ctrl-C stops it)
	infra/dev.sh

test: ## Lint (as make lint), every test against a moto DynamoDB started for the run, then the conformance run (API, MCP, console in Chromium)
	infra/test.sh

generate: venv ## Write what is made from the route table (shared/domain/src/api.rs) and the functions' grants (api/access.rs): template.yaml's HTTP events and DynamoDB statements, Cargo.toml's watch router, server.json (the MCP Registry's), the example events in events/
	cargo run -q -p infra --bin svcctl -- generate
	EXAMPLES_WRITE=1 infra/with-moto.sh cargo nextest run -p e2e --hide-progress-bar -E 'test(=examples::there_is_a_current_example_event_for_every_route)'

soak: venv ## The seeded simulation of the money (agents, reconcilers, clock, operator side by side) over SEEDS=n seeds from SEED_FROM (default 500 from 1000), SHARDS chunks of CHUNK seeds at a time; prints seeds/s, outcomes, violating seeds; REPLAY=1 runs each seed twice and compares their digests. SEED=n replays one
	SEEDS=$(or $(SEEDS),500) SEED_FROM=$(or $(SEED_FROM),1000) SHARDS=$(or $(SHARDS),2) \
	  CHUNK=$(or $(CHUNK),250) $(if $(SEED),SEED=$(SEED)) $(if $(REPLAY),REPLAY=$(REPLAY)) infra/soak.sh

mcp-session: venv ## MCP client sessions on make dev with KEY=svc_…, Python SDK then TypeScript SDK: list tools, quote, pay for a server (x402, from anvil's funded accounts unless PRIVATE_KEY)
	@test -n "$(KEY)" || { echo "usage: make mcp-session KEY=svc_… [PLAN=…] [API=http://127.0.0.1:9000]"; exit 2; }
	test -f tests/mcp-client/node_modules/.installed || { npm ci --prefix tests/mcp-client --no-audit --no-fund --loglevel=error && touch tests/mcp-client/node_modules/.installed; }
	MCP_URL="$(or $(API),http://127.0.0.1:9000)/mcp" API_KEY="$(KEY)" PLAN="$(or $(PLAN),B1-1-1gb-20s-shared)" \
	  SVCCTL="$$(infra/target-dir.sh)/debug/svcctl" \
	  PRIVATE_KEY="$(or $(PRIVATE_KEY),$(ANVIL_KEY_1))" $(BIN)/python infra/mcp-session.py
	MCP_URL="$(or $(API),http://127.0.0.1:9000)/mcp" API_KEY="$(KEY)" PLAN="$(or $(PLAN),B1-1-1gb-20s-shared)" \
	  PRIVATE_KEY="$(or $(PRIVATE_KEY),$(ANVIL_KEY_2))" node tests/mcp-client/session.mjs

conformance: venv ## schemathesis, an MCP session and the console in Chromium against a local stack of its own
	infra/conformance.sh

browser: ## The console in headless Chromium against make dev (CONSOLE_URL=…): screenshots in target/console-screenshots
	infra/browser-tests.sh

bench: venv ## Cold start of every function beside two floor binaries built in the same run (init, p50, RSS, zip, store calls per request), then what waiting costs, what a webhook costs (latency p50/p99, store calls), webhooks at scale (10,000 events to 100 endpoints, 10 hanging: all delivered, in order, p50/p99), what a paid provision costs on the real rails (p50/p99 beside settle + create alone), and from a paying request to an SSH login (p50 beside settle + create + login alone)
	cargo lambda build --release --x86-64 --compiler cargo --output-format zip --workspace --exclude infra --exclude e2e
	target/x86_64-unknown-linux-gnu/release/tls-roots
	infra/with-moto.sh cargo run -q -p e2e --example benchmarks -- coldstart
	infra/with-moto.sh cargo run -q -p e2e --example benchmarks -- bench
	infra/with-moto.sh cargo run -q -p e2e --example benchmarks -- webhooks
	infra/with-moto.sh cargo run -q -p e2e --example benchmarks -- webhook_fleet
	infra/with-moto.sh infra/rails.sh with cargo run -q --profile hostile -p e2e --example benchmarks -- paid
	infra/with-moto.sh infra/rails.sh with cargo run -q --profile hostile -p e2e --example benchmarks -- shell

hostile: venv ## One honest owner's journey (sign in, key, webhook, pay, read, notified) alone, then beside a flood of free owners (worthless paid requests, smart-wallet sign-ins, SSH key churn, flapping webhooks): p50/p99 of both, their ratio, what the flood was answered
	infra/with-moto.sh cargo run -q --profile hostile -p e2e --example benchmarks -- hostile

lint: venv ## cfn-lint the template, cargo fmt --check, clippy and rustdoc with warnings as errors
	$(BIN)/cfn-lint template.yaml
	cargo fmt --all -- --check
	RUSTC_WORKSPACE_WRAPPER=$(CURDIR)/infra/lint-rustc.sh CLIPPY_ARGS=-Dwarnings \
	  cargo check --workspace --all-targets --quiet

fmt: ## Format the code
	cargo fmt --all

build: venv ## Build the arm64 Lambda bootstraps (target/lambda/<fn>/bootstrap), as AWS runs them
	cargo lambda build --release --arm64 --workspace --exclude infra --exclude e2e --exclude floor-hello --exclude floor-sdk --exclude tls-roots

build-x86: venv ## Build x86_64 bootstraps with plain cargo (what this machine can build)
	cargo lambda build --release --x86-64 --compiler cargo --workspace --exclude infra --exclude e2e --exclude floor-hello --exclude floor-sdk --exclude tls-roots

deploy: ## Build and deploy with the SAM CLI (needs AWS credentials and `sam`)
	sam build && sam deploy --guided

table: ## Create the table (TABLE_NAME; the dev stack's unless AWS=1)
	infra/svcctl.sh create-table

key: ## Create an API key for OWNER=0x… (NAME=…); printed once
	@test -n "$(OWNER)" || { echo "usage: make key OWNER=0x… [NAME=…]"; exit 2; }
	@infra/svcctl.sh create-key --owner "$(OWNER)" --name "$(or $(NAME),operator-issued)"

keys: ## List the API keys of OWNER=0x…
	@test -n "$(OWNER)" || { echo "usage: make keys OWNER=0x…"; exit 2; }
	@infra/svcctl.sh list-keys --owner "$(OWNER)"

revoke-key: ## Revoke key ID=key_… of OWNER=0x…
	@test -n "$(OWNER)" -a -n "$(ID)" || { echo "usage: make revoke-key OWNER=0x… ID=key_…"; exit 2; }
	@infra/svcctl.sh revoke-key --owner "$(OWNER)" --id "$(ID)"

sign-in: ## Sign in (SIWE) as the wallet in PRIVATE_KEY=0x…; prints the session token (API=…, CHAIN_ID=…)
	@test -n "$$PRIVATE_KEY" || { echo "usage: PRIVATE_KEY=0x… make sign-in [API=http://127.0.0.1:9000] [CHAIN_ID=8453]"; exit 2; }
	@infra/svcctl.sh sign-in --api "$(or $(API),http://127.0.0.1:9000)" --chain-id "$(or $(CHAIN_ID),8453)"

payments: ## List payments in STATE=claimed|settling|settled|creating|provisioned|credited|rejected|expired|refunding|refunded|reversed
	@test -n "$(STATE)" || { echo "usage: make payments STATE=credited"; exit 2; }
	@infra/svcctl.sh payments --state "$(STATE)"

payment: ## Show one payment and its order: ID=<payment key>
	@test -n "$(ID)" || { echo "usage: make payment ID=eip155:…/0x…/0x…/0x…"; exit 2; }
	@infra/svcctl.sh payment --id "$(ID)"

refund: ## Refund credit ID=<payment key>: first without NOTE (locks it, says what to pay), then with NOTE=<payout transaction>
	@test -n "$(ID)" || { echo "usage: make refund ID=… [NOTE=0x…]"; exit 2; }
	@infra/svcctl.sh refund --id "$(ID)" $(if $(NOTE),--note "$(NOTE)")

reconcile: ## One reconciler pass against the dev stack (make dev runs one every 15 s)
	@infra/svcctl.sh reconcile

leases: ## Paid servers whose lease ends within WITHIN seconds (default 86400), and those in grace
	@infra/svcctl.sh leases --within "$(or $(WITHIN),86400)"

renew: ## As the owner: KEY=svc_… SERVER=<id> [PERIODS=1 PAYMENT_FILE=]; pays with PRIVATE_KEY
	@test -n "$(KEY)" -a -n "$(SERVER)" || { echo "usage: PRIVATE_KEY=0x… make renew KEY=svc_… SERVER=<id> [PERIODS=1]"; exit 2; }
	@infra/svcctl.sh renew --api "$(or $(API),http://127.0.0.1:9000)" --key "$(KEY)" \
	  --server "$(SERVER)" --periods "$(or $(PERIODS),1)" $(if $(PAYMENT_FILE),--payment-file "$(PAYMENT_FILE)")

provision: ## As an agent: KEY=svc_… PLAN=… [REGION= PROJECT= SERVER_HOSTNAME= SSH_KEY=file.pub PAYMENT_FILE=]; pays with PRIVATE_KEY
	@test -n "$(KEY)" -a -n "$(PLAN)" || { echo "usage: PRIVATE_KEY=0x… make provision KEY=svc_… PLAN=… [REGION=…] [PROJECT=…] [SERVER_HOSTNAME=…] [SSH_KEY=…pub] [PAYMENT_FILE=…]"; exit 2; }
	@infra/svcctl.sh provision --api "$(or $(API),http://127.0.0.1:9000)" --key "$(KEY)" \
	  --project "$(or $(PROJECT),254871)" --plan "$(PLAN)" --region "$(or $(REGION),LT-Siauliai)" \
	  $(if $(SERVER_HOSTNAME),--hostname "$(SERVER_HOSTNAME)") $(if $(SSH_KEY),--ssh-key "$(SSH_KEY)") \
	  $(if $(PAYMENT_FILE),--payment-file "$(PAYMENT_FILE)")
