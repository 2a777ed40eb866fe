//! Money against a hostile world: the faults the world really has, injected between the service
//! and the payment network, the facilitator and the provider — a payer who spends his nonce
//! elsewhere, a facilitator that broadcasts and then reports a failure while the node lags, a
//! provider that commits a create after its timeout or hides new servers from its listing —
//! each with where the money must end. Time passes on the environment's clock, never by sleeping.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use base64::Engine;
use domain::billing::order::effects::SANDBOX_TAG;
use domain::store::payments::OrderState;
use e2e::facilitator::{Mode, VerifyMode};
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{ALICE, PROJECT, TREASURY, TestEnv, TestResponse, b64json, owner, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body() -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "hostile-1"})
}

/// A key of ALICE's and a signed payment for [`body`] (the payer, and the header to send).
async fn paying(env: &TestEnv) -> (String, PrivateKeySigner, (&'static str, String)) {
    let key = env.key(ALICE).await;
    let res = env.req("POST", &path()).key(&key).json(body()).send().await;
    assert_eq!(res.status, 402, "{}", res.body);
    let payer = PrivateKeySigner::random();
    let payment = pay(&payer, res.header("payment-required").unwrap(), 2);
    (key, payer, payment)
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String)) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body())
        .send()
        .await
}

/// The one order of ALICE's.
async fn order(env: &TestEnv) -> domain::store::payments::Order {
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items.len(), 1);
    env.store.order(&orders.items[0].id).await.unwrap().unwrap()
}

/// Transfers the treasury received on the development chain.
fn paid_to_treasury(env: &TestEnv) -> usize {
    let treasury = TREASURY.to_ascii_lowercase();
    let transfers = env.facilitator.chain().transfers(e2e::chain::Moved::Seen);
    transfers.iter().filter(|t| t.2 == treasury).count()
}

/// An answer that says the payment is not settled yet and must not be paid again.
#[track_caller]
fn not_settled_yet(res: &TestResponse) {
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(res.header("payment-response").is_none(), "{}", res.body);
    let detail = res.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("will still be settled"), "{detail}");
    assert!(detail.contains("never sign a new one"), "{detail}");
}

/// Scenario 1: the payer spends the nonce after the service's verify and before its settle —
/// a transfer of 1 unit to himself, or a cancellation. The chain shows the authorization used,
/// but not by a transfer to the treasury: no server, no credit, and every replay is a 402.
#[tokio::test]
async fn a_nonce_spent_elsewhere_after_verify_buys_nothing() {
    for spend in [None, Some(1u128)] {
        let env = TestEnv::new().await;
        let (key, payer, payment) = paying(&env).await;
        let to = format!("{:#x}", payer.address());
        env.facilitator
            .next_verify(VerifyMode::PayerSpends(spend.map(|v| (to.clone(), v))));
        let res = send(&env, &key, &payment).await;
        assert_eq!(res.status, 402, "{spend:?}: {}", res.body);
        assert!(res.header("payment-response").is_none());
        let reason = res.json()["error"].as_str().unwrap().to_owned();
        assert!(reason.contains("nothing was paid"), "{spend:?}: {reason}");
        let order = order(&env).await;
        assert_eq!(order.state, OrderState::Rejected, "{spend:?}");
        assert_eq!((env.sim.server_count(), paid_to_treasury(&env)), (0, 0));
        // Nothing left to settle, credit or create, whatever passes and replays come.
        env.pass_after(200).await;
        assert_eq!(send(&env, &key, &payment).await.status, 402);
        assert_eq!(env.sim.server_count(), 0);
        assert_eq!(
            env.facilitator.settles(),
            0,
            "the service never paid itself"
        );
    }
}

