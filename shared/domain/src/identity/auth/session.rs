//! Sessions (design brief §3, Identity; `reference/auth.md` §3.2–3.3): an opaque token of 32
//! bytes from the OS random source (64 lowercase hex), stored only as its SHA-256, with an
//! absolute and an idle expiry. Browsers carry it in the `__Host-session` cookie (HttpOnly,
//! Secure, SameSite=Lax, Path=/); other clients send `Authorization: Bearer <token>`.
//!
//! A session cookie on a request that changes state (any method but GET, HEAD, OPTIONS) without
//! an `Origin`, or from one other than the configured web origin or the service's own (the
//! console's: `https://` and the request's `Host`), scheme, host and port compared, is refused
//! (403): SameSite=Lax plus this check keep other sites from acting with a visitor's cookie.

use cookie::{Cookie, SameSite};
use lambda_http::Request;
use lambda_http::http::{HeaderMap, HeaderValue, Method, header};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::{Credential, Principal};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::sessions::SessionRecord;

/// The session cookie's name (`__Host-`: Secure, Path=/, no Domain).
pub const COOKIE: &str = "__Host-session";
/// Random bytes in a token.
pub const TOKEN_BYTES: usize = 32;

/// A session token. `Debug` never shows it.
#[derive(Clone, PartialEq)]
pub struct SessionToken(String);

impl std::fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionToken(***)")
    }
}

impl SessionToken {
    /// A new random token.
    pub fn generate() -> Self {
        SessionToken(crate::ids::random_hex(TOKEN_BYTES))
    }
    /// The token if `value` is 64 lowercase hex characters.
    pub fn parse(value: &str) -> Option<Self> {
        (value.len() == TOKEN_BYTES * 2
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| SessionToken(value.to_owned()))
    }
    /// The token itself, to hand to the client once.
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// SHA-256 of the token, lowercase hex: what the store keeps.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

/// Where a request's session token came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Carrier {
    /// The `__Host-session` cookie.
    Cookie,
    /// `Authorization: Bearer`.
    Bearer,
}

/// The session token a request presents, if any, and how: `Authorization: Bearer <token>`
/// (not an API key), else the `__Host-session` cookie. `Some(None)` when one is presented but
/// malformed.
pub fn presented(headers: &HeaderMap) -> Option<(Option<SessionToken>, Carrier)> {
    if let Some(bearer) = super::bearer(headers) {
        return Some((SessionToken::parse(bearer), Carrier::Bearer));
    }
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for cookie in Cookie::split_parse(value).flatten() {
            if cookie.name() == COOKIE {
                return Some((SessionToken::parse(cookie.value()), Carrier::Cookie));
            }
        }
    }
    None
}

/// Creates a session for `owner` at `now`: absolute expiry `now + SESSION_TTL_SECONDS`, or
/// earlier if the sign-in message expires earlier (`not_after`). Returns the token (to hand out
/// once) and the record.
///
/// Errors: 500 when the store fails.
pub async fn create(
    state: &AppState,
    owner: &crate::address::Owner,
    now: OffsetDateTime,
    not_after: Option<OffsetDateTime>,
) -> Result<(SessionToken, SessionRecord), ApiError> {
    let ttl = time::Duration::try_from(state.config.sign_in.session_ttl)
        .unwrap_or(time::Duration::days(7));
    let mut expires = now + ttl;
    if let Some(limit) = not_after {
        expires = expires.min(limit);
    }
    let token = SessionToken::generate();
    let record = SessionRecord {
        token_hash: token.hash(),
        owner: owner.to_owned(),
        created_at: crate::time::Timestamp::of(now),
        last_seen_at: crate::time::Timestamp::of(now),
        expires_at: crate::time::Timestamp::of(expires),
        expires_epoch: expires.unix_timestamp(),
    };
    state.store.put_session(&record).await?;
    Ok((token, record))
}

