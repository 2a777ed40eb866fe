//! OAuth access tokens `mcp_at_<64 hex>` (issue 47, point 2): what an MCP client that connected
//! with OAuth sends as `Authorization: Bearer` at `/mcp`. Each stands for the API key its grant
//! is (`crate::identity::oauth`, which issues them): a request is authenticated as that key,
//! with every rule of the key's. Only its SHA-256 is stored; every failure is the same 401.

use lambda_http::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::Principal;
use crate::error::ApiError;
use crate::state::AppState;

/// Every access token starts with this.
pub const PREFIX: &str = "mcp_at_";
/// Random bytes in an access token (and in the authorization server's other secrets): 256 bits.
pub const SECRET_BYTES: usize = 32;

/// SHA-256 of a presented token (or code), hex: what the store keeps.
pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether `value` has the shape of a secret behind `prefix` (64 lowercase hex after it).
pub fn shaped(value: &str, prefix: &str) -> bool {
    value.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == SECRET_BYTES * 2 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The access token a request presents (`Authorization: Bearer mcp_at_…`), if any.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    super::bearer(headers).filter(|v| v.starts_with(PREFIX))
}

/// Authenticates the access token in `headers` at `now` (unix seconds) as the API key it stands
/// for: its shape, then its record (an access token, unexpired), then the key exactly as
/// `X-API-Key` is ([`super::api_key::authenticate_hash`]: revoked, expired, counted).
///
/// Errors: 401 for every failure of the token or its key (the reason is logged); 429 over the
/// key's rate limit; 500 when the store fails.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    now: f64,
) -> Result<Principal, ApiError> {
    let refuse = |reason: &str| super::refused("access token", reason);
    let token = presented(headers).ok_or_else(|| refuse("missing"))?;
    if !shaped(token, PREFIX) {
        return Err(refuse("malformed"));
    }
    let record = state
        .store
        .oauth_token(&hash(token))
        .await?
        .ok_or_else(|| refuse("unknown"))?;
    if record.kind != crate::store::oauth::TokenKind::Access {
        return Err(refuse("not an access token"));
    }
    if record.expires_epoch <= now as i64 {
        return Err(refuse("expired"));
    }
    super::api_key::authenticate_hash(state, &record.grant.key_hash, now).await
}
