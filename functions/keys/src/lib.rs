//! `keys` function: a signed-in human's API keys (each shown once, at its creation; revoking one
//! deactivates its agents in the same transaction), agents, SSH keys and approvals.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Keys`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.
//!
//! CORS for the configured web origin.

#![warn(missing_docs)]

use domain::api::{self, Success};
use domain::identity::agents::{self, NewAgent};
use domain::identity::approvals::{self, GrantRequest};
use domain::identity::auth;
use domain::identity::keys;
use domain::identity::ssh_keys::{self, NewSshKey};
use domain::page::PageRequest;
use domain::{ApiError, AppState};
use faces::http::{self, json_body, query_param};
use faces::router::{self, Matched};
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    let config = &state.config;
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
];

/// One request of this function's routes, by its typed route.
async fn route(state: &AppState, req: Request) -> http::HttpResult {
    let matched = router::admit(state, ROUTES, &req).await?;
    match matched.route {
        Route::Agent(route) => agent_route(state, &req, route, &matched).await,
        Route::Key(route) => key_route(state, &req, route, &matched).await,
        Route::SshKey(route) => ssh_key_route(state, &req, route, &matched).await,
        Route::Approval(route) => approval_route(state, &req, route, &matched).await,
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
