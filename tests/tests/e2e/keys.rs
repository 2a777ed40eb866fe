//! API key management and agents (issue 3, points 2–6).

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{PROJECT, TestEnv, WEB_ORIGIN};

async fn generate(env: &TestEnv, session: &str, name: &str) -> Value {
    let res = env
        .req("POST", "/api/keys/generate")
        .bearer(session)
        .json(json!({"name": name}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.json()
}

async fn register(env: &TestEnv, req: crate::harness::ApiRequest<'_>, body: Value) -> Value {
    let _ = env;
    let res = req.json(body).send().await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.json()
}

#[tokio::test]
async fn generate_use_list_revoke_then_401() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let created = generate(&env, &session, "ci agent").await;
    let key = created["key"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(
        domain::identity::auth::api_key::ApiKey::parse(&key).is_some(),
        "{key}"
    );
    assert_eq!(created["prefix"], &key[..12]);
    assert_eq!(created["name"], "ci agent");
    // The key works for its owner, the signed-in address.
    assert_eq!(
        env.req("GET", "/api/cloud/regions")
            .key(&key)
            .send()
            .await
            .status,
        200
    );
    let sandbox = env
        .req("POST", "/api/sandboxes")
        .key(&key)
        .json(json!({"name": "x"}))
        .send()
        .await
        .json();
    assert_eq!(sandbox["owner"], signer.address().to_checksum(None));
    // Listed with lastUsedAt, never with the key or its hash.
    let list = env.req("GET", "/api/keys").bearer(&session).send().await;
    assert_eq!(list.status, 200);
    let hash = domain::identity::auth::api_key::ApiKey::parse(&key)
        .unwrap()
        .hash();
    assert!(!list.body.contains(&key) && !list.body.contains(&hash));
    let item = list.json()["items"][0].clone();
    assert_eq!(item["id"], id);
    assert_eq!(item["status"], "active");
    assert!(item["lastUsedAt"].is_string(), "{item}");
    for field in ["name", "prefix", "createdAt", "expiresAt", "revokedAt"] {
        assert!(item.get(field).is_some(), "{field}");
    }
    // Revoke: idempotent, and the key stops working.
    let revoked = env
        .req("DELETE", &format!("/api/keys/{id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let at = revoked.json()["revokedAt"].clone();
    assert!(at.is_string());
    env.req("GET", "/api/cloud/regions")
        .key(&key)
        .send()
        .await
        .problem(401);
    let again = env
        .req("DELETE", &format!("/api/keys/{id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["revokedAt"], at);
    assert_eq!(
        env.req("GET", "/api/keys")
            .bearer(&session)
            .send()
            .await
            .json()["items"][0]["status"],
        "revoked"
    );
}

#[tokio::test]
async fn each_use_is_recorded_in_the_one_write_that_reads_the_key() {
    let env = TestEnv::new().await;
    let key = env.key(crate::harness::ALICE).await;
    let hash = domain::identity::auth::api_key::ApiKey::parse(&key)
        .unwrap()
        .hash();
    let last_used = || async {
        env.store
            .api_key_by_hash(&hash)
            .await
            .unwrap()
            .unwrap()
            .last_used_at
    };
    let calls = |op: &str| env.faults.calls(op);
    let (reads, writes) = (calls("GetItem"), calls("UpdateItem"));
    let res = env.req("GET", "/api/sandboxes").key(&key).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    // One store call before the listing's own query: the key's read is its use's write.
    assert_eq!(
        (calls("GetItem") - reads, calls("UpdateItem") - writes),
        (0, 1)
    );
    let first = last_used().await.unwrap();
    env.clock.advance(std::time::Duration::from_millis(1100));
    env.req("GET", "/api/sandboxes").key(&key).send().await;
    let second = last_used().await.unwrap();
    assert!(second > first, "{first} then {second}");
    // A revoked key's refused attempt leaves its record as it was.
    let id = env.store.api_key_by_hash(&hash).await.unwrap().unwrap().id;
    domain::identity::keys::revoke(
        &env.store,
        &crate::harness::owner(crate::harness::ALICE),
        &id,
        env.clock.datetime(),
    )
    .await
    .unwrap();
    env.clock.advance(std::time::Duration::from_millis(1100));
    env.req("GET", "/api/sandboxes")
        .key(&key)
        .send()
        .await
        .problem(401);
    assert_eq!(last_used().await.unwrap(), second);
}

#[tokio::test]
async fn key_routes_need_a_session() {
    let env = TestEnv::new().await;
    let key = env.key(crate::harness::ALICE).await;
    env.req("POST", "/api/keys/generate")
        .key(&key)
        .json(json!({"name": "x"}))
        .send()
        .await
        .problem(403);
    env.req("GET", "/api/keys")
        .key(&key)
        .send()
        .await
        .problem(403);
    env.req("DELETE", "/api/keys/key_0123456789abcdef0123456789abcdef")
        .key(&key)
        .send()
        .await
        .problem(403);
    env.req("GET", "/api/keys").send().await.problem(401);
    env.req("POST", "/api/keys/generate")
        .bearer(&"0".repeat(64))
        .json(json!({"name": "x"}))
        .send()
        .await
        .problem(401);
}

#[tokio::test]
async fn generate_validates_its_input() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let send = |body: Value| {
        env.req("POST", "/api/keys/generate")
            .bearer(&session)
            .json(body)
            .send()
    };
    send(json!({})).await.invalid("name");
    send(json!({"name": " "})).await.invalid("name");
    send(json!({"name": "x".repeat(65)})).await.invalid("name");
    send(json!({"name": "k", "expiresAt": "tomorrow"}))
        .await
        .invalid("expiresAt");
    send(json!({"name": "k", "expiresAt": "2020-01-01T00:00:00Z"}))
        .await
        .invalid("expiresAt");
    send(json!({"name": "k", "scopes": ["all"]}))
        .await
        .invalid("scopes[0]");
    send(json!({"name": "k", "scopes": ["read", "read"]}))
        .await
        .invalid("scopes[1]");
    send(json!({"name": "k", "scopes": []}))
        .await
        .invalid("scopes");
    send(json!({"name": "k", "color": "red"}))
        .await
        .invalid("color");
    let res = send(json!({"name": "k", "expiresAt": "2099-01-01T00:00:00Z"})).await;
    assert_eq!(res.json()["expiresAt"], "2099-01-01T00:00:00Z");
    env.req("DELETE", "/api/keys/nope")
        .bearer(&session)
        .send()
        .await
        .invalid("id");
    env.req("DELETE", "/api/keys/key_0123456789abcdef0123456789abcdef")
        .bearer(&session)
        .send()
        .await
        .problem(404);
}

#[tokio::test]
async fn revoking_a_key_deactivates_all_its_agents_at_once() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let created = generate(&env, &session, "fleet").await;
    let (key, key_id) = (
        created["key"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    );
    let other = generate(&env, &session, "other").await;
    let mut agents = Vec::new();
    for i in 0..3 {
        let agent = register(
            &env,
            env.req("POST", "/api/agents").bearer(&session),
            json!({"name": format!("a{i}"), "keyId": key_id}),
        )
        .await;
        assert_eq!(
            (agent["status"].as_str(), agent["keyId"].as_str()),
            (Some("active"), Some(key_id.as_str()))
        );
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    // An agent registering itself with the key.
    let me = register(
        &env,
        env.req("POST", "/api/agents").key(&key),
        json!({"name": "self"}),
    )
    .await;
    assert_eq!(me["keyId"], key_id);
    agents.push(me["id"].as_str().unwrap().to_owned());
    // An agent of another key stays active.
    let bystander = register(
        &env,
        env.req("POST", "/api/agents").bearer(&session),
        json!({"name": "b", "keyId": other["id"]}),
    )
    .await;
    env.req("DELETE", &format!("/api/keys/{key_id}"))
        .bearer(&session)
        .send()
        .await;
    for id in &agents {
        let agent = env
            .req("GET", &format!("/api/agents/{id}"))
            .bearer(&session)
            .send()
            .await
            .json();
        assert_eq!(agent["status"], "inactive", "{agent}");
        assert_eq!(agent["deactivationReason"], "key revoked");
        assert!(agent["deactivatedAt"].is_string());
    }
    let b = env
        .req(
            "GET",
            &format!("/api/agents/{}", bystander["id"].as_str().unwrap()),
        )
        .bearer(&session)
        .send()
        .await
        .json();
    assert_eq!(b["status"], "active");
    // No new agent on a revoked key.
    env.req("POST", "/api/agents")
        .bearer(&session)
        .json(json!({"name": "late", "keyId": key_id}))
        .send()
        .await
        .problem(409);
    let listed = env
        .req("GET", "/api/agents")
        .bearer(&session)
        .send()
        .await
        .json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn a_revocation_racing_registrations_leaves_no_active_agent() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let created = generate(&env, &session, "race").await;
    let key_id = created["id"].as_str().unwrap().to_owned();
    let registrations = (0..8).map(|i| {
        env.req("POST", "/api/agents")
            .bearer(&session)
            .json(json!({"name": format!("r{i}"), "keyId": key_id}))
            .send()
    });
    let revoke = env
        .req("DELETE", &format!("/api/keys/{key_id}"))
        .bearer(&session)
        .send();
    let (results, revoked) = tokio::join!(futures::future::join_all(registrations), revoke);
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    for res in &results {
        assert!(res.status == 201 || res.status == 409, "{}", res.body);
    }
    let listed = env
        .req("GET", "/api/agents")
        .bearer(&session)
        .send()
        .await
        .json();
    for agent in listed["items"].as_array().unwrap() {
        let current = env
            .req(
                "GET",
                &format!("/api/agents/{}", agent["id"].as_str().unwrap()),
            )
            .bearer(&session)
            .send()
            .await
            .json();
        assert_eq!(current["status"], "inactive", "{current}");
    }
}

#[tokio::test]
async fn agent_rules() {
    let env = TestEnv::new().await;
    let alice = env.sign_in(&PrivateKeySigner::random()).await;
    let bob = env.sign_in(&PrivateKeySigner::random()).await;
    let alice_key = generate(&env, &alice, "a").await;
    let bob_key = generate(&env, &bob, "b").await;
    // A session must name one of its own keys.
    env.req("POST", "/api/agents")
        .bearer(&alice)
        .json(json!({"name": "x"}))
        .send()
        .await
        .invalid("keyId");
    env.req("POST", "/api/agents")
        .bearer(&alice)
        .json(json!({"name": "x", "keyId": bob_key["id"]}))
        .send()
        .await
        .problem(403);
    env.req("POST", "/api/agents")
        .bearer(&alice)
        .json(json!({"name": "x", "keyId": "key_0123456789abcdef0123456789abcdef"}))
        .send()
        .await
        .problem(404);
    env.req("POST", "/api/agents")
        .bearer(&alice)
        .json(json!({"name": "", "keyId": alice_key["id"]}))
        .send()
        .await
        .invalid("name");
    // A key registers only itself.
    let key = alice_key["key"].as_str().unwrap();
    env.req("POST", "/api/agents")
        .key(key)
        .json(json!({"name": "x", "keyId": bob_key["id"]}))
        .send()
        .await
        .problem(403);
    let agent = register(
        &env,
        env.req("POST", "/api/agents").key(key),
        json!({"name": "x", "keyId": alice_key["id"]}),
    )
    .await;
    let id = agent["id"].as_str().unwrap();
    assert_eq!(
        env.req("GET", &format!("/api/agents/{id}"))
            .key(key)
            .send()
            .await
            .status,
        200
    );
    env.req("GET", &format!("/api/agents/{id}"))
        .bearer(&bob)
        .send()
        .await
        .problem(403);
    env.req("GET", "/api/agents/agt_0123456789abcdef0123456789abcdef")
        .bearer(&alice)
        .send()
        .await
        .problem(404);
    env.req("GET", "/api/agents/agt_nope")
        .bearer(&alice)
        .send()
        .await
        .invalid("id");
    assert!(
        env.req("GET", "/api/agents")
            .bearer(&bob)
            .send()
            .await
            .json()["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn sessions_work_on_the_foundation_routes_except_provisioning() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let key = generate(&env, &session, "k").await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        env.req("GET", "/api/cloud/plans")
            .bearer(&session)
            .send()
            .await
            .status,
        200
    );
    assert_eq!(
        env.req("GET", "/api/sandboxes")
            .bearer(&session)
            .send()
            .await
            .status,
        200
    );
    let body = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"});
    env.req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .bearer(&session)
        .json(body)
        .send()
        .await
        .problem(403);
    let (server, sandbox) = env.provision(&key, "cloud_vps_free", None).await;
    // The server provisioned with the key belongs to the signed-in owner.
    let listed = env
        .req("GET", &format!("/api/cloud/servers/{PROJECT}"))
        .bearer(&session)
        .send()
        .await
        .json();
    assert_eq!(listed[0]["id"], server);
    let res = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .bearer(&session)
        .json(json!({"type": "reboot"}))
        .send()
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(
        env.req("GET", &format!("/api/sandboxes/{sandbox}"))
            .bearer(&session)
            .send()
            .await
            .status,
        200
    );
    // Another owner's session on it: 403.
    let other = env.sign_in(&PrivateKeySigner::random()).await;
    env.req("GET", &format!("/api/sandboxes/{sandbox}"))
        .bearer(&other)
        .send()
        .await
        .problem(403);
    env.req("DELETE", &format!("/api/cloud/servers/{server}"))
        .bearer(&other)
        .send()
        .await
        .problem(403);
}

/// Where the public name is set (`PUBLIC_BASE_URL`: the edge's), the service's own origin is
/// that name's, whatever `Host` a request names.
#[tokio::test]
async fn the_services_own_origin_is_its_public_name_when_one_is_set() {
    let env = TestEnv::with(crate::harness::Options {
        vars: vec![("PUBLIC_BASE_URL", "https://api.example.com".into())],
        ..Default::default()
    })
    .await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let cookie = format!("__Host-session={session}");
    let write = |host: &'static str, origin: &'static str| {
        let (env, cookie) = (&env, cookie.clone());
        async move {
            env.req("POST", "/api/keys/generate")
                .header("cookie", &cookie)
                .header("host", host)
                .header("origin", origin)
                .json(json!({"name": "console"}))
                .send()
                .await
        }
    };
    assert_eq!(
        write("api.example.com", "https://api.example.com")
            .await
            .status,
        201
    );
    write("evil.example", "https://evil.example")
        .await
        .problem(403);
    write("origin.api.example.com", "https://origin.api.example.com")
        .await
        .problem(403);
}

#[tokio::test]
async fn cors_only_for_the_web_origin_and_no_cross_origin_cookie_writes() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let pre = env
        .req("OPTIONS", "/api/keys/generate")
        .header("origin", WEB_ORIGIN)
        .header("access-control-request-method", "POST")
        .send()
        .await;
    assert_eq!(pre.status, 204, "{}", pre.body);
    assert_eq!(pre.header("access-control-allow-origin"), Some(WEB_ORIGIN));
    assert_eq!(pre.header("access-control-allow-credentials"), Some("true"));
    assert!(
        pre.header("access-control-allow-methods")
            .unwrap()
            .contains("POST")
    );
    assert!(
        pre.header("access-control-allow-headers")
            .unwrap()
            .contains("content-type")
    );
    env.req("OPTIONS", "/api/auth/verify")
        .header("origin", "https://evil.example")
        .send()
        .await
        .problem(403);
    let ok = env
        .req("GET", "/api/auth/nonce")
        .header("origin", WEB_ORIGIN)
        .send()
        .await;
    assert_eq!(ok.header("access-control-allow-origin"), Some(WEB_ORIGIN));
    let other = env
        .req("GET", "/api/auth/nonce")
        .header("origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(other.status, 200);
    assert!(other.header("access-control-allow-origin").is_none());
    // Errors carry CORS too, so the web app can read them.
    let denied = env
        .req("GET", "/api/keys")
        .header("origin", WEB_ORIGIN)
        .send()
        .await;
    assert_eq!(
        (denied.status, denied.header("access-control-allow-origin")),
        (401, Some(WEB_ORIGIN))
    );
    // The cloud routes have no CORS.
    let key = env.key(crate::harness::ALICE).await;
    let cloud = env
        .req("GET", "/api/cloud/regions")
        .key(&key)
        .header("origin", WEB_ORIGIN)
        .send()
        .await;
    assert!(cloud.header("access-control-allow-origin").is_none());
    // A cookie from another origin cannot change state; from the web origin it can.
    let cookie = format!("__Host-session={session}");
    env.req("POST", "/api/keys/generate")
        .header("cookie", &cookie)
        .header("origin", "https://evil.example")
        .json(json!({"name": "x"}))
        .send()
        .await
        .problem(403);
    let res = env
        .req("POST", "/api/keys/generate")
        .header("cookie", &cookie)
        .header("origin", WEB_ORIGIN)
        .json(json!({"name": "x"}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    // From the service's own origin (the console: its authority is the request's Host) too;
    // another site naming our host in a path or as a subdomain is still another origin.
    let own = |origin: &'static str| {
        let env = &env;
        let cookie = cookie.clone();
        async move {
            env.req("POST", "/api/keys/generate")
                .header("cookie", &cookie)
                .header("host", "api.example.test")
                .header("origin", origin)
                .json(json!({"name": "console"}))
                .send()
                .await
        }
    };
    assert_eq!(own("https://api.example.test").await.status, 201);
    own("https://api.example.test.evil.example")
        .await
        .problem(403);
    own("https://evil.example").await.problem(403);
    own("null").await.problem(403);
    // Scheme and port count: http is not the https site, nor another port the same host.
    own("http://api.example.test").await.problem(403);
    own("https://api.example.test:8443").await.problem(403);
    assert_eq!(own("https://API.example.test:443").await.status, 201);
    // A cookie write with no Origin at all is refused.
    let bare = env
        .req("POST", "/api/keys/generate")
        .header("cookie", &cookie)
        .json(json!({"name": "no origin"}))
        .send()
        .await;
    assert!(
        bare.problem(403)["detail"]
            .as_str()
            .unwrap()
            .contains("without an Origin")
    );
    // Every write's body is JSON: the same request as a form's text/plain is refused (415)
    // before anything is done, with a key as with a cookie.
    let plain = env
        .req("POST", "/api/keys/generate")
        .header("cookie", &cookie)
        .header("origin", WEB_ORIGIN)
        .header("content-type", "text/plain")
        .body(r#"{"name": "form"}"#)
        .send()
        .await;
    plain.problem(415);
    let renewal = env
        .req("POST", "/api/cloud/servers/1/renewals")
        .key(&key)
        .header("content-type", "text/plain")
        .body(r#"{"periods": 1}"#)
        .send()
        .await;
    renewal.problem(415);
}

#[tokio::test]
async fn no_agent_is_registered_on_an_expired_key() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let owner = domain::address::Owner::of(signer.address());
    let (key, record) = domain::identity::auth::api_key::issue(
        &env.store,
        &owner,
        domain::identity::auth::api_key::NewKey {
            expires_at: Some("2020-01-01T00:00:00Z".parse().unwrap()),
            ..domain::identity::auth::api_key::NewKey::named("old", env.state.clock.timestamp())
        },
        None,
    )
    .await
    .unwrap();
    let res = env
        .req("POST", "/api/agents")
        .bearer(&session)
        .json(json!({"name": "late", "keyId": record.id}))
        .send()
        .await;
    assert!(
        res.problem(409)["detail"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    // The store's own condition refuses it too, whatever the caller checked before.
    let agent = domain::store::agents::AgentRecord {
        id: domain::ids::new(domain::ids::AGENT),
        owner: owner.clone(),
        key_id: record.id.clone(),
        name: "direct".into(),
        status: "active".into(),
        created_at: domain::time::Timestamp::of(domain::time::now()),
        deactivated_at: None,
        deactivation_reason: None,
    };
    let direct = env
        .store
        .register_agent(
            &key.hash(),
            &agent,
            &domain::time::rfc3339(domain::time::now()),
        )
        .await;
    assert!(matches!(
        direct,
        Err(domain::store::StoreError::ConditionFailed)
    ));
    let listed = env
        .req("GET", "/api/agents")
        .bearer(&session)
        .send()
        .await
        .json();
    assert!(listed["items"].as_array().unwrap().is_empty());
}
