//! Webhooks (issue 20, point 3): an owner's endpoints, and the delivery of its events to them
//! by the Standard Webhooks spec (<https://www.standardwebhooks.com/>, signatures made with the
//! `standardwebhooks` crate).
//!
//! - **Registration** checks the URL (`crate::destination`: `https` only, the name resolved and
//!   every address public) and answers the `whsec_…` secret once. Rotation makes a new secret;
//!   the old one keeps signing (beside the new: `webhook-signature` carries both) for
//!   [`ROTATION_GRACE_SECONDS`].
//! - **Delivery**: an event recorded (the table's stream, `functions/events`) is queued once per
//!   subscribed endpoint ([`fan_out`]), then each endpoint's queue for the event's subject is
//!   sent in the subject's order ([`drain`]): the head is claimed, posted, and only once the
//!   endpoint answered 2xx (or the head's schedule ran out) does the next go. A failed attempt
//!   is due again after [`RETRY_AFTER`] (5 s … 10 h, 27.6 h in all); retries due are picked up
//!   by the reconciler's pass ([`retry_due`]). At least once: a receiver dedupes by
//!   `webhook-id` (the event's id).
//! - **Every delivery** resolves the name again and checks every address (no DNS rebinding),
//!   connects only to those addresses, follows no redirect, gives up after
//!   [`DELIVERY_TIMEOUT`] and reads at most [`MAX_ANSWER_BYTES`] of the answer.
//! - An endpoint whose every attempt failed for [`DISABLE_AFTER_SECONDS`] is disabled, with the
//!   reason; its pending deliveries fail. A test event (`POST /api/webhooks/{id}/test`) still
//!   goes to a disabled endpoint, and its success enables it again.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::deadline::Deadline;
use crate::destination::{self, Refusal};
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::page::PageRequest;
use crate::state::AppState;
use crate::store::events::{EventRecord, EventType, Subject, SubjectKind};
use crate::store::webhooks::{
    DeliveryRecord, DeliveryStatus, Disabled, EndpointRecord, SigningSecret,
};
use crate::store::{Page, StoreError};

