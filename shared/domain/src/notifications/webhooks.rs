//! Webhook endpoints (issue 20, point 3): an owner's endpoints, by the Standard Webhooks spec
//! (<https://www.standardwebhooks.com/>); their deliveries are [`super::deliveries`]'.
//!
//! - **Registration** checks the URL (`crate::destination`: `https` only, the name resolved and
//!   every address public) and answers the `whsec_…` secret once. Rotation makes a new secret;
//!   the old one keeps signing (beside the new: `webhook-signature` carries both) for
//!   [`ROTATION_GRACE_SECONDS`].
//! - An endpoint whose key is revoked or expired reads as disabled, saying why.
//! - A test event (`POST /api/webhooks/{id}/test`) is queued like any event and tried once; it
//!   still goes to a disabled endpoint, and its success enables it again.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::deliveries::{enqueue, key_gone, queued, release_test_slot};
use crate::destination::{self, Refusal};
use crate::error::ApiError;
use crate::identity::auth::{Credential, Principal};
use crate::page::PageRequest;
use crate::ratelimit::slots;
use crate::state::AppState;
use crate::store::caps::Pool;
use crate::store::events::{EventRecord, EventType, Subject, SubjectKind};
use crate::store::webhooks::{
    DeliveryRecord, DeliveryStatus, Disabled, EndpointRecord, SigningSecret,
};
use crate::store::{Page, StoreError};

/// How long a rotated-out secret keeps signing, seconds (24 h).
pub const ROTATION_GRACE_SECONDS: i64 = 24 * 3600;
/// The longest a queued test event holds its owner's slot, seconds (the queue's latency and
/// one attempt, well within).
pub const TEST_SLOT_SECONDS: i64 = 60;
/// The type of a test event.
pub const TEST_EVENT: &str = "webhook.test";

/// `POST /api/webhooks`: where to deliver and, optionally, which event types.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewEndpoint {
    /// `https://…` (a public address; `http://127.0.0.1:<port>` on a local stack only).
    #[schema(example = "https://agent.example.com/hooks/servers")]
    pub url: String,
    /// Event types to receive (e.g. `["lease.expiring", "server.ready"]`); absent or empty:
    /// every type.
    #[serde(default)]
    pub types: Option<Vec<String>>,
}

/// An endpoint as answered (never its secrets).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `whk_<32 hex>`.
    pub id: String,
    /// Where deliveries are posted.
    pub url: String,
    /// The event types it receives; empty: every type.
    pub types: Vec<String>,
    /// When it was registered, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// `enabled` or `disabled`.
    #[schema(example = "enabled")]
    pub status: &'static str,
    /// Why and when it was disabled (its deliveries failed for 3 days).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Disabled>,
    /// Since when every attempt failed, RFC 3339; absent after a success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<crate::time::Timestamp>,
    /// Until when a rotated-out secret still signs beside the current one, RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_valid_until: Option<crate::time::Timestamp>,
    /// The API key that registered it (`key_…`); absent when the owner's session did. Once
    /// that key is revoked or expires, the endpoint is disabled and says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// One event's delivery to one endpoint, as answered: where it stands, its attempts, and the
/// event as the feed answers it (owner in EIP-55).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// `dlv_<32 hex>`, from the endpoint and the event.
    pub id: String,
    /// The endpoint's id.
    pub endpoint_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempts: u32,
    /// The HTTP status of the last answer, if there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// Why the last attempt failed (a status, a timeout, a refused address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the next attempt is due; absent unless pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<crate::time::Timestamp>,
    /// When it was queued.
    pub created_at: crate::time::Timestamp,
    /// When the endpoint answered 2xx.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<crate::time::Timestamp>,
    /// The event delivered (the body posted, and `webhook-id` = its id).
    pub event: crate::notifications::events::Event,
}

impl From<DeliveryRecord> for Delivery {
    fn from(delivery: DeliveryRecord) -> Delivery {
        Delivery {
            event: crate::notifications::events::Event::from(&delivery.event),
            id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            status: delivery.status,
            attempts: delivery.attempts,
            last_status: delivery.last_status,
            last_error: delivery.last_error,
            next_attempt_at: delivery.next_attempt_at,
            created_at: delivery.created_at,
            delivered_at: delivery.delivered_at,
        }
    }
}

/// An endpoint with its new secret: the answer of registration and rotation, the only time
/// the secret is shown.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WithSecret {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// `whsec_…`: verifies `webhook-signature` (any Standard Webhooks library takes it as is).
    pub secret: String,
}

