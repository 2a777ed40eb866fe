//! `keys` function: a signed-in human's API keys (each shown once, at its creation; revoking one
//! deactivates its agents in the same transaction), agents, SSH keys and approvals.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Keys`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.
//!
//! It is also MCP's authorization server (`domain::identity::oauth`): its metadata, client
//! registration, authorization, tokens and revocation — open to any origin, OAuth's forms and
//! errors — and the console's consent, which makes the grant an API key.
//!
//! CORS for the configured web origin (the OAuth endpoints: any origin, no credentials).

#![warn(missing_docs)]

use domain::api::{self, Success};
use domain::identity::agents::{self, NewAgent};
use domain::identity::approvals::{self, GrantRequest};
use domain::identity::auth;
use domain::identity::keys;
use domain::identity::oauth::{self, grants, grants::Next};
use domain::identity::ssh_keys::{self, NewSshKey};
use domain::page::PageRequest;
use domain::{ApiError, AppState, ratelimit};
use faces::http::{self, json_body, query_param};
use faces::router::{self, Matched};
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// Handles one request of this function's routes: the OAuth endpoints open to any origin
/// (`faces::oauth::serve`), the rest CORS for the web app's.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    let config = &state.config;
    if matches!(
        router::parse(OAUTH_ROUTES, &req),
        Ok(_) | Err(ApiError::MethodNotAllowed(_))
    ) {
        return faces::oauth::serve(config.max_body_bytes, req, |req| oauth_route(state, req))
            .await;
    }
    http::serve_cors(
        config.max_body_bytes,
        config.sign_in.web_origin.as_deref(),
        req,
        |req| route(state, req),
    )
    .await
}

