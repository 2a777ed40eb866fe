//! Timestamps: RFC 3339 strings in UTC, as stored and returned everywhere, and the two types
//! records hold them in: [`Timestamp`] (to the second: every `…At` field but an event's) and
//! [`EventTime`] (to the millisecond: when an event happened).

use std::fmt;
use std::str::FromStr;

use ::time::OffsetDateTime;
use ::time::format_description::well_known::Rfc3339;

/// The current time, UTC. Only for what is no record's time (a signature's validity window, a
/// metric); the domain reads `crate::clock::Clock`.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Formats a time as RFC 3339 in UTC with second precision (`2026-11-21T10:00:00Z`), whatever
/// its offset: stored times compare as strings (in DynamoDB conditions) only in one form.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(::time::UtcOffset::UTC);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// `t` as RFC 3339 in UTC with exactly three fraction digits, e.g. `2026-11-25T12:00:00.042Z`:
/// such texts sort as the instants they name, to the millisecond.
pub fn rfc3339_millis(t: OffsetDateTime) -> String {
    let t = t.to_offset(::time::UtcOffset::UTC);
    let seconds = rfc3339(t);
    let stem = seconds.strip_suffix('Z').unwrap_or(&seconds);
    format!("{stem}.{:03}Z", t.millisecond())
}

/// Parses an RFC 3339 timestamp; `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// Why a text is not a [`Timestamp`] or an [`EventTime`] (a serde error of the record or body
/// that held it, which names its field).
#[derive(Debug, Clone, thiserror::Error)]
#[error("not an RFC 3339 time, e.g. 2026-11-21T10:00:00Z")]
pub struct NotATime;

/// An instant to the second, in UTC: what every record's `…At` field holds but an event's.
///
/// Written (stored, answered, `Display`) as RFC 3339 with second precision,
/// `2026-11-21T10:00:00Z` ([`rfc3339`]): the one form in which stored times compare as strings,
/// in DynamoDB conditions and sort keys. Read from any RFC 3339 text (`FromStr`, serde): an
/// offset is turned to UTC and a fraction dropped, so every text the service wrote reads back
/// as itself. A stored text that is no time fails the read of its record, never a silent "now".
/// Orders as the instants do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// 1970-01-01T00:00:00Z (a record's time that was never set).
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The instant `unix_seconds` after the epoch.
    pub const fn from_unix(unix_seconds: i64) -> Timestamp {
        Timestamp(unix_seconds)
    }

    /// `t`, to the second (the fraction dropped).
    pub fn of(t: OffsetDateTime) -> Timestamp {
        Timestamp(t.unix_timestamp())
    }

    /// Unix seconds.
    pub const fn unix(self) -> i64 {
        self.0
    }

    /// The instant `seconds` later (earlier when negative).
    pub const fn plus(self, seconds: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds))
    }

    /// As a date-time in UTC (the epoch for an instant out of `time`'s range).
    pub fn datetime(self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(self.0).unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&rfc3339(self.datetime()))
    }
}

impl FromStr for Timestamp {
    type Err = NotATime;

    fn from_str(text: &str) -> Result<Timestamp, NotATime> {
        parse_rfc3339(text).map(Timestamp::of).ok_or(NotATime)
    }
}

/// An instant to the millisecond, in UTC: when an event happened.
///
/// Written as RFC 3339 with exactly three fraction digits, `2026-11-25T12:00:00.042Z`
/// ([`rfc3339_millis`]), so that texts sort as the instants do; read from any RFC 3339 text (a
/// finer fraction is dropped). Otherwise as [`Timestamp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventTime(i64);

impl EventTime {
    /// The instant `unix_millis` after the epoch.
    pub const fn from_unix_millis(unix_millis: i64) -> EventTime {
        EventTime(unix_millis)
    }

    /// Unix milliseconds.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// The second it falls in.
    pub const fn timestamp(self) -> Timestamp {
        Timestamp(self.0.div_euclid(1000))
    }

    /// As a date-time in UTC (the epoch for an instant out of `time`'s range).
    pub fn datetime(self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

/// The second's first millisecond.
impl From<Timestamp> for EventTime {
    fn from(at: Timestamp) -> EventTime {
        EventTime(at.0.saturating_mul(1000))
    }
}

impl fmt::Display for EventTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&rfc3339_millis(self.datetime()))
    }
}

impl FromStr for EventTime {
    type Err = NotATime;

