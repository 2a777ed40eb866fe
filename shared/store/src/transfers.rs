//! An order's transfer on the chain. Paid orders whose transfer is followed until the chain
//! calls it final (`domain::billing::finality`): on `gsi3`'s [`Partition::Transfers`], by when
//! each is next due. An order enters with the write that settles it ([`OrderChanges::follow`])
//! and leaves when its transfer is final ([`Store::follow_transfer`]) or with the write that
//! reverses it ([`OrderChanges::unfollow`]). And how far the chain was searched for its
//! authorization's use ([`Store::scanned_through`]).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::builders::UpdateBuilder;

use super::payments::{ORDER_SK, Order, OrderChanges, pk};
use super::{Store, StoreError, from_item, n, s, schema};
use crate::partitions::Partition;

/// GSI3 keys of an order whose transfer is followed, due at `due` (epoch seconds): `TRANSFER`,
/// `<due, 12 digits>#<id>`.
fn keys(due: i64, id: &str) -> (String, String) {
    (
        Partition::Transfers.prefix().into(),
        format!("{:012}#{id}", due.max(0)),
    )
}

/// What an order's write does to its [`Partition::Transfers`] keys: set them (`follow`, with
/// its `SET` clause added to `sets`) or remove them (`unfollow`: the `REMOVE` clause returned).
pub(crate) fn clauses(
    mut update: UpdateBuilder,
    changes: &OrderChanges,
    id: &str,
    sets: &mut Vec<String>,
) -> (UpdateBuilder, &'static str) {
    if changes.follow.is_none() && !changes.unfollow {
        return (update, "");
    }
    update = update
        .expression_attribute_names("#tpk", schema::GSI3_PK)
        .expression_attribute_names("#tsk", schema::GSI3_SK);
    if let Some(due) = changes.follow {
        let (tpk, tsk) = keys(due, id);
        sets.push("#tpk = :tpk, #tsk = :tsk".into());
        update = update
            .expression_attribute_values(":tpk", s(tpk))
            .expression_attribute_values(":tsk", s(tsk));
    }
    (
        update,
        if changes.unfollow {
            " REMOVE #tpk, #tsk"
        } else {
            ""
        },
    )
}

impl Store {
    /// Up to `limit` orders whose transfer is due to be followed at `now` (epoch seconds) or
    /// before, earliest first (GSI3 [`Partition::Transfers`], keys only, eventually consistent;
    /// the orders themselves are read strongly consistent).
    ///
    /// Errors: the store's.
    pub async fn transfers_due(&self, now: i64, limit: i32) -> Result<Vec<Order>, StoreError> {
        self.due_in_gsi3(Partition::Transfers.prefix(), now, limit)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// Follows `order`'s transfer again at `due` (epoch seconds), if it is still followed; or,
    /// with `due` = `None`, stops following it (the chain called it final). Touches nothing
    /// else of the order (no `seq`: no attempt's condition is disturbed).
    ///
    /// Errors: the store's.
    pub async fn follow_transfer(&self, order: &Order, due: Option<i64>) -> Result<(), StoreError> {
        let update = self
            .beside(order)
            .expression_attribute_names("#tpk", schema::GSI3_PK)
            .condition_expression("attribute_exists(#tpk)");
        let update = match due {
            Some(due) => update
                .update_expression("SET #tsk = :tsk")
                .expression_attribute_names("#tsk", schema::GSI3_SK)
                .expression_attribute_values(":tsk", s(keys(due, order.id.as_str()).1)),
            None => update
                .update_expression("REMOVE #tpk, #tsk")
                .expression_attribute_names("#tsk", schema::GSI3_SK),
        };
        unless_gone(update).await
    }

    /// Records that a search of the chain for `order`'s authorization read through `block` and
    /// found no use ([`Order::scanned_to`]); only ever moves forward. Touches nothing else of
    /// the order (no `seq`: no attempt's condition is disturbed); an order gone meanwhile is
    /// left alone.
    ///
    /// Errors: the store's.
    pub async fn scanned_through(&self, order: &Order, block: u64) -> Result<(), StoreError> {
        let update = self
            .beside(order)
            .update_expression("SET scannedTo = :b")
            .condition_expression(
                "attribute_exists(#pk) AND (attribute_not_exists(scannedTo) OR scannedTo < :b)",
            )
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_values(":b", n(block));
        unless_gone(update).await
    }

    /// An UpdateItem of `order`'s item beside its state (no `seq` condition).
    fn beside(&self, order: &Order) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk(order.id.as_str())))
            .key(schema::SK, s(ORDER_SK))
    }
}

/// Sends `update`; a failed condition (the order moved on, or is gone) is no error.
async fn unless_gone(update: UpdateItemFluentBuilder) -> Result<(), StoreError> {
    match update.send().await.map_err(StoreError::from_sdk) {
        Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
        Err(err) => Err(err),
    }
}
