//! Asking the payment network whether an authorization paid us (`reference/x402.md` §9, §9.1).
//!
//! `authorizationState(payer, nonce)` is not proof of payment: it is `true` after the payer
//! cancels the authorization or spends its nonce on a transfer to anyone else. *Paid* means our
//! transfer, and only the chain's logs show it: USDC's `transferWithAuthorization` emits
//! `AuthorizationUsed(payer, nonce)` and then, in the same transaction, `Transfer(payer, to,
//! value)` (circlefin/stablecoin-evm `EIP3009.sol`: `_markAuthorizationAsUsed`, then
//! `_transfer`). So [`Chain::evidence`]:
//!
//! 1. with a transaction hash known from the facilitator (a settle that answered pending or
//!    failed after broadcasting), reads its receipt (`eth_getTransactionReceipt`);
//! 2. else, or when that receipt is not ours, searches the USDC contract's logs
//!    (`eth_getLogs`) for `AuthorizationUsed` or `AuthorizationCanceled` of (payer, nonce),
//!    from a block before the order was claimed to `latest`, in ranges of at most
//!    [`LOG_RANGE`] blocks, narrower once the node refused one (public nodes cap the range, each
//!    at its own width), and reads the receipt of the transaction that used it;
//! 3. and answers [`Evidence::Paid`] only for a successful transaction whose
//!    `AuthorizationUsed(payer, nonce)` log is followed by `Transfer(payer, payTo, value ≥
//!    amount)` from the same contract; [`Evidence::Elsewhere`] for a cancellation or a use that
//!    paid someone else; [`Evidence::Unused`] otherwise, with the time of the node's latest block
//!    — a node that lags behind shows an old head, so "unused" is final only once that head is
//!    past the authorization's `validBefore` plus finality (the caller decides).
//!
//! One consistent view: a load-balanced RPC may serve the head, the logs and the state from
//! backends that disagree (a logs index minutes behind the head). So the head is read once and
//! every log range is capped at it, and before "unused" is concluded the contract's own
//! `authorizationState(payer, nonce)` is read at that head's block hash (EIP-1898): `true` there
//! with no log of the use means the logs lag — [`ChainError::Inconsistent`], the caller waits —
//! and a backend that does not know the head's hash errs rather than answer from an older state.
//!
//! The node's chain: the client's first request asks `eth_chainId` in the same batch, and a node
//! of another chain than the network's is refused on every call ([`ChainError::WrongChain`]).

use std::time::Duration;

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_sol_types::{SolCall, SolEvent, SolValue, sol};
use serde_json::{Value, json};

sol! {
    /// ERC-20 transfer.
    event Transfer(address indexed from, address indexed to, uint256 value);
    /// EIP-3009: an authorization was used.
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    /// EIP-3009: an authorization was cancelled by its signer.
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
    /// EIP-3009: whether (authorizer, nonce) was used or cancelled.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    /// ERC-20 balance.
    function balanceOf(address account) external view returns (uint256);
    /// ERC-1271: `0x1626ba7e` when `signature` is the account's over `hash`.
    function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
}

/// ERC-6492's magic suffix: a signature that ends with it wraps `(address factory, bytes
/// factoryCalldata, bytes signature)` for an account not deployed yet.
pub const ERC6492_SUFFIX: [u8; 32] = [
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
];

/// ERC-1271's magic value, `isValidSignature`'s answer for a valid signature.
const ERC1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// The gas one signature check may burn in an `eth_call` (an account's ERC-1271 check, or an
/// ERC-6492 deployment and check): a bound on what a stranger's signature costs the node.
/// WebAuthn accounts without the P-256 precompile spend ~400k on a check; a factory's deployment
/// of a proxy account ~300k.
pub const SIGNATURE_CHECK_GAS: u64 = 1_500_000;

/// A smart wallet's signature: the one the account judges, and, for an account not deployed
/// yet, the ERC-6492 factory call that deploys it.
#[derive(Debug, Clone, PartialEq)]
pub struct SmartSignature {
    /// What the account's `isValidSignature` is asked about (the wrapper's inner signature).
    pub inner: Bytes,
    /// Whether the signature came wrapped (ERC-6492): only then may a signer without code be
    /// deployed, by the wrapper's factory, to check it.
    pub wrapped: bool,
    raw: Bytes,
}

