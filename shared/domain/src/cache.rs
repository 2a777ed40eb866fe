//! A small time-to-live cache for discovery data, kept in a warm function's memory so bursts of
//! agents do not exceed the provider's ~4 requests/second (design brief §3, Upstream). The
//! provider's refusals of what it does not know (400, 404, 422: an unknown plan, team or
//! project) are cached like answers: a flood of bad ids reaches the provider once per entry
//! and time-to-live, not once per request.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::upstream::UpstreamError;

/// Entries kept before expired ones are dropped (bad ids must not grow the cache for ever).
const KEPT: usize = 1024;

/// An answer as loaded, and when.
type Entry = (Instant, Result<Value, UpstreamError>);

/// JSON values (or the provider's refusals) by key (the upstream path), each reused for `ttl`
/// after it was loaded.
pub struct TtlCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl TtlCache {
    /// An empty cache whose entries live for `ttl` (zero disables caching).
    pub fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The cached answer for `key` if it is fresh, else the result of `load`, which is cached
    /// when it succeeds or when the provider refused it as unknown or invalid (`Status` 400,
    /// 404, 422); other errors (timeouts, 429, 5xx) are never cached.
    ///
    /// Errors: `load`'s, or the cached refusal.
    pub async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> Result<Value, UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, UpstreamError>>,
    {
        if let Some((at, answer)) = self.entries.lock().expect("cache lock").get(key)
            && at.elapsed() < self.ttl
        {
            return answer.clone();
        }
        let answer = load().await;
        let keep = match &answer {
            Ok(_) => true,
            Err(UpstreamError::Status { status, .. }) => matches!(status, 400 | 404 | 422),
            Err(_) => false,
        };
        if keep && !self.ttl.is_zero() {
            let mut entries = self.entries.lock().expect("cache lock");
            if entries.len() >= KEPT {
                entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            }
            if entries.len() < KEPT {
                entries.insert(key.to_owned(), (Instant::now(), answer.clone()));
            }
        }
        answer
    }
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
    async fn loads_once_within_ttl_and_caches_refusals_but_not_failures() {
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
            assert_eq!(v, Value::from(1));
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
        // A timeout or a 5xx is not.
        for error in [UpstreamError::Timeout, refused(503)] {
            let failed = cache.get_or_load("flaky", || async { Err(error) }).await;
            assert!(failed.is_err());
        }
        let v = cache
            .get_or_load("flaky", || async { Ok(Value::from(2)) })
            .await;
        assert_eq!(v.unwrap(), Value::from(2));
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
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
