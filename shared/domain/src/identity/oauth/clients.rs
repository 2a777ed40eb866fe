//! Dynamic client registration (RFC 7591) of public clients — MCP hosts that keep no secret —
//! and what their redirect URIs may be.
//!
//! A redirect URI is one a human can read on the consent page and know where the token goes
//! (RFC 8252 for native apps, OAuth 2.1 §2.3.1): `https` with a host; `http` only to this
//! computer (`localhost`, `127.0.0.1`, `[::1]`: any port at authorization, RFC 8252 §7.3); or
//! an app's private-use scheme (RFC 8252 §7.1) the operator allows, as the clients register it
//! (`OAUTH_REDIRECT_SCHEMES`: Cursor's `cursor://anysphere.cursor-mcp/…` by default). Refused:
//! fragments, user information (`https://good.example@evil.example`), the schemes that run or
//! read rather than send (`javascript`, `data`, `file`, …), and every other scheme.
//!
//! Registration is anyone's, so it is bounded: at most [`MAX_REDIRECT_URIS`] URIs of at most
//! [`MAX_URI_CHARS`] characters, a name of 64; a source address's `oauth` limit (the route's)
//! and everyone's `registrations` budget ([`register`]); and the item lapses after
//! [`super::UNCONSENTED_CLIENT_SECONDS`] unless a human connects the client, which keeps it
//! [`super::CLIENT_SECONDS`] from then ([`consented`]). Until then the client is a stranger's:
//! an authorization request of its that is refused is shown, never sent back to its redirect
//! URI (`super::grants::check`).

use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::ApiError;
use crate::state::AppState;
use crate::store::oauth::ClientRecord;

use crate::config::RedirectScheme;
use crate::ids::OAUTH_CLIENT as CLIENT;
/// The most redirect URIs a client registers.
pub const MAX_REDIRECT_URIS: usize = 4;
/// The longest redirect URI, or home page, characters.
pub const MAX_URI_CHARS: usize = 512;
/// Schemes that are never a redirect: they run, read or show rather than send.
const REFUSED_SCHEMES: &[&str] = &[
    "javascript",
    "data",
    "file",
    "vbscript",
    "blob",
    "about",
    "ftp",
    "ws",
    "wss",
    "filesystem",
];

/// What `POST /oauth/register` takes (RFC 7591 §2): the redirect URIs, a name to show, and the
/// metadata a public client may state; other metadata is ignored (§3.1.1).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct Registration {
    /// Where the client may be sent back (1-4, each at most 512 characters).
    pub redirect_uris: Vec<String>,
    /// A name for the consent page (1-64 characters; default: the first redirect URI's host).
    #[serde(default)]
    pub client_name: Option<String>,
    /// The client's home page (`https`, at most 512 characters).
    #[serde(default)]
    pub client_uri: Option<String>,
    /// `none` (a public client) if stated.
    #[serde(default)]
    pub token_endpoint_auth_method: Option<String>,
    /// A subset of `authorization_code` and `refresh_token` if stated.
    #[serde(default)]
    pub grant_types: Option<Vec<String>>,
    /// `code` if stated.
    #[serde(default)]
    pub response_types: Option<Vec<String>>,
}

/// A registered client, as `POST /oauth/register` answers it (RFC 7591 §3.2.1).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Registered {
    /// `cli_<32 hex>`.
    pub client_id: String,
    /// Epoch seconds.
    pub client_id_issued_at: i64,
    /// The name shown on the consent page.
    pub client_name: String,
    /// The client's home page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_uri: Option<String>,
    /// As registered.
    pub redirect_uris: Vec<String>,
    /// `authorization_code`, `refresh_token`.
    pub grant_types: Vec<&'static str>,
    /// `code`.
    pub response_types: Vec<&'static str>,
    /// `none`: a public client.
    pub token_endpoint_auth_method: &'static str,
}

/// A client as the consent page shows it (`GET /api/oauth/clients/{id}`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientView {
    /// `cli_…`.
    pub id: String,
    /// The name it gave itself (unverified).
    pub name: String,
    /// Its home page, if it gave one (unverified).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Where it may be sent back.
    pub redirect_uris: Vec<String>,
    /// RFC 3339.
    pub registered_at: crate::time::Timestamp,
}

