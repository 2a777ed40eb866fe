//! MCP's authorization (issue 47, point 2; MCP 2025-11-25 "Authorization"): the MCP endpoint
//! is an OAuth 2.1 protected resource, and the service is its own authorization server.
//!
//! - Discovery: `/mcp`'s 401 names its protected-resource metadata (RFC 9728), which names this
//!   service as the authorization server, whose metadata (RFC 8414) names the endpoints below
//!   (`faces::oauth` writes both from the route table).
//! - Registration: dynamic client registration (RFC 7591, [`clients`]) of public clients, their
//!   redirect URIs held to what a human can see on the consent page; a registration no human
//!   has connected is a stranger's: it lasts [`UNCONSENTED_CLIENT_SECONDS`], and its refused
//!   requests are shown, never sent back to it (RFC 9700 §4.11.2).
//! - Authorization: the authorization code grant with PKCE `S256` only (RFC 7636), the
//!   `resource` indicator (RFC 8707) naming the MCP endpoint ([`grants::Endpoint`]: the face
//!   names it), and the issuer in the answer (RFC 9207). Its login and consent are the
//!   console's: the human signs in with their wallet, sees the client and where the token goes,
//!   chooses the scopes and the spend policy, and approves ([`grants::consent`]).
//! - The grant is a new API key with that policy, issued at the consent; its secret is never
//!   shown to anyone. The codes and tokens stand for the key (they hold its hash), so every rule
//!   downstream — scopes, policy, approvals, limits, events, revocation — is the key's: a
//!   revoked key ends its tokens at their next use, and revoking a token (RFC 7009) revokes the
//!   key.
//! - Tokens are opaque: access tokens last [`ACCESS_SECONDS`] and are accepted by `/mcp` alone;
//!   refresh tokens last [`REFRESH_SECONDS`] and rotate — each is exchanged once, and a second
//!   exchange of one (or of a code) is taken as theft and revokes the grant (OAuth 2.1 §4.3.1,
//!   §4.1.3), but for a refresh token's retry by its client within [`REFRESH_GRACE_SECONDS`].
//!   A code or a refresh token is checked (client, redirect URI, verifier, expiry, key) before
//!   it is taken, so a request that fails a check spends nothing.
//!
//! Refusals are OAuth's own `{error, error_description}` (`crate::error::ApiError::oauth`).

pub mod clients;
pub mod grants;

pub use super::auth::access_token::PREFIX as ACCESS_PREFIX;
use super::auth::access_token::{hash, shaped};
/// Every refresh token starts with this.
pub const REFRESH_PREFIX: &str = "mcp_rt_";
/// Every authorization code starts with this.
pub const CODE_PREFIX: &str = "mcp_ac_";
use super::auth::access_token::SECRET_BYTES;
/// How long an access token lasts, seconds.
pub const ACCESS_SECONDS: i64 = 3600;
/// How long a refresh token lasts, seconds.
pub const REFRESH_SECONDS: i64 = 30 * 86_400;
/// How long after its first use a refresh token presented again by its client is taken as a
/// retry (its answer lost on the way: a new pair) rather than as stolen, seconds.
pub const REFRESH_GRACE_SECONDS: i64 = 30;
/// How long the key a consent issues lasts unless the human chooses another expiry, seconds.
pub const GRANT_SECONDS: i64 = 90 * 86_400;
/// How long a code may wait for its exchange, seconds.
pub const CODE_SECONDS: i64 = 600;
/// How long a registration lasts once a human connected the client, seconds (from the last
/// consent).
pub const CLIENT_SECONDS: i64 = 30 * 86_400;
/// How long a registration no human has connected lasts, seconds.
pub const UNCONSENTED_CLIENT_SECONDS: i64 = 3600;

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

#[cfg(test)]
mod tests {
    use super::*;

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
