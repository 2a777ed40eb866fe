//! `discovery` function: `GET /api/cloud/plans`, `/regions`, `/images[?plan=slug]`, `/teams`,
//! `/projects/{teamId}` — the provider's data for a caller with an API key, cached briefly.
//! Plans gain `monthlyCost` (USD). `GET /api/cloud/quote?plan=&region=&image=&projectId=&periods=`
//! (or `?serverId=&periods=` for a renewal): the exact offer a 402 would carry, with no side
//! effect.

#![warn(missing_docs)]

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use shared::http::{self, json, method_not_allowed, path_param, query_param};
use shared::keys;
use shared::policy::Scope;
use shared::{ApiError, AppState, auth, discovery, servers, validate};

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        if req.method() != Method::GET {
            return Err(method_not_allowed(req.method()));
        }
        let principal = auth::authenticate(state, &req).await?;
        keys::require(&principal, Scope::Read)?;
        let path = req.uri().path();
        if path.ends_with("/quote") {
            let query = servers::QuoteQuery {
                plan: query_param(&req, "plan"),
                region: query_param(&req, "region"),
                image: query_param(&req, "image"),
                project_id: query_param(&req, "projectId"),
                server_id: query_param(&req, "serverId"),
                periods: query_param(&req, "periods"),
            };
            return json(
                StatusCode::OK,
                &servers::quote(state, &principal, &query).await?,
            );
        }
        let items = if req
            .path_parameters_ref()
            .is_some_and(|p| p.first("teamId").is_some())
        {
            let team = validate::numeric_id("teamId", path_param(&req, "teamId")?)?;
            discovery::projects(state, team).await?
        } else if path.ends_with("/plans") {
            discovery::plans(state).await?
        } else if path.ends_with("/regions") {
            discovery::regions(state).await?
        } else if path.ends_with("/images") {
            discovery::images(state, query_param(&req, "plan")).await?
        } else if path.ends_with("/teams") {
            discovery::teams(state).await?
        } else {
            return Err(ApiError::NotFound(format!("no route {path}")));
        };
        json(StatusCode::OK, &items)
    })
    .await
}
