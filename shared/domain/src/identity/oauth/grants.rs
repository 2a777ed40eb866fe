//! The authorization code grant with PKCE (RFC 6749 §4.1, RFC 7636, OAuth 2.1 §4.1), refresh
//! with rotation (OAuth 2.1 §4.3), and revocation (RFC 7009), each answered by the API key the
//! grant stands for (see [`super`]).
//!
//! An authorization request is checked twice, the same way: at `/oauth/authorize`, which sends
//! the human to the console's consent page or back to the client with an error, and again at
//! the consent, which is all that can give a code. A request whose client or redirect URI is
//! not registered is never redirected (RFC 6749 §4.1.2.1): it is a 400 shown where it was made.
//! Nor is any refused request of a client no human has connected yet (RFC 9700 §4.11.2):
//! anyone may register one with any `https` redirect, so sending its refusals there would make
//! this domain a redirector for a phishing link.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use url::Url;

use super::{ACCESS_PREFIX, CODE_PREFIX, REFRESH_PREFIX, Secret, clients, hash, shaped};
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::policy::{Policy, Scope};
use crate::state::AppState;
use crate::store::oauth::{CodeRecord, GrantRecord, Taken, TokenKind, TokenRecord};

/// A request's parameters (a query or a form body), each named at most once (RFC 6749 §3.1).
pub struct Params(HashMap<String, String>);

impl Params {
    /// The parameters of `encoded` (`application/x-www-form-urlencoded`).
    ///
    /// Errors: 400 `invalid_request` for a parameter given twice.
    pub fn parse(encoded: &[u8]) -> Result<Params, ApiError> {
        let mut params = HashMap::new();
        for (name, value) in url::form_urlencoded::parse(encoded) {
            if params.insert(name.to_string(), value.to_string()).is_some() {
                return Err(ApiError::oauth(
                    "invalid_request",
                    format!("`{name}` is given twice"),
                ));
            }
        }
        Ok(Params(params))
    }

    /// The parameter `name`, if given and not empty.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The parameter `name`.
    ///
    /// Errors: 400 `invalid_request` naming it when it is missing.
    fn need(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .ok_or_else(|| ApiError::oauth("invalid_request", format!("`{name}` is required")))
    }
}

/// This service as its own authorization server: its issuer (the public base URL, RFC 8414)
/// and the one resource its tokens are for (RFC 8707: the MCP endpoint's URL). The face names
/// both (`faces::oauth::endpoint`).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The base URL, `https://api.example`.
    pub issuer: String,
    /// `<issuer>/mcp`.
    pub resource: String,
}

/// An authorization request that may be shown for consent.
#[derive(Debug, Clone)]
pub struct Authorization {
    /// The client's id and name.
    pub client: crate::store::oauth::ClientRecord,
    /// Where the answer goes (registered).
    pub redirect_uri: String,
    /// PKCE S256 challenge.
    pub code_challenge: String,
    /// The client's state, returned as it came.
    pub state: Option<String>,
    /// The scopes asked for (none named: the key's default ones).
    pub scopes: Vec<Scope>,
    /// The MCP endpoint the tokens are for.
    pub resource: String,
}

/// Where an authorization request sends the browser: to the consent page, or back to the
/// client with an error (RFC 6749 §4.1.2.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The console's consent page for this request.
    Consent(String),
    /// The client's redirect URI with `error`, `state` and `iss`.
    Refused(String),
}

/// `redirect_uri` with `pairs` added to its query.
fn redirect(redirect_uri: &str, pairs: &[(&str, &str)]) -> String {
    match Url::parse(redirect_uri) {
        Ok(mut url) => {
            url.query_pairs_mut().extend_pairs(pairs);
            url.into()
        }
        Err(_) => redirect_uri.to_owned(),
    }
}