/// Why `uri` cannot be a redirect URI, if it cannot (see the module's rules), when the
/// private-use schemes allowed are `schemes`.
pub fn refuse_redirect_uri(uri: &str, schemes: &[RedirectScheme]) -> Option<&'static str> {
    if uri.chars().count() > MAX_URI_CHARS {
        return Some("is longer than 512 characters");
    }
    let Ok(url) = Url::parse(uri) else {
        return Some("is not an absolute URI");
    };
    if url.fragment().is_some() {
        return Some("has a fragment");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Some("carries user information, which hides where it goes");
    }
    match url.scheme() {
        "https" if url.host_str().is_some_and(|h| !h.is_empty()) => None,
        "https" => Some("names no host"),
        "http" if loopback(&url) => None,
        "http" => Some("is http to another computer: use https, or http to localhost"),
        scheme if REFUSED_SCHEMES.contains(&scheme) => Some("has a scheme that is no redirect"),
        scheme
            if schemes.iter().any(|allowed| {
                allowed.scheme == scheme
                    && allowed
                        .host
                        .as_deref()
                        .is_none_or(|host| url.host_str() == Some(host))
            }) =>
        {
            None
        }
        _ => Some(
            "has a scheme this server does not send to: https, http to this computer, or a \
             private-use scheme the operator allows (OAUTH_REDIRECT_SCHEMES)",
        ),
    }
}

/// Whether `url` is http to this computer.
fn loopback(url: &Url) -> bool {
    matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"))
}

/// Whether `given` is one of `registered`: exactly, or for http to this computer, on any port
/// (RFC 8252 §7.3).
pub fn matches_registered(registered: &[String], given: &str) -> bool {
    if registered.iter().any(|r| r == given) {
        return true;
    }
    let Ok(mut given) = Url::parse(given) else {
        return false;
    };
    if given.scheme() != "http" || !loopback(&given) || given.set_port(None).is_err() {
        return false;
    }
    registered.iter().any(|r| {
        Url::parse(r).is_ok_and(|mut r| {
            r.scheme() == "http" && loopback(&r) && r.set_port(None).is_ok() && r == given
        })
    })
}

/// Checks `registration` (RFC 7591 §2, §3.2.2), its private-use redirect schemes held to
/// `schemes`.
///
/// Errors: 400 `invalid_redirect_uri` naming the URI at fault, or for more than
/// [`MAX_REDIRECT_URIS`]; 400 `invalid_client_metadata` for a name, home page, grant type,
/// response type or authentication method this server does not take.
fn check(
    registration: &Registration,
    schemes: &[RedirectScheme],
) -> Result<(String, Option<String>), ApiError> {
    let uris = &registration.redirect_uris;
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(ApiError::oauth(
            "invalid_redirect_uri",
            format!("redirect_uris must name 1-{MAX_REDIRECT_URIS} URIs"),
        ));
    }
    for (i, uri) in uris.iter().enumerate() {
        if let Some(why) = refuse_redirect_uri(uri, schemes) {
            return Err(ApiError::oauth(
                "invalid_redirect_uri",
                format!("redirect_uris[{i}] {why}"),
            ));
        }
    }
    let metadata = |what: String| ApiError::oauth("invalid_client_metadata", what);
    if registration
        .token_endpoint_auth_method
        .as_deref()
        .is_some_and(|m| m != "none")
    {
        return Err(metadata(
            "token_endpoint_auth_method must be `none`: clients are public".into(),
        ));
    }
    let grants = ["authorization_code", "refresh_token"];
    if let Some(bad) = registration
        .grant_types
        .iter()
        .flatten()
        .find(|g| !grants.contains(&g.as_str()))
    {
        return Err(metadata(format!(
            "grant_types: `{bad}` is not granted here"
        )));
    }
    if registration
        .response_types
        .iter()
        .flatten()
        .any(|r| r != "code")
    {
        return Err(metadata("response_types must be `code`".into()));
    }
    let name = match &registration.client_name {
        Some(name) => crate::validate::name("client_name", name)
            .map_err(|_| metadata("client_name must be 1-64 plain characters".into()))?
            .to_owned(),
        None => Url::parse(&uris[0])
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| uris[0].clone()),
    };
    let client_uri = match &registration.client_uri {
        Some(uri)
            if Url::parse(uri).is_ok_and(|u| u.scheme() == "https")
                && uri.chars().count() <= MAX_URI_CHARS =>
        {
            Some(uri.clone())
        }
        Some(_) => {
            return Err(metadata(format!(
                "client_uri must be an https URL of at most {MAX_URI_CHARS} characters"
            )));
        }
        None => None,
    };
    Ok((name, client_uri))
}

