//! Paid orders with x402 (design brief §3, Money; durable orders): the ledger step of the paid
//! path, and the settlement of an order. [`crate::servers::provision`] orchestrates; this module
//! never calls back into `servers`.
//!
//! - **Ledger first.** A request carrying a payment is looked up by its payment key
//!   ([`present`], [`lookup`]) before any other check, and [`classify`] says what to do with a
//!   known one: the same owner and request resume it (its outcome, whenever it is asked);
//!   a credit of the same owner may be redeemed by a corrected request ([`redeem`]); anything
//!   else is a 409.
//! - **Claim.** An unknown payment that passes the offline checks ([`verify_offline`]) is
//!   claimed ([`claim`]): the order row records the signed payload, `validBefore`, the request
//!   and a sandbox id fixed now — the key of every create — with a lease held by this attempt.
//! - **Settle** ([`settle`]): `claimed` → verify (advisory; `isValid: false` ends the order) →
//!   the `settling` intent → `/settle` (a pending answer retried once identically). Any unclear
//!   outcome — an answer lost, still pending, a refusal such as "already used" — is resolved on
//!   chain by `authorizationState(payer, nonce)`: used → `settled`; unused and expired (for
//!   [`CHAIN_FINALITY_SECS`]) → `expired` (nothing charged); unused and valid → settled again with
//!   the stored payload. "Already used" from the facilitator is never taken back by a node that
//!   does not show it yet: the order waits for the chain.
//! - **Credits.** A settled order that cannot provision becomes a credit ([`credit`]); its owner
//!   redeems it once with the same payment on a corrected request that costs no more.
//!
//! Every write is conditional on the order's state, seq and holder ([`crate::store::payments`]),
//! and logged before the side effect it announces.

use lambda_http::http::HeaderMap;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::auth::Principal;
use crate::deadline::Deadline;
use crate::error::{ApiError, Charged, PaymentDemand};
use crate::pricing::Quote;
use crate::state::AppState;
use crate::store::payments::{
    Advance, Claim, Order, OrderChanges, OrderKind, OrderState, Rebind, SandboxStatus, SideWrites,
};
use crate::store::sandboxes::{PlanClass, SandboxRecord};
use crate::store::{Page, StoreError};
use crate::x402::facilitator::{PaymentRequest, Settlement};
use crate::x402::verify::{self, PaymentError, VerifiedPayment};
use crate::x402::{
    Network, Offer, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequirements, PaymentRequirementsV1,
    SettleResponse, X_PAYMENT,
};

/// Sandbox status of an order that is not provisioned yet.
pub const SANDBOX_PROVISIONING: &str = "provisioning";
/// Sandbox status of an order that became a credit.
pub const SANDBOX_CREDITED: &str = "credited";
/// Sandbox status of an order that ended without a charge.
pub const SANDBOX_CANCELLED: &str = "cancelled";
/// Sandbox status of a credit redeemed by another request (with its own sandbox).
pub const SANDBOX_REDEEMED: &str = "redeemed";

/// How long after an authorization's `validBefore` an "unused" answer is taken as final (a node
/// may lag behind a transfer mined at the window's end), seconds.
pub const CHAIN_FINALITY_SECS: i64 = 60;

/// Settle calls one attempt makes for one order (the pending retry included).
const SETTLE_CALLS: u32 = 3;

/// A payment as received: an HTTP payment header, or the payment payload of an MCP tool call
/// (x402's MCP transport) in the form its header would have.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentHeader {
    /// 2 for `PAYMENT-SIGNATURE`, 1 for `X-PAYMENT`.
    pub version: u8,
    /// The base64 value.
    pub value: String,
    /// Where it came from, the field of its 400s: `payment-signature`, `x-payment`, or
    /// `_meta.x402/payment`.
    field: &'static str,
}

/// The reason of a 402 to a request that carried no payment (over HTTP).
pub const NO_PAYMENT: &str = "PAYMENT-SIGNATURE or X-PAYMENT header is required";

/// The `_meta` key of an MCP tool call's payment payload (x402 MCP transport).
pub const MCP_PAYMENT: &str = "x402/payment";

impl PaymentHeader {
    /// The payment a request carries: `PAYMENT-SIGNATURE` (v2) if present, else `X-PAYMENT` (v1).
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        [(PAYMENT_SIGNATURE, 2), (X_PAYMENT, 1)]
            .iter()
            .find_map(|(name, version)| {
                headers
                    .get(*name)
                    .and_then(|v| v.to_str().ok())
                    .map(|value| PaymentHeader {
                        version: *version,
                        value: value.to_owned(),
                        field: name,
                    })
            })
    }

    /// The payment of an MCP tool call: the payment payload object of `_meta["x402/payment"]`
    /// (x402 MCP transport, `reference/x402.md` §8), encoded as its version's header carries it
    /// (base64 of the JSON), so that it meets the same checks and the same ledger as over HTTP.
    /// The version is the payload's `x402Version` (1, else 2).
    pub fn from_mcp(payload: &Value) -> Self {
        PaymentHeader {
            version: if payload["x402Version"] == 1 { 1 } else { 2 },
            value: crate::x402::encode_header(payload),
            field: "_meta.x402/payment",
        }
    }

    /// Where the payment came from (`payment-signature`, `x-payment` or `_meta.x402/payment`),
    /// the field of its 400s.
    pub fn name(&self) -> &'static str {
        self.field
    }
}

