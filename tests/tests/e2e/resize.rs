//! Resize that keeps paid time (issue 48, point 2): a paid cloud VPS moved to a dearer VPS plan
//! in its region for the difference of the two plans over the paid time left, paid with x402 on
//! the same ledger as every order, `paidUntil` unchanged; refused before any 402 where the
//! provider cannot do it or the service will not (a downgrade); the provider's upgrade announced
//! before it is sent, sent only while the lease is the one priced, and read back after an
//! unclear answer. The faults every paid order survives run for a resize too
//! (`paid_orders_under_faults`).

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::checkpoint::Step;
use domain::store::payments::{OrderKind, OrderState};
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{
    ALICE, BOB, LEASE_SECONDS, Options, TestEnv, TestResponse, b64json, owner, pay,
};
use crate::paid_time::paid_server;

const FROM: &str = "B1-1-1gb-20s-shared";
const TO: &str = "B1-2-2gb-40s-shared";
/// One day periods: the two plans differ by 0.0218 EUR/h × 1.16 = 0.025288 USD an hour, so a
/// whole day left costs 0.606912 USD.
const DAY: u64 = 86_400;
const DAY_DIFFERENCE: u128 = 606_912;
/// A day of the bigger plan: 0.0436 × 1.16 × 24.
const DAY_OF_TO: u128 = 1_213_824;

