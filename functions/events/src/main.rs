//! Lambda entry point of the stream's `events` function: the state is built once per cold start.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    events::run().await
}