/// Seconds from a failed attempt to the next, per attempt: 8 attempts over 27.6 h.
pub const RETRY_AFTER: [i64; 7] = [5, 300, 1800, 7200, 18000, 36000, 36000];
/// An endpoint whose every attempt failed this long (3 days, seconds) is disabled.
pub const DISABLE_AFTER_SECONDS: i64 = 3 * 24 * 3600;
/// How long a rotated-out secret keeps signing, seconds (24 h).
pub const ROTATION_GRACE_SECONDS: i64 = 24 * 3600;
/// The longest one delivery may take, connection to answer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an endpoint's answer that is read, bytes.
pub const MAX_ANSWER_BYTES: usize = 1024;
/// How long a drainer holds a delivery it sends (more than [`DELIVERY_TIMEOUT`]), seconds.
const CLAIM_SECONDS: i64 = 30;
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
    let items = state.store.webhooks_of(&principal.owner).await?;
    Ok(Page {
        items: items.iter().map(|e| Endpoint::of(e, now)).collect(),
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
    Ok(Endpoint::of(
        &owned(state, principal, id).await?,
        state.clock.now(),
    ))
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
/// [`ROTATION_GRACE_SECONDS`] (secrets rotated out before are dropped).
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; the store's.
pub async fn rotate(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<WithSecret, ApiError> {
    let mut record = owned(state, principal, id).await?;
    let now = state.clock.now();
    let secret = new_secret();
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
    if !state.store.save_webhook(&record).await? {
        return Err(ApiError::NotFound(format!(
            "webhook endpoint {id} not found"
        )));
    }
    Ok(WithSecret {
        endpoint: Endpoint::of(&record, now),
        secret,
    })
}

/// Sends a `webhook.test` event to the caller's endpoint `id` now (queued and sent like any
/// event, retried if it fails) and answers its delivery as it stands. A disabled endpoint gets
/// it too, and is enabled again if it answers 2xx.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; the store's.
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
    let delivery = queued(&endpoint, event, now);
    state.store.queue_delivery(&delivery).await?;
    // Sent at once, not behind earlier test events: test events have no order to keep.
    Ok(attempt(state, &endpoint, delivery.clone())
        .await?
        .unwrap_or(delivery)
        .into())
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

/// A new delivery of `event` to `endpoint`, queued at `now`.
fn queued(endpoint: &EndpointRecord, event: EventRecord, now: i64) -> DeliveryRecord {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{}#{}", endpoint.id, event.id));
    DeliveryRecord {
        id: format!("dlv_{}", &hex::encode(digest)[..32]),
        endpoint_id: endpoint.id.clone(),
        status: DeliveryStatus::Pending,
        attempts: 0,
        last_status: None,
        last_error: None,
        next_attempt_at: None,
        created_at: crate::time::Timestamp::from_unix(now),
        delivered_at: None,
        event,
    }
}

/// Queues `event` (as recorded) for every endpoint of its owner that receives its type, then
/// sends each queue of the event's subject as far as it goes. Idempotent: an event queued
/// before (a stream record delivered twice) is not queued again. Sending stops when `deadline`
/// leaves no time for another delivery (the reconciler's pass sends the rest). Answers how many
/// endpoints it was queued for.
///
/// Errors: the store's (the stream's function reports the record, which comes again).
pub async fn fan_out(
    state: &AppState,
    event: &EventRecord,
    deadline: &Deadline,
) -> Result<usize, ApiError> {
    let now = state.clock.now();
    let endpoints = state.store.webhooks_of(&event.owner).await?;
    let mut queued_for = Vec::new();
    for endpoint in endpoints.iter().filter(|e| e.receives(&event.kind)) {
        state
            .store
            .queue_delivery(&queued(endpoint, event.clone(), now))
            .await?;
        queued_for.push(endpoint);
    }
    for endpoint in &queued_for {
        drain(state, endpoint, &event.subject, deadline).await?;
    }
    Ok(queued_for.len())
}

/// What a pass over retries due did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryReport {
    /// Queues (endpoint, subject) with a delivery due.
    pub queues: usize,
    /// Deliveries answered 2xx.
    pub delivered: usize,
    /// Deliveries whose schedule ran out, or whose endpoint is disabled or gone.
    pub failed: usize,
    /// Queues whose drain failed in the store (tried again next pass).
    pub errors: usize,
}

/// Sends every queue with a delivery due now (the reconciler's pass), within `deadline`.
///
/// Errors: the listing of deliveries due fails.
pub async fn retry_due(state: &AppState, deadline: &Deadline) -> Result<DeliveryReport, ApiError> {
    let mut report = DeliveryReport::default();
    let due = state.store.deliveries_due(state.clock.now(), 100).await?;
    let mut seen = BTreeSet::new();
    for delivery in due {
        let queue = (delivery.endpoint_id.clone(), delivery.event.subject.clone());
        let key = (queue.0.clone(), queue.1.kind.as_str(), queue.1.id.clone());
        if !seen.insert(key) || !deadline.allows(DELIVERY_TIMEOUT) {
            continue;
        }
        report.queues += 1;
        let owner = &delivery.event.owner;
        let endpoint = match state.store.webhook(owner, &queue.0).await {
            Ok(Some(endpoint)) => endpoint,
            Ok(None) => gone(&delivery.endpoint_id, owner),
            Err(_) => {
                report.errors += 1;
                continue;
            }
        };
        match drain(state, &endpoint, &queue.1, deadline).await {
            Ok(drained) => {
                report.delivered += drained.delivered;
                report.failed += drained.failed;
            }
            Err(err) => {
                report.errors += 1;
                let endpoint = &queue.0;
                tracing::error!(%endpoint, error = %err, "draining a webhook queue failed");
            }
        }
    }
    Ok(report)
}

/// A stand-in for a deleted endpoint, so that its queue drains into failures.
fn gone(id: &str, owner: &crate::address::Owner) -> EndpointRecord {
    EndpointRecord {
        id: id.to_owned(),
        owner: owner.clone(),
        url: String::new(),
        types: Vec::new(),
        created_at: crate::time::Timestamp::EPOCH,
        secrets: Vec::new(),
        disabled: None,
        failing_since: None,
    }
}

/// What one drain did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drained {
    /// Deliveries answered 2xx.
    pub delivered: usize,
    /// Deliveries that failed for good.
    pub failed: usize,
}

/// Sends `endpoint`'s queue for `subject` in order, as far as it goes: each head that is due
/// is claimed, sent and written; a head that stays pending (a retry due later), that another
/// drainer holds, or for which `deadline` leaves no time stops the drain.
///
/// Errors: the store's (a claimed head is sent again when its claim lapses).
pub async fn drain(
    state: &AppState,
    endpoint: &EndpointRecord,
    subject: &Subject,
    deadline: &Deadline,
) -> Result<Drained, ApiError> {
    let mut drained = Drained::default();
    while deadline.allows(DELIVERY_TIMEOUT) {
        let queue = state.store.delivery_queue(&endpoint.id, subject).await?;
        let Some(head) = queue.into_iter().next() else {
            return Ok(drained);
        };
        let Some(head) = attempt(state, endpoint, head).await? else {
            return Ok(drained);
        };
        match head.status {
            DeliveryStatus::Delivered => drained.delivered += 1,
            DeliveryStatus::Failed => drained.failed += 1,
            DeliveryStatus::Pending => return Ok(drained),
        }
    }
    Ok(drained)
}

/// Claims `delivery` (if it is due and no one holds it), sends it to `endpoint` as it now
/// stands, and writes the outcome to the delivery and the endpoint; answers the delivery as
/// written, or `None` when it was not due or another drainer holds it.
///
/// Errors: the store's (a claimed delivery is sent again when its claim lapses).
async fn attempt(
    state: &AppState,
    endpoint: &EndpointRecord,
    mut delivery: DeliveryRecord,
) -> Result<Option<DeliveryRecord>, ApiError> {
    let now = state.clock.now();
    let store = &state.store;
    if delivery.due() > now
        || !store
            .claim_delivery(&delivery, now, now + CLAIM_SECONDS)
            .await?
    {
        return Ok(None);
    }
    let current = store.webhook(&endpoint.owner, &endpoint.id).await?;
    let test = delivery.event.subject.kind == SubjectKind::Webhook;
    let result = match &current {
        None => Err(Failure::last("the endpoint was deleted")),
        Some(e) if e.disabled.is_some() && !test => Err(Failure::last("the endpoint is disabled")),
        Some(e) => send(state, e, &delivery.event).await,
    };
    let mut endpoint_now = current.clone();
    after_attempt(
        &mut delivery,
        endpoint_now.as_mut(),
        result,
        state.clock.now(),
    );
    store.save_delivery(&delivery).await?;
    if let (Some(before), Some(after)) = (&current, &endpoint_now)
        && before != after
    {
        store.save_webhook(after).await?;
    }
    Ok(Some(delivery))
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The endpoint's answer, if it answered.
    pub status: Option<u16>,
    /// What happened, e.g. `answered 500`, `timed out after 10 s`.
    pub message: String,
    /// Whether another attempt may succeed (not when the endpoint is gone or disabled).
    pub retry: bool,
}

impl Failure {
    /// A failure worth another attempt.
    pub fn new(status: Option<u16>, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            retry: true,
        }
    }

    /// A failure no attempt can mend.
    pub fn last(message: impl Into<String>) -> Failure {
        Failure {
            retry: false,
            ..Failure::new(None, message)
        }
    }
}

