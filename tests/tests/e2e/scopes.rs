//! Key scopes (the key-policies issue, point 1): a key issued with fewer scopes is refused, 403
//! `insufficient-scope` naming the scope, on every route (and MCP tool) outside them — and a key
//! without `pay` is never offered a payment.

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{PROJECT, TestEnv, TestResponse, pay};

/// A key of `owner` with `scopes`, issued through the API by the owner's session.
async fn key_with(env: &TestEnv, session: &str, scopes: &[&str]) -> String {
    let res = env
        .req("POST", "/api/keys/generate")
        .bearer(session)
        .json(json!({"name": scopes.join("+"), "scopes": scopes}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let issued = res.json();
    let mut sorted = scopes.to_vec();
    sorted.sort_by_key(|s| {
        [
            "read",
            "provision",
            "act",
            "delete",
            "renew",
            "pay",
            "webhooks",
        ]
        .iter()
        .position(|n| n == s)
    });
    assert_eq!(issued["scopes"], json!(sorted));
    issued["key"].as_str().unwrap().to_owned()
}

fn refused(res: TestResponse, scope: &str) {
    let doc = res.problem(403);
    assert_eq!(doc["type"], "/problems/insufficient-scope", "{doc}");
    assert!(
        doc["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("`{scope}`")),
        "{doc}"
    );
}

fn free_body() -> Value {
    json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"})
}

fn paid_body() -> Value {
    json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"})
}

#[tokio::test]
async fn each_scope_opens_its_routes_and_only_those() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let servers = format!("/api/cloud/servers/{PROJECT}");

    // read: every read, nothing else.
    let read = key_with(&env, &session, &["read"]).await;
    for path in [
        "/api/cloud/plans",
        "/api/cloud/regions",
        "/api/cloud/teams",
        "/api/sandboxes",
        "/api/payments",
        "/api/agents",
    ] {
        let res = env.req("GET", path).key(&read).send().await;
        assert_eq!(res.status, 200, "{path}: {}", res.body);
    }
    let res = env
        .req("GET", "/api/cloud/quote")
        .key(&read)
        .query("plan=cloud_vps_free&region=LT-Siauliai")
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    refused(
        env.req("POST", &servers)
            .key(&read)
            .json(free_body())
            .send()
            .await,
        "provision",
    );

    // provision: a free server; a paid plan needs `pay` too, refused before any 402.
    let provision = key_with(&env, &session, &["provision"]).await;
    // The plans are anyone's (`found_by_agents`): no scope; every other read needs `read`, and
    // a sandbox record needs `act`.
    let plans = env
        .req("GET", "/api/cloud/plans")
        .key(&provision)
        .send()
        .await;
    assert_eq!(plans.status, 200, "{}", plans.body);
    for path in ["/api/sandboxes", "/api/payments", "/api/agents"] {
        refused(env.req("GET", path).key(&provision).send().await, "read");
    }
    refused(
        env.req("GET", &servers).key(&provision).send().await,
        "read",
    );
    refused(
        env.req("POST", "/api/sandboxes")
            .key(&read)
            .json(json!({"name": "notes"}))
            .send()
            .await,
        "act",
    );
    let created = env
        .req("POST", &servers)
        .key(&provision)
        .json(free_body())
        .send()
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let server = created.json()["id"].as_u64().unwrap();
    // Delivered (deployed, SSH answered): no longer on its first deployment, so renewable.
    env.pass_after(1).await;
    let no_pay = env
        .req("POST", &servers)
        .key(&provision)
        .json(paid_body())
        .send()
        .await;
    assert!(no_pay.header("payment-required").is_none());
    refused(no_pay, "pay");

    // act and delete.
    refused(
        env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
            .key(&provision)
            .json(json!({"type": "power-off"}))
            .send()
            .await,
        "act",
    );
    let act = key_with(&env, &session, &["act"]).await;
    let acted = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&act)
        .json(json!({"type": "power-off"}))
        .send()
        .await;
    assert_eq!(acted.status, 202, "{}", acted.body);
    refused(
        env.req("DELETE", &format!("/api/cloud/servers/{server}"))
            .key(&act)
            .send()
            .await,
        "delete",
    );
    let delete = key_with(&env, &session, &["delete"]).await;
    let deleted = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&delete)
        .send()
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);

    // renew needs `renew` (and `pay`, as every renewal is paid).
    refused(
        env.req("POST", &format!("/api/cloud/servers/{server}/renewals"))
            .key(&act)
            .json(json!({"periods": 1}))
            .send()
            .await,
        "renew",
    );
    // On a paid server: `renew` alone is refused before the offer; with `pay`, the offer.
    let owner_key = env.key(&format!("{:#x}", signer.address())).await;
    let (paid, _, _) = crate::paid_time::paid_server(&env, &owner_key, "leased").await;
    let renewal = |key: String| {
        let env = &env;
        async move {
            env.req("POST", &format!("/api/cloud/servers/{paid}/renewals"))
                .key(&key)
                .json(json!({"periods": 1}))
                .send()
                .await
        }
    };
    let renew = key_with(&env, &session, &["renew"]).await;
    let res = renewal(renew).await;
    assert!(res.header("payment-required").is_none());
    refused(res, "pay");
    let renew_pay = key_with(&env, &session, &["renew", "pay"]).await;
    assert_eq!(renewal(renew_pay).await.status, 402);

    // The session (the owner) has every scope; the listing shows each key's.
    let listed = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .send()
        .await
        .json();
    let scopes: Vec<Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["scopes"].clone())
        .collect();
    assert!(scopes.contains(&json!(["delete"])), "{listed}");
    assert!(scopes.contains(&json!(["renew", "pay"])), "{listed}");
}

