//! The real payment rails of `make test` (`infra/rails.sh with`): anvil with Circle's
//! FiatTokenV2_2 at Base Sepolia's USDC address, and x402's own facilitator — reached at
//! `RAILS_RPC_URL` and `RAILS_FACILITATOR_URL`. What a payer does on chain besides paying us
//! (cancel an authorization, spend its nonce on another transfer) is done here for real: the
//! payer signs, and an impersonated relayer submits (anyone may submit an EIP-3009
//! authorization).

use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolStruct, sol};
use domain::x402::Network;
use domain::x402::verify::{TransferWithAuthorization, domain, signing_hash};
use serde_json::{Value, json};

sol! {
    /// EIP-3009 `CancelAuthorization`, signed by the authorizer.
    struct CancelAuthorization {
        address authorizer;
        bytes32 nonce;
    }
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s);
    function transferWithAuthorization(address from, address to, uint256 value,
        uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s);
    function mint(address to, uint256 amount);
    function balanceOf(address account) external view returns (uint256);
}

/// Circle's roles on the local chain (`infra/rails/rails.mjs`), impersonated to mint.
const CIRCLE: &str = "0x0000000000000000000000000000000000c1c1e0";
/// anvil's default account 9 (its well-known key): the gas of smart-wallet deployments.
const ANVIL_KEY_9: &str = "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6";
/// A relayer that submits payers' signed authorizations.
const RELAYER: &str = "0x00000000000000000000000000000000000be1a7";

/// The network the rails run.
pub const NETWORK: Network = Network::BaseSepolia;

/// The real rails' addresses.
#[derive(Debug, Clone)]
pub struct Rails {
    /// anvil's JSON-RPC.
    pub rpc_url: String,
    /// x402's facilitator.
    pub facilitator_url: String,
    /// The smart-wallet factory (Solady's ERC-4337 account).
    pub smart_wallet_factory: String,
    /// A deployed smart wallet that lies to simulations (`infra/rails/contracts/OriginWallet.sol`:
    /// its ERC-1271 check passes only for a zero `tx.origin`).
    pub origin_wallet: Address,
    /// The account x402's facilitator settles from (its signer).
    pub facilitator_signer: Address,
}

