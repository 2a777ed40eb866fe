//! What each type of event says (issue 45, point 3): [`EventType`] names the types and the kind
//! of subject each is about; [`EventData`] is the data of an event, one variant per type, each a
//! struct whose fields are the event's `data`. Writers push an [`EventData`]
//! ([`super::Outbox::push`]), so an event's data has a type; the OpenAPI document's `webhooks`
//! show each type's schema from here ([`EventType::data_schema`]), and tests hold the console's
//! summaries and the docs' list to [`EventType::ALL`].

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::{Ref, RefOr, Schema};

use super::SubjectKind;
use crate::address::Checksummed;
use crate::approvals::{ApprovalRequest, Refusal};
use crate::sandboxes::HostKey;
use crate::time::Timestamp;

/// The types of events, with the subject each is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A payment settled on chain. Data: [`PaymentSettled`].
    PaymentSettled,
    /// A paid order became a credit. Data: [`PaymentCredited`].
    PaymentCredited,
    /// An operator refunded a credit. Data: [`PaymentRefunded`].
    PaymentRefunded,
    /// The transfer that paid was reorganised away or cancelled before the chain called it
    /// final: what it paid for stops. Data: [`PaymentReversed`].
    PaymentReversed,
    /// The provider created the server an order paid for. Data: [`ServerProvisioned`].
    ServerProvisioned,
    /// The server answers SSH. Data: [`ServerReady`].
    ServerReady,
    /// The server's deployment failed. Data: [`ServerFailed`].
    ServerFailed,
    /// The server was powered on or off. Data: [`ServerPowerChanged`].
    ServerPowerChanged,
    /// A paid resize moved the server to a bigger plan (its paid time unchanged). Data:
    /// [`ServerResized`].
    ServerResized,
    /// A lease ends soon: 24 h and 1 h before `paidUntil`. Data: [`LeaseExpiring`].
    LeaseExpiring,
    /// A renewal extended the lease. Data: [`LeaseRenewed`].
    LeaseRenewed,
    /// The lease ran out and the server was powered off. Data: [`LeaseExpired`].
    LeaseExpired,
    /// The server was deleted. Data: [`ServerDeleted`].
    ServerDeleted,
    /// An API key was revoked. Data: [`KeyRevoked`].
    KeyRevoked,
    /// An agent of a revoked key was deactivated. Data: [`AgentDeactivated`].
    AgentDeactivated,
    /// A key's request over its policy awaits its owner. Data: [`ApprovalFacts`].
    ApprovalRequested,
    /// The owner granted it: the request passes its key's policy once. Data: [`ApprovalFacts`].
    ApprovalGranted,
    /// The owner declined it. Data: [`ApprovalFacts`].
    ApprovalDeclined,
    /// A delivery to one of the owner's endpoints could not be handled and was given up (its
    /// message went to the dead-letter queue). Data: [`WebhookDeliveryFailed`].
    WebhookDeliveryFailed,
}

impl EventType {
    /// Every type, in the order of the docs.
    pub const ALL: [EventType; 19] = [
        EventType::PaymentSettled,
        EventType::PaymentCredited,
        EventType::PaymentRefunded,
        EventType::PaymentReversed,
        EventType::ServerProvisioned,
        EventType::ServerReady,
        EventType::ServerFailed,
        EventType::ServerPowerChanged,
        EventType::ServerResized,
        EventType::LeaseExpiring,
        EventType::LeaseRenewed,
        EventType::LeaseExpired,
        EventType::ServerDeleted,
        EventType::KeyRevoked,
        EventType::AgentDeactivated,
        EventType::ApprovalRequested,
        EventType::ApprovalGranted,
        EventType::ApprovalDeclined,
        EventType::WebhookDeliveryFailed,
    ];

