//! Key spend and server limits (the key-policies issue, point 2): `dailySpendLimit`,
//! `monthlySpendLimit` and `maxActiveServers` are refused before any 402 (403
//! `policy-violation` naming the limit and what remains), reserved in the transaction that
//! claims the payment, given back when the payment ends without a charge (refused at
//! settlement, expired unused, refunded), and shown in the key listing; two concurrent paid
//! requests cannot both pass a limit that fits one.

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::billing::order::{Binding, Target};
use domain::checkpoint::Step;
use domain::identity::auth::{Credential, Principal};
use domain::policy::{Policy, Scope};
use domain::store::payments::{Claim, OrderKind, OrderState};
use domain::store::sandboxes::PlanClass;
use domain::x402::verify::VerifiedPayment;
use e2e::facilitator::VerifyMode;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{PROJECT, TestEnv, TestResponse, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";
/// One period of [`PLAN`]: 18.46024 USD.
const PRICE: f64 = 18.46024;

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body(hostname: &str) -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname})
}

fn assert_usage(usage: &Value, today: f64, month: f64, servers: u64) {
    let close = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
    assert!(close(&usage["spentToday"], today), "{usage}");
    assert!(close(&usage["spentThisMonth"], month), "{usage}");
    assert_eq!(usage["activeServers"], servers, "{usage}");
}

async fn offer(env: &TestEnv, key: &str, hostname: &str) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .json(body(hostname))
        .send()
        .await
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String), hostname: &str) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body(hostname))
        .send()
        .await
}

/// Asks for an offer and pays it from a new payer: the payment header.
async fn payment(env: &TestEnv, key: &str, hostname: &str) -> (&'static str, String) {
    let offered = offer(env, key, hostname).await;
    assert_eq!(offered.status, 402, "{}", offered.body);
    pay(
        &PrivateKeySigner::random(),
        offered.header("payment-required").unwrap(),
        2,
    )
}

/// A 403 `policy-violation` of `limit` with `remaining` left, and no offer.
fn refused(res: &TestResponse, limit: &str, remaining: f64) {
    assert!(res.header("payment-required").is_none(), "{}", res.body);
    let doc = res.problem(403);
    assert_eq!(doc["type"], "/problems/policy-violation", "{doc}");
    assert_eq!(doc["limit"], limit, "{doc}");
    assert!(
        (doc["remaining"].as_f64().unwrap() - remaining).abs() < 1e-9,
        "{doc}"
    );
    assert!(doc["detail"].as_str().unwrap().contains(limit), "{doc}");
}

#[tokio::test]
async fn spend_limits_count_new_servers_and_renewals_and_refuse_before_any_402() {
    let env = TestEnv::new().await;
    let (session, id, key) = env
        .owner_with_key(json!({"dailySpendLimit": 40, "monthlySpendLimit": 100}))
        .await;
    assert_usage(&env.usage(&session, &id).await, 0.0, 0.0, 0);

    let first = payment(&env, &key, "one").await;
    let res = send(&env, &key, &first, "one").await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json()["id"].as_u64().unwrap();
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    // Delivered (deployed, SSH answered): no longer on its first deployment, so renewable.
    env.pass_after(1).await;

    // A renewal is spend too.
    let renewals = format!("/api/cloud/servers/{server}/renewals");
    let (_, res) = crate::paid_time::paid_renewal(&env, &key, server, 1).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_usage(&env.usage(&session, &id).await, 2.0 * PRICE, 2.0 * PRICE, 1);

    // 3.07952 USD left today: neither a new server nor a renewal is offered.
    refused(
        &offer(&env, &key, "three").await,
        "dailySpendLimit",
        40.0 - 2.0 * PRICE,
    );
    let res = env
        .req("POST", &renewals)
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    refused(&res, "dailySpendLimit", 40.0 - 2.0 * PRICE);
    // Nor over MCP.
    let res = env
        .req("POST", "/mcp")
        .key(&key)
        .header("accept", "application/json, text/event-stream")
        .json(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "provision_server",
            "arguments": {"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai"}}}),
        )
        .send()
        .await;
    let result = &res.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["limit"], "dailySpendLimit");
    assert_eq!(env.facilitator.settles(), 2);

    // The owner raises the daily limit: the monthly one is next (100 - 2 × 18.46 = 63.08 left,
    // enough for three more, not four).
    let changed = env
        .req("PATCH", &format!("/api/keys/{id}"))
        .bearer(&session)
        .json(json!({"policy": {"dailySpendLimit": 1000, "monthlySpendLimit": 100}}))
        .send()
        .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_usage(&changed.json()["usage"], 2.0 * PRICE, 2.0 * PRICE, 1);
    for n in 0..3 {
        let hostname = format!("more-{n}");
        let paid = payment(&env, &key, &hostname).await;
        assert_eq!(send(&env, &key, &paid, &hostname).await.status, 201);
    }
    refused(
        &offer(&env, &key, "over").await,
        "monthlySpendLimit",
        100.0 - 5.0 * PRICE,
    );
    assert_usage(&env.usage(&session, &id).await, 5.0 * PRICE, 5.0 * PRICE, 4);
}

