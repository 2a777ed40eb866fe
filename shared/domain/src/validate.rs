//! Input rules for values that reach the provider or the store. Each check returns a 400 naming
//! the field ([`ApiError::Invalid`]) so nothing malformed is ever put in an upstream URL or body.

use std::collections::BTreeMap;

use base64::Engine;

use crate::error::ApiError;

/// Largest `user_data` accepted, in base64 characters (48 KiB encoded ≈ 36 KiB of script).
pub const MAX_USER_DATA_CHARS: usize = 48 * 1024;
/// Most tags on one server.
pub const MAX_TAGS: usize = 20;
/// Tag keys starting with this are the service's own (`svc-sandbox`, `svc-owner`).
pub const RESERVED_TAG_PREFIX: &str = "svc-";

/// An Ethereum address (`0x` + 40 hex digits, any case) as an owner, in its canonical
/// lowercase form ([`crate::address::Owner::parse`]).
///
/// Errors: 400 naming `field`.
pub fn address(field: &str, value: &str) -> Result<crate::address::Owner, ApiError> {
    crate::address::Owner::parse(value).ok_or_else(|| {
        ApiError::invalid(
            field,
            "must be an Ethereum address: 0x followed by 40 hex digits",
        )
    })
}

/// A numeric provider id (server, project, team): 1 to 15 digits, no sign, no leading zero.
pub fn numeric_id(field: &str, value: &str) -> Result<u64, ApiError> {
    let ok = !value.is_empty()
        && value.len() <= 15
        && value.bytes().all(|b| b.is_ascii_digit())
        && !value.starts_with('0');
    ok.then(|| value.parse().ok())
        .flatten()
        .ok_or_else(|| ApiError::invalid(field, "must be a positive numeric id"))
}

/// A provider slug (plan, region, image): 1 to 64 of `[A-Za-z0-9_.-]`, starting with a letter
/// or digit (so never `.` or `..`).
pub fn slug(field: &str, value: &str) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.as_bytes()[0].is_ascii_alphanumeric()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "must be a slug: 1-64 letters, digits, '_', '.' or '-', starting with a letter or \
            digit",
        ))
    }
}

/// A hostname (RFC 1123): dot-separated labels of 1-63 letters, digits and hyphens, not starting
/// or ending with a hyphen; 253 characters at most.
pub fn hostname(field: &str, value: &str) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "must be a hostname: labels of letters, digits and '-', separated by dots",
        ))
    }
}

/// `user_data`: standard base64 (with padding) of at most [`MAX_USER_DATA_CHARS`] characters.
pub fn user_data(field: &str, value: &str) -> Result<(), ApiError> {
    if value.len() > MAX_USER_DATA_CHARS {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_USER_DATA_CHARS} base64 characters"),
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(value)
        .map(|_| ())
        .map_err(|e| ApiError::invalid(field, format!("must be standard base64: {e}")))
}

/// Tags: at most [`MAX_TAGS`]; keys 1-64 characters of `[A-Za-z0-9_.:-]`, not starting with
/// [`RESERVED_TAG_PREFIX`]; values at most 256 characters without control characters.
pub fn tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if tags.len() > MAX_TAGS {
        return Err(ApiError::invalid(field, format!("at most {MAX_TAGS} tags")));
    }
    for (key, value) in tags {
        let key_ok = !key.is_empty()
            && key.len() <= 64
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
        if !key_ok {
            return Err(ApiError::invalid(
                format!("{field}.{key}"),
                "tag keys are 1-64 letters, digits, '_', '.', ':' or '-'",
            ));
        }
        if key.starts_with(RESERVED_TAG_PREFIX) {
            return Err(ApiError::invalid(
                format!("{field}.{key}"),
                format!("tag keys starting with '{RESERVED_TAG_PREFIX}' are reserved"),
            ));
        }
        if value.chars().count() > 256 || value.chars().any(unseen) {
            return Err(ApiError::invalid(
                format!("{field}.{key}"),
                "tag values are at most 256 characters, without control, bidirectional or \
                 zero-width characters",
            ));
        }
    }
    Ok(())
}

/// Whether `c` is a control character, or a format character that changes how the text around
/// it reads without being seen: the bidirectional marks, embeddings, overrides and isolates
/// (Unicode UAX #9: U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) and the zero-width
/// characters (U+200B-U+200D, U+2060, U+FEFF). A name with one can show an owner another name
/// than its own (a "Trojan Source" spoofing, CVE-2021-42574).
pub fn unseen(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// A display name (of a key, an agent, a sandbox): 1 to 64 characters once trimmed, none of them
/// control characters or unseen format characters ([`unseen`]). Returns it trimmed.
pub fn name<'a>(field: &str, value: &'a str) -> Result<&'a str, ApiError> {
    let name = value.trim();
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(unseen) {
        return Err(ApiError::invalid(
            field,
            "must be 1-64 characters without control, bidirectional or zero-width characters",
        ));
    }
    Ok(name)
}