    /// The wire name, e.g. `payment.settled`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::PaymentSettled => "payment.settled",
            EventType::PaymentCredited => "payment.credited",
            EventType::PaymentRefunded => "payment.refunded",
            EventType::PaymentReversed => "payment.reversed",
            EventType::ServerProvisioned => "server.provisioned",
            EventType::ServerReady => "server.ready",
            EventType::ServerFailed => "server.failed",
            EventType::ServerPowerChanged => "server.power_changed",
            EventType::ServerResized => "server.resized",
            EventType::LeaseExpiring => "lease.expiring",
            EventType::LeaseRenewed => "lease.renewed",
            EventType::LeaseExpired => "lease.expired",
            EventType::ServerDeleted => "server.deleted",
            EventType::KeyRevoked => "key.revoked",
            EventType::AgentDeactivated => "agent.deactivated",
            EventType::ApprovalRequested => "approval.requested",
            EventType::ApprovalGranted => "approval.granted",
            EventType::ApprovalDeclined => "approval.declined",
            EventType::WebhookDeliveryFailed => "webhook.delivery_failed",
        }
    }

    /// The type named `name`.
    pub fn parse(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The kind of subject the type is about.
    pub fn subject(self) -> SubjectKind {
        match self {
            EventType::PaymentSettled
            | EventType::PaymentCredited
            | EventType::PaymentRefunded
            | EventType::PaymentReversed => SubjectKind::Payment,
            EventType::KeyRevoked | EventType::AgentDeactivated => SubjectKind::Key,
            EventType::ApprovalRequested
            | EventType::ApprovalGranted
            | EventType::ApprovalDeclined => SubjectKind::Approval,
            EventType::WebhookDeliveryFailed => SubjectKind::Delivery,
            _ => SubjectKind::Server,
        }
    }
}

/// What every payment event carries: the order and its payment.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentFacts {
    /// The order's id (`ord_…`).
    pub order_id: String,
    /// What it paid, USDC atomic units (a decimal string).
    pub amount: String,
    /// The payer's wallet (EIP-55).
    pub payer: Checksummed,
    /// The network, CAIP-2 (e.g. `eip155:8453`).
    pub network: String,
    /// The sandbox the order is for (`sbx_…`).
    pub sandbox_id: String,
    /// The provider's server, once there is one.
    pub server_id: Option<u64>,
}

/// What every server event carries: the sandbox and its server.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerFacts {
    /// The sandbox (`sbx_…`).
    pub sandbox_id: String,
    /// The provider's server.
    pub server_id: Option<u64>,
    /// Its hostname.
    pub hostname: Option<String>,
}

/// How to renew a lease: `POST href` with `body`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Renewal {
    /// `POST`.
    pub method: String,
    /// The renewal route, e.g. `/api/cloud/servers/254871/renewals`.
    pub href: String,
    /// The request body, e.g. `{"periods": 1}`.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

impl Renewal {
    /// One period of the renewal at `href`.
    pub fn one_period(href: String) -> Renewal {
        Renewal {
            method: "POST".into(),
            href,
            body: serde_json::json!({"periods": 1}),
        }
    }
}

/// `payment.settled`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentSettled {
    /// The order and its payment.
    #[serde(flatten)]
    pub payment: PaymentFacts,
    /// The transaction's hash, once known.
    pub transaction: Option<String>,
}

/// `payment.credited`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentCredited {
    /// The order and its payment.
    #[serde(flatten)]
    pub payment: PaymentFacts,
    /// Why the payment became a credit.
    pub reason: String,
}

/// `payment.refunded`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRefunded {
    /// The order and its payment.
    #[serde(flatten)]
    pub payment: PaymentFacts,
    /// The operator's note of the refund (e.g. its transaction).
    pub refund: String,
}

/// `payment.reversed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentReversed {
    /// The order and its payment.
    #[serde(flatten)]
    pub payment: PaymentFacts,
    /// The transaction that had paid, as it was recorded.
    pub transaction: Option<String>,
    /// What the chain shows now (the payer cancelled the authorization, or its nonce paid
    /// someone else), and what stops: the server's paid time is taken back.
    pub reason: String,
}

/// `server.provisioned`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerProvisioned {
    /// The sandbox (`sbx_…`).
    pub sandbox_id: String,
    /// The provider's server.
    pub server_id: u64,
    /// Its hostname.
    pub hostname: Option<String>,
    /// The provider's project.
    pub project_id: Option<u64>,
    /// The payment key of the order that paid for it (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment: Option<String>,
    /// The end of its paid time (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_until: Option<Timestamp>,
    /// `true` for a free plan's server.
    pub free: bool,
}

/// `server.ready`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerReady {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// When the readiness check first passed.
    pub ready_at: Timestamp,
    /// Its public IPv4 address.
    pub address: Option<String>,
    /// The SSH host keys the check received.
    pub host_keys: Vec<HostKey>,
}

/// `server.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerFailed {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// Why its deployment failed.
    pub reason: String,
}

/// `server.power_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerPowerChanged {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// The power now: `on` or `off`.
    pub power: String,
    /// The power before, when the provider was seen to change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// Who changed it: `lease` (paid time ran out) or `renewal`; absent when the provider was
    /// seen to change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `server.resized`: the provider's upgrade of a paid resize landed.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerResized {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// The plan it moved to (the provider's slug).
    pub plan: String,
    /// The plan it moved from.
    pub from: String,
    /// What the resize cost, USDC atomic units (a decimal string).
    pub amount: String,
    /// The payment key of the resize's order: the subject of its `payment.settled`.
    pub payment: String,
    /// The end of the paid time, unchanged by the resize.
    pub paid_until: Timestamp,
}

