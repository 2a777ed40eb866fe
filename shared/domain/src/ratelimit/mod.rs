//! Request rate limits (the key-policies issue, point 3; the limits issue, point 3; the
//! cold-start issue, point 2). Each limit is a fixed window of `burst / rate` seconds holding at
//! most `burst` requests (`RateLimit` of [`crate::config`]), counted in DynamoDB so that every
//! function instance sees the same count:
//!
//! | policy | subject | counts | where |
//! |---|---|---|---|
//! | `caller` | API key or session | every authenticated request | on the credential's own item, in the one call that reads it (`crate::store::uses`): exact |
//! | `owner` | wallet address | every authenticated request, over all of its keys and sessions | `RATE#owner#…`, written beside the request's work |
//! | `address` | source address | every request to an authenticated route | `RATE#address#…`, written beside the request's work |
//! | `failed-auth` | source address | failed authentications; over it, the address's failures are answered 429 until the window ends (never its valid credentials) | `RATE#failed-auth#…` |
//! | `sign-in` | source address | `GET /api/auth/nonce`, `POST /api/auth/verify` | `RATE#sign-in#…`, before the work |
//! | `oauth` | source address | registrations, authorization requests, revocations, and token requests that present no live refresh token of their own client (the sign-in rate) | `RATE#oauth#…`, before the work |
//! | `oauth-grant` | OAuth grant (its key id) | token requests presenting a live refresh token of their own client, which the address's `oauth` count does not refuse (the sign-in rate) | `RATE#oauth-grant#…`, before the work |
//! | `registrations` | everyone | OAuth client registrations that passed their checks (`OAUTH_REGISTRATIONS_*`) | `RATE#registrations#everyone`, before the write |
//!
//! So an authenticated request makes one store call before its own work. The owner and address
//! counts are written while the work runs ([`Tally`]) and answered before the response leaves
//! ([`settle_pending`]); each instance keeps the counts it last saw ([`Local`]) and refuses a
//! subject it saw at its quota without a store call. Accuracy: a burst spread over `n` warm
//! instances gets at most `n` requests past an owner's or address's quota per window (each
//! instance lets one more through before its own count tells it); a write of money waits for
//! its request's counts and is refused over the quota ([`require_counted`]), so the paid path
//! holds the quota exactly.
//!
//! Over a limit: 429 `rate-limited` with `Retry-After` (the seconds left in the window) and the
//! IETF `RateLimit-Policy` / `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers:
//! `"<name>";q=<quota>;w=<window>` and `"<name>";r=<remaining>;t=<seconds to reset>`). API
//! Gateway's route throttling in the template is the outer wall.
//!
//! A store failure lets a request through uncounted (logged): the limit protects the service, it
//! must not become the reason reads fail. Writes of money refuse an uncounted request
//! ([`require_counted`]): a broken counter must not open the paid path to a flood.

use std::sync::Mutex;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::config::RateLimit;
use crate::error::{ApiError, Exceeded};
use crate::state::AppState;
use crate::store::Store;

pub mod local;
pub mod slots;
pub mod spend;

pub use local::Local;

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
async fn check_all(state: &AppState, rules: &[Rule<'_>], now: f64) -> Result<bool, ApiError> {
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
    ApiError::RateLimited(Box::new(exceeded_of(policy, limit, end, now)))
}

/// The refusal's details of `policy` whose window ends at `end`.
fn exceeded_of(policy: &'static str, limit: RateLimit, end: u64, now: f64) -> Exceeded {
    Exceeded {
        policy,
        quota: limit.burst,
        window: limit.window_seconds(),
        retry_after: (end as f64 - now).ceil().max(1.0) as u64,
    }
}

/// Why a request that carries a payment is refused when its rate limits could not be counted
/// (what the payment itself became is the caller's to add).
pub const UNCOUNTED: &str =
    "the request could not be counted against its rate limits, so no payment is taken now";

/// Refuses a write of money unless its request was counted within every limit: it waits for
/// the request's owner and address counts ([`Tally`]) — so the paid path holds those quotas
/// exactly — and refuses when they could not be counted (the counter's store failed): the paid
/// path fails closed.
///
/// Errors: 429 [`ApiError::RateLimited`] over the owner's or the address's quota; 503
/// [`ApiError::Busy`] (`Retry-After: 1`, [`UNCOUNTED`]) uncounted. Neither says what the
/// payment became: the paid path does ([`crate::billing::order::buy`]).
pub async fn require_counted(tally: &Tally) -> Result<(), ApiError> {
    match tally.verdict().await {
        Verdict::Counted => Ok(()),
        Verdict::Over(exceeded) => Err(ApiError::RateLimited(exceeded)),
        Verdict::Uncounted => Err(ApiError::Busy {
            message: UNCOUNTED.into(),
            retry_after: 1,
        }),
    }
}

/// What counting a request's shared limits (owner, address) found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Counted, within every quota.
    Counted,
    /// A count could not be written (store failure); the request went on.
    Uncounted,
    /// Over this quota (the request was let through unless it moves money).
    Over(Box<Exceeded>),
}

