//! Timestamps: RFC 3339 strings in UTC, as stored and returned everywhere.

use ::time::OffsetDateTime;
use ::time::format_description::well_known::Rfc3339;

/// The current time, UTC.
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

/// The current time as RFC 3339 (see [`rfc3339`]).
pub fn now_rfc3339() -> String {
    rfc3339(now())
}

/// Parses an RFC 3339 timestamp; `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}