/// A payment header decoded, with its ledger key when it names one.
#[derive(Debug, Clone)]
pub struct Presented {
    /// The header.
    pub header: PaymentHeader,
    /// The typed payload.
    pub payload: PaymentPayload,
    /// The payload as JSON.
    pub raw: Value,
    /// `<CAIP-2>/<asset>/<payer>/<nonce>`, lowercase, when network, payer and nonce parse.
    pub key: Option<String>,
}

/// Decodes a payment header and computes its ledger key (no other check).
///
/// Errors: 400 naming the header when it is not base64 JSON of a payment payload.
pub fn present(header: PaymentHeader) -> Result<Presented, ApiError> {
    let (payload, raw) = verify::decode(&header.value)
        .map_err(|e| ApiError::invalid(header.name(), e.to_string()))?;
    let network = match (&payload.accepted, &payload.network) {
        (Some(accepted), _) => Network::parse(&accepted.network),
        (None, Some(network)) => Network::parse(network),
        (None, None) => None,
    };
    let authorization = &payload.payload.authorization;
    let payer = authorization.from.parse::<alloy_primitives::Address>().ok();
    let nonce = authorization.nonce.parse::<alloy_primitives::B256>().ok();
    let key = match (network, payer, nonce) {
        (Some(network), Some(payer), Some(nonce)) => Some(payment_key(
            network,
            &network.usdc().to_ascii_lowercase(),
            &format!("{payer:#x}"),
            &format!("{nonce:#x}"),
        )),
        _ => None,
    };
    Ok(Presented {
        header,
        payload,
        raw,
        key,
    })
}

fn payment_key(network: Network, asset: &str, payer: &str, nonce: &str) -> String {
    format!("{}/{asset}/{payer}/{nonce}", network.caip2())
}

/// The recorded order of a presented payment, if any (strongly consistent).
pub async fn lookup(state: &AppState, presented: &Presented) -> Result<Option<Order>, ApiError> {
    match &presented.key {
        Some(key) => Ok(state.store.order(key).await?),
        None => Ok(None),
    }
}

/// What a known payment means for the request that carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Known {
    /// The same owner and request: resume the order, or answer its outcome.
    Same,
    /// A credit of the same owner, presented with another request: redeem it.
    Redeem,
    /// Not this caller's, or already used for another request.
    Conflict(String),
}

/// Classifies a known payment (point 1 of the durable-orders issue).
pub fn classify(order: &Order, owner: &str, fingerprint: &str, presented: &Presented) -> Known {
    let stored: Option<Value> = serde_json::from_str(&order.payload).ok();
    let same_authorization = stored.as_ref().is_some_and(|stored| {
        stored["payload"]["signature"] == presented.raw["payload"]["signature"]
            && stored["payload"]["authorization"] == presented.raw["payload"]["authorization"]
    });
    if !same_authorization || order.owner != owner {
        return Known::Conflict(format!(
            "payment {} was already used for a different request",
            order.id
        ));
    }
    if order.fingerprint == fingerprint {
        return Known::Same;
    }
    match order.state {
        OrderState::Credited => Known::Redeem,
        OrderState::Claimed
        | OrderState::Settling
        | OrderState::Settled
        | OrderState::Creating
        | OrderState::Provisioned
        | OrderState::Rejected
        | OrderState::Expired
        | OrderState::Refunded => Known::Conflict(format!(
            "payment {} was already used for a different request (its order is {})",
            order.id, order.state
        )),
    }
}

/// SHA-256 (hex) of the owner, the project and the request (JSON): what a payment is bound to.
pub fn fingerprint(owner: &str, project: u64, request: &str) -> String {
    hex::encode(Sha256::digest(
        format!("{owner}\n{project}\n{request}").as_bytes(),
    ))
}

/// The offer of this deployment for `quote` at `resource` (the request URL).
///
/// Errors: 503 when no treasury (`X402_PAY_TO`) is configured.
pub fn offer(state: &AppState, quote: &Quote, resource: &str) -> Result<Offer, ApiError> {
    let config = &state.config.payments;
    let pay_to = config.pay_to.clone().ok_or_else(|| {
        ApiError::Unavailable("paid plans are unavailable: payments are not configured".into())
    })?;
    Ok(Offer {
        network: config.network,
        pay_to,
        amount: quote.atomic(),
        max_timeout_seconds: config.max_timeout_seconds,
        resource: resource.to_owned(),
        description: format!(
            "{} paid period(s) of {} h of a `{}` server",
            quote.periods,
            quote.period.hours.normalize(),
            quote.plan
        ),
    })
}

