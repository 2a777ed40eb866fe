//! The local feed of [`crate::handle`]: reads a table's stream through the DynamoDB Streams API
//! (moto's, under `make dev` and the tests) as AWS's event source mapping does in the cloud —
//! every shard from its oldest record (`TRIM_HORIZON`), filtered as the template's mapping
//! filters (`INSERT` of an item whose `pk` starts `EVENTS#`), in batches of at most
//! [`MAX_BATCH`], and on a partial batch failure read again from the record that failed.
//!
//! Between passes the feed keeps each shard's position as a sequence number, not as an
//! iterator: moto restores a deep copy of its tables when a transaction is cancelled, and an
//! iterator taken before that reads the old copy's shard, which gets no new records, for ever.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use domain::AppState;
use domain::store::events::EVENTS_PREFIX;
use domain::store::schema;

/// Records per invocation, as the template's `BatchSize`.
pub const MAX_BATCH: usize = 100;

/// A reader of one table's stream.
pub struct Feed {
    client: Client,
    stream_arn: String,
    /// Where each shard's next read starts: at or after a sequence number (none: its oldest
    /// record).
    positions: HashMap<String, (ShardIteratorType, String)>,
}

/// What a pass of the feed did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FeedReport {
    /// Stream records read.
    pub records: usize,
    /// Of those, the ones the filter let through to the handler.
    pub events: usize,
    /// Batches the handler answered with a failure (read again on the next pass).
    pub failed_batches: usize,
}

impl Feed {
    /// The feed of `table`'s latest stream, through the AWS SDK's default chain (with
    /// `AWS_ENDPOINT_URL_DYNAMODB`, when set, as the streams endpoint too: moto serves both).
    ///
    /// Errors: the table cannot be described, or has no stream.
    pub async fn connect(table: &str) -> Result<Feed, String> {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
        let described = dynamo
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
        let stream_arn = described
            .table
            .and_then(|t| t.latest_stream_arn)
            .ok_or_else(|| format!("table {table} has no stream"))?;
        let mut conf = aws_sdk_dynamodbstreams::config::Builder::from(&sdk);
        if let Ok(url) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
            conf = conf.endpoint_url(url);
        }
        Ok(Feed {
            client: Client::from_conf(conf.build()),
            stream_arn,
            positions: HashMap::new(),
        })
    }

    /// Reads every shard up to its newest record and hands the events to [`crate::handle`].
    ///
    /// Errors: the Streams API fails (the pass stops; the next one starts where it stopped).
    pub async fn pass(&mut self, state: &AppState) -> Result<FeedReport, String> {
        let mut report = FeedReport::default();
        let described = self
            .client
            .describe_stream()
            .stream_arn(&self.stream_arn)
            .send()
            .await
            .map_err(error)?;
        let shards = described
            .stream_description
            .map(|d| d.shards.unwrap_or_default());
        for shard in shards.unwrap_or_default() {
            let Some(shard_id) = shard.shard_id else {
                continue;
            };
            self.read_shard(state, &shard_id, &mut report).await?;
        }
        Ok(report)
    }

    async fn read_shard(
        &mut self,
        state: &AppState,
        shard: &str,
        report: &mut FeedReport,
    ) -> Result<(), String> {
        let mut iterator = match self.positions.get(shard).cloned() {
            Some((kind, sequence)) => self.iterator(shard, kind, Some(sequence)).await?,
            None => {
                self.iterator(shard, ShardIteratorType::TrimHorizon, None)
                    .await?
            }
        };
        loop {
            let out = self
                .client
                .get_records()
                .shard_iterator(&iterator)
                .send()
                .await
                .map_err(error)?;
            let records = out.records.unwrap_or_default();
            report.records += records.len();
            let Some(last) = records
                .last()
                .and_then(|r| r.dynamodb.as_ref())
                .and_then(|change| change.sequence_number.clone())
            else {
                return Ok(());
            };
            let events: Vec<EventRecord> = records
                .into_iter()
                .filter(passes_filter)
                .map(|r| lambda_record(r, &self.stream_arn))
                .collect();
            report.events += events.len();
            for chunk in events.chunks(MAX_BATCH) {
                let mut batch = Event::default();
                batch.records = chunk.to_vec();
                let answer = crate::handle(state, batch).await;
                if let Some(failed) = answer.batch_item_failures.first() {
                    report.failed_batches += 1;
                    // Without the failed record's number, the whole read again.
                    if let Some(at) = failed.item_identifier.clone() {
                        let position = (ShardIteratorType::AtSequenceNumber, at);
                        self.positions.insert(shard.to_owned(), position);
                    }
                    return Ok(());
                }
            }
            self.positions.insert(
                shard.to_owned(),
                (ShardIteratorType::AfterSequenceNumber, last),
            );
            let Some(next) = out.next_shard_iterator else {
                return Ok(());
            };
            iterator = next;
        }
    }

    async fn iterator(
        &self,
        shard: &str,
        kind: ShardIteratorType,
        sequence: Option<String>,
    ) -> Result<String, String> {
        self.client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(sequence)
            .send()
            .await
            .map_err(error)?
            .shard_iterator
            .ok_or_else(|| format!("no iterator for shard {shard}"))
    }
}

fn error<E: std::error::Error + 'static>(err: E) -> String {
    aws_sdk_dynamodbstreams::error::DisplayErrorContext(err).to_string()
}

/// The template's filter: `INSERT` of an item whose `pk` starts `EVENTS#`.
fn passes_filter(record: &Record) -> bool {
    let inserted = record.event_name.as_ref().map(|n| n.as_str()) == Some("INSERT");
    let pk = record
        .dynamodb
        .as_ref()
        .and_then(|change| change.keys.as_ref())
        .and_then(|keys| keys.get(schema::PK))
        .and_then(|pk| pk.as_s().ok());
    inserted && pk.is_some_and(|pk| pk.starts_with(EVENTS_PREFIX))
}

/// A Streams API record as Lambda delivers it.
fn lambda_record(record: Record, stream_arn: &str) -> EventRecord {
    let mut out = EventRecord::default();
    out.event_name = record
        .event_name
        .map(|n| n.as_str().to_owned())
        .unwrap_or_default();
    out.event_id = record.event_id.unwrap_or_default();
    out.event_version = record.event_version;
    out.event_source = Some("aws:dynamodb".to_owned());
    out.event_source_arn = Some(stream_arn.to_owned());
    out.aws_region = record.aws_region.unwrap_or_default();
    if let Some(change) = record.dynamodb {
        out.change.keys = change.keys.unwrap_or_default().into();
        out.change.new_image = change.new_image.unwrap_or_default().into();
        out.change.sequence_number = change.sequence_number;
        out.change.size_bytes = change.size_bytes.unwrap_or_default();
    }
    out
}
