//! The end-to-end harness: a fresh table in moto's DynamoDB, an upstream simulator, the real
//! state, and API Gateway payload 2.0 events routed by the `cargo lambda watch` router table of
//! the workspace `Cargo.toml` — the same routing `make dev` uses — to the real handlers.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use domain::AppState;
use domain::checkpoint::{Checkpoints, Step};
use domain::clock::Clock;
use domain::identity::auth::api_key;
use e2e::sim::{Simulator, SshListener};
use lambda_http::http::HeaderMap;
use lambda_http::{Body, Response};
use serde_json::{Value, json};

use crate::dynamo_faults::{DynamoFaults, Hook};
use domain::config::Config;
use domain::store::queue::DeliveryQueue;
use domain::store::{Store, schema};
use domain::upstream;

/// The token the simulator accepts.
pub const TOKEN: &str = "sim-token-6c0f1d";
/// Owners used by the tests.
/// `address` as an owner.
///
/// # Panics
/// When it is not an address.
pub fn owner(address: &str) -> domain::address::Owner {
    domain::address::Owner::parse(address).expect("an address")
}

pub const ALICE: &str = "0x1111111111111111111111111111111111111111";
pub const BOB: &str = "0x2222222222222222222222222222222222222222";
/// The web app origin the tests configure.
pub const WEB_ORIGIN: &str = "http://localhost:5173";
/// A project of the simulator.
pub const PROJECT: u64 = e2e::sim::PROJECT_IDS[0];

/// One route of the router table.
#[derive(Debug, Clone)]
struct Route {
    segments: Vec<String>,
    method: Option<String>,
    function: String,
}

fn routes() -> &'static Vec<Route> {
    static ROUTES: OnceLock<Vec<Route>> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let manifest =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
                .expect("workspace Cargo.toml");
        let doc: toml::Table = manifest.parse().expect("Cargo.toml parses");
        let router = doc["workspace"]["metadata"]["lambda"]["watch"]["router"]
            .as_table()
            .expect("router table");
        let mut routes = Vec::new();
        for (path, target) in router {
            let segments = path
                .trim_matches('/')
                .split('/')
                .map(str::to_owned)
                .collect::<Vec<_>>();
            match target {
                toml::Value::String(function) => routes.push(Route {
                    segments,
                    method: None,
                    function: function.clone(),
                }),
                toml::Value::Array(entries) => {
                    for entry in entries {
                        routes.push(Route {
                            segments: segments.clone(),
                            method: Some(entry["method"].as_str().unwrap().to_owned()),
                            function: entry["function"].as_str().unwrap().to_owned(),
                        });
                    }
                }
                other => panic!("unexpected router entry {other:?}"),
            }
        }
        routes
    })
}

/// The router table as `(METHOD or *, path, function)` rows.
pub fn router_rows() -> Vec<(String, String, String)> {
    routes()
        .iter()
        .map(|r| {
            (
                r.method.clone().unwrap_or_else(|| "*".into()),
                format!("/{}", r.segments.join("/")),
                r.function.clone(),
            )
        })
        .collect()
}

/// (function, route key, path parameters) for a request, as API Gateway / the watch router would.
/// Like API Gateway, a route with fewer parameters (more literal segments) wins.
fn route(method: &str, path: &str) -> Option<(String, String, HashMap<String, String>)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut best: Option<(String, String, HashMap<String, String>)> = None;
    'routes: for route in routes() {
        if route.segments.len() != parts.len() {
            continue;
        }
        if route.method.as_deref().is_some_and(|m| m != method) {
            continue;
        }
        let mut params = HashMap::new();
        for (pattern, part) in route.segments.iter().zip(&parts) {
            if let Some(name) = pattern.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                params.insert(name.to_owned(), (*part).to_owned());
            } else if pattern != part {
                continue 'routes;
            }
        }
        let key = format!("{method} /{}", route.segments.join("/"));
        if best.as_ref().is_none_or(|(_, _, p)| params.len() < p.len()) {
            best = Some((route.function.clone(), key, params));
        }
    }
    best
}

/// An EIP-4361 message signed in by `signer`, rendered by the `siwe` crate; `edit` may change any
/// field first (expiry, not-before, issued-at…).
pub fn siwe_message(
    signer: &PrivateKeySigner,
    domain: &str,
    uri: &str,
    chain_id: u64,
    nonce: &str,
    edit: impl FnOnce(&mut siwe::Message),
) -> String {
    let mut message = siwe::Message {
        domain: domain.parse().unwrap(),
        address: signer.address().into_array(),
        statement: Some("Sign in to the cloud API.".into()),
        uri: uri.parse().unwrap(),
        version: siwe::Version::V1,
        chain_id,
        nonce: nonce.to_owned(),
        // The tests' clock (virtual in the simulation), as the service reads it.
        issued_at: clock().datetime().into(),
        expiration_time: None,
        not_before: None,
        request_id: None,
        resources: vec![],
    };
    edit(&mut message);
    message.to_string()
}