#[tokio::test]
async fn provision_and_pay_together_buy_a_paid_server() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let key = key_with(&env, &session, &["provision", "pay"]).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let offer = env
        .req("POST", &path)
        .key(&key)
        .json(paid_body())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let paid = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(paid_body())
        .send()
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
    // The same payment from a key of the owner that may not pay resumes nothing (a resumed
    // order may settle): 403 naming `pay`, however the order stands.
    let no_pay = key_with(&env, &session, &["provision", "read"]).await;
    let replay = env
        .req("POST", &path)
        .key(&no_pay)
        .header(payment.0, &payment.1)
        .json(paid_body())
        .send()
        .await;
    refused(replay, "pay");
    // A read-only key registers no agent; a key that may act does.
    let read = key_with(&env, &session, &["read"]).await;
    let agent = json!({"name": "reader"});
    refused(
        env.req("POST", "/api/agents")
            .key(&read)
            .json(agent.clone())
            .send()
            .await,
        "act",
    );
    let act = key_with(&env, &session, &["act"]).await;
    let res = env
        .req("POST", "/api/agents")
        .key(&act)
        .json(agent)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    // A key issued without scopes (the default) has them all.
    let all = env.key(&format!("{:#x}", signer.address())).await;
    let res = env.req("GET", "/api/cloud/plans").key(&all).send().await;
    assert_eq!(res.status, 200);
}