/// This function's routes: a signed-in human's keys, and agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Key(KeyRoute),
    Agent(AgentRoute),
    SshKey(SshKeyRoute),
    Approval(ApprovalRoute),
    Consent(ConsentRoute),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConsentRoute {
    Client,
    Consent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ApprovalRoute {
    List,
    Get,
    Grant,
    Decline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRoute {
    Generate,
    List,
    Change,
    Revoke,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AgentRoute {
    Register,
    List,
    Get,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SshKeyRoute {
    Add,
    List,
    Get,
    Delete,
}

const ROUTES: &[(&str, Route)] = &[
    ("generateKey", Route::Key(KeyRoute::Generate)),
    ("listKeys", Route::Key(KeyRoute::List)),
    ("changeKey", Route::Key(KeyRoute::Change)),
    ("revokeKey", Route::Key(KeyRoute::Revoke)),
    ("registerAgent", Route::Agent(AgentRoute::Register)),
    ("listAgents", Route::Agent(AgentRoute::List)),
    ("getAgent", Route::Agent(AgentRoute::Get)),
    ("addSshKey", Route::SshKey(SshKeyRoute::Add)),
    ("listSshKeys", Route::SshKey(SshKeyRoute::List)),
    ("getSshKey", Route::SshKey(SshKeyRoute::Get)),
    ("deleteSshKey", Route::SshKey(SshKeyRoute::Delete)),
    ("listApprovals", Route::Approval(ApprovalRoute::List)),
    ("getApproval", Route::Approval(ApprovalRoute::Get)),
    ("grantApproval", Route::Approval(ApprovalRoute::Grant)),
    ("declineApproval", Route::Approval(ApprovalRoute::Decline)),
    ("getOAuthClient", Route::Consent(ConsentRoute::Client)),
    ("consentOAuth", Route::Consent(ConsentRoute::Consent)),
];

/// MCP's authorization server (`domain::identity::oauth`): anyone's, OAuth's forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OAuthRoute {
    ProtectedResource,
    AuthorizationServer,
    Register,
    Authorize,
    Token,
    Revoke,
}

const OAUTH_ROUTES: &[(&str, OAuthRoute)] = &[
    ("getProtectedResource", OAuthRoute::ProtectedResource),
    ("getProtectedResourceRoot", OAuthRoute::ProtectedResource),
    ("getAuthorizationServer", OAuthRoute::AuthorizationServer),
    ("registerClient", OAuthRoute::Register),
    ("authorize", OAuthRoute::Authorize),
    ("token", OAuthRoute::Token),
    ("revokeToken", OAuthRoute::Revoke),
];

/// One request of the authorization server's routes. Registration, authorization and
/// revocation are counted against the source address's `oauth` limit first; a token request
/// is counted by `grants::token` (a live refresh token against its grant's own limit).
async fn oauth_route(state: &AppState, req: Request) -> http::HttpResult {
    let matched = router::admit(state, OAUTH_ROUTES, &req).await?;
    let at = faces::oauth::endpoint(&state.config, &req);
    let base = &at.issuer;
    let route = matched.route;
    let ip = auth::source_address(&req);
    if !matches!(
        route,
        OAuthRoute::ProtectedResource | OAuthRoute::AuthorizationServer | OAuthRoute::Token
    ) {
        let limit = state.config.rate_limits.sign_in;
        ratelimit::check(state, "oauth", limit, &ip, ratelimit::now(state)).await?;
    }
    let form = http::body_bytes(&req);
    let mut response = match route {
        OAuthRoute::ProtectedResource => http::answer(
            &api::GET_PROTECTED_RESOURCE,
            &faces::oauth::protected_resource(base),
        )?,
        OAuthRoute::AuthorizationServer => http::answer(
            &api::GET_AUTHORIZATION_SERVER,
            &faces::oauth::authorization_server(base),
        )?,
        OAuthRoute::Register => {
            let registration = json_body::<oauth::clients::Registration>(&req)
                .map_err(|e| ApiError::oauth("invalid_client_metadata", e.to_string()))?;
            let registered = oauth::clients::register(state, registration).await?;
            http::answer(&api::REGISTER_CLIENT, &registered)?
        }
        OAuthRoute::Authorize => {
            let query = req.uri().query().unwrap_or_default();
            let (Next::Consent(to) | Next::Refused(to)) =
                grants::authorize(state, &at, query).await?;
            return faces::oauth::redirect(&to);
        }
        OAuthRoute::Token => http::answer(&api::TOKEN, &grants::token(state, form, &ip).await?)?,
        OAuthRoute::Revoke => {
            grants::revoke(state, form).await?;
            http::answer(&api::REVOKE_TOKEN, &())?
        }
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
    Ok(response)
}

/// The consent's routes (a signed-in human, in the console).
async fn consent_route(
    state: &AppState,
    req: &Request,
    route: ConsentRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    match route {
        ConsentRoute::Client => http::answer(
            &api::GET_OAUTH_CLIENT,
            &oauth::clients::view(state, matched.param("id")?).await?,
        ),
        ConsentRoute::Consent => {
            let consent = json_body::<grants::Consent>(req)?;
            let at = faces::oauth::endpoint(&state.config, req);
            let principal = matched.principal()?;
            let consented = grants::consent(state, principal, &at, consent).await?;
            http::answer(&api::CONSENT_OAUTH, &consented)
        }
    }
}

/// One request of this function's routes, by its typed route.
async fn route(state: &AppState, req: Request) -> http::HttpResult {
    let matched = router::admit(state, ROUTES, &req).await?;
    match matched.route {
        Route::Agent(route) => agent_route(state, &req, route, &matched).await,
        Route::Key(route) => key_route(state, &req, route, &matched).await,
        Route::SshKey(route) => ssh_key_route(state, &req, route, &matched).await,
        Route::Approval(route) => approval_route(state, &req, route, &matched).await,
        Route::Consent(route) => consent_route(state, &req, route, &matched).await,
    }
}

/// The approvals' routes: the owner's session lists, grants and declines; the key that asked
/// or the owner reads one, long-polling with `timeout`.
async fn approval_route(
    state: &AppState,
    req: &Request,
    route: ApprovalRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    let principal = matched.principal()?;
    if route == ApprovalRoute::Get {
        let id = matched.param("id")?;
        let view = match query_param(req, "timeout") {
            None => approvals::get(state, principal, id).await?,
            Some(timeout) => {
                let timeout = domain::servers::stages::parse_timeout(Some(timeout))?;
                let deadline = http::deadline(state, req);
                approvals::wait(state, principal, id, timeout, &deadline).await?
            }
        };
        return http::answer(&api::GET_APPROVAL, &view);
    }
    match route {
        ApprovalRoute::List => http::answer(
            &api::LIST_APPROVALS,
            &approvals::list(state, principal, &page(req)?).await?,
        ),
        ApprovalRoute::Grant => {
            let body = json_body::<GrantRequest>(req)?;
            let source = auth::source_address(req);
            let id = matched.param("id")?;
            let view = approvals::grant(state, principal, id, body, &source).await?;
            http::answer(&api::GRANT_APPROVAL, &view)
        }
        _ => http::answer(
            &api::DECLINE_APPROVAL,
            &approvals::decline(state, principal, matched.param("id")?).await?,
        ),
    }
}

/// The SSH keys' routes (session or key).
async fn ssh_key_route(
    state: &AppState,
    req: &Request,
    route: SshKeyRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    let principal = matched.principal()?;
    match route {
        SshKeyRoute::Add => {
            let request = json_body::<NewSshKey>(req)?;
            let (key, created) = ssh_keys::add(state, principal, request).await?;
            let success = if created { Success::Ok } else { Success::Again };
            let mut response = http::answer_as(&api::ADD_SSH_KEY, success, &key)?;
            if let Ok(location) = domain::api::link("getSshKey", &key.id).parse() {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        SshKeyRoute::List => http::answer(
            &api::LIST_SSH_KEYS,
            &ssh_keys::list(state, principal, &page(req)?).await?,
        ),
        SshKeyRoute::Get => http::answer(
            &api::GET_SSH_KEY,
            &ssh_keys::get(state, principal, matched.param("id")?).await?,
        ),
        SshKeyRoute::Delete => {
            ssh_keys::delete(state, principal, matched.param("id")?).await?;
            http::answer(&api::DELETE_SSH_KEY, &())
        }
    }
}

/// The agents' routes (session or key).
async fn agent_route(
    state: &AppState,
    req: &Request,
    route: AgentRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    let principal = matched.principal()?;
    match route {
        AgentRoute::Register => {
            let agent = agents::register(state, principal, json_body::<NewAgent>(req)?).await?;
            let mut response = http::answer(&api::REGISTER_AGENT, &agent)?;
            if let Ok(location) = domain::api::link("getAgent", &agent.id).parse() {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        AgentRoute::List => http::answer(
            &api::LIST_AGENTS,
            &agents::list(state, principal, &page(req)?).await?,
        ),
        AgentRoute::Get => http::answer(
            &api::GET_AGENT,
            &agents::get(state, principal, matched.param("id")?).await?,
        ),
    }
}

/// The keys' routes (a signed-in human only).
async fn key_route(
    state: &AppState,
    req: &Request,
    route: KeyRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    let principal = matched.principal()?;
    let (owner, now) = (&principal.owner, state.clock.datetime());
    match route {
        KeyRoute::Generate => {
            let request: keys::GenerateKeyRequest = json_body(req)?;
            let issued = keys::generate(state, owner, request, state.config.caps.keys, now).await?;
            let mut response = http::answer(&api::GENERATE_KEY, &issued)?;
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
            Ok(response)
        }
        KeyRoute::List => http::answer(
            &api::LIST_KEYS,
            &keys::list(state, owner, &page(req)?, now).await?,
        ),
        KeyRoute::Change => {
            let change: keys::KeyChange = json_body(req)?;
            let id = matched.param("id")?;
            http::answer(
                &api::CHANGE_KEY,
                &keys::change(state, owner, id, change, now).await?,
            )
        }
        KeyRoute::Revoke => http::answer(
            &api::REVOKE_KEY,
            &keys::revoke(state, owner, matched.param("id")?, now).await?,
        ),
    }
}

/// A listing's page, from the query.
fn page(req: &Request) -> Result<PageRequest, ApiError> {
    PageRequest::parse(query_param(req, "limit"), query_param(req, "cursor"))
}
