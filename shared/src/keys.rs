//! The rules about API keys, in one place: issuing one (name, expiry, scopes), listing and
//! revoking an owner's keys, and what a key may do — its scopes. The `keys` function and the
//! operator CLI call these; neither touches the store's key records directly.
//!
//! Scopes: `read` (every read: discovery, quotes, servers, sandboxes, payments, agents),
//! `provision` (create a server), `act` (server actions, sandbox records), `delete` (delete a
//! server), `renew` (buy more paid time) and `pay` (any request that is paid — a paid plan's
//! provisioning, every renewal — checked before the 402, so a key that cannot pay is never
//! offered a payment). A key is issued with all of them unless its owner names fewer; a session
//! (the owner) has all of them.

use serde::Serialize;

use crate::auth::api_key;
use crate::auth::{Credential, Principal};
use crate::error::ApiError;
use crate::store::keys::ApiKeyRecord;
use crate::store::{Page, Store};

/// What a key may do (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every read.
    Read,
    /// Creating a server.
    Provision,
    /// Server actions and sandbox records.
    Act,
    /// Deleting a server.
    Delete,
    /// Buying more paid time.
    Renew,
    /// Any paid request.
    Pay,
}

impl Scope {
    /// Every scope: what a key has unless its owner names fewer.
    pub const ALL: [Scope; 6] = [
        Scope::Read,
        Scope::Provision,
        Scope::Act,
        Scope::Delete,
        Scope::Renew,
        Scope::Pay,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Provision => "provision",
            Scope::Act => "act",
            Scope::Delete => "delete",
            Scope::Renew => "renew",
            Scope::Pay => "pay",
        }
    }

    /// The scope named `name`, if any.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The scopes of a stored key: its recorded list, or all of them for a key issued before keys
/// had scopes. Names the store does not know are ignored.
pub fn scopes_of(record: &ApiKeyRecord) -> Vec<Scope> {
    match &record.scopes {
        None => Scope::ALL.to_vec(),
        Some(names) => names.iter().filter_map(|n| Scope::parse(n)).collect(),
    }
}

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

/// A key's spending policy (optional; all fields optional): what the key may provision, checked
/// before any 402 (`check_policy`). `maxPricePerServer` is in USD (a new server's price for
/// its first paid period, the 402's amount); `allowedPlans` and `allowedRegions` are provider
/// slugs (1 to 50 each).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    /// The most one new server may cost, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_per_server: Option<f64>,
    /// The plans the key may provision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_plans: Option<Vec<String>>,
    /// The regions the key may provision in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_regions: Option<Vec<String>>,
}

/// Checks a policy as its owner gives it.
///
/// Errors: 400 naming `policy.maxPricePerServer` (not a positive number), `policy.allowedPlans`
/// / `policy.allowedRegions` (empty or over 50) or one of their entries (not a slug).
fn validate_policy(policy: &Policy) -> Result<(), ApiError> {
    if let Some(max) = policy.max_price_per_server
        && !(max.is_finite() && max > 0.0)
    {
        return Err(ApiError::invalid(
            "policy.maxPricePerServer",
            "must be a positive number of USD",
        ));
    }
    for (name, list) in [
        ("allowedPlans", &policy.allowed_plans),
        ("allowedRegions", &policy.allowed_regions),
    ] {
        let Some(list) = list else { continue };
        if list.is_empty() || list.len() > 50 {
            return Err(ApiError::invalid(
                format!("policy.{name}"),
                "must list 1 to 50 slugs (or be left out)",
            ));
        }
        for (i, slug) in list.iter().enumerate() {
            crate::validate::slug(&format!("policy.{name}[{i}]"), slug)?;
        }
    }
    Ok(())
}

/// Checks a new server against the caller's key policy: its plan, its region, and its price
/// (`quote`, the first period). A session (the owner) has no policy.
///
/// Errors: 403 `policy-violation` naming the limit, and what it allows.
pub fn check_policy(
    principal: &Principal,
    plan: &str,
    region: &str,
    quote: &crate::pricing::Quote,
) -> Result<(), ApiError> {
    let Credential::ApiKey {
        policy: Some(policy),
        ..
    } = &principal.credential
    else {
        return Ok(());
    };
    let violation = |limit: &str, message: String| {
        Err(ApiError::PolicyViolation {
            limit: limit.to_owned(),
            message,
        })
    };
    if let Some(plans) = &policy.allowed_plans
        && !plans.iter().any(|p| p == plan)
    {
        return violation(
            "allowedPlans",
            format!(
                "plan `{plan}` is not one this key may provision: {}",
                plans.join(", ")
            ),
        );
    }
    if let Some(regions) = &policy.allowed_regions
        && !regions.iter().any(|r| r == region)
    {
        return violation(
            "allowedRegions",
            format!(
                "region `{region}` is not one this key may provision in: {}",
                regions.join(", ")
            ),
        );
    }
    if let Some(max) = policy.max_price_per_server {
        let cost: f64 = quote.cost_usd.try_into().unwrap_or(f64::INFINITY);
        if cost > max {
            return violation(
                "maxPricePerServer",
                format!(
                    "this server costs {cost} USD; this key may spend at most {max} USD on one"
                ),
            );
        }
    }
    Ok(())
}