/// Scenario 2: the facilitator broadcasts the transfer, then answers `success: false`
/// (`unexpected_settle_error`, a receipt timeout) while the node still shows nothing for 20 s.
/// The payer was charged: no 402, ever — the order waits, and completes once the chain shows
/// the transfer. The same with a confirmation that comes 30 s late.
#[tokio::test]
async fn a_failure_reported_after_broadcast_completes_once_the_chain_shows_the_transfer() {
    for (lag, confirm_after) in [(20, 0), (0, 30)] {
        let env = TestEnv::new().await;
        let (key, _, payment) = paying(&env).await;
        env.facilitator.set_chain_lag(Duration::from_secs(lag));
        env.facilitator.next_settle(Mode::BroadcastThenFail {
            reason: "unexpected_settle_error".into(),
            confirm_after: Duration::from_secs(confirm_after),
        });
        not_settled_yet(&send(&env, &key, &payment).await);
        assert_eq!(order(&env).await.state, OrderState::Settling);
        // Replays while the node shows nothing: never a 402, never a second transfer.
        env.clock.advance(Duration::from_secs(5));
        not_settled_yet(&send(&env, &key, &payment).await);
        env.clock
            .advance(Duration::from_secs(lag.max(confirm_after)));
        let res = send(&env, &key, &payment).await;
        assert_eq!(res.status, 201, "{}", res.body);
        assert_eq!(
            b64json(res.header("payment-response").unwrap())["success"],
            true
        );
        assert_eq!((env.facilitator.settles(), paid_to_treasury(&env)), (1, 1));
        assert_eq!(env.sim.server_count(), 1);
    }
}

/// A facilitator's `success: true` is not payment: it names a transaction that is not on chain
/// (a buggy or hostile facilitator). The order waits, never provisions on that word; a later
/// honest settle while the authorization is valid pays for one server, and a facilitator that
/// lies until the window closes leaves the order expired: nothing charged, nothing made.
#[tokio::test]
async fn a_facilitators_success_without_the_transfer_is_not_payment() {
    for honest_later in [true, false] {
        let env = TestEnv::new().await;
        let (key, _, payment) = paying(&env).await;
        let lies = if honest_later { 1 } else { 20 };
        for _ in 0..lies {
            env.facilitator.next_settle(Mode::SucceedWithoutTransfer);
        }
        let res = send(&env, &key, &payment).await;
        not_settled_yet(&res);
        assert_eq!(order(&env).await.state, OrderState::Settling);
        assert_eq!(
            env.sim.server_count(),
            0,
            "no server on the facilitator's word"
        );
        env.pass_after(10).await;
        if honest_later {
            let res = send(&env, &key, &payment).await;
            assert_eq!(res.status, 201, "{}", res.body);
            assert_eq!((paid_to_treasury(&env), env.sim.server_count()), (1, 1));
        } else {
            for _ in 0..4 {
                env.pass_after(60).await;
            }
            assert_eq!(order(&env).await.state, OrderState::Expired);
            assert_eq!((paid_to_treasury(&env), env.sim.server_count()), (0, 0));
            assert_eq!(send(&env, &key, &payment).await.status, 402);
        }
    }
}

/// A load-balanced RPC whose logs backend is minutes behind its head: the transfer is mined
/// just before `validBefore`, and when the order looks, the head is past `validBefore` plus
/// finality while no log of the transfer is served yet. The contract's `authorizationState` at
/// that head says used, so the order waits instead of expiring (charged, no server, no credit),
/// and completes once the logs catch up.
#[tokio::test]
async fn logs_that_lag_the_head_never_expire_a_paid_order() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    env.facilitator.set_logs_lag(Duration::from_secs(240));
    env.facilitator.next_settle(Mode::BroadcastThenFail {
        reason: "unexpected_settle_error".into(),
        confirm_after: Duration::from_secs(110),
    });
    not_settled_yet(&send(&env, &key, &payment).await);
    for _ in 0..3 {
        env.pass_after(80).await;
    }
    let order_now = order(&env).await;
    assert_eq!(order_now.state, OrderState::Settling, "{order_now:?}");
    assert!(env.clock.now() > order_now.valid_before as i64 + 60);
    env.facilitator.set_logs_lag(Duration::ZERO);
    env.pass_after(5).await;
    let res = send(&env, &key, &payment).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!((paid_to_treasury(&env), env.sim.server_count()), (1, 1));
}

