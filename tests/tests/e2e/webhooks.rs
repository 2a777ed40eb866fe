//! Webhooks (issue 20, points 3 to 6): endpoints registered and checked, events delivered from
//! the table's stream (the `events` function's handler, fed by moto's Streams API as AWS's
//! event source mapping would feed it), signed by the Standard Webhooks spec and verified by a
//! local receiver with the same crate; retries in order per subject through a receiver that
//! fails and hangs; a rotated secret; disabling; SSRF refusals; owners kept apart.

use std::time::Duration;

use e2e::receiver::{Mode, Receiver};
use serde_json::{Value, json};

use crate::dynamo_faults::Kind;
use crate::harness::{ALICE, BOB, Options, TestEnv, owner};

async fn deliveries(env: &TestEnv, key: &str, id: &str) -> Vec<Value> {
    let res = env
        .req("GET", &format!("/api/webhooks/{id}/deliveries"))
        .key(key)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["items"].as_array().unwrap().clone()
}

/// A receiver answering as `mode`, registered as an endpoint of `key`'s owner for every type
/// and trusting its secret: the receiver and the endpoint's id.
async fn hooked(env: &TestEnv, key: &str, mode: Mode) -> (std::sync::Arc<Receiver>, String) {
    let receiver = Receiver::start().await;
    receiver.set(mode);
    let endpoint = env.register_webhook(key, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());
    (receiver, endpoint["id"].as_str().unwrap().to_owned())
}

/// Endpoint `id` as `GET /api/webhooks/{id}` answers it.
async fn endpoint_of(env: &TestEnv, key: &str, id: &str) -> Value {
    let res = env
        .req("GET", &format!("/api/webhooks/{id}"))
        .key(key)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()
}

/// Queues a test event for endpoint `id` (202, pending), lets the delivery function send it,
/// and answers its delivery as it then stands.
async fn send_test(env: &TestEnv, key: &str, id: &str) -> Value {
    let res = env
        .req("POST", &format!("/api/webhooks/{id}/test"))
        .key(key)
        .send()
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    let queued = res.json();
    assert_eq!(queued["status"], "pending", "{queued}");
    env.deliver().await;
    deliveries(env, key, id)
        .await
        .into_iter()
        .find(|d| d["id"] == queued["id"])
        .expect("the test's delivery")
}

/// The events of a free server's life: provisioned, then ready once it answers SSH.
async fn free_server(env: &TestEnv, key: &str, name: &str) -> String {
    let (_, sandbox) = env.provision(key, "cloud_vps_free", Some(name)).await;
    for _ in 0..5 {
        env.clock.advance(Duration::from_secs(30));
        env.pass().await;
    }
    sandbox
}

fn types_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_failing_receiver_gets_every_event_once_it_recovers_in_order() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Fail).await;
    let id = id.as_str();

    let sandbox = free_server(&env, &key, "retried").await;
    let fed = env.feed().await;
    assert_eq!(fed.events, 2, "{fed:?}");
    // The first event was tried once and failed; the second waits behind it.
    let got = receiver.got();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].event["type"], "server.provisioned");
    let queued = deliveries(&env, &key, id).await;
    assert_eq!(queued.len(), 2, "{queued:#?}");
    let head = queued
        .iter()
        .find(|d| d["event"]["type"] == "server.provisioned")
        .unwrap();
    assert_eq!(
        (&head["status"], &head["attempts"], &head["lastStatus"]),
        (&json!("pending"), &json!(1), &json!(500))
    );
    assert_eq!(head["lastError"], "answered 500");
    let next_try = head["nextAttemptAt"]
        .as_str()
        .unwrap()
        .parse::<domain::time::Timestamp>()
        .unwrap()
        .unix();
    // 5 s after the attempt (the clock follows wall time: a second may have passed since).
    let wait = next_try - env.state.clock.now();
    assert!((4..=5).contains(&wait), "{wait}");
    // Not before it is due, and the second never before the first.
    env.deliver().await;
    assert_eq!(receiver.got().len(), 1);
    // 5 s later: 500 again. 300 s later: the receiver hangs past the 10 s timeout.
    env.deliver_after(5).await;
    assert_eq!(receiver.got().len(), 2);
    receiver.set(Mode::Hang);
    env.deliver_after(300).await;
    let head = deliveries(&env, &key, id).await;
    let head = head
        .iter()
        .find(|d| d["event"]["type"] == "server.provisioned")
        .unwrap();
    assert_eq!(head["lastError"], "timed out after 10 s", "{head}");
    assert_eq!(head["attempts"], 3);
    // It recovers: the next try delivers both, in order, each once.
    receiver.set(Mode::Accept);
    let report = env.deliver_after(1800).await;
    assert_eq!((report.messages, report.kept), (2, 0), "{report:?}");
    let accepted = receiver.accepted();
    assert_eq!(
        types_of(&accepted),
        ["server.provisioned", "server.ready"],
        "{accepted:#?}"
    );
    assert!(
        accepted
            .iter()
            .all(|e| e["subject"]["id"] == sandbox.as_str())
    );
    assert!(receiver.got().iter().all(|r| r.verified == [true]));
    let done = deliveries(&env, &key, id).await;
    assert!(done.iter().all(|d| d["status"] == "delivered"), "{done:#?}");
    // A stream record handed over again queues nothing twice.
    let fed = env.feed().await;
    assert_eq!(fed.events, 0);
    assert_eq!(receiver.accepted().len(), 2);
}