/// Registers a client (RFC 7591 §3): checks it, counts it against everyone's `registrations`
/// budget, stores it for [`super::UNCONSENTED_CLIENT_SECONDS`] (until a human connects it:
/// [`consented`]), and answers its id.
///
/// Errors: those of the checks (400, OAuth's form; they spend nothing of the budget); 429
/// `registrations` over the budget; 500 when the store fails.
pub async fn register(
    state: &AppState,
    registration: Registration,
) -> Result<Registered, ApiError> {
    let oauth = &state.config.oauth;
    let (client_name, client_uri) = check(&registration, &oauth.redirect_schemes)?;
    let budget = oauth.registrations;
    let at = crate::ratelimit::now(state);
    crate::ratelimit::check(state, "registrations", budget, "everyone", at).await?;
    let now = state.clock.datetime();
    let record = ClientRecord {
        client_id: crate::ids::new(CLIENT),
        client_name,
        client_uri,
        redirect_uris: registration.redirect_uris,
        created_at: crate::time::Timestamp::of(now),
        expires_epoch: now.unix_timestamp() + super::UNCONSENTED_CLIENT_SECONDS,
        consented_at: None,
    };
    state.store.put_oauth_client(&record).await?;
    Ok(Registered {
        client_id: record.client_id,
        client_id_issued_at: now.unix_timestamp(),
        client_name: record.client_name,
        client_uri: record.client_uri,
        redirect_uris: record.redirect_uris,
        grant_types: vec!["authorization_code", "refresh_token"],
        response_types: vec!["code"],
        token_endpoint_auth_method: "none",
    })
}

/// The registered, unlapsed client `client_id` at `now`, if there is one.
///
/// Errors: 500 when the store fails.
pub(crate) async fn find(
    state: &AppState,
    client_id: &str,
    now: time::OffsetDateTime,
) -> Result<Option<ClientRecord>, ApiError> {
    if crate::ids::parse(CLIENT, "client_id", client_id).is_err() {
        return Ok(None);
    }
    let client = state.store.oauth_client(client_id).await?;
    Ok(client.filter(|c| c.expires_epoch > now.unix_timestamp()))
}

