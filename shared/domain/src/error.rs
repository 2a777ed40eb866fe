//! The error type every handler returns. Each variant has one HTTP meaning, given here
//! ([`ApiError::problem_parts`]: status, problem type, title); `faces::http` alone renders it as
//! an RFC 9457 problem document.

use lambda_http::http::StatusCode;

use crate::pricing::Quote;
use crate::store::StoreError;
use crate::upstream::UpstreamError;
use crate::x402::facilitator::FacilitatorError;
use crate::x402::{Offer, SettleResponse};

/// An error the API reports to its caller.
///
/// Status codes (design brief §2): `Invalid` 400, `Unauthorized` and `SignInFailed` 401,
/// `PaymentRequired` 402, `Forbidden`, `InsufficientScope` and `PolicyViolation` 403,
/// `NotFound` 404, `MethodNotAllowed` 405, `Conflict` 409, `Gone` 410, `PayloadTooLarge` 413,
/// `UnsupportedMediaType` 415, `RateLimited` 429, `UpstreamNotConfigured` and `Unavailable` 503
/// (`Busy` 503 with `Retry-After`), `Upstream` 4xx/429/502/504 as [`UpstreamError`] says,
/// `Store` and `Internal` 500, `Charged` as its inner error, `OAuth` its own (400 or 401).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Bad input; `field` names what is wrong (`plan`, `tags.owner`, `body`, `id`, …).
    #[error("{field}: {message}")]
    Invalid {
        /// The field at fault, as a path into the request.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No credentials, or credentials that are malformed, unknown, revoked or expired. The
    /// response never says which.
    #[error("missing or invalid credentials")]
    Unauthorized,
    /// A sign-in (SIWE) attempt that failed verification; the reason is safe to show.
    #[error("sign-in failed: {0}")]
    SignInFailed(String),
    /// Valid credentials that may not do this (another owner's server or sandbox).
    #[error("{0}")]
    Forbidden(String),
    /// An API key issued without the scope this needs (named: `read`, `provision`, …).
    #[error("this API key lacks the `{0}` scope")]
    InsufficientScope(String),
    /// Too many requests from this caller (or address) in the current window: 429 with
    /// `Retry-After` and the `RateLimit-Policy` / `RateLimit` headers.
    #[error(
        "too many requests: at most {} per {} s; retry in {} s",
        .0.quota,
        .0.window,
        .0.retry_after
    )]
    RateLimited(Box<Exceeded>),
    /// A request outside the caller's key policy (`limit`: `allowedPlans`, `allowedRegions`,
    /// `maxPricePerServer`, `dailySpendLimit`, `monthlySpendLimit`, `maxActiveServers`): 403
    /// `policy-violation`, before any 402.
    #[error("{message} (key policy: {limit})")]
    PolicyViolation {
        /// The policy field that refuses.
        limit: String,
        /// What is left of it: USD for the spend limits and `maxPricePerServer`, servers for
        /// `maxActiveServers`; `None` for the lists.
        remaining: Option<f64>,
        /// What it refuses, and what it allows.
        message: String,
        /// The approval its owner can grant, for a key's paid request (the identity layer's
        /// approvals make it).
        approval: Option<Box<crate::store::approvals::ApprovalOffer>>,
    },
    /// Nothing by that id.
    #[error("{0}")]
    NotFound(String),
    /// It existed and is gone for good (a deleted server).
    #[error("{0}")]
    Gone(String),
    /// The request conflicts with the current state (a revoked key, a full key).
    #[error("{0}")]
    Conflict(String),
    /// The route exists but not for this method.
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// The body's media type is not the one the route takes (e.g. a sign-in posted as a form).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The request body is larger than the configured limit (bytes).
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit, bytes.
        limit: usize,
    },
    /// The plan costs money and no acceptable payment came: a 402 with the x402 offer (v2
    /// header and v1 body) and the reason.
    #[error("payment required: {}", .0.reason)]
    PaymentRequired(Box<PaymentDemand>),
    /// The facilitator could not be reached, did not answer in time, or left the settlement
    /// pending (502, or 504 for timeouts and pending settlements).
    #[error(transparent)]
    Facilitator(#[from] FacilitatorError),
    /// The upstream token is not configured, so cloud routes cannot work.
    #[error("the upstream provider is not configured")]
    UpstreamNotConfigured,
    /// The service cannot do this now through no fault of the caller (e.g. a plan priced in a
    /// currency without a configured rate).
    #[error("{0}")]
    Unavailable(String),
    /// Try again after `retry_after` seconds (503 with `Retry-After`): e.g. too little time was
    /// left to settle a payment; nothing was charged.
    #[error("{message}")]
    Busy {
        /// What happened.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// The upstream provider failed or refused.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The store failed (a bad cursor is [`ApiError::Invalid`] instead: see the `From`).
    #[error(transparent)]
    Store(StoreError),
    /// Anything else that is our fault.
    #[error("{0}")]
    Internal(String),
    /// A refusal of the authorization server's (`crate::identity::oauth`), in OAuth's own
    /// form: `{error, error_description}` JSON (RFC 6749 §5.2, RFC 7591 §3.2.2, RFC 7009 §2.2.1)
    /// rather than a problem document.
    #[error("{}: {}", .0.error, .0.description)]
    OAuth(OAuthError),
    /// An error answered after the request's payment settled: the inner error's status and
    /// problem, with `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE` and a detail that says what was
    /// charged and what happens next.
    #[error("{} ({})", .0.error, .0.next)]
    Charged(Box<Charged>),
}

/// The (status, problem type slug, title) of a provider failure: its 400/422 → 400, 404 → 404,
/// 409 → 409, 429 → 429, its 401/403 (our token) and 5xx → 502, a timeout → 504, no token → 503.
fn upstream_parts(up: &UpstreamError) -> (StatusCode, &'static str, &'static str) {
    use StatusCode as S;
    match up {
        UpstreamError::Status { status, .. } => match *status {
            400 | 422 => (
                S::BAD_REQUEST,
                "upstream-rejected",
                "Rejected by the provider",
            ),
            404 => (S::NOT_FOUND, "not-found", "Not found"),
            409 => (S::CONFLICT, "conflict", "Conflict"),
            _ => (S::BAD_GATEWAY, "upstream-error", "Upstream error"),
        },
        UpstreamError::RateLimited { .. } => (S::TOO_MANY_REQUESTS, "rate-limited", "Rate limited"),
        UpstreamError::Timeout => (S::GATEWAY_TIMEOUT, "upstream-timeout", "Upstream timeout"),
        UpstreamError::NoToken => (
            S::SERVICE_UNAVAILABLE,
            "upstream-not-configured",
            "Upstream not configured",
        ),
        UpstreamError::Transport(_) | UpstreamError::Decode(_) => {
            (S::BAD_GATEWAY, "upstream-error", "Upstream error")
        }
    }
}

impl From<StoreError> for ApiError {
    /// A listing's bad cursor is the caller's 400 naming `cursor`; a store that is unavailable
    /// for now is a 503 with `Retry-After: 1` (the same request may be sent again: a payment is
    /// never charged twice); any other store failure is ours (500).
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::BadCursor => ApiError::invalid("cursor", "is not a cursor of this listing"),
            StoreError::Unavailable(detail) => {
                tracing::warn!(error = %detail, "store unavailable");
                ApiError::Busy {
                    message: "our store is busy or did not answer in time: send the same \
                              request again (one that carries a payment is never charged twice)"
                        .into(),
                    retry_after: 1,
                }
            }
            other => ApiError::Store(other),
        }
    }
}

