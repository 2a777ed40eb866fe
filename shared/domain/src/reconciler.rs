//! The reconciler (durable orders, point 8; paid time): one pass drives every in-flight order
//! whose lease has expired — its holder died, timed out, or paused — to a final state, by the same
//! machine as a request ([`crate::billing::order::fulfil`]: settle, resolved on chain when unclear → create
//! or adopt the tagged server → record; or a credit). Safe to run concurrently with requests and
//! with itself: it takes each order's lease with a conditional write first, and skips orders a
//! live attempt holds. Orders are read oldest first, every page of each in-flight state, within
//! at most [`ORDERS_SHARE`] of the pass: the rest is kept for every paid server's lease that is
//! due ([`crate::servers::leases::drive_due`]: power off at `paidUntil`, delete at `graceEndsAt`, power on
//! after a renewal), after the paid transfers not final yet are read again
//! ([`crate::billing::finality::follow_due`]: a reversed one takes its server's paid time back) and for the refresher ([`crate::servers::refresher::pass`]), which reads the
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
/// The share of a pass's time that orders and leases may take together.
const LEASES_SHARE: f64 = 0.75;

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
    let orders_until = Deadline::after(total.mul_f64(ORDERS_SHARE));
    for in_flight in OrderState::IN_FLIGHT {
        let mut cursor: Option<String> = None;
        loop {
            let page = order::oldest_in_state(state, in_flight, PAGE, cursor.as_deref()).await?;
            for order in page.items {
                if !orders_until.allows(state.config.payments.facilitator_timeout) {
                    break;
                }
                // Within the orders' share: an order never runs into the leases' time.
                drive(state, order, &orders_until, &mut report).await;
            }
            match page.next_cursor {
                Some(next) if orders_until.allows(std::time::Duration::from_secs(1)) => {
                    cursor = Some(next)
                }
                _ => break,
            }
        }
    }
    let leases_until = Deadline::after(
        total
            .mul_f64(LEASES_SHARE)
            .saturating_sub(total.saturating_sub(deadline.remaining())),
    );
    // Transfers first: a reversal takes a lease's paid time back, and its step follows at once.
    // Boxed: a reversal's writes are a large future, and the pass holds every step's.
    report.finality = Box::pin(crate::billing::finality::follow_due(state, &leases_until)).await?;
    report.leases = crate::servers::leases::drive_due(state, &leases_until).await?;
    report.refresh = crate::servers::refresher::pass(state, deadline).await?;
    report.sweep = crate::servers::sweep::pass(state, deadline).await?;
    report.ssh_keys = crate::identity::ssh_keys::retire_due(state, deadline).await?;
    crate::metrics::emit("OrdersInFlightOverdue", report.overdue as f64, "Count", &[]);
    crate::metrics::emit("OrdersReconciled", report.taken as f64, "Count", &[]);
    tracing::info!(?report, "reconciler pass");
    Ok(report)
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
