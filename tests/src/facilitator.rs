//! A development x402 facilitator (`reference/x402.md` §3): `POST /verify`, `POST /settle`,
//! `GET /supported`, in front of the development chain ([`crate::chain`]), whose node it also
//! serves at `POST /rpc`: the double of x402's facilitator, held to it by the contract table.
//!
//! It checks payments for real — the same offline checks as the service, the EIP-712 signature
//! recovering to `from`, or for a smart account of its chain ([`DevChain::deploy_account`]) the
//! account's own ERC-1271 answer — and settles by broadcasting `transferWithAuthorization` on the chain:
//! once per (payer, nonce); a nonce already used (by its own transfer or anyone's) answers
//! `invalid_exact_evm_nonce_already_used`, as the contract's simulation would; a re-POST of a
//! settlement it left pending answers its transaction once mined (CDP's `settlement_pending`
//! retry).
//!
//! Tests make it misbehave the way real facilitators and payers do: refuse (`Fail`), stall
//! before settling (`Stall`), settle and then lose the answer (`SettleThenStall`), broadcast
//! and answer `settlement_pending` with HTTP 500 (`Pending`), **broadcast and then answer a
//! failure** — a receipt timeout reported as `unexpected_settle_error` — with the transaction
//! mined late or at once (`BroadcastThenFail`), **answer success without broadcasting**
//! (`SucceedWithoutTransfer`); verify can stall, answer garbage or refuse.
//! The payer can spend the nonce elsewhere before the service settles
//! ([`DevFacilitator::spend_elsewhere`], [`DevFacilitator::cancel`]), and the node can lag
//! behind the chain ([`DevFacilitator::set_chain_lag`]).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use domain::clock::Clock;
use domain::x402::verify::{self, PaymentError};
use domain::x402::{Network, Offer, PaymentRequirements, PaymentRequirementsV1};
use serde_json::{Value, json};

use crate::chain::{DevChain, Use};

/// What the next settle does instead of settling normally.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Answer `success: false` with this reason, broadcasting nothing.
    Fail(String),
    /// Wait this long first (real time).
    Stall(Duration),
    /// Broadcast, mined at once, but answer HTTP 500 `settlement_pending`; a later identical
    /// settle answers the transaction (or pending again, with this mode again).
    Pending,
    /// Settle, then wait this long before answering (the caller's timeout loses the answer).
    SettleThenStall(Duration),
    /// Broadcast the transfer, mined `confirm_after` from now (on the chain's clock), and answer
    /// `success: false` with `reason` (a receipt timeout reported as a failure).
    BroadcastThenFail {
        /// The failure reason answered, e.g. `unexpected_settle_error`.
        reason: String,
        /// When the transfer is mined, from now.
        confirm_after: Duration,
    },
    /// Answer `success: true` with a transaction hash that was never broadcast (a buggy or
    /// hostile facilitator): nothing moves on chain.
    SucceedWithoutTransfer,
}

/// What the next verify does instead of checking normally.
#[derive(Debug, Clone)]
pub enum VerifyMode {
    /// Wait this long first.
    Stall(Duration),
    /// Answer HTTP 200 with a body that is not JSON.
    Garbage,
    /// Answer `isValid: false` with this reason.
    Invalid(String),
    /// Check for real and answer, then the payer spends the nonce before anyone settles it:
    /// `Some((to, value))` a transfer of `value` to `to` (e.g. 1 unit to himself), `None`
    /// `cancelAuthorization`. Mined at once.
    PayerSpends(Option<(String, u128)>),
    /// Someone holding the payload (the payer, or whoever it leaked to) settles it first,
    /// mined at once, paying the treasury what it authorizes: the check then answers
    /// `isValid: false`, the nonce used.
    SettledFirst,
}

#[derive(Default)]
struct Counters {
    /// Transfers broadcast by this facilitator.
    settles: usize,
    verifies: usize,
    modes: VecDeque<Mode>,
    verify_modes: VecDeque<VerifyMode>,
    /// Transactions it answered pending (a re-POST answers them).
    pending: HashSet<String>,
}

/// The facilitator's state.
pub struct DevFacilitator {
    chain: DevChain,
    counters: Mutex<Counters>,
}

impl DevFacilitator {
    /// A facilitator on a new development chain of Base Sepolia's USDC, on wall time.
    pub fn new() -> Arc<Self> {
        Self::with_clock(Clock::system())
    }

    /// A facilitator on a new development chain whose blocks follow `clock`.
    pub fn with_clock(clock: Clock) -> Arc<Self> {
        Arc::new(DevFacilitator {
            chain: DevChain::new(clock, Network::BaseSepolia.usdc()),
            counters: Mutex::new(Counters::default()),
        })
    }

