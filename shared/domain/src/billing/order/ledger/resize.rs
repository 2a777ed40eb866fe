//! The ledger's writes of a resize order ([`crate::billing::resize`]) beside the order's own: the
//! plan its server's record names — the plan moved to from the moment an upgrade is announced
//! (so that a renewal from then on is priced on it), the plan moved from again when the order
//! ends a credit — and the answer once the upgrade landed. The lease is never moved.
//!
//! Each verb is boxed where it is made (a plain function returning its boxed future): the
//! ledger's poll frames, on the paid path's deep stack (2 MiB in tests and in the runtime), never
//! hold its future.

use futures::future::BoxFuture;
use serde_json::Value;

use super::advance;
use crate::billing::order::machine::State;
use crate::billing::purchase::Resize;
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::{Order, OrderChanges, OrderKind, SandboxStatus};

/// The stored request of resize `order`.
///
/// Errors: 500 when it cannot be read.
pub(super) fn request(order: &Order) -> Result<Resize, ApiError> {
    serde_json::from_str(&order.request)
        .map_err(|e| ApiError::Internal(format!("order {}: request: {e}", order.order_id)))
}

/// The change that makes the record of resize `order`'s server name `plan` (`None` for another
/// kind of order, or a record that is gone: nothing to name).
///
/// Errors: the store's.
pub(super) fn plan_named<'a>(
    state: &'a AppState,
    order: &'a Order,
    plan: fn(Resize) -> String,
) -> BoxFuture<'a, Result<Option<SandboxStatus>, ApiError>> {
    Box::pin(named(state, order, plan))
}

async fn named(
    state: &AppState,
    order: &Order,
    plan: fn(Resize) -> String,
) -> Result<Option<SandboxStatus>, ApiError> {
    if order.kind != OrderKind::Resize {
        return Ok(None);
    }
    let plan = plan(request(order)?);
    Ok(state
        .store
        .sandbox(&order.sandbox_id)
        .await?
        .map(|record| SandboxStatus {
            sandbox_id: record.id,
            status: record.status,
            plan: Some(plan),
            ..SandboxStatus::default()
        }))
}

/// Records that the upgrade of resize `order` landed (`server`, the provider's answer): the
/// order `provisioned`, its answer `{serverId, plan, from, amount, paidUntil}` (`paidUntil` as
/// priced, unchanged), the server's record naming the new plan.
///
/// Errors: the store's.
pub(super) fn resized<'a>(
    state: &'a AppState,
    order: &'a Order,
    server: &'a Value,
    deadline: &'a Deadline,
) -> BoxFuture<'a, Result<Option<Order>, ApiError>> {
    Box::pin(record_resized(state, order, server, deadline))
}

async fn record_resized(
    state: &AppState,
    order: &Order,
    server: &Value,
    deadline: &Deadline,
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
    let side = crate::store::payments::SideWrites {
        sandbox_status: named(state, order, |r| r.plan).await?,
        ..Default::default()
    };
    let changes = OrderChanges {
        server_id: Some(resize.server_id),
        server: Some(result.to_string()),
        ..OrderChanges::default()
    };
    advance(state, order, State::Provisioned, changes, side, deadline).await
}

/// The paid time a reversed resize `order` takes back from its server's lease, seconds: what its
/// amount buys of the plan moved to now ([`crate::billing::resize::taken_back_seconds`]); all
/// the time it was priced for when that plan cannot be priced any more.
///
/// Errors: the store's.
pub(super) fn taken_back<'a>(
    state: &'a AppState,
    order: &'a Order,
) -> BoxFuture<'a, Result<i64, ApiError>> {
    Box::pin(taken_back_now(state, order))
}

async fn taken_back_now(state: &AppState, order: &Order) -> Result<i64, ApiError> {
    let resize = request(order)?;
    let left = (resize.paid_until - order.bound_at.unix()).max(0);
    let period_amount = match state.store.sandbox(&order.sandbox_id).await? {
        Some(record) => crate::billing::resize::period_amount(state, &record, &resize).await,
        None => None,
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
