//! The holes in the money that the issue "money conserved under every interleaving" names,
//! each closed by a test that fails without its fix: a sweep that deletes a server an order
//! adopted while it read, a credit that could not split twice, remainders that reset the
//! undelivered count, a server powered off to be paid back, a renewal lost with a first
//! deployment, answers that said "nothing was charged" of a charged payment, a racing request
//! that took the winner's server, a reconciler pass whose orders ate the leases' time, a
//! listing that shifted between pages.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::store::payments::OrderState;
use domain::x402::PaymentKey;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::dynamo_faults::{CLAIM, Kind, to_state};
use crate::harness::{ALICE, Options, PROJECT, TestEnv, TestResponse, owner, pay};

const SMALL: &str = "B1-1-1gb-20s-shared";
const DOUBLE: &str = "B1-2-2gb-40s-shared";
const BARE_METAL: &str = "e5_1650v4";

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body(plan: &str, hostname: &str) -> Value {
    json!({"plan": plan, "region": "LT-Siauliai", "hostname": hostname})
}

/// A payment of a fresh payer for `plan`'s offer to `key`.
async fn payment_for(env: &TestEnv, key: &str, plan: &str) -> (&'static str, String) {
    let offer = env
        .req("POST", &path())
        .key(key)
        .json(body(plan, "offer"))
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    )
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String), body: Value) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await
}

fn refuse_next_create(env: &TestEnv) {
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
}

/// Servers never get ready (SSH refused) and the VPS deployment deadline is 120 s.
async fn never_ready(deploying_forever: bool) -> TestEnv {
    let env = TestEnv::with(Options {
        vars: vec![
            ("SSH_PROBE_TARGET", "127.0.0.1:9".into()),
            ("DEPLOY_DEADLINE_VPS_SECONDS", "120".into()),
        ],
        ..Options::default()
    })
    .await;
    if deploying_forever {
        env.sim
            .set_stages(Duration::ZERO, Duration::from_secs(100_000));
    }
    env
}

/// Finding 2: the remainder of a cheaper redemption took the fixed key `<key>#1`, written only
/// if new, so a credit that split once and became a credit again could never be redeemed more
/// cheaply again (409 "retry" for ever). Each split now takes the payment's next number, and
/// the chain stays linked.
#[tokio::test]
async fn a_credit_that_split_once_is_redeemed_more_cheaply_again() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, BARE_METAL).await;
    refuse_next_create(&env);
    let doc = send(&env, &key, &payment, body(BARE_METAL, "metal"))
        .await
        .problem(409);
    let id = PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    // Redeemed for a cheaper plan whose create is refused too: a credit again, and a remainder.
    refuse_next_create(&env);
    send(&env, &key, &payment, body(DOUBLE, "double"))
        .await
        .problem(409);
    let order = env.store.order(&id).await.unwrap().unwrap();
    assert_eq!(order.state, OrderState::Credited);
    assert_eq!(order.remainder, Some(id.remainder(1)));
    // Redeemed more cheaply again: a server, and a second remainder linked before the first.
    let cheaper = send(&env, &key, &payment, body(SMALL, "small")).await;
    assert_eq!(cheaper.status, 201, "{}", cheaper.body);
    let order = env.store.order(&id).await.unwrap().unwrap();
    assert_eq!(order.remainder, Some(id.remainder(2)));
    let second = env.store.order(&id.remainder(2)).await.unwrap().unwrap();
    assert_eq!(second.state, OrderState::Credited);
    assert_eq!(second.remainder, Some(id.remainder(1)));
    // What was paid is what was delivered plus what is still a credit.
    let paid: u128 = doc["payment"]["amount"].as_str().unwrap().parse().unwrap();
    let mut held = 0u128;
    for key in [id.clone(), id.remainder(1), id.remainder(2)] {
        held += env
            .store
            .order(&key)
            .await
            .unwrap()
            .unwrap()
            .amount
            .parse::<u128>()
            .unwrap();
    }
    assert_eq!(held, paid);
    assert_eq!(env.facilitator.settles(), 1);
}

