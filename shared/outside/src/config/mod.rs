//! Configuration, read once at cold start from the environment (the SAM template sets it in AWS;
//! `make dev` and the tests set it locally).
//!
//! Every variable is one row of [`VARIABLES`]: its name, what it sets, and its default. The table
//! of `docs/configuration.md` is rendered from those rows ([`table`]); a test fails when the file
//! differs (`UPDATE_DOCS=1` rewrites it), another when a variable the library reads is not a
//! row, and a third when a row's default is not what [`Config::from_lookup`] does when the
//! variable is unset.
//!
//! Without a token (neither `UPSTREAM_TOKEN` nor `UPSTREAM_TOKEN_PARAM` set, or the SSM
//! parameter missing) the upstream is "not configured": `GET /api/cloud/status` says so and the
//! cloud routes answer 503.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use rust_decimal::Decimal;

use crate::secrets::Secret;

mod oauth;
mod variables;
pub use oauth::{OAuthConfig, REDIRECT_SCHEMES, RedirectScheme};
pub use variables::{VARIABLES, Variable, table};

/// Where the upstream token comes from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// No token configured.
    None,
    /// Given directly (`UPSTREAM_TOKEN`).
    Value(Secret),
    /// This SSM parameter (`UPSTREAM_TOKEN_PARAM`), read on the first provider call
    /// ([`crate::secrets::LazySecret`]).
    SsmParameter(String),
}

/// How to reach the upstream provider.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Base URL up to and including `/v1`, without a trailing slash.
    pub base_url: String,
    /// Team whose billing prices the plans, if any.
    pub team_id: Option<u64>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries of an idempotent read.
    pub max_retries: u32,
    /// First backoff delay (doubled per retry, with jitter).
    pub retry_base: Duration,
}

/// How plan prices become USD (design brief §3, Money).
#[derive(Debug, Clone)]
pub struct PricingConfig {
    /// USD per unit of each currency code (upper case). Always holds `USD = 1`.
    pub usd_rates: HashMap<String, Decimal>,
    /// Markup in percent added to the converted price.
    pub markup_percent: Decimal,
}

impl Default for PricingConfig {
    fn default() -> Self {
        PricingConfig {
            usd_rates: HashMap::from([("USD".to_owned(), Decimal::ONE)]),
            markup_percent: Decimal::ZERO,
        }
    }
}

/// Sign-In with Ethereum and sessions (design brief §3, Identity; `reference/auth.md`).
#[derive(Debug, Clone)]
pub struct SignInConfig {
    /// Allowed `domain` values of a sign-in message (`host[:port]`, compared case-insensitively).
    pub domains: Vec<String>,
    /// Allowed prefixes of the message's `URI` (an origin such as `https://app.example.com`:
    /// the URI must equal it or continue with `/`).
    pub uri_prefixes: Vec<String>,
    /// Allowed chain ids.
    pub chain_ids: Vec<u64>,
    /// How far in the future `Issued At` may be (clock skew).
    pub max_skew: Duration,
    /// How long a nonce stays usable.
    pub nonce_ttl: Duration,
    /// Absolute lifetime of a session.
    pub session_ttl: Duration,
    /// Idle lifetime of a session.
    pub session_idle: Duration,
    /// The web app's exact origin (CORS and the cookie-session origin check).
    pub web_origin: Option<String>,
}

