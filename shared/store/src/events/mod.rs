//! Events (issue 20): what happened to an owner's servers, payments and keys, each written in
//! the same transaction as the change it describes (an outbox).
//!
//! - Item: `pk = EVENTS#<subject kind>#<subject id>`, `sk = EVENT#<sequence, 12 digits>`: the
//!   subject's events in order. The Put is conditional on the key being new, so two writers
//!   that read the same subject and both mean to write its next event cannot both succeed: one
//!   transaction is cancelled, and its change with it.
//! - `expiresEpoch` (the table's TTL attribute): 30 days after the event.
//!
//! The subject record carries `eventSeq`, the sequence of its last event, written in the same
//! transaction ([`EventRecord::sequence`] is one above the one the writer read).
//!
//! An owner's feed is in the order the table's stream handed its events over, not the order
//! they were stamped: an event stamped earlier may commit later, and a poller that had resumed
//! past its time would never see it. The `events` function gives each event the owner's next
//! position ([`Store::position_event`]), in one transaction:
//! - the head, `pk = FEED#<owner>`, `sk = HEAD`: `position`, the last one given;
//! - a copy of the event at `pk = FEED#<owner>`, `sk = POS#<position, 12 digits>` (TTL as the
//!   event's);
//! - `feedPosition` on the event item, written once (a record handed over twice is positioned
//!   once).
//!
//! A position is given only above the head the transaction read, so one written is above every
//! position a strongly consistent read has already shown: resuming after a position misses
//! nothing.

use crate::partitions::Partition;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::{Index, Item, Page, Store, StoreError, put_new, schema, to_item};
use crate::address::Owner;

mod data;
pub use data::*;

/// How long an event is kept: 30 days, in seconds (the TTL of its item).
pub const RETENTION_SECONDS: i64 = 30 * 24 * 3600;

/// The prefix of an event's sort key in the table and in GSI1.
pub const EVENT_PREFIX: &str = "EVENT#";

/// The prefix of an event's partition key (the stream's filter names it).
pub const EVENTS_PREFIX: &str = Partition::Events.prefix();

/// The prefix of an owner's feed partition.
pub const FEED_PREFIX: &str = Partition::Feed.prefix();

/// The prefix of a position's sort key in an owner's feed.
const POSITION_PREFIX: &str = "POS#";

/// The sort key of an owner's feed head.
const HEAD: &str = "HEAD";

/// How many times [`Store::position_event`] reads the head again after another writer moved
/// it, before it gives up (the stream hands the record over again).
const POSITION_TRIES: usize = 10;

/// What an event is about: a server (by its sandbox id, which it has from the order on), a
/// payment (its payment key) or an API key (its `key_…` id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `server`, `payment`, `key` (or `webhook`, for a test event).
    pub kind: SubjectKind,
    /// `sbx_…` for a server, the payment key for a payment, `key_…` for a key.
    pub id: String,
}

/// The kinds of [`Subject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubjectKind {
    /// A server (its sandbox).
    Server,
    /// A payment and the order it pays.
    Payment,
    /// An API key.
    Key,
    /// A webhook endpoint (its test events only; they are not in the feed).
    Webhook,
    /// An approval: a request an API key's policy refused, for its owner to grant or decline.
    Approval,
    /// A webhook delivery (`dlv_…`) that ended without being handled
    /// (`webhook.delivery_failed`, its one event).
    Delivery,
}

impl SubjectKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::Server => "server",
            SubjectKind::Payment => "payment",
            SubjectKind::Key => "key",
            SubjectKind::Webhook => "webhook",
            SubjectKind::Approval => "approval",
            SubjectKind::Delivery => "delivery",
        }
    }
}

impl Subject {
    /// The partition of the subject's events.
    fn partition(&self) -> String {
        format!("{EVENTS_PREFIX}{}#{}", self.kind.as_str(), self.id)
    }
}

/// An event as recorded (answered as `domain::events::Event`, its owner in EIP-55).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    /// `evt_<32 hex>`, derived from the subject and the sequence: the same on every attempt of
    /// the write, and the dedupe key a receiver keeps (`webhook-id`).
    pub id: String,
    /// The event's type, e.g. `payment.settled`, `lease.expiring` ([`EventType`]).
    #[serde(rename = "type")]
    pub kind: String,
    /// What it is about.
    pub subject: Subject,
    /// The owner.
    pub owner: Owner,
    /// When the change happened, RFC 3339 to the millisecond.
    pub occurred_at: crate::time::EventTime,
    /// 1, 2, … per subject, in the order the subject's changes were written.
    pub sequence: u64,
    /// What the type says, e.g. a server's host keys or a payment's amount.
    pub data: serde_json::Value,
}

