//! What the chain says of a payment before anything of it is recorded (design brief §3, Money;
//! the capacity rule): one round trip, a JSON-RPC batch at `latest`.
//!
//! A smart wallet's account is code its owner wrote, and code can answer a question one way and
//! the same question asked another way differently: an `isValidSignature` that says yes only to
//! a call with no sender (`tx.origin` zero, as an `eth_call` without `from` runs) passes a bare
//! ERC-1271 check and fails the settlement, whose transaction the facilitator sends. So the
//! pre-check asks what the settlement will ask, as it will be asked: an `eth_call` of USDC's own
//! `transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, bytes signature)`
//! (FiatTokenV2_2: an EOA's signature by ECDSA, a contract's by ERC-1271 from USDC's
//! `SignatureChecker`), sent `from` a realistic sender (the facilitator's signer, when the
//! operator names it: `X402_SETTLEMENT_SENDER`), with a gas cap. It reverts exactly when the
//! transfer would: a signature the account refuses in that call, a used nonce, a short balance,
//! a window the chain's clock is outside of. An account not deployed yet (an ERC-6492 wrapper)
//! is judged by the universal validator, run from the same sender.
//!
//! What an account can still tell apart (the block it runs in, the gas price) is bounded past
//! this check: a payer whose checked claim the facilitator refuses is kept off the paid pool for
//! a while (`domain::billing::cooldown`).

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_sol_types::{SolCall, sol};
use serde_json::{Value, json};

use super::{
    Chain, ChainError, SIGNATURE_CHECK_GAS, SmartSignature, authorizationStateCall, bad,
    balanceOfCall, get_code,
};

sol! {
    /// FiatTokenV2_2's EIP-3009 transfer with a `bytes` signature (ECDSA for an EOA, ERC-1271
    /// for a contract): what the facilitator's settlement calls.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes signature
    ) external;
}

/// A presented payment's authorization, as the pre-check asks the chain of it
/// ([`Chain::standing`]).
#[derive(Debug, Clone, Copy)]
pub struct PendingTransfer<'a> {
    /// The USDC contract (`asset`).
    pub asset: Address,
    /// The payer (`authorization.from`).
    pub payer: Address,
    /// The treasury (`authorization.to`).
    pub to: Address,
    /// USDC atomic units.
    pub value: U256,
    /// `validAfter`, unix seconds.
    pub valid_after: U256,
    /// `validBefore`, unix seconds.
    pub valid_before: U256,
    /// The EIP-3009 nonce.
    pub nonce: B256,
    /// The EIP-712 digest the authorization is signed over.
    pub digest: B256,
    /// A smart wallet's signature as sent (any length but 65 bytes), for the chain to judge;
    /// `None` when the signature was recovered to the payer offline.
    pub signature: Option<&'a [u8]>,
    /// Who the simulated transfer is sent as (its `from`, hence `tx.origin`).
    pub sender: Address,
}

impl<'a> PendingTransfer<'a> {
    /// The transfer the settlement of `verified` sends, as `sender` would send it.
    ///
    /// Errors: [`ChainError::Protocol`] when the verified asset is not an address.
    pub fn of(
        verified: &'a crate::x402::verify::VerifiedPayment,
        sender: Address,
    ) -> Result<Self, ChainError> {
        let a = &verified.authorization;
        Ok(PendingTransfer {
            asset: verified.asset.parse().map_err(|_| bad("asset"))?,
            payer: a.from,
            to: a.to,
            value: a.value,
            valid_after: a.validAfter,
            valid_before: a.validBefore,
            nonce: a.nonce,
            digest: verified.digest,
            signature: verified.smart_signature.as_deref(),
            sender,
        })
    }
}

/// What the chain says of a payment before anything of it is recorded: one round trip
/// ([`Chain::standing`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// Whether the signature is the payer's as the settlement would judge it (`true` when it
    /// was checked offline).
    pub signed: bool,
    /// The payer's USDC balance, atomic units.
    pub balance: U256,
    /// Whether (payer, nonce) is used or cancelled already (`authorizationState`).
    pub nonce_used: bool,
    /// What the simulated transfer's revert said, when it reverted (e.g. `FiatTokenV2: invalid
    /// signature`, `FiatTokenV2: authorization is not yet valid`).
    pub reverted: Option<String>,
}