/// A 402 for `offer` at `quote`, with `reason`.
pub fn demand(quote: &Quote, offer: &Offer, reason: &str) -> ApiError {
    ApiError::PaymentRequired(Box::new(PaymentDemand {
        quote: Some(quote.clone()),
        offer: offer.clone(),
        reason: reason.to_owned(),
    }))
}

/// Every offline check of `reference/x402.md` §2.3 against `offer` at unix time `now`.
///
/// Errors: 400 naming the header for a malformed payload; 402 with the x402 reason otherwise.
pub fn verify_offline(
    presented: &Presented,
    quote: &Quote,
    offer: &Offer,
    now: u64,
) -> Result<VerifiedPayment, ApiError> {
    verify::verify(
        presented.header.version,
        &presented.payload,
        presented.raw.clone(),
        offer,
        now,
    )
    .map_err(|e| match e {
        PaymentError::Malformed(m) => ApiError::invalid(presented.header.name(), m),
        PaymentError::Rejected(reason) => demand(quote, offer, reason),
    })
}

/// A new attempt id: `att_<32 hex>`.
fn new_attempt() -> String {
    crate::ids::new("att_")
}

fn lease_until(state: &AppState, now: i64) -> i64 {
    now + state.config.payments.lease.as_secs().max(1) as i64
}

/// What a payment is bound to: the request (JSON) it pays for, in a project, and where the
/// result goes.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// What the order buys.
    pub kind: OrderKind,
    /// The provider project.
    pub project: u64,
    /// The validated request, JSON (its fingerprint binds the payment).
    pub request: &'a str,
    /// The sandbox the order works on.
    pub target: Target<'a>,
}

/// The sandbox an order works on.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A new server: a new sandbox, `provisioning`, whose id every create carries.
    NewServer {
        /// Plan slug.
        plan: &'a str,
        /// Region slug.
        region: &'a str,
    },
    /// An existing server (a renewal): its sandbox.
    Server {
        /// The server's sandbox.
        sandbox_id: &'a str,
    },
}

impl Binding<'_> {
    /// The sandbox id of the order, and the new sandbox record to write with it, if any: a new
    /// server's is `provisioning` (stage `ordered`), its deployment timed from `at` by `class`,
    /// and names the order's `payment` key.
    fn sandbox(
        &self,
        owner: &str,
        at: &str,
        class: PlanClass,
        payment: &str,
    ) -> (String, Option<SandboxRecord>) {
        match self.target {
            Target::Server { sandbox_id } => (sandbox_id.to_owned(), None),
            Target::NewServer { plan, region } => {
                let record = SandboxRecord {
                    id: crate::ids::new(crate::ids::SANDBOX),
                    owner: owner.to_owned(),
                    server_id: None,
                    project_id: Some(self.project),
                    plan: Some(plan.to_owned()),
                    region: Some(region.to_owned()),
                    hostname: None,
                    name: None,
                    metadata: Default::default(),
                    status: SANDBOX_PROVISIONING.into(),
                    created_at: at.to_owned(),
                    updated_at: at.to_owned(),
                    lease: None,
                    watch: Some(crate::stages::ordered(class, at)),
                    payment: Some(payment.to_owned()),
                };
                (record.id.clone(), Some(record))
            }
        }
    }
}

