//! Events (issue 20): the changes an owner cares about, recorded in the same transaction as the
//! change (`crate::store::events`: types, numbering, the outbox), and read back as the owner's
//! feed.

use serde_json::Value;

use crate::address::Checksummed;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::state::AppState;
use crate::store::Page;
pub use crate::store::events::EventData;
use crate::store::events::{EventRecord, EventType, Outbox, Subject, SubjectKind};
use crate::store::events::{
    PaymentFacts, ServerDeleted, ServerFacts, ServerPowerChanged, ServerReady,
};
use crate::store::payments::Order;
use crate::store::sandboxes::{SandboxRecord, Status, Watch};
use crate::time::EventTime;

/// An event as answered — by the feed (`GET /api/events`), as a webhook delivery's body and in
/// a delivery — the record ([`EventRecord`]) with its owner in EIP-55.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `evt_<32 hex>`, derived from the subject and the sequence: the dedupe key a receiver
    /// keeps (`webhook-id`).
    pub id: String,
    /// The event's type, e.g. `payment.settled`, `lease.expiring`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What it is about.
    pub subject: Subject,
    /// The owner.
    pub owner: Checksummed,
    /// When the change happened, to the millisecond.
    pub occurred_at: EventTime,
    /// 1, 2, … per subject, in the order the subject's changes were written.
    pub sequence: u64,
    /// What the type says, e.g. a server's host keys or a payment's amount: each type's
    /// schema is in the document's `webhooks` ([`EventData`]).
    #[schema(value_type = Object)]
    pub data: Value,
}

impl From<&EventRecord> for Event {
    fn from(event: &EventRecord) -> Event {
        Event {
            id: event.id.clone(),
            kind: event.kind.clone(),
            subject: event.subject.clone(),
            owner: event.owner.checksummed(),
            occurred_at: event.occurred_at,
            sequence: event.sequence,
            data: event.data.clone(),
        }
    }
}

/// The outbox of payment `order` (as read) for a change at `at` .
pub fn of_payment(order: &Order, at: EventTime) -> Outbox {
    let subject = Subject {
        kind: SubjectKind::Payment,
        id: order.id.to_string(),
    };
    Outbox::new(subject, &order.owner, order.event_seq, at)
}

/// The outbox of the server of sandbox `record` (as read) for a change at `at` .
pub fn of_server(record: &SandboxRecord, at: EventTime) -> Outbox {
    let subject = Subject {
        kind: SubjectKind::Server,
        id: record.id.clone(),
    };
    Outbox::new(subject, &record.owner, record.event_seq, at)
}

/// The outbox of the server of a paid order's new sandbox (`order.sandbox_id`, no event yet):
/// the change that records the server is its first.
pub fn of_new_server(order: &Order, at: EventTime) -> Outbox {
    let subject = Subject {
        kind: SubjectKind::Server,
        id: order.sandbox_id.clone(),
    };
    Outbox::new(subject, &order.owner, 0, at)
}

/// What every payment event of `order` carries ([`PaymentFacts`]).
pub fn payment_facts(order: &Order) -> PaymentFacts {
    PaymentFacts {
        order_id: order.order_id.clone(),
        amount: order.amount.clone(),
        payer: Checksummed::from(order.payer.as_str()),
        network: order.network.clone(),
        sandbox_id: order.sandbox_id.clone(),
        server_id: order.server_id,
    }
}

/// What every event of `record`'s server carries ([`ServerFacts`]).
pub fn server_facts(record: &SandboxRecord) -> ServerFacts {
    ServerFacts {
        sandbox_id: record.id.clone(),
        server_id: record.server_id,
        hostname: record.hostname.clone(),
    }
}

/// The `server.deleted` event of `record`'s server at `at`, deleted `by` its `owner`, its
/// `lease`, after a `failed deployment`, or found gone at the `provider`.
pub fn deleted(record: &SandboxRecord, at: EventTime, by: &str) -> Outbox {
    let data = ServerDeleted {
        server: server_facts(record),
        by: by.to_owned(),
        reason: None,
    };
    one(of_server(record, at), EventData::ServerDeleted(data))
}

/// The events a refresh of `record`'s server writes, from what changed between the watch as
/// read and as written: `server.ready` (address and SSH host keys) when the readiness check
/// first passed, `server.power_changed` when the provider's power changed, `server.deleted`
/// (`by: provider`) when the server is found gone while nobody was deleting it. `None`: none.
pub fn of_refresh(
    record: &SandboxRecord,
    (read, next): (&Watch, &Watch),
    status: &Status,
    at: EventTime,
) -> Option<Outbox> {
    let mut outbox = of_server(record, at);
    if read.ready_at.is_none()
        && let Some(ready_at) = &next.ready_at
    {
        let object: Value = next
            .server
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        outbox.push(EventData::ServerReady(ServerReady {
            server: server_facts(record),
            ready_at: *ready_at,
            address: crate::servers::stages::address(&object, 4),
            host_keys: next.host_keys.clone(),
        }));
    }
    if let (Some(before), Some(now)) = (&read.power, &next.power)
        && before != now
    {
        outbox.push(EventData::ServerPowerChanged(ServerPowerChanged {
            server: server_facts(record),
            power: now.clone(),
            was: Some(before.clone()),
            by: None,
        }));
    }
    if *status == Status::Terminated && !record.status.is_ending() {
        outbox.push(EventData::ServerDeleted(ServerDeleted {
            server: server_facts(record),
            by: "provider".into(),
            reason: None,
        }));
    }
    (!outbox.events().is_empty()).then_some(outbox)
}