/// A grant's body ([`TestEnv::grant_body`]) with `nonce`.
pub fn grant_message(wallet: &PrivateKeySigner, nonce: &str, resources: &[String]) -> Value {
    let message = siwe_message(
        wallet,
        "127.0.0.1:9000",
        "http://127.0.0.1:9000",
        8453,
        nonce,
        |m| {
            m.statement = Some("Approve this request of my agent.".into());
            m.resources = resources.iter().map(|r| r.parse().unwrap()).collect();
        },
    );
    json!({"message": message, "signature": sign(wallet, &message)})
}

/// The EIP-191 signature of `message` by `signer`, as 0x-hex.
pub fn sign(signer: &PrivateKeySigner, message: &str) -> String {
    let signature = signer.sign_message_sync(message.as_bytes()).unwrap();
    format!("0x{}", hex::encode(signature.as_bytes()))
}

/// This process's clock ([`clock`]), set on first use.
static CLOCK: OnceLock<Clock> = OnceLock::new();

/// The clock every environment of this test process shares — the service's, the simulator's,
/// the chain's, and the payers' — moved forward instead of sleeping: wall time, unless
/// [`virtual_clock`] came first. (`make test` runs each test in a process of its own, with
/// cargo-nextest.)
pub fn clock() -> Clock {
    CLOCK.get_or_init(Clock::system).clone()
}

/// Makes this process's [`clock`] virtual, if nothing has read it yet: it stands at the wall
/// time of the first call (whole seconds) and moves only when moved, so a run's times depend
/// on its steps alone, never on how fast the machine ran them. Panics if the clock was already
/// set to wall time.
pub fn virtual_clock() -> Clock {
    let start = domain::time::now().unix_timestamp();
    let clock = CLOCK.get_or_init(|| Clock::manual(start)).clone();
    assert!(
        clock.is_manual(),
        "the clock was read as wall time before it was made virtual"
    );
    clock
}

/// An x402 header's JSON (base64).
pub fn b64json(header: &str) -> Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(header)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Pays the first offer of a 402's `PAYMENT-REQUIRED` header as `signer`, for protocol
/// `version`, at the test clock's time: returns the header name and value to send.
pub fn pay(
    signer: &PrivateKeySigner,
    payment_required: &str,
    version: u8,
) -> (&'static str, String) {
    pay_at(signer, payment_required, version, clock().now() as u64)
}

/// [`pay`] as a client whose clock says `now` (its `validBefore` is `now + maxTimeoutSeconds`).
pub fn pay_at(
    signer: &PrivateKeySigner,
    payment_required: &str,
    version: u8,
    now: u64,
) -> (&'static str, String) {
    let draft = draft(payment_required, version, signer.address(), now);
    let signature = signer.sign_hash_sync(&draft.signing_hash()).unwrap();
    payment_header(&draft, &signature.as_bytes())
}

/// The authorization `from` would sign to pay the (base64) `payment_required` with x402
/// `version`, as a client whose clock says `now`, with a nonce of the id stream.
pub fn draft(
    payment_required: &str,
    version: u8,
    from: alloy_primitives::Address,
    now: u64,
) -> domain::x402::client::Draft {
    use base64::Engine;
    let required: domain::x402::PaymentRequired = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(payment_required)
            .unwrap(),
    )
    .unwrap();
    let mut nonce = [0u8; 32];
    nonce.copy_from_slice(&hex::decode(domain::ids::random_hex(32)).unwrap());
    domain::x402::client::Draft::new(version, &required, from, now, nonce).unwrap()
}

/// The header carrying `draft` signed with `signature` (any bytes: a smart account's are its
/// own): `PAYMENT-SIGNATURE` for x402 v2, `X-PAYMENT` for v1.
pub fn payment_header(
    draft: &domain::x402::client::Draft,
    signature: &[u8],
) -> (&'static str, String) {
    (draft.header_name(), draft.header(signature))
}

/// Options of a test environment.
pub struct Options {
    /// Whether the upstream token is configured.
    pub configured: bool,
    /// Upstream timeout, seconds.
    pub timeout_seconds: f64,
    /// Seconds servers stay `deploying` in the simulator.
    pub deploy_seconds: f64,
    /// Discovery cache time, seconds.
    pub cache_seconds: u64,
    /// `X402_NETWORK`.
    pub network: &'static str,
    /// Whether a treasury is configured.
    pub payments: bool,
    /// `REQUEST_BUDGET_SECONDS`: the time a request has (no Lambda deadline in tests).
    pub budget_seconds: f64,
    /// `PAID_PERIOD_SECONDS`.
    pub period_seconds: u64,
    /// `EXPIRY_GRACE_SECONDS`.
    pub grace_seconds: u64,
    /// Pace the environment's provider client to this many requests per second (as the
    /// reconciler's is), when set.
    pub max_rps: Option<f64>,
    /// More variables, or overrides (e.g. `DEPLOY_DEADLINE_VPS_SECONDS`).
    pub vars: Vec<(&'static str, String)>,
    /// Pay on the real rails of `make test` (anvil with Circle's USDC, x402's facilitator)
    /// instead of the development chain and facilitator. Their time is wall time: a test on
    /// them never moves the clock.
    pub real_rails: bool,
    /// Each simulated server answers SSH on a loopback address of its own (`SSH_PORT`), with
    /// logins for its keys, instead of the one listener that refuses every login
    /// (`SSH_PROBE_TARGET`).
    pub server_ssh: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            configured: true,
            timeout_seconds: 1.0,
            deploy_seconds: 0.3,
            cache_seconds: 60,
            network: "base-sepolia",
            payments: true,
            budget_seconds: 20.0,
            period_seconds: 730 * 3600,
            grace_seconds: 72 * 3600,
            max_rps: None,
            vars: Vec::new(),
            real_rails: false,
            server_ssh: false,
        }
    }
}