    /// The chain it settles on.
    pub fn chain(&self) -> &DevChain {
        &self.chain
    }

    /// Serves on `addr` in the background (until the guard returned is dropped); returns its
    /// base URL (the node is `<url>/rpc`).
    pub async fn start(self: &Arc<Self>, addr: &str) -> std::io::Result<(String, crate::Serving)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let app = Router::new()
            .route("/verify", post(verify_route))
            .route("/settle", post(settle_route))
            .route("/supported", get(supported))
            .route("/rpc", post(rpc_route))
            .with_state(self.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((format!("http://{local}"), crate::Serving::of(&task)))
    }

    /// Queues a mode for the next settle.
    pub fn next_settle(&self, mode: Mode) {
        self.counters.lock().unwrap().modes.push_back(mode);
    }

    /// Queues a mode for the next verify.
    pub fn next_verify(&self, mode: VerifyMode) {
        self.counters.lock().unwrap().verify_modes.push_back(mode);
    }

    /// Forgets queued modes.
    pub fn clear_modes(&self) {
        let mut counters = self.counters.lock().unwrap();
        counters.modes.clear();
        counters.verify_modes.clear();
    }

    /// Makes the node show the chain as it was `lag` ago.
    pub fn set_chain_lag(&self, lag: Duration) {
        self.chain.set_lag(lag);
    }

    /// Makes the node's receipts and logs lag `lag` behind its head and state (a load-balanced
    /// RPC whose logs backend is behind).
    pub fn set_logs_lag(&self, lag: Duration) {
        self.chain.set_logs_lag(lag);
    }

    /// The payer spends `nonce` on a transfer of `value` to `to` (e.g. 1 unit to himself),
    /// mined at once: the service's authorization can no longer pay it.
    pub fn spend_elsewhere(&self, payer: &str, nonce: &str, to: &str, value: u128) -> String {
        let action = Use::Transfer {
            to: to.to_ascii_lowercase(),
            value,
        };
        self.chain.broadcast(payer, nonce, action, Duration::ZERO)
    }

    /// The payer cancels `nonce` (`cancelAuthorization`), mined at once.
    pub fn cancel(&self, payer: &str, nonce: &str) -> String {
        self.chain
            .broadcast(payer, nonce, Use::Cancel, Duration::ZERO)
    }

    /// JSON-RPC calls the node answered.
    pub fn rpc_calls(&self) -> usize {
        self.chain.calls()
    }

    /// Transfers this facilitator broadcast.
    pub fn settles(&self) -> usize {
        self.counters.lock().unwrap().settles
    }

    /// Verify calls answered.
    pub fn verifies(&self) -> usize {
        self.counters.lock().unwrap().verifies
    }
}

