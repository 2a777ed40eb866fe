//! API keys `svc_<48 lowercase hex>` (design brief §3; `reference/auth.md` §4.3).
//!
//! A key is 24 bytes from the OS random source, hex-encoded behind `svc_`. It is shown once, at
//! creation; only its SHA-256 is stored. Requests carry it in `X-API-Key` (or
//! `Authorization: Bearer svc_…`). Its shape is checked before any lookup, and every failure —
//! missing, malformed, unknown, revoked, expired — is the same 401.

use lambda_http::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::{Credential, Principal};
use crate::error::ApiError;
use crate::ids;
use crate::state::AppState;
use crate::store::Store;
use crate::store::keys::ApiKeyRecord;

/// Every key starts with this.
pub const PREFIX: &str = "svc_";
/// The request header that carries a key.
pub const HEADER: &str = "x-api-key";
/// [`HEADER`] as documents spell it (header names are case-insensitive): the OpenAPI security
/// scheme, the discovery documents, `server.json`.
pub const HEADER_NAME: &str = "X-API-Key";

/// What a key looks like, for a reader: `` `svc_` and 48 hex digits ``.
pub fn shape() -> String {
    format!("`{PREFIX}` and {} hex digits", KEY_BYTES * 2)
}
/// Random bytes in a key (192 bits).
pub const KEY_BYTES: usize = 24;
/// Hex characters of the key shown in listings after the prefix (`svc_1a2b3c4d`).
const DISPLAY_HEX: usize = 8;

/// A full API key. `Debug` never shows it.
#[derive(Clone, PartialEq)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({}…)", self.display_prefix())
    }
}

impl ApiKey {
    /// A new random key.
    pub fn generate() -> Self {
        ApiKey(format!("{PREFIX}{}", ids::random_hex(KEY_BYTES)))
    }

    /// The key if `value` has the exact shape `svc_` + 48 lowercase hex, else `None`.
    pub fn parse(value: &str) -> Option<Self> {
        let hex = value.strip_prefix(PREFIX)?;
        (hex.len() == KEY_BYTES * 2
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| ApiKey(value.to_owned()))
    }

    /// The key itself, to show once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the key, lowercase hex: what the store keeps.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }

    /// `svc_` and the first 8 hex characters, safe to display.
    pub fn display_prefix(&self) -> String {
        self.0[..PREFIX.len() + DISPLAY_HEX].to_owned()
    }
}

/// A key to issue: its name, when (the caller's clock) and until when, and what it may do.
#[derive(Debug, Clone)]
pub struct NewKey<'a> {
    /// A name the owner chose.
    pub name: &'a str,
    /// Now, as the caller's clock has it (`crate::clock::Clock::timestamp`).
    pub issued_at: crate::time::Timestamp,
    /// When it stops working, if ever.
    pub expires_at: Option<crate::time::Timestamp>,
    /// What it may do (`crate::policy::Scope` names); `None`: everything.
    pub scopes: Option<Vec<String>>,
    /// What it may provision and spend; `None`: no limit.
    pub policy: Option<crate::policy::Policy>,
}

