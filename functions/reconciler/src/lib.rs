//! `reconciler` function: no route; an EventBridge schedule invokes it every minute. Each
//! invocation is one [`domain::reconciler::pass`] within the invocation's deadline, and answers
//! the pass's report.

#![warn(missing_docs)]

use domain::AppState;
use domain::deadline::Deadline;
use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};
use serde_json::Value;

/// One scheduled invocation: a pass at the current time.
///
/// Errors: a listing of the ledger that fails (the invocation fails and is alarmed on).
pub async fn handle(
    state: &AppState,
    event: LambdaEvent<Value>,
) -> Result<Value, lambda_http::Error> {
    let deadline =
        Deadline::from_epoch_millis(event.context.deadline, state.config.payments.request_budget);
    let report = domain::reconciler::pass(state, &deadline).await?;
    Ok(serde_json::to_value(report)?)
}

/// The whole `main`: logging, the state built once, then [`handle`] for every invocation.
///
/// Errors: invalid configuration at cold start; a runtime failure.
pub async fn run() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let state: &'static AppState = Box::leak(Box::new(AppState::from_env().await?.paced()));
    lambda_runtime::run(service_fn(move |event| handle(state, event))).await
}
