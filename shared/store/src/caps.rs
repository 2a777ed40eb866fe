//! Per-owner caps (the limits issue, point 3): counts of what an owner holds, and the slots of
//! its long polls.
//!
//! - `ALLOT#<owner>` / `ALLOT`: `keys` (unrevoked API keys), `sandboxes` (metadata sandboxes
//!   created), `webhooks` (endpoints registered, not deleted) and `sshKeys` (SSH keys added, not
//!   deleted). A creation adds one in the
//!   same transaction as its record, on condition that the count is under the cap; revoking a
//!   key (deleting an endpoint) takes one off in the same transaction. Keys issued before the
//!   count existed are not in it (the count can go below zero by that many).
//! - `WAIT#<owner>` / `<slot>` (0 to cap − 1): one long poll each, held until `until` (epoch
//!   seconds; an instance that dies mid-wait frees its slot then), deleted when the wait ends.
//! - `INFLIGHT#<pool>#<subject>` / `<slot>`: the in-flight pools' slots ([`Pool`]), and
//!   `/ cooldown`: the subject is kept off the pool until `until` ([`Store::cool_down`]; the
//!   paid pool's owners and payers whose checked payment the facilitator refused).

use crate::address::Owner;
use crate::partitions::Partition;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};

use super::{Store, StoreError, n, s, schema};

/// The counter of what an owner holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Counter {
    /// Unrevoked API keys.
    Keys,
    /// Metadata sandboxes created.
    Sandboxes,
    /// Webhook endpoints registered (and not deleted).
    Webhooks,
    /// SSH keys added (and not deleted).
    SshKeys,
}

impl Counter {
    fn attribute(self) -> &'static str {
        match self {
            Counter::Keys => "keys",
            Counter::Sandboxes => "sandboxes",
            Counter::Webhooks => "webhooks",
            Counter::SshKeys => "sshKeys",
        }
    }
}

fn allot_pk(owner: &Owner) -> String {
    Partition::Allot.key(owner)
}

const ALLOT_SK: &str = "ALLOT";

fn counter_update(
    owner: &Owner,
    counter: Counter,
    by: i64,
) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
    Update::builder()
        .key(schema::PK, s(allot_pk(owner)))
        .key(schema::SK, s(ALLOT_SK))
        .update_expression("ADD #count :by")
        .expression_attribute_names("#count", counter.attribute())
        .expression_attribute_values(":by", n(by))
}

/// The transaction item that counts one more `counter` of `owner`, on condition that it holds
/// fewer than `cap` (a failed condition: [`StoreError::CapReached`] through [`cap_failed`]).
pub(crate) fn allot(
    table: &str,
    owner: &Owner,
    counter: Counter,
    cap: u32,
) -> Result<TransactWriteItem, StoreError> {
    let update = counter_update(owner, counter, 1)
        .table_name(table)
        .condition_expression("attribute_not_exists(#count) OR #count < :cap")
        .expression_attribute_values(":cap", n(cap))
        .build()
        .map_err(super::builder_error)?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// The transaction item that counts one `counter` of `owner` less.
pub(crate) fn release(
    table: &str,
    owner: &Owner,
    counter: Counter,
) -> Result<TransactWriteItem, StoreError> {
    let update = counter_update(owner, counter, -1)
        .table_name(table)
        .build()
        .map_err(super::builder_error)?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// A transaction's error, with [`StoreError::CapReached`] when its item at `index` (an
/// [`allot`]) is the one whose condition failed.
pub(crate) fn cap_failed<R: std::fmt::Debug>(
    err: SdkError<TransactWriteItemsError, R>,
    index: usize,
    counter: Counter,
) -> StoreError {
    if let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) =
        err.as_service_error()
        && cancelled
            .cancellation_reasons()
            .get(index)
            .and_then(|reason| reason.code())
            == Some("ConditionalCheckFailed")
    {
        return StoreError::CapReached(counter.attribute());
    }
    StoreError::from_sdk(err)
}

/// Pools of in-flight slots: what holds work open for a while takes one, so one subject (an
/// owner, a source address) holds at most a pool's cap at once, across every instance (issue
/// 34, point 1). A slot is an item with an expiry, released on every path and lapsing on its
/// own if a release is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Long polls an owner holds open (`WAIT#<owner>`).
    Waits,
    /// Webhook test events an owner queued, not yet tried (`INFLIGHT#webhook-tests#<owner>`).
    Tests,
    /// An owner's paid requests with a new payment, between its check and the order's end
    /// (`INFLIGHT#paid#<owner>`).
    Paid,
    /// Sign-ins from one source address whose signature is checked on chain
    /// (`INFLIGHT#sign-in#<address>`).
    SignIn,
    /// The one attempt at a time that probes a failing webhook endpoint
    /// (`INFLIGHT#probe#<endpoint id>`).
    Probe,
    /// An owner's delivery attempts whose endpoints have not answered within a second
    /// (`INFLIGHT#slow-deliveries#<owner>`).
    SlowDeliveries,
}

