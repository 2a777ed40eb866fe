//! An owner's SSH public keys, and the provider's copies of them (issue 33, point 1).
//!
//! - Key: `pk = SSHKEYS#<owner>`, `sk = SSHKEY#<id>`; GSI1 `OWNER#<owner>` /
//!   `SSHKEY#<createdAt>#<id>` (the owner's listing, newest first). The id is made from the
//!   owner and the key's fingerprint, so one owner holds a key once: a second add (or a raw key
//!   on a provisioning) finds the first. At most `MAX_SSH_KEYS_PER_OWNER`, counted in
//!   `ALLOT#<owner>` `sshKeys`.
//! - Registration with the provider happens when a paid create or a rebuild first uses the key
//!   (adding it writes only the record, with the API key that added it, `keyId`), and is
//!   recorded before it is made: the key is claimed with `claimedUntil` (epoch seconds) under a
//!   `label` of its own (`svc <owner> <id> <token>`), then `POST /ssh-keys` is sent, then
//!   `providerId` is written. A registration whose answer was lost
//!   is found again by its label once its claim lapsed: a lookup, never a second copy.
//! - Retirement: deleting a key deletes its record at once (and counts it off) and, in the same
//!   transaction, writes `SSHRETIRE#<label>` / `SSHRETIRE` with the provider's id when known.
//!   GSI2 `SSHRETIRE` / `SSHRETIRE#<due, 12 digits>#<label>` lists them for the reconciler's pass,
//!   which removes the provider's copy once no open order names it, then the item.

use crate::partitions::Partition;
use serde::{Deserialize, Serialize};

use super::caps::{self, Counter};
use super::{Page, Store, StoreError, from_item, n, s, schema, to_item};
use crate::address::Owner;

/// A key as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshKeyRecord {
    /// `ssh_<32 hex>`, from the owner and the fingerprint.
    pub id: String,
    /// Its owner.
    pub owner: Owner,
    /// The owner's name for it (1-64 characters).
    pub name: String,
    /// The OpenSSH public key text without its comment: `<algorithm> <base64>`.
    pub public_key: String,
    /// `SHA256:<base64>` (OpenSSH's form).
    pub fingerprint: String,
    /// The key's algorithm, e.g. `ssh-ed25519`.
    pub algorithm: String,
    /// When it was added, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// Its label in the provider's account (unique: it ends with a random token).
    pub label: String,
    /// The provider's id of its copy, once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<u64>,
    /// Until when (epoch seconds) a registration under way holds it; another waits until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_until: Option<i64>,
    /// The API key (`key_…`) that added it; `None` for a session's. Once that key is revoked
    /// or expired, the SSH key is disabled (as a webhook endpoint is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// A provider copy of a deleted key, to be removed from the provider's account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retirement {
    /// The key's label in the provider's account (found by it when the id is not known).
    pub label: String,
    /// The deleted key's owner.
    pub owner: Owner,
    /// The provider's id, when the registration was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<u64>,
    /// When the pass next looks at it, epoch seconds.
    pub due: i64,
}

const RETIRE: &str = Partition::Retirements.prefix();

fn partition(owner: &Owner) -> String {
    Partition::SshKeys.key(owner)
}

fn sort_key(id: &str) -> String {
    format!("SSHKEY#{id}")
}

fn record_item(record: &SshKeyRecord) -> Result<super::Item, StoreError> {
    to_item(
        record,
        &[
            (schema::PK, partition(&record.owner)),
            (schema::SK, sort_key(&record.id)),
            (schema::GSI1_PK, super::keys::owner_partition(&record.owner)),
            (
                schema::GSI1_SK,
                format!("SSHKEY#{}#{}", record.created_at, record.id),
            ),
        ],
    )
}

fn retirement_item(retirement: &Retirement) -> Result<super::Item, StoreError> {
    to_item(
        retirement,
        &[
            (schema::PK, Partition::SshRetire.key(&retirement.label)),
            (schema::SK, RETIRE.to_owned()),
            (schema::GSI2_PK, RETIRE.to_owned()),
            (
                schema::GSI2_SK,
                format!(
                    "{RETIRE}#{:012}#{}",
                    retirement.due.max(0),
                    retirement.label
                ),
            ),
        ],
    )
}

fn put(item: super::Item, table: &str) -> aws_sdk_dynamodb::types::TransactWriteItem {
    aws_sdk_dynamodb::types::TransactWriteItem::builder()
        .put(
            aws_sdk_dynamodb::types::Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .build()
                .expect("table and item are set"),
        )
        .build()
}

impl Store {
    /// Adds `record` (with its registration claim), counting it against its owner's `cap`.
    ///
    /// Errors: [`StoreError::CapReached`] at the cap; [`StoreError::ConditionFailed`] when the
    /// owner already has this key (the same id); the store's.
    pub async fn add_ssh_key(&self, record: &SshKeyRecord, cap: u32) -> Result<(), StoreError> {
        self.client
            .transact_write_items()
            .transact_items(caps::allot(
                &self.table,
                &record.owner,
                Counter::SshKeys,
                cap,
            )?)
            .transact_items(super::put_new(&self.table, record_item(record)?)?)
            .send()
            .await
            // A failed condition of the second item (the key is the owner's already) is
            // `ConditionFailed`.
            .map_err(|err| caps::cap_failed(err, 0, Counter::SshKeys))?;
        Ok(())
    }