/// Writes an attempt's outcome at `now` into `delivery` and its endpoint: a 2xx delivers it
/// (and clears the endpoint's failing and disabled state); a failure schedules the next try
/// by [`RETRY_AFTER`], or fails it when the schedule ran out or the failure is the last; an
/// endpoint failing for [`DISABLE_AFTER_SECONDS`] is disabled, with the reason, and the delivery
/// fails with it.
pub fn after_attempt(
    delivery: &mut DeliveryRecord,
    endpoint: Option<&mut EndpointRecord>,
    result: Result<u16, Failure>,
    now: i64,
) {
    delivery.attempts += 1;
    delivery.next_attempt_at = None;
    match result {
        Ok(status) => {
            delivery.status = DeliveryStatus::Delivered;
            delivery.last_status = Some(status);
            delivery.last_error = None;
            delivery.delivered_at = Some(crate::time::Timestamp::from_unix(now));
            if let Some(endpoint) = endpoint {
                endpoint.failing_since = None;
                endpoint.disabled = None;
            }
        }
        Err(failure) => {
            delivery.last_status = failure.status;
            delivery.last_error = Some(failure.message.clone());
            let retry = RETRY_AFTER.get(delivery.attempts as usize - 1);
            delivery.status = match retry {
                Some(after) if failure.retry => {
                    delivery.next_attempt_at = Some(crate::time::Timestamp::from_unix(now + after));
                    DeliveryStatus::Pending
                }
                _ => DeliveryStatus::Failed,
            };
            let Some(endpoint) = endpoint else { return };
            let since = *endpoint.failing_since.get_or_insert(now);
            if endpoint.disabled.is_none() && now - since >= DISABLE_AFTER_SECONDS {
                endpoint.disabled = Some(Disabled {
                    at: crate::time::Timestamp::from_unix(now),
                    reason: format!(
                        "every delivery failed since {}; the last: {}",
                        crate::time::Timestamp::from_unix(since),
                        failure.message
                    ),
                });
                delivery.status = DeliveryStatus::Failed;
                delivery.next_attempt_at = None;
            }
        }
    }
}

