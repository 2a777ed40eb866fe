//! `servers` function: the caller's servers in a project, provisioning (an API key's),
//! renewals and resizes. A paid plan is paid with x402: without a payment, 402 with the v2
//! `PAYMENT-REQUIRED` header and the v1 body; with `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1),
//! 201 with `PAYMENT-RESPONSE` and `X-PAYMENT-RESPONSE` — or 202 with the order in progress
//! (`Location: /api/sandboxes/{id}`) when it cannot finish within the invocation's deadline.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Servers`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::api::{self, Object, Row, Success};
use domain::billing::order::{self, Outcome};
use domain::billing::payments::PaymentHeader;
use domain::billing::purchase::{ProvisionRequest, RenewalRequest, ResizeRequest};
use domain::identity::auth::Principal;
use domain::ids::ServerId;
use domain::servers;
use domain::{AppState, validate};
use faces::http::{self, json_body};
use faces::router;
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// The API's public base (`http::public_base`) and this request's URL on it, the x402
/// `resource`.
fn origin(state: &AppState, req: &Request) -> (String, String) {
    let base = http::public_base(&state.config, req);
    let url = format!("{base}{}", req.uri().path());
    (base, url)
}

/// 201 with the server (and `sandboxId`, its `stage` and times) or 202 with the order in
/// progress (`order::answer`); `Location` names the sandbox; the payment response headers come
/// once the payment settled.
async fn answer(state: &AppState, row: &Row<Object>, outcome: Outcome) -> http::HttpResult {
    let answer = order::answer(state, outcome).await;
    let success = if answer.created {
        Success::Ok
    } else {
        Success::Pending
    };
    let mut response = http::answer_as(row, success, &answer.body)?;
    if let Ok(location) = domain::api::link("getSandbox", &answer.sandbox_id).parse() {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if let Some(settlement) = &answer.settlement {
        http::set_payment_response(&mut response, settlement);
    }
    Ok(response)
}

/// `POST /api/cloud/servers/{serverId}/renewals` (key or session, owner): 402 with the offer,
/// then 201 `{serverId, periods, amount, paidUntil, graceEndsAt}` with the payment response.
async fn renew(
    state: &AppState,
    req: &Request,
    principal: &Principal,
    server: &str,
) -> http::HttpResult {
    let server = ServerId::parse("serverId", server)?;
    let request = json_body::<RenewalRequest>(req)?;
    let (base, url) = origin(state, req);
    let outcome = servers::renew(
        state,
        principal,
        server,
        request,
        order::Resource {
            url: &url,
            base: &base,
        },
        PaymentHeader::from_headers(req.headers()),
        &http::deadline(state, req),
    )
    .await?;
    answer(state, &api::RENEW_SERVER, outcome).await
}

/// `POST /api/cloud/servers/{serverId}/resizes` (key or session, owner): 402 with the offer (the
/// difference of the plans for the paid time left), then 201 `{serverId, plan, from, amount,
/// paidUntil}` with the payment response — or 202 while the provider's upgrade is on its way.
async fn resize(
    state: &AppState,
    req: &Request,
    principal: &Principal,
    server: &str,
) -> http::HttpResult {
    let server = ServerId::parse("serverId", server)?;
    let request = json_body::<ResizeRequest>(req)?;
    let (base, url) = origin(state, req);
    let outcome = servers::resize(
        state,
        principal,
        server,
        request,
        order::Resource {
            url: &url,
            base: &base,
        },
        PaymentHeader::from_headers(req.headers()),
        &http::deadline(state, req),
    )
    .await?;
    answer(state, &api::RESIZE_SERVER, outcome).await
}

/// `POST /api/cloud/servers/{projectId}` (an API key): provisions a server in the project.
async fn provision(
    state: &AppState,
    req: &Request,
    principal: &Principal,
    project: &str,
) -> http::HttpResult {
    let project = validate::numeric_id("projectId", project)?;
    let request = json_body::<ProvisionRequest>(req)?.validate()?;
    let (base, url) = origin(state, req);
    let resource = order::Resource {
        url: &url,
        base: &base,
    };
    let payment = PaymentHeader::from_headers(req.headers());
    let deadline = http::deadline(state, req);
    lambda_http::tracing::info!(
        remaining_ms = deadline.remaining().as_millis() as u64,
        "provisioning within the invocation's deadline"
    );
    let outcome = servers::provision(
        state, principal, project, request, resource, payment, &deadline,
    )
    .await?;
    answer(state, &api::PROVISION_SERVER, outcome).await
}

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Renew,
    Resize,
    List,
    Provision,
}

const ROUTES: &[(&str, Route)] = &[
    ("renewServer", Route::Renew),
    ("resizeServer", Route::Resize),
    ("listServers", Route::List),
    ("provisionServer", Route::Provision),
];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let matched = router::admit(state, ROUTES, &req).await?;
        let (id, principal) = (matched.param("id")?, matched.principal()?);
        match matched.route {
            Route::Renew => renew(state, &req, principal, id).await,
            Route::Resize => resize(state, &req, principal, id).await,
            Route::Provision => provision(state, &req, principal, id).await,
            Route::List => {
                let project = validate::numeric_id("projectId", id)?;
                http::answer(
                    &api::LIST_SERVERS,
                    &servers::list(state, principal, project).await?,
                )
            }
        }
    })
    .await
}
