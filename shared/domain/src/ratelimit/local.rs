//! What one warm instance knows of the rate limits (`crate::ratelimit`): the window each
//! credential was last counted in, the shared counts it last saw, and its lockouts. `AppState`
//! holds one; the rules that read and write it are `crate::ratelimit`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What this instance knows of the limits: lockouts, the window each credential was last
/// counted in, and the shared counts it last saw. Cheap to clone (shared).
#[derive(Debug, Default, Clone)]
pub struct Local(Arc<LocalInner>);

#[derive(Debug, Default)]
struct LocalInner {
    lockouts: Lockouts,
    /// Credential hash → the start of the window it was last counted in.
    windows: Mutex<HashMap<String, u64>>,
    /// `<policy>#<subject>` → (window start, count seen).
    seen: Mutex<HashMap<String, (u64, u64)>>,
}

/// Entries each per-instance map keeps before it is cleared (a warm instance sees few callers).
const LOCAL_KEPT: usize = 4096;

fn bounded_insert<V>(map: &Mutex<HashMap<String, V>>, key: String, value: V) {
    if let Ok(mut map) = map.lock() {
        if map.len() >= LOCAL_KEPT && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, value);
    }
}

impl Local {
    /// The end (unix seconds) of `address`'s failed-authentication lockout on this instance.
    pub(crate) fn lockout_until(&self, address: &str) -> Option<u64> {
        self.0.lockouts.until(address)
    }

    /// Locks `address` out on this instance until `end` (unix seconds).
    pub(crate) fn lock_out(&self, address: &str, end: u64, now: f64) {
        self.0.lockouts.lock(address, end, now);
    }

    pub(crate) fn window_of(&self, credential: &str) -> Option<u64> {
        self.0.windows.lock().ok()?.get(credential).copied()
    }

    pub(crate) fn counted_in(&self, credential: &str, start: u64) {
        bounded_insert(&self.0.windows, credential.to_owned(), start);
    }

    pub(crate) fn seen(&self, policy: &str, subject: &str, start: u64) -> u64 {
        let key = format!("{policy}#{subject}");
        match self.0.seen.lock().ok().and_then(|m| m.get(&key).copied()) {
            Some((window, count)) if window == start => count,
            _ => 0,
        }
    }

    pub(crate) fn saw(&self, policy: &str, subject: &str, start: u64, count: u64) {
        let key = format!("{policy}#{subject}");
        // Keep the highest count seen in the newest window (answers may arrive out of order).
        if let Ok(mut map) = self.0.seen.lock() {
            if let Some(&(window, seen)) = map.get(&key)
                && (window > start || (window == start && seen >= count))
            {
                return;
            }
            if map.len() >= LOCAL_KEPT && !map.contains_key(&key) {
                map.clear();
            }
            map.insert(key, (start, count));
        }
    }
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
