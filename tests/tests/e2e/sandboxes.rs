//! Sandboxes (issue point 8).

use std::time::Duration;

use serde_json::json;

use crate::harness::{ALICE, BOB, PROJECT, TestEnv};

#[tokio::test]
async fn a_sandbox_follows_the_servers_status_until_deployed() {
    let env = TestEnv::with(crate::harness::Options {
        deploy_seconds: 30.0,
        ..Default::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (id, sandbox) = env.provision(&key, "cloud_vps_free", Some("box-1")).await;
    let get = || {
        env.req("GET", &format!("/api/sandboxes/{sandbox}"))
            .key(&key)
            .send()
    };
    let first = get().await;
    assert_eq!(first.status, 200);
    let record = first.json();
    assert_eq!(record["status"], "deploying");
    assert_eq!(record["serverId"], id);
    assert_eq!(record["projectId"], PROJECT);
    assert_eq!(record["plan"], "cloud_vps_free");
    assert_eq!(record["region"], "LT-Siauliai");
    assert_eq!(record["hostname"], "box-1");
    assert_eq!(
        record["owner"],
        domain::address::Checksummed::from(ALICE).to_string()
    );
    assert!(record["createdAt"].is_string());
    assert!(
        record.get("watch").is_none(),
        "internal bookkeeping stays inside"
    );
    // The refresher (a reconciler pass) reads the provider; the poll reads the store.
    env.reconcile_in(1).await;
    assert_eq!(get().await.json()["status"], "deploying");
    env.reconcile_in(31).await;
    assert_eq!(get().await.json()["status"], "deployed");
    assert_eq!(
        env.store
            .sandbox(&sandbox)
            .await
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "deployed"
    );
    // Deleted: `terminated` at once as a stage, and as a status once the provider let go.
    env.req("DELETE", &format!("/api/cloud/servers/{id}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(get().await.json()["stage"], "terminated");
    env.reconcile_in(1).await;
    assert_eq!(get().await.json()["status"], "terminated");
}

#[tokio::test]
async fn unknown_foreign_and_malformed_ids() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let (_, sandbox) = env.provision(&alice, "cloud_vps_free", Some("box-1")).await;
    env.req("GET", &format!("/api/sandboxes/{sandbox}"))
        .key(&bob)
        .send()
        .await
        .problem(403);
    env.req("GET", "/api/sandboxes/sbx_0123456789abcdef0123456789abcdef")
        .key(&alice)
        .send()
        .await
        .problem(404);
    for bad in [
        "sbx_1",
        "..",
        "sbx_0123456789ABCDEF0123456789abcdef",
        "key_0123456789abcdef0123456789abcdef",
    ] {
        env.req("GET", &format!("/api/sandboxes/{bad}"))
            .key(&alice)
            .send()
            .await
            .invalid("id");
    }
}

#[tokio::test]
async fn metadata_records_cannot_claim_anothers_server() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let (server, _) = env.provision(&alice, "cloud_vps_free", Some("box-1")).await;
    let foreign = env.sim.create_foreign_server(PROJECT);
    let res = env
        .req("POST", "/api/sandboxes")
        .key(&bob)
        .json(json!({"serverId": server, "name": "mine now"}))
        .send()
        .await;
    res.problem(403);
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"serverId": foreign}))
        .send()
        .await
        .problem(403);
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"serverId": 999_999_999}))
        .send()
        .await
        .problem(403);
    // Own server, as a number or a string.
    let res = env
        .req("POST", "/api/sandboxes")
        .key(&alice)
        .json(
            json!({"serverId": server.to_string(), "name": "notes", "metadata": {"purpose": "ci"}}),
        )
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let record = res.json();
    assert_eq!(record["serverId"], server);
    assert_eq!(record["projectId"], PROJECT);
    assert_eq!(record["metadata"], json!({"purpose": "ci"}));
    assert_eq!(
        res.header("location"),
        Some(format!("/api/sandboxes/{}", record["id"].as_str().unwrap()).as_str())
    );
    // Free-standing metadata.
    let res = env
        .req("POST", "/api/sandboxes")
        .key(&bob)
        .json(json!({"name": "scratch"}))
        .send()
        .await;
    assert_eq!(res.status, 201);
    assert_eq!(res.json()["status"], "recorded");
    // Bad input.
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"serverId": "../1"}))
        .send()
        .await
        .invalid("serverId");
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"serverId": -1}))
        .send()
        .await
        .invalid("serverId");
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"name": ""}))
        .send()
        .await
        .invalid("name");
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"metadata": {"svc-owner": "x"}}))
        .send()
        .await
        .invalid("metadata.svc-owner");
    env.req("POST", "/api/sandboxes")
        .key(&alice)
        .json(json!({"owner": BOB}))
        .send()
        .await
        .invalid("owner");
}

#[tokio::test]
async fn the_listing_is_the_callers_paged_newest_first() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let res = env
            .req("POST", "/api/sandboxes")
            .key(&alice)
            .json(json!({"name": format!("n{i}")}))
            .send()
            .await;
        ids.push(res.json()["id"].as_str().unwrap().to_owned());
        env.clock.advance(Duration::from_millis(1100));
    }
    env.req("POST", "/api/sandboxes")
        .key(&bob)
        .json(json!({"name": "bob"}))
        .send()
        .await;
    let page = env
        .req("GET", "/api/sandboxes")
        .query("limit=2")
        .key(&alice)
        .send()
        .await
        .json();
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["n2", "n1"]);
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let next = env
        .req("GET", "/api/sandboxes")
        .query(&format!("limit=2&cursor={cursor}"))
        .key(&alice)
        .send()
        .await
        .json();
    assert_eq!(next["items"][0]["name"], "n0");
    // Bob sees only his own, and cannot use Alice's cursor.
    let bobs = env
        .req("GET", "/api/sandboxes")
        .key(&bob)
        .send()
        .await
        .json();
    assert_eq!(bobs["items"].as_array().unwrap().len(), 1);
    env.req("GET", "/api/sandboxes")
        .query(&format!("cursor={cursor}"))
        .key(&bob)
        .send()
        .await
        .invalid("cursor");
    env.req("GET", "/api/sandboxes")
        .query("cursor=garbage")
        .key(&alice)
        .send()
        .await
        .invalid("cursor");
    for limit in ["0", "101", "x"] {
        env.req("GET", "/api/sandboxes")
            .query(&format!("limit={limit}"))
            .key(&alice)
            .send()
            .await
            .invalid("limit");
    }
}
