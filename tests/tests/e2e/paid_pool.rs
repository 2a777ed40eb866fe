//! The paid pool against payments that never pay: a smart wallet whose account lies to a
//! simulation is refused before anything of it is recorded (the pre-check simulates the
//! settlement from a sender); an owner and a payer whose checked payment the facilitator refused
//! wait a while before the next; a payer holds at most its cap of paid requests in flight,
//! whatever owners it pays for; a refused order lapses; and a node that times out stops the
//! following of transfers, never a lease step.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use e2e::facilitator::{Mode, VerifyMode};
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, Options, PROJECT, TestEnv, TestResponse, pay};
use crate::limits::refused_by;
use crate::payments::smart_payment;

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body() -> Value {
    json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"})
}

async fn offer(env: &TestEnv, key: &str) -> String {
    let res = env.req("POST", &path()).key(key).json(body()).send().await;
    assert_eq!(res.status, 402, "{}", res.body);
    res.header("payment-required").unwrap().to_owned()
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String)) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body())
        .send()
        .await
}

/// The ledger's key of the payment `payer` made with `nonce`.
fn ledger_key(payer: &str, nonce: &str) -> domain::x402::PaymentKey {
    domain::x402::PaymentKey::of(
        domain::x402::Network::BaseSepolia,
        &domain::x402::Network::BaseSepolia
            .usdc()
            .to_ascii_lowercase(),
        payer,
        nonce,
    )
}

/// The payer and nonce of a payment header.
fn payer_and_nonce(payment: &(&str, String)) -> (String, String) {
    let authorization = crate::harness::b64json(&payment.1)["payload"]["authorization"].clone();
    let text = |name: &str| authorization[name].as_str().unwrap().to_ascii_lowercase();
    (text("from"), text("nonce"))
}

fn random_owner() -> String {
    format!("{:#x}", PrivateKeySigner::random().address())
}

/// A smart wallet whose ERC-1271 check passes only for a call without a sender (`tx.origin`
/// zero, as a bare `eth_call` runs) never pays: no settlement's transaction passes it. Three
/// owners paying from such wallets, four payments each at once — more than the whole paid pool —
/// are each refused 402 before anything is recorded or sent to the facilitator, and an honest
/// payer's server is bought beside them.
#[tokio::test]
async fn a_wallet_that_lies_to_simulations_is_refused_before_any_record_and_the_pool_stays_free() {
    let env = TestEnv::new().await;
    let chain = env.facilitator.chain();
    let honest = env.key(ALICE).await;
    let required = offer(&env, &honest).await;
    let mut lies = Vec::new();
    for _ in 0..3 {
        let key = env.key(&random_owner()).await;
        let wallet = PrivateKeySigner::random().address();
        for _ in 0..4 {
            let mut nonce = [0u8; 32];
            getrandom::fill(&mut nonce).unwrap();
            let signature = [0x5e; 97];
            let (payment, digest) = smart_payment(&required, wallet, nonce, &signature);
            let account = format!("{wallet:#x}");
            chain.deploy_origin_account(&account, digest, &hex::encode(signature));
            lies.push((key.clone(), payment));
        }
    }
    // Were a lie let in, its settlement would take its time, holding its slots.
    for _ in 0..lies.len() {
        env.facilitator
            .next_settle(Mode::Stall(Duration::from_millis(300)));
    }
    let honest_payment = pay(&PrivateKeySigner::random(), &required, 2);
    let refused = futures::future::join_all(lies.iter().map(|(key, p)| send(&env, key, p)));
    let (refused, bought) = tokio::join!(refused, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        send(&env, &honest, &honest_payment).await
    });
    for res in &refused {
        assert_eq!(res.status, 402, "{}", res.body);
        assert_eq!(res.json()["error"], "invalid_exact_evm_payload_signature");
    }
    assert_eq!(bought.status, 201, "{}", bought.body);
    for (_, payment) in &lies {
        let (payer, nonce) = payer_and_nonce(payment);
        let order = env.store.order(&ledger_key(&payer, &nonce)).await.unwrap();
        assert_eq!(order, None, "a lying wallet's payment was recorded");
    }
    // The honest payment's verify and settle alone.
    let calls = (env.facilitator.verifies(), env.facilitator.settles());
    assert_eq!(calls, (1, 1));
}