impl SmartSignature {
    /// `signature` as a smart wallet sent it: an ERC-6492 wrapper (ends with
    /// [`ERC6492_SUFFIX`]; its inner signature is taken from the ABI-decoded triple) or an
    /// ERC-1271 signature as is. A wrapper that does not decode is `None`.
    pub fn parse(signature: &[u8]) -> Option<Self> {
        let raw = Bytes::copy_from_slice(signature);
        let Some(body) = signature.strip_suffix(&ERC6492_SUFFIX) else {
            return Some(SmartSignature {
                inner: raw.clone(),
                wrapped: false,
                raw,
            });
        };
        let (_factory, _calldata, inner) =
            <(Address, Bytes, Bytes)>::abi_decode_params(body).ok()?;
        Some(SmartSignature {
            inner,
            wrapped: true,
            raw,
        })
    }
}

/// ERC-6492's deployless universal signature validator, as creation code: the reference
/// `ValidateSigOffchain` of EIP-6492 (hex, as viem 2.57.20 ships it,
/// `erc6492SignatureValidatorByteCode`). Run by an `eth_call` without `to`, with its constructor's
/// arguments `(address signer, bytes32 hash, bytes signature)` appended, it deploys a
/// counterfactual account from an ERC-6492 wrapper, asks `isValidSignature` of a contract
/// (ERC-1271) or recovers an EOA's signature, and returns one byte: `0x01` when valid.
pub const UNIVERSAL_VALIDATOR: &str = include_str!("erc6492_validator.hex");

/// The widest block range one `eth_getLogs` asks for, at first: a node that refuses a range
/// (its cap is lower: 2,000, 500, …) is asked again with half of it, down to
/// [`MIN_LOG_RANGE`], and the client keeps the range that was answered.
pub const LOG_RANGE: u64 = 10_000;

/// The narrowest block range the client shrinks to before it gives the node's refusal up.
pub const MIN_LOG_RANGE: u64 = 10;

/// Blocks searched before the order's claim time (the claim is recorded after the node's clock
/// may have moved on; a margin of blocks is cheap), and again before the block an earlier search
/// read through ([`Authorization::scanned`]: a reorganisation up to this deep is read again).
pub const MARGIN_BLOCKS: u64 = 300;

/// A failure asking the chain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChainError {
    /// No answer in time.
    #[error("the chain RPC did not answer in time")]
    Timeout,
    /// Connection failure, or an HTTP error status.
    #[error("the chain RPC is unreachable: {0}")]
    Transport(String),
    /// A JSON-RPC error, or an answer that is not the protocol's.
    #[error("unexpected chain RPC answer: {0}")]
    Protocol(String),
    /// A call reverted (JSON-RPC error code 3, or "execution reverted").
    #[error("the call reverted: {0}")]
    Reverted(String),
    /// The node's answers disagree with each other (its logs lag its state): ask again later.
    #[error("the chain RPC's answers disagree: {0}")]
    Inconsistent(String),
    /// The node serves another chain than the network payments are taken on: a configuration
    /// error (`RPC_URL` against `X402_NETWORK`), which no retry mends.
    #[error(
        "RPC_URL serves chain {served}, but X402_NETWORK is {network} (chain {expected}): \
         point RPC_URL at a node of {network}"
    )]
    WrongChain {
        /// The chain the node answered (`eth_chainId`).
        served: u64,
        /// The network's name, e.g. `base`.
        network: &'static str,
        /// The network's chain id.
        expected: u64,
    },
}

