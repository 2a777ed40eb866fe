//! Paid time (the leases issue): every paid server has a lease priced honestly, shown on every
//! answer, renewed with x402 on the same ledger, and ended by the reconciler — powered off at
//! `paidUntil`, deleted at `graceEndsAt` — each step recorded first and safe to repeat, a
//! renewal racing an expiry winning or losing whole. Time is moved forward by passing the
//! reconciler a later clock.

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::store::sandboxes::LeaseState;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, Options, PROJECT, TestEnv, TestResponse, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";
/// One hour periods: 0.0218 EUR × 1 h × 1.16 = 0.025288 USD.
const PERIOD: u64 = 3600;
const PERIOD_AMOUNT: u128 = 25_288;
const GRACE: u64 = 7200;

async fn env() -> TestEnv {
    TestEnv::with(Options {
        period_seconds: PERIOD,
        grace_seconds: GRACE,
        // Paid time is the subject here, not the first deployment's deadline.
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await
}

fn epoch(value: &Value) -> i64 {
    domain::time::parse_rfc3339(value.as_str().unwrap())
        .unwrap()
        .unix_timestamp()
}

/// Provisions a paid server and runs one reconciler pass a second later (it is delivered where
/// the environment lets it get ready); returns (server id, sandbox id, the 201's body).
pub(crate) async fn paid_server(env: &TestEnv, key: &str, hostname: &str) -> (u64, String, Value) {
    let (server, sandbox, created) = ordered_server(env, key, hostname).await;
    // Delivered (deployed, SSH answered, where the environment lets it): no longer on its first
    // deployment, so renewable.
    env.pass_after(1).await;
    (server, sandbox, created)
}

/// Provisions a paid server of plan [`PLAN`] (its payment from a new payer), still on its first
/// deployment: (server id, sandbox id, the 201's body).
pub(crate) async fn ordered_server(
    env: &TestEnv,
    key: &str,
    hostname: &str,
) -> (u64, String, Value) {
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname});
    let path = format!("/api/cloud/servers/{PROJECT}");
    let offer = env
        .req("POST", &path)
        .key(key)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let res = env
        .req("POST", &path)
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json();
    (
        server["id"].as_u64().unwrap(),
        server["sandboxId"].as_str().unwrap().to_owned(),
        server,
    )
}

async fn renewal(env: &TestEnv, key: &str, server: u64, periods: u32) -> TestResponse {
    env.req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(key)
        .json(json!({"periods": periods}))
        .send()
        .await
}

/// Asks for a renewal's offer and pays it from a new payer: (the payment header, the answer).
pub(crate) async fn paid_renewal(
    env: &TestEnv,
    key: &str,
    server: u64,
    periods: u32,
) -> ((&'static str, String), TestResponse) {
    let offer = renewal(env, key, server, periods).await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let res = send_renewal(env, key, server, periods, &payment).await;
    (payment, res)
}

async fn send_renewal(
    env: &TestEnv,
    key: &str,
    server: u64,
    periods: u32,
    payment: &(&str, String),
) -> TestResponse {
    env.req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(key)
        .header(payment.0, &payment.1)
        .json(json!({"periods": periods}))
        .send()
        .await
}

async fn lease_state(env: &TestEnv, sandbox: &str) -> LeaseState {
    env.store
        .sandbox(sandbox)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap()
        .state
}

#[tokio::test]
async fn the_lease_is_on_every_answer_with_a_warning_in_its_last_day() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let before = domain::time::now().unix_timestamp();
    let (server, sandbox_id, created) = paid_server(&env, &key, "leased").await;
    // The 201: one period from now, then the grace.
    let paid_until = epoch(&created["paidUntil"]);
    assert!(
        (paid_until - before - PERIOD as i64).abs() <= 5,
        "{created}"
    );
    assert_eq!(epoch(&created["graceEndsAt"]) - paid_until, GRACE as i64);
    // A one-hour lease is in its last 24 h: every answer warns, with the renewal route.
    let renew = format!("/api/cloud/servers/{server}/renewals");
    assert_eq!(created["expiresSoon"], true);
    assert_eq!(created["renew"], renew.as_str());
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["paidUntil"], created["paidUntil"]);
    assert_eq!(record["expiresSoon"], true);
    assert_eq!(record["renew"], renew.as_str());
    let listed = env
        .req("GET", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(listed[0]["paidUntil"], created["paidUntil"]);
    assert_eq!(listed[0]["expiresSoon"], true);
    let acted = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&key)
        .json(json!({"type": "reboot"}))
        .send()
        .await;
    assert_eq!(acted.status, 202, "{}", acted.body);
    assert_eq!(
        acted.header("x-lease-expires"),
        created["paidUntil"].as_str()
    );
    assert_eq!(acted.json()["graceEndsAt"], created["graceEndsAt"]);
    // Free servers have no lease.
    let (_, free_sandbox) = env.provision(&key, "cloud_vps_free", Some("free")).await;
    let free = env.sandbox(&key, &free_sandbox).await;
    assert!(free.get("paidUntil").is_none() && free["expiresSoon"] == false);
}

