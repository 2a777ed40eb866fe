//! What an API key has used: its spend per UTC day and per UTC month, and the servers it holds
//! (`crate::keys` reads them to answer and to enforce a key's policy).
//!
//! Items, in the partition `KEYUSE#<key id>`:
//! - `sk = DAY#<yyyy-mm-dd>` and `sk = MONTH#<yyyy-mm>`: `spent` (N, USDC atomic units reserved
//!   by the key's payments of that day or month) and the TTL attribute (the item expires a day
//!   after its period).
//! - `sk = SERVERS`: `servers` (SS), one member per server the key provisioned,
//!   `<sandbox id>@<epoch seconds it was added>`; members whose server ended are removed when
//!   the key next provisions ([`Store::drop_servers`]).
//!
//! A reservation is written inside the transaction that claims its payment (or records its new
//! server), conditional on the key's limits, so two concurrent requests cannot both pass a limit
//! that fits one; a release is written inside the transaction that ends the payment uncharged.
//! `ADD` on numbers and sets makes both exact under retries of the same transaction.

use crate::partitions::Partition;
use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, TransactWriteItem, Update};

use super::{Item, Store, StoreError, builder_error, n, s, schema};

/// Sort key of the servers item.
const SERVERS: &str = "SERVERS";

fn pk(key_id: &str) -> String {
    Partition::KeyUse.key(key_id)
}

fn day_sk(day: &str) -> String {
    format!("DAY#{day}")
}

fn month_sk(month: &str) -> String {
    format!("MONTH#{month}")
}

/// One key's usage as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// USDC atomic units reserved on the day asked for.
    pub spent_today: u128,
    /// USDC atomic units reserved in the month asked for.
    pub spent_month: u128,
    /// The members of the servers set (`<sandbox id>@<epoch seconds>`), ended ones included
    /// until they are dropped.
    pub servers: Vec<String>,
}

/// What a paid request reserves of its key, written with its claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// The key, and the day and month counted in.
    pub hold: SpendHold,
    /// USDC atomic units (0: nothing spent, e.g. a credit redeemed).
    pub amount: u128,
    /// The key's daily limit, USDC atomic units: the day's `spent` must stay within it.
    pub daily_limit: Option<u128>,
    /// The key's monthly limit, USDC atomic units.
    pub monthly_limit: Option<u128>,
    /// The TTL of the day's item (epoch seconds); the month's is `month_expires`.
    pub day_expires: i64,
    /// The TTL of the month's item (epoch seconds).
    pub month_expires: i64,
    /// A new server to count against the key.
    pub server: Option<ServerSlot>,
}

/// A new server counted against its key.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSlot {
    /// `<sandbox id>@<epoch seconds>`.
    pub member: String,
    /// The key's `maxActiveServers`: the set must hold fewer members before this one joins.
    pub max: Option<u32>,
}

/// Where a payment's spend was reserved, recorded on its order (`spend`) so that the same
/// counters are given back when it ends without a charge.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpendHold {
    /// The key (`key_…`).
    pub key_id: String,
    /// The UTC day the spend was reserved in, `yyyy-mm-dd`.
    pub day: String,
    /// The UTC month, `yyyy-mm`.
    pub month: String,
}

impl Store {
    /// The transaction items of `reservation`: each conditional on its limit (a failed one
    /// cancels the whole transaction, nothing reserved).
    pub(crate) fn reservation_items(
        &self,
        reservation: &Reservation,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = Vec::new();
        if reservation.amount > 0 {
            for (sk, limit, expires) in [
                (
                    day_sk(&reservation.hold.day),
                    reservation.daily_limit,
                    reservation.day_expires,
                ),
                (
                    month_sk(&reservation.hold.month),
                    reservation.monthly_limit,
                    reservation.month_expires,
                ),
            ] {
                items.push(self.spend_item(
                    &reservation.hold.key_id,
                    sk,
                    reservation.amount as i128,
                    limit,
                    expires,
                )?);
            }
        }
        if let Some(slot) = &reservation.server {
            items.push(self.server_item(&reservation.hold.key_id, slot)?);
        }
        Ok(items)
    }

    /// The transaction items giving back `amount` (USDC atomic units) reserved at `hold`, at
    /// `now` (the releasing transition's time): unconditional (the order's own condition makes
    /// the release happen once).
    pub(crate) fn release_items(
        &self,
        hold: &SpendHold,
        amount: u128,
        now: crate::time::Timestamp,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let amount = -(amount as i128);
        // An expired period's item comes back only until the TTL deletes it again.
        let expires = now.datetime().unix_timestamp() + 86_400;
        Ok(vec![
            self.spend_item(&hold.key_id, day_sk(&hold.day), amount, None, expires)?,
            self.spend_item(&hold.key_id, month_sk(&hold.month), amount, None, expires)?,
        ])
    }