/// The stall of issue 34: a receiver fails its first two deliveries (a server's first event,
/// twice: its retry is now 300 s away), then answers. Its next delivery (another subject's)
/// succeeds, and from then on the server's events arrive at once and in order, not when the
/// head's retry comes due.
#[tokio::test]
async fn a_subject_held_by_failed_deliveries_flows_once_the_endpoint_answers_again() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Accept).await;
    receiver.fail_next(2);
    let (_, sandbox) = env.provision(&key, "cloud_vps_free", Some("held")).await;
    env.feed().await;
    env.deliver_after(5).await;
    assert_eq!(receiver.got().len(), 2);
    assert!(receiver.accepted().is_empty());
    let head = deliveries(&env, &key, &id).await;
    assert_eq!(
        (&head[0]["attempts"], &head[0]["status"]),
        (&json!(2), &json!("pending"))
    );
    let due = head[0]["nextAttemptAt"]
        .as_str()
        .unwrap()
        .parse::<domain::time::Timestamp>()
        .unwrap()
        .unix();
    // The server's life goes on while its first event waits 300 s: it becomes ready.
    for _ in 0..4 {
        env.pass_after(30).await;
    }
    env.feed().await;
    assert!(receiver.accepted().is_empty(), "held behind the head");
    // Another subject's event reaches the endpoint, which answers: the held queue flows.
    let other = env.issue_key(ALICE, "other").await.1;
    domain::identity::keys::revoke(&env.store, &owner(ALICE), &other, domain::time::now())
        .await
        .unwrap();
    env.feed().await;
    let accepted = receiver.accepted();
    let server: Vec<_> = accepted
        .iter()
        .filter(|e| e["subject"]["id"] == sandbox.as_str())
        .collect();
    assert_eq!(
        types_of(&server.into_iter().cloned().collect::<Vec<_>>()),
        ["server.provisioned", "server.ready"],
        "{accepted:#?}"
    );
    assert_eq!(types_of(&accepted).len(), 3, "{accepted:#?}");
    // Well before the head's own retry was due.
    assert!(env.clock.now() < due - 100);
    let done = deliveries(&env, &key, &id).await;
    assert!(done.iter().all(|d| d["status"] == "delivered"), "{done:#?}");
}

#[tokio::test]
async fn a_store_failure_fails_the_record_and_the_stream_hands_it_over_again() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&key, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());
    env.provision(&key, "cloud_vps_free", Some("again")).await;
    // The delivery cannot be queued: the batch answers that record as failed.
    env.faults.arm("PutItem", "DELIVERIES#", Kind::Throttle, 1);
    let fed = env.feed().await;
    assert_eq!((fed.events, fed.failed_batches), (1, 1), "{fed:?}");
    assert!(receiver.got().is_empty());
    // The next pass reads from that record on, and delivers it.
    let fed = env.feed().await;
    assert_eq!((fed.events, fed.failed_batches), (1, 0), "{fed:?}");
    assert_eq!(types_of(&receiver.accepted()), ["server.provisioned"]);
}

