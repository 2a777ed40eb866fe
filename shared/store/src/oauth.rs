//! The authorization server's records (issue 47, point 2; RFC 6749, RFC 7591): the clients MCP
//! hosts register, the authorization codes a human's consent gives them, and the access and
//! refresh tokens those codes are exchanged for. A grant is an API key issued at the consent
//! (`crate::keys`): every code and token names the key's hash, and stands for it.
//!
//! - Client: `pk = OAUTHCLIENT#<client id>`, `sk = CLIENT`, TTL `expiresEpoch`: an hour after
//!   its registration, until a human's consent sets `consentedAt` and moves it 30 days on.
//! - Code: `pk = OAUTHCODE#<sha256 hex of the code>`, `sk = CODE`, TTL `expiresEpoch`. Used once:
//!   its first exchange sets `usedAt`, and the row stays until it expires, so a second one is
//!   seen.
//! - Token: `pk = OAUTHTOKEN#<sha256 hex of the token>`, `sk = TOKEN`, TTL `expiresEpoch`; an
//!   access or a refresh token. A refresh token is used once too (rotation).
//!
//! Codes and tokens are never stored, only their SHA-256. TTL deletion is lazy, so readers check
//! `expiresEpoch` themselves.

use crate::partitions::Partition;
use aws_sdk_dynamodb::types::ReturnValue;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, from_item, n, put_new, s, schema, to_item};

/// A registered client (RFC 7591's metadata, as far as the consent shows it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientRecord {
    /// `cli_<32 hex>`.
    pub client_id: String,
    /// The name the client gave itself, shown on the consent page.
    pub client_name: String,
    /// The client's home page, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_uri: Option<String>,
    /// Where the client may be sent back, exactly as registered.
    pub redirect_uris: Vec<String>,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// When the registration lapses, epoch seconds (the TTL attribute).
    pub expires_epoch: i64,
    /// RFC 3339; when a human first connected it (a consent approved). Until then it is a
    /// stranger's: its refused requests are not sent back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consented_at: Option<crate::time::Timestamp>,
}

/// What a code or a token stands for: the owner's grant to a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantRecord {
    /// The client it was given to.
    pub client_id: String,
    /// The owner who consented.
    pub owner: crate::address::Owner,
    /// The API key it stands for (`key_…`).
    pub key_id: String,
    /// SHA-256 of that key, hex: how a request is authenticated as the key.
    pub key_hash: String,
    /// The resource the tokens are for (RFC 8707): the MCP endpoint's URL.
    pub resource: String,
    /// The scopes granted, space-separated (OAuth's form).
    pub scope: String,
}

/// An authorization code: the grant, and what its exchange must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeRecord {
    /// SHA-256 of the code, hex.
    pub code_hash: String,
    /// The redirect URI the authorization request named.
    pub redirect_uri: String,
    /// PKCE's `code_challenge` (S256).
    pub code_challenge: String,
    /// What it grants.
    #[serde(flatten)]
    pub grant: GrantRecord,
    /// When it stops being exchangeable, epoch seconds (the TTL attribute).
    pub expires_epoch: i64,
    /// RFC 3339; set by its first exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<crate::time::Timestamp>,
}

/// Which token a token record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// A bearer for the resource.
    Access,
    /// Exchanged once for a new pair.
    Refresh,
}

/// An access or a refresh token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// SHA-256 of the token, hex.
    pub token_hash: String,
    /// Access or refresh.
    pub kind: TokenKind,
    /// What it stands for.
    #[serde(flatten)]
    pub grant: GrantRecord,
    /// When it ends, epoch seconds (the TTL attribute).
    pub expires_epoch: i64,
    /// RFC 3339; a refresh token's exchange sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<crate::time::Timestamp>,
}

/// What taking a single-use record (a code, a refresh token) found.
#[derive(Debug, Clone, PartialEq)]
pub enum Taken<T> {
    /// Unused until now: it is marked used, as it was before.
    Fresh(T),
    /// Used before: unchanged.
    Reused(T),
    /// No such record.
    Unknown,
}

const CLIENT: &str = "CLIENT";
const CODE: &str = "CODE";
const TOKEN: &str = "TOKEN";

impl Store {
    /// Stores a new client; [`StoreError::ConditionFailed`] if its id exists.
    pub async fn put_oauth_client(&self, record: &ClientRecord) -> Result<(), StoreError> {
        let pk = Partition::OAuthClient.key(&record.client_id);
        self.insert(to_item(
            record,
            &[(schema::PK, pk), (schema::SK, CLIENT.into())],
        )?)
        .await
    }

