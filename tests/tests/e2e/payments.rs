//! Paid provisioning with x402 (issue 4): payments signed for real with throwaway keys, the
//! development facilitator as the only double besides the provider simulator.

use std::time::Duration;

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use e2e::facilitator::Mode;
use e2e::sim::Fault;
use serde_json::{Value, json};

use domain::store::payments::OrderState;

use crate::harness::{ALICE, Options, PROJECT, TREASURY, TestEnv, TestResponse, b64json, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";
const AMOUNT: &str = "18460240";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body() -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "paid-1"})
}

async fn offer(env: &TestEnv, key: &str) -> String {
    let res = env.req("POST", &path()).key(key).json(body()).send().await;
    assert_eq!(res.status, 402, "{}", res.body);
    res.header("payment-required").unwrap().to_owned()
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String), body: Value) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await
}

fn creates(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| r.starts_with("POST /projects/"))
        .count()
}

#[tokio::test]
async fn a_402_carries_both_protocol_versions() {
    for (network, caip2, v1_name, asset, name) in [
        (
            "base-sepolia",
            "eip155:84532",
            "base-sepolia",
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "USDC",
        ),
        (
            "base",
            "eip155:8453",
            "base",
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "USD Coin",
        ),
    ] {
        let env = TestEnv::with(Options {
            network,
            ..Options::default()
        })
        .await;
        let key = env.key(ALICE).await;
        let res = env
            .req("POST", &path())
            .key(&key)
            .header("host", "api.example.test")
            .json(body())
            .send()
            .await;
        assert_eq!(res.status, 402);
        assert_eq!(res.header("content-type"), Some("application/json"));
        let v2 = b64json(res.header("payment-required").unwrap());
        assert_eq!(v2["x402Version"], 2);
        assert_eq!(
            v2["resource"]["url"],
            format!("https://api.example.test{}", path())
        );
        assert_eq!(
            v2["accepts"][0],
            json!({"scheme": "exact", "network": caip2, "amount": AMOUNT, "asset": asset,
                   "payTo": TREASURY.to_lowercase(), "maxTimeoutSeconds": 120,
                   "extra": {"name": name, "version": "2", "paymentFlow": "upfront"}})
        );
        let v1 = res.json();
        assert_eq!(v1["x402Version"], 1);
        assert!(v1["error"].is_string());
        let offer = &v1["accepts"][0];
        assert_eq!(offer["scheme"], "exact");
        assert_eq!(offer["network"], v1_name);
        assert_eq!(offer["maxAmountRequired"], AMOUNT);
        assert_eq!(offer["asset"], asset);
        assert_eq!(offer["payTo"], TREASURY.to_lowercase());
        assert_eq!(
            offer["resource"],
            format!("https://api.example.test{}", path())
        );
        assert_eq!(offer["mimeType"], "application/json");
        assert_eq!(offer["maxTimeoutSeconds"], 120);
        assert_eq!(
            offer["extra"],
            json!({"name": name, "version": "2", "paymentFlow": "upfront"})
        );
        assert!(offer["description"].is_string());
        assert_eq!(creates(&env), 0);
    }
}

#[tokio::test]
async fn paid_plans_need_a_configured_treasury() {
    let env = TestEnv::with(Options {
        payments: false,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    env.req("POST", &path())
        .key(&key)
        .json(body())
        .send()
        .await
        .problem(503);
}

#[tokio::test]
async fn a_v2_payment_provisions_once_and_replays_the_same_outcome() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payer = PrivateKeySigner::random();
    let payment = pay(&payer, &offer(&env, &key).await, 2);
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json();
    let settle = b64json(res.header("payment-response").unwrap());
    assert_eq!(
        res.header("payment-response"),
        res.header("x-payment-response")
    );
    assert_eq!(settle["success"], true);
    assert_eq!(settle["network"], "eip155:84532");
    assert!(settle["transaction"].as_str().unwrap().starts_with("0x"));
    assert_eq!(env.facilitator.settles(), 1);
    // The same payment on the same request: the same server, nothing settled again.
    let again = send(&env, &key, &payment, body()).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(again.json()["id"], server["id"]);
    assert_eq!(
        again.header("payment-response"),
        res.header("payment-response")
    );
    // On a different request: 409.
    let other = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "paid-2"});
    send(&env, &key, &payment, other).await.problem(409);
    // And by another owner (a different fingerprint): 409 too.
    let bob = env.key(crate::harness::BOB).await;
    send(&env, &bob, &payment, body()).await.problem(409);
    // The same payer and nonce with another signature is not this payment: 409, never its server.
    let forged = tamper(&payment, |p| {
        p["payload"]["signature"] = json!(format!("0x{}", "11".repeat(65)))
    });
    send(&env, &key, &forged, body()).await.problem(409);
    assert_eq!(
        (
            env.facilitator.settles(),
            env.sim.server_count(),
            creates(&env)
        ),
        (1, 1, 1)
    );
    // The ledger says so.
    let page = env
        .store
        .orders_in_state(OrderState::Provisioned, 10, None)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].server_id, server["id"].as_u64());
    assert_eq!(page.items[0].payer, format!("{:#x}", payer.address()));
}