/// x402 payments (design brief §3, Money; `reference/x402.md`).
#[derive(Debug, Clone)]
pub struct PaymentConfig {
    /// Where payments are made.
    pub network: crate::x402::Network,
    /// The treasury; `None` disables paid plans (503).
    pub pay_to: Option<String>,
    /// `maxTimeoutSeconds` of the offer.
    pub max_timeout_seconds: u64,
    /// How long a request whose payment is held by another attempt waits for its outcome.
    pub wait: Duration,
    /// The payment network's JSON-RPC node (settlements are resolved there).
    pub rpc_url: String,
    /// Per-request timeout to the node.
    pub rpc_timeout: Duration,
    /// One paid period of a server.
    pub period: Duration,
    /// Time between a server's paid time ending (powered off) and its deletion.
    pub grace: Duration,
    /// How far ahead of now a server's paid time may reach (a renewal beyond is refused).
    pub paid_ahead: Duration,
    /// How long an attempt holds an in-flight order.
    pub lease: Duration,
    /// How long after its claim an order may still provision; then it becomes a credit.
    pub order_deadline: Duration,
    /// Creates sent for one order before it becomes a credit.
    pub create_attempts: u32,
    /// How long a create whose answer was unclear may still land and show in listings: no
    /// second create (and no credit) for an order before this has passed since its last one.
    pub create_settle: Duration,
    /// How often each project is swept for servers no record owns (`domain::sweep`); `None`
    /// turns the sweep off.
    pub sweep: Option<Duration>,
    /// The time a request may take when its invocation names no deadline.
    pub request_budget: Duration,
    /// Facilitator base URL.
    pub facilitator_url: String,
    /// Facilitator authentication.
    pub facilitator_auth: crate::x402::facilitator::FacilitatorAuth,
    /// Facilitator per-request timeout.
    pub facilitator_timeout: Duration,
    /// Who the pre-check's simulated settlement is sent as (`from`, so `tx.origin`): the
    /// facilitator's signer (`crate::x402::chain::PendingTransfer::sender`).
    pub settlement_sender: alloy_primitives::Address,
    /// How long an owner and a payer whose checked payment the facilitator refused are kept
    /// off the paid pool (0: never).
    pub refusal_cooldown: Duration,
    /// The API's public base URL (for the offer's `resource`), if configured.
    pub public_base_url: Option<String>,
}

/// How the service watches servers deploy (the refresher, stages, the readiness check).
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Most requests per second the refresher sends the provider.
    pub max_rps: f64,
    /// A server in no transition is refreshed at most this often.
    pub stable_refresh: Duration,
    /// The usual time to `ready`: VPS, bare metal.
    pub eta: (Duration, Duration),
    /// A first deployment not `ready` this long after its order fails: VPS, bare metal.
    pub deadline: (Duration, Duration),
    /// The readiness check's timeout (TCP connect and SSH key exchange).
    pub probe_timeout: Duration,
    /// Where the readiness check dials instead of `<IPv4>:<ssh_port>` (local stacks and tests).
    pub probe_target: Option<String>,
    /// The port servers' SSH listens on (`SSH_PORT`, 22): dialed by the readiness check and
    /// answered as `access.sshPort` (a local stack's simulated servers listen elsewhere).
    pub ssh_port: u16,
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// DynamoDB table name.
    pub table_name: String,
    /// Upstream connection settings.
    pub upstream: UpstreamConfig,
    /// Where the upstream token comes from.
    pub token: TokenSource,
    /// Pricing rules.
    pub pricing: PricingConfig,
    /// How long discovery data is reused.
    pub discovery_ttl: Duration,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// Sign-in and sessions.
    pub sign_in: SignInConfig,
    /// x402 payments.
    pub payments: PaymentConfig,
    /// Watching servers deploy.
    pub watch: WatchConfig,
    /// Request rate limits.
    pub rate_limits: RateLimitConfig,
    /// What one owner may hold at once.
    pub caps: Caps,
    /// What MCP's authorization server takes from strangers.
    pub oauth: OAuthConfig,
    /// Whether a webhook endpoint may be the development receiver `http://127.0.0.1:<port>`
    /// (`WEBHOOK_LOCAL_RECEIVER=1`; local stacks and tests only: `base::destination`).
    pub webhook_local_receiver: bool,
    /// The SQS FIFO queue of webhook deliveries (`DELIVERY_QUEUE_URL`); `None`: events are not
    /// queued for delivery (a 503 where a delivery is asked for).
    pub delivery_queue_url: Option<String>,
    /// Behind the template's edge (`EDGE_ORIGIN_SECRET`, and `EDGE_ORIGIN_SECRET_PREVIOUS`
    /// while it is rotated): the secrets a request may carry as `X-Origin-Verify` (added by
    /// CloudFront), each at least [`MIN_ORIGIN_SECRET_CHARS`] characters; empty without the
    /// edge.
    pub edge_origin_secrets: Vec<Secret>,
}

/// The fewest characters an origin secret may have (a guess must be hopeless).
pub const MIN_ORIGIN_SECRET_CHARS: usize = 32;

