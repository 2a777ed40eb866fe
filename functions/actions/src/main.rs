//! Lambda entry point: the state is built once per cold start (see `faces::http::run`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    faces::http::run(actions::handle).await
}