#[tokio::test]
async fn spend_ended_without_a_charge_comes_back_and_a_credit_keeps_it_until_refunded() {
    let env = TestEnv::new().await;
    let (session, id, key) = env.owner_with_key(json!({"dailySpendLimit": 20})).await;

    // Refused by the facilitator's verify, before any settle: the order is rejected and its
    // spend given back.
    let refused_payment = payment(&env, &key, "a").await;
    env.facilitator
        .next_verify(VerifyMode::Invalid("insufficient_funds".into()));
    assert_eq!(send(&env, &key, &refused_payment, "a").await.status, 402);
    assert_usage(&env.usage(&session, &id).await, 0.0, 0.0, 0);

    // Claimed (reserved), then the handler dies; the authorization expires unused and the
    // reconciler ends the order: nothing charged, the spend given back.
    let unsettled = payment(&env, &key, "e").await;
    let request = env
        .req("POST", &path())
        .key(&key)
        .header(unsettled.0, &unsettled.1)
        .json(body("e"));
    env.killed_at(Step::Claimed, request).await;
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    let report = env.reconcile_in(300).await;
    assert_eq!(report.outcomes.get("expired"), Some(&1), "{report:?}");
    assert_usage(&env.usage(&session, &id).await, 0.0, 0.0, 0);

    // Paid, then refused by the provider: a credit. The money moved, so the spend stays (and
    // the server that never came does not count).
    let credited = payment(&env, &key, "b").await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &credited, "b").await.problem(409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 0);
    refused(
        &offer(&env, &key, "c").await,
        "dailySpendLimit",
        20.0 - PRICE,
    );

    // The operator refunds the credit: the spend comes back.
    let payment_id =
        &domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    // Locked first: the owner can no longer redeem it while it is paid out.
    domain::billing::order::ledger::lock_refund(env.state, payment_id)
        .await
        .unwrap();
    assert_eq!(send(&env, &key, &credited, "d").await.status, 409);
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 0);
    domain::billing::order::ledger::refund(env.state, payment_id, "0xrefund")
        .await
        .unwrap();
    assert_usage(&env.usage(&session, &id).await, 0.0, 0.0, 0);
    let paid = payment(&env, &key, "d").await;
    assert_eq!(send(&env, &key, &paid, "d").await.status, 201);
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    assert_eq!(env.facilitator.settles(), 2);
}