#[tokio::test]
async fn a_month_lease_does_not_warn() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (_, sandbox_id, created) = paid_server(&env, &key, "month").await;
    assert!(created.get("expiresSoon").is_none());
    assert_eq!(env.sandbox(&key, &sandbox_id).await["expiresSoon"], false);
}

#[tokio::test]
async fn a_renewal_is_paid_replayed_and_bound_to_its_request() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, created) = paid_server(&env, &key, "renewed").await;
    let paid_until = epoch(&created["paidUntil"]);
    // Two periods: twice the period price.
    let offer = renewal(&env, &key, server, 2).await;
    assert_eq!(offer.status, 402);
    assert_eq!(
        offer.json()["accepts"][0]["maxAmountRequired"],
        (2 * PERIOD_AMOUNT).to_string()
    );
    let (payment, res) = paid_renewal(&env, &key, server, 2).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert!(res.header("payment-response").is_some());
    let renewed = res.json();
    assert_eq!(renewed["periods"], 2);
    assert_eq!(renewed["amount"], (2 * PERIOD_AMOUNT).to_string());
    assert_eq!(epoch(&renewed["paidUntil"]), paid_until + 2 * PERIOD as i64);
    assert_eq!(
        epoch(&renewed["graceEndsAt"]),
        paid_until + 2 * PERIOD as i64 + GRACE as i64
    );
    let sandbox = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(sandbox["paidUntil"], renewed["paidUntil"]);
    // The paid time delivered: its first period and the two renewed.
    assert_eq!(sandbox["lease"]["paidSeconds"], 3 * PERIOD, "{sandbox}");
    // Replayed: the same answer, no new charge; on another request: 409.
    let replay = send_renewal(&env, &key, server, 2, &payment).await;
    assert_eq!(replay.json(), renewed);
    send_renewal(&env, &key, server, 3, &payment)
        .await
        .problem(409);
    assert_eq!(env.facilitator.settles(), 2);
    // Only its owner renews it; periods are 1 to 12.
    let bob = env.key(BOB).await;
    renewal(&env, &bob, server, 1).await.problem(403);
    renewal(&env, &key, server, 0).await.invalid("periods");
    renewal(&env, &key, server, 13).await.invalid("periods");
    // A free server has nothing to renew.
    let (free, _) = env.provision(&key, "cloud_vps_free", None).await;
    renewal(&env, &key, free, 1).await.problem(409);
}

#[tokio::test]
async fn a_credit_redeems_for_a_renewal() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, created) = paid_server(&env, &key, "kept").await;
    // A second server fails after payment: its payment becomes a credit of one period.
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "refused"});
    let path = format!("/api/cloud/servers/{PROJECT}");
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
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let credited = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    assert_eq!(credited.problem(409)["payment"]["state"], "credited");
    // Two periods cost more than the credit; one does not.
    send_renewal(&env, &key, server, 2, &payment)
        .await
        .problem(409);
    let res = send_renewal(&env, &key, server, 1, &payment).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(
        epoch(&res.json()["paidUntil"]),
        epoch(&created["paidUntil"]) + PERIOD as i64
    );
    assert_eq!(env.facilitator.settles(), 2, "no new charge");
    assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Active);
}

