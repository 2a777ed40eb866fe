//! A development payment network: USDC's EIP-3009 authorizations on a chain whose blocks come
//! every [`BLOCK_SECONDS`] of a [`Clock`], and a JSON-RPC node in front of it that can lag
//! behind (`reference/x402.md` §9).
//!
//! Transactions are what the real contract does (circlefin/stablecoin-evm `EIP3009.sol`):
//! `transferWithAuthorization` marks (payer, nonce) used — `AuthorizationUsed` — and moves the
//! value — `Transfer(from, to, value)` — in one transaction; `cancelAuthorization` marks it used
//! with `AuthorizationCanceled`; a second use of a (payer, nonce) reverts. A transaction is
//! broadcast at one time and mined at another (a confirmation that comes late).
//!
//! The node answers single requests and batches: `eth_getBlockByNumber` (`latest`, and
//! `finalized`: [`FINALIZED_BEHIND`] blocks behind),
//! `eth_blockNumber`, `eth_getTransactionReceipt`, `eth_getLogs` (address, block range, topics
//! with OR-lists), `eth_getCode` (a smart account has code), and `eth_call` of
//! `authorizationState(address,bytes32)` at a block hash, number or `latest`, of
//! `balanceOf(address)`, of a smart account's `isValidSignature(bytes32,bytes)`, and of EIP-6492's
//! deployless universal signature validator (an EOA's signature recovers to its signer; the
//! chain's smart accounts, [`DevChain::deploy_account`], accept what they were deployed to
//! accept, and a counterfactual one, [`DevChain::counterfactual_account`], what it would), all
//! as of `now − lag`: a lagging node shows an older head and neither the receipts nor the
//! logs of newer blocks. Like a load-balanced RPC whose backends disagree, its receipts and logs
//! can lag its head and state further ([`DevChain::set_logs_lag`]); a block hash it has not
//! reached is an error. The facilitator reads the chain itself, without lag.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use domain::clock::Clock;
use domain::x402::Network;
use domain::x402::chain::{TOPICS, transferWithAuthorizationCall};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Seconds between blocks (Base's).
pub const BLOCK_SECONDS: i64 = 2;

/// How far the `finalized` block is behind the head, blocks: anvil's (two epochs of its default
/// 32 slots), which the rails run.
pub const FINALIZED_BEHIND: i64 = 64;

/// What a transaction does to an authorization.
#[derive(Debug, Clone, PartialEq)]
pub enum Use {
    /// `transferWithAuthorization` moving `value` to `to`.
    Transfer {
        /// Recipient, lowercase hex.
        to: String,
        /// USDC atomic units.
        value: u128,
    },
    /// `cancelAuthorization`.
    Cancel,
}

#[derive(Debug, Clone)]
struct Tx {
    hash: String,
    payer: String,
    nonce: String,
    action: Use,
    /// Unix seconds: visible in the first block at or after this.
    mined_at: i64,
    /// Order of broadcast: of two transactions in one block, the first goes first.
    serial: u64,
    /// A transfer's `validBefore` (unix seconds): mined in a block at or after it, it reverts.
    valid_before: Option<i64>,
    /// Reorganised out of the chain ([`DevChain::reorg_out`]): as if never mined.
    dropped: bool,
    /// Whether it had succeeded when it was reorganised out.
    succeeded_once: bool,
}

/// Which transfers count as money moved ([`DevChain::transfers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Mined by now, even if reorganised out since: what a reader of the chain could have
    /// seen (pending ones are not money yet).
    Seen,
    /// Mined, in the chain now, and final: money that stays.
    Final,
}

impl Ledger {
    /// The transaction that uses (payer, nonce), mined or pending: of those not dropped and
    /// valid in the block that mines them, the first mined. Any other using it reverts.
    fn winner(&self, genesis: i64, payer: &str, nonce: &str) -> Option<&Tx> {
        self.txs
            .iter()
            .filter(|t| t.payer == payer && t.nonce == nonce && !t.dropped)
            .filter(|t| {
                let block = block_of(genesis, t.mined_at);
                t.valid_before
                    .is_none_or(|before| genesis + block * BLOCK_SECONDS < before)
            })
            .min_by_key(|t| (block_of(genesis, t.mined_at), t.serial))
    }

    /// Whether the account at `address` accepts `signature` (hex) over `digest`, asked with a
    /// sender (`tx.origin` not zero) or without.
    fn accepts(
        &self,
        address: &str,
        digest: alloy_primitives::B256,
        signature: &str,
        with_sender: bool,
    ) -> bool {
        let address = address.to_ascii_lowercase();
        let signature = format!("0x{}", signature.trim_start_matches("0x")).to_ascii_lowercase();
        let lies = with_sender && self.origin_bound.contains(&address);
        !lies
            && self.accounts.get(&address).is_some_and(|accepted| {
                accepted
                    .iter()
                    .any(|(d, s)| *d == digest && *s == signature)
            })
    }

