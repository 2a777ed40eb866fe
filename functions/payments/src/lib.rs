//! `payments` function: the caller's payments, newest first — state, amount (USDC atomic
//! units), network, payer, transaction, sandbox, server, credit, times.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Payments`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::AppState;
use domain::api;
use domain::billing::payments;
use domain::page::PageRequest;
use faces::http::{self, query_param};
use faces::router;
use lambda_http::{Body, Request, Response};

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    List,
}

const ROUTES: &[(&str, Route)] = &[("listPayments", Route::List)];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let matched = router::admit(state, ROUTES, &req).await?;
        match matched.route {
            Route::List => {
                let principal = matched.principal()?;
                let page =
                    PageRequest::parse(query_param(&req, "limit"), query_param(&req, "cursor"))?;
                http::answer(
                    &api::LIST_PAYMENTS,
                    &payments::list(state, principal, &page).await?,
                )
            }
        }
    })
    .await
}