#[tokio::test]
async fn a_v1_payment_provisions_too() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 1);
    assert_eq!(payment.0, "x-payment");
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert!(res.header("x-payment-response").is_some());
    assert_eq!(env.facilitator.settles(), 1);
}

/// Decodes a payment header, lets `edit` change it, encodes it again.
fn tamper(
    payment: &(&'static str, String),
    edit: impl FnOnce(&mut Value),
) -> (&'static str, String) {
    let mut value = b64json(&payment.1);
    edit(&mut value);
    (payment.0, domain::x402::encode_header(&value))
}

#[tokio::test]
async fn every_offline_check_refuses_before_the_facilitator() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payer = PrivateKeySigner::random();
    let required = offer(&env, &key).await;
    let v2 = pay(&payer, &required, 2);
    let v1 = pay(&payer, &required, 1);
    let now = domain::time::now().unix_timestamp();
    let cases: Vec<(&str, (&'static str, String), &str)> = vec![
        (
            "version",
            tamper(&v2, |p| p["x402Version"] = json!(3)),
            "invalid_x402_version",
        ),
        (
            "v1 payload in the v2 header",
            ("payment-signature", v1.1.clone()),
            "invalid_x402_version",
        ),
        (
            "scheme",
            tamper(&v1, |p| p["scheme"] = json!("upto")),
            "unsupported_scheme",
        ),
        (
            "v2 scheme",
            tamper(&v2, |p| p["accepted"]["scheme"] = json!("upto")),
            "unsupported_scheme",
        ),
        (
            "network",
            tamper(&v1, |p| p["network"] = json!("base")),
            "invalid_network",
        ),
        (
            "v2 network",
            tamper(&v2, |p| p["accepted"]["network"] = json!("eip155:8453")),
            "invalid_network",
        ),
        (
            "accepted amount",
            tamper(&v2, |p| p["accepted"]["amount"] = json!("1")),
            "invalid_payment_requirements",
        ),
        (
            "asset",
            tamper(&v2, |p| {
                p["accepted"]["asset"] = json!("0x0000000000000000000000000000000000000001")
            }),
            "invalid_payment_requirements",
        ),
        (
            "accepted payTo",
            tamper(&v2, |p| {
                p["accepted"]["payTo"] = json!("0x0000000000000000000000000000000000000002")
            }),
            "invalid_payment_requirements",
        ),
        (
            "accepted EIP-712 domain",
            tamper(&v2, |p| p["accepted"]["extra"]["name"] = json!("USD Coin")),
            "invalid_payment_requirements",
        ),
        (
            "accepted timeout",
            tamper(&v2, |p| p["accepted"]["maxTimeoutSeconds"] = json!(3600)),
            "invalid_payment_requirements",
        ),
        (
            "payTo",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["to"] =
                    json!("0x0000000000000000000000000000000000000002")
            }),
            "invalid_exact_evm_payload_recipient_mismatch",
        ),
        (
            "amount",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["value"] = json!("18460239")
            }),
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ),
        (
            "too much",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["value"] = json!("18460241")
            }),
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ),
        (
            "valid before",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["validBefore"] = json!((now + 5).to_string())
            }),
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            // Bounded above, so that waiting for the chain after a settle is bounded too.
            "valid before too far ahead",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["validBefore"] = json!((now + 120 + 90).to_string())
            }),
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            "valid after",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["validAfter"] = json!((now + 60).to_string())
            }),
            "invalid_exact_evm_payload_authorization_valid_after",
        ),
        (
            "short nonce",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["nonce"] = json!(format!("0x{}", "ab".repeat(31)))
            }),
            "invalid_payload",
        ),
        (
            "from",
            tamper(&v1, |p| {
                p["payload"]["authorization"]["from"] =
                    json!(format!("{:#x}", PrivateKeySigner::random().address()))
            }),
            "invalid_exact_evm_payload_signature",
        ),
        (
            "empty signature",
            tamper(&v1, |p| p["payload"]["signature"] = json!("0x")),
            "invalid_exact_evm_payload_signature",
        ),
    ];
    for (case, payment, reason) in cases {
        let res = send(&env, &key, &payment, body()).await;
        assert_eq!(res.status, 402, "{case}: {}", res.body);
        assert_eq!(res.json()["error"], reason, "{case}");
        assert_eq!(
            b64json(res.header("payment-required").unwrap())["error"],
            reason,
            "{case}"
        );
    }
    // A signature by another key over the same authorization.
    let mut forged = b64json(&v1.1);
    let other = PrivateKeySigner::random();
    let required_v2: domain::x402::PaymentRequired =
        serde_json::from_value(b64json(&required)).unwrap();
    let nonce: [u8; 32] = hex::decode(
        forged["payload"]["authorization"]["nonce"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
    )
    .unwrap()
    .try_into()
    .unwrap();
    let draft =
        domain::x402::client::Draft::new(1, &required_v2, payer.address(), now as u64, nonce)
            .unwrap();
    let wrong = other.sign_hash_sync(&draft.signing_hash()).unwrap();
    forged["payload"]["signature"] = json!(format!("0x{}", hex::encode(wrong.as_bytes())));
    let res = send(
        &env,
        &key,
        &("x-payment", domain::x402::encode_header(&forged)),
        body(),
    )
    .await;
    assert_eq!(res.json()["error"], "invalid_exact_evm_payload_signature");
    // Undecodable headers are 400, naming the header.
    for garbage in [
        "%%%",
        "bm90IGpzb24=",
        &domain::x402::encode_header(&json!({"x402Version": 2})),
    ] {
        env.req("POST", &path())
            .key(&key)
            .header("payment-signature", garbage)
            .json(body())
            .send()
            .await
            .invalid("payment-signature");
    }
    assert_eq!(
        (
            env.facilitator.verifies(),
            env.facilitator.settles(),
            creates(&env)
        ),
        (0, 0, 0)
    );
    // A signature that is not 65 bytes may be a smart wallet's (ERC-1271/6492): not refused
    // offline; the chain judges it before anything is recorded (no account made this one), and
    // neither the facilitator nor the ledger ever sees it.
    let smart = tamper(&v1, |p| {
        p["payload"]["signature"] = json!(format!("0x{}", "11".repeat(64)));
        // A nonce of its own: a payment of its own, not one the cases above claimed.
        p["payload"]["authorization"]["nonce"] = json!(format!("0x{}", "5a".repeat(32)));
    });
    let res = send(&env, &key, &smart, body()).await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert_eq!(res.json()["error"], "invalid_exact_evm_payload_signature");
    assert_eq!(env.facilitator.verifies(), 0);
    assert_eq!(env.facilitator.settles(), 0);
}

