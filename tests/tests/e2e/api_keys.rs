//! API-key authentication on every route except status (issue point 3), and status (point 4).

use serde_json::json;

use crate::harness::{ALICE, Options, PROJECT, TestEnv, owner};

#[tokio::test]
async fn status_needs_no_key_and_reports_configuration() {
    let env = TestEnv::new().await;
    let res = env.req("GET", "/api/cloud/status").send().await;
    assert_eq!(res.status, 200);
    assert_eq!(res.json(), json!({"configured": true}));
    assert!(res.header("x-request-id").is_some());
    let off = TestEnv::with(Options {
        configured: false,
        ..Options::default()
    })
    .await;
    assert_eq!(
        off.req("GET", "/api/cloud/status").send().await.json(),
        json!({"configured": false})
    );
    off.req("POST", "/api/cloud/status")
        .send()
        .await
        .problem(405);
    // From the configuration alone: a token in SSM is configured without being read (the
    // function has no store, no client and no SSM call; the parameter here does not exist).
    let config = domain::config::Config::from_lookup(|name| match name {
        "TABLE_NAME" => Some("unused".into()),
        "UPSTREAM_TOKEN_PARAM" => Some("/nowhere/token".into()),
        _ => None,
    })
    .unwrap();
    let (_, event) = off.req("GET", "/api/cloud/status").event();
    let request = lambda_http::request::from_str(&event.to_string()).unwrap();
    let res = crate::harness::TestResponse::from(status::handle(&config, request).await);
    assert_eq!(res.json(), json!({"configured": true}));
}

/// Every key-protected route, with a body where it takes one (the plans and their prices are
/// anyone's: `found_by_agents`).
fn protected() -> Vec<(&'static str, String)> {
    vec![
        ("GET", "/api/cloud/regions".into()),
        ("GET", "/api/cloud/images".into()),
        ("GET", "/api/cloud/teams".into()),
        ("GET", "/api/cloud/projects/210345".into()),
        ("GET", format!("/api/cloud/servers/{PROJECT}")),
        ("POST", format!("/api/cloud/servers/{PROJECT}")),
        ("POST", "/api/cloud/servers/912001/actions".into()),
        ("DELETE", "/api/cloud/servers/912001".into()),
        ("GET", "/api/sandboxes".into()),
        (
            "GET",
            "/api/sandboxes/sbx_0123456789abcdef0123456789abcdef".into(),
        ),
        ("POST", "/api/sandboxes".into()),
    ]
}

#[tokio::test]
async fn missing_malformed_unknown_revoked_and_expired_keys_get_one_generic_401() {
    let env = TestEnv::new().await;
    let revoked = env.key(ALICE).await;
    let revoked_id = env
        .store
        .api_key_by_hash(
            &domain::identity::auth::api_key::ApiKey::parse(&revoked)
                .unwrap()
                .hash(),
        )
        .await
        .unwrap()
        .unwrap()
        .id;
    env.store
        .revoke_api_key(
            &owner(ALICE),
            &revoked_id,
            "2026-11-21T00:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap();
    let (expired, _) = domain::identity::auth::api_key::issue(
        &env.store,
        &owner(ALICE),
        domain::identity::auth::api_key::NewKey {
            expires_at: Some("2020-01-01T00:00:00Z".parse().unwrap()),
            ..domain::identity::auth::api_key::NewKey::named("old", env.state.clock.timestamp())
        },
        None,
    )
    .await
    .unwrap();
    let unknown = format!("svc_{}", "ab".repeat(24));
    let cases: Vec<(&str, Option<(&str, String)>)> = vec![
        ("missing", None),
        ("malformed", Some(("x-api-key", "svc_123".into()))),
        (
            "uppercase",
            Some(("x-api-key", unknown.to_uppercase().replace("SVC_", "svc_"))),
        ),
        ("unknown", Some(("x-api-key", unknown.clone()))),
        ("revoked", Some(("x-api-key", revoked.clone()))),
        ("expired", Some(("x-api-key", expired.expose().to_owned()))),
        (
            "bearer unknown",
            Some(("authorization", format!("Bearer {unknown}"))),
        ),
    ];
    let mut details = std::collections::BTreeSet::new();
    for (method, path) in protected() {
        for (case, header) in &cases {
            let mut req = env.req(method, &path).json(json!({}));
            if let Some((name, value)) = header {
                req = req.header(name, value);
            }
            let res = req.send().await;
            let doc = res.problem(401);
            details.insert(doc["detail"].as_str().unwrap().to_owned());
            assert!(
                !res.body.contains("revoked") && !res.body.contains("expired"),
                "{case}: {}",
                res.body
            );
        }
    }
    assert_eq!(details.len(), 1, "one generic message: {details:?}");
    // None of those reached the provider.
    assert!(env.upstream_log().is_empty(), "{:?}", env.upstream_log());
}

#[tokio::test]
async fn a_valid_key_works_in_either_header() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    assert_eq!(
        env.req("GET", "/api/cloud/regions")
            .key(&key)
            .send()
            .await
            .status,
        200
    );
    let bearer = env
        .req("GET", "/api/cloud/regions")
        .header("authorization", &format!("Bearer {key}"))
        .send()
        .await;
    assert_eq!(bearer.status, 200);
}

#[tokio::test]
async fn cloud_routes_answer_503_when_the_upstream_is_not_configured() {
    let env = TestEnv::with(Options {
        configured: false,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    for (method, path, body) in [
        ("GET", "/api/cloud/plans".to_owned(), json!(null)),
        ("GET", "/api/cloud/regions".into(), json!(null)),
        ("GET", "/api/cloud/images".into(), json!(null)),
        ("GET", "/api/cloud/teams".into(), json!(null)),
        ("GET", "/api/cloud/projects/210345".into(), json!(null)),
        ("GET", format!("/api/cloud/servers/{PROJECT}"), json!(null)),
        (
            "POST",
            format!("/api/cloud/servers/{PROJECT}"),
            json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}),
        ),
        (
            "POST",
            "/api/cloud/servers/912001/actions".into(),
            json!({"type": "reboot"}),
        ),
        ("DELETE", "/api/cloud/servers/912001".into(), json!(null)),
    ] {
        let mut req = env.req(method, &path).key(&key);
        if !body.is_null() {
            req = req.json(body);
        }
        let doc = req.send().await.problem(503);
        assert_eq!(
            doc["type"], "/problems/upstream-not-configured",
            "{method} {path}"
        );
    }
    // Sandboxes are the service's own records: they still work.
    assert_eq!(
        env.req("GET", "/api/sandboxes")
            .key(&key)
            .send()
            .await
            .status,
        200
    );
}
