//! `actions` function: `POST /api/cloud/servers/{serverId}/actions` (reboot, power-on,
//! power-off, rebuild, enter-rescue-mode, exit-rescue-mode; 202 with the provider's server
//! object, with `paidUntil`/`graceEndsAt` for a paid server and `X-Lease-Expires` in its lease's
//! last 24 h) and `DELETE /api/cloud/servers/{serverId}` (204; a paid server's lease stops).
//! Owner only. A paid server past its paid time takes only `power-off` until renewed (409).

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use shared::http::{self, empty, json, json_body, method_not_allowed, path_param};
use shared::keys;
use shared::policy::Scope;
use shared::servers::{self, ActionRequest};
use shared::{AppState, auth, validate};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let principal = auth::authenticate(state, &req).await?;
        let server = validate::numeric_id("serverId", path_param(&req, "id")?)?;
        let on_actions = req.uri().path().trim_end_matches('/').ends_with("/actions");
        keys::require(
            &principal,
            if on_actions {
                Scope::Act
            } else {
                Scope::Delete
            },
        )?;
        match (req.method(), on_actions) {
            (&Method::POST, true) => {
                let action = servers::parse_action(json_body::<ActionRequest>(&req)?)?;
                let acted = servers::act(state, &principal, server, &action).await?;
                let mut response = json(StatusCode::ACCEPTED, &acted.server)?;
                if let Some(until) = acted.lease_expires.and_then(|u| u.parse().ok()) {
                    response.headers_mut().insert("x-lease-expires", until);
                }
                Ok(response)
            }
            (&Method::DELETE, false) => {
                servers::delete(state, &principal, server).await?;
                empty(StatusCode::NO_CONTENT)
            }
            (other, _) => Err(method_not_allowed(other)),
        }
    })
    .await
}