/// The origin secrets: `EDGE_ORIGIN_SECRET` and, during a rotation,
/// `EDGE_ORIGIN_SECRET_PREVIOUS` (which needs the first), each of at least
/// [`MIN_ORIGIN_SECRET_CHARS`] characters.
fn origin_secrets(get: &impl Fn(&str) -> Option<String>) -> Result<Vec<Secret>, ConfigError> {
    let mut secrets = Vec::new();
    for name in ["EDGE_ORIGIN_SECRET", "EDGE_ORIGIN_SECRET_PREVIOUS"] {
        let Some(secret) = get(name).map(|s| s.trim().to_owned()) else {
            continue;
        };
        if secret.chars().count() < MIN_ORIGIN_SECRET_CHARS {
            return Err(ConfigError {
                name,
                message: format!("must be at least {MIN_ORIGIN_SECRET_CHARS} characters"),
            });
        }
        if secrets.is_empty() && name == "EDGE_ORIGIN_SECRET_PREVIOUS" {
            return Err(ConfigError {
                name,
                message: "is the secret being rotated out: set EDGE_ORIGIN_SECRET too".into(),
            });
        }
        secrets.push(Secret::new(&secret));
    }
    Ok(secrets)
}

/// `WEBHOOK_LOCAL_RECEIVER`: on (`1`, `true`) only outside Lambda. Lambda sets
/// `LAMBDA_TASK_ROOT` (`/var/task`) for every runtime, `provided.al2023` included; a local
/// stack (`cargo lambda watch`, the tests) does not.
///
/// Errors: the flag on where `LAMBDA_TASK_ROOT` is set (a webhook to `http://127.0.0.1` from
/// a deployed function would reach the function's own host).
fn local_receiver(get: &impl Fn(&str) -> Option<String>) -> Result<bool, ConfigError> {
    let on = matches!(
        get("WEBHOOK_LOCAL_RECEIVER").as_deref().map(str::trim),
        Some("1" | "true")
    );
    if on && get("LAMBDA_TASK_ROOT").is_some() {
        return Err(ConfigError {
            name: "WEBHOOK_LOCAL_RECEIVER",
            message: "is for local stacks only: refused in Lambda (LAMBDA_TASK_ROOT is set)".into(),
        });
    }
    Ok(on)
}

/// Per-owner caps: counts, not rates (design brief §3; the limits issue, point 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// Long polls held at once (`MAX_WAITS_PER_OWNER`, 4); one more answers 429 `waits`.
    pub waits: u32,
    /// Long polls held at once by every owner together (`MAX_WAITS`, 60; at least three times
    /// [`Self::waits`]); one more answers 429 `waits-pool`.
    pub waits_pool: u32,
    /// Unrevoked API keys (`MAX_KEYS_PER_OWNER`, 50); one more answers 409.
    pub keys: u32,
    /// Metadata sandboxes ever created (`MAX_SANDBOXES_PER_OWNER`, 500); one more answers 409.
    pub sandboxes: u32,
    /// Webhook endpoints registered (`MAX_WEBHOOKS_PER_OWNER`, 10); one more answers 409.
    pub webhooks: u32,
    /// SSH keys added (`MAX_SSH_KEYS_PER_OWNER`, 50); one more answers 409.
    pub ssh_keys: u32,
    /// Webhook test events queued and not yet tried (`MAX_WEBHOOK_TESTS_PER_OWNER`, 5); one
    /// more answers 429 `webhook-tests`.
    pub webhook_tests: u32,
    /// Paid requests with a new payment in flight (`MAX_PAID_IN_FLIGHT_PER_OWNER`, 3); one
    /// more answers 429 `paid`, before anything is claimed or charged.
    pub paid_in_flight: u32,
    /// Paid requests with a new payment in flight of every owner together
    /// (`MAX_PAID_IN_FLIGHT`, 9; at least three times [`Self::paid_in_flight`]); one more
    /// answers 429 `paid-pool`.
    pub paid_pool: u32,
    /// Sign-ins of one source address checked on chain at once
    /// (`MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS`, 4); one more answers 429 `sign-in`.
    pub sign_ins_in_flight: u32,
    /// Sign-ins checked on chain at once from every address together
    /// (`MAX_SIGN_INS_IN_FLIGHT`, 12; at least three times [`Self::sign_ins_in_flight`]); one
    /// more answers 429 `sign-in-pool`.
    pub sign_in_pool: u32,
    /// Delivery attempts of one owner that may wait past a second for their endpoints at once
    /// (`MAX_SLOW_DELIVERIES_PER_OWNER`, 2: at most a third of the template's
    /// `DeliveriesConcurrency`, 6); a slower one is given up and retried later.
    pub slow_deliveries: u32,
}

