//! Sign-In with Ethereum (EIP-4361) verification, as the relying party's steps in
//! `reference/auth.md` §1.3 require. The `siwe` crate parses the message; everything it leaves
//! out is checked here:
//!
//! 1. the nonce named in the message is taken from the store on any attempt, success or not —
//!    unknown, already used or expired nonces fail;
//! 2. `domain` is in the configured allowlist (`SIWE_DOMAINS`);
//! 3. `URI` starts with a configured prefix (`SIWE_URI_PREFIXES`) — taken from the signed
//!    message, never from anything unsigned;
//! 4. `Chain ID` is configured (`SIWE_CHAIN_IDS`);
//! 5. `Issued At` is not in the future beyond a 60 s skew, nor before the nonce was issued;
//! 6. `Expiration Time` has not passed and `Not Before` has;
//! 7. the EIP-191 signature over the exact text received is the message's address's: an EOA's
//!    65 bytes recover to it (no network call); any other signature — a smart wallet's — is
//!    checked on the payment network's chain with one `eth_call` at `RPC_URL`: ERC-1271
//!    (`isValidSignature` of a deployed account, which EIP-4361 asks verifiers to support) or
//!    ERC-6492 (an account not deployed yet, its signature wrapped with its factory call, run by
//!    EIP-6492's universal validator only for an address without code), each call with a gas cap
//!    ([`crate::x402::chain::Chain::signature_is_valid`]). A
//!    smart wallet signs in on that chain only (its message's `Chain ID`), since its code lives
//!    there.
//!
//! Wallets must send the message without a `scheme://` prefix and with an EIP-55 address (the
//! `siwe` parser refuses the others; `reference/auth.md` §2.3, §7).

use std::str::FromStr;

use alloy_primitives::{Address, Signature};
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::state::AppState;

/// Longest sign-in message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Longest signature accepted, in bytes (a smart wallet's ERC-6492 wrapper carries its factory
/// call).
pub const MAX_SIGNATURE_BYTES: usize = crate::x402::verify::MAX_SIGNATURE_BYTES;

/// A verified sign-in.
#[derive(Debug, Clone, PartialEq)]
pub struct SignIn {
    /// The signer.
    pub address: crate::address::Owner,
    /// The message's `Expiration Time`, if any (a session does not outlive it).
    pub expiration: Option<OffsetDateTime>,
}

/// The value of the `Nonce: ` line, for consuming the nonce of a message that does not parse.
fn nonce_line(message: &str) -> Option<&str> {
    message
        .lines()
        .find_map(|line| line.strip_prefix("Nonce: "))
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.len() <= 128 && n.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Whether `nonce` has the form [`issue_nonce`] gives: 32 lowercase hex characters.
fn issued_form(nonce: &str) -> bool {
    nonce.len() == 32
        && nonce
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn uri_allowed(uri: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|prefix| {
        uri == prefix
            || uri.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                rest.starts_with('/') || rest.starts_with('?') || rest.starts_with('#')
            })
    })
}

/// The checks of a parsed message against the service's configuration at `now`: domain, URI,
/// chain id, `Issued At` within the skew of now and not before its nonce (issued at
/// `nonce_created_at`, RFC 3339), `Expiration Time` and `Not Before`. The error is the reason,
/// safe to show.
fn check_message(
    config: &crate::config::SignInConfig,
    parsed: &siwe::Message,
    nonce_created_at: crate::time::Timestamp,
    now: OffsetDateTime,
) -> Result<(), &'static str> {
    let domain = parsed.domain.to_string().to_ascii_lowercase();
    if !config.domains.contains(&domain) {
        return Err("the message's domain is not allowed");
    }
    if !uri_allowed(parsed.uri.as_str(), &config.uri_prefixes) {
        return Err("the message's URI is not allowed");
    }
    if !config.chain_ids.contains(&parsed.chain_id) {
        return Err("the message's chain id is not allowed");
    }
    let skew = time::Duration::try_from(config.max_skew).unwrap_or(time::Duration::minutes(1));
    let issued_at = *parsed.issued_at.as_ref();
    let nonce_issued = nonce_created_at.datetime();
    if issued_at > now + skew || issued_at < nonce_issued - skew {
        return Err("the message's issued-at time is out of range");
    }
    if let Some(expiration) = &parsed.expiration_time
        && *expiration.as_ref() <= now
    {
        return Err("the message has expired");
    }
    if let Some(not_before) = &parsed.not_before
        && *not_before.as_ref() > now
    {
        return Err("the message is not valid yet");
    }
    Ok(())
}