async fn env() -> TestEnv {
    TestEnv::with(Options {
        period_seconds: DAY,
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await
}

fn path(server: u64) -> String {
    format!("/api/cloud/servers/{server}/resizes")
}

/// `POST …/resizes {"plan": plan}` by `key`, with `payment` when given.
pub(crate) async fn resize(
    env: &TestEnv,
    key: &str,
    server: u64,
    plan: &str,
    payment: Option<&(&str, String)>,
) -> TestResponse {
    let mut req = env.req("POST", &path(server)).key(key);
    if let Some((name, value)) = payment {
        req = req.header(name, value);
    }
    req.json(json!({"plan": plan})).send().await
}

/// The 402's offer for a resize of `server` to `plan`, and a payment of it from a new payer.
pub(crate) async fn resize_payment(
    env: &TestEnv,
    key: &str,
    server: u64,
    plan: &str,
) -> (Value, (&'static str, String)) {
    let offer = resize(env, key, server, plan, None).await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let header = offer.header("payment-required").unwrap().to_owned();
    let payment = pay(&PrivateKeySigner::random(), &header, 2);
    (b64json(&header), payment)
}

/// The resize of `server` to [`TO`] paid with `payment`, its handler killed at `step` (a Lambda
/// killed there): the order goes on in the reconciler.
async fn killed_at(env: &TestEnv, key: &str, server: u64, payment: &(&str, String), step: Step) {
    let request = env
        .req("POST", &path(server))
        .key(key)
        .header(payment.0, &payment.1)
        .json(json!({"plan": TO}));
    env.killed_at(step, request).await;
}

async fn record(env: &TestEnv, sandbox: &str) -> domain::store::sandboxes::SandboxRecord {
    env.store.sandbox(sandbox).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_resize_pays_the_difference_for_the_time_left_and_keeps_the_paid_time() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "resized").await;
    let before = record(&env, &sandbox).await.lease.unwrap();
    // The quote and the 402 say the same price: a day left of the difference.
    let quote = env
        .req("GET", "/api/cloud/quote")
        .key(&key)
        .query(&format!("serverId={server}&plan={TO}"))
        .send()
        .await;
    assert_eq!(quote.status, 200, "{}", quote.body);
    let quote = quote.json();
    assert_eq!(quote["amount"], DAY_DIFFERENCE.to_string());
    assert_eq!(quote["price"]["periods"], 0);
    assert_eq!(quote["price"]["resize"]["fromPlan"], FROM);
    assert_eq!(quote["price"]["resize"]["hoursLeft"], 24);
    let (offer, payment) = resize_payment(&env, &key, server, TO).await;
    assert_eq!(offer["accepts"][0]["amount"], DAY_DIFFERENCE.to_string());
    let described = offer["resource"]["description"].as_str().unwrap();
    assert!(
        described.contains(FROM) && described.contains(TO),
        "{offer}"
    );
    let res = resize(&env, &key, server, TO, Some(&payment)).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert!(res.header("payment-response").is_some());
    let resized = res.json();
    assert_eq!(resized["serverId"], server);
    assert_eq!(resized["plan"], TO);
    assert_eq!(resized["from"], FROM);
    assert_eq!(resized["amount"], DAY_DIFFERENCE.to_string());
    assert_eq!(
        resized["paidUntil"],
        serde_json::to_value(before.paid_until).unwrap()
    );
    // The provider moved it; the record names the new plan; the lease did not move.
    assert_eq!(env.sim.plan_of(server).as_deref(), Some(TO));
    let after = record(&env, &sandbox).await;
    assert_eq!(after.plan.as_deref(), Some(TO));
    let lease = after.lease.unwrap();
    assert_eq!(
        (lease.paid_until, lease.paid_seconds),
        (before.paid_until, before.paid_seconds)
    );
    assert_eq!(env.sim.upgrades(), 1, "one upgrade");
    // A replay is the same answer; the same payment for another plan is refused.
    let replay = resize(&env, &key, server, TO, Some(&payment)).await;
    assert_eq!((replay.status, replay.json()), (201, resized));
    resize(&env, &key, server, "B1-1-1gb-20s-shared", Some(&payment))
        .await
        .invalid("plan");
    // From now on a renewal is priced on the bigger plan.
    let renewal = env
        .req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(renewal.status, 402, "{}", renewal.body);
    let offer = b64json(renewal.header("payment-required").unwrap());
    assert_eq!(offer["accepts"][0]["amount"], DAY_OF_TO.to_string());
    // The payment is the owner's, a resize.
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    let order = orders
        .items
        .iter()
        .find(|o| o.kind == OrderKind::Resize)
        .unwrap();
    assert_eq!(order.state, OrderState::Provisioned);
    // The owner's feed says so once, on the server, beside the payment's own event.
    let events = resized_events(&env, &key).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["subject"],
        json!({"kind": "server", "id": sandbox})
    );
    let data = &events[0]["data"];
    assert_eq!(
        (&data["plan"], &data["from"], &data["serverId"]),
        (&json!(TO), &json!(FROM), &json!(server))
    );
    assert_eq!(data["amount"], DAY_DIFFERENCE.to_string());
    assert_eq!(data["payment"], order.id.to_string());
    assert_eq!(
        data["paidUntil"],
        serde_json::to_value(before.paid_until).unwrap()
    );
}

/// The `server.resized` events of `key`'s owner's feed.
async fn resized_events(env: &TestEnv, key: &str) -> Vec<Value> {
    env.feed().await;
    let res = env
        .req("GET", "/api/events")
        .key(key)
        .query("types=server.resized")
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["items"].as_array().unwrap().clone()
}

#[tokio::test]
async fn what_the_provider_cannot_do_or_the_service_will_not_is_refused_before_any_402() {
    let env = env().await;
    let key = env.key(ALICE).await;
    // On its first deployment: not yet.
    let (early, _, _) = crate::paid_time::ordered_server(&env, &key, "early").await;
    resize(&env, &key, early, TO, None).await.problem(409);
    let (server, sandbox, _) = paid_server(&env, &key, "refused").await;
    // The plan: a slug, known, another, a cloud VPS, dearer.
    resize(&env, &key, server, "no such plan!", None)
        .await
        .invalid("plan");
    resize(&env, &key, server, "nope", None)
        .await
        .invalid("plan");
    resize(&env, &key, server, FROM, None).await.invalid("plan");
    resize(&env, &key, server, "e5_1650v4", None)
        .await
        .invalid("plan");
    let down = resize(&env, &key, server, "cloud_vps_free", None).await;
    let doc = down.invalid("plan");
    assert!(
        doc["detail"].as_str().unwrap().contains("costs no more"),
        "{doc}"
    );
    let extra = env
        .req("POST", &path(server))
        .key(&key)
        .json(json!({"plan": TO, "periods": 1}))
        .send()
        .await;
    assert_eq!(extra.status, 400, "{}", extra.body);
    // Only its owner resizes it.
    let bob = env.key(BOB).await;
    resize(&env, &bob, server, TO, None).await.problem(403);
    // A free server has no paid time to carry over.
    let (free, _) = env.provision(&key, "cloud_vps_free", Some("free")).await;
    resize(&env, &key, free, TO, None).await.problem(409);
    // Past its paid time: renew first.
    env.pass_after(DAY + 1).await;
    let lapsed = resize(&env, &key, server, TO, None).await.problem(409);
    assert!(
        lapsed["detail"].as_str().unwrap().contains("renew"),
        "{lapsed}"
    );
    // Deleted: gone.
    let res = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    resize(&env, &key, server, TO, None).await.problem(410);
    // Nothing was offered, claimed or sent to the provider for any of them.
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert!(orders.items.iter().all(|o| o.kind != OrderKind::Resize));
    assert_eq!(env.sim.upgrades(), 0);
    assert!(record(&env, &sandbox).await.plan.as_deref() == Some(FROM));
}

#[tokio::test]
async fn a_plan_out_of_stock_in_the_servers_region_is_refused() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let body = json!({"plan": FROM, "region": "NL-Amsterdam", "hostname": "amsterdam"});
    let path = format!("/api/cloud/servers/{}", crate::harness::PROJECT);
    let offer = env
        .req("POST", &path)
        .key(&key)
        .json(body.clone())
        .send()
        .await;
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let res = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    env.pass_after(1).await;
    let doc = resize(&env, &key, res.json()["id"].as_u64().unwrap(), TO, None)
        .await
        .invalid("plan");
    assert!(
        doc["detail"].as_str().unwrap().contains("NL-Amsterdam"),
        "{doc}"
    );
}

