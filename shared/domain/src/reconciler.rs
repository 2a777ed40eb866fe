//! The reconciler (durable orders, point 8; paid time): one pass drives every in-flight order
//! whose lease has expired — its holder died, timed out, or paused — to a final state, by the same
//! machine as a request ([`crate::billing::order::fulfil`]: settle, resolved on chain when unclear → create
//! or adopt the tagged server → record; or a credit). Safe to run concurrently with requests and
//! with itself: it takes each order's lease with a conditional write first, and skips orders a
//! live attempt holds. Orders are read oldest first, every page of each in-flight state, within
//! at most [`ORDERS_SHARE`] of the pass — those that may be charged first, those that charged
//! nothing yet (`claimed`) in a share of their own ([`CLAIMED_SHARE`]) — and the rest is kept
//! for every paid server's lease that is due ([`crate::servers::leases::drive_due`]: power off
//! at `paidUntil`, delete at `graceEndsAt`, power on after a renewal), then for the paid
//! transfers not final yet, read again within [`FINALITY_SHARE`]
//! ([`crate::billing::finality::follow_due`]: a reversed one takes its server's paid time back,
//! and the leases due are stepped again at once; a node that times out stops the following,
//! never a lease step), and for the refresher ([`crate::servers::refresher::pass`]), which reads the
//! provider's state of the servers that are due and moves their stages, and then for the
//! provider's copies of deleted SSH keys ([`crate::identity::ssh_keys::retire_due`]). (Webhook
//! retries are the delivery queue's: `crate::notifications::webhooks`.) Every time a pass
//! writes is read from the state's clock when it is written.
//!
//! Runs every minute in AWS (an EventBridge schedule on the `reconciler` function), on demand
//! with `make reconcile`, and every 15 s under `make dev`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::billing::order::{self, Outcome};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::{Order, OrderState};

/// In-flight orders older than this are reported as overdue (`OrdersInFlightOverdue`).
pub const OVERDUE_SECONDS: i64 = 600;
/// Orders read per page.
const PAGE: i32 = 100;
/// The share of a pass's time that orders may take; leases and the refresher get the rest.
pub const ORDERS_SHARE: f64 = 0.5;
/// Of the orders' share, what orders that charged nothing yet (`claimed`) have of their own: the
/// orders that may be charged (`settling`, `settled`, `creating`) go first and may take the
/// rest, so that a flood of payments that never pay cannot starve a paid order into a credit,
/// nor the paid ones all claims.
pub const CLAIMED_SHARE: f64 = 0.15;
/// The share of a pass's time that orders and leases may take together.
const LEASES_SHARE: f64 = 0.75;
/// The share of a pass's time that following transfers may take, after the leases' steps: a
/// slow node delays a reversal, never a server's power-off or deletion.
pub const FINALITY_SHARE: f64 = 0.1;

/// The in-flight states, those that may be charged first ([`CLAIMED_SHARE`]).
const BY_PRIORITY: [OrderState; 4] = [
    OrderState::Settling,
    OrderState::Settled,
    OrderState::Creating,
    OrderState::Claimed,
];

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// In-flight orders seen.
    pub examined: usize,
    /// Orders whose lease had expired and that this pass took over.
    pub taken: usize,
    /// Orders a live attempt held (left alone).
    pub held: usize,
    /// Of the orders taken, how many ended in each state (`provisioned`, `credited`, …; an
    /// order still in flight is counted under its state).
    pub outcomes: BTreeMap<String, usize>,
    /// In-flight orders claimed (or, for a redeemed credit, rebound) more than
    /// [`OVERDUE_SECONDS`] ago.
    pub overdue: usize,
    /// Orders whose step failed (the store or an internal error; they are tried again).
    pub errors: usize,
    /// What the pass read of paid transfers not final yet, and reversed.
    pub finality: crate::billing::finality::FinalityReport,
    /// What the pass did to paid servers' leases.
    pub leases: crate::servers::leases::LeaseReport,
    /// What the refresher read and changed.
    pub refresh: crate::servers::refresher::RefreshReport,
    /// What the sweep for servers no record owns found and deleted.
    pub sweep: crate::servers::sweep::SweepReport,
    /// What the removal of deleted SSH keys' provider copies did.
    pub ssh_keys: crate::identity::ssh_keys::RetireReport,
}

