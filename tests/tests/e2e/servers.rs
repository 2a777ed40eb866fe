//! Servers (issue point 6): provisioning free plans, refusing paid ones, validation before any
//! create, listing only the caller's servers.

use aws_sdk_dynamodb::types::AttributeValue;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, PROJECT, TestEnv};

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn creates(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| r.starts_with("POST /projects/"))
        .count()
}

#[tokio::test]
async fn a_free_plan_is_provisioned_and_recorded() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // The owner's keys: one added first (named by its id; nothing reaches the provider until
    // the server is made), one given as its public key line.
    let added = env
        .req("POST", "/api/ssh-keys")
        .key(&key)
        .json(json!({"publicKey": e2e::shell::public(&e2e::shell::key_pair())}))
        .send()
        .await
        .json();
    let accounts_keys = env.sim.account_keys().len();
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(json!({
            "plan": "cloud_vps_free", "region": "LT-Siauliai", "image": "debian_12_64bit",
            "hostname": "runner-01",
            "ssh_keys": [added["id"],
                         e2e::shell::public(&e2e::shell::key_pair())],
            "user_data": "I2Nsb3VkLWNvbmZpZwo=",
            "tags": {"env": "ci"}
        }))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let server = res.json();
    let id = server["id"].as_u64().unwrap();
    let sandbox_id = server["sandboxId"].as_str().unwrap().to_owned();
    assert_eq!(server["hostname"], "runner-01");
    assert_eq!(server["status"], "deploying");
    assert_eq!(server["deployed_image"]["slug"], "debian_12_64bit");
    assert_eq!(
        res.header("location"),
        Some(format!("/api/sandboxes/{sandbox_id}").as_str())
    );
    // The provider got our tags for reconciliation, plus the caller's.
    let tags = env.sim.server_tags(id).unwrap();
    assert_eq!(
        tags,
        json!({"env": "ci", "svc-owner": ALICE, "svc-sandbox": sandbox_id,
               "svc-deployment": env.store.table()})
    );
    // Ownership and sandbox are recorded.
    let ownership = env.store.server_ownership(id).await.unwrap().unwrap();
    assert_eq!(
        (ownership.owner.as_str(), ownership.project_id),
        (ALICE, PROJECT)
    );
    let sandbox = env.store.sandbox(&sandbox_id).await.unwrap().unwrap();
    assert_eq!(sandbox.server_id, Some(id));
    assert_eq!(sandbox.plan.as_deref(), Some("cloud_vps_free"));
    assert_eq!(sandbox.region.as_deref(), Some("LT-Siauliai"));
    assert_eq!(sandbox.hostname.as_deref(), Some("runner-01"));
    assert_eq!(sandbox.status.as_str(), "deploying");
    // Both keys are the owner's, on the server in the request's order.
    assert_eq!(sandbox.authorized_keys.len(), 2);
    assert_eq!(sandbox.authorized_keys[0].id, added["id"].as_str().unwrap());
    // Registered with the provider as the server was made, in the request's order.
    let registered = env.sim.account_keys();
    assert_eq!(registered.len(), accounts_keys + 2);
    let on_server = env.sim.server_key_ids(id).unwrap();
    assert_eq!(
        (on_server.len(), on_server[0]),
        (2, registered[accounts_keys].0)
    );
    assert_eq!(creates(&env), 1);
}

#[tokio::test]
async fn a_paid_plan_gets_402_with_its_price_and_is_never_created() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"}))
        .send()
        .await;
    assert_eq!(res.status, 402, "{}", res.body);
    let doc = res.json();
    // One period (730 h) of the hourly cycle: 0.0218 EUR × 730 × 1.16; the quote says how.
    assert_eq!(
        doc["price"],
        json!({"plan": "B1-1-1gb-20s-shared", "image": null, "periods": 1, "costUsd": 18.46024,
               "amount": "18460240", "asset": "USDC",
               "period": {"hours": 730.0, "markupPercent": 0.0, "usd": 18.46024, "imagePart": null,
                          "planPart": {"hourly": 0.0218, "currency": "EUR", "usdRate": 1.16,
                              "usd": 18.46024}}})
    );
    assert_eq!(doc["accepts"][0]["maxAmountRequired"], "18460240");
    // A plan with Monthly and Hourly prices is billed on the hourly cycle it is created on.
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(json!({"plan": "e5_1650v4", "region": "LT-Siauliai"}))
        .send()
        .await;
    assert_eq!(res.json()["price"]["amount"], "216018680");
    // A licensed image adds its own hourly price: (0.2551 + 0.0411) EUR × 730 × 1.16.
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(json!({"plan": "e5_1650v4", "region": "LT-Siauliai", "image": "windows_2022"}))
        .send()
        .await;
    let price = &res.json()["price"];
    assert_eq!(price["amount"], "250822160");
    assert_eq!(price["image"], "windows_2022");
    assert_eq!(price["period"]["imagePart"]["hourly"], 0.0411);
    assert_eq!(creates(&env), 0);
    assert_eq!(env.sim.server_count(), 0);
}

