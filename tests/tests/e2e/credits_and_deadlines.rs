//! Credits, replays at any time, authorizations that expire unsettled, the invocation's
//! deadline, and the caller's payments (the durable-orders issue, points 1, 5, 6 and 7).

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::checkpoint::Step;
use domain::store::payments::OrderState;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{
    ALICE, BOB, Options, PROJECT, TestEnv, TestResponse, b64json, owner, pay, pay_at,
};

const PLAN: &str = "B1-1-1gb-20s-shared";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

/// A request for the 2 GB plan (twice the 1 GB plan's price).
fn pricier(hostname: &str) -> Value {
    json!({"plan": "B1-2-2gb-40s-shared", "region": "LT-Siauliai", "hostname": hostname})
}

fn body(hostname: &str) -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname})
}

async fn offer(env: &TestEnv, key: &str) -> String {
    let res = env
        .req("POST", &path())
        .key(key)
        .json(body("a"))
        .send()
        .await;
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

#[tokio::test]
async fn a_credit_is_redeemed_once_by_a_corrected_request_of_its_owner() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    // The provider refuses after settlement: a credit, and the answer says so.
    let first = send(&env, &key, &payment, body("first")).await;
    let doc = first.problem(409);
    assert!(first.header("payment-response").is_some());
    assert_eq!(doc["payment"]["state"], "credited");
    assert_eq!(doc["payment"]["credit"]["redeemable"], true);
    assert_eq!(doc["payment"]["credit"]["amount"], "18460240");
    let credited_sandbox = doc["payment"]["sandboxId"].as_str().unwrap().to_owned();
    assert_eq!(
        env.sandbox(&key, &credited_sandbox).await["status"],
        "credited"
    );
    // The same request again: the same credit.
    let again = send(&env, &key, &payment, body("first")).await;
    assert_eq!(again.problem(409)["payment"]["state"], "credited");
    // Its owner's payments show it.
    let listed = env.req("GET", "/api/payments").key(&key).send().await;
    assert_eq!(listed.json()["items"][0]["credit"]["redeemable"], true);
    // A request that costs more is refused; the credit stays.
    let pricier = json!({"plan": "B1-2-2gb-40s-shared", "region": "LT-Siauliai"});
    let doc = send(&env, &key, &payment, pricier).await.problem(409);
    assert!(doc["detail"].as_str().unwrap().contains("costs"), "{doc}");
    // Another owner cannot redeem it.
    let bob = env.key(BOB).await;
    send(&env, &bob, &payment, body("second"))
        .await
        .problem(409);
    // The corrected request redeems it: one server, no second charge.
    let redeemed = send(&env, &key, &payment, body("second")).await;
    assert_eq!(redeemed.status, 201, "{}", redeemed.body);
    assert!(redeemed.header("payment-response").is_some());
    let server = redeemed.json();
    assert_eq!(server["hostname"], "second");
    // Replayed, the corrected request gets the same server; the first one is no longer its.
    let replay = send(&env, &key, &payment, body("second")).await;
    assert_eq!(replay.json()["id"], server["id"]);
    send(&env, &key, &payment, body("first")).await.problem(409);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
    assert_eq!(
        env.sandbox(&key, &credited_sandbox).await["status"],
        "redeemed"
    );
    let new_sandbox = env
        .sandbox(&key, server["sandboxId"].as_str().unwrap())
        .await;
    assert_eq!(new_sandbox["serverId"], server["id"]);
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items.len(), 1);
    assert_eq!(orders.items[0].state, OrderState::Provisioned);
}

