//! MCP's authorization (issue 47, point 2; MCP 2025-11-25 "Authorization"): the MCP endpoint
//! is an OAuth 2.1 protected resource, and the service is its own authorization server.
//!
//! - Discovery: `/mcp`'s 401 names its protected-resource metadata (RFC 9728,
//!   [`protected_resource`]), which names this service as the authorization server, whose
//!   metadata (RFC 8414, [`authorization_server`]) names the endpoints below.
//! - Registration: dynamic client registration (RFC 7591, [`clients`]) of public clients, their
//!   redirect URIs held to what a human can see on the consent page.
//! - Authorization: the authorization code grant with PKCE `S256` only (RFC 7636), the
//!   `resource` indicator (RFC 8707) naming the MCP endpoint, and the issuer in the answer
//!   (RFC 9207). Its login and consent are the console's: the human signs in with their wallet,
//!   sees the client and where the token goes, chooses the scopes and the spend policy, and
//!   approves ([`grants::consent`]).
//! - The grant is a new API key with that policy, issued at the consent; its secret is never
//!   shown to anyone. The codes and tokens stand for the key (they hold its hash), so every rule
//!   downstream — scopes, policy, approvals, limits, events, revocation — is the key's: a
//!   revoked key ends its tokens at their next use, and revoking a token (RFC 7009) revokes the
//!   key.
//! - Tokens are opaque: access tokens last [`ACCESS_SECONDS`] and are accepted by `/mcp` alone;
//!   refresh tokens last [`REFRESH_SECONDS`] and rotate — each is exchanged once, and a second
//!   exchange of one (or of a code) is taken as theft and revokes the grant (OAuth 2.1 §4.3.1,
//!   §4.1.3).
//!
//! Refusals are OAuth's own `{error, error_description}` ([`ApiError::oauth`]).

pub mod clients;
pub mod grants;

use lambda_http::http::HeaderMap;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::auth::Principal;
use crate::error::ApiError;
use crate::policy::Scope;
use crate::state::AppState;

/// Every access token starts with this.
pub const ACCESS_PREFIX: &str = "mcp_at_";
/// Every refresh token starts with this.
pub const REFRESH_PREFIX: &str = "mcp_rt_";
/// Every authorization code starts with this.
pub const CODE_PREFIX: &str = "mcp_ac_";
/// Random bytes in a code or a token (256 bits).
const SECRET_BYTES: usize = 32;
/// How long an access token lasts, seconds.
pub const ACCESS_SECONDS: i64 = 3600;
/// How long a refresh token lasts, seconds.
pub const REFRESH_SECONDS: i64 = 30 * 86_400;
/// How long a code may wait for its exchange, seconds.
pub const CODE_SECONDS: i64 = 600;
/// How long a registration lasts, seconds.
pub const CLIENT_SECONDS: i64 = 30 * 86_400;

/// The MCP endpoint's path (its row's).
fn mcp_path() -> &'static str {
    crate::api::MCP.op.path
}

/// The protected resource, as tokens are bound to it (RFC 8707): `<base>/mcp`.
pub fn resource(base: &str) -> String {
    format!("{base}{}", mcp_path())
}

/// Where `/mcp`'s protected-resource metadata is (RFC 9728 §3.1: the well-known path inserted
/// before the resource's path): `<base>/.well-known/oauth-protected-resource/mcp`.
pub fn resource_metadata_url(base: &str) -> String {
    format!("{base}/.well-known/oauth-protected-resource{}", mcp_path())
}

/// The scopes a client may ask for: the API key's scopes (`crate::policy::Scope`).
fn scope_names() -> Vec<&'static str> {
    Scope::ALL.iter().map(|s| s.as_str()).collect()
}

/// `/mcp`'s protected-resource metadata (RFC 9728 §2).
pub fn protected_resource(base: &str) -> Value {
    json!({
        "resource": resource(base),
        "authorization_servers": [base],
        "scopes_supported": scope_names(),
        "bearer_methods_supported": ["header"],
        "resource_name": "Cloud API for agents (MCP)",
        "resource_documentation": format!("{base}/llms.txt"),
    })
}