/// Checks the authorization request `params` for the service `at`: its client and
/// redirect URI first (a refusal is shown, not redirected), then the rest (a refusal goes back
/// to the client as `error` once a human has connected it; before, it is shown too).
///
/// Errors: 400 `invalid_request` for an unknown or lapsed client, or a redirect URI it did not
/// register; 400 with the refusal's own `error` for a client no human has connected; 500
/// when the store fails.
pub async fn check(
    state: &AppState,
    at: &Endpoint,
    params: &Params,
) -> Result<Result<Authorization, String>, ApiError> {
    let base = at.issuer.as_str();
    let now = state.clock.datetime();
    let client_id = params.need("client_id")?;
    let client = clients::find(state, client_id, now).await?.ok_or_else(|| {
        ApiError::oauth("invalid_request", "client_id names no registered client")
    })?;
    let redirect_uri = params.need("redirect_uri")?;
    if !clients::matches_registered(&client.redirect_uris, redirect_uri) {
        return Err(ApiError::oauth(
            "invalid_request",
            "redirect_uri is not one the client registered",
        ));
    }
    let client_state = params.get("state");
    let refuse = |error: &'static str, description: &str| {
        let to = (redirect_uri, base, client_state);
        refusal(&client, to, error, description)
    };
    if params.get("response_type") != Some("code") {
        return refuse("unsupported_response_type", "response_type must be `code`");
    }
    let Some(code_challenge) = params.get("code_challenge") else {
        return refuse("invalid_request", "code_challenge is required (PKCE)");
    };
    if params.get("code_challenge_method") != Some("S256") {
        return refuse("invalid_request", "code_challenge_method must be `S256`");
    }
    if code_challenge.len() != 43 || URL_SAFE_NO_PAD.decode(code_challenge).is_err() {
        return refuse(
            "invalid_request",
            "code_challenge must be a base64url SHA-256",
        );
    }
    if params
        .get("resource")
        .is_some_and(|r| r.trim_end_matches('/') != at.resource)
    {
        return refuse(
            "invalid_target",
            "resource must be this service's MCP endpoint",
        );
    }
    let mut scopes = Vec::new();
    for name in params
        .get("scope")
        .unwrap_or_default()
        .split_ascii_whitespace()
    {
        match Scope::parse(name) {
            Some(scope) if !scopes.contains(&scope) => scopes.push(scope),
            Some(_) => {}
            None => return refuse("invalid_scope", &format!("`{name}` is not a scope")),
        }
    }
    Ok(Ok(Authorization {
        client,
        redirect_uri: redirect_uri.to_owned(),
        code_challenge: code_challenge.to_owned(),
        state: client_state.map(str::to_owned),
        scopes,
        resource: at.resource.clone(),
    }))
}

/// The refusal `error` (`description`) of an authorization request of `client` after its client
/// check, to (its redirect URI, the issuer, its `state`): sent back to the redirect URI once a
/// human has connected the client; before, shown where it was made (a 400), since anyone may
/// register a client with any `https` redirect (RFC 9700 §4.11.2).
fn refusal(
    client: &crate::store::oauth::ClientRecord,
    (redirect_uri, issuer, client_state): (&str, &str, Option<&str>),
    error: &'static str,
    description: &str,
) -> Result<Result<Authorization, String>, ApiError> {
    if client.consented_at.is_none() {
        return Err(ApiError::oauth(
            error,
            format!(
                "{description} (shown here, not sent back: no one has connected this client yet)"
            ),
        ));
    }
    let mut pairs = vec![
        ("error", error),
        ("error_description", description),
        ("iss", issuer),
    ];
    if let Some(client_state) = client_state {
        pairs.push(("state", client_state));
    }
    Ok(Err(redirect(redirect_uri, &pairs)))
}

/// `GET /oauth/authorize`: where the browser goes next — the console's consent page (the same
/// query, at `<base>/#connect?…`) or back to the client with an error.
///
/// Errors: those of [`check`].
pub async fn authorize(state: &AppState, at: &Endpoint, query: &str) -> Result<Next, ApiError> {
    let params = Params::parse(query.as_bytes())?;
    Ok(match check(state, at, &params).await? {
        Ok(_) => Next::Consent(format!("{}/#connect?{query}", at.issuer)),
        Err(refused) => Next::Refused(refused),
    })
}

/// What the console posts to `POST /api/oauth/consent`: the authorization request's query as
/// `/oauth/authorize` received it, the human's decision, and — to approve — the scopes and the
/// spend policy of the key the grant will be.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Consent {
    /// The authorization request's query string (`response_type=code&client_id=…`).
    pub request: String,
    /// `true` to approve, `false` to deny.
    pub approve: bool,
    /// The scopes to grant (default: those asked for, else the key's default ones — `delete`
    /// left out: it is granted only when named).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// What the key may provision and spend (default: at most 100 USD a month; `{}` for no
    /// limit).
    #[serde(default)]
    pub policy: Option<Policy>,
    /// When the grant's key stops working, RFC 3339, in the future (default: 90 days from
    /// now).
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// The monthly spend limit of a grant whose consent names no policy, USD (the consent's
/// schema says it in words: keep them together).
pub const GRANT_MONTHLY_SPEND_USD: u128 = 100;