fn with_cooldown(seconds: u64) -> Options {
    Options {
        vars: vec![("PAID_REFUSAL_COOLDOWN_SECONDS", seconds.to_string())],
        ..Options::default()
    }
}

/// An owner and a payer whose payment passed the checks on chain and was then refused by the
/// facilitator are kept off the paid pool for `PAID_REFUSAL_COOLDOWN_SECONDS`: the owner's next
/// payment (another payer's) and the payer's next (for another owner) are answered 429
/// `paid-refused` before the chain is asked, while others buy; once the cooldown ends, the
/// owner buys again. The refused order lapses (the table's TTL) a while after its window.
#[tokio::test]
async fn an_owner_and_a_payer_whose_checked_payment_was_refused_are_kept_off_the_paid_pool() {
    let env = TestEnv::with(with_cooldown(600)).await;
    let (alice, bob) = (env.key(ALICE).await, env.key(BOB).await);
    let carol = env.key(&random_owner()).await;
    let required = offer(&env, &alice).await;
    let payer = PrivateKeySigner::random();
    env.facilitator.next_verify(VerifyMode::Invalid(
        "invalid_exact_evm_payload_signature".into(),
    ));
    let refused_payment = pay(&payer, &required, 2);
    let refused = send(&env, &alice, &refused_payment).await;
    assert_eq!(refused.status, 402, "{}", refused.body);
    let chain = env.facilitator.chain();
    let trips = chain.round_trips();
    let another_payer = pay(&PrivateKeySigner::random(), &required, 2);
    refused_by(&send(&env, &alice, &another_payer).await, "paid-refused");
    let same_payer = pay(&payer, &required, 2);
    refused_by(&send(&env, &bob, &same_payer).await, "paid-refused");
    assert_eq!(chain.round_trips(), trips, "the chain was asked");
    for payment in [&another_payer, &same_payer] {
        let (payer, nonce) = payer_and_nonce(payment);
        let order = env.store.order(&ledger_key(&payer, &nonce)).await.unwrap();
        assert_eq!(order, None);
    }
    let others = pay(&PrivateKeySigner::random(), &required, 2);
    assert_eq!(send(&env, &carol, &others).await.status, 201);
    // The refused order lapses a week after its window closed.
    let (payer_hex, nonce) = payer_and_nonce(&refused_payment);
    let key = ledger_key(&payer_hex, &nonce);
    let order = env
        .store
        .order(&key)
        .await
        .unwrap()
        .expect("the refused order");
    assert_eq!(order.state, domain::store::payments::OrderState::Rejected);
    let expires = expires_epoch(&env, &key)
        .await
        .expect("a TTL on the refused order");
    let week = domain::billing::order::ledger::UNPAID_KEPT_SECONDS;
    assert_eq!(expires, order.valid_before as i64 + week);
    // After the cooldown, the owner's payment from another payer buys.
    env.clock.advance(Duration::from_secs(601));
    let again = pay(&PrivateKeySigner::random(), &offer(&env, &alice).await, 2);
    let res = send(&env, &alice, &again).await;
    assert_eq!(res.status, 201, "{}", res.body);
}

/// The table's TTL attribute of the order item at `key`, if any.
async fn expires_epoch(env: &TestEnv, key: &domain::x402::PaymentKey) -> Option<i64> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let item = env
        .store
        .client()
        .get_item()
        .table_name(env.store.table())
        .key("pk", AttributeValue::S(format!("PAYMENT#{key}")))
        .key("sk", AttributeValue::S("PAYMENT".into()))
        .send()
        .await
        .unwrap()
        .item?;
    item.get(domain::store::schema::TTL_ATTRIBUTE)?
        .as_n()
        .ok()?
        .parse()
        .ok()
}

