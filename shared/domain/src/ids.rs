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
/// Prefix of webhook endpoint ids.
pub const WEBHOOK: &str = "whk_";
/// Prefix of agent ids.
pub const AGENT: &str = "agt_";
/// Prefix of approval ids.
pub const APPROVAL: &str = "apr_";
/// Prefix of SSH key ids (from the owner and the key's fingerprint, not random).
pub const SSH_KEY: &str = "ssh_";
/// Prefix of webhook delivery ids (from the endpoint and the event, not random).
pub const DELIVERY: &str = "dlv_";
/// Prefix of OAuth client ids (`crate::identity::oauth::clients`).
pub const OAUTH_CLIENT: &str = "cli_";

/// Returns `n` random bytes from the operating system's random source, hex-encoded
/// (`2n` lowercase characters).
///
/// # Panics
/// When the OS random source fails, which leaves nothing safe to do.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    #[cfg(feature = "sim")]
    if seeded(&mut bytes) {
        return hex::encode(bytes);
    }
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    hex::encode(bytes)
}

/// The seeded stream of [`seed`], if one is set.
#[cfg(feature = "sim")]
static SEEDED: std::sync::Mutex<Option<u64>> = std::sync::Mutex::new(None);

/// Makes every id, nonce and token after it come from a stream seeded with `seed` (splitmix64)
/// instead of the OS's random source, so that a simulation's seed replays exactly (the order of
/// keys in an index decides what is read first); `None`: the OS's source again. Only with the
/// `sim` feature, which only the tests' crate turns on: no deployed function has it
/// (`make build` excludes that crate).
#[cfg(feature = "sim")]
pub fn seed(seed: Option<u64>) {
    *SEEDED.lock().unwrap_or_else(|e| e.into_inner()) = seed;
}

/// Fills `bytes` from the seeded stream, if one is set.
#[cfg(feature = "sim")]
fn seeded(bytes: &mut [u8]) -> bool {
    let mut state = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(state) = state.as_mut() else {
        return false;
    };
    for chunk in bytes.chunks_mut(8) {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let z = z ^ (z >> 31);
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
    true
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

/// A sandbox's id, checked once at the edge (a path, a tool's argument): `sbx_` and 32
/// lowercase hex characters ([`parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxId(String);

impl SandboxId {
    /// `value` as a sandbox id.
    ///
    /// Errors: 400 naming `field` when it is not one.
    pub fn parse(field: &str, value: &str) -> Result<Self, ApiError> {
        parse(SANDBOX, field, value).map(|id| SandboxId(id.to_owned()))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A provider server's id, checked once at the edge: 1 to 15 digits, no sign, no leading zero
/// (`crate::validate::numeric_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId(u64);

impl ServerId {
    /// `value` as a server id.
    ///
    /// Errors: 400 naming `field` when it is not a positive numeric id.
    pub fn parse(field: &str, value: &str) -> Result<Self, ApiError> {
        crate::validate::numeric_id(field, value).map(ServerId)
    }

    /// The provider's number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for ServerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a 400 names, if the result is one.
    fn field_of<T>(result: Result<T, ApiError>) -> Option<String> {
        match result {
            Err(ApiError::Invalid { field, .. }) => Some(field),
            _ => None,
        }
    }

    #[test]
    fn new_ids_parse_and_differ() {
        let a = new(SANDBOX);
        let b = new(SANDBOX);
        assert_ne!(a, b);
        assert_eq!(parse(SANDBOX, "id", &a).unwrap(), a);
    }

    #[test]
    fn typed_ids_are_parsed_once_and_name_their_field() {
        let id = new(SANDBOX);
        assert_eq!(SandboxId::parse("sandboxId", &id).unwrap().as_str(), id);
        assert!(field_of(SandboxId::parse("sandboxId", "..")).as_deref() == Some("sandboxId"));
        assert_eq!(ServerId::parse("serverId", "42").unwrap().get(), 42);
        for bad in ["0", "042", "-1", "1e3", "", "1234567890123456"] {
            assert!(
                field_of(ServerId::parse("serverId", bad)).as_deref() == Some("serverId"),
                "{bad}"
            );
        }
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