async fn supported() -> Response {
    axum::Json(json!({"kinds": [
        {"x402Version": 1, "scheme": "exact", "network": "base"},
        {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
        {"x402Version": 2, "scheme": "exact", "network": "eip155:8453"},
        {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"}
    ]}))
    .into_response()
}

/// A payment checked for real.
struct Checked {
    payer: String,
    nonce: String,
    network: Network,
    to: String,
    value: u128,
    /// The authorization's `validBefore`, unix seconds.
    valid_before: Option<i64>,
}

fn offer_of(version: u8, requirements: &Value) -> Result<Offer, &'static str> {
    let bad = "invalid_payment_requirements";
    if version == 2 {
        let r: PaymentRequirements =
            serde_json::from_value(requirements.clone()).map_err(|_| bad)?;
        Ok(Offer {
            network: Network::parse(&r.network).ok_or("invalid_network")?,
            pay_to: r.pay_to,
            amount: r.amount.parse().map_err(|_| bad)?,
            max_timeout_seconds: r.max_timeout_seconds,
            resource: String::new(),
            description: String::new(),
        })
    } else {
        let r: PaymentRequirementsV1 =
            serde_json::from_value(requirements.clone()).map_err(|_| bad)?;
        Ok(Offer {
            network: Network::parse(&r.network).ok_or("invalid_network")?,
            pay_to: r.pay_to,
            amount: r.max_amount_required.parse().map_err(|_| bad)?,
            max_timeout_seconds: r.max_timeout_seconds,
            resource: r.resource,
            description: r.description,
        })
    }
}

/// Why a payment is refused, and by whom it was signed (as x402's facilitator answers).
struct Refusal {
    reason: String,
    payer: Option<String>,
}

/// The reason x402's facilitator (`@x402/evm`'s exact scheme) gives where the service's verifier
/// uses the specification's name for the same check.
fn facilitator_reason(ours: &str) -> &str {
    match ours {
        "invalid_exact_evm_payload_recipient_mismatch" => "invalid_exact_evm_recipient_mismatch",
        "invalid_exact_evm_payload_signature" => "invalid_exact_evm_signature",
        other => other,
    }
}

/// The EIP-712 digest a payment payload's authorization is signed over on `network`.
fn digest_of(raw: &Value, network: Network) -> Option<alloy_primitives::B256> {
    let a: domain::x402::Authorization =
        serde_json::from_value(raw["payload"]["authorization"].clone()).ok()?;
    let number = |s: &str| alloy_primitives::U256::from_str_radix(s, 10).ok();
    let message = verify::TransferWithAuthorization {
        from: a.from.parse().ok()?,
        to: a.to.parse().ok()?,
        value: number(&a.value)?,
        validAfter: number(&a.valid_after)?,
        validBefore: number(&a.valid_before)?,
        nonce: a.nonce.parse().ok()?,
    };
    Some(verify::signing_hash(network, &message))
}

/// Checks a `/verify` or `/settle` body for real on `chain` at its time.
fn check(chain: &DevChain, body: &Value) -> Result<Checked, Refusal> {
    let now = chain.clock().now();
    let raw = body["paymentPayload"].clone();
    let from = raw["payload"]["authorization"]["from"].as_str();
    let refuse = |reason: &str| Refusal {
        reason: facilitator_reason(reason).to_owned(),
        payer: from.map(str::to_ascii_lowercase),
    };
    let version = body["x402Version"]
        .as_u64()
        .ok_or(refuse("invalid_x402_version"))? as u8;
    let offer = offer_of(version, &body["paymentRequirements"]).map_err(refuse)?;
    let payload = serde_json::from_value(raw.clone()).map_err(|_| refuse("invalid_payload"))?;
    let signature = raw["payload"]["signature"].as_str().unwrap_or_default();
    match verify::verify(version, &payload, raw.clone(), &offer, now as u64) {
        // A signature that is not an EOA's 65 bytes is a contract account's to judge
        // (ERC-1271, as x402's facilitator asks it: verify and settle alike as its transaction
        // from its signer would, so an account that lies to a call without a sender is refused
        // by both): here, the smart accounts the chain knows.
        Ok(v)
            if signature.trim_start_matches("0x").len() != 130
                && !digest_of(&raw, v.network)
                    .is_some_and(|digest| chain.account_accepts(&v.payer, digest, signature)) =>
        {
            Err(refuse("invalid_exact_evm_payload_signature"))
        }
        Ok(v) => Ok(Checked {
            payer: v.payer,
            nonce: v.nonce,
            network: v.network,
            to: offer.pay_to.to_ascii_lowercase(),
            value: v.value,
            valid_before: raw["payload"]["authorization"]["validBefore"]
                .as_str()
                .and_then(|b| b.parse().ok()),
        }),
        Err(PaymentError::Rejected(reason)) => Err(refuse(reason)),
        Err(PaymentError::Malformed(_)) => Err(refuse("invalid_payload")),
    }
}

const NONCE_USED: &str = "invalid_exact_evm_nonce_already_used";
/// A transfer mined at or after its `validBefore`: reverted.
const EXPIRED: &str = "invalid_exact_evm_payload_authorization_valid_before";
const INSUFFICIENT: &str = "invalid_exact_evm_insufficient_balance";

async fn verify_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let mode = f.counters.lock().unwrap().verify_modes.pop_front();
    match &mode {
        Some(VerifyMode::Stall(delay)) => tokio::time::sleep(*delay).await,
        Some(VerifyMode::Garbage) => return "<html>bad gateway</html>".into_response(),
        Some(VerifyMode::Invalid(reason)) => {
            f.counters.lock().unwrap().verifies += 1;
            return axum::Json(json!({"isValid": false, "invalidReason": reason})).into_response();
        }
        Some(VerifyMode::PayerSpends(_)) | None => {}
        Some(VerifyMode::SettledFirst) => {
            if let Ok(c) = check(&f.chain, &body) {
                f.spend_elsewhere(&c.payer, &c.nonce, &c.to, c.value);
            }
        }
    }
    f.counters.lock().unwrap().verifies += 1;
    let answer = match check(&f.chain, &body) {
        Ok(c) if f.chain.use_of(&c.payer, &c.nonce).is_some() => {
            json!({"isValid": false, "invalidReason": NONCE_USED, "payer": c.payer})
        }
        Ok(c) if f.chain.balance(&c.payer) < c.value => {
            json!({"isValid": false, "invalidReason": INSUFFICIENT, "payer": c.payer})
        }
        Ok(c) => {
            if let Some(VerifyMode::PayerSpends(spend)) = mode {
                match spend {
                    Some((to, value)) => f.spend_elsewhere(&c.payer, &c.nonce, &to, value),
                    None => f.cancel(&c.payer, &c.nonce),
                };
            }
            json!({"isValid": true, "payer": c.payer})
        }
        Err(Refusal { reason, payer }) => {
            json!({"isValid": false, "invalidReason": reason, "payer": payer})
        }
    };
    axum::Json(answer).into_response()
}