/// The `webhook-signature` of `payload` (sent as `webhook-id` `id` at `timestamp`, epoch
/// seconds): `v1,<base64>` for every secret still signing at `now`, space-separated.
///
/// Errors: a stored secret that is not `whsec_` base64 (never made here).
pub fn signature(
    secrets: &[SigningSecret],
    now: i64,
    id: &str,
    timestamp: i64,
    payload: &[u8],
) -> Result<String, String> {
    let mut signatures = Vec::new();
    for secret in secrets
        .iter()
        .filter(|s| s.expires_at.is_none_or(|until| until > now))
    {
        let signer = standardwebhooks::Webhook::new(&secret.secret).map_err(|e| e.to_string())?;
        signatures.push(
            signer
                .sign(id, timestamp, payload)
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(signatures.join(" "))
}

/// Posts `event` to `endpoint`: the URL checked again and its name resolved again and every
/// address checked, a client that connects to those addresses only, signed headers; answers
/// the status of a 2xx answer.
///
/// Errors: a [`Failure`] saying why (refused address, no connection, timeout, a non-2xx
/// answer).
async fn send(
    state: &AppState,
    endpoint: &EndpointRecord,
    event: &EventRecord,
) -> Result<u16, Failure> {
    let local = state.config.webhook_local_receiver;
    let refusal = |r: Refusal| Failure::new(None, r.to_string());
    let url = destination::parse(&endpoint.url, local).map_err(refusal)?;
    let addresses = state.resolver.resolve(&url, local).await.map_err(refusal)?;
    let host = url.host_str().unwrap_or_default().to_owned();
    let client = crate::outbound::pinned(&host, &addresses, DELIVERY_TIMEOUT)
        .map_err(|e| Failure::new(None, e))?;
    let body = serde_json::to_string(&crate::notifications::events::Event::from(event))
        .map_err(|e| Failure::new(None, e.to_string()))?;
    // Receivers check the timestamp against their own clock (±5 minutes): wall time.
    let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
    let signed = signature(
        &endpoint.secrets,
        state.clock.now(),
        &event.id,
        timestamp,
        body.as_bytes(),
    )
    .map_err(|e| Failure::new(None, e))?;
    let answer = client
        .post(url)
        .header("content-type", "application/json")
        .header(standardwebhooks::HEADER_WEBHOOK_ID, &event.id)
        .header(
            standardwebhooks::HEADER_WEBHOOK_TIMESTAMP,
            timestamp.to_string(),
        )
        .header(standardwebhooks::HEADER_WEBHOOK_SIGNATURE, signed)
        .body(body)
        .send()
        .await
        .map_err(|e| Failure::new(None, transport_error(&e)))?;
    let status = answer.status().as_u16();
    read_some(answer).await;
    if (200..300).contains(&status) {
        Ok(status)
    } else {
        Err(Failure::new(Some(status), format!("answered {status}")))
    }
}

/// Reads at most [`MAX_ANSWER_BYTES`] of an answer's body (what is read is dropped: a 2xx is
/// all a delivery needs), within the client's timeout.
async fn read_some(mut answer: reqwest::Response) {
    let mut read = 0;
    while read < MAX_ANSWER_BYTES {
        match answer.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            _ => break,
        }
    }
}

/// What a transport error says to the endpoint's owner.
fn transport_error(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        format!("timed out after {} s", DELIVERY_TIMEOUT.as_secs())
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        format!("the request failed: {err}")
    }
}
