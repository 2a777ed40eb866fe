//! Who is calling (design brief §3, Identity). A request is authenticated into a [`Principal`]:
//! the owner's wallet address, and the credential that proved it — an API key
//! ([`api_key`], or an OAuth access token standing for one at `/mcp`: [`access_token`]) or a
//! signed-in session ([`session`], created by [`siwe`]).

pub mod access_token;
pub mod api_key;
pub mod session;
pub mod siwe;

use lambda_http::{Request, RequestExt};

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
        /// What the key may do (`crate::identity::keys::require`).
        scopes: Vec<crate::policy::Scope>,
        /// What the key may provision (`crate::ratelimit::spend::check_policy`).
        policy: Option<crate::policy::Policy>,
    },
    /// A session (the `__Host-session` cookie or `Authorization: Bearer <token>`).
    Session {
        /// SHA-256 of the session token, hex.
        token_hash: String,
        /// RFC 3339; when the session was opened.
        created_at: crate::time::Timestamp,
        /// RFC 3339; when it ends at the latest (idle expiry may end it sooner).
        expires_at: crate::time::Timestamp,
    },
}

/// An owner's grant a caller's request may use: set on the caller when the request is the one
/// approved and costs no more than the owner saw (the approvals' rules).
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// The approval (`apr_…`).
    pub id: String,
    /// The request's digest.
    pub digest: String,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// The owner's wallet address (lowercase `0x` + 40 hex). Every record is owned by one.
    pub owner: crate::address::Owner,
    /// How the caller proved it.
    pub credential: Credential,
    /// The request's owner and address counts, written beside its work: writes of money wait
    /// for them and refuse an uncounted or over-quota request
    /// (`crate::ratelimit::require_counted`).
    pub counted: crate::ratelimit::Tally,
    /// The owner's grant of this very request, when it has one (a key's paid request its
    /// policy refused, then approved by its owner): the policy lets it through once, and its
    /// claim marks the grant used.
    pub approval: Option<Grant>,
}

impl Principal {
    /// The key's record id (`key_…`), for a key.
    pub fn key_id(&self) -> Option<&str> {
        match &self.credential {
            Credential::ApiKey { key_id, .. } => Some(key_id),
            Credential::Session { .. } => None,
        }
    }

    /// The caller without an approval: its policy applies as it is.
    pub fn unapproved(&self) -> Principal {
        Principal {
            approval: None,
            ..self.clone()
        }
    }
}

/// Authenticates a request by API key if it presents one, else by session, and counts it
/// against the rate limits (`crate::ratelimit`): the credential's own (`caller`) in the one store
/// call that reads the credential, its source address and its owner beside the request's work
/// (refused at once when this instance saw either at its quota). A failed authentication (a
/// credential presented and refused) counts against the address's `failed-auth` limit; over
/// it, the address's failures are answered 429 (and no longer counted), while a valid
/// credential from the same address is still served.
///
/// Errors: 401 [`ApiError::Unauthorized`] — one generic answer for missing, malformed, unknown,
/// revoked or expired credentials; 403 for a session cookie sent cross-origin on a method that
/// changes state; 429 over a rate limit; 500 when the store fails.
pub async fn authenticate(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    counted(state, req, Accepted::KeyOrSession).await
}

/// [`authenticate`] by API key alone (the MCP endpoint), or an OAuth access token that stands
/// for one ([`access_token`]): a session is no credential there.
///
/// Errors: those of [`authenticate`]; 401 for a session too.
pub async fn authenticate_key(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    counted(state, req, Accepted::KeyAlone).await
}

/// The caller of a request to a row anyone may call, if it presents a credential
/// ([`presents_credential`]): authenticated as [`authenticate`] does, an OAuth access token as
/// the key it stands for ([`access_token`]). `None`, and nothing read or counted, when it
/// presents none.
///
/// Errors: those of [`authenticate`] for a credential presented (401 for a bad one).
pub async fn authenticate_presented(
    state: &AppState,
    req: &Request,
) -> Result<Option<Principal>, ApiError> {
    if !presents_credential(req.headers()) {
        return Ok(None);
    }
    counted(state, req, Accepted::Any).await.map(Some)
}

/// Whether a request presents a credential: `X-API-Key`, `Authorization: Bearer` (whatever it
/// holds) or the session cookie. Other headers (`Authorization: Basic`, other cookies, the x402
/// payment headers) are none.
pub fn presents_credential(headers: &lambda_http::http::HeaderMap) -> bool {
    api_key::presented(headers).is_some() || session::presented(headers).is_some()
}

/// The credentials a row accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepted {
    /// An API key or a session.
    KeyOrSession,
    /// An API key, or an OAuth access token standing for one.
    KeyAlone,
    /// Any of them.
    Any,
}