/// The authorization whose use is looked up, and what paying us means.
#[derive(Debug, Clone, Copy)]
pub struct Authorization<'a> {
    /// The USDC contract (`asset`).
    pub asset: &'a str,
    /// The payer (`authorization.from`).
    pub payer: &'a str,
    /// The EIP-3009 nonce, `0x` + 64 hex.
    pub nonce: &'a str,
    /// The treasury (`payTo`).
    pub pay_to: &'a str,
    /// The amount owed, USDC atomic units.
    pub amount: u128,
    /// Unix seconds: no use can predate this (the order's claim); the log search starts a
    /// margin of blocks before it.
    pub since: i64,
    /// The block an earlier search of the same authorization read through and found nothing
    /// ([`Evidence::Unused`]'s `head`), if one did: this search starts [`MARGIN_BLOCKS`] before
    /// it (a shallower reorganisation is read again), so that an order waiting for hours costs
    /// each pass the blocks since the last, not all since `since`. Should the nonce be used
    /// with no log found after it, the search reads again from `since`.
    pub scanned: Option<u64>,
}

/// What the chain shows of an authorization (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// Our transfer, in this transaction.
    Paid {
        /// Transaction hash.
        transaction: String,
        /// The block that holds it, as the node serves it now (a reorganisation may move it).
        block: u64,
        /// That block's hash, as the receipt names it: the block is the chain's own at its
        /// height only while [`Chain::block_hash`] answers the same (a backend may serve a
        /// receipt from a fork it has not left yet).
        block_hash: B256,
    },
    /// Cancelled, or used by a transaction that did not pay `payTo` the amount: nothing was or
    /// will be paid under it.
    Elsewhere {
        /// The transaction that used or cancelled it.
        transaction: String,
        /// What it did, in words.
        why: String,
    },
    /// Not used as far as this node has seen: up to its latest block, of this unix time.
    Unused {
        /// The node's latest block: the search read through it ([`Authorization::scanned`]).
        head: u64,
        /// Timestamp of the node's latest block, unix seconds.
        head_time: i64,
    },
}

/// A JSON-RPC client of one chain's node.
#[derive(Debug, Clone)]
pub struct Chain {
    timeout: Duration,
    url: String,
    network: super::Network,
    /// Set once the node answered the network's chain id (`eth_chainId`, in the first
    /// request's batch).
    checked: std::sync::Arc<std::sync::OnceLock<()>>,
    /// The block range `eth_getLogs` asks for now ([`LOG_RANGE`], shrunk by refusals).
    log_range: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// A test's guards (`None` in production: every guard holds).
    pub checkpoints: Option<std::sync::Arc<crate::checkpoint::Checkpoints>>,
}

/// The node's latest block, read once per look-up.
struct Head {
    number: u64,
    hash: B256,
    /// Unix seconds.
    time: i64,
}

/// The parts of a receipt that decide.
struct Receipt {
    success: bool,
    block: u64,
    block_hash: B256,
    logs: Vec<Value>,
}

fn bad(what: &str) -> ChainError {
    ChainError::Protocol(format!("malformed {what}"))
}

fn quantity(value: &Value, what: &str) -> Result<u64, ChainError> {
    value
        .as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| bad(what))
}

fn word(value: &Value) -> Option<B256> {
    value.as_str()?.parse().ok()
}

impl Chain {
    /// A client of the node at `url`, a node of `network`, each request within `timeout`, sent
    /// through the process's one HTTP client ([`crate::outbound`], built on the first request).
    /// Its first request also asks the node which chain it serves (`eth_chainId`, in the same
    /// batch), and every call fails with [`ChainError::WrongChain`], naming both, until the node
    /// serves `network`'s: a node of another chain would show transfers that never paid us.
    /// Asked on first use, not at cold start, which calls out to nothing.
    pub fn new(url: &str, timeout: Duration, network: super::Network) -> Self {
        Chain {
            timeout,
            url: url.to_owned(),
            network,
            checked: Default::default(),
            log_range: std::sync::Arc::new(LOG_RANGE.into()),
            checkpoints: None,
        }
    }