impl EventRecord {
    /// The table's key and index attributes of the event, and its expiry.
    fn item(&self) -> Result<Item, StoreError> {
        let mut item = to_item(
            self,
            &[
                (schema::PK, self.subject.partition()),
                (schema::SK, self.sort_key()),
            ],
        )?;
        item.insert(schema::TTL_ATTRIBUTE.to_owned(), self.expiry());
        Ok(item)
    }

    /// The event's sort key under its subject.
    fn sort_key(&self) -> String {
        format!("{EVENT_PREFIX}{:012}", self.sequence)
    }

    /// When the event's items expire (the TTL attribute): [`RETENTION_SECONDS`] after it.
    fn expiry(&self) -> aws_sdk_dynamodb::types::AttributeValue {
        let occurred = self.occurred_at.timestamp().unix();
        super::n(occurred + RETENTION_SECONDS)
    }

    /// The transaction item that writes the event, refused if the subject already has an event
    /// with its sequence.
    ///
    /// Errors: a record that does not serialize.
    fn put(&self, table: &str) -> Result<TransactWriteItem, StoreError> {
        put_new(table, self.item()?)
    }
}

/// The partition of `owner`'s feed.
fn feed_partition(owner: &Owner) -> String {
    format!("{FEED_PREFIX}{owner}")
}

/// The sort key of `position` in an owner's feed.
fn position_key(position: u64) -> String {
    format!("{POSITION_PREFIX}{position:012}")
}

/// An owner's feed head: the last position given.
#[derive(Debug, Deserialize)]
struct Head {
    position: u64,
}

/// An event item's feed position, once it has one.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Positioned {
    feed_position: Option<u64>,
}

/// An event at its position in its owner's feed.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FeedEntry {
    feed_position: u64,
    event: EventRecord,
}