/// A refusal's details, for the response headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    /// The policy's name (`caller`, `owner`, `address`, `failed-auth`, `sign-in`, `waits`).
    pub policy: &'static str,
    /// Requests per window (for `waits`: long polls at once).
    pub quota: u32,
    /// The window, seconds.
    pub window: u64,
    /// Seconds until the window ends.
    pub retry_after: u64,
}

impl Exceeded {
    /// `RateLimit-Policy`: `"<policy>";q=<quota>;w=<window>`.
    pub fn policy_header(&self) -> String {
        format!("\"{}\";q={};w={}", self.policy, self.quota, self.window)
    }

    /// `RateLimit`: `"<policy>";r=0;t=<seconds to reset>`.
    pub fn limit_header(&self) -> String {
        format!("\"{}\";r=0;t={}", self.policy, self.retry_after)
    }
}

/// What an answer after settlement says besides its error.
#[derive(Debug)]
pub struct Charged {
    /// The error itself (its status is the answer's).
    pub error: ApiError,
    /// The settlement, for the payment response headers.
    pub settlement: SettleResponse,
    /// The payment as `GET /api/payments` shows it.
    pub payment: serde_json::Value,
    /// What was charged and what happens next, in a sentence.
    pub next: String,
}

/// What a 402 demands.
#[derive(Debug, Clone)]
pub struct PaymentDemand {
    /// The price, with how it was made (absent when a stored refusal is answered again).
    pub quote: Option<Quote>,
    /// The offer (network, asset, payTo, amount, resource).
    pub offer: Offer,
    /// Why payment is (still) required: `payment required`, or an x402 reason code.
    pub reason: String,
}

