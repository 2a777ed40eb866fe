//! `deliveries` function: no route; the webhook delivery queue (SQS FIFO,
//! `domain::store::queue`) invokes it through its event source mapping with a batch of
//! messages, each naming one delivery. The batch's message groups (an endpoint and a subject
//! each) are sent side by side; within a group, in order, each message is handed to
//! [`domain::notifications::deliveries::deliver`], and the first that waits for a retry stops its
//! group: it and the group's later messages are answered as failed (a partial batch response),
//! so SQS keeps them, and the later ones are made visible again at once, held back only by
//! their group's head. One endpoint that hangs therefore delays no other group by more than the
//! one attempt it shares a batch with.
//!
//! A group whose next attempt would not fit the invocation's deadline is handed back the same
//! way. A message that does not read (never made by this service) fails until the queue's
//! redrive policy moves it to the dead-letter queue.
//!
//! The dead-letter queue invokes the function too (a mapping of its own): a message from any
//! queue but the delivery queue is one the delivery queue gave up on, and
//! [`domain::notifications::deliveries::dead_lettered`] marks its delivery failed, with a
//! `webhook.delivery_failed` event for its owner. The dead-letter queue's alarm counts what it
//! received.
//!
//! Locally, [`local::Consumer`] (feature `local`) receives from moto's SQS and calls the same
//! [`handle`] (`make dev`, the tests).

#![warn(missing_docs)]

#[cfg(feature = "local")]
pub mod local;

use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use domain::AppState;
use domain::deadline::Deadline;
use domain::notifications::deliveries::{self, Handled};
use domain::store::queue::DeliveryMessage;
use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};

/// The time one message may take: an attempt and its writes.
const PER_MESSAGE: Duration = Duration::from_secs(deliveries::DELIVERY_TIMEOUT.as_secs() + 5);

/// Handles one batch: its groups side by side, each in order, within `deadline`. Answers the
/// messages to keep (failed, waiting for a retry, or not reached).
pub async fn handle(state: &AppState, batch: SqsEvent, deadline: &Deadline) -> SqsBatchResponse {
    let first = batch.records.first();
    if first.is_some_and(|m| from_dead_letters(state, m)) {
        return Box::pin(ended(state, batch)).await;
    }
    let mut groups: Vec<(String, Vec<SqsMessage>)> = Vec::new();
    for message in batch.records {
        let group = message
            .attributes
            .get("MessageGroupId")
            .cloned()
            .unwrap_or_default();
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, messages)) => messages.push(message),
            None => groups.push((group, vec![message])),
        }
    }
    let kept = futures::future::join_all(
        groups
            .into_iter()
            .map(|(_, messages)| group(state, messages, deadline)),
    )
    .await;
    let mut response = SqsBatchResponse::default();
    for id in kept.into_iter().flatten() {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    response
}

/// Whether `message` comes from a queue other than the delivery queue (its event source ARN
/// names another queue): the dead-letter queue, the one other queue mapped to the function.
fn from_dead_letters(state: &AppState, message: &SqsMessage) -> bool {
    let Some(source) = message.event_source_arn.as_deref() else {
        return false;
    };
    // Without the queue's own name configured, nothing reads as dead-lettered: a missing
    // setting never fails every delivery.
    let Some(queue) = state.config.delivery_queue_url.as_deref() else {
        return false;
    };
    let name = |s: &str| s.rsplit([':', '/']).next().unwrap_or_default().to_owned();
    name(source) != name(queue)
}

/// A batch of the dead-letter queue: each message's delivery marked failed. Keeps (answers
/// as failed) those the store could not write; a message that does not read is logged and
/// dropped.
async fn ended(state: &AppState, batch: SqsEvent) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for message in batch.records {
        let Some(parsed) = read(&message) else {
            continue;
        };
        let id = message.message_id.unwrap_or_default();
        if let Err(err) = deliveries::dead_lettered(state, &parsed).await {
            tracing::error!(message = id, error = %err, "a dead-lettered delivery not ended");
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// One group's messages, in order: answers the ids of those to keep.
async fn group(state: &AppState, messages: Vec<SqsMessage>, deadline: &Deadline) -> Vec<String> {
    let mut messages = messages.into_iter();
    let mut kept = Vec::new();
    while let Some(message) = messages.next() {
        let id = message.message_id.clone().unwrap_or_default();
        let receipt = message.receipt_handle.clone().unwrap_or_default();
        let stop = if deadline.allows(PER_MESSAGE) {
            one(state, &message, &receipt).await
        } else {
            // Not reached in time: visible again at once for the next invocation.
            deliveries::hand_back(state, &receipt, 0).await;
            true
        };
        if stop {
            kept.push(id);
            // Held back by their group's head from now on: visible again at once, so that they
            // follow it as soon as it is done, not when their own visibility lapses.
            for later in messages {
                deliveries::hand_back(state, later.receipt_handle.as_deref().unwrap_or(""), 0)
                    .await;
                kept.extend(later.message_id);
            }
            break;
        }
    }
    kept
}

/// The delivery `message` names; `None` (logged) for a message that does not read, which
/// this service never made.
fn read(message: &SqsMessage) -> Option<DeliveryMessage> {
    let body = message.body.as_deref().unwrap_or_default();
    serde_json::from_str(body)
        .inspect_err(|err| {
            let id = message.message_id.as_deref().unwrap_or_default();
            tracing::error!(message = id, error = %err, "a delivery message does not read");
        })
        .ok()
}

/// Delivers one message: answers whether its group stops here (it waits, or failed).
async fn one(state: &AppState, message: &SqsMessage, receipt: &str) -> bool {
    let Some(parsed) = read(message) else {
        return true;
    };
    match deliveries::deliver(state, &parsed, receipt).await {
        Ok(Handled::Done) => false,
        Ok(Handled::Waiting) => true,
        Err(err) => {
            let delivery = &parsed.delivery_id;
            tracing::error!(%delivery, error = %err, "a delivery failed in the store or the queue");
            // Tried again soon, not after the queue's whole visibility timeout.
            deliveries::hand_back(state, receipt, deliveries::RETRY_AFTER[0]).await;
            true
        }
    }
}

/// The whole `main`: logging, the state built once, then [`handle`] for every batch.
///
/// Errors: invalid configuration at cold start; a runtime failure.
pub async fn run() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let state: &'static AppState = Box::leak(Box::new(AppState::from_env().await?));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let budget = state.config.payments.request_budget;
        let deadline = Deadline::from_epoch_millis(event.context.deadline, budget);
        Ok::<_, lambda_http::Error>(handle(state, event.payload, &deadline).await)
    }))
    .await
}
