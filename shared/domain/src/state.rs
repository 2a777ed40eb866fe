//! What a function builds once at cold start and reuses for every warm invocation.

use std::sync::Arc;

use crate::cache::TtlCache;
use crate::checkpoint::Checkpoints;
use crate::clock::Clock;
use crate::config::{Config, TokenSource};
use crate::error::ApiError;
use crate::secrets::LazySecret;
use crate::store::Store;
use crate::upstream;
use crate::x402::chain::Chain;
use crate::x402::facilitator::{Facilitator, FacilitatorAuth};

/// The shared state of a function: configuration, store, the adapters (upstream client when
/// configured, facilitator, chain RPC) and the warm-function discovery cache.
pub struct AppState {
    /// The configuration read at cold start.
    pub config: Config,
    /// The DynamoDB store: the domain's alone (`pub(crate)`). A function, the faces and
    /// anything else outside this crate hold the state but cannot reach its store, so a store
    /// call from a face does not compile; a verb that a function and the operator CLI share
    /// takes a [`StoreHandle`].
    pub(crate) store: Store,
    /// The provider client; `None` when no upstream token is configured.
    pub upstream: Option<upstream::Client>,
    /// Discovery data reused for `config.discovery_ttl`.
    pub discovery_cache: TtlCache,
    /// The x402 facilitator (verify, settle).
    pub facilitator: Facilitator,
    /// The payment network's node (`authorizationState`).
    pub chain: Chain,
    /// Test kill points of the paid path; `None` in production.
    pub checkpoints: Option<Arc<Checkpoints>>,
    /// The clock of orders, leases and the reconciler (wall time; tests move a manual one).
    pub clock: Clock,
    /// What this instance knows of the rate limits (lockouts, windows, counts seen).
    pub limits: crate::ratelimit::local::Local,
    /// How webhook endpoints' names are resolved (the system's resolver; tests answer names
    /// themselves to make one resolve inward later).
    pub resolver: crate::destination::Resolver,
    /// The webhook delivery queue (`DELIVERY_QUEUE_URL`); `None` when not configured. The
    /// domain's alone, like the store.
    pub(crate) queue: Option<crate::store::queue::DeliveryQueue>,
}

impl AppState {
    /// Assembles a state from its parts (tests build it this way), with the facilitator and
    /// chain clients of `config` (nothing is connected or built until a first call).
    pub fn new(config: Config, store: Store, upstream: Option<upstream::Client>) -> Self {
        let payments = &config.payments;
        let facilitator = Facilitator::new(
            &payments.facilitator_url,
            payments.facilitator_auth.clone(),
            payments.facilitator_timeout,
        );
        let chain = Chain::new(&payments.rpc_url, payments.rpc_timeout, payments.network);
        AppState {
            discovery_cache: TtlCache::new(config.discovery_ttl),
            facilitator,
            chain,
            checkpoints: None,
            clock: Clock::system(),
            limits: Default::default(),
            resolver: crate::destination::Resolver::system(),
            queue: None,
            config,
            store,
            upstream,
        }
    }

    /// Whether `guard` holds: always, unless a test broke it on purpose.
    pub fn holds(&self, guard: crate::checkpoint::Guard) -> bool {
        self.checkpoints.as_ref().is_none_or(|c| c.holds(guard))
    }

    /// Passes checkpoint `step` of the paid path (a no-op unless a test armed it).
    pub async fn checkpoint(&self, step: crate::checkpoint::Step) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.pass(step).await;
        }
    }

    /// Builds the state from the environment: [`Config::from_env`], the AWS SDK's default
    /// chain (region, credentials, `AWS_ENDPOINT_URL_DYNAMODB` for a local DynamoDB) with its
    /// HTTP client trusting the compiled-in roots ([`crate::outbound::sdk_http_client`]) and a
    /// DynamoDB client — and nothing that calls out: the provider's token
    /// (`UPSTREAM_TOKEN_PARAM`) and the CDP key secret (`CDP_API_KEY_SECRET_PARAM`, with
    /// `CDP_API_KEY_ID`) are SSM parameters read on their first use ([`LazySecret`]), and the
    /// HTTP client is built on the first outbound call ([`crate::outbound`]).
    ///
    /// Errors: invalid configuration.
    pub async fn from_env() -> Result<Self, lambda_http::Error> {
        let mut config = Config::from_env()?;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(crate::outbound::sdk_http_client()?)
            .load()
            .await;
        let store = Store::new(aws_sdk_dynamodb::Client::new(&sdk), &config.table_name);
        let token = match &config.token {
            TokenSource::None => None,
            TokenSource::Value(secret) => Some(LazySecret::from(secret.clone())),
            TokenSource::SsmParameter(name) => Some(LazySecret::parameter(name, &sdk)),
        };
        if let (Ok(key_id), Ok(name)) = (
            std::env::var("CDP_API_KEY_ID"),
            std::env::var("CDP_API_KEY_SECRET_PARAM"),
        ) && !key_id.trim().is_empty()
            && !name.trim().is_empty()
            && matches!(config.payments.facilitator_auth, FacilitatorAuth::None)
        {
            config.payments.facilitator_auth = FacilitatorAuth::Cdp {
                key_id: key_id.trim().to_owned(),
                secret: LazySecret::parameter(name.trim(), &sdk),
            };
        }
        let upstream = token.map(|token| upstream::Client::new(&config.upstream, token));
        let queue = config.delivery_queue_url.as_ref().map(|url| {
            crate::store::queue::DeliveryQueue::new(aws_sdk_sqs::Client::new(&sdk), url)
        });
        Ok(Self {
            queue,
            ..Self::new(config, store, upstream)
        })
    }

    /// This state with webhook delivery queue `queue` (tests make one in moto for each).
    pub fn with_queue(mut self, queue: crate::store::queue::DeliveryQueue) -> Self {
        self.queue = Some(queue);
        self
    }

    /// The webhook delivery queue, or 503 when none is configured.
    pub(crate) fn queue(&self) -> Result<&crate::store::queue::DeliveryQueue, ApiError> {
        self.queue.as_ref().ok_or_else(|| {
            ApiError::Unavailable("webhook delivery is not configured (DELIVERY_QUEUE_URL)".into())
        })
    }

    /// This state with its provider client paced to `UPSTREAM_MAX_RPS` (the reconciler's: the
    /// refresher alone reads servers' state, within the provider's limit).
    pub fn paced(mut self) -> Self {
        let rps = self.config.watch.max_rps;
        self.upstream = self.upstream.map(|client| client.paced(rps));
        self
    }

    /// The upstream client, or 503 when the upstream is not configured.
    pub fn upstream(&self) -> Result<&upstream::Client, ApiError> {
        self.upstream
            .as_ref()
            .ok_or(ApiError::UpstreamNotConfigured)
    }
}

/// What a domain verb that a function and the operator CLI share takes: the state (a
/// function's) or a bare [`Store`] (`svcctl`'s). Only this crate opens it: its one method
/// needs a [`Sealed`], which no other crate can make.
pub trait StoreHandle {
    /// The store (the domain's; see [`Sealed`]).
    fn store(&self, sealed: Sealed) -> &Store;
}

/// The key of [`StoreHandle::store`]: its field is private, so only this crate makes one.
pub struct Sealed(());

impl Sealed {
    /// The key, for the domain's verbs.
    pub(crate) fn key() -> Sealed {
        Sealed(())
    }
}

impl StoreHandle for AppState {
    fn store(&self, _: Sealed) -> &Store {
        &self.store
    }
}

impl StoreHandle for Store {
    fn store(&self, _: Sealed) -> &Store {
        self
    }
}