/// Claims a verified payment for `principal`'s `binding`: writes the order, held by a new
/// attempt, with its new sandbox (`provisioning`) when it provisions one, and reserves its
/// amount (and its new server) against the paying key's policy in the same transaction
/// ([`crate::keys::reservation`]); [`Claim::OverLimit`] when a concurrent request used what the
/// key had left.
///
/// Errors: 403 `policy-violation` when the amount alone is over a spend limit; the store's.
pub async fn claim(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    verified: &VerifiedPayment,
    class: PlanClass,
    now: i64,
) -> Result<Claim, ApiError> {
    let at = crate::time::rfc3339(
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or_else(|_| crate::time::now()),
    );
    let id = payment_key(
        verified.network,
        &verified.asset,
        &verified.payer,
        &verified.nonce,
    );
    let (sandbox_id, sandbox) = binding.sandbox(&principal.owner, &at, class, &id);
    let reservation = crate::keys::reservation(
        principal,
        verified.value,
        sandbox.as_ref().map(|s| s.id.as_str()),
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or_else(|_| crate::time::now()),
    )?;
    let valid_before = verified.payload["payload"]["authorization"]["validBefore"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let order = Order {
        id,
        order_id: crate::ids::new("ord_"),
        state: OrderState::Claimed,
        kind: binding.kind,
        seq: 0,
        attempt: new_attempt(),
        lease_until: lease_until(state, now),
        version: verified.version,
        network: verified.network.caip2().into(),
        amount: verified.value.to_string(),
        payer: verified.payer.clone(),
        nonce: verified.nonce.clone(),
        valid_before,
        owner: principal.owner.clone(),
        project_id: binding.project,
        fingerprint: fingerprint(&principal.owner, binding.project, binding.request),
        request: binding.request.to_owned(),
        payload: verified.payload.to_string(),
        requirements: verified.requirements.to_string(),
        sandbox_id: sandbox_id.clone(),
        bound_at: at.clone(),
        create_attempts: 0,
        reason: None,
        settle_response: None,
        transaction: None,
        server_id: None,
        server: None,
        refund: None,
        spend: reservation
            .as_ref()
            .filter(|r| r.amount > 0)
            .map(|r| r.hold.clone()),
        created_at: at.clone(),
        updated_at: at.clone(),
    };
    tracing::info!(
        payment = order.id,
        order = order.order_id,
        sandbox = order.sandbox_id,
        "claiming the payment"
    );
    let claim = state
        .store
        .claim_order(&order, sandbox.as_ref(), reservation.as_ref())
        .await?;
    if let Claim::New(order) = &claim {
        crate::metrics::order_transition("new", order.state.as_str());
    }
    Ok(claim)
}

/// Takes over an in-flight or credited `order` (as read) whose lease has expired at `now`, for a
/// new attempt; `None` when a live attempt holds it or it moved.
pub async fn take(state: &AppState, order: &Order, now: i64) -> Result<Option<Order>, ApiError> {
    let at = crate::time::now_rfc3339();
    let lease = lease_until(state, now);
    match state
        .store
        .take_order(order, &new_attempt(), lease, now, &at)
        .await?
    {
        Advance::Done(order) => {
            tracing::info!(
                payment = order.id,
                order = order.order_id,
                state = %order.state,
                "took over the order",
            );
            Ok(Some(*order))
        }
        Advance::Lost(_) | Advance::Blocked => Ok(None),
    }
}

/// Moves a held `order` to `to` (see [`crate::store::Store::advance_order`]), keeping the lease
/// for in-flight states and dropping it (0) for final ones. `None` when another attempt moved
/// the order first: this attempt must stop touching it.
pub async fn advance(
    state: &AppState,
    order: &Order,
    to: OrderState,
    changes: OrderChanges,
    side: SideWrites,
    now: i64,
) -> Result<Option<Order>, ApiError> {
    let lease = if to.in_flight() {
        lease_until(state, now)
    } else {
        0
    };
    let at = crate::time::now_rfc3339();
    match state
        .store
        .advance_order(order, to, changes, side, lease, &at)
        .await
    {
        Ok(Advance::Done(next)) => {
            crate::metrics::order_transition(order.state.as_str(), to.as_str());
            tracing::info!(
                payment = order.id,
                order = order.order_id,
                from = %order.state,
                to = %to,
                "order moved",
            );
            Ok(Some(*next))
        }
        Ok(Advance::Blocked) => {
            tracing::warn!(
                payment = order.id,
                "a write that goes with the order's found its item moved; nothing written"
            );
            Ok(None)
        }
        Ok(Advance::Lost(now)) => {
            tracing::warn!(
                payment = order.id,
                order = order.order_id,
                now = ?now.as_ref().map(|o| o.state),
                "another attempt moved the order first; this one stops"
            );
            Ok(None)
        }
        Err(StoreError::ConditionFailed) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Releases this attempt's lease on an in-flight `order` so that a retry or the reconciler can
/// go on at once (best effort: an expired lease does the same a little later).
pub async fn release(state: &AppState, order: &Order) {
    let at = crate::time::now_rfc3339();
    if let Err(err) = state
        .store
        .advance_order(
            order,
            order.state,
            OrderChanges::default(),
            SideWrites::default(),
            0,
            &at,
        )
        .await
    {
        tracing::warn!(payment = order.id, error = %err, "could not release the order's lease");
    }
}

/// Where the settlement step left an order.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Paid: the order is `settled`.
    Paid(Order),
    /// Ended without a charge (`rejected`, `expired`), or moved on by another attempt.
    Stopped(Option<Order>),
    /// The outcome is not known yet (pending, lost, chain unreachable): still `settling`; the
    /// next attempt resolves it on chain.
    Unresolved(Order, String),
    /// Too little time was left to call settle: nothing charged; still `claimed`.
    OutOfTime(Order),
}

/// The payment request of a recorded order, for the facilitator.
fn stored_request(order: &Order) -> Result<(Value, Value), ApiError> {
    let payload = serde_json::from_str(&order.payload)
        .map_err(|e| ApiError::Internal(format!("order {}: payload: {e}", order.order_id)))?;
    let requirements = serde_json::from_str(&order.requirements)
        .map_err(|e| ApiError::Internal(format!("order {}: requirements: {e}", order.order_id)))?;
    Ok((payload, requirements))
}

/// Drives a held order from `claimed` or `settling` to `settled` (or to a final state without
/// a charge), within `deadline`; `now` is the attempt's clock (unix seconds). See the module
/// docs for the rules.
///
/// Errors: the store's (the order keeps its state; the next attempt goes on).
pub async fn settle(
    state: &AppState,
    mut order: Order,
    deadline: &Deadline,
    now: i64,
) -> Result<Settled, ApiError> {
    let (payload, requirements) = stored_request(&order)?;
    let request = PaymentRequest {
        version: order.version,
        payload: &payload,
        requirements: &requirements,
    };
    let timeout = state.config.payments.facilitator_timeout;
    // Whether a settle may already have been sent for this order (then: look it up first).
    let mut maybe_sent = order.state == OrderState::Settling;
    let mut calls = 0;
    loop {
        match order.state {
            OrderState::Claimed => {
                if authorization_expired(&order, now) {
                    return end(
                        state,
                        &order,
                        OrderState::Expired,
                        "authorization expired before it was settled; nothing was charged",
                        now,
                    )
                    .await;
                }
                if !deadline.allows(timeout) {
                    return Ok(Settled::OutOfTime(order));
                }
                if deadline.allows(timeout * 2) {
                    tracing::info!(payment = order.id, "asking the facilitator to verify");
                    match state.facilitator.verify(&request).await {
                        Ok(verdict) if !verdict.is_valid => {
                            let reason = verdict
                                .invalid_reason
                                .unwrap_or_else(|| "invalid_payment".into());
                            return end(state, &order, OrderState::Rejected, &reason, now).await;
                        }
                        Ok(_) => {}
                        Err(err) => {
                            tracing::warn!(
                                payment = order.id,
                                error = %err,
                                "verify failed; settle verifies again",
                            )
                        }
                    }
                }
                let Some(next) = advance(
                    state,
                    &order,
                    OrderState::Settling,
                    OrderChanges::default(),
                    SideWrites::default(),
                    now,
                )
                .await?
                else {
                    return Ok(Settled::Stopped(None));
                };
                order = next;
                state
                    .checkpoint(crate::checkpoint::Step::BeforeSettle)
                    .await;
            }
            OrderState::Settling => {
                if maybe_sent {
                    match lookup_on_chain(state, &order, deadline, now).await {
                        Chain::Used => {
                            return paid(state, &order, synthesized(&order, None), now).await;
                        }
                        Chain::Expired => {
                            return end(
                                state,
                                &order,
                                OrderState::Expired,
                                "authorization never used and now expired; nothing was charged",
                                now,
                            )
                            .await;
                        }
                        Chain::Unknown(why) => return Ok(Settled::Unresolved(order, why)),
                        Chain::Unused => {}
                    }
                }
                if calls >= SETTLE_CALLS || !deadline.allows(timeout) {
                    return Ok(Settled::Unresolved(
                        order,
                        "settlement not confirmed yet".into(),
                    ));
                }
                calls += 1;
                maybe_sent = true;
                tracing::info!(
                    payment = order.id,
                    call = calls,
                    "asking the facilitator to settle"
                );
                match state.facilitator.settle(&request).await {
                    Ok(Settlement::Settled(response)) => {
                        state.checkpoint(crate::checkpoint::Step::AfterSettle).await;
                        return paid(state, &order, response, now).await;
                    }
                    Ok(Settlement::Pending(response)) => {
                        tracing::warn!(
                            payment = order.id,
                            transaction = response.transaction,
                            "settlement pending; asking again identically"
                        );
                        if !response.transaction.is_empty() {
                            order.transaction = Some(response.transaction.clone());
                        }
                        // The identical request once more (reference/x402.md §3); a second
                        // pending answer is resolved on chain by the loop.
                        if calls < SETTLE_CALLS && deadline.allows(timeout) {
                            calls += 1;
                            match state.facilitator.settle(&request).await {
                                Ok(Settlement::Settled(response)) => {
                                    return paid(state, &order, response, now).await;
                                }
                                Ok(other) => {
                                    tracing::warn!(
                                        payment = order.id,
                                        answer = ?other,
                                        "settlement still not confirmed",
                                    )
                                }
                                Err(err) => {
                                    tracing::warn!(
                                        payment = order.id,
                                        error = %err,
                                        "settle retry failed",
                                    )
                                }
                            }
                        }
                    }
                    Ok(Settlement::Failed(response)) => {
                        let reason = response
                            .error_reason
                            .unwrap_or_else(|| "settlement_failed".into());
                        tracing::warn!(
                            payment = order.id,
                            reason,
                            "settle refused; asking the chain"
                        );
                        let used_says_facilitator = reason.contains("already_used");
                        match lookup_on_chain(state, &order, deadline, now).await {
                            Chain::Used => {
                                return paid(state, &order, synthesized(&order, None), now).await;
                            }
                            // The facilitator saw it used; a node that does not yet is behind.
                            Chain::Unused | Chain::Expired if used_says_facilitator => {
                                return Ok(Settled::Unresolved(
                                    order,
                                    "the facilitator says the authorization was used; waiting for \
                                    the chain to show it"
                                        .into(),
                                ));
                            }
                            Chain::Unused | Chain::Expired => {
                                return end(state, &order, OrderState::Rejected, &reason, now)
                                    .await;
                            }
                            Chain::Unknown(why) => {
                                return Ok(Settled::Unresolved(
                                    order,
                                    format!("settle answered {reason}; {why}"),
                                ));
                            }
                        }
                    }
                    Err(err) => {
                        tracing::warn!(
                            payment = order.id,
                            error = %err,
                            "settle answer lost; asking the chain",
                        );
                    }
                }
            }
            OrderState::Settled | OrderState::Creating => return Ok(Settled::Paid(order)),
            OrderState::Provisioned
            | OrderState::Credited
            | OrderState::Rejected
            | OrderState::Expired
            | OrderState::Refunded => return Ok(Settled::Stopped(Some(order))),
        }
    }
}

fn authorization_expired(order: &Order, now: i64) -> bool {
    (order.valid_before as i64) <= now + verify::VALID_BEFORE_BUFFER_SECS as i64
}

/// What the chain says of an order's authorization.
enum Chain {
    Used,
    Unused,
    Expired,
    Unknown(String),
}

async fn lookup_on_chain(state: &AppState, order: &Order, deadline: &Deadline, now: i64) -> Chain {
    if !deadline.allows(state.config.payments.rpc_timeout) {
        return Chain::Unknown("no time left to ask the chain".into());
    }
    let network = Network::parse(&order.network).unwrap_or(state.config.payments.network);
    let valid_before = order.valid_before as i64;
    tracing::info!(
        payment = order.id,
        "asking the chain whether the authorization was used"
    );
    match state
        .chain
        .authorization_used(network.usdc(), &order.payer, &order.nonce)
        .await
    {
        Ok(true) => Chain::Used,
        Ok(false) if valid_before + CHAIN_FINALITY_SECS <= now => Chain::Expired,
        // The window just closed: a transfer mined at its end may not show on this node yet.
        Ok(false) if valid_before <= now + verify::VALID_BEFORE_BUFFER_SECS as i64 => {
            Chain::Unknown(
                "the authorization's window has just closed; waiting for the chain".into(),
            )
        }
        Ok(false) => Chain::Unused,
        Err(err) => {
            tracing::warn!(payment = order.id, error = %err, "cannot ask the chain");
            Chain::Unknown(format!("the chain cannot be asked: {err}"))
        }
    }
}

/// A settle response for a settlement known from the chain (the transaction when known).
fn synthesized(order: &Order, transaction: Option<String>) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        transaction: transaction
            .or_else(|| order.transaction.clone())
            .unwrap_or_default(),
        network: order.network.clone(),
        payer: Some(order.payer.clone()),
    }
}