/// Finding 4, remainders: a remainder copied its parent's undelivered count, so each cheaper
/// redemption gave two more undelivered servers. The payment's count is now the sum over its
/// chain: two undelivered servers in all, and no credit of the payment redeems again.
#[tokio::test]
async fn a_payment_and_its_remainders_share_two_undelivered_servers() {
    let env = never_ready(true).await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, DOUBLE).await;
    assert_eq!(
        send(&env, &key, &payment, body(DOUBLE, "one")).await.status,
        201
    );
    assert_eq!(env.pass_after(121).await.refresh.failed, 1);
    // Undelivered once: redeemed at half the price, the other half a remainder.
    let two = send(&env, &key, &payment, body(SMALL, "two")).await;
    assert_eq!(two.status, 201, "{}", two.body);
    assert_eq!(env.pass_after(130).await.refresh.failed, 1);
    // Undelivered twice: neither the payment's own credit nor its remainder redeems.
    let doc = send(&env, &key, &payment, body(SMALL, "three"))
        .await
        .problem(409);
    assert!(
        doc["detail"].as_str().unwrap().contains("only be refunded"),
        "{doc}"
    );
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 0));
    // The listing says so of both credits: the remainder's (none of its own undelivered) is
    // counted over its whole payment.
    let listed = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    let credits: Vec<&Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "credited")
        .collect();
    assert_eq!(credits.len(), 2, "{listed}");
    for credit in credits {
        assert_eq!(credit["credit"]["redeemable"], false, "{credit}");
    }
}

/// Finding 4, power: an owner who powered the server off just before its deployment deadline
/// (SSH never answered: a firewall) got it deleted and the payment back as a credit — a server
/// used, then paid back. A server its owner acts on is delivered.
#[tokio::test]
async fn a_server_its_owner_powered_off_before_its_deadline_stays_delivered() {
    let env = never_ready(false).await;
    let key = env.key(ALICE).await;
    let (server, sandbox, _) = crate::paid_time::paid_server(&env, &key, "firewalled").await;
    env.pass_after(5).await;
    let off = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&key)
        .json(json!({"type": "power-off"}))
        .send()
        .await;
    assert_eq!(off.status, 202, "{}", off.body);
    let report = env.pass_after(120).await.refresh;
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(env.sim.powered_on(server), Some(false), "kept, not deleted");
    assert_ne!(env.sandbox(&key, &sandbox).await["status"], "credited");
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items[0].state, OrderState::Provisioned);
}

/// Finding 5: a renewal paid during the first deployment was lost when the deployment deadline
/// deleted the server (only the provisioning payment was credited). A server on its first
/// deployment is not offered a renewal: 409 before any 402.
#[tokio::test]
async fn a_server_on_its_first_deployment_is_offered_no_renewal() {
    let env = never_ready(true).await;
    let key = env.key(ALICE).await;
    let (server, _, _) = crate::paid_time::paid_server(&env, &key, "young").await;
    let renew = env
        .req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    let doc = renew.problem(409);
    assert!(
        doc["detail"].as_str().unwrap().contains("first deployment"),
        "{doc}"
    );
    assert!(renew.header("payment-required").is_none());
    assert_eq!(env.facilitator.settles(), 1);
}

/// Finding 6, settlement: when the `settled` write failed after the chain showed the transfer,
/// the answer said "not settled yet" without the payment response. It now says what was
/// charged, with the payment response, and the order completes.
#[tokio::test]
async fn a_settlement_whose_write_fails_is_answered_as_charged() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, SMALL).await;
    env.faults.arm(
        "TransactWriteItems",
        &to_state("settled"),
        Kind::Throttle,
        3,
    );
    let res = send(&env, &key, &payment, body(SMALL, "charged")).await;
    assert_eq!(env.faults.unfired(), 0);
    assert!(res.status >= 500, "{}", res.body);
    assert!(res.header("payment-response").is_some(), "{}", res.body);
    let detail = res.json()["detail"].as_str().unwrap().to_owned();
    assert!(!detail.contains("not settled yet"), "{detail}");
    assert!(!detail.contains("nothing was charged"), "{detail}");
    assert!(detail.contains("was charged"), "{detail}");
    // The reconciler completes the order; the same payment then gets its server, charged once.
    env.reconcile().await;
    let again = send(&env, &key, &payment, body(SMALL, "charged")).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(env.facilitator.settles(), 1);
}