/// Records that a human connected the client `client_id` at `now` (the consent's approval):
/// its refusals are sent back to it from now on, and it lasts [`super::CLIENT_SECONDS`] from
/// now.
///
/// Errors: 500 when the store fails (a client that lapsed meanwhile is left lapsed).
pub(crate) async fn consented(
    state: &AppState,
    client_id: &str,
    now: time::OffsetDateTime,
) -> Result<(), ApiError> {
    let at = crate::time::Timestamp::of(now);
    let until = now.unix_timestamp() + super::CLIENT_SECONDS;
    match state.store.consent_oauth_client(client_id, at, until).await {
        Ok(()) | Err(crate::store::StoreError::ConditionFailed) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The client `id`, as the consent page shows it.
///
/// Errors: 400 for a malformed id; 404 for no such client (or a lapsed one); 500 when the store
/// fails.
pub async fn view(state: &AppState, id: &str) -> Result<ClientView, ApiError> {
    crate::ids::parse(CLIENT, "id", id)?;
    let client = find(state, id, state.clock.datetime())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no client {id}")))?;
    Ok(ClientView {
        id: client.client_id,
        name: client.client_name,
        uri: client.client_uri,
        redirect_uris: client.redirect_uris,
        registered_at: client.created_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cursor's, as the configuration allows it by default, and an app's reverse domain.
    fn schemes() -> Vec<RedirectScheme> {
        vec![
            RedirectScheme {
                scheme: "cursor".into(),
                host: Some("anysphere.cursor-mcp".into()),
            },
            RedirectScheme {
                scheme: "com.example.app".into(),
                host: None,
            },
        ]
    }

    #[test]
    fn redirect_uris_a_human_can_read_are_taken_and_no_others() {
        let schemes = schemes();
        for good in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://localhost:33418/callback",
            "http://127.0.0.1/cb",
            "http://[::1]:8080/cb",
            "com.example.app:/oauth2redirect",
            "cursor://anysphere.cursor-mcp/oauth/callback",
        ] {
            assert_eq!(refuse_redirect_uri(good, &schemes), None, "{good}");
        }
        for bad in [
            "https://good.example@evil.example/cb",
            "https://app.example/cb#frag",
            "http://app.example/cb",
            "javascript:alert(1)",
            "data:text/html,hi",
            "file:///etc/passwd",
            "myapp:/cb",
            // A reverse domain is no longer enough: only the schemes allowed are taken.
            "cursor.anysphere:/callback",
            "cursor://evil.example/oauth/callback",
            "/relative/cb",
            "",
        ] {
            assert!(refuse_redirect_uri(bad, &schemes).is_some(), "{bad}");
        }
        assert!(refuse_redirect_uri("com.example.app:/cb", &[]).is_some());
        let long = format!("https://a.example/{}", "x".repeat(MAX_URI_CHARS - 18));
        assert_eq!(long.chars().count(), MAX_URI_CHARS);
        assert_eq!(refuse_redirect_uri(&long, &[]), None);
        assert!(refuse_redirect_uri(&format!("{long}x"), &[]).is_some());
    }

    #[test]
    fn a_loopback_redirect_matches_on_any_port_and_nothing_else_does() {
        let registered = vec![
            "http://127.0.0.1:3000/cb".to_owned(),
            "https://app.example/cb".to_owned(),
        ];
        assert!(matches_registered(&registered, "http://127.0.0.1:3000/cb"));
        assert!(matches_registered(&registered, "http://127.0.0.1:49152/cb"));
        assert!(!matches_registered(
            &registered,
            "http://127.0.0.1:49152/other"
        ));
        assert!(!matches_registered(&registered, "http://localhost:3000/cb"));
        assert!(matches_registered(&registered, "https://app.example/cb"));
        assert!(!matches_registered(
            &registered,
            "https://app.example:8443/cb"
        ));
        assert!(!matches_registered(&registered, "https://app.example/cb/"));
        assert!(!matches_registered(
            &registered,
            "https://app.example/cb?x=1"
        ));
    }

    #[test]
    fn metadata_a_public_client_cannot_have_is_refused() {
        let registration = |f: &dyn Fn(&mut Registration)| {
            let mut r = Registration {
                redirect_uris: vec!["https://app.example/cb".into()],
                client_name: Some("App".into()),
                client_uri: None,
                token_endpoint_auth_method: None,
                grant_types: None,
                response_types: None,
            };
            f(&mut r);
            check(&r, &[])
        };
        assert_eq!(registration(&|_| {}).unwrap().0, "App");
        let error = |r: Result<_, ApiError>| match r {
            Err(ApiError::OAuth(e)) => e.error,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error(registration(
                &|r| r.token_endpoint_auth_method = Some("client_secret_basic".into())
            )),
            "invalid_client_metadata"
        );
        assert_eq!(
            error(registration(
                &|r| r.grant_types = Some(vec!["implicit".into()])
            )),
            "invalid_client_metadata"
        );
        assert_eq!(
            error(registration(&|r| r.redirect_uris = vec![])),
            "invalid_redirect_uri"
        );
        assert_eq!(
            error(registration(&|r| r.client_uri = Some("javascript:x".into()))),
            "invalid_client_metadata"
        );
        let uri = "https://app.example/cb".to_owned();
        assert_eq!(
            error(registration(&|r| r.redirect_uris = vec![uri.clone(); 5])),
            "invalid_redirect_uri"
        );
        assert!(registration(&|r| r.redirect_uris = vec![uri.clone(); 4]).is_ok());
        let home = format!("https://app.example/{}", "x".repeat(MAX_URI_CHARS));
        assert_eq!(
            error(registration(&|r| r.client_uri = Some(home.clone()))),
            "invalid_client_metadata"
        );
        let unnamed = registration(&|r| r.client_name = None).unwrap();
        assert_eq!(unnamed.0, "app.example");
    }
}
