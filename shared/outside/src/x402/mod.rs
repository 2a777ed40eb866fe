//! x402 (`reference/x402.md`): the wire types of versions 1 and 2, the `exact` scheme on EVM
//! (EIP-3009 `transferWithAuthorization` on USDC), the offline verifier, and the facilitator.
//!
//! One 402 answers both versions: the v2 `PAYMENT-REQUIRED` header (base64 JSON
//! [`PaymentRequired`]) and the v1 JSON body ([`PaymentRequiredV1`]). Payments arrive in
//! `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1), base64 JSON [`PaymentPayload`]; the settlement
//! result goes back in `PAYMENT-RESPONSE` and `X-PAYMENT-RESPONSE` (base64 [`SettleResponse`]).

pub mod cdp;
pub mod chain;
pub mod client;
pub mod facilitator;
pub mod verify;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// v2 header carrying the payment requirements of a 402.
pub const PAYMENT_REQUIRED: &str = "payment-required";
/// v2 header carrying a payment.
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
/// v1 header carrying a payment.
pub const X_PAYMENT: &str = "x-payment";
/// v2 header carrying the settlement result.
pub const PAYMENT_RESPONSE: &str = "payment-response";
/// v1 header carrying the settlement result.
pub const X_PAYMENT_RESPONSE: &str = "x-payment-response";
/// The only scheme offered.
pub const SCHEME: &str = "exact";
/// The payment flow of every offer (`extra.paymentFlow`; x402 v2 §6.1, `scheme_exact.md`
/// "Payment Flow"): the payment is settled before the server is provisioned, so it is `upfront`;
/// the service's credits are the remedy the exact scheme leaves to the seller.
pub const PAYMENT_FLOW: &str = "upfront";

/// A network USDC can be paid on, with its USDC contract and EIP-712 domain (`reference/x402.md`
/// §2.1: the two domains' names differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Base mainnet, chain 8453.
    Base,
    /// Base Sepolia, chain 84532.
    BaseSepolia,
}

impl Network {
    /// From a v1 name (`base`, `base-sepolia`) or a CAIP-2 id (`eip155:8453`, `eip155:84532`).
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "base" | "eip155:8453" => Some(Network::Base),
            "base-sepolia" | "eip155:84532" => Some(Network::BaseSepolia),
            _ => None,
        }
    }
    /// The v1 network name.
    pub fn v1_name(self) -> &'static str {
        match self {
            Network::Base => "base",
            Network::BaseSepolia => "base-sepolia",
        }
    }
    /// The CAIP-2 id (v2).
    pub fn caip2(self) -> &'static str {
        match self {
            Network::Base => "eip155:8453",
            Network::BaseSepolia => "eip155:84532",
        }
    }
    /// EIP-155 chain id.
    pub fn chain_id(self) -> u64 {
        match self {
            Network::Base => 8453,
            Network::BaseSepolia => 84532,
        }
    }
    /// The USDC contract (the EIP-712 `verifyingContract`), EIP-55.
    pub fn usdc(self) -> &'static str {
        match self {
            Network::Base => "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            Network::BaseSepolia => "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        }
    }
    /// The USDC EIP-712 domain name.
    pub fn usdc_name(self) -> &'static str {
        match self {
            Network::Base => "USD Coin",
            Network::BaseSepolia => "USDC",
        }
    }
    /// The USDC EIP-712 domain version.
    pub fn usdc_version(self) -> &'static str {
        "2"
    }
}

/// The key of one payment, and of the order it pays: `<CAIP-2 network>/<asset>/<payer>/<nonce>`,
/// all lowercase (`eip155:8453/0x8335…/0xabcd…/0x<64 hex>`). EIP-3009 lets a token accept each
/// (authorizer, nonce) once, so the key names one payment wherever it was offered. The credit that
/// keeps what a cheaper redemption left is the key with `#<n>` ([`PaymentKey::remainder`]).
///
/// Made from a verified or decoded payment ([`PaymentKey::of`]), or checked when read back
/// ([`PaymentKey::parse`]: an operator's argument, a stored record).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct PaymentKey(String);