    /// The block range `eth_getLogs` asks for now: [`LOG_RANGE`], or less once the node refused
    /// a range.
    pub fn log_range(&self) -> u64 {
        self.log_range.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a refused range is asked again narrower (unless a test broke the guard).
    fn narrows(&self) -> bool {
        let guard = crate::checkpoint::Guard::RangeShrinks;
        self.checkpoints.as_ref().is_none_or(|c| c.holds(guard))
    }

    /// `method` with `params`, once the node is known to serve the network's chain: the first
    /// call goes as a batch with `eth_chainId` ([`Chain::batch`]), so the check costs no round
    /// trip of its own.
    async fn call(&self, method: &str, params: Value) -> Result<Value, ChainError> {
        if self.checked.get().is_some() {
            return self.send(method, params).await;
        }
        let mut answers = self.batch(&[(method, params)]).await?;
        answers.pop().unwrap_or_else(|| Err(bad("batch answer")))
    }

    /// Whether `answer` (of `eth_chainId`) is the network's chain; remembered once it is.
    ///
    /// Errors: [`ChainError::WrongChain`] naming both; the answer's own error.
    fn check(&self, answer: Result<Value, ChainError>) -> Result<(), ChainError> {
        let served = quantity(&answer?, "chain id")?;
        let expected = self.network.chain_id();
        if served != expected {
            return Err(ChainError::WrongChain {
                served,
                network: self.network.v1_name(),
                expected,
            });
        }
        let _ = self.checked.set(());
        Ok(())
    }

    /// The JSON-RPC POST of `body` to the node, with the call timeout.
    fn post(&self, body: &impl serde::Serialize) -> Result<reqwest::RequestBuilder, ChainError> {
        let http = crate::outbound::client().map_err(ChainError::Transport)?;
        Ok(http.post(&self.url).timeout(self.timeout).json(body))
    }

    async fn send(&self, method: &str, params: Value) -> Result<Value, ChainError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = crate::outbound::send(self.post(&body)?)
            .await
            .map_err(transport)?;
        let response = succeeded(response)?;
        let mut answer: Value = response.json().await.map_err(transport)?;
        if let Some(error) = answer.get("error") {
            return Err(rpc_error(method, error));
        }
        Ok(answer["result"].take())
    }

    /// The latest block.
    async fn head(&self) -> Result<Head, ChainError> {
        let block = self
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        Ok(Head {
            number: quantity(&block["number"], "block number")?,
            hash: word(&block["hash"]).ok_or_else(|| bad("block hash"))?,
            time: quantity(&block["timestamp"], "block timestamp")? as i64,
        })
    }

    /// The newest block the chain calls final (`eth_getBlockByNumber("finalized")`: on Base, an
    /// L2 block whose batch is in a finalized L1 block, ~15–20 minutes behind the head; on anvil,
    /// the head minus two of its epochs of `--slots-in-an-epoch` blocks). A transfer at or below
    /// it can no longer be reorganised away.
    ///
    /// Errors: [`ChainError`].
    pub async fn finalized(&self) -> Result<u64, ChainError> {
        let block = self
            .call("eth_getBlockByNumber", json!(["finalized", false]))
            .await?;
        quantity(&block["number"], "finalized block number")
    }

    /// The hash of the chain's block at height `number` (`eth_getBlockByNumber`), `None` when
    /// the node has no block there.
    ///
    /// Errors: [`ChainError`].
    pub async fn block_hash(&self, number: u64) -> Result<Option<B256>, ChainError> {
        let block = self
            .call(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            )
            .await?;
        if block.is_null() {
            return Ok(None);
        }
        word(&block["hash"])
            .map(Some)
            .ok_or_else(|| bad("block hash"))
    }

    /// `authorizationState(payer, nonce)` as of the block `at` (by hash, EIP-1898).
    async fn used_at(&self, wanted: &Wanted, at: B256) -> Result<bool, ChainError> {
        let call = authorizationStateCall {
            authorizer: wanted.payer,
            nonce: wanted.nonce,
        };
        let request = json!({
            "to": wanted.asset.to_string(),
            "data": format!("0x{}", hex::encode(call.abi_encode())),
        });
        let answer = self
            .call("eth_call", json!([request, {"blockHash": at.to_string()}]))
            .await?;
        let bytes = answer
            .as_str()
            .and_then(|s| hex::decode(s.trim_start_matches("0x")).ok())
            .ok_or_else(|| bad("authorizationState result"))?;
        authorizationStateCall::abi_decode_returns(&bytes)
            .map_err(|_| bad("authorizationState result"))
    }

