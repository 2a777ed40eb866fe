//! Lambda entry point of the scheduled reconciler: the state is built once per cold start.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    reconciler::run().await
}
