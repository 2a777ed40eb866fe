//! Events (issue 20): every change an owner cares about is written in the same transaction as
//! the change, numbered per subject, and read back oldest first from `GET /api/events`.
//! A real walk: a paid server provisioned, ready, warned 24 h and 1 h before its paid time
//! ends, renewed, expired (powered off), deleted by its owner; a key revoked with its agent; a
//! paid order the provider refuses, credited and refunded; a deployment that never finishes.
//! Every event also reaches a webhook receiver, signed, in order per subject.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use e2e::sim::Fault;

use crate::harness::{ALICE, BOB, Options, PROJECT, TestEnv, owner, pay};
use crate::paid_time::{paid_renewal, paid_server};
use crate::resize::{resize, resize_payment};
use e2e::receiver::Receiver;

/// Two-day periods: both notices fall inside one.
const PERIOD: i64 = 48 * 3600;
const GRACE: i64 = 7200;

async fn env() -> TestEnv {
    TestEnv::with(Options {
        period_seconds: PERIOD as u64,
        grace_seconds: GRACE as u64,
        vars: vec![("DEPLOY_DEADLINE_VPS_SECONDS", "86400".into())],
        ..Options::default()
    })
    .await
}

/// Every event of the caller's feed, walking its pages of `limit`; and the last cursor.
async fn feed(env: &TestEnv, key: &str, query: &str, limit: u32) -> (Vec<Value>, Option<String>) {
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let after = cursor
            .as_ref()
            .map(|c| format!("&after={c}"))
            .unwrap_or_default();
        let res = env
            .req("GET", "/api/events")
            .key(key)
            .query(&format!("limit={limit}{after}{query}"))
            .send()
            .await;
        assert_eq!(res.status, 200, "{}", res.body);
        let page = res.json();
        let items = page["items"].as_array().unwrap().clone();
        let next = page["nextCursor"].as_str().map(str::to_owned);
        if items.is_empty() {
            return (events, next);
        }
        events.extend(items);
        cursor = next;
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// A paid order the provider refuses: its payment settles and becomes a credit, which an
/// operator refunds.
async fn credited_and_refunded(env: &TestEnv, key: &str) {
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai", "hostname": "no"});
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
    env.sim
        .inject(Fault::status("/projects/", 400).on(Method::POST));
    let refused = env
        .req("POST", &path)
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    let doc = refused.problem(409);
    let id = domain::x402::PaymentKey::parse(doc["payment"]["id"].as_str().unwrap()).unwrap();
    domain::billing::order::ledger::lock_refund(env.state, &id)
        .await
        .unwrap();
    domain::billing::order::ledger::refund(env.state, &id, "0xrefund")
        .await
        .unwrap();
}

/// A free server whose deployment never finishes: past its deadline it is given up.
async fn never_deployed(env: &TestEnv, key: &str) {
    env.sim
        .set_stages(Duration::ZERO, Duration::from_secs(10 * 86400));
    env.provision(key, "cloud_vps_free", Some("stuck")).await;
    env.pass_after(86400 + 1).await;
    env.pass_after(60).await;
}

/// The receiver got every event of the feed — every type but the approvals' (an owner's signed
/// grant: `approvals.rs` follows them to a receiver), a delivery's failure (a fault of the
/// queue's: `webhooks.rs` makes one) and a reversal (a reorganisation of the real chain's:
/// `paid_on_the_real_rails.rs` makes one) — each verified with the endpoint's secret,
/// `webhook-id` its id, in the feed's order per subject.
fn every_event_at_the_receiver(events: &[Value], receiver: &Receiver) {
    let mut all: Vec<&str> = types(events);
    all.sort_unstable();
    all.dedup();
    let expected: Vec<&str> = {
        let mut names: Vec<&str> = domain::store::events::EventType::ALL
            .iter()
            .map(|t| t.as_str())
            .filter(|name| !name.starts_with("approval.") && !name.starts_with("webhook."))
            .filter(|name| *name != "payment.reversed")
            .collect();
        names.sort_unstable();
        names
    };
    assert_eq!(all, expected, "{events:#?}");
    let got = receiver.got();
    assert!(got.iter().all(|r| r.accepted && r.verified == [true]));
    assert!(got.iter().all(|r| r.id == r.event["id"]));
    let per_subject = |events: Vec<&Value>| {
        let mut by: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for e in events {
            by.entry(e["subject"]["id"].as_str().unwrap().to_owned())
                .or_default()
                .push(e["sequence"].as_u64().unwrap());
        }
        by
    };
    let received: Vec<&Value> = got.iter().map(|r| &r.event).collect();
    assert_eq!(received.len(), events.len(), "{received:#?}");
    // Each delivery's body is the event as the feed answers it (its owner in EIP-55 too).
    for event in &received {
        let fed = events.iter().find(|e| e["id"] == event["id"]);
        assert_eq!(
            Some(*event),
            fed,
            "a delivery differs from the feed's event"
        );
    }
    assert_eq!(per_subject(received), per_subject(events.iter().collect()));
}

#[tokio::test]
async fn a_servers_life_and_its_money_are_in_the_feed_and_at_the_receiver_in_order() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&key, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());
    let (server, sandbox, _) = paid_server(&env, &key, "evented").await;
    // Deployed and answering SSH: ready.
    for _ in 0..5 {
        env.clock.advance(Duration::from_secs(30));
        env.pass().await;
    }
    let warn_day = env.reconcile_in(PERIOD - 24 * 3600 + 1).await;
    assert_eq!(warn_day.leases.notices, 1, "{warn_day:?}");
    let warn_hour = env.reconcile_in(PERIOD - 3600 + 1).await;
    assert_eq!(warn_hour.leases.notices, 1, "{warn_hour:?}");
    // Nothing more to say before the end.
    assert_eq!(env.reconcile_in(PERIOD - 60).await.leases.notices, 0);
    let (_, renewed) = paid_renewal(&env, &key, server, 1).await;
    assert_eq!(renewed.status, 201, "{}", renewed.body);
    // Moved to a bigger plan for the paid time left.
    let bigger = "B1-2-2gb-40s-shared";
    let (_, payment) = resize_payment(&env, &key, server, bigger).await;
    let resized = resize(&env, &key, server, bigger, Some(&payment)).await;
    assert_eq!(resized.status, 201, "{}", resized.body);
    let expired = env.reconcile_in(2 * PERIOD + 1).await;
    assert_eq!(expired.leases.expired, 1, "{expired:?}");
    let deleted = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert!(deleted.status < 300, "{}", deleted.body);
    // A second key with an agent, revoked.
    let other = env.key(ALICE).await;
    let agent = env
        .req("POST", "/api/agents")
        .key(&other)
        .json(json!({"name": "doomed"}))
        .send()
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let other_id = agent.json()["keyId"].as_str().unwrap().to_owned();
    domain::identity::keys::revoke(&env.store, &owner(ALICE), &other_id, domain::time::now())
        .await
        .unwrap();

    // Events reach the receiver as the stream hands them over, mid-walk and at its end.
    let fed = env.feed().await;
    assert!(fed.events >= 10, "{fed:?}");
    credited_and_refunded(&env, &key).await;
    never_deployed(&env, &key).await;
    env.feed().await;

    let (events, _) = feed(&env, &key, "", 3).await;
    every_event_at_the_receiver(&events, &receiver);
    let server_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["subject"]["id"] == sandbox.as_str())
        .collect();
    assert_eq!(
        types(
            &server_events
                .iter()
                .map(|e| (*e).clone())
                .collect::<Vec<_>>()
        ),
        [
            "server.provisioned",
            "server.ready",
            "lease.expiring",
            "lease.expiring",
            "lease.renewed",
            "server.resized",
            "lease.expired",
            "server.power_changed",
            "server.deleted",
        ],
        "{events:#?}"
    );
    let notices: Vec<i64> = server_events
        .iter()
        .filter(|e| e["type"] == "lease.expiring")
        .map(|e| e["data"]["secondsLeft"].as_i64().unwrap())
        .collect();
    assert_eq!(notices, [24 * 3600, 3600]);
    let notice = server_events[2];
    assert_eq!(
        notice["data"]["renew"]["href"],
        format!("/api/cloud/servers/{server}/renewals")
    );
    assert!(notice["data"]["pricePerPeriod"].is_string(), "{notice}");
    let ready = server_events[1];
    assert_eq!(ready["data"]["hostKeys"][0]["algorithm"], "ssh-ed25519");
    let resized = &server_events[5]["data"];
    assert_eq!(
        (&resized["from"], &resized["plan"]),
        (&json!("B1-1-1gb-20s-shared"), &json!("B1-2-2gb-40s-shared"))
    );
    assert_eq!(server_events[7]["data"]["power"], "off");
    assert_eq!(server_events[8]["data"]["by"], "owner");
    // Each subject's events are numbered 1, 2, … in the order written, each id once.
    let mut by_subject: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for event in &events {
        by_subject
            .entry(event["subject"]["id"].as_str().unwrap().to_owned())
            .or_default()
            .push(event["sequence"].as_u64().unwrap());
    }
    for (subject, sequences) in &by_subject {
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(sequences, &expected, "{subject}");
    }
    let mut ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), events.len());
    // Money: four payments settled (the server, its renewal, its resize, the order that became
    // a credit).
    let settled = events.iter().filter(|e| e["type"] == "payment.settled");
    assert_eq!(settled.count(), 4, "{events:#?}");
    // The key and its agent.
    let key_events: Vec<Value> = events
        .iter()
        .filter(|e| e["subject"]["id"] == other_id.as_str())
        .cloned()
        .collect();
    assert_eq!(types(&key_events), ["key.revoked", "agent.deactivated"]);
    assert_eq!(
        key_events[1]["data"]["agentIds"].as_array().unwrap().len(),
        1
    );
    // Owners in EIP-55, as every answer.
    assert_eq!(
        events[0]["owner"],
        domain::address::Checksummed::from(ALICE).to_string()
    );

    // Filters: one subject, some types.
    let (only_server, _) = feed(&env, &key, &format!("&subject={sandbox}"), 100).await;
    assert_eq!(only_server.len(), server_events.len());
    let (only_leases, _) = feed(&env, &key, "&types=lease.expired,lease.renewed", 100).await;
    assert_eq!(types(&only_leases), ["lease.renewed", "lease.expired"]);
    // The last cursor resumes: nothing new, then what comes next.
    let (_, resume) = feed(&env, &key, "", 100).await;
    let resume = resume.expect("a cursor to resume from");
    let later = env
        .req("GET", "/api/events")
        .key(&key)
        .query(&format!("after={resume}"))
        .send()
        .await;
    assert_eq!(later.json()["items"], json!([]), "{}", later.body);

    // Another owner sees none of it, not even by naming the subject.
    let bob = env.key(BOB).await;
    assert!(feed(&env, &bob, "", 100).await.0.is_empty());
    assert!(
        feed(&env, &bob, &format!("&subject={sandbox}"), 100)
            .await
            .0
            .is_empty()
    );
}