#[tokio::test]
async fn a_key_resizes_only_with_its_scopes_and_within_its_policy() {
    let env = env().await;
    let (session, _, bounded) = env.owner_with_key(json!({"allowedPlans": [FROM]})).await;
    let (server, _, _) = paid_server(&env, &bounded, "bounded").await;
    let doc = resize(&env, &bounded, server, TO, None).await.problem(403);
    assert_eq!(doc["limit"], "allowedPlans", "{doc}");
    // A key of the owner's without `provision` cannot; one without `pay` is never offered it.
    let (_, renewer) = env
        .generate_key(
            &session,
            json!({"name": "r", "scopes": ["read", "renew", "pay"]}),
        )
        .await;
    let doc = resize(&env, &renewer, server, TO, None).await.problem(403);
    assert!(
        doc["detail"].as_str().unwrap().contains("provision"),
        "{doc}"
    );
    let (_, unpaid) = env
        .generate_key(
            &session,
            json!({"name": "u", "scopes": ["read", "provision"]}),
        )
        .await;
    let doc = resize(&env, &unpaid, server, TO, None).await.problem(403);
    assert!(doc["detail"].as_str().unwrap().contains("pay"), "{doc}");
}

#[tokio::test]
async fn a_renewal_between_the_price_and_the_upgrade_makes_the_resize_a_credit() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "raced").await;
    let (_, payment) = resize_payment(&env, &key, server, TO).await;
    // Killed once claimed: the order waits for the reconciler, and a renewal lands first.
    killed_at(&env, &key, server, &payment, Step::Claimed).await;
    let (_, renewed) = crate::paid_time::paid_renewal(&env, &key, server, 1).await;
    assert_eq!(renewed.status, 201, "{}", renewed.body);
    env.pass_after(LEASE_SECONDS as u64 + 1).await;
    // The upgrade was never sent: the difference was priced for less time than the server now
    // has. The payment is a credit; the server and its record stay on their plan.
    let res = resize(&env, &key, server, TO, Some(&payment)).await;
    let doc = res.problem(409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    assert!(res.header("payment-response").is_some());
    assert_eq!(env.sim.upgrades(), 0);
    assert_eq!(env.sim.plan_of(server).as_deref(), Some(FROM));
    assert_eq!(record(&env, &sandbox).await.plan.as_deref(), Some(FROM));
}

#[tokio::test]
async fn an_upgrade_refused_by_the_provider_is_a_credit_on_the_old_plan() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "refused-upgrade").await;
    let (_, payment) = resize_payment(&env, &key, server, TO).await;
    env.sim
        .inject(Fault::status("/servers/", 422).on(Method::POST));
    let res = resize(&env, &key, server, TO, Some(&payment)).await;
    let doc = res.problem(409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    assert_eq!(env.sim.plan_of(server).as_deref(), Some(FROM));
    assert_eq!(record(&env, &sandbox).await.plan.as_deref(), Some(FROM));
    // A renewal is priced on the plan the server is on.
    let renewal = env
        .req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    let offer = b64json(renewal.header("payment-required").unwrap());
    assert_eq!(offer["accepts"][0]["amount"], "606912");
    assert_eq!(resized_events(&env, &key).await, Vec::<Value>::new());
}

/// `key`'s resize order of the server, and its other orders' states.
async fn resize_orders(env: &TestEnv) -> Vec<domain::store::payments::Order> {
    let orders = env.store.orders_of(&owner(ALICE), 20, None).await.unwrap();
    orders
        .items
        .into_iter()
        .filter(|o| o.kind == OrderKind::Resize)
        .collect()
}

