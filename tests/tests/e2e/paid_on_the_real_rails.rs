//! The money paths on the real rails (anvil with Circle's FiatTokenV2_2, x402's own
//! facilitator): a paid server in both protocol versions, its replay, a renewal, and a nonce the
//! payer spends elsewhere — each with where the USDC ended, read from the token itself.

use alloy_primitives::{Address, B256};
use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use serde_json::{Value, json};
use shared::store::payments::OrderState;

use crate::harness::{ALICE, Options, PROJECT, TREASURY, TestEnv, TestResponse, owner, pay};
use crate::rails::Rails;

const PLAN: &str = "B1-1-1gb-20s-shared";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body(hostname: &str) -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname})
}

async fn on_rails() -> (TestEnv, Rails) {
    let env = TestEnv::with(Options {
        real_rails: true,
        ..Options::default()
    })
    .await;
    (env, Rails::from_env())
}

fn treasury() -> Address {
    TREASURY.parse().unwrap()
}

/// The amount a 402 asks for, USDC atomic units.
fn price(offer: &TestResponse) -> u128 {
    let header = offer.header("payment-required").unwrap();
    let required: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    required["accepts"][0]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The nonce of a payment header.
fn nonce_of(payment: &(&str, String)) -> B256 {
    let decoded: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&payment.1)
            .unwrap(),
    )
    .unwrap();
    decoded["payload"]["authorization"]["nonce"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String), hostname: &str) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body(hostname))
        .send()
        .await
}

/// A paid server in each protocol version, paid from a funded payer: the treasury gains exactly
/// the price, the payer loses it, the facilitator's transaction is the one on chain, and a
/// replay of the same payment answers the same server without a second charge.
#[tokio::test]
async fn a_paid_server_moves_the_price_once_on_the_real_rails() {
    let (env, rails) = on_rails().await;
    let key = env.key(ALICE).await;
    for version in [1u8, 2] {
        let hostname = format!("rails-v{version}");
        let offer = env
            .req("POST", &path())
            .key(&key)
            .json(body(&hostname))
            .send()
            .await;
        assert_eq!(offer.status, 402, "{}", offer.body);
        let amount = price(&offer);
        let payer = PrivateKeySigner::random();
        rails.fund(payer.address(), amount).await;
        let before = rails.balance(treasury()).await;
        let payment = pay(&payer, offer.header("payment-required").unwrap(), version);
        let res = send(&env, &key, &payment, &hostname).await;
        assert_eq!(res.status, 201, "v{version}: {}", res.body);
        let response_header = if version == 2 {
            "payment-response"
        } else {
            "x-payment-response"
        };
        let settlement: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(res.header(response_header).unwrap())
                .unwrap(),
        )
        .unwrap();
        let receipt = rails
            .rpc(
                "eth_getTransactionReceipt",
                json!([settlement["transaction"]]),
            )
            .await;
        assert_eq!(
            receipt["status"], "0x1",
            "the named transaction is on chain"
        );
        assert_eq!(rails.balance(treasury()).await - before, amount);
        assert_eq!(rails.balance(payer.address()).await, 0);
        let replay = send(&env, &key, &payment, &hostname).await;
        assert_eq!(replay.status, 201, "{}", replay.body);
        assert_eq!(replay.json()["id"], res.json()["id"]);
        assert_eq!(
            rails.balance(treasury()).await - before,
            amount,
            "charged once"
        );
    }
    assert_eq!(env.sim.server_count(), 2);
}

/// A renewal paid on the real rails extends the lease and moves its price to the treasury.
#[tokio::test]
async fn a_renewal_is_paid_on_the_real_rails() {
    let (env, rails) = on_rails().await;
    let key = env.key(ALICE).await;
    let offer = env
        .req("POST", &path())
        .key(&key)
        .json(body("rails-renewed"))
        .send()
        .await;
    let payer = PrivateKeySigner::random();
    rails.fund(payer.address(), price(&offer)).await;
    let payment = pay(&payer, offer.header("payment-required").unwrap(), 2);
    let res = send(&env, &key, &payment, "rails-renewed").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json()["id"].as_u64().unwrap();
    let renewal = format!("/api/cloud/servers/{server}/renewals");
    let offer = env
        .req("POST", &renewal)
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let amount = price(&offer);
    let payer = PrivateKeySigner::random();
    rails.fund(payer.address(), amount).await;
    let before = rails.balance(treasury()).await;
    let payment = pay(&payer, offer.header("payment-required").unwrap(), 2);
    let res = env
        .req("POST", &renewal)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(rails.balance(treasury()).await - before, amount);
}

/// The payer signs, then spends the same nonce on a transfer to himself before the service
/// settles: the service's payment can never move, so the answer is 402 and nothing is made or
/// owed; the treasury's balance is unchanged.
#[tokio::test]
async fn a_nonce_spent_elsewhere_first_buys_nothing_on_the_real_rails() {
    let (env, rails) = on_rails().await;
    let key = env.key(ALICE).await;
    let offer = env
        .req("POST", &path())
        .key(&key)
        .json(body("rails-spent"))
        .send()
        .await;
    let amount = price(&offer);
    let payer = PrivateKeySigner::random();
    rails.fund(payer.address(), amount).await;
    let before = rails.balance(treasury()).await;
    let payment = pay(&payer, offer.header("payment-required").unwrap(), 2);
    rails
        .spend_elsewhere(&payer, nonce_of(&payment), payer.address(), 1)
        .await;
    let res = send(&env, &key, &payment, "rails-spent").await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert!(res.header("payment-response").is_none());
    let orders = env
        .state
        .store
        .orders_of(&owner(ALICE), 10, None)
        .await
        .unwrap();
    assert_eq!(orders.items.len(), 1);
    assert_eq!(orders.items[0].state, OrderState::Rejected);
    assert_eq!(env.sim.server_count(), 0);
    assert_eq!(rails.balance(treasury()).await, before);
    // Its 1-unit transfer went to himself: he keeps it all.
    assert_eq!(rails.balance(payer.address()).await, amount);
}
