//! Webhook deliveries (issue 20, point 3): the delivery of an owner's events to its endpoints
//! ([`super::webhooks`]) by the Standard Webhooks spec
//! (<https://www.standardwebhooks.com/>, signatures made with the `standardwebhooks` crate).
//!
//! - **Delivery**: an event recorded (the table's stream, `functions/events`) is queued once per
//!   subscribed endpoint ([`fan_out`]): a delivery record, and a message in the delivery queue
//!   (`crate::store::queue`, SQS FIFO) whose group is the endpoint and the event's subject. The
//!   delivery function (`functions/deliveries`) sends each message ([`deliver`]); SQS hands a
//!   group's messages over one at a time, in order, and every other group flows past a stuck
//!   one. A failed attempt keeps its message in flight until its retry is due, after
//!   [`RETRY_AFTER`] (5 s … 10 h, 27.6 h in all), which holds that group's later events back;
//!   a 2xx from an endpoint that was failing makes its waiting deliveries visible at once. At
//!   least once: a receiver dedupes by `webhook-id` (the event's id).
//! - **Every delivery** resolves the name again and checks every address (no DNS rebinding),
//!   connects only to those addresses, follows no redirect, gives up after
//!   [`DELIVERY_TIMEOUT`] (resolution included: an attempt fits the time it was started in)
//!   and reads at most [`MAX_ANSWER_BYTES`] of the answer.
//! - An endpoint whose every attempt failed for [`DISABLE_AFTER_SECONDS`] is disabled, with the
//!   reason; its pending deliveries fail.
//! - A delivery the queue gives up on (dead-lettered) is marked failed and its owner told
//!   ([`dead_lettered`]).

use std::time::Duration;

use crate::destination::{self, Refusal};
use crate::error::ApiError;
use crate::ratelimit::slots;
use crate::state::AppState;
use crate::store::caps::Pool;
use crate::store::events::WebhookDeliveryFailed;
use crate::store::events::{EventData, EventRecord, EventType, Subject, SubjectKind};
use crate::store::queue::DeliveryMessage;
use crate::store::webhooks::{
    DeliveryRecord, DeliveryStatus, Disabled, EndpointRecord, SigningSecret,
};

/// Seconds from a failed attempt to the next, per attempt: 8 attempts over 27.6 h.
pub const RETRY_AFTER: [i64; 7] = [5, 300, 1800, 7200, 18000, 36000, 36000];
/// An endpoint whose every attempt failed this long (3 days, seconds) is disabled.
pub const DISABLE_AFTER_SECONDS: i64 = 3 * 24 * 3600;
/// The longest one delivery attempt may take, the name's resolution to the answer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an endpoint's answer that is read, bytes.
pub const MAX_ANSWER_BYTES: usize = 1024;
/// How long a consumer holds a delivery it sends (more than [`DELIVERY_TIMEOUT`]), seconds.
const CLAIM_SECONDS: i64 = 30;
/// The longest the attempt probing a failing endpoint holds its slot, seconds (one attempt
/// and its writes).
const PROBE_SECONDS: i64 = DELIVERY_TIMEOUT.as_secs() as i64 + 5;
/// How long an attempt may wait for its endpoint's answer before it must hold one of its
/// owner's slow-delivery slots to go on waiting (a healthy receiver answers well within).
pub const SLOW_AFTER: Duration = Duration::from_secs(1);

/// Why `endpoint`'s reach has ended: the API key that registered it was revoked, expired or
/// is gone; `None` while it stands (or a session registered it).
///
/// Errors: the store's.
pub(crate) async fn key_gone(
    state: &AppState,
    endpoint: &EndpointRecord,
) -> Result<Option<String>, ApiError> {
    let Some(key_id) = &endpoint.key_id else {
        return Ok(None);
    };
    let now = state.clock.datetime();
    Ok(match state.store.api_key_by_id(key_id).await? {
        None => Some(format!("the API key {key_id} that registered it is gone")),
        Some(key) => match key.status(now) {
            "active" => None,
            status => Some(format!(
                "the API key {key_id} that registered it was {status}"
            )),
        },
    })
}

