//! A small time-to-live cache for discovery data, kept in a warm function's memory so bursts of
//! agents do not exceed the provider's ~4 requests/second (design brief §3, Upstream).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// JSON values by key (the upstream path), each reused for `ttl` after it was loaded.
pub struct TtlCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Value)>>,
}

impl TtlCache {
    /// An empty cache whose entries live for `ttl` (zero disables caching).
    pub fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The cached value for `key` if it is fresh, else the result of `load`, which is cached
    /// when it succeeds. Errors are never cached.
    pub async fn get_or_load<E, F, Fut>(&self, key: &str, load: F) -> Result<Value, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, E>>,
    {
        if let Some((at, value)) = self.entries.lock().expect("cache lock").get(key)
            && at.elapsed() < self.ttl
        {
            return Ok(value.clone());
        }
        let value = load().await?;
        if !self.ttl.is_zero() {
            self.entries
                .lock()
                .expect("cache lock")
                .insert(key.to_owned(), (Instant::now(), value.clone()));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn loads_once_within_ttl_and_never_caches_errors() {
        let cache = TtlCache::new(Duration::from_secs(60));
        let loads = AtomicU32::new(0);
        for _ in 0..3 {
            let v = cache
                .get_or_load("k", || async {
                    loads.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ()>(Value::from(1))
                })
                .await
                .unwrap();
            assert_eq!(v, Value::from(1));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert!(
            cache
                .get_or_load("e", || async { Err::<Value, _>(()) })
                .await
                .is_err()
        );
        let v = cache
            .get_or_load("e", || async { Ok::<_, ()>(Value::from(2)) })
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
                    Ok::<_, ()>(Value::Null)
                })
                .await
                .unwrap();
        }
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