/// Scenario 3: the provider commits a create 12 s after it was sent, after the client gave up
/// on it. The order searches — and waits — instead of creating again: one server.
#[tokio::test]
async fn a_create_committed_after_its_timeout_makes_one_server() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    env.sim.commit_next_create_after(Duration::from_secs(12));
    let first = send(&env, &key, &payment).await;
    assert_eq!(first.status, 202, "{}", first.body);
    assert!(
        first.header("payment-response").is_some(),
        "settled: it says so"
    );
    env.clock.advance(Duration::from_secs(5));
    assert_eq!(send(&env, &key, &payment).await.status, 202);
    assert_eq!(env.sim.calls("POST /projects/"), 1, "no second create");
    let report = env.pass_after(61).await;
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    let res = send(&env, &key, &payment).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let sandbox = res.json()["sandboxId"].as_str().unwrap().to_owned();
    assert_eq!(env.sim.servers_tagged(SANDBOX_TAG, &sandbox), 1);
    assert_eq!(
        (env.sim.server_count(), env.sim.calls("POST /projects/")),
        (1, 1)
    );
    assert_eq!(env.facilitator.settles(), 1);
}

/// The provider created the server but answered 502, and its listing shows new servers only
/// 90 s later: searched on passes over the settle time, adopted once it shows — one server.
#[tokio::test]
async fn a_lost_create_hidden_from_the_listing_is_adopted_when_it_shows() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    env.sim.set_listing_lag(Duration::from_secs(90));
    env.sim
        .inject(Fault::status_after("/projects/", 502).on(Method::POST));
    assert_eq!(send(&env, &key, &payment).await.status, 202);
    let report = env.pass_after(61).await;
    assert_eq!(report.outcomes.get("creating"), Some(&1), "{report:?}");
    let report = env.pass_after(61).await;
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    assert_eq!(
        (env.sim.server_count(), env.sim.calls("POST /projects/")),
        (1, 1)
    );
    assert_eq!(send(&env, &key, &payment).await.status, 201);
}

/// Searches read every page: with a provider that pages its listing two by two, the lost create
/// is found on the fourth page at once (no search before the first create: nothing to find).
#[tokio::test]
async fn a_search_reads_every_page_of_the_listing() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    for _ in 0..6 {
        env.sim.create_foreign_server(PROJECT);
    }
    env.sim.set_page_cap(Some(2));
    env.sim
        .inject(Fault::status_after("/projects/", 502).on(Method::POST));
    let res = send(&env, &key, &payment).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(env.sim.calls("POST /projects/"), 1);
    assert_eq!(
        env.sim.calls("GET /projects/254871/servers"),
        4,
        "{:?}",
        env.sim.requests()
    );
    let order = order(&env).await;
    assert_eq!(
        (order.state, order.create_attempts),
        (OrderState::Provisioned, 1)
    );
}

/// Scenario 4: a renewal refused by verify (`insufficient_funds`) leaves the live server as it
/// was: its sandbox's status and stage, its place in the listing and on the key.
#[tokio::test]
async fn a_refused_renewal_leaves_the_live_server_as_it_was() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = crate::paid_time::paid_server(&env, &key, "renewed").await;
    let before = env.sandbox(&key, &sandbox_id).await;
    let renewal = format!("/api/cloud/servers/{server}/renewals");
    let offer = env
        .req("POST", &renewal)
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    env.facilitator
        .next_verify(VerifyMode::Invalid("insufficient_funds".into()));
    let res = env
        .req("POST", &renewal)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(res.status, 402, "{}", res.body);
    let after = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(
        (
            after["status"].clone(),
            after["stage"].clone(),
            after["paidUntil"].clone()
        ),
        (
            before["status"].clone(),
            before["stage"].clone(),
            before["paidUntil"].clone()
        )
    );
    let listed = env.req("GET", &path()).key(&key).send().await.json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
}