#[tokio::test]
async fn a_bad_feed_request_is_a_400_naming_its_field() {
    let env = env().await;
    let key = env.key(ALICE).await;
    for (query, field) in [
        ("types=server.exploded", "types"),
        ("subject=nope", "subject"),
        ("limit=0", "limit"),
        ("after=not-a-cursor", "after"),
    ] {
        let res = env
            .req("GET", "/api/events")
            .key(&key)
            .query(query)
            .send()
            .await;
        let problem = res.problem(400);
        assert!(problem.to_string().contains(field), "{query}: {problem}");
    }
}

/// The outbox holds: an event is written with its change or not at all, and two writers that
/// read the same subject cannot both write its next event.
#[tokio::test]
async fn an_event_is_written_with_its_change_or_not_at_all() {
    use domain::store::events::{
        EventData, ServerFailed, ServerPowerChanged, Subject, SubjectKind,
    };
    use domain::store::sandboxes::{SandboxStatus, Status, WatchChange};

    let env = env().await;
    let key = env.key(ALICE).await;
    let (_, sandbox) = env
        .provision(&key, "cloud_vps_free", Some("outboxed"))
        .await;
    let store = &env.store;
    let read = store.sandbox(&sandbox).await.unwrap().unwrap();
    // A free server's first event: provisioned.
    assert_eq!(read.event_seq, 1);
    let at = env.state.clock.event_time();
    let change = |status: &str, power: &str| SandboxStatus {
        sandbox_id: read.id.clone(),
        status: Status::from(status),
        outbox: Some(domain::notifications::events::one(
            domain::notifications::events::of_server(&read, at),
            EventData::ServerPowerChanged(ServerPowerChanged {
                server: domain::notifications::events::server_facts(&read),
                power: power.to_owned(),
                was: None,
                by: None,
            }),
        )),
        ..SandboxStatus::default()
    };
    let subject = Subject {
        kind: SubjectKind::Server,
        id: sandbox.clone(),
    };
    let events = || async {
        store
            .events_of_subject(&subject, 100, None)
            .await
            .unwrap()
            .items
    };
    // Two writers read the same sandbox: the first writes its change and its event...
    assert!(
        store
            .change_sandbox(
                &change("off-first", "off"),
                domain::time::Timestamp::of(domain::time::now())
            )
            .await
            .unwrap()
    );
    // ...the second, numbered from the same read, writes neither.
    assert!(
        !store
            .change_sandbox(
                &change("on-second", "on"),
                domain::time::Timestamp::of(domain::time::now())
            )
            .await
            .unwrap()
    );
    let after = store.sandbox(&sandbox).await.unwrap().unwrap();
    assert_eq!(after.status.as_str(), "off-first");
    assert_eq!(after.event_seq, 2);
    let written = events().await;
    assert_eq!(written.len(), 2);
    assert_eq!(written[0].kind, "server.provisioned");
    assert_eq!(
        (written[1].sequence, &written[1].data["power"]),
        (2, &json!("off"))
    );
    // A change whose own condition fails (a watch read before another write) writes no event.
    let watch = after.watch.clone().expect("a watched server");
    let stale = SandboxStatus {
        watch: Some(WatchChange {
            watch: watch.clone(),
            read_seq: Some(watch.seq + 7),
            due: None,
        }),
        outbox: Some(domain::notifications::events::one(
            domain::notifications::events::of_server(&after, at),
            EventData::ServerFailed(ServerFailed {
                server: domain::notifications::events::server_facts(&after),
                reason: "stale".into(),
            }),
        )),
        ..change("stale", "on")
    };
    assert!(
        !store
            .change_sandbox(&stale, domain::time::Timestamp::of(domain::time::now()))
            .await
            .unwrap()
    );
    assert_eq!(events().await.len(), 2);
    // Kept 30 days: the item's TTL.
    let item = store
        .client()
        .get_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S(format!("EVENTS#server#{sandbox}")))
        .key("sk", AttributeValue::S("EVENT#000000000002".into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let expires: i64 = item["expiresEpoch"].as_n().unwrap().parse().unwrap();
    let occurred = written[1].occurred_at.timestamp().unix();
    assert_eq!(expires - occurred, 30 * 24 * 3600);
    assert_eq!(
        store
            .sandbox(&sandbox)
            .await
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "off-first"
    );
}

/// The owner's feed is in the order the stream hands events over, not the order they were
/// stamped: an event stamped earlier whose change committed later (a slow writer) still comes
/// after a cursor taken before it committed. Two positioners racing for one owner (two shards)
/// both place theirs, one after the other; a record handed over again is placed once.
#[tokio::test]
async fn the_feed_never_skips_an_event_that_committed_after_a_later_stamped_one() {
    let env = env().await;
    let key = env.key(ALICE).await;
    let (slow, fast) = (
        env.issue_key(ALICE, "slow").await.1,
        env.issue_key(ALICE, "fast").await.1,
    );
    let now = domain::time::now();
    domain::identity::keys::revoke(&env.store, &owner(ALICE), &fast, now)
        .await
        .unwrap();
    env.feed().await;
    let (seen, cursor) = feed(&env, &key, "", 10).await;
    assert_eq!(types(&seen), ["key.revoked"]);
    let cursor = cursor.expect("a cursor");
    // The slow writer stamped its change a minute before the one the poller has seen.
    domain::identity::keys::revoke(
        &env.store,
        &owner(ALICE),
        &slow,
        now - time::Duration::minutes(1),
    )
    .await
    .unwrap();
    env.feed().await;
    let later = env
        .req("GET", "/api/events")
        .key(&key)
        .query(&format!("after={cursor}"))
        .send()
        .await;
    let items = later.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1, "{}", later.body);
    assert_eq!(items[0]["subject"]["id"], slow.as_str());
    assert!(items[0]["occurredAt"].as_str() < seen[0]["occurredAt"].as_str());

    // Two more, positioned side by side (as two shards' batches would be), then again.
    let (a, b) = (
        env.issue_key(ALICE, "a").await.1,
        env.issue_key(ALICE, "b").await.1,
    );
    let mut events = Vec::new();
    for id in [&a, &b] {
        domain::identity::keys::revoke(&env.store, &owner(ALICE), id, now)
            .await
            .unwrap();
        let subject = domain::store::events::Subject {
            kind: domain::store::events::SubjectKind::Key,
            id: id.clone(),
        };
        let page = env.store.events_of_subject(&subject, 10, None).await;
        events.push(page.unwrap().items.remove(0));
    }
    let (first, second) = tokio::join!(
        domain::notifications::events::position(env.state, &events[0]),
        domain::notifications::events::position(env.state, &events[1]),
    );
    let mut placed = [first.unwrap(), second.unwrap()];
    placed.sort();
    assert_eq!(placed, [3, 4]);
    let again = domain::notifications::events::position(env.state, &events[0])
        .await
        .unwrap();
    assert!(placed.contains(&again));
    env.feed().await;
    let (all, _) = feed(&env, &key, "", 10).await;
    assert_eq!(types(&all), ["key.revoked"; 4]);
}

