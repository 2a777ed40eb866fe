//! Payments as x402 presents them (design brief §3, Money): the payment a request carries
//! ([`PaymentHeader`], over HTTP or MCP), decoded with its ledger key ([`present`], [`lookup`])
//! and classified against a known order ([`classify`]: the same request resumes it, a credit of
//! the same owner may be redeemed by another request, anything else is a 409); this
//! deployment's offer and its 402 ([`offer`], [`demand`]); the offline checks
//! ([`verify_offline`]); and how payments are shown ([`PaymentView`], [`list`], [`charged`],
//! [`refused`]). The order they pay for — claim, settle, create, credit — is
//! [`crate::billing::order`]'s.

use crate::address::Owner;
use crate::x402::PaymentKey;
use lambda_http::http::HeaderMap;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, Charged, PaymentDemand};
use crate::identity::auth::Principal;
use crate::pricing::Quote;
use crate::state::AppState;
use crate::store::Page;
use crate::store::payments::{Order, OrderState};
use crate::x402::verify::{self, PaymentError, VerifiedPayment};
use crate::x402::{
    Network, Offer, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequirements, PaymentRequirementsV1,
    SettleResponse, X_PAYMENT,
};

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
    /// Its payment key, when network, payer and nonce parse.
    pub key: Option<PaymentKey>,
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
        (Some(network), Some(payer), Some(nonce)) => Some(PaymentKey::of(
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

/// The recorded order of a presented payment, if any (strongly consistent).
pub async fn lookup(state: &AppState, presented: &Presented) -> Result<Option<Order>, ApiError> {
    match &presented.key {
        Some(key) => Ok(state.store.order(key).await?),
        None => Ok(None),
    }
}

/// The request (as stored, `T`) of the order `payment` pays, when the ledger knows it as an
/// order of `kind` that is not a credit: what a replay of it is bound to, whatever the server
/// became since. `None` otherwise (no payment, not known, another kind, a credit — which a
/// request bound afresh redeems — or a read that failed: the request is then bound afresh and
/// the ledger, read again, decides).
pub async fn known_request<T: serde::de::DeserializeOwned>(
    state: &AppState,
    payment: Option<&PaymentHeader>,
    kind: crate::store::payments::OrderKind,
) -> Option<T> {
    let presented = present(payment?.clone()).ok()?;
    let order = lookup(state, &presented).await.ok()??;
    (order.kind == kind && order.state != OrderState::Credited)
        .then(|| serde_json::from_str(&order.request).ok())
        .flatten()
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

/// Classifies a known payment (point 1 of the durable-orders issue), whose servers were deleted
/// undelivered `undelivered` times in all (its own order and its remainders).
pub fn classify(
    order: &Order,
    owner: &Owner,
    fingerprint: &str,
    presented: &Presented,
    undelivered: u32,
) -> Known {
    let stored: Option<Value> = serde_json::from_str(&order.payload).ok();
    let same_authorization = stored.as_ref().is_some_and(|stored| {
        stored["payload"]["signature"] == presented.raw["payload"]["signature"]
            && stored["payload"]["authorization"] == presented.raw["payload"]["authorization"]
    });
    if !same_authorization || &order.owner != owner {
        return Known::Conflict(format!(
            "payment {} was already used for a different request",
            order.id
        ));
    }
    if order.fingerprint == fingerprint {
        return Known::Same;
    }
    match order.state {
        OrderState::Credited if !redeemable(undelivered) => Known::Conflict(format!(
            "payment {} is a credit whose servers were undelivered twice: it can only be \
            refunded (ask the operator), not redeemed again",
            order.id
        )),
        OrderState::Credited => Known::Redeem,
        OrderState::Claimed
        | OrderState::Settling
        | OrderState::Settled
        | OrderState::Creating
        | OrderState::Provisioned
        | OrderState::Rejected
        | OrderState::Expired
        | OrderState::Refunding
        | OrderState::Refunded
        | OrderState::Reversed => Known::Conflict(format!(
            "payment {} was already used for a different request (its order is {})",
            order.id, order.state
        )),
    }
}

/// Whether a credit of a payment whose servers were deleted undelivered `undelivered` times (its
/// own order's and its remainders', [`Order::undelivered`] summed) may be redeemed: after two,
/// it can only be refunded (one payment never buys servers without end).
pub fn redeemable(undelivered: u32) -> bool {
    undelivered < 2
}

/// The most orders one payment is split into: its own and the credits its cheaper redemptions
/// left ([`Order::remainder`]). A chain is read one order at a time ([`chain_from`]), so it is
/// kept short; a redemption that would leave one more is refused ([`next_remainder`]), and the
/// last credit is redeemed whole or refunded.
pub const REMAINDERS: usize = 32;

/// The key of the credit a cheaper redemption of a payment whose orders are `chain` (as
/// [`chain_from`] reads it, the payment's own first) would leave: the number after the highest;
/// `None` when the chain already holds [`REMAINDERS`] orders (a 33rd would be past what is read,
/// redeemable by no one and reversed by nothing).
pub fn next_remainder(chain: &[PaymentKey]) -> Option<PaymentKey> {
    let root = chain.first()?;
    let highest = chain.iter().map(PaymentKey::number).max().unwrap_or(0);
    (chain.len() < REMAINDERS).then(|| root.remainder(highest + 1))
}

/// `first` and the remainders it links to ([`Order::remainder`]), in order, at most
/// [`REMAINDERS`].
///
/// Errors: the store's.
pub async fn chain_from(store: &crate::store::Store, first: Order) -> Result<Vec<Order>, ApiError> {
    let mut chain = vec![first];
    while chain.len() < REMAINDERS {
        let Some(next) = chain.last().and_then(|o| o.remainder.clone()) else {
            break;
        };
        match store.order(&next).await? {
            Some(remainder) => chain.push(remainder),
            None => break,
        }
    }
    Ok(chain)
}

/// Servers of `order`'s payment (its own order and every remainder) deleted undelivered: what
/// decides whether a credit of it may be redeemed ([`redeemable`]).
///
/// Errors: the store's.
pub async fn undelivered(store: &crate::store::Store, order: &Order) -> Result<u32, ApiError> {
    let root = match order.id.number() {
        0 => order.clone(),
        _ => match store.order(&order.id.root()).await? {
            Some(root) => root,
            None => return Ok(order.undelivered),
        },
    };
    let chain = chain_from(store, root).await?;
    Ok(chain.iter().map(|o| o.undelivered).sum())
}

/// The views of `orders`, each credit's `redeemable` counted over its whole payment.
///
/// Errors: the store's.
async fn views(
    store: &crate::store::Store,
    orders: &[Order],
) -> Result<Vec<PaymentView>, ApiError> {
    let mut views = Vec::with_capacity(orders.len());
    for order in orders {
        let mut view = PaymentView::of(order);
        if let Some(credit) = view.credit.as_mut() {
            credit["redeemable"] = Value::Bool(redeemable(undelivered(store, order).await?));
        }
        views.push(view);
    }
    Ok(views)
}

/// SHA-256 (hex) of the owner, the project and the request (JSON): what a payment is bound to.
pub fn fingerprint(owner: &Owner, project: u64, request: &str) -> String {
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
        description: match &quote.resize {
            Some(resize) => format!(
                "a server moved from `{}` to `{}` for its {} h of paid time left",
                resize.from_plan, quote.plan, resize.hours_left
            ),
            None => format!(
                "{} paid period(s) of {} h of a `{}` server",
                quote.periods,
                quote.period.hours.normalize(),
                quote.plan
            ),
        },
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

/// The cheap checks a payment passes on chain before anything of it is recorded or sent to the
/// facilitator (design brief §3, Money; the capacity rule): in one round trip
/// ([`crate::x402::chain::Chain::standing`]), the payer's USDC balance, whether the nonce is
/// used, and a smart wallet's payment as the settlement will judge it — USDC's
/// `transferWithAuthorization` simulated from the facilitator's signer
/// (`X402_SETTLEMENT_SENDER`), so that an account that answers ERC-1271 one way to a bare call
/// and another to the settlement is refused here (an account not deployed yet: ERC-6492's
/// validator, from the same sender). A forged, unfunded or lying payment thus leaves no record
/// and reaches no facilitator, and a nonce nobody signed for cannot be squatted: the payer's
/// own payment with it still passes.
///
/// Errors: 402 `invalid_exact_evm_nonce_already_used` (used or cancelled on chain),
/// `insufficient_funds` (the balance is below the amount), then — the simulated transfer
/// reverted — `invalid_exact_evm_payload_authorization_valid_after` /
/// `…_valid_before` (the chain's clock is outside the window) or
/// `invalid_exact_evm_payload_signature` (the account refuses it); 503 with `Retry-After` when
/// the chain does not answer (nothing was recorded or charged).
pub async fn verify_on_chain(
    state: &AppState,
    verified: &VerifiedPayment,
    quote: &Quote,
    offer: &Offer,
) -> Result<(), ApiError> {
    let sender = state.config.payments.settlement_sender;
    let transfer = crate::x402::chain::PendingTransfer::of(verified, sender)
        .map_err(|err| ApiError::Internal(format!("a verified payment: {err}")))?;
    let standing = state
        .chain
        .standing(&transfer)
        .await
        .map_err(|err| unreachable_chain(&err))?;
    if let Some(why) = &standing.reverted {
        tracing::info!(payer = %verified.payer, why, "the simulated settlement reverted");
    }
    match refusal(&standing, verified.value) {
        Some(reason) => Err(demand(quote, offer, reason)),
        None => Ok(()),
    }
}

/// The x402 reason a payment of `value` is refused for on `standing`, if any: a used nonce, a
/// short balance, then a settlement that would revert (its window, else its signature).
fn refusal(standing: &crate::x402::chain::Standing, value: u128) -> Option<&'static str> {
    let reverted = standing.reverted.as_deref().unwrap_or_default();
    if standing.nonce_used {
        Some(NONCE_USED)
    } else if standing.balance < alloy_primitives::U256::from(value) {
        Some("insufficient_funds")
    } else if standing.signed {
        None
    } else if reverted.contains("not yet valid") {
        Some("invalid_exact_evm_payload_authorization_valid_after")
    } else if reverted.contains("expired") {
        Some("invalid_exact_evm_payload_authorization_valid_before")
    } else {
        Some("invalid_exact_evm_payload_signature")
    }
}

/// A payment the chain could not be asked about before anything of it was recorded: 503 with
/// `Retry-After`.
fn unreachable_chain(err: &crate::x402::chain::ChainError) -> ApiError {
    tracing::warn!(error = %err, "cannot check a payment on chain");
    ApiError::Busy {
        message: "the payment network cannot check this payment now; nothing was recorded or \
                  charged: retry with the same payment"
            .into(),
        retry_after: 2,
    }
}

/// The reason of a payment whose nonce is used or cancelled on chain (x402's).
pub const NONCE_USED: &str = "invalid_exact_evm_nonce_already_used";

/// Whether `err` refuses a payment because its nonce is used ([`NONCE_USED`]).
pub fn nonce_used(err: &ApiError) -> bool {
    matches!(err, ApiError::PaymentRequired(demand) if demand.reason == NONCE_USED)
}

/// Whether the chain shows `verified`'s authorization used by a transfer of its amount to the
/// offer's `payTo` (searched from its `validAfter`, at most
/// [`crate::billing::order::effects::USE_LOOKBACK_SECS`] before now): the order is then claimed, and
/// settled on that transfer. A use the search cannot place (older than that) is not ours.
///
/// Errors: 503 with `Retry-After` when the chain does not answer.
pub async fn paid_us(
    state: &AppState,
    verified: &VerifiedPayment,
    offer: &Offer,
) -> Result<bool, ApiError> {
    let now = state.clock.now();
    let since = if state.holds(crate::checkpoint::Guard::SearchFromValidAfter) {
        crate::billing::order::effects::search_from(verified.valid_after, now)
    } else {
        now
    };
    let authorization = crate::x402::chain::Authorization {
        asset: &verified.asset,
        payer: &verified.payer,
        nonce: &verified.nonce,
        pay_to: &offer.pay_to,
        amount: verified.value,
        since,
        scanned: None,
    };
    match state.chain.evidence(&authorization, None).await {
        Ok(evidence) => Ok(matches!(
            evidence,
            crate::x402::chain::Evidence::Paid { .. }
        )),
        Err(crate::x402::chain::ChainError::Inconsistent(_)) => Ok(false),
        Err(err) => Err(unreachable_chain(&err)),
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
    #[schema(value_type = String)]
    pub id: PaymentKey,
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
    pub payer: crate::address::Checksummed,
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
    /// The credit, when the order is one: `{amount, reason, redeemable}` (`redeemable`: fewer
    /// than two servers of the whole payment were deleted undelivered; in a listing it is
    /// counted over the payment's remainders too).
    #[schema(value_type = Option<Object>)]
    pub credit: Option<Value>,
    /// Why it was refused, credited or refunded.
    pub reason: Option<String>,
    /// The operator's refund record.
    pub refund: Option<String>,
    /// The payment key of the credit that keeps what a cheaper redemption of this one left
    /// (listed as a payment of its own; the same payment header redeems it).
    #[schema(value_type = Option<String>)]
    pub remainder: Option<PaymentKey>,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339.
    pub updated_at: crate::time::Timestamp,
}

impl PaymentView {
    /// The view of an order.
    pub fn of(order: &Order) -> Self {
        let credit = (order.state == OrderState::Credited).then(|| {
            serde_json::json!({
                "amount": order.amount,
                "reason": order.reason,
                "redeemable": redeemable(order.undelivered),
            })
        });
        PaymentView {
            id: order.id.clone(),
            order_id: order.order_id.clone(),
            state: order.state,
            amount: order.amount.clone(),
            asset: "USDC",
            network: order.network.clone(),
            payer: order.payer.as_str().into(),
            charged: order.state.maybe_charged(),
            transaction: order.transaction.clone(),
            project_id: order.project_id,
            sandbox_id: order.sandbox_id.clone(),
            server_id: order.server_id,
            credit,
            reason: order.reason.clone(),
            refund: order.refund.clone(),
            remainder: order.remainder.clone(),
            created_at: order.created_at,
            updated_at: order.updated_at,
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
    page: &crate::page::PageRequest,
) -> Result<Page<PaymentView>, ApiError> {
    let page = state
        .store
        .orders_of(&principal.owner, page.limit, page.cursor())
        .await?;
    Ok(Page {
        items: views(&state.store, &page.items).await?,
        next_cursor: page.next_cursor,
    })
}
/// The order of payment `id` (its payment key), whatever its owner: for the operator's
/// `svcctl payment`.
///
/// Errors: 404 when there is none; 500 when the store fails.
pub async fn by_key(
    store: &impl crate::state::StoreHandle,
    id: &PaymentKey,
) -> Result<Order, ApiError> {
    store
        .store(crate::state::Sealed::key())
        .order(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no payment {id}")))
}

/// Every payment in `state`, newest first, every page: for the operator's `svcctl payments`.
///
/// Errors: 500 when the store fails.
pub async fn in_state(
    store: &impl crate::state::StoreHandle,
    state: OrderState,
) -> Result<Vec<PaymentView>, ApiError> {
    let mut payments = Vec::new();
    let mut cursor: Option<String> = None;
    let store = store.store(crate::state::Sealed::key());
    loop {
        let page = store
            .orders_in_state(state, crate::page::MAX_LIMIT, cursor.as_deref())
            .await?;
        payments.extend(views(store, &page.items).await?);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(payments),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_is_split_into_at_most_remainders_orders() {
        let root = PaymentKey::of(
            Network::BaseSepolia,
            "0x036cbd53842c5426634e7929541ec2318f3dcf7e",
            "0x00000000000000000000000000000000000000aa",
            &format!("0x{}", "11".repeat(32)),
        );
        assert_eq!(next_remainder(&[]), None);
        assert_eq!(
            next_remainder(std::slice::from_ref(&root)),
            Some(root.remainder(1))
        );
        // Numbered after the highest, wherever it sits in the chain.
        let chain = [root.clone(), root.remainder(3), root.remainder(1)];
        assert_eq!(next_remainder(&chain), Some(root.remainder(4)));
        let mut chain: Vec<PaymentKey> = vec![root.clone()];
        chain.extend((1..REMAINDERS as u32 - 1).map(|n| root.remainder(n)));
        assert_eq!(chain.len(), REMAINDERS - 1);
        let last = next_remainder(&chain).unwrap();
        chain.push(last);
        assert_eq!(next_remainder(&chain), None, "a 33rd order is never made");
    }
}
