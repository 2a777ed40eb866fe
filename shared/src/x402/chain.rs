//! Asking the chain whether an EIP-3009 authorization was used (`reference/x402.md` §9): USDC's
//! `authorizationState(address authorizer, bytes32 nonce) → bool`, read with JSON-RPC
//! `eth_call` at the `latest` block. `true` once a `transferWithAuthorization` with that
//! (payer, nonce) executed (or the payer cancelled it); `false` otherwise — and for an
//! authorization whose `validBefore` has passed, `false` means it can never be used.
//!
//! This is how a settlement whose answer was lost, stayed pending, or came back "already used"
//! is resolved: by lookup, never by guessing. The development facilitator answers the same call
//! from its own ledger under `make dev`.

use std::time::Duration;

use alloy_primitives::{Address, B256};
use alloy_sol_types::{SolCall, sol};
use serde_json::{Value, json};

sol! {
    /// EIP-3009's view of an authorization's state.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
}

/// A failure asking the chain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChainError {
    /// No answer in time.
    #[error("the chain RPC did not answer in time")]
    Timeout,
    /// Connection failure, or an HTTP error status.
    #[error("the chain RPC is unreachable: {0}")]
    Transport(String),
    /// A JSON-RPC error, or a result that is not an ABI-encoded bool.
    #[error("unexpected chain RPC answer: {0}")]
    Protocol(String),
}

/// A JSON-RPC client of one chain's node.
#[derive(Debug, Clone)]
pub struct Chain {
    http: reqwest::Client,
    url: String,
}

impl Chain {
    /// A client of the node at `url`, with a per-request `timeout`.
    ///
    /// Errors: the HTTP client cannot be built.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, ChainError> {
        // No redirects: a redirect would carry the request (and its credentials) elsewhere.
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ChainError::Transport(e.to_string()))?;
        Ok(Chain {
            http,
            url: url.to_owned(),
        })
    }

    /// Whether `payer`'s authorization `nonce` was used on token contract `asset`.
    ///
    /// Errors: [`ChainError`]; addresses or a nonce that do not parse are
    /// [`ChainError::Protocol`].
    pub async fn authorization_used(
        &self,
        asset: &str,
        payer: &str,
        nonce: &str,
    ) -> Result<bool, ChainError> {
        let bad = |what: &str| ChainError::Protocol(format!("malformed {what}"));
        let call = authorizationStateCall {
            authorizer: payer.parse::<Address>().map_err(|_| bad("payer"))?,
            nonce: nonce.parse::<B256>().map_err(|_| bad("nonce"))?,
        };
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_call",
            "params": [
                {"to": asset, "data": format!("0x{}", hex::encode(call.abi_encode()))},
                "latest"
            ],
        });
        let response = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let answer: Value = response.json().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ChainError::Transport(format!("HTTP {status}")));
        }
        if let Some(error) = answer.get("error") {
            return Err(ChainError::Protocol(error.to_string()));
        }
        let result = answer["result"]
            .as_str()
            .ok_or_else(|| ChainError::Protocol("no result".into()))?;
        let bytes = hex::decode(result.trim_start_matches("0x"))
            .map_err(|_| ChainError::Protocol("result is not hex".into()))?;
        authorizationStateCall::abi_decode_returns(&bytes)
            .map_err(|e| ChainError::Protocol(e.to_string()))
    }
}

fn transport(err: reqwest::Error) -> ChainError {
    if err.is_timeout() {
        ChainError::Timeout
    } else {
        ChainError::Transport(err.without_url().to_string())
    }
}

/// Decodes the calldata of an `authorizationState` call: `(payer, nonce)`, lowercase hex —
/// what a node (or the development facilitator standing in for one) reads.
///
/// Errors: not an `authorizationState` call.
pub fn decode_call(data: &str) -> Result<(String, String), String> {
    let bytes = hex::decode(data.trim_start_matches("0x")).map_err(|e| e.to_string())?;
    let call = authorizationStateCall::abi_decode(&bytes).map_err(|e| e.to_string())?;
    Ok((
        format!("{:#x}", call.authorizer),
        format!("{:#x}", call.nonce),
    ))
}

/// The ABI encoding of an `authorizationState` answer (a 32-byte word), `0x`-hex.
pub fn encode_answer(used: bool) -> String {
    format!(
        "0x{}",
        hex::encode(authorizationStateCall::abi_encode_returns(&used))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selector of `reference/x402.md` §9.
    #[test]
    fn selector_and_round_trip() {
        assert_eq!(hex::encode(authorizationStateCall::SELECTOR), "e94a0102");
        let call = authorizationStateCall {
            authorizer: "0x857b06519E91e3A54538791bDbb0E22373e36b66"
                .parse()
                .unwrap(),
            nonce: "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
                .parse()
                .unwrap(),
        };
        let data = format!("0x{}", hex::encode(call.abi_encode()));
        assert_eq!(data.len(), 2 + 8 + 128);
        assert_eq!(
            decode_call(&data).unwrap(),
            (
                "0x857b06519e91e3a54538791bdbb0e22373e36b66".to_owned(),
                "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480".to_owned()
            )
        );
        assert!(encode_answer(true).ends_with("01"));
        assert_eq!(encode_answer(false), format!("0x{}", "0".repeat(64)));
    }
}