#[tokio::test]
async fn the_reconciler_powers_off_at_paid_until_and_deletes_at_grace_end_once() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = paid_server(&env, &key, "expiring").await;
    // Before paidUntil nothing happens.
    let early = env.reconcile_in(PERIOD as i64 - 60).await;
    assert_eq!(early.leases.expired, 0);
    // Past paidUntil: powered off, `expired`; a second pass changes nothing.
    let report = env.reconcile_in(PERIOD as i64 + 1).await;
    assert_eq!(report.leases.expired, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), Some(false));
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["status"], "expired");
    assert_eq!(record["expiresSoon"], false);
    let again = env.reconcile_in(PERIOD as i64 + 2).await;
    assert_eq!(
        (again.leases.expired, again.leases.due),
        (0, 0),
        "{again:?}"
    );
    // An expired server takes only power-off until renewed.
    env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&key)
        .json(json!({"type": "power-on"}))
        .send()
        .await
        .problem(409);
    // Nor a rebuild, whose new SSH key is refused before it reaches the provider.
    let keys_written = env.sim.calls("POST /ssh-keys");
    env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&key)
        .json(
            json!({"type": "rebuild", "image": "ubuntu_24_04_64bit", "hostname": "again",
                     "password": "nW7xKp2LmQ9z",
                     "sshKeys": [e2e::shell::public(&e2e::shell::key_pair())]}),
        )
        .send()
        .await
        .problem(409);
    assert_eq!(env.sim.calls("POST /ssh-keys"), keys_written);
    // Past graceEndsAt: deleted, `terminated`; a second pass changes nothing.
    let end = (PERIOD + GRACE) as i64 + 1;
    let report = env.reconcile_in(end).await;
    assert_eq!(report.leases.terminated, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), None);
    assert_eq!(env.sandbox(&key, &sandbox_id).await["status"], "terminated");
    let again = env.reconcile_in(end + 1).await;
    assert_eq!(again.leases.due, 0, "{again:?}");
    // A terminated server cannot be renewed.
    renewal(&env, &key, server, 1).await.problem(410);
}

/// An expiry reads the power state first: a server its owner already powered off is done —
/// no power-off is sent (a provider that refuses one for a server already off, 422, is never
/// asked).
#[tokio::test]
async fn an_expiry_reads_the_power_first_and_a_server_already_off_is_done() {
    let env = env().await;
    env.sim.set_strict_power(true);
    let key = env.key(ALICE).await;
    let (server, _, _) = paid_server(&env, &key, "already-off").await;
    let res = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&key)
        .json(json!({"type": "power-off"}))
        .send()
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    let actions = env.sim.calls(&format!("POST /servers/{server}/actions"));
    let report = env.reconcile_in(PERIOD as i64 + 1).await;
    assert_eq!(
        (report.leases.expired, report.leases.failures),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(
        env.sim.calls(&format!("POST /servers/{server}/actions")),
        actions
    );
    assert_eq!(env.sim.powered_on(server), Some(false));
}

/// A power-off that keeps failing alarms, and never keeps an unpaid server: past `graceEndsAt`
/// it is deleted whatever its power state.
#[tokio::test]
async fn past_grace_a_server_is_deleted_even_when_its_power_off_keeps_failing() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = paid_server(&env, &key, "stubborn").await;
    for _ in 0..3 {
        env.sim
            .inject(Fault::status(&format!("/servers/{server}/actions"), 500).on(Method::POST));
    }
    let report = env.reconcile_in(PERIOD as i64 + 1).await;
    assert_eq!(report.leases.failures, 1, "{report:?}");
    let report = env.reconcile_in(PERIOD as i64 + 62).await;
    assert_eq!(report.leases.failures, 1, "{report:?}");
    let lease = env
        .store
        .sandbox(&sandbox_id)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap();
    assert_eq!((lease.state, lease.failures), (LeaseState::Expiring, 2));
    assert_eq!(
        env.sim.powered_on(server),
        Some(true),
        "still running, unpaid"
    );
    let report = env.reconcile_in((PERIOD + GRACE) as i64 + 1).await;
    assert_eq!(report.leases.terminated, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), None, "deleted at the provider");
    assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Terminated);
}

