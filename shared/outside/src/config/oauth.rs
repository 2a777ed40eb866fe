//! MCP's authorization server's settings (`domain::identity::oauth`): the private-use redirect
//! schemes a client may register (`OAUTH_REDIRECT_SCHEMES`) and the registrations everyone
//! together may make (`OAUTH_REGISTRATIONS_PER_SECOND`, `OAUTH_REGISTRATIONS_BURST`).

use super::{ConfigError, RateLimit, rate_limit};

/// A private-use redirect scheme a client may register (RFC 8252 §7.1), as the clients
/// register it: the scheme alone (`com.example.app`: any URI of it), or with the one host its
/// URIs name (`cursor://anysphere.cursor-mcp`: Cursor's `…/oauth/callback`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedirectScheme {
    /// The scheme, lower case (`cursor`).
    pub scheme: String,
    /// The host its URIs must name, when the entry names one (`anysphere.cursor-mcp`).
    pub host: Option<String>,
}

impl std::fmt::Display for RedirectScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Some(host) => write!(f, "{}://{host}", self.scheme),
            None => write!(f, "{}:", self.scheme),
        }
    }
}

/// What MCP's authorization server takes from strangers.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthConfig {
    /// The private-use schemes a redirect URI may have besides `https` and `http` to this
    /// computer (`OAUTH_REDIRECT_SCHEMES`, default Cursor's `cursor://anysphere.cursor-mcp`;
    /// `none`: no other).
    pub redirect_schemes: Vec<RedirectScheme>,
    /// Registrations of every caller together (`OAUTH_REGISTRATIONS_PER_SECOND` 5,
    /// `OAUTH_REGISTRATIONS_BURST` 300: 300 a minute); one more is 429 `registrations`.
    pub registrations: Option<RateLimit>,
}

/// The schemes taken when `OAUTH_REDIRECT_SCHEMES` is unset: those real MCP clients register
/// (Cursor; the others use `https` or `http://127.0.0.1`).
pub const REDIRECT_SCHEMES: &str = "cursor://anysphere.cursor-mcp";

/// The authorization server's settings (`OAUTH_*`).
///
/// Errors: a scheme that is no RFC 3986 scheme, `http` or `https`, or an entry with more than
/// a host; a registration rate or burst that does not parse.
pub(super) fn oauth_config(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<OAuthConfig, ConfigError> {
    let schemes = get("OAUTH_REDIRECT_SCHEMES").unwrap_or_else(|| REDIRECT_SCHEMES.into());
    let redirect_schemes = match schemes.trim() {
        "none" => Vec::new(),
        list => list
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(redirect_scheme)
            .collect::<Result<_, _>>()?,
    };
    Ok(OAuthConfig {
        redirect_schemes,
        registrations: rate_limit(
            get,
            "OAUTH_REGISTRATIONS_PER_SECOND",
            "OAUTH_REGISTRATIONS_BURST",
            5.0,
            300,
        )?,
    })
}

/// One entry of `OAUTH_REDIRECT_SCHEMES`: `scheme` or `scheme://host`.
fn redirect_scheme(entry: &str) -> Result<RedirectScheme, ConfigError> {
    let refuse = |why: &str| ConfigError {
        name: "OAUTH_REDIRECT_SCHEMES",
        message: format!("`{entry}` {why}; expected `scheme` or `scheme://host`"),
    };
    let (scheme, host) = match entry.split_once("://") {
        Some((scheme, host)) => (scheme, Some(host)),
        None => (entry.trim_end_matches(':'), None),
    };
    let scheme = scheme.to_ascii_lowercase();
    let shaped = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !shaped {
        return Err(refuse("is no URI scheme"));
    }
    if matches!(scheme.as_str(), "http" | "https") {
        return Err(refuse(
            "is no private-use scheme (https and loopback http are always taken)",
        ));
    }
    let host = match host {
        Some(host) if host.is_empty() || host.contains(['/', '@', ':', '?', '#']) => {
            return Err(refuse("names more than a host"));
        }
        host => host.map(str::to_ascii_lowercase),
    };
    Ok(RedirectScheme { scheme, host })
}