#[tokio::test]
async fn an_endpoint_failing_for_three_days_is_disabled_and_says_why() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Fail).await;
    env.provision(&key, "cloud_vps_free", Some("doomed")).await;
    env.feed().await;
    // The schedule: 8 attempts over 27.6 h, then the delivery fails for good.
    for after in domain::notifications::deliveries::RETRY_AFTER {
        env.deliver_after(after as u64).await;
    }
    let failed = deliveries(&env, &key, &id).await;
    assert_eq!(failed[0]["status"], "failed", "{failed:#?}");
    assert_eq!(failed[0]["attempts"], 8);
    assert_eq!(receiver.got().len(), 8);
    assert!(
        domain::notifications::deliveries::RETRY_AFTER
            .iter()
            .sum::<i64>()
            >= 24 * 3600
    );
    // Still failing three days after the first failure: disabled, with the reason.
    env.clock.advance(Duration::from_secs(3 * 86400));
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "failed", "{test}");
    assert_eq!(test["attempts"], 1, "a test is tried once: {test}");
    let shown = endpoint_of(&env, &key, &id).await;
    assert_eq!(shown["status"], "disabled", "{shown}");
    let reason = shown["disabled"]["reason"].as_str().unwrap();
    assert!(reason.contains("answered 500"), "{reason}");
    // A disabled endpoint gets no new event...
    receiver.set(Mode::Accept);
    env.provision(&key, "cloud_vps_free", Some("unheard")).await;
    env.feed().await;
    assert!(receiver.accepted().is_empty());
    // ...until a test event gets through, which enables it again.
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    assert_eq!(types_of(&receiver.accepted()), ["webhook.test"]);
    let shown = endpoint_of(&env, &key, &id).await;
    assert_eq!(shown["status"], "enabled", "{shown}");
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_for_a_day() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&key, &receiver.url, None).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let old = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(old.starts_with("whsec_"), "{old}");
    receiver.trust(&old);
    let rotated = env
        .req("POST", &format!("/api/webhooks/{id}/rotate"))
        .key(&key)
        .send()
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let rotated = rotated.json();
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert!(rotated["previousSecretValidUntil"].is_string(), "{rotated}");
    receiver.trust(&new);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    // Both secrets verify the same request for a day...
    assert_eq!(receiver.got()[0].verified, [true, true]);
    env.clock.advance(Duration::from_secs(24 * 3600 + 1));
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    // ...then only the new one.
    assert_eq!(receiver.got()[1].verified, [false, true]);
    // A test event is tried once, and never waits behind an earlier one that failed.
    receiver.set(Mode::Fail);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(
        (&test["status"], &test["attempts"]),
        (&json!("failed"), &json!(1))
    );
    receiver.set(Mode::Accept);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    // Secrets are never listed.
    let listed = env.req("GET", "/api/webhooks").key(&key).send().await;
    assert!(!listed.body.contains("whsec_"), "{}", listed.body);
}

#[tokio::test]
async fn inward_destinations_are_refused_at_registration_and_at_delivery() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let dns = &env.state.resolver;
    dns.answer("inward.example.com", &["192.168.1.20".parse().unwrap()]);
    dns.answer(
        "metadata.example.com",
        &["169.254.169.254".parse().unwrap()],
    );
    dns.answer("rebind.example.com", &["93.184.215.14".parse().unwrap()]);
    for url in [
        "https://127.0.0.1/hook",
        "https://10.1.2.3/hook",
        "https://172.16.0.1/hook",
        "https://192.168.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://169.254.10.10/",
        "https://100.64.0.1/",
        "https://224.0.0.251/",
        "https://0.0.0.0/",
        "https://[::1]/",
        "https://[fd00::1]/",
        "https://[fe80::1]/",
        "https://[ff02::1]/",
        "https://[::ffff:10.0.0.1]/",
        "https://[::ffff:8.8.8.8]/",
        "https://[::ffff:0:a00:1]/",
        "https://[64:ff9b::a00:1]/",
        "https://inward.example.com/hook",
        "https://metadata.example.com/hook",
        "https://unknown.example.com/hook",
        "http://example.com/hook",
        "https://user:pass@rebind.example.com/",
        "ftp://rebind.example.com/",
        "http://127.0.0.2:8080/",
        "http://127.0.0.1/",
    ] {
        let res = env
            .req("POST", "/api/webhooks")
            .key(&key)
            .json(json!({"url": url}))
            .send()
            .await;
        let problem = res.invalid("url");
        assert!(problem.to_string().contains("url"), "{url}: {problem}");
    }
    // A name that resolves outward at registration and inward later is refused at delivery,
    // without a connection.
    let endpoint = env
        .register_webhook(&key, "https://rebind.example.com/hook", None)
        .await;
    let id = endpoint["id"].as_str().unwrap();
    dns.answer("rebind.example.com", &["127.0.0.1".parse().unwrap()]);
    env.provision(&key, "cloud_vps_free", Some("rebound")).await;
    env.feed().await;
    let refused = deliveries(&env, &key, id).await;
    let error = refused[0]["lastError"].as_str().unwrap();
    assert!(
        error.contains("127.0.0.1") && error.contains("loopback"),
        "{error}"
    );
    assert_eq!(refused[0]["status"], "pending");
    assert!(refused[0].get("lastStatus").is_none(), "{refused:#?}");
}