/// A test environment: its own table, its own simulator, the real state (kept for the life of
/// the test process, as a function's state is kept for its warm life).
pub struct TestEnv {
    pub state: &'static AppState,
    /// The state's store, for tests to arrange and inspect what the domain wrote (the state's
    /// own is the domain's alone).
    pub store: Store,
    pub sim: Arc<Simulator>,
    pub sim_url: String,
    pub facilitator: Arc<e2e::facilitator::DevFacilitator>,
    /// The DynamoDB fault hook of this environment's store.
    pub faults: Arc<DynamoFaults>,
    /// The kill points of this environment's handlers.
    pub checkpoints: Arc<Checkpoints>,
    /// The SSH server the readiness check dials (`SSH_PROBE_TARGET`).
    pub ssh: SshListener,
    /// The one clock of the service, the simulator and the chain: wall time, moved forward by
    /// tests instead of sleeping.
    pub clock: Clock,
    /// The environment the service's configuration was read from (`make bench` starts the
    /// functions' binaries with it; the tests call the handlers in process).
    #[allow(dead_code)]
    pub vars: HashMap<&'static str, String>,
    /// The simulator and the facilitator, listening until the environment is dropped.
    _serving: [e2e::Serving; 2],
    /// The local feed of the table's stream, connected on first use ([`TestEnv::feed`]).
    feed: tokio::sync::Mutex<Option<events::local::Feed>>,
    /// This environment's webhook delivery queue (in moto), as the service's state holds it.
    pub queue: DeliveryQueue,
    /// The local consumer of that queue ([`TestEnv::deliver`]).
    consumer: deliveries::local::Consumer,
    /// The local consumer of its dead-letter queue ([`TestEnv::deliver_dead_letters`]).
    dead_letters: deliveries::local::Consumer,
    /// The endpoints registered through [`TestEnv::register_webhook`], whose waiting deliveries
    /// [`TestEnv::deliver_after`] wakes when the clock passes their retry.
    endpoints: std::sync::Mutex<Vec<String>>,
}

/// `ORDER_LEASE_SECONDS` of the tests.
pub const LEASE_SECONDS: i64 = 60;

/// The treasury payments go to.
pub const TREASURY: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A unique name for a table.
pub fn unique_table() -> String {
    format!("test-{}", domain::ids::random_hex(8))
}

/// A store on a fresh table in moto (needs `AWS_ENDPOINT_URL_DYNAMODB`; `make test` sets it).
pub async fn fresh_store() -> Store {
    store_with_faults(Arc::default()).await
}

/// [`fresh_store`] whose client runs every call through the fault hook `faults`.
pub async fn store_with_faults(faults: Arc<DynamoFaults>) -> Store {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok(),
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests with `make test`, which starts moto"
    );
    let sdk = aws_config::load_from_env().await;
    // The client the service's own state builds (hyper, rustls), gated by the test's hook.
    let client = domain::outbound::sdk_http_client().expect("the SDK's HTTP client");
    // The SDK's retries as in production (3 attempts), but backing off milliseconds, not the
    // standard second: a throttled call costs the tests no wall time (the seeded simulation
    // throttles thousands), and the order of events is the schedule's, not the sleep's.
    let retries = aws_sdk_dynamodb::config::retry::RetryConfig::standard()
        .with_initial_backoff(std::time::Duration::from_millis(5));
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .retry_config(retries)
        .http_client(crate::dynamo_faults::Gated::new(client, faults.clone()))
        .interceptor(Hook(faults))
        .interceptor(crate::iam::Iam)
        .build();
    let store = Store::new(aws_sdk_dynamodb::Client::from_conf(conf), &unique_table());
    schema::create_table(store.client(), store.table())
        .await
        .expect("create the test table in moto");
    store
}

/// A fresh delivery queue in moto, named after `table` (needs `AWS_ENDPOINT_URL_SQS`; `make
/// test` sets it).
pub async fn fresh_queue(table: &str) -> DeliveryQueue {
    let sdk = aws_config::load_from_env().await;
    DeliveryQueue::create(aws_sdk_sqs::Client::new(&sdk), table)
        .await
        .expect("create the test delivery queue in moto")
}