/// A rate limit: `burst` requests per window of `burst / per_second` seconds (so `per_second`
/// sustained, and at most `burst` at once). `None` (a rate of 0) turns it off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: f64,
    /// Requests allowed in one window.
    pub burst: u32,
}

impl RateLimit {
    /// The window, whole seconds (at least 1).
    pub fn window_seconds(&self) -> u64 {
        ((self.burst as f64 / self.per_second).ceil() as u64).max(1)
    }
}

/// The request rate limits (`domain::ratelimit`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitConfig {
    /// Per API key or session (`RATE_LIMIT_PER_SECOND` 10, `RATE_LIMIT_BURST` 50).
    pub caller: Option<RateLimit>,
    /// Per source address on the sign-in routes (`SIGN_IN_RATE_PER_SECOND` 1,
    /// `SIGN_IN_RATE_BURST` 20).
    pub sign_in: Option<RateLimit>,
    /// Per owner, over all its credentials (`OWNER_RATE_PER_SECOND` 20, `OWNER_RATE_BURST`
    /// 100): more keys do not buy more requests.
    pub owner: Option<RateLimit>,
    /// Per source address on every authenticated route, before the credential is known
    /// (`ADDRESS_RATE_PER_SECOND` 40, `ADDRESS_RATE_BURST` 200).
    pub address: Option<RateLimit>,
    /// Failed authentications per source address (`FAILED_AUTH_PER_SECOND` 0.2,
    /// `FAILED_AUTH_BURST` 12: 12 a minute).
    pub failed_auth: Option<RateLimit>,
    /// Writes at the provider an owner's request causes beside a paid create: the SSH keys a
    /// rebuild registers (`PROVIDER_WRITES_PER_SECOND`, `PROVIDER_WRITES_BURST`: 0.02/s, 20,
    /// so 20 in a window of 1,000 s); one more is 429 `provider-writes`.
    pub provider_writes: Option<RateLimit>,
}

/// A configuration value that is missing or cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[error("configuration {name}: {message}")]
pub struct ConfigError {
    /// The environment variable.
    pub name: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl Config {
    /// Reads the configuration from the process environment (see the module docs).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the configuration through `lookup` (a variable name → its value); tests pass a map.
    ///
    /// Errors: `TABLE_NAME` missing; a number, id or rate that does not parse.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let table_name = get("TABLE_NAME").ok_or(ConfigError {
            name: "TABLE_NAME",
            message: "is required".into(),
        })?;
        let token = match (get("UPSTREAM_TOKEN"), get("UPSTREAM_TOKEN_PARAM")) {
            (Some(token), _) => TokenSource::Value(Secret::new(token.trim())),
            (None, Some(param)) => TokenSource::SsmParameter(param),
            (None, None) => TokenSource::None,
        };
        Ok(Config {
            watch: watch_config(&get)?,
            payments: payment_config(&get)?,
            sign_in: sign_in_config(&get)?,
            table_name,
            upstream: upstream_config(&get)?,
            token,
            pricing: pricing_config(&get)?,
            discovery_ttl: Duration::from_secs(
                parse_opt(&get, "DISCOVERY_CACHE_SECONDS")?.unwrap_or(60),
            ),
            max_body_bytes: parse_opt(&get, "MAX_BODY_BYTES")?.unwrap_or(65536),
            rate_limits: rate_limits(&get)?,
            caps: Caps {
                waits: cap(&get, "MAX_WAITS_PER_OWNER", 4)?,
                waits_pool: pool(&get, "MAX_WAITS", 60, "MAX_WAITS_PER_OWNER", 4)?,
                webhook_tests: cap(&get, "MAX_WEBHOOK_TESTS_PER_OWNER", 5)?,
                paid_in_flight: cap(&get, "MAX_PAID_IN_FLIGHT_PER_OWNER", 3)?,
                paid_pool: pool(
                    &get,
                    "MAX_PAID_IN_FLIGHT",
                    9,
                    "MAX_PAID_IN_FLIGHT_PER_OWNER",
                    3,
                )?,
                sign_ins_in_flight: cap(&get, "MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS", 4)?,
                sign_in_pool: pool(
                    &get,
                    "MAX_SIGN_INS_IN_FLIGHT",
                    12,
                    "MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS",
                    4,
                )?,
                slow_deliveries: cap(&get, "MAX_SLOW_DELIVERIES_PER_OWNER", 2)?,
                keys: cap(&get, "MAX_KEYS_PER_OWNER", 50)?,
                sandboxes: cap(&get, "MAX_SANDBOXES_PER_OWNER", 500)?,
                webhooks: cap(&get, "MAX_WEBHOOKS_PER_OWNER", 10)?,
                ssh_keys: cap(&get, "MAX_SSH_KEYS_PER_OWNER", 50)?,
            },
            oauth: oauth::oauth_config(&get)?,
            webhook_local_receiver: local_receiver(&get)?,
            delivery_queue_url: get("DELIVERY_QUEUE_URL").map(|url| url.trim().to_owned()),
            edge_origin_secrets: origin_secrets(&get)?,
        })
    }
}

