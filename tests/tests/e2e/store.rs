//! Store tests against moto's real DynamoDB API.

use std::collections::BTreeMap;

use domain::store::StoreError;
use domain::store::keys::ApiKeyRecord;
use domain::store::sandboxes::{SandboxRecord, ServerOwnership};

use crate::harness::{ALICE, BOB, fresh_store, owner};

fn key_record(address: &str, id: &str, hash: &str, created: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        owner: owner(address),
        name: "k".into(),
        prefix: "svc_00000000".into(),
        key_hash: hash.into(),
        created_at: created.parse().unwrap(),
        last_used_at: None,
        expires_at: None,
        revoked_at: None,
        agent_count: 0,
        scopes: None,
        policy: None,
    }
}

fn sandbox(address: &str, id: &str, server: Option<u64>, created: &str) -> SandboxRecord {
    SandboxRecord {
        event_seq: 0,
        id: id.into(),
        owner: owner(address),
        server_id: server,
        project_id: server.map(|_| 1),
        plan: Some("cloud_vps_free".into()),
        region: Some("LT-Siauliai".into()),
        hostname: Some("h".into()),
        name: None,
        metadata: BTreeMap::from([("k".into(), "v".into())]),
        status: "deploying".into(),
        created_at: created.parse().unwrap(),
        updated_at: created.parse().unwrap(),
        lease: None,
        watch: None,
        payment: None,
        authorized_keys: Vec::new(),
        resizing: None,
    }
}