impl<'a> NewKey<'a> {
    /// A key named `name`, issued at `issued_at`, with the default scopes (all but `webhooks`)
    /// and no expiry.
    pub fn named(name: &'a str, issued_at: crate::time::Timestamp) -> NewKey<'a> {
        NewKey {
            name,
            issued_at,
            expires_at: None,
            scopes: None,
            policy: None,
        }
    }
}

/// Creates and stores `new` for `owner` (a canonical address), counted against the owner's
/// `cap` of unrevoked keys when there is one (`MAX_KEYS_PER_OWNER`). Returns the key — the
/// only time it exists in the clear — and its record.
///
/// Errors: 409 at the cap; 500 when the store fails.
pub async fn issue(
    store: &Store,
    owner: &crate::address::Owner,
    new: NewKey<'_>,
    cap: Option<u32>,
) -> Result<(ApiKey, ApiKeyRecord), ApiError> {
    let key = ApiKey::generate();
    let record = ApiKeyRecord {
        id: ids::new(ids::API_KEY),
        owner: owner.to_owned(),
        name: new.name.to_owned(),
        prefix: key.display_prefix(),
        key_hash: key.hash(),
        created_at: new.issued_at,
        last_used_at: None,
        expires_at: new.expires_at,
        revoked_at: None,
        agent_count: 0,
        scopes: new.scopes,
        policy: new.policy,
    };
    match store.put_api_key(&record, cap).await {
        Ok(()) => Ok((key, record)),
        Err(crate::store::StoreError::CapReached(_)) => Err(ApiError::Conflict(format!(
            "this wallet holds {} unrevoked API keys, the most allowed; revoke one to issue \
             another",
            cap.unwrap_or_default()
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The key a request presents, if any: `X-API-Key`, else an `Authorization: Bearer` value that
/// starts with `svc_`.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(HEADER) {
        return value.to_str().ok().map(str::trim);
    }
    super::bearer(headers).filter(|v| v.starts_with(PREFIX))
}

/// Authenticates the key in `headers` at `now` (unix seconds): shape check, SHA-256, then one
/// conditional write that reads the key's record, records `lastUsedAt` and counts the request
/// in the key's `caller` window (`crate::store::uses`; a revoked key is left unchanged), then
/// the revoked, expired and rate checks.
///
/// Errors: 401 for every failure of the key (the reason is logged, never returned); 429 over
/// the key's rate limit; 500 when the store fails.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    now: f64,
) -> Result<Principal, ApiError> {
    let refuse = |reason: &str| super::refused("API key", reason);
    let presented = presented(headers).ok_or_else(|| refuse("missing"))?;
    let key = ApiKey::parse(presented).ok_or_else(|| refuse("malformed"))?;
    authenticate_hash(state, &key.hash(), now).await
}

/// Authenticates the key whose SHA-256 is `hash` at `now` (unix seconds), as [`authenticate`]
/// does after the key's shape: an OAuth access token stands for a key this way
/// ([`super::access_token::authenticate`]).
///
/// Errors: those of [`authenticate`].
pub async fn authenticate_hash(
    state: &AppState,
    hash: &str,
    now: f64,
) -> Result<Principal, ApiError> {
    let refuse = |reason: &str| super::refused("API key", reason);
    let at = state.clock.datetime();
    let seen_at = crate::time::rfc3339(at);
    let caller = crate::ratelimit::Caller::of(state, hash, now);
    let usage = caller.usage("lastUsedAt", &seen_at);
    let (record, count) = state
        .store
        .use_api_key(hash, &usage)
        .await?
        .ok_or_else(|| refuse("unknown"))?;
    let status = record.status(at);
    if status != "active" {
        return Err(refuse(status));
    }
    caller.check(state, count, now)?;
    let scopes = record.scopes();
    Ok(Principal {
        counted: crate::ratelimit::Tally::settled(crate::ratelimit::Verdict::Counted),
        approval: None,
        owner: record.owner,
        credential: Credential::ApiKey {
            scopes,
            policy: record.policy,
            key_id: record.id,
            key_hash: record.key_hash,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documents_header_is_the_one_read() {
        assert_eq!(super::HEADER_NAME.to_ascii_lowercase(), super::HEADER);
        assert_eq!(super::shape(), "`svc_` and 48 hex digits");
    }

    use super::*;

    #[test]
    fn generated_keys_have_the_documented_shape() {
        let a = ApiKey::generate();
        let b = ApiKey::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 4 + 48);
        assert_eq!(ApiKey::parse(a.expose()), Some(a.clone()));
        assert_eq!(a.display_prefix().len(), 12);
        assert!(a.expose().starts_with(&a.display_prefix()));
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[test]
    fn shape_check_rejects_look_alikes() {
        let good = format!("svc_{}", "ab".repeat(24));
        assert!(ApiKey::parse(&good).is_some());
        for bad in [
            String::new(),
            "svc_".into(),
            format!("svc_{}", "AB".repeat(24)),
            format!("svc_{}", "ab".repeat(23)),
            format!("svc_{}0", "ab".repeat(24)),
            format!("sk_{}", "ab".repeat(24)),
            format!("svc_{}zz", "ab".repeat(23)),
        ] {
            assert!(ApiKey::parse(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn hash_is_sha256_hex() {
        let key = ApiKey::parse(&format!("svc_{}", "0".repeat(48))).unwrap();
        assert_eq!(key.hash().len(), 64);
        assert_eq!(
            key.hash(),
            hex::encode(Sha256::digest(key.expose().as_bytes()))
        );
    }
}