    /// Whether `tx` succeeds (or will, once mined): it is its authorization's winner.
    fn succeeds(&self, genesis: i64, tx: &Tx) -> bool {
        self.winner(genesis, &tx.payer, &tx.nonce)
            .is_some_and(|w| w.hash == tx.hash)
    }
}

#[derive(Default)]
struct Ledger {
    txs: Vec<Tx>,
    lag: Duration,
    /// How much further behind the receipts and logs are.
    logs_lag: Duration,
    /// Balances set by tests (USDC atomic units); every other account holds plenty.
    balances: HashMap<String, u128>,
    /// Smart accounts: address → the (digest, signature) pairs its `isValidSignature` accepts.
    accounts: HashMap<String, Vec<(alloy_primitives::B256, String)>>,
    /// Smart accounts that lie to a simulation: their `isValidSignature` accepts only a call
    /// with no sender (`tx.origin` zero, an `eth_call` without `from`), never a transaction's.
    origin_bound: std::collections::HashSet<String>,
    /// Accounts not deployed yet (ERC-6492): address → the pairs it will accept once its
    /// factory deploys it.
    counterfactual: HashMap<String, Vec<(alloy_primitives::B256, String)>>,
    calls: usize,
    /// HTTP requests answered (a batch is one).
    round_trips: usize,
    /// Runs of the universal validator (each one calls a wrapper's factory, if any).
    validator_runs: usize,
    /// How many of the next requests answer a JSON-RPC error.
    failing: usize,
    /// How long the node takes to answer each HTTP request (a slow node).
    stall: Duration,
    /// Whether receipts come from a backend on another fork: their `blockHash` is not the
    /// chain's block at their height.
    forked_receipts: bool,
    /// The widest `eth_getLogs` range the node answers, in blocks (`None`: the client's
    /// [`domain::x402::chain::LOG_RANGE`]).
    log_cap: Option<u64>,
    /// The block ranges `eth_getLogs` was asked for, in order.
    log_queries: Vec<(i64, i64)>,
    serial: u64,
}

/// The development chain (see the module docs).
pub struct DevChain {
    clock: Clock,
    genesis: i64,
    /// The USDC contract, lowercase.
    asset: String,
    ledger: Mutex<Ledger>,
}

fn word_of_address(address: &str) -> String {
    format!(
        "0x{:0>64}",
        address.trim_start_matches("0x").to_ascii_lowercase()
    )
}

/// EIP-6492's universal validator run by `eth_call` ([`domain::x402::chain::UNIVERSAL_VALIDATOR`]
/// with `(address signer, bytes32 hash, bytes signature)` appended): `0x01` when the signature
/// is 65 bytes recovering to the signer, one the signer's smart account accepts, or an ERC-6492
/// wrapper whose inner signature the counterfactual account it deploys accepts; else `0x00`.
/// Like the reference validator, a deployed account that refuses a wrapper's inner signature is
/// asked again after its factory ran ("prepare"); here that changes nothing.
fn universal_validator(ledger: &mut Ledger, call: &Value) -> Result<Value, String> {
    use alloy_sol_types::SolValue;
    ledger.validator_runs += 1;
    let data = call["data"].as_str().unwrap_or_default();
    let arguments = data
        .strip_prefix("0x")
        .and_then(|d| d.strip_prefix(domain::x402::chain::UNIVERSAL_VALIDATOR.trim()))
        .and_then(|a| hex::decode(a).ok())
        .ok_or("only the universal signature validator is deployless here")?;
    type Arguments = (
        alloy_primitives::Address,
        alloy_primitives::B256,
        alloy_primitives::Bytes,
    );
    let (signer, hash, signature) =
        Arguments::abi_decode_params(&arguments).map_err(|e| e.to_string())?;
    let recovered = alloy_primitives::Signature::try_from(signature.as_ref())
        .ok()
        .and_then(|s| s.recover_address_from_prehash(&hash).ok());
    let signer_hex = format!("{signer:#x}");
    let smart = domain::x402::chain::SmartSignature::parse(&signature);
    let accepts = |pairs: Option<&Vec<(alloy_primitives::B256, String)>>, signature: &[u8]| {
        let hex_signature = format!("0x{}", hex::encode(signature));
        pairs.is_some_and(|pairs| pairs.iter().any(|(d, s)| *d == hash && *s == hex_signature))
    };
    let accepted = accepts(ledger.accounts.get(&signer_hex), &signature)
        || smart.is_some_and(|smart| {
            smart.wrapped
                && (accepts(ledger.accounts.get(&signer_hex), &smart.inner)
                    || accepts(ledger.counterfactual.get(&signer_hex), &smart.inner))
        });
    let valid = recovered == Some(signer) || accepted;
    Ok(json!(if valid { "0x01" } else { "0x00" }))
}

