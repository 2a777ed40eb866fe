//! The ledger's writes of an order (design brief §3, durable orders), as verbs: [`claim`],
//! [`take`], [`release`], [`record`] (the write of a machine transition), [`redeem`],
//! [`credit_undelivered`], [`refund`]; and those that move a server's lease with the order
//! ([`lease`]): [`extend`], [`reverse`]. Each is one conditional transaction on the order's state,
//! seq and holder ([`crate::store::payments`]), with the items that change with it (the sandbox,
//! the ownership, the key's reserved spend), logged before the side effect it announces.
//!
//! Every lease and time is read from [`crate::clock::Clock`] when it is written, and a lease
//! outlives its holder's invocation: `max(ORDER_LEASE_SECONDS, deadline left + margin)`, so that
//! a replaying client never takes an order over from a live attempt (a reconciler pass may run
//! 120 s).

use std::time::Duration;

use serde_json::Value;

use super::Binding;
use super::machine::{State, Write};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::notifications::events;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::events::{EventData, PaymentCredited, PaymentRefunded};
use crate::store::events::{PaymentSettled, ServerProvisioned};
use crate::store::payments::{
    Advance, Claim, Order, OrderChanges, OrderKind, Rebind, SandboxStatus, SideWrites,
};
use crate::store::sandboxes::{PlanClass, ServerOwnership, Status, WatchChange};
use crate::upstream::ServerView;
use crate::x402::SettleResponse;
use crate::x402::verify::VerifiedPayment;

mod lease;
mod resize;
pub use lease::{extend, reverse};
pub use resize::{Hold, hold};

/// Kept beyond the invocation's deadline in every lease.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// A new attempt id: `att_<32 hex>`.
fn new_attempt() -> String {
    crate::ids::new("att_")
}

/// How long an order that ended with nothing charged (`rejected`, `expired`) is kept past its
/// authorization's `validBefore`, seconds (7 days): its owner sees why in `GET /api/payments`,
/// then the table's TTL removes it. No payment can be presented again by then: its window
/// closed long before.
pub const UNPAID_KEPT_SECONDS: i64 = 7 * 24 * 3600;

/// Until when an attempt that has `deadline` left holds an order it writes now.
fn lease_until(state: &AppState, deadline: &Deadline) -> i64 {
    let hold = state
        .config
        .payments
        .lease
        .max(deadline.remaining() + LEASE_MARGIN);
    state.clock.now() + hold.as_secs().max(1) as i64
}

/// Claims a verified payment for `principal`'s `binding`: writes the order, held by a new
/// attempt, with its new sandbox (`provisioning`) when it provisions one, and reserves its
/// amount (and its new server) against the paying key's policy in the same transaction
/// ([`crate::ratelimit::spend::reservation`]), and marks its owner's approval used when the
/// request carries one; [`Claim::OverLimit`] when a concurrent request used what the key had
/// left (or the approval, used or lapsed meanwhile).
///
/// Errors: 403 `policy-violation` when the amount alone is over a spend limit; the store's.
pub async fn claim(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    verified: &VerifiedPayment,
    class: PlanClass,
    deadline: &Deadline,
) -> Result<Claim, ApiError> {
    let at = state.clock.timestamp();
    let id = crate::x402::PaymentKey::of(
        verified.network,
        &verified.asset,
        &verified.payer,
        &verified.nonce,
    );
    let (sandbox_id, sandbox) = binding.sandbox(&principal.owner, at, class, &id);
    let mut reservation = crate::ratelimit::spend::reservation(
        principal,
        verified.value,
        sandbox.as_ref().map(|s| s.id.as_str()),
        state.clock.datetime(),
    )?;
    if let Some(held) = reservation.as_mut()
        && !state.holds(crate::checkpoint::Guard::LimitHolds)
    {
        (held.daily_limit, held.monthly_limit) = (None, None);
    }
    let spend = reservation
        .as_ref()
        .filter(|r| r.amount > 0)
        .map(|r| r.hold.clone());
    let order = new_order(
        state,
        principal,
        binding,
        verified,
        (id, sandbox_id),
        spend,
        deadline,
    );
    tracing::info!(
        payment = %order.id,
        order = order.order_id,
        sandbox = order.sandbox_id,
        "claiming the payment"
    );
    let approval = principal
        .approval
        .as_ref()
        .zip(principal.key_id())
        .map(|(grant, key_id)| crate::store::approvals::ApprovalUse {
            id: grant.id.clone(),
            key_id: key_id.to_owned(),
            digest: grant.digest.clone(),
            now: state.clock.now(),
            at,
            order_id: order.order_id.clone(),
        });
    let claim = state
        .store
        .claim_order(
            &order,
            sandbox.as_ref(),
            reservation.as_ref(),
            approval.as_ref(),
        )
        .await?;
    if let Claim::New(order) = &claim {
        crate::metrics::order_transition("new", order.state.as_str());
    }
    Ok(claim)
}