/// The counts of one request's shared limits, written beside its work: a shared future of its
/// [`Verdict`], spawned so that it runs whether or not anyone waits for it.
#[derive(Clone)]
pub struct Tally(Shared<BoxFuture<'static, Verdict>>);

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tally").field(&self.0.peek()).finish()
    }
}

impl PartialEq for Tally {
    /// Tallies compare by their verdicts once known (two pending tallies are not equal).
    fn eq(&self, other: &Self) -> bool {
        matches!((self.0.peek(), other.0.peek()), (Some(a), Some(b)) if a == b)
    }
}

impl Tally {
    /// A tally already known to be `verdict` (nothing to count; tests).
    pub fn settled(verdict: Verdict) -> Self {
        Tally(futures::future::ready(verdict).boxed().shared())
    }

    /// The verdict, once the counts are written.
    pub async fn verdict(&self) -> Verdict {
        self.0.clone().await
    }
}

tokio::task_local! {
    /// The tallies started while serving one request, settled before its response leaves.
    static PENDING: Mutex<Vec<Tally>>;
}

/// Runs `serve` (one request) with a place for the tallies it starts, then waits for them: a
/// Lambda instance is frozen once it answers, so the counts are written before it does.
pub async fn settle_pending<F: std::future::Future>(serve: F) -> F::Output {
    PENDING
        .scope(Mutex::new(Vec::new()), async {
            let out = serve.await;
            let pending = PENDING.with(|p| std::mem::take(&mut *p.lock().unwrap()));
            futures::future::join_all(pending.iter().map(Tally::verdict)).await;
            out
        })
        .await
}

/// Counts one request against each of `rules` (the shared limits: owner, address) at `now`,
/// in a task of its own beside the request's work, and remembers each count on this instance
/// ([`Local`]). Rules whose limit is off are skipped.
pub fn count_beside(state: &AppState, rules: &[Rule<'_>], now: f64) -> Tally {
    let rules: Vec<(&'static str, RateLimit, String)> = rules
        .iter()
        .filter_map(|r| Some((r.policy, r.limit?, r.subject.to_owned())))
        .collect();
    if rules.is_empty() {
        return Tally::settled(Verdict::Counted);
    }
    let store: Store = state.store.clone();
    let local = state.limits.clone();
    let task = tokio::spawn(async move {
        let counts = futures::future::join_all(rules.iter().map(|(policy, limit, subject)| {
            let (start, end) = window(*limit, now);
            let key = format!("{policy}#{subject}");
            let store = &store;
            async move { store.count_request(&key, start, end + 60).await }
        }))
        .await;
        let mut verdict = Verdict::Counted;
        for ((policy, limit, subject), count) in rules.iter().zip(counts) {
            match count {
                Ok(count) => {
                    local.saw(policy, subject, window(*limit, now).0, count);
                    if count > u64::from(limit.burst) && verdict == Verdict::Counted {
                        let end = window(*limit, now).1;
                        verdict = Verdict::Over(Box::new(exceeded_of(policy, *limit, end, now)));
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, policy, "rate limit not counted");
                    if verdict == Verdict::Counted {
                        verdict = Verdict::Uncounted;
                    }
                }
            }
        }
        verdict
    });
    let tally = Tally(
        async move { task.await.unwrap_or(Verdict::Uncounted) }
            .boxed()
            .shared(),
    );
    let _ = PENDING.try_with(|p| p.lock().unwrap().push(tally.clone()));
    tally
}

/// Refuses, without a store call, a request of a subject this instance saw at its quota in the
/// current window ([`count_beside`] remembers what each count answered).
///
/// Errors: 429 [`ApiError::RateLimited`] naming the first such rule.
pub fn refuse_seen(state: &AppState, rules: &[Rule<'_>], now: f64) -> Result<(), ApiError> {
    for rule in rules {
        let Some(limit) = rule.limit else { continue };
        let (start, end) = window(limit, now);
        if state.limits.seen(rule.policy, rule.subject, start) >= u64::from(limit.burst) {
            return Err(exceeded(rule.policy, limit, end, now));
        }
    }
    Ok(())
}

/// The `caller` limit of one credential for one request, counted in the credential's own read
/// (`crate::store::uses`).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    credential: &'a str,
    limit: Option<RateLimit>,
    /// The window's start, epoch seconds.
    start: u64,
    /// Whether this instance has not counted the credential in this window yet.
    open: bool,
}

impl<'a> Caller<'a> {
    /// The caller limit of `credential` (its hash) at `now` (unix seconds).
    pub fn of(state: &AppState, credential: &'a str, now: f64) -> Self {
        let limit = state.config.rate_limits.caller;
        let start = limit.map_or(0, |limit| window(limit, now).0);
        Caller {
            credential,
            limit,
            start,
            open: state.limits.window_of(credential) != Some(start),
        }
    }

    /// The use to record on the credential's item: `seen_attribute` = `seen_at`, and the
    /// window when the limit is on.
    pub fn usage<'b>(
        &self,
        seen_attribute: &'static str,
        seen_at: &'b str,
    ) -> crate::store::uses::Use<'b> {
        crate::store::uses::Use {
            seen_attribute,
            now: seen_at,
            window: self.limit.map(|_| self.start),
            open_first: self.open,
        }
    }

    /// Checks the request's number `count` in the window (from the credential's read; `None`
    /// when it was not counted) and remembers the window on this instance.
    ///
    /// Errors: 429 [`ApiError::RateLimited`] (`caller`) over the quota.
    pub fn check(&self, state: &AppState, count: Option<u64>, now: f64) -> Result<(), ApiError> {
        let (Some(limit), Some(count)) = (self.limit, count) else {
            return Ok(());
        };
        state.limits.counted_in(self.credential, self.start);
        if count > u64::from(limit.burst) {
            return Err(exceeded(
                "caller",
                limit,
                self.start + limit.window_seconds(),
                now,
            ));
        }
        Ok(())
    }
}