/// The payment a smart account at `from` makes with `signature` (any bytes: the account, not a
/// key, says whether it signed) for the 402 `required`, with `nonce`; and its EIP-712 digest.
pub(crate) fn smart_payment(
    required: &str,
    from: alloy_primitives::Address,
    nonce: [u8; 32],
    signature: &[u8],
) -> ((&'static str, String), alloy_primitives::B256) {
    let required: domain::x402::PaymentRequired =
        serde_json::from_value(b64json(required)).unwrap();
    let now = crate::harness::clock().now() as u64;
    let draft = domain::x402::client::Draft::new(2, &required, from, now, nonce).unwrap();
    let header = ("payment-signature", draft.header(signature));
    (header, draft.signing_hash())
}

/// Every payment is checked on chain before anything of it is recorded or sent on: a forged
/// smart-wallet payment (a payload its account never signed, for its payer and nonce) leaves no
/// record, reaches no facilitator and squats nothing — the payer's own payment with that very
/// nonce then buys the server; an unfunded payer and a nonce already used on chain are refused
/// the same way, each by its reason.
#[tokio::test]
async fn a_forged_or_unfunded_payment_leaves_no_record_and_cannot_squat_a_nonce() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let required = offer(&env, &key).await;
    let chain = env.facilitator.chain();
    let account = PrivateKeySigner::random().address();
    let nonce = [0x7a; 32];
    let real_signature = [0x5e; 97];
    let (real, digest) = smart_payment(&required, account, nonce, &real_signature);
    chain.deploy_account(
        &format!("{account:#x}"),
        digest,
        &hex::encode(real_signature),
    );
    let ledger_key = domain::x402::PaymentKey::of(
        domain::x402::Network::BaseSepolia,
        "0x036cbd53842c5426634e7929541ec2318f3dcf7e",
        &format!("{account:#x}"),
        &format!("0x{}", hex::encode(nonce)),
    );
    let (forged, _) = smart_payment(&required, account, nonce, &[0x66; 97]);
    let before = chain.round_trips();
    let res = send(&env, &key, &forged, body()).await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert_eq!(res.json()["error"], "invalid_exact_evm_payload_signature");
    assert_eq!(
        chain.round_trips() - before,
        1,
        "one round trip to the chain"
    );
    assert_eq!(
        chain.validator_runs(),
        0,
        "a deployed account's factory is never called"
    );
    assert_eq!(env.store.order(&ledger_key).await.unwrap(), None);
    assert_eq!(
        (
            env.facilitator.verifies(),
            env.facilitator.settles(),
            creates(&env)
        ),
        (0, 0, 0)
    );
    // The payer's own payment with the nonce the forgery named.
    let res = send(&env, &key, &real, body()).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(env.facilitator.settles(), 1);
    assert!(env.store.order(&ledger_key).await.unwrap().is_some());
    // An EOA's valid signature from a wallet without the money.
    let empty = PrivateKeySigner::random();
    chain.set_balance(&format!("{:#x}", empty.address()), 18_460_239);
    let calls = chain.calls();
    let res = send(&env, &key, &pay(&empty, &required, 2), body()).await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert_eq!(res.json()["error"], "insufficient_funds");
    // The standing's batch alone (two calls here): no search for a transfer, which only a used
    // nonce gets.
    assert_eq!(chain.calls() - calls, 2, "calls for an unfunded payment");
    // A nonce its payer already used on chain (spent elsewhere, or cancelled).
    let payer = PrivateKeySigner::random();
    let payment = pay(&payer, &required, 2);
    let used = b64json(&payment.1)["payload"]["authorization"]["nonce"].clone();
    let payer_hex = format!("{:#x}", payer.address());
    chain.broadcast(
        &payer_hex,
        used.as_str().unwrap(),
        e2e::chain::Use::Cancel,
        Duration::ZERO,
    );
    let calls = chain.calls();
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert_eq!(res.json()["error"], "invalid_exact_evm_nonce_already_used");
    // Then a search for its own transfer to the treasury (it might have paid us): bounded to one
    // log range (`effects::USE_LOOKBACK_SECS`): four calls in all here.
    assert_eq!(chain.calls() - calls, 4, "calls for a used nonce");
    assert_eq!(
        (
            env.facilitator.verifies(),
            env.facilitator.settles(),
            creates(&env)
        ),
        (1, 1, 1)
    );
    let listed = env.req("GET", "/api/payments").key(&key).send().await;
    assert_eq!(
        listed.json()["items"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.body
    );
}

#[tokio::test]
async fn ten_concurrent_requests_with_one_payment_make_one_server() {
    // Each request holds one of its owner's paid slots while it checks the payment: ten at once
    // are more than the default budget of 3 (of a pool of 9).
    let env = TestEnv::with(Options {
        vars: vec![
            ("MAX_PAID_IN_FLIGHT_PER_OWNER", "10".into()),
            ("MAX_PAID_IN_FLIGHT", "30".into()),
        ],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    let requests = (0..10).map(|_| send(&env, &key, &payment, body()));
    let responses = futures::future::join_all(requests).await;
    let ids: std::collections::BTreeSet<String> = responses
        .iter()
        .map(|r| {
            assert_eq!(r.status, 201, "{}", r.body);
            r.json()["id"].to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        (
            env.facilitator.settles(),
            env.sim.server_count(),
            creates(&env)
        ),
        (1, 1, 1)
    );
}

/// A settle that answers a failure may have broadcast anyway (`reference/x402.md` §9.1): the
/// order is not refused on that answer. It waits — answering that the same payment will still be
/// settled — until the chain shows a transfer or the authorization expires unused; then the
/// 402 gives the facilitator's reason.
#[tokio::test]
async fn a_refused_settlement_waits_for_the_authorization_to_expire_then_is_402_with_the_reason() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    for _ in 0..4 {
        env.facilitator
            .next_settle(Mode::Fail("insufficient_funds".into()));
    }
    for _ in 0..2 {
        let res = send(&env, &key, &payment, body()).await;
        assert_eq!(res.status, 202, "{}", res.body);
        assert_eq!(res.json()["payment"]["state"], "settling", "{}", res.body);
        assert!(res.header("payment-response").is_none());
    }
    // Past validBefore (now + 120 s) and finality: nothing was or will be charged.
    let report = env.pass_after(200).await;
    assert_eq!(report.outcomes.get("expired"), Some(&1), "{report:?}");
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (402, json!("insufficient_funds")),
        "{}",
        res.body
    );
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (0, 0));
    let expired = env
        .store
        .orders_in_state(OrderState::Expired, 10, None)
        .await
        .unwrap();
    assert_eq!(expired.items.len(), 1);
}

#[tokio::test]
async fn settlement_pending_is_retried_once_with_the_identical_request() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    env.facilitator.next_settle(Mode::Pending);
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(
        b64json(res.header("payment-response").unwrap())["success"],
        true
    );
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
}

