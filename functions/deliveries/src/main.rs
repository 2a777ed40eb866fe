//! Lambda entry point of the delivery queue's `deliveries` function: the state is built once
//! per cold start.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    deliveries::run().await
}