/// What `POST /api/keys/generate` takes: a `name` (1-64 characters), an optional `expiresAt`
/// (RFC 3339, in the future; stored in UTC) and optional `scopes` (a non-empty subset of `read`,
/// `provision`, `act`, `delete`, `renew`, `pay`; all when left out).
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GenerateKeyRequest {
    /// A name for the key.
    pub name: String,
    /// When the key stops working, RFC 3339.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// What the key may do (default: everything).
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
    pub created_at: String,
    /// RFC 3339 or `null`.
    pub expires_at: Option<String>,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// What the key may provision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

/// Issues a key for `owner` (the web app's route and the operator CLI alike).
///
/// Errors: 400 naming `name` (empty, over 64 characters, control characters), `expiresAt` (not
/// RFC 3339, or not in the future) or `scopes[i]` (unknown, repeated) / `scopes` (empty); 500
/// when the store fails.
pub async fn generate(
    store: &Store,
    owner: &str,
    request: GenerateKeyRequest,
) -> Result<IssuedKey, ApiError> {
    let name = crate::validate::name("name", &request.name)?;
    let now = crate::time::now();
    let expires_at = match request.expires_at.as_deref() {
        None => None,
        Some(at) => {
            let at = crate::time::parse_rfc3339(at)
                .ok_or_else(|| ApiError::invalid("expiresAt", "must be an RFC 3339 time"))?;
            if at <= now {
                return Err(ApiError::invalid("expiresAt", "must be in the future"));
            }
            Some(crate::time::rfc3339(at))
        }
    };
    let scopes = match request.scopes {
        None => None,
        Some(names) => Some(parse_scopes(&names)?),
    };
    if let Some(policy) = &request.policy {
        validate_policy(policy)?;
    }
    let scopes = scopes.map(|s| s.iter().map(|s| s.as_str().to_owned()).collect());
    let (key, record) =
        api_key::issue(store, owner, name, expires_at, scopes, request.policy).await?;
    Ok(IssuedKey {
        id: record.id.clone(),
        name: record.name.clone(),
        key: key.expose().to_owned(),
        prefix: record.prefix.clone(),
        created_at: record.created_at.clone(),
        expires_at: record.expires_at.clone(),
        scopes: scopes_of(&record),
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
    pub created_at: String,
    /// RFC 3339 or `null`.
    pub last_used_at: Option<String>,
    /// RFC 3339 or `null`.
    pub expires_at: Option<String>,
    /// RFC 3339 or `null`.
    pub revoked_at: Option<String>,
    /// `active`, `revoked` or `expired`.
    pub status: &'static str,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// What the key may provision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

impl KeyView {
    /// The view of `record` at time `now`.
    pub fn of(record: &ApiKeyRecord, now: time::OffsetDateTime) -> Self {
        KeyView {
            id: record.id.clone(),
            name: record.name.clone(),
            prefix: record.prefix.clone(),
            created_at: record.created_at.clone(),
            last_used_at: record.last_used_at.clone(),
            expires_at: record.expires_at.clone(),
            revoked_at: record.revoked_at.clone(),
            status: record.status(now),
            scopes: scopes_of(record),
            policy: record.policy.clone(),
        }
    }
}

/// One page of `owner`'s keys, newest first (`limit` 1-100, default 50; `cursor`).
///
/// Errors: 400 (`limit`, `cursor`); 500 when the store fails.
pub async fn list(
    store: &Store,
    owner: &str,
    limit: Option<&str>,
    cursor: Option<&str>,
) -> Result<Page<KeyView>, ApiError> {
    let limit = crate::sandboxes::page_limit(limit)?;
    let page = store.api_keys_of(owner, limit, cursor).await?;
    let now = crate::time::now();
    Ok(Page {
        items: page.items.iter().map(|k| KeyView::of(k, now)).collect(),
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

/// Changes `owner`'s key `id` (its policy); the key as it now is.
///
/// Errors: 400 malformed id or policy (named as at generation); 404 no such key of the owner;
/// 409 a revoked key; 500 when the store fails.
pub async fn change(
    store: &Store,
    owner: &str,
    id: &str,
    change: KeyChange,
) -> Result<KeyView, ApiError> {
    crate::ids::parse(crate::ids::API_KEY, "id", id)?;
    if let Some(policy) = &change.policy {
        validate_policy(policy)?;
    }
    let not_found = || ApiError::NotFound(format!("no key {id}"));
    let record = store
        .api_key_by_id(id)
        .await?
        .filter(|k| k.owner == owner)
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
    Ok(KeyView::of(&record, crate::time::now()))
}

/// Revokes `owner`'s key `id` and deactivates its agents in the same transaction; idempotent.
///
/// Errors: 400 malformed id; 404 no such key of the owner; 500 when the store fails.
pub async fn revoke(store: &Store, owner: &str, id: &str) -> Result<KeyView, ApiError> {
    crate::ids::parse(crate::ids::API_KEY, "id", id)?;
    let now = crate::time::now();
    let record = store
        .revoke_api_key(owner, id, &crate::time::rfc3339(now))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no key {id}")))?;
    Ok(KeyView::of(&record, now))
}