#[tokio::test]
async fn mcp_tools_answer_to_the_same_scopes() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let read = key_with(&env, &session, &["read"]).await;
    let call = |key: String, name: &'static str, arguments: Value| {
        let env = &env;
        async move {
            let res = env
                .req("POST", "/mcp")
                .key(&key)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": name, "arguments": arguments}}))
                .send()
                .await;
            assert_eq!(res.status, 200, "{}", res.body);
            res.json()["result"].clone()
        }
    };
    let plans = call(read.clone(), "list_plans", json!({})).await;
    assert_ne!(plans["isError"], true, "{plans}");
    let refused = call(
        read.clone(),
        "provision_server",
        json!({"projectId": PROJECT, "plan": "cloud_vps_free", "region": "LT-Siauliai"}),
    )
    .await;
    assert_eq!(refused["isError"], true);
    assert_eq!(
        refused["structuredContent"]["type"], "/problems/insufficient-scope",
        "{refused}"
    );
    let provision = key_with(&env, &session, &["provision"]).await;
    let no_pay = call(
        provision,
        "provision_server",
        json!({"projectId": PROJECT, "plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"}),
    )
    .await;
    assert_eq!(no_pay["structuredContent"]["status"], 403, "{no_pay}");
    assert!(no_pay["structuredContent"].get("x402Version").is_none());
    let delete = call(read.clone(), "delete_server", json!({"serverId": 912001})).await;
    assert_eq!(delete["structuredContent"]["status"], 403, "{delete}");
    let act = call(
        read,
        "server_action",
        json!({"serverId": 912001, "type": "reboot"}),
    )
    .await;
    assert_eq!(
        act["structuredContent"]["type"], "/problems/insufficient-scope",
        "{act}"
    );
    // Reads need `read` over MCP too.
    let act_only = key_with(&env, &session, &["act"]).await;
    let listed = call(act_only, "list_sandboxes", json!({})).await;
    assert_eq!(
        listed["structuredContent"]["type"], "/problems/insufficient-scope",
        "{listed}"
    );
}

#[tokio::test]
async fn ssh_keys_are_added_and_deleted_with_act_and_listed_with_read() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let (read, act) = (
        key_with(&env, &session, &["read"]).await,
        key_with(&env, &session, &["act"]).await,
    );
    let body = json!({"publicKey": e2e::shell::public(&e2e::shell::key_pair())});
    let add = |key: &str| env.req("POST", "/api/ssh-keys").key(key).json(body.clone());
    refused(add(&read).send().await, "act");
    let added = add(&act).send().await;
    assert_eq!(added.status, 201, "{}", added.body);
    let path = format!("/api/ssh-keys/{}", added.json()["id"].as_str().unwrap());
    refused(
        env.req("GET", "/api/ssh-keys").key(&act).send().await,
        "read",
    );
    assert_eq!(env.req("GET", &path).key(&read).send().await.status, 200);
    refused(env.req("DELETE", &path).key(&read).send().await, "act");
    assert_eq!(env.req("DELETE", &path).key(&act).send().await.status, 204);
}

/// `webhooks` is never granted implicitly (issue 34, point 3): a key issued without naming
/// its scopes (as every key before the scope existed was) has all but it; named, it has it.
#[tokio::test]
async fn webhooks_are_granted_only_by_name() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let res = env
        .req("POST", "/api/keys/generate")
        .bearer(&session)
        .json(json!({"name": "default"}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let issued = res.json();
    assert_eq!(
        issued["scopes"],
        json!(["read", "provision", "act", "delete", "renew", "pay"])
    );
    let default = issued["key"].as_str().unwrap();
    refused(
        env.req("GET", "/api/webhooks").key(default).send().await,
        "webhooks",
    );
    // A key stored before scopes existed reads as the same default.
    let owner = domain::address::Owner::parse(&signer.address().to_string()).unwrap();
    let old = domain::identity::auth::api_key::issue(
        &env.store,
        &owner,
        domain::identity::auth::api_key::NewKey::named("old", env.state.clock.timestamp()),
        None,
    )
    .await
    .unwrap()
    .0;
    refused(
        env.req("POST", "/api/webhooks")
            .key(old.expose())
            .json(json!({"url": "https://example.com/hook"}))
            .send()
            .await,
        "webhooks",
    );
    let named = key_with(&env, &session, &["read", "webhooks"]).await;
    assert_eq!(
        env.req("GET", "/api/webhooks")
            .key(&named)
            .send()
            .await
            .status,
        200
    );
}