impl Rails {
    /// The rails `make test` started.
    ///
    /// # Panics
    /// When the variables are not set (run with `make test`).
    pub fn from_env() -> Rails {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run the tests with `make test`, which starts the rails")
            })
        };
        Rails {
            rpc_url: var("RAILS_RPC_URL"),
            facilitator_url: var("RAILS_FACILITATOR_URL"),
            smart_wallet_factory: var("RAILS_SMART_WALLET_FACTORY"),
            origin_wallet: var("RAILS_ORIGIN_WALLET").parse().unwrap(),
            facilitator_signer: var("RAILS_FACILITATOR_SIGNER").parse().unwrap(),
        }
    }

    /// One JSON-RPC request to anvil; its whole answer (`result` or `error`).
    pub async fn answer(&self, body: &Value) -> Value {
        reqwest::Client::new()
            .post(&self.rpc_url)
            .json(body)
            .send()
            .await
            .expect("anvil answers")
            .json()
            .await
            .expect("anvil answers JSON")
    }

    /// One JSON-RPC call to anvil; its `result`.
    ///
    /// # Panics
    /// When anvil answers an error.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer = self.answer(&body).await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// Sends `data` to USDC as `from` (impersonated, given gas money) and waits for the
    /// receipt; returns the transaction hash and whether it succeeded.
    pub async fn send_as(&self, from: &str, data: Vec<u8>) -> (String, bool) {
        self.rpc("anvil_impersonateAccount", json!([from])).await;
        self.rpc("anvil_setBalance", json!([from, "0x56BC75E2D63100000"]))
            .await;
        let tx = json!({"from": from, "to": NETWORK.usdc(), "data": format!("0x{}", hex::encode(data)),
                        "gas": "0x30d40"});
        let hash = self.rpc("eth_sendTransaction", json!([tx])).await;
        let hash = hash.as_str().expect("a transaction hash").to_owned();
        for _ in 0..100 {
            let receipt = self.rpc("eth_getTransactionReceipt", json!([hash])).await;
            if !receipt.is_null() {
                return (hash, receipt["status"] == "0x1");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("transaction {hash} was not mined in 10 s");
    }

    /// Mints `amount` USDC atomic units to `to`.
    pub async fn fund(&self, to: Address, amount: u128) {
        let call = mintCall {
            to,
            amount: U256::from(amount),
        };
        let (_, ok) = self.send_as(CIRCLE, call.abi_encode()).await;
        assert!(ok, "mint reverted");
    }

    /// `to`'s USDC balance, atomic units.
    pub async fn balance(&self, of: Address) -> u128 {
        let data = format!(
            "0x{}",
            hex::encode(balanceOfCall { account: of }.abi_encode())
        );
        let word = self
            .rpc(
                "eth_call",
                json!([{"to": NETWORK.usdc(), "data": data}, "latest"]),
            )
            .await;
        u128::from_str_radix(word.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    /// Reorganises the chain so that the block holding `transaction` and every block after it
    /// are gone (`anvil_reorg`; its transactions are not mined again). A block mined between
    /// reading the head and the reorg leaves the transaction in, so it reorganises again until
    /// the receipt is gone.
    pub async fn reorg_out(&self, transaction: &str) {
        let mut mined = self.mined(transaction).await;
        for _ in 0..10 {
            let head = quantity(&self.rpc("eth_blockNumber", json!([])).await);
            self.rpc("anvil_reorg", json!([head - mined + 1, []])).await;
            let receipt = self
                .rpc("eth_getTransactionReceipt", json!([transaction]))
                .await;
            if receipt.is_null() {
                return;
            }
            mined = quantity(&receipt["blockNumber"]);
        }
        panic!("{transaction} stayed in the chain through ten reorgs");
    }

    /// The block `transaction` is in once it is mined (waits up to 30 s).
    pub async fn mined(&self, transaction: &str) -> u64 {
        for _ in 0..150 {
            let receipt = self
                .rpc("eth_getTransactionReceipt", json!([transaction]))
                .await;
            if !receipt.is_null() {
                return quantity(&receipt["blockNumber"]);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("{transaction} was not mined in 30 s");
    }

    /// Waits until the chain's `finalized` block is at or past `block` (up to 60 s).
    pub async fn finalized_past(&self, block: u64) {
        for _ in 0..300 {
            let finalized = self
                .rpc("eth_getBlockByNumber", json!(["finalized", false]))
                .await;
            if quantity(&finalized["number"]) >= block {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("block {block} was not finalized in 60 s");
    }

    /// The payer cancels `nonce` (`cancelAuthorization`, signed by the payer).
    pub async fn cancel(&self, payer: &PrivateKeySigner, nonce: B256) -> String {
        let message = CancelAuthorization {
            authorizer: payer.address(),
            nonce,
        };
        let hash = message.eip712_signing_hash(&domain(NETWORK));
        let signature = payer.sign_hash_sync(&hash).unwrap();
        let call = cancelAuthorizationCall {
            authorizer: payer.address(),
            nonce,
            v: 27 + signature.v() as u8,
            r: signature.r().into(),
            s: signature.s().into(),
        };
        let (tx, ok) = self.send_as(RELAYER, call.abi_encode()).await;
        assert!(ok, "cancelAuthorization reverted");
        tx
    }

    /// A smart wallet deployed for a fresh owner (Solady's ERC-4337 account from the rails'
    /// factory) signs `authorization` (JSON: `to`, `value`, `validAfter`, `validBefore`,
    /// `nonce`) as a wallet does (viem's `toSoladySmartAccount`: ERC-1271 through ERC-7739),
    /// by `tests/mcp-client/sign-as-smart-wallet.mjs`: the account's address and the signature.
    pub async fn smart_wallet_signs(&self, authorization: &Value) -> (Address, String) {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/mcp-client/sign-as-smart-wallet.mjs"
        );
        let mut command = std::process::Command::new("node");
        command
            .arg(script)
            .env("RPC_URL", &self.rpc_url)
            .env("SMART_WALLET_FACTORY", &self.smart_wallet_factory)
            .env("GAS_KEY", ANVIL_KEY_9)
            .env("AUTHORIZATION", authorization.to_string());
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .expect("node runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let signed: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
        (
            signed["from"].as_str().unwrap().parse().unwrap(),
            signed["signature"].as_str().unwrap().to_owned(),
        )
    }

    /// Sends a payment payload's own authorization on chain, as anyone holding the payload can
    /// (`transferWithAuthorization` with its fields and its 65-byte signature): the transaction.
    pub async fn submit(&self, payload: &Value) -> String {
        let auth = &payload["payload"]["authorization"];
        let text = |name: &str| auth[name].as_str().unwrap();
        let number = |name: &str| U256::from_str_radix(text(name), 10).unwrap();
        let signature = payload["payload"]["signature"].as_str().unwrap();
        let signature = hex::decode(signature.trim_start_matches("0x")).unwrap();
        let call = transferWithAuthorizationCall {
            from: text("from").parse().unwrap(),
            to: text("to").parse().unwrap(),
            value: number("value"),
            validAfter: number("validAfter"),
            validBefore: number("validBefore"),
            nonce: text("nonce").parse().unwrap(),
            v: signature[64],
            r: B256::from_slice(&signature[..32]),
            s: B256::from_slice(&signature[32..64]),
        };
        let (tx, ok) = self.send_as(RELAYER, call.abi_encode()).await;
        assert!(ok, "the payment's own transfer reverted");
        tx
    }

    /// The payer spends `nonce` on a transfer of `value` to `to`, signed by the payer.
    pub async fn spend_elsewhere(
        &self,
        payer: &PrivateKeySigner,
        nonce: B256,
        to: Address,
        value: u128,
    ) -> String {
        let now = domain::time::now().unix_timestamp() as u64;
        let message = TransferWithAuthorization {
            from: payer.address(),
            to,
            value: U256::from(value),
            validAfter: U256::ZERO,
            validBefore: U256::from(now + 300),
            nonce,
        };
        let signature = payer
            .sign_hash_sync(&signing_hash(NETWORK, &message))
            .unwrap();
        let call = transferWithAuthorizationCall {
            from: message.from,
            to: message.to,
            value: message.value,
            validAfter: message.validAfter,
            validBefore: message.validBefore,
            nonce,
            v: 27 + signature.v() as u8,
            r: signature.r().into(),
            s: signature.s().into(),
        };
        let (tx, ok) = self.send_as(RELAYER, call.abi_encode()).await;
        assert!(ok, "the payer's own transfer reverted");
        tx
    }
}

/// Real rails of a test's own (`infra/rails/rails.mjs` on free ports), for a test that changes
/// the chain under everyone (a reorg): stopped when dropped (its standard input closes).
pub struct OwnRails {
    /// Their addresses.
    pub rails: Rails,
    child: std::process::Child,
}

impl OwnRails {
    /// Starts them and waits until they answer.
    pub async fn start() -> OwnRails {
        OwnRails::with(&[]).await
    }

    /// Starts them with more of `rails.mjs`'s options (`--slots-in-an-epoch 1`: the
    /// `finalized` block two blocks behind the head) and waits until they answer.
    pub async fn with(options: &[&str]) -> OwnRails {
        let free = || {
            let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            socket.local_addr().unwrap().port().to_string()
        };
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/rails/rails.mjs");
        let mut child = std::process::Command::new("node")
            .args([script, "--rpc-port", &free(), "--facilitator-port", &free()])
            .arg("--exit-with-stdin")
            .args(options)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node runs the rails");
        let stdout = child.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find(|line| line.starts_with('{'))
        })
        .await
        .unwrap()
        .expect("the rails print their addresses");
        let started: Value = serde_json::from_str(&line).unwrap();
        let text = |name: &str| started[name].as_str().unwrap().to_owned();
        OwnRails {
            rails: Rails {
                rpc_url: text("rpcUrl"),
                facilitator_url: text("facilitatorUrl"),
                smart_wallet_factory: text("smartWalletFactory"),
                origin_wallet: text("originWallet").parse().unwrap(),
                facilitator_signer: text("facilitator").parse().unwrap(),
            },
            child,
        }
    }
}

impl Drop for OwnRails {
    fn drop(&mut self) {
        // Closing standard input stops anvil and then the rails themselves.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What a proxy in front of the real rails does to what passes through it.
#[derive(Debug, Default)]
pub struct Faults {
    /// After a settle that succeeded, reorganise the chain so that the block holding its
    /// transaction is gone (`anvil_reorg`), before the answer goes back.
    pub reorg_after_settle: std::sync::atomic::AtomicBool,
    /// Serve the node as this many blocks behind its head (head, receipts and logs).
    pub lag_blocks: std::sync::atomic::AtomicU64,
}

/// A proxy in front of the real facilitator and node: `<url>/facilitator/…` and `<url>/rpc`,
/// with [`Faults`] applied.
pub struct Proxy {
    /// Its base URL.
    pub url: String,
    /// What it does now.
    pub faults: std::sync::Arc<Faults>,
}

struct ProxyState {
    rails: Rails,
    faults: std::sync::Arc<Faults>,
    http: reqwest::Client,
}

impl Proxy {
    /// Starts a proxy in front of `rails`.
    pub async fn start(rails: &Rails) -> Proxy {
        use axum::routing::{any, post};
        let faults = std::sync::Arc::new(Faults::default());
        let state = std::sync::Arc::new(ProxyState {
            rails: rails.clone(),
            faults: faults.clone(),
            http: reqwest::Client::new(),
        });
        let app = axum::Router::new()
            .route("/rpc", post(proxy_rpc))
            .route("/facilitator/{*path}", any(proxy_facilitator))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { url, faults }
    }
}

type Shared = axum::extract::State<std::sync::Arc<ProxyState>>;

async fn proxy_facilitator(
    axum::extract::State(state): Shared,
    axum::extract::Path(path): axum::extract::Path<String>,
    method: axum::http::Method,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, axum::Json<Value>) {
    let url = format!("{}/{path}", state.rails.facilitator_url);
    let request = if method == axum::http::Method::GET {
        state.http.get(&url)
    } else {
        state
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
    };
    let response = request.send().await.expect("the facilitator answers");
    let status = axum::http::StatusCode::from_u16(response.status().as_u16()).unwrap();
    let answer: Value = response.json().await.expect("JSON");
    let reorg = state
        .faults
        .reorg_after_settle
        .load(std::sync::atomic::Ordering::SeqCst);
    if path == "settle" && answer["success"] == true && reorg {
        let transaction = answer["transaction"].as_str().unwrap_or_default();
        state.rails.reorg_out(transaction).await;
    }
    (status, axum::Json(answer))
}

fn quantity(value: &Value) -> u64 {
    u64::from_str_radix(value.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The node as of `lag_blocks` behind its head: an older head, and no receipt or log of a
/// newer block.
async fn proxy_rpc(
    axum::extract::State(state): Shared,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    let lag = state
        .faults
        .lag_blocks
        .load(std::sync::atomic::Ordering::SeqCst);
    let rails = &state.rails;
    let head = quantity(&rails.rpc("eth_blockNumber", json!([])).await);
    let served = head.saturating_sub(lag);
    let mut params = body["params"].clone();
    let method = body["method"].as_str().unwrap_or_default();
    if lag == 0 || !HELD_BACK.contains(&method) {
        return axum::Json(rails.answer(&body).await);
    }
    let result = match method {
        "eth_blockNumber" => json!(format!("{served:#x}")),
        "eth_getBlockByNumber" => {
            if params[0] == "latest" {
                params[0] = json!(format!("{served:#x}"));
            }
            rails.rpc(method, params).await
        }
        "eth_getLogs" => {
            params[0]["toBlock"] = json!(format!("{served:#x}"));
            rails.rpc(method, params).await
        }
        "eth_getTransactionReceipt" => {
            let receipt = rails.rpc(method, params).await;
            if receipt.is_null() || quantity(&receipt["blockNumber"]) > served {
                Value::Null
            } else {
                receipt
            }
        }
        _ => unreachable!("only the methods held back"),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": body["id"], "result": result}))
}

/// The methods a lagging node answers from its older head.
const HELD_BACK: [&str; 4] = [
    "eth_blockNumber",
    "eth_getBlockByNumber",
    "eth_getLogs",
    "eth_getTransactionReceipt",
];
