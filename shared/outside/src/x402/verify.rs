//! The offline verifier: every check of `reference/x402.md` §2.3 (1–11) that needs no network,
//! run before anything else — decoding, version, scheme, the v2 `accepted` offer, network,
//! asset, `payTo`, the exact amount, the time window (6 s buffer), a 32-byte nonce, and the
//! EIP-712 signature recovering to `from`.
//!
//! A smart wallet (a contract account) signs with ERC-1271 — the account's own
//! `isValidSignature` decides — or, not deployed yet, ERC-6492 (the signature wrapped with its
//! factory call). Neither can be checked offline: a signature that is not 65 bytes passes every
//! check here but the signer's, and is carried out as [`VerifiedPayment::smart_signature`] for
//! the chain to judge before anything of the payment is recorded
//! ([`crate::x402::chain::Chain::standing`], with the payer's balance and the nonce's state).
//!
//! The `exact` EVM scheme signs EIP-3009 `TransferWithAuthorization(address from,address to,
//! uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)` under the USDC
//! contract's EIP-712 domain (name and version per network, [`Network`]).

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use base64::Engine;
use serde_json::Value;

use super::{Offer, PaymentPayload};
use crate::x402::Network;

sol! {
    /// EIP-3009 `TransferWithAuthorization`, the typed data of the `exact` EVM scheme.
    #[derive(Debug, PartialEq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// `validBefore` must be at least this many seconds ahead (one block of slack; the reference
/// facilitators use the same constant).
pub const VALID_BEFORE_BUFFER_SECS: u64 = 6;

/// `validBefore` may be at most the offer's `maxTimeoutSeconds` plus this many seconds ahead
/// (clock skew): an order whose settle may have been sent waits for the chain at most until
/// `validBefore` + finality, so that wait is bounded.
pub const VALID_BEFORE_SLACK_SECS: u64 = 60;

/// Why a payment is refused before any network call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PaymentError {
    /// The header is not base64 of a JSON payment payload (400).
    #[error("the payment header cannot be decoded: {0}")]
    Malformed(String),
    /// A check failed (402); the x402 reason code.
    #[error("{0}")]
    Rejected(&'static str),
}

/// A payment that passed every offline check.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedPayment {
    /// 1 or 2.
    pub version: u8,
    /// The network.
    pub network: Network,
    /// USDC contract, lowercase.
    pub asset: String,
    /// The payer (`from`), lowercase.
    pub payer: String,
    /// The EIP-3009 nonce, lowercase `0x` + 64 hex.
    pub nonce: String,
    /// Atomic units.
    pub value: u128,
    /// The authorization's `validAfter`, unix seconds (saturated at `i64::MAX`): no use of it
    /// can predate this.
    pub valid_after: i64,
    /// The EIP-712 digest the authorization is signed over (USDC's domain on `network`).
    pub digest: B256,
    /// The authorization as signed (what the settlement's `transferWithAuthorization` is sent
    /// with, and what the pre-check simulates).
    pub authorization: TransferWithAuthorization,
    /// A smart wallet's signature, not checked yet (any length but 65 bytes); `None` when the
    /// signature was recovered to the payer offline.
    pub smart_signature: Option<Vec<u8>>,
    /// The payment payload as decoded, for the facilitator.
    pub payload: Value,
    /// The requirements it pays (v1 or v2 shape), for the facilitator.
    pub requirements: Value,
}

/// The EIP-712 domain of USDC on `network`.
pub fn domain(network: Network) -> Eip712Domain {
    Eip712Domain::new(
        Some(network.usdc_name().into()),
        Some(network.usdc_version().into()),
        Some(U256::from(network.chain_id())),
        Some(network.usdc().parse().expect("a valid constant address")),
        None,
    )
}

/// The EIP-712 digest an authorization is signed over on `network`.
pub fn signing_hash(network: Network, authorization: &TransferWithAuthorization) -> B256 {
    authorization.eip712_signing_hash(&domain(network))
}

/// Decodes a payment header (`X-PAYMENT` for v1, `PAYMENT-SIGNATURE` for v2): standard base64
/// of JSON. Returns the typed payload and the JSON itself.
///
/// Errors: [`PaymentError::Malformed`].
pub fn decode(header: &str) -> Result<(PaymentPayload, Value), PaymentError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(header.trim())
        .map_err(|e| PaymentError::Malformed(format!("not base64: {e}")))?;
    let raw: Value = serde_json::from_slice(&bytes)
        .map_err(|e| PaymentError::Malformed(format!("not JSON: {e}")))?;
    let payload: PaymentPayload = serde_json::from_value(raw.clone())
        .map_err(|e| PaymentError::Malformed(format!("not a payment payload: {e}")))?;
    Ok((payload, raw))
}

