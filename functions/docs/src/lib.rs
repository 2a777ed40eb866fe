//! `docs` function: `GET /api/openapi.json` → the OpenAPI 3.1 document of the API
//! ([`shared::openapi::document`]). Anyone may call it.

#![warn(missing_docs)]

use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use shared::config::Config;
use shared::http::{self, json};
use shared::router;

/// Handles one request of this function's routes; it needs the configuration alone (no store,
/// no clients: see `shared::http::run_config`).
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    http::serve(config.max_body_bytes, req, |req| async move {
        router::parse(&[("getOpenApi", ())], &req)?;
        json(StatusCode::OK, &shared::openapi::document())
    })
    .await
}