impl Endpoint {
    /// Endpoint `record` as answered at `now` (epoch seconds).
    pub fn of(record: &EndpointRecord, now: i64) -> Endpoint {
        let at = crate::time::Timestamp::from_unix;
        Endpoint {
            id: record.id.clone(),
            url: record.url.clone(),
            types: record.types.clone(),
            created_at: record.created_at,
            status: if record.disabled.is_some() {
                "disabled"
            } else {
                "enabled"
            },
            disabled: record.disabled.clone(),
            failing_since: record.failing_since.map(at),
            previous_secret_valid_until: record
                .secrets
                .iter()
                .filter_map(|s| s.expires_at)
                .filter(|until| *until > now)
                .max()
                .map(at),
            key_id: record.key_id.clone(),
        }
    }
}

/// A new signing secret: `whsec_` and the base64 of 24 random bytes.
fn new_secret() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The event types of a registration: each a known type, each once, in the docs' order.
///
/// Errors: 400 naming `types`.
fn parse_types(types: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let mut known = BTreeSet::new();
    for name in types.unwrap_or_default() {
        let kind = EventType::parse(name.trim())
            .ok_or_else(|| ApiError::invalid("types", format!("{name} is not an event type")))?;
        known.insert(EventType::ALL.iter().position(|t| *t == kind));
    }
    Ok(known
        .into_iter()
        .flatten()
        .map(|i| EventType::ALL[i].as_str().to_owned())
        .collect())
}

/// The refusal of a destination as the caller's 400 naming `url`.
fn refused(refusal: Refusal) -> ApiError {
    ApiError::invalid("url", refusal.to_string())
}

/// Registers an endpoint of the caller's owner: the URL is checked and its name resolved and
/// checked now (and again at every delivery). Answers the endpoint and its secret.
///
/// Errors: 400 naming `url` (form, scheme, an address of a refused class, a name that does not
/// resolve) or `types`; 409 at the owner's cap of endpoints; the store's.
pub async fn register(
    state: &AppState,
    principal: &Principal,
    request: NewEndpoint,
) -> Result<WithSecret, ApiError> {
    let local = state.config.webhook_local_receiver;
    let url = destination::parse(request.url.trim(), local).map_err(refused)?;
    state.resolver.resolve(&url, local).await.map_err(refused)?;
    let now = state.clock.now();
    let secret = new_secret();
    let record = EndpointRecord {
        id: crate::ids::new(crate::ids::WEBHOOK),
        owner: principal.owner.clone(),
        url: url.to_string(),
        types: parse_types(request.types)?,
        created_at: crate::time::Timestamp::from_unix(now),
        secrets: vec![SigningSecret {
            secret: secret.clone(),
            expires_at: None,
        }],
        disabled: None,
        failing_since: None,
        key_id: match &principal.credential {
            Credential::ApiKey { key_id, .. } => Some(key_id.clone()),
            Credential::Session { .. } => None,
        },
        version: 0,
    };
    let cap = state.config.caps.webhooks;
    match state.store.put_webhook(&record, cap).await {
        Ok(()) => Ok(WithSecret {
            endpoint: Endpoint::of(&record, now),
            secret,
        }),
        Err(StoreError::CapReached(_)) => Err(ApiError::Conflict(format!(
            "this wallet has {cap} webhook endpoints, the most allowed: delete one first"
        ))),
        Err(other) => Err(other.into()),
    }
}

/// The caller's endpoints, oldest first (at most the cap: one page).
///
/// Errors: the store's.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Page<Endpoint>, ApiError> {
    let now = state.clock.now();
    let mut items = Vec::new();
    for record in state.store.webhooks_of(&principal.owner).await? {
        items.push(Endpoint::of(&reach(state, record).await?, now));
    }
    Ok(Page {
        items,
        next_cursor: None,
    })
}

/// The caller's endpoint `id`.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's.
async fn owned(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<EndpointRecord, ApiError> {
    crate::ids::parse(crate::ids::WEBHOOK, "id", id)?;
    state
        .store
        .webhook(&principal.owner, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("webhook endpoint {id} not found")))
}

/// The caller's endpoint `id`.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; the store's.
pub async fn get(state: &AppState, principal: &Principal, id: &str) -> Result<Endpoint, ApiError> {
    let record = reach(state, owned(state, principal, id).await?).await?;
    Ok(Endpoint::of(&record, state.clock.now()))
}