/// The provider's client settings (`UPSTREAM_*`).
fn upstream_config(get: &impl Fn(&str) -> Option<String>) -> Result<UpstreamConfig, ConfigError> {
    Ok(UpstreamConfig {
        base_url: get("UPSTREAM_URL")
            .unwrap_or_else(|| "https://api.cherryservers.com/v1".into())
            .trim_end_matches('/')
            .to_owned(),
        team_id: parse_opt(get, "UPSTREAM_TEAM_ID")?,
        timeout: Duration::from_secs_f64(
            parse_opt::<f64>(get, "UPSTREAM_TIMEOUT_SECONDS")?
                .filter(|s| *s > 0.0 && *s <= 60.0)
                .unwrap_or(8.0),
        ),
        max_retries: parse_opt(get, "UPSTREAM_MAX_RETRIES")?.unwrap_or(2),
        retry_base: Duration::from_millis(parse_opt(get, "UPSTREAM_RETRY_BASE_MS")?.unwrap_or(250)),
    })
}

/// Billing currencies' USD rates and the markup (`CURRENCY_RATES`, `PRICE_MARKUP_PERCENT`).
fn pricing_config(get: &impl Fn(&str) -> Option<String>) -> Result<PricingConfig, ConfigError> {
    let mut pricing = PricingConfig::default();
    if let Some(rates) = get("CURRENCY_RATES") {
        for pair in rates.split(',').filter(|p| !p.trim().is_empty()) {
            let (code, rate) = pair.split_once('=').ok_or(ConfigError {
                name: "CURRENCY_RATES",
                message: format!("`{pair}` is not CODE=RATE"),
            })?;
            let rate = Decimal::from_str(rate.trim())
                .ok()
                .filter(|r| *r > Decimal::ZERO)
                .ok_or(ConfigError {
                    name: "CURRENCY_RATES",
                    message: format!("`{pair}` needs a positive decimal rate"),
                })?;
            pricing
                .usd_rates
                .insert(code.trim().to_ascii_uppercase(), rate);
        }
    }
    if let Some(markup) = get("PRICE_MARKUP_PERCENT") {
        pricing.markup_percent = Decimal::from_str(markup.trim())
            .ok()
            .filter(|m| *m >= Decimal::ZERO)
            .ok_or(ConfigError {
                name: "PRICE_MARKUP_PERCENT",
                message: "must be a decimal ≥ 0".into(),
            })?;
    }
    Ok(pricing)
}

