//! A small time-to-live cache for discovery data, kept in a warm function's memory so bursts of
//! agents do not exceed the provider's ~4 requests/second (design brief §3, Upstream). The
//! provider's refusals of what it does not know (400, 404, 422: an unknown plan, team or
//! project) are cached like answers: a flood of bad ids reaches the provider once per entry
//! and time-to-live, not once per request.
//!
//! A provider outage is not an outage of what reads it (issue 63, point 6): the last answer is
//! kept past its freshness (for [`STALE_LIMIT`] at most), and while the provider fails it stands
//! in for the provider's, marked with its age ([`Cached::stale`]); the failure itself (a
//! timeout, 429, 5xx) is kept for [`FAILURE_TTL`], so a flood reaches a failing provider once
//! per entry and few seconds, and with no last answer it is the failure that is answered.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::upstream::UpstreamError;

/// Entries kept before expired ones are dropped (bad ids must not grow the cache for ever).
const KEPT: usize = 1024;

/// How long a failure of the provider (a timeout, 429, 5xx, an unreadable answer) is answered
/// from the cache before the provider is asked again (never longer than the freshness).
pub const FAILURE_TTL: Duration = Duration::from_secs(5);

/// How long past its freshness the last answer may stand in for a failing provider's: an
/// older catalogue is no offer to show.
pub const STALE_LIMIT: Duration = Duration::from_secs(3600);

/// What the cache holds for one key.
#[derive(Default)]
struct Entry {
    /// The provider's last answer (a value, or a refusal of an unknown id) and when it came.
    answer: Option<(Instant, Result<Value, UpstreamError>)>,
    /// The provider's last failure, when it came after that answer.
    failed: Option<(Instant, UpstreamError)>,
}

/// A value as the cache gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    /// The value.
    pub value: Value,
    /// `Some(age)` when it is the last answer served past its freshness because the provider
    /// failed: how long ago the provider gave it. `None`: fresh.
    pub stale: Option<Duration>,
}

/// JSON values (or the provider's refusals) by key (the upstream path), each reused for `ttl`
/// after it was loaded, and the last of them past that while the provider fails.
pub struct TtlCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl TtlCache {
    /// An empty cache whose entries live for `ttl` (zero disables caching: every read asks the
    /// provider, and nothing stands in for its failure).
    pub fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The cached answer for `key` if it is fresh; else, when the provider failed within
    /// [`FAILURE_TTL`], the last answer ([`Cached::stale`]) or that failure; else the result of
    /// `load`. A success, or a refusal as unknown or invalid (`Status` 400, 404, 422), is the
    /// new answer; any other error is a failure, answered with the last answer if it is at most
    /// [`STALE_LIMIT`] past its freshness.
    ///
    /// Errors: `load`'s, or the cached refusal or failure.
    pub async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> Result<Cached, UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, UpstreamError>>,
    {
        let fresh = |value| Cached { value, stale: None };
        if self.ttl.is_zero() {
            return load().await.map(fresh);
        }
        if let Some(entry) = self.entries.lock().expect("cache lock").get(key) {
            if let Some((at, answer)) = &entry.answer
                && at.elapsed() < self.ttl
            {
                return answer.clone().map(fresh);
            }
            if let Some((at, failure)) = &entry.failed
                && at.elapsed() < self.ttl.min(FAILURE_TTL)
            {
                return self.instead_of(entry, failure);
            }
        }
        let answer = load().await;
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= KEPT && !entries.contains_key(key) {
            entries.retain(|_, entry| self.useful(entry));
            if entries.len() >= KEPT {
                return answer.map(fresh);
            }
        }
        let entry = entries.entry(key.to_owned()).or_default();
        match answer {
            Err(failure) if !answered(&failure) => {
                entry.failed = Some((now, failure.clone()));
                self.instead_of(entry, &failure)
            }
            answer => {
                *entry = Entry {
                    answer: Some((now, answer.clone())),
                    failed: None,
                };
                answer.map(fresh)
            }
        }
    }

    /// What answers for `entry` while the provider fails with `failure`: its last answer, if
    /// it is at most [`STALE_LIMIT`] past its freshness, else the failure.
    fn instead_of(&self, entry: &Entry, failure: &UpstreamError) -> Result<Cached, UpstreamError> {
        match &entry.answer {
            Some((at, answer)) if at.elapsed() < self.ttl + STALE_LIMIT => {
                tracing::warn!(
                    age_seconds = at.elapsed().as_secs(),
                    error = %failure,
                    "the provider failed: its last answer stands in"
                );
                answer.clone().map(|value| Cached {
                    value,
                    stale: Some(at.elapsed()),
                })
            }
            _ => Err(failure.clone()),
        }
    }