/// Gives back a test delivery's slot (best effort: a slot lapses on its own).
pub(crate) async fn release_test_slot(state: &AppState, delivery: &DeliveryRecord) {
    let Some(slot) = delivery.slot else { return };
    let held = slots::Held {
        pool: Pool::Tests,
        subject: delivery.event.owner.as_str().to_owned(),
        slot,
        holder: delivery.id.clone(),
    };
    slots::release(state, &held).await;
}

/// Why a delivery given up by the queue failed.
pub const DEAD_LETTERED: &str = "not handled after the queue's every receipt (dead-lettered)";

/// Ends the delivery `message` names, whose message the delivery queue moved to its dead-letter
/// queue (it was received `MAX_RECEIVES` times without being handled: a fault of ours, not the
/// endpoint's): a pending delivery is marked failed, with [`DEAD_LETTERED`], and its owner is
/// told by a `webhook.delivery_failed` event in the same write — unless the delivery was
/// itself of a `webhook.delivery_failed` event, which ends without another (so a fault that
/// keeps dead-lettering cannot feed itself). A delivery already ended, or gone, is left as it
/// is. A test's slot is given back.
///
/// Errors: the store's (the message is handed over again).
pub async fn dead_lettered(state: &AppState, message: &DeliveryMessage) -> Result<(), ApiError> {
    let store = &state.store;
    let found = store
        .delivery(&message.endpoint_id, &message.subject, message.sequence)
        .await?;
    let Some(mut delivery) = found.filter(|d| d.status == DeliveryStatus::Pending) else {
        return Ok(());
    };
    delivery.status = DeliveryStatus::Failed;
    delivery.last_error = Some(DEAD_LETTERED.to_owned());
    delivery.next_attempt_at = None;
    delivery.receipt = None;
    let failed = EventType::WebhookDeliveryFailed;
    let outbox = (delivery.event.kind != failed.as_str()).then(|| {
        let subject = Subject {
            kind: SubjectKind::Delivery,
            id: delivery.id.clone(),
        };
        let at = state.clock.event_time();
        let mut outbox = crate::store::events::Outbox::new(subject, &message.owner, 0, at);
        outbox.push(EventData::WebhookDeliveryFailed(WebhookDeliveryFailed {
            endpoint_id: delivery.endpoint_id.clone(),
            delivery_id: delivery.id.clone(),
            event_id: delivery.event.id.clone(),
            event_type: delivery.event.kind.clone(),
            reason: DEAD_LETTERED.to_owned(),
        }));
        outbox
    });
    if store.fail_delivery(&delivery, outbox.as_ref()).await? {
        tracing::error!(delivery = %delivery.id, "a dead-lettered delivery was marked failed");
        release_test_slot(state, &delivery).await;
    }
    Ok(())
}

/// A new delivery of `event` to `endpoint`, queued at `now`.
pub(crate) fn queued(endpoint: &EndpointRecord, event: EventRecord, now: i64) -> DeliveryRecord {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{}#{}", endpoint.id, event.id));
    DeliveryRecord {
        id: format!("{}{}", crate::ids::DELIVERY, &hex::encode(digest)[..32]),
        endpoint_id: endpoint.id.clone(),
        status: DeliveryStatus::Pending,
        attempts: 0,
        last_status: None,
        last_error: None,
        next_attempt_at: None,
        created_at: crate::time::Timestamp::from_unix(now),
        delivered_at: None,
        event,
        receipt: None,
        slot: None,
    }
}

/// The queue's message of `delivery`.
fn message_of(delivery: &DeliveryRecord) -> DeliveryMessage {
    DeliveryMessage {
        delivery_id: delivery.id.clone(),
        endpoint_id: delivery.endpoint_id.clone(),
        owner: delivery.event.owner.clone(),
        subject: delivery.event.subject.clone(),
        sequence: delivery.event.sequence,
    }
}

/// Records `delivery` (once: a conditional put) and sends its message to the delivery queue
/// (again on every call: SQS drops a copy with the same delivery id within 5 minutes, and the
/// delivery function drops a later one whose delivery is done).
///
/// Errors: the store's or the queue's (the caller is handed the event again).
pub(crate) async fn enqueue(state: &AppState, delivery: &DeliveryRecord) -> Result<(), ApiError> {
    let queue = state.queue()?;
    state.store.queue_delivery(delivery).await?;
    queue.send(&message_of(delivery)).await?;
    Ok(())
}

