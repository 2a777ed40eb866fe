//! Sandboxes (server metadata records) and server ownership (design brief §3, Ownership).
//!
//! - Ownership: `pk = SERVER#<server id>`, `sk = OWNER`: who provisioned a server through this
//!   service. Written once, conditionally, at provisioning; the only thing that authorises
//!   actions, delete and listing. Read strongly consistent.
//! - Sandbox: `pk = SANDBOX#<id>`, `sk = SANDBOX`; GSI1 `gsi1pk = OWNER#<address>`,
//!   `gsi1sk = SANDBOX#<createdAt>#<id>` for the owner's listing.

use std::collections::{BTreeMap, HashSet};

use aws_sdk_dynamodb::types::{ConditionCheck, KeysAndAttributes, ReturnValue, TransactWriteItem};
use serde::{Deserialize, Serialize};

use super::keys::owner_partition;
use super::{Item, Page, Store, StoreError, from_item, put_new, s, schema, to_item};
use crate::error::ApiError;

const OWNERSHIP_SK: &str = "OWNER";
const SANDBOX_SK: &str = "SANDBOX";
/// BatchGetItem's limit of keys per call.
const BATCH_GET_MAX: usize = 100;

/// Who owns a server provisioned through this service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerOwnership {
    /// Provider server id.
    pub server_id: u64,
    /// Owner's wallet address, lowercase.
    pub owner: String,
    /// The sandbox record written with it.
    pub sandbox_id: String,
    /// Provider project id.
    pub project_id: u64,
    /// RFC 3339.
    pub created_at: String,
}

/// A sandbox: the service's record of a server (or free-standing metadata) and its owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRecord {
    /// `sbx_<32 hex>`.
    pub id: String,
    /// Owner's wallet address, lowercase.
    pub owner: String,
    /// Provider server id, when the record is about a server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// Provider project id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<u64>,
    /// Plan slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Region slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// A name the owner chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free-form string metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Last known status: the provider's (`deploying`, `deployed`, …), `terminating` after a
    /// delete, `terminated` once the provider no longer knows the server, or `recorded` for a
    /// metadata-only record.
    pub status: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

fn ownership_key(server_id: u64) -> String {
    format!("SERVER#{server_id}")
}

fn sandbox_key(id: &str) -> String {
    format!("SANDBOX#{id}")
}

pub(crate) fn sandbox_item(sandbox: &SandboxRecord) -> Result<Item, StoreError> {
    to_item(
        sandbox,
        &[
            (schema::PK, sandbox_key(&sandbox.id)),
            (schema::SK, SANDBOX_SK.to_owned()),
            (schema::GSI1_PK, owner_partition(&sandbox.owner)),
            (
                schema::GSI1_SK,
                format!("SANDBOX#{}#{}", sandbox.created_at, sandbox.id),
            ),
        ],
    )
}

pub(crate) fn ownership_item(ownership: &ServerOwnership) -> Result<Item, StoreError> {
    to_item(
        ownership,
        &[
            (schema::PK, ownership_key(ownership.server_id)),
            (schema::SK, OWNERSHIP_SK.to_owned()),
        ],
    )
}

