//! `docs` function: `GET /api/openapi.json` → the OpenAPI 3.1 document of the API
//! ([`shared::openapi::document`]). Anyone may call it.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use shared::AppState;
use shared::http::{self, json, method_not_allowed};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        if req.method() != Method::GET {
            return Err(method_not_allowed(req.method()));
        }
        json(StatusCode::OK, &shared::openapi::document())
    })
    .await
}
