//! `keys` function: API keys and agents.
//!
//! - `POST /api/keys/generate` `{name, expiresAt?, scopes?}` → 201 `{id, name, key, prefix,
//!   createdAt, expiresAt, scopes}`, the key shown this once (session only)
//! - `GET /api/keys[?limit=&cursor=]` → `{items, nextCursor}`: id, name, prefix, createdAt,
//!   lastUsedAt, expiresAt, revokedAt, status, scopes — never a key or a hash (session only)
//! - `PATCH /api/keys/{id}` `{policy}` → 200 with the key, its policy replaced (`null`: none)
//!   (session only)
//! - `DELETE /api/keys/{id}` → 200 with the revoked key; idempotent; its agents become inactive
//!   in the same transaction (session only)
//! - `POST /api/agents` `{name, keyId?}` → 201; `GET /api/agents`, `GET /api/agents/{id}`
//!   (session, or an API key — an agent registering itself)
//!
//! CORS for the configured web origin.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use shared::agents::{self, NewAgent};
use shared::http::{self, json, json_body, method_not_allowed, query_param};
use shared::keys;
use shared::page::PageRequest;
use shared::policy::Scope;
use shared::{AppState, auth};

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

/// One request of this function's routes, by path and method.
async fn route(state: &AppState, req: Request) -> http::HttpResult {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let id = req
        .path_parameters_ref()
        .and_then(|p| p.first("id"))
        .map(str::to_owned);
    if path.starts_with("/api/agents") {
        let principal = auth::authenticate(state, &req).await?;
        // Reads need `read`; registering an agent needs `act` (checked by the domain verb).
        if req.method() != Method::POST {
            keys::require(&principal, Scope::Read)?;
        }
        return match (req.method(), id) {
            (&Method::POST, None) => {
                let agent =
                    agents::register(state, &principal, json_body::<NewAgent>(&req)?).await?;
                let mut response = json(StatusCode::CREATED, &agent)?;
                if let Ok(location) = format!("/api/agents/{}", agent.id).parse() {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                Ok(response)
            }
            (&Method::GET, None) => json(
                StatusCode::OK,
                &agents::list(
                    state,
                    &principal,
                    &PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?,
                )
                .await?,
            ),
            (&Method::GET, Some(id)) => {
                json(StatusCode::OK, &agents::get(state, &principal, &id).await?)
            }
            (method, _) => Err(method_not_allowed(method)),
        };
    }
    let principal = auth::require_session(state, &req).await?;
    match (req.method(), id.as_deref(), path.ends_with("/generate")) {
        (&Method::POST, _, true) => {
            let request: keys::GenerateKeyRequest = json_body(&req)?;
            let issued =
                keys::generate(state, &principal.owner, request, state.config.caps.keys).await?;
            let mut response = json(StatusCode::CREATED, &issued)?;
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
            Ok(response)
        }
        (&Method::GET, None, false) => json(
            StatusCode::OK,
            &keys::list(
                state,
                &principal.owner,
                &PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?,
            )
            .await?,
        ),
        (&Method::PATCH, Some(id), false) => {
            let change: keys::KeyChange = json_body(&req)?;
            json(
                StatusCode::OK,
                &keys::change(state, &principal.owner, id, change).await?,
            )
        }
        (&Method::DELETE, Some(id), false) => json(
            StatusCode::OK,
            &keys::revoke(state, &principal.owner, id).await?,
        ),
        (method, _, _) => Err(method_not_allowed(method)),
    }
}
