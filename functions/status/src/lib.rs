//! `status` function: `GET /api/cloud/status` → `{"configured": bool}`, whether the upstream
//! provider's token is configured. Anyone may call it.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use serde_json::json;
use shared::AppState;
use shared::http::{self, json, method_not_allowed};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        if req.method() != Method::GET {
            return Err(method_not_allowed(req.method()));
        }
        json(
            StatusCode::OK,
            &json!({ "configured": state.upstream.is_some() }),
        )
    })
    .await
}