impl PaymentKey {
    /// The key of the payment by `payer` (an address) with EIP-3009 `nonce` (`0x` + 64 hex) in
    /// `asset` (the token contract) on `network`; any case in, lowercase kept.
    pub fn of(network: Network, asset: &str, payer: &str, nonce: &str) -> PaymentKey {
        PaymentKey(format!("{}/{asset}/{payer}/{nonce}", network.caip2()).to_ascii_lowercase())
    }

    /// `value` as a payment key (a payment's own, or a remainder's with `#<n>`); `None` when it
    /// is not of that form.
    pub fn parse(value: &str) -> Option<PaymentKey> {
        let hex = |part: &str, digits: usize| {
            part.strip_prefix("0x").is_some_and(|h| {
                h.len() == digits
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
        };
        let (root, remainder) = match value.split_once('#') {
            Some((root, n)) => (root, Some(n)),
            None => (value, None),
        };
        let parts: Vec<&str> = root.split('/').collect();
        let well_formed = matches!(parts.as_slice(), [network, asset, payer, nonce]
            if Network::parse(network).is_some_and(|n| n.caip2() == *network)
                && hex(asset, 40) && hex(payer, 40) && hex(nonce, 64))
            && remainder.is_none_or(|n| {
                (1..=9).contains(&n.len())
                    && !n.starts_with('0')
                    && n.bytes().all(|b| b.is_ascii_digit())
            });
        well_formed.then(|| PaymentKey(value.to_owned()))
    }

    /// The key of the `n`-th credit that keeps what a cheaper redemption of this payment (or of
    /// one of its credits) left: `<payment key>#<n>`, `n` ≥ 1. Every redemption that leaves
    /// something takes the next number of the payment ([`PaymentKey::number`] + 1 over its chain),
    /// so that a credit redeemed more cheaply again, after it became a credit again, never meets
    /// the key of an earlier remainder.
    pub fn remainder(&self, n: u32) -> PaymentKey {
        PaymentKey(format!("{}#{}", self.root().0, n.max(1)))
    }

    /// The payment's own key (without a remainder's `#<n>`).
    pub fn root(&self) -> PaymentKey {
        match self.0.split_once('#') {
            Some((root, _)) => PaymentKey(root.to_owned()),
            None => self.clone(),
        }
    }

    /// The remainder's number (`#<n>`), 0 for the payment's own key.
    pub fn number(&self) -> u32 {
        self.0
            .split_once('#')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<PaymentKey> for String {
    fn from(key: PaymentKey) -> String {
        key.0
    }
}

impl TryFrom<String> for PaymentKey {
    type Error = &'static str;

    fn try_from(value: String) -> Result<PaymentKey, Self::Error> {
        PaymentKey::parse(&value).ok_or("not a payment key (<network>/<asset>/<payer>/<nonce>)")
    }
}

impl std::fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `extra` of an `exact` EVM requirement: the token's EIP-712 domain name and version, and the
/// payment flow (`paymentFlow`, [`PAYMENT_FLOW`] in every offer of ours; absent means
/// `authorization`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip712Extra {
    /// Domain name.
    pub name: String,
    /// Domain version.
    pub version: String,
    /// The payment flow: `upfront`, `authorization` or `escrow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_flow: Option<String>,
}

/// v2 `PaymentRequirements` (one offer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// `exact`.
    pub scheme: String,
    /// CAIP-2 network id.
    pub network: String,
    /// USDC atomic units, decimal string.
    pub amount: String,
    /// USDC contract.
    pub asset: String,
    /// Recipient (the treasury).
    pub pay_to: String,
    /// Seconds the client may take (it sets `validBefore` from this).
    pub max_timeout_seconds: u64,
    /// EIP-712 domain of the token.
    pub extra: Eip712Extra,
}

/// v2 `ResourceInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// The resource URL.
    pub url: String,
    /// What the payment buys.
    pub description: String,
    /// The response's media type.
    pub mime_type: String,
}

/// v2 `PaymentRequired` (the `PAYMENT-REQUIRED` header, base64 JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    /// 2.
    pub x402_version: u8,
    /// Why payment is (still) required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource.
    pub resource: ResourceInfo,
    /// The offers.
    pub accepts: Vec<PaymentRequirements>,
    /// Extensions by name (x402 v2 §5): the `bazaar` discovery extension of a paid route
    /// (`specs/extensions/bazaar.md`: `info` and the JSON Schema that validates it), which a
    /// client echoes in its payment payload for a cataloguing facilitator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<serde_json::Map<String, Value>>,
}

