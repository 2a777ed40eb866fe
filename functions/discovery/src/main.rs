//! Lambda entry point: the state is built once per cold start (see `faces::http::run`).

// The quote's future (a resize's checks) is deeper than the default depth for proving it `Send`.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    faces::http::run(discovery::handle).await
}