/// `endpoint` as it stands: disabled, saying why, once the key that registered it is revoked
/// or expired (written when a delivery finds it so; answered so at once).
///
/// Errors: the store's.
async fn reach(state: &AppState, mut endpoint: EndpointRecord) -> Result<EndpointRecord, ApiError> {
    if endpoint.disabled.is_none()
        && let Some(reason) = key_gone(state, &endpoint).await?
    {
        endpoint.disabled = Some(Disabled {
            at: state.clock.timestamp(),
            reason,
        });
    }
    Ok(endpoint)
}

/// Deletes the caller's endpoint `id`: nothing more is queued for it, and what is queued fails
/// when its turn comes.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; the store's.
pub async fn delete(state: &AppState, principal: &Principal, id: &str) -> Result<(), ApiError> {
    crate::ids::parse(crate::ids::WEBHOOK, "id", id)?;
    if state.store.delete_webhook(&principal.owner, id).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "webhook endpoint {id} not found"
        )))
    }
}

/// A new secret for the caller's endpoint `id`; the current one keeps signing beside it for
/// [`ROTATION_GRACE_SECONDS`] (secrets rotated out before are dropped). The write names the
/// version read, and is made again over a newer one (a delivery's outcome written meanwhile).
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; 503 when the endpoint keeps
/// changing under it; the store's.
pub async fn rotate(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<WithSecret, ApiError> {
    let secret = new_secret();
    for _ in 0..3 {
        let mut record = owned(state, principal, id).await?;
        let now = state.clock.now();
        let previous = record
            .secrets
            .iter()
            .find(|s| s.expires_at.is_none())
            .map(|current| SigningSecret {
                secret: current.secret.clone(),
                expires_at: Some(now + ROTATION_GRACE_SECONDS),
            });
        record.secrets = std::iter::once(SigningSecret {
            secret: secret.clone(),
            expires_at: None,
        })
        .chain(previous)
        .collect();
        if state.store.save_webhook(&record, record.version).await? {
            return Ok(WithSecret {
                endpoint: Endpoint::of(&record, now),
                secret,
            });
        }
    }
    Err(ApiError::Unavailable(format!(
        "webhook endpoint {id} kept changing: rotate it again"
    )))
}

/// Queues a `webhook.test` event for the caller's endpoint `id` and answers its delivery,
/// pending: the delivery function sends it (once, in a message group of its own, so behind no
/// other event), never this request. A disabled endpoint gets it too, and is enabled again if
/// it answers 2xx. Its outcome is read in the endpoint's deliveries. Each queued test holds
/// one of the owner's `MAX_WEBHOOK_TESTS_PER_OWNER` slots until it was tried (or for
/// [`TEST_SLOT_SECONDS`] at most), so no owner keeps more in flight, whatever its endpoints do.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; 429 `webhook-tests` with
/// `Retry-After` when every slot is held; 503 when no delivery queue is configured; the
/// store's or the queue's.
pub async fn send_test(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<Delivery, ApiError> {
    let endpoint = owned(state, principal, id).await?;
    let now = state.clock.now();
    let millis = state.clock.now_millis();
    let event = EventRecord {
        id: crate::ids::new("evt_"),
        kind: TEST_EVENT.to_owned(),
        subject: Subject {
            kind: SubjectKind::Webhook,
            id: endpoint.id.clone(),
        },
        owner: endpoint.owner.clone(),
        occurred_at: state.clock.event_time(),
        sequence: millis as u64,
        data: json!({"message": "a test event: this endpoint receives and verifies deliveries"}),
    };
    let mut delivery = queued(&endpoint, event, now);
    let cap = state.config.caps.webhook_tests;
    let owner = principal.owner.as_str();
    let held = slots::take(
        state,
        Pool::Tests,
        owner,
        &delivery.id,
        cap,
        TEST_SLOT_SECONDS,
    )
    .await?;
    delivery.slot = Some(held.slot);
    if let Err(err) = enqueue(state, &delivery).await {
        release_test_slot(state, &delivery).await;
        return Err(err);
    }
    Ok(delivery.into())
}

/// The deliveries of the caller's endpoint `id`, newest first: status, attempts, last error,
/// next try.
///
/// Errors: 400 for a malformed id or a cursor of another listing; 404 for none of the
/// caller's; the store's.
pub async fn deliveries(
    state: &AppState,
    principal: &Principal,
    id: &str,
    page: &PageRequest,
) -> Result<Page<Delivery>, ApiError> {
    let endpoint = owned(state, principal, id).await?;
    Ok(state
        .store
        .deliveries_of(&endpoint.id, page.limit, page.cursor())
        .await?
        .map(Delivery::from))
}