/// The scopes a consent that names none grants: those `asked`, else the key's default ones,
/// without `delete` (a human grants it by naming it).
fn default_scopes(asked: &[Scope]) -> Vec<String> {
    let asked = if asked.is_empty() {
        &Scope::DEFAULT[..]
    } else {
        asked
    };
    asked
        .iter()
        .filter(|scope| **scope != Scope::Delete)
        .map(|scope| scope.as_str().to_owned())
        .collect()
}

/// The policy of a consent that names none: at most [`GRANT_MONTHLY_SPEND_USD`] a month.
fn default_policy() -> Policy {
    Policy {
        monthly_spend_limit: Some(crate::money::Usdc::from_atomic(
            GRANT_MONTHLY_SPEND_USD * 1_000_000,
        )),
        ..Policy::default()
    }
}

/// Where the console sends the browser after a consent: the client's redirect URI with the
/// code (or `error=access_denied`), `state` and `iss`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Consented {
    /// The URL to go to.
    pub redirect_to: String,
    /// The key the grant is (`key_…`), when approved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// The signed-in owner's consent to the authorization request in `consent` (checked again as
/// at `/oauth/authorize`): approved, a new API key named after the client with the chosen
/// scopes and policy, and a code for it that lasts [`super::CODE_SECONDS`]; denied, the
/// client's `access_denied`.
///
/// Errors: those of [`check`]; 400 naming `scopes[i]` or the policy's field; 409 at the
/// owner's cap of keys; 500 when the store fails.
pub async fn consent(
    state: &AppState,
    principal: &Principal,
    at: &Endpoint,
    consent: Consent,
) -> Result<Consented, ApiError> {
    let params = Params::parse(consent.request.as_bytes())?;
    let request = match check(state, at, &params).await? {
        Ok(request) => request,
        Err(refused) => {
            return Ok(Consented {
                redirect_to: refused,
                key_id: None,
            });
        }
    };
    let answer = |name: &str, value: &str| {
        let mut pairs = vec![(name, value), ("iss", at.issuer.as_str())];
        if let Some(client_state) = &request.state {
            pairs.push(("state", client_state));
        }
        redirect(&request.redirect_uri, &pairs)
    };
    if !consent.approve {
        let redirect_to = answer("error", "access_denied");
        return Ok(Consented {
            redirect_to,
            key_id: None,
        });
    }
    let (code, key_id) = give_code(state, principal, &request, consent).await?;
    let now = state.clock.datetime();
    clients::consented(state, &request.client.client_id, now).await?;
    Ok(Consented {
        redirect_to: answer("code", code.expose()),
        key_id: Some(key_id),
    })
}

/// The grant `request` is approved as: a new API key of `principal`'s owner named after the
/// client, with the scopes, policy and expiry of `consent` (else [`default_scopes`],
/// [`default_policy`], [`super::GRANT_SECONDS`] from now), and a code for it. Answers the code
/// and the key's id.
async fn give_code(
    state: &AppState,
    principal: &Principal,
    request: &Authorization,
    consent: Consent,
) -> Result<(Secret, String), ApiError> {
    let now = state.clock.datetime();
    let expires_at = consent.expires_at.unwrap_or_else(|| {
        crate::time::rfc3339(now + time::Duration::seconds(super::GRANT_SECONDS))
    });
    let name: String = format!("MCP: {}", request.client.client_name)
        .chars()
        .take(64)
        .collect();
    let issued = crate::identity::keys::generate(
        state,
        &principal.owner,
        crate::identity::keys::GenerateKeyRequest {
            name,
            expires_at: Some(expires_at),
            scopes: Some(
                consent
                    .scopes
                    .unwrap_or_else(|| default_scopes(&request.scopes)),
            ),
            policy: Some(consent.policy.unwrap_or_else(default_policy)),
        },
        state.config.caps.keys,
        now,
    )
    .await?;
    let scope: Vec<&str> = issued.scopes.iter().map(|s| s.as_str()).collect();
    let code = Secret::new(CODE_PREFIX);
    let record = CodeRecord {
        code_hash: code.hash(),
        redirect_uri: request.redirect_uri.clone(),
        code_challenge: request.code_challenge.clone(),
        grant: GrantRecord {
            client_id: request.client.client_id.clone(),
            owner: principal.owner.clone(),
            key_id: issued.id.clone(),
            key_hash: hex::encode(Sha256::digest(issued.key.as_bytes())),
            resource: request.resource.clone(),
            scope: scope.join(" "),
        },
        expires_epoch: now.unix_timestamp() + super::CODE_SECONDS,
        used_at: None,
    };
    state.store.put_oauth_code(&record).await?;
    Ok((code, issued.id))
}