async fn paid(
    state: &AppState,
    order: &Order,
    response: SettleResponse,
    now: i64,
) -> Result<Settled, ApiError> {
    let changes = OrderChanges {
        settle_response: serde_json::to_string(&response).ok(),
        transaction: Some(response.transaction.clone()).filter(|t| !t.is_empty()),
        ..OrderChanges::default()
    };
    match advance(
        state,
        order,
        OrderState::Settled,
        changes,
        SideWrites::default(),
        now,
    )
    .await
    {
        Ok(Some(order)) => Ok(Settled::Paid(order)),
        Ok(None) => Ok(Settled::Stopped(None)),
        // Paid, but not recorded: the answer still says so; the next attempt finds the
        // settlement on chain.
        Err(error) => Err(ApiError::Charged(Box::new(Charged {
            error,
            payment: serde_json::to_value(PaymentView::of(order)).unwrap_or(Value::Null),
            next: format!(
                "payment {} was charged {} USDC atomic units; the order completes in the \
                background (retry with the same payment, or see GET /api/payments)",
                order.id, order.amount
            ),
            settlement: response,
        }))),
    }
}

async fn end(
    state: &AppState,
    order: &Order,
    to: OrderState,
    reason: &str,
    now: i64,
) -> Result<Settled, ApiError> {
    let side = SideWrites {
        sandbox_status: Some(SandboxStatus {
            sandbox_id: order.sandbox_id.clone(),
            status: SANDBOX_CANCELLED.into(),
            ..SandboxStatus::default()
        }),
        // Nothing charged: the key's reserved spend comes back.
        release: true,
        ..SideWrites::default()
    };
    let changes = OrderChanges {
        reason: Some(reason.to_owned()),
        ..OrderChanges::default()
    };
    Ok(Settled::Stopped(
        advance(state, order, to, changes, side, now).await?,
    ))
}