/// A failing search never blocks the credit of an order that never sent a create (the project
/// was deleted, the token lost access): past its deadline it becomes a credit. One that did
/// send a create is not credited while its search fails: it is reported and retried.
#[tokio::test]
async fn a_failing_search_credits_only_an_order_that_never_sent_a_create() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    let listing = || Fault::status("/projects/254871/servers", 403).on(Method::GET);
    // Rate limited (not processed: nothing can land), then the project cannot be listed.
    env.sim
        .inject(Fault::status("/projects/", 429).on(Method::POST));
    for _ in 0..4 {
        env.sim.inject(listing());
    }
    assert_eq!(send(&env, &key, &payment).await.status, 202);
    assert_eq!(order(&env).await.create_sent_at, 0);
    let report = env.pass_after(301).await;
    assert_eq!(report.outcomes.get("credited"), Some(&1), "{report:?}");
    assert_eq!(send(&env, &key, &payment).await.status, 409);

    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    env.sim
        .inject(Fault::status_after("/projects/", 502).on(Method::POST));
    for _ in 0..4 {
        env.sim.inject(listing());
    }
    // The create may have landed: never credited while the project cannot be searched.
    assert_eq!(send(&env, &key, &payment).await.status, 202);
    for _ in 0..3 {
        let report = env.pass_after(301).await;
        assert_eq!(report.outcomes.get("creating"), Some(&1), "{report:?}");
    }
    // Once the listing answers, the server it made is found.
    let report = env.pass_after(61).await;
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    assert_eq!(
        (env.sim.server_count(), env.sim.calls("POST /projects/")),
        (1, 1)
    );
}

/// A lease written by an attempt outlives the attempt: the reconciler's (a 120 s invocation)
/// holds an order for all of it, so that a replaying client never takes it over mid-create.
#[tokio::test]
async fn an_order_lease_outlives_its_holders_invocation() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    let request = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body());
    env.killed_at(domain::checkpoint::Step::Claimed, request)
        .await;
    env.clock.advance(Duration::from_secs(61));
    let claimed = order(&env).await;
    let deadline = domain::deadline::Deadline::after(Duration::from_secs(120));
    let held = domain::billing::order::ledger::take(env.state, &claimed, &deadline)
        .await
        .unwrap()
        .expect("an expired lease is taken over");
    assert!(held.lease_until >= env.clock.now() + 120, "{held:?}");
    // 90 s on, well past ORDER_LEASE_SECONDS (60): still held.
    env.clock.advance(Duration::from_secs(90));
    let res = send(&env, &key, &payment).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert!(
        res.json()["detail"]
            .as_str()
            .unwrap()
            .contains("another attempt")
    );
    assert_eq!(order(&env).await.attempt, held.attempt);
}

/// A provider that answers 404 for every server (its token or team changed) does not make a
/// running fleet `terminated`: the pass stops and alarms.
#[tokio::test]
async fn a_provider_that_forgets_every_server_stops_the_pass() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let mut sandboxes = Vec::new();
    for n in 0..3 {
        let host = format!("fleet-{n}");
        sandboxes.push(env.provision(&key, "cloud_vps_free", Some(&host)).await.1);
    }
    env.sim.forget_all_servers(true);
    // One project, three servers: the listing is empty, each is then read alone: 404.
    let report = env.pass_after(1).await.refresh;
    assert_eq!(report.terminated, 0, "{report:?}");
    assert!(report.errors >= 1, "{report:?}");
    for sandbox in &sandboxes {
        assert_ne!(env.sandbox(&key, sandbox).await["stage"], "terminated");
    }
    env.sim.forget_all_servers(false);
    let report = env.pass_after(1).await.refresh;
    assert_eq!((report.terminated, report.errors), (0, 0), "{report:?}");
}

/// An environment whose reconciler sweeps every project on every pass.
async fn sweeping() -> TestEnv {
    TestEnv::with(crate::harness::Options {
        vars: vec![("SWEEP_SECONDS", "1".into())],
        ..Default::default()
    })
    .await
}

