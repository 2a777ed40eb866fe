//! The DynamoDB store: one table, single-table design (design brief §4). Access patterns are
//! listed in `docs/storage.md`; every read that authorises (key lookup, ownership) is strongly
//! consistent, and multi-item changes are transactions.
//!
//! The library's third layer (`docs/architecture.md`), a crate of its own over [`base`] and
//! [`outside`]: the rules above it cannot be reached from here.

#![warn(missing_docs)]

pub mod agents;
pub mod approvals;
pub mod caps;
pub mod events;
pub mod keys;
pub mod oauth;
pub mod partitions;
pub mod payments;
pub mod queue;
pub mod sandboxes;
pub mod schema;
pub mod sessions;
pub mod ssh_keys;
pub mod tasks;
pub mod transfers;
pub mod usage;
pub mod uses;
pub mod webhooks;

// The layers below, at the paths this crate's modules name them by (`crate::time`, …).
use crate::partitions::Partition;
use base::{address, policy, time};
use outside::x402;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write or transaction found the item in the wrong state.
    #[error("a condition of the write did not hold")]
    ConditionFailed,
    /// DynamoDB did not answer in time or refused for now (throttling past the SDK's retries, a
    /// timeout, a lost connection or reply, a transaction cancelled by a conflicting one): the
    /// request may be sent again as it was. A write whose reply was lost may have been applied.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// DynamoDB refused the request for good (validation, a missing table, access).
    #[error("store request failed: {0}")]
    Backend(String),
    /// A per-owner cap (`keys`, `sandboxes`; `crate::caps`) is reached.
    #[error("the owner holds the most {0} allowed")]
    CapReached(&'static str),
    /// A listing's cursor that this listing did not make (malformed, another owner's or
    /// another listing's): the caller's fault, a 400 naming `cursor`.
    #[error("cursor: is not a cursor of this listing")]
    BadCursor,
    /// A stored item does not have the expected shape.
    #[error("stored item is malformed: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Classifies an SDK error: a conditional check that failed, or a transaction cancelled
    /// only by its conditions, is [`StoreError::ConditionFailed`]; a transaction any item of
    /// which met a conflicting one (`TransactionConflict`), throttling, timeouts and lost
    /// connections or replies are [`StoreError::Unavailable`]; anything else is
    /// [`StoreError::Backend`]. DynamoDB's cancellation reasons are in the message, in item
    /// order: `Transaction cancelled, please refer cancellation reasons for specific reasons
    /// [None, ConditionalCheckFailed]` (API reference, `TransactWriteItems`).
    pub(crate) fn from_sdk<E, R>(err: aws_sdk_dynamodb::error::SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        use aws_sdk_dynamodb::error::SdkError;
        let code = err.as_service_error().and_then(|e| e.code()).unwrap_or("");
        let message = err
            .as_service_error()
            .and_then(|e| e.message())
            .unwrap_or("");
        let detail = || DisplayErrorContext(&err).to_string();
        match code {
            "ConditionalCheckFailedException" => return StoreError::ConditionFailed,
            "TransactionCanceledException" if message.contains("TransactionConflict") => {
                return StoreError::Unavailable(detail());
            }
            "TransactionCanceledException" if message.contains("ConditionalCheckFailed") => {
                return StoreError::ConditionFailed;
            }
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "TransactionConflictException"
            | "TransactionInProgressException"
            | "InternalServerError"
            | "ServiceUnavailable" => return StoreError::Unavailable(detail()),
            _ => {}
        }
        match err {
            SdkError::TimeoutError(_)
            | SdkError::DispatchFailure(_)
            | SdkError::ResponseError(_) => StoreError::Unavailable(detail()),
            _ => StoreError::Backend(detail()),
        }
    }
}

/// The store: a DynamoDB client and the table name. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    client: Client,
    table: String,
}

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// One page of a listing, newest first, with the cursor of the next page.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The records of this page.
    pub items: Vec<T>,
    /// Opaque cursor to pass as `?cursor=` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// The page with each item made into a `U` by `f` (a record into its view).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }
}