impl TestEnv {
    /// An environment with default options.
    pub async fn new() -> Self {
        Self::with(Options::default()).await
    }

    /// An environment with `options`.
    pub async fn with(options: Options) -> Self {
        let faults = Arc::new(DynamoFaults::default());
        let store = store_with_faults(faults.clone()).await;
        let queue = fresh_queue(store.table()).await;
        let clock = clock();
        let deploy = Duration::from_secs_f64(options.deploy_seconds);
        let sim = Simulator::with_clock(TOKEN, deploy, clock.clone());
        let running = sim.start("127.0.0.1:0").await.expect("start the simulator");
        let ssh = SshListener::start("127.0.0.1:0")
            .await
            .expect("start the SSH listener");
        let facilitator = e2e::facilitator::DevFacilitator::with_clock(clock.clone());
        let (facilitator_url, facilitator_serving) = facilitator
            .start("127.0.0.1:0")
            .await
            .expect("start the facilitator");
        let mut vars = HashMap::from([
            ("TABLE_NAME", store.table().to_owned()),
            ("UPSTREAM_URL", running.base_url.clone()),
            (
                "UPSTREAM_TIMEOUT_SECONDS",
                options.timeout_seconds.to_string(),
            ),
            ("UPSTREAM_MAX_RETRIES", "2".into()),
            ("UPSTREAM_RETRY_BASE_MS", "10".into()),
            ("CURRENCY_RATES", "EUR=1.16".into()),
            ("DISCOVERY_CACHE_SECONDS", options.cache_seconds.to_string()),
            ("MAX_BODY_BYTES", "8192".into()),
            ("SIWE_DOMAINS", "127.0.0.1:9000,localhost:9000".into()),
            (
                "SIWE_URI_PREFIXES",
                "http://127.0.0.1:9000,http://localhost:9000".into(),
            ),
            ("SIWE_CHAIN_IDS", "8453,84532".into()),
            ("WEB_ORIGIN", WEB_ORIGIN.into()),
            ("X402_NETWORK", options.network.into()),
            ("RPC_URL", format!("{facilitator_url}/rpc")),
            ("RPC_TIMEOUT_SECONDS", "1".into()),
            ("FACILITATOR_URL", facilitator_url),
            ("FACILITATOR_TIMEOUT_SECONDS", "1".into()),
            ("X402_WAIT_SECONDS", "3".into()),
            ("ORDER_LEASE_SECONDS", LEASE_SECONDS.to_string()),
            ("REQUEST_BUDGET_SECONDS", options.budget_seconds.to_string()),
            ("PAID_PERIOD_SECONDS", options.period_seconds.to_string()),
            ("EXPIRY_GRACE_SECONDS", options.grace_seconds.to_string()),
            ("SSH_PROBE_TARGET", ssh.address.clone()),
            // Rate limits off unless a test sets them (ratelimits.rs, limits.rs).
            ("RATE_LIMIT_PER_SECOND", "0".into()),
            ("SIGN_IN_RATE_PER_SECOND", "0".into()),
            ("OWNER_RATE_PER_SECOND", "0".into()),
            ("ADDRESS_RATE_PER_SECOND", "0".into()),
            ("FAILED_AUTH_PER_SECOND", "0".into()),
            ("OAUTH_REGISTRATIONS_PER_SECOND", "0".into()),
            ("SSH_PROBE_TIMEOUT_SECONDS", "1".into()),
            // The sweep only where a test is about it (hostile_world.rs, the simulation).
            ("SWEEP_SECONDS", "0".into()),
            // A refused payment keeps its owner and payer off the paid pool only where a test
            // is about it (paid_pool.rs): the other tests refuse and then pay as one owner.
            ("PAID_REFUSAL_COOLDOWN_SECONDS", "0".into()),
            // Webhooks may go to a local receiver (events.rs, webhooks.rs).
            ("WEBHOOK_LOCAL_RECEIVER", "1".into()),
            ("DELIVERY_QUEUE_URL", queue.url().to_owned()),
        ]);
        if options.real_rails {
            let rails = crate::rails::Rails::from_env();
            vars.insert("FACILITATOR_URL", rails.facilitator_url);
            vars.insert("RPC_URL", rails.rpc_url);
            // A smart wallet's payment is simulated as the facilitator's signer sends it.
            vars.insert(
                "X402_SETTLEMENT_SENDER",
                format!("{:#x}", rails.facilitator_signer),
            );
            // A settle waits for a block (2 s) and the facilitator's receipt poll.
            vars.insert("FACILITATOR_TIMEOUT_SECONDS", "6".into());
            vars.insert("RPC_TIMEOUT_SECONDS", "3".into());
        }
        if options.server_ssh {
            let mut port = [0u8; 2];
            getrandom::fill(&mut port).expect("random");
            let port = 20_000 + u16::from_le_bytes(port) % 40_000;
            sim.serve_ssh(port);
            vars.remove("SSH_PROBE_TARGET");
            vars.insert("SSH_PORT", port.to_string());
        }
        vars.extend(options.vars.iter().cloned());
        if options.payments {
            vars.entry("X402_PAY_TO").or_insert_with(|| TREASURY.into());
        }
        if options.configured {
            vars.insert("UPSTREAM_TOKEN", TOKEN.into());
        }
        let config = Config::from_lookup(|k| vars.get(k).cloned()).expect("test config");
        let upstream = options.configured.then(|| {
            let client =
                upstream::Client::new(&config.upstream, domain::secrets::Secret::new(TOKEN));
            match options.max_rps {
                Some(rps) => client.paced(rps),
                None => client,
            }
        });
        let checkpoints = Arc::new(Checkpoints::default());
        let mut state = AppState::new(config, store.clone(), upstream).with_queue(queue.clone());
        state.checkpoints = Some(checkpoints.clone());
        state.chain.checkpoints = Some(checkpoints.clone());
        state.clock = clock.clone();
        // Names resolve as a test answers them (webhooks.rs makes one turn inward).
        state.resolver = domain::destination::Resolver::fixed();
        TestEnv {
            state: Box::leak(Box::new(state)),
            store,
            sim,
            sim_url: running.base_url,
            _serving: [running.serving, facilitator_serving],
            facilitator,
            faults,
            checkpoints,
            ssh,
            clock,
            vars,
            feed: tokio::sync::Mutex::new(None),
            consumer: deliveries::local::Consumer::new(queue.client().clone(), queue.url()),
            dead_letters: deliveries::local::Consumer::new(
                queue.client().clone(),
                &domain::store::queue::dead_letter_url(queue.url()),
            ),
            queue,
            endpoints: Default::default(),
        }
    }

