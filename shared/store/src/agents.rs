//! Agents: named principals linked to one API key (design brief §2, keys group).
//!
//! Items: the agent, `pk = AGENT#<id>`, `sk = AGENT`, GSI1 `gsi1pk = OWNER#<address>`,
//! `gsi1sk = AGENT#<createdAt>#<id>`; and a link in its key's partition,
//! `pk = APIKEY#<key hash>`, `sk = AGENT#<id>`, so the key's agents are found with a strongly
//! consistent query.
//!
//! The rule "a revoked key never has an active agent" holds by construction: registering an
//! agent increments the key's `agentCount` on condition that the key is neither revoked nor
//! expired, and revoking writes `revokedAt` and deactivates every linked agent in one
//! transaction on condition that `agentCount` still equals the number of agents it found. Either
//! transaction invalidates the other, so a registration racing a revocation either lands before
//! it (and is deactivated by it) or fails.

use crate::address::Owner;
use crate::partitions::Partition;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use serde::{Deserialize, Serialize};

use super::events::{AgentDeactivated, EventData, KeyRevoked, Outbox, Subject, SubjectKind};
use super::keys::{ApiKeyRecord, owner_partition, pk as key_pk};
use super::{Page, Store, StoreError, put_new, s, schema, to_item};

const SK: &str = "AGENT";
/// Most agents one key may have (a revocation transaction holds them all; DynamoDB allows 100
/// items in one).
pub const MAX_AGENTS_PER_KEY: u32 = 50;
/// `status` of an agent that may act.
pub const ACTIVE: &str = "active";
/// `status` of an agent whose key was revoked.
pub const INACTIVE: &str = "inactive";
/// Why agents become inactive when their key is revoked.
pub const REASON_KEY_REVOKED: &str = "key revoked";

/// An agent as stored (answered as `domain::agents::Agent`, its owner in EIP-55).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    /// `agt_<32 hex>`.
    pub id: String,
    /// Owner's wallet address, lowercase.
    pub owner: Owner,
    /// The API key it acts with (`key_…`).
    pub key_id: String,
    /// A name.
    pub name: String,
    /// [`ACTIVE`] or [`INACTIVE`].
    pub status: String,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339, when it became inactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deactivated_at: Option<crate::time::Timestamp>,
    /// Why it became inactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deactivation_reason: Option<String>,
}

fn agent_pk(id: &str) -> String {
    Partition::Agent.key(id)
}

fn update(table: &str) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
    Update::builder().table_name(table)
}

fn built(
    update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
) -> Result<TransactWriteItem, StoreError> {
    Ok(TransactWriteItem::builder()
        .update(
            update
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?,
        )
        .build())
}

impl Store {
    /// Registers `agent` under the key whose hash is `key_hash`, counting it on the key, on
    /// condition that the key belongs to the agent's owner, is not revoked, not expired at
    /// `now` (RFC 3339) and has fewer than [`MAX_AGENTS_PER_KEY`] agents;
    /// [`StoreError::ConditionFailed`] otherwise.
    pub async fn register_agent(
        &self,
        key_hash: &str,
        agent: &AgentRecord,
        now: &str,
    ) -> Result<(), StoreError> {
        let count_on_key = update(&self.table)
            .key(schema::PK, s(key_pk(key_hash)))
            .key(schema::SK, s("APIKEY"))
            .update_expression("SET #count = if_not_exists(#count, :zero) + :one")
            .condition_expression(
                "#owner = :owner AND attribute_not_exists(#revokedAt) \
                 AND (attribute_not_exists(#expiresAt) OR #expiresAt > :now) \
                 AND (attribute_not_exists(#count) OR #count < :max)",
            )
            .expression_attribute_names("#count", "agentCount")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#revokedAt", "revokedAt")
            .expression_attribute_names("#expiresAt", "expiresAt")
            .expression_attribute_values(
                ":zero",
                aws_sdk_dynamodb::types::AttributeValue::N("0".into()),
            )
            .expression_attribute_values(
                ":one",
                aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
            )
            .expression_attribute_values(
                ":max",
                aws_sdk_dynamodb::types::AttributeValue::N(MAX_AGENTS_PER_KEY.to_string()),
            )
            .expression_attribute_values(":owner", s(agent.owner.as_str()))
            .expression_attribute_values(":now", s(now));
        let agent_item = to_item(
            agent,
            &[
                (schema::PK, agent_pk(&agent.id)),
                (schema::SK, SK.to_owned()),
                (schema::GSI1_PK, owner_partition(&agent.owner)),
                (
                    schema::GSI1_SK,
                    format!("AGENT#{}#{}", agent.created_at, agent.id),
                ),
            ],
        )?;
        let link = to_item(
            &serde_json::json!({ "agentId": agent.id }),
            &[
                (schema::PK, key_pk(key_hash)),
                (schema::SK, format!("AGENT#{}", agent.id)),
            ],
        )?;
        self.client
            .transact_write_items()
            .transact_items(built(count_on_key)?)
            .transact_items(put_new(&self.table, agent_item)?)
            .transact_items(put_new(&self.table, link)?)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// The agent `id` (strongly consistent), whoever owns it.
    pub async fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.get(agent_pk(id), SK).await
    }