#[tokio::test]
async fn max_active_servers_counts_servers_until_they_end() {
    let env = TestEnv::new().await;
    let (session, id, key) = env.owner_with_key(json!({"maxActiveServers": 2})).await;
    let free = |hostname: &'static str| {
        let env = &env;
        let key = key.clone();
        async move {
            env.req("POST", &path())
                .key(&key)
                .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai",
                             "hostname": hostname}))
                .send()
                .await
        }
    };
    let first = free("one").await;
    assert_eq!(first.status, 201, "{}", first.body);
    let paid = payment(&env, &key, "two").await;
    assert_eq!(send(&env, &key, &paid, "two").await.status, 201);
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 2);

    // Full: refused before any create or offer.
    refused(&free("three").await, "maxActiveServers", 0.0);
    refused(&offer(&env, &key, "three").await, "maxActiveServers", 0.0);
    assert_eq!(env.sim.server_count(), 2);

    // A deleted server stops counting.
    let server = first.json()["id"].as_u64().unwrap();
    let deleted = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    assert_eq!(free("four").await.status, 201);
    refused(&free("five").await, "maxActiveServers", 0.0);

    // A free create the provider refuses gives its slot back.
    let (_, other_id, other) = env.owner_with_key(json!({"maxActiveServers": 1})).await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let res = env
        .req("POST", &path())
        .key(&other)
        .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
        .send()
        .await;
    res.problem(400);
    let res = env
        .req("POST", &path())
        .key(&other)
        .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let servers = env
        .store
        .usages(&[other_id.as_str()], "-", "-")
        .await
        .unwrap()[&other_id]
        .servers
        .clone();
    assert_eq!(servers.len(), 1, "{servers:?}");
}

#[tokio::test]
async fn concurrent_paid_requests_cannot_both_pass_a_limit_that_fits_one() {
    let env = TestEnv::new().await;
    for policy in [
        json!({"dailySpendLimit": 30}),
        json!({"monthlySpendLimit": 30}),
        json!({"maxActiveServers": 1}),
    ] {
        let (session, id, key) = env.owner_with_key(policy.clone()).await;
        let settled = env.facilitator.settles();
        // As many as one owner may have in flight (`MAX_PAID_IN_FLIGHT_PER_OWNER`, 3).
        let hostnames: Vec<String> = (0..3).map(|n| format!("race-{n}")).collect();
        let mut payments = Vec::new();
        for hostname in &hostnames {
            payments.push(payment(&env, &key, hostname).await);
        }
        let answers = futures::future::join_all(
            payments
                .iter()
                .zip(&hostnames)
                .map(|(p, hostname)| send(&env, &key, p, hostname)),
        )
        .await;
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            1,
            "{policy}: {statuses:?}"
        );
        for answer in answers.iter().filter(|a| a.status != 201) {
            assert_eq!(answer.problem(403)["type"], "/problems/policy-violation");
        }
        assert_eq!(env.facilitator.settles(), settled + 1, "{policy}");
        assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    }
}

/// `owner`'s key `key_id` with `policy`, as authentication makes it (every scope).
pub(crate) fn key_principal(
    owner: domain::address::Owner,
    key_id: &str,
    policy: &Value,
) -> Principal {
    Principal {
        counted: domain::ratelimit::Tally::settled(domain::ratelimit::Verdict::Counted),
        approval: None,
        owner,
        credential: Credential::ApiKey {
            key_id: key_id.to_owned(),
            key_hash: "unused".into(),
            scopes: Scope::ALL.to_vec(),
            policy: Some(serde_json::from_value::<Policy>(policy.clone()).unwrap()),
        },
    }
}

/// A verified payment of `value` from a new payer (what the offline checks hand the claim).
fn verified(value: u128) -> VerifiedPayment {
    let nonce = format!("0x{}", domain::ids::random_hex(32));
    let payer = format!("{:#x}", PrivateKeySigner::random().address());
    VerifiedPayment {
        version: 2,
        network: domain::x402::Network::BaseSepolia,
        asset: domain::x402::Network::BaseSepolia.usdc().to_lowercase(),
        payer: payer.clone(),
        nonce: nonce.clone(),
        value,
        valid_after: 0,
        digest: Default::default(),
        authorization: domain::x402::verify::TransferWithAuthorization {
            from: payer.parse().unwrap(),
            to: alloy_primitives::Address::ZERO,
            value: alloy_primitives::U256::from(value),
            validAfter: alloy_primitives::U256::ZERO,
            validBefore: alloy_primitives::U256::from(99_999_999_999u64),
            nonce: nonce.parse().unwrap(),
        },
        smart_signature: None,
        payload: json!({"payload": {"authorization": {"from": payer, "nonce": nonce,
                        "validBefore": "99999999999"}}}),
        requirements: json!({}),
    }
}

