//! `docs` function: `GET /api/openapi.json` → the OpenAPI 3.1 document of the API
//! ([`faces::openapi::document`]). Anyone may call it.

#![warn(missing_docs)]

use faces::http::{self, json};
use faces::router;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use domain::config::Config;

/// Handles one request of this function's routes; it needs the configuration alone (no store,
/// no clients: see `faces::http::run_config`).
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    http::serve(config.max_body_bytes, req, |req| async move {
        router::parse(&[("getOpenApi", ())], &req)?;
        json(StatusCode::OK, &faces::openapi::document())
    })
    .await
}
