//! `notifications` function: an owner's events, pulled and pushed
//! (`domain::notifications::events`, `domain::notifications::webhooks`): the feed, oldest first,
//! whose `nextCursor` resumes after a page's last event; webhook endpoints, each secret shown
//! once (a rotated one signs beside the new one for 24 h), their test events and deliveries.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Notifications`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.
//!
//! CORS for the configured web origin (the console manages webhooks).

#![warn(missing_docs)]

use domain::AppState;
use domain::api;
use domain::identity::auth;
use domain::notifications::events::{self, FeedRequest};
use domain::notifications::webhooks::{self, NewEndpoint};
use domain::page::PageRequest;
use faces::http::{self, json_body, query_param};
use faces::router::{self, Matched};
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Events,
    Webhook(WebhookRoute),
}

/// The webhook endpoints' routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WebhookRoute {
    Register,
    List,
    Get,
    Delete,
    Rotate,
    Test,
    Deliveries,
}

const ROUTES: &[(&str, Route)] = &[
    ("listEvents", Route::Events),
    ("registerWebhook", Route::Webhook(WebhookRoute::Register)),
    ("listWebhooks", Route::Webhook(WebhookRoute::List)),
    ("getWebhook", Route::Webhook(WebhookRoute::Get)),
    ("deleteWebhook", Route::Webhook(WebhookRoute::Delete)),
    ("rotateWebhookSecret", Route::Webhook(WebhookRoute::Rotate)),
    ("testWebhook", Route::Webhook(WebhookRoute::Test)),
    (
        "listWebhookDeliveries",
        Route::Webhook(WebhookRoute::Deliveries),
    ),
];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    let config = &state.config;
    http::serve_cors(
        config.max_body_bytes,
        config.sign_in.web_origin.as_deref(),
        req,
        |req| route(state, req),
    )
    .await
}

/// One request, by its typed route.
async fn route(state: &AppState, req: Request) -> http::HttpResult {
    let matched = router::admit(state, ROUTES, &req).await?;
    let principal = matched.principal()?;
    match matched.route {
        Route::Events => {
            let request = FeedRequest::parse(
                query_param(&req, "limit"),
                query_param(&req, "after"),
                query_param(&req, "types"),
                query_param(&req, "subject"),
            )?;
            http::answer(
                &api::LIST_EVENTS,
                &events::feed(state, principal, &request).await?,
            )
        }
        Route::Webhook(route) => webhook_route(state, &req, principal, route, &matched).await,
    }
}

/// The webhook endpoints' routes (session, or a key with `webhooks`).
async fn webhook_route(
    state: &AppState,
    req: &Request,
    principal: &auth::Principal,
    route: WebhookRoute,
    matched: &Matched<Route>,
) -> http::HttpResult {
    let id = || matched.param("id");
    match route {
        WebhookRoute::Register => {
            let request: NewEndpoint = json_body(req)?;
            let created = webhooks::register(state, principal, request).await?;
            let mut response = http::answer(&api::REGISTER_WEBHOOK, &created)?;
            let headers = response.headers_mut();
            headers.insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
            if let Ok(location) = domain::api::link("getWebhook", &created.endpoint.id).parse() {
                headers.insert(header::LOCATION, location);
            }
            Ok(response)
        }
        WebhookRoute::List => http::answer(
            &api::LIST_WEBHOOKS,
            &webhooks::list(state, principal).await?,
        ),
        WebhookRoute::Get => http::answer(
            &api::GET_WEBHOOK,
            &webhooks::get(state, principal, id()?).await?,
        ),
        WebhookRoute::Delete => {
            webhooks::delete(state, principal, id()?).await?;
            http::answer(&api::DELETE_WEBHOOK, &())
        }
        WebhookRoute::Rotate => {
            let rotated = webhooks::rotate(state, principal, id()?).await?;
            let mut response = http::answer(&api::ROTATE_WEBHOOK_SECRET, &rotated)?;
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
            Ok(response)
        }
        WebhookRoute::Test => http::answer(
            &api::TEST_WEBHOOK,
            &webhooks::send_test(state, principal, id()?).await?,
        ),
        WebhookRoute::Deliveries => {
            let page = PageRequest::parse(query_param(req, "limit"), query_param(req, "cursor"))?;
            http::answer(
                &api::LIST_WEBHOOK_DELIVERIES,
                &webhooks::deliveries(state, principal, id()?, &page).await?,
            )
        }
    }
}