    fn from_str(text: &str) -> Result<EventTime, NotATime> {
        let t = parse_rfc3339(text).ok_or(NotATime)?;
        Ok(EventTime((t.unix_timestamp_nanos() / 1_000_000) as i64))
    }
}

/// The text of both (a DynamoDB string value, a sort key's part).
macro_rules! into_text {
    ($type:ty) => {
        impl From<$type> for String {
            fn from(at: $type) -> String {
                at.to_string()
            }
        }

        impl From<&$type> for String {
            fn from(at: &$type) -> String {
                at.to_string()
            }
        }
    };
}
into_text!(Timestamp);
into_text!(EventTime);

/// Serde as text: both types are written with `Display` and read with `FromStr`.
macro_rules! serde_as_text {
    ($type:ty) => {
        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_text!(Timestamp);
serde_as_text!(EventTime);

/// The OpenAPI schema of both: one named component each (`Timestamp`, `EventTime`), a string
/// in the `date-time` format with the form as its example.
macro_rules! schema_as_text {
    ($type:ty, $example:literal, $description:literal) => {
        impl utoipa::PartialSchema for $type {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                    .description(Some($description))
                    .examples([$example])
                    .into()
            }
        }

        impl utoipa::ToSchema for $type {}
    };
}
schema_as_text!(
    Timestamp,
    "2026-11-21T10:00:00Z",
    "An instant to the second: RFC 3339 in UTC."
);
schema_as_text!(
    EventTime,
    "2026-11-25T12:00:00.042Z",
    "An instant to the millisecond: RFC 3339 in UTC with three fraction digits."
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_timestamp_is_written_in_the_stored_form_and_reads_any_rfc3339() {
        let at: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        assert_eq!(at.to_string(), "2026-11-21T10:00:00Z");
        assert_eq!(at.unix(), 1_795_255_200);
        let offset: Timestamp = "2026-11-21T12:00:00.987+02:00".parse().unwrap();
        assert_eq!(offset, at, "UTC, to the second");
        assert_eq!(at.plus(61).to_string(), "2026-11-21T10:01:01Z");
        assert_eq!(Timestamp::EPOCH.to_string(), "1970-01-01T00:00:00Z");
        for bad in ["", "yesterday", "2026-11-21", "10:00:00Z", "1763719200"] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad:?}");
            let error = serde_json::from_value::<Timestamp>(serde_json::json!(bad)).unwrap_err();
            assert!(
                error.to_string().contains("not an RFC 3339 time"),
                "{error}"
            );
        }
        assert!(serde_json::from_value::<Timestamp>(serde_json::json!(1_763_719_200)).is_err());
        assert_eq!(serde_json::to_value(at).unwrap(), "2026-11-21T10:00:00Z");
    }

    #[test]
    fn an_event_time_keeps_three_fraction_digits() {
        let at: EventTime = "2026-11-25T12:00:00.042Z".parse().unwrap();
        assert_eq!(at.to_string(), "2026-11-25T12:00:00.042Z");
        let whole: EventTime = "2026-11-25T12:00:00Z".parse().unwrap();
        assert_eq!(whole.to_string(), "2026-11-25T12:00:00.000Z");
        assert!(whole < at && whole.to_string() < at.to_string());
        assert_eq!(at.timestamp().to_string(), "2026-11-25T12:00:00Z");
        let finer: EventTime = "2026-11-25T12:00:00.042999Z".parse().unwrap();
        assert_eq!(finer, at);
    }

    proptest! {
        /// Every second and millisecond from 1970 to 9999 reads back as itself, and the texts
        /// sort as the instants do (what DynamoDB's string comparisons rely on).
        #[test]
        fn every_instant_round_trips_and_sorts_as_text(
            a in 0i64..253_402_300_799_000,
            b in 0i64..253_402_300_799_000,
        ) {
            let (sa, sb) = (Timestamp::from_unix(a / 1000), Timestamp::from_unix(b / 1000));
            prop_assert_eq!(sa.to_string().parse::<Timestamp>().unwrap(), sa);
            prop_assert_eq!(sa.cmp(&sb), sa.to_string().cmp(&sb.to_string()));
            let (ea, eb) = (EventTime::from_unix_millis(a), EventTime::from_unix_millis(b));
            prop_assert_eq!(ea.to_string().parse::<EventTime>().unwrap(), ea);
            prop_assert_eq!(ea.cmp(&eb), ea.to_string().cmp(&eb.to_string()));
        }
    }
}
