//! `status` function: `GET /api/cloud/status` → `{"configured": bool}`, whether a token for the
//! upstream provider is configured (`UPSTREAM_TOKEN` or `UPSTREAM_TOKEN_PARAM`), answered from
//! the configuration alone: the function never reads the token. Anyone may call it.

#![warn(missing_docs)]

use domain::api;
use domain::config::{Config, TokenSource};
use faces::http;
use faces::router;
use lambda_http::{Body, Request, Response};
use serde_json::json;

/// Handles one request of this function's routes.
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    http::serve(config.max_body_bytes, req, |req| async move {
        router::parse(&[("getStatus", ())], &req)?;
        let configured = !matches!(config.token, TokenSource::None);
        http::answer(&api::GET_STATUS, &json!({ "configured": configured }))
    })
    .await
}
