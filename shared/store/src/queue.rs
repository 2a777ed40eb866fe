//! The webhook delivery queue (issue 34, point 2): an SQS FIFO queue with one message group per
//! endpoint and subject, so that a subject's deliveries to an endpoint go in order and every
//! other group flows past one that is stuck. SQS holds a group back while one of its messages is
//! in flight (received, not yet deleted), and a failed attempt keeps its message in flight until
//! its retry is due (`ChangeMessageVisibility`, at most 12 h): the schedule of retries is the
//! queue's visibility, not a scan of the table.
//!
//! A message names its delivery ([`DeliveryMessage`]); the delivery record (`crate::webhooks`)
//! stays the truth of where it stands, and the listing of an endpoint's deliveries reads it.
//! The deduplication id is the delivery's id, so an event handed over twice within SQS's 5
//! minutes queues one message; a later copy finds its delivery done and is dropped.
//!
//! Locally the queue is moto's (the same server as DynamoDB); the delivery function's local
//! consumer receives from it as the event source mapping does in AWS.

use aws_sdk_sqs::types::QueueAttributeName;
use serde::{Deserialize, Serialize};

use super::StoreError;
use super::events::{Subject, SubjectKind};
use crate::address::Owner;

/// The longest a message may stay in flight, seconds (SQS's limit: 12 h).
pub const MAX_VISIBILITY_SECONDS: i64 = 12 * 3600;
/// How long a message received stays in flight unless the consumer says otherwise, seconds:
/// six times the delivery function's timeout (60 s), as AWS advises for an event source
/// mapping.
pub const VISIBILITY_SECONDS: i32 = 360;
/// How often a message may be received before it goes to the dead-letter queue: more than the
/// 8 attempts of the schedule, the receipts a batch cut short by its deadline hands back, and
/// the times a failing endpoint's delivery is put off while another probes it (about 80 over
/// the 3 days before the endpoint is disabled).
pub const MAX_RECEIVES: u32 = 200;

/// What a message of the queue says: which delivery it is, and where its record lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryMessage {
    /// `dlv_<32 hex>`: also the message's deduplication id.
    pub delivery_id: String,
    /// The endpoint's id, `whk_…`.
    pub endpoint_id: String,
    /// The endpoint's owner (its record's partition).
    pub owner: Owner,
    /// The event's subject.
    pub subject: Subject,
    /// The event's sequence in its subject.
    pub sequence: u64,
}

impl DeliveryMessage {
    /// The message group: the endpoint and the subject (`whk_…:server:sbx_…`), whose order is
    /// kept; a test event is a group of its own (its delivery id), having no order to keep.
    /// At most 128 characters (SQS's limit): a long subject id is cut to its SHA-256.
    pub fn group(&self) -> String {
        if self.subject.kind == SubjectKind::Webhook {
            return self.delivery_id.clone();
        }
        let group = format!(
            "{}:{}:{}",
            self.endpoint_id,
            self.subject.kind.as_str(),
            self.subject.id
        );
        if group.len() <= 128 && group.chars().all(|c| c.is_ascii_graphic()) {
            return group;
        }
        use sha2::Digest;
        let digest = sha2::Sha256::digest(self.subject.id.as_bytes());
        format!(
            "{}:{}:{}",
            self.endpoint_id,
            self.subject.kind.as_str(),
            hex::encode(digest)
        )
    }
}

/// The URL of the dead-letter queue [`DeliveryQueue::create`] makes beside the queue at `url`
/// (`…-dlq.fifo`): the local stack's (in AWS the template makes and maps it).
pub fn dead_letter_url(url: &str) -> String {
    format!("{}-dlq.fifo", url.trim_end_matches(".fifo"))
}

/// The delivery queue: its SQS client and URL.
#[derive(Debug, Clone)]
pub struct DeliveryQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl DeliveryQueue {
    /// The queue at `url` (`https://sqs.<region>.amazonaws.com/<account>/<name>.fifo`).
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> DeliveryQueue {
        DeliveryQueue {
            client,
            url: url.into(),
        }
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The SQS client (the local consumer receives with it).
    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.client
    }

