//! The rules about API keys, in one place: issuing one (name, expiry, scopes, policy), listing
//! (with each key's usage), changing and revoking an owner's keys, and what a key may do — its
//! scopes. What a key may spend — its policy — is `crate::ratelimit::spend`'s, beside the other
//! limits. The `keys` function and the operator CLI call these; none touches the store's key
//! records directly.
//!
//! Scopes: `read` (every read: discovery, quotes, servers, sandboxes, payments, agents),
//! `provision` (create a server), `act` (server actions, sandbox records), `delete` (delete a
//! server), `renew` (buy more paid time), `pay` (any request that is paid — a paid plan's
//! provisioning, every renewal — checked before the 402, so a key that cannot pay is never
//! offered a payment) and `webhooks` (webhook endpoints). A key is issued with
//! `Scope::DEFAULT` (all but `webhooks`) unless its owner names its scopes; a session (the
//! owner) has all of them. Which route needs which scope is its row's (`crate::api`).

use crate::address::Owner;
use crate::money::Usdc;
use serde::Serialize;

use crate::error::ApiError;
use crate::identity::auth::api_key;
use crate::identity::auth::{Credential, Principal};
use crate::policy::{Policy, Scope};
use crate::ratelimit::spend::{Period, live_members};
use crate::store::keys::ApiKeyRecord;
use crate::store::{Page, Store};

/// Checks that `principal` may do what `scope` covers.
///
/// Errors: 403 `insufficient-scope` naming the scope, for a key issued without it.
pub fn require(principal: &Principal, scope: Scope) -> Result<(), ApiError> {
    match &principal.credential {
        Credential::Session { .. } => Ok(()),
        Credential::ApiKey { scopes, .. } if scopes.contains(&scope) => Ok(()),
        Credential::ApiKey { .. } => Err(ApiError::InsufficientScope(scope.as_str().into())),
    }
}

/// What `POST /api/keys/generate` takes: a `name` (1-64 characters), an optional `expiresAt`
/// (RFC 3339, in the future; stored in UTC) and optional `scopes` (a non-empty subset of `read`,
/// `provision`, `act`, `delete`, `renew`, `pay`, `webhooks`; when left out, all but `webhooks`,
/// which is only ever granted by name).
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GenerateKeyRequest {
    /// A name for the key.
    pub name: String,
    /// When the key stops working, RFC 3339.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// What the key may do (default: everything but `webhooks`).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// What the key may provision (default: no limit).
    #[serde(default)]
    pub policy: Option<Policy>,
}

/// A key just issued: shown this once, with its record's fields.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    /// Record id (`key_…`).
    pub id: String,
    /// Name.
    pub name: String,
    /// The key itself (`svc_` + 48 hex): store it now, it cannot be shown again.
    pub key: String,
    /// Display prefix (`svc_1a2b3c4d`).
    pub prefix: String,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339 or `null`.
    pub expires_at: Option<crate::time::Timestamp>,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// What the key may provision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

/// Issues a key for `owner` at `now` (the web app's route and the operator CLI alike).
///
/// Errors: 400 naming `name` (empty, over 64 characters, control characters), `expiresAt` (not
/// RFC 3339, or not in the future) or `scopes[i]` (unknown, repeated) / `scopes` (empty); 409
/// when the owner holds `cap` unrevoked keys (`MAX_KEYS_PER_OWNER`); 500 when the store fails.
pub async fn generate(
    store: &impl crate::state::StoreHandle,
    owner: &Owner,
    request: GenerateKeyRequest,
    cap: u32,
    now: time::OffsetDateTime,
) -> Result<IssuedKey, ApiError> {
    let store = store.store(crate::state::Sealed::key());
    let name = crate::validate::name("name", &request.name)?;
    let expires_at = match request.expires_at.as_deref() {
        None => None,
        Some(at) => {
            let at: crate::time::Timestamp = at
                .parse()
                .map_err(|_| ApiError::invalid("expiresAt", "must be an RFC 3339 time"))?;
            if at.datetime() <= now {
                return Err(ApiError::invalid("expiresAt", "must be in the future"));
            }
            Some(at)
        }
    };
    let scopes = match request.scopes {
        None => None,
        Some(names) => Some(parse_scopes(&names)?),
    };
    if let Some(policy) = &request.policy {
        crate::ratelimit::spend::validate_policy(policy)?;
    }
    let scopes = scopes.map(|s| s.iter().map(|s| s.as_str().to_owned()).collect());
    let new = api_key::NewKey {
        name,
        issued_at: crate::time::Timestamp::of(now),
        expires_at,
        scopes,
        policy: request.policy,
    };
    let (key, record) = api_key::issue(store, owner, new, Some(cap)).await?;
    Ok(IssuedKey {
        id: record.id.clone(),
        name: record.name.clone(),
        key: key.expose().to_owned(),
        prefix: record.prefix.clone(),
        created_at: record.created_at,
        expires_at: record.expires_at,
        scopes: record.scopes(),
        policy: record.policy.clone(),
    })
}

