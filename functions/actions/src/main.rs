//! Lambda entry point: builds the state once per cold start, then serves every invocation.

use lambda_http::{Error, run, service_fn, tracing};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let state = shared::AppState::from_env().await?;
    let state = &state;
    run(service_fn(move |req| async move {
        Ok::<_, Error>(actions::handle(state, req).await)
    }))
    .await
}
