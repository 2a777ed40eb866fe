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
use serde_json::{Value, json};
use shared::x402::Network;
use shared::x402::verify::{TransferWithAuthorization, domain, signing_hash};

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
        }
    }

    /// One JSON-RPC call to anvil; its `result`.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer: Value = reqwest::Client::new()
            .post(&self.rpc_url)
            .json(&body)
            .send()
            .await
            .expect("anvil answers")
            .json()
            .await
            .expect("anvil answers JSON");
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

    /// The payer spends `nonce` on a transfer of `value` to `to`, signed by the payer.
    pub async fn spend_elsewhere(
        &self,
        payer: &PrivateKeySigner,
        nonce: B256,
        to: Address,
        value: u128,
    ) -> String {
        let now = shared::time::now().unix_timestamp() as u64;
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