impl Store {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: &str) -> Self {
        Store {
            client,
            table: table.to_owned(),
        }
    }

    /// A store on `table` with a client configured from the environment (the AWS SDK's default
    /// chain; `AWS_ENDPOINT_URL_DYNAMODB` points it at a local DynamoDB API).
    pub async fn connect(table: &str) -> Self {
        let sdk = aws_config::load_from_env().await;
        Store::new(Client::new(&sdk), table)
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Writes a new item; [`StoreError::ConditionFailed`] if one with its key exists.
    pub(crate) async fn insert(&self, item: Item) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Counts one request of `subject` in the window starting at `window` (epoch seconds) and
    /// answers the count so far: one atomic `ADD` on the item `RATE#<subject>` / `<window>`,
    /// which expires (TTL) at `expires` (epoch seconds).
    ///
    /// Errors: the store fails.
    pub async fn count_request(
        &self,
        subject: &str,
        window: u64,
        expires: u64,
    ) -> Result<u64, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(Partition::Rate.key(subject)))
            .key(schema::SK, s(window.to_string()))
            .update_expression("ADD #count :one SET #ttl = :expires")
            .expression_attribute_names("#count", "count")
            .expression_attribute_names("#ttl", schema::TTL_ATTRIBUTE)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":expires", AttributeValue::N(expires.to_string()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(out
            .attributes
            .and_then(|a| a.get("count").and_then(|v| v.as_n().ok()?.parse().ok()))
            .unwrap_or(1))
    }

    /// Claims the sweep of `project` at `now` (epoch seconds) unless it was swept less than
    /// `every` seconds ago: one conditional write on `SWEEP#<project>` / `SWEEP`; `false` when
    /// another pass swept it within that time.
    ///
    /// Errors: the store fails.
    pub async fn claim_sweep(
        &self,
        project: u64,
        now: i64,
        every: i64,
    ) -> Result<bool, StoreError> {
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(Partition::Sweep.key(project)))
            .key(schema::SK, s("SWEEP"))
            .update_expression("SET #at = :now")
            .condition_expression("attribute_not_exists(#at) OR #at <= :cutoff")
            .expression_attribute_names("#at", "sweptAt")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":cutoff", n(now - every))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        applied(written)
    }

    /// Writes `items` in one transaction: `false` when a condition of one of them failed (nothing
    /// written).
    ///
    /// Errors: the store's.
    pub(crate) async fn write_all(
        &self,
        items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> Result<bool, StoreError> {
        let written = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        applied(written)
    }

    /// The item at (`pk`, `sk`) read strongly consistent, as a record.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        pk: String,
        sk: &str,
    ) -> Result<Option<T>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk))
            .key(schema::SK, s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        out.item.map(from_item).transpose()
    }

    /// Queries GSI1 for partition `gsi1pk` and sort keys starting with `prefix`, newest first,
    /// `limit` items from `cursor` on. GSI reads are eventually consistent (a record written a
    /// moment ago may be missing for a moment).
    ///
    /// Errors: 400 (`cursor`) for a cursor that is malformed or belongs to another listing.
    pub(crate) async fn query_gsi1<T: DeserializeOwned>(
        &self,
        gsi1pk: &str,
        prefix: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<T>, StoreError> {
        self.query_index(Index::Gsi1, gsi1pk, prefix, limit, cursor, false)
            .await
    }

    /// [`Store::query_gsi1`] on either index, newest first or (`oldest_first`) oldest first.
    /// A page DynamoDB cut short (1 MB read) still has a cursor: the listing goes on from its
    /// last item.
    pub(crate) async fn query_index<T: DeserializeOwned>(
        &self,
        index: Index,
        partition: &str,
        prefix: &str,
        limit: i32,
        cursor: Option<&str>,
        oldest_first: bool,
    ) -> Result<Page<T>, StoreError> {
        let (name, pk_attr, sk_attr) = index.names();
        let after = cursor
            .map(|c| decode_cursor(c, partition, prefix))
            .transpose()?;
        // One more than a page (and the cursor's own item, which BETWEEN includes): whether
        // there is a next page is known without another read.
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(Some(name.to_owned()).filter(|name| !name.is_empty()))
            .consistent_read(name.is_empty())
            .expression_attribute_names("#pk", pk_attr)
            .expression_attribute_names("#sk", sk_attr)
            .expression_attribute_values(":pk", s(partition))
            .expression_attribute_values(":prefix", s(prefix))
            .scan_index_forward(oldest_first)
            .limit(limit + 1 + i32::from(after.is_some()));
        query = match &after {
            // From the cursor's item down (BETWEEN is inclusive: that item is skipped below).
            Some(after) if !oldest_first => query
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :prefix AND :after")
                .expression_attribute_values(":after", s(after.clone())),
            // From the cursor's item up to the end of the prefix.
            Some(after) => query
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :after AND :end")
                .expression_attribute_values(":after", s(after.clone()))
                .expression_attribute_values(":end", s(format!("{prefix}\u{10FFFF}"))),
            None => query.key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)"),
        };
        let out = query.send().await.map_err(StoreError::from_sdk)?;
        let cut_short = out.last_evaluated_key.is_some();
        let mut raw: Vec<Item> = out
            .items
            .unwrap_or_default()
            .into_iter()
            .filter(|item| {
                let sk = item.get(sk_attr).and_then(|v| v.as_s().ok());
                after.is_none() || sk != after.as_ref()
            })
            .collect();
        let more = raw.len() > limit as usize || (cut_short && !raw.is_empty());
        raw.truncate(limit as usize);
        let next_cursor = if more {
            raw.last()
                .and_then(|item| item.get(sk_attr))
                .and_then(|v| v.as_s().ok())
                .map(|sk| encode_cursor(partition, sk))
        } else {
            None
        };
        let raw = if index.keys_only() {
            self.whole_items(raw, (pk_attr, partition)).await?
        } else {
            raw
        };
        let items = raw
            .into_iter()
            .map(from_item)
            .collect::<Result<Vec<T>, _>>()?;
        Ok(Page { items, next_cursor })
    }

    /// Every item of table partition `partition` whose sort key starts with `prefix`, in sort
    /// key order (strongly consistent, page after page): a partition that holds at most a cap.
    ///
    /// Errors: the store's.
    pub(crate) async fn query_all<T: DeserializeOwned>(
        &self,
        partition: &str,
        prefix: &str,
    ) -> Result<Vec<T>, StoreError> {
        let mut items = Vec::new();
        let mut cursor = None;
        loop {
            let page: Page<T> = self
                .query_index(
                    Index::Table,
                    partition,
                    prefix,
                    100,
                    cursor.as_deref(),
                    true,
                )
                .await?;
            items.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// Up to `limit` whole items of GSI2 partition `partition` whose sort key is
    /// `<partition>#<due, epoch seconds, 12 digits>#…` with a due time at `now` or before,
    /// earliest first (GSI2 holds keys only and is eventually consistent; the items are read
    /// whole, strongly consistent, and dropped if they left the partition meanwhile).
    ///
    /// Errors: the store's.
    pub(crate) async fn due_in_gsi2(
        &self,
        partition: &str,
        now: i64,
        limit: i32,
    ) -> Result<Vec<Item>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(schema::GSI2)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :from AND :to")
            .expression_attribute_names("#pk", schema::GSI2_PK)
            .expression_attribute_names("#sk", schema::GSI2_SK)
            .expression_attribute_values(":pk", s(partition))
            .expression_attribute_values(":from", s(format!("{partition}#")))
            .expression_attribute_values(":to", s(format!("{partition}#{:012}#~", now.max(0))))
            .limit(limit)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        // A keys-only index: 100 keys always fit in one page; the items are read whole.
        self.whole_items(out.items.unwrap_or_default(), (schema::GSI2_PK, partition))
            .await
    }

    /// Up to `limit` whole items of GSI3 partition `partition` whose sort key is `<due, epoch
    /// seconds, 12 digits>#…` with a due time at `now` or before, earliest first, every page
    /// until `limit` (GSI3 holds keys only and is eventually consistent; the items are read
    /// whole, strongly consistent, and dropped if they left the partition meanwhile).
    ///
    /// Errors: the store's.
    pub(crate) async fn due_in_gsi3(
        &self,
        partition: &str,
        now: i64,
        limit: i32,
    ) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(schema::GSI3)
                .key_condition_expression("#pk = :pk AND #sk <= :to")
                .expression_attribute_names("#pk", schema::GSI3_PK)
                .expression_attribute_names("#sk", schema::GSI3_SK)
                .expression_attribute_values(":pk", s(partition))
                .expression_attribute_values(":to", s(format!("{:012}#~", now.max(0))))
                .limit(limit - found.len() as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(StoreError::from_sdk)?;
            found.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(key) if (found.len() as i32) < limit => start = Some(key),
                _ => return self.whole_items(found, (schema::GSI3_PK, partition)).await,
            }
        }
    }

    /// The table's items of `entries` (the answer of a keys-only index: the table's and the
    /// index's keys), strongly consistent, in the entries' order, leaving out those that are
    /// gone or whose index partition (`partition.0` attribute) is no longer `partition.1`.
    ///
    /// Errors: the store's.
    pub(crate) async fn whole_items(
        &self,
        entries: Vec<Item>,
        partition: (&str, &str),
    ) -> Result<Vec<Item>, StoreError> {
        let key = |item: &Item| {
            let text = |name| item.get(name).and_then(|v| v.as_s().ok()).cloned();
            Some((text(schema::PK)?, text(schema::SK)?))
        };
        let keys: Vec<(String, String)> = entries.iter().filter_map(key).collect();
        let mut found: HashMap<(String, String), Item> = self
            .batch_get(keys.clone())
            .await?
            .into_iter()
            .filter_map(|item| Some((key(&item)?, item)))
            .collect();
        Ok(keys
            .iter()
            .filter_map(|k| found.remove(k))
            .filter(|item| {
                item.get(partition.0)
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                    == Some(partition.1)
            })
            .collect())
    }
}

