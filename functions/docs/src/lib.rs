//! `docs` function: the OpenAPI 3.1 document of the API ([`faces::openapi::document`]) and the
//! documents that let agents find what it sells ([`faces::discovery`]): the document at the
//! root with its payment terms, `/.well-known/x402`, `/llms.txt`. Its routes are the rows of
//! `domain::api::OPERATIONS` naming `Function::Docs`: method, path, who may call, answers; the
//! router admits each caller by its row.

#![warn(missing_docs)]

use domain::api;
use domain::config::Config;
use faces::{discovery, http, router};
use lambda_http::http::{StatusCode, header};
use lambda_http::{Body, Request, Response};

/// The function's routes.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// `GET /api/openapi.json`.
    Document,
    /// `GET /openapi.json`.
    RootDocument,
    /// `GET /.well-known/x402`.
    WellKnown,
    /// `GET /llms.txt`.
    Llms,
}

const ROUTES: &[(&str, Route)] = &[
    ("getOpenApi", Route::Document),
    ("getRootOpenApi", Route::RootDocument),
    ("getX402Discovery", Route::WellKnown),
    ("getLlmsTxt", Route::Llms),
];

/// Handles one request of this function's routes; it needs the configuration alone (no store,
/// no clients: see `faces::http::run_config`). Both documents are one: the route table's, with
/// the payment terms and discovery links of this deployment ([`discovery::discoverable`]).
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    http::serve(config.max_body_bytes, req, |req| async move {
        let route = router::parse(ROUTES, &req)?.route;
        let base = http::public_base(config, &req);
        let document = || {
            serde_json::to_value(faces::openapi::document())
                .map(|document| discovery::discoverable(document, config, &base))
                .map_err(|e| domain::ApiError::Internal(e.to_string()))
        };
        match route {
            Route::Document => http::answer(&api::GET_OPEN_API, &document()?),
            Route::RootDocument => http::answer(&api::GET_ROOT_OPEN_API, &document()?),
            Route::WellKnown => {
                http::answer(&api::GET_X402_DISCOVERY, &discovery::well_known(&base))
            }
            Route::Llms => Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(Body::Text(discovery::llms_txt(config, &base)))
                .map_err(|e| domain::ApiError::Internal(e.to_string())),
        }
    })
    .await
}