/// Finding 6, redemption: a redemption refused by a concurrent change of the key's usage said
/// "nothing was charged, retry" — of a payment charged when it was first used. The refusal no
/// longer says so; a claim's refusal (nothing charged indeed) still does.
#[tokio::test]
async fn a_blocked_redemption_does_not_say_nothing_was_charged() {
    let env = TestEnv::new().await;
    let principal = crate::spend_limits::key_principal(owner(ALICE), "key_1", &json!({}));
    let refused = domain::ratelimit::spend::over_limit(
        &env.store,
        &principal,
        0,
        true,
        env.state.clock.datetime(),
    )
    .await;
    match refused {
        domain::ApiError::Conflict(why) => assert!(!why.contains("nothing was charged"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// Finding 7, racing requests: a request that lost the claim to a concurrent one resumed the
/// winner's order whatever its own request was — and answered the winner's server. It is now
/// classified as a replay would be: another request of the payment is a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_loses_the_claim_to_another_request_gets_a_conflict() {
    // Shared with a spawned request for the life of the test process.
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::new().await));
    let key = env.key(ALICE).await;
    let payment = payment_for(env, &key, SMALL).await;
    // B looks the payment up (unknown), then its claim is held...
    env.faults.arm("TransactWriteItems", CLAIM, Kind::Hold, 1);
    let (b_key, b_payment) = (key.clone(), payment.clone());
    let b = tokio::spawn(async move {
        env.req("POST", &path())
            .key(&b_key)
            .header(b_payment.0, &b_payment.1)
            .json(body(SMALL, "b"))
            .send()
            .await
    });
    let held = env.faults.held().await;
    // ...while A, the same payment for another request, claims it and gets its server.
    let a = send(env, &key, &payment, body(SMALL, "a")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    drop(held);
    let b = b.await.unwrap();
    let doc = b.problem(409);
    assert!(
        doc["detail"]
            .as_str()
            .unwrap()
            .contains("different request"),
        "{doc}"
    );
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
}

/// Finding 1: the sweep read every sandbox, then each order later; a replay in between adopted
/// the server, and the sweep, seeing the stale sandbox beside a `provisioned` order, deleted a
/// server just paid for. An orphan is judged again, from its order and then its sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_spares_a_server_its_order_adopts_while_it_reads() {
    let env = TestEnv::with(Options {
        vars: vec![("SWEEP_SECONDS", "1".into())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, SMALL).await;
    // The create lands 30 s late: the order waits for it.
    env.sim.commit_next_create_after(Duration::from_secs(30));
    let first = send(&env, &key, &payment, body(SMALL, "late")).await;
    assert_eq!(first.status, 202, "{}", first.body);
    let order = env
        .store
        .orders_of(&owner(ALICE), 10, None)
        .await
        .unwrap()
        .items[0]
        .clone();
    assert_eq!(order.state, OrderState::Creating);
    env.clock.advance(Duration::from_secs(31));
    // The sweep lists the landed server, reads its sandbox (no server yet), and is held just
    // before it reads the order...
    env.faults
        .arm("GetItem", &format!("PAYMENT#{}", order.id), Kind::Hold, 1);
    let state = env.state;
    let sweep = tokio::spawn(crate::iam::as_function("reconciler", async move {
        let deadline = domain::deadline::Deadline::after(Duration::from_secs(20));
        domain::servers::sweep::pass(state, &deadline).await
    }));
    let held = env.faults.held().await;
    // ...while the replay adopts the server.
    let replay = send(&env, &key, &payment, body(SMALL, "late")).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    let server = replay.json()["id"].as_u64().unwrap();
    drop(held);
    let report = sweep.await.unwrap().unwrap();
    assert_eq!((report.tagged, report.orphans), (1, 0), "{report:?}");
    assert_eq!(env.sim.server_ids(PROJECT), vec![server]);
}

/// Finding 7, paging: offset paging skipped a server when one before it was deleted between
/// pages, so a search answered "missing" for a server that exists (and the order would create
/// a second one). A listing whose total moved while it was read is read again.
#[tokio::test]
async fn a_listing_that_shifts_between_pages_is_read_again() {
    let env = TestEnv::new().await;
    let foreign = env.sim.create_foreign_server(PROJECT);
    let ours = env
        .sim
        .create_tagged_server(PROJECT, json!({"svc-sandbox": "sbx_wanted"}));
    env.sim.set_page_cap(Some(1));
    // The first page shows the foreign server, which is deleted before the second page.
    env.sim.delete_after_next_page(foreign);
    let upstream = env.state.upstream().unwrap();
    let found = upstream
        .find_tagged(PROJECT, ("svc-sandbox", "sbx_wanted"), None)
        .await
        .unwrap();
    assert_eq!(found.and_then(|s| s["id"].as_u64()), Some(ours));
}

/// Finding 7, 404s: lease steps took the provider's 404 as "off" or "deleted", so a changed
/// token or team marked a whole running fleet expired. Most of a pass's servers answering 404
/// are believed none; the steps run once the provider knows them again.
#[tokio::test]
async fn lease_steps_do_not_believe_a_provider_that_forgets_every_server() {
    let env = TestEnv::with(Options {
        period_seconds: 60,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let mut servers = Vec::new();
    for n in 0..3 {
        let host = format!("fleet-{n}");
        servers.push(crate::paid_time::paid_server(&env, &key, &host).await.0);
    }
    env.pass_after(5).await;
    env.sim.forget_all_servers(true);
    let report = env.pass_after(60).await.leases;
    assert_eq!((report.expired, report.failures), (0, 3), "{report:?}");
    env.sim.forget_all_servers(false);
    env.clock.advance(Duration::from_secs(61));
    let report = env.pass().await.leases;
    assert_eq!(report.expired, 3, "{report:?}");
    for server in servers {
        assert_eq!(env.sim.powered_on(server), Some(false));
    }
}

/// Finding 7, idempotency tokens: a write re-made from the same order as read (a renewal's
/// lease read again after a racing change) reused its `ClientRequestToken` with other
/// parameters — real DynamoDB refuses that (`IdempotentParameterMismatchException`), moto does
/// not. Tokens now digest their items; the tests' DynamoDB hook refuses any reuse with other
/// parameters, as DynamoDB does.
#[tokio::test]
async fn an_order_write_made_again_with_other_items_takes_another_token() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, SMALL).await;
    refuse_next_create(&env);
    send(&env, &key, &payment, body(SMALL, "credit"))
        .await
        .problem(409);
    let credit = env
        .store
        .orders_of(&owner(ALICE), 10, None)
        .await
        .unwrap()
        .items[0]
        .clone();
    let credit = env.store.order(&credit.id).await.unwrap().unwrap();
    let existing = env
        .store
        .sandbox(&credit.sandbox_id)
        .await
        .unwrap()
        .unwrap();
    let held = env
        .store
        .take_order(
            &credit,
            "att_test",
            env.clock.now() + 60,
            env.clock.now(),
            env.clock.timestamp(),
        )
        .await
        .unwrap();
    let domain::store::payments::Advance::Done(held) = held else {
        panic!("{held:?}")
    };
    // A write whose side item fails its condition (a sandbox that exists already)...
    let blocked = env
        .store
        .advance_order(
            &held,
            OrderState::Credited,
            Default::default(),
            domain::store::payments::SideWrites {
                new_sandbox: Some(existing),
                ..Default::default()
            },
            0,
            env.clock.timestamp(),
        )
        .await
        .unwrap();
    assert_eq!(blocked, domain::store::payments::Advance::Blocked);
    // ...made again from the same order with other items: written, under a token of its own.
    let done = env
        .store
        .advance_order(
            &held,
            OrderState::Credited,
            Default::default(),
            Default::default(),
            0,
            env.clock.timestamp(),
        )
        .await
        .unwrap();
    assert!(
        matches!(done, domain::store::payments::Advance::Done(_)),
        "{done:?}"
    );
}

/// Finding 3: an order that started inside its share of a reconciler pass ran to the pass's
/// deadline (a search of many slow pages checked no deadline between them), so lease steps
/// never ran and unpaid servers ran past `paidUntil`. Orders now keep to their share, a
/// search to its deadline, and the leases due get theirs.
#[tokio::test]
async fn orders_leave_the_leases_their_share_of_a_pass() {
    const PAGES: usize = 14;
    let env = TestEnv::with(Options {
        period_seconds: 60,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, _, _) = crate::paid_time::paid_server(&env, &key, "leased").await;
    // An order whose create never lands: every pass searches the project for it.
    let payment = payment_for(&env, &key, SMALL).await;
    env.sim
        .commit_next_create_after(Duration::from_secs(100_000));
    assert_eq!(
        send(&env, &key, &payment, body(SMALL, "late")).await.status,
        202
    );
    // The project's listing is many pages, each slow.
    for _ in 0..PAGES {
        env.sim.create_foreign_server(PROJECT);
    }
    env.sim.set_page_cap(Some(1));
    for _ in 0..PAGES + 2 {
        env.sim.inject(
            Fault::stall(
                &format!("/projects/{PROJECT}/servers"),
                Duration::from_millis(800),
            )
            .on(Method::GET),
        );
    }
    env.clock.advance(Duration::from_secs(61));
    let deadline = domain::deadline::Deadline::after(Duration::from_secs(12));
    let report =
        crate::iam::as_function("reconciler", domain::reconciler::pass(env.state, &deadline))
            .await
            .unwrap();
    assert_eq!(report.taken, 1, "{report:?}");
    assert_eq!(
        (report.leases.expired, report.leases.behind),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(env.sim.powered_on(server), Some(false));
}

/// Found by the simulation (seed 1170): a request stalled between writing its `creating` intent
/// and sending the create, past its lease; a reconciler pass took the order over, found no
/// server and created one; the stalled request then sent its own create — two servers for one
/// payment. An attempt never sends a create once its lease ended, and a create counts as
/// possibly sent until its intent's lease ends (plus the settle time).
#[tokio::test]
async fn a_create_is_never_sent_after_its_attempts_lease_ended() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let payment = payment_for(&env, &key, SMALL).await;
    env.checkpoints
        .pause_at(domain::checkpoint::Step::BeforeCreate);
    let takeover = async {
        env.checkpoints.reached.notified().await;
        // Past the stalled attempt's lease, and past its create's window.
        env.clock.advance(Duration::from_secs(400));
        let report = env.pass().await;
        env.checkpoints.resume();
        report
    };
    let (stalled, report) = tokio::join!(send(&env, &key, &payment, body(SMALL, "one")), takeover);
    assert_eq!(report.taken, 1, "the pass took the order over: {report:?}");
    assert_eq!(report.outcomes.get("provisioned"), Some(&1), "{report:?}");
    assert_eq!(stalled.status, 202, "{}", stalled.body);
    assert!(stalled.body.contains("lease ended"), "{}", stalled.body);
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    let sandbox = &orders.items[0].sandbox_id;
    let tag = domain::billing::order::effects::SANDBOX_TAG;
    assert_eq!(
        env.sim.servers_tagged(tag, sandbox),
        1,
        "one server for one payment"
    );
    let again = send(&env, &key, &payment, body(SMALL, "one")).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(env.facilitator.settles(), 1);
}

/// Racing requests, the other way round (issue 44's checks on chain): a request that looked its
/// payment up before a concurrent request with the same payment claimed and settled it then
/// finds the nonce used on chain. It follows that order — the same request gets the same
/// server — and is never told "nothing was charged" (402) about a payment that was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finds_its_nonce_spent_by_a_concurrent_one_follows_that_order() {
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::new().await));
    let key = env.key(ALICE).await;
    let payment = payment_for(env, &key, SMALL).await;
    // B looks the payment up (unknown), then is held before its checks on chain...
    env.faults.arm("GetItem", "KEYAPPROVALS#", Kind::Hold, 1);
    let (b_key, b_payment) = (key.clone(), payment.clone());
    let b = tokio::spawn(async move {
        env.req("POST", &path())
            .key(&b_key)
            .header(b_payment.0, &b_payment.1)
            .json(body(SMALL, "same"))
            .send()
            .await
    });
    let held = env.faults.held().await;
    // ...while A, the same request with the same payment, claims, settles and gets its server.
    let a = send(env, &key, &payment, body(SMALL, "same")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    drop(held);
    let b = b.await.unwrap();
    assert_eq!(b.status, 201, "{}", b.body);
    assert_eq!(b.json()["id"], a.json()["id"]);
    assert_eq!((env.facilitator.settles(), env.sim.server_count()), (1, 1));
}
