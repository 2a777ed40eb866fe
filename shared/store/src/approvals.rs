//! Approvals (issue 35): a paid request an API key's policy refused, held for the key's owner
//! to grant (with a signed EIP-4361 message) or decline. A grant lets that very request,
//! repeated with that key, pass the key's policy once.
//!
//! - Record: `pk = APPROVAL#<id>`, `sk = APPROVAL`; GSI1 `OWNER#<owner>` /
//!   `APPROVAL#<createdAt>#<id>` (the owner's listing, newest first). Its state moves once each
//!   way: `pending` → `granted` or `declined` ([`Store::decide_approval`], conditional on
//!   `pending` and the `eventSeq` it read), then `granted` → `used` inside the transaction that
//!   claims the request's payment ([`ApprovalUse::item`], conditional on `granted`, the key, the
//!   request's digest and `validUntil`). Its events (`approval.requested`, `approval.granted`,
//!   `approval.declined`) are written in the same transactions. Kept [`KEPT_SECONDS`] past its
//!   expiry (TTL).
//! - Slot: `pk = KEYAPPROVALS#<key id>`, `sk = REQ#<digest>`: the key's latest approval of one
//!   request (`approvalId`, `validUntil`), so that the same request repeated finds it. Written
//!   with the approval, conditional on the slot it replaces (or on none), so that two refusals
//!   of one request at once make one approval; it expires with its approval (TTL). A key's slots
//!   also count its pending approvals.
//! - MCP client: `pk = MCPCLIENT#<key id>`, `sk = CLIENT`: whether the key's MCP client declared
//!   URL-mode elicitation at its last `initialize` (`urlElicitation`), kept 30 days (TTL).

use crate::partitions::Partition;
use serde::{Deserialize, Serialize};

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use super::events::Outbox;
use super::{Page, Store, StoreError, from_item, n, s, schema, to_item};
use crate::address::Owner;

/// How long an approval's record is kept after it expires, seconds (7 days): the owner's
/// listing and the agent's `GET` show what became of it.
pub const KEPT_SECONDS: i64 = 7 * 24 * 3600;

const SK: &str = "APPROVAL";

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalState {
    /// Waiting for the owner (until `expiresAt`).
    Pending,
    /// The owner signed it: the request passes its key's policy once.
    Granted,
    /// The owner declined it.
    Declined,
    /// A granted approval whose request was made (its payment claimed).
    Used,
}

impl ApprovalState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Granted => "granted",
            ApprovalState::Declined => "declined",
            ApprovalState::Used => "used",
        }
    }
}

/// What the agent asked for, as the owner is shown it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// `provision` (a new server) or `renewal` (more paid time for one).
    pub what: String,
    /// The route asked: method and path, e.g. `POST /api/cloud/servers/123`.
    pub route: String,
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug, when the request names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Paid periods bought (1 for a new server).
    pub periods: u32,
    /// The price when asked, USD.
    pub price: f64,
    /// The server renewed (a renewal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// The API key that asked (`key_…`).
    pub key: String,
    /// Its name.
    pub key_name: String,
    /// The names of the key's active agents, if any.
    #[serde(default)]
    pub agents: Vec<String>,
}

/// Why the key's policy refused the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The policy limit that refused: `maxPricePerServer`, `dailySpendLimit`,
    /// `monthlySpendLimit`, `allowedPlans`, `allowedRegions` or `maxActiveServers`.
    pub limit: String,
    /// The refusal's words.
    pub message: String,
}

/// The owner's signed grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedGrant {
    /// The EIP-4361 message, exactly as signed.
    pub message: String,
    /// Its signature (0x hex).
    pub signature: String,
}

/// An approval as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// `apr_<32 hex>`, random: its URL is the owner's to open.
    pub id: String,
    /// The key's owner: the one who may grant it.
    pub owner: Owner,
    /// The console at this approval (`<the API's public base URL>/#approvals/<id>`).
    pub url: String,
    /// The key that asked (`key_…`): the only one it lets through.
    pub key_id: String,
    /// SHA-256 (hex) of the key, the route and the validated request: the only request it lets
    /// through.
    pub digest: String,
    /// What was asked.
    pub request: ApprovalRequest,
    /// Why the policy refused it.
    pub reason: Refusal,
    /// The most it lets the request cost, USDC atomic units: the price when asked.
    pub amount: String,
    /// Where it is in its life.
    pub state: ApprovalState,
    /// When it was asked, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// When it lapses unless used, RFC 3339 (30 minutes after it was asked).
    pub expires_at: crate::time::Timestamp,
    /// The same, epoch seconds (the conditions compare it).
    pub valid_until: i64,
    /// When the owner granted or declined it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<crate::time::Timestamp>,
    /// The owner's signed grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<SignedGrant>,
    /// When its request was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<crate::time::Timestamp>,
    /// The order its request made (`ord_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
    /// The sequence of its last event.
    #[serde(default)]
    pub event_seq: u64,
}

/// A key's latest approval of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalSlot {
    /// The approval (`apr_…`).
    pub approval_id: String,
    /// When it lapses, epoch seconds.
    pub valid_until: i64,
}