    /// One pass of the local feed of the table's stream into the `events` function's handler
    /// (as AWS's event source mapping would invoke it): every event recorded since the last
    /// pass is queued for its owner's webhook endpoints; then [`TestEnv::deliver`] sends what
    /// the delivery queue holds.
    pub async fn feed(&self) -> events::local::FeedReport {
        let fed = self.stream().await;
        self.deliver().await;
        fed
    }

    /// One pass of the local feed of the table's stream alone: events queued for delivery,
    /// none sent.
    pub async fn stream(&self) -> events::local::FeedReport {
        let mut feed = self.feed.lock().await;
        if feed.is_none() {
            let connected = events::local::Feed::connect(self.store.table()).await;
            *feed = Some(connected.expect("the table's stream"));
        }
        let pass = feed.as_mut().expect("connected").pass(self.state);
        crate::iam::as_function("events", pass)
            .await
            .expect("a pass of the stream")
    }

    /// One pass of the local consumer of the delivery queue into the `deliveries` function's
    /// handler (as the event source mapping would invoke it), until no message is visible.
    pub async fn deliver(&self) -> deliveries::local::ConsumeReport {
        let pass = self.consumer.pass(self.state);
        crate::iam::as_function("deliveries", pass)
            .await
            .expect("a pass of the delivery queue")
    }

    /// One pass of the local consumer of the dead-letter queue into the `deliveries`
    /// function's handler, as its mapping in AWS would invoke it (with the function's role).
    pub async fn deliver_dead_letters(&self) -> deliveries::local::ConsumeReport {
        let pass = self.dead_letters.pass(self.state);
        crate::iam::as_function("deliveries", pass)
            .await
            .expect("a pass of the dead-letter queue")
    }

    /// Moves the clock `seconds` forward, makes visible the messages of every delivery whose
    /// retry is now due (moto's SQS keeps wall time, not the test's clock), then
    /// [`TestEnv::deliver`]s.
    pub async fn deliver_after(&self, seconds: u64) -> deliveries::local::ConsumeReport {
        self.clock.advance(Duration::from_secs(seconds));
        let now = self.clock.now();
        let endpoints = self.endpoints.lock().unwrap().clone();
        for endpoint in endpoints {
            let waiting = self.store.waiting_deliveries(&endpoint, now, 100).await;
            for delivery in waiting.expect("the waiting deliveries") {
                if let Some(receipt) = &delivery.receipt {
                    self.queue
                        .hide(receipt, 0)
                        .await
                        .expect("a visibility change");
                }
            }
        }
        self.deliver().await
    }

    /// Sends `request` with kill point `step` armed: returns once the handler reached it and was
    /// dropped there (a Lambda killed at that step). Panics if it answered instead.
    pub async fn killed_at(&self, step: Step, request: ApiRequest<'_>) {
        self.checkpoints.arm(step);
        tokio::select! {
            res = request.send() => panic!("not killed at {step:?}: {} {}", res.status, res.body),
            _ = self.checkpoints.reached.notified() => {}
        }
    }