#[tokio::test]
async fn the_claim_itself_holds_the_limit_when_both_requests_passed_the_check() {
    let env = TestEnv::new().await;
    for policy in [
        json!({"dailySpendLimit": 30}),
        json!({"monthlySpendLimit": 30}),
        json!({"maxActiveServers": 1}),
    ] {
        let (_, id, _) = env.owner_with_key(policy.clone()).await;
        let owner = domain::address::Owner::of(PrivateKeySigner::random().address());
        let principal = key_principal(owner, &id, &policy);
        let request = json!({"plan": PLAN}).to_string();
        let binding = Binding {
            kind: OrderKind::Provision,
            project: PROJECT,
            request: &request,
            target: Target::NewServer {
                plan: PLAN,
                region: "LT-Siauliai",
                authorized_keys: &[],
            },
        };
        let deadline = domain::deadline::Deadline::after(std::time::Duration::from_secs(20));
        // Both past the check (as two requests racing to it would be); one claim gets in.
        let claim = |payment| {
            domain::billing::order::ledger::claim(
                env.state,
                &principal,
                &binding,
                payment,
                PlanClass::Vps,
                &deadline,
            )
        };
        let (a, b) = (verified(18_460_240), verified(18_460_240));
        let (a, b) = tokio::join!(claim(&a), claim(&b));
        let outcomes = [a.unwrap(), b.unwrap()];
        assert_eq!(
            outcomes
                .iter()
                .filter(|c| matches!(c, Claim::New(_)))
                .count(),
            1,
            "{policy}: {outcomes:?}"
        );
        assert!(
            outcomes.contains(&Claim::OverLimit),
            "{policy}: {outcomes:?}"
        );
        // The refused one left nothing: no order, nothing reserved.
        let today = domain::time::rfc3339(domain::time::now());
        let usage = env
            .store
            .usages(&[id.as_str()], &today[..10], &today[..7])
            .await
            .unwrap()[&id]
            .clone();
        assert_eq!(
            (usage.spent_today, usage.spent_month, usage.servers.len()),
            (18_460_240, 18_460_240, 1),
            "{policy}"
        );
    }
    // A payment whose amount alone is over a spend limit is refused by the claim too (were the
    // check before the 402 passed by), with nothing written.
    let (_, id, _) = env.owner_with_key(json!({"dailySpendLimit": 10})).await;
    let owner = domain::address::Owner::of(PrivateKeySigner::random().address());
    let principal = key_principal(owner.clone(), &id, &json!({"dailySpendLimit": 10}));
    let request = json!({"plan": PLAN}).to_string();
    let binding = Binding {
        kind: OrderKind::Provision,
        project: PROJECT,
        request: &request,
        target: Target::NewServer {
            plan: PLAN,
            region: "LT-Siauliai",
            authorized_keys: &[],
        },
    };
    let deadline = domain::deadline::Deadline::after(std::time::Duration::from_secs(20));
    let err = domain::billing::order::ledger::claim(
        env.state,
        &principal,
        &binding,
        &verified(18_460_240),
        PlanClass::Vps,
        &deadline,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, domain::error::ApiError::PolicyViolation { limit, .. }
                 if limit == "dailySpendLimit"),
        "{err:?}"
    );
    let orders = env.store.orders_of(&owner, 10, None).await.unwrap();
    assert!(orders.items.is_empty());
    let today = domain::time::rfc3339(domain::time::now());
    let usage = env
        .store
        .usages(&[id.as_str()], &today[..10], &today[..7])
        .await
        .unwrap()[&id]
        .clone();
    assert_eq!((usage.spent_today, usage.servers.len()), (0, 0));
}