/// v1 `PaymentRequirements` (one offer in the 402 body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV1 {
    /// `exact`.
    pub scheme: String,
    /// v1 network name.
    pub network: String,
    /// USDC atomic units, decimal string.
    pub max_amount_required: String,
    /// The resource URL.
    pub resource: String,
    /// What the payment buys.
    pub description: String,
    /// The response's media type.
    pub mime_type: String,
    /// Recipient.
    pub pay_to: String,
    /// Seconds the client may take.
    pub max_timeout_seconds: u64,
    /// USDC contract.
    pub asset: String,
    /// EIP-712 domain of the token.
    pub extra: Eip712Extra,
}

/// The v1 402 body (`PaymentRequirementsResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV1 {
    /// 1.
    pub x402_version: u8,
    /// Why payment is (still) required.
    pub error: String,
    /// The offers.
    pub accepts: Vec<PaymentRequirementsV1>,
}

/// The offer a route makes: network, recipient, amount, resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// The network.
    pub network: Network,
    /// Recipient, EIP-55 or lowercase `0x…`.
    pub pay_to: String,
    /// USDC atomic units.
    pub amount: u128,
    /// Seconds the client may take.
    pub max_timeout_seconds: u64,
    /// The resource URL.
    pub resource: String,
    /// What the payment buys.
    pub description: String,
}

impl Offer {
    /// The v2 requirements of this offer.
    pub fn v2(&self) -> PaymentRequirements {
        PaymentRequirements {
            scheme: SCHEME.into(),
            network: self.network.caip2().into(),
            amount: self.amount.to_string(),
            asset: self.network.usdc().into(),
            pay_to: self.pay_to.clone(),
            max_timeout_seconds: self.max_timeout_seconds,
            extra: self.extra(),
        }
    }
    /// The v1 requirements of this offer.
    pub fn v1(&self) -> PaymentRequirementsV1 {
        PaymentRequirementsV1 {
            scheme: SCHEME.into(),
            network: self.network.v1_name().into(),
            max_amount_required: self.amount.to_string(),
            resource: self.resource.clone(),
            description: self.description.clone(),
            mime_type: "application/json".into(),
            pay_to: self.pay_to.clone(),
            max_timeout_seconds: self.max_timeout_seconds,
            asset: self.network.usdc().into(),
            extra: self.extra(),
        }
    }
    fn extra(&self) -> Eip712Extra {
        Eip712Extra {
            name: self.network.usdc_name().into(),
            version: self.network.usdc_version().into(),
            payment_flow: Some(PAYMENT_FLOW.into()),
        }
    }
    /// The v2 `PaymentRequired` of this offer, with `error`.
    pub fn payment_required(&self, error: &str) -> PaymentRequired {
        PaymentRequired {
            x402_version: 2,
            error: Some(error.to_owned()),
            resource: ResourceInfo {
                url: self.resource.clone(),
                description: self.description.clone(),
                mime_type: "application/json".into(),
            },
            accepts: vec![self.v2()],
            extensions: None,
        }
    }
    /// The v1 402 body of this offer, with `error`.
    pub fn payment_required_v1(&self, error: &str) -> PaymentRequiredV1 {
        PaymentRequiredV1 {
            x402_version: 1,
            error: error.to_owned(),
            accepts: vec![self.v1()],
        }
    }
}

