//! A development x402 facilitator (`reference/x402.md` §3): `POST /verify`, `POST /settle`,
//! `GET /supported`. It checks payments for real — the same offline checks as the service,
//! including the EIP-712 signature recovering to `from` — plus nonce uniqueness, and "settles"
//! into its own ledger once per (payer, nonce), answering a made-up transaction hash. Tests can
//! make the next settle fail, stall (before or after settling: an answer lost), or answer
//! `settlement_pending` (HTTP 500, as CDP does), make the next verify stall, answer garbage or
//! `isValid: false`, and count verifies and settles. A repeated settle of a settled
//! authorization answers `invalid_exact_evm_nonce_already_used`, as the token contract would.
//!
//! It also stands in for the chain: `POST /rpc` answers JSON-RPC `eth_call` of USDC's
//! `authorizationState(payer, nonce)` from its ledger (`reference/x402.md` §9) — true once a
//! settlement was broadcast (or, with a chain lag set, that long after). `make dev` runs it unless
//! a real facilitator is configured.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use shared::x402::verify::{self, PaymentError};
use shared::x402::{Network, Offer, PaymentRequirements, PaymentRequirementsV1};

/// What the next settle does instead of settling normally.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Answer `success: false` with this reason.
    Fail(String),
    /// Wait this long first.
    Stall(Duration),
    /// Broadcast: record the settlement but answer HTTP 500 `settlement_pending`; the next
    /// identical settle without a mode confirms it (with `Pending` again, it stays pending).
    Pending,
    /// Settle, then wait this long before answering (the caller's timeout loses the answer).
    SettleThenStall(Duration),
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
}

#[derive(Default)]
struct Ledger {
    /// (payer, nonce) → (transaction, confirmed).
    settled: HashMap<(String, String), (String, bool)>,
    /// (payer, nonce) → when it was broadcast.
    broadcast_at: HashMap<(String, String), std::time::Instant>,
    /// How long a settlement takes to show in `authorizationState` (a lagging node).
    chain_lag: Duration,
    settles: usize,
    verifies: usize,
    rpc_calls: usize,
    modes: VecDeque<Mode>,
    verify_modes: VecDeque<VerifyMode>,
}

/// The facilitator's state.
#[derive(Default)]
pub struct DevFacilitator {
    ledger: Mutex<Ledger>,
}

impl DevFacilitator {
    /// A new facilitator with an empty ledger.
    pub fn new() -> Arc<Self> {
        Arc::new(DevFacilitator::default())
    }

    /// Serves on `addr` in the background; returns its base URL.
    pub async fn start(self: &Arc<Self>, addr: &str) -> std::io::Result<String> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let app = Router::new()
            .route("/verify", post(verify_route))
            .route("/settle", post(settle_route))
            .route("/supported", get(supported))
            .route("/rpc", post(rpc_route))
            .with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(format!("http://{local}"))
    }

    /// Queues a mode for the next settle.
    pub fn next_settle(&self, mode: Mode) {
        self.ledger.lock().unwrap().modes.push_back(mode);
    }

    /// Queues a mode for the next verify.
    pub fn next_verify(&self, mode: VerifyMode) {
        self.ledger.lock().unwrap().verify_modes.push_back(mode);
    }

    /// Makes `authorizationState` show a settlement only `lag` after it was broadcast.
    pub fn set_chain_lag(&self, lag: Duration) {
        self.ledger.lock().unwrap().chain_lag = lag;
    }

    /// `eth_call`s answered.
    pub fn rpc_calls(&self) -> usize {
        self.ledger.lock().unwrap().rpc_calls
    }

    /// Settlements made (each (payer, nonce) once).
    pub fn settles(&self) -> usize {
        self.ledger.lock().unwrap().settles
    }

    /// Verify calls answered.
    pub fn verifies(&self) -> usize {
        self.ledger.lock().unwrap().verifies
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

/// Checks a `/verify` or `/settle` body for real; `Ok((payer, nonce, network))`.
fn check(body: &Value) -> Result<(String, String, Network), String> {
    let version = body["x402Version"].as_u64().ok_or("invalid_x402_version")? as u8;
    let requirements = &body["paymentRequirements"];
    let offer = if version == 2 {
        let r: PaymentRequirements = serde_json::from_value(requirements.clone())
            .map_err(|_| "invalid_payment_requirements")?;
        Offer {
            network: Network::parse(&r.network).ok_or("invalid_network")?,
            pay_to: r.pay_to,
            amount: r
                .amount
                .parse()
                .map_err(|_| "invalid_payment_requirements")?,
            max_timeout_seconds: r.max_timeout_seconds,
            resource: String::new(),
            description: String::new(),
        }
    } else {
        let r: PaymentRequirementsV1 = serde_json::from_value(requirements.clone())
            .map_err(|_| "invalid_payment_requirements")?;
        Offer {
            network: Network::parse(&r.network).ok_or("invalid_network")?,
            pay_to: r.pay_to,
            amount: r
                .max_amount_required
                .parse()
                .map_err(|_| "invalid_payment_requirements")?,
            max_timeout_seconds: r.max_timeout_seconds,
            resource: r.resource,
            description: r.description,
        }
    };
    let raw = body["paymentPayload"].clone();
    let payload = serde_json::from_value(raw.clone()).map_err(|_| "invalid_payload")?;
    let now = shared::time::now().unix_timestamp() as u64;
    match verify::verify(version, &payload, raw, &offer, now) {
        Ok(v) => Ok((v.payer, v.nonce, v.network)),
        Err(PaymentError::Rejected(reason)) => Err(reason.to_owned()),
        Err(PaymentError::Malformed(_)) => Err("invalid_payload".into()),
    }
}

async fn verify_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let mode = f.ledger.lock().unwrap().verify_modes.pop_front();
    match mode {
        Some(VerifyMode::Stall(delay)) => tokio::time::sleep(delay).await,
        Some(VerifyMode::Garbage) => return "<html>bad gateway</html>".into_response(),
        Some(VerifyMode::Invalid(reason)) => {
            f.ledger.lock().unwrap().verifies += 1;
            return axum::Json(json!({"isValid": false, "invalidReason": reason})).into_response();
        }
        None => {}
    }
    let mut ledger = f.ledger.lock().unwrap();
    ledger.verifies += 1;
    let answer = match check(&body) {
        Ok((payer, nonce, _)) if ledger.settled.contains_key(&(payer.clone(), nonce.clone())) => {
            let reason = "invalid_exact_evm_nonce_already_used";
            json!({"isValid": false, "invalidReason": reason, "payer": payer})
        }
        Ok((payer, _, _)) => json!({"isValid": true, "payer": payer}),
        Err(reason) => json!({"isValid": false, "invalidReason": reason}),
    };
    axum::Json(answer).into_response()
}