impl Chain {
    /// What the chain says of `transfer` before anything of it is recorded, in one round trip
    /// (see the module docs): the payer's balance (`balanceOf`), whether the nonce is used
    /// (`authorizationState`), and — for a smart wallet's signature — whether the transfer the
    /// settlement sends would pass, simulated from `transfer.sender` (a counterfactual account
    /// takes one more call, the universal validator's).
    ///
    /// Errors: [`ChainError`] (a revert is an answer, not an error); an answer that is not the
    /// protocol's is [`ChainError::Protocol`].
    pub async fn standing(&self, transfer: &PendingTransfer<'_>) -> Result<Standing, ChainError> {
        let smart = match transfer.signature.map(SmartSignature::parse) {
            Some(None) => None,
            Some(Some(smart)) => Some(Some(smart)),
            None => Some(None),
        };
        let asset = transfer.asset;
        let mut calls = vec![
            view(
                asset,
                balanceOfCall {
                    account: transfer.payer,
                }
                .abi_encode(),
            ),
            view(
                asset,
                authorizationStateCall {
                    authorizer: transfer.payer,
                    nonce: transfer.nonce,
                }
                .abi_encode(),
            ),
        ];
        if let Some(Some(smart)) = &smart {
            calls.push(get_code(transfer.payer));
            calls.push(simulation(transfer, &smart.inner));
        }
        let mut answers = self.batch(&calls).await?.into_iter();
        let mut next = || answers.next().ok_or_else(|| bad("batch"));
        let balance = word(next()??, "balanceOf result")?;
        let nonce_used = word(next()??, "authorizationState result")? != U256::ZERO;
        let (signed, reverted) = match smart {
            None => (false, None),
            Some(None) => (true, None),
            Some(Some(smart)) => {
                let (code, simulated) = (next()??, next()?);
                Box::pin(self.judge_transfer(transfer, &smart, code, simulated)).await?
            }
        };
        Ok(Standing {
            signed,
            balance,
            nonce_used,
            reverted,
        })
    }

    /// Whether a smart wallet's transfer would pass: the simulation's answer (`simulated`) when
    /// the payer has `code`; else the universal validator's for an ERC-6492 wrapper, from the
    /// transfer's sender. With the revert's words, when the simulation reverted.
    async fn judge_transfer(
        &self,
        transfer: &PendingTransfer<'_>,
        smart: &SmartSignature,
        code: Value,
        simulated: Result<Value, ChainError>,
    ) -> Result<(bool, Option<String>), ChainError> {
        let deployed = !matches!(code.as_str(), Some("0x" | "") | None);
        if !deployed {
            let valid = self
                .judge_signature(
                    transfer.payer,
                    transfer.digest,
                    smart,
                    code,
                    Ok(Value::Null),
                    Some(transfer.sender),
                )
                .await?;
            return Ok((valid, None));
        }
        match simulated {
            Ok(_) => Ok((true, None)),
            Err(ChainError::Reverted(why)) => Ok((false, Some(why))),
            Err(err) => Err(err),
        }
    }
}

/// `eth_call` of a view of `asset` at `latest`.
fn view(asset: Address, call: Vec<u8>) -> (&'static str, Value) {
    let data = format!("0x{}", hex::encode(call));
    (
        "eth_call",
        json!([{"to": asset.to_string(), "data": data}, "latest"]),
    )
}

/// `eth_call` of USDC's `transferWithAuthorization` of `transfer` with `signature` (the
/// account's, unwrapped), from its sender at `latest`, with a gas cap of [`SIGNATURE_CHECK_GAS`].
fn simulation(transfer: &PendingTransfer<'_>, signature: &Bytes) -> (&'static str, Value) {
    let call = transferWithAuthorizationCall {
        from: transfer.payer,
        to: transfer.to,
        value: transfer.value,
        validAfter: transfer.valid_after,
        validBefore: transfer.valid_before,
        nonce: transfer.nonce,
        signature: signature.clone(),
    };
    let request = json!({
        "from": transfer.sender.to_string(),
        "to": transfer.asset.to_string(),
        "data": format!("0x{}", hex::encode(call.abi_encode())),
        "gas": format!("{SIGNATURE_CHECK_GAS:#x}"),
    });
    ("eth_call", json!([request, "latest"]))
}

/// A 32-byte word answered by a view.
fn word(v: Value, what: &str) -> Result<U256, ChainError> {
    v.as_str()
        .and_then(|s| hex::decode(s.trim_start_matches("0x")).ok())
        .filter(|w| w.len() == 32)
        .map(|w| U256::from_be_slice(&w))
        .ok_or_else(|| bad(what))
}