/// Makes a held, settled order a credit of its owner (`reason` says why nothing was
/// provisioned); its sandbox says `credited`. `None` when another attempt moved it first.
pub async fn credit(
    state: &AppState,
    order: &Order,
    reason: &str,
    now: i64,
) -> Result<Option<Order>, ApiError> {
    tracing::warn!(
        payment = order.id,
        order = order.order_id,
        reason,
        "the order becomes a credit"
    );
    let side = SideWrites {
        sandbox_status: Some(SandboxStatus {
            sandbox_id: order.sandbox_id.clone(),
            status: SANDBOX_CREDITED.into(),
            ..SandboxStatus::default()
        }),
        ..SideWrites::default()
    };
    let changes = OrderChanges {
        reason: Some(reason.to_owned()),
        ..OrderChanges::default()
    };
    advance(state, order, OrderState::Credited, changes, side, now).await
}

/// Makes the provisioned order `payment` a credit of its owner because its server never became
/// usable (`reason`; the server was deleted): the refresher's deadline. A no-op for an order
/// that is not a provisioning in state `provisioned` (already credited, or a renewal).
///
/// Errors: the store's; 409 when another attempt holds the order (the next pass retries).
pub async fn credit_undelivered(
    state: &AppState,
    payment: &str,
    reason: &str,
    now: i64,
) -> Result<(), ApiError> {
    let Some(order) = state.store.order(payment).await? else {
        return Ok(());
    };
    if order.state != OrderState::Provisioned || order.kind != OrderKind::Provision {
        return Ok(());
    }
    let held = take(state, &order, now)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {payment} is held by an attempt")))?;
    credit(state, &held, reason, now).await?;
    Ok(())
}