/// `lease.expiring`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseExpiring {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// The end of the paid time.
    pub paid_until: Timestamp,
    /// When the server is deleted unless renewed.
    pub grace_ends_at: Timestamp,
    /// Seconds left before `paidUntil` when the notice was due (86400 or 3600).
    pub seconds_left: i64,
    /// How to renew.
    pub renew: Renewal,
    /// The price of a period as the server's order paid it (USDC atomic units).
    pub price_per_period: Option<String>,
    /// `USDC`.
    pub asset: String,
}

/// `lease.renewed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRenewed {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// The periods bought.
    pub periods: u32,
    /// What they cost, USDC atomic units.
    pub amount: String,
    /// The new end of the paid time.
    pub paid_until: Timestamp,
    /// When the server is deleted unless renewed again.
    pub grace_ends_at: Timestamp,
}

/// `lease.expired`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseExpired {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// The end of the paid time, passed.
    pub paid_until: Timestamp,
    /// When the server is deleted unless renewed.
    pub grace_ends_at: Timestamp,
    /// How to renew.
    pub renew: Renewal,
}

/// `server.deleted`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerDeleted {
    /// The sandbox and its server.
    #[serde(flatten)]
    pub server: ServerFacts,
    /// Who deleted it: `owner`, `lease`, `failed deployment` or `provider`.
    pub by: String,
    /// Why, for a lease that ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `key.revoked`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRevoked {
    /// The key (`key_…`).
    pub key_id: String,
    /// Its name.
    pub name: String,
}

/// `agent.deactivated`: every agent of a revoked key, in one event.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDeactivated {
    /// The revoked key (`key_…`).
    pub key_id: String,
    /// Its agents (`agt_…`).
    pub agent_ids: Vec<String>,
    /// Why, e.g. `key revoked`.
    pub reason: String,
}

/// `approval.requested`, `approval.granted`, `approval.declined`: the approval as it is then.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalFacts {
    /// The approval (`apr_…`).
    pub approval_id: String,
    /// The console's page where its owner decides.
    pub approval_url: String,
    /// `pending`, `granted`, `declined` or `expired`.
    pub state: String,
    /// When it lapses unless decided.
    pub expires_at: Timestamp,
    /// What the key asked for.
    pub request: ApprovalRequest,
    /// Why the key's policy refused it.
    pub reason: Refusal,
}

/// `webhook.delivery_failed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDeliveryFailed {
    /// The endpoint (`whk_…`).
    pub endpoint_id: String,
    /// The delivery (`dlv_…`).
    pub delivery_id: String,
    /// The event it carried (`evt_…`).
    pub event_id: String,
    /// That event's type.
    pub event_type: String,
    /// Why it was given up.
    pub reason: String,
}

/// The data of an event, one variant per [`EventType`]: what a writer pushes
/// ([`super::Outbox::push`]), its fields the event's `data`.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum EventData {
    PaymentSettled(PaymentSettled),
    PaymentCredited(PaymentCredited),
    /// `payment.reversed`.
    PaymentReversed(PaymentReversed),
    PaymentRefunded(PaymentRefunded),
    ServerProvisioned(ServerProvisioned),
    ServerReady(ServerReady),
    ServerFailed(ServerFailed),
    ServerPowerChanged(ServerPowerChanged),
    ServerResized(ServerResized),
    LeaseExpiring(LeaseExpiring),
    LeaseRenewed(LeaseRenewed),
    LeaseExpired(LeaseExpired),
    ServerDeleted(ServerDeleted),
    KeyRevoked(KeyRevoked),
    AgentDeactivated(AgentDeactivated),
    ApprovalRequested(ApprovalFacts),
    ApprovalGranted(ApprovalFacts),
    ApprovalDeclined(ApprovalFacts),
    WebhookDeliveryFailed(WebhookDeliveryFailed),
}

