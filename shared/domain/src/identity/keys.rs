//! The rules about API keys, in one place: issuing one (name, expiry, scopes, policy), listing
//! (with each key's usage), changing and revoking an owner's keys, what a key may do — its
//! scopes — and what it may spend — its policy. The `keys` function, the paid path and the
//! operator CLI call these; none touches the store's key records directly.
//!
//! Scopes: `read` (every read: discovery, quotes, servers, sandboxes, payments, agents),
//! `provision` (create a server), `act` (server actions, sandbox records), `delete` (delete a
//! server), `renew` (buy more paid time) and `pay` (any request that is paid — a paid plan's
//! provisioning, every renewal — checked before the 402, so a key that cannot pay is never
//! offered a payment). A key is issued with all of them unless its owner names fewer; a session
//! (the owner) has all of them.
//!
//! Policy ([`Policy`]): what one new server may cost, what a key may spend per UTC day and
//! month (new servers and renewals alike), which plans and regions, how many servers at once.
//! [`check_policy`] refuses before any 402 (403 `policy-violation` naming the limit and what
//! remains); the spend and the new server are then reserved in the transaction that claims the
//! payment ([`reservation`]), conditional on the limits, so two concurrent requests cannot both
//! pass a limit that fits one; a payment that ends without a charge (refused, expired, refunded)
//! gives its spend back in the transaction that ends it. A server counts from its order until
//! it is terminated, fails, or its order ends undelivered.

use crate::address::Owner;
use crate::money::Usdc;
use serde::Serialize;

use crate::error::ApiError;
use crate::identity::auth::api_key;
use crate::identity::auth::{Credential, Principal};
use crate::policy::{Policy, Scope};
use crate::store::keys::ApiKeyRecord;
use crate::store::usage::{Reservation, ServerSlot, SpendHold};
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

/// The most any USD limit of a policy may be: 1,000,000 USD.
const MAX_LIMIT: Usdc = Usdc::from_atomic(1_000_000 * crate::money::UNITS_PER_USDC);