impl Store {
    /// Records a newly provisioned server: its ownership and its sandbox, in one transaction.
    /// Fails with [`StoreError::ConditionFailed`] if the server already has an owner.
    pub async fn record_server(
        &self,
        ownership: &ServerOwnership,
        sandbox: &SandboxRecord,
    ) -> Result<(), StoreError> {
        let ownership_item = ownership_item(ownership)?;
        self.client
            .transact_write_items()
            .transact_items(put_new(&self.table, ownership_item)?)
            .transact_items(put_new(&self.table, sandbox_item(sandbox)?)?)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Who owns server `server_id` (strongly consistent), if it was provisioned here.
    pub async fn server_ownership(
        &self,
        server_id: u64,
    ) -> Result<Option<ServerOwnership>, StoreError> {
        self.get(ownership_key(server_id), OWNERSHIP_SK).await
    }

    /// Which of `server_ids` belong to `owner` (strongly consistent batch reads, 100 ids per
    /// call, unprocessed keys retried).
    pub async fn owned_server_ids(
        &self,
        owner: &str,
        server_ids: &[u64],
    ) -> Result<HashSet<u64>, StoreError> {
        let mut owned = HashSet::new();
        for chunk in server_ids.chunks(BATCH_GET_MAX) {
            let mut keys: Vec<Item> = chunk
                .iter()
                .map(|id| {
                    Item::from([
                        (schema::PK.to_owned(), s(ownership_key(*id))),
                        (schema::SK.to_owned(), s(OWNERSHIP_SK)),
                    ])
                })
                .collect();
            let mut rounds = 0;
            while !keys.is_empty() {
                rounds += 1;
                if rounds > 10 {
                    return Err(StoreError::Backend(
                        "batch reads kept being throttled".into(),
                    ));
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(StoreError::from_sdk)?;
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    let record: ServerOwnership = from_item(item)?;
                    if record.owner == owner {
                        owned.insert(record.server_id);
                    }
                }
                keys = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
        }
        Ok(owned)
    }

    /// Stores a new sandbox. When it names a server, the same transaction checks that the
    /// server's recorded owner is the sandbox's owner; [`StoreError::ConditionFailed`] when not
    /// (or when the server was never provisioned here).
    pub async fn put_sandbox(&self, sandbox: &SandboxRecord) -> Result<(), StoreError> {
        let mut tx = self.client.transact_write_items();
        if let Some(server_id) = sandbox.server_id {
            tx = tx.transact_items(
                TransactWriteItem::builder()
                    .condition_check(
                        ConditionCheck::builder()
                            .table_name(&self.table)
                            .key(schema::PK, s(ownership_key(server_id)))
                            .key(schema::SK, s(OWNERSHIP_SK))
                            .condition_expression("#owner = :owner")
                            .expression_attribute_names("#owner", "owner")
                            .expression_attribute_values(":owner", s(&sandbox.owner))
                            .build()
                            .map_err(|e| StoreError::Backend(e.to_string()))?,
                    )
                    .build(),
            );
        }
        tx.transact_items(put_new(&self.table, sandbox_item(sandbox)?)?)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// The sandbox `id` (strongly consistent), whoever owns it.
    pub async fn sandbox(&self, id: &str) -> Result<Option<SandboxRecord>, StoreError> {
        self.get(sandbox_key(id), SANDBOX_SK).await
    }

    /// One page of an owner's sandboxes, newest first (GSI1, eventually consistent).
    pub async fn sandboxes_of(
        &self,
        owner: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<SandboxRecord>, ApiError> {
        self.query_gsi1(&owner_partition(owner), "SANDBOX#", limit, cursor)
            .await
    }

    /// Sets a sandbox's status (and hostname, when known); returns the updated record, or
    /// `None` when there is no such sandbox.
    pub async fn update_sandbox_status(
        &self,
        id: &str,
        status: &str,
        hostname: Option<&str>,
        at: &str,
    ) -> Result<Option<SandboxRecord>, StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(sandbox_key(id)))
            .key(schema::SK, s(SANDBOX_SK))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#updatedAt", "updatedAt")
            .expression_attribute_values(":status", s(status))
            .expression_attribute_values(":at", s(at))
            .return_values(ReturnValue::AllNew);
        update = match hostname {
            Some(hostname) => update
                .update_expression("SET #status = :status, #updatedAt = :at, #hostname = :hostname")
                .expression_attribute_names("#hostname", "hostname")
                .expression_attribute_values(":hostname", s(hostname)),
            None => update.update_expression("SET #status = :status, #updatedAt = :at"),
        };
        match update.send().await.map_err(StoreError::from_sdk) {
            Ok(out) => out.attributes.map(from_item).transpose(),
            Err(StoreError::ConditionFailed) => Ok(None),
            Err(err) => Err(err),
        }
    }
}
