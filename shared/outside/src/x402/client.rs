//! The paying side, for the project's own command (`svcctl provision`) and tests: turn a 402's
//! `PAYMENT-REQUIRED` into an EIP-3009 authorization to sign, then into the header that carries
//! it (`PAYMENT-SIGNATURE` for v2, `X-PAYMENT` for v1). Conventions of the reference clients:
//! `validAfter = now − 600`, `validBefore = now + maxTimeoutSeconds`, a random 32-byte nonce.

use alloy_primitives::{Address, B256, U256};
use serde_json::json;

use super::verify::{TransferWithAuthorization, signing_hash};
use super::{Authorization, Network, PaymentRequired, encode_header};

/// An authorization ready to be signed.
#[derive(Debug, Clone)]
pub struct Draft {
    version: u8,
    network: Network,
    required: PaymentRequired,
    message: TransferWithAuthorization,
}

impl Draft {
    /// A draft paying the first offer of `required` from `from`, at unix time `now`, with
    /// `nonce`, to be sent as protocol `version` (1 or 2).
    ///
    /// Errors: no offer, or one on an unknown network or with a malformed amount or address.
    pub fn new(
        version: u8,
        required: &PaymentRequired,
        from: Address,
        now: u64,
        nonce: [u8; 32],
    ) -> Result<Self, String> {
        let offer = required.accepts.first().ok_or("the 402 offers nothing")?;
        let network =
            Network::parse(&offer.network).ok_or(format!("unknown network {}", offer.network))?;
        let to: Address = offer.pay_to.parse().map_err(|_| "bad payTo")?;
        let value = U256::from_str_radix(&offer.amount, 10).map_err(|_| "bad amount")?;
        Ok(Draft {
            version,
            network,
            required: required.clone(),
            message: TransferWithAuthorization {
                from,
                to,
                value,
                validAfter: U256::from(now.saturating_sub(600)),
                validBefore: U256::from(now + offer.max_timeout_seconds),
                nonce: B256::from(nonce),
            },
        })
    }

    /// This draft valid from `valid_after` until `valid_before` (unix seconds) instead of the
    /// reference clients' window: a payer picks its own.
    pub fn valid_between(mut self, valid_after: u64, valid_before: u64) -> Self {
        self.message.validAfter = U256::from(valid_after);
        self.message.validBefore = U256::from(valid_before);
        self
    }

    /// The EIP-712 digest to sign.
    pub fn signing_hash(&self) -> B256 {
        signing_hash(self.network, &self.message)
    }

    /// The signed authorization, as decimal strings and hex.
    pub fn authorization(&self) -> Authorization {
        let m = &self.message;
        Authorization {
            from: format!("{:#x}", m.from),
            to: format!("{:#x}", m.to),
            value: m.value.to_string(),
            valid_after: m.validAfter.to_string(),
            valid_before: m.validBefore.to_string(),
            nonce: format!("{:#x}", m.nonce),
        }
    }

    /// The header that carries this payment: [`super::PAYMENT_SIGNATURE`] for x402 v2,
    /// [`super::X_PAYMENT`] for v1.
    pub fn header_name(&self) -> &'static str {
        if self.version == 1 {
            super::X_PAYMENT
        } else {
            super::PAYMENT_SIGNATURE
        }
    }

    /// The header value carrying this payment with its `signature` (an EOA's 65 bytes, or a
    /// smart account's own).
    pub fn header(&self, signature: &[u8]) -> String {
        let payload = json!({
            "signature": format!("0x{}", hex::encode(signature)),
            "authorization": self.authorization(),
        });
        let body = if self.version == 1 {
            json!({
                "x402Version": 1,
                "scheme": "exact",
                "network": self.network.v1_name(),
                "payload": payload,
            })
        } else {
            json!({
                "x402Version": 2,
                "resource": self.required.resource,
                "accepted": self.required.accepts[0],
                "payload": payload,
            })
        };
        encode_header(&body)
    }
}
