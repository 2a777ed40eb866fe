//! `servers` function: `GET /api/cloud/servers/{projectId}` (the caller's servers in a project)
//! (key or session) and `POST /api/cloud/servers/{projectId}` (API key only; provision; 201 with the provider's server object
//! plus `sandboxId`, and a `Location` of the sandbox; 402 with the price for a paid plan).

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode, header};
use lambda_http::{Body, Request, Response};
use serde_json::Value;
use shared::http::{self, json, json_body, method_not_allowed, path_param};
use shared::servers::{self, ProvisionRequest};
use shared::{AppState, auth, validate};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let principal = if req.method() == Method::POST {
            auth::require_key(state, &req).await?
        } else {
            auth::authenticate(state, &req).await?
        };
        let project = validate::numeric_id("projectId", path_param(&req, "id")?)?;
        match *req.method() {
            Method::GET => json(
                StatusCode::OK,
                &servers::list(state, &principal, project).await?,
            ),
            Method::POST => {
                let request = json_body::<ProvisionRequest>(&req)?.validate()?;
                let provisioned = servers::provision(state, &principal, project, request).await?;
                let mut server = provisioned.server;
                if let Value::Object(fields) = &mut server {
                    fields.insert(
                        "sandboxId".into(),
                        Value::from(provisioned.sandbox.id.clone()),
                    );
                }
                let mut response = json(StatusCode::CREATED, &server)?;
                if let Ok(location) = format!("/api/sandboxes/{}", provisioned.sandbox.id).parse() {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                Ok(response)
            }
            ref other => Err(method_not_allowed(other)),
        }
    })
    .await
}