    fn spend_item(
        &self,
        key_id: &str,
        sk: String,
        amount: i128,
        limit: Option<u128>,
        expires: i64,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, s(pk(key_id)))
            .key(schema::SK, s(sk))
            .update_expression("ADD #spent :amount SET #ttl = if_not_exists(#ttl, :expires)")
            .expression_attribute_names("#spent", "spent")
            .expression_attribute_names("#ttl", schema::TTL_ATTRIBUTE)
            .expression_attribute_values(":amount", n(amount))
            .expression_attribute_values(":expires", n(expires));
        if let Some(limit) = limit {
            // The caller refused an amount over the limit outright: `room` is not negative.
            let room = limit.saturating_sub(amount.max(0) as u128);
            update = update
                .condition_expression("attribute_not_exists(#spent) OR #spent <= :room")
                .expression_attribute_values(":room", n(room));
        }
        transact(update)
    }

    fn server_item(
        &self,
        key_id: &str,
        slot: &ServerSlot,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, s(pk(key_id)))
            .key(schema::SK, s(SERVERS))
            .update_expression("ADD #servers :member")
            .expression_attribute_names("#servers", "servers")
            .expression_attribute_values(":member", AttributeValue::Ss(vec![slot.member.clone()]));
        if let Some(max) = slot.max {
            update = update
                .condition_expression("attribute_not_exists(#servers) OR size(#servers) < :max")
                .expression_attribute_values(":max", n(max));
        }
        transact(update)
    }

    /// Counts a new server against key `key_id` before it is created (a free server, recorded
    /// after its create): adds `slot.member` to the key's servers unless the set already holds
    /// `slot.max` members. `false` when it is full.
    ///
    /// Errors: the store fails.
    pub async fn hold_server(&self, key_id: &str, slot: &ServerSlot) -> Result<bool, StoreError> {
        self.write_all(vec![self.server_item(key_id, slot)?]).await
    }

    /// Removes `members` from key `key_id`'s servers (ended servers, or a hold whose create
    /// failed); removing an absent member is a no-op.
    ///
    /// Errors: the store fails.
    pub async fn drop_servers(&self, key_id: &str, members: &[String]) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk(key_id)))
            .key(schema::SK, s(SERVERS))
            .update_expression("DELETE #servers :members")
            .expression_attribute_names("#servers", "servers")
            .expression_attribute_values(":members", AttributeValue::Ss(members.to_vec()))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// The usage of each key of `key_ids` on UTC `day` (`yyyy-mm-dd`) and in `month`
    /// (`yyyy-mm`), strongly consistent; a key with none has the default (zeros, no servers).
    ///
    /// Errors: the store fails.
    pub async fn usages(
        &self,
        key_ids: &[&str],
        day: &str,
        month: &str,
    ) -> Result<HashMap<String, Usage>, StoreError> {
        let keys = key_ids
            .iter()
            .flat_map(|id| {
                [day_sk(day), month_sk(month), SERVERS.to_owned()].map(|sk| (pk(id), sk))
            })
            .collect::<Vec<_>>();
        let mut usages: HashMap<String, Usage> = key_ids
            .iter()
            .map(|id| ((*id).to_owned(), Usage::default()))
            .collect();
        for item in self.batch_get(keys).await? {
            let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
            let (Some(pk), Some(sk)) = (text(schema::PK), text(schema::SK)) else {
                continue;
            };
            let Some(usage) = pk
                .strip_prefix(Partition::KeyUse.prefix())
                .and_then(|id| usages.get_mut(id))
            else {
                continue;
            };
            let spent = || {
                item.get("spent")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<i128>().ok())
                    .map_or(0, |v| v.max(0) as u128)
            };
            if sk == SERVERS {
                usage.servers = item
                    .get("servers")
                    .and_then(|v| v.as_ss().ok())
                    .cloned()
                    .unwrap_or_default();
            } else if sk.starts_with("DAY#") {
                usage.spent_today = spent();
            } else {
                usage.spent_month = spent();
            }
        }
        Ok(usages)
    }

    /// Reads the items at `keys` ((pk, sk) pairs), strongly consistent, 100 per request,
    /// retrying unprocessed keys; missing items are left out.
    ///
    /// Errors: the store fails, or keeps leaving keys unprocessed.
    pub(crate) async fn batch_get(
        &self,
        keys: Vec<(String, String)>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        for chunk in keys.chunks(100) {
            let mut request = KeysAndAttributes::builder().consistent_read(true);
            for (pk, sk) in chunk {
                request = request.keys(HashMap::from([
                    (schema::PK.to_owned(), s(pk.clone())),
                    (schema::SK.to_owned(), s(sk.clone())),
                ]));
            }
            let mut pending = Some(request.build().map_err(builder_error)?);
            for attempt in 0..5u32 {
                let Some(request) = pending.take() else { break };
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(StoreError::from_sdk)?;
                items.extend(
                    out.responses
                        .and_then(|mut r| r.remove(&self.table))
                        .unwrap_or_default(),
                );
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys.is_empty());
            }
            if pending.is_some() {
                return Err(StoreError::Backend(
                    "DynamoDB kept leaving keys of a batch read unprocessed".into(),
                ));
            }
        }
        Ok(items)
    }
}

fn transact(
    update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
) -> Result<TransactWriteItem, StoreError> {
    Ok(TransactWriteItem::builder()
        .update(update.build().map_err(builder_error)?)
        .build())
}
