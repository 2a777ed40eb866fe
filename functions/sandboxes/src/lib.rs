//! `sandboxes` function: the caller's sandboxes, newest first; one, with its server's stage from
//! the store (`?waitFor=ready,failed&timeout=20` long-polls); a metadata record.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Sandboxes`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::AppState;
use domain::api;
use domain::identity::auth;
use domain::ids::SandboxId;
use domain::page::PageRequest;
use domain::servers::sandboxes::{self, NewSandbox};
use domain::servers::stages;
use faces::http::{self, json_body, query_param};
use faces::router;
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// `GET /api/sandboxes/{id}?waitFor=…&timeout=…`: 200 with the sandbox and `reached`; when not
/// reached, `Retry-After` (seconds) says when to ask again.
async fn long_poll(
    state: &AppState,
    req: &Request,
    principal: &auth::Principal,
    id: &SandboxId,
    wait_for: &str,
) -> http::HttpResult {
    let (stages, timeout) = stages::parse_wait(wait_for, query_param(req, "timeout"))?;
    let deadline = http::deadline(state, req);
    let (mut view, reached) =
        sandboxes::wait(state, principal, id, &stages, timeout, &deadline).await?;
    view.reached = Some(reached);
    let mut response = http::answer(&api::GET_SANDBOX, &view)?;
    if !reached {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    }
    Ok(response)
}

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    List,
    Get,
    Create,
}

const ROUTES: &[(&str, Route)] = &[
    ("listSandboxes", Route::List),
    ("getSandbox", Route::Get),
    ("createSandbox", Route::Create),
];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let matched = router::admit(state, ROUTES, &req).await?;
        let principal = matched.principal()?;
        match matched.route {
            Route::List => {
                let page =
                    PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?;
                http::answer(
                    &api::LIST_SANDBOXES,
                    &sandboxes::list(state, principal, &page).await?,
                )
            }
            Route::Get => {
                let id = SandboxId::parse("id", matched.param("id")?)?;
                match query_param(&req, "waitFor") {
                    None => http::answer(
                        &api::GET_SANDBOX,
                        &sandboxes::get(state, principal, &id).await?,
                    ),
                    Some(wait_for) => long_poll(state, &req, principal, &id, wait_for).await,
                }
            }
            Route::Create => {
                let record =
                    sandboxes::create(state, principal, json_body::<NewSandbox>(&req)?).await?;
                let mut response = http::answer(&api::CREATE_SANDBOX, &record)?;
                if let Ok(location) = domain::api::link("getSandbox", &record.id).parse() {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                Ok(response)
            }
        }
    })
    .await
}