/// Queues `event` (as recorded) for every endpoint of its owner that receives its type and
/// whose registering key still stands: a delivery record each, then their messages, ten to a
/// call, each in its endpoint's group for the event's subject. Nothing is sent here (the
/// delivery function sends), so no endpoint can slow the stream. Idempotent: an event handed
/// over twice queues each delivery once. Answers how many endpoints it was queued for.
///
/// Errors: the store's or the queue's (the stream's function reports the record, which comes
/// again).
pub async fn fan_out(state: &AppState, event: &EventRecord) -> Result<usize, ApiError> {
    let queue = state.queue()?;
    let now = state.clock.now();
    // Never their signing secrets: the events function has no use for them, and cannot read
    // them.
    let endpoints = state.store.webhook_targets_of(&event.owner).await?;
    // Endpoints a key registered share its standing: read once per key.
    let mut standing = std::collections::HashMap::new();
    let mut messages = Vec::new();
    for endpoint in endpoints.iter().filter(|e| e.receives(&event.kind)) {
        let key = endpoint.key_id.clone();
        let gone = match standing.get(&key) {
            Some(gone) => *gone,
            None => {
                let gone = key_gone(state, endpoint).await?.is_some();
                standing.insert(key, gone);
                gone
            }
        };
        // A revoked or expired key's endpoint gets nothing more (the delivery function's
        // attempt would find it so too, and write it disabled).
        if gone {
            continue;
        }
        let delivery = queued(endpoint, event.clone(), now);
        state.store.queue_delivery(&delivery).await?;
        messages.push(message_of(&delivery));
    }
    queue.send_all(&messages).await?;
    Ok(messages.len())
}

/// What became of a message of the delivery queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Its delivery is done (delivered, failed for good, or nothing left to do): the message
    /// is deleted.
    Done,
    /// Its delivery waits for a retry: the message stays in flight until the retry is due
    /// (its visibility set), holding its group back; the batch reports it as failed.
    Waiting,
}

/// Handles one message of the delivery queue (the delivery function, for each message of its
/// group in order): reads its delivery, claims it, sends it to the endpoint as the endpoint
/// now stands, and writes the outcome. A failure worth a retry keeps the message in flight for
/// [`RETRY_AFTER`] (its receipt kept on the delivery). A success at an endpoint that was
/// failing makes its other waiting deliveries visible at once: an endpoint that answers again
/// gets every subject's events, in order, without waiting out each retry's schedule.
///
/// Errors: the store's or the queue's (the message comes again after its visibility lapses).
pub async fn deliver(
    state: &AppState,
    message: &DeliveryMessage,
    receipt: &str,
) -> Result<Handled, ApiError> {
    let store = &state.store;
    let found = store
        .delivery(&message.endpoint_id, &message.subject, message.sequence)
        .await?;
    let Some(delivery) = found.filter(|d| d.status == DeliveryStatus::Pending) else {
        return Ok(Handled::Done);
    };
    let now = state.clock.now();
    if !store
        .claim_delivery(&delivery, now, now + CLAIM_SECONDS)
        .await?
    {
        // Another consumer is sending it (a visibility that lapsed mid-attempt): look again
        // once its claim has.
        state.queue()?.hide(receipt, CLAIM_SECONDS).await?;
        return Ok(Handled::Waiting);
    }
    let (delivery, recovered) = attempt(state, &message.owner, delivery, receipt).await?;
    if recovered {
        wake_waiting(state, &delivery).await;
    }
    if delivery.status != DeliveryStatus::Pending {
        release_test_slot(state, &delivery).await;
    }
    match delivery.next_attempt_at {
        Some(due) if delivery.status == DeliveryStatus::Pending => {
            let seconds = due.unix() - state.clock.now();
            state.queue()?.hide(receipt, seconds).await?;
            Ok(Handled::Waiting)
        }
        _ => Ok(Handled::Done),
    }
}