    async fn receipt(&self, transaction: &str) -> Result<Option<Receipt>, ChainError> {
        let receipt = self
            .call("eth_getTransactionReceipt", json!([transaction]))
            .await?;
        if receipt.is_null() {
            return Ok(None);
        }
        Ok(Some(Receipt {
            success: quantity(&receipt["status"], "receipt status")? == 1,
            block: quantity(&receipt["blockNumber"], "receipt block number")?,
            block_hash: word(&receipt["blockHash"]).ok_or_else(|| bad("receipt block hash"))?,
            logs: receipt["logs"].as_array().cloned().unwrap_or_default(),
        }))
    }

    /// Sends `calls` (method, params) as one JSON-RPC batch: one round trip. Answers in the
    /// calls' order, each its own result or error. Until the node is known to serve the
    /// network's chain, `eth_chainId` goes first in the same batch ([`Chain::check`]).
    ///
    /// Errors: the batch's own (transport, timeout, an answer that is not a batch of them);
    /// [`ChainError::WrongChain`], or the chain id's own error, before the node's chain is known.
    async fn batch(
        &self,
        calls: &[(&str, Value)],
    ) -> Result<Vec<Result<Value, ChainError>>, ChainError> {
        if self.checked.get().is_some() {
            return self.send_batch(calls).await;
        }
        let mut with_check = vec![("eth_chainId", json!([]))];
        with_check.extend(calls.iter().cloned());
        let mut answers = self.send_batch(&with_check).await?;
        self.check(answers.remove(0))?;
        Ok(answers)
    }

