//! `docs` function: the OpenAPI 3.1 document of the API ([`faces::openapi::document`]).
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Docs`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::api;
use domain::config::Config;
use faces::http;
use faces::router;
use lambda_http::{Body, Request, Response};

/// Handles one request of this function's routes; it needs the configuration alone (no store,
/// no clients: see `faces::http::run_config`).
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    http::serve(config.max_body_bytes, req, |req| async move {
        router::parse(&[("getOpenApi", ())], &req)?;
        let document = serde_json::to_value(faces::openapi::document())
            .map_err(|e| domain::ApiError::Internal(e.to_string()))?;
        http::answer(&api::GET_OPEN_API, &document)
    })
    .await
}