impl Store {
    /// `limit` of `owner`'s events after `cursor`, in feed order (strongly consistent: an
    /// event shows once the `events` function has positioned it, a moment after its change).
    /// The page's cursor resumes after its last event even on the last page, so that a poller
    /// keeps it and asks again; `cursor` itself when there is nothing new.
    ///
    /// Errors: [`StoreError::BadCursor`] for a cursor of another listing.
    pub async fn events_of(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<EventRecord>, StoreError> {
        let partition = feed_partition(owner);
        let page: Page<FeedEntry> = self
            .query_index(
                Index::Table,
                &partition,
                POSITION_PREFIX,
                limit,
                cursor,
                true,
            )
            .await?;
        let resume = page.items.last().map_or_else(
            || cursor.map(str::to_owned),
            |last| {
                Some(super::encode_cursor(
                    &partition,
                    &position_key(last.feed_position),
                ))
            },
        );
        Ok(Page {
            next_cursor: page.next_cursor.or(resume),
            items: page.items.into_iter().map(|entry| entry.event).collect(),
        })
    }

    /// Gives `event` the next position in its owner's feed (the `events` function, for each
    /// event the stream hands over), unless it has one: answers its position. A head moved by
    /// another writer meanwhile is read again ([`POSITION_TRIES`] times).
    ///
    /// Errors: [`StoreError::ConditionFailed`] when the head kept moving, or the event item is
    /// gone (expired); the backend's.
    pub async fn position_event(&self, event: &EventRecord) -> Result<u64, StoreError> {
        let partition = feed_partition(&event.owner);
        for _ in 0..POSITION_TRIES {
            let head: Option<Head> = self.get(partition.clone(), HEAD).await?;
            let read = head.map_or(0, |h| h.position);
            match self.write_position(event, read).await {
                Err(StoreError::ConditionFailed) => {}
                other => return other.map(|()| read + 1),
            }
            // Positioned by an earlier hand-over of the same record?
            let marked: Option<Positioned> = self
                .get(event.subject.partition(), &event.sort_key())
                .await?;
            if let Some(position) = marked.and_then(|m| m.feed_position) {
                return Ok(position);
            }
        }
        Err(StoreError::ConditionFailed)
    }

    /// The transaction of [`Store::position_event`]: the head from `read` to `read + 1`, the
    /// copy at that position, the mark on the event.
    async fn write_position(&self, event: &EventRecord, read: u64) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::Update;
        let partition = feed_partition(&event.owner);
        let position = read + 1;
        let head = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, super::s(&partition))
            .key(schema::SK, super::s(HEAD))
            .update_expression("SET #position = :position")
            // No head yet reads as 0; a head is never removed.
            .condition_expression("attribute_not_exists(#position) OR #position = :read")
            .expression_attribute_names("#position", "position")
            .expression_attribute_values(":position", super::n(position))
            .expression_attribute_values(":read", super::n(read));
        let mark = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, super::s(event.subject.partition()))
            .key(schema::SK, super::s(event.sort_key()))
            .update_expression("SET #mark = :position")
            .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#mark)")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#mark", "feedPosition")
            .expression_attribute_values(":position", super::n(position));
        let entry = FeedEntry {
            feed_position: position,
            event: event.clone(),
        };
        let mut copy = to_item(
            &entry,
            &[
                (schema::PK, partition.clone()),
                (schema::SK, position_key(position)),
            ],
        )?;
        copy.insert(schema::TTL_ATTRIBUTE.to_owned(), event.expiry());
        let items = vec![
            TransactWriteItem::builder()
                .update(head.build().map_err(super::builder_error)?)
                .build(),
            put_new(&self.table, copy)?,
            TransactWriteItem::builder()
                .update(mark.build().map_err(super::builder_error)?)
                .build(),
        ];
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// `limit` events of `subject` after `cursor`, in sequence order (strongly consistent).
    /// As [`Store::events_of`], the cursor resumes after the last event.
    ///
    /// Errors: [`StoreError::BadCursor`] for a cursor of another listing.
    pub async fn events_of_subject(
        &self,
        subject: &Subject,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<EventRecord>, StoreError> {
        let partition = subject.partition();
        let page: Page<EventRecord> = self
            .query_index(Index::Table, &partition, EVENT_PREFIX, limit, cursor, true)
            .await?;
        let resume = |page: &Page<EventRecord>| {
            page.items
                .last()
                .map(|last| {
                    let sk = format!("{EVENT_PREFIX}{:012}", last.sequence);
                    super::encode_cursor(&partition, &sk)
                })
                .or_else(|| cursor.map(str::to_owned))
        };
        let next_cursor = page.next_cursor.clone().or_else(|| resume(&page));
        Ok(Page {
            next_cursor,
            ..page
        })
    }
}

/// The event a stream record's new image holds (the table's stream feeds the `events`
/// function), or `None` for an item that is not an event (the stream's filter lets only events
/// through; this checks again).
///
/// Errors: [`StoreError::Corrupt`] for an event item that does not read back.
pub fn from_stream_image(image: serde_dynamo::Item) -> Result<Option<EventRecord>, StoreError> {
    let text = |name: &str| match image.get(name) {
        Some(serde_dynamo::AttributeValue::S(value)) => Some(value.clone()),
        _ => None,
    };
    let is_event = text(schema::PK).is_some_and(|pk| pk.starts_with(EVENTS_PREFIX))
        && text(schema::SK).is_some_and(|sk| sk.starts_with(EVENT_PREFIX));
    if !is_event {
        return Ok(None);
    }
    serde_dynamo::from_item(image)
        .map(Some)
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The events a change writes about one subject, numbered on from the subject's `eventSeq`
/// as the writer read it.
#[derive(Debug, Clone)]
pub struct Outbox {
    subject: Subject,
    owner: Owner,
    at: crate::time::EventTime,
    read_seq: u64,
    events: Vec<EventRecord>,
}

impl Outbox {
    /// An empty outbox for `subject` of `owner`, whose last event (as read) was `read_seq`
    /// (0: none), for a change at `at` (RFC 3339).
    pub fn new(
        subject: Subject,
        owner: &Owner,
        read_seq: u64,
        at: crate::time::EventTime,
    ) -> Outbox {
        Outbox {
            subject,
            owner: owner.clone(),
            at,
            read_seq,
            events: Vec::new(),
        }
    }

    /// Adds an event of `data`'s type with its fields as the data.
    ///
    /// # Panics
    /// In debug builds (the tests), when the type is not about this outbox's kind of subject.
    pub fn push(&mut self, data: EventData) {
        let kind = data.kind();
        debug_assert_eq!(kind.subject(), self.subject.kind, "{}", kind.as_str());
        // The data are structs of strings, numbers and lists: they always serialize.
        let data = data.to_value().unwrap_or_default();
        let sequence = self.read_seq + self.events.len() as u64 + 1;
        self.events.push(EventRecord {
            id: event_id(&self.subject, sequence),
            kind: kind.as_str().to_owned(),
            subject: self.subject.clone(),
            owner: self.owner.clone(),
            occurred_at: self.at,
            sequence,
            data,
        });
    }

    /// The subject's `eventSeq` once the events are written.
    pub fn seq(&self) -> u64 {
        self.read_seq + self.events.len() as u64
    }

    /// The `eventSeq` the subject must still have for the write to apply.
    pub fn read_seq(&self) -> u64 {
        self.read_seq
    }

    /// The events.
    pub fn events(&self) -> &[EventRecord] {
        &self.events
    }

    /// The transaction items that write the events, each refused if its subject already has
    /// an event with its sequence.
    ///
    /// Errors: a record that does not serialize.
    pub(crate) fn puts(&self, table: &str) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.events.iter().map(|event| event.put(table)).collect()
    }
}

