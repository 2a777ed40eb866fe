//! Sign-in nonces and sessions (design brief §3, Identity; `reference/auth.md` §3).
//!
//! - Nonce: `pk = NONCE#<nonce>`, `sk = NONCE`, TTL `expiresEpoch`. Taken (deleted) by the
//!   first verify attempt that names it, whatever its outcome.
//! - Session: `pk = SESSION#<sha256 hex of the token>`, `sk = SESSION`, TTL `expiresEpoch` (the
//!   absolute expiry). The token itself is never stored.
//!
//! TTL deletion is lazy, so reads check the expiry themselves.

use crate::partitions::Partition;
use aws_sdk_dynamodb::types::ReturnValue;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, from_item, s, schema, to_item};

/// A nonce issued for one sign-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NonceRecord {
    /// The nonce (alphanumeric).
    pub nonce: String,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// Expiry, epoch seconds (also the TTL attribute).
    pub expires_epoch: i64,
}

/// A signed-in session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// SHA-256 of the token, lowercase hex.
    pub token_hash: String,
    /// The signed-in wallet address, lowercase.
    pub owner: crate::address::Owner,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339; the last authenticated request (written by each, `crate::uses`).
    pub last_seen_at: crate::time::Timestamp,
    /// RFC 3339; absolute end of the session.
    pub expires_at: crate::time::Timestamp,
    /// The same, epoch seconds (the TTL attribute).
    pub expires_epoch: i64,
}

fn nonce_pk(nonce: &str) -> String {
    Partition::Nonce.key(nonce)
}

fn session_pk(token_hash: &str) -> String {
    Partition::Session.key(token_hash)
}

impl Store {
    /// Stores a new nonce.
    pub async fn put_nonce(&self, record: &NonceRecord) -> Result<(), StoreError> {
        let item = to_item(
            record,
            &[
                (schema::PK, nonce_pk(&record.nonce)),
                (schema::SK, "NONCE".into()),
            ],
        )?;
        self.insert(item).await
    }

    /// Deletes the nonce and returns it as it was, or `None` if it was never issued or is
    /// already used. Expiry is the caller's to check.
    pub async fn take_nonce(&self, nonce: &str) -> Result<Option<NonceRecord>, StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(schema::PK, s(nonce_pk(nonce)))
            .key(schema::SK, s("NONCE"))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        out.attributes.map(from_item).transpose()
    }

    /// Stores a new session.
    pub async fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let item = to_item(
            record,
            &[
                (schema::PK, session_pk(&record.token_hash)),
                (schema::SK, "SESSION".into()),
            ],
        )?;
        self.insert(item).await
    }

    /// The session whose token hashes to `token_hash` (strongly consistent), expired or not.
    pub async fn session_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        self.get(session_pk(token_hash), "SESSION").await
    }

    /// Uses the session whose token's SHA-256 is `token_hash`: reads its record and records
    /// `usage` (`lastSeenAt` = its `now`, and the caller's window count) in one conditional
    /// write ([`super::uses`]), unless it ended — absolutely (`expiresEpoch` ≤ `now_epoch`) or
    /// idle (`lastSeenAt` ≤ `idle_cutoff`, RFC 3339) — which is answered unchanged and
    /// uncounted. `None`: no such session.
    ///
    /// Errors: the store fails; a stored record of another shape.
    pub async fn use_session(
        &self,
        token_hash: &str,
        usage: &super::uses::Use<'_>,
        now_epoch: i64,
        idle_cutoff: &str,
    ) -> Result<Option<(SessionRecord, Option<u64>)>, StoreError> {
        let guard = super::uses::Guard {
            condition: "#gexp > :gnow AND #gseen > :gidle".into(),
            names: vec![("#gexp", "expiresEpoch"), ("#gseen", "lastSeenAt")],
            values: vec![
                (
                    ":gnow",
                    aws_sdk_dynamodb::types::AttributeValue::N(now_epoch.to_string()),
                ),
                (":gidle", s(idle_cutoff)),
            ],
        };
        let used = self
            .use_credential(session_pk(token_hash), "SESSION", &guard, usage)
            .await?;
        used.item
            .map(|item| Ok((from_item(item)?, used.count)))
            .transpose()
    }

    /// Deletes a session (logout). Deleting a missing session is not an error.
    pub async fn delete_session(&self, token_hash: &str) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(schema::PK, s(session_pk(token_hash)))
            .key(schema::SK, s("SESSION"))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }
}