#[tokio::test]
async fn one_owners_events_never_reach_anothers_endpoint() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let to_alice = Receiver::start().await;
    let to_bob = Receiver::start().await;
    let alices = env.register_webhook(&alice, &to_alice.url, None).await;
    let bobs = env.register_webhook(&bob, &to_bob.url, None).await;
    free_server(&env, &alice, "alices").await;
    env.feed().await;
    assert_eq!(to_alice.accepted().len(), 2);
    assert!(to_bob.got().is_empty());
    // Bob cannot see, test, rotate, list the deliveries of or delete Alice's endpoint.
    let id = alices["id"].as_str().unwrap();
    for (method, path) in [
        ("GET", format!("/api/webhooks/{id}")),
        ("POST", format!("/api/webhooks/{id}/test")),
        ("POST", format!("/api/webhooks/{id}/rotate")),
        ("GET", format!("/api/webhooks/{id}/deliveries")),
        ("DELETE", format!("/api/webhooks/{id}")),
    ] {
        let res = env.req(method, &path).key(&bob).send().await;
        res.problem(404);
    }
    let listed = env
        .req("GET", "/api/webhooks")
        .key(&bob)
        .send()
        .await
        .json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["items"][0]["id"], bobs["id"]);
    // Deleted, Alice's endpoint gets nothing more.
    let deleted = env
        .req("DELETE", &format!("/api/webhooks/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    env.provision(&alice, "cloud_vps_free", Some("after")).await;
    env.feed().await;
    assert_eq!(to_alice.accepted().len(), 2);
}

#[tokio::test]
async fn registrations_are_checked_scoped_and_capped() {
    let env = TestEnv::with(Options {
        vars: vec![("MAX_WEBHOOKS_PER_OWNER", "2".into())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    for (body, field) in [
        (json!({}), "url"),
        (json!({"url": 7}), "url"),
        (json!({"url": "not a url"}), "url"),
        (
            json!({"url": receiver.url, "types": ["server.exploded"]}),
            "types",
        ),
        (json!({"url": receiver.url, "extra": 1}), "extra"),
    ] {
        let res = env
            .req("POST", "/api/webhooks")
            .key(&key)
            .json(body.clone())
            .send()
            .await;
        let problem = res.problem(400);
        assert!(problem.to_string().contains(field), "{body}: {problem}");
    }
    // Types: each known one once, in the docs' order.
    let typed = env
        .register_webhook(
            &key,
            &receiver.url,
            Some(json!(["server.ready", "lease.expiring", "server.ready"])),
        )
        .await;
    assert_eq!(typed["types"], json!(["server.ready", "lease.expiring"]));
    // Only server.ready of a free server's two events.
    receiver.trust(typed["secret"].as_str().unwrap());
    free_server(&env, &key, "typed").await;
    env.feed().await;
    assert_eq!(types_of(&receiver.accepted()), ["server.ready"]);
    env.register_webhook(&key, &receiver.url, None).await;
    let third = env
        .req("POST", "/api/webhooks")
        .key(&key)
        .json(json!({"url": receiver.url}))
        .send()
        .await;
    third.problem(409);
    // Deleting one frees its place.
    let typed_id = typed["id"].as_str().unwrap();
    let deleted = env
        .req("DELETE", &format!("/api/webhooks/{typed_id}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    env.register_webhook(&key, &receiver.url, None).await;
    // A key without the `webhooks` scope cannot manage endpoints.
    let (reader, _) = domain::identity::auth::api_key::issue(
        &env.store,
        &crate::harness::owner(ALICE),
        domain::identity::auth::api_key::NewKey {
            scopes: Some(vec!["read".into()]),
            ..domain::identity::auth::api_key::NewKey::named("reader", env.state.clock.timestamp())
        },
        None,
    )
    .await
    .unwrap();
    let reader = reader.expose().to_owned();
    let refused = env.req("GET", "/api/webhooks").key(&reader).send().await;
    let problem = refused.problem(403);
    assert!(problem.to_string().contains("webhooks"), "{problem}");
    // A malformed id is a 400, not a lookup.
    let bad = env
        .req("GET", "/api/webhooks/whk_nope")
        .key(&key)
        .send()
        .await;
    bad.invalid("id");
}

/// A key's reach ends with the key (issue 34, point 3): the endpoint it registered is disabled,
/// saying why, and receives nothing more, neither new events nor those queued before; an
/// expired key's likewise. An endpoint the owner's session registered is not touched.
#[tokio::test]
async fn a_revoked_or_expired_keys_endpoint_receives_nothing_more() {
    let env = TestEnv::new().await;
    let (agent, agent_id) = env.issue_key(ALICE, "agent").await;
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&agent, &receiver.url, None).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    assert_eq!(endpoint["keyId"], agent_id.as_str());
    env.provision(&key, "cloud_vps_free", Some("before")).await;
    env.feed().await;
    assert_eq!(types_of(&receiver.accepted()), ["server.provisioned"]);
    // An event queued, then the key revoked before it is sent.
    env.provision(&key, "cloud_vps_free", Some("queued")).await;
    assert_eq!(env.stream().await.events, 1);
    domain::identity::keys::revoke(&env.store, &owner(ALICE), &agent_id, domain::time::now())
        .await
        .unwrap();
    env.feed().await;
    env.provision(&key, "cloud_vps_free", Some("after")).await;
    env.feed().await;
    assert_eq!(types_of(&receiver.accepted()), ["server.provisioned"]);
    let shown = endpoint_of(&env, &key, &id).await;
    assert_eq!(shown["status"], "disabled", "{shown}");
    let reason = shown["disabled"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&agent_id) && reason.contains("revoked"),
        "{reason}"
    );
    // A test event does not bring it back.
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "failed", "{test}");
    assert_eq!(receiver.got().len(), 1);

    // An expiring key's endpoint: it hears until the key expires, then nothing.
    let expires_at = env.clock.now() + 3600;
    let brief = domain::identity::auth::api_key::NewKey {
        expires_at: Some(domain::time::Timestamp::from_unix(expires_at)),
        scopes: Some(["read", "provision", "webhooks"].map(String::from).to_vec()),
        ..domain::identity::auth::api_key::NewKey::named("brief", env.clock.timestamp())
    };
    let expiring = domain::identity::auth::api_key::issue(&env.store, &owner(BOB), brief, None)
        .await
        .unwrap()
        .0
        .expose()
        .to_owned();
    let to_bob = Receiver::start().await;
    let bobs = env.register_webhook(&expiring, &to_bob.url, None).await;
    env.provision(&expiring, "cloud_vps_free", Some("heard"))
        .await;
    env.feed().await;
    assert_eq!(to_bob.accepted().len(), 1);
    env.clock.advance(Duration::from_secs(3601));
    let bob = env.key(BOB).await;
    env.provision(&bob, "cloud_vps_free", Some("unheard")).await;
    env.feed().await;
    assert_eq!(to_bob.accepted().len(), 1);
    let shown = env
        .req(
            "GET",
            &format!("/api/webhooks/{}", bobs["id"].as_str().unwrap()),
        )
        .key(&bob)
        .send()
        .await
        .json();
    assert!(
        shown["disabled"]["reason"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{shown}"
    );
}

/// One owner's queued tests are bounded (issue 34, point 1): 30 at once against a hanging
/// endpoint get 429 `webhook-tests` past the budget, with `Retry-After`, and nothing is sent
/// inside a request; another owner's test is served meanwhile. A slot comes back once its test
/// was tried.
#[tokio::test]
async fn thirty_tests_at_once_get_429_past_the_budget_and_another_owner_is_served() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let hanging = Receiver::start().await;
    hanging.set(Mode::Hang);
    let endpoint = env.register_webhook(&key, &hanging.url, None).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let path = format!("/api/webhooks/{id}/test");
    let started = std::time::Instant::now();
    let answers = futures::future::join_all(
        (0..30).map(|_| async { env.req("POST", &path).key(&key).send().await }),
    )
    .await;
    // Queued, never sent inside the request: 30 answers long before one attempt's time.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let budget = env.state.config.caps.webhook_tests as usize;
    let queued = answers.iter().filter(|r| r.status == 202).count();
    assert_eq!(queued, budget);
    for refused in answers.iter().filter(|r| r.status != 202) {
        refused.problem(429);
        let policy = refused.header("ratelimit-policy").unwrap();
        assert!(policy.starts_with("\"webhook-tests\""), "{policy}");
        let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    }
    // Another owner is served meanwhile.
    let bob = env.key(BOB).await;
    let to_bob = Receiver::start().await;
    let bobs = env.register_webhook(&bob, &to_bob.url, None).await;
    let test = send_test(&env, &bob, bobs["id"].as_str().unwrap()).await;
    assert_eq!(test["status"], "delivered", "{test}");
    // Once tried, the tests give their slots back.
    assert!(hanging.got().len() <= budget);
    let again = env.req("POST", &path).key(&key).send().await;
    assert_eq!(again.status, 202, "{}", again.body);
}

/// One owner's hanging endpoints do not hold another owner's deliveries back by more than one
/// attempt (issue 34, point 2): every group flows side by side. And they hold at most the
/// owner's share of the delivery pool (issue 44, point 5): of nine attempts left hanging at
/// once, two (`MAX_SLOW_DELIVERIES_PER_OWNER`) wait out the timeout, the other seven are given
/// up after a second, to be retried.
#[tokio::test]
async fn hanging_endpoints_hold_at_most_their_owners_share_and_delay_no_one_else() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let hanging = Receiver::start().await;
    hanging.set(Mode::Hang);
    let mut alices = Vec::new();
    for _ in 0..3 {
        let endpoint = env.register_webhook(&alice, &hanging.url, None).await;
        alices.push(endpoint["id"].as_str().unwrap().to_owned());
    }
    let to_bob = Receiver::start().await;
    let endpoint = env.register_webhook(&bob, &to_bob.url, None).await;
    to_bob.trust(endpoint["secret"].as_str().unwrap());
    // Alice's events are queued first, Bob's last.
    for name in ["a1", "a2", "a3"] {
        env.provision(&alice, "cloud_vps_free", Some(name)).await;
    }
    env.provision(&bob, "cloud_vps_free", Some("bobs")).await;
    let started = std::time::Instant::now();
    // The stream's function only positions and queues: the feed never waits on an endpoint.
    let fed = env.stream().await;
    assert_eq!(fed.events, 4, "{fed:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    env.deliver().await;
    let got = to_bob.accepted();
    assert_eq!(types_of(&got), ["server.provisioned"]);
    let waited = to_bob.got()[0].at - started;
    assert!(
        waited < domain::notifications::deliveries::DELIVERY_TIMEOUT,
        "Bob waited {waited:?}"
    );
    // Each of Alice's endpoints was tried with each of her events (a subject each), side by
    // side; only her share waited out the timeout. (Those given up are tried again 5 s later,
    // while the pass still waits on her share: given up again.)
    let share = env.state.config.caps.slow_deliveries as usize;
    let mut errors = Vec::new();
    for id in &alices {
        for delivery in deliveries(&env, &alice, id).await {
            assert!(delivery["attempts"].as_u64() >= Some(1), "{delivery}");
            assert_eq!(delivery["status"], "pending", "retried later: {delivery}");
            errors.push(delivery["lastError"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(errors.len(), 9);
    let waited = errors.iter().filter(|e| *e == "timed out after 10 s");
    assert_eq!(waited.count(), share, "{errors:?}");
    let given_up = errors
        .iter()
        .filter(|e| e.contains("share of the delivery pool"));
    assert_eq!(given_up.count(), 9 - share, "{errors:?}");
}

/// A delivery's outcome never undoes a rotation made while it was under way (issue 34, point
/// 5): endpoint writes name the version they read.
#[tokio::test]
async fn a_rotation_during_a_delivery_stands() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Slow).await;
    env.provision(&key, "cloud_vps_free", Some("rotated")).await;
    let rotate = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let res = env
            .req("POST", &format!("/api/webhooks/{id}/rotate"))
            .key(&key)
            .send()
            .await;
        assert_eq!(res.status, 200, "{}", res.body);
        res.json()["secret"].as_str().unwrap().to_owned()
    };
    let (fed, new) = tokio::join!(env.feed(), rotate);
    assert_eq!(fed.events, 1);
    assert_eq!(
        receiver.got().len(),
        1,
        "the attempt overlapped the rotation"
    );
    let shown = endpoint_of(&env, &key, &id).await;
    // Both writes stand: the rotation's secrets and the attempt's failure.
    assert!(shown["previousSecretValidUntil"].is_string(), "{shown}");
    assert!(shown["failingSince"].is_string(), "{shown}");
    receiver.set(Mode::Accept);
    receiver.trust(&new);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    // Signed by the new secret (the old one, trusted since registration, signs beside it).
    assert_eq!(receiver.got().last().unwrap().verified, [true, true]);
}

/// An attempt fits the time it was started in (issue 34, point 5): a name that takes longer to
/// resolve than the whole attempt may ends the attempt at 10 s, resolution included, never 10 s
/// after the name finally answered.
#[tokio::test]
async fn an_attempt_ends_at_its_timeout_whatever_the_resolver_takes() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let dns = &env.state.resolver;
    dns.answer("slow.example.com", &["93.184.215.14".parse().unwrap()]);
    let endpoint = env
        .register_webhook(&key, "https://slow.example.com/hook", None)
        .await;
    let id = endpoint["id"].as_str().unwrap();
    env.provision(&key, "cloud_vps_free", Some("slow")).await;
    dns.answer_after(Duration::from_secs(12));
    env.stream().await;
    let started = std::time::Instant::now();
    env.deliver().await;
    let took = started.elapsed();
    // At its timeout, not the resolver's 12 s plus another 10 (a margin for a loaded machine:
    // a cold make test once took 11.7 s here).
    let timeout = domain::notifications::deliveries::DELIVERY_TIMEOUT;
    assert!(took < timeout + Duration::from_secs(5), "{took:?}");
    let tried = deliveries(&env, &key, id).await;
    assert_eq!(tried[0]["lastError"], "timed out after 10 s", "{tried:#?}");
    assert_eq!(tried[0]["status"], "pending");
}

/// A failing endpoint is probed by one attempt at a time (issue 34, point 2): however many of
/// its subjects wait, the others are put off without an attempt, holding no invocation on it;
/// once an attempt gets through, every one flows.
#[tokio::test]
async fn a_failing_endpoint_is_probed_one_attempt_at_a_time() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Fail).await;
    env.provision(&key, "cloud_vps_free", Some("first")).await;
    env.feed().await;
    assert_eq!(receiver.got().len(), 1);
    // Failing now: three more subjects, answered slowly, get one attempt between them.
    receiver.set(Mode::Slow);
    for name in ["second", "third", "fourth"] {
        env.provision(&key, "cloud_vps_free", Some(name)).await;
    }
    env.feed().await;
    assert_eq!(receiver.got().len(), 2, "one probe");
    let queued = deliveries(&env, &key, &id).await;
    let attempts: Vec<u64> = queued
        .iter()
        .filter(|d| d["event"]["data"]["hostname"] != "first")
        .map(|d| d["attempts"].as_u64().unwrap())
        .collect();
    let mut sorted = attempts.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 0, 1], "{queued:#?}");
    assert!(
        queued
            .iter()
            .all(|d| d["status"] == "pending" && d["nextAttemptAt"].is_string()),
        "{queued:#?}"
    );
    // It answers again: every subject flows at once.
    receiver.set(Mode::Accept);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    let done = deliveries(&env, &key, &id).await;
    assert!(done.iter().all(|d| d["status"] == "delivered"), "{done:#?}");
    assert_eq!(receiver.accepted().len(), 5);
}