/// Sign-in with Ethereum and sessions (`SIWE_*`, `SESSION_*`, `WEB_ORIGIN`).
fn sign_in_config(get: &impl Fn(&str) -> Option<String>) -> Result<SignInConfig, ConfigError> {
    let list = |name: &str| -> Vec<String> {
        get(name)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().trim_end_matches('/').to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let domains: Vec<String> = list("SIWE_DOMAINS")
        .into_iter()
        .map(|d| d.to_ascii_lowercase())
        .collect();
    let mut uri_prefixes = list("SIWE_URI_PREFIXES");
    if uri_prefixes.is_empty() {
        uri_prefixes = domains.iter().map(|d| format!("https://{d}")).collect();
    }
    let chain_ids = match get("SIWE_CHAIN_IDS") {
        None => vec![8453],
        Some(ids) => ids
            .split(',')
            .map(|id| id.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| ConfigError {
                name: "SIWE_CHAIN_IDS",
                message: format!("`{ids}` is not a list of chain ids"),
            })?,
    };
    Ok(SignInConfig {
        domains,
        uri_prefixes,
        chain_ids,
        max_skew: Duration::from_secs(60),
        nonce_ttl: Duration::from_secs(600),
        session_ttl: Duration::from_secs(
            parse_opt(get, "SESSION_TTL_SECONDS")?.unwrap_or(7 * 24 * 3600),
        ),
        session_idle: Duration::from_secs(
            parse_opt(get, "SESSION_IDLE_SECONDS")?.unwrap_or(24 * 3600),
        ),
        web_origin: get("WEB_ORIGIN")
            .map(|o| web_origin(o.trim().trim_end_matches('/')))
            .transpose()?,
    })
}

/// The request rate limits (`*_RATE_PER_SECOND`, `*_RATE_BURST`, `FAILED_AUTH_*`).
fn rate_limits(get: &impl Fn(&str) -> Option<String>) -> Result<RateLimitConfig, ConfigError> {
    Ok(RateLimitConfig {
        caller: rate_limit(get, "RATE_LIMIT_PER_SECOND", "RATE_LIMIT_BURST", 10.0, 50)?,
        sign_in: rate_limit(
            get,
            "SIGN_IN_RATE_PER_SECOND",
            "SIGN_IN_RATE_BURST",
            1.0,
            20,
        )?,
        owner: rate_limit(get, "OWNER_RATE_PER_SECOND", "OWNER_RATE_BURST", 20.0, 100)?,
        address: rate_limit(
            get,
            "ADDRESS_RATE_PER_SECOND",
            "ADDRESS_RATE_BURST",
            40.0,
            200,
        )?,
        failed_auth: rate_limit(get, "FAILED_AUTH_PER_SECOND", "FAILED_AUTH_BURST", 0.2, 12)?,
        provider_writes: rate_limit(
            get,
            "PROVIDER_WRITES_PER_SECOND",
            "PROVIDER_WRITES_BURST",
            0.02,
            20,
        )?,
    })
}

/// The refresher's pace, deployment expectations and the SSH probe.
fn watch_config(get: &impl Fn(&str) -> Option<String>) -> Result<WatchConfig, ConfigError> {
    let seconds = |name: &'static str, default: f64| -> Result<Duration, ConfigError> {
        Ok(Duration::from_secs_f64(
            parse_opt::<f64>(get, name)?
                .unwrap_or(default)
                .clamp(0.0, 7.0 * 86_400.0),
        ))
    };
    Ok(WatchConfig {
        max_rps: parse_opt::<f64>(get, "UPSTREAM_MAX_RPS")?
            .unwrap_or(3.0)
            .clamp(0.1, 1000.0),
        stable_refresh: seconds("REFRESH_STABLE_SECONDS", 600.0)?,
        eta: (
            seconds("DEPLOY_ETA_VPS_SECONDS", 300.0)?,
            seconds("DEPLOY_ETA_BAREMETAL_SECONDS", 1200.0)?,
        ),
        deadline: (
            seconds("DEPLOY_DEADLINE_VPS_SECONDS", 1800.0)?,
            seconds("DEPLOY_DEADLINE_BAREMETAL_SECONDS", 5400.0)?,
        ),
        probe_timeout: seconds("SSH_PROBE_TIMEOUT_SECONDS", 3.0)?.max(Duration::from_millis(100)),
        probe_target: get("SSH_PROBE_TARGET").map(|t| t.trim().to_owned()),
        ssh_port: parse_opt(get, "SSH_PORT")?.unwrap_or(22),
    })
}