/// A claimed order, held by a new attempt: the verified payment bound to `binding`, its
/// payment key and sandbox `ids`, and where its spend was reserved.
fn new_order(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    verified: &VerifiedPayment,
    (id, sandbox_id): (crate::x402::PaymentKey, String),
    spend: Option<crate::store::usage::SpendHold>,
    deadline: &Deadline,
) -> Order {
    let at = state.clock.timestamp();
    let valid_before = verified.payload["payload"]["authorization"]["validBefore"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Order {
        id,
        order_id: crate::ids::new(crate::ids::ORDER),
        state: State::Claimed,
        kind: binding.kind,
        seq: 0,
        event_seq: 0,
        attempt: new_attempt(),
        lease_until: lease_until(state, deadline),
        version: verified.version,
        network: verified.network.caip2().into(),
        amount: verified.value.to_string(),
        payer: verified.payer.clone(),
        nonce: verified.nonce.clone(),
        valid_before,
        owner: principal.owner.clone(),
        project_id: binding.project,
        fingerprint: super::fingerprint(&principal.owner, binding.project, binding.request),
        request: binding.request.to_owned(),
        payload: verified.payload.to_string(),
        requirements: verified.requirements.to_string(),
        sandbox_id,
        bound_at: at,
        create_attempts: 0,
        create_sent_at: 0,
        undelivered: 0,
        refused_at: None,
        scanned_to: None,
        reason: None,
        settle_response: None,
        transaction: None,
        server_id: None,
        server: None,
        refund: None,
        spend,
        remainder: None,
        created_at: at,
        updated_at: at,
    }
}

/// Takes over an in-flight or credited `order` (as read) whose lease has expired, for a new
/// attempt that has `deadline` left; `None` when a live attempt holds it or it moved.
pub async fn take(
    state: &AppState,
    order: &Order,
    deadline: &Deadline,
) -> Result<Option<Order>, ApiError> {
    let at = state.clock.timestamp();
    let lease = lease_until(state, deadline);
    let now = state.clock.now();
    match state
        .store
        .take_order(order, &new_attempt(), lease, now, at)
        .await?
    {
        Advance::Done(order) => {
            tracing::info!(payment = %order.id, order = order.order_id, state = %order.state,
                "took over the order");
            Ok(Some(*order))
        }
        Advance::Lost(_) | Advance::Blocked => Ok(None),
    }
}

/// Moves a held `order` to `to`, keeping a lease for in-flight states and dropping it (0) for
/// final ones. `None` when another attempt moved the order first, or an item that goes with it
/// moved ([`Advance::Blocked`]): this attempt must stop touching it.
async fn advance(
    state: &AppState,
    order: &Order,
    to: State,
    changes: OrderChanges,
    side: SideWrites,
    deadline: &Deadline,
) -> Result<Option<Order>, ApiError> {
    let lease = if to.in_flight() {
        lease_until(state, deadline)
    } else {
        0
    };
    let at = state.clock.timestamp();
    match state
        .store
        .advance_order(order, to, changes, side, lease, at)
        .await
    {
        Ok(Advance::Done(next)) => {
            crate::metrics::order_transition(order.state.as_str(), to.as_str());
            tracing::info!(payment = %order.id, order = order.order_id, from = %order.state,
                to = %to, "order moved");
            Ok(Some(*next))
        }
        Ok(Advance::Blocked) => {
            tracing::warn!(payment = %order.id, "an item that goes with the order moved");
            Ok(None)
        }
        Ok(Advance::Lost(now)) => {
            tracing::warn!(payment = %order.id, order = order.order_id,
                now = ?now.as_ref().map(|o| o.state), "another attempt moved the order first");
            Ok(None)
        }
        Err(StoreError::ConditionFailed) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Releases this attempt's lease on an in-flight `order` so that a retry or the reconciler can
/// go on at once (best effort: an expired lease does the same a little later).
pub async fn release(state: &AppState, order: &Order) {
    let at = state.clock.timestamp();
    let (changes, side) = (OrderChanges::default(), SideWrites::default());
    let result = state
        .store
        .advance_order(order, order.state, changes, side, 0, at)
        .await;
    if let Err(err) = result {
        tracing::warn!(payment = %order.id, error = %err, "could not release the order's lease");
    }
}

/// A settle response for `order`'s settlement in `transaction`, as recorded and answered (the
/// `PAYMENT-RESPONSE` header, an MCP result's `x402/payment-response`): its payer in EIP-55, as
/// every answer writes an address.
fn settlement(order: &Order, transaction: &str) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        transaction: transaction.to_owned(),
        network: order.network.clone(),
        payer: Some(crate::address::Checksummed::from(order.payer.as_str()).to_string()),
    }
}

/// `order` as `write` would leave it, as far as an answer about its money goes: a settlement
/// (the chain showed our transfer) is charged, with its payment response, even when its write
/// did not land; any other write leaves the order as it was read.
pub fn as_written(order: &Order, write: &Write) -> Order {
    match write {
        Write::Settled(tx) => Order {
            state: State::Settled,
            settle_response: serde_json::to_string(&settlement(order, tx)).ok(),
            transaction: Some(tx.clone()).filter(|t| !t.is_empty()),
            ..order.clone()
        },
        _ => order.clone(),
    }
}

/// The sandbox status an ended order gives its new server's sandbox; a renewal's server is never
/// touched by its order's refusal or credit.
fn sandbox_status(order: &Order, status: Status) -> Option<SandboxStatus> {
    (order.kind == OrderKind::Provision).then(|| SandboxStatus {
        sandbox_id: order.sandbox_id.clone(),
        status,
        ..SandboxStatus::default()
    })
}

/// Writes the ledger side of a machine transition of held `order` to `to` (see
/// [`Write`]); the order as written, or `None` when another attempt moved it first.
///
/// Errors: the store's; a server object without an id (`Provisioned`).
pub async fn record(
    state: &AppState,
    order: &Order,
    to: State,
    write: &Write,
    deadline: &Deadline,
) -> Result<Option<Order>, ApiError> {
    let mut changes = OrderChanges::default();
    let mut side = SideWrites::default();
    match write {
        Write::None if to == order.state => return Ok(Some(order.clone())),
        Write::None | Write::Settling => {}
        Write::Transaction(tx) => changes.transaction = Some(tx.clone()),
        Write::Refusal(reason) => {
            changes.reason = Some(reason.clone());
            changes.refused_at = Some(state.clock.now());
        }
        Write::Settled(tx) => {
            changes.settle_response = serde_json::to_string(&settlement(order, tx)).ok();
            changes.transaction = Some(tx.clone()).filter(|t| !t.is_empty());
            // Followed from now until the chain calls the transfer final
            // (`crate::billing::finality`, which reads it again at its own pace).
            changes.follow = Some(state.clock.now());
            let data = EventData::PaymentSettled(PaymentSettled {
                payment: events::payment_facts(order),
                transaction: changes.transaction.clone(),
            });
            let outbox = events::of_payment(order, state.clock.event_time());
            changes.outbox = Some(events::one(outbox, data));
        }
        Write::Rejected(reason) | Write::Expired(reason) => {
            // An expiry after the facilitator refused keeps its reason (what the payer must fix).
            let refused = matches!(write, Write::Expired(_)) && order.reason.is_some();
            changes.reason = Some(reason.clone()).filter(|_| !refused);
            // Nothing charged: the record lapses a while after the authorization's window.
            let window_end = (order.valid_before as i64).max(state.clock.now());
            changes.expires = Some(window_end + UNPAID_KEPT_SECONDS);
            side.sandbox_status = sandbox_status(order, Status::Cancelled);
            // Nothing charged: the key's reserved spend comes back.
            side.release = true;
        }
        Write::Creating => {
            changes.create_attempts = Some(order.create_attempts + 1);
            changes.create_sent_at = Some(state.clock.now());
        }
        Write::CreateUndone => changes.create_sent_at = Some(0),
        Write::Provisioned(server) if order.kind == OrderKind::Resize => {
            return resize::resized(state, order, server).await;
        }
        Write::Provisioned(server) => return provisioned(state, order, server, deadline).await,
        Write::Credited(reason) => {
            tracing::warn!(
                payment = %order.id,
                order = order.order_id,
                reason,
                "the order becomes a credit"
            );
            changes.reason = Some(reason.clone());
            side.sandbox_status = match order.kind {
                // The plan the server is on again (no upgrade can land any more).
                OrderKind::Resize => resize::released(state, order).await?,
                _ => sandbox_status(order, Status::Credited),
            };
            let data = EventData::PaymentCredited(PaymentCredited {
                payment: events::payment_facts(order),
                reason: reason.clone(),
            });
            let outbox = events::of_payment(order, state.clock.event_time());
            changes.outbox = Some(events::one(outbox, data));
        }
    }
    let written = advance(state, order, to, changes, side, deadline).await?;
    if written.is_some() && refused(order, write) {
        let (owner, payer) = (order.owner.as_str(), order.payer.as_str());
        Box::pin(crate::ratelimit::slots::cool_down(state, owner, payer)).await;
    }
    Ok(written)
}

/// Whether `write` records the facilitator's refusal of `order`'s checked payment, or its end
/// unpaid after one: verify refused it (a refusal while `claimed`: no settle was sent), the
/// authorization was used elsewhere or cancelled, or it expired after a refusal. Its owner and
/// payer are kept off the paid pool for a while ([`crate::ratelimit::slots::cool_down`]).
fn refused(order: &Order, write: &Write) -> bool {
    match write {
        Write::Refusal(_) => order.state == State::Claimed,
        Write::Rejected(_) => true,
        Write::Expired(_) => order.reason.is_some(),
        _ => false,
    }
}

/// Records a created (or adopted) server for its order: the ownership, the sandbox and the
/// order's `provisioned` state in one transaction. The provider's answer is stored without its
/// credentials; the order returned keeps them for this attempt's answer.
async fn provisioned(
    state: &AppState,
    order: &Order,
    server: &Value,
    deadline: &Deadline,
) -> Result<Option<Order>, ApiError> {
    let view = ServerView::of(server)?;
    tracing::info!(server = view.id, "recording the server as the owner's");
    let now = state.clock.now();
    let at = state.clock.timestamp();
    let lease = crate::servers::leases::first(state, now);
    let mut server = server.clone();
    crate::servers::leases::annotate(&mut server, &lease.lease, now);
    let side = SideWrites {
        ownership: Some(ServerOwnership {
            server_id: view.id,
            owner: order.owner.clone(),
            sandbox_id: order.sandbox_id.clone(),
            project_id: order.project_id,
            created_at: at,
        }),
        sandbox_status: Some(SandboxStatus {
            sandbox_id: order.sandbox_id.clone(),
            status: Status::from(view.status_or_state()),
            server_id: Some(view.id),
            project_id: Some(order.project_id),
            hostname: view.hostname.clone(),
            plan: None,
            outbox: Some(events::one(
                events::of_new_server(order, state.clock.event_time()),
                EventData::ServerProvisioned(ServerProvisioned {
                    sandbox_id: order.sandbox_id.clone(),
                    server_id: view.id,
                    hostname: view.hostname.clone(),
                    project_id: Some(order.project_id),
                    payment: Some(order.id.to_string()),
                    paid_until: Some(lease.lease.paid_until),
                    free: false,
                }),
            )),
            lease: Some(lease),
            // The server as created, due to the refresher at once (stages: waiting).
            watch: Some(WatchChange {
                watch: crate::servers::stages::created(&server, order.bound_at, at),
                read_seq: None,
                due: Some(now),
            }),
            unwatch: false,
            authorized_keys: None,
            resizing: None,
        }),
        ..SideWrites::default()
    };
    let changes = OrderChanges {
        server_id: Some(view.id),
        server: serde_json::to_string(&crate::upstream::without_credentials(server.clone())).ok(),
        ..OrderChanges::default()
    };
    let written = advance(state, order, State::Provisioned, changes, side, deadline).await?;
    Ok(written.map(|mut recorded| {
        recorded.server = serde_json::to_string(&server).ok();
        recorded
    }))
}

/// Makes the provisioned order `payment` a credit of its owner because its server never became
/// usable (`reason`; the server was deleted): the refresher's deadline. A no-op for an order
/// that is not a provisioning in state `provisioned` (already credited, or a renewal).
///
/// Errors: the store's; 409 when another attempt holds the order (the next pass retries).
pub async fn credit_undelivered(
    state: &AppState,
    payment: &crate::x402::PaymentKey,
    reason: &str,
) -> Result<(), ApiError> {
    let Some(order) = state.store.order(payment).await? else {
        return Ok(());
    };
    if order.state != State::Provisioned || order.kind != OrderKind::Provision {
        return Ok(());
    }
    let deadline = Deadline::after(Duration::from_secs(10));
    let held = take(state, &order, &deadline)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {payment} is held by an attempt")))?;
    tracing::warn!(
        %payment,
        reason,
        "the order's server was undelivered: a credit"
    );
    let data = EventData::PaymentCredited(PaymentCredited {
        payment: events::payment_facts(&held),
        reason: reason.to_owned(),
    });
    let changes = OrderChanges {
        reason: Some(reason.to_owned()),
        undelivered: Some(held.undelivered + 1),
        outbox: Some(events::one(
            events::of_payment(&held, state.clock.event_time()),
            data,
        )),
        ..OrderChanges::default()
    };
    let side = SideWrites {
        sandbox_status: sandbox_status(&held, Status::Credited),
        ..SideWrites::default()
    };
    advance(state, &held, State::Credited, changes, side, &deadline).await?;
    Ok(())
}

/// What a redemption costs, and where what it leaves goes.
#[derive(Debug, Clone)]
pub struct Redemption {
    /// The corrected request's price (USDC atomic units), and its plan's class (a new server's
    /// deployment deadline).
    pub price: (u128, PlanClass),
    /// The key of the credit that keeps what is left, if anything is: the payment's next
    /// remainder ([`super::Chain`]); `None` when the payment is split as far as it goes
    /// ([`crate::billing::payments::REMAINDERS`]), and only a redemption that leaves nothing
    /// is taken.
    pub remainder: Option<crate::x402::PaymentKey>,
}

/// Redeems `principal`'s credit `order` for a corrected request, `binding`, at `redemption`'s
/// price: rebinds the order to it (kind, fingerprint, request, project, sandbox) and makes it
/// `settled` again, in one transaction, held by a new attempt; what is left becomes a credit of
/// its own under `redemption.remainder`, linked from the order (before any remainder it had).
///
/// Errors: 409 when the request costs more than was paid, or less when the payment is split as
/// far as it goes, or the credit was redeemed (or is being redeemed) by another request
/// meanwhile; 403 `policy-violation` when its new server is
/// over the redeeming key's `maxActiveServers`.
pub async fn redeem(
    state: &AppState,
    principal: &Principal,
    order: &Order,
    binding: &Binding<'_>,
    redemption: Redemption,
    deadline: &Deadline,
) -> Result<Order, ApiError> {
    let (amount, class) = redemption.price;
    let remainder_key = what_is_left(order, amount, redemption.remainder)?;
    let busy = || {
        ApiError::Conflict(format!(
            "the credit of payment {} is being redeemed by another request",
            order.id
        ))
    };
    let held = take(state, order, deadline).await?.ok_or_else(busy)?;
    let at = state.clock.timestamp();
    let (sandbox_id, new_sandbox) = binding.sandbox(&principal.owner, at, class, &order.id);
    let changes = OrderChanges {
        create_attempts: Some(0),
        create_sent_at: Some(0),
        rebind: Some(Rebind {
            fingerprint: super::fingerprint(&principal.owner, binding.project, binding.request),
            request: binding.request.to_owned(),
            project_id: binding.project,
            sandbox_id,
            bound_at: at,
            kind: binding.kind,
        }),
        ..OrderChanges::default()
    };
    // A new server counts against the redeeming key (its spend was counted when it was paid).
    let new_server = new_sandbox.as_ref().map(|s| s.id.clone());
    let reserve = crate::ratelimit::spend::reservation(
        principal,
        0,
        new_server.as_deref(),
        state.clock.datetime(),
    )?;
    let remainder = remainder_key.and_then(|key| remainder(order, amount, key, at));
    let changes = OrderChanges {
        split: remainder
            .as_ref()
            .map(|r| (amount.to_string(), r.id.clone())),
        ..changes
    };
    let side = SideWrites {
        // The credit's own sandbox, when it was a server that never came, says where it went.
        sandbox_status: sandbox_status(order, Status::Redeemed),
        new_sandbox,
        reserve,
        remainder: remainder.filter(|_| state.holds(crate::checkpoint::Guard::RemainderKept)),
        ..SideWrites::default()
    };
    tracing::info!(
        payment = %order.id,
        order = order.order_id,
        "redeeming the credit"
    );
    if let Some(order) = advance(state, &held, State::Settled, changes, side, deadline).await? {
        return Ok(order);
    }
    Err(not_redeemed(state, principal, &held, new_server.is_some())
        .await?
        .unwrap_or_else(busy))
}

/// Where what a redemption of credit `order` at `amount` (USDC atomic units) leaves goes: the
/// key `next` of its payment's next remainder, or `None` when nothing is left.
///
/// Errors: 409 when the request costs more than the credit, or less when the payment is split
/// as far as it goes (`next` is `None`: [`crate::billing::payments::REMAINDERS`]).
fn what_is_left(
    order: &Order,
    amount: u128,
    next: Option<crate::x402::PaymentKey>,
) -> Result<Option<crate::x402::PaymentKey>, ApiError> {
    let paid: u128 = order.amount.parse().unwrap_or(0);
    if amount > paid {
        return Err(ApiError::Conflict(format!(
            "the credit of payment {} is {paid} USDC atomic units; this request costs {amount}",
            order.id
        )));
    }
    match next {
        _ if amount == paid => Ok(None),
        Some(key) => Ok(Some(key)),
        None => Err(ApiError::Conflict(format!(
            "payment {} is split into {} orders already, the most one payment is: this credit \
            of {paid} USDC atomic units is redeemed only by a request costing exactly that, \
            else refunded (ask the operator); this request costs {amount}",
            order.id,
            crate::billing::payments::REMAINDERS,
        ))),
    }
}

/// Why the redemption of credit `held` (as taken) was not written: the key's server limit
/// (`new`: it would have made a server), when the credit is still as taken — given back at
/// once —, or `None` when another attempt moved it.
///
/// Errors: 500 when the store fails.
async fn not_redeemed(
    state: &AppState,
    principal: &Principal,
    held: &Order,
    new: bool,
) -> Result<Option<ApiError>, ApiError> {
    match state.store.order(&held.id).await? {
        Some(now) if now.seq == held.seq && now.attempt == held.attempt => {
            release(state, &now).await;
            let at = state.clock.datetime();
            let limit = crate::ratelimit::spend::over_limit(&state.store, principal, 0, new, at);
            Ok(Some(limit.await))
        }
        _ => Ok(None),
    }
}

/// What a redemption of credit `order` at `price` (USDC atomic units) leaves, as a credit of
/// its own, `id`, written `at` (RFC 3339): the same payment, owner, payer and spend, the
/// difference as its amount, bound to no request (the next request that presents the payment and
/// matches no order of the chain redeems it), linked to the remainder `order` had (the chain
/// stays whole), with none of its servers undelivered yet (the payment's count is the chain's
/// sum); `None` when nothing is left.
fn remainder(
    order: &Order,
    price: u128,
    id: crate::x402::PaymentKey,
    at: crate::time::Timestamp,
) -> Option<Order> {
    let paid: u128 = order.amount.parse().ok()?;
    let left = paid.checked_sub(price).filter(|left| *left > 0)?;
    Some(Order {
        id,
        order_id: crate::ids::new(crate::ids::ORDER),
        state: State::Credited,
        seq: 0,
        attempt: String::new(),
        lease_until: 0,
        amount: left.to_string(),
        fingerprint: String::new(),
        request: String::new(),
        create_attempts: 0,
        create_sent_at: 0,
        reason: Some(format!(
            "what is left of payment {} ({paid} USDC atomic units) after it was redeemed for a \
            request costing {price}",
            order.id
        )),
        server_id: None,
        server: None,
        refund: None,
        remainder: order.remainder.clone(),
        undelivered: 0,
        refused_at: None,
        scanned_to: None,
        // A payment of its own: its events start again.
        event_seq: 0,
        created_at: at,
        updated_at: at,
        ..order.clone()
    })
}

/// A credit locked for its refund ([`lock_refund`]).
#[derive(Debug, Clone)]
pub struct RefundLock {
    /// The order as locked (`refunding`): its payer and amount say what to pay.
    pub order: Order,
    /// Whether it was locked before this call (by an earlier run): the payout may already
    /// have been made.
    pub already: bool,
}

impl RefundLock {
    /// What the operator does next: pay, then record — or, for a credit locked by an earlier
    /// run, check whether the payout was made before paying (never twice).
    pub fn next(&self) -> String {
        let order = &self.order;
        if self.already {
            format!(
                "payment {} was already locked for its refund (since {}): if {} USDC atomic \
                units were paid back to {} then, record it with --note <transaction>; pay only \
                if no such payout was made",
                order.id, order.updated_at, order.amount, order.payer
            )
        } else {
            format!(
                "pay {} USDC atomic units back to {}, then run refund again with --note \
                <transaction>",
                order.amount, order.payer
            )
        }
    }
}

/// Operators, before paying a credit back: locks credit `id` (`refunding`) so that it can no
/// longer be redeemed while the payout is made. A credit already locked is answered as it is,
/// marked `already` (an earlier run may have paid it: [`RefundLock::next`] says so).
///
/// Errors: 404 unknown payment; 409 when it is not a credit (a redeemed credit is not one; a
/// refunded one names its refund), or it is being redeemed right now.
pub async fn lock_refund(
    state: &AppState,
    id: &crate::x402::PaymentKey,
) -> Result<RefundLock, ApiError> {
    let order = state
        .store
        .order(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no payment {id}")))?;
    match order.state {
        State::Refunding => {
            return Ok(RefundLock {
                order,
                already: true,
            });
        }
        State::Credited => {}
        State::Refunded => {
            return Err(ApiError::Conflict(format!(
                "payment {id} was already refunded ({}): nothing to pay",
                order.refund.as_deref().unwrap_or("no note")
            )));
        }
        other => {
            return Err(ApiError::Conflict(format!(
                "payment {id} is {other}, not a credit"
            )));
        }
    }
    let deadline = Deadline::after(Duration::from_secs(10));
    let held = take(state, &order, &deadline)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {id} is being redeemed")))?;
    let (changes, side) = (OrderChanges::default(), SideWrites::default());
    let order = advance(state, &held, State::Refunding, changes, side, &deadline)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {id} moved meanwhile")))?;
    Ok(RefundLock {
        order,
        already: false,
    })
}

/// Operators, after paying a locked credit back ([`lock_refund`]): marks it refunded with
/// `note` (the payout's transaction hash, or a note); its key's reserved spend comes back.
///
/// Errors: 404 unknown payment; 409 when it is not locked for a refund (lock it first: a credit
/// paid out unlocked could be redeemed meanwhile).
pub async fn refund(
    state: &AppState,
    id: &crate::x402::PaymentKey,
    note: &str,
) -> Result<Order, ApiError> {
    let order = state
        .store
        .order(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no payment {id}")))?;
    if order.state != State::Refunding {
        return Err(ApiError::Conflict(format!(
            "payment {id} is {}, not locked for a refund: lock it first, then pay, then record",
            order.state
        )));
    }
    let deadline = Deadline::after(Duration::from_secs(10));
    // A final state has no live holder: the write names the attempt that locked it.
    let data = EventData::PaymentRefunded(PaymentRefunded {
        payment: events::payment_facts(&order),
        refund: note.to_owned(),
    });
    let changes = OrderChanges {
        refund: Some(note.to_owned()),
        outbox: Some(events::one(
            events::of_payment(&order, state.clock.event_time()),
            data,
        )),
        ..OrderChanges::default()
    };
    // Paid back: the key's reserved spend comes back too.
    let side = SideWrites {
        release: true,
        ..SideWrites::default()
    };
    advance(state, &order, State::Refunded, changes, side, &deadline)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {id} moved meanwhile")))
}