async fn settle_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let mode = f.counters.lock().unwrap().modes.pop_front();
    if let Some(Mode::Stall(delay)) = &mode {
        tokio::time::sleep(*delay).await;
    }
    let checked = match check(&f.chain, &body) {
        Ok(checked) => checked,
        Err(Refusal { reason, payer }) => {
            return settle_failure(&reason, "", payer.as_deref(), "");
        }
    };
    let network = checked.network.caip2();
    let payer = checked.payer.clone();
    match &mode {
        Some(Mode::Fail(reason)) => return settle_failure(reason, network, Some(&payer), ""),
        Some(Mode::SucceedWithoutTransfer) => {
            let made_up = format!("0x{}", domain::ids::random_hex(32));
            return success(&made_up, network, &payer);
        }
        _ => {}
    }
    // A nonce already used: a re-POST of our own pending settlement answers it once mined;
    // anything else is refused as the contract's simulation would.
    if let Some((hash, _)) = f.chain.use_of(&checked.payer, &checked.nonce) {
        let ours = f.counters.lock().unwrap().pending.contains(&hash);
        return match (ours, &mode) {
            (true, Some(Mode::Pending)) => pending(&hash, network),
            (true, _) if f.chain.mined(&hash).is_some() => {
                f.counters.lock().unwrap().pending.remove(&hash);
                match f.chain.mined(&hash) {
                    Some(true) => success(&hash, network, &payer),
                    _ => settle_failure(EXPIRED, network, Some(&payer), &hash),
                }
            }
            (true, _) => pending(&hash, network),
            (false, _) => settle_failure(NONCE_USED, network, Some(&payer), ""),
        };
    }
    if f.chain.balance(&checked.payer) < checked.value {
        return settle_failure(INSUFFICIENT, network, Some(&payer), "");
    }
    let delay = match &mode {
        Some(Mode::BroadcastThenFail { confirm_after, .. }) => *confirm_after,
        _ => Duration::ZERO,
    };
    let action = Use::Transfer {
        to: checked.to.clone(),
        value: checked.value,
    };
    let hash = f.chain.broadcast_within(
        &checked.payer,
        &checked.nonce,
        action,
        delay,
        checked.valid_before,
    );
    f.counters.lock().unwrap().settles += 1;
    match mode {
        Some(Mode::Pending) => {
            f.counters.lock().unwrap().pending.insert(hash.clone());
            pending(&hash, network)
        }
        Some(Mode::BroadcastThenFail { reason, .. }) => {
            settle_failure(&reason, network, Some(&payer), "")
        }
        Some(Mode::SettleThenStall(delay)) => {
            tokio::time::sleep(delay).await;
            success(&hash, network, &payer)
        }
        _ => success(&hash, network, &payer),
    }
}

fn success(transaction: &str, network: &str, payer: &str) -> Response {
    axum::Json(
        json!({"success": true, "transaction": transaction, "network": network, "payer": payer}),
    )
    .into_response()
}

/// A `SettleResponse` with `success: false` (HTTP 200).
fn settle_failure(reason: &str, network: &str, payer: Option<&str>, transaction: &str) -> Response {
    let mut body = json!({
        "success": false,
        "errorReason": reason,
        "transaction": transaction,
        "network": network,
    });
    if let Some(payer) = payer {
        body["payer"] = json!(payer);
    }
    axum::Json(body).into_response()
}

/// `settlement_pending`, with HTTP 500 as CDP sends it.
fn pending(transaction: &str, network: &str) -> Response {
    let mut response = settle_failure("settlement_pending", network, None, transaction);
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// `POST /rpc`: the chain's node (see [`crate::chain`]).
async fn rpc_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let stall = f.chain.stall();
    if !stall.is_zero() {
        tokio::time::sleep(stall).await;
    }
    axum::Json(f.chain.http(&body)).into_response()
}
