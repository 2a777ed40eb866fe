//! Limits that hold against one determined wallet (the limits issue, point 3): per owner over
//! all its keys, per source address over all owners, failed authentications, the money path
//! failing closed when the counter cannot count, concurrent long polls per owner, and caps on
//! keys and metadata sandboxes.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use serde_json::json;

use crate::dynamo_faults::Kind;
use crate::harness::{ALICE, BOB, Options, PROJECT, TestEnv, TestResponse, pay};

fn env_with(vars: &[(&'static str, &str)]) -> Options {
    Options {
        vars: vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        ..Options::default()
    }
}

/// Moves the clock, if needed, so that `need` seconds remain in the current window of `window`
/// seconds (no sleep: the limits read the environment's clock).
fn room_in_window(env: &TestEnv, window: u64, need: f64) {
    let now = env.clock.now_millis() as f64 / 1000.0;
    let end = ((now as u64 / window) + 1) * window;
    if (end as f64 - now) < need {
        env.clock.forward_to(end as i64 * 1000 + 50);
    }
}

/// Asserts `res` is a 429 naming `policy`, with `Retry-After` and the rate-limit headers.
pub(crate) fn refused_by(res: &TestResponse, policy: &str) {
    let doc = res.problem(429);
    assert_eq!(doc["type"], "/problems/rate-limited", "{doc}");
    assert!(res.header("retry-after").is_some());
    let header = res.header("ratelimit-policy").unwrap();
    assert!(
        header.starts_with(&format!("\"{policy}\";")),
        "{header}, expected {policy}"
    );
    assert!(
        res.header("ratelimit")
            .unwrap()
            .starts_with(&format!("\"{policy}\";r=0;"))
    );
}

#[tokio::test]
async fn ten_keys_of_one_owner_share_the_owner_quota() {
    // Per key: 6 per 6 s. Per owner: 12 per 10 s. Ten keys, six requests each.
    let env = TestEnv::with(env_with(&[
        ("RATE_LIMIT_PER_SECOND", "1"),
        ("RATE_LIMIT_BURST", "6"),
        ("OWNER_RATE_PER_SECOND", "1.2"),
        ("OWNER_RATE_BURST", "12"),
    ]))
    .await;
    let mut keys = Vec::new();
    for _ in 0..10 {
        keys.push(env.key(ALICE).await);
    }
    let bob = env.key(BOB).await;
    room_in_window(&env, 10, 8.0);
    let mut through = 0;
    for _ in 0..6 {
        for key in &keys {
            let res = env.req("GET", "/api/sandboxes").key(key).send().await;
            match res.status {
                200 => through += 1,
                _ => refused_by(&res, "owner"),
            }
        }
    }
    println!("one owner, 10 keys × 6 requests: {through} of 60 through (owner quota 12)");
    assert_eq!(through, 12);
    // Another owner is not affected.
    let res = env.req("GET", "/api/sandboxes").key(&bob).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
}

#[tokio::test]
async fn one_source_address_is_limited_over_every_owner() {
    let env = TestEnv::with(env_with(&[
        ("ADDRESS_RATE_PER_SECOND", "0.5"),
        ("ADDRESS_RATE_BURST", "4"),
    ]))
    .await;
    let keys = [env.key(ALICE).await, env.key(BOB).await];
    room_in_window(&env, 8, 5.0);
    for i in 0..4 {
        let res = env
            .req("GET", "/api/sandboxes")
            .key(&keys[i % 2])
            .source_ip("198.51.100.20")
            .send()
            .await;
        assert_eq!(res.status, 200, "request {i}: {}", res.body);
    }
    for key in &keys {
        let res = env
            .req("GET", "/api/payments")
            .key(key)
            .source_ip("198.51.100.20")
            .send()
            .await;
        refused_by(&res, "address");
    }
    // Unauthenticated requests from it are counted and refused too.
    let res = env
        .req("GET", "/api/sandboxes")
        .source_ip("198.51.100.20")
        .send()
        .await;
    refused_by(&res, "address");
    let res = env
        .req("GET", "/api/sandboxes")
        .key(&keys[0])
        .source_ip("203.0.113.5")
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
}

#[tokio::test]
async fn failed_authentications_lock_the_address_failures_out_and_never_its_valid_keys() {
    let env = TestEnv::with(env_with(&[
        ("FAILED_AUTH_PER_SECOND", "0.01"),
        ("FAILED_AUTH_BURST", "3"),
    ]))
    .await;
    let good = env.key(ALICE).await;
    room_in_window(&env, 300, 10.0);
    let unknown = format!("svc_{}", "ab".repeat(24));
    let attempt = |key: &str, ip: &str| {
        env.req("GET", "/api/sandboxes")
            .key(key)
            .source_ip(ip)
            .send()
    };
    // No credential at all is not an attempt: it never counts.
    for _ in 0..5 {
        env.req("GET", "/api/auth/me")
            .source_ip("198.51.100.30")
            .send()
            .await
            .problem(401);
    }
    for _ in 0..2 {
        attempt(&unknown, "198.51.100.30").await.problem(401);
    }
    // A session token that does not exist is a failure too.
    env.req("GET", "/api/keys")
        .bearer(&"0".repeat(64))
        .source_ip("198.51.100.30")
        .send()
        .await
        .problem(401);
    refused_by(&attempt(&unknown, "198.51.100.30").await, "failed-auth");
    // Locked out: its failures are refused (and no longer counted: one conditional write, the
    // key's own, which finds no key)...
    let writes = || env.faults.calls("UpdateItem");
    let before = writes();
    refused_by(&attempt(&unknown, "198.51.100.30").await, "failed-auth");
    assert_eq!(writes(), before + 1);
    // ...but a neighbour behind the same address with a valid key is served (issue 34, point
    // 5: bad keys from one address cannot lock valid ones out).
    assert_eq!(attempt(&good, "198.51.100.30").await.status, 200);
    // Another address is not touched either.
    assert_eq!(attempt(&good, "203.0.113.6").await.status, 200);
}

#[tokio::test]
async fn a_payment_is_refused_when_its_request_cannot_be_counted() {
    // Every limit on: the key's count is in its read; two counter writes a request beside its
    // work (address, owner).
    let env = TestEnv::with(env_with(&[
        ("RATE_LIMIT_PER_SECOND", "100"),
        ("OWNER_RATE_PER_SECOND", "100"),
        ("ADDRESS_RATE_PER_SECOND", "100"),
    ]))
    .await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"});
    let offer = env
        .req("POST", &path)
        .key(&key)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    // The window writes fail: a read goes through uncounted...
    env.faults.arm("UpdateItem", "RATE#", Kind::Throttle, 2);
    let read = env.req("GET", "/api/sandboxes").key(&key).send().await;
    assert_eq!(read.status, 200, "{}", read.body);
    // ...a payment does not: 503, nothing verified, nothing settled, no server.
    env.faults.arm("UpdateItem", "RATE#", Kind::Throttle, 2);
    let paid = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body.clone())
        .send()
        .await;
    paid.problem(503);
    assert_eq!(paid.header("retry-after"), Some("1"));
    assert_eq!(
        (env.facilitator.verifies(), env.facilitator.settles()),
        (0, 0)
    );
    // Once the counter works, the same payment buys the server.
    assert_eq!(env.faults.unfired(), 0);
    let res = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(env.facilitator.settles(), 1);
    // Replayed while the counter fails again: refused, but never "nothing was charged" about a
    // charged payment — the answer carries its payment response.
    env.faults.arm("UpdateItem", "RATE#", Kind::Throttle, 2);
    let replay = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    let doc = replay.problem(503);
    let detail = doc["detail"].as_str().unwrap();
    assert!(!detail.contains("nothing was charged"), "{detail}");
    assert!(detail.contains("was charged"), "{detail}");
    assert!(
        replay.header("payment-response").is_some(),
        "{}",
        replay.body
    );
    assert_eq!(env.facilitator.settles(), 1);
}

#[tokio::test]
async fn an_owner_holds_at_most_its_cap_of_long_polls() {
    let env = TestEnv::with(env_with(&[("MAX_WAITS_PER_OWNER", "2")])).await;
    let keys = [
        env.key(ALICE).await,
        env.key(ALICE).await,
        env.key(ALICE).await,
    ];
    let bob = env.key(BOB).await;
    let sandbox = env
        .req("POST", "/api/sandboxes")
        .key(&keys[0])
        .json(json!({"name": "never ready"}))
        .send()
        .await;
    assert_eq!(sandbox.status, 201, "{}", sandbox.body);
    let id = sandbox.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/api/sandboxes/{id}");
    let wait = |key: &str| {
        env.req("GET", &path)
            .key(key)
            .query("waitFor=ready&timeout=3")
            .send()
    };
    let (a, b, c) = tokio::join!(wait(&keys[0]), wait(&keys[1]), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        wait(&keys[2]).await
    });
    let statuses = [a.status, b.status, c.status];
    println!("three concurrent waits of one owner, cap 2: {statuses:?}");
    assert_eq!(statuses, [200, 200, 429]);
    refused_by(&c, "waits");
    let retry: u64 = c.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=9).contains(&retry), "{retry}");
    // Another owner's wait is its own (Bob may not read Alice's sandbox: 403, not 429).
    env.req("GET", &path)
        .key(&bob)
        .query("waitFor=ready&timeout=1")
        .send()
        .await
        .problem(403);
    // The slots were given back when the waits ended.
    let again = env
        .req("GET", &path)
        .key(&keys[2])
        .query("waitFor=ready&timeout=1")
        .send()
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
}

