//! Key policies (the key-policies issue, point 2; spend and server limits are in
//! `spend_limits`): a key's `allowedPlans`, `allowedRegions` and `maxPricePerServer`, checked
//! before any 402 (403 `policy-violation` naming the limit), over HTTP and MCP; every field
//! checked when given; shown in the key listing; changed by its owner.

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{PROJECT, TestEnv, TestResponse};

async fn key_with_policy(env: &TestEnv, session: &str, policy: Value) -> TestResponse {
    env.req("POST", "/api/keys/generate")
        .bearer(session)
        .json(json!({"name": "bounded", "policy": policy}))
        .send()
        .await
}

async fn provision(env: &TestEnv, key: &str, plan: &str, region: &str) -> TestResponse {
    env.req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(key)
        .json(json!({"plan": plan, "region": region}))
        .send()
        .await
}

fn violates(res: TestResponse, limit: &str) {
    assert!(
        res.header("payment-required").is_none(),
        "no offer before the policy"
    );
    let doc = res.problem(403);
    assert_eq!(doc["type"], "/problems/policy-violation", "{doc}");
    assert!(doc["detail"].as_str().unwrap().contains(limit), "{doc}");
}

#[tokio::test]
async fn a_policy_bounds_what_a_key_provisions_before_any_402() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let res = key_with_policy(
        &env,
        &session,
        json!({"maxPricePerServer": 20, "allowedPlans": ["cloud_vps_free", "B1-1-1gb-20s-shared",
               "e5_1650v4"], "allowedRegions": ["LT-Siauliai"]}),
    )
    .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let issued = res.json();
    assert_eq!(issued["policy"]["maxPricePerServer"], 20.0);
    let key = issued["key"].as_str().unwrap().to_owned();

    // Within the policy: a free server, and a paid one (18.46 USD ≤ 20) is offered.
    assert_eq!(
        provision(&env, &key, "cloud_vps_free", "LT-Siauliai")
            .await
            .status,
        201
    );
    let offered = provision(&env, &key, "B1-1-1gb-20s-shared", "LT-Siauliai").await;
    assert_eq!(offered.status, 402, "{}", offered.body);
    // Outside it: a plan not allowed, a region not allowed, a price over the cap.
    violates(
        provision(&env, &key, "B1-2-2gb-40s-shared", "LT-Siauliai").await,
        "allowedPlans",
    );
    violates(
        provision(&env, &key, "B1-1-1gb-20s-shared", "NL-Amsterdam").await,
        "allowedRegions",
    );
    violates(
        provision(&env, &key, "e5_1650v4", "LT-Siauliai").await,
        "maxPricePerServer",
    );
    assert_eq!(env.facilitator.verifies(), 0);
    assert_eq!(env.sim.server_count(), 1);

    // The same over MCP.
    let res = env
        .req("POST", "/mcp")
        .key(&key)
        .header("accept", "application/json, text/event-stream")
        .json(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "provision_server",
            "arguments": {"projectId": PROJECT, "plan": "e5_1650v4", "region": "LT-Siauliai"}}}),
        )
        .send()
        .await;
    let result = &res.json()["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["structuredContent"]["type"], "/problems/policy-violation",
        "{result}"
    );

    // The listing shows each key's policy; a key without one has none (no limit).
    env.key(&format!("{:#x}", signer.address())).await;
    let listed = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .send()
        .await
        .json();
    let policies: Vec<&Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["policy"])
        .collect();
    assert!(
        policies
            .iter()
            .any(|p| p["allowedRegions"] == json!(["LT-Siauliai"])),
        "{listed}"
    );
    assert!(policies.iter().any(|p| p.is_null()), "{listed}");
}

#[tokio::test]
async fn a_policy_is_checked_when_given() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    for (policy, field) in [
        (json!({"maxPricePerServer": 0}), "policy.maxPricePerServer"),
        (json!({"maxPricePerServer": -5}), "policy.maxPricePerServer"),
        (json!({"allowedPlans": []}), "policy.allowedPlans"),
        (
            json!({"allowedRegions": ["ok", "../etc"]}),
            "policy.allowedRegions[1]",
        ),
        (
            json!({"maxPricePerServer": 1e7}),
            "policy.maxPricePerServer",
        ),
        (json!({"dailySpendLimit": 0}), "policy.dailySpendLimit"),
        (json!({"dailySpendLimit": "5"}), "policy.dailySpendLimit"),
        (
            json!({"monthlySpendLimit": 2000000}),
            "policy.monthlySpendLimit",
        ),
        (json!({"maxActiveServers": 0}), "policy.maxActiveServers"),
        (json!({"maxActiveServers": 1001}), "policy.maxActiveServers"),
        (json!({"maxActiveServers": 1.5}), "policy.maxActiveServers"),
        (json!({"dailyCap": 5}), "policy.dailyCap"),
    ] {
        key_with_policy(&env, &session, policy).await.invalid(field);
    }
}

#[tokio::test]
async fn the_owner_changes_a_policy_and_it_holds_at_once() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let issued = key_with_policy(&env, &session, json!({"allowedRegions": ["NL-Amsterdam"]}))
        .await
        .json();
    let (id, key) = (
        issued["id"].as_str().unwrap().to_owned(),
        issued["key"].as_str().unwrap().to_owned(),
    );
    violates(
        provision(&env, &key, "cloud_vps_free", "LT-Siauliai").await,
        "allowedRegions",
    );
    let change = |body: Value| {
        let env = &env;
        let (id, session) = (id.clone(), session.clone());
        async move {
            env.req("PATCH", &format!("/api/keys/{id}"))
                .bearer(&session)
                .json(body)
                .send()
                .await
        }
    };
    let changed = change(json!({"policy": {"allowedRegions": ["LT-Siauliai"]}})).await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(
        changed.json()["policy"]["allowedRegions"],
        json!(["LT-Siauliai"])
    );
    assert_eq!(
        provision(&env, &key, "cloud_vps_free", "LT-Siauliai")
            .await
            .status,
        201
    );
    // null removes it; bad input is named; the key itself may not change its policy.
    let cleared = change(json!({"policy": null})).await;
    assert!(cleared.json().get("policy").is_none(), "{}", cleared.body);
    change(json!({"policy": {"maxPricePerServer": "lots"}}))
        .await
        .invalid("policy.maxPricePerServer");
    let by_key = env
        .req("PATCH", &format!("/api/keys/{id}"))
        .key(&key)
        .json(json!({"policy": null}))
        .send()
        .await;
    by_key.problem(403);
    // Another owner's key is not found; a revoked key cannot change.
    let other = env.sign_in(&PrivateKeySigner::random()).await;
    env.req("PATCH", &format!("/api/keys/{id}"))
        .bearer(&other)
        .json(json!({"policy": null}))
        .send()
        .await
        .problem(404);
    env.req("DELETE", &format!("/api/keys/{id}"))
        .bearer(&session)
        .send()
        .await;
    change(json!({"policy": null})).await.problem(409);
}