    async fn send_batch(
        &self,
        calls: &[(&str, Value)],
    ) -> Result<Vec<Result<Value, ChainError>>, ChainError> {
        let body: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(id, (method, params))| {
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            })
            .collect();
        let response = crate::outbound::send(self.post(&body)?)
            .await
            .map_err(transport)?;
        let response = succeeded(response)?;
        let answers: Vec<Value> = response.json().await.map_err(transport)?;
        let mut results: Vec<Option<Result<Value, ChainError>>> = vec![None; calls.len()];
        for mut answer in answers {
            let Some(slot) = answer["id"]
                .as_u64()
                .and_then(|id| results.get_mut(id as usize))
            else {
                return Err(bad("batch answer id"));
            };
            let method = calls.get(answer["id"].as_u64().unwrap_or(0) as usize);
            let method = method.map(|(m, _)| *m).unwrap_or_default();
            *slot = Some(match answer.get("error") {
                Some(error) => Err(rpc_error(method, error)),
                None => Ok(answer["result"].take()),
            });
        }
        results
            .into_iter()
            .map(|r| r.ok_or_else(|| bad("batch answer (one is missing)")))
            .collect()
    }

    /// Whether `signature` is `signer`'s over `hash` as the chain judges it now (ERC-1271 for a
    /// deployed account, ERC-6492 for one not deployed yet): one round trip for a deployed
    /// account or an address without code, two for a counterfactual one. For smart wallets,
    /// whose signatures no key recovers (EIP-4361 asks verifiers to support ERC-1271); an EOA's
    /// signature is recovered offline by the caller and never reaches here.
    ///
    /// No stranger's code runs on a deployed account: its own `isValidSignature` is asked of the
    /// (unwrapped) signature, and a wrapper's factory is never called for it — the universal
    /// validator's "prepare" retry is not taken. Only a signer without code, with an ERC-6492
    /// wrapper, is deployed (in the call's simulation) by [`UNIVERSAL_VALIDATOR`]. Every call
    /// carries a gas cap of [`SIGNATURE_CHECK_GAS`].
    ///
    /// Errors: [`ChainError`] (a revert is a `false`); an answer that is not the protocol's is
    /// [`ChainError::Protocol`].
    pub async fn signature_is_valid(
        &self,
        signer: Address,
        hash: B256,
        signature: &[u8],
    ) -> Result<bool, ChainError> {
        let Some(smart) = SmartSignature::parse(signature) else {
            return Ok(false);
        };
        let answers = self
            .batch(&[get_code(signer), erc1271(signer, hash, &smart)])
            .await?;
        let [code, checked] = <[_; 2]>::try_from(answers).map_err(|_| bad("batch"))?;
        self.judge_signature(signer, hash, &smart, code?, checked, None)
            .await
    }

    /// The account's answer (`checked`, its `isValidSignature`) when it has `code`; else, for an
    /// ERC-6492 wrapper, the universal validator's (deploy, then check), run as `sender` when
    /// one is given (its `tx.origin`).
    async fn judge_signature(
        &self,
        signer: Address,
        hash: B256,
        smart: &SmartSignature,
        code: Value,
        checked: Result<Value, ChainError>,
        sender: Option<Address>,
    ) -> Result<bool, ChainError> {
        let code = code.as_str().ok_or_else(|| bad("eth_getCode result"))?;
        if !matches!(code, "0x" | "") {
            return match checked {
                Err(ChainError::Reverted(_)) => Ok(false),
                answer => Ok(answer?
                    .as_str()
                    .and_then(|s| hex::decode(s.trim_start_matches("0x")).ok())
                    .is_some_and(|word| word.len() >= 4 && word[..4] == ERC1271_MAGIC)),
            };
        }
        if !smart.wrapped {
            return Ok(false);
        }
        let arguments = (signer, hash, smart.raw.clone()).abi_encode_params();
        let data = format!("0x{}{}", UNIVERSAL_VALIDATOR.trim(), hex::encode(arguments));
        let gas = format!("{SIGNATURE_CHECK_GAS:#x}");
        let mut request = json!({"data": data, "gas": gas});
        if let Some(sender) = sender {
            request["from"] = json!(sender.to_string());
        }
        let answer = match self.call("eth_call", json!([request, "latest"])).await {
            // The account's check or its deployment reverted: not its signature.
            Err(ChainError::Reverted(_)) => return Ok(false),
            other => other?,
        };
        match answer.as_str() {
            Some("0x01") => Ok(true),
            Some("0x00") | Some("0x") => Ok(false),
            _ => Err(bad("universal signature validator result")),
        }
    }

    /// What the chain shows of `authorization` (see the module docs); `known` is a transaction
    /// hash the facilitator named, if any.
    ///
    /// Errors: [`ChainError`]; a payer, nonce or address that does not parse is
    /// [`ChainError::Protocol`].
    pub async fn evidence(
        &self,
        authorization: &Authorization<'_>,
        known: Option<&str>,
    ) -> Result<Evidence, ChainError> {
        let wanted = Wanted::of(authorization)?;
        if let Some(hash) = known.filter(|h| !h.is_empty())
            && let Some(receipt) = self.receipt(hash).await?
            && let Some(evidence) = wanted.judge(hash, &receipt)
        {
            return Ok(evidence);
        }
        let head = self.head().await?;
        let back = (head.time - authorization.since).max(0) as u64 + MARGIN_BLOCKS;
        let first = head.number.saturating_sub(back);
        let resumed = authorization.scanned.map_or(first, |block| {
            block.saturating_sub(MARGIN_BLOCKS).max(first)
        });
        if let Some(evidence) = self.scan(&wanted, resumed, head.number).await? {
            return Ok(evidence);
        }
        if self.used_at(&wanted, head.hash).await? {
            // Used, with no log since where the last search stopped: one deeper than the
            // margin moved it, or the logs lag. Read it all again.
            if resumed > first
                && let Some(evidence) = self.scan(&wanted, first, resumed - 1).await?
            {
                return Ok(evidence);
            }
            return Err(ChainError::Inconsistent(format!(
                "the authorization is used as of block {}, but no log of its use is served yet",
                head.number
            )));
        }
        Ok(Evidence::Unused {
            head: head.number,
            head_time: head.time,
        })
    }

    /// The first use of the authorization logged in blocks `from..=to`, read a range at a time
    /// (narrowed when the node refuses one: [`LOG_RANGE`]).
    async fn scan(
        &self,
        wanted: &Wanted,
        from: u64,
        to: u64,
    ) -> Result<Option<Evidence>, ChainError> {
        let (mut from, head) = (from, to);
        while from <= head {
            let range = self.log_range();
            let to = (from + range - 1).min(head);
            let logs = match self.uses(wanted, from, to).await {
                Err(err) if range > MIN_LOG_RANGE && refuses_range(&err) && self.narrows() => {
                    let narrower = (range / 2).max(MIN_LOG_RANGE);
                    tracing::warn!(range, narrower, error = %err, "the node refused a log range");
                    self.log_range
                        .store(narrower, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                answer => answer?,
            };
            for log in logs {
                let hash = log["transactionHash"].as_str().unwrap_or_default();
                if word(&log["topics"][0]) == Some(AuthorizationCanceled::SIGNATURE_HASH) {
                    return Ok(Some(Evidence::Elsewhere {
                        transaction: hash.to_owned(),
                        why: "the payer cancelled the authorization".into(),
                    }));
                }
                let receipt = self
                    .receipt(hash)
                    .await?
                    .ok_or_else(|| bad("receipt of a logged transaction"))?;
                if let Some(evidence) = wanted.judge(hash, &receipt) {
                    return Ok(Some(evidence));
                }
            }
            from = to + 1;
        }
        Ok(None)
    }

    /// `AuthorizationUsed` / `AuthorizationCanceled` logs of the authorization in blocks
    /// `from..=to`.
    async fn uses(&self, wanted: &Wanted, from: u64, to: u64) -> Result<Vec<Value>, ChainError> {
        let filter = json!({
            "address": wanted.asset.to_string(),
            "fromBlock": format!("{from:#x}"),
            "toBlock": format!("{to:#x}"),
            "topics": [
                [
                    AuthorizationUsed::SIGNATURE_HASH.to_string(),
                    AuthorizationCanceled::SIGNATURE_HASH.to_string()
                ],
                wanted.payer.into_word().to_string(),
                wanted.nonce.to_string(),
            ],
        });
        let logs = self.call("eth_getLogs", json!([filter])).await?;
        logs.as_array()
            .cloned()
            .ok_or_else(|| bad("eth_getLogs result"))
    }
}

/// The parsed authorization.
struct Wanted {
    asset: Address,
    payer: Address,
    nonce: B256,
    pay_to: Address,
    amount: U256,
}

impl Wanted {
    fn of(a: &Authorization<'_>) -> Result<Self, ChainError> {
        Ok(Wanted {
            asset: a.asset.parse().map_err(|_| bad("asset"))?,
            payer: a.payer.parse().map_err(|_| bad("payer"))?,
            nonce: a.nonce.parse().map_err(|_| bad("nonce"))?,
            pay_to: a.pay_to.parse().map_err(|_| bad("payTo"))?,
            amount: U256::from(a.amount),
        })
    }

    fn emitted(&self, log: &Value) -> bool {
        log["address"]
            .as_str()
            .and_then(|a| a.parse::<Address>().ok())
            == Some(self.asset)
    }

    fn topics(log: &Value) -> Vec<Option<B256>> {
        log["topics"]
            .as_array()
            .map(|t| t.iter().map(word).collect())
            .unwrap_or_default()
    }

    /// Whether `log` is this contract's `AuthorizationUsed(payer, nonce)`.
    fn is_use(&self, log: &Value) -> bool {
        self.emitted(log)
            && Self::topics(log)
                == [
                    Some(AuthorizationUsed::SIGNATURE_HASH),
                    Some(self.payer.into_word()),
                    Some(self.nonce),
                ]
    }

    /// Whether `log` is this contract's `Transfer(payer, payTo, value ≥ amount)`.
    fn pays_us(&self, log: &Value) -> bool {
        let value = log["data"]
            .as_str()
            .and_then(|d| hex::decode(d.trim_start_matches("0x")).ok())
            .filter(|d| d.len() == 32)
            .map(|d| U256::from_be_slice(&d));
        self.emitted(log)
            && Self::topics(log)
                == [
                    Some(Transfer::SIGNATURE_HASH),
                    Some(self.payer.into_word()),
                    Some(self.pay_to.into_word()),
                ]
            && value.is_some_and(|v| v >= self.amount)
    }

    /// What transaction `hash`'s `receipt` proves; `None` when it does not touch the
    /// authorization (or failed: a reverted transaction used nothing).
    fn judge(&self, hash: &str, receipt: &Receipt) -> Option<Evidence> {
        if !receipt.success {
            return None;
        }
        let at = receipt.logs.iter().position(|log| self.is_use(log))?;
        Some(match receipt.logs.get(at + 1) {
            Some(next) if self.pays_us(next) => Evidence::Paid {
                transaction: hash.to_owned(),
                block: receipt.block,
                block_hash: receipt.block_hash,
            },
            _ => Evidence::Elsewhere {
                transaction: hash.to_owned(),
                why: "the authorization was used by a transfer that did not pay the treasury \
                      the amount"
                    .into(),
            },
        })
    }
}

/// Whether `err` is a node's refusal of an `eth_getLogs` range (its words vary: "block range
/// too large", "exceed maximum block range: 2000", "query returned more than 10000 results").
/// Not a rate limit ("request rate limited", "daily request count exceeded": -32005 too): a
/// narrowed range is kept, and narrowing on a throttle would multiply every later search's
/// calls.
fn refuses_range(err: &ChainError) -> bool {
    let ChainError::Protocol(message) = err else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    ["range", "results", "too large"]
        .iter()
        .any(|words| message.contains(words))
}

/// A JSON-RPC `error` of `method`: a revert (code 3, or a message that says so) or another.
fn rpc_error(method: &str, error: &Value) -> ChainError {
    let reverted = error["code"] == 3
        || error["message"]
            .as_str()
            .is_some_and(|m| m.contains("revert"));
    if reverted {
        ChainError::Reverted(format!("{method}: {error}"))
    } else {
        ChainError::Protocol(format!("{method}: {error}"))
    }
}

/// `eth_getCode(account, latest)`.
pub(super) fn get_code(account: Address) -> (&'static str, Value) {
    ("eth_getCode", json!([account.to_string(), "latest"]))
}

/// `eth_call` of `account.isValidSignature(hash, smart.inner)` (ERC-1271) at `latest`, with a
/// gas cap of [`SIGNATURE_CHECK_GAS`].
fn erc1271(account: Address, hash: B256, smart: &SmartSignature) -> (&'static str, Value) {
    let call = isValidSignatureCall {
        hash,
        signature: smart.inner.clone(),
    };
    let request = json!({
        "to": account.to_string(),
        "data": format!("0x{}", hex::encode(call.abi_encode())),
        "gas": format!("{SIGNATURE_CHECK_GAS:#x}"),
    });
    ("eth_call", json!([request, "latest"]))
}

/// The node's answer, unless its HTTP status is a failure.
fn succeeded(response: reqwest::Response) -> Result<reqwest::Response, ChainError> {
    match response.status() {
        status if status.is_success() => Ok(response),
        status => Err(ChainError::Transport(format!("HTTP {status}"))),
    }
}

fn transport(err: reqwest::Error) -> ChainError {
    if err.is_timeout() {
        ChainError::Timeout
    } else {
        ChainError::Transport(err.without_url().to_string())
    }
}

/// Topic 0 of `Transfer`, `AuthorizationUsed` and `AuthorizationCanceled` (for the development
/// chain, which emits them as the USDC contract does).
pub const TOPICS: [B256; 3] = [
    Transfer::SIGNATURE_HASH,
    AuthorizationUsed::SIGNATURE_HASH,
    AuthorizationCanceled::SIGNATURE_HASH,
];

mod standing;
pub use standing::{PendingTransfer, Standing, transferWithAuthorizationCall};

#[cfg(test)]
mod tests;