#[tokio::test]
async fn keys_and_metadata_sandboxes_are_capped_per_owner() {
    let env = TestEnv::with(env_with(&[
        ("MAX_KEYS_PER_OWNER", "2"),
        ("MAX_SANDBOXES_PER_OWNER", "2"),
    ]))
    .await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let generate = |name: &'static str| {
        env.req("POST", "/api/keys/generate")
            .bearer(&session)
            .json(json!({"name": name}))
            .send()
    };
    let first = generate("one").await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(generate("two").await.status, 201);
    let full = generate("three").await;
    assert!(
        full.problem(409)["detail"]
            .as_str()
            .unwrap()
            .contains("revoke one")
    );
    // Revoking one frees its place.
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let revoked = env
        .req("DELETE", &format!("/api/keys/{id}"))
        .bearer(&session)
        .send()
        .await;
    assert!(revoked.status < 300, "{}", revoked.body);
    let key = generate("three").await;
    assert_eq!(key.status, 201, "{}", key.body);
    let key = key.json()["key"].as_str().unwrap().to_owned();
    let create = || {
        env.req("POST", "/api/sandboxes")
            .key(&key)
            .json(json!({"name": "meta"}))
            .send()
    };
    assert_eq!(create().await.status, 201);
    assert_eq!(create().await.status, 201);
    create().await.problem(409);
}

