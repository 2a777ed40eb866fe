//! `sandboxes` function: `GET /api/sandboxes[?limit=&cursor=]` (the caller's sandboxes, newest
//! first, `{items, nextCursor}`), `GET /api/sandboxes/{id}` (one, with its server's stage, from
//! the store; `?waitFor=ready,failed&timeout=20` long-polls), `POST /api/sandboxes` (a metadata
//! record; 201).

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use shared::http::{self, json, json_body, method_not_allowed, query_param};
use shared::keys;
use shared::page::PageRequest;
use shared::policy::Scope;
use shared::sandboxes::{self, NewSandbox};
use shared::stages;
use shared::{AppState, auth, ids};

/// `GET /api/sandboxes/{id}?waitFor=…&timeout=…`: 200 with the sandbox and `reached`; when not
/// reached, `Retry-After` (seconds) says when to ask again.
async fn long_poll(
    state: &AppState,
    req: &Request,
    principal: &auth::Principal,
    id: &str,
    wait_for: &str,
) -> http::HttpResult {
    let (stages, timeout) = stages::parse_wait(wait_for, query_param(req, "timeout"))?;
    let deadline = http::deadline(state, req);
    let (view, reached) =
        sandboxes::wait(state, principal, id, &stages, timeout, &deadline).await?;
    let mut body = serde_json::to_value(&view)
        .map_err(|e| shared::error::ApiError::Internal(e.to_string()))?;
    body["reached"] = reached.into();
    let mut response = json(StatusCode::OK, &body)?;
    if !reached {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    }
    Ok(response)
}

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let principal = auth::authenticate(state, &req).await?;
        keys::require(
            &principal,
            if req.method() == Method::POST {
                Scope::Act
            } else {
                Scope::Read
            },
        )?;
        let id = req.path_parameters_ref().and_then(|p| p.first("id"));
        match (req.method(), id) {
            (&Method::GET, None) => {
                let page = sandboxes::list(
                    state,
                    &principal,
                    &PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?,
                )
                .await?;
                json(StatusCode::OK, &page)
            }
            (&Method::GET, Some(id)) => {
                let id = ids::parse(ids::SANDBOX, "id", id)?;
                match query_param(&req, "waitFor") {
                    None => json(
                        StatusCode::OK,
                        &sandboxes::get(state, &principal, id).await?,
                    ),
                    Some(wait_for) => long_poll(state, &req, &principal, id, wait_for).await,
                }
            }
            (&Method::POST, None) => {
                let record =
                    sandboxes::create(state, &principal, json_body::<NewSandbox>(&req)?).await?;
                let mut response = json(StatusCode::CREATED, &record)?;
                if let Ok(location) = format!("/api/sandboxes/{}", record.id).parse() {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                Ok(response)
            }
            (other, _) => Err(method_not_allowed(other)),
        }
    })
    .await
}