/// The local feed reads on after moto cancels a transaction (which restores a copy of the
/// table, and of its stream): before, an iterator kept from an earlier pass read the old
/// copy's stream, and no event reached the events function again.
#[tokio::test]
async fn the_local_feed_reads_on_after_a_cancelled_transaction() {
    let env = env().await;
    let (first, second) = (
        env.issue_key(ALICE, "first").await.1,
        env.issue_key(ALICE, "second").await.1,
    );
    let now = domain::time::now();
    let revoke = |id: String| {
        let store = &env.store;
        async move { domain::identity::keys::revoke(store, &owner(ALICE), &id, now).await }
    };
    revoke(first).await.unwrap();
    assert_eq!(env.feed().await.events, 1);
    let missing = aws_sdk_dynamodb::types::ConditionCheck::builder()
        .table_name(env.store.table())
        .key("pk", AttributeValue::S("NONE#here".into()))
        .key("sk", AttributeValue::S("NONE".into()))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    let cancelled = env
        .store
        .client()
        .transact_write_items()
        .transact_items(
            aws_sdk_dynamodb::types::TransactWriteItem::builder()
                .condition_check(missing)
                .build(),
        )
        .send()
        .await;
    assert!(cancelled.is_err(), "the transaction is cancelled");
    revoke(second).await.unwrap();
    assert_eq!(env.feed().await.events, 1, "the second revocation is fed");
}