/// An OS password for rebuild and rescue, by the provider's rules
/// (`reference/upstream-cherry-api.md` §8): 8-24 characters; a lowercase letter; an uppercase
/// letter that is not the first character; a digit that is not the last character; none of
/// `' " ` ! $ % & ; #`.
pub fn password(field: &str, value: &str) -> Result<(), ApiError> {
    let chars: Vec<char> = value.chars().collect();
    let fail = |why: &str| Err(ApiError::invalid(field, format!("password {why}")));
    if chars.len() < 8 || chars.len() > 24 {
        return fail("must be 8 to 24 characters");
    }
    if !chars.iter().any(char::is_ascii_lowercase) {
        return fail("needs a lowercase letter");
    }
    if !chars.iter().skip(1).any(char::is_ascii_uppercase) {
        return fail("needs an uppercase letter that is not the first character");
    }
    if !chars[..chars.len() - 1].iter().any(char::is_ascii_digit) {
        return fail("needs a digit that is not the last character");
    }
    if chars
        .iter()
        .any(|c| "'\"`!$%&;#".contains(*c) || c.is_control())
    {
        return fail("must not contain ' \" ` ! $ % & ; # or control characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(err: ApiError) -> String {
        match err {
            ApiError::Invalid { field, .. } => field,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn numeric_ids() {
        assert_eq!(numeric_id("id", "912044").unwrap(), 912044);
        for bad in [
            "",
            "0",
            "012",
            "-1",
            "1a",
            "../1",
            "1.0",
            " 1",
            "1234567890123456",
        ] {
            assert_eq!(field_of(numeric_id("id", bad).unwrap_err()), "id", "{bad}");
        }
    }

    #[test]
    fn slugs() {
        for good in [
            "e5_1650v4",
            "B1-1-1gb-20s-shared",
            "LT-Siauliai",
            "ubuntu_24.04",
        ] {
            slug("plan", good).unwrap();
        }
        for bad in ["", ".", "..", "../x", "a/b", "a b", "-x", &"a".repeat(65)] {
            assert!(slug("plan", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hostnames() {
        for good in ["runner-01", "a", "web.example.com"] {
            hostname("hostname", good).unwrap();
        }
        for bad in ["", "-a", "a-", "a..b", "a_b", "ä", &"a".repeat(64)] {
            assert!(hostname("hostname", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn user_data_is_base64() {
        user_data("user_data", "I2Nsb3VkLWNvbmZpZwo=").unwrap();
        assert!(user_data("user_data", "not base64!").is_err());
        assert!(user_data("user_data", &"A".repeat(MAX_USER_DATA_CHARS + 4)).is_err());
    }

    #[test]
    fn tags_rules() {
        let ok = BTreeMap::from([("env".to_owned(), "dev".to_owned())]);
        tags("tags", &ok).unwrap();
        let reserved = BTreeMap::from([("svc-sandbox".to_owned(), "x".to_owned())]);
        assert_eq!(
            field_of(tags("tags", &reserved).unwrap_err()),
            "tags.svc-sandbox"
        );
        let bad_key = BTreeMap::from([("a b".to_owned(), "x".to_owned())]);
        assert!(tags("tags", &bad_key).is_err());
        let many: BTreeMap<_, _> = (0..21).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert!(tags("tags", &many).is_err());
    }

    /// A name reads as what it is: bidirectional overrides, isolates, marks and zero-width
    /// characters are refused like control characters; any other script passes.
    #[test]
    fn names_carry_nothing_unseen() {
        assert_eq!(name("name", "  agent-1 ").unwrap(), "agent-1");
        assert_eq!(name("name", "агент 日本").unwrap(), "агент 日本");
        for bad in [
            "",
            "   ",
            "a\u{0}b",
            "a\nb",
            "evil\u{202e}1-tnega",
            "a\u{2066}b\u{2069}",
            "a\u{200f}b",
            "a\u{061c}b",
            "a\u{200b}b",
            "a\u{feff}b",
            "a\u{2060}b",
        ] {
            assert_eq!(field_of(name("name", bad).unwrap_err()), "name", "{bad:?}");
        }
        assert!(name("name", &"x".repeat(65)).is_err());
    }

    #[test]
    fn passwords() {
        password("password", "nW7xKp2LmQ9z").unwrap();
        password("password", "rS4cueTmp8q").unwrap();
        for bad in [
            "short1A",
            "Alllower12",
            "nouppercase12",
            "noDigitsHere",
            "endsWithDigiT1",
            "has!Bang12x",
        ] {
            assert!(password("password", bad).is_err(), "{bad}");
        }
    }
}