/// A token endpoint's answer (RFC 6749 §5.1).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Tokens {
    /// `mcp_at_…`, for `Authorization: Bearer` at `/mcp`.
    pub access_token: String,
    /// `Bearer`.
    pub token_type: &'static str,
    /// Seconds the access token lasts.
    pub expires_in: i64,
    /// `mcp_rt_…`, exchanged once for the next pair.
    pub refresh_token: String,
    /// The scopes granted, space-separated.
    pub scope: String,
}

/// `POST /oauth/token` (`application/x-www-form-urlencoded`): an authorization code or a
/// refresh token exchanged for a new access token and refresh token, counted first: a live
/// refresh token of its own client against its grant's `oauth-grant` limit, anything else
/// against the `oauth` limit of its source address `address` — so a flood of bad requests from
/// an address never closes the refresh of a client that holds a valid token.
///
/// Errors (OAuth's form): 400 `invalid_request` for a missing parameter,
/// `unsupported_grant_type`, `invalid_grant` for a code or refresh token that is unknown,
/// expired, used before (its grant's key is then revoked; a refresh token's retry within
/// [`super::REFRESH_GRACE_SECONDS`] is answered), another client's, sent with another
/// redirect URI, a wrong PKCE verifier or a revoked key; `invalid_target` for another
/// resource; 429 `oauth` or `oauth-grant` over the limit; 500 when the store fails.
pub async fn token(state: &AppState, form: &[u8], address: &str) -> Result<Tokens, ApiError> {
    let limit = state.config.rate_limits.sign_in;
    let at = crate::ratelimit::now(state);
    let parsed = Params::parse(form);
    let presented = match &parsed {
        Ok(params) => presented_refresh(state, params).await?,
        Err(_) => None,
    };
    let now = state.clock.datetime().unix_timestamp();
    let client_id = parsed.as_ref().ok().and_then(|p| p.get("client_id"));
    match presented
        .as_ref()
        .filter(|r| client_id.is_some_and(|c| live(r, c, now)))
    {
        Some(record) => {
            let key_id = &record.grant.key_id;
            crate::ratelimit::check(state, "oauth-grant", limit, key_id, at).await?;
        }
        None => crate::ratelimit::check(state, "oauth", limit, address, at).await?,
    }
    let params = parsed?;
    let grant = match params.need("grant_type")? {
        "authorization_code" => exchange_code(state, &params).await?,
        "refresh_token" => rotate(state, &params, presented).await?,
        other => {
            return Err(ApiError::oauth(
                "unsupported_grant_type",
                format!("`{other}`: only authorization_code and refresh_token"),
            ));
        }
    };
    issue(state, grant).await
}

/// The record of the token a refresh request `params` presents, if it is of this server's
/// shape and known (whoever's it is, live or not).
///
/// Errors: 500 when the store fails.
async fn presented_refresh(
    state: &AppState,
    params: &Params,
) -> Result<Option<TokenRecord>, ApiError> {
    match (params.get("grant_type"), params.get("refresh_token")) {
        (Some("refresh_token"), Some(token)) if shaped(token, REFRESH_PREFIX) => {
            Ok(state.store.oauth_token(&hash(token)).await?)
        }
        _ => Ok(None),
    }
}

/// Whether `record` is a refresh token `client_id` may still exchange at `now` (epoch
/// seconds): its own, not expired, not used (or used just now: [`retried`]).
fn live(record: &TokenRecord, client_id: &str, now: i64) -> bool {
    record.kind == TokenKind::Refresh
        && record.grant.client_id == client_id
        && record.expires_epoch > now
        && (record.used_at.is_none() || retried(record, now))
}

