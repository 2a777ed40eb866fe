//! What a key may spend (the key-policies issue): its policy, checked and reserved — the spend
//! limits beside the request limits of [`crate::ratelimit`].
//!
//! Policy ([`Policy`]): what one new server may cost, what a key may spend per UTC day and
//! month (new servers and renewals alike), which plans and regions, how many servers at once.
//! [`check_policy`] refuses before any 402 (403 `policy-violation` naming the limit and what
//! remains); the spend and the new server are then reserved in the transaction that claims the
//! payment ([`reservation`]), conditional on the limits, so two concurrent requests cannot both
//! pass a limit that fits one; a payment that ends without a charge (refused, expired, refunded,
//! or reversed when its transfer is gone) gives its spend back in the transaction that ends it.
//! A server counts from its order until it is terminated, fails, or its order ends undelivered.

use crate::money::Usdc;

use crate::error::ApiError;
use crate::identity::auth::{Credential, Principal};
use crate::policy::Policy;
use crate::store::Store;
use crate::store::usage::{Reservation, ServerSlot, SpendHold};

/// The most any USD limit of a policy may be: 1,000,000 USD.
const MAX_LIMIT: Usdc = Usdc::from_atomic(1_000_000 * crate::money::UNITS_PER_USDC);

/// Checks a policy as its owner gives it.
///
/// Errors: 400 naming `policy.maxPricePerServer`, `policy.dailySpendLimit` or
/// `policy.monthlySpendLimit` (not 0.000001 to 1,000,000 USD), `policy.maxActiveServers` (not 1
/// to 1000), `policy.allowedPlans` / `policy.allowedRegions` (empty or over 50) or one of their
/// entries (not a slug).
pub(crate) fn validate_policy(policy: &Policy) -> Result<(), ApiError> {
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
pub(crate) async fn live_members(
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
pub(crate) struct Period {
    /// `yyyy-mm-dd`.
    pub(crate) day: String,
    /// `yyyy-mm`.
    pub(crate) month: String,
    /// A day after the day ends, epoch seconds (its counter's TTL).
    day_expires: i64,
    /// A day after the month ends, epoch seconds.
    month_expires: i64,
}

impl Period {
    /// The period `now` falls in.
    pub(crate) fn of(now: time::OffsetDateTime) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::auth::Credential;
    use crate::policy::Scope;

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
