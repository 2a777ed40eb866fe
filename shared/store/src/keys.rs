//! API key records (design brief §3, Identity; `reference/auth.md` §4.3).
//!
//! Items: the key, `pk = APIKEY#<sha256 hex of the key>`, `sk = APIKEY`, GSI1
//! `gsi1pk = OWNER#<address>`, `gsi1sk = APIKEY#<createdAt>#<id>`; and a pointer from its id,
//! `pk = KEYID#<id>`, `sk = APIKEY`, holding the hash. Agents linked to the key have a link item
//! in the key's partition (`sk = AGENT#<agent id>`, see [`super::agents`]). The key itself is
//! never stored, only its SHA-256.

use crate::address::Owner;
use crate::partitions::Partition;
use serde::{Deserialize, Serialize};

use super::caps::{self, Counter};
use super::{Item, Page, Store, StoreError, schema, to_item};

/// Sort key of every API key item.
const SK: &str = "APIKEY";

/// A stored API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// Record id, `key_<32 hex>` (what the key is managed by).
    pub id: String,
    /// Owner's wallet address, lowercase `0x…`.
    pub owner: Owner,
    /// A name the owner chose.
    pub name: String,
    /// Display prefix of the key, e.g. `svc_1a2b3c4d`.
    pub prefix: String,
    /// SHA-256 of the full key, lowercase hex.
    pub key_hash: String,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339; when the key last authenticated a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<crate::time::Timestamp>,
    /// RFC 3339; the key stops working then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<crate::time::Timestamp>,
    /// RFC 3339; set once when revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<crate::time::Timestamp>,
    /// How many agents were ever linked to the key (revocation checks it saw them all).
    #[serde(default)]
    pub agent_count: u32,
    /// What the key may do (`crate::policy::Scope` names); absent: everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// What the key may provision; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::Policy>,
}

/// The pointer from a key's id to its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyPointer {
    key_hash: String,
    owner: Owner,
}

impl ApiKeyRecord {
    /// `active`, `revoked` or `expired` at time `now`.
    pub fn status(&self, now: time::OffsetDateTime) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|at| at.datetime() <= now) {
            "expired"
        } else {
            "active"
        }
    }

    /// The key's scopes: its recorded list, or the default ones ([`Scope::DEFAULT`]: never
    /// `webhooks`) for a key issued without naming them, before keys had scopes included.
    /// Names not known are ignored.
    ///
    /// [`Scope::DEFAULT`]: crate::policy::Scope::DEFAULT
    pub fn scopes(&self) -> Vec<crate::policy::Scope> {
        use crate::policy::Scope;
        match &self.scopes {
            None => Scope::DEFAULT.to_vec(),
            Some(names) => names.iter().filter_map(|n| Scope::parse(n)).collect(),
        }
    }
}

/// Partition of a key (and of its agent links).
pub(crate) fn pk(key_hash: &str) -> String {
    Partition::ApiKey.key(key_hash)
}

fn id_pk(id: &str) -> String {
    Partition::KeyId.key(id)
}

/// GSI1 partition of everything an owner has.
pub(crate) fn owner_partition(owner: &Owner) -> String {
    Partition::Owner.key(owner)
}

impl Store {
    /// Stores a new key record and its id pointer in one transaction, counting it against the
    /// owner's `cap` of unrevoked keys when there is one (`crate::caps`); fails with
    /// [`StoreError::CapReached`] at the cap, [`StoreError::ConditionFailed`] if its hash or id
    /// exists.
    pub async fn put_api_key(
        &self,
        record: &ApiKeyRecord,
        cap: Option<u32>,
    ) -> Result<(), StoreError> {
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
        let pointer = to_item(
            &KeyPointer {
                key_hash: record.key_hash.clone(),
                owner: record.owner.clone(),
            },
            &[(schema::PK, id_pk(&record.id)), (schema::SK, SK.to_owned())],
        )?;
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(super::put_new(&self.table, item)?)
            .transact_items(super::put_new(&self.table, pointer)?);
        if let Some(cap) = cap {
            tx = tx.transact_items(caps::allot(&self.table, &record.owner, Counter::Keys, cap)?);
        }
        tx.send()
            .await
            .map_err(|err| caps::cap_failed(err, 2, Counter::Keys))?;
        Ok(())
    }

    /// The key record with id `id` (two strongly consistent reads), whoever owns it.
    pub async fn api_key_by_id(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let Some(pointer) = self.get::<KeyPointer>(id_pk(id), SK).await? else {
            return Ok(None);
        };
        self.api_key_by_hash(&pointer.key_hash).await
    }

    /// Replaces the policy of `owner`'s key `key_hash` (`None` removes it); the updated record.
    ///
    /// Errors: [`StoreError::ConditionFailed`] when the key is not `owner`'s (or is gone).
    pub async fn set_api_key_policy(
        &self,
        key_hash: &str,
        owner: &Owner,
        policy: Option<&crate::policy::Policy>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, super::s(pk(key_hash)))
            .key(schema::SK, super::s(SK))
            .condition_expression("attribute_exists(#pk) AND #owner = :owner")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#policy", "policy")
            .expression_attribute_values(":owner", super::s(owner.as_str()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
        let update = match policy {
            Some(policy) => update
                .update_expression("SET #policy = :policy")
                .expression_attribute_values(
                    ":policy",
                    serde_dynamo::to_attribute_value(policy)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                ),
            None => update.update_expression("REMOVE #policy"),
        };
        let out = update.send().await.map_err(StoreError::from_sdk)?;
        super::from_item(out.attributes.unwrap_or_default())
    }

    /// Uses the key whose SHA-256 is `key_hash`: reads its record and records `usage`
    /// (`lastUsedAt` = its `now`, and the caller's window count) in one conditional write
    /// ([`super::uses`]); a revoked key is answered unchanged and uncounted. `None`: no such key.
    ///
    /// Errors: the store fails; a stored record of another shape.
    pub async fn use_api_key(
        &self,
        key_hash: &str,
        usage: &super::uses::Use<'_>,
    ) -> Result<Option<(ApiKeyRecord, Option<u64>)>, StoreError> {
        let guard = super::uses::Guard {
            condition: "attribute_not_exists(#grevoked)".into(),
            names: vec![("#grevoked", "revokedAt")],
            values: vec![],
        };
        let used = self.use_credential(pk(key_hash), SK, &guard, usage).await?;
        used.item
            .map(|item| Ok((super::from_item(item)?, used.count)))
            .transpose()
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
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<ApiKeyRecord>, StoreError> {
        self.query_gsi1(&owner_partition(owner), "APIKEY#", limit, cursor)
            .await
    }
}
