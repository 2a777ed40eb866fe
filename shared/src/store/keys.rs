//! API key records (design brief §3, Identity; `reference/auth.md` §4.3).
//!
//! Item: `pk = APIKEY#<sha256 hex of the key>`, `sk = APIKEY`; GSI1: `gsi1pk = OWNER#<address>`,
//! `gsi1sk = APIKEY#<createdAt>#<id>`. The key itself is never stored, only its SHA-256.

use serde::{Deserialize, Serialize};

use super::{Item, Page, Store, StoreError, from_item, s, schema, to_item};
use crate::error::ApiError;

/// Sort key of every API key item.
const SK: &str = "APIKEY";

/// A stored API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// Record id, `key_<32 hex>` (what the key is managed by).
    pub id: String,
    /// Owner's wallet address, lowercase `0x…`.
    pub owner: String,
    /// A name the owner chose.
    pub name: String,
    /// Display prefix of the key, e.g. `svc_1a2b3c4d`.
    pub prefix: String,
    /// SHA-256 of the full key, lowercase hex.
    pub key_hash: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; when the key last authenticated a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// RFC 3339; the key stops working then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// RFC 3339; set once when revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

impl ApiKeyRecord {
    /// `active`, `revoked` or `expired` at time `now`.
    pub fn status(&self, now: time::OffsetDateTime) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self
            .expires_at
            .as_deref()
            .and_then(crate::time::parse_rfc3339)
            .is_some_and(|at| at <= now)
        {
            "expired"
        } else {
            "active"
        }
    }
}

fn pk(key_hash: &str) -> String {
    format!("APIKEY#{key_hash}")
}

/// GSI1 partition of everything an owner has.
pub(crate) fn owner_partition(owner: &str) -> String {
    format!("OWNER#{owner}")
}

impl Store {
    /// Stores a new key record; fails with [`StoreError::ConditionFailed`] if its hash exists.
    pub async fn put_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        let item: Item = to_item(
            record,
            &[
                (schema::PK, pk(&record.key_hash)),
                (schema::SK, SK.to_owned()),
                (schema::GSI1_PK, owner_partition(&record.owner)),
                (
                    schema::GSI1_SK,
                    format!("APIKEY#{}#{}", record.created_at, record.id),
                ),
            ],
        )?;
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// The record of the key whose SHA-256 is `key_hash` (strongly consistent read).
    pub async fn api_key_by_hash(
        &self,
        key_hash: &str,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.get(pk(key_hash), SK).await
    }

    /// One page of an owner's keys, newest first (GSI1, eventually consistent).
    pub async fn api_keys_of(
        &self,
        owner: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<ApiKeyRecord>, ApiError> {
        self.query_gsi1(&owner_partition(owner), "APIKEY#", limit, cursor)
            .await
    }

    /// Revokes the key `id` of `owner`: sets `revokedAt` once (idempotent; a second revoke keeps
    /// the first time). Returns the record as stored after the call, or `None` when the owner
    /// has no key with that id.
    pub async fn revoke_api_key(
        &self,
        owner: &str,
        id: &str,
        at: &str,
    ) -> Result<Option<ApiKeyRecord>, ApiError> {
        let mut cursor: Option<String> = None;
        let found = loop {
            let page = self.api_keys_of(owner, 100, cursor.as_deref()).await?;
            if let Some(record) = page.items.into_iter().find(|k| k.id == id) {
                break Some(record);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break None,
            }
        };
        let Some(record) = found else {
            return Ok(None);
        };
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk(&record.key_hash)))
            .key(schema::SK, s(SK))
            .update_expression("SET #revokedAt = if_not_exists(#revokedAt, :at)")
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#revokedAt", "revokedAt")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":at", s(at))
            .expression_attribute_values(":owner", s(owner))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(out.attributes.map(from_item).transpose()?)
    }
}
