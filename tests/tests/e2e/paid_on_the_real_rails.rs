//! The money paths on the real rails (anvil with Circle's FiatTokenV2_2, x402's own
//! facilitator): a paid server in both protocol versions, its replay, a renewal, and a nonce the
//! payer spends elsewhere — each with where the USDC ended, read from the token itself.

use alloy_primitives::{Address, B256};
use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{ALICE, Options, PROJECT, TestEnv, TestResponse, b64json, owner, pay};
use crate::rails::{OwnRails, Proxy, Rails};

const PLAN: &str = "B1-1-1gb-20s-shared";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body(hostname: &str) -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname})
}

/// An environment on the real rails, paying a treasury of its own (the rails are shared by the
/// tests that run at once): the environment, the rails and the treasury.
async fn on_rails() -> (TestEnv, Rails, Address) {
    let treasury = PrivateKeySigner::random().address();
    let env = TestEnv::with(Options {
        real_rails: true,
        vars: vec![("X402_PAY_TO", format!("{treasury:#x}"))],
        ..Options::default()
    })
    .await;
    (env, Rails::from_env(), treasury)
}

/// The amount a 402 asks for, USDC atomic units.
fn price(offer: &TestResponse) -> u128 {
    let required = b64json(offer.header("payment-required").unwrap());
    required["accepts"][0]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The nonce of a payment header.
fn nonce_of(payment: &(&str, String)) -> B256 {
    b64json(&payment.1)["payload"]["authorization"]["nonce"]
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
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    for version in [1u8, 2] {
        let hostname = format!("rails-v{version}");
        let (amount, payer, payment) =
            funded_payment(&env, &rails, &key, (&path(), body(&hostname)), version).await;
        let before = rails.balance(treasury).await;
        let res = send(&env, &key, &payment, &hostname).await;
        assert_eq!(res.status, 201, "v{version}: {}", res.body);
        let response_header = if version == 2 {
            "payment-response"
        } else {
            "x-payment-response"
        };
        let settlement = b64json(res.header(response_header).unwrap());
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
        assert_eq!(rails.balance(treasury).await - before, amount);
        assert_eq!(rails.balance(payer.address()).await, 0);
        let replay = send(&env, &key, &payment, &hostname).await;
        assert_eq!(replay.status, 201, "{}", replay.body);
        assert_eq!(replay.json()["id"], res.json()["id"]);
        assert_eq!(
            rails.balance(treasury).await - before,
            amount,
            "charged once"
        );
    }
    assert_eq!(env.sim.server_count(), 2);
}

/// A renewal paid on the real rails extends the lease and moves its price to the treasury.
#[tokio::test]
async fn a_renewal_is_paid_on_the_real_rails() {
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    let (_, _, payment) = server_payment(&env, &rails, &key, "rails-renewed").await;
    let res = send(&env, &key, &payment, "rails-renewed").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json()["id"].as_u64().unwrap();
    // Delivered (deployed, SSH answered): no longer on its first deployment, so renewable.
    env.pass_after(1).await;
    let renewal = format!("/api/cloud/servers/{server}/renewals");
    let (amount, _, payment) =
        funded_payment(&env, &rails, &key, (&renewal, json!({"periods": 1})), 2).await;
    let before = rails.balance(treasury).await;
    let res = env
        .req("POST", &renewal)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(rails.balance(treasury).await - before, amount);
}

/// A resize paid on the real rails (anvil's USDC, x402's own facilitator) moves the price to the
/// treasury once and the server to the bigger plan, its lease unchanged.
#[tokio::test]
async fn a_resize_is_paid_on_the_real_rails() {
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    let (_, _, payment) = server_payment(&env, &rails, &key, "rails-resized").await;
    let res = send(&env, &key, &payment, "rails-resized").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json();
    let id = server["id"].as_u64().unwrap();
    env.pass_after(1).await;
    let record = env.store.sandbox(server["sandboxId"].as_str().unwrap());
    let lease = record.await.unwrap().unwrap().lease.unwrap();
    let before = rails.balance(treasury).await;
    let (amount, _, payment, res) = paid_resize(&env, &rails, &key, id).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let resized = res.json();
    assert_eq!(resized["amount"], amount.to_string());
    assert_eq!(
        resized["paidUntil"],
        serde_json::to_value(lease.paid_until).unwrap()
    );
    assert_eq!(rails.balance(treasury).await - before, amount);
    assert_eq!(env.sim.plan_of(id).as_deref(), Some(BIGGER));
    // A replay moves nothing more.
    let again = send_resize(&env, &key, id, &payment).await;
    assert_eq!((again.status, again.json()), (201, resized));
    assert_eq!(rails.balance(treasury).await - before, amount);
}

/// The payer signs, then spends the same nonce on a transfer to himself before the service
/// sees it: the chain says so before anything is recorded, so the answer is 402
/// (`invalid_exact_evm_nonce_already_used`), no order is written and nothing is made or owed;
/// the treasury's balance is unchanged.
#[tokio::test]
async fn a_nonce_spent_elsewhere_first_buys_nothing_on_the_real_rails() {
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    let (amount, payer, payment) = server_payment(&env, &rails, &key, "rails-spent").await;
    let before = rails.balance(treasury).await;
    rails
        .spend_elsewhere(&payer, nonce_of(&payment), payer.address(), 1)
        .await;
    let res = send(&env, &key, &payment, "rails-spent").await;
    assert_eq!(res.status, 402, "{}", res.body);
    assert_eq!(res.json()["error"], "invalid_exact_evm_nonce_already_used");
    assert!(res.header("payment-response").is_none());
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items.len(), 0);
    assert_eq!(env.sim.server_count(), 0);
    assert_eq!(rails.balance(treasury).await, before);
    // Its 1-unit transfer went to himself: he keeps it all.
    assert_eq!(rails.balance(payer.address()).await, amount);
}