/// Verifies a signed EIP-4361 `message` at time `now` (see the module docs for the checks).
///
/// Errors: 400 (`message`) when it is too long or does not parse, 400 (`signature`) when the
/// signature is not hex, empty or longer than [`MAX_SIGNATURE_BYTES`] — in both cases after its
/// nonce, if any, was consumed; 401 [`ApiError::SignInFailed`] naming the failed check
/// otherwise; 429 `sign-in` when `source` (the caller's address) already has
/// `MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS` signatures being checked on chain; 503 when a smart
/// wallet's signature cannot be checked because the chain does not answer; 500 when the store
/// fails.
pub async fn verify(
    state: &AppState,
    message: &str,
    signature: &str,
    source: &str,
    now: OffsetDateTime,
) -> Result<SignIn, ApiError> {
    let (store, config) = (&state.store, &state.config.sign_in);
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::invalid(
            "message",
            format!("at most {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    let parsed = siwe::Message::from_str(message);
    let nonce = match &parsed {
        Ok(m) => Some(m.nonce.as_str()),
        Err(_) => nonce_line(message),
    };
    // A nonce of another form was never issued here: refused before the store is asked.
    if let Some(nonce) = nonce
        && !issued_form(nonce)
    {
        return Err(ApiError::invalid(
            "message",
            "the nonce is not one this service issues (GET /api/auth/nonce: 32 hex characters)",
        ));
    }
    let taken = match nonce {
        Some(nonce) => store.take_nonce(nonce).await?,
        None => None,
    };
    let parsed = parsed
        .map_err(|e| ApiError::invalid("message", format!("not an EIP-4361 message: {e}")))?;
    let fail = |why: &str| Err(ApiError::SignInFailed(why.to_owned()));
    let Some(nonce) = taken else {
        return fail("the nonce was not issued here or is already used");
    };
    if now.unix_timestamp() >= nonce.expires_epoch {
        return fail("the nonce has expired");
    }
    if let Err(why) = check_message(config, &parsed, nonce.created_at, now) {
        return fail(why);
    }
    let shape = "0x-prefixed hex: 65 bytes from a key, or a smart wallet's signature";
    let bytes = hex::decode(signature.trim().trim_start_matches("0x"))
        .ok()
        .filter(|b| !b.is_empty() && b.len() <= MAX_SIGNATURE_BYTES)
        .ok_or_else(|| ApiError::invalid("signature", shape))?;
    let address = Address::from(parsed.address);
    if !signed_by(state, message, &parsed, &bytes, address, source).await? {
        return fail("the signature is not the message's address's");
    }
    Ok(SignIn {
        address: crate::address::Owner::of(address),
        expiration: parsed.expiration_time.as_ref().map(|t| *t.as_ref()),
    })
}

/// Whether `signature` over `message` is `address`'s: recovered offline for a 65-byte signature
/// that recovers to it, else asked of the chain (ERC-1271 / ERC-6492) when the message names the
/// payment network's chain, holding one of `source`'s sign-in slots and one of the sign-in pool's
/// meanwhile (an unauthenticated caller's wait on the chain is bounded per address and for
/// everyone together: `crate::ratelimit::slots`).
///
/// Errors: 401 for a smart wallet's signature on another chain; 429 `sign-in` past the
/// address's slots, `sign-in-pool` past the pool's; 503 when the chain does not answer.
async fn signed_by(
    state: &AppState,
    message: &str,
    parsed: &siwe::Message,
    signature: &[u8],
    address: Address,
    source: &str,
) -> Result<bool, ApiError> {
    let recovered = Signature::try_from(signature)
        .ok()
        .and_then(|s| s.recover_address_from_msg(message.as_bytes()).ok());
    if recovered == Some(address) {
        return Ok(true);
    }
    let network = state.config.payments.network;
    if parsed.chain_id != network.chain_id() {
        return Err(ApiError::SignInFailed(format!(
            "the signature is not the address's key's; a smart wallet signs in on chain {} only",
            network.chain_id()
        )));
    }
    let hash = alloy_primitives::eip191_hash_message(message.as_bytes());
    let checked = async {
        state
            .chain
            .signature_is_valid(address, hash, signature)
            .await
            .map_err(|err| {
                tracing::warn!(error = %err, "cannot check a smart wallet's signature");
                ApiError::Unavailable(
                    "the chain cannot check a smart wallet's signature now".into(),
                )
            })
    };
    let caps = &state.config.caps;
    let seconds = state.config.payments.rpc_timeout.as_secs() as i64 + 5;
    let (pool, source) = (
        crate::store::caps::Pool::SignIn,
        (source, caps.sign_ins_in_flight),
    );
    crate::ratelimit::slots::holding_in_pool(
        state,
        pool,
        source,
        caps.sign_in_pool,
        seconds,
        checked,
    )
    .await
}

/// Issues a nonce: 32 alphanumeric characters (128 random bits), usable once within
/// `SignInConfig::nonce_ttl` (10 minutes). Returns it and its expiry.
///
/// Errors: 500 when the store fails.
pub async fn issue_nonce(
    state: &AppState,
    now: OffsetDateTime,
) -> Result<(String, OffsetDateTime), ApiError> {
    let (store, config) = (&state.store, &state.config.sign_in);
    let nonce = crate::ids::random_hex(16);
    let ttl = time::Duration::try_from(config.nonce_ttl).unwrap_or(time::Duration::minutes(10));
    let expires = now + ttl;
    store
        .put_nonce(&crate::store::sessions::NonceRecord {
            nonce: nonce.clone(),
            created_at: crate::time::Timestamp::of(now),
            expires_epoch: expires.unix_timestamp(),
        })
        .await?;
    Ok((nonce, expires))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_prefixes_match_whole_origins() {
        let p = vec!["https://app.example.com".to_owned()];
        assert!(uri_allowed("https://app.example.com", &p));
        assert!(uri_allowed("https://app.example.com/login", &p));
        assert!(!uri_allowed("https://app.example.com.evil.io", &p));
        assert!(!uri_allowed("https://app.example.comx/", &p));
        assert!(!uri_allowed("http://app.example.com/", &p));
    }

    #[test]
    fn nonce_lines_of_broken_messages_are_found() {
        assert_eq!(nonce_line("garbage\nNonce: abc123\nmore"), Some("abc123"));
        assert_eq!(nonce_line("Nonce: ../x"), None);
        assert_eq!(nonce_line("no nonce"), None);
    }
}

/// The body of `POST /api/auth/verify`: the EIP-4361 `message` as signed, and its EIP-191
/// `signature` (0x-prefixed hex: 65 bytes from a key, or a smart wallet's ERC-1271 or ERC-6492
/// signature, at most [`MAX_SIGNATURE_BYTES`]).
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The sign-in message, exactly as signed.
    pub message: String,
    /// Its signature.
    pub signature: String,
}