/// A create that lands after its order created again (the first committed 400 s late, after
/// its settle time): two servers tagged with one sandbox. The sweep deletes the one no record
/// owns; servers of other deployments, or anyone's, are never touched.
#[tokio::test]
async fn the_sweep_deletes_a_server_no_record_owns_and_only_that() {
    let env = sweeping().await;
    let (key, _, payment) = paying(&env).await;
    let foreign = env.sim.create_foreign_server(PROJECT);
    let elsewhere = env.sim.create_tagged_server(
        PROJECT,
        json!({SANDBOX_TAG: "sbx_0123456789abcdef0123456789abcdef", "svc-deployment": "prod"}),
    );
    env.sim.commit_next_create_after(Duration::from_secs(400));
    assert_eq!(send(&env, &key, &payment).await.status, 202);
    // Past the first create's window (its intent's lease, 60 s, and the settle time, 300 s).
    env.pass_after(361).await;
    let res = send(&env, &key, &payment).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let owned = res.json()["id"].as_u64().unwrap();
    assert_eq!(env.sim.calls("POST /projects/"), 2);
    // The first create lands: one server too many.
    let report = env.pass_after(120).await;
    assert_eq!(
        (report.sweep.orphans, report.sweep.errors),
        (1, 0),
        "{report:?}"
    );
    let mut left = env.sim.server_ids(PROJECT);
    left.sort();
    let mut expected = vec![foreign, elsewhere, owned];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(env.facilitator.settles(), 1);
}

/// A free server's sandbox is recorded before its create: a create that lands late is adopted
/// by the refresher, one that never lands ends the intent — no orphan either way.
#[tokio::test]
async fn a_free_server_whose_create_lands_late_is_adopted() {
    let env = sweeping().await;
    let key = env.key(ALICE).await;
    env.sim.commit_next_create_after(Duration::from_secs(30));
    let free = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "hostname": "late"});
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(free.clone())
        .send()
        .await;
    assert_eq!(res.status, 502, "{}", res.body);
    let sandboxes = env
        .req("GET", "/api/sandboxes")
        .key(&key)
        .send()
        .await
        .json();
    let intent = sandboxes["items"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(sandboxes["items"][0]["stage"], "ordered", "{sandboxes}");
    let report = env.pass_after(301).await;
    assert_eq!(report.sweep.orphans, 0, "{report:?}");
    let record = env.sandbox(&key, &intent).await;
    assert!(record["serverId"].is_u64(), "{record}");
    let listed = env.req("GET", &path()).key(&key).send().await.json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(env.sim.server_count(), 1);

    // A create that never lands: the intent ends, nothing is left running.
    env.sim
        .inject(Fault::status("/projects/", 503).on(Method::POST));
    let res = env.req("POST", &path()).key(&key).json(free).send().await;
    assert_eq!(res.status, 502, "{}", res.body);
    env.pass_after(301).await;
    let sandboxes = env
        .req("GET", "/api/sandboxes")
        .key(&key)
        .send()
        .await
        .json();
    let ended = sandboxes["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] != intent.as_str())
        .unwrap()
        .clone();
    assert_eq!(ended["stage"], "failed", "{sandboxes}");
    assert_eq!(env.sim.server_count(), 1);
}

/// A refund locks the credit before the payout (it can no longer be redeemed meanwhile), and
/// only a locked credit is recorded refunded; a redeemed credit is not a credit any more.
#[tokio::test]
async fn a_refund_locks_the_credit_first_and_a_redeemed_credit_is_not_refundable() {
    let env = TestEnv::new().await;
    let (key, _, payment) = paying(&env).await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &payment).await.problem(409);
    let id = domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    // Not locked: refused, so that a payout never races a redemption.
    let refund = domain::billing::order::ledger::refund(env.state, &id, "0xpaid").await;
    assert!(
        matches!(refund, Err(domain::ApiError::Conflict(_))),
        "{refund:?}"
    );
    let locked = domain::billing::order::ledger::lock_refund(env.state, &id)
        .await
        .unwrap();
    assert_eq!(locked.order.state, OrderState::Refunding);
    assert!(
        !locked.already && locked.next().starts_with("pay "),
        "{}",
        locked.next()
    );
    // Run again (the operator may have paid already): never told to pay again.
    let again = domain::billing::order::ledger::lock_refund(env.state, &id)
        .await
        .unwrap();
    assert!(again.already, "{again:?}");
    assert!(
        again.next().contains("pay only if no such payout was made"),
        "{}",
        again.next()
    );
    let corrected = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "other"});
    let redeem = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(corrected.clone())
        .send()
        .await;
    redeem.problem(409);
    let refunded = domain::billing::order::ledger::refund(env.state, &id, "0xpaid")
        .await
        .unwrap();
    assert_eq!(refunded.state, OrderState::Refunded);
    match domain::billing::order::ledger::lock_refund(env.state, &id).await {
        Err(domain::ApiError::Conflict(why)) => assert!(why.contains("already refunded"), "{why}"),
        other => panic!("a refunded credit locked again: {other:?}"),
    }

    // Redeemed: not a credit any more, not refundable.
    let (key, _, payment) = paying(&env).await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &payment).await.problem(409);
    let id = domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    let redeemed = env
        .req("POST", &path())
        .key(&key)
        .header(payment.0, &payment.1)
        .json(corrected)
        .send()
        .await;
    assert_eq!(redeemed.status, 201, "{}", redeemed.body);
    let lock = domain::billing::order::ledger::lock_refund(env.state, &id).await;
    assert!(
        matches!(lock, Err(domain::ApiError::Conflict(_))),
        "{lock:?}"
    );
}

