//! The facilitator client (`reference/x402.md` §3): `POST /verify`, then `POST /settle`, each
//! with `{x402Version, paymentPayload, paymentRequirements}`. A settle answer is read whatever
//! its HTTP status: `success: true` is settled; `errorReason: "settlement_pending"` (CDP may send
//! it with HTTP 500) means broadcast but unconfirmed; anything else is a failure.
//!
//! Authentication: none, a static header (`FACILITATOR_AUTH_HEADER="Name: value"`), or Coinbase
//! CDP's per-request JWT ([`super::cdp`]).

use std::time::Duration;

use serde_json::{Value, json};

use super::{SettleResponse, VerifyResponse};
use crate::secrets::Secret;

/// How requests to the facilitator are authenticated.
#[derive(Debug, Clone)]
pub enum FacilitatorAuth {
    /// No authentication (e.g. `https://x402.org/facilitator`, or the development facilitator).
    None,
    /// A static header.
    Header {
        /// Header name.
        name: String,
        /// Header value.
        value: Secret,
    },
    /// Coinbase CDP: a fresh ES256 or EdDSA JWT per request, from an API key id and secret.
    Cdp {
        /// `CDP_API_KEY_ID`.
        key_id: String,
        /// `CDP_API_KEY_SECRET`: an EC private key PEM, or base64 of a 64-byte Ed25519 key
        /// (from the environment, or `CDP_API_KEY_SECRET_PARAM` read on first use).
        secret: crate::secrets::LazySecret,
    },
}

/// A failure reaching the facilitator (not a refusal, which is an answer).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FacilitatorError {
    /// No answer in time.
    #[error("the facilitator did not answer in time")]
    Timeout,
    /// Connection failure.
    #[error("the facilitator is unreachable: {0}")]
    Transport(String),
    /// An answer that is not the protocol's.
    #[error("unexpected facilitator answer: {0}")]
    Protocol(String),
}

/// What `/settle` said.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// On chain.
    Settled(SettleResponse),
    /// Broadcast, not yet confirmed (`settlement_pending`).
    Pending(SettleResponse),
    /// Refused (`success: false` with another reason).
    Failed(SettleResponse),
}

/// What `/verify` and `/settle` are sent: the payment payload as received and the payment
/// requirements it pays (both as JSON), under the protocol version it came in.
#[derive(Debug, Clone, Copy)]
pub struct PaymentRequest<'a> {
    /// 1 or 2.
    pub version: u8,
    /// The payment payload.
    pub payload: &'a Value,
    /// The payment requirements.
    pub requirements: &'a Value,
}

/// A facilitator at a base URL (e.g. `https://x402.org/facilitator`).
#[derive(Debug, Clone)]
pub struct Facilitator {
    timeout: Duration,
    base_url: String,
    auth: FacilitatorAuth,
}

impl Facilitator {
    /// A client of the facilitator at `base_url`, each request within `timeout`, sent through
    /// the process's one HTTP client ([`crate::outbound`], built on the first request).
    pub fn new(base_url: &str, auth: FacilitatorAuth, timeout: Duration) -> Self {
        Facilitator {
            timeout,
            base_url: base_url.trim_end_matches('/').to_owned(),
            auth,
        }
    }

    fn body(payment: &PaymentRequest<'_>) -> Value {
        json!({
            "x402Version": payment.version,
            "paymentPayload": payment.payload,
            "paymentRequirements": payment.requirements,
        })
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), FacilitatorError> {
        let url = format!("{}{path}", self.base_url);
        let http = crate::outbound::client().map_err(FacilitatorError::Transport)?;
        let mut request = http.post(&url).timeout(self.timeout).json(body);
        match &self.auth {
            FacilitatorAuth::None => {}
            FacilitatorAuth::Header { name, value } => {
                request = request.header(name.as_str(), value.expose())
            }
            FacilitatorAuth::Cdp { key_id, secret } => {
                let secret = secret.get().await.ok_or_else(|| {
                    FacilitatorError::Transport("the CDP key secret could not be read".into())
                })?;
                let jwt = super::cdp::jwt(
                    key_id,
                    secret,
                    "POST",
                    &url,
                    crate::time::now().unix_timestamp(),
                )
                .map_err(FacilitatorError::Protocol)?;
                request = request.bearer_auth(jwt);
            }
        }
        let response = crate::outbound::send(request).await.map_err(|e| {
            if e.is_timeout() {
                FacilitatorError::Timeout
            } else {
                FacilitatorError::Transport(e.without_url().to_string())
            }
        })?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| {
            if e.is_timeout() {
                FacilitatorError::Timeout
            } else {
                FacilitatorError::Transport(e.to_string())
            }
        })?;
        let value = serde_json::from_slice(&bytes).map_err(|_| {
            FacilitatorError::Protocol(format!("{path} answered {status} without JSON"))
        })?;
        Ok((status, value))
    }

    /// `POST /verify`.
    ///
    /// Errors: [`FacilitatorError`]; an answer that is not a `VerifyResponse`.
    pub async fn verify(
        &self,
        payment: &PaymentRequest<'_>,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let (status, value) = self.post("/verify", &Self::body(payment)).await?;
        serde_json::from_value(value)
            .map_err(|e| FacilitatorError::Protocol(format!("/verify {status}: {e}")))
    }

    /// `POST /settle`, read as a [`Settlement`] whatever the HTTP status.
    ///
    /// Errors: [`FacilitatorError`]; an answer that is not a `SettleResponse`.
    pub async fn settle(
        &self,
        payment: &PaymentRequest<'_>,
    ) -> Result<Settlement, FacilitatorError> {
        let (status, value) = self.post("/settle", &Self::body(payment)).await?;
        let response: SettleResponse = serde_json::from_value(value)
            .map_err(|e| FacilitatorError::Protocol(format!("/settle {status}: {e}")))?;
        Ok(if response.success {
            Settlement::Settled(response)
        } else if response.error_reason.as_deref() == Some("settlement_pending") {
            Settlement::Pending(response)
        } else {
            Settlement::Failed(response)
        })
    }
}
