//! `keys` function: API keys and agents.
//!
//! - `POST /api/keys/generate` `{name, expiresAt?}` → 201 `{id, name, key, prefix, createdAt,
//!   expiresAt}`, the key shown this once (session only)
//! - `GET /api/keys[?limit=&cursor=]` → `{items, nextCursor}`: id, name, prefix, createdAt,
//!   lastUsedAt, expiresAt, revokedAt, status — never a key or a hash (session only)
//! - `DELETE /api/keys/{id}` → 200 with the revoked key; idempotent; its agents become inactive
//!   in the same transaction (session only)
//! - `POST /api/agents` `{name, keyId?}` → 201; `GET /api/agents`, `GET /api/agents/{id}`
//!   (session, or an API key — an agent registering itself)
//!
//! CORS for the configured web origin.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::json;
use shared::agents::{self, NewAgent};
use shared::auth::api_key::{self, KeyView};
use shared::http::{self, json, json_body, method_not_allowed, query_param};
use shared::{ApiError, AppState, auth, ids, sandboxes};

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
                    query_param(&req, "limit"),
                    query_param(&req, "cursor"),
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
    let now = shared::time::now();
    match (req.method(), id.as_deref(), path.ends_with("/generate")) {
        (&Method::POST, _, true) => {
            let body: api_key::GenerateKeyRequest = json_body(&req)?;
            let name = body.name.trim();
            if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
                return Err(ApiError::invalid(
                    "name",
                    "must be 1-64 characters without control characters",
                ));
            }
            let expires_at = match body.expires_at.as_deref() {
                None => None,
                Some(at) => {
                    let at = shared::time::parse_rfc3339(at).ok_or_else(|| {
                        ApiError::invalid("expiresAt", "must be an RFC 3339 time")
                    })?;
                    if at <= now {
                        return Err(ApiError::invalid("expiresAt", "must be in the future"));
                    }
                    Some(shared::time::rfc3339(at))
                }
            };
            let (key, record) =
                api_key::issue(&state.store, &principal.owner, name, expires_at).await?;
            let mut response = json(
                StatusCode::CREATED,
                &json!({
                    "id": record.id, "name": record.name, "key": key.expose(),
                    "prefix": record.prefix,
                    "createdAt": record.created_at, "expiresAt": record.expires_at,
                }),
            )?;
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
            Ok(response)
        }
        (&Method::GET, None, false) => {
            let limit = sandboxes::page_limit(query_param(&req, "limit"))?;
            let page = state
                .store
                .api_keys_of(&principal.owner, limit, query_param(&req, "cursor"))
                .await?;
            json(
                StatusCode::OK,
                &json!({
                    "items": page.items.iter().map(|k| KeyView::of(k, now)).collect::<Vec<_>>(),
                    "nextCursor": page.next_cursor,
                }),
            )
        }
        (&Method::DELETE, Some(id), false) => {
            ids::parse(ids::API_KEY, "id", id)?;
            let record = state
                .store
                .revoke_api_key(&principal.owner, id, &shared::time::rfc3339(now))
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("no key {id}")))?;
            json(StatusCode::OK, &KeyView::of(&record, now))
        }
        (method, _, _) => Err(method_not_allowed(method)),
    }
}