#[tokio::test]
async fn a_failed_expiry_step_is_counted_and_tried_again() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = paid_server(&env, &key, "stubborn").await;
    env.sim
        .inject(Fault::status("/servers/", 500).on(Method::POST));
    let report = env.reconcile_in(PERIOD as i64 + 1).await;
    assert_eq!(report.leases.failures, 1, "{report:?}");
    let lease = env
        .store
        .sandbox(&sandbox_id)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap();
    assert_eq!((lease.state, lease.failures), (LeaseState::Expiring, 1));
    // The intent was recorded: the next pass (a minute later) finishes the step.
    let report = env.reconcile_in(PERIOD as i64 + 62).await;
    assert_eq!(report.leases.expired, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), Some(false));
}

#[tokio::test]
async fn a_renewal_after_expiry_powers_the_server_back_on() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, created) = paid_server(&env, &key, "revived").await;
    env.reconcile_in(PERIOD as i64 + 1).await;
    assert_eq!(env.sim.powered_on(server), Some(false));
    let (_, res) = paid_renewal(&env, &key, server, 1).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(env.sim.powered_on(server), Some(true));
    assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Active);
    // From max(paidUntil, now): the old paidUntil has passed, so from now.
    let until = epoch(&res.json()["paidUntil"]);
    assert!(
        until > epoch(&created["paidUntil"]) + PERIOD as i64,
        "{}",
        res.body
    );
    assert!(
        (until - env.clock.now() - PERIOD as i64).abs() <= 2,
        "{}",
        res.body
    );
    assert_ne!(env.sandbox(&key, &sandbox_id).await["status"], "expired");
}

#[tokio::test]
async fn a_renewal_racing_the_expiry_wins_or_loses_whole() {
    for _ in 0..3 {
        let env = env().await;
        let key = env.key(ALICE).await;
        let (server, sandbox_id, created) = paid_server(&env, &key, "raced").await;
        // The moment the paid time ends: the renewal is signed then, and races the pass.
        env.forward(PERIOD as i64 + 1);
        let offer = renewal(&env, &key, server, 1).await;
        let payment = pay(
            &PrivateKeySigner::random(),
            offer.header("payment-required").unwrap(),
            2,
        );
        let (res, _) = tokio::join!(
            send_renewal(&env, &key, server, 1, &payment),
            env.reconcile_in(PERIOD as i64 + 1)
        );
        assert_eq!(res.status, 201, "{}", res.body);
        // Whatever the order, the renewal holds: paid one period more, active, running —
        // a pass that lost its write to the renewal powered the server back on.
        env.reconcile_in(PERIOD as i64 + 2).await;
        assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Active);
        assert_eq!(env.sim.powered_on(server), Some(true));
        let record = env.sandbox(&key, &sandbox_id).await;
        // One period more, from the moment the old one ended (give or take a second).
        let added = epoch(&record["paidUntil"]) - epoch(&created["paidUntil"]);
        assert!(
            (PERIOD as i64..=PERIOD as i64 + 10).contains(&added),
            "{record}"
        );
    }
}

#[tokio::test]
async fn a_renewal_during_the_power_off_wins_over_the_expiry() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, created) = paid_server(&env, &key, "mid-step").await;
    env.forward(PERIOD as i64 + 1);
    let offer = renewal(&env, &key, server, 1).await;
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    // The expiry step has recorded `expiring` and waits on the provider's power-off while the
    // renewal lands; its final `expired` write must lose to the renewal.
    env.sim
        .inject(Fault::stall("/servers/", std::time::Duration::from_millis(1500)).on(Method::POST));
    let renew = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        send_renewal(&env, &key, server, 1, &payment).await
    };
    let (report, res) = tokio::join!(env.reconcile_in(PERIOD as i64 + 1), renew);
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(report.leases.expired, 0, "{report:?}");
    assert_eq!(env.sim.unfired_faults(), 0);
    assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Active);
    assert_eq!(env.sim.powered_on(server), Some(true));
    let record = env.sandbox(&key, &sandbox_id).await;
    let added = epoch(&record["paidUntil"]) - epoch(&created["paidUntil"]);
    assert!(
        (PERIOD as i64..=PERIOD as i64 + 10).contains(&added),
        "{record}"
    );
    assert_ne!(record["status"], "expired");
}