/// Reconciler passes until no order is in flight.
async fn drain(env: &TestEnv) {
    for _ in 0..8 {
        // Past every order's lease by the test's clock (the wall clock's second may not turn).
        env.pass_after(LEASE_SECONDS as u64 + 1).await;
        let orders = env.store.orders_of(&owner(ALICE), 20, None).await.unwrap();
        if orders.items.iter().all(|o| !o.state.in_flight()) {
            return;
        }
    }
    panic!("an order is still in flight");
}

#[tokio::test]
async fn two_resizes_of_one_server_make_one_upgrade_and_a_credit() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "twice").await;
    // Both priced from the small plan, both claimed before either is sent.
    let (_, first) = resize_payment(&env, &key, server, TO).await;
    let (_, second) = resize_payment(&env, &key, server, TO).await;
    for payment in [&first, &second] {
        killed_at(&env, &key, server, payment, Step::Claimed).await;
    }
    drain(&env).await;
    // One holds the server and moves it; the other finds it moved from the plan it priced.
    let mut states: Vec<_> = resize_orders(&env).await.iter().map(|o| o.state).collect();
    states.sort_by_key(|s| s.as_str());
    assert_eq!(states, [OrderState::Credited, OrderState::Provisioned]);
    assert_eq!(env.sim.upgrades(), 1);
    assert_eq!(env.sim.plan_of(server).as_deref(), Some(TO));
    let record = record(&env, &sandbox).await;
    assert_eq!(record.plan.as_deref(), Some(TO));
    assert_eq!(record.resizing, None, "released");
}

#[tokio::test]
async fn a_renewal_priced_on_the_old_plan_that_lands_after_the_resize_is_a_credit() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "renewed-late").await;
    let before = record(&env, &sandbox).await.lease.unwrap();
    // A renewal priced on the small plan, claimed, not yet applied.
    let renewals = format!("/api/cloud/servers/{server}/renewals");
    let offer = env
        .req("POST", &renewals)
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    let renewal = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let request = env
        .req("POST", &renewals)
        .key(&key)
        .header(renewal.0, &renewal.1)
        .json(json!({"periods": 1}));
    env.killed_at(Step::Claimed, request).await;
    // The resize lands first.
    let (_, payment) = resize_payment(&env, &key, server, TO).await;
    let res = resize(&env, &key, server, TO, Some(&payment)).await;
    assert_eq!(res.status, 201, "{}", res.body);
    drain(&env).await;
    // A day of the small plan does not buy a day of the big one: the renewal is a credit.
    let res = env
        .req("POST", &renewals)
        .key(&key)
        .header(renewal.0, &renewal.1)
        .json(json!({"periods": 1}))
        .send()
        .await;
    let doc = res.problem(409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    let lease = record(&env, &sandbox).await.lease.unwrap();
    assert_eq!(lease.paid_until, before.paid_until, "no time added");
}

#[tokio::test]
async fn a_resize_asked_while_another_is_under_way_is_refused_before_any_402() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "under-way").await;
    let (_, payment) = resize_payment(&env, &key, server, TO).await;
    // Killed once the provider took the upgrade, before it was recorded: the server is held.
    killed_at(&env, &key, server, &payment, Step::AfterCreate).await;
    assert!(record(&env, &sandbox).await.resizing.is_some());
    let doc = resize(&env, &key, server, TO, None).await.problem(409);
    assert!(
        doc["detail"].as_str().unwrap().contains("under way"),
        "{doc}"
    );
    drain(&env).await;
    let record = record(&env, &sandbox).await;
    assert_eq!((record.plan.as_deref(), record.resizing), (Some(TO), None));
    let replay = resize(&env, &key, server, TO, Some(&payment)).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
}

#[tokio::test]
async fn an_upgrade_refused_after_it_landed_is_read_back_and_delivered() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "landed-refused").await;
    let (_, payment) = resize_payment(&env, &key, server, TO).await;
    // The provider applies the upgrade, then answers 422: the server read back is on the new
    // plan, so the order is delivered, not a credit.
    env.sim
        .inject(Fault::status_after("/servers/", 422).on(Method::POST));
    let res = resize(&env, &key, server, TO, Some(&payment)).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.json()["plan"], TO);
    assert_eq!(env.sim.upgrades(), 1);
    let record = record(&env, &sandbox).await;
    assert_eq!((record.plan.as_deref(), record.resizing), (Some(TO), None));
}