/// A grant used by a request: the write that marks it used, in the transaction that claims the
/// request's payment.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalUse {
    /// The approval.
    pub id: String,
    /// The key that makes the request.
    pub key_id: String,
    /// The request's digest.
    pub digest: String,
    /// Now, epoch seconds: the approval must still be valid.
    pub now: i64,
    /// Now, RFC 3339.
    pub at: crate::time::Timestamp,
    /// The order the request makes.
    pub order_id: String,
}

impl ApprovalUse {
    /// The transaction item: `state` `granted` → `used`, conditional on the key, the digest and
    /// `validUntil` (a failed condition cancels the claim: nothing recorded or reserved).
    ///
    /// Errors: the SDK builder's.
    pub(crate) fn item(&self, table: &str) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(table)
            .key(schema::PK, s(pk(&self.id)))
            .key(schema::SK, s(SK))
            .update_expression("SET #state = :used, #usedAt = :at, #usedBy = :order")
            .condition_expression(
                "#state = :granted AND #key = :key AND #digest = :digest AND #until > :now",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#usedAt", "usedAt")
            .expression_attribute_names("#usedBy", "usedBy")
            .expression_attribute_names("#key", "keyId")
            .expression_attribute_names("#digest", "digest")
            .expression_attribute_names("#until", "validUntil")
            .expression_attribute_values(":used", s(ApprovalState::Used.as_str()))
            .expression_attribute_values(":granted", s(ApprovalState::Granted.as_str()))
            .expression_attribute_values(":at", s(self.at.to_string()))
            .expression_attribute_values(":order", s(self.order_id.clone()))
            .expression_attribute_values(":key", s(self.key_id.clone()))
            .expression_attribute_values(":digest", s(self.digest.clone()))
            .expression_attribute_values(":now", n(self.now))
            .build()
            .map_err(super::builder_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }
}

/// What a refusal carries: the approval the owner can grant.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalOffer {
    /// `apr_<32 hex>`.
    pub approval_id: String,
    /// The console at this approval, for the owner to open.
    pub approval_url: String,
    /// `pending`, or `declined` when the owner declined this very request.
    pub state: Status,
    /// When it lapses unless granted and used, RFC 3339.
    pub expires_at: crate::time::Timestamp,
    /// What was asked.
    pub request: ApprovalRequest,
}

/// An approval's state as answered: the stored one, or `expired` once a pending or granted
/// approval's time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for the owner.
    Pending,
    /// Granted: the same request with the same key passes its policy once.
    Granted,
    /// Declined by the owner.
    Declined,
    /// Granted and used.
    Used,
    /// Lapsed before it was granted, or granted and not used in time.
    Expired,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Granted => "granted",
            Status::Declined => "declined",
            Status::Used => "used",
            Status::Expired => "expired",
        }
    }

    /// `record`'s state at `now` (epoch seconds).
    pub fn of(record: &ApprovalRecord, now: i64) -> Status {
        match record.state {
            ApprovalState::Declined => Status::Declined,
            ApprovalState::Used => Status::Used,
            _ if record.valid_until <= now => Status::Expired,
            ApprovalState::Pending => Status::Pending,
            ApprovalState::Granted => Status::Granted,
        }
    }
}

impl ApprovalOffer {
    /// The offer of `record` at `now` (epoch seconds).
    pub fn of(record: &ApprovalRecord, now: i64) -> ApprovalOffer {
        ApprovalOffer {
            approval_id: record.id.clone(),
            approval_url: record.url.clone(),
            state: Status::of(record, now),
            expires_at: record.expires_at,
            request: record.request.clone(),
        }
    }
}

fn pk(id: &str) -> String {
    Partition::Approval.key(id)
}

fn slots_partition(key_id: &str) -> String {
    Partition::KeyApprovals.key(key_id)
}

fn slot_sk(digest: &str) -> String {
    format!("REQ#{digest}")
}

fn record_item(record: &ApprovalRecord) -> Result<super::Item, StoreError> {
    let mut item = to_item(
        record,
        &[
            (schema::PK, pk(&record.id)),
            (schema::SK, SK.to_owned()),
            (schema::GSI1_PK, super::keys::owner_partition(&record.owner)),
            (
                schema::GSI1_SK,
                format!("APPROVAL#{}#{}", record.created_at, record.id),
            ),
        ],
    )?;
    item.insert(
        schema::TTL_ATTRIBUTE.to_owned(),
        n(record.valid_until + KEPT_SECONDS),
    );
    Ok(item)
}