impl EventData {
    /// Its type.
    pub fn kind(&self) -> EventType {
        match self {
            EventData::PaymentSettled(_) => EventType::PaymentSettled,
            EventData::PaymentCredited(_) => EventType::PaymentCredited,
            EventData::PaymentReversed(_) => EventType::PaymentReversed,
            EventData::PaymentRefunded(_) => EventType::PaymentRefunded,
            EventData::ServerProvisioned(_) => EventType::ServerProvisioned,
            EventData::ServerReady(_) => EventType::ServerReady,
            EventData::ServerFailed(_) => EventType::ServerFailed,
            EventData::ServerPowerChanged(_) => EventType::ServerPowerChanged,
            EventData::ServerResized(_) => EventType::ServerResized,
            EventData::LeaseExpiring(_) => EventType::LeaseExpiring,
            EventData::LeaseRenewed(_) => EventType::LeaseRenewed,
            EventData::LeaseExpired(_) => EventType::LeaseExpired,
            EventData::ServerDeleted(_) => EventType::ServerDeleted,
            EventData::KeyRevoked(_) => EventType::KeyRevoked,
            EventData::AgentDeactivated(_) => EventType::AgentDeactivated,
            EventData::ApprovalRequested(_) => EventType::ApprovalRequested,
            EventData::ApprovalGranted(_) => EventType::ApprovalGranted,
            EventData::ApprovalDeclined(_) => EventType::ApprovalDeclined,
            EventData::WebhookDeliveryFailed(_) => EventType::WebhookDeliveryFailed,
        }
    }

    /// Its fields as the event's `data` (a JSON object).
    ///
    /// Errors: a field that does not serialize (none does).
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            EventData::PaymentSettled(data) => serde_json::to_value(data),
            EventData::PaymentCredited(data) => serde_json::to_value(data),
            EventData::PaymentReversed(data) => serde_json::to_value(data),
            EventData::PaymentRefunded(data) => serde_json::to_value(data),
            EventData::ServerProvisioned(data) => serde_json::to_value(data),
            EventData::ServerReady(data) => serde_json::to_value(data),
            EventData::ServerFailed(data) => serde_json::to_value(data),
            EventData::ServerPowerChanged(data) => serde_json::to_value(data),
            EventData::ServerResized(data) => serde_json::to_value(data),
            EventData::LeaseExpiring(data) => serde_json::to_value(data),
            EventData::LeaseRenewed(data) => serde_json::to_value(data),
            EventData::LeaseExpired(data) => serde_json::to_value(data),
            EventData::ServerDeleted(data) => serde_json::to_value(data),
            EventData::KeyRevoked(data) => serde_json::to_value(data),
            EventData::AgentDeactivated(data) => serde_json::to_value(data),
            EventData::ApprovalRequested(data)
            | EventData::ApprovalGranted(data)
            | EventData::ApprovalDeclined(data) => serde_json::to_value(data),
            EventData::WebhookDeliveryFailed(data) => serde_json::to_value(data),
        }
    }
}

/// Component schemas by name, as `utoipa` collects them.
pub type Schemas = Vec<(String, RefOr<Schema>)>;

/// `T`'s schema as a reference, its own and those it refers to pushed onto `components`.
fn schema_of<T: ToSchema>(components: &mut Schemas) -> RefOr<Schema> {
    components.push((T::name().into_owned(), T::schema()));
    T::schemas(components);
    Ref::from_schema_name(T::name()).into()
}

impl EventType {
    /// The schema of this type's `data` ([`EventData`]'s variant), its components pushed onto
    /// `components`.
    pub fn data_schema(self, components: &mut Schemas) -> RefOr<Schema> {
        match self {
            EventType::PaymentSettled => schema_of::<PaymentSettled>(components),
            EventType::PaymentCredited => schema_of::<PaymentCredited>(components),
            EventType::PaymentReversed => schema_of::<PaymentReversed>(components),
            EventType::PaymentRefunded => schema_of::<PaymentRefunded>(components),
            EventType::ServerProvisioned => schema_of::<ServerProvisioned>(components),
            EventType::ServerReady => schema_of::<ServerReady>(components),
            EventType::ServerFailed => schema_of::<ServerFailed>(components),
            EventType::ServerPowerChanged => schema_of::<ServerPowerChanged>(components),
            EventType::ServerResized => schema_of::<ServerResized>(components),
            EventType::LeaseExpiring => schema_of::<LeaseExpiring>(components),
            EventType::LeaseRenewed => schema_of::<LeaseRenewed>(components),
            EventType::LeaseExpired => schema_of::<LeaseExpired>(components),
            EventType::ServerDeleted => schema_of::<ServerDeleted>(components),
            EventType::KeyRevoked => schema_of::<KeyRevoked>(components),
            EventType::AgentDeactivated => schema_of::<AgentDeactivated>(components),
            EventType::ApprovalRequested
            | EventType::ApprovalGranted
            | EventType::ApprovalDeclined => schema_of::<ApprovalFacts>(components),
            EventType::WebhookDeliveryFailed => schema_of::<WebhookDeliveryFailed>(components),
        }
    }
}