fn parse_scopes(names: &[String]) -> Result<Vec<Scope>, ApiError> {
    if names.is_empty() {
        return Err(ApiError::invalid(
            "scopes",
            "must name at least one scope (or be left out for all)",
        ));
    }
    let mut scopes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let scope = Scope::parse(name).ok_or_else(|| {
            ApiError::invalid(
                format!("scopes[{i}]"),
                "is not a scope: read, provision, act, delete, renew or pay",
            )
        })?;
        if scopes.contains(&scope) {
            return Err(ApiError::invalid(format!("scopes[{i}]"), "is repeated"));
        }
        scopes.push(scope);
    }
    scopes.sort();
    Ok(scopes)
}

/// A key as its owner sees it in listings: never the key or its hash.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyView {
    /// Record id (`key_…`).
    pub id: String,
    /// Name.
    pub name: String,
    /// Display prefix (`svc_1a2b3c4d`).
    pub prefix: String,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339 or `null`.
    pub last_used_at: Option<crate::time::Timestamp>,
    /// RFC 3339 or `null`.
    pub expires_at: Option<crate::time::Timestamp>,
    /// RFC 3339 or `null`.
    pub revoked_at: Option<crate::time::Timestamp>,
    /// `active`, `revoked` or `expired`.
    pub status: &'static str,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// What the key may provision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// What the key has used.
    pub usage: KeyUsage,
}

/// What a key has used, now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsage {
    /// USD its payments reserved this UTC day (new servers and renewals; given back when a
    /// payment ends uncharged).
    #[schema(value_type = f64)]
    pub spent_today: Usdc,
    /// USD its payments reserved this UTC month.
    #[schema(value_type = f64)]
    pub spent_this_month: Usdc,
    /// Servers it provisioned that exist or are being provisioned.
    pub active_servers: u32,
}

impl KeyView {
    /// The view of `record`, with its `usage`, at time `now`.
    pub fn of(record: &ApiKeyRecord, usage: KeyUsage, now: time::OffsetDateTime) -> Self {
        KeyView {
            id: record.id.clone(),
            name: record.name.clone(),
            prefix: record.prefix.clone(),
            created_at: record.created_at,
            last_used_at: record.last_used_at,
            expires_at: record.expires_at,
            revoked_at: record.revoked_at,
            status: record.status(now),
            scopes: record.scopes(),
            policy: record.policy.clone(),
            usage,
        }
    }
}

/// The views of `records`, with their usage at `now` (batch reads: the keys' counters, then
/// the sandboxes of the servers they count).
async fn views(
    store: &Store,
    records: &[ApiKeyRecord],
    now: time::OffsetDateTime,
) -> Result<Vec<KeyView>, ApiError> {
    let period = Period::of(now);
    let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let usages = store.usages(&ids, &period.day, &period.month).await?;
    let members: Vec<String> = usages.values().flat_map(|u| u.servers.clone()).collect();
    let live = live_members(store, &members, now.unix_timestamp()).await?;
    Ok(records
        .iter()
        .map(|record| {
            let usage = usages.get(&record.id).cloned().unwrap_or_default();
            let usage = KeyUsage {
                spent_today: Usdc::from_atomic(usage.spent_today),
                spent_this_month: Usdc::from_atomic(usage.spent_month),
                active_servers: usage.servers.iter().filter(|m| live.contains(m)).count() as u32,
            };
            KeyView::of(record, usage, now)
        })
        .collect())
}

