//! `events` function: no route; the table's DynamoDB Stream, filtered to new event items
//! (`pk` starting `EVENTS#`, `INSERT`), invokes it with a batch of records. Each event is given
//! its place in its owner's feed ([`domain::notifications::events::position`]: `GET /api/events`
//! reads that order), then queued for its owner's webhook endpoints
//! ([`domain::notifications::deliveries::fan_out`]: a delivery record and a message in the
//! delivery queue each). Nothing is sent here: the `deliveries` function sends, so no endpoint
//! can slow the feed. Only the store or the queue failing fails the batch: the answer is a
//! partial batch response naming the first record that failed (the event source mapping
//! retries from it, bisects a batch that keeps failing, and sends what still fails to the
//! dead-letter queue).
//!
//! Locally, [`local::Feed`] (feature `local`) reads moto's DynamoDB Streams API and calls the
//! same [`handle`] (`make dev`, the tests).

#![warn(missing_docs)]

#[cfg(feature = "local")]
pub mod local;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use domain::AppState;
use domain::store::events::{EventRecord, from_stream_image};
use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};

/// Handles one batch of stream records, in order: first gives every event its place in its
/// owner's feed, then queues its webhook deliveries. Answers the first record that failed in
/// the store or the queue, in either pass (the records from it on come again; a record
/// positioned or queued before is not positioned or queued twice).
pub async fn handle(state: &AppState, batch: Event) -> DynamoDbEventResponse {
    let events = events_of(batch);
    let positioned = positioned(state, &events).await;
    // The first record that failed: in positioning, or (before it) in fan-out.
    let mut failed = events.get(positioned).map(|(sequence, _)| sequence.clone());
    for (sequence, event) in &events[..positioned] {
        if let Err(err) = domain::notifications::deliveries::fan_out(state, event).await {
            let id = &event.id;
            tracing::error!(event = %id, error = %err, "queueing an event's deliveries failed");
            failed = Some(sequence.clone());
            break;
        }
    }
    let mut response = DynamoDbEventResponse::default();
    if let Some(sequence) = failed {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = sequence;
        response.batch_item_failures.push(failure);
    }
    response
}

/// Positions `events` in their owners' feeds, in order: answers how many were positioned
/// (all, or up to the first the store failed on).
async fn positioned(state: &AppState, events: &[(Option<String>, EventRecord)]) -> usize {
    for (at, (_, event)) in events.iter().enumerate() {
        if let Err(err) = domain::notifications::events::position(state, event).await {
            tracing::error!(event = %event.id, error = %err, "positioning an event failed");
            return at;
        }
    }
    events.len()
}

/// The events of a batch's new event items, with each record's sequence number.
fn events_of(batch: Event) -> Vec<(Option<String>, EventRecord)> {
    let mut events = Vec::new();
    for record in batch.records {
        if record.event_name != "INSERT" {
            continue;
        }
        let sequence = record.change.sequence_number.clone();
        match from_stream_image(record.change.new_image) {
            Ok(Some(event)) => events.push((sequence, event)),
            Ok(None) => {}
            // An event item that does not read back never will: retrying it would hold the
            // shard; it is logged (and alarmed on) instead.
            Err(err) => {
                tracing::error!(sequence = ?sequence, error = %err, "an event item does not read")
            }
        }
    }
    events
}

/// The whole `main`: logging, the state built once, then [`handle`] for every batch.
///
/// Errors: invalid configuration at cold start; a runtime failure.
pub async fn run() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let state: &'static AppState = Box::leak(Box::new(AppState::from_env().await?));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| async move {
        Ok::<_, lambda_http::Error>(handle(state, event.payload).await)
    }))
    .await
}
