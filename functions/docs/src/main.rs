//! Lambda entry point: the configuration is read once per cold start, and nothing else is built
//! (see `faces::http::run_config`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    faces::http::run_config(docs::handle).await
}
