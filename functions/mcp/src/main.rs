//! Lambda entry point: the state is built once per cold start (see `faces::http::run`).

// As the library's: the handler's future is deeper than the default depth for proving it `Send`.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    faces::http::run(mcp::handle).await
}