/// `evt_` and the first 32 hex characters of SHA-256 of the subject and the sequence: the
/// same for a retried write, different for every event.
fn event_id(subject: &Subject, sequence: u64) -> String {
    let digest = Sha256::digest(format!(
        "{}#{}#{sequence}",
        subject.kind.as_str(),
        subject.id
    ));
    format!("evt_{}", &hex::encode(digest)[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            kind: SubjectKind::Server,
            id: "sbx_1".into(),
        }
    }

    fn server() -> ServerFacts {
        ServerFacts {
            sandbox_id: "sbx_1".into(),
            server_id: Some(1),
            hostname: None,
        }
    }

    fn failed() -> EventData {
        EventData::ServerFailed(ServerFailed {
            server: server(),
            reason: "no".into(),
        })
    }

    #[test]
    fn events_number_on_from_what_the_writer_read() {
        let owner = Owner::parse(&format!("0x{}", "1".repeat(40))).unwrap();
        let mut outbox = Outbox::new(
            subject(),
            &owner,
            4,
            "2026-11-25T00:00:00Z".parse().unwrap(),
        );
        outbox.push(failed());
        outbox.push(EventData::ServerPowerChanged(ServerPowerChanged {
            server: server(),
            power: "off".into(),
            was: None,
            by: Some("lease".into()),
        }));
        assert_eq!(outbox.events()[0].kind, "server.failed");
        assert_eq!(outbox.events()[1].data["by"], "lease");
        assert_eq!(outbox.events()[1].data["sandboxId"], "sbx_1");
        let sequences: Vec<u64> = outbox.events().iter().map(|e| e.sequence).collect();
        assert_eq!(sequences, [5, 6]);
        assert_eq!((outbox.read_seq(), outbox.seq()), (4, 6));
        // The same subject and sequence give the same id (a retried write); another, another.
        let again = Outbox::new(
            subject(),
            &owner,
            4,
            "2026-11-25T00:00:09Z".parse().unwrap(),
        );
        let mut again = again;
        again.push(failed());
        assert_eq!(again.events()[0].id, outbox.events()[0].id);
        assert_ne!(outbox.events()[0].id, outbox.events()[1].id);
        assert!(outbox.events()[0].id.starts_with("evt_"));
        assert_eq!(outbox.events()[0].id.len(), 36);
    }

    #[test]
    fn every_type_reads_back_and_names_its_subject() {
        for kind in EventType::ALL {
            assert_eq!(EventType::parse(kind.as_str()), Some(kind));
            let prefix = kind.as_str().split('.').next().unwrap();
            let expected = match prefix {
                "payment" => SubjectKind::Payment,
                "key" | "agent" => SubjectKind::Key,
                "approval" => SubjectKind::Approval,
                "webhook" => SubjectKind::Delivery,
                _ => SubjectKind::Server,
            };
            assert_eq!(kind.subject(), expected, "{}", kind.as_str());
        }
        assert_eq!(EventType::parse("server.exploded"), None);
    }
}