/// One page of `owner`'s keys, newest first (`limit` 1-100, default 50; `cursor`), each
/// key's status as of `now`.
///
/// Errors: 400 (`limit`, `cursor`); 500 when the store fails.
pub async fn list(
    store: &impl crate::state::StoreHandle,
    owner: &Owner,
    page: &crate::page::PageRequest,
    now: time::OffsetDateTime,
) -> Result<Page<KeyView>, ApiError> {
    let store = store.store(crate::state::Sealed::key());
    let page = store.api_keys_of(owner, page.limit, page.cursor()).await?;
    Ok(Page {
        items: views(store, &page.items, now).await?,
        next_cursor: page.next_cursor,
    })
}

/// The body of `PATCH /api/keys/{id}`: `{"policy": {…}}` replaces the key's policy,
/// `{"policy": null}` removes it.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyChange {
    /// The new policy, or `null` for none.
    pub policy: Option<Policy>,
}

/// Changes `owner`'s key `id` (its policy); the key as it is at `now`.
///
/// Errors: 400 malformed id or policy (named as at generation); 404 no such key of the owner;
/// 409 a revoked key; 500 when the store fails.
pub async fn change(
    store: &impl crate::state::StoreHandle,
    owner: &Owner,
    id: &str,
    change: KeyChange,
    now: time::OffsetDateTime,
) -> Result<KeyView, ApiError> {
    let store = store.store(crate::state::Sealed::key());
    crate::ids::parse(crate::ids::API_KEY, "id", id)?;
    if let Some(policy) = &change.policy {
        crate::ratelimit::spend::validate_policy(policy)?;
    }
    let not_found = || ApiError::NotFound(format!("no key {id}"));
    let record = store
        .api_key_by_id(id)
        .await?
        .filter(|k| &k.owner == owner)
        .ok_or_else(not_found)?;
    if record.revoked_at.is_some() {
        return Err(ApiError::Conflict(format!("key {id} is revoked")));
    }
    let record = store
        .set_api_key_policy(&record.key_hash, owner, change.policy.as_ref())
        .await
        .map_err(|e| match e {
            crate::store::StoreError::ConditionFailed => not_found(),
            other => other.into(),
        })?;
    one_view(store, record, now).await
}

async fn one_view(
    store: &Store,
    record: ApiKeyRecord,
    now: time::OffsetDateTime,
) -> Result<KeyView, ApiError> {
    let mut views = views(store, std::slice::from_ref(&record), now).await?;
    views
        .pop()
        .ok_or_else(|| ApiError::Internal("a key without a view".into()))
}

/// Revokes `owner`'s key `id` at `now` and deactivates its agents in the same transaction;
/// idempotent.
///
/// Errors: 400 malformed id; 404 no such key of the owner; 500 when the store fails.
pub async fn revoke(
    store: &impl crate::state::StoreHandle,
    owner: &Owner,
    id: &str,
    now: time::OffsetDateTime,
) -> Result<KeyView, ApiError> {
    let store = store.store(crate::state::Sealed::key());
    crate::ids::parse(crate::ids::API_KEY, "id", id)?;
    let record = store
        .revoke_api_key(owner, id, crate::time::Timestamp::of(now))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no key {id}")))?;
    one_view(store, record, now).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_named_once_each_and_known() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_scopes(&names(&["read", "pay"])).unwrap(),
            [Scope::Read, Scope::Pay]
        );
        assert!(parse_scopes(&names(&[])).is_err());
        assert!(parse_scopes(&names(&["read", "admin"])).is_err());
    }
}
