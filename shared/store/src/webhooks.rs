//! Webhook endpoints and their deliveries (issue 20, point 3).
//!
//! - Endpoint: `pk = WEBHOOKS#<owner>`, `sk = WEBHOOK#<id>` — an owner's endpoints in one
//!   partition (at most `MAX_WEBHOOKS_PER_OWNER`, counted in `ALLOT#<owner>` `webhooks`). The
//!   record holds the signing secrets: a signature is an HMAC, so the secret itself is needed to
//!   sign; it is answered once, when it is made.
//! - Delivery: `pk = DELIVERIES#<endpoint id>`,
//!   `sk = DELIVERY#<subject kind>#<subject id>#<sequence, 12 digits>` — an endpoint's
//!   deliveries of one subject in the subject's order (its queue). Written once per endpoint
//!   and event (a conditional Put, so a stream record delivered twice
//!   queues one delivery). GSI1: `DELIVERIES#<endpoint id>` / `DELIVERY#<createdAt>#<event id>`,
//!   the endpoint's deliveries newest first. GSI2 (while it waits for a retry, its message
//!   held in flight in the delivery queue): `WAITING#<endpoint id>` /
//!   `WAITING#<endpoint id>#<due, epoch seconds, 12 digits>#<event id>`, read when the endpoint
//!   answers again (its waiting heads are tried at once). Expires 30 days after its event (TTL).
//! - The order and the schedule are the delivery queue's (`crate::queue`, SQS FIFO); a
//!   delivery is also claimed (`claimedUntil`, epoch seconds) before it is sent, so that a
//!   message received twice (its visibility lapsed mid-attempt, or a late copy) is never sent
//!   twice side by side.

use crate::partitions::Partition;
use serde::{Deserialize, Serialize};

use super::caps::{self, Counter};
use super::events::{EventRecord, RETENTION_SECONDS, Subject};
use super::{Item, Page, Store, StoreError, from_item, n, s, schema, to_item};
use crate::address::Owner;

/// A secret that signs an endpoint's deliveries (its `Debug` shows no secret: records are
/// logged).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecret {
    /// `whsec_` and the base64 of 24 random bytes (the Standard Webhooks form).
    pub secret: String,
    /// When a rotated-out secret stops signing, epoch seconds; `None` for the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningSecret")
            .field("secret", &"whsec_[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// An endpoint as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointRecord {
    /// `whk_<32 hex>`.
    pub id: String,
    /// Its owner.
    pub owner: Owner,
    /// Where deliveries are posted (checked by `base::destination` when registered and
    /// before every delivery).
    pub url: String,
    /// The event types it receives; empty: every type.
    #[serde(default)]
    pub types: Vec<String>,
    /// When it was registered, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// The signing secrets: the current one first, then any rotated out and still valid
    /// (empty as [`Store::webhook_targets_of`] reads it).
    #[serde(default)]
    pub secrets: Vec<SigningSecret>,
    /// Why it was disabled (deliveries failing for 3 days), and when; `None` while enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Disabled>,
    /// Since when every delivery attempt failed, epoch seconds; `None` after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<i64>,
    /// The API key that registered it (`key_…`); `None` for the owner's session. Its reach ends
    /// with that key: once the key is revoked or expires, the endpoint is disabled and receives
    /// nothing more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// How many times it was written since registered: a write names the version it read
    /// ([`Store::save_webhook`]), so that a delivery's outcome never undoes a rotation.
    #[serde(default)]
    pub version: u64,
}