/// Whether a conditional write applied: `false` when its condition failed.
pub(crate) fn applied<T>(written: Result<T, StoreError>) -> Result<bool, StoreError> {
    match written {
        Ok(_) => Ok(true),
        Err(StoreError::ConditionFailed) => Ok(false),
        Err(err) => Err(err),
    }
}

/// A transaction Put that refuses to overwrite an existing item.
pub(crate) fn put_new(
    table: &str,
    item: Item,
) -> Result<aws_sdk_dynamodb::types::TransactWriteItem, StoreError> {
    Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder()
        .put(
            aws_sdk_dynamodb::types::Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", schema::PK)
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?,
        )
        .build())
}

/// A string attribute.
pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub(crate) fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A request the SDK's builder refused (a missing required field): a backend error.
pub(crate) fn builder_error(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Serialises a record and adds its key attributes.
pub(crate) fn to_item<T: Serialize>(
    record: &T,
    keys: &[(&str, String)],
) -> Result<Item, StoreError> {
    let mut item: Item =
        serde_dynamo::to_item(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    for (name, value) in keys {
        item.insert((*name).to_owned(), s(value.clone()));
    }
    Ok(item)
}

/// Reads a record from an item (key attributes are ignored).
pub(crate) fn from_item<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A page cursor: the sort key of the page's last item (`<TYPE>#<createdAt>#<id>`; no table
/// key, so no key material) and a fingerprint of the listing's partition (a cursor of another
/// owner's listing is refused), base64url-encoded JSON.
fn encode_cursor(partition: &str, sort_key: &str) -> String {
    let json = serde_json::to_vec(&serde_json::json!({
        "after": sort_key,
        "of": listing_fingerprint(partition),
    }))
    .unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// The first 16 hex characters of SHA-256 of a partition key.
fn listing_fingerprint(partition: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(partition.as_bytes()))[..16].to_owned()
}

/// A secondary index of the table.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Index {
    /// The table itself (strongly consistent): a partition's items, e.g. a subject's events.
    Table,
    /// `gsi1`: an owner's records.
    Gsi1,
    /// `gsi2` (keys only): payments by state, leases by when they are due.
    Gsi2,
}

impl Index {
    /// Whether the index projects only keys (the table's items are read after it).
    fn keys_only(self) -> bool {
        matches!(self, Index::Gsi2)
    }

    /// The index's name (`""`: the table) and its key attributes.
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Index::Table => ("", schema::PK, schema::SK),
            Index::Gsi1 => (schema::GSI1, schema::GSI1_PK, schema::GSI1_SK),
            Index::Gsi2 => (schema::GSI2, schema::GSI2_PK, schema::GSI2_SK),
        }
    }
}

/// The sort key a cursor of the listing `prefix` names.
///
/// Errors: 400 (`cursor`) for anything [`encode_cursor`] did not make for this listing: not
/// base64url JSON, another owner's or another listing's, an empty or oversized key (DynamoDB
/// takes at most 1,024 bytes), control characters.
fn decode_cursor(cursor: &str, partition: &str, prefix: &str) -> Result<String, StoreError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cursor {
        after: String,
        of: String,
    }
    let bad = || StoreError::BadCursor;
    if cursor.len() > 2048 {
        return Err(bad());
    }
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let Cursor { after, of } = serde_json::from_slice(&json).map_err(|_| bad())?;
    let well_formed = of == listing_fingerprint(partition)
        && after.len() > prefix.len()
        && after.len() <= 1024
        && after.starts_with(prefix)
        && !after.chars().any(char::is_control);
    if !well_formed {
        return Err(bad());
    }
    Ok(after)
}
