//! Who is calling (design brief §3, Identity). A request is authenticated into a [`Principal`]:
//! the owner's wallet address, and the credential that proved it — an API key
//! ([`api_key`]) or a signed-in session ([`session`], created by [`siwe`]).

pub mod address;
pub mod api_key;
pub mod session;
pub mod siwe;

use lambda_http::Request;

use crate::error::ApiError;
use crate::state::AppState;

/// What authenticated a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    /// An API key (`X-API-Key` or `Authorization: Bearer svc_…`).
    ApiKey {
        /// The key's record id (`key_…`).
        key_id: String,
        /// SHA-256 of the key, hex.
        key_hash: String,
        /// What the key may do (`crate::keys::require`).
        scopes: Vec<crate::keys::Scope>,
        /// What the key may provision (`crate::keys::check_policy`).
        policy: Option<crate::keys::Policy>,
    },
    /// A session (the `__Host-session` cookie or `Authorization: Bearer <token>`).
    Session {
        /// SHA-256 of the session token, hex.
        token_hash: String,
    },
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// The owner's wallet address, lowercase `0x` + 40 hex. Every record is owned by one.
    pub owner: String,
    /// How the caller proved it.
    pub credential: Credential,
}

/// Authenticates a request by API key if it presents one, else by session, and counts it
/// against the caller's rate limit.
///
/// Errors: 401 [`ApiError::Unauthorized`] — one generic answer for missing, malformed, unknown,
/// revoked or expired credentials; 403 for a session cookie sent cross-origin on a method that
/// changes state; 429 over the rate limit; 500 when the store fails.
pub async fn authenticate(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    let principal = if api_key::presented(req.headers()).is_some() {
        api_key::authenticate(&state.store, req.headers()).await?
    } else {
        session::authenticate(state, req).await?
    };
    limit(state, &principal).await?;
    Ok(principal)
}

/// Counts the request against its caller's rate limit (`crate::ratelimit`): per API key, or
/// per session.
///
/// Errors: 429 over the limit.
pub async fn limit(state: &AppState, principal: &Principal) -> Result<(), ApiError> {
    let subject = match &principal.credential {
        Credential::ApiKey { key_id, .. } => key_id.as_str(),
        Credential::Session { token_hash } => token_hash.as_str(),
    };
    let limit = state.config.rate_limits.caller;
    crate::ratelimit::check(state, "caller", limit, subject, crate::ratelimit::now()).await
}

/// [`authenticate`], and then refuses API keys: key and session management need a signed-in
/// human (design brief §3).
///
/// Errors: those of [`authenticate`]; 403 for an API key.
pub async fn require_session(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    let principal = authenticate(state, req).await?;
    match principal.credential {
        Credential::Session { .. } => Ok(principal),
        Credential::ApiKey { .. } => Err(ApiError::Forbidden(
            "this route needs a signed-in session; an API key cannot use it".into(),
        )),
    }
}

/// [`authenticate`], and then refuses sessions: provisioning is done by agents with a key.
///
/// Errors: those of [`authenticate`]; 403 for a session.
pub async fn require_key(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    let principal = authenticate(state, req).await?;
    match principal.credential {
        Credential::ApiKey { .. } => Ok(principal),
        Credential::Session { .. } => Err(ApiError::Forbidden(
            "this route needs an API key (X-API-Key); a session cannot use it".into(),
        )),
    }
}