#[tokio::test]
async fn a_deleted_servers_lease_stops() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = paid_server(&env, &key, "deleted").await;
    let res = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Ended);
    let changes = |env: &TestEnv| {
        let log = env.upstream_log();
        log.iter().filter(|r| !r.starts_with("GET ")).count()
    };
    let before = changes(&env);
    let report = env.reconcile_in((PERIOD + GRACE) as i64 + 1).await;
    assert_eq!(report.leases.due, 0, "{report:?}");
    // The refresher may read it (and find it gone); nothing acts on it.
    assert_eq!(changes(&env), before, "no provider action");
    renewal(&env, &key, server, 1).await.problem(410);
}

#[tokio::test]
async fn a_renewal_racing_the_termination_wins_or_becomes_a_credit() {
    for _ in 0..3 {
        let env = env().await;
        let key = env.key(ALICE).await;
        let (server, sandbox_id, _) = paid_server(&env, &key, "last-minute").await;
        env.reconcile_in(PERIOD as i64 + 1).await;
        // The moment the grace ends: the renewal is signed then, and races the deletion.
        env.forward((PERIOD + GRACE) as i64 + 1);
        let offer = renewal(&env, &key, server, 1).await;
        let payment = pay(
            &PrivateKeySigner::random(),
            offer.header("payment-required").unwrap(),
            2,
        );
        let (res, _) = tokio::join!(
            send_renewal(&env, &key, server, 1, &payment),
            env.reconcile_in((PERIOD + GRACE) as i64 + 1)
        );
        match res.status {
            // The renewal came first: the server lives, its lease moved on.
            201 => assert!(env.sim.powered_on(server).is_some(), "{}", res.body),
            // The deletion came first: the paid renewal is a credit, and the answer says so.
            409 => {
                let doc = res.problem(409);
                assert_eq!(doc["payment"]["state"], "credited", "{doc}");
                assert!(res.header("payment-response").is_some());
                assert_eq!(env.sim.powered_on(server), None);
                assert_eq!(lease_state(&env, &sandbox_id).await, LeaseState::Terminated);
            }
            other => panic!("{other}: {}", res.body),
        }
        assert_eq!(env.facilitator.settles(), 2);
    }
}

/// A renewal answers to the whole key policy — the server's plan and region, the price of one
/// period — and to `MAX_PAID_AHEAD_SECONDS`, all before any 402.
#[tokio::test]
async fn renewals_are_held_to_the_key_policy_and_the_paid_ahead_bound() {
    let env = TestEnv::with(Options {
        period_seconds: PERIOD,
        grace_seconds: GRACE,
        vars: vec![
            ("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into()),
            ("MAX_PAID_AHEAD_SECONDS", (5 * PERIOD).to_string()),
        ],
        ..Options::default()
    })
    .await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let all = env.key(&format!("{:#x}", signer.address())).await;
    let (server, _, _) = paid_server(&env, &all, "bounded").await;
    let bounded = |policy: Value| {
        let (env, session) = (&env, session.clone());
        let body = json!({"name": "bounded", "policy": policy});
        async move { env.generate_key(&session, body).await.1 }
    };
    // One period costs 0.025288 USD.
    for (policy, limit) in [
        (
            json!({"allowedPlans": ["B1-2-2gb-40s-shared"]}),
            "allowedPlans",
        ),
        (
            json!({"allowedRegions": ["NL-Amsterdam"]}),
            "allowedRegions",
        ),
        (json!({"maxPricePerServer": 0.02}), "maxPricePerServer"),
    ] {
        let key = bounded(policy).await;
        let res = renewal(&env, &key, server, 1).await;
        assert!(res.header("payment-required").is_none(), "{limit}");
        let doc = res.problem(403);
        assert_eq!(doc["limit"], limit, "{doc}");
    }
    let within = bounded(json!({"maxPricePerServer": 0.03, "allowedPlans": [PLAN],
        "allowedRegions": ["LT-Siauliai"]}))
    .await;
    assert_eq!(renewal(&env, &within, server, 1).await.status, 402);
    // Paid until now + 1 h: 4 more periods reach 5 h ahead (the bound), 5 go past it.
    assert_eq!(renewal(&env, &all, server, 4).await.status, 402);
    let doc = renewal(&env, &all, server, 5).await.problem(400);
    assert_eq!(doc["field"], "periods", "{doc}");
}