/// The payment's own transfer reaches the chain before the service sees the payment (the payer
/// sent it himself, or someone holding the payload did): the nonce reads as used and the
/// facilitator refuses it, but the treasury has the price — so the order is paid on that
/// transfer, looked up on chain, and the server is made (201, its payment response naming that
/// transaction); nothing is charged twice. Without the look-up it was 402, "already used".
#[tokio::test]
async fn a_payment_its_payer_sent_himself_buys_the_server_on_the_real_rails() {
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    let (amount, payer, payment) = server_payment(&env, &rails, &key, "rails-own").await;
    let transaction = rails.submit(&b64json(&payment.1)).await;
    assert_eq!(rails.balance(treasury).await, amount);
    let res = send(&env, &key, &payment, "rails-own").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let settlement = b64json(res.header("payment-response").unwrap());
    assert_eq!(settlement["transaction"], transaction.as_str());
    assert_eq!(env.sim.server_count(), 1);
    let replay = send(&env, &key, &payment, "rails-own").await;
    assert_eq!(replay.json()["id"], res.json()["id"], "{}", replay.body);
    assert_eq!(rails.balance(treasury).await, amount, "charged once");
    assert_eq!(rails.balance(payer.address()).await, 0);
}

/// An environment whose facilitator and node are reached through `proxy` (in front of the
/// shared rails or a test's own), paying a treasury of its own: the environment and the
/// treasury.
async fn behind(proxy: &Proxy) -> (TestEnv, Address) {
    let treasury = PrivateKeySigner::random().address();
    let env = TestEnv::with(Options {
        real_rails: true,
        vars: vec![
            ("FACILITATOR_URL", format!("{}/facilitator", proxy.url)),
            ("RPC_URL", format!("{}/rpc", proxy.url)),
            ("X402_PAY_TO", format!("{treasury:#x}")),
        ],
        ..Options::default()
    })
    .await;
    (env, treasury)
}

/// Asks `path` with `body` for its 402, funds a fresh payer with the price and signs the
/// payment in protocol `version`: the price (USDC atomic units), the payer and the header.
/// The plan the resizes of these tests move a server of [`server_payment`]'s plan to.
const BIGGER: &str = "B1-2-2gb-40s-shared";