/// Redeems `principal`'s credit `order` for a corrected request, `binding`, priced by `quote`
/// (its amount in USDC atomic units; its plan class for a new server): rebinds the order to it
/// (kind, fingerprint, request, project, sandbox) and makes it `settled` again, in one transaction,
/// held by a new attempt.
///
/// Errors: 409 when the request costs more than was paid, or the credit was redeemed (or is
/// being redeemed) by another request meanwhile; 403 `policy-violation` when its new server is
/// over the redeeming key's `maxActiveServers`.
pub async fn redeem(
    state: &AppState,
    principal: &Principal,
    order: &Order,
    binding: &Binding<'_>,
    quote: &crate::pricing::Quote,
    now: i64,
) -> Result<Order, ApiError> {
    let amount = quote.atomic();
    let paid: u128 = order.amount.parse().unwrap_or(0);
    if amount > paid {
        return Err(ApiError::Conflict(format!(
            "the credit of payment {} is {paid} USDC atomic units; this request costs {amount}",
            order.id
        )));
    }
    let busy = || {
        ApiError::Conflict(format!(
            "the credit of payment {} is being redeemed by another request",
            order.id
        ))
    };
    let held = take(state, order, now).await?.ok_or_else(busy)?;
    let at = crate::time::now_rfc3339();
    let (sandbox_id, new_sandbox) = binding.sandbox(&principal.owner, &at, quote.class, &order.id);
    let changes = OrderChanges {
        create_attempts: Some(0),
        rebind: Some(Rebind {
            fingerprint: fingerprint(&principal.owner, binding.project, binding.request),
            request: binding.request.to_owned(),
            project_id: binding.project,
            sandbox_id,
            bound_at: at,
            kind: binding.kind,
        }),
        ..OrderChanges::default()
    };
    // The credit's own sandbox, when it was a server that never came, says where it went.
    let redeemed = (order.kind == OrderKind::Provision).then(|| SandboxStatus {
        sandbox_id: order.sandbox_id.clone(),
        status: SANDBOX_REDEEMED.into(),
        ..SandboxStatus::default()
    });
    // A new server counts against the redeeming key (its spend was counted when it was paid).
    let new_server = new_sandbox.as_ref().map(|s| s.id.clone());
    let reserve = crate::keys::reservation(
        principal,
        0,
        new_server.as_deref(),
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or_else(|_| crate::time::now()),
    )?;
    let side = SideWrites {
        sandbox_status: redeemed,
        new_sandbox,
        reserve,
        ..SideWrites::default()
    };
    tracing::info!(
        payment = order.id,
        order = order.order_id,
        "redeeming the credit"
    );
    if let Some(order) = advance(state, &held, OrderState::Settled, changes, side, now).await? {
        return Ok(order);
    }
    // Not written: another attempt moved the credit, or the key's server limit refused it
    // (the credit is as taken: given back at once).
    match state.store.order(&held.id).await? {
        Some(now) if now.seq == held.seq && now.attempt == held.attempt => {
            release(state, &now).await;
            Err(crate::keys::over_limit(&state.store, principal, 0, new_server.is_some()).await)
        }
        _ => Err(busy()),
    }
}

/// The settle response recorded on an order, once it settled.
pub fn settlement_of(order: &Order) -> Option<SettleResponse> {
    if !order.state.maybe_charged() {
        return None;
    }
    order
        .settle_response
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
}

/// A payment as its owner sees it (`GET /api/payments`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentView {
    /// The payment key.
    pub id: String,
    /// The order id.
    pub order_id: String,
    /// The order's state.
    pub state: OrderState,
    /// USDC atomic units, decimal string.
    pub amount: String,
    /// Always `USDC`.
    pub asset: &'static str,
    /// CAIP-2 network.
    pub network: String,
    /// The payer.
    pub payer: String,
    /// Whether money moved (or may have, while settling).
    pub charged: bool,
    /// Settlement transaction, when known.
    pub transaction: Option<String>,
    /// The provider project.
    pub project_id: u64,
    /// The sandbox of the order.
    pub sandbox_id: String,
    /// The server it paid for.
    pub server_id: Option<u64>,
    /// The credit, when the order is one: `{amount, reason, redeemable}`.
    #[schema(value_type = Option<Object>)]
    pub credit: Option<Value>,
    /// Why it was refused, credited or refunded.
    pub reason: Option<String>,
    /// The operator's refund record.
    pub refund: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

