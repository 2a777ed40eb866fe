//! The table definition: the one source the local stack creates the table from, and which a
//! test compares with `template.yaml`'s `Table` resource so the two cannot drift.
//!
//! | attribute | role |
//! |---|---|
//! | `pk`, `sk` (S) | primary key |
//! | `gsi1pk`, `gsi1sk` (S) | GSI `gsi1` (projection ALL): an owner's records by type and time |
//! | `gsi2pk`, `gsi2sk` (S) | GSI `gsi2` (projection KEYS_ONLY): payments by state and last change, leases by when they are due |
//! | `gsi3pk`, `gsi3sk` (S) | GSI `gsi3` (projection KEYS_ONLY): servers the refresher watches, and paid transfers followed to finality, by when they are due |
//!
//! The passes' indexes (`gsi2`, `gsi3`) project keys only: a 1 MB page holds thousands of
//! entries whatever an item carries (an order's request may hold 48 KB of `user_data`), and
//! the pass reads the items it acts on whole and strongly consistent (BatchGetItem).
//! | `expiresEpoch` (N) | TTL attribute (epoch seconds) for nonces, sessions and events |
//!
//! Billing mode PAY_PER_REQUEST.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus,
    TimeToLiveSpecification,
};

use super::StoreError;

/// Partition key attribute.
pub const PK: &str = "pk";
/// Sort key attribute.
pub const SK: &str = "sk";
/// The owner index.
pub const GSI1: &str = "gsi1";
/// Partition key of [`GSI1`].
pub const GSI1_PK: &str = "gsi1pk";
/// Sort key of [`GSI1`].
pub const GSI1_SK: &str = "gsi1sk";
/// The payment-state index.
pub const GSI2: &str = "gsi2";
/// Partition key of [`GSI2`].
pub const GSI2_PK: &str = "gsi2pk";
/// Sort key of [`GSI2`].
pub const GSI2_SK: &str = "gsi2sk";
/// The refresher's schedule: servers by when they are due (`WATCH`, `<due>#<sandbox id>`).
pub const GSI3: &str = "gsi3";
/// Partition key of [`GSI3`].
pub const GSI3_PK: &str = "gsi3pk";
/// Sort key of [`GSI3`].
pub const GSI3_SK: &str = "gsi3sk";
/// The TTL attribute (epoch seconds).
pub const TTL_ATTRIBUTE: &str = "expiresEpoch";

/// `(attribute, HASH|RANGE)` pairs of a key schema.
pub type KeySchema = Vec<(String, String)>;

/// The table's definition in plain terms, comparable with the template.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// `(name, type)` of every key attribute, sorted by name.
    pub attributes: Vec<(String, String)>,
    /// `(attribute, HASH|RANGE)` of the table key.
    pub key_schema: KeySchema,
    /// `(index name, key schema, projection type)` of each GSI.
    pub gsis: Vec<(String, KeySchema, String)>,
    /// The TTL attribute.
    pub ttl_attribute: String,
    /// `PAY_PER_REQUEST`.
    pub billing_mode: String,
    /// The stream's view type, `NEW_IMAGE`: the `events` function reads event items from it.
    pub stream_view: String,
}

fn key(hash: &str, range: &str) -> KeySchema {
    vec![(hash.into(), "HASH".into()), (range.into(), "RANGE".into())]
}

/// The table definition.
pub fn spec() -> TableSpec {
    let mut attributes: Vec<(String, String)> =
        [PK, SK, GSI1_PK, GSI1_SK, GSI2_PK, GSI2_SK, GSI3_PK, GSI3_SK]
            .iter()
            .map(|a| ((*a).to_owned(), "S".to_owned()))
            .collect();
    attributes.sort();
    TableSpec {
        attributes,
        key_schema: key(PK, SK),
        gsis: vec![
            (GSI1.into(), key(GSI1_PK, GSI1_SK), "ALL".into()),
            (GSI2.into(), key(GSI2_PK, GSI2_SK), "KEYS_ONLY".into()),
            (GSI3.into(), key(GSI3_PK, GSI3_SK), "KEYS_ONLY".into()),
        ],
        ttl_attribute: TTL_ATTRIBUTE.into(),
        billing_mode: "PAY_PER_REQUEST".into(),
        stream_view: "NEW_IMAGE".into(),
    }
}

fn key_elements(schema: &[(String, String)]) -> Result<Vec<KeySchemaElement>, StoreError> {
    schema
        .iter()
        .map(|(name, kind)| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(KeyType::from(kind.as_str()))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))
        })
        .collect()
}

/// Turns on the stream of table `name` (one made before the table had one).
async fn enable_stream(
    client: &Client,
    name: &str,
    stream: StreamSpecification,
) -> Result<(), StoreError> {
    client
        .update_table()
        .table_name(name)
        .stream_specification(stream)
        .send()
        .await
        .map_err(StoreError::from_sdk)?;
    Ok(())
}

/// Creates table `name` from [`spec`] unless it exists, with its stream (new images), waits
/// until it is ACTIVE, and enables TTL on [`TTL_ATTRIBUTE`]. A table that exists without a
/// stream gets one. Returns whether it was created.
///
/// Errors: any DynamoDB failure, or the table not becoming ACTIVE within 60 s.
pub async fn create_table(client: &Client, name: &str) -> Result<bool, StoreError> {
    let spec = spec();
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::from(spec.stream_view.as_str()))
        .build()
        .map_err(|e| StoreError::Backend(e.to_string()))?;
    if let Ok(found) = client.describe_table().table_name(name).send().await {
        let streaming = found.table.and_then(|t| t.stream_specification);
        if !streaming.is_some_and(|s| s.stream_enabled) {
            enable_stream(client, name, stream).await?;
        }
        return Ok(false);
    }
    let mut request = client
        .create_table()
        .table_name(name)
        .stream_specification(stream)
        .billing_mode(BillingMode::from(spec.billing_mode.as_str()))
        .set_key_schema(Some(key_elements(&spec.key_schema)?));
    for (attr, kind) in &spec.attributes {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(attr)
                .attribute_type(ScalarAttributeType::from(kind.as_str()))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?,
        );
    }
    for (index, schema, projection) in &spec.gsis {
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(index)
                .set_key_schema(Some(key_elements(schema)?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(projection.as_str()))
                        .build(),
                )
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?,
        );
    }
    request.send().await.map_err(StoreError::from_sdk)?;
    for _ in 0..120 {
        let status = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(StoreError::from_sdk)?
            .table
            .and_then(|t| t.table_status);
        if status == Some(TableStatus::Active) {
            client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .attribute_name(&spec.ttl_attribute)
                        .enabled(true)
                        .build()
                        .map_err(|e| StoreError::Backend(e.to_string()))?,
                )
                .send()
                .await
                .map_err(StoreError::from_sdk)?;
            return Ok(true);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    Err(StoreError::Backend(format!(
        "table {name} did not become ACTIVE"
    )))
}
