//! The ledger's writes of a resize order ([`crate::billing::resize`]) beside the order's own.
//!
//! One resize at a time per server: before its upgrade is sent, the order **holds** the server's
//! record ([`hold`]: `resizing` = its order id, the record naming the plan it moves to, so that a
//! renewal from then on is priced on it), in one write conditional on no other order holding it
//! and on the lease as read — the paid time the resize priced (`paidUntil`) and the plan it moves
//! from still the record's. The order's end releases it: delivered, on the new plan
//! ([`resized`]); a credit, on the plan it moved from ([`released`]). A renewal priced on the old
//! plan that lands after the hold finds the record on another plan, and becomes a credit
//! (`ledger::extend`). Each write bumps the lease's `seq` and is conditional on it, so that it
//! never undoes a concurrent lease step or deletion; the lease's times are never moved.
//!
//! Each verb is boxed where it is made (a plain function returning its boxed future): the
//! ledger's poll frames, on the paid path's deep stack (2 MiB in tests and in the runtime), never
//! hold its future.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::billing::order::machine::State;
use crate::billing::purchase::Resize;
use crate::error::ApiError;
use crate::notifications::events;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::events::{EventData, ServerResized};
use crate::store::payments::{Advance, Order, OrderChanges, SandboxStatus, SideWrites};
use crate::store::sandboxes::{Lease, LeaseChange, Resizing, SandboxRecord};

/// The stored request of resize `order`.
///
/// Errors: 500 when it cannot be read.
pub(super) fn request(order: &Order) -> Result<Resize, ApiError> {
    serde_json::from_str(&order.request)
        .map_err(|e| ApiError::Internal(format!("order {}: request: {e}", order.order_id)))
}

/// What holding the server for a resize's upgrade came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Hold {
    /// Held by this order: its upgrade may be sent.
    Held,
    /// Another order holds it (why): not sent, tried again later.
    Waiting(String),
    /// The server is no longer what the resize priced (why): it never will be sent.
    Refused(String),
}

/// Holds `order`'s server for its upgrade (module docs), or says why not.
///
/// Errors: the store's (nothing is sent then).
pub fn hold<'a>(state: &'a AppState, order: &'a Order) -> BoxFuture<'a, Result<Hold, ApiError>> {
    Box::pin(take_hold(state, order))
}

async fn take_hold(state: &AppState, order: &Order) -> Result<Hold, ApiError> {
    let resize = request(order)?;
    for _ in 0..3 {
        let record = state.store.sandbox(&order.sandbox_id).await?;
        let Some((record, lease)) = record.and_then(|r| r.lease.clone().map(|l| (r, l))) else {
            return Ok(Hold::Refused("the server is no longer the owner's".into()));
        };
        let mine = record.resizing.as_deref() == Some(order.order_id.as_str());
        if let Some(other) = record.resizing.as_deref().filter(|_| !mine) {
            return Ok(Hold::Waiting(format!(
                "another resize of the server ({other}) is under way"
            )));
        }
        if lease.paid_until.unix() != resize.paid_until {
            return Ok(Hold::Refused(
                "the server's paid time changed (renewed or taken back) after the resize was \
                priced for it"
                    .into(),
            ));
        }
        // A record that names no plan (written before records named one) is on the plan the
        // resize read from the provider's object.
        let on = record.plan.as_deref().unwrap_or(resize.from.as_str());
        if on != resize.from && !(mine && on == resize.plan) {
            return Ok(Hold::Refused(format!(
                "the server moved to plan `{on}` after the resize was priced from `{}`",
                resize.from
            )));
        }
        let change = named(
            &record,
            &lease,
            &resize.plan,
            Resizing::Take(order.order_id.clone()),
        );
        if state
            .store
            .change_sandbox(&change, state.clock.timestamp())
            .await?
        {
            return Ok(Hold::Held);
        }
    }
    Ok(Hold::Waiting("the server's record kept changing".into()))
}

/// The change of `record` (its lease `lease`, bumped and conditional on its `seq`) that makes it
/// name `plan`, taking or releasing the resize it holds.
fn named(record: &SandboxRecord, lease: &Lease, plan: &str, resizing: Resizing) -> SandboxStatus {
    let bumped = Lease {
        seq: lease.seq + 1,
        ..lease.clone()
    };
    SandboxStatus {
        sandbox_id: record.id.clone(),
        status: record.status.clone(),
        plan: Some(plan.to_owned()),
        resizing: Some(resizing),
        lease: Some(LeaseChange {
            due: Some(crate::servers::leases::next_due(&bumped)),
            read_seq: Some(lease.seq),
            lease: bumped,
        }),
        ..SandboxStatus::default()
    }
}

/// The release of `order`'s hold on its server, naming `plan`, with the record as read: `None`
/// when the order holds nothing (its upgrade was never sent), or the record is gone.
///
/// Errors: the store's.
async fn release(
    state: &AppState,
    order: &Order,
    plan: &str,
) -> Result<Option<(SandboxRecord, SandboxStatus)>, ApiError> {
    Ok(state
        .store
        .sandbox(&order.sandbox_id)
        .await?
        .filter(|r| r.resizing.as_deref() == Some(order.order_id.as_str()))
        .and_then(|r| r.lease.clone().map(|l| (r, l)))
        .map(|(record, lease)| {
            let released = Resizing::Release(order.order_id.clone());
            let status = named(&record, &lease, plan, released);
            (record, status)
        }))
}

