//! What a function builds once at cold start and reuses for every warm invocation.

use std::sync::Arc;

use crate::cache::TtlCache;
use crate::checkpoint::Checkpoints;
use crate::clock::Clock;
use crate::config::{Config, Secret, TokenSource};
use crate::error::ApiError;
use crate::store::Store;
use crate::upstream;
use crate::x402::chain::Chain;
use crate::x402::facilitator::Facilitator;

/// The shared state of a function: configuration, store, the adapters (upstream client when
/// configured, facilitator, chain RPC) and the warm-function discovery cache.
pub struct AppState {
    /// The configuration read at cold start.
    pub config: Config,
    /// The DynamoDB store.
    pub store: Store,
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
    /// Source addresses locked out on this instance for failed authentications.
    pub lockouts: crate::ratelimit::Lockouts,
}

impl AppState {
    /// Assembles a state from its parts (tests build it this way), building the facilitator
    /// and chain clients from `config`.
    ///
    /// Errors: an HTTP client that cannot be built (TLS setup).
    pub fn new(
        config: Config,
        store: Store,
        upstream: Option<upstream::Client>,
    ) -> Result<Self, ApiError> {
        let payments = &config.payments;
        let facilitator = Facilitator::new(
            &payments.facilitator_url,
            payments.facilitator_auth.clone(),
            payments.facilitator_timeout,
        )?;
        let chain = Chain::new(&payments.rpc_url, payments.rpc_timeout)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(AppState {
            discovery_cache: TtlCache::new(config.discovery_ttl),
            facilitator,
            chain,
            checkpoints: None,
            clock: Clock::system(),
            lockouts: Default::default(),
            config,
            store,
            upstream,
        })
    }

    /// Passes checkpoint `step` of the paid path (a no-op unless a test armed it).
    pub async fn checkpoint(&self, step: crate::checkpoint::Step) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.pass(step).await;
        }
    }

    /// Builds the state from the environment: [`Config::from_env`], the AWS SDK's default
    /// chain (region, credentials, `AWS_ENDPOINT_URL_DYNAMODB` for a local DynamoDB), and the
    /// upstream token — read from SSM (with decryption) when `UPSTREAM_TOKEN_PARAM` names a
    /// parameter — and the CDP key secret (`CDP_API_KEY_SECRET_PARAM`, with `CDP_API_KEY_ID`).
    /// A parameter that cannot be read leaves its feature off (logged).
    ///
    /// Errors: invalid configuration; an upstream client that cannot be built.
    pub async fn from_env() -> Result<Self, lambda_http::Error> {
        let config = Config::from_env()?;
        let sdk = aws_config::load_from_env().await;
        let store = Store::new(aws_sdk_dynamodb::Client::new(&sdk), &config.table_name);
        let mut config = config;
        let ssm = aws_sdk_ssm::Client::new(&sdk);
        let token = match &config.token {
            TokenSource::None => None,
            TokenSource::Value(secret) => Some(secret.clone()),
            TokenSource::SsmParameter(name) => read_parameter(&ssm, name).await,
        };
        if let (Ok(key_id), Ok(name)) = (
            std::env::var("CDP_API_KEY_ID"),
            std::env::var("CDP_API_KEY_SECRET_PARAM"),
        ) && !key_id.trim().is_empty()
            && !name.trim().is_empty()
            && matches!(
                config.payments.facilitator_auth,
                crate::x402::facilitator::FacilitatorAuth::None
            )
            && let Some(secret) = read_parameter(&ssm, name.trim()).await
        {
            config.payments.facilitator_auth = crate::x402::facilitator::FacilitatorAuth::Cdp {
                key_id: key_id.trim().to_owned(),
                secret,
            };
        }
        let upstream = token
            .map(|token| upstream::Client::new(&config.upstream, token))
            .transpose()?;
        Ok(Self::new(config, store, upstream)?)
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

/// Reads an SSM parameter with decryption; `None` (logged) when it is missing, empty or cannot be
/// read.
async fn read_parameter(ssm: &aws_sdk_ssm::Client, name: &str) -> Option<Secret> {
    match ssm
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
    {
        Ok(out) => out
            .parameter
            .and_then(|p| p.value)
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret::new(v.trim())),
        Err(err) => {
            tracing::error!(
                parameter = name,
                error = %aws_sdk_ssm::error::DisplayErrorContext(&err),
                "cannot read a secret parameter; the feature that needs it stays off"
            );
            None
        }
    }
}