/// Payments: the network, the treasury, the facilitator, the chain, paid time and the
/// order's timings (`X402_*`, `FACILITATOR_*`, `CDP_*`, `RPC_*`, `PAID_PERIOD_SECONDS`, …).
fn payment_config(get: &impl Fn(&str) -> Option<String>) -> Result<PaymentConfig, ConfigError> {
    let network = match get("X402_NETWORK").as_deref().map(str::trim) {
        None => crate::x402::Network::BaseSepolia,
        Some(name) => crate::x402::Network::parse(name).ok_or(ConfigError {
            name: "X402_NETWORK",
            message: format!("`{name}` is not base or base-sepolia"),
        })?,
    };
    let pay_to = match get("X402_PAY_TO") {
        None => None,
        Some(address) => Some(crate::address::parse(address.trim()).ok_or(ConfigError {
            name: "X402_PAY_TO",
            message: "must be an Ethereum address".into(),
        })?),
    };
    let facilitator_auth = facilitator_auth(get)?;
    Ok(PaymentConfig {
        network,
        pay_to,
        max_timeout_seconds: parse_opt(get, "X402_MAX_TIMEOUT_SECONDS")?.unwrap_or(120),
        wait: seconds_within(get, "X402_WAIT_SECONDS", 5.0, (0.0, 25.0))?,
        rpc_url: get("RPC_URL")
            .map(|u| u.trim().to_owned())
            .unwrap_or_else(|| match network {
                crate::x402::Network::Base => "https://mainnet.base.org".into(),
                crate::x402::Network::BaseSepolia => "https://sepolia.base.org".into(),
            }),
        rpc_timeout: seconds_within(get, "RPC_TIMEOUT_SECONDS", 3.0, (0.1, 20.0))?,
        period: Duration::from_secs(
            parse_opt::<u64>(get, "PAID_PERIOD_SECONDS")?
                .unwrap_or(730 * 3600)
                .max(1),
        ),
        grace: Duration::from_secs(
            parse_opt::<u64>(get, "EXPIRY_GRACE_SECONDS")?.unwrap_or(72 * 3600),
        ),
        paid_ahead: Duration::from_secs(
            parse_opt::<u64>(get, "MAX_PAID_AHEAD_SECONDS")?
                .unwrap_or(365 * 24 * 3600)
                .max(1),
        ),
        lease: seconds_within(get, "ORDER_LEASE_SECONDS", 60.0, (1.0, 3600.0))?,
        order_deadline: seconds_within(get, "ORDER_DEADLINE_SECONDS", 300.0, (1.0, 86_400.0))?,
        create_attempts: parse_opt::<u32>(get, "ORDER_CREATE_ATTEMPTS")?
            .unwrap_or(3)
            .clamp(1, 10),
        create_settle: seconds_within(get, "CREATE_SETTLE_SECONDS", 300.0, (0.0, 86_400.0))?,
        sweep: match parse_opt::<u64>(get, "SWEEP_SECONDS")?.unwrap_or(600) {
            0 => None,
            secs => Some(Duration::from_secs(secs.min(86_400))),
        },
        request_budget: seconds_within(get, "REQUEST_BUDGET_SECONDS", 28.0, (1.0, 900.0))?,
        facilitator_url: get("FACILITATOR_URL")
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .unwrap_or_else(|| match network {
                crate::x402::Network::Base => {
                    "https://api.cdp.coinbase.com/platform/v2/x402".into()
                }
                crate::x402::Network::BaseSepolia => "https://x402.org/facilitator".into(),
            }),
        facilitator_auth,
        facilitator_timeout: seconds_within(get, "FACILITATOR_TIMEOUT_SECONDS", 5.0, (0.1, 25.0))?,
        settlement_sender: settlement_sender(get)?,
        refusal_cooldown: seconds_within(
            get,
            "PAID_REFUSAL_COOLDOWN_SECONDS",
            600.0,
            (0.0, 86_400.0),
        )?,
        public_base_url: get("PUBLIC_BASE_URL").map(|u| u.trim().trim_end_matches('/').to_owned()),
    })
}