/// `server` resized to [`BIGGER`] by `key`, paid by a payer funded with its price: (amount,
/// payer, payment, the answer).
async fn paid_resize(
    env: &TestEnv,
    rails: &Rails,
    key: &str,
    server: u64,
) -> (u128, PrivateKeySigner, (&'static str, String), TestResponse) {
    let path = format!("/api/cloud/servers/{server}/resizes");
    let body = json!({"plan": BIGGER});
    let (amount, payer, payment) = funded_payment(env, rails, key, (&path, body), 2).await;
    let res = send_resize(env, key, server, &payment).await;
    (amount, payer, payment, res)
}

/// `server`'s resize to [`BIGGER`] sent by `key` with `payment`.
async fn send_resize(
    env: &TestEnv,
    key: &str,
    server: u64,
    payment: &(&'static str, String),
) -> TestResponse {
    env.req("POST", &format!("/api/cloud/servers/{server}/resizes"))
        .key(key)
        .header(payment.0, &payment.1)
        .json(json!({"plan": BIGGER}))
        .send()
        .await
}

async fn funded_payment(
    env: &TestEnv,
    rails: &Rails,
    key: &str,
    (path, body): (&str, Value),
    version: u8,
) -> (u128, PrivateKeySigner, (&'static str, String)) {
    let offer = env.req("POST", path).key(key).json(body).send().await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let amount = price(&offer);
    let payer = PrivateKeySigner::random();
    rails.fund(payer.address(), amount).await;
    let payment = pay(&payer, offer.header("payment-required").unwrap(), version);
    (amount, payer, payment)
}

/// [`funded_payment`] of ALICE's provisioning of `hostname`, in v2.
async fn server_payment(
    env: &TestEnv,
    rails: &Rails,
    key: &str,
    hostname: &str,
) -> (u128, PrivateKeySigner, (&'static str, String)) {
    funded_payment(env, rails, key, (&path(), body(hostname)), 2).await
}

/// The answer while the order waits for the chain: 202, no payment response.
#[track_caller]
fn not_settled_yet(res: &TestResponse) {
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(res.header("payment-response").is_none(), "{}", res.body);
}

/// A reorganisation takes the settled transfer out of the chain between the facilitator's
/// `success` and the service's read of it (`anvil_reorg`): the order is not paid — 202, nothing
/// made — until the transfer is back, then one server for one charge. Or the payer's
/// `cancelAuthorization` is mined in its place: refused before any server is made, nothing
/// charged. On rails of its own: a reorg takes every test's recent blocks.
#[tokio::test]
async fn a_reorg_unpays_the_order_until_the_transfer_is_back() {
    let own = OwnRails::start().await;
    let rails = own.rails.clone();
    for cancel in [false, true] {
        let proxy = Proxy::start(&rails).await;
        let (env, treasury) = behind(&proxy).await;
        let key = env.key(ALICE).await;
        let (amount, payer, payment) = server_payment(&env, &rails, &key, "reorged").await;
        let before = rails.balance(treasury).await;
        proxy
            .faults
            .reorg_after_settle
            .store(true, std::sync::atomic::Ordering::SeqCst);
        not_settled_yet(&send(&env, &key, &payment, "reorged").await);
        assert_eq!(env.sim.server_count(), 0, "cancel {cancel}");
        proxy
            .faults
            .reorg_after_settle
            .store(false, std::sync::atomic::Ordering::SeqCst);
        if cancel {
            rails.cancel(&payer, nonce_of(&payment)).await;
            let res = send(&env, &key, &payment, "reorged").await;
            assert_eq!(res.status, 402, "{}", res.body);
            assert_eq!(env.sim.server_count(), 0);
            assert_eq!(rails.balance(treasury).await, before);
            assert_eq!(rails.balance(payer.address()).await, amount);
        } else {
            let res = send(&env, &key, &payment, "reorged").await;
            assert_eq!(res.status, 201, "{}", res.body);
            assert_eq!(env.sim.server_count(), 1);
            assert_eq!(
                rails.balance(treasury).await - before,
                amount,
                "charged once"
            );
        }
    }
}

/// The state of the key's latest payment (`GET /api/payments`).
async fn payment_state(env: &TestEnv, key: &str) -> String {
    let res = env.req("GET", "/api/payments").key(key).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["items"][0]["state"].as_str().unwrap().to_owned()
}

/// What the latest payment of [`ALICE`] holds of its key's spend today, USDC atomic units (as
/// the key's counters have it, on the day and month the payment reserved it in).
async fn spent_today(env: &TestEnv) -> u128 {
    let page = env.store.orders_of(&owner(ALICE), 1, None).await.unwrap();
    let order = env.store.order(&page.items[0].id).await.unwrap().unwrap();
    let hold = order.spend.expect("a key with a policy reserves its spend");
    let usages = env
        .store
        .usages(&[&hold.key_id], &hold.day, &hold.month)
        .await
        .unwrap();
    usages[&hold.key_id].spent_today
}

/// Paid means final (issue 46): after its server was made, the transfer is reorganised away.
/// When the payer's `cancelAuthorization` is mined in its place, the next reconciler pass
/// reverses the payment — `reversed`, with its `payment.reversed` in the owner's feed — and takes
/// the server's paid time back: powered off in the same pass, the treasury never paid. When the
/// same transfer is mined again instead, nothing changes, and once the chain's finalized block
/// passes it the transfer is followed no more. On rails of their own (a reorg takes every
/// test's recent blocks), finalizing two blocks behind the head.
#[tokio::test]
async fn a_transfer_gone_before_it_is_final_reverses_its_payment_and_one_mined_again_does_not() {
    let own = OwnRails::with(&["--slots-in-an-epoch", "1"]).await;
    let rails = own.rails.clone();
    let follow = domain::billing::finality::FOLLOW_SECS as u64;
    for cancel in [true, false] {
        let proxy = Proxy::start(&rails).await;
        let (env, treasury) = behind(&proxy).await;
        // A key with a spend limit: what a payment reserves of it is given back on reversal.
        let policy = domain::policy::Policy {
            daily_spend_limit: Some(domain::money::Usdc::from_atomic(1_000_000_000)),
            ..domain::policy::Policy::default()
        };
        let key = env.key_with(ALICE, Some(policy)).await;
        let hostname = if cancel { "reversed" } else { "mined-again" };
        let (amount, payer, payment) = server_payment(&env, &rails, &key, hostname).await;
        let res = send(&env, &key, &payment, hostname).await;
        assert_eq!(res.status, 201, "{}", res.body);
        let server = res.json()["id"].as_u64().unwrap();
        let sandbox = res.json()["sandboxId"].as_str().unwrap().to_owned();
        let settlement = b64json(res.header("payment-response").unwrap());
        let transaction = settlement["transaction"].as_str().unwrap().to_owned();
        let raw = rails
            .rpc("eth_getRawTransactionByHash", json!([transaction]))
            .await;
        rails.reorg_out(&transaction).await;
        if cancel {
            rails.cancel(&payer, nonce_of(&payment)).await;
            let report = env.pass_after(follow).await;
            assert_eq!(report.finality.reversed, 1, "{report:?}");
            assert_eq!(payment_state(&env, &key).await, "reversed");
            env.feed().await;
            let events = env
                .req("GET", "/api/events")
                .key(&key)
                .query("types=payment.reversed")
                .send()
                .await;
            assert_eq!(events.json()["items"].as_array().unwrap().len(), 1);
            assert_eq!(report.leases.expired, 1, "{report:?}");
            assert_eq!(env.sim.powered_on(server), Some(false));
            // Its paid time taken back: powered off now, deleted when the grace ends.
            let record = env.store.sandbox(&sandbox).await.unwrap().unwrap();
            let lease = record.lease.unwrap();
            assert!(lease.paid_until.unix() <= env.clock.now(), "{lease:?}");
            assert_eq!(lease.paid_seconds, 0, "no paid time delivered: {lease:?}");
            assert_eq!(
                rails.balance(treasury).await,
                0,
                "the treasury was never paid"
            );
            assert_eq!(rails.balance(payer.address()).await, amount);
            assert_eq!(spent_today(&env).await, 0, "the spend given back");
            // Reversed once: a later pass follows nothing.
            assert_eq!(env.pass_after(follow).await.finality.followed, 0);
        } else {
            rails.rpc("eth_sendRawTransaction", json!([raw])).await;
            let block = rails.mined(&transaction).await;
            let report = env.pass_after(follow).await;
            assert_eq!(
                (report.finality.followed, report.finality.reversed),
                (1, 0),
                "{report:?}"
            );
            assert_eq!(payment_state(&env, &key).await, "provisioned");
            assert_eq!(env.sim.powered_on(server), Some(true));
            assert_eq!(rails.balance(treasury).await, amount);
            assert_eq!(spent_today(&env).await, amount, "still spent");
            rails.finalized_past(block).await;
            let report = env.pass_after(follow).await;
            assert_eq!(report.finality.finalized, 1, "{report:?}");
            assert_eq!(env.pass_after(follow).await.finality.followed, 0);
            assert_eq!(payment_state(&env, &key).await, "provisioned");
        }
    }
}

/// A resize whose transfer is reorganised away and cancelled is reversed: the server keeps its
/// bigger plan (the provider never shrinks it), so its lease gives back the paid time the amount
/// bought of that plan — half a period here, the difference of a period being half the bigger
/// plan's. On rails of their own.
#[tokio::test]
async fn a_reversed_resize_takes_back_the_paid_time_its_amount_bought() {
    let own = OwnRails::start().await;
    let rails = own.rails.clone();
    let proxy = Proxy::start(&rails).await;
    let (env, treasury) = behind(&proxy).await;
    let key = env.key(ALICE).await;
    let (paid, _, payment) = server_payment(&env, &rails, &key, "reversed-resize").await;
    let res = send(&env, &key, &payment, "reversed-resize").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let (server, sandbox) = (
        res.json()["id"].as_u64().unwrap(),
        res.json()["sandboxId"].clone(),
    );
    let sandbox = sandbox.as_str().unwrap().to_owned();
    env.pass_after(1).await;
    let before = env
        .store
        .sandbox(&sandbox)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap();
    let (amount, payer, payment, res) = paid_resize(&env, &rails, &key, server).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let settlement = b64json(res.header("payment-response").unwrap());
    rails
        .reorg_out(settlement["transaction"].as_str().unwrap())
        .await;
    rails.cancel(&payer, nonce_of(&payment)).await;
    let follow = domain::billing::finality::FOLLOW_SECS as u64;
    let report = env.pass_after(follow).await;
    assert_eq!(report.finality.reversed, 1, "{report:?}");
    assert_eq!(payment_state(&env, &key).await, "reversed");
    let record = env.store.sandbox(&sandbox).await.unwrap().unwrap();
    let lease = record.lease.unwrap();
    let half = 365 * 3600;
    assert_eq!(lease.paid_seconds, before.paid_seconds - half, "{lease:?}");
    assert_eq!(lease.paid_until.unix(), before.paid_until.unix() - half);
    assert_eq!(record.plan.as_deref(), Some(BIGGER));
    assert_eq!(env.sim.powered_on(server), Some(true), "paid time is left");
    assert_eq!(
        rails.balance(treasury).await,
        paid,
        "the resize was never paid"
    );
    assert_eq!(rails.balance(payer.address()).await, amount);
}

/// A payment whose credit a cheaper request redeemed — a server, and the rest a remainder
/// credit — is reversed whole when its transfer is gone: the remainder too, which no request
/// redeems any more, and the server's paid time. On rails of their own.
#[tokio::test]
async fn a_reversed_payment_takes_its_remainder_with_it() {
    let own = OwnRails::start().await;
    let rails = own.rails.clone();
    let proxy = Proxy::start(&rails).await;
    let (env, _) = behind(&proxy).await;
    let key = env.key(ALICE).await;
    let larger = |hostname: &str| json!({"plan": "B1-2-2gb-40s-shared", "region": "LT-Siauliai", "hostname": hostname});
    let (_, payer, payment) =
        funded_payment(&env, &rails, &key, (&path(), larger("larger")), 2).await;
    env.sim
        .inject(e2e::sim::Fault::status("/projects/", 400).on(axum::http::Method::POST));
    let refused = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(larger("larger"))
        .send()
        .await;
    let credit = refused.problem(409)["payment"].clone();
    assert_eq!(credit["state"], "credited");
    let transaction = b64json(refused.header("payment-response").unwrap())["transaction"]
        .as_str()
        .unwrap()
        .to_owned();
    let redeemed = send(&env, &key, &payment, "smaller").await;
    assert_eq!(redeemed.status, 201, "{}", redeemed.body);
    let id = domain::x402::PaymentKey::parse(credit["id"].as_str().unwrap()).unwrap();
    let remainder = env.store.order(&id.remainder(1)).await.unwrap().unwrap();
    assert_eq!(
        remainder.state,
        domain::store::payments::OrderState::Credited
    );
    rails.reorg_out(&transaction).await;
    rails.cancel(&payer, nonce_of(&payment)).await;
    let report = env
        .pass_after(domain::billing::finality::FOLLOW_SECS as u64)
        .await;
    assert_eq!(report.finality.reversed, 1, "{report:?}");
    for key in [id.clone(), id.remainder(1)] {
        let order = env.store.order(&key).await.unwrap().unwrap();
        assert_eq!(
            order.state,
            domain::store::payments::OrderState::Reversed,
            "{key}"
        );
    }
    assert_eq!(report.leases.expired, 1, "{report:?}");
    // The remainder buys nothing any more.
    let again = send(&env, &key, &payment, "again").await;
    assert_ne!(again.status, 201, "{}", again.body);
    assert_eq!(env.sim.server_count(), 1);
}

/// A node that serves a head 30 blocks (60 s) old: the transfer the facilitator settled does
/// not show, so the order waits (202, nothing made, never expired), and completes once the
/// node catches up — one server, one charge.
#[tokio::test]
async fn a_lagging_node_only_delays() {
    let rails = Rails::from_env();
    let proxy = Proxy::start(&rails).await;
    let (env, treasury) = behind(&proxy).await;
    let key = env.key(ALICE).await;
    let (amount, _, payment) = server_payment(&env, &rails, &key, "lagged").await;
    let before = rails.balance(treasury).await;
    proxy
        .faults
        .lag_blocks
        .store(30, std::sync::atomic::Ordering::SeqCst);
    not_settled_yet(&send(&env, &key, &payment, "lagged").await);
    not_settled_yet(&send(&env, &key, &payment, "lagged").await);
    assert_eq!(env.sim.server_count(), 0);
    proxy
        .faults
        .lag_blocks
        .store(0, std::sync::atomic::Ordering::SeqCst);
    let res = send(&env, &key, &payment, "lagged").await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(env.sim.server_count(), 1);
    assert_eq!(rails.balance(treasury).await - before, amount);
}

/// The provider refuses the server after the payment settled on the real rails: the price is in
/// the treasury once, the order is a credit, and a corrected request with the same payment
/// redeems it — one server, no second transfer.
#[tokio::test]
async fn a_credit_on_the_real_rails_is_redeemed_without_a_second_charge() {
    let (env, rails, treasury) = on_rails().await;
    let key = env.key(ALICE).await;
    let (amount, _, payment) = server_payment(&env, &rails, &key, "refused").await;
    let before = rails.balance(treasury).await;
    env.sim
        .inject(e2e::sim::Fault::status("/projects/", 400).on(axum::http::Method::POST));
    let refused = send(&env, &key, &payment, "refused").await;
    assert_eq!(refused.problem(409)["payment"]["state"], "credited");
    assert!(refused.header("payment-response").is_some());
    assert_eq!(rails.balance(treasury).await - before, amount);
    let redeemed = send(&env, &key, &payment, "corrected").await;
    assert_eq!(redeemed.status, 201, "{}", redeemed.body);
    assert_eq!(redeemed.json()["hostname"], "corrected");
    assert_eq!(env.sim.server_count(), 1);
    assert_eq!(
        rails.balance(treasury).await - before,
        amount,
        "charged once"
    );
}