/// Why an endpoint stopped receiving deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disabled {
    /// When.
    pub at: crate::time::Timestamp,
    /// Why, e.g. `every delivery failed since 2026-11-22T10:00:00Z; the last: answered 500`.
    pub reason: String,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not yet answered with 2xx: sent when its turn comes (`nextAttemptAt`).
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt of the schedule failed, or the endpoint was disabled or deleted.
    Failed,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryRecord {
    /// `dlv_<32 hex>`, from the endpoint and the event.
    pub id: String,
    /// The endpoint's id.
    pub endpoint_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempts: u32,
    /// The HTTP status of the last answer, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// Why the last attempt failed (a status, a timeout, a refused address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the next attempt is due, RFC 3339; `None` unless pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<crate::time::Timestamp>,
    /// When it was queued, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// When the endpoint answered 2xx, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<crate::time::Timestamp>,
    /// The event delivered (the body posted, and `webhook-id` = its id).
    pub event: EventRecord,
    /// While it waits for a retry: the receipt of its message, held in flight until the retry
    /// is due (never answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// A test event's slot in its owner's pool of tests (`crate::caps::Pool::Tests`), given back
    /// once it was tried (never answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

impl EndpointRecord {
    /// Whether it receives events of type `kind` (enabled, and `kind` is among its types or it
    /// names none).
    pub fn receives(&self, kind: &str) -> bool {
        self.disabled.is_none() && (self.types.is_empty() || self.types.iter().any(|t| t == kind))
    }
}

impl DeliveryRecord {
    /// When the next attempt is due, epoch seconds (0: now).
    pub fn due(&self) -> i64 {
        self.next_attempt_at.map_or(0, crate::time::Timestamp::unix)
    }

    fn item(&self) -> Result<Item, StoreError> {
        let event = &self.event;
        let mut keys = vec![
            (schema::PK, deliveries_partition(&self.endpoint_id)),
            (
                schema::SK,
                format!("{}{:012}", queue_prefix(&event.subject), event.sequence),
            ),
            (schema::GSI1_PK, deliveries_partition(&self.endpoint_id)),
            (
                schema::GSI1_SK,
                format!("{DELIVERY}{}#{}", self.created_at, event.id),
            ),
        ];
        if self.status == DeliveryStatus::Pending && self.receipt.is_some() {
            let waiting = waiting_partition(&self.endpoint_id);
            let sk = format!("{waiting}#{:012}#{}", self.due().max(0), event.id);
            keys.push((schema::GSI2_PK, waiting));
            keys.push((schema::GSI2_SK, sk));
        }
        let mut item = to_item(self, &keys)?;
        let occurred = event.occurred_at.timestamp().unix();
        item.insert(
            schema::TTL_ATTRIBUTE.to_owned(),
            n(occurred + RETENTION_SECONDS),
        );
        Ok(item)
    }
}

/// The prefix of a delivery's sort keys.
const DELIVERY: &str = "DELIVERY#";
/// GSI2's partition of `endpoint_id`'s deliveries waiting for a retry.
fn waiting_partition(endpoint_id: &str) -> String {
    Partition::Waiting.key(endpoint_id)
}

/// What [`Store::webhook_targets_of`] reads of an endpoint: its keys and every attribute but
/// `secrets`. The template's policy for the events function names exactly these
/// (`dynamodb:Attributes`; a test holds the two equal).
pub const TARGET_ATTRIBUTES: [&str; 11] = [
    schema::PK,
    schema::SK,
    "id",
    "owner",
    "url",
    "types",
    "createdAt",
    "disabled",
    "failingSince",
    "keyId",
    "version",
];

fn endpoints_partition(owner: &Owner) -> String {
    Partition::Webhooks.key(owner)
}

fn endpoint_sk(id: &str) -> String {
    format!("WEBHOOK#{id}")
}

fn deliveries_partition(endpoint_id: &str) -> String {
    Partition::Deliveries.key(endpoint_id)
}

/// The sort-key prefix of an endpoint's queue for `subject`.
fn queue_prefix(subject: &Subject) -> String {
    format!("{DELIVERY}{}#{}#", subject.kind.as_str(), subject.id)
}

impl Store {
    /// Registers `record`, counting it against its owner's `cap` of endpoints.
    ///
    /// Errors: [`StoreError::CapReached`] at the cap; [`StoreError::ConditionFailed`] if its id
    /// exists.
    pub async fn put_webhook(&self, record: &EndpointRecord, cap: u32) -> Result<(), StoreError> {
        let item = to_item(
            record,
            &[
                (schema::PK, endpoints_partition(&record.owner)),
                (schema::SK, endpoint_sk(&record.id)),
            ],
        )?;
        self.client
            .transact_write_items()
            .transact_items(caps::allot(
                &self.table,
                &record.owner,
                Counter::Webhooks,
                cap,
            )?)
            .transact_items(super::put_new(&self.table, item)?)
            .send()
            .await
            .map_err(|err| caps::cap_failed(err, 0, Counter::Webhooks))?;
        Ok(())
    }

    /// `owner`'s endpoints, oldest first (strongly consistent; at most the cap, one page).
    ///
    /// Errors: the store's.
    pub async fn webhooks_of(&self, owner: &Owner) -> Result<Vec<EndpointRecord>, StoreError> {
        self.query_all(&endpoints_partition(owner), "WEBHOOK#")
            .await
    }

    /// `owner`'s endpoints as the fan-out of events reads them: every attribute in
    /// [`TARGET_ATTRIBUTES`] (strongly consistent, at most the cap, one page) — never the
    /// signing secrets, which the template's policy for the events function does not let it
    /// read (`dynamodb:Attributes`).
    ///
    /// Errors: the store's.
    pub async fn webhook_targets_of(
        &self,
        owner: &Owner,
    ) -> Result<Vec<EndpointRecord>, StoreError> {
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#a0 = :pk AND begins_with(#a1, :prefix)")
            .expression_attribute_values(":pk", s(endpoints_partition(owner)))
            .expression_attribute_values(":prefix", s("WEBHOOK#"))
            .select(aws_sdk_dynamodb::types::Select::SpecificAttributes);
        let mut projection = Vec::with_capacity(TARGET_ATTRIBUTES.len());
        for (i, attribute) in TARGET_ATTRIBUTES.iter().enumerate() {
            query = query.expression_attribute_names(format!("#a{i}"), *attribute);
            projection.push(format!("#a{i}"));
        }
        let out = query
            .projection_expression(projection.join(", "))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        out.items
            .unwrap_or_default()
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// `owner`'s endpoint `id` (strongly consistent); `None` for another owner's or none.
    ///
    /// Errors: the store's.
    pub async fn webhook(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<EndpointRecord>, StoreError> {
        self.get(endpoints_partition(owner), &endpoint_sk(id)).await
    }

    /// Deletes `owner`'s endpoint `id` and counts it off; `false` if there is none. Its
    /// deliveries stay until they expire (the listing of a deleted endpoint answers 404).
    ///
    /// Errors: the store's.
    pub async fn delete_webhook(&self, owner: &Owner, id: &str) -> Result<bool, StoreError> {
        let delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(&self.table)
            .key(schema::PK, s(endpoints_partition(owner)))
            .key(schema::SK, s(endpoint_sk(id)))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .build()
            .map_err(super::builder_error)?;
        let written = self
            .client
            .transact_write_items()
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .delete(delete)
                    .build(),
            )
            .transact_items(caps::release(&self.table, owner, Counter::Webhooks)?)
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Writes `record` (its changeable fields: secrets, disabled, failing since) over the
    /// stored endpoint as version `read + 1`, if the stored one is still version `read`;
    /// `false` if it was written since or deleted (read it again).
    ///
    /// Errors: the store's.
    pub async fn save_webhook(
        &self,
        record: &EndpointRecord,
        read: u64,
    ) -> Result<bool, StoreError> {
        let next = EndpointRecord {
            version: read + 1,
            ..record.clone()
        };
        let item = to_item(
            &next,
            &[
                (schema::PK, endpoints_partition(&record.owner)),
                (schema::SK, endpoint_sk(&record.id)),
            ],
        )?;
        // Endpoints registered before versions were kept have none: version 0.
        let condition = if read == 0 {
            "attribute_exists(#pk) AND (attribute_not_exists(#version) OR #version = :read)"
        } else {
            "attribute_exists(#pk) AND #version = :read"
        };
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":read", n(read as i64))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Queues `delivery`; `false` when the endpoint already has this event queued.
    ///
    /// Errors: the store's.
    pub async fn queue_delivery(&self, delivery: &DeliveryRecord) -> Result<bool, StoreError> {
        super::applied(self.insert(delivery.item()?).await)
    }

    /// The delivery of the event `sequence` of `subject` to `endpoint_id` (strongly
    /// consistent); `None` when there is none (expired).
    ///
    /// Errors: the store's.
    pub async fn delivery(
        &self,
        endpoint_id: &str,
        subject: &Subject,
        sequence: u64,
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let sk = format!("{}{sequence:012}", queue_prefix(subject));
        self.get(deliveries_partition(endpoint_id), &sk).await
    }

    /// Claims `delivery` until `until` (epoch seconds) if it is still pending and no one else
    /// holds it at `now`; `false` otherwise.
    ///
    /// Errors: the store's.
    pub async fn claim_delivery(
        &self,
        delivery: &DeliveryRecord,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError> {
        let item = delivery.item()?;
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, item[schema::PK].clone())
            .key(schema::SK, item[schema::SK].clone())
            .update_expression("SET #claimed = :until")
            .condition_expression(
                "#status = :pending AND (attribute_not_exists(#claimed) OR #claimed < :now)",
            )
            .expression_attribute_names("#claimed", "claimedUntil")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", s("pending"))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Writes `delivery` as it now stands (after an attempt), which also lets go of its claim
    /// and keeps it in the index of retries due only while it is pending.
    ///
    /// Errors: the store's.
    pub async fn save_delivery(&self, delivery: &DeliveryRecord) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(delivery.item()?))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Writes `delivery` (now failed) if it is still pending as stored, with `outbox`'s events
    /// in the same transaction; `false` when it is not pending any more (someone else ended
    /// it, or its event was written already).
    ///
    /// Errors: the store's.
    pub async fn fail_delivery(
        &self,
        delivery: &DeliveryRecord,
        outbox: Option<&super::events::Outbox>,
    ) -> Result<bool, StoreError> {
        use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(delivery.item()?))
            .condition_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", s("pending"))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut items = vec![TransactWriteItem::builder().put(put).build()];
        if let Some(outbox) = outbox {
            items.extend(outbox.puts(&self.table)?);
        }
        self.write_all(items).await
    }

    /// `limit` of `endpoint_id`'s deliveries after `cursor`, newest first.
    ///
    /// Errors: [`StoreError::BadCursor`] for a cursor of another listing.
    pub async fn deliveries_of(
        &self,
        endpoint_id: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<DeliveryRecord>, StoreError> {
        self.query_gsi1(&deliveries_partition(endpoint_id), DELIVERY, limit, cursor)
            .await
    }

    /// Up to `limit` of `endpoint_id`'s deliveries waiting for a retry due by `due_by` (epoch
    /// seconds), soonest first (GSI2, keys only, eventually consistent; the records are read
    /// strongly consistent).
    ///
    /// Errors: the store's.
    pub async fn waiting_deliveries(
        &self,
        endpoint_id: &str,
        due_by: i64,
        limit: i32,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.due_in_gsi2(&waiting_partition(endpoint_id), due_by, limit)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_in_debug() {
        let secret = SigningSecret {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            expires_at: Some(7),
        };
        let shown = format!("{secret:?}");
        assert!(!shown.contains("MfKQ9r8"), "{shown}");
        assert!(shown.contains("redacted") && shown.contains('7'), "{shown}");
    }
}
