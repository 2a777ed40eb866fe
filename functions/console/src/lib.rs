//! `console` function: the web console for the humans (`console/` at the repository's root),
//! embedded in this binary and served on the API's own origin by [`faces::console::serve`]:
//! `GET /` the page, `GET /console/{file}` its modules, styles and the vendored keccak
//! (@noble/hashes 2.0.1, MIT, with its licence). Anyone may fetch them; everything the page
//! shows comes from the API with the visitor's session.

#![warn(missing_docs)]

use domain::config::Config;
use faces::console::Asset;
use lambda_http::{Body, Request, Response};

macro_rules! asset {
    ($name:literal, $path:literal) => {
        Asset {
            name: $name,
            body: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../console/",
                $path
            )),
        }
    };
}

/// The console's files, by the name each is served under.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", "index.html"),
    asset!("style.css", "style.css"),
    asset!("app.js", "app.js"),
    asset!("api.js", "api.js"),
    asset!("wallet.js", "wallet.js"),
    asset!("sha3.js", "vendor/noble-hashes-2.0.1/sha3.js"),
    asset!("_u64.js", "vendor/noble-hashes-2.0.1/_u64.js"),
    asset!("utils.js", "vendor/noble-hashes-2.0.1/utils.js"),
    asset!(
        "noble-hashes.LICENSE.txt",
        "vendor/noble-hashes-2.0.1/LICENSE"
    ),
];

/// Handles one request of this function's routes; it needs the configuration alone (no store,
/// no clients: see `faces::http::run_config`).
pub async fn handle(config: &Config, req: Request) -> Response<Body> {
    faces::http::serve(config.max_body_bytes, req, |req| async move {
        faces::console::serve(ASSETS, &req)
    })
    .await
}