#[tokio::test]
async fn a_cheaper_redemption_keeps_the_remainder_as_a_credit_the_same_payment_redeems() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // A credit for the 2 GB plan (twice the 1 GB plan's price).
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(pricier("big"))
        .send()
        .await;
    let required = res.header("payment-required").unwrap().to_owned();
    let payment = pay(&PrivateKeySigner::random(), &required, 2);
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &payment, pricier("big"))
        .await
        .problem(409);
    assert_eq!(doc["payment"]["credit"]["amount"], "36920480");
    let id = domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    // Redeemed for the 1 GB plan: what is left stays a credit of its own.
    let first = send(&env, &key, &payment, body("one")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let order = env.store.order(&id).await.unwrap().unwrap();
    assert_eq!(order.amount, "18460240");
    assert_eq!(order.remainder.map(String::from), Some(format!("{id}#1")));
    let listed = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    let rest = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == format!("{id}#1"))
        .unwrap_or_else(|| panic!("no remainder in {listed}"))
        .clone();
    assert_eq!(rest["state"], "credited");
    assert_eq!(rest["credit"]["amount"], "18460240");
    assert_eq!(rest["credit"]["redeemable"], true);
    // The same payment on a request costing more than what is left: refused, nothing moves.
    let doc = send(&env, &key, &payment, pricier("again"))
        .await
        .problem(409);
    assert!(doc["detail"].as_str().unwrap().contains("costs"), "{doc}");
    // On another request that fits, it redeems the remainder: a second server.
    let second = send(&env, &key, &payment, body("two")).await;
    assert_eq!(second.status, 201, "{}", second.body);
    assert_ne!(second.json()["id"], first.json()["id"]);
    // Each request replays its own server; a fourth finds nothing left.
    let replay = send(&env, &key, &payment, body("one")).await;
    assert_eq!(replay.json()["id"], first.json()["id"]);
    let replay = send(&env, &key, &payment, body("two")).await;
    assert_eq!(replay.json()["id"], second.json()["id"]);
    let doc = send(&env, &key, &payment, body("three")).await.problem(409);
    assert!(
        doc["detail"].as_str().unwrap().contains("already used"),
        "{doc}"
    );
    // One charge, two servers; the amounts of the payment's orders add up to it.
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 2));
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    let total: u128 = orders
        .items
        .iter()
        .map(|o| o.amount.parse::<u128>().unwrap())
        .sum();
    assert_eq!(total, 36920480);
    assert!(
        orders
            .items
            .iter()
            .all(|o| o.state == OrderState::Provisioned)
    );
}

