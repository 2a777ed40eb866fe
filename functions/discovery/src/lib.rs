//! `discovery` function: the provider's catalogue (plans with `monthlyCost` in USD, regions,
//! images, teams, projects), cached briefly (while the provider fails, its last answer stands
//! in: the plans then carry `Age`), and quotes: the exact offer a 402 would carry, with no side
//! effect.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Discovery`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.

#![warn(missing_docs)]

use domain::api;
use domain::servers::discovery;
use domain::{AppState, servers, validate};
use faces::http::{self, query_param};
use faces::router;
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Quote,
    Plans,
    Regions,
    Images,
    Teams,
    Projects,
}

const ROUTES: &[(&str, Route)] = &[
    ("getQuote", Route::Quote),
    ("listPlans", Route::Plans),
    ("listRegions", Route::Regions),
    ("listImages", Route::Images),
    ("listTeams", Route::Teams),
    ("listProjects", Route::Projects),
];

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        let matched = router::admit(state, ROUTES, &req).await?;
        let (row, items) = match matched.route {
            Route::Quote => {
                let query = servers::QuoteQuery {
                    plan: query_param(&req, "plan"),
                    region: query_param(&req, "region"),
                    image: query_param(&req, "image"),
                    project_id: query_param(&req, "projectId"),
                    server_id: query_param(&req, "serverId"),
                    periods: query_param(&req, "periods"),
                };
                let quote = servers::quote(state, matched.principal()?, &query).await?;
                return http::answer(&api::GET_QUOTE, &quote);
            }
            Route::Projects => {
                let team = validate::numeric_id("teamId", matched.param("teamId")?)?;
                (&api::LIST_PROJECTS, discovery::projects(state, team).await?)
            }
            Route::Plans => {
                let listing = discovery::plans(state, matched.caller()).await?;
                let mut answer = http::answer(&api::LIST_PLANS, &listing.items)?;
                // The provider's last answer standing in for a failing one: its age (RFC 9111).
                if let Some(age) = listing.age {
                    answer.headers_mut().insert(header::AGE, age.into());
                }
                return Ok(answer);
            }
            Route::Regions => (&api::LIST_REGIONS, discovery::regions(state).await?),
            Route::Images => (
                &api::LIST_IMAGES,
                discovery::images(state, query_param(&req, "plan")).await?,
            ),
            Route::Teams => (&api::LIST_TEAMS, discovery::teams(state).await?),
        };
        http::answer(row, &items)
    })
    .await
}