/// Makes the message received as `receipt` visible again in `seconds` (0: now), as the
/// delivery function hands back what it does not send now. Best effort: a failure is logged,
/// and the message comes back when its visibility lapses.
pub async fn hand_back(state: &AppState, receipt: &str, seconds: i64) {
    let handed = match state.queue() {
        Ok(queue) => queue.hide(receipt, seconds).await.map_err(ApiError::from),
        Err(err) => Err(err),
    };
    if let Err(err) = handed {
        tracing::warn!(error = %err, "could not hand a delivery message back");
    }
}

/// How many deliveries of an endpoint that answers again are woken per second: a recovered
/// endpoint is drained at a bounded rate, never all at once (its receiver, and the delivery
/// pool, take a steady flow).
pub const WAKE_PER_SECOND: usize = 10;

/// Makes the other deliveries of `delivered`'s endpoint that wait for a retry visible again,
/// [`WAKE_PER_SECOND`] at a time — the first at once, the next a second later, and so on (at
/// most 100 per success; a receipt that lapsed is passed over: its message is visible
/// already). Failures are logged: each waiting delivery still has its retry.
async fn wake_waiting(state: &AppState, delivered: &DeliveryRecord) {
    let Ok(queue) = state.queue() else { return };
    let endpoint = &delivered.endpoint_id;
    let waiting = match state
        .store
        .waiting_deliveries(endpoint, i64::from(u32::MAX), 100)
        .await
    {
        Ok(waiting) => waiting,
        Err(err) => {
            tracing::warn!(%endpoint, error = %err, "could not read the waiting deliveries");
            return;
        }
    };
    let receipts = waiting
        .iter()
        .filter(|d| d.id != delivered.id && d.status == DeliveryStatus::Pending)
        .filter_map(|d| d.receipt.as_deref());
    for (i, receipt) in receipts.enumerate() {
        let seconds = (i / WAKE_PER_SECOND) as i64;
        if let Err(err) = queue.hide(receipt, seconds).await {
            tracing::warn!(%endpoint, error = %err, "could not wake a waiting delivery");
        }
    }
}

/// Sends claimed `delivery` (of `owner`'s endpoint) as the endpoint now stands, and writes the
/// outcome to the delivery (with `receipt` while it waits for a retry) and to the endpoint (a
/// write conditioned on the endpoint's version, made again over a newer one). A test event is
/// tried once and goes to a disabled endpoint too. Answers the delivery as written and whether
/// the endpoint answered 2xx after failing.
///
/// Errors: the store's (a claimed delivery is sent again when its claim lapses).
async fn attempt(
    state: &AppState,
    owner: &crate::address::Owner,
    mut delivery: DeliveryRecord,
    receipt: &str,
) -> Result<(DeliveryRecord, bool), ApiError> {
    let store = &state.store;
    let mut current = store.webhook(owner, &delivery.endpoint_id).await?;
    let test = delivery.event.subject.kind == SubjectKind::Webhook;
    let gone = match &current {
        Some(endpoint) => key_gone(state, endpoint).await?,
        None => None,
    };
    // A failing endpoint is probed by one attempt at a time, a test's included: its other
    // deliveries are put off without an attempt, so however many subjects (or tests) it has, a
    // hanging endpoint holds one attempt's time at once (and its receiver one request).
    let failing = match &current {
        Some(e) if gone.is_none() && (e.disabled.is_none() || test) => e.failing_since,
        _ => None,
    };
    let mut probe = None;
    if let Some(since) = failing {
        let id = &delivery.endpoint_id;
        match slots::take(state, Pool::Probe, id, &delivery.id, 1, PROBE_SECONDS).await {
            Ok(held) => probe = Some(held),
            Err(ApiError::RateLimited(_)) => return put_off(state, delivery, receipt, since).await,
            Err(err) => return Err(err),
        }
    }
    let mut result = match &current {
        None => Err(Failure::last("the endpoint was deleted")),
        Some(_) if gone.is_some() => Err(Failure::last(gone.clone().unwrap_or_default())),
        Some(e) if e.disabled.is_some() && !test => Err(Failure::last("the endpoint is disabled")),
        Some(e) => send_in_share(state, owner, &delivery.id, send(state, e, &delivery.event)).await,
    };
    if let Some(held) = &probe {
        slots::release(state, held).await;
    }
    if let Err(failure) = &mut result {
        failure.retry &= !test;
    }
    let recovered = result.is_ok() && current.as_ref().is_some_and(|e| e.failing_since.is_some());
    let now = state.clock.now();
    let before = delivery.clone();
    for _ in 0..3 {
        delivery = before.clone();
        let mut after = current.clone();
        after_attempt(&mut delivery, after.as_mut(), result.clone(), now);
        if let (Some(reason), Some(after)) = (&gone, after.as_mut()) {
            after.disabled.get_or_insert_with(|| Disabled {
                at: crate::time::Timestamp::from_unix(now),
                reason: reason.clone(),
            });
        }
        let (Some(seen), Some(after)) = (&current, &after) else {
            break;
        };
        if seen == after || store.save_webhook(after, seen.version).await? {
            break;
        }
        // Written since it was read (a rotation, another delivery): apply to the newer one.
        current = store.webhook(owner, &before.endpoint_id).await?;
    }
    if delivery.status == DeliveryStatus::Pending {
        delivery.receipt = Some(receipt.to_owned());
    }
    store.save_delivery(&delivery).await?;
    Ok((delivery, recovered))
}

