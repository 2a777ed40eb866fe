//! `sandboxes` function: `GET /api/sandboxes[?limit=&cursor=]` (the caller's sandboxes, newest
//! first, `{items, nextCursor}`), `GET /api/sandboxes/{id}` (one, with the server's current
//! status), `POST /api/sandboxes` (a metadata record; 201).

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use shared::http::{self, json, json_body, method_not_allowed, query_param};
use shared::sandboxes::{self, NewSandbox};
use shared::{AppState, auth, ids};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let principal = auth::authenticate(state, &req).await?;
        let id = req.path_parameters_ref().and_then(|p| p.first("id"));
        match (req.method(), id) {
            (&Method::GET, None) => {
                let page = sandboxes::list(
                    state,
                    &principal,
                    query_param(&req, "limit"),
                    query_param(&req, "cursor"),
                )
                .await?;
                json(StatusCode::OK, &page)
            }
            (&Method::GET, Some(id)) => {
                let id = ids::parse(ids::SANDBOX, "id", id)?;
                json(
                    StatusCode::OK,
                    &sandboxes::get(state, &principal, id).await?,
                )
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