/// Orders whose requests carry the most `user_data` fill DynamoDB's 1 MB page long before a
/// page's count: every index read follows the page DynamoDB cut (moto cuts at 1 MB too), so
/// the reconciler reaches the last order and the owner's listing shows every payment.
#[tokio::test]
async fn pages_cut_at_one_megabyte_are_followed_to_the_last_order() {
    const ORDERS: usize = 24;
    let env = TestEnv::with(crate::harness::Options {
        vars: vec![
            ("MAX_BODY_BYTES", "65536".into()),
            // Each killed handler leaves its paid slot held until it lapses, as a dead Lambda
            // does: 24 of them in a row are more than the default budget of 3 (of a pool of 9).
            ("MAX_PAID_IN_FLIGHT_PER_OWNER", ORDERS.to_string()),
            ("MAX_PAID_IN_FLIGHT", (3 * ORDERS).to_string()),
        ],
        ..Default::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let user_data = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 36 * 1024]);
    for i in 0..ORDERS {
        let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": format!("big-{i}"),
            "user_data": user_data});
        let res = env
            .req("POST", &path())
            .key(&key)
            .json(body.clone())
            .send()
            .await;
        assert_eq!(res.status, 402, "{i}: {}", res.body);
        let payment = pay(
            &PrivateKeySigner::random(),
            res.header("payment-required").unwrap(),
            2,
        );
        let request = env
            .req("POST", &path())
            .key(&key)
            .header(payment.0, &payment.1)
            .json(body);
        env.killed_at(domain::checkpoint::Step::Claimed, request)
            .await;
    }
    // The first page of the claimed orders is cut by size, not by its count.
    let first = env
        .store
        .oldest_in_state(OrderState::Claimed, 100, None)
        .await
        .unwrap();
    assert!(
        first.items.len() < ORDERS,
        "{} orders in one page",
        first.items.len()
    );
    assert!(first.next_cursor.is_some());
    // Passes (after the leases) drive every one of them: the page's cursor is followed (a
    // loaded machine may need a second pass for its time share).
    let mut provisioned = 0;
    for pass in 0..3 {
        if provisioned < ORDERS {
            let report = if pass == 0 {
                env.reconcile_in(60).await
            } else {
                env.pass().await
            };
            provisioned += report.outcomes.get("provisioned").copied().unwrap_or(0);
        }
    }
    assert_eq!(provisioned, ORDERS);
    assert_eq!(env.sim.server_count(), ORDERS);
    // The owner's listing, page after page, shows each payment once.
    let (mut seen, mut cursor) = (std::collections::BTreeSet::new(), None::<String>);
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=100&cursor={c}"),
            None => "limit=100".to_owned(),
        };
        let page = env
            .req("GET", "/api/payments")
            .query(&query)
            .key(&key)
            .send()
            .await
            .json();
        for item in page["items"].as_array().unwrap() {
            assert!(seen.insert(item["id"].as_str().unwrap().to_owned()));
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), ORDERS);
}