fn same_address(a: &str, b: &str) -> bool {
    match (a.parse::<Address>(), b.parse::<Address>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn uint(value: &str) -> Option<U256> {
    if value.is_empty() || value.len() > 78 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(value, 10).ok()
}

/// The payment requirements a payload of protocol `version` agreed to, checked against this
/// route's `offer`: v2's `accepted` must be the offer itself; v1 names the scheme and network.
/// Returns them as the facilitator is sent them.
fn requirements(
    version: u8,
    payload: &PaymentPayload,
    offer: &Offer,
) -> Result<Value, PaymentError> {
    use PaymentError::Rejected;
    Ok(if version == 2 {
        let accepted = payload
            .accepted
            .as_ref()
            .ok_or(Rejected("invalid_payment_requirements"))?;
        if accepted.scheme != super::SCHEME {
            return Err(Rejected("unsupported_scheme"));
        }
        if Network::parse(&accepted.network) != Some(offer.network) {
            return Err(Rejected("invalid_network"));
        }
        let ours = offer.v2();
        let same = accepted.amount == ours.amount
            && accepted.network == ours.network
            && same_address(&accepted.asset, &ours.asset)
            && same_address(&accepted.pay_to, &ours.pay_to)
            && accepted.max_timeout_seconds == ours.max_timeout_seconds
            && accepted.extra == ours.extra;
        if !same {
            return Err(Rejected("invalid_payment_requirements"));
        }
        serde_json::to_value(ours).unwrap_or(Value::Null)
    } else {
        if payload.scheme.as_deref() != Some(super::SCHEME) {
            return Err(Rejected("unsupported_scheme"));
        }
        if payload.network.as_deref().and_then(Network::parse) != Some(offer.network)
            || payload.network.as_deref() != Some(offer.network.v1_name())
        {
            return Err(Rejected("invalid_network"));
        }
        serde_json::to_value(offer.v1()).unwrap_or(Value::Null)
    })
}

/// An authorization's nonce: `0x` and 32 bytes of hex.
fn nonce_of(nonce: &str) -> Result<B256, PaymentError> {
    let invalid = || PaymentError::Rejected("invalid_payload");
    let bytes =
        hex::decode(nonce.strip_prefix("0x").ok_or_else(invalid)?).map_err(|_| invalid())?;
    if bytes.len() != 32 {
        return Err(invalid());
    }
    Ok(B256::from_slice(&bytes))
}

/// The longest smart-wallet signature accepted, in bytes (an ERC-6492 wrapper carries the
/// account's factory call; WebAuthn signatures carry client data).
pub const MAX_SIGNATURE_BYTES: usize = 4096;

/// A signature as the offline check sees it.
enum Signed {
    /// 65 bytes, recovered to this address.
    By(Address),
    /// A smart wallet's (any other length up to [`MAX_SIGNATURE_BYTES`]), which only the account
    /// itself can judge: its bytes.
    Smart(Vec<u8>),
}

/// Who signed the EIP-712 `digest` with `signature` (hex): see [`Signed`].
fn signer(signature: &str, digest: &B256) -> Result<Signed, PaymentError> {
    let invalid = || PaymentError::Rejected("invalid_exact_evm_payload_signature");
    let signature_bytes = hex::decode(signature.trim_start_matches("0x")).map_err(|_| invalid())?;
    match signature_bytes.len() {
        65 => {}
        0 => return Err(invalid()),
        n if n > MAX_SIGNATURE_BYTES => return Err(invalid()),
        _ => return Ok(Signed::Smart(signature_bytes)),
    }
    let signature = Signature::try_from(signature_bytes.as_slice()).map_err(|_| invalid())?;
    signature
        .recover_address_from_prehash(digest)
        .map(Signed::By)
        .map_err(|_| invalid())
}

/// Runs every offline check of a payment decoded from a header of protocol `version` against
/// the `offer` of this route, at unix time `now`.
///
/// Errors: [`PaymentError::Rejected`] with the x402 reason: `invalid_x402_version`,
/// `unsupported_scheme`, `invalid_payment_requirements` (v2 `accepted` is not our offer),
/// `invalid_network`, `invalid_exact_evm_payload_recipient_mismatch`,
/// `invalid_exact_evm_payload_authorization_value_mismatch`,
/// `invalid_exact_evm_payload_authorization_valid_before` (less than
/// [`VALID_BEFORE_BUFFER_SECS`] ahead, or more than `maxTimeoutSeconds` +
/// [`VALID_BEFORE_SLACK_SECS`]),
/// `invalid_exact_evm_payload_authorization_valid_after`, `invalid_payload` (numbers, nonce or
/// addresses malformed), `invalid_exact_evm_payload_signature` (a 65-byte signature by another
/// key, or one that is empty, not hex or longer than [`MAX_SIGNATURE_BYTES`]; a smart
/// wallet's passes as [`VerifiedPayment::smart_signature`], see the module docs).
pub fn verify(
    version: u8,
    payload: &PaymentPayload,
    raw: Value,
    offer: &Offer,
    now: u64,
) -> Result<VerifiedPayment, PaymentError> {
    use PaymentError::Rejected;
    if payload.x402_version != version || !matches!(version, 1 | 2) {
        return Err(Rejected("invalid_x402_version"));
    }
    let requirements = requirements(version, payload, offer)?;
    let auth = &payload.payload.authorization;
    let from: Address = auth.from.parse().map_err(|_| Rejected("invalid_payload"))?;
    let to: Address = auth.to.parse().map_err(|_| Rejected("invalid_payload"))?;
    if !same_address(&auth.to, &offer.pay_to) {
        return Err(Rejected("invalid_exact_evm_payload_recipient_mismatch"));
    }
    let value = uint(&auth.value).ok_or(Rejected("invalid_payload"))?;
    if value != U256::from(offer.amount) {
        return Err(Rejected(
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ));
    }
    let valid_after = uint(&auth.valid_after).ok_or(Rejected("invalid_payload"))?;
    let valid_before = uint(&auth.valid_before).ok_or(Rejected("invalid_payload"))?;
    let latest = now + offer.max_timeout_seconds + VALID_BEFORE_SLACK_SECS;
    if valid_before < U256::from(now + VALID_BEFORE_BUFFER_SECS)
        || valid_before > U256::from(latest)
    {
        return Err(Rejected(
            "invalid_exact_evm_payload_authorization_valid_before",
        ));
    }
    if valid_after > U256::from(now) {
        return Err(Rejected(
            "invalid_exact_evm_payload_authorization_valid_after",
        ));
    }
    let nonce = nonce_of(&auth.nonce)?;
    let message = TransferWithAuthorization {
        from,
        to,
        value,
        validAfter: valid_after,
        validBefore: valid_before,
        nonce,
    };
    let digest = signing_hash(offer.network, &message);
    let smart_signature = match signer(&payload.payload.signature, &digest)? {
        Signed::By(signer) if signer != from => {
            return Err(Rejected("invalid_exact_evm_payload_signature"));
        }
        Signed::By(_) => None,
        Signed::Smart(bytes) => Some(bytes),
    };
    Ok(VerifiedPayment {
        version,
        network: offer.network,
        asset: offer.network.usdc().to_ascii_lowercase(),
        payer: format!("{from:#x}"),
        nonce: format!("{nonce:#x}"),
        value: offer.amount,
        valid_after: i64::try_from(valid_after).unwrap_or(i64::MAX),
        digest,
        authorization: message,
        smart_signature,
        payload: raw,
        requirements,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{address, b256};
    use alloy_sol_types::SolStruct;

    fn vector(from: Address) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from,
            to: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: U256::from(10000u64),
            validAfter: U256::from(1740672089u64),
            validBefore: U256::from(1740672154u64),
            nonce: b256!("f3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
        }
    }

    /// `reference/x402.md` §6, vector B (Anvil account #0), both networks.
    #[test]
    fn golden_digests_and_signatures() {
        let from = address!("f39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
        let message = vector(from);
        assert_eq!(
            message.eip712_type_hash(),
            b256!("7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
        assert_eq!(
            message.eip712_hash_struct(),
            b256!("b2438b1b8298f6129feb7c6a96cb5bee12d7e8ba27c7c27cde803071ebdc42e8")
        );
        let cases = [
            (
                Network::Base,
                b256!("02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"),
                b256!("7e9613714edd92ad20fa5b252ec168245031911a3438dd20225f083b6a688f8a"),
                concat!(
                    "a70a7d235fd4218a3ed6625525892efed6fd1ac6a193ba612bb9da921620bce748",
                    "85a8f7f56d2dc2f46005b7d6a089ae3469455a911004b6c4a6ab600677f56c1c"
                ),
            ),
            (
                Network::BaseSepolia,
                b256!("71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818"),
                b256!("50708d3bf7216e1aeabe7bf22081b9f36c7c287530f92510318f13a03d89dc86"),
                concat!(
                    "dc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c315",
                    "7b4b4030f1bebc53d55ace15c2377dff501a60e1e56c291f1000d6e78f082f1b"
                ),
            ),
        ];
        for (network, separator, digest, signature) in cases {
            assert_eq!(domain(network).separator(), separator, "{network:?}");
            assert_eq!(signing_hash(network, &message), digest, "{network:?}");
            let signature =
                Signature::try_from(hex::decode(signature).unwrap().as_slice()).unwrap();
            assert_eq!(
                signature.recover_address_from_prehash(&digest).unwrap(),
                from
            );
        }
    }

    /// Vector A: the spec's own example recovers under Base Sepolia, not under Base.
    #[test]
    fn the_specs_example_recovers_only_on_sepolia() {
        let from = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
        let signature = Signature::try_from(
            hex::decode(concat!(
                "2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608",
                "a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c"
            ))
            .unwrap()
            .as_slice(),
        )
        .unwrap();
        let sepolia = signing_hash(Network::BaseSepolia, &vector(from));
        assert_eq!(
            signature.recover_address_from_prehash(&sepolia).unwrap(),
            from
        );
        let mainnet = signing_hash(Network::Base, &vector(from));
        assert_ne!(
            signature.recover_address_from_prehash(&mainnet).unwrap(),
            from
        );
    }

    /// A v1 payment of vector B's authorization (Base Sepolia) from `from` with `signature`.
    fn vector_payment(from: &str, signature: &str) -> (PaymentPayload, Value) {
        let raw = serde_json::json!({
            "x402Version": 1, "scheme": "exact", "network": "base-sepolia",
            "payload": {"signature": signature, "authorization": {
                "from": from, "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "10000", "validAfter": "1740672089", "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}
        });
        (serde_json::from_value(raw.clone()).unwrap(), raw)
    }

    /// The signer check: a 65-byte signature must recover to `from`; a smart wallet's signature
    /// (any other length) passes offline, carried for the chain to judge; an empty,
    /// non-hex or oversized one is refused.
    #[test]
    fn a_smart_wallets_signature_passes_offline_and_an_eoas_must_recover() {
        let offer = Offer {
            network: Network::BaseSepolia,
            pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            amount: 10_000,
            max_timeout_seconds: 120,
            resource: String::new(),
            description: String::new(),
        };
        let anvil0 = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
        let signed = concat!(
            "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c315",
            "7b4b4030f1bebc53d55ace15c2377dff501a60e1e56c291f1000d6e78f082f1b"
        );
        let now = 1_740_672_100;
        let check = |from: &str, signature: &str| {
            let (payload, raw) = vector_payment(from, signature);
            verify(1, &payload, raw, &offer, now).map(|v| (v.payer, v.smart_signature.is_some()))
        };
        assert_eq!(
            check(anvil0, signed),
            Ok((anvil0.to_ascii_lowercase(), false))
        );
        let refused = Err(PaymentError::Rejected(
            "invalid_exact_evm_payload_signature",
        ));
        let other = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
        assert_eq!(check(other, signed), refused, "65 bytes by another key");
        let smart = format!("0x{}", "ab".repeat(300));
        assert_eq!(check(other, &smart), Ok((other.to_ascii_lowercase(), true)));
        let wrapped = format!("0x{}{}", "cd".repeat(200), "6492".repeat(16));
        assert_eq!(
            check(other, &wrapped),
            Ok((other.to_ascii_lowercase(), true))
        );
        for bad in [
            "0x".to_owned(),
            "0xzz".to_owned(),
            format!("0x{}", "ab".repeat(MAX_SIGNATURE_BYTES + 1)),
        ] {
            assert_eq!(check(other, &bad), refused, "{}", &bad[..bad.len().min(10)]);
        }
    }
}