/// An OAuth error answer: its status (400, or 401 for `invalid_client`), OAuth's error code
/// (`invalid_request`, `invalid_grant`, `invalid_client`, `unsupported_grant_type`,
/// `invalid_scope`, `invalid_target`, `invalid_redirect_uri`, `invalid_client_metadata`) and a
/// description for the developer.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthError {
    /// 400 or 401.
    pub status: u16,
    /// OAuth's error code.
    pub error: &'static str,
    /// What is wrong, for a developer (`error_description`).
    pub description: String,
}

impl ApiError {
    /// An OAuth refusal `error` (400; 401 for `invalid_client`) saying `description`.
    pub fn oauth(error: &'static str, description: impl Into<String>) -> ApiError {
        ApiError::OAuth(OAuthError {
            status: if error == "invalid_client" { 401 } else { 400 },
            error,
            description: description.into(),
        })
    }

    /// The status code this error answers (see [`ApiError`]).
    pub fn status(&self) -> StatusCode {
        self.problem_parts().0
    }

    /// (status, problem type slug `/problems/<slug>`, title) of this error; a provider's
    /// failure as `upstream_parts` maps it.
    pub fn problem_parts(&self) -> (StatusCode, &'static str, &'static str) {
        use StatusCode as S;
        match self {
            ApiError::Invalid { .. } => (S::BAD_REQUEST, "invalid-request", "Invalid request"),
            ApiError::Unauthorized => (S::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            ApiError::SignInFailed(_) => (S::UNAUTHORIZED, "sign-in-failed", "Sign-in failed"),
            ApiError::Conflict(_) => (S::CONFLICT, "conflict", "Conflict"),
            ApiError::PaymentRequired(_) => {
                (S::PAYMENT_REQUIRED, "payment-required", "Payment required")
            }
            ApiError::Forbidden(_) => (S::FORBIDDEN, "forbidden", "Forbidden"),
            ApiError::RateLimited(_) => (S::TOO_MANY_REQUESTS, "rate-limited", "Rate limited"),
            ApiError::PolicyViolation { .. } => {
                (S::FORBIDDEN, "policy-violation", "Key policy violation")
            }
            ApiError::InsufficientScope(_) => {
                (S::FORBIDDEN, "insufficient-scope", "Insufficient scope")
            }
            ApiError::NotFound(_) => (S::NOT_FOUND, "not-found", "Not found"),
            ApiError::Gone(_) => (S::GONE, "gone", "Gone"),
            ApiError::MethodNotAllowed(_) => (
                S::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
            ),
            ApiError::UnsupportedMediaType(_) => (
                S::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
            ),
            ApiError::PayloadTooLarge { .. } => (
                S::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
            ),
            ApiError::UpstreamNotConfigured => (
                S::SERVICE_UNAVAILABLE,
                "upstream-not-configured",
                "Upstream not configured",
            ),
            ApiError::Facilitator(err) => match err {
                crate::x402::facilitator::FacilitatorError::Timeout => (
                    S::GATEWAY_TIMEOUT,
                    "payment-timeout",
                    "Payment not settled in time",
                ),
                _ => (S::BAD_GATEWAY, "facilitator-error", "Facilitator error"),
            },
            ApiError::Unavailable(_) => (
                S::SERVICE_UNAVAILABLE,
                "service-unavailable",
                "Service unavailable",
            ),
            ApiError::Upstream(up) => upstream_parts(up),
            ApiError::Busy { .. } => (
                S::SERVICE_UNAVAILABLE,
                "service-unavailable",
                "Service unavailable",
            ),
            ApiError::Store(_) | ApiError::Internal(_) => (
                S::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal server error",
            ),
            ApiError::Charged(charged) => charged.error.problem_parts(),
            ApiError::OAuth(err) if err.status == 401 => (S::UNAUTHORIZED, "oauth", "OAuth error"),
            ApiError::OAuth(_) => (S::BAD_REQUEST, "oauth", "OAuth error"),
        }
    }

    /// A 400 naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}