/// The pre-check's settlement sender: `X402_SETTLEMENT_SENDER`, else [`SETTLEMENT_SENDER`].
fn settlement_sender(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<alloy_primitives::Address, ConfigError> {
    let address = get("X402_SETTLEMENT_SENDER").unwrap_or_else(|| SETTLEMENT_SENDER.into());
    crate::address::parse(address.trim())
        .and_then(|a| a.parse().ok())
        .filter(|a: &alloy_primitives::Address| !a.is_zero())
        .ok_or(ConfigError {
            name: "X402_SETTLEMENT_SENDER",
            message: "must be a non-zero Ethereum address".into(),
        })
}

/// The settlement sender when none is configured: an address like any facilitator's signer
/// (no code, not zero), so that an account's check runs with a sender as a settlement's does.
pub const SETTLEMENT_SENDER: &str = "0x4a7c0b5e21f3d9a86c2e0f1b7d35e98a4c6b2d10";

/// How the facilitator is called: a CDP key (`CDP_API_KEY_ID` + `CDP_API_KEY_SECRET`), a
/// static header (`FACILITATOR_AUTH_HEADER`, `Name: value`), or nothing.
fn facilitator_auth(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<crate::x402::facilitator::FacilitatorAuth, ConfigError> {
    use crate::x402::facilitator::FacilitatorAuth;
    Ok(
        match (
            get("CDP_API_KEY_ID"),
            get("CDP_API_KEY_SECRET"),
            get("FACILITATOR_AUTH_HEADER"),
        ) {
            (Some(key_id), Some(secret), _) => FacilitatorAuth::Cdp {
                key_id: key_id.trim().to_owned(),
                secret: Secret::new(secret.replace("\\n", "\n")).into(),
            },
            (_, _, Some(header)) => {
                let (name, value) = header.split_once(':').ok_or(ConfigError {
                    name: "FACILITATOR_AUTH_HEADER",
                    message: "must be `Name: value`".into(),
                })?;
                FacilitatorAuth::Header {
                    name: name.trim().to_owned(),
                    value: Secret::new(value.trim()),
                }
            }
            _ => FacilitatorAuth::None,
        },
    )
}

/// Seconds from `name` (a decimal; `default` when unset), held within `bounds` (min, max).
fn seconds_within(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: f64,
    bounds: (f64, f64),
) -> Result<Duration, ConfigError> {
    Ok(Duration::from_secs_f64(
        parse_opt::<f64>(get, name)?
            .unwrap_or(default)
            .clamp(bounds.0, bounds.1),
    ))
}

/// `WEB_ORIGIN` checked and in the form browsers send (`Origin`, RFC 6454): one
/// `https://host[:port]`, or `http://` for `localhost` and `127.0.0.1` (development); no path,
/// query, credentials or wildcard. `null` or `*` would grant credentialed cross-site access.
fn web_origin(value: &str) -> Result<String, ConfigError> {
    let refuse = |why: &str| ConfigError {
        name: "WEB_ORIGIN",
        message: format!("`{value}` {why}; expected one https://host[:port]"),
    };
    let url = url::Url::parse(value).map_err(|_| refuse("is not an origin"))?;
    let local = matches!(url.host_str(), Some("localhost" | "127.0.0.1"));
    match url.scheme() {
        "https" => {}
        "http" if local => {}
        _ => return Err(refuse("is not https (http is for localhost only)")),
    }
    if url.host_str().is_none_or(|host| host.contains('*')) {
        return Err(refuse("names no single host"));
    }
    if url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(refuse("is more than scheme, host and port"));
    }
    Ok(url.origin().ascii_serialization())
}

/// A per-owner cap from `name` (at least 1).
fn cap(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u32,
) -> Result<u32, ConfigError> {
    match parse_opt(get, name)?.unwrap_or(default) {
        0 => Err(ConfigError {
            name,
            message: "must be at least 1".into(),
        }),
        n => Ok(n),
    }
}

/// A pool's global budget `name` (default `default`): at least three times its subjects' cap
/// `share` (default `share_default`), so that no one subject holds more than a third of it (the
/// capacity rule, `docs/capacity.md`).
fn pool(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u32,
    share: &'static str,
    share_default: u32,
) -> Result<u32, ConfigError> {
    let (pool, share_cap) = (cap(get, name, default)?, cap(get, share, share_default)?);
    if pool < share_cap.saturating_mul(3) {
        return Err(ConfigError {
            name,
            message: format!(
                "must be at least three times {share} ({share_cap}): no one subject may hold \
                 more than a third of a pool"
            ),
        });
    }
    Ok(pool)
}

/// A rate limit from `rate` (per second; 0 turns it off) and `burst` (at least 1).
fn rate_limit(
    get: &impl Fn(&str) -> Option<String>,
    rate: &'static str,
    burst: &'static str,
    default_rate: f64,
    default_burst: u32,
) -> Result<Option<RateLimit>, ConfigError> {
    let per_second = parse_opt(get, rate)?.unwrap_or(default_rate);
    let burst_value = parse_opt(get, burst)?.unwrap_or(default_burst);
    if !(per_second >= 0.0 && per_second.is_finite()) {
        return Err(ConfigError {
            name: rate,
            message: "must be a number of requests per second ≥ 0".into(),
        });
    }
    if burst_value == 0 {
        return Err(ConfigError {
            name: burst,
            message: "must be at least 1".into(),
        });
    }
    Ok((per_second > 0.0).then_some(RateLimit {
        per_second,
        burst: burst_value,
    }))
}

fn parse_opt<T: FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<Option<T>, ConfigError> {
    get(name)
        .map(|v| {
            v.trim().parse::<T>().map_err(|_| ConfigError {
                name,
                message: format!("`{v}` does not parse"),
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests;