/// Counts a failed authentication from `address` at `now` and returns the answer to give: the
/// 401 `failure`, or 429 `failed-auth` once the address is over its limit (and locked out on
/// this instance until the window ends; a failure from a locked-out address is answered so
/// without being counted again). Only failures are refused: a valid credential from the same
/// address is always served, so that a neighbour behind the same NAT presenting bad keys cannot
/// lock valid ones out (issue 34, point 5).
pub async fn failed(state: &AppState, address: &str, now: f64, failure: ApiError) -> ApiError {
    let Some(limit) = state.config.rate_limits.failed_auth else {
        return failure;
    };
    if let Some(end) = state.limits.lockout_until(address)
        && end as f64 > now
    {
        return exceeded("failed-auth", limit, end, now);
    }
    let (start, end) = window(limit, now);
    let key = format!("failed-auth#{address}");
    match state.store.count_request(&key, start, end + 60).await {
        Ok(count) if count > u64::from(limit.burst) => {
            state.limits.lock_out(address, end, now);
            exceeded("failed-auth", limit, end, now)
        }
        Ok(_) => failure,
        Err(err) => {
            tracing::warn!(error = %err, "failed authentication not counted");
            failure
        }
    }
}

/// The current unix time by the state's clock ([`crate::clock`]: what tests move instead of
/// sleeping to a window's end), seconds with a fraction.
pub fn now(state: &AppState) -> f64 {
    state.clock.now_millis() as f64 / 1000.0
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

    #[tokio::test]
    async fn money_writes_need_a_count_within_the_quota() {
        assert!(
            require_counted(&Tally::settled(Verdict::Counted))
                .await
                .is_ok()
        );
        assert!(matches!(
            require_counted(&Tally::settled(Verdict::Uncounted)).await,
            Err(ApiError::Busy { retry_after: 1, .. })
        ));
        let over = exceeded_of(
            "owner",
            RateLimit {
                per_second: 1.0,
                burst: 2,
            },
            10,
            9.0,
        );
        assert!(matches!(
            require_counted(&Tally::settled(Verdict::Over(Box::new(over)))).await,
            Err(ApiError::RateLimited(e)) if e.policy == "owner"
        ));
    }

    #[test]
    fn an_instance_keeps_the_newest_and_highest_count_it_saw() {
        let local = Local::default();
        local.saw("owner", "0xa", 100, 5);
        local.saw("owner", "0xa", 100, 3);
        assert_eq!(local.seen("owner", "0xa", 100), 5);
        local.saw("owner", "0xa", 90, 50);
        assert_eq!(local.seen("owner", "0xa", 100), 5);
        // Another window knows nothing yet.
        assert_eq!(local.seen("owner", "0xa", 110), 0);
        local.saw("owner", "0xa", 110, 1);
        assert_eq!(local.seen("owner", "0xa", 100), 0);
        assert_eq!(local.seen("address", "0xa", 110), 0);
    }
}
