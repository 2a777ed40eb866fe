//! Lambda entry point of the scheduled reconciler: the state is built once per cold start.
// A pass's future nests every step of an order, a lease, the refresher and the sweep: its
// layout is deeper than the default limit of 128 queries.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    reconciler::run().await
}