    /// One reconciler pass at `seconds` from now by the wall clock: the environment's clock (the
    /// service's, the simulator's, the chain's) is moved forward to then first (never back), and
    /// stays there. Leases of [`LEASE_SECONDS`] written now expire after that.
    pub async fn reconcile_in(&self, seconds: i64) -> domain::reconciler::Report {
        self.forward(seconds);
        self.pass().await
    }

    /// Moves the clock forward to `seconds` from now by the wall clock (never back).
    pub fn forward(&self, seconds: i64) {
        let wall = (domain::time::now().unix_timestamp_nanos() / 1_000_000) as i64;
        self.clock.forward_to(wall + seconds * 1000);
    }

    /// One reconciler pass at the clock's time.
    pub async fn pass(&self) -> domain::reconciler::Report {
        let deadline = domain::deadline::Deadline::after(Duration::from_secs(20));
        crate::iam::as_function(
            "reconciler",
            domain::reconciler::pass(self.state, &deadline),
        )
        .await
        .expect("a reconciler pass")
    }

    /// Moves the clock `seconds` forward from where it is, then runs one reconciler pass.
    pub async fn pass_after(&self, seconds: u64) -> domain::reconciler::Report {
        self.clock.advance(Duration::from_secs(seconds));
        self.pass().await
    }

    /// One reconciler pass once every lease has expired.
    pub async fn reconcile(&self) -> domain::reconciler::Report {
        self.reconcile_in(LEASE_SECONDS + 1).await
    }

    /// Issues an API key for `owner`.
    pub async fn key(&self, owner: &str) -> String {
        self.issue_key(owner, "test").await.0
    }

    /// Issues an API key for `owner` with `policy` (limits on what it spends and holds).
    pub async fn key_with(&self, owner: &str, policy: Option<domain::policy::Policy>) -> String {
        self.issue(owner, "test", policy).await.0
    }

    /// Issues an API key named `name` for `owner` with every scope, `webhooks` named too:
    /// answers the key and its `key_…` id.
    pub async fn issue_key(&self, owner: &str, name: &str) -> (String, String) {
        self.issue(owner, name, None).await
    }

    /// [`TestEnv::issue_key`] with `policy`.
    async fn issue(
        &self,
        owner: &str,
        name: &str,
        policy: Option<domain::policy::Policy>,
    ) -> (String, String) {
        let owner = domain::address::Owner::parse(owner).expect("an address");
        let all = domain::policy::Scope::ALL.map(|s| s.as_str().to_owned());
        let new = api_key::NewKey {
            scopes: Some(all.to_vec()),
            policy,
            ..api_key::NewKey::named(name, self.state.clock.timestamp())
        };
        let (key, record) = api_key::issue(&self.store, &owner, new, None)
            .await
            .expect("issue a key");
        (key.expose().to_owned(), record.id)
    }

    /// A newly signed-in owner and a key of theirs with `policy`, issued through the API:
    /// (session, key id, key).
    pub async fn owner_with_key(&self, policy: Value) -> (String, String, String) {
        let session = self.sign_in(&PrivateKeySigner::random()).await;
        let body = json!({"name": "bounded", "policy": policy});
        let (id, key) = self.generate_key(&session, body).await;
        (session, id, key)
    }

    /// A key issued through the API (`POST /api/keys/generate` with `body`: its name, scopes,
    /// policy) to the owner of `session`: (key id, key).
    pub async fn generate_key(&self, session: &str, body: Value) -> (String, String) {
        let res = self
            .req("POST", "/api/keys/generate")
            .bearer(session)
            .json(body)
            .send()
            .await;
        assert_eq!(res.status, 201, "{}", res.body);
        let issued = res.json();
        (
            issued["id"].as_str().unwrap().to_owned(),
            issued["key"].as_str().unwrap().to_owned(),
        )
    }

    /// Key `id`'s `usage` as its owner's key listing shows it (`spentToday`,
    /// `spentThisMonth` in USD, `activeServers`).
    pub async fn usage(&self, session: &str, id: &str) -> Value {
        let listed = self
            .req("GET", "/api/keys")
            .bearer(session)
            .send()
            .await
            .json();
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {listed}"))["usage"]
            .clone()
    }

    /// Registers webhook endpoint `url` for the owner of `key` (every type unless `types`)
    /// through the API; answers the endpoint with its secret, shown once.
    pub async fn register_webhook(&self, key: &str, url: &str, types: Option<Value>) -> Value {
        let mut body = json!({"url": url});
        if let Some(types) = types {
            body["types"] = types;
        }
        let res = self
            .req("POST", "/api/webhooks")
            .key(key)
            .json(body)
            .send()
            .await;
        assert_eq!(res.status, 201, "{}", res.body);
        assert_eq!(res.header("cache-control"), Some("no-store"));
        let endpoint = res.json();
        let id = endpoint["id"].as_str().expect("an endpoint id").to_owned();
        self.endpoints.lock().unwrap().push(id);
        endpoint
    }

