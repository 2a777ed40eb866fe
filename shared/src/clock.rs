//! The one clock of the order, lease and reconciler code (and of the test doubles that stand in
//! for the provider and the payment network): wall time, or a manual clock that tests move
//! forward instead of sleeping. Every lease, deadline and due time is computed from
//! [`Clock::now`] read when it is written, never from a time read earlier in a long pass.
//!
//! Cheap to clone; clones share one time.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

/// Where time comes from.
#[derive(Debug)]
enum Source {
    /// The system clock, plus an offset (milliseconds) that tests may move forward.
    System(AtomicI64),
    /// A manual clock: unix milliseconds, moved only by [`Clock::advance`] and [`Clock::set`].
    Manual(AtomicI64),
}

/// A clock (see the module docs).
#[derive(Debug, Clone)]
pub struct Clock(Arc<Source>);

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// Wall time (what every function runs with).
    pub fn system() -> Self {
        Clock(Arc::new(Source::System(AtomicI64::new(0))))
    }

    /// A clock that stands still at `unix_seconds` until moved ([`Clock::advance`]).
    pub fn manual(unix_seconds: i64) -> Self {
        Clock(Arc::new(Source::Manual(AtomicI64::new(
            unix_seconds * 1000,
        ))))
    }

    /// Unix milliseconds now.
    pub fn now_millis(&self) -> i64 {
        match &*self.0 {
            Source::System(offset) => {
                let wall = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
                wall as i64 + offset.load(Ordering::SeqCst)
            }
            Source::Manual(at) => at.load(Ordering::SeqCst),
        }
    }

    /// Unix seconds now.
    pub fn now(&self) -> i64 {
        self.now_millis().div_euclid(1000)
    }

    /// Now, as a date-time (UTC).
    pub fn datetime(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.now_millis()) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }

    /// Now, as RFC 3339 with second precision ([`crate::time::rfc3339`]).
    pub fn rfc3339(&self) -> String {
        crate::time::rfc3339(self.datetime())
    }

    /// Now, as RFC 3339 with millisecond precision ([`crate::time::rfc3339_millis`]): when an
    /// event happened.
    pub fn rfc3339_millis(&self) -> String {
        crate::time::rfc3339_millis(self.datetime())
    }

    /// Moves the clock forward to `unix_millis`, if that is later than now (never back).
    pub fn forward_to(&self, unix_millis: i64) {
        let ahead = unix_millis - self.now_millis();
        if ahead > 0 {
            self.advance(Duration::from_millis(ahead as u64));
        }
    }

    /// Moves the clock forward by `by` (both kinds: a system clock keeps running from there).
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 2);
        match &*self.0 {
            Source::System(offset) => offset.fetch_add(millis, Ordering::SeqCst),
            Source::Manual(at) => at.fetch_add(millis, Ordering::SeqCst),
        };
    }
}

/// Unix seconds as RFC 3339 (UTC, second precision); the epoch for a time out of range.
pub fn at(unix_seconds: i64) -> String {
    crate::time::rfc3339(
        OffsetDateTime::from_unix_timestamp(unix_seconds).unwrap_or(OffsetDateTime::UNIX_EPOCH),
    )
}

/// RFC 3339 as unix seconds; `None` when it is not a time.
pub fn epoch(rfc3339: &str) -> Option<i64> {
    crate::time::parse_rfc3339(rfc3339).map(|t| t.unix_timestamp())
}

/// [`epoch`] of a timestamp the service stored, or `fallback` with an error logged naming
/// `what`: every stored timestamp is written RFC 3339 by [`Clock::rfc3339`], so one that does not
/// parse is a damaged record, and is said where it is read rather than silently taken as
/// `fallback`.
pub fn stored_epoch(rfc3339: &str, what: &str, fallback: i64) -> i64 {
    epoch(rfc3339).unwrap_or_else(|| {
        tracing::error!(what, value = rfc3339, "a stored timestamp does not parse");
        fallback
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1_800_000_000);
        assert_eq!(clock.now(), 1_800_000_000);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), 1_800_000_001);
        assert_eq!(clock.now_millis(), 1_800_000_001_500);
        let shared = clock.clone();
        shared.advance(Duration::from_secs(59));
        assert_eq!(clock.rfc3339(), at(1_800_000_060));
        assert_eq!(epoch(&clock.rfc3339()), Some(1_800_000_060));
        clock.forward_to(1_800_000_000_000);
        assert_eq!(clock.now(), 1_800_000_060, "never back");
        clock.forward_to(1_800_000_100_000);
        assert_eq!(clock.now(), 1_800_000_100);
    }

    #[test]
    fn a_system_clock_runs_and_can_be_moved_forward() {
        let clock = Clock::system();
        let before = clock.now();
        assert!((before - OffsetDateTime::now_utc().unix_timestamp()).abs() <= 1);
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now() >= before + 3600);
    }
}