impl Pool {
    /// The pool's name, as a 429 names its policy.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Waits => "waits",
            Pool::Tests => "webhook-tests",
            Pool::Paid => "paid",
            Pool::SignIn => "sign-in",
            Pool::Probe => "probe",
            Pool::SlowDeliveries => "slow-deliveries",
        }
    }

    /// The name of the pool's global budget, as a 429 names its policy when every subject's
    /// slots together are held.
    pub fn pool_name(self) -> &'static str {
        match self {
            Pool::Waits => "waits-pool",
            Pool::Tests => "webhook-tests-pool",
            Pool::Paid => "paid-pool",
            Pool::SignIn => "sign-in-pool",
            Pool::Probe => "probe-pool",
            Pool::SlowDeliveries => "slow-deliveries-pool",
        }
    }

    fn partition(self, subject: &str) -> String {
        match self {
            Pool::Waits => Partition::Wait.key(subject),
            pool => Partition::InFlight.key(format_args!("{}#{subject}", pool.name())),
        }
    }
}

/// The sort key of a subject's cooldown, beside its numbered slots.
const COOLDOWN_SK: &str = "cooldown";

/// Whether a slot was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Slot {
    /// Slot `n` is this wait's until it releases it.
    Taken(u32),
    /// Every slot is held; the first frees at this epoch second.
    Full {
        /// When the soonest held slot expires, epoch seconds.
        free_at: i64,
    },
}

impl Store {
    /// Takes one of `subject`'s `cap` slots of `pool` for `holder` until `until` (epoch
    /// seconds): the first slot that is free or expired at `now` (one conditional put per slot
    /// tried).
    ///
    /// Errors: the store fails.
    pub async fn take_slot(
        &self,
        pool: Pool,
        subject: &str,
        holder: &str,
        cap: u32,
        now: i64,
        until: i64,
    ) -> Result<Slot, StoreError> {
        let mut free_at = until;
        for slot in 0..cap {
            let put = self
                .client
                .put_item()
                .table_name(&self.table)
                .item(schema::PK, s(pool.partition(subject)))
                .item(schema::SK, s(slot.to_string()))
                .item("holder", s(holder))
                .item("until", n(until))
                .item(schema::TTL_ATTRIBUTE, n(until + 60))
                .condition_expression("attribute_not_exists(#pk) OR #until <= :now")
                .expression_attribute_names("#pk", schema::PK)
                .expression_attribute_names("#until", "until")
                .expression_attribute_values(":now", n(now))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            match put {
                Ok(_) => return Ok(Slot::Taken(slot)),
                Err(SdkError::ServiceError(err))
                    if matches!(err.err(), PutItemError::ConditionalCheckFailedException(_)) =>
                {
                    let held = match err.err() {
                        PutItemError::ConditionalCheckFailedException(e) => e
                            .item()
                            .and_then(|item| item.get("until"))
                            .and_then(|v| v.as_n().ok())
                            .and_then(|v| v.parse().ok()),
                        _ => None,
                    };
                    free_at = free_at.min(held.unwrap_or(until));
                }
                Err(err) => return Err(StoreError::from_sdk(err)),
            }
        }
        Ok(Slot::Full { free_at })
    }

    /// Keeps `subject` off `pool` until `until` (epoch seconds): one item beside its slots
    /// (`<pool's partition>` / `cooldown`, lapsing by TTL a minute after), a later `until`
    /// kept over an earlier one.
    ///
    /// Errors: the store fails.
    pub async fn cool_down(&self, pool: Pool, subject: &str, until: i64) -> Result<(), StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(schema::PK, s(pool.partition(subject)))
            .item(schema::SK, s(COOLDOWN_SK))
            .item("until", n(until))
            .item(schema::TTL_ATTRIBUTE, n(until + 60))
            .condition_expression("attribute_not_exists(#pk) OR #until < :until")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#until", "until")
            .expression_attribute_values(":until", n(until))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        match put {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Until when the first of `subjects` of `pool` to be free again is kept off it past `now`
    /// ([`Store::cool_down`]), the latest of them: `None` when none is (one batch read).
    ///
    /// Errors: the store fails.
    pub async fn cooling_until(
        &self,
        pool: Pool,
        subjects: &[&str],
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let keys = subjects
            .iter()
            .map(|subject| (pool.partition(subject), COOLDOWN_SK.to_owned()))
            .collect();
        let until = self
            .batch_get(keys)
            .await?
            .iter()
            .filter_map(|item| item.get("until")?.as_n().ok()?.parse::<i64>().ok())
            .filter(|until| *until > now)
            .max();
        Ok(until)
    }

    /// Frees `subject`'s `slot` of `pool` if `holder` still holds it.
    ///
    /// Errors: the store fails.
    pub async fn release_slot(
        &self,
        pool: Pool,
        subject: &str,
        slot: u32,
        holder: &str,
    ) -> Result<(), StoreError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(schema::PK, s(pool.partition(subject)))
            .key(schema::SK, s(slot.to_string()))
            .condition_expression("#holder = :holder")
            .expression_attribute_names("#holder", "holder")
            .expression_attribute_values(":holder", s(holder))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        match deleted {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(err) => Err(err),
        }
    }
}