/// The resize of `server` to [`TO`], paid, then its transfer reorganised away and its
/// authorization cancelled (gone for good): the resize order and its paid time left before it.
async fn resized_then_gone(
    env: &TestEnv,
    key: &str,
    server: u64,
    sandbox: &str,
) -> (
    domain::store::payments::Order,
    domain::store::sandboxes::Lease,
) {
    let before = record(env, sandbox).await.lease.unwrap();
    let (_, payment) = resize_payment(env, key, server, TO).await;
    let res = resize(env, key, server, TO, Some(&payment)).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let transaction = b64json(res.header("payment-response").unwrap())["transaction"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(env.facilitator.chain().reorg_out(&transaction));
    let authorization = &b64json(&payment.1)["payload"]["authorization"];
    env.facilitator.cancel(
        authorization["from"].as_str().unwrap(),
        authorization["nonce"].as_str().unwrap(),
    );
    let order = resize_orders(env).await.pop().unwrap();
    assert_eq!(order.amount, DAY_DIFFERENCE.to_string());
    (order, before)
}

/// The catalogue fails (every plans listing and plan's images answer 503) for one pass.
fn catalogue_outage(env: &TestEnv) {
    for _ in 0..40 {
        env.sim.inject(Fault::status("/plans", 503));
    }
}

/// A reversed resize takes back what its amount bought of the bigger plan at the price it was
/// bought at — half a day, the difference of a day being half a day of the bigger plan — even
/// while the catalogue cannot price that plan (issue 63, point 4), and never the rest of the
/// paid time, which the provisioning paid for.
#[tokio::test]
async fn a_reversed_resize_during_a_catalogue_outage_takes_back_exactly_what_it_bought() {
    let env = TestEnv::with(Options {
        period_seconds: DAY,
        cache_seconds: 0,
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "reversed-in-outage").await;
    let (_, before) = resized_then_gone(&env, &key, server, &sandbox).await;
    catalogue_outage(&env);
    let report = env
        .pass_after(domain::billing::finality::FOLLOW_SECS as u64)
        .await;
    assert_eq!(report.finality.reversed, 1, "{report:?}");
    // The catalogue was down all along.
    let plans = env.req("GET", "/api/cloud/plans").key(&key).send().await;
    assert!(plans.status >= 500, "{} {}", plans.status, plans.body);
    env.sim.clear_faults();
    let order = resize_orders(&env).await.pop().unwrap();
    assert_eq!(order.state, OrderState::Reversed);
    let lease = record(&env, &sandbox).await.lease.unwrap();
    let half = (DAY / 2) as i64;
    assert_eq!(lease.paid_until.unix(), before.paid_until.unix() - half);
    assert_eq!(lease.paid_seconds, before.paid_seconds - half, "{lease:?}");
}

/// A resize ordered before its order recorded its price is priced again when reversed: a
/// catalogue outage leaves the reversal to a later pass (nothing taken back meanwhile), which
/// takes back what the amount buys.
#[tokio::test]
async fn a_reversal_that_must_price_its_plan_waits_out_a_catalogue_outage() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let env = TestEnv::with(Options {
        period_seconds: DAY,
        cache_seconds: 0,
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = paid_server(&env, &key, "reversed-later").await;
    let (order, before) = resized_then_gone(&env, &key, server, &sandbox).await;
    // As an older version wrote it: no price in the request.
    let mut request: Value = serde_json::from_str(&order.request).unwrap();
    assert!(request["periodAmount"].is_string(), "{request}");
    request.as_object_mut().unwrap().remove("periodAmount");
    env.store
        .client()
        .update_item()
        .table_name(env.store.table())
        .key("pk", AttributeValue::S(format!("PAYMENT#{}", order.id)))
        .key("sk", AttributeValue::S("PAYMENT".into()))
        .update_expression("SET #r = :r")
        .expression_attribute_names("#r", "request")
        .expression_attribute_values(":r", AttributeValue::S(request.to_string()))
        .send()
        .await
        .unwrap();
    catalogue_outage(&env);
    let report = env
        .pass_after(domain::billing::finality::FOLLOW_SECS as u64)
        .await;
    env.sim.clear_faults();
    assert_eq!(
        (report.finality.reversed, report.finality.errors),
        (0, 1),
        "{report:?}"
    );
    assert_eq!(
        resize_orders(&env).await.pop().unwrap().state,
        OrderState::Provisioned
    );
    let lease = record(&env, &sandbox).await.lease.unwrap();
    assert_eq!(
        (lease.paid_until, lease.paid_seconds),
        (before.paid_until, before.paid_seconds)
    );
    // The catalogue back, a later pass (once the failed attempt's hold ended) reverses it.
    let report = env.pass_after(120).await;
    assert_eq!(report.finality.reversed, 1, "{report:?}");
    let lease = record(&env, &sandbox).await.lease.unwrap();
    assert_eq!(
        lease.paid_until.unix(),
        before.paid_until.unix() - (DAY / 2) as i64
    );
}