/// A delivery is claimed before it is sent: two consumers handed the same message at once (a
/// visibility that lapsed mid-attempt, a late copy) send it once; the other looks again once
/// the claim has lapsed.
#[tokio::test]
async fn a_delivery_handed_to_two_consumers_at_once_is_sent_once() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Slow).await;
    env.provision(&key, "cloud_vps_free", Some("twice")).await;
    env.stream().await;
    let queued = deliveries(&env, &key, &id).await;
    let event = &queued[0]["event"];
    let message = domain::store::queue::DeliveryMessage {
        delivery_id: queued[0]["id"].as_str().unwrap().to_owned(),
        endpoint_id: id.clone(),
        owner: owner(ALICE),
        subject: serde_json::from_value(event["subject"].clone()).unwrap(),
        sequence: event["sequence"].as_u64().unwrap(),
    };
    let deliver = |receipt: &'static str| {
        let message = message.clone();
        async move { domain::notifications::deliveries::deliver(env.state, &message, receipt).await }
    };
    let (first, second) = tokio::join!(deliver("receipt-a"), deliver("receipt-b"));
    let handled = [first.unwrap(), second.unwrap()];
    use domain::notifications::deliveries::Handled;
    // One attempt (the slow receiver then answers 500: a retry waits); the other consumer
    // found the claim and waits too, without sending.
    assert_eq!(receiver.got().len(), 1, "{handled:?}");
    assert_eq!(handled, [Handled::Waiting, Handled::Waiting]);
    let after = deliveries(&env, &key, &id).await;
    assert_eq!(after[0]["attempts"], 1, "{after:#?}");
}

