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

use crate::time::{EventTime, Timestamp};

/// Where time comes from.
#[derive(Debug)]
enum Source {
    /// The system clock, plus an offset (milliseconds) that tests may move forward.
    System(AtomicI64),
    /// A manual clock: unix milliseconds, moved only by [`Clock::advance`] and
    /// [`Clock::forward_to`].
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

    /// Whether this clock moves only when moved ([`Clock::manual`]).
    pub fn is_manual(&self) -> bool {
        matches!(&*self.0, Source::Manual(_))
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

    /// Now, to the second: a record's time ([`Timestamp`]).
    pub fn timestamp(&self) -> Timestamp {
        Timestamp::from_unix(self.now())
    }

    /// Now, to the millisecond: when an event happened ([`EventTime`]).
    pub fn event_time(&self) -> EventTime {
        EventTime::from_unix_millis(self.now_millis())
    }

    /// Now as RFC 3339 with second precision (the text of [`Clock::timestamp`]): the value a
    /// stored time is compared with in a DynamoDB condition.
    pub fn rfc3339(&self) -> String {
        self.timestamp().to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1_800_000_000);
        assert!(clock.is_manual() && !Clock::system().is_manual());
        assert_eq!(clock.now(), 1_800_000_000);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), 1_800_000_001);
        assert_eq!(clock.now_millis(), 1_800_000_001_500);
        let shared = clock.clone();
        shared.advance(Duration::from_secs(59));
        assert_eq!(clock.timestamp(), Timestamp::from_unix(1_800_000_060));
        assert_eq!(clock.event_time().unix_millis(), 1_800_000_060_500);
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
