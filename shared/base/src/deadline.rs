//! The time an invocation has left (issue: durable orders, point 7). A request reads its Lambda
//! deadline from the invocation context; no external call starts unless its timeout fits in
//! what remains, with [`MARGIN`] kept for the store writes and the answer.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Time kept back for the writes and the answer after the last external call.
pub const MARGIN: Duration = Duration::from_millis(1500);

/// When the current invocation must have answered.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    /// A deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Deadline {
            at: Instant::now() + budget,
        }
    }

    /// The Lambda deadline (`lambda-runtime-deadline-ms`, milliseconds since the epoch) when the
    /// invocation has a real one, else `fallback` from now. None is 0 (tests, tools) or a time
    /// already past when the invocation starts — which Lambda never sends, but `cargo lambda
    /// watch` does.
    pub fn from_epoch_millis(deadline_ms: u64, fallback: Duration) -> Self {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(deadline_ms);
        match at.duration_since(SystemTime::now()) {
            Ok(left) if deadline_ms > 0 && !left.is_zero() => Deadline::after(left),
            _ => Deadline::after(fallback),
        }
    }

    /// Time left.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether a call that may take `timeout` can start now and still leave [`MARGIN`].
    pub fn allows(&self, timeout: Duration) -> bool {
        self.remaining() >= timeout + MARGIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_starts_only_if_its_timeout_fits() {
        let deadline = Deadline::after(Duration::from_secs(10));
        assert!(deadline.allows(Duration::from_secs(8)));
        assert!(!deadline.allows(Duration::from_secs(9)));
        let none = Deadline::from_epoch_millis(0, Duration::from_secs(3));
        assert!(none.remaining() <= Duration::from_secs(3));
        let past = Deadline::from_epoch_millis(1, Duration::from_secs(3));
        assert!(past.remaining() > Duration::from_secs(2));
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let real = Deadline::from_epoch_millis(ms + 10_000, Duration::from_secs(3));
        assert!(real.remaining() > Duration::from_secs(9));
    }
}