impl PaymentView {
    /// The view of an order.
    pub fn of(order: &Order) -> Self {
        let credit = (order.state == OrderState::Credited).then(|| {
            serde_json::json!({
                "amount": order.amount,
                "reason": order.reason,
                "redeemable": true,
            })
        });
        PaymentView {
            id: order.id.clone(),
            order_id: order.order_id.clone(),
            state: order.state,
            amount: order.amount.clone(),
            asset: "USDC",
            network: order.network.clone(),
            payer: order.payer.clone(),
            charged: order.state.maybe_charged(),
            transaction: order.transaction.clone(),
            project_id: order.project_id,
            sandbox_id: order.sandbox_id.clone(),
            server_id: order.server_id,
            credit,
            reason: order.reason.clone(),
            refund: order.refund.clone(),
            created_at: order.created_at.clone(),
            updated_at: order.updated_at.clone(),
        }
    }
}

/// Wraps an error answered after `order` settled: the payment response headers, and a detail
/// saying what was charged and `next`.
pub fn charged(order: &Order, error: ApiError, next: &str) -> ApiError {
    match settlement_of(order) {
        Some(settlement) => ApiError::Charged(Box::new(Charged {
            error,
            settlement,
            payment: serde_json::to_value(PaymentView::of(order)).unwrap_or(Value::Null),
            next: format!(
                "payment {} was charged {} USDC atomic units; {next}",
                order.id, order.amount
            ),
        })),
        None => error,
    }
}

/// The 402 of an order whose payment was refused or expired, rebuilt from its stored
/// requirements.
pub fn refused(order: &Order, plan: &str) -> ApiError {
    let reason = order.reason.as_deref().unwrap_or("invalid_payment");
    let requirements: Value = serde_json::from_str(&order.requirements).unwrap_or(Value::Null);
    let offer = if order.version == 2 {
        serde_json::from_value::<PaymentRequirements>(requirements)
            .ok()
            .and_then(|r| {
                Some(Offer {
                    network: Network::parse(&r.network)?,
                    pay_to: r.pay_to,
                    amount: r.amount.parse().ok()?,
                    max_timeout_seconds: r.max_timeout_seconds,
                    resource: String::new(),
                    description: format!("A `{plan}` server"),
                })
            })
    } else {
        serde_json::from_value::<PaymentRequirementsV1>(requirements)
            .ok()
            .and_then(|r| {
                Some(Offer {
                    network: Network::parse(&r.network)?,
                    pay_to: r.pay_to,
                    amount: r.max_amount_required.parse().ok()?,
                    max_timeout_seconds: r.max_timeout_seconds,
                    resource: r.resource,
                    description: r.description,
                })
            })
    };
    match offer {
        Some(offer) => ApiError::PaymentRequired(Box::new(PaymentDemand {
            quote: None,
            offer,
            reason: reason.to_owned(),
        })),
        None => ApiError::Conflict(format!(
            "payment {} was refused ({reason}); sign a new payment",
            order.id
        )),
    }
}

/// One page of `principal`'s payments, newest first: `limit` 1-100 (default 50), `cursor` from
/// the previous page.
///
/// Errors: 400 (`limit`, `cursor`).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    limit: Option<&str>,
    cursor: Option<&str>,
) -> Result<Page<PaymentView>, ApiError> {
    let limit = crate::sandboxes::page_limit(limit)?;
    let page = state
        .store
        .orders_of(&principal.owner, limit, cursor)
        .await?;
    Ok(Page {
        items: page.items.iter().map(PaymentView::of).collect(),
        next_cursor: page.next_cursor,
    })
}

/// Operators: marks credit `id` refunded with `note` (a transaction hash or a note).
///
/// Errors: 404 unknown payment; 409 when it is not a credit (or moved meanwhile).
pub async fn refund(state: &AppState, id: &str, note: &str) -> Result<Order, ApiError> {
    let order = state
        .store
        .order(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no payment {id}")))?;
    if order.state != OrderState::Credited {
        return Err(ApiError::Conflict(format!(
            "payment {id} is {}, not a credit",
            order.state
        )));
    }
    let now = crate::time::now().unix_timestamp();
    let held = take(state, &order, now)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {id} is being redeemed")))?;
    let changes = OrderChanges {
        refund: Some(note.to_owned()),
        ..OrderChanges::default()
    };
    // Paid back: the key's reserved spend comes back too.
    let side = SideWrites {
        release: true,
        ..SideWrites::default()
    };
    advance(state, &held, OrderState::Refunded, changes, side, now)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("payment {id} moved meanwhile")))
}