    /// Whether `entry` may still answer (its answer within the stale limit, or its failure
    /// within its time).
    fn useful(&self, entry: &Entry) -> bool {
        let answer = entry
            .answer
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.ttl + STALE_LIMIT);
        let failed = entry
            .failed
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.ttl.min(FAILURE_TTL));
        answer || failed
    }
}

/// Whether `error` is the provider's answer (a refusal of what it does not know: 400, 404,
/// 422), kept like a value, rather than its failure.
fn answered(error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::Status { status, .. } if matches!(status, 400 | 404 | 422))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn refused(status: u16) -> UpstreamError {
        UpstreamError::Status {
            status,
            code: None,
            message: "no such thing".into(),
        }
    }

    #[tokio::test]
    async fn loads_once_within_ttl_and_caches_refusals_and_failures_apart() {
        let cache = TtlCache::new(Duration::from_secs(60));
        let loads = AtomicU32::new(0);
        let count = || {
            loads.fetch_add(1, Ordering::SeqCst);
        };
        for _ in 0..3 {
            let v = cache
                .get_or_load("k", || async {
                    count();
                    Ok(Value::from(1))
                })
                .await
                .unwrap();
            assert_eq!(
                v,
                Cached {
                    value: Value::from(1),
                    stale: None
                }
            );
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        // A 404 is kept: asked again, the provider is not.
        for _ in 0..3 {
            let answer = cache
                .get_or_load("missing", || async {
                    count();
                    Err(refused(404))
                })
                .await;
            assert!(matches!(
                answer,
                Err(UpstreamError::Status { status: 404, .. })
            ));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        // A timeout or a 5xx with no answer before it is answered for its few seconds.
        for error in [UpstreamError::Timeout, refused(503)] {
            let key = format!("flaky {error}");
            let failed = cache.get_or_load(&key, || async { Err(error) }).await;
            assert!(failed.is_err());
            let again = cache
                .get_or_load(&key, || async { Ok(Value::from(2)) })
                .await;
            assert!(again.is_err(), "the failure is kept: {again:?}");
        }
    }

    #[tokio::test]
    async fn the_last_answer_stands_in_for_a_failing_provider() {
        let cache = TtlCache::new(Duration::from_millis(50));
        let loads = AtomicU32::new(0);
        let load = |answer: Result<Value, UpstreamError>| {
            loads.fetch_add(1, Ordering::SeqCst);
            async move { answer }
        };
        let first = cache.get_or_load("k", || load(Ok(Value::from(1)))).await;
        assert_eq!(first.unwrap().stale, None);
        tokio::time::sleep(Duration::from_millis(60)).await;
        // Past its freshness, the provider fails: the last answer, with its age.
        let stale = cache
            .get_or_load("k", || load(Err(UpstreamError::Timeout)))
            .await
            .unwrap();
        assert_eq!(stale.value, Value::from(1));
        assert!(stale.stale.unwrap() >= Duration::from_millis(60));
        // The failure is kept (within the freshness, here): the provider is not asked.
        let again = cache.get_or_load("k", || load(Ok(Value::from(9)))).await;
        assert_eq!(again.unwrap().value, Value::from(1));
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        // Once that has passed, the provider's new answer is the answer.
        tokio::time::sleep(Duration::from_millis(60)).await;
        let new = cache.get_or_load("k", || load(Ok(Value::from(3)))).await;
        assert_eq!(
            new.unwrap(),
            Cached {
                value: Value::from(3),
                stale: None
            }
        );
    }

    #[tokio::test]
    async fn zero_ttl_disables_caching() {
        let cache = TtlCache::new(Duration::ZERO);
        let loads = AtomicU32::new(0);
        for _ in 0..2 {
            cache
                .get_or_load("k", || async {
                    loads.fetch_add(1, Ordering::SeqCst);
                    Ok(Value::Null)
                })
                .await
                .unwrap();
        }
        let failed = cache
            .get_or_load("k", || async { Err(UpstreamError::Timeout) })
            .await;
        assert!(failed.is_err());
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