impl Store {
    /// The approval `id` (strongly consistent).
    ///
    /// Errors: the store's.
    pub async fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.get(pk(id), SK).await
    }

    /// Key `key_id`'s latest approval of the request whose digest is `digest`.
    ///
    /// Errors: the store's.
    pub async fn approval_slot(
        &self,
        key_id: &str,
        digest: &str,
    ) -> Result<Option<ApprovalSlot>, StoreError> {
        self.get(slots_partition(key_id), &slot_sk(digest)).await
    }

    /// The approvals of key `key_id` still valid at `now` (epoch seconds), read whole.
    ///
    /// Errors: the store's.
    pub async fn live_approvals_of_key(
        &self,
        key_id: &str,
        now: i64,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let slots: Vec<ApprovalSlot> = self.query_all(&slots_partition(key_id), "REQ#").await?;
        let keys = slots
            .iter()
            .filter(|slot| slot.valid_until > now)
            .map(|slot| (pk(&slot.approval_id), SK.to_owned()))
            .collect();
        self.batch_get(keys)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// `owner`'s approvals, newest first, `limit` from `cursor` on (GSI1: eventually
    /// consistent).
    ///
    /// Errors: 400 (`cursor`) for a cursor of another listing; the store's.
    pub async fn approvals_of(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<ApprovalRecord>, StoreError> {
        self.query_gsi1(
            &super::keys::owner_partition(owner),
            "APPROVAL#",
            limit,
            cursor,
        )
        .await
    }

    /// Records `record` (pending) with its `approval.requested` event (`outbox`), and points its
    /// key's slot for its request at it: `false` when the slot no longer names `replaces`
    /// (`None`: when a slot exists at all), i.e. another refusal of the same request made one
    /// first.
    ///
    /// Errors: the store's.
    pub async fn open_approval(
        &self,
        record: &ApprovalRecord,
        replaces: Option<&str>,
        outbox: &Outbox,
    ) -> Result<bool, StoreError> {
        let slot = ApprovalSlot {
            approval_id: record.id.clone(),
            valid_until: record.valid_until,
        };
        let mut slot_item = to_item(
            &slot,
            &[
                (schema::PK, slots_partition(&record.key_id)),
                (schema::SK, slot_sk(&record.digest)),
            ],
        )?;
        slot_item.insert(schema::TTL_ATTRIBUTE.to_owned(), n(record.valid_until));
        let mut put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .set_item(Some(slot_item))
            .expression_attribute_names("#pk", schema::PK);
        put = match replaces {
            Some(previous) => put
                .condition_expression("attribute_not_exists(#pk) OR #id = :previous")
                .expression_attribute_names("#id", "approvalId")
                .expression_attribute_values(":previous", s(previous)),
            None => put.condition_expression("attribute_not_exists(#pk)"),
        };
        let slot_put = TransactWriteItem::builder()
            .put(put.build().map_err(super::builder_error)?)
            .build();
        let record_put = super::put_new(&self.table, record_item(record)?)?;
        let mut items = vec![record_put, slot_put];
        items.extend(outbox.puts(&self.table)?);
        self.write_all(items).await
    }

    /// Writes `record`, decided (granted or declined) by its owner, with its event (`outbox`):
    /// `false` when it is no longer `pending` with the `eventSeq` the decision read (decided,
    /// or used, meanwhile).
    ///
    /// Errors: the store's.
    pub async fn decide_approval(
        &self,
        record: &ApprovalRecord,
        outbox: &Outbox,
    ) -> Result<bool, StoreError> {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .set_item(Some(record_item(record)?))
            .condition_expression("#state = :pending AND #seq = :read")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#seq", "eventSeq")
            .expression_attribute_values(":pending", s(ApprovalState::Pending.as_str()))
            .expression_attribute_values(":read", n(outbox.read_seq()))
            .build()
            .map_err(super::builder_error)?;
        let mut items = vec![TransactWriteItem::builder().put(put).build()];
        items.extend(outbox.puts(&self.table)?);
        self.write_all(items).await
    }
}

/// How long a key's MCP client's capabilities are remembered, seconds (30 days).
const MCP_CLIENT_SECONDS: i64 = 30 * 24 * 3600;

impl Store {
    /// Remembers whether key `key_id`'s MCP client declared URL-mode elicitation
    /// (`capabilities.elicitation.url`) at its last `initialize`, at `now` (epoch seconds):
    /// the MCP endpoint is stateless, and a later tool call is answered by it.
    ///
    /// Errors: the store's.
    pub async fn remember_mcp_client(
        &self,
        key_id: &str,
        url_elicitation: bool,
        now: i64,
    ) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(schema::PK, s(Partition::McpClient.key(key_id)))
            .item(schema::SK, s("CLIENT"))
            .item(
                "urlElicitation",
                aws_sdk_dynamodb::types::AttributeValue::Bool(url_elicitation),
            )
            .item(schema::TTL_ATTRIBUTE, n(now + MCP_CLIENT_SECONDS))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Whether key `key_id`'s MCP client declared URL-mode elicitation at its last
    /// `initialize` ([`Store::remember_mcp_client`]); `false` when none is remembered.
    ///
    /// Errors: the store's.
    pub async fn mcp_client_takes_urls(&self, key_id: &str) -> Result<bool, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Client {
            url_elicitation: bool,
        }
        let client: Option<Client> = self.get(Partition::McpClient.key(key_id), "CLIENT").await?;
        Ok(client.is_some_and(|c| c.url_elicitation))
    }
}