/// Checks a policy as its owner gives it.
///
/// Errors: 400 naming `policy.maxPricePerServer`, `policy.dailySpendLimit` or
/// `policy.monthlySpendLimit` (not 0.000001 to 1,000,000 USD), `policy.maxActiveServers` (not 1
/// to 1000), `policy.allowedPlans` / `policy.allowedRegions` (empty or over 50) or one of their
/// entries (not a slug).
fn validate_policy(policy: &Policy) -> Result<(), ApiError> {
    for (name, value) in [
        ("maxPricePerServer", policy.max_price_per_server),
        ("dailySpendLimit", policy.daily_spend_limit),
        ("monthlySpendLimit", policy.monthly_spend_limit),
    ] {
        if let Some(value) = value
            && !(Usdc::from_atomic(1)..=MAX_LIMIT).contains(&value)
        {
            return Err(ApiError::invalid(
                format!("policy.{name}"),
                "must be a number of USD from 0.000001 to 1000000",
            ));
        }
    }
    if let Some(max) = policy.max_active_servers
        && !(1..=1000).contains(&max)
    {
        return Err(ApiError::invalid(
            "policy.maxActiveServers",
            "must be 1 to 1000",
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

/// The key and policy of `principal`, if it is a key with a policy.
fn policy_of(principal: &Principal) -> Option<(&str, &Policy)> {
    match &principal.credential {
        Credential::ApiKey {
            key_id,
            policy: Some(policy),
            ..
        } => Some((key_id, policy)),
        _ => None,
    }
}

fn violation(limit: &str, remaining: Option<f64>, message: String) -> ApiError {
    ApiError::PolicyViolation {
        limit: limit.to_owned(),
        remaining,
        message,
        approval: None,
    }
}

/// Checks a new server or a renewal against the caller's key policy, before any 402: the
/// server's plan, its region and the price of one period (`quote`'s). A session (the owner)
/// has no policy; a request its owner approved passes it (`crate::identity::approvals`).
///
/// Errors: 403 `policy-violation` naming the limit and what it allows.
pub fn check_policy(
    principal: &Principal,
    plan: &str,
    region: &str,
    quote: &crate::pricing::Quote,
) -> Result<(), ApiError> {
    if principal.approval.is_some() {
        return Ok(());
    }
    match policy_of(principal) {
        Some((_, policy)) => check_server(policy, plan, region, quote),
        None => Ok(()),
    }
}

/// Checks a payment of `amount` (USDC atomic units; for a new server when `new_server`)
/// against the caller's key usage, before any 402: the spend left today and this month, and
/// the servers the key holds. For a new server the key's servers that ended are dropped from
/// its count on the way (whatever its policy: the count stays small). A session has no limits;
/// a request its owner approved passes them (its spend is still reserved with its claim).
///
/// Errors: 403 `policy-violation` naming the limit and what remains of it; the store's.
pub async fn check_spend(
    store: &Store,
    principal: &Principal,
    amount: u128,
    new_server: bool,
    now: time::OffsetDateTime,
) -> Result<(), ApiError> {
    let Credential::ApiKey { key_id, policy, .. } = &principal.credential else {
        return Ok(());
    };
    if principal.approval.is_some() {
        return Ok(());
    }
    let none = Policy::default();
    let policy = policy.as_ref().unwrap_or(&none);
    if !new_server && policy.daily_spend_limit.is_none() && policy.monthly_spend_limit.is_none() {
        return Ok(());
    }
    // Boxed: the store's reads are large futures, and the paid path nests this one.
    Box::pin(check_usage(store, key_id, policy, amount, new_server, now)).await
}

fn check_server(
    policy: &Policy,
    plan: &str,
    region: &str,
    quote: &crate::pricing::Quote,
) -> Result<(), ApiError> {
    if let Some(plans) = &policy.allowed_plans
        && !plans.iter().any(|p| p == plan)
    {
        return Err(violation(
            "allowedPlans",
            None,
            format!(
                "plan `{plan}` is not one this key may provision: {}",
                plans.join(", ")
            ),
        ));
    }
    if let Some(regions) = &policy.allowed_regions
        && !regions.iter().any(|r| r == region)
    {
        return Err(violation(
            "allowedRegions",
            None,
            format!(
                "region `{region}` is not one this key may provision in: {}",
                regions.join(", ")
            ),
        ));
    }
    if let Some(max) = policy.max_price_per_server {
        // One period: a new server's first, or each period a renewal buys.
        let cost = Usdc::from_atomic(crate::pricing::usdc_atomic(quote.period.usd));
        if cost > max {
            return Err(violation(
                "maxPricePerServer",
                Some(max.usd_f64()),
                format!(
                    "a period of this server costs {cost} USD; this key may spend at most {max} \
                    USD on one"
                ),
            ));
        }
    }
    Ok(())
}

/// The spend limits and the server count of `policy` against key `key_id`'s usage at `now`,
/// for a purchase of `amount` USDC atomic units (of a new server when `new_server`).
async fn check_usage(
    store: &Store,
    key_id: &str,
    policy: &Policy,
    amount: u128,
    new_server: bool,
    now: time::OffsetDateTime,
) -> Result<(), ApiError> {
    let period = Period::of(now);
    let usage = store
        .usages(&[key_id], &period.day, &period.month)
        .await?
        .remove(key_id)
        .unwrap_or_default();
    for (limit, spent, name, per) in [
        (
            policy.daily_spend_limit,
            usage.spent_today,
            "dailySpendLimit",
            format!("UTC day {}", period.day),
        ),
        (
            policy.monthly_spend_limit,
            usage.spent_month,
            "monthlySpendLimit",
            format!("UTC month {}", period.month),
        ),
    ] {
        let Some(limit) = limit else { continue };
        let left = limit.saturating_sub(Usdc::from_atomic(spent));
        let amount = Usdc::from_atomic(amount);
        if amount > left {
            return Err(violation(
                name,
                Some(left.usd_f64()),
                format!(
                    "this costs {amount} USD; this key has {left} USD left of its {limit} USD \
                    limit for the {per}"
                ),
            ));
        }
    }
    if !new_server {
        return Ok(());
    }
    // Dropping ended servers needs their records: read them when the count matters, or when
    // the set has grown.
    if policy.max_active_servers.is_none() && usage.servers.len() < PRUNE_AT {
        return Ok(());
    }
    let live = live_members(store, &usage.servers, now.unix_timestamp()).await?;
    let ended: Vec<String> = usage
        .servers
        .iter()
        .filter(|m| !live.contains(m))
        .cloned()
        .collect();
    store.drop_servers(key_id, &ended).await?;
    if let Some(max) = policy.max_active_servers
        && live.len() >= max as usize
    {
        return Err(violation(
            "maxActiveServers",
            Some(0.0),
            format!(
                "this key holds {} servers, its limit of {max}; delete one (or wait for one \
                to end) first",
                live.len()
            ),
        ));
    }
    Ok(())
}

/// How long a server counted before its record exists (a free server being created) counts
/// without one, seconds.
const HOLD_GRACE: i64 = 600;

/// A key's servers set this large is pruned on its next new server even without a
/// `maxActiveServers` (so the set, and the listing's reads, stay small).
const PRUNE_AT: usize = 32;

/// The members of servers sets (`<sandbox id>@<epoch seconds>`) whose server has not ended at
/// `now` (epoch seconds): its sandbox is [`crate::servers::stages::live`], or it has no sandbox yet and
/// was added less than [`HOLD_GRACE`] ago.
async fn live_members(
    store: &Store,
    members: &[String],
    now: i64,
) -> Result<Vec<String>, ApiError> {
    let parsed: Vec<(&String, &str, i64)> = members
        .iter()
        .filter_map(|m| {
            let (id, at) = m.split_once('@')?;
            Some((m, id, at.parse().ok()?))
        })
        .collect();
    let ids: Vec<&str> = parsed.iter().map(|(_, id, _)| *id).collect();
    let records = store.sandboxes(&ids).await?;
    Ok(parsed
        .into_iter()
        .filter(|(_, id, at)| match records.iter().find(|r| r.id == *id) {
            Some(record) => crate::servers::stages::live(record),
            None => now - at < HOLD_GRACE,
        })
        .map(|(m, _, _)| m.clone())
        .collect())
}

/// The UTC day and month a time falls in, as usage counts them.
struct Period {
    /// `yyyy-mm-dd`.
    day: String,
    /// `yyyy-mm`.
    month: String,
    /// A day after the day ends, epoch seconds (its counter's TTL).
    day_expires: i64,
    /// A day after the month ends, epoch seconds.
    month_expires: i64,
}

impl Period {
    fn of(now: time::OffsetDateTime) -> Self {
        let now = now.to_offset(time::UtcOffset::UTC);
        let date = now.date();
        let midnight = |d: time::Date| d.midnight().assume_utc().unix_timestamp();
        let next_day = date.next_day().unwrap_or(date);
        let (year, month) = match date.month() {
            time::Month::December => (date.year() + 1, time::Month::January),
            m => (date.year(), m.next()),
        };
        let next_month = time::Date::from_calendar_date(year, month, 1).unwrap_or(next_day);
        Period {
            day: format!(
                "{:04}-{:02}-{:02}",
                date.year(),
                date.month() as u8,
                date.day()
            ),
            month: format!("{:04}-{:02}", date.year(), date.month() as u8),
            day_expires: midnight(next_day) + 86_400,
            month_expires: midnight(next_month) + 86_400,
        }
    }
}

/// What a paid request of `principal` reserves with its claim: `amount` (USDC atomic units; 0
/// for a credit redeemed) against the key's daily and monthly spend, and its new server
/// (`new_sandbox`) against its server count; conditional on the key's limits — but for a request
/// its owner approved, which is counted without them. `None` for a session, or when nothing is
/// reserved.
///
/// Errors: 403 `policy-violation` when `amount` alone is over a spend limit.
pub fn reservation(
    principal: &Principal,
    amount: u128,
    new_sandbox: Option<&str>,
    now: time::OffsetDateTime,
) -> Result<Option<Reservation>, ApiError> {
    let Credential::ApiKey { key_id, policy, .. } = &principal.credential else {
        return Ok(None);
    };
    if amount == 0 && new_sandbox.is_none() {
        return Ok(None);
    }
    // An approved request is counted, not limited.
    let policy = policy.as_ref().filter(|_| principal.approval.is_none());
    let limit = |f: fn(&Policy) -> Option<Usdc>| policy.and_then(f).map(Usdc::atomic);
    let daily_limit = limit(|p| p.daily_spend_limit);
    let monthly_limit = limit(|p| p.monthly_spend_limit);
    for (name, limit) in [
        ("dailySpendLimit", daily_limit),
        ("monthlySpendLimit", monthly_limit),
    ] {
        if let Some(limit) = limit
            && amount > limit
        {
            return Err(violation(
                name,
                Some(Usdc::from_atomic(limit).usd_f64()),
                format!(
                    "this costs {} USD, over the key's limit",
                    Usdc::from_atomic(amount)
                ),
            ));
        }
    }
    let period = Period::of(now);
    Ok(Some(Reservation {
        hold: SpendHold {
            key_id: key_id.clone(),
            day: period.day,
            month: period.month,
        },
        amount,
        daily_limit,
        monthly_limit,
        day_expires: period.day_expires,
        month_expires: period.month_expires,
        server: new_sandbox.map(|id| server_slot(policy, id, now)),
    }))
}

fn server_slot(policy: Option<&Policy>, sandbox_id: &str, now: time::OffsetDateTime) -> ServerSlot {
    ServerSlot {
        member: format!("{sandbox_id}@{}", now.unix_timestamp()),
        max: policy.and_then(|p| p.max_active_servers),
    }
}

/// Why a reservation failed its condition after [`check_policy`] passed (a concurrent request
/// of the same key used what was left): the limit that now refuses `amount` (of a new server
/// when `new_server`), or, when none does any more, 409 to retry.
pub async fn over_limit(
    store: &Store,
    principal: &Principal,
    amount: u128,
    new_server: bool,
    now: time::OffsetDateTime,
) -> ApiError {
    match Box::pin(check_spend(store, principal, amount, new_server, now)).await {
        Err(err) => err,
        Ok(()) => ApiError::Conflict("a concurrent request changed this key's usage; retry".into()),
    }
}

/// Counts a free server (created before it is recorded) against `principal`'s key: the member
/// to give back with [`release_server`] if its create fails; `None` for a session.
///
/// Errors: 403 `policy-violation` (`maxActiveServers`) when the key holds its limit; the
/// store's.
pub async fn hold_server(
    store: &Store,
    principal: &Principal,
    sandbox_id: &str,
    now: time::OffsetDateTime,
) -> Result<Option<(String, String)>, ApiError> {
    let Credential::ApiKey { key_id, policy, .. } = &principal.credential else {
        return Ok(None);
    };
    Box::pin(check_spend(store, principal, 0, true, now)).await?;
    let slot = server_slot(policy.as_ref(), sandbox_id, now);
    if !Box::pin(store.hold_server(key_id, &slot)).await? {
        return Err(over_limit(store, principal, 0, true, now).await);
    }
    Ok(Some((key_id.clone(), slot.member)))
}

/// Gives back a server counted by [`hold_server`] whose create failed (best effort: an
/// unrecorded member stops counting after ten minutes anyway).
pub async fn release_server(store: &Store, held: Option<(String, String)>) {
    let Some((key_id, member)) = held else { return };
    if let Err(err) = store.drop_servers(&key_id, &[member]).await {
        tracing::warn!(key = key_id, error = %err, "could not give back a server slot");
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
        validate_policy(policy)?;
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
        validate_policy(policy)?;
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
    use crate::identity::auth::Credential;

    fn key(policy: Option<Policy>) -> Principal {
        Principal {
            owner: crate::address::Owner::parse("0x1111111111111111111111111111111111111111")
                .unwrap(),
            credential: Credential::ApiKey {
                key_id: "key_1".into(),
                key_hash: "h".into(),
                scopes: Scope::ALL.to_vec(),
                policy,
            },
            counted: crate::ratelimit::Tally::settled(crate::ratelimit::Verdict::Counted),
            approval: None,
        }
    }

    fn at(rfc3339: &str) -> time::OffsetDateTime {
        crate::time::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn usage_periods_are_utc_days_and_months_and_expire_a_day_after() {
        let p = Period::of(at("2026-12-31T23:59:59Z"));
        assert_eq!(
            (p.day.as_str(), p.month.as_str()),
            ("2026-12-31", "2026-12")
        );
        assert_eq!(p.day_expires, at("2027-01-02T00:00:00Z").unix_timestamp());
        assert_eq!(p.month_expires, at("2027-01-02T00:00:00Z").unix_timestamp());
        // Another offset is the same instant: its UTC day counts.
        let p = Period::of(at("2026-03-01T01:00:00+02:00"));
        assert_eq!(
            (p.day.as_str(), p.month.as_str()),
            ("2026-02-28", "2026-02")
        );
        assert_eq!(p.month_expires, at("2026-03-02T00:00:00Z").unix_timestamp());
    }

    /// A 2.01 USD daily limit admits a 2.01 USDC purchase (the limit multiplied as a float was
    /// 2,009,999 units, and refused it).
    #[test]
    fn a_two_point_zero_one_limit_admits_a_two_point_zero_one_purchase() {
        let policy: Policy = serde_json::from_str(r#"{"dailySpendLimit": 2.01}"#).unwrap();
        let now = at("2026-11-25T10:00:00Z");
        let held = reservation(&key(Some(policy)), 2_010_000, None, now).unwrap();
        assert_eq!(held.unwrap().daily_limit, Some(2_010_000));
    }

    #[test]
    fn a_reservation_holds_what_a_key_spends_and_refuses_a_payment_over_its_limit() {
        let now = at("2026-11-25T10:00:00Z");
        let policy = Policy {
            daily_spend_limit: Some("5".parse().unwrap()),
            max_active_servers: Some(2),
            ..Policy::default()
        };
        let held = reservation(&key(Some(policy.clone())), 4_000_000, Some("sbx_1"), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            (held.amount, held.daily_limit, held.monthly_limit),
            (4_000_000, Some(5_000_000), None)
        );
        assert_eq!(held.hold.day, "2026-11-25");
        let slot = held.server.unwrap();
        assert_eq!(
            (slot.member.as_str(), slot.max),
            ("sbx_1@1795600800", Some(2))
        );
        match reservation(&key(Some(policy)), 5_000_001, None, now) {
            Err(ApiError::PolicyViolation {
                limit, remaining, ..
            }) => {
                assert_eq!((limit.as_str(), remaining), ("dailySpendLimit", Some(5.0)));
            }
            other => panic!("{other:?}"),
        }
        // Nothing to hold: a credit redeemed for no new server; a session holds nothing.
        assert!(reservation(&key(None), 0, None, now).unwrap().is_none());
        let session = Principal {
            credential: Credential::Session {
                token_hash: "h".into(),
                created_at: crate::time::Timestamp::EPOCH,
                expires_at: crate::time::Timestamp::EPOCH,
            },
            ..key(None)
        };
        assert!(
            reservation(&session, 9_000_000, Some("sbx_2"), now)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_policy_names_the_field_it_breaks() {
        let field = |policy: Policy| match validate_policy(&policy) {
            Err(ApiError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let f = field(Policy {
            max_price_per_server: Some(Usdc::ZERO),
            ..Policy::default()
        });
        assert_eq!(f, "policy.maxPricePerServer");
        let f = field(Policy {
            monthly_spend_limit: Some("1000000.000001".parse().unwrap()),
            ..Policy::default()
        });
        assert_eq!(f, "policy.monthlySpendLimit");
        let f = field(Policy {
            max_active_servers: Some(0),
            ..Policy::default()
        });
        assert_eq!(f, "policy.maxActiveServers");
        let f = field(Policy {
            allowed_plans: Some(vec![]),
            ..Policy::default()
        });
        assert_eq!(f, "policy.allowedPlans");
        let f = field(Policy {
            allowed_regions: Some(vec!["EU/x".into()]),
            ..Policy::default()
        });
        assert_eq!(f, "policy.allowedRegions[0]");
        assert!(
            validate_policy(&Policy {
                daily_spend_limit: Some("1000000".parse().unwrap()),
                ..Policy::default()
            })
            .is_ok()
        );
    }

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

    #[test]
    fn a_policy_refuses_a_plan_region_or_price_it_does_not_allow() {
        let policy = Policy {
            allowed_plans: Some(vec!["vps-1".into()]),
            allowed_regions: Some(vec!["eu".into()]),
            max_price_per_server: Some("10".parse().unwrap()),
            ..Policy::default()
        };
        let quote = |usd: &str| {
            let usd: rust_decimal::Decimal = usd.parse().unwrap();
            let part = crate::pricing::Part {
                hourly: usd,
                currency: "USD".into(),
                usd_rate: 1.into(),
                usd,
            };
            let period = crate::pricing::PeriodPrice {
                hours: 1.into(),
                plan_part: part,
                image_part: None,
                markup_percent: 0.into(),
                usd,
            };
            crate::pricing::Quote::new("vps-1", None, 1, period)
        };
        let limit = |plan: &str, region: &str, usd: &str| match check_policy(
            &key(Some(policy.clone())),
            plan,
            region,
            &quote(usd),
        ) {
            Ok(()) => "ok".to_owned(),
            Err(ApiError::PolicyViolation { limit, .. }) => limit,
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(limit("vps-1", "eu", "10"), "ok");
        assert_eq!(limit("vps-2", "eu", "1"), "allowedPlans");
        assert_eq!(limit("vps-1", "us", "1"), "allowedRegions");
        assert_eq!(limit("vps-1", "eu", "10.01"), "maxPricePerServer");
    }
}