#[tokio::test]
async fn plan_and_stock_are_checked_before_any_create() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let send = |body: Value| {
        let env = &env;
        let key = key.clone();
        async move { env.req("POST", &path()).key(&key).json(body).send().await }
    };
    send(json!({"plan": "no_such_plan", "region": "LT-Siauliai"}))
        .await
        .invalid("plan");
    // Out of stock there (stock_qty 0), and not offered there at all.
    send(json!({"plan": "cloud_vps_free", "region": "NL-Amsterdam"}))
        .await
        .invalid("region");
    send(json!({"plan": "cloud_vps_free", "region": "US-Chicago"}))
        .await
        .invalid("region");
    // A paid plan out of stock is a 400 too, not a 402.
    send(json!({"plan": "e5_1650v4", "region": "NL-Amsterdam"}))
        .await
        .invalid("region");
    assert_eq!(creates(&env), 0);
}

#[tokio::test]
async fn every_field_is_validated_before_the_provider_is_asked() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let base = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"});
    let with = |field: &str, value: Value| {
        let mut body = base.clone();
        body[field] = value;
        body
    };
    let cases = [
        (json!({"region": "LT-Siauliai"}), "plan"),
        (json!({"plan": "cloud_vps_free"}), "region"),
        (with("plan", json!("../../teams")), "plan"),
        (with("region", json!("LT Siauliai")), "region"),
        (with("image", json!("debian/12")), "image"),
        (with("hostname", json!("bad_host")), "hostname"),
        (with("ssh_keys", json!(["abc"])), "ssh_keys[0]"),
        (with("ssh_keys", json!("9845")), "ssh_keys"),
        (with("user_data", json!("not base64!")), "user_data"),
        (
            with("tags", json!({"svc-sandbox": "x"})),
            "tags.svc-sandbox",
        ),
        (with("tags", json!({"k": 1})), "tags.k"),
        (with("spot_market", json!(true)), "spot_market"),
    ];
    for (body, field) in cases {
        env.req("POST", &path())
            .key(&key)
            .json(body)
            .send()
            .await
            .invalid(field);
    }
    // Path ids: a letter or a traversal is a 400 and no upstream call at all.
    for bad in ["abc", "12a", "..", "0"] {
        env.req("POST", &format!("/api/cloud/servers/{bad}"))
            .key(&key)
            .json(base.clone())
            .send()
            .await
            .invalid("projectId");
        env.req("GET", &format!("/api/cloud/servers/{bad}"))
            .key(&key)
            .send()
            .await
            .invalid("projectId");
    }
    assert!(env.upstream_log().is_empty(), "{:?}", env.upstream_log());
}

#[tokio::test]
async fn what_the_provider_would_refuse_is_refused_first_naming_the_field() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let cases = [
        // The image exists, but not for this plan.
        (
            path(),
            json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "image": "windows_2022"}),
            "image",
        ),
        // An SSH key of the operator's provider account, not one of the owner's.
        (
            path(),
            json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "sshKeys": [9845]}),
            "sshKeys[0]",
        ),
        // A project outside the service's team.
        (
            "/api/cloud/servers/999999".to_owned(),
            json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}),
            "projectId",
        ),
    ];
    for (path, body, field) in cases {
        env.req("POST", &path)
            .key(&key)
            .json(body)
            .send()
            .await
            .invalid(field);
    }
    // The same for a paid plan: refused before any 402.
    let res = env
        .req("POST", &path())
        .key(&key)
        .json(
            json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai",
            "image": "windows_2022"}),
        )
        .send()
        .await;
    res.invalid("image");
    assert_eq!(env.sim.server_count(), 0);
    assert!(
        !env.upstream_log()
            .iter()
            .any(|r| r.starts_with("POST /projects/")),
        "nothing was sent to the provider's create"
    );
}

