//! The local consumer of [`crate::handle`]: receives from the delivery queue (moto's SQS under
//! `make dev` and the tests) as AWS's event source mapping does in the cloud — batches of at
//! most [`MAX_BATCH`] with each message's group, up to [`CONCURRENCY`] invocations side by side
//! (the mapping scales out over message groups, so a batch that waits on a hanging endpoint
//! holds no other back), then deletes every message the handler did not keep, in one call.

use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use domain::AppState;
use domain::deadline::Deadline;
use domain::store::queue::VISIBILITY_SECONDS;

/// Messages per invocation, as the template's `BatchSize`.
pub const MAX_BATCH: i32 = 10;
/// Invocations side by side at most (the mapping scales a FIFO queue out to its active
/// message groups; an invocation waiting on a hanging endpoint holds one).
pub const CONCURRENCY: usize = 100;
/// How often a consumer with invocations under way looks for more messages.
const POLL: Duration = Duration::from_millis(200);
/// An invocation's time, as the template's `Timeout`.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A consumer of one delivery queue (or of its dead-letter queue).
#[derive(Debug, Clone)]
pub struct Consumer {
    client: aws_sdk_sqs::Client,
    url: String,
    /// The queue's ARN, as the mapping names it in every message it hands over.
    arn: String,
}

/// What a pass of the consumer did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConsumeReport {
    /// Batches handed to the handler.
    pub batches: usize,
    /// Messages received.
    pub messages: usize,
    /// Of those, the ones the handler kept (waiting for a retry, or held back).
    pub kept: usize,
}

impl std::ops::AddAssign for ConsumeReport {
    fn add_assign(&mut self, other: ConsumeReport) {
        self.batches += other.batches;
        self.messages += other.messages;
        self.kept += other.kept;
    }
}

impl Consumer {
    /// The consumer of the queue at `url`, through the AWS SDK's default chain
    /// (`AWS_ENDPOINT_URL_SQS` for moto).
    pub async fn connect(url: &str) -> Consumer {
        let sdk = aws_config_defaults().await;
        Consumer::new(aws_sdk_sqs::Client::new(&sdk), url)
    }

    /// The consumer of the queue at `url` with `client`.
    pub fn new(client: aws_sdk_sqs::Client, url: &str) -> Consumer {
        // What AWS's mapping names: `arn:aws:sqs:<region>:<account>:<name>`.
        let mut parts = url.rsplit('/');
        let name = parts.next().unwrap_or_default();
        let account = parts.next().unwrap_or_default();
        Consumer {
            client,
            url: url.to_owned(),
            arn: format!("arn:aws:sqs:local:{account}:{name}"),
        }
    }

    /// Receives and hands over batches, up to [`CONCURRENCY`] invocations side by side, until
    /// none is visible and none is under way.
    ///
    /// Errors: SQS fails (the pass stops; what was received comes back when its visibility
    /// lapses).
    pub async fn pass(&self, state: &AppState) -> Result<ConsumeReport, String> {
        use futures::StreamExt;
        let mut report = ConsumeReport::default();
        let mut running = futures::stream::FuturesUnordered::new();
        loop {
            if running.len() < CONCURRENCY {
                let batch = self.receive().await?;
                if !batch.is_empty() {
                    running.push(self.invoke(state, batch));
                    continue;
                }
                if running.is_empty() {
                    return Ok(report);
                }
            }
            // One invocation ends, or it is time to look for more messages.
            tokio::select! {
                done = running.next() => {
                    if let Some(done) = done {
                        report += done?;
                    }
                }
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Up to [`MAX_BATCH`] visible messages, as the mapping hands them to the function.
    async fn receive(&self) -> Result<Vec<SqsMessage>, String> {
        let received = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(MAX_BATCH)
            .visibility_timeout(VISIBILITY_SECONDS)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
        Ok(received
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|message| lambda_message(message, &self.arn))
            .collect())
    }

    /// One invocation: `messages` to the handler, then the ones it did not keep deleted.
    async fn invoke(
        &self,
        state: &AppState,
        messages: Vec<SqsMessage>,
    ) -> Result<ConsumeReport, String> {
        let receipts: Vec<(String, String)> = messages
            .iter()
            .map(|m| {
                let id = m.message_id.clone().unwrap_or_default();
                (id, m.receipt_handle.clone().unwrap_or_default())
            })
            .collect();
        let mut batch = SqsEvent::default();
        batch.records = messages;
        let deadline = Deadline::after(TIMEOUT);
        let answer = crate::handle(state, batch, &deadline).await;
        let kept: Vec<&String> = answer
            .batch_item_failures
            .iter()
            .map(|f| &f.item_identifier)
            .collect();
        let done: Vec<_> = receipts
            .iter()
            .filter(|(id, _)| !kept.contains(&id))
            .map(|(id, receipt)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(id)
                    .receipt_handle(receipt)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        if !done.is_empty() {
            self.client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(done))
                .send()
                .await
                .map_err(|e| {
                    let e = aws_sdk_sqs::error::DisplayErrorContext(e);
                    format!("deleting what the handler did not keep: {e}")
                })?;
        }
        Ok(ConsumeReport {
            batches: 1,
            messages: receipts.len(),
            kept: kept.len(),
        })
    }
}

/// The SDK's default chain.
async fn aws_config_defaults() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A received message as the event source mapping hands it to a function.
fn lambda_message(message: aws_sdk_sqs::types::Message, arn: &str) -> SqsMessage {
    let mut out = SqsMessage::default();
    out.message_id = message.message_id;
    out.receipt_handle = message.receipt_handle;
    out.body = message.body;
    out.attributes = message
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name.as_str().to_owned(), value))
        .collect();
    out.event_source = Some("aws:sqs".into());
    out.event_source_arn = Some(arn.to_owned());
    out
}
