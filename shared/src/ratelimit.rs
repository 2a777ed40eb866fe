//! Request rate limits (the key-policies issue, point 3; the limits issue, point 3). Each limit
//! is a fixed window of `burst / rate` seconds holding at most `burst` requests (`RateLimit` of
//! [`crate::config`]), counted in DynamoDB (one atomic `ADD` per request on an item that expires
//! with its window), so every function instance sees the same count:
//!
//! | policy | subject | counts |
//! |---|---|---|
//! | `caller` | API key or session | every authenticated request |
//! | `owner` | wallet address | every authenticated request, over all of its keys and sessions |
//! | `address` | source address | every request to an authenticated route, before the credential is read |
//! | `failed-auth` | source address | failed authentications; over it, the address is refused until the window ends |
//! | `sign-in` | source address | `GET /api/auth/nonce`, `POST /api/auth/verify` |
//!
//! Over a limit: 429 `rate-limited` with `Retry-After` (the seconds left in the window) and the
//! IETF `RateLimit-Policy` / `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers:
//! `"<name>";q=<quota>;w=<window>` and `"<name>";r=<remaining>;t=<seconds to reset>`). API
//! Gateway's route throttling in the template is the outer wall.
//!
//! A store failure lets a request through uncounted (logged): the limit protects the service, it
//! must not become the reason reads fail. Writes of money refuse an uncounted request
//! ([`require_counted`]): a broken counter must not open the paid path to a flood.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::RateLimit;
use crate::error::ApiError;
use crate::state::AppState;

/// A refusal's details, for the response headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    /// The policy's name (`caller`, `owner`, `address`, `failed-auth`, `sign-in`, `waits`).
    pub policy: &'static str,
    /// Requests per window (for `waits`: long polls at once).
    pub quota: u32,
    /// The window, seconds.
    pub window: u64,
    /// Seconds until the window ends.
    pub retry_after: u64,
}

impl Exceeded {
    /// `RateLimit-Policy`: `"<policy>";q=<quota>;w=<window>`.
    pub fn policy_header(&self) -> String {
        format!("\"{}\";q={};w={}", self.policy, self.quota, self.window)
    }

    /// `RateLimit`: `"<policy>";r=0;t=<seconds to reset>`.
    pub fn limit_header(&self) -> String {
        format!("\"{}\";r=0;t={}", self.policy, self.retry_after)
    }
}

/// One limit a request counts against.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    /// The policy's name (see the module table).
    pub policy: &'static str,
    /// The limit; `None` (turned off) counts nothing.
    pub limit: Option<RateLimit>,
    /// Whose window it is: a key id, a session hash, an owner or a source address.
    pub subject: &'a str,
}

/// The window of `limit` that holds unix time `now` (seconds): its start and end.
fn window(limit: RateLimit, now: f64) -> (u64, u64) {
    let length = limit.window_seconds();
    let start = (now as u64 / length) * length;
    (start, start + length)
}

/// Counts one request against every rule at once (the writes run concurrently) at unix time
/// `now` (seconds, fractional). Returns whether every count was made: `false` when the store
/// failed for one (the request goes through uncounted).
///
/// Errors: 429 [`ApiError::RateLimited`] naming the first rule, in `rules`' order, whose window
/// is over its quota.
pub async fn check_all(state: &AppState, rules: &[Rule<'_>], now: f64) -> Result<bool, ApiError> {
    let counts = futures::future::join_all(rules.iter().map(|rule| async move {
        let limit = rule.limit?;
        let (start, end) = window(limit, now);
        let key = format!("{}#{}", rule.policy, rule.subject);
        Some((
            limit,
            end,
            state.store.count_request(&key, start, end + 60).await,
        ))
    }))
    .await;
    let mut counted = true;
    for (rule, count) in rules.iter().zip(counts) {
        let Some((limit, end, count)) = count else {
            continue;
        };
        match count {
            Ok(count) if count > u64::from(limit.burst) => {
                return Err(exceeded(rule.policy, limit, end, now));
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, policy = rule.policy, "rate limit not counted");
                counted = false;
            }
        }
    }
    Ok(counted)
}

/// Counts one request of `subject` against `limit` ([`check_all`] of one rule).
///
/// Errors: 429 [`ApiError::RateLimited`] when the window's count is over the quota.
pub async fn check(
    state: &AppState,
    policy: &'static str,
    limit: Option<RateLimit>,
    subject: &str,
    now: f64,
) -> Result<(), ApiError> {
    let rule = Rule {
        policy,
        limit,
        subject,
    };
    check_all(state, &[rule], now).await.map(|_| ())
}