/// Writes `data` into `outbox` (a convenience for the one-event changes).
pub fn one(mut outbox: Outbox, data: EventData) -> Outbox {
    outbox.push(data);
    outbox
}

/// What a feed request asks for: a page, and optionally only some types and one subject.
#[derive(Debug, Clone)]
pub struct FeedRequest {
    /// The page (its cursor is the previous page's `nextCursor`).
    pub page: crate::page::PageRequest,
    /// Only these types (none: every type).
    pub types: Vec<EventType>,
    /// Only this subject's events.
    pub subject: Option<Subject>,
}

impl FeedRequest {
    /// The request of a query's `limit`, `after` (a cursor), `types` (comma-separated type
    /// names) and `subject` (`sbx_…`, `key_…` or a payment key).
    ///
    /// Errors: 400 naming `limit`, `types` or `subject`.
    pub fn parse(
        limit: Option<&str>,
        after: Option<&str>,
        types: Option<&str>,
        subject: Option<&str>,
    ) -> Result<FeedRequest, ApiError> {
        let page = crate::page::PageRequest::parse(limit, after)?;
        let types = types
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                EventType::parse(name).ok_or_else(|| {
                    ApiError::invalid("types", format!("{name} is not an event type"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let subject = subject.map(parse_subject).transpose()?;
        Ok(FeedRequest {
            page,
            types,
            subject,
        })
    }
}

/// A subject named by its id: `sbx_…` (a server), `key_…` (an API key), `apr_…` (an
/// approval), `dlv_…` (a webhook delivery) or a payment key.
///
/// Errors: 400 naming `subject`.
fn parse_subject(id: &str) -> Result<Subject, ApiError> {
    let kind = if id.starts_with(crate::ids::SANDBOX) {
        crate::ids::parse(crate::ids::SANDBOX, "subject", id)?;
        SubjectKind::Server
    } else if id.starts_with(crate::ids::API_KEY) {
        crate::ids::parse(crate::ids::API_KEY, "subject", id)?;
        SubjectKind::Key
    } else if id.starts_with(crate::ids::APPROVAL) {
        crate::ids::parse(crate::ids::APPROVAL, "subject", id)?;
        SubjectKind::Approval
    } else if id.starts_with(crate::ids::DELIVERY) {
        crate::ids::parse(crate::ids::DELIVERY, "subject", id)?;
        SubjectKind::Delivery
    } else if crate::x402::PaymentKey::parse(id).is_some() {
        SubjectKind::Payment
    } else {
        return Err(ApiError::invalid(
            "subject",
            "must be a sandbox id (sbx_…), an API key id (key_…), an approval id (apr_…), a \
            delivery id (dlv_…) or a payment key",
        ));
    };
    Ok(Subject {
        kind,
        id: id.to_owned(),
    })
}

/// Gives `event` its place in its owner's feed, once (the `events` function, for each event
/// the table's stream hands over; `GET /api/events` reads that order): answers its position.
/// The order is the stream's, not `occurredAt`'s, so that a poller resuming after a position
/// never misses an event stamped earlier that committed later.
///
/// Errors: the store's (the stream hands the record over again).
pub async fn position(state: &AppState, event: &EventRecord) -> Result<u64, ApiError> {
    Ok(state.store.position_event(event).await?)
}

/// The caller's events, oldest first: `{items, nextCursor}` — the owner's feed in the order its
/// events were positioned ([`position`]), or one subject's in sequence order. `nextCursor`
/// resumes after the page's last event even on the last page (a poller keeps it and asks again later); a page
/// filtered by `types` may hold fewer than `limit` events while more follow. A subject of
/// another owner has no events for the caller.
///
/// Errors: 400 for a cursor of another listing; the store's.
pub async fn feed(
    state: &AppState,
    principal: &Principal,
    request: &FeedRequest,
) -> Result<Page<Event>, ApiError> {
    let page = &request.page;
    let found = match &request.subject {
        Some(subject) => {
            state
                .store
                .events_of_subject(subject, page.limit, page.cursor())
                .await
        }
        None => {
            state
                .store
                .events_of(&principal.owner, page.limit, page.cursor())
                .await
        }
    };
    // The feed's cursor is `after`.
    let mut found = found.map_err(|err| match err {
        crate::store::StoreError::BadCursor => {
            ApiError::invalid("after", "is not a cursor of this feed")
        }
        other => other.into(),
    })?;
    // Another owner's subject: nothing, not even how far its events go.
    if found
        .items
        .iter()
        .any(|event| event.owner != principal.owner)
    {
        return Ok(Page {
            items: Vec::new(),
            next_cursor: page.cursor.clone(),
        });
    }
    found.items.retain(|event| {
        request.types.is_empty() || request.types.iter().any(|t| t.as_str() == event.kind)
    });
    Ok(found.map(|event| Event::from(&event)))
}