/// [`authenticate`], of the credentials `accepted`.
async fn counted(
    state: &AppState,
    req: &Request,
    accepted: Accepted,
) -> Result<Principal, ApiError> {
    use crate::ratelimit::{self, Rule};
    let address = source_address(req);
    let now = ratelimit::now(state);
    let limits = &state.config.rate_limits;
    let by_address = Rule {
        policy: "address",
        limit: limits.address,
        subject: &address,
    };
    ratelimit::refuse_seen(state, &[by_address], now)?;
    let mut principal = match identify(state, req, accepted, now).await {
        Ok(principal) => principal,
        // A failed authentication is a credential presented and refused; none at all (a
        // signed-out page asking who is signed in) is not an attempt.
        Err(ApiError::Unauthorized) if presents_credential(req.headers()) => {
            ratelimit::count_beside(state, &[by_address], now);
            return Err(ratelimit::failed(state, &address, now, ApiError::Unauthorized).await);
        }
        Err(err) => {
            ratelimit::count_beside(state, &[by_address], now);
            return Err(err);
        }
    };
    let by_owner = Rule {
        policy: "owner",
        limit: limits.owner,
        subject: principal.owner.as_str(),
    };
    if let Err(err) = ratelimit::refuse_seen(state, &[by_owner], now) {
        ratelimit::count_beside(state, &[by_address], now);
        return Err(err);
    }
    principal.counted = ratelimit::count_beside(state, &[by_address, by_owner], now);
    Ok(principal)
}

/// The principal of the request's OAuth access token, when `accepted` takes one and it
/// presents one, else of its API key, if it presents one (or only a key is accepted), else of
/// its session, at `now` (unix seconds).
async fn identify(
    state: &AppState,
    req: &Request,
    accepted: Accepted,
    now: f64,
) -> Result<Principal, ApiError> {
    let headers = req.headers();
    let token = access_token::presented(headers).is_some();
    if token && matches!(accepted, Accepted::KeyAlone | Accepted::Any) {
        access_token::authenticate(state, headers, now).await
    } else if accepted == Accepted::KeyAlone || api_key::presented(headers).is_some() {
        api_key::authenticate(state, headers, now).await
    } else {
        session::authenticate(state, req, now).await
    }
}

/// A credential refused for `reason` (logged, never answered): the one 401 of every failure.
pub(crate) fn refused(credential: &str, reason: &str) -> ApiError {
    tracing::info!(credential, reason, "credential refused");
    ApiError::Unauthorized
}

/// The `Authorization: Bearer` value of a request, trimmed, if it sends one: a session token,
/// an API key or an OAuth access token, told apart by their shapes.
pub fn bearer(headers: &lambda_http::http::HeaderMap) -> Option<&str> {
    headers
        .get(lambda_http::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The caller's address as API Gateway saw it (`requestContext.http.sourceIp`), or `unknown`:
/// the subject of every per-address budget. An IPv6 address counts as its /64
/// ([`address_subject`]).
pub fn source_address(req: &Request) -> String {
    match req.request_context_ref() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(ctx)) => ctx
            .http
            .source_ip
            .as_deref()
            .filter(|ip| !ip.is_empty())
            .map_or_else(|| "unknown".into(), address_subject),
        _ => "unknown".into(),
    }
}

/// The subject of a per-address budget for the source address `ip`: an IPv4 address as it is;
/// an IPv6 address as its /64 network (`2001:db8:1:2::/64`), since one host is given a whole
/// /64 and would otherwise be as many subjects as it likes (a few hosts would fill any pool
/// of a third per address); anything else as it is.
pub fn address_subject(ip: &str) -> String {
    let Ok(std::net::IpAddr::V6(v6)) = ip.parse::<std::net::IpAddr>() else {
        return ip.to_owned();
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return v4.to_string();
    }
    let [a, b, c, d, ..] = v6.segments();
    format!("{}/64", std::net::Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
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

#[cfg(test)]
mod tests {
    use super::address_subject;

    /// A host's whole /64 is one subject of the per-address budgets; IPv4 (mapped too) is the
    /// address itself.
    #[test]
    fn an_ipv6_source_counts_as_its_64() {
        let one = address_subject("2001:db8:1:2::1");
        assert_eq!(one, "2001:db8:1:2::/64");
        assert_eq!(address_subject("2001:db8:1:2:ffff:ab:cd:ef"), one);
        assert_ne!(address_subject("2001:db8:1:3::1"), one);
        assert_eq!(address_subject("203.0.113.7"), "203.0.113.7");
        assert_eq!(address_subject("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(address_subject("unknown"), "unknown");
    }
}
