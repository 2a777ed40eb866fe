//! `notifications` function: `GET /api/events[?after=cursor&types=a,b&subject=id&limit=1-100]`
//! (key or session, `read`): the caller's events, oldest first, `{items, nextCursor}` — what
//! happened to its servers, payments and keys (`shared::events`). `nextCursor` resumes after the
//! page's last event, so a poller keeps it and asks again.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use shared::events::{self, FeedRequest};
use shared::http::{self, json, query_param};
use shared::keys;
use shared::policy::Scope;
use shared::{AppState, auth, router};

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Events,
}

const ROUTES: &[(Method, &str, Route)] = &[(Method::GET, "/api/events", Route::Events)];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        match router::parse(ROUTES, &req)?.route {
            Route::Events => {
                let principal = auth::authenticate(state, &req).await?;
                keys::require(&principal, Scope::Read)?;
                let request = FeedRequest::parse(
                    query_param(&req, "limit"),
                    query_param(&req, "after"),
                    query_param(&req, "types"),
                    query_param(&req, "subject"),
                )?;
                json(
                    StatusCode::OK,
                    &events::feed(state, &principal, &request).await?,
                )
            }
        }
    })
    .await
}