/// Whether an `eth_call` runs a signature check: the universal validator (no `to`) or an
/// account's `isValidSignature`.
fn is_signature_check(call: &Value) -> bool {
    call["to"].is_null()
        || call["data"]
            .as_str()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("0x1626ba7e"))
        || is_transfer_simulation(call)
}

/// Whether an `eth_call` simulates USDC's `transferWithAuthorization(…, bytes signature)`.
fn is_transfer_simulation(call: &Value) -> bool {
    use alloy_sol_types::SolCall;
    let selector = format!("0x{}", hex::encode(transferWithAuthorizationCall::SELECTOR));
    call["data"]
        .as_str()
        .is_some_and(|d| d.to_ascii_lowercase().starts_with(&selector))
}

/// Whether an `eth_call` is sent from a (non-zero) sender, its `tx.origin`.
fn has_sender(call: &Value) -> bool {
    call["from"].as_str().is_some_and(|from| {
        from.parse::<alloy_primitives::Address>()
            .is_ok_and(|a| !a.is_zero())
    })
}

/// Block `number`'s hash: the number, recognisable (`0xb10c…`).
fn hash_of(number: i64) -> String {
    format!("0xb10c{number:060x}")
}

/// The block number a hash of [`hash_of`] names.
fn number_of(hash: &str) -> Option<i64> {
    let hex = hash.strip_prefix("0xb10c").filter(|h| h.len() == 60)?;
    i64::from_str_radix(hex, 16).ok()
}

fn block_of(genesis: i64, time: i64) -> i64 {
    // Mined into the first block whose time is at or after it.
    ((time - genesis).max(0) + BLOCK_SECONDS - 1) / BLOCK_SECONDS
}

impl DevChain {
    /// A chain of `asset` (the USDC contract) on `clock`, starting now.
    pub fn new(clock: Clock, asset: &str) -> Self {
        let genesis = clock.now() - 1_000 * BLOCK_SECONDS;
        DevChain {
            clock,
            genesis,
            asset: asset.to_ascii_lowercase(),
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// The network whose USDC the chain runs (Base Sepolia unless it is Base's).
    pub fn network(&self) -> Network {
        if self.asset == Network::Base.usdc().to_ascii_lowercase() {
            Network::Base
        } else {
            Network::BaseSepolia
        }
    }

    /// The clock the chain's blocks follow.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Makes the node answer as of `lag` ago.
    pub fn set_lag(&self, lag: Duration) {
        self.ledger.lock().unwrap().lag = lag;
    }

    /// Makes the next `calls` requests answer a JSON-RPC internal error (`-32603`), as an
    /// overloaded or restarting node does (0: none).
    pub fn fail_next_rpc(&self, calls: usize) {
        self.ledger.lock().unwrap().failing = calls;
    }

    /// Makes the node refuse an `eth_getLogs` range of `blocks` or more, as public nodes with a
    /// lower cap than the client's first range do ("block range too large").
    pub fn cap_log_range(&self, blocks: u64) {
        self.ledger.lock().unwrap().log_cap = Some(blocks);
    }

    /// Makes the node's receipts and logs lag its head and state by `lag` more (a logs
    /// backend behind the head's).
    pub fn set_logs_lag(&self, lag: Duration) {
        self.ledger.lock().unwrap().logs_lag = lag;
    }

    /// Sets `account`'s USDC balance (atomic units); accounts never set hold plenty.
    pub fn set_balance(&self, account: &str, balance: u128) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger
            .balances
            .insert(account.to_ascii_lowercase(), balance);
    }

    /// `account`'s USDC balance, atomic units (`u128::MAX` when never set).
    pub fn balance(&self, account: &str) -> u128 {
        let ledger = self.ledger.lock().unwrap();
        let account = account.to_ascii_lowercase();
        ledger.balances.get(&account).copied().unwrap_or(u128::MAX)
    }

    /// Deploys a smart account at `address` whose ERC-1271 `isValidSignature` accepts exactly
    /// `signature` (hex) over `digest` — the account as an oracle of its own signatures, which is
    /// all ERC-1271 says of it.
    pub fn deploy_account(&self, address: &str, digest: alloy_primitives::B256, signature: &str) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger
            .accounts
            .entry(address.to_ascii_lowercase())
            .or_default()
            .push((
                digest,
                format!("0x{}", signature.trim_start_matches("0x")).to_ascii_lowercase(),
            ));
    }