    /// The client `client_id`, lapsed or not.
    pub async fn oauth_client(&self, client_id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.get(Partition::OAuthClient.key(client_id), CLIENT)
            .await
    }

    /// Marks the client `client_id` connected by a human at `at` (the first time kept) and
    /// moves its lapse to `expires_epoch`.
    ///
    /// Errors: the store fails; [`StoreError::ConditionFailed`] when there is no such client.
    pub async fn consent_oauth_client(
        &self,
        client_id: &str,
        at: crate::time::Timestamp,
        expires_epoch: i64,
    ) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(Partition::OAuthClient.key(client_id)))
            .key(schema::SK, s(CLIENT))
            .update_expression("SET #consented = if_not_exists(#consented, :at), #expires = :exp")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#consented", "consentedAt")
            .expression_attribute_names("#expires", "expiresEpoch")
            .expression_attribute_values(":at", s(at.to_string()))
            .expression_attribute_values(":exp", n(expires_epoch))
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Stores a new authorization code.
    pub async fn put_oauth_code(&self, record: &CodeRecord) -> Result<(), StoreError> {
        let pk = Partition::OAuthCode.key(&record.code_hash);
        self.insert(to_item(
            record,
            &[(schema::PK, pk), (schema::SK, CODE.into())],
        )?)
        .await
    }

    /// The code whose SHA-256 is `code_hash`, used or not, expired or not.
    pub async fn oauth_code(&self, code_hash: &str) -> Result<Option<CodeRecord>, StoreError> {
        self.get(Partition::OAuthCode.key(code_hash), CODE).await
    }

    /// Takes the code whose SHA-256 is `code_hash` at `at`: marks it used unless it was.
    ///
    /// Errors: the store fails; a stored record of another shape.
    pub async fn take_oauth_code(
        &self,
        code_hash: &str,
        at: crate::time::Timestamp,
    ) -> Result<Taken<CodeRecord>, StoreError> {
        self.take(Partition::OAuthCode.key(code_hash), CODE, at)
            .await
    }

    /// Stores an access token and a refresh token together.
    ///
    /// Errors: the store fails; [`StoreError::ConditionFailed`] if either hash exists.
    pub async fn put_oauth_tokens(
        &self,
        access: &TokenRecord,
        refresh: &TokenRecord,
    ) -> Result<(), StoreError> {
        let mut items = Vec::new();
        for record in [access, refresh] {
            let pk = Partition::OAuthToken.key(&record.token_hash);
            let item = to_item(record, &[(schema::PK, pk), (schema::SK, TOKEN.into())])?;
            items.push(put_new(&self.table, item)?);
        }
        match self.write_all(items).await? {
            true => Ok(()),
            false => Err(StoreError::ConditionFailed),
        }
    }

    /// The token whose SHA-256 is `token_hash`, ended or not.
    pub async fn oauth_token(&self, token_hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.get(Partition::OAuthToken.key(token_hash), TOKEN).await
    }

    /// Takes the refresh token whose SHA-256 is `token_hash` at `at` (its rotation): marks it
    /// used unless it was. An access token is [`Taken::Unknown`].
    ///
    /// Errors: the store fails; a stored record of another shape.
    pub async fn take_refresh_token(
        &self,
        token_hash: &str,
        at: crate::time::Timestamp,
    ) -> Result<Taken<TokenRecord>, StoreError> {
        let taken = self
            .take::<TokenRecord>(Partition::OAuthToken.key(token_hash), TOKEN, at)
            .await?;
        Ok(match taken {
            Taken::Fresh(t) | Taken::Reused(t) if t.kind == TokenKind::Access => Taken::Unknown,
            other => other,
        })
    }

    /// Sets `usedAt` on the item at (`pk`, `sk`) if it exists without one, answering it as it
    /// was; else reads it as it is.
    async fn take<T: serde::de::DeserializeOwned>(
        &self,
        pk: String,
        sk: &str,
        at: crate::time::Timestamp,
    ) -> Result<Taken<T>, StoreError> {
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk.clone()))
            .key(schema::SK, s(sk))
            .update_expression("SET #used = :at")
            .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#used)")
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#used", "usedAt")
            .expression_attribute_values(":at", s(at.to_string()))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(StoreError::from_sdk);
        match written {
            Ok(out) => match out.attributes {
                Some(item) => Ok(Taken::Fresh(from_item(item)?)),
                None => Err(StoreError::Corrupt(format!("{pk}: taken without its item"))),
            },
            Err(StoreError::ConditionFailed) => Ok(match self.get(pk, sk).await? {
                Some(record) => Taken::Reused(record),
                None => Taken::Unknown,
            }),
            Err(err) => Err(err),
        }
    }
}