async fn settle_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let mode = f.ledger.lock().unwrap().modes.pop_front();
    if let Some(Mode::Stall(delay)) = &mode {
        tokio::time::sleep(*delay).await;
    }
    let (payer, nonce, network) = match check(&body) {
        Ok(checked) => checked,
        Err(reason) => {
            return settle_failure(&reason, "", None, "");
        }
    };
    let network = network.caip2();
    if let Some(Mode::Fail(reason)) = mode {
        return settle_failure(&reason, network, Some(&payer), "");
    }
    let settled = f.record_settlement(&payer, &nonce, matches!(mode, Some(Mode::Pending)));
    let transaction = match settled {
        Recorded::AlreadyUsed => {
            let reason = "invalid_exact_evm_nonce_already_used";
            return settle_failure(reason, network, Some(&payer), "");
        }
        Recorded::Pending(transaction) => return pending(&transaction, network),
        Recorded::Settled(transaction) => transaction,
    };
    if let Some(Mode::SettleThenStall(delay)) = mode {
        tokio::time::sleep(delay).await;
    }
    axum::Json(
        json!({"success": true, "transaction": transaction, "network": network, "payer": payer}),
    )
    .into_response()
}

/// What a settle did to the ledger.
enum Recorded {
    /// Settled (now or by a confirmation of a pending broadcast): the transaction.
    Settled(String),
    /// Broadcast, unconfirmed.
    Pending(String),
    /// Settled before: the authorization is used.
    AlreadyUsed,
}

impl DevFacilitator {
    /// Settles (payer, nonce) into the ledger, once; `pending` leaves it unconfirmed.
    fn record_settlement(&self, payer: &str, nonce: &str, pending: bool) -> Recorded {
        let mut ledger = self.ledger.lock().unwrap();
        let key = (payer.to_owned(), nonce.to_owned());
        if let Some((transaction, confirmed)) = ledger.settled.get(&key).cloned() {
            if confirmed {
                return Recorded::AlreadyUsed;
            }
            if pending {
                return Recorded::Pending(transaction);
            }
            ledger.settled.insert(key, (transaction.clone(), true));
            return Recorded::Settled(transaction);
        }
        let transaction = format!(
            "0x{}",
            hex::encode(Sha256::digest(format!("{payer}{nonce}").as_bytes()))
        );
        ledger.settles += 1;
        ledger
            .broadcast_at
            .insert(key.clone(), std::time::Instant::now());
        ledger.settled.insert(key, (transaction.clone(), !pending));
        if pending {
            Recorded::Pending(transaction)
        } else {
            Recorded::Settled(transaction)
        }
    }
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

/// A JSON-RPC error answer.
fn rpc_error(id: &Value, code: i64, message: &str) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
        .into_response()
}

/// `POST /rpc`: JSON-RPC `eth_call` of `authorizationState(payer, nonce)`, answered from the
/// ledger (any contract address: the ledger is per network and asset already).
async fn rpc_route(
    State(f): State<Arc<DevFacilitator>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let id = body["id"].clone();
    let answer = |result: Value| axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    if body["method"] != "eth_call" {
        return rpc_error(&body["id"], -32601, "method not found");
    }
    let data = body["params"][0]["data"].as_str().unwrap_or_default();
    match shared::x402::chain::decode_call(data) {
        Ok((payer, nonce)) => {
            let mut ledger = f.ledger.lock().unwrap();
            ledger.rpc_calls += 1;
            let lag = ledger.chain_lag;
            let used = ledger
                .broadcast_at
                .get(&(payer, nonce))
                .is_some_and(|at| at.elapsed() >= lag);
            answer(Value::from(shared::x402::chain::encode_answer(used))).into_response()
        }
        Err(e) => rpc_error(&body["id"], 3, &format!("execution reverted: {e}")),
    }
}