    /// Deploys a smart account at `address` that lies to a simulation: its `isValidSignature`
    /// accepts `signature` over `digest` only when the call has no sender (`tx.origin` zero, as
    /// an `eth_call` without `from` runs), so no transaction — a settlement — ever passes it.
    pub fn deploy_origin_account(
        &self,
        address: &str,
        digest: alloy_primitives::B256,
        signature: &str,
    ) {
        self.deploy_account(address, digest, signature);
        let mut ledger = self.ledger.lock().unwrap();
        ledger.origin_bound.insert(address.to_ascii_lowercase());
    }

    /// Registers a smart account at `address`, not deployed yet (no code), whose factory (an
    /// ERC-6492 wrapper's) would deploy it to accept exactly `signature` over `digest`.
    pub fn counterfactual_account(
        &self,
        address: &str,
        digest: alloy_primitives::B256,
        signature: &str,
    ) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger
            .counterfactual
            .entry(address.to_ascii_lowercase())
            .or_default()
            .push((
                digest,
                format!("0x{}", signature.trim_start_matches("0x")).to_ascii_lowercase(),
            ));
    }

    /// Runs of the universal validator, i.e. of an ERC-6492 wrapper's factory call.
    pub fn validator_runs(&self) -> usize {
        self.ledger.lock().unwrap().validator_runs
    }

    /// Makes the node take `stall` to answer each HTTP request from now on (a slow node, whose
    /// clients time out); `Duration::ZERO` makes it prompt again.
    pub fn set_stall(&self, stall: Duration) {
        self.ledger.lock().unwrap().stall = stall;
    }

    /// Makes the node serve receipts as a backend on a fork it has not left does (`forked`):
    /// each names a block hash that is not the chain's at its height.
    pub fn set_forked_receipts(&self, forked: bool) {
        self.ledger.lock().unwrap().forked_receipts = forked;
    }

    /// How long the node takes to answer an HTTP request ([`Self::set_stall`]).
    pub fn stall(&self) -> Duration {
        self.ledger.lock().unwrap().stall
    }

    /// HTTP requests answered by the node (a JSON-RPC batch is one round trip).
    pub fn round_trips(&self) -> usize {
        self.ledger.lock().unwrap().round_trips
    }

    /// Whether the smart account at `address` accepts `signature` over `digest` (ERC-1271) in a
    /// transaction (a settlement: `tx.origin` is its sender), which an account that lies to
    /// simulations ([`Self::deploy_origin_account`]) never does; `false` for an address without
    /// code.
    pub fn account_accepts(
        &self,
        address: &str,
        digest: alloy_primitives::B256,
        signature: &str,
    ) -> bool {
        let ledger = self.ledger.lock().unwrap();
        ledger.accepts(address, digest, signature, true)
    }

    /// The block ranges (`fromBlock`, `toBlock`) `eth_getLogs` was asked for so far, in order.
    pub fn log_queries(&self) -> Vec<(i64, i64)> {
        self.ledger.lock().unwrap().log_queries.clone()
    }

    /// JSON-RPC calls answered.
    pub fn calls(&self) -> usize {
        self.ledger.lock().unwrap().calls
    }

    /// Broadcasts a transaction using (payer, nonce), mined `delay` from now; its hash. It
    /// reverts (and uses nothing) when another use of the authorization is mined first.
    pub fn broadcast(&self, payer: &str, nonce: &str, action: Use, delay: Duration) -> String {
        self.broadcast_within(payer, nonce, action, delay, None)
    }

    /// [`DevChain::broadcast`] of a transfer valid before `valid_before` (unix seconds): as
    /// USDC's `transferWithAuthorization`, mined in a block at or after it, it reverts.
    pub fn broadcast_within(
        &self,
        payer: &str,
        nonce: &str,
        action: Use,
        delay: Duration,
        valid_before: Option<i64>,
    ) -> String {
        let mined_at = self.clock.now() + delay.as_secs() as i64;
        self.push(payer, nonce, action, mined_at, valid_before)
    }

    /// A transaction using (payer, nonce) that was mined `ago` before now, in a block no one
    /// has asked about it yet (a payer's own transfer, sent long before he presents its
    /// payload); its hash. It reverts as [`DevChain::broadcast`]'s would.
    pub fn mined_ago(&self, payer: &str, nonce: &str, action: Use, ago: Duration) -> String {
        let mined_at = self.clock.now() - ago.as_secs() as i64;
        self.push(payer, nonce, action, mined_at, None)
    }

    /// Records a transaction using (payer, nonce), mined at `mined_at` (unix seconds).
    fn push(
        &self,
        payer: &str,
        nonce: &str,
        action: Use,
        mined_at: i64,
        valid_before: Option<i64>,
    ) -> String {
        let mut ledger = self.ledger.lock().unwrap();
        ledger.serial += 1;
        let (payer, nonce) = (payer.to_ascii_lowercase(), nonce.to_ascii_lowercase());
        let hash = format!(
            "0x{}",
            hex::encode(Sha256::digest(
                format!("{payer}/{nonce}/{}", ledger.serial).as_bytes()
            ))
        );
        let serial = ledger.serial;
        ledger.txs.push(Tx {
            hash: hash.clone(),
            payer,
            nonce,
            action,
            mined_at,
            serial,
            valid_before,
            dropped: false,
            succeeded_once: false,
        });
        hash
    }

    /// The transaction that uses (payer, nonce), mined or pending, and what it does.
    pub fn use_of(&self, payer: &str, nonce: &str) -> Option<(String, Use)> {
        let ledger = self.ledger.lock().unwrap();
        let (payer, nonce) = (payer.to_ascii_lowercase(), nonce.to_ascii_lowercase());
        let tx = ledger.winner(self.genesis, &payer, &nonce)?;
        Some((tx.hash.clone(), tx.action.clone()))
    }

    /// Whether a transaction due at `mined_at` is mined by `now`: by block, as the node sees it
    /// (its head is the block at or after now, so a transaction due within the current block
    /// already has a receipt), never by second.
    fn mined_by(&self, mined_at: i64, now: i64) -> bool {
        block_of(self.genesis, mined_at) <= block_of(self.genesis, now)
    }

    /// The newest block the chain calls final now (the node's `finalized`, without lag).
    fn finalized(&self) -> i64 {
        (block_of(self.genesis, self.clock.now()) - FINALIZED_BEHIND).max(0)
    }

    /// Reorganises transaction `hash` out of the chain, as if its block had never been: only
    /// one mined and not final yet; whether it was. Its authorization is unused again (until
    /// another use is mined, or [`DevChain::mine_again`] brings it back).
    pub fn reorg_out(&self, hash: &str) -> bool {
        let (now, finalized) = (self.clock.now(), self.finalized());
        let mut ledger = self.ledger.lock().unwrap();
        let Some(at) = ledger.txs.iter().position(|t| t.hash == hash && !t.dropped) else {
            return false;
        };
        let mined_at = ledger.txs[at].mined_at;
        if !self.mined_by(mined_at, now) || block_of(self.genesis, mined_at) <= finalized {
            return false;
        }
        let succeeded = ledger.succeeds(self.genesis, &ledger.txs[at]);
        let tx = &mut ledger.txs[at];
        tx.succeeded_once = succeeded;
        tx.dropped = true;
        true
    }

    /// Brings transaction `hash`, reorganised out, back in the next block (it reverts if
    /// another use of its authorization is mined before it).
    pub fn mine_again(&self, hash: &str) {
        let now = self.clock.now();
        let mut ledger = self.ledger.lock().unwrap();
        if let Some(tx) = ledger.txs.iter_mut().find(|t| t.hash == hash) {
            tx.dropped = false;
            tx.mined_at = now;
        }
    }

    /// The newest successful transfer to `to` that is mined and not final yet: (hash, payer,
    /// nonce).
    pub fn unfinal_transfer_to(&self, to: &str) -> Option<(String, String, String)> {
        let (now, finalized) = (self.clock.now(), self.finalized());
        let ledger = self.ledger.lock().unwrap();
        ledger
            .txs
            .iter()
            .filter(|t| matches!(&t.action, Use::Transfer { to: paid, .. } if paid == to))
            .filter(|t| self.mined_by(t.mined_at, now))
            .filter(|t| block_of(self.genesis, t.mined_at) > finalized)
            .filter(|t| ledger.succeeds(self.genesis, t))
            .max_by_key(|t| (t.mined_at, t.serial))
            .map(|t| (t.hash.clone(), t.payer.clone(), t.nonce.clone()))
    }

    /// Whether transaction `hash` is mined by now (the facilitator's own, unlagged view), and
    /// if so whether it succeeded; `None` while pending (or reorganised out).
    pub fn mined(&self, hash: &str) -> Option<bool> {
        let now = self.clock.now();
        let ledger = self.ledger.lock().unwrap();
        let tx = ledger
            .txs
            .iter()
            .find(|t| t.hash == hash && !t.dropped && self.mined_by(t.mined_at, now))?;
        Some(ledger.succeeds(self.genesis, tx))
    }

    /// Every successful transfer that counts as `moved`: (payer, nonce, to, value). A pending
    /// transfer is no money yet.
    pub fn transfers(&self, moved: Moved) -> Vec<(String, String, String, u128)> {
        let (now, finalized) = (self.clock.now(), self.finalized());
        let ledger = self.ledger.lock().unwrap();
        ledger
            .txs
            .iter()
            .filter(|t| self.mined_by(t.mined_at, now))
            .filter(|t| match moved {
                Moved::Seen => t.succeeded_once || ledger.succeeds(self.genesis, t),
                Moved::Final => {
                    ledger.succeeds(self.genesis, t)
                        && block_of(self.genesis, t.mined_at) <= finalized
                }
            })
            .filter_map(|t| match &t.action {
                Use::Transfer { to, value } => {
                    Some((t.payer.clone(), t.nonce.clone(), to.clone(), *value))
                }
                Use::Cancel => None,
            })
            .collect()
    }

    fn logs_of(&self, ledger: &Ledger, tx: &Tx, block: i64) -> Vec<Value> {
        if !ledger.succeeds(self.genesis, tx) {
            return Vec::new();
        }
        let log = |topics: Vec<String>, data: String| {
            json!({"address": self.asset, "topics": topics, "data": data,
                   "transactionHash": tx.hash, "blockNumber": format!("{block:#x}")})
        };
        let payer = word_of_address(&tx.payer);
        match &tx.action {
            Use::Transfer { to, value } => vec![
                log(
                    vec![TOPICS[1].to_string(), payer.clone(), tx.nonce.clone()],
                    "0x".into(),
                ),
                log(
                    vec![TOPICS[0].to_string(), payer, word_of_address(to)],
                    format!("0x{value:064x}"),
                ),
            ],
            Use::Cancel => vec![log(
                vec![TOPICS[2].to_string(), payer, tx.nonce.clone()],
                "0x".into(),
            )],
        }
    }

    /// Answers one HTTP request to the node: a JSON-RPC request, or a batch of them (an array,
    /// answered as an array).
    pub fn http(&self, body: &Value) -> Value {
        self.ledger.lock().unwrap().round_trips += 1;
        match body {
            Value::Array(batch) => Value::Array(batch.iter().map(|b| self.rpc(b)).collect()),
            single => self.rpc(single),
        }
    }

    /// Answers one JSON-RPC request as the (lagging) node.
    pub fn rpc(&self, body: &Value) -> Value {
        let id = body["id"].clone();
        {
            let mut ledger = self.ledger.lock().unwrap();
            if ledger.failing > 0 {
                ledger.failing -= 1;
                let error = json!({"code": -32603, "message": "internal error: upstream busy"});
                return json!({"jsonrpc": "2.0", "id": id, "error": error});
            }
        }
        let result = self.answer(body["method"].as_str().unwrap_or_default(), &body["params"]);
        match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(message) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": message}})
            }
        }
    }

    fn answer(&self, method: &str, params: &Value) -> Result<Value, String> {
        let mut ledger = self.ledger.lock().unwrap();
        ledger.calls += 1;
        let seen = self.clock.now() - ledger.lag.as_secs() as i64;
        let head = block_of(self.genesis, seen);
        let indexed = block_of(self.genesis, seen - ledger.logs_lag.as_secs() as i64);
        let visible = |tx: &&Tx| !tx.dropped && block_of(self.genesis, tx.mined_at) <= indexed;
        match method {
            "eth_chainId" => Ok(json!(format!("{:#x}", self.network().chain_id()))),
            "eth_blockNumber" => Ok(json!(format!("{head:#x}"))),
            "eth_getBlockByNumber" => {
                let number = match params[0].as_str() {
                    Some("finalized") => (head - FINALIZED_BEHIND).max(0),
                    Some(tag) if tag.starts_with("0x") => {
                        match i64::from_str_radix(&tag[2..], 16) {
                            Ok(number) if number <= head => number,
                            Ok(_) => return Ok(Value::Null),
                            Err(_) => return Err("malformed block number".into()),
                        }
                    }
                    _ => head,
                };
                Ok(json!({
                    "number": format!("{number:#x}"),
                    "hash": hash_of(number),
                    "timestamp": format!("{:#x}", self.genesis + number * BLOCK_SECONDS),
                }))
            }
            // What runs a stranger's code (the validator, an account's check) must carry a gas
            // cap: a node refuses nothing, but the service must bound what it asks.
            "eth_call" if is_signature_check(&params[0]) && params[0]["gas"].is_null() => {
                Err("a signature check without a gas cap".into())
            }
            "eth_call" if params[0]["to"].is_null() => universal_validator(&mut ledger, &params[0]),
            "eth_call" if is_transfer_simulation(&params[0]) => {
                self.simulate_transfer(&ledger, &params[0], head)
            }
            "eth_call" => self.view(&ledger, params, head),
            "eth_getCode" => {
                let account = params[0].as_str().unwrap_or_default().to_ascii_lowercase();
                // A smart account's code: a minimal ERC-1967 proxy's first bytes will do.
                let deployed = ledger.accounts.contains_key(&account);
                Ok(json!(if deployed {
                    "0x363d3d373d3d363d7f"
                } else {
                    "0x"
                }))
            }
            "eth_getTransactionReceipt" => {
                let hash = params[0].as_str().unwrap_or_default();
                let Some(tx) = ledger.txs.iter().filter(visible).find(|t| t.hash == hash) else {
                    return Ok(Value::Null);
                };
                let block = block_of(self.genesis, tx.mined_at);
                // A backend on a fork it has not left names another block at that height.
                let block_hash = match ledger.forked_receipts {
                    true => format!("0x{:064x}", 0xf0a4_u64 << 32 | block as u64),
                    false => hash_of(block),
                };
                Ok(json!({
                    "transactionHash": tx.hash,
                    "blockNumber": format!("{block:#x}"),
                    "blockHash": block_hash,
                    "status": if ledger.succeeds(self.genesis, tx) { "0x1" } else { "0x0" },
                    "logs": self.logs_of(&ledger, tx, block),
                }))
            }
            "eth_getLogs" => {
                let filter = &params[0];
                let number = |v: &Value| {
                    v.as_str()
                        .and_then(|s| i64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                };
                let from = number(&filter["fromBlock"]).ok_or("fromBlock")?;
                let to = number(&filter["toBlock"]).unwrap_or(head).min(indexed);
                ledger.log_queries.push((from, to));
                let cap = ledger.log_cap.unwrap_or(domain::x402::chain::LOG_RANGE);
                if to - from >= cap as i64 {
                    return Err(format!("block range too large: at most {cap} blocks"));
                }
                let address = filter["address"].as_str().unwrap_or_default();
                if !address.eq_ignore_ascii_case(&self.asset) {
                    return Ok(json!([]));
                }
                let wanted = filter["topics"].as_array().cloned().unwrap_or_default();
                let matches = |log: &Value| {
                    wanted.iter().enumerate().all(|(i, want)| {
                        let topic = log["topics"][i].as_str().unwrap_or_default();
                        match want {
                            Value::Null => true,
                            Value::Array(any) => any
                                .iter()
                                .any(|w| w.as_str().is_some_and(|w| w.eq_ignore_ascii_case(topic))),
                            Value::String(w) => w.eq_ignore_ascii_case(topic),
                            _ => false,
                        }
                    })
                };
                let logs: Vec<Value> = ledger
                    .txs
                    .iter()
                    .filter(visible)
                    .filter(|tx| (from..=to).contains(&block_of(self.genesis, tx.mined_at)))
                    .flat_map(|tx| self.logs_of(&ledger, tx, block_of(self.genesis, tx.mined_at)))
                    .filter(matches)
                    .collect();
                Ok(Value::Array(logs))
            }
            other => Err(format!("method {other} not supported")),
        }
    }

    /// `eth_call` of USDC's `transferWithAuthorization(…, bytes signature)` at `head`, as
    /// FiatTokenV2_2 runs it: the window against the block's time, the nonce unused, the
    /// signature (an account's ERC-1271 answer to a call from the simulation's sender, else
    /// ECDSA), the balance; `0x` when it would pass, else the contract's revert.
    fn simulate_transfer(&self, ledger: &Ledger, call: &Value, head: i64) -> Result<Value, String> {
        use alloy_sol_types::SolCall;
        if !call["to"]
            .as_str()
            .is_some_and(|to| to.eq_ignore_ascii_case(&self.asset))
        {
            return Err("transferWithAuthorization of another contract than USDC".into());
        }
        let data = call["data"].as_str().unwrap_or_default();
        let bytes = hex::decode(data.trim_start_matches("0x")).map_err(|e| e.to_string())?;
        let t = transferWithAuthorizationCall::abi_decode(&bytes).map_err(|e| e.to_string())?;
        let revert = |why: &str| Err(format!("execution reverted: {why}"));
        let time = alloy_primitives::U256::from(self.genesis + head * BLOCK_SECONDS);
        if time <= t.validAfter {
            return revert("FiatTokenV2: authorization is not yet valid");
        }
        if time >= t.validBefore {
            return revert("FiatTokenV2: authorization is expired");
        }
        let (payer, nonce) = (format!("{:#x}", t.from), format!("{:#x}", t.nonce));
        let used = ledger
            .winner(self.genesis, &payer, &nonce)
            .is_some_and(|tx| block_of(self.genesis, tx.mined_at) <= head);
        if used {
            return revert("FiatTokenV2: authorization is used or canceled");
        }
        let message = domain::x402::verify::TransferWithAuthorization {
            from: t.from,
            to: t.to,
            value: t.value,
            validAfter: t.validAfter,
            validBefore: t.validBefore,
            nonce: t.nonce,
        };
        let digest = domain::x402::verify::signing_hash(self.network(), &message);
        let signature = format!("0x{}", hex::encode(&t.signature));
        let signed = if ledger.accounts.contains_key(&payer) {
            ledger.accepts(&payer, digest, &signature, has_sender(call))
        } else {
            alloy_primitives::Signature::try_from(t.signature.as_ref())
                .ok()
                .and_then(|s| s.recover_address_from_prehash(&digest).ok())
                == Some(t.from)
        };
        if !signed {
            return revert("FiatTokenV2: invalid signature");
        }
        let balance = ledger
            .balances
            .get(&payer)
            .copied()
            .unwrap_or(u64::MAX as u128);
        if alloy_primitives::U256::from(balance) < t.value {
            return revert("ERC20: transfer amount exceeds balance");
        }
        Ok(json!("0x"))
    }

    /// `eth_call` of a view: a smart account's `isValidSignature(bytes32,bytes)` (ERC-1271:
    /// the magic value for a pair it accepts, else zero; an address without code answers
    /// nothing), USDC's `balanceOf(address)` (what [`Self::set_balance`] set, else plenty — a
    /// pending transfer is not subtracted), or its `authorizationState(address,bytes32)` at the
    /// block `params[1]` names (hash, number or `latest`), as of the node's `head`.
    fn view(&self, ledger: &Ledger, params: &Value, head: i64) -> Result<Value, String> {
        use alloy_sol_types::SolValue;
        let call = &params[0];
        let data = call["data"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let to = call["to"].as_str().unwrap_or_default().to_ascii_lowercase();
        if let Some(args) = data.strip_prefix("0x1626ba7e") {
            let Some(pairs) = ledger.accounts.get(&to) else {
                return Ok(json!("0x"));
            };
            let bytes = hex::decode(args).map_err(|e| e.to_string())?;
            let (hash, signature) =
                <(alloy_primitives::B256, alloy_primitives::Bytes)>::abi_decode_params(&bytes)
                    .map_err(|e| e.to_string())?;
            let signature = format!("0x{}", hex::encode(&signature));
            let valid = pairs.iter().any(|(d, s)| *d == hash && *s == signature)
                && !(has_sender(call) && ledger.origin_bound.contains(&to));
            let word = if valid { "1626ba7e" } else { "ffffffff" };
            return Ok(json!(format!("0x{word:0<64}")));
        }
        if let (Some(args), true) = (data.strip_prefix("0x70a08231"), to == self.asset) {
            let account = format!("0x{}", args.get(24..64).ok_or("malformed balanceOf")?);
            let balance = ledger
                .balances
                .get(&account)
                .copied()
                .unwrap_or(u64::MAX as u128);
            return Ok(json!(format!("0x{balance:064x}")));
        }
        let (Some(args), true) = (data.strip_prefix("0xe94a0102"), to == self.asset) else {
            return Err("only USDC's views and smart accounts' isValidSignature are served".into());
        };
        if args.len() != 128 {
            return Err("malformed authorizationState arguments".into());
        }
        let payer = format!("0x{}", &args[24..64]);
        let nonce = format!("0x{}", &args[64..]);
        let block = match &params[1] {
            Value::Object(at) => {
                let hash = at["blockHash"].as_str().unwrap_or_default();
                number_of(hash).ok_or("unknown block hash")?
            }
            Value::String(tag) if tag == "latest" => head,
            Value::String(n) => i64::from_str_radix(n.trim_start_matches("0x"), 16)
                .map_err(|_| "malformed block number")?,
            _ => head,
        };
        if block > head {
            return Err(format!("header not found: block {block}"));
        }
        let used = ledger
            .winner(self.genesis, &payer, &nonce)
            .is_some_and(|tx| block_of(self.genesis, tx.mined_at) <= block);
        Ok(json!(format!("0x{:064x}", used as u8)))
    }
}