/// EIP-3009 authorization, as sent (decimal strings, `0x` hex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// Payer.
    pub from: String,
    /// Recipient.
    pub to: String,
    /// Atomic units, decimal string.
    pub value: String,
    /// Unix seconds, decimal string.
    pub valid_after: String,
    /// Unix seconds, decimal string.
    pub valid_before: String,
    /// 32 bytes, `0x` + 64 hex.
    pub nonce: String,
}

/// The `exact` EVM payload: signature and authorization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExactEvmPayload {
    /// 65-byte signature, `0x` + 130 hex.
    pub signature: String,
    /// The signed authorization.
    pub authorization: Authorization,
}

/// A payment as decoded from its header: v1 (`scheme`, `network`) or v2 (`accepted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// 1 or 2.
    pub x402_version: u8,
    /// v1: the scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// v1: the network name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// v2: the offer the client accepted, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<PaymentRequirements>,
    /// v2: the resource, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<Value>,
    /// The signed authorization.
    pub payload: ExactEvmPayload,
}

/// A facilitator's answer to `/settle` (`success`, `errorReason`, `transaction`, `network`,
/// `payer`); other fields (`errorMessage`, `amount`, `extensions`) are read past and dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the transfer is on chain.
    pub success: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Transaction hash (`""` on failure).
    #[serde(default)]
    pub transaction: String,
    /// The network.
    #[serde(default)]
    pub network: String,
    /// The payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// A facilitator's answer to `/verify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// The payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// Base64 (standard, padded) of a value's JSON: how every x402 header is encoded.
pub fn encode_header<T: Serialize>(value: &T) -> String {
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
    const PAYER: &str = "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01";

    fn nonce() -> String {
        format!("0x{}", "Ab".repeat(32))
    }

    #[test]
    fn a_payment_key_is_lowercase_and_reads_back() {
        let key = PaymentKey::of(Network::Base, USDC, PAYER, &nonce());
        assert_eq!(
            key.as_str(),
            format!(
                "eip155:8453/{}/{}/{}",
                USDC.to_lowercase(),
                PAYER.to_lowercase(),
                nonce().to_lowercase()
            )
        );
        assert_eq!(PaymentKey::parse(key.as_str()), Some(key.clone()));
        let stored: PaymentKey = serde_json::from_value(serde_json::json!(key.as_str())).unwrap();
        assert_eq!(stored, key);
    }

    #[test]
    fn remainders_number_on_from_the_payment_key() {
        let key = PaymentKey::of(Network::BaseSepolia, USDC, PAYER, &nonce());
        assert_eq!(key.number(), 0);
        assert_eq!(key.remainder(1).as_str(), format!("{key}#1"));
        assert_eq!(key.remainder(1).remainder(2).as_str(), format!("{key}#2"));
        assert_eq!(
            (key.remainder(7).number(), key.remainder(7).root()),
            (7, key.clone())
        );
        assert_eq!(
            PaymentKey::parse(key.remainder(1).as_str()),
            Some(key.remainder(1))
        );
    }

    #[test]
    fn anything_else_is_not_a_payment_key() {
        let key = PaymentKey::of(Network::Base, USDC, PAYER, &nonce()).to_string();
        let (network, rest) = key.split_once('/').unwrap();
        for bad in [
            String::new(),
            format!("base/{rest}"),
            format!("eip155:1/{rest}"),
            key.to_uppercase(),
            format!("{key}/0x01"),
            key.replacen(&nonce().to_lowercase(), "0x01", 1),
            format!("{key}#0"),
            format!("{key}#x"),
            format!("{key}#"),
            format!("{network}/{rest}#01"),
        ] {
            assert_eq!(PaymentKey::parse(&bad), None, "{bad}");
            assert!(serde_json::from_value::<PaymentKey>(serde_json::json!(bad)).is_err());
        }
    }
}