    /// Queues `message` in its group, deduplicated by its delivery id.
    ///
    /// Errors: SQS fails ([`StoreError::Unavailable`] when it may be sent again).
    pub async fn send(&self, message: &DeliveryMessage) -> Result<(), StoreError> {
        let body =
            serde_json::to_string(message).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .message_group_id(message.group())
            .message_deduplication_id(&message.delivery_id)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Queues `messages` (each in its group, deduplicated by its delivery id), ten to a call
    /// (`SendMessageBatch`), in their order.
    ///
    /// Errors: SQS fails, or refuses an entry ([`StoreError::Unavailable`]: send them again;
    /// the copies SQS already took are dropped as duplicates).
    pub async fn send_all(&self, messages: &[DeliveryMessage]) -> Result<(), StoreError> {
        use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
        for chunk in messages.chunks(10) {
            let mut entries = Vec::new();
            for (i, message) in chunk.iter().enumerate() {
                let body = serde_json::to_string(message)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_group_id(message.group())
                    .message_deduplication_id(&message.delivery_id)
                    .build()
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                entries.push(entry);
            }
            let sent = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(StoreError::from_sdk)?;
            if let Some(failed) = sent.failed.first() {
                return Err(StoreError::Unavailable(format!(
                    "the delivery queue refused a message: {}",
                    failed.message.as_deref().unwrap_or(&failed.code)
                )));
            }
        }
        Ok(())
    }

    /// Keeps the message received as `receipt` in flight for `seconds` more (0: visible now,
    /// at most [`MAX_VISIBILITY_SECONDS`]); `false` when the receipt is no longer valid (the
    /// message was deleted, or received again since).
    ///
    /// Errors: SQS fails otherwise.
    pub async fn hide(&self, receipt: &str, seconds: i64) -> Result<bool, StoreError> {
        let changed = self
            .client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds.clamp(0, MAX_VISIBILITY_SECONDS) as i32)
            .send()
            .await;
        match changed {
            Ok(_) => Ok(true),
            Err(err) => {
                let code = err.as_service_error().and_then(|e| {
                    aws_sdk_sqs::error::ProvideErrorMetadata::code(e).map(str::to_owned)
                });
                match code.as_deref() {
                    Some(
                        "ReceiptHandleIsInvalid"
                        | "AWS.SimpleQueueService.MessageNotInflight"
                        | "MessageNotInflight"
                        | "InvalidParameterValue",
                    ) => Ok(false),
                    _ => Err(StoreError::from_sdk(err)),
                }
            }
        }
    }

    /// Creates FIFO queue `name` (`….fifo`) and its dead-letter queue (`…-dlq.fifo`, after
    /// [`MAX_RECEIVES`] receipts) as the template makes them, if they do not exist; answers
    /// the queue (`make dev`, the tests; in AWS the template makes them).
    ///
    /// Errors: SQS refuses.
    pub async fn create(
        client: aws_sdk_sqs::Client,
        name: &str,
    ) -> Result<DeliveryQueue, StoreError> {
        let stem = name.trim_end_matches(".fifo");
        let dlq = client
            .create_queue()
            .queue_name(format!("{stem}-dlq.fifo"))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        let dlq_url = dlq.queue_url.unwrap_or_default();
        let dlq_arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(StoreError::from_sdk)?
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .unwrap_or_default();
        let redrive = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": MAX_RECEIVES,
        });
        let created = client
            .create_queue()
            .queue_name(format!("{stem}.fifo"))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                VISIBILITY_SECONDS.to_string(),
            )
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(DeliveryQueue::new(
            client,
            created.queue_url.unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: SubjectKind, id: &str) -> DeliveryMessage {
        DeliveryMessage {
            delivery_id: "dlv_0123".into(),
            endpoint_id: "whk_abc".into(),
            owner: Owner::parse("0x1111111111111111111111111111111111111111").unwrap(),
            subject: Subject {
                kind,
                id: id.into(),
            },
            sequence: 3,
        }
    }

    #[test]
    fn a_group_is_the_endpoint_and_the_subject_and_fits_sqs() {
        assert_eq!(
            message(SubjectKind::Server, "sbx_1").group(),
            "whk_abc:server:sbx_1"
        );
        // A test event has no order to keep: a group of its own.
        assert_eq!(message(SubjectKind::Webhook, "whk_abc").group(), "dlv_0123");
        let long = message(SubjectKind::Payment, &"0x".repeat(80)).group();
        assert!(long.len() <= 128, "{long}");
        assert!(long.starts_with("whk_abc:payment:"));
        assert_ne!(
            long,
            message(SubjectKind::Payment, &"0y".repeat(80)).group()
        );
    }
}