/// Authenticates the request's session at `now` (unix seconds): refuses a cookie sent
/// cross-origin on a state-changing method; shape check, SHA-256, then one conditional write
/// that reads the session, records `lastSeenAt` and counts the request in the session's
/// `caller` window (`crate::store::uses`; an ended session is left unchanged), then the
/// absolute and idle expiry and rate checks.
///
/// Errors: 401 (generic) for no, malformed, unknown or expired sessions; 403 cross-origin; 429
/// over the session's rate limit; 500 when the store fails.
pub async fn authenticate(
    state: &AppState,
    req: &Request,
    now: f64,
) -> Result<Principal, ApiError> {
    let refuse = |reason: &str| {
        tracing::info!(reason, "session refused");
        ApiError::Unauthorized
    };
    let (token, carrier) = presented(req.headers()).ok_or_else(|| refuse("missing"))?;
    let token = token.ok_or_else(|| refuse("malformed"))?;
    if carrier == Carrier::Cookie
        && !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
    {
        cookie_write_allowed(state, req.headers())?;
    }
    let hash = token.hash();
    let at = state.clock.datetime();
    let idle = time::Duration::try_from(state.config.sign_in.session_idle)
        .unwrap_or(time::Duration::days(1));
    let seen_at = crate::time::rfc3339(at);
    let caller = crate::ratelimit::Caller::of(state, &hash, now);
    let usage = caller.usage("lastSeenAt", &seen_at);
    let idle_cutoff = crate::time::rfc3339(at - idle);
    let (record, count) = state
        .store
        .use_session(&hash, &usage, at.unix_timestamp(), &idle_cutoff)
        .await?
        .ok_or_else(|| refuse("unknown"))?;
    if at.unix_timestamp() >= record.expires_epoch {
        return Err(refuse("expired"));
    }
    let last_seen = record.last_seen_at.datetime();
    if at - last_seen >= idle {
        return Err(refuse("idle"));
    }
    caller.check(state, count, now)?;
    Ok(Principal {
        counted: crate::ratelimit::Tally::settled(crate::ratelimit::Verdict::Counted),
        approval: None,
        owner: record.owner,
        credential: Credential::Session {
            token_hash: record.token_hash,
            created_at: record.created_at,
            expires_at: record.expires_at,
        },
    })
}

/// What `GET /api/auth/me` answers of the session a principal signed in with, from the record
/// its authentication read (no second read).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The owner's wallet address (answered in EIP-55).
    pub address: crate::address::Checksummed,
    /// RFC 3339; when the session was opened.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339; when it ends at the latest.
    pub expires_at: crate::time::Timestamp,
}

/// The session `principal` signed in with.
///
/// Errors: 401 for a principal authenticated otherwise (an API key).
pub fn describe(principal: &Principal) -> Result<SessionView, ApiError> {
    match &principal.credential {
        Credential::Session {
            created_at,
            expires_at,
            ..
        } => Ok(SessionView {
            address: principal.owner.checksummed(),
            created_at: *created_at,
            expires_at: *expires_at,
        }),
        Credential::ApiKey { .. } => Err(ApiError::Unauthorized),
    }
}

/// Signs out: ends the session `principal` signed in with (its record deleted; the token is
/// refused from then on).
///
/// Errors: 401 for a principal authenticated otherwise (an API key); 500 when the store fails.
pub async fn sign_out(state: &AppState, principal: &Principal) -> Result<(), ApiError> {
    let Credential::Session { token_hash, .. } = &principal.credential else {
        return Err(ApiError::Unauthorized);
    };
    state.store.delete_session(token_hash).await?;
    Ok(())
}

