//! Request rate limits: per API key or session on every authenticated route, and per source
//! address on the sign-in routes (nonce, verify), each a fixed window of `burst / rate` seconds
//! holding at most `burst` requests (`RateLimit` of [`crate::config`]). Counters live in DynamoDB
//! (one atomic `ADD` per request on an item that expires with its window), so every function
//! instance sees the same count. Over the limit: 429 `rate-limited` with `Retry-After` (the
//! seconds left in the window) and the IETF `RateLimit-Policy` / `RateLimit` headers
//! (draft-ietf-httpapi-ratelimit-headers: `"<name>";q=<quota>;w=<window>` and
//! `"<name>";r=<remaining>;t=<seconds to reset>`). API Gateway's route throttling in the template
//! is the outer wall.
//!
//! A store failure lets the request through (logged): the limit protects the service, it must
//! not become the reason it fails.

use crate::config::RateLimit;
use crate::error::ApiError;
use crate::state::AppState;

/// A refusal's details, for the response headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    /// The policy's name (`caller` or `sign-in`).
    pub policy: &'static str,
    /// Requests per window.
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

/// Counts one request of `subject` against `limit` at unix time `now` (seconds, fractional).
///
/// Errors: 429 [`ApiError::RateLimited`] when the window's count is over the quota.
pub async fn check(
    state: &AppState,
    policy: &'static str,
    limit: Option<RateLimit>,
    subject: &str,
    now: f64,
) -> Result<(), ApiError> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let window = limit.window_seconds();
    let start = (now as u64 / window) * window;
    let end = start + window;
    let count = match state
        .store
        .count_request(&format!("{policy}#{subject}"), start, end + 60)
        .await
    {
        Ok(count) => count,
        Err(err) => {
            tracing::warn!(error = %err, policy, "rate limit not counted");
            return Ok(());
        }
    };
    if count <= u64::from(limit.burst) {
        return Ok(());
    }
    Err(ApiError::RateLimited(Box::new(Exceeded {
        policy,
        quota: limit.burst,
        window,
        retry_after: (end as f64 - now).ceil().max(1.0) as u64,
    })))
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
    }
}