    /// `owner`'s key `id` (strongly consistent); `None` for another owner's or none.
    ///
    /// Errors: the store's.
    pub async fn ssh_key(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<SshKeyRecord>, StoreError> {
        self.get(partition(owner), &sort_key(id)).await
    }

    /// Every key of `owner` (strongly consistent; at most the cap).
    ///
    /// Errors: the store's.
    pub async fn ssh_keys_of(&self, owner: &Owner) -> Result<Vec<SshKeyRecord>, StoreError> {
        self.query_all(&partition(owner), "SSHKEY#").await
    }

    /// One page of `owner`'s keys, newest first (GSI1, eventually consistent).
    ///
    /// Errors: [`StoreError::BadCursor`] for a cursor of another listing; the store's.
    pub async fn ssh_key_page(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<SshKeyRecord>, StoreError> {
        self.query_gsi1(
            &super::keys::owner_partition(owner),
            "SSHKEY#",
            limit,
            cursor,
        )
        .await
    }

    /// Takes over the registration of `owner`'s key `id` until `until` if it is not registered
    /// and no one holds it at `now`; `false` otherwise (or if it is gone).
    ///
    /// Errors: the store's.
    pub async fn claim_ssh_key(
        &self,
        owner: &Owner,
        id: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError> {
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(partition(owner)))
            .key(schema::SK, s(sort_key(id)))
            .update_expression("SET #claimed = :until")
            .condition_expression(
                "attribute_exists(#pk) AND attribute_not_exists(#provider) AND \
                 (attribute_not_exists(#claimed) OR #claimed < :now)",
            )
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#provider", "providerId")
            .expression_attribute_names("#claimed", "claimedUntil")
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Records that `owner`'s key `id` is the provider's key `provider_id` (and lets go of the
    /// claim); `false` when the key was deleted meanwhile (the copy is then to be retired).
    ///
    /// Errors: the store's.
    pub async fn registered_ssh_key(
        &self,
        owner: &Owner,
        id: &str,
        provider_id: u64,
    ) -> Result<bool, StoreError> {
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(partition(owner)))
            .key(schema::SK, s(sort_key(id)))
            .update_expression("SET #provider = :provider REMOVE #claimed")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#provider", "providerId")
            .expression_attribute_names("#claimed", "claimedUntil")
            .expression_attribute_values(":provider", n(provider_id))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Deletes `record` (as read), counts it off and, when it may have a provider copy (it was
    /// registered, or a registration was under way), queues that copy's [`Retirement`] at `due`,
    /// in one transaction; `false` if the key changed or is gone meanwhile.
    ///
    /// Errors: the store's.
    pub async fn delete_ssh_key(
        &self,
        record: &SshKeyRecord,
        due: i64,
    ) -> Result<bool, StoreError> {
        let mut delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(&self.table)
            .key(schema::PK, s(partition(&record.owner)))
            .key(schema::SK, s(sort_key(&record.id)))
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#provider", "providerId");
        delete = match record.provider_id {
            Some(id) => delete
                .condition_expression("attribute_exists(#pk) AND #provider = :provider")
                .expression_attribute_values(":provider", n(id)),
            None => delete
                .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#provider)"),
        };
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .delete(delete.build().map_err(super::builder_error)?)
                    .build(),
            )
            .transact_items(caps::release(&self.table, &record.owner, Counter::SshKeys)?);
        if record.provider_id.is_some() || record.claimed_until.is_some() {
            let retirement = Retirement {
                label: record.label.clone(),
                owner: record.owner.clone(),
                provider_id: record.provider_id,
                due,
            };
            tx = tx.transact_items(put(retirement_item(&retirement)?, &self.table));
        }
        super::applied(tx.send().await.map_err(StoreError::from_sdk))
    }

    /// Queues the retirement of a provider copy no key record names (a registration answered
    /// after its key was deleted).
    ///
    /// Errors: the store's.
    pub async fn retire_ssh_key(&self, retirement: &Retirement) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(retirement_item(retirement)?))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Up to `limit` retirements due at `now` (epoch seconds) or before, earliest first.
    ///
    /// Errors: the store's.
    pub async fn retirements_due(
        &self,
        now: i64,
        limit: i32,
    ) -> Result<Vec<Retirement>, StoreError> {
        self.due_in_gsi2(RETIRE, now, limit)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// Ends `retirement` (its provider copy is gone).
    ///
    /// Errors: the store's.
    pub async fn retired_ssh_key(&self, retirement: &Retirement) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(schema::PK, s(Partition::SshRetire.key(&retirement.label)))
            .key(schema::SK, s(RETIRE))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }
}

/// A key put on a server: what `access.authorizedKeys` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizedKey {
    /// The owner's key, `ssh_<32 hex>`.
    pub id: String,
    /// `SHA256:<base64>`.
    pub fingerprint: String,
}