    /// One page of an owner's agents, newest first (GSI1, eventually consistent).
    pub async fn agents_of(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<AgentRecord>, StoreError> {
        self.query_gsi1(&owner_partition(owner), "AGENT#", limit, cursor)
            .await
    }

    /// Ids of every agent linked to the key whose hash is `key_hash` (strongly consistent).
    pub async fn agent_ids_of_key(&self, key_hash: &str) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", schema::PK)
                .expression_attribute_names("#sk", schema::SK)
                .expression_attribute_values(":pk", s(key_pk(key_hash)))
                .expression_attribute_values(":prefix", s("AGENT#"))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(StoreError::from_sdk)?;
            ids.extend(out.items().iter().filter_map(|item| {
                item.get(schema::SK)
                    .and_then(|v| v.as_s().ok())
                    .and_then(|sk| sk.strip_prefix("AGENT#"))
                    .map(str::to_owned)
            }));
            match out.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok(ids),
            }
        }
    }

    /// Revokes the key `id` of `owner` at `at` (RFC 3339) and deactivates every agent linked to
    /// it, in one transaction (see the module docs) that also takes the key off the owner's
    /// count of keys (`crate::caps`). Idempotent: revoking a revoked key returns
    /// it unchanged. `None` when the owner has no key with that id.
    pub async fn revoke_api_key(
        &self,
        owner: &Owner,
        id: &str,
        at: crate::time::Timestamp,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let text = at.to_string();
        for _ in 0..5 {
            let Some(mut record) = self.api_key_by_id(id).await? else {
                return Ok(None);
            };
            if &record.owner != owner {
                return Ok(None);
            }
            if record.revoked_at.is_some() {
                return Ok(Some(record));
            }
            let agents = self.agent_ids_of_key(&record.key_hash).await?;
            let revoke = update(&self.table)
                .key(schema::PK, s(key_pk(&record.key_hash)))
                .key(schema::SK, s("APIKEY"))
                .update_expression("SET #revokedAt = :at")
                .condition_expression(
                    "#owner = :owner AND attribute_not_exists(#revokedAt) \
                     AND (attribute_not_exists(#count) OR #count = :n)",
                )
                .expression_attribute_names("#revokedAt", "revokedAt")
                .expression_attribute_names("#owner", "owner")
                .expression_attribute_names("#count", "agentCount")
                .expression_attribute_values(":at", s(&text))
                .expression_attribute_values(":owner", s(owner.as_str()))
                .expression_attribute_values(
                    ":n",
                    aws_sdk_dynamodb::types::AttributeValue::N(agents.len().to_string()),
                );
            let mut tx = self
                .client
                .transact_write_items()
                .transact_items(built(revoke)?)
                .transact_items(super::caps::release(
                    &self.table,
                    owner,
                    super::caps::Counter::Keys,
                )?);
            for agent in &agents {
                let deactivate = update(&self.table)
                    .key(schema::PK, s(agent_pk(agent)))
                    .key(schema::SK, s(SK))
                    .update_expression(
                        "SET #status = :inactive, #at = if_not_exists(#at, :at), \
                         #reason = if_not_exists(#reason, :reason)",
                    )
                    .condition_expression("attribute_exists(#pk)")
                    .expression_attribute_names("#pk", schema::PK)
                    .expression_attribute_names("#status", "status")
                    .expression_attribute_names("#at", "deactivatedAt")
                    .expression_attribute_names("#reason", "deactivationReason")
                    .expression_attribute_values(":inactive", s(INACTIVE))
                    .expression_attribute_values(":at", s(&text))
                    .expression_attribute_values(":reason", s(REASON_KEY_REVOKED));
                tx = tx.transact_items(built(deactivate)?);
            }
            for put in revocation_events(&record, &agents, at).puts(&self.table)? {
                tx = tx.transact_items(put);
            }
            match tx.send().await.map_err(StoreError::from_sdk) {
                Ok(_) => {
                    record.revoked_at = Some(at);
                    return Ok(Some(record));
                }
                // An agent registered meanwhile, or a concurrent revoke: read again.
                Err(StoreError::ConditionFailed) => continue,
                Err(err) => return Err(err),
            }
        }
        Err(StoreError::Backend(format!(
            "revoking key {id} kept conflicting"
        )))
    }
}

/// The events of revoking key `record` at `at`: `key.revoked` (`{keyId, name}`), then, when it
/// had agents, one `agent.deactivated` (`{keyId, agentIds, reason}`) for all of them (a key's
/// revocation is its first event and happens once; one event keeps the transaction within its
/// 100 items at `MAX_AGENTS_PER_KEY`).
fn revocation_events(
    record: &ApiKeyRecord,
    agents: &[String],
    at: crate::time::Timestamp,
) -> Outbox {
    let subject = Subject {
        kind: SubjectKind::Key,
        id: record.id.clone(),
    };
    let mut outbox = Outbox::new(subject, &record.owner, 0, at.into());
    outbox.push(EventData::KeyRevoked(KeyRevoked {
        key_id: record.id.clone(),
        name: record.name.clone(),
    }));
    if !agents.is_empty() {
        outbox.push(EventData::AgentDeactivated(AgentDeactivated {
            key_id: record.id.clone(),
            agent_ids: agents.to_vec(),
            reason: REASON_KEY_REVOKED.to_owned(),
        }));
    }
    outbox
}