#[tokio::test]
async fn a_credit_redeemed_for_a_new_server_counts_against_the_key() {
    let env = TestEnv::new().await;
    let (session, id, key) = env.owner_with_key(json!({"maxActiveServers": 1})).await;
    // Paid, refused by the provider: a credit, no server held.
    let paid = payment(&env, &key, "a").await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let doc = send(&env, &key, &paid, "a").await.problem(409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 0);
    // A free server takes the one slot: the credit cannot become a second server.
    let free = env
        .req("POST", &path())
        .key(&key)
        .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
        .send()
        .await;
    assert_eq!(free.status, 201, "{}", free.body);
    refused(&send(&env, &key, &paid, "b").await, "maxActiveServers", 0.0);
    // Past that check (a request racing the free one), the redemption's own transaction
    // refuses: nothing written, the credit let go at once.
    let payment_id =
        &domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    let credit = env.store.order(payment_id).await.unwrap().unwrap();
    let request: domain::billing::purchase::ProvisionRequest =
        serde_json::from_value(body("b")).unwrap();
    let request = request.validate().unwrap();
    let quote = domain::billing::purchase::check(env.state, Some(PROJECT), &request)
        .await
        .unwrap();
    let request = serde_json::to_string(&request).unwrap();
    let principal = key_principal(credit.owner.clone(), &id, &json!({"maxActiveServers": 1}));
    let binding = Binding {
        kind: OrderKind::Provision,
        project: PROJECT,
        request: &request,
        target: Target::NewServer {
            plan: PLAN,
            region: "LT-Siauliai",
            authorized_keys: &[],
        },
    };
    let deadline = domain::deadline::Deadline::after(std::time::Duration::from_secs(20));
    let redemption = domain::billing::order::ledger::Redemption {
        price: (quote.atomic(), quote.class),
        remainder: Some(credit.id.remainder(1)),
    };
    let err = domain::billing::order::ledger::redeem(
        env.state, &principal, &credit, &binding, redemption, &deadline,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, domain::error::ApiError::PolicyViolation { limit, .. }
                 if limit == "maxActiveServers"),
        "{err:?}"
    );
    let after = env.store.order(payment_id).await.unwrap().unwrap();
    assert_eq!((after.state, after.lease_until), (OrderState::Credited, 0));
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "credited", "{payments}");
    // Once it is deleted, the credit is redeemed (nothing charged again).
    let server = free.json()["id"].as_u64().unwrap();
    let deleted = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let res = send(&env, &key, &paid, "b").await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_usage(&env.usage(&session, &id).await, PRICE, PRICE, 1);
    assert_eq!(env.facilitator.settles(), 1);
}

#[tokio::test]
async fn a_keys_ended_servers_are_dropped_from_its_count_without_a_limit_too() {
    let env = TestEnv::new().await;
    let (session, id, key) = env
        .owner_with_key(json!({"allowedRegions": ["LT-Siauliai"]}))
        .await;
    let free = || {
        env.req("POST", &path())
            .key(&key)
            .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
            .send()
    };
    let mut servers = Vec::new();
    for _ in 0..33 {
        let res = free().await;
        assert_eq!(res.status, 201, "{}", res.body);
        servers.push(res.json()["id"].as_u64().unwrap());
    }
    for server in &servers[1..] {
        let res = env
            .req("DELETE", &format!("/api/cloud/servers/{server}"))
            .key(&key)
            .send()
            .await;
        assert_eq!(res.status, 204, "{}", res.body);
    }
    assert_usage(&env.usage(&session, &id).await, 0.0, 0.0, 1);
    assert_eq!(free().await.status, 201);
    let members = env.store.usages(&[id.as_str()], "-", "-").await.unwrap()[&id]
        .servers
        .len();
    assert_eq!(members, 2, "the 32 deleted servers were dropped");
}
