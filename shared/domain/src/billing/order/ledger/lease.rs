//! The ledger's writes that move a server's lease with its order, in one transaction: a
//! renewal's paid time added ([`extend`]), a reversed payment's taken back ([`reverse`]).

use super::advance;
use crate::billing::order::machine::State;
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::notifications::events;
use crate::state::AppState;
use crate::store::events::{EventData, LeaseRenewed, PaymentReversed};
use crate::store::payments::{Advance, Order, OrderChanges, OrderKind, SandboxStatus, SideWrites};

/// Extends the lease of a renewal's server, in one transaction with the order's `provisioned`
/// state, conditional on the lease as read (a racing expiry step or deletion makes it read
/// again); the order as written when done. A server being, or already, powered off is powered on
/// right after (or by the reconciler, which the lease asks).
///
/// Errors: the store's; an order whose request is not a renewal's.
pub async fn extend(
    state: &AppState,
    order: &Order,
) -> Result<(crate::billing::order::machine::Extension, Option<Order>), ApiError> {
    use crate::billing::order::machine::Extension;
    let request: crate::billing::order::Renewal = serde_json::from_str(&order.request)
        .map_err(|e| ApiError::Internal(format!("order {}: request: {e}", order.order_id)))?;
    for _ in 0..3 {
        let now = state.clock.now();
        let record = state.store.sandbox(&order.sandbox_id).await?;
        let renewed = record
            .as_ref()
            .and_then(|r| r.lease.as_ref())
            .and_then(|lease| crate::servers::leases::renewed(state, lease, request.periods, now));
        let (Some(record), Some((lease, due))) = (record, renewed) else {
            let why = "the server was deleted before the renewal applied";
            return Ok((Extension::Gone(why.into()), None));
        };
        // Priced on another plan than the server's now (a resize since, or under way): the
        // periods would run on a plan they did not pay for.
        if let Some(priced) = &request.plan
            && record.plan.as_ref().is_some_and(|plan| plan != priced)
        {
            let why = format!(
                "the server moved to plan `{}` after the renewal was priced on `{priced}`",
                record.plan.as_deref().unwrap_or_default()
            );
            return Ok((Extension::Gone(why), None));
        }
        let power_on = lease.power_on;
        let at = state.clock.timestamp();
        let event_at = state.clock.event_time();
        let (changes, side) = extension(order, &request, (&record, event_at), lease, due);
        tracing::info!(
            server = request.server_id,
            periods = request.periods,
            "extending the lease"
        );
        match state
            .store
            .advance_order(order, State::Provisioned, changes, side, 0, at)
            .await?
        {
            Advance::Done(done) => {
                crate::metrics::order_transition(order.state.as_str(), "provisioned");
                if power_on
                    && let Ok(Some(record)) = state.store.sandbox(&order.sandbox_id).await
                    && let Err(err) = crate::servers::leases::power_on(state, &record).await
                {
                    tracing::warn!(error = %err, "power-on after renewal failed; retried later");
                }
                return Ok((Extension::Done, Some(*done)));
            }
            Advance::Blocked => continue,
            Advance::Lost(_) => {
                return Ok((
                    Extension::Busy("another attempt moved the order".into()),
                    None,
                ));
            }
        }
    }
    Ok((
        Extension::Busy("the lease kept changing; the renewal completes in the background".into()),
        None,
    ))
}

