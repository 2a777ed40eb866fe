//! `payments` function: `GET /api/payments[?limit=1-100&cursor=…]` (key or session): the
//! caller's payments, newest first, `{items, nextCursor}` — state, amount (USDC atomic units),
//! network, payer, transaction, sandbox, server, credit, times.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use shared::http::{self, json, method_not_allowed, query_param};
use shared::keys;
use shared::page::PageRequest;
use shared::policy::Scope;
use shared::{AppState, auth, payments};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let principal = auth::authenticate(state, &req).await?;
        keys::require(&principal, Scope::Read)?;
        match *req.method() {
            Method::GET => {
                let page = payments::list(
                    state,
                    &principal,
                    &PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?,
                )
                .await?;
                json(StatusCode::OK, &page)
            }
            ref other => Err(method_not_allowed(other)),
        }
    })
    .await
}
