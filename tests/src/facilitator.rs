//! A development x402 facilitator (`reference/x402.md` §3): `POST /verify`, `POST /settle`,
//! `GET /supported`. It checks payments for real — the same offline checks as the service,
//! including the EIP-712 signature recovering to `from` — plus nonce uniqueness, and "settles"
//! into its own ledger once per (payer, nonce), answering a made-up transaction hash. Tests can
//! make the next settle fail, stall, or answer `settlement_pending` (HTTP 500, as CDP does), and
//! count verifies and settles. `make dev` runs it unless a real facilitator is configured.

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
    /// identical settle confirms it.
    Pending,
}

#[derive(Default)]
struct Ledger {
    /// (payer, nonce) → (transaction, confirmed).
    settled: HashMap<(String, String), (String, bool)>,
    settles: usize,
    verifies: usize,
    modes: VecDeque<Mode>,
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
    let mut ledger = f.ledger.lock().unwrap();
    ledger.verifies += 1;
    let answer = match check(&body) {
        Ok((payer, nonce, _)) if ledger.settled.contains_key(&(payer.clone(), nonce.clone())) => {
            json!({"isValid": false, "invalidReason": "invalid_exact_evm_nonce_already_used", "payer": payer})
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
            return axum::Json(
                json!({"success": false, "errorReason": reason, "transaction": "", "network": ""}),
            )
            .into_response();
        }
    };
    let network = network.caip2();
    if let Some(Mode::Fail(reason)) = mode {
        return axum::Json(json!({"success": false, "errorReason": reason, "transaction": "", "network": network, "payer": payer}))
            .into_response();
    }
    let mut ledger = f.ledger.lock().unwrap();
    let key = (payer.clone(), nonce.clone());
    if let Some((transaction, confirmed)) = ledger.settled.get(&key).cloned() {
        if confirmed {
            return axum::Json(
                json!({"success": false, "errorReason": "invalid_exact_evm_nonce_already_used",
                "transaction": "", "network": network, "payer": payer}),
            )
            .into_response();
        }
        ledger.settled.insert(key, (transaction.clone(), true));
        return axum::Json(json!({"success": true, "transaction": transaction, "network": network, "payer": payer})).into_response();
    }
    let transaction = format!(
        "0x{}",
        hex::encode(Sha256::digest(format!("{payer}{nonce}").as_bytes()))
    );
    ledger.settles += 1;
    let pending = matches!(mode, Some(Mode::Pending));
    ledger.settled.insert(key, (transaction.clone(), !pending));
    if pending {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"success": false, "errorReason": "settlement_pending", "transaction": transaction, "network": network})),
        )
            .into_response();
    }
    axum::Json(
        json!({"success": true, "transaction": transaction, "network": network, "payer": payer}),
    )
    .into_response()
}