/// A test event holds its endpoint's probe like any delivery: to a failing endpoint whose probe
/// another attempt holds, a test is put off without an attempt (no second request to a hanging
/// receiver), and tried once the probe is free.
#[tokio::test]
async fn a_test_to_a_failing_endpoint_waits_for_its_probe() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Fail).await;
    env.provision(&key, "cloud_vps_free", Some("first")).await;
    env.feed().await;
    assert_eq!(receiver.got().len(), 1);
    // Another attempt is probing the endpoint (it holds the probe slot).
    let probe = domain::ratelimit::slots::take(
        env.state,
        domain::store::caps::Pool::Probe,
        &id,
        "another-attempt",
        1,
        60,
    )
    .await
    .unwrap();
    receiver.set(Mode::Accept);
    let test = env
        .req("POST", &format!("/api/webhooks/{id}/test"))
        .key(&key)
        .send()
        .await;
    assert_eq!(test.status, 202, "{}", test.body);
    env.deliver().await;
    assert_eq!(receiver.got().len(), 1, "no attempt while another probes");
    domain::ratelimit::slots::release(env.state, &probe).await;
    let delivered = env.deliver_after(3600).await;
    assert!(!receiver.accepted().is_empty(), "{delivered:?}");
}

/// An endpoint that answers again is drained at a bounded rate: its waiting deliveries are
/// woken `WAKE_PER_SECOND` at a time, not all at once.
#[tokio::test]
async fn a_recovered_endpoint_is_drained_at_a_bounded_rate() {
    use domain::notifications::deliveries::WAKE_PER_SECOND;
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (receiver, id) = hooked(&env, &key, Mode::Fail).await;
    let subjects = WAKE_PER_SECOND + 5;
    for i in 0..subjects {
        env.provision(&key, "cloud_vps_free", Some(&format!("wait-{i}")))
            .await;
    }
    env.feed().await;
    // Failing: the first attempt failed, the rest were put off by the probe rule.
    receiver.set(Mode::Accept);
    let test = send_test(&env, &key, &id).await;
    assert_eq!(test["status"], "delivered", "{test}");
    let pending = |done: &[Value]| done.iter().filter(|d| d["status"] == "pending").count();
    let now = deliveries(&env, &key, &id).await;
    assert!(
        pending(&now) >= subjects - WAKE_PER_SECOND,
        "woken at once: {}",
        pending(&now)
    );
    tokio::time::sleep(Duration::from_millis(2200)).await;
    env.deliver().await;
    let later = deliveries(&env, &key, &id).await;
    assert_eq!(pending(&later), 0, "{later:#?}");
}

