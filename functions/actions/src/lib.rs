//! `actions` function: `POST /api/cloud/servers/{serverId}/actions` (reboot, power-on,
//! power-off, rebuild, enter-rescue-mode, exit-rescue-mode; 202 with the provider's server
//! object, with `paidUntil`/`graceEndsAt` for a paid server and `X-Lease-Expires` in its lease's
//! last 24 h) and `DELETE /api/cloud/servers/{serverId}` (204; a paid server's lease stops).
//! Owner only. A paid server past its paid time takes only `power-off` until renewed (409).

#![warn(missing_docs)]

use faces::http::{self, empty, json, json_body};
use faces::router;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use domain::AppState;
use domain::identity::auth;
use domain::identity::keys;
use domain::ids::ServerId;
use domain::policy::Scope;
use domain::servers::{self, ActionRequest};

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Act,
    Delete,
}

const ROUTES: &[(&str, Route)] = &[
    ("serverAction", Route::Act),
    ("deleteServer", Route::Delete),
];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let matched = router::parse(ROUTES, &req)?;
        let principal = auth::authenticate(state, &req).await?;
        let server = ServerId::parse("serverId", matched.param("id")?)?;
        match matched.route {
            Route::Act => {
                keys::require(&principal, Scope::Act)?;
                let action = servers::parse_action(json_body::<ActionRequest>(&req)?)?;
                let acted = servers::act(state, &principal, server, action).await?;
                let mut response = json(StatusCode::ACCEPTED, &acted.server)?;
                if let Some(until) = acted.lease_expires.and_then(|u| u.to_string().parse().ok()) {
                    response.headers_mut().insert("x-lease-expires", until);
                }
                Ok(response)
            }
            Route::Delete => {
                keys::require(&principal, Scope::Delete)?;
                servers::delete(state, &principal, server).await?;
                empty(StatusCode::NO_CONTENT)
            }
        }
    })
    .await
}