/// Waits for `sending` (an attempt of `owner`'s delivery `holder`) for [`SLOW_AFTER`]; past
/// that it goes on waiting, up to [`DELIVERY_TIMEOUT`] in all, only while holding one of the
/// owner's slow-delivery slots (`MAX_SLOW_DELIVERIES_PER_OWNER`, a third of the delivery pool
/// at most: `docs/capacity.md`). Without a free slot the attempt is given up at once, a failure
/// with a retry: however many endpoints an owner makes hang, they hold at most its share of
/// the deliveries function's concurrency, and every other owner's deliveries flow. Fast
/// answers touch no slot.
async fn send_in_share(
    state: &AppState,
    owner: &crate::address::Owner,
    holder: &str,
    sending: impl std::future::Future<Output = Result<u16, Failure>>,
) -> Result<u16, Failure> {
    tokio::pin!(sending);
    if let Ok(answer) = tokio::time::timeout(SLOW_AFTER, &mut sending).await {
        return answer;
    }
    let cap = state.config.caps.slow_deliveries;
    let slot = slots::take(
        state,
        Pool::SlowDeliveries,
        owner.as_str(),
        holder,
        cap,
        PROBE_SECONDS,
    );
    let held = match slot.await {
        Ok(held) => held,
        Err(ApiError::RateLimited(_)) => {
            let given_up = format!(
                "no answer after {} s, and its owner's other slow deliveries hold its share of \
                 the delivery pool ({cap})",
                SLOW_AFTER.as_secs()
            );
            return Err(Failure::new(None, given_up));
        }
        Err(err) => return Err(Failure::new(None, format!("the delivery pool: {err}"))),
    };
    let answer = tokio::time::timeout(DELIVERY_TIMEOUT - SLOW_AFTER, sending)
        .await
        .unwrap_or_else(|_| Err(Failure::new(None, timed_out())));
    slots::release(state, &held).await;
    answer
}

/// `delivery`, of an endpoint failing since `since` (epoch seconds) that another delivery is
/// probing, put off without an attempt: due again after as long as the endpoint has been
/// failing (5 s to an hour), and woken at once if the probe gets through (its receipt kept, as
/// a retry's). Answers it as written, pending.
///
/// Errors: the store's.
async fn put_off(
    state: &AppState,
    mut delivery: DeliveryRecord,
    receipt: &str,
    since: i64,
) -> Result<(DeliveryRecord, bool), ApiError> {
    let now = state.clock.now();
    let wait = (now - since).clamp(RETRY_AFTER[0], 3600);
    delivery.next_attempt_at = Some(crate::time::Timestamp::from_unix(now + wait));
    delivery.receipt = Some(receipt.to_owned());
    state.store.save_delivery(&delivery).await?;
    Ok((delivery, false))
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

/// What an attempt that ran out of time says.
fn timed_out() -> String {
    format!("timed out after {} s", DELIVERY_TIMEOUT.as_secs())
}

/// What a transport error says to the endpoint's owner.
fn transport_error(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        timed_out()
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        format!("the request failed: {err}")
    }
}