/// One payer's paid requests in flight are capped as an owner's are
/// (`MAX_PAID_IN_FLIGHT_PER_OWNER`), whatever owners it pays for: its fourth payment at once, for
/// a fourth owner, is answered 429 `paid` before anything is claimed, and buys once a slot is
/// free.
#[tokio::test]
async fn a_payer_holds_at_most_its_cap_of_paid_requests_in_flight_for_any_owners() {
    let env = TestEnv::new().await;
    let mut keys = Vec::new();
    for _ in 0..4 {
        keys.push(env.key(&random_owner()).await);
    }
    let required = offer(&env, &keys[0]).await;
    let payer = PrivateKeySigner::random();
    let payments: Vec<_> = (0..4).map(|_| pay(&payer, &required, 2)).collect();
    for _ in 0..3 {
        env.facilitator
            .next_settle(Mode::Stall(Duration::from_millis(700)));
    }
    let env = &env;
    let later = |key: String, payment| async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        send(env, &key, payment).await
    };
    let (a, b, c, d) = tokio::join!(
        send(env, &keys[0], &payments[0]),
        send(env, &keys[1], &payments[1]),
        send(env, &keys[2], &payments[2]),
        later(keys[3].clone(), &payments[3]),
    );
    assert_eq!(
        [a.status, b.status, c.status, d.status],
        [201, 201, 201, 429]
    );
    refused_by(&d, "paid");
    assert_eq!(env.facilitator.settles(), 3);
    let again = send(env, &keys[3], &payments[3]).await;
    assert_eq!(again.status, 201, "{}", again.body);
}

/// A node that does not answer in time costs a reconciler pass one timeout, and never a lease
/// step: the leases due are stepped first (two servers whose paid time ended are powered off on
/// time), and the following of transfers stops at the node's first timeout; the transfers not
/// read are read by the next pass, once the node answers.
#[tokio::test]
async fn lease_steps_are_taken_on_time_beside_a_node_that_times_out() {
    const PERIOD: u64 = 3600;
    let env = TestEnv::with(Options {
        period_seconds: PERIOD,
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    crate::paid_time::paid_server(&env, &key, "slow-node-1").await;
    crate::paid_time::paid_server(&env, &key, "slow-node-2").await;
    // RPC_TIMEOUT_SECONDS is 1 here: every read of the node times out.
    env.facilitator
        .chain()
        .set_stall(Duration::from_millis(1_500));
    let stalled = env.pass_after(PERIOD + 1).await;
    assert_eq!(stalled.leases.expired, 2, "{stalled:?}");
    assert!(stalled.finality.node_timed_out, "{stalled:?}");
    assert_eq!(stalled.finality.followed, 1, "{stalled:?}");
    env.facilitator.chain().set_stall(Duration::ZERO);
    let answered = env.pass_after(1).await;
    assert_eq!(
        (answered.finality.followed, answered.finality.finalized),
        (2, 2),
        "{answered:?}"
    );
}

/// A paid transfer the chain has not called final an hour after its order is reported
/// (`TransfersNotFinal`, alarmed): here a node that lags three hours shows no transfer at all,
/// so the following goes on and on; a prompt node finalizes it.
#[tokio::test]
async fn a_transfer_still_not_final_after_an_hour_is_reported() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    assert_eq!(send(&env, &key, &payment).await.status, 201);
    env.facilitator.set_chain_lag(Duration::from_secs(3 * 3600));
    let early = env
        .pass_after(domain::billing::finality::FOLLOW_SECS as u64)
        .await;
    assert_eq!((early.finality.followed, early.finality.not_final), (1, 0));
    let late = env.pass_after(3_600).await;
    assert_eq!(
        (late.finality.followed, late.finality.not_final),
        (1, 1),
        "{late:?}"
    );
    env.facilitator.set_chain_lag(Duration::ZERO);
    let prompt = env
        .pass_after(domain::billing::finality::FOLLOW_MAX_SECS as u64)
        .await;
    assert_eq!(prompt.finality.finalized, 1, "{prompt:?}");
}

/// A transfer is final only in the chain's own block: a backend that serves its receipt from a
/// fork it has not left names another block hash at that height, and the transfer stays
/// followed, never taken for final, until the chain's own receipt shows.
#[tokio::test]
async fn a_receipt_from_another_fork_is_never_final() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    assert_eq!(send(&env, &key, &payment).await.status, 201);
    let chain = env.facilitator.chain();
    chain.set_forked_receipts(true);
    // Well past the `finalized` block's reach (64 blocks of 2 s).
    let forked = env.pass_after(600).await;
    assert_eq!(
        (forked.finality.followed, forked.finality.finalized),
        (1, 0),
        "{forked:?}"
    );
    chain.set_forked_receipts(false);
    let own = env
        .pass_after(domain::billing::finality::FOLLOW_MAX_SECS as u64)
        .await;
    assert_eq!(own.finality.finalized, 1, "{own:?}");
}