/// `credit`'s stored item copied as the remainders `#1`..`#count` of its payment, each linked
/// to the next (the root to `#1`): a payment split as far as it goes, without paying for each
/// split.
async fn split(env: &TestEnv, credit: &domain::x402::PaymentKey, count: u32) {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    use domain::store::schema;
    let (client, table) = (env.store.client(), env.store.table());
    let key = |id: &str| {
        [
            (schema::PK.to_owned(), A::S(format!("PAYMENT#{id}"))),
            (schema::SK.to_owned(), A::S("PAYMENT".into())),
        ]
    };
    let root = client
        .get_item()
        .table_name(table)
        .set_key(Some(key(credit.as_str()).into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    for n in 0..=count {
        let id = if n == 0 {
            credit.clone()
        } else {
            credit.remainder(n)
        };
        let mut item = root.clone();
        item.extend(key(id.as_str()));
        for (index, prefix) in [(schema::GSI1_SK, "PAYMENT#"), (schema::GSI2_SK, "PAYMENT#")] {
            let at = item[index]
                .as_s()
                .unwrap()
                .split('#')
                .nth(1)
                .unwrap()
                .to_owned();
            item.insert(index.into(), A::S(format!("{prefix}{at}#{id}")));
        }
        if n > 0 {
            item.insert("id".into(), A::S(id.to_string()));
            item.insert("orderId".into(), A::S(format!("ord_{:032x}", n)));
            item.insert("fingerprint".into(), A::S(String::new()));
            item.insert("request".into(), A::S(String::new()));
        }
        match n < count {
            true => item.insert(
                "remainder".into(),
                A::S(credit.remainder(n + 1).to_string()),
            ),
            false => item.remove("remainder"),
        };
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_payment_split_as_far_as_it_goes_is_redeemed_only_whole() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(pricier("big"))
        .send()
        .await;
    let payment = pay(
        &PrivateKeySigner::random(),
        res.header("payment-required").unwrap(),
        2,
    );
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &payment, pricier("big"))
        .await
        .problem(409);
    let id = domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    // Its own order and 31 credits: as many as one payment is split into.
    let last = domain::billing::payments::REMAINDERS as u32 - 1;
    split(&env, &id, last).await;
    // A cheaper request would leave a 33rd, past what is read: refused, nothing moves.
    let doc = send(&env, &key, &payment, body("cheaper"))
        .await
        .problem(409);
    assert!(
        doc["detail"]
            .as_str()
            .unwrap()
            .contains("split into 32 orders"),
        "{doc}"
    );
    assert!(
        env.store
            .order(&id.remainder(last + 1))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        env.store.order(&id).await.unwrap().unwrap().state,
        OrderState::Credited
    );
    // A request costing the whole credit redeems it, and the next credit of the chain the
    // next such request.
    let whole = send(&env, &key, &payment, pricier("whole")).await;
    assert_eq!(whole.status, 201, "{}", whole.body);
    let again = send(&env, &key, &payment, pricier("again")).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_ne!(whole.json()["id"], again.json()["id"]);
    assert_eq!(env.facilitator.settles(), 1);
}

#[tokio::test]
async fn a_replay_after_the_authorization_window_still_gets_its_server() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // A client whose authorization is valid for 12 more seconds.
    let required = offer(&env, &key).await;
    let now = env.clock.now() as u64;
    let payment = pay_at(&PrivateKeySigner::random(), &required, 2, now - 108);
    let first = send(&env, &key, &payment, body("a")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    env.clock.advance(Duration::from_secs(13));
    // Past validBefore the ledger answers first: the same server, no 402.
    let replay = send(&env, &key, &payment, body("a")).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!(replay.json()["id"], first.json()["id"]);
    assert_eq!(env.facilitator.settles(), 1);
}

/// An order stopped after its claim, whose payload someone else sends on chain to the treasury
/// before it expires (the payer, or anyone holding the payload): past the window the reconciler
/// looks on chain before it expires the order, finds our transfer and provisions — never
/// "expired, nothing charged" about a payment the treasury has.
#[tokio::test]
async fn a_claim_paid_by_another_hand_is_provisioned_not_expired() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let required = offer(&env, &key).await;
    let payer = PrivateKeySigner::random();
    let payment = pay(&payer, &required, 2);
    let request = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body("a"));
    env.killed_at(Step::Claimed, request).await;
    let paid = b64json(&payment.1);
    let authorization = &paid["payload"]["authorization"];
    let value = authorization["value"].as_str().unwrap().parse().unwrap();
    let transaction = env.facilitator.chain().broadcast(
        &format!("{:#x}", payer.address()),
        authorization["nonce"].as_str().unwrap(),
        e2e::chain::Use::Transfer {
            to: authorization["to"].as_str().unwrap().to_ascii_lowercase(),
            value,
        },
        Duration::ZERO,
    );
    // Past validBefore (now + 120 s) and finality, within the order's deadline (300 s: past it,
    // the paid order would be a credit, a cold make test once saw).
    let report = env.reconcile_in(200).await;
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    assert_eq!(env.facilitator.settles(), 0, "nothing settled by us");
    let replay = send(&env, &key, &payment, body("a")).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    let settlement = b64json(replay.header("payment-response").unwrap());
    assert_eq!(settlement["transaction"], transaction.as_str());
    assert_eq!(env.sim.server_count(), 1);
}

#[tokio::test]
async fn an_authorization_never_settled_expires_without_a_charge() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    let request = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body("a"));
    env.killed_at(Step::Claimed, request).await;
    // Long after its validBefore (now + 120 s), the reconciler ends it: nothing charged.
    let report = env.reconcile_in(300).await;
    assert_eq!(report.outcomes.get("expired"), Some(&1), "{report:?}");
    let replay = send(&env, &key, &payment, body("a")).await;
    assert_eq!(replay.status, 402, "{}", replay.body);
    assert!(replay.header("payment-response").is_none());
    assert!(replay.json()["error"].as_str().unwrap().contains("expired"));
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items[0].state, OrderState::Expired);
    assert_eq!(
        env.sandbox(&key, &orders.items[0].sandbox_id).await["status"],
        "cancelled"
    );
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (0, 0));
}