/// Refuses a state-changing request carried by the session cookie unless its `Origin` is the
/// configured web origin or the service's own (the console's): scheme, host and port equal,
/// compared in their serialized form (RFC 6454). The service's own origin is
/// `PUBLIC_BASE_URL`'s when it is set (the template sets the edge's name); else `https://` and
/// the request's `Host`, or `http://` for a `localhost` / `127.0.0.1` host (development). No
/// `Origin` at all is refused too: every browser sends one on such a request.
///
/// Errors: 403 naming the origin (or its absence).
fn cookie_write_allowed(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return Err(ApiError::Forbidden(
            "a session cookie cannot change state without an Origin header".into(),
        ));
    };
    let serialized = url::Url::parse(origin)
        .ok()
        .map(|url| url.origin().ascii_serialization());
    let web = state.config.sign_in.web_origin.as_deref();
    let own = match &state.config.payments.public_base_url {
        // Behind the edge (or wherever the public name is set): that name's origin only, never
        // one a request's `Host` names.
        Some(base) => url::Url::parse(base)
            .map(|url| vec![url.origin().ascii_serialization()])
            .unwrap_or_default(),
        None => own_origins(headers),
    };
    let allowed = serialized
        .as_deref()
        .is_some_and(|o| Some(o) == web || own.iter().any(|own| own == o));
    if allowed {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "a session cookie cannot be used from origin {origin}"
    )))
}

/// The service's own origins as a browser serializes them: `https://<Host>`, and
/// `http://<Host>` when the host is `localhost` or `127.0.0.1`.
fn own_origins(headers: &HeaderMap) -> Vec<String> {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return Vec::new();
    };
    let mut schemes = vec!["https"];
    if let Ok(url) = url::Url::parse(&format!("http://{host}"))
        && matches!(url.host_str(), Some("localhost" | "127.0.0.1"))
    {
        schemes.push("http");
    }
    schemes
        .into_iter()
        .filter_map(|scheme| url::Url::parse(&format!("{scheme}://{host}")).ok())
        .filter(|url| url.path() == "/" && url.username().is_empty())
        .map(|url| url.origin().ascii_serialization())
        .collect()
}

/// The `Set-Cookie` value that gives a browser the session until `expires`.
pub fn set_cookie(
    token: &SessionToken,
    now: OffsetDateTime,
    expires: OffsetDateTime,
) -> HeaderValue {
    let cookie = Cookie::build((COOKIE, token.expose().to_owned()))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Lax)
        .path("/")
        .max_age(expires - now)
        .build();
    HeaderValue::from_str(&cookie.to_string()).unwrap_or(HeaderValue::from_static(""))
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> HeaderValue {
    let cookie = Cookie::build((COOKIE, ""))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Lax)
        .path("/")
        .max_age(time::Duration::ZERO)
        .build();
    HeaderValue::from_str(&cookie.to_string()).unwrap_or(HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex_and_never_debug_printed() {
        let a = SessionToken::generate();
        assert_ne!(a, SessionToken::generate());
        assert_eq!(SessionToken::parse(a.expose()), Some(a.clone()));
        assert!(SessionToken::parse(&a.expose().to_uppercase()).is_none());
        assert!(SessionToken::parse("abc").is_none());
        assert_eq!(format!("{a:?}"), "SessionToken(***)");
        assert_eq!(a.hash().len(), 64);
    }

    #[test]
    fn cookies_are_host_only_http_only_secure_lax() {
        let t = SessionToken::generate();
        let now = crate::time::now();
        let set = set_cookie(&t, now, now + time::Duration::hours(1));
        let set = set.to_str().unwrap();
        assert!(set.starts_with(&format!("__Host-session={}", t.expose())));
        for part in [
            "HttpOnly",
            "Secure",
            "SameSite=Lax",
            "Path=/",
            "Max-Age=3600",
        ] {
            assert!(set.contains(part), "{set}");
        }
        assert!(!set.contains("Domain"));
        assert!(clear_cookie().to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn bearer_wins_over_cookie() {
        let t = SessionToken::generate();
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={}", t.expose())).unwrap(),
        );
        assert_eq!(presented(&h), Some((Some(t.clone()), Carrier::Cookie)));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer nope"),
        );
        assert_eq!(presented(&h), Some((None, Carrier::Bearer)));
    }
}
