//! Wallet addresses: the owner of every record.

use crate::error::ApiError;

/// Checks an Ethereum address (`0x` + 40 hex digits, any case) and returns its canonical
/// lowercase form, which is how owners are stored and compared. 400 naming `field` otherwise.
pub fn parse(field: &str, value: &str) -> Result<String, ApiError> {
    let hex = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
        .filter(|h| h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    match hex {
        Some(hex) => Ok(format!("0x{}", hex.to_ascii_lowercase())),
        None => Err(ApiError::invalid(
            field,
            "must be an Ethereum address: 0x followed by 40 hex digits",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_lowercase() {
        assert_eq!(
            parse("owner", "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01").unwrap(),
            "0xabcdef0123456789abcdef0123456789abcdef01"
        );
        for bad in [
            "",
            "0x",
            "abcdef0123456789abcdef0123456789abcdef01",
            "0xZZcdef0123456789abcdef0123456789abcdef01",
            "0xabc",
        ] {
            assert!(parse("owner", bad).is_err(), "{bad}");
        }
    }
}