#[tokio::test]
async fn api_keys_round_trip_and_duplicate_hashes_are_refused() {
    let store = fresh_store().await;
    let record = key_record(ALICE, "key_1", &"a".repeat(64), "2026-11-21T10:00:00Z");
    store.put_api_key(&record, None).await.unwrap();
    assert_eq!(
        store.api_key_by_hash(&"a".repeat(64)).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(store.api_key_by_hash(&"b".repeat(64)).await.unwrap(), None);
    let again = key_record(BOB, "key_2", &"a".repeat(64), "2026-11-21T10:00:01Z");
    assert!(matches!(
        store.put_api_key(&again, None).await,
        Err(StoreError::ConditionFailed)
    ));
    // Bob got nothing; Alice still owns the hash.
    assert_eq!(
        store
            .api_key_by_hash(&"a".repeat(64))
            .await
            .unwrap()
            .unwrap()
            .owner,
        ALICE
    );
}

#[tokio::test]
async fn revoking_is_owner_only_and_idempotent() {
    let store = fresh_store().await;
    store
        .put_api_key(
            &key_record(ALICE, "key_1", &"c".repeat(64), "2026-11-21T10:00:00Z"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .revoke_api_key(
                &owner(BOB),
                "key_1",
                "2026-11-21T11:00:00Z".parse().unwrap()
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .api_key_by_hash(&"c".repeat(64))
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    let first = store
        .revoke_api_key(
            &owner(ALICE),
            "key_1",
            "2026-11-21T11:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.revoked_at.map(String::from).as_deref(),
        Some("2026-11-21T11:00:00Z")
    );
    let second = store
        .revoke_api_key(
            &owner(ALICE),
            "key_1",
            "2026-11-21T12:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.revoked_at.map(String::from).as_deref(),
        Some("2026-11-21T11:00:00Z")
    );
    assert_eq!(
        store
            .revoke_api_key(
                &owner(ALICE),
                "key_nope",
                "2026-11-21T12:00:00Z".parse().unwrap()
            )
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn keys_list_per_owner_newest_first_with_pages() {
    let store = fresh_store().await;
    for i in 0..3 {
        let created = format!("2026-11-21T10:00:0{i}Z");
        store
            .put_api_key(
                &key_record(
                    ALICE,
                    &format!("key_{i}"),
                    &format!("{i}").repeat(64),
                    &created,
                ),
                None,
            )
            .await
            .unwrap();
    }
    store
        .put_api_key(
            &key_record(BOB, "key_b", &"9".repeat(64), "2026-11-21T10:00:09Z"),
            None,
        )
        .await
        .unwrap();
    let first = store.api_keys_of(&owner(ALICE), 2, None).await.unwrap();
    assert_eq!(
        first
            .items
            .iter()
            .map(|k| k.id.as_str())
            .collect::<Vec<_>>(),
        ["key_2", "key_1"]
    );
    let cursor = first.next_cursor.expect("a second page");
    let second = store
        .api_keys_of(&owner(ALICE), 2, Some(&cursor))
        .await
        .unwrap();
    assert_eq!(
        second
            .items
            .iter()
            .map(|k| k.id.as_str())
            .collect::<Vec<_>>(),
        ["key_0"]
    );
    // A cursor of Alice's listing is refused in Bob's.
    assert!(
        store
            .api_keys_of(&owner(BOB), 2, Some(&cursor))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_server_is_recorded_once_with_its_sandbox() {
    let store = fresh_store().await;
    let ownership = ServerOwnership {
        server_id: 42,
        owner: owner(ALICE),
        sandbox_id: "sbx_1".into(),
        project_id: 1,
        created_at: "2026-11-21T10:00:00Z".parse().unwrap(),
    };
    let record = sandbox(ALICE, "sbx_1", Some(42), "2026-11-21T10:00:00Z");
    store.record_server(&ownership, &record).await.unwrap();
    assert_eq!(
        store.server_ownership(42).await.unwrap(),
        Some(ownership.clone())
    );
    assert_eq!(store.sandbox("sbx_1").await.unwrap(), Some(record));
    // A second claim of the same server, even by its owner, is refused and writes nothing.
    let stolen = ServerOwnership {
        owner: owner(BOB),
        sandbox_id: "sbx_2".into(),
        ..ownership.clone()
    };
    let result = store
        .record_server(
            &stolen,
            &sandbox(BOB, "sbx_2", Some(42), "2026-11-21T10:00:01Z"),
        )
        .await;
    assert!(matches!(result, Err(StoreError::ConditionFailed)));
    assert_eq!(
        store.server_ownership(42).await.unwrap().unwrap().owner,
        ALICE
    );
    assert_eq!(store.sandbox("sbx_2").await.unwrap(), None);
}

#[tokio::test]
async fn a_sandbox_naming_a_server_needs_its_owner() {
    let store = fresh_store().await;
    let ownership = ServerOwnership {
        server_id: 7,
        owner: owner(ALICE),
        sandbox_id: "sbx_a".into(),
        project_id: 1,
        created_at: "2026-11-21T10:00:00Z".parse().unwrap(),
    };
    store
        .record_server(
            &ownership,
            &sandbox(ALICE, "sbx_a", Some(7), "2026-11-21T10:00:00Z"),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .put_sandbox(
                &sandbox(BOB, "sbx_b", Some(7), "2026-11-21T10:00:01Z"),
                None
            )
            .await,
        Err(StoreError::ConditionFailed)
    ));
    assert!(matches!(
        store
            .put_sandbox(
                &sandbox(ALICE, "sbx_c", Some(8), "2026-11-21T10:00:01Z"),
                None
            )
            .await,
        Err(StoreError::ConditionFailed)
    ));
    store
        .put_sandbox(
            &sandbox(ALICE, "sbx_d", Some(7), "2026-11-21T10:00:02Z"),
            None,
        )
        .await
        .unwrap();
    store
        .put_sandbox(&sandbox(BOB, "sbx_e", None, "2026-11-21T10:00:03Z"), None)
        .await
        .unwrap();
    assert_eq!(store.sandbox("sbx_b").await.unwrap(), None);
    let alice = store.sandboxes_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(
        alice
            .items
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        ["sbx_d", "sbx_a"]
    );
    assert_eq!(alice.next_cursor, None);
}

#[tokio::test]
async fn watch_changes_are_conditional_and_keep_the_refreshers_schedule() {
    use domain::store::sandboxes::{SandboxStatus, WatchChange};
    let store = fresh_store().await;
    let mut record = sandbox(ALICE, "sbx_w", Some(7), "2026-11-21T10:00:00Z");
    let watch = domain::servers::stages::ordered(
        Default::default(),
        "2026-11-21T10:00:00Z".parse().unwrap(),
    );
    record.watch = Some(watch.clone());
    let ownership = domain::store::sandboxes::ServerOwnership {
        server_id: 7,
        owner: owner(ALICE),
        sandbox_id: "sbx_w".into(),
        project_id: 1,
        created_at: "2026-11-21T10:00:00Z".parse().unwrap(),
    };
    store.record_server(&ownership, &record).await.unwrap();
    // A new record naming a watched server is due at once.
    assert_eq!(store.watches_due(0, 10).await.unwrap().len(), 1);
    let change = |read: u64, due: Option<i64>, unwatch: bool| SandboxStatus {
        sandbox_id: "sbx_w".into(),
        status: "deployed".into(),
        hostname: Some("web-1".into()),
        watch: Some(WatchChange {
            watch: domain::store::sandboxes::Watch {
                seq: read + 1,
                ..watch.clone()
            },
            read_seq: Some(read),
            due,
        }),
        unwatch,
        ..SandboxStatus::default()
    };
    assert!(
        store
            .change_sandbox(
                &change(0, Some(500), false),
                domain::time::Timestamp::of(domain::time::now())
            )
            .await
            .unwrap()
    );
    let stored = store.sandbox("sbx_w").await.unwrap().unwrap();
    assert_eq!(
        (stored.status.as_str(), stored.hostname.as_deref()),
        ("deployed", Some("web-1"))
    );
    assert_eq!(stored.watch.unwrap().seq, 1);
    assert!(store.watches_due(499, 10).await.unwrap().is_empty());
    assert_eq!(store.watches_due(500, 10).await.unwrap().len(), 1);
    // Written from a stale read: refused.
    assert!(
        !store
            .change_sandbox(
                &change(0, Some(1), false),
                domain::time::Timestamp::of(domain::time::now())
            )
            .await
            .unwrap()
    );
    // Off the schedule.
    assert!(
        store
            .change_sandbox(
                &change(1, None, true),
                domain::time::Timestamp::of(domain::time::now())
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .watches_due(i64::MAX / 2, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // No such sandbox: refused, nothing created.
    let missing = SandboxStatus {
        sandbox_id: "sbx_none".into(),
        status: "x".into(),
        ..SandboxStatus::default()
    };
    assert!(
        !store
            .change_sandbox(&missing, domain::time::Timestamp::of(domain::time::now()))
            .await
            .unwrap()
    );
    assert_eq!(store.sandbox("sbx_none").await.unwrap(), None);
}

/// A resize's hold on a server's record is the store's to keep, not only its callers': from a
/// current read, a second order cannot take a record another holds, and only the holder
/// releases it (`resizing`'s own condition, beside the lease's `seq`).
#[tokio::test]
async fn a_resize_hold_is_taken_by_one_order_and_released_only_by_it() {
    use domain::store::sandboxes::{Lease, LeaseChange, LeaseState, Resizing, SandboxStatus};
    let store = fresh_store().await;
    let at: domain::time::Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
    let lease = Lease {
        state: LeaseState::Active,
        paid_until: "2026-12-21T10:00:00Z".parse().unwrap(),
        grace_ends_at: "2026-12-24T10:00:00Z".parse().unwrap(),
        paid_seconds: 30 * 86_400,
        seq: 0,
        failures: 0,
        power_on: false,
        noticed: None,
    };
    let mut record = sandbox(ALICE, "sbx_r", Some(8), "2026-11-21T10:00:00Z");
    record.lease = Some(lease.clone());
    let ownership = ServerOwnership {
        server_id: 8,
        owner: owner(ALICE),
        sandbox_id: "sbx_r".into(),
        project_id: 1,
        created_at: at,
    };
    store.record_server(&ownership, &record).await.unwrap();
    // Each change names the lease's seq as it now is: only the hold's own condition decides.
    let change = |read: u64, plan: &str, resizing: Resizing| SandboxStatus {
        sandbox_id: "sbx_r".into(),
        status: "deployed".into(),
        plan: Some(plan.into()),
        resizing: Some(resizing),
        lease: Some(LeaseChange {
            lease: Lease {
                seq: read + 1,
                ..lease.clone()
            },
            read_seq: Some(read),
            due: None,
        }),
        ..SandboxStatus::default()
    };
    let take = |order: &str| Resizing::Take(order.into());
    let release = |order: &str| Resizing::Release(order.into());
    let steps = [
        (0, "big", take("ord_a"), true),
        (1, "bigger", take("ord_b"), false),
        (1, "big", take("ord_a"), true),
        (2, "small", release("ord_b"), false),
        (2, "big", release("ord_a"), true),
        (3, "bigger", take("ord_b"), true),
    ];
    for (read, plan, resizing, written) in steps {
        let what = format!("{resizing:?} from seq {read}");
        let done = store
            .change_sandbox(&change(read, plan, resizing), at)
            .await
            .unwrap();
        assert_eq!(done, written, "{what}");
    }
    let stored = store.sandbox("sbx_r").await.unwrap().unwrap();
    assert_eq!(
        (stored.resizing.as_deref(), stored.plan.as_deref()),
        (Some("ord_b"), Some("bigger"))
    );
    assert_eq!(stored.lease.unwrap().seq, 4);
}

/// One use of `hash` in window `window` (guessing it is new when `open_first`): its count.
async fn use_in(
    env: &crate::harness::TestEnv,
    hash: &str,
    window: Option<u64>,
    open_first: bool,
) -> Option<u64> {
    let now = domain::time::rfc3339(domain::time::now());
    let usage = domain::store::uses::Use {
        seen_attribute: "lastUsedAt",
        now: &now,
        window,
        open_first,
    };
    let (record, count) = env
        .store
        .use_api_key(hash, &usage)
        .await
        .unwrap()
        .expect("the key");
    assert_eq!(record.owner, crate::harness::ALICE);
    count
}

#[tokio::test]
async fn a_credentials_window_is_counted_in_its_read_whatever_the_instance_guessed() {
    let env = crate::harness::TestEnv::new().await;
    let key = env.key(crate::harness::ALICE).await;
    let hash = domain::identity::auth::api_key::ApiKey::parse(&key)
        .unwrap()
        .hash();
    let writes = || env.faults.calls("UpdateItem");
    // One instance opens window 100 in one write.
    let before = writes();
    assert_eq!(use_in(&env, &hash, Some(100), true).await, Some(1));
    assert_eq!(writes() - before, 1);
    // Another has never counted it and guesses a new window: the failed condition answers
    // the item, and the count goes on in a second write.
    let before = writes();
    assert_eq!(use_in(&env, &hash, Some(100), true).await, Some(2));
    assert_eq!(writes() - before, 2);
    // A right guess: one write.
    let before = writes();
    assert_eq!(use_in(&env, &hash, Some(100), false).await, Some(3));
    assert_eq!(writes() - before, 1);
    // The next window, guessed as the old one: opened after one failed condition.
    assert_eq!(use_in(&env, &hash, Some(105), false).await, Some(1));
    // An instance whose clock is behind (window 100 after 105): answered, not counted, and the
    // newer window is left as it was.
    assert_eq!(use_in(&env, &hash, Some(100), false).await, None);
    assert_eq!(use_in(&env, &hash, Some(105), false).await, Some(2));
    // The limit off: the record, no count.
    assert_eq!(use_in(&env, &hash, None, false).await, None);
    // No such key: nothing, and nothing written into being.
    let now = domain::time::rfc3339(domain::time::now());
    let usage = domain::store::uses::Use {
        seen_attribute: "lastUsedAt",
        now: &now,
        window: Some(105),
        open_first: true,
    };
    let unknown = "00".repeat(32);
    assert!(
        env.store
            .use_api_key(&unknown, &usage)
            .await
            .unwrap()
            .is_none()
    );
    assert!(env.store.api_key_by_hash(&unknown).await.unwrap().is_none());
}