    /// Provisions a free `plan` in [`PROJECT`] (region `LT-Siauliai`, optional `hostname`)
    /// through the API; returns the server id and its sandbox id.
    pub async fn provision(&self, key: &str, plan: &str, hostname: Option<&str>) -> (u64, String) {
        let mut body = json!({"plan": plan, "region": "LT-Siauliai"});
        if let Some(hostname) = hostname {
            body["hostname"] = json!(hostname);
        }
        let res = self
            .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
            .key(key)
            .json(body)
            .send()
            .await;
        assert_eq!(res.status, 201, "{}", res.body);
        let server = res.json();
        (
            server["id"].as_u64().unwrap(),
            server["sandboxId"].as_str().unwrap().to_owned(),
        )
    }

    /// A grant of an approval (`POST /api/approvals/{id}/grant`'s body): an EIP-4361 message
    /// naming `resources` (`urn:approval:<id>`), with a fresh nonce, signed by `wallet`.
    pub async fn grant_body(&self, wallet: &PrivateKeySigner, resources: &[String]) -> Value {
        let nonce = self.nonce().await.expect("a nonce");
        grant_message(wallet, &nonce, resources)
    }

    /// Signs in `signer` through the API (nonce, EIP-4361 message for 127.0.0.1:9000 on Base,
    /// EIP-191 signature); returns the session token.
    pub async fn sign_in(&self, signer: &PrivateKeySigner) -> String {
        match self.try_sign_in(signer).await {
            Ok(session) => session,
            Err(res) => panic!("sign-in answered {}: {}", res.status, res.body),
        }
    }

    /// [`TestEnv::sign_in`], or the answer that refused it (of the nonce or of the sign-in).
    pub async fn try_sign_in(&self, signer: &PrivateKeySigner) -> Result<String, TestResponse> {
        let nonce = self.nonce().await?;
        let message = siwe_message(
            signer,
            "127.0.0.1:9000",
            "http://127.0.0.1:9000",
            8453,
            &nonce,
            |_| {},
        );
        let res = self
            .req("POST", "/api/auth/verify")
            .json(json!({"message": message, "signature": sign(signer, &message)}))
            .send()
            .await;
        match res.status {
            200 => Ok(res.json()["token"].as_str().unwrap().to_owned()),
            _ => Err(res),
        }
    }

    /// A fresh sign-in nonce (`GET /api/auth/nonce`), or the answer that refused it.
    pub async fn nonce(&self) -> Result<String, TestResponse> {
        let res = self.req("GET", "/api/auth/nonce").send().await;
        match res.json()["nonce"].as_str() {
            Some(nonce) if res.status == 200 => Ok(nonce.to_owned()),
            _ => Err(res),
        }
    }

    /// How many sessions the store holds.
    pub async fn session_count(&self) -> usize {
        let out = self
            .store
            .client()
            .scan()
            .table_name(self.store.table())
            .filter_expression("begins_with(pk, :p)")
            .expression_attribute_values(
                ":p",
                aws_sdk_dynamodb::types::AttributeValue::S("SESSION#".into()),
            )
            .send()
            .await
            .unwrap();
        out.items().len()
    }

    /// Starts a request.
    pub fn req(&self, method: &str, path: &str) -> ApiRequest<'_> {
        ApiRequest {
            env: self,
            method: method.to_owned(),
            path: path.to_owned(),
            query: String::new(),
            headers: HashMap::new(),
            body: None,
            source_ip: "127.0.0.1".into(),
        }
    }

    /// `GET /api/sandboxes/{id}` with `key`: the sandbox (asserts 200).
    pub async fn sandbox(&self, key: &str, id: &str) -> Value {
        let res = self
            .req("GET", &format!("/api/sandboxes/{id}"))
            .key(key)
            .send()
            .await;
        assert_eq!(res.status, 200, "{}", res.body);
        res.json()
    }

    /// Every request the simulator received so far, as `METHOD /path`.
    pub fn upstream_log(&self) -> Vec<String> {
        self.sim.requests()
    }
}

/// A request being built.
pub struct ApiRequest<'a> {
    env: &'a TestEnv,
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
    body: Option<String>,
    source_ip: String,
}

