//! Lambda entry point: the state is built once per cold start (see `shared::http::run`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::run(notifications::handle).await
}