/// One pass within `deadline` (see the module docs).
///
/// Errors: a listing of orders, leases or servers due that fails (orders and leases a pass did
/// not reach wait for the next).
pub async fn pass(state: &AppState, deadline: &Deadline) -> Result<Report, ApiError> {
    let mut report = Report::default();
    let total = deadline.remaining();
    // The end of `share` of the pass, measured from its start.
    let until = |share: f64| {
        let spent = total.saturating_sub(deadline.remaining());
        Deadline::after(total.mul_f64(share).saturating_sub(spent))
    };
    for in_flight in BY_PRIORITY {
        let share = match in_flight {
            OrderState::Claimed => ORDERS_SHARE,
            _ => ORDERS_SHARE - CLAIMED_SHARE,
        };
        Box::pin(drive_state(state, in_flight, &until(share), &mut report)).await?;
    }
    // Lease steps first: power off at `paidUntil`, delete at `graceEndsAt`, whatever the node.
    let leases_until = until(LEASES_SHARE);
    let leases = crate::servers::leases::drive_due(state, &leases_until);
    report.leases = Box::pin(leases).await?;
    // Then the transfers not final yet, in a share of their own: a reversal takes a lease's
    // paid time back, and its step follows at once (else on the next pass). Boxed: a
    // reversal's writes are a large future, and the pass holds every step's.
    let finality_until = until(LEASES_SHARE + FINALITY_SHARE);
    report.finality =
        Box::pin(crate::billing::finality::follow_due(state, &finality_until)).await?;
    if report.finality.reversed > 0 {
        let reversed = Box::pin(crate::servers::leases::drive_due(state, &finality_until));
        let reversed = reversed.await?;
        report.leases = std::mem::take(&mut report.leases).and(reversed);
    }
    report.refresh = crate::servers::refresher::pass(state, deadline).await?;
    report.sweep = crate::servers::sweep::pass(state, deadline).await?;
    report.ssh_keys = crate::identity::ssh_keys::retire_due(state, deadline).await?;
    crate::metrics::emit("OrdersInFlightOverdue", report.overdue as f64, "Count", &[]);
    crate::metrics::emit("OrdersReconciled", report.taken as f64, "Count", &[]);
    tracing::info!(?report, "reconciler pass");
    Ok(report)
}

/// Drives the orders in state `in_flight` past their lease, oldest first, every page, while
/// `until` has room for a facilitator call.
async fn drive_state(
    state: &AppState,
    in_flight: OrderState,
    until: &Deadline,
    report: &mut Report,
) -> Result<(), ApiError> {
    let mut cursor: Option<String> = None;
    loop {
        let page = order::oldest_in_state(state, in_flight, PAGE, cursor.as_deref()).await?;
        for order in page.items {
            if !until.allows(state.config.payments.facilitator_timeout) {
                return Ok(());
            }
            // Within its share: an order never runs into the next one's time.
            drive(state, order, until, report).await;
        }
        match page.next_cursor {
            Some(next) if until.allows(std::time::Duration::from_secs(1)) => cursor = Some(next),
            _ => return Ok(()),
        }
    }
}

async fn drive(state: &AppState, order: Order, deadline: &Deadline, report: &mut Report) {
    report.examined += 1;
    let now = state.clock.now();
    let bound = order.bound_at.unix();
    if now - bound > OVERDUE_SECONDS {
        report.overdue += 1;
        tracing::error!(payment = %order.id, order = order.order_id, state = %order.state,
            "order in flight for more than 10 minutes");
    }
    if order.lease_until >= now {
        report.held += 1;
        return;
    }
    let id = order.id.clone();
    let held = match order::ledger::take(state, &order, deadline).await {
        Ok(Some(held)) => held,
        Ok(None) => {
            report.held += 1;
            return;
        }
        Err(err) => {
            report.errors += 1;
            tracing::error!(payment = %id, error = %err, "cannot take the order over");
            return;
        }
    };
    report.taken += 1;
    let result = order::fulfil(state, held, deadline).await;
    let state_now = match &result {
        Ok(Outcome::Created { .. }) => OrderState::Provisioned.as_str().to_owned(),
        Ok(Outcome::Accepted { payment, .. }) => payment.state.as_str().to_owned(),
        Err(_) => match crate::billing::payments::by_key(state, &id).await {
            Ok(order) => order.state.as_str().to_owned(),
            Err(_) => "unknown".into(),
        },
    };
    if let Err(err) = &result
        && err.status().is_server_error()
    {
        report.errors += 1;
        tracing::error!(payment = %id, error = %err, "reconciling the order failed");
    }
    *report.outcomes.entry(state_now).or_default() += 1;
}