/// The side writes of resize `order` ending a credit: its hold released, the record naming the
/// plan it moved from (no upgrade of it can land any more).
///
/// Errors: the store's.
pub(super) fn released<'a>(
    state: &'a AppState,
    order: &'a Order,
) -> BoxFuture<'a, Result<Option<SandboxStatus>, ApiError>> {
    Box::pin(async move {
        let released = release(state, order, &request(order)?.from).await?;
        Ok(released.map(|(_, status)| status))
    })
}

/// Records that the upgrade of resize `order` landed (`server`, the provider's answer): the
/// order `provisioned`, its answer `{serverId, plan, from, amount, paidUntil}` (`paidUntil` as
/// priced, unchanged), its hold released with the record naming the new plan, and the server's
/// `server.resized`, in one transaction.
///
/// Errors: the store's.
pub(super) fn resized<'a>(
    state: &'a AppState,
    order: &'a Order,
    server: &'a Value,
) -> BoxFuture<'a, Result<Option<Order>, ApiError>> {
    Box::pin(record_resized(state, order, server))
}

async fn record_resized(
    state: &AppState,
    order: &Order,
    server: &Value,
) -> Result<Option<Order>, ApiError> {
    let resize = request(order)?;
    tracing::info!(
        server = resize.server_id,
        plan = resize.plan,
        status = server["status"].as_str().unwrap_or_default(),
        "the server is resized"
    );
    let result = serde_json::json!({
        "serverId": resize.server_id,
        "plan": resize.plan,
        "from": resize.from,
        "amount": order.amount,
        "paidUntil": crate::time::Timestamp::from_unix(resize.paid_until),
    });
    let changes = OrderChanges {
        server_id: Some(resize.server_id),
        server: Some(result.to_string()),
        ..OrderChanges::default()
    };
    // The record read again when a concurrent change of it (a lease step, another event of the
    // server) refused the write; a record this order no longer holds is written without it.
    for _ in 0..3 {
        let sandbox_status = release(state, order, &resize.plan)
            .await?
            .map(|(record, status)| SandboxStatus {
                outbox: Some(events::one(
                    events::of_server(&record, state.clock.event_time()),
                    EventData::ServerResized(resized_event(&record, order, &resize)),
                )),
                ..status
            });
        let side = SideWrites {
            sandbox_status,
            ..SideWrites::default()
        };
        let at = state.clock.timestamp();
        let to = State::Provisioned;
        match state
            .store
            .advance_order(order, to, changes.clone(), side, 0, at)
            .await
        {
            Ok(Advance::Done(done)) => {
                crate::metrics::order_transition(order.state.as_str(), to.as_str());
                tracing::info!(payment = %order.id, order = order.order_id, from = %order.state,
                    to = %to, "order moved");
                return Ok(Some(*done));
            }
            Ok(Advance::Blocked) => continue,
            Ok(Advance::Lost(_)) | Err(StoreError::ConditionFailed) => return Ok(None),
            Err(err) => return Err(err.into()),
        }
    }
    tracing::warn!(payment = %order.id, "the server's record kept changing; delivered later");
    Ok(None)
}

/// The `server.resized` of `record`'s server, moved by resize `order`.
fn resized_event(record: &SandboxRecord, order: &Order, resize: &Resize) -> ServerResized {
    ServerResized {
        server: events::server_facts(record),
        plan: resize.plan.clone(),
        from: resize.from.clone(),
        amount: order.amount.clone(),
        payment: order.id.to_string(),
        paid_until: crate::time::Timestamp::from_unix(resize.paid_until),
    }
}

/// The paid time a reversed resize `order` takes back from its server's lease (`record`),
/// seconds: what its amount bought of the plan moved to at the price its order recorded
/// ([`crate::billing::resize::taken_back_seconds`]), never more than the paid time it was priced
/// for. An order bound before its price was recorded is priced now; when that plan cannot be
/// priced any more, nothing is taken back (never the paid time other payments bought).
///
/// Errors: the store's; the catalogue's, pricing an order that recorded no price (the
/// reversal is tried again by a later pass).
pub(super) fn taken_back<'a>(
    state: &'a AppState,
    order: &'a Order,
    record: &'a SandboxRecord,
) -> BoxFuture<'a, Result<i64, ApiError>> {
    Box::pin(taken_back_now(state, order, record))
}

async fn taken_back_now(
    state: &AppState,
    order: &Order,
    record: &SandboxRecord,
) -> Result<i64, ApiError> {
    let resize = request(order)?;
    let left = (resize.paid_until - order.bound_at.unix()).max(0);
    let priced = crate::billing::resize::period_amount(state, Some(record), &resize).await?;
    let Some(period_amount) = priced else {
        tracing::error!(payment = %order.id, plan = resize.plan,
            "the reversed resize's plan cannot be priced and its order recorded no price: no \
            paid time taken back");
        return Ok(0);
    };
    let period = state.config.payments.period.as_secs() as i64;
    let amount = order.amount.parse().unwrap_or(0);
    Ok(crate::billing::resize::taken_back_seconds(
        amount,
        period_amount,
        period,
        left,
    ))
}