impl ApiRequest<'_> {
    /// The caller's address as API Gateway reports it (`127.0.0.1` unless set).
    pub fn source_ip(mut self, ip: &str) -> Self {
        self.source_ip = ip.to_owned();
        self
    }
    /// Sends `Authorization: Bearer token` (a session token or a key).
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }
    /// Sends `X-API-Key: key`.
    pub fn key(self, key: &str) -> Self {
        self.header("x-api-key", key)
    }
    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .insert(name.to_ascii_lowercase(), value.to_owned());
        self
    }
    /// Sets the raw query string.
    pub fn query(mut self, query: &str) -> Self {
        self.query = query.to_owned();
        self
    }
    /// A JSON body.
    pub fn json(mut self, body: Value) -> Self {
        self.body = Some(body.to_string());
        self.headers
            .insert("content-type".into(), "application/json".into());
        self
    }
    /// A raw body.
    pub fn body(mut self, body: &str) -> Self {
        self.body = Some(body.to_owned());
        self
    }

    /// The API Gateway HTTP API (payload 2.0) event for this request.
    pub fn event(&self) -> (String, Value) {
        let (function, route_key, params) = route(&self.method, &self.path)
            .unwrap_or_else(|| panic!("no route for {} {}", self.method, self.path));
        let mut event = json!({
            "version": "2.0",
            "routeKey": route_key,
            "rawPath": self.path,
            "rawQueryString": self.query,
            "headers": self.headers,
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "api",
                "domainName": "api.example.test",
                "domainPrefix": "api",
                "http": {
                    "method": self.method,
                    "path": self.path,
                    "protocol": "HTTP/1.1",
                    "sourceIp": self.source_ip,
                    "userAgent": "e2e"
                },
                "requestId": format!("apigw-{}", domain::ids::random_hex(6)),
                "routeKey": route_key,
                "stage": "$default",
                "time": "21/Nov/2026:10:00:00 +0000",
                "timeEpoch": 1_795_000_000_000u64
            },
            "isBase64Encoded": false
        });
        if !params.is_empty() {
            event["pathParameters"] = json!(params);
        }
        if let Some(body) = &self.body {
            event["body"] = Value::String(body.clone());
        }
        (function, event)
    }

    /// Sends the request through the function the router table names.
    pub async fn send(self) -> TestResponse {
        let (function, event) = self.event();
        self.env.invoke(&function, &event.to_string()).await
    }
}

impl TestEnv {
    /// Invokes `function`'s handler with `event` (an API Gateway payload 2.0 event, JSON text),
    /// as `cargo lambda invoke` does.
    pub async fn invoke(&self, function: &str, event: &str) -> TestResponse {
        let request = lambda_http::request::from_str(event).expect("a valid event");
        let state = self.state;
        // Boxed, as a Lambda runtime holds its handler's future: the test's own future (on a
        // 2 MiB test thread's stack) stays small.
        let response = crate::iam::as_function(function, async {
            match function {
                "status" => Box::pin(status::handle(&state.config, request)).await,
                "docs" => Box::pin(docs::handle(&state.config, request)).await,
                "console" => Box::pin(console::handle(&state.config, request)).await,
                "auth" => Box::pin(::auth::handle(state, request)).await,
                "keys" => Box::pin(::keys::handle(state, request)).await,
                "discovery" => Box::pin(discovery::handle(state, request)).await,
                "servers" => Box::pin(servers::handle(state, request)).await,
                "actions" => Box::pin(actions::handle(state, request)).await,
                "sandboxes" => Box::pin(sandboxes::handle(state, request)).await,
                "payments" => Box::pin(::payments::handle(state, request)).await,
                "notifications" => Box::pin(notifications::handle(state, request)).await,
                "mcp" => Box::pin(mcp::handle(state, request)).await,
                other => panic!("unknown function {other}"),
            }
        })
        .await;
        TestResponse::from(response)
    }
}

/// A response, read.
#[derive(Debug)]
pub struct TestResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl From<Response<Body>> for TestResponse {
    fn from(response: Response<Body>) -> Self {
        let (parts, body) = response.into_parts();
        let body = match body {
            Body::Empty => String::new(),
            Body::Text(t) => t,
            Body::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => String::new(),
        };
        addresses_are_checksummed(&body);
        TestResponse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }
}

/// Every wallet address an answer carries (`owner`, `payer`, `address`, at any depth) is
/// EIP-55, as the views' `Checksummed` writes it: checked on every answer of every end-to-end
/// test, so that a view serving a stored, lowercase address fails whichever test reads it. (An
/// `address` that is not a wallet's, a server's IP, is left alone.)
fn addresses_are_checksummed(body: &str) {
    fn walk(value: &Value, name: &str) {
        match value {
            Value::Object(fields) => fields.iter().for_each(|(name, field)| walk(field, name)),
            Value::Array(items) => items.iter().for_each(|item| walk(item, name)),
            Value::String(text) if ["owner", "payer", "address"].contains(&name) => {
                let expected = domain::address::Checksummed::from(text.as_str()).to_string();
                assert_eq!(
                    *text, expected,
                    "`{name}` is answered lowercase, not in EIP-55"
                );
            }
            _ => {}
        }
    }
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        walk(&value, "");
    }
}

impl TestResponse {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// Asserts a problem document with `status`, and returns it.
    #[track_caller]
    pub fn problem(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let doc = self.json();
        assert_eq!(doc["status"], status);
        assert!(
            doc["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("/problems/"))
        );
        assert!(doc["title"].is_string() && doc["detail"].is_string());
        assert_eq!(doc["requestId"].as_str(), self.header("x-request-id"));
        doc
    }
    /// Asserts a 400 naming `field`.
    #[track_caller]
    pub fn invalid(&self, field: &str) -> Value {
        let doc = self.problem(400);
        assert_eq!(doc["field"], field, "body: {}", self.body);
        doc
    }
}
