//! `actions` function: a server's power actions, rebuild and rescue (202 with the provider's
//! server object, with `paidUntil`/`graceEndsAt` for a paid server and `X-Lease-Expires` in its
//! lease's last 24 h) and its deletion (204; a paid server's lease stops). Owner only. A paid
//! server past its paid time takes only `power-off` until renewed (409).
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Actions`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::AppState;
use domain::api;
use domain::ids::ServerId;
use domain::servers::{self, ActionRequest};
use faces::http::{self, json_body};
use faces::router;
use lambda_http::{Body, Request, Response};

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
        let matched = router::admit(state, ROUTES, &req).await?;
        let principal = matched.principal()?;
        let server = ServerId::parse("serverId", matched.param("id")?)?;
        match matched.route {
            Route::Act => {
                let action = servers::parse_action(json_body::<ActionRequest>(&req)?)?;
                let acted = servers::act(state, principal, server, action).await?;
                let mut response = http::answer(&api::SERVER_ACTION, &acted.server)?;
                if let Some(until) = acted.lease_expires.and_then(|u| u.to_string().parse().ok()) {
                    response.headers_mut().insert("x-lease-expires", until);
                }
                Ok(response)
            }
            Route::Delete => {
                servers::delete(state, principal, server).await?;
                http::answer(&api::DELETE_SERVER, &())
            }
        }
    })
    .await
}
