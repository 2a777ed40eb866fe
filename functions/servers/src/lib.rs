//! `servers` function: `GET /api/cloud/servers/{projectId}` (the caller's servers in a project)
//! (key or session) and `POST /api/cloud/servers/{projectId}` (API key only; provision; 201 with the provider's server object
//! plus `sandboxId`, and a `Location` of the sandbox). A paid plan is paid with x402: without a
//! payment, 402 with the v2 `PAYMENT-REQUIRED` header and the v1 body; with `PAYMENT-SIGNATURE`
//! (v2) or `X-PAYMENT` (v1), 201 with `PAYMENT-RESPONSE` and `X-PAYMENT-RESPONSE`.

#![warn(missing_docs)]

use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Request, Response};
use serde_json::Value;
use shared::http::{self, json, json_body, method_not_allowed, path_param};
use shared::payments::PaymentHeader;
use shared::servers::{self, ProvisionRequest};
use shared::{AppState, auth, validate, x402};

/// The URL of this request, as the x402 `resource`: `PUBLIC_BASE_URL` (or `https://<Host>`)
/// and the path.
fn resource_url(state: &AppState, req: &Request) -> String {
    let base = state
        .config
        .payments
        .public_base_url
        .clone()
        .unwrap_or_else(|| {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!("https://{host}")
        });
    format!("{base}{}", req.uri().path())
}

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
                let resource = resource_url(state, &req);
                let payment = PaymentHeader::from_headers(req.headers());
                let provisioned =
                    servers::provision(state, &principal, project, request, &resource, payment)
                        .await?;
                let mut server = provisioned.server;
                if let Value::Object(fields) = &mut server {
                    fields.insert(
                        "sandboxId".into(),
                        Value::from(provisioned.sandbox_id.clone()),
                    );
                }
                let mut response = json(StatusCode::CREATED, &server)?;
                let headers = response.headers_mut();
                if let Ok(location) = format!("/api/sandboxes/{}", provisioned.sandbox_id).parse() {
                    headers.insert(header::LOCATION, location);
                }
                if let Some(settlement) = &provisioned.settlement
                    && let Ok(value) = x402::encode_header(settlement).parse::<HeaderValue>()
                {
                    headers.insert(x402::PAYMENT_RESPONSE, value.clone());
                    headers.insert(x402::X_PAYMENT_RESPONSE, value);
                }
                Ok(response)
            }
            ref other => Err(method_not_allowed(other)),
        }
    })
    .await
}