/// Moves delivery `d` (as its endpoint `id`'s listing answers it, of `ALICE`) to the delivery
/// queue's dead-letter queue, as SQS does with a message received too often unhandled.
async fn dead_letter(env: &TestEnv, id: &str, d: &Value) {
    let message = json!({
        "deliveryId": d["id"],
        "endpointId": id,
        "owner": ALICE.to_lowercase(),
        "subject": d["event"]["subject"],
        "sequence": d["event"]["sequence"],
    });
    env.queue
        .client()
        .send_message()
        .queue_url(domain::store::queue::dead_letter_url(env.queue.url()))
        .message_body(message.to_string())
        .message_group_id(id)
        .message_deduplication_id(d["id"].as_str().unwrap())
        .send()
        .await
        .expect("a dead-lettered message");
}

/// The `webhook.delivery_failed` events of `key`'s owner.
async fn delivery_failures(env: &TestEnv, key: &str) -> Vec<Value> {
    env.stream().await;
    let res = env
        .req("GET", "/api/events")
        .query("types=webhook.delivery_failed")
        .key(key)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["items"].as_array().unwrap().clone()
}

/// A delivery the queue gave up on is not left pending (issue 44, point 7): its message, moved
/// to the dead-letter queue, comes back to the deliveries function, which marks the delivery
/// failed and tells its owner with a `webhook.delivery_failed` event in the same write. A
/// message there that does not read is dropped; the failure event's own delivery, given up in
/// turn, ends without another event.
#[tokio::test]
async fn a_dead_lettered_delivery_is_marked_failed_and_its_owner_told() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (_receiver, id) = hooked(&env, &key, Mode::Fail).await;
    env.provision(&key, "cloud_vps_free", Some("dead")).await;
    env.feed().await;
    let pending = deliveries(&env, &key, &id).await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["status"], "pending", "{}", pending[0]);
    dead_letter(&env, &id, &pending[0]).await;
    env.queue
        .client()
        .send_message()
        .queue_url(domain::store::queue::dead_letter_url(env.queue.url()))
        .message_body("not a delivery")
        .message_group_id("stray")
        .message_deduplication_id("stray")
        .send()
        .await
        .unwrap();
    let report = env.deliver_dead_letters().await;
    assert_eq!((report.messages, report.kept), (2, 0), "{report:?}");
    let ended = deliveries(&env, &key, &id).await;
    assert_eq!(ended[0]["status"], "failed", "{}", ended[0]);
    let reason = domain::notifications::deliveries::DEAD_LETTERED;
    assert_eq!(ended[0]["lastError"], reason);
    assert!(ended[0]["nextAttemptAt"].is_null(), "{}", ended[0]);
    let told = delivery_failures(&env, &key).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["subject"]["kind"], "delivery");
    assert_eq!(told[0]["data"]["deliveryId"], pending[0]["id"]);
    assert_eq!(told[0]["data"]["endpointId"], id.as_str());
    assert_eq!(told[0]["data"]["eventType"], "server.provisioned");
    assert_eq!(told[0]["data"]["reason"], reason);
    // Handed over again (at least once), it changes nothing.
    dead_letter(&env, &id, &pending[0]).await;
    env.deliver_dead_letters().await;
    assert_eq!(delivery_failures(&env, &key).await.len(), 1);
    // The failure event goes to the endpoint like any other; given up in turn, it ends alone.
    env.deliver().await;
    let listed = deliveries(&env, &key, &id).await;
    let own = listed
        .iter()
        .find(|d| d["event"]["type"] == "webhook.delivery_failed")
        .expect("the failure event's own delivery");
    assert_eq!(own["status"], "pending", "{own}");
    dead_letter(&env, &id, own).await;
    env.deliver_dead_letters().await;
    let listed = deliveries(&env, &key, &id).await;
    let own = listed.iter().find(|d| d["id"] == own["id"]).unwrap();
    assert_eq!(own["status"], "failed", "{own}");
    assert_eq!(delivery_failures(&env, &key).await.len(), 1);
}