/// An `invalid_grant` refusal saying `why`.
fn invalid_grant(why: &str) -> ApiError {
    ApiError::oauth("invalid_grant", why.to_owned())
}

/// The grant of the code in `params`: checked against the exchange first, then taken once. A
/// request that fails a check (another client, redirect URI or resource, a wrong verifier)
/// changes nothing, so a leaked code is not burnt by whoever holds it; one that passes them
/// and finds the code used is a second exchange, and ends the grant.
async fn exchange_code(state: &AppState, params: &Params) -> Result<GrantRecord, ApiError> {
    let code = params.need("code")?;
    let client_id = params.need("client_id")?;
    let redirect_uri = params.need("redirect_uri")?;
    let verifier = params.need("code_verifier")?;
    let unknown = || invalid_grant("the code is not one this server gave");
    if !shaped(code, CODE_PREFIX) {
        return Err(unknown());
    }
    let now = state.clock.datetime();
    let record = state
        .store
        .oauth_code(&hash(code))
        .await?
        .ok_or_else(unknown)?;
    if record.expires_epoch <= now.unix_timestamp() {
        return Err(invalid_grant("the code expired"));
    }
    if record.grant.client_id != client_id {
        return Err(invalid_grant("the code was given to another client"));
    }
    if record.redirect_uri != redirect_uri {
        return Err(invalid_grant(
            "redirect_uri is not the authorization request's",
        ));
    }
    if !verifies(verifier, &record.code_challenge) {
        return Err(invalid_grant(
            "code_verifier does not match the code_challenge",
        ));
    }
    if params
        .get("resource")
        .is_some_and(|r| r.trim_end_matches('/') != record.grant.resource)
    {
        return Err(ApiError::oauth(
            "invalid_target",
            "resource is not the code's",
        ));
    }
    let at = crate::time::Timestamp::of(now);
    match state.store.take_oauth_code(&hash(code), at).await? {
        Taken::Fresh(record) => Ok(record.grant),
        Taken::Reused(record) => {
            end_grant(state, &record.grant, "a code exchanged twice").await?;
            Err(invalid_grant(
                "the code was used before; its grant is revoked",
            ))
        }
        Taken::Unknown => Err(unknown()),
    }
}

/// Whether `verifier` (43-128 unreserved characters, RFC 7636 §4.1) is the one whose S256
/// challenge is `challenge` (§4.6).
fn verifies(verifier: &str, challenge: &str) -> bool {
    let shaped = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    shaped && URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) == challenge
}

/// The grant of the refresh token in `params` (`presented`: its record as
/// [`presented_refresh`] read it): checked first — another client's, an expired one or one
/// whose key is revoked changes nothing — then taken once (rotation). One used before is
/// taken as stolen and ends the grant, unless it is its client's retry within
/// [`super::REFRESH_GRACE_SECONDS`] of its first use (an answer lost on the way): that is
/// answered a new pair too.
async fn rotate(
    state: &AppState,
    params: &Params,
    presented: Option<TokenRecord>,
) -> Result<GrantRecord, ApiError> {
    let token = params.need("refresh_token")?;
    let client_id = params.need("client_id")?;
    let unknown = || invalid_grant("the refresh token is not one this server gave");
    if !shaped(token, REFRESH_PREFIX) {
        return Err(unknown());
    }
    let presented = presented
        .filter(|record| record.kind == TokenKind::Refresh)
        .ok_or_else(unknown)?;
    if presented.grant.client_id != client_id {
        return Err(invalid_grant(
            "the refresh token was given to another client",
        ));
    }
    let now = state.clock.datetime();
    if presented.expires_epoch <= now.unix_timestamp() {
        return Err(invalid_grant("the refresh token expired"));
    }
    let key = state
        .store
        .api_key_by_hash(&presented.grant.key_hash)
        .await?;
    if key.is_none_or(|key| key.status(now) != "active") {
        return Err(invalid_grant("the grant's API key is revoked or expired"));
    }
    let at = crate::time::Timestamp::of(now);
    match state.store.take_refresh_token(&hash(token), at).await? {
        Taken::Fresh(record) => Ok(record.grant),
        Taken::Reused(record) if retried(&record, now.unix_timestamp()) => Ok(record.grant),
        Taken::Reused(record) => {
            end_grant(state, &record.grant, "a refresh token used twice").await?;
            Err(invalid_grant(
                "the refresh token was used before; its grant is revoked",
            ))
        }
        Taken::Unknown => Err(unknown()),
    }
}

