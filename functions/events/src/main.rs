//! Lambda entry point of the stream's `events` function: the state is built once per cold start.
// A batch's future nests positioning and queueing: its layout is deeper than the default limit
// of 128 queries.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    events::run().await
}