/// The 429 of `policy` whose window ends at `end`.
fn exceeded(policy: &'static str, limit: RateLimit, end: u64, now: f64) -> ApiError {
    ApiError::RateLimited(Box::new(Exceeded {
        policy,
        quota: limit.burst,
        window: limit.window_seconds(),
        retry_after: (end as f64 - now).ceil().max(1.0) as u64,
    }))
}

/// Refuses a write of money whose request the limiter could not count (`counted` false: the
/// counter's store failed): the paid path fails closed.
///
/// Errors: 503 [`ApiError::Busy`] (`Retry-After: 1`); nothing was charged.
pub fn require_counted(counted: bool) -> Result<(), ApiError> {
    if counted {
        return Ok(());
    }
    Err(ApiError::Busy {
        message: "the request could not be counted against its rate limits, so no payment \
                  is taken now; nothing was charged"
            .into(),
        retry_after: 1,
    })
}

/// Source addresses this instance has seen go over the failed-authentication limit, with the
/// end of their window (unix seconds): their requests are refused here without a store call
/// until then. Each instance learns a lockout from its own first failure after the shared count
/// went over, so across `n` warm instances at most `burst + n` failures get through a window.
#[derive(Debug, Default)]
pub struct Lockouts(Mutex<HashMap<String, u64>>);

/// Lockouts kept per instance before expired ones are dropped.
const LOCKOUTS_KEPT: usize = 4096;

impl Lockouts {
    fn until(&self, address: &str) -> Option<u64> {
        self.0.lock().ok()?.get(address).copied()
    }

    fn lock(&self, address: &str, end: u64, now: f64) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= LOCKOUTS_KEPT {
                map.retain(|_, until| (*until as f64) > now);
            }
            if map.len() < LOCKOUTS_KEPT {
                map.insert(address.to_owned(), end);
            }
        }
    }
}

/// Refuses `address` while this instance has it locked out at `now` (no store call).
///
/// Errors: 429 [`ApiError::RateLimited`] (`failed-auth`) until its window ends.
pub fn admit(state: &AppState, address: &str, now: f64) -> Result<(), ApiError> {
    let Some(limit) = state.config.rate_limits.failed_auth else {
        return Ok(());
    };
    match state.lockouts.until(address) {
        Some(end) if (end as f64) > now => Err(exceeded("failed-auth", limit, end, now)),
        _ => Ok(()),
    }
}

/// Counts a failed authentication from `address` at `now` and returns the answer to give: the
/// 401 `failure`, or 429 `failed-auth` once the address is over its limit (and locked out on
/// this instance until the window ends).
pub async fn failed(state: &AppState, address: &str, now: f64, failure: ApiError) -> ApiError {
    let Some(limit) = state.config.rate_limits.failed_auth else {
        return failure;
    };
    let (start, end) = window(limit, now);
    let key = format!("failed-auth#{address}");
    match state.store.count_request(&key, start, end + 60).await {
        Ok(count) if count > u64::from(limit.burst) => {
            state.lockouts.lock(address, end, now);
            exceeded("failed-auth", limit, end, now)
        }
        Ok(_) => failure,
        Err(err) => {
            tracing::warn!(error = %err, "failed authentication not counted");
            failure
        }
    }
}

/// The current unix time, seconds with a fraction.
pub fn now() -> f64 {
    let now = crate::time::now();
    now.unix_timestamp() as f64 + f64::from(now.nanosecond()) / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_the_ietf_draft() {
        let e = Exceeded {
            policy: "caller",
            quota: 50,
            window: 5,
            retry_after: 3,
        };
        assert_eq!(e.policy_header(), "\"caller\";q=50;w=5");
        assert_eq!(e.limit_header(), "\"caller\";r=0;t=3");
    }

    #[test]
    fn windows_are_burst_over_rate_seconds() {
        let limit = |per_second, burst| RateLimit { per_second, burst };
        assert_eq!(limit(10.0, 50).window_seconds(), 5);
        assert_eq!(limit(1.0, 20).window_seconds(), 20);
        assert_eq!(limit(100.0, 5).window_seconds(), 1);
        assert_eq!(window(limit(10.0, 50), 1_003.5), (1_000, 1_005));
    }

    #[test]
    fn uncounted_money_writes_are_refused() {
        assert!(require_counted(true).is_ok());
        assert!(matches!(
            require_counted(false),
            Err(ApiError::Busy { retry_after: 1, .. })
        ));
    }
}
