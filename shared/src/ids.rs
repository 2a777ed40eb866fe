//! Local identifiers: a short type prefix and 32 lowercase hex characters (128 random bits from
//! the OS random source), e.g. `sbx_0f3a…` for a sandbox or `key_…` for an API key record.
//!
//! Ids taken from a path are checked with [`parse`] before they reach the store.

use crate::error::ApiError;

/// Prefix of sandbox ids.
pub const SANDBOX: &str = "sbx_";
/// Prefix of order ids (an order is the work one payment pays for).
pub const ORDER: &str = "ord_";
/// Prefix of API key record ids (not the key itself, which starts with `svc_`).
pub const API_KEY: &str = "key_";

/// Returns `n` random bytes from the operating system's random source, hex-encoded
/// (`2n` lowercase characters).
///
/// # Panics
/// When the OS random source fails, which leaves nothing safe to do.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    hex::encode(bytes)
}

/// A new id: `prefix` followed by 32 random lowercase hex characters.
pub fn new(prefix: &str) -> String {
    format!("{prefix}{}", random_hex(16))
}

/// Checks that `value` is a well-formed id with `prefix`; 400 naming `field` otherwise.
pub fn parse<'a>(prefix: &str, field: &str, value: &'a str) -> Result<&'a str, ApiError> {
    let ok = value.len() == prefix.len() + 32
        && value.starts_with(prefix)
        && value[prefix.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(value)
    } else {
        Err(ApiError::invalid(
            field,
            format!("must be an id of the form {prefix}<32 lowercase hex characters>"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_parse_and_differ() {
        let a = new(SANDBOX);
        let b = new(SANDBOX);
        assert_ne!(a, b);
        assert_eq!(parse(SANDBOX, "id", &a).unwrap(), a);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in [
            "",
            "sbx_",
            "sbx_../../etc",
            "key_0123456789abcdef0123456789abcdef",
            "sbx_0123456789ABCDEF0123456789abcdef",
            "sbx_0123456789abcdef0123456789abcdef0",
        ] {
            assert!(parse(SANDBOX, "id", bad).is_err(), "{bad}");
        }
    }
}