/// Whether the used refresh token `record` is presented again at `now` (epoch seconds) within
/// [`super::REFRESH_GRACE_SECONDS`] of its first use: its client's retry.
fn retried(record: &TokenRecord, now: i64) -> bool {
    record
        .used_at
        .is_some_and(|used| now - used.unix() <= super::REFRESH_GRACE_SECONDS)
}

/// A new access token and refresh token for `grant`.
async fn issue(state: &AppState, grant: GrantRecord) -> Result<Tokens, ApiError> {
    let now = state.clock.datetime().unix_timestamp();
    let (access, refresh) = (Secret::new(ACCESS_PREFIX), Secret::new(REFRESH_PREFIX));
    let record = |secret: &Secret, kind, seconds| TokenRecord {
        token_hash: secret.hash(),
        kind,
        grant: grant.clone(),
        expires_epoch: now + seconds,
        used_at: None,
    };
    state
        .store
        .put_oauth_tokens(
            &record(&access, TokenKind::Access, super::ACCESS_SECONDS),
            &record(&refresh, TokenKind::Refresh, super::REFRESH_SECONDS),
        )
        .await?;
    Ok(Tokens {
        access_token: access.expose().to_owned(),
        token_type: "Bearer",
        expires_in: super::ACCESS_SECONDS,
        refresh_token: refresh.expose().to_owned(),
        scope: grant.scope,
    })
}

/// Revokes `grant`'s API key (and so every token of the grant) because of `why`.
async fn end_grant(state: &AppState, grant: &GrantRecord, why: &str) -> Result<(), ApiError> {
    tracing::warn!(
        key_id = grant.key_id,
        client_id = grant.client_id,
        why,
        "grant revoked"
    );
    let now = state.clock.datetime();
    match crate::identity::keys::revoke(state, &grant.owner, &grant.key_id, now).await {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

/// `POST /oauth/revoke` (RFC 7009): the token in the form, access or refresh, ends its grant —
/// the API key it stands for is revoked. A token this server does not know, or another
/// client's, is answered the same (§2.2), and nothing is revoked.
///
/// Errors: 400 `invalid_request` without `token`; 500 when the store fails.
pub async fn revoke(state: &AppState, form: &[u8]) -> Result<(), ApiError> {
    let params = Params::parse(form)?;
    let token = params.need("token")?;
    if !shaped(token, ACCESS_PREFIX) && !shaped(token, REFRESH_PREFIX) {
        return Ok(());
    }
    let Some(record) = state.store.oauth_token(&hash(token)).await? else {
        return Ok(());
    };
    if params
        .get("client_id")
        .is_some_and(|id| id != record.grant.client_id)
    {
        return Ok(());
    }
    end_grant(state, &record.grant, "revoked by its client").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verifier_is_checked_by_rfc_7636s_own_example() {
        // RFC 7636, Appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert!(verifies(verifier, challenge));
        assert!(!verifies(&verifier.replace('d', "e"), challenge));
        assert!(!verifies(
            "short",
            &URL_SAFE_NO_PAD.encode(Sha256::digest(b"short"))
        ));
        let spaced = format!("{verifier} ");
        assert!(!verifies(
            &spaced,
            &URL_SAFE_NO_PAD.encode(Sha256::digest(spaced.as_bytes()))
        ));
    }

    #[test]
    fn a_parameter_given_twice_is_refused() {
        assert!(Params::parse(b"a=1&b=2").is_ok());
        assert!(matches!(
            Params::parse(b"a=1&a=2"),
            Err(ApiError::OAuth(e)) if e.error == "invalid_request"
        ));
        let params = Params::parse(b"a=&b=x%20y").unwrap();
        assert_eq!(params.get("a"), None);
        assert_eq!(params.need("b").unwrap(), "x y");
    }

    #[test]
    fn an_answer_keeps_the_redirect_uris_own_query() {
        assert_eq!(
            redirect(
                "https://app.example/cb?x=1",
                &[("code", "c"), ("state", "s t")]
            ),
            "https://app.example/cb?x=1&code=c&state=s+t"
        );
    }
}