#[tokio::test]
async fn warm_instances_each_let_at_most_one_request_past_an_owner_quota() {
    // Per owner: 6 per 10 s; two warm instances of the sandboxes function, one store.
    let env = TestEnv::with(env_with(&[
        ("OWNER_RATE_PER_SECOND", "0.6"),
        ("OWNER_RATE_BURST", "6"),
    ]))
    .await;
    let mut other = domain::AppState::new(env.state.config.clone(), env.store.clone(), None);
    // One clock, as one region's instances share the time.
    other.clock = env.clock.clone();
    let other: &'static domain::AppState = Box::leak(Box::new(other));
    let key = env.key(ALICE).await;
    room_in_window(&env, 10, 8.0);
    let mut through = [0, 0];
    for i in 0..16 {
        let (_, event) = env.req("GET", "/api/sandboxes").key(&key).event();
        let response = if i % 2 == 0 {
            env.invoke("sandboxes", &event.to_string()).await
        } else {
            let request = lambda_http::request::from_str(&event.to_string()).unwrap();
            TestResponse::from(Box::pin(sandboxes::handle(other, request)).await)
        };
        match response.status {
            200 => through[i % 2] += 1,
            _ => refused_by(&response, "owner"),
        }
    }
    // Each instance learns the shared count from its own request's write: the first request
    // past the quota on each instance gets through, none after it.
    println!("two warm instances, owner quota 6, alternating: {through:?} through");
    assert_eq!(through[0] + through[1], 7);
    assert!(through.iter().all(|n| (3..=4).contains(n)), "{through:?}");
}

/// One owner's paid requests in flight are bounded across instances (issue 34, point 1): past
/// `MAX_PAID_IN_FLIGHT_PER_OWNER`, a request with a new payment is answered 429 `paid` before
/// anything is claimed or charged, while another owner's is served; the same payment, sent
/// again once a slot is free, buys the server.
#[tokio::test]
async fn an_owner_holds_at_most_its_cap_of_paid_requests_in_flight() {
    let env = TestEnv::with(env_with(&[("MAX_PAID_IN_FLIGHT_PER_OWNER", "2")])).await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"});
    let offer = env
        .req("POST", &path)
        .key(&alice)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let required = offer.header("payment-required").unwrap().to_owned();
    let payments: Vec<_> = (0..4)
        .map(|_| pay(&PrivateKeySigner::random(), &required, 2))
        .collect();
    // The facilitator takes its time over the first two settlements.
    for _ in 0..2 {
        env.facilitator
            .next_settle(e2e::facilitator::Mode::Stall(Duration::from_millis(700)));
    }
    let paid = |key: &str, payment: &(&'static str, String)| {
        env.req("POST", &path)
            .key(key)
            .header(payment.0, &payment.1)
            .json(body.clone())
            .send()
    };
    let later = |key: String, payment| async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        paid(&key, payment).await
    };
    let (a, b, c, d) = tokio::join!(
        paid(&alice, &payments[0]),
        paid(&alice, &payments[1]),
        later(alice.clone(), &payments[2]),
        later(bob.clone(), &payments[3]),
    );
    let statuses = [a.status, b.status, c.status, d.status];
    assert_eq!(statuses, [201, 201, 429, 201], "{}", c.body);
    refused_by(&c, "paid");
    // Refused before the ledger: never claimed, never settled.
    assert_eq!(env.facilitator.settles(), 3);
    let listed = env
        .req("GET", "/api/payments")
        .key(&alice)
        .send()
        .await
        .json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");
    // The slots came back: the refused payment now buys its server.
    let again = paid(&alice, &payments[2]).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(env.facilitator.settles(), 4);
}