#[tokio::test]
async fn too_little_time_to_settle_is_202_and_the_same_payment_completes() {
    let env = TestEnv::with(Options {
        budget_seconds: 1.0,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    let res = send(&env, &key, &payment, body("a")).await;
    // Claimed, not settled: the reconciler will settle it, so the answer never says "nothing
    // was charged" (an agent told so would sign a second payment and pay twice).
    assert_eq!(res.status, 202, "{}", res.body);
    let accepted = res.json();
    assert_eq!(accepted["payment"]["state"], "claimed", "{accepted}");
    let detail = accepted["detail"].as_str().unwrap();
    assert!(detail.contains("will still be settled"), "{detail}");
    assert!(detail.contains("never sign a new one"), "{detail}");
    assert!(res.header("payment-response").is_none());
    assert_eq!(
        (env.facilitator.verifies(), env.facilitator.settles()),
        (0, 0)
    );
    // The order was kept and its lease released: the reconciler (with time to spare) completes
    // it, and the retry the client was told to make gets the server.
    env.reconcile_in(0).await;
    let retry = send(&env, &key, &payment, body("a")).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
}

#[tokio::test]
async fn out_of_time_after_settlement_is_202_with_the_sandbox_to_poll() {
    // 6 s to answer: enough to settle (1 s timeout + margin), not for a provider call that may
    // take its 5 s timeout + margin.
    let env = TestEnv::with(Options {
        budget_seconds: 6.0,
        timeout_seconds: 5.0,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
    let res = send(&env, &key, &payment, body("a")).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(res.header("payment-response").is_some());
    let accepted = res.json();
    let id = accepted["sandboxId"].as_str().unwrap();
    assert_eq!(
        res.header("location"),
        Some(format!("/api/sandboxes/{id}").as_str())
    );
    assert_eq!(accepted["payment"]["state"], "settled");
    assert_eq!(accepted["payment"]["charged"], true);
    assert_eq!(env.sandbox(&key, id).await["status"], "provisioning");
    // The lease was released: the reconciler goes on at once.
    let report = env.reconcile_in(0).await;
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    let polled = env.sandbox(&key, id).await;
    assert!(polled["serverId"].is_u64(), "{polled}");
    // The provider's own status by now (the simulator deploys in seconds of the wall clock: a
    // loaded machine has seen it deployed already).
    let status = polled["status"].as_str();
    assert!(matches!(status, Some("deploying" | "deployed")), "{polled}");
    let replay = send(&env, &key, &payment, body("a")).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
}

#[tokio::test]
async fn payments_are_listed_for_their_owner_only_with_pages() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for hostname in ["one", "two"] {
        let payment = pay(&PrivateKeySigner::random(), &offer(&env, &key).await, 2);
        let res = send(&env, &key, &payment, body(hostname)).await;
        assert_eq!(res.status, 201, "{}", res.body);
    }
    let page = env
        .req("GET", "/api/payments")
        .key(&key)
        .query("limit=1")
        .send()
        .await
        .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let item = &page["items"][0];
    assert_eq!(item["state"], "provisioned");
    assert_eq!(item["amount"], "18460240");
    assert_eq!(item["asset"], "USDC");
    assert_eq!(item["network"], "eip155:84532");
    assert!(item["transaction"].as_str().unwrap().starts_with("0x"));
    assert!(item["serverId"].is_u64() && item["sandboxId"].is_string());
    assert!(item["credit"].is_null());
    let cursor = page["nextCursor"].as_str().unwrap();
    let next = env
        .req("GET", "/api/payments")
        .key(&key)
        .query(&format!("limit=1&cursor={cursor}"))
        .send()
        .await
        .json();
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert_ne!(next["items"][0]["id"], item["id"]);
    // A session of the same wallet would see them too; another owner sees none.
    let bob = env.key(BOB).await;
    let theirs = env
        .req("GET", "/api/payments")
        .key(&bob)
        .send()
        .await
        .json();
    assert_eq!(theirs["items"], json!([]));
    env.req("GET", "/api/payments")
        .key(&key)
        .query("limit=0")
        .send()
        .await
        .invalid("limit");
    env.req("GET", "/api/payments").send().await.problem(401);
}