/// Reverses held `order` (`provisioned` or `credited`), whose transfer the chain no longer
/// holds ([`crate::billing::finality`]), for `reason`: in one transaction, the order
/// `reversed` — no longer followed, no longer redeemable — with its `payment.reversed`, and, for
/// a server it paid, its lease with the paid time taken back
/// ([`crate::servers::leases::taken_back`]: a period for a new server, the periods of a
/// renewal, what a resize's amount bought of its bigger plan at the price it recorded),
/// conditional on the lease as read; and its key's reserved spend given back (nothing was
/// charged after all: [`crate::ratelimit::spend`]). The order as written, or `None` when
/// another attempt (or a lease step) moved first: the next pass reads both again.
///
/// Errors: the store's; the catalogue's, for a resize whose order recorded no price (tried
/// again by the next pass).
pub async fn reverse(
    state: &AppState,
    order: &Order,
    reason: &str,
    deadline: &Deadline,
) -> Result<Option<Order>, ApiError> {
    let data = EventData::PaymentReversed(PaymentReversed {
        payment: events::payment_facts(order),
        transaction: order.transaction.clone(),
        reason: reason.to_owned(),
    });
    let changes = OrderChanges {
        reason: Some(reason.to_owned()),
        unfollow: true,
        outbox: Some(events::one(
            events::of_payment(order, state.clock.event_time()),
            data,
        )),
        ..OrderChanges::default()
    };
    let mut side = SideWrites {
        release: state.holds(crate::checkpoint::Guard::SpendGivenBack),
        ..SideWrites::default()
    };
    if order.state == State::Provisioned
        && state.holds(crate::checkpoint::Guard::TimeTakenBack)
        && let Some(record) = state.store.sandbox(&order.sandbox_id).await?
        && let Some(lease) = &record.lease
    {
        let period = state.config.payments.period.as_secs() as i64;
        let seconds = match order.kind {
            OrderKind::Renewal => {
                serde_json::from_str::<crate::billing::order::Renewal>(&order.request)
                    .map_or(1, |r| i64::from(r.periods))
                    * period
            }
            OrderKind::Provision => period,
            OrderKind::Resize => super::resize::taken_back(state, order, &record).await?,
        };
        let now = state.clock.now();
        let grace = state.config.payments.grace.as_secs() as i64;
        if let Some((taken, due)) = crate::servers::leases::taken_back(lease, seconds, grace, now) {
            side.sandbox_status = Some(SandboxStatus {
                sandbox_id: record.id.clone(),
                status: record.status.clone(),
                lease: Some(crate::store::sandboxes::LeaseChange {
                    read_seq: Some(lease.seq),
                    lease: taken,
                    due: Some(due),
                }),
                ..SandboxStatus::default()
            });
        }
    }
    tracing::error!(payment = %order.id, order = order.order_id, from = %order.state, reason,
        "reversing the payment: its transfer is gone");
    advance(state, order, State::Reversed, changes, side, deadline).await
}

/// The writes of a renewal at `at` that extends `record`'s lease to `lease` (due again at
/// `due`): the order's answer (`{serverId, periods, amount, paidUntil, graceEndsAt}`), the lease,
/// conditional on the lease as read, and the server's `lease.renewed`.
fn extension(
    order: &Order,
    request: &crate::billing::order::Renewal,
    (record, at): (
        &crate::store::sandboxes::SandboxRecord,
        crate::time::EventTime,
    ),
    lease: crate::store::sandboxes::Lease,
    due: i64,
) -> (OrderChanges, SideWrites) {
    let result = serde_json::json!({
        "serverId": request.server_id,
        "periods": request.periods,
        "amount": order.amount,
        "paidUntil": lease.paid_until,
        "graceEndsAt": lease.grace_ends_at,
    });
    let side = SideWrites {
        sandbox_status: Some(SandboxStatus {
            sandbox_id: record.id.clone(),
            status: record.status.clone(),
            outbox: Some(events::one(
                events::of_server(record, at),
                EventData::LeaseRenewed(LeaseRenewed {
                    server: events::server_facts(record),
                    periods: request.periods,
                    amount: order.amount.clone(),
                    paid_until: lease.paid_until,
                    grace_ends_at: lease.grace_ends_at,
                }),
            )),
            lease: Some(crate::store::sandboxes::LeaseChange {
                read_seq: record.lease.as_ref().map(|l| l.seq),
                lease,
                due: Some(due),
            }),
            ..SandboxStatus::default()
        }),
        ..SideWrites::default()
    };
    let changes = OrderChanges {
        server_id: Some(request.server_id),
        server: Some(result.to_string()),
        ..OrderChanges::default()
    };
    (changes, side)
}