#[tokio::test]
async fn a_facilitator_timeout_is_resolved_on_chain_and_settled_once() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    // The first settle stalls past the timeout before settling anything: the chain says the
    // authorization is unused and still valid, so it is settled again with the stored payload.
    env.facilitator
        .next_settle(Mode::Stall(Duration::from_secs(3)));
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert!(res.header("payment-response").is_some());
    assert!(env.facilitator.rpc_calls() >= 1);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
    // The look-up that found the authorization unused recorded how far it read (the next one
    // starts there: `doubles_agree_with_the_rails`).
    let listed = env
        .store
        .orders_of(&crate::harness::owner(ALICE), 10, None)
        .await
        .unwrap();
    let order = env.store.order(&listed.items[0].id).await.unwrap().unwrap();
    assert!(order.scanned_to.is_some_and(|block| block > 0), "{order:?}");
}

/// A create answered 500 may still land (the provider may commit it late): the order searches
/// for it on passes spread over its window — the intent's lease (60 s) and the create settle
/// time (300 s) — before it creates again: one server, one charge.
#[tokio::test]
async fn a_provider_failure_after_settlement_is_created_again_only_after_the_settle_time() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 1);
    env.sim
        .inject(Fault::status("/projects/", 500).on(axum::http::Method::POST));
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(res.header("x-payment-response").is_some());
    // Within the settle time: searched, not created again.
    env.pass_after(61).await;
    assert_eq!(
        (env.sim.calls("POST /projects/"), env.sim.server_count()),
        (1, 0)
    );
    env.pass_after(240).await;
    assert_eq!(
        env.sim.calls("POST /projects/"),
        1,
        "still within the window"
    );
    env.pass_after(60).await;
    let replay = send(&env, &key, &payment, body()).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
    let order = env
        .store
        .orders_in_state(OrderState::Provisioned, 10, None)
        .await
        .unwrap();
    assert_eq!(order.items[0].create_attempts, 2);
}

/// Whoever holds a payload may settle it to the treasury himself just before the facilitator's
/// verify, which then calls it invalid (the nonce used): a node behind that answer shows it
/// unused, and is not believed until it reaches the time of the refusal — the order waits (202),
/// then settles on that very transfer. Believed at once, the order would be refused ("nothing
/// was charged") with the money in the treasury.
#[tokio::test]
async fn a_refusal_stands_only_on_a_node_that_has_reached_it() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    env.facilitator
        .next_verify(e2e::facilitator::VerifyMode::SettledFirst);
    env.facilitator.set_chain_lag(Duration::from_secs(8));
    let res = send(&env, &key, &payment, body()).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(res.body.contains("will still be settled"), "{}", res.body);
    env.facilitator.set_chain_lag(Duration::ZERO);
    env.pass_after(10).await;
    let replay = send(&env, &key, &payment, body()).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    // Paid by the transfer the payload's holder sent, never settled again.
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (0, 1));
}