#[tokio::test]
async fn the_providers_own_refusals_come_back_as_400() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    env.sim
        .inject(Fault::status("/projects/", 400).on(axum::http::Method::POST));
    let doc = env
        .req("POST", &path())
        .key(&key)
        .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
        .send()
        .await
        .problem(400);
    assert_eq!(doc["type"], "/problems/upstream-rejected");
    // In the service's own words: the provider's text stays in the log.
    let detail = doc["detail"].as_str().unwrap();
    assert!(!detail.contains("Injected failure"), "{detail}");
    assert!(
        detail.contains("refused the request as invalid (HTTP 400)"),
        "{detail}"
    );
    assert_eq!(env.sim.server_count(), 0);
}

#[tokio::test]
async fn listing_shows_only_the_callers_servers() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let body = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"});
    let mut alices = Vec::new();
    for _ in 0..2 {
        let res = env
            .req("POST", &path())
            .key(&alice)
            .json(body.clone())
            .send()
            .await;
        alices.push(res.json()["id"].as_u64().unwrap());
    }
    let bobs = env
        .req("POST", &path())
        .key(&bob)
        .json(body.clone())
        .send()
        .await
        .json()["id"]
        .as_u64()
        .unwrap();
    let foreign = env.sim.create_foreign_server(PROJECT);
    let ids = |v: Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_u64().unwrap())
            .collect()
    };
    let listed = ids(env.req("GET", &path()).key(&alice).send().await.json());
    assert_eq!(listed, alices);
    assert_eq!(
        ids(env.req("GET", &path()).key(&bob).send().await.json()),
        vec![bobs]
    );
    assert!(!listed.contains(&foreign));
    // Another project of the same account: nothing of Alice's there.
    let other = e2e::sim::PROJECT_IDS[1];
    assert!(
        ids(env
            .req("GET", &format!("/api/cloud/servers/{other}"))
            .key(&alice)
            .send()
            .await
            .json())
        .is_empty()
    );
    // The listing reads the owner's ownerships of the project, then those sandboxes: however
    // many metadata sandboxes the owner has (more than a page of them), one query, one batch.
    for i in 0..105 {
        let res = env
            .req("POST", "/api/sandboxes")
            .key(&alice)
            .json(json!({"name": format!("meta-{i}")}))
            .send()
            .await;
        assert_eq!(res.status, 201, "{}", res.body);
    }
    let (queries, batches) = (env.faults.calls("Query"), env.faults.calls("BatchGetItem"));
    assert_eq!(
        ids(env.req("GET", &path()).key(&alice).send().await.json()),
        alices
    );
    assert_eq!(
        (
            env.faults.calls("Query") - queries,
            env.faults.calls("BatchGetItem") - batches
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn ownerships_written_before_the_owner_index_are_indexed_by_the_upgrade_step() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let body = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"});
    let res = env.req("POST", &path()).key(&alice).json(body).send().await;
    assert_eq!(res.status, 201, "{}", res.body);
    let id = res.json()["id"].as_u64().unwrap();
    // As an older version wrote it: no GSI1 keys on the ownership.
    let store = &env.store;
    store
        .client()
        .update_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S(format!("SERVER#{id}")))
        .key("sk", AttributeValue::S("OWNER".into()))
        .update_expression("REMOVE gsi1pk, gsi1sk")
        .send()
        .await
        .unwrap();
    let listed = env.req("GET", &path()).key(&alice).send().await.json();
    assert_eq!(listed, json!([]));
    assert_eq!(store.index_server_ownerships().await.unwrap(), 1);
    assert_eq!(store.index_server_ownerships().await.unwrap(), 0);
    let listed = env.req("GET", &path()).key(&alice).send().await.json();
    assert_eq!(listed[0]["id"], id);
}

#[tokio::test]
async fn a_free_server_whose_create_answer_is_lost_is_found_and_recorded() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for fault in [
        Fault::stall_after("/projects/", std::time::Duration::from_secs(3)),
        Fault::status_after("/projects/", 500),
    ] {
        env.sim.inject(fault.on(axum::http::Method::POST));
        let res = env
            .req("POST", &path())
            .key(&key)
            .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
            .send()
            .await;
        assert_eq!(res.status, 201, "{}", res.body);
        let server = res.json();
        let owner = env
            .store
            .server_ownership(server["id"].as_u64().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(owner.owner, ALICE);
    }
    assert_eq!(env.sim.server_count(), 2);
    // A create refused before anything was made stays an error, and makes nothing.
    env.sim
        .inject(Fault::status("/projects/", 500).on(axum::http::Method::POST));
    env.req("POST", &path())
        .key(&key)
        .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
        .send()
        .await
        .problem(502);
    assert_eq!(env.sim.server_count(), 2);
}