/// The authorization server's metadata (RFC 8414 §2), its issuer the base URL.
pub fn authorization_server(base: &str) -> Value {
    let at = |id: &str| format!("{base}{}", crate::api::link(id, ""));
    json!({
        "issuer": base,
        "authorization_endpoint": at("authorize"),
        "token_endpoint": at("token"),
        "registration_endpoint": at("registerClient"),
        "revocation_endpoint": at("revokeToken"),
        "scopes_supported": scope_names(),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
        "service_documentation": format!("{base}/llms.txt"),
    })
}

/// `/mcp`'s `WWW-Authenticate` on a 401 (RFC 6750 §3, RFC 9728 §5.1): where its metadata is,
/// and `invalid_token` when the request presented a credential.
pub fn challenge(base: &str, presented: bool) -> String {
    let metadata = resource_metadata_url(base);
    if presented {
        format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", \
             error_description=\"the access token is missing, expired or revoked\""
        )
    } else {
        format!("Bearer resource_metadata=\"{metadata}\"")
    }
}

/// A code or token just made: shown once, stored as its SHA-256.
pub(crate) struct Secret(String);

impl Secret {
    /// A new random secret behind `prefix`.
    fn new(prefix: &str) -> Secret {
        Secret(format!("{prefix}{}", crate::ids::random_hex(SECRET_BYTES)))
    }

    /// The secret itself, to give once.
    fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256, hex: what the store keeps.
    fn hash(&self) -> String {
        hash(&self.0)
    }
}

/// SHA-256 of a presented code or token, hex.
fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether `value` has the shape of a secret behind `prefix` (64 lowercase hex after it).
fn shaped(value: &str, prefix: &str) -> bool {
    value.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == SECRET_BYTES * 2 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The access token a request presents (`Authorization: Bearer mcp_at_…`), if any.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(lambda_http::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| v.starts_with(ACCESS_PREFIX))
}

/// Authenticates the access token in `headers` at `now` (unix seconds) as the API key it stands
/// for: its shape, then its record (an access token, unexpired), then the key exactly as
/// `X-API-Key` is ([`super::auth::api_key::authenticate_hash`]: revoked, expired, counted).
///
/// Errors: 401 for every failure of the token or its key (the reason is logged); 429 over the
/// key's rate limit; 500 when the store fails.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    now: f64,
) -> Result<Principal, ApiError> {
    let refuse = |reason: &str| {
        tracing::info!(reason, "access token refused");
        ApiError::Unauthorized
    };
    let token = presented(headers).ok_or_else(|| refuse("missing"))?;
    if !shaped(token, ACCESS_PREFIX) {
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
    super::auth::api_key::authenticate_hash(state, &record.grant.key_hash, now).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_names_each_other() {
        let base = "https://api.example";
        let resource = protected_resource(base);
        assert_eq!(resource["resource"], "https://api.example/mcp");
        assert_eq!(resource["authorization_servers"][0], base);
        let server = authorization_server(base);
        assert_eq!(server["issuer"], base);
        assert_eq!(server["token_endpoint"], "https://api.example/oauth/token");
        assert_eq!(
            server["authorization_endpoint"],
            "https://api.example/oauth/authorize"
        );
        assert_eq!(
            server["registration_endpoint"],
            "https://api.example/oauth/register"
        );
        assert_eq!(
            server["revocation_endpoint"],
            "https://api.example/oauth/revoke"
        );
        assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(
            resource_metadata_url(base),
            "https://api.example/.well-known/oauth-protected-resource/mcp"
        );
        assert!(challenge(base, true).contains("error=\"invalid_token\""));
        assert!(!challenge(base, false).contains("error="));
    }

    #[test]
    fn secrets_have_their_shape_and_are_stored_hashed() {
        let secret = Secret::new(ACCESS_PREFIX);
        assert!(shaped(secret.expose(), ACCESS_PREFIX));
        assert!(!shaped(secret.expose(), REFRESH_PREFIX));
        assert_eq!(secret.hash(), hash(secret.expose()));
        assert_ne!(secret.hash(), secret.expose());
        assert!(!shaped(
            &format!("{ACCESS_PREFIX}{}", "A".repeat(64)),
            ACCESS_PREFIX
        ));
        assert!(!shaped(
            &format!("{ACCESS_PREFIX}{}", "a".repeat(63)),
            ACCESS_PREFIX
        ));
    }
}
