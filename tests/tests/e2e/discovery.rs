//! Discovery (issue point 5): passed through, plans priced, cached.

use serde_json::{Value, json};

use e2e::sim::Fault;

use crate::harness::{ALICE, Options, TestEnv, owner};

#[tokio::test]
async fn plans_pass_through_with_monthly_cost_in_usd() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let res = env.req("GET", "/api/cloud/plans").key(&key).send().await;
    assert_eq!(res.status, 200);
    let plans = res.json();
    let plans = plans.as_array().expect("a bare array, like the provider's");
    assert_eq!(plans.len(), e2e::sim::plans().len());
    let by_slug = |slug: &str| plans.iter().find(|p| p["slug"] == slug).unwrap().clone();
    // Free: Hourly 0.
    assert_eq!(by_slug("cloud_vps_free")["monthlyCost"], 0.0);
    // Hourly only: 0.0218 EUR × 730 × 1.16 USD/EUR.
    assert_eq!(by_slug("B1-1-1gb-20s-shared")["monthlyCost"], 18.46024);
    // The hourly cycle the server is created on, not the cheaper fixed-term Monthly:
    // 0.2551 EUR × 730 × 1.16.
    assert_eq!(by_slug("e5_1650v4")["monthlyCost"], 216.01868);
    // Everything else is the provider's object, unchanged.
    let mut original = e2e::sim::plans()
        .into_iter()
        .find(|p| p["slug"] == "e5_1650v4")
        .unwrap();
    let mut ours = by_slug("e5_1650v4");
    ours.as_object_mut().unwrap().remove("monthlyCost");
    original.as_object_mut().unwrap().remove("monthlyCost");
    assert_eq!(ours, original);
}

/// A credential presented on the open plans listing is a credential checked (issue 63, point
/// 9): a revoked, malformed or unknown key, bearer or session cookie is 401, as on every other
/// row, so an agent learns its key is dead; no credential, a valid one or only x402's payment
/// header keeps the open answer.
#[tokio::test]
async fn a_revoked_key_on_the_open_plans_listing_is_answered_401() {
    let env = TestEnv::new().await;
    let session = env
        .sign_in(&alloy_signer_local::PrivateKeySigner::random())
        .await;
    let (revoked_id, revoked) = env.generate_key(&session, json!({"name": "old"})).await;
    let valid = env.key(ALICE).await;
    let res = env
        .req("DELETE", &format!("/api/keys/{revoked_id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(res.json()["status"], "revoked", "{}", res.body);
    let unknown = "ab".repeat(32);
    let bad = [
        ("x-api-key", revoked.clone()),
        ("x-api-key", "svc_123".to_owned()),
        ("authorization", format!("Bearer {revoked}")),
        ("authorization", format!("Bearer {unknown}")),
        ("authorization", format!("Bearer mcp_at_{unknown}")),
        ("cookie", format!("__Host-session={unknown}")),
    ];
    for (name, value) in &bad {
        let res = env
            .req("GET", "/api/cloud/plans")
            .header(name, value)
            .send()
            .await;
        res.problem(401);
    }
    let good = [
        None,
        Some(("x-api-key", valid.clone())),
        Some(("authorization", format!("Bearer {session}"))),
        Some(("x-payment", "not a credential".to_owned())),
    ];
    for credential in &good {
        let mut req = env.req("GET", "/api/cloud/plans");
        if let Some((name, value)) = credential {
            req = req.header(name, value);
        }
        let res = req.send().await;
        assert_eq!(res.status, 200, "{credential:?}: {}", res.body);
        assert_eq!(
            res.json().as_array().unwrap().len(),
            e2e::sim::plans().len()
        );
    }
}

#[tokio::test]
async fn regions_teams_projects_and_images() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let get = |path: &'static str, query: &'static str| {
        let key = key.clone();
        let env = &env;
        async move { env.req("GET", path).query(query).key(&key).send().await }
    };
    let regions = get("/api/cloud/regions", "").await.json();
    assert!(
        regions
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["slug"] == "LT-Siauliai")
    );
    let teams = get("/api/cloud/teams", "").await.json();
    assert_eq!(teams[0]["id"], e2e::sim::TEAM_ID);
    let projects = get("/api/cloud/projects/210345", "").await.json();
    assert_eq!(projects.as_array().unwrap().len(), 2);
    let images = get("/api/cloud/images", "plan=e5_1650v4").await.json();
    let slugs: Vec<&str> = images
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["slug"].as_str())
        .collect();
    assert_eq!(
        slugs,
        ["ubuntu_24_04_64bit", "debian_12_64bit", "windows_2022"]
    );
    let all = get("/api/cloud/images", "").await.json();
    let all: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["slug"].as_str())
        .collect();
    assert_eq!(
        all,
        ["debian_12_64bit", "ubuntu_24_04_64bit", "windows_2022"]
    );
    // Unknown plan: the provider's 404 comes back as 404.
    get("/api/cloud/images", "plan=nope").await.problem(404);
    // Unknown team: 404.
    get("/api/cloud/projects/999", "").await.problem(404);
}

#[tokio::test]
async fn malformed_ids_and_slugs_never_reach_the_provider() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for team in ["abc", "0", "-1", "1e3", "..", "%2e%2e"] {
        env.req("GET", &format!("/api/cloud/projects/{team}"))
            .key(&key)
            .send()
            .await
            .invalid("teamId");
    }
    for plan in ["..", "../teams", "a%2Fb", "a%20b", "%2E%2E"] {
        env.req("GET", "/api/cloud/images")
            .query(&format!("plan={plan}"))
            .key(&key)
            .send()
            .await
            .invalid("plan");
    }
    assert!(env.upstream_log().is_empty(), "{:?}", env.upstream_log());
    // Well-formed slugs no plan has: 404 from the cached catalogue, one read of the plans in
    // all, however many slugs are made up (issue 34, point 5).
    for i in 0..20 {
        env.req("GET", "/api/cloud/images")
            .query(&format!("plan=made-up-{i}"))
            .key(&key)
            .send()
            .await
            .problem(404);
    }
    let log = env.upstream_log();
    assert!(log.iter().all(|line| !line.contains("/images")), "{log:?}");
    assert!(log.len() <= 2, "{log:?}");
}

#[tokio::test]
async fn discovery_is_cached_in_the_warm_function() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for _ in 0..5 {
        assert_eq!(
            env.req("GET", "/api/cloud/plans")
                .key(&key)
                .send()
                .await
                .status,
            200
        );
        assert_eq!(
            env.req("GET", "/api/cloud/regions")
                .key(&key)
                .send()
                .await
                .status,
            200
        );
    }
    let log = env.upstream_log();
    assert_eq!(
        log.iter().filter(|r| *r == "GET /plans").count(),
        1,
        "{log:?}"
    );
    assert_eq!(
        log.iter().filter(|r| *r == "GET /regions").count(),
        1,
        "{log:?}"
    );
}

/// How many times the provider was asked for its plans.
fn plans_asked(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| *r == "GET /plans")
        .count()
}

/// A provider outage is no outage of the open plans listing (issue 63, point 6): past its
/// freshness the listing is answered from the last good read, with its `Age`, after a single
/// attempt at the failing provider (an anonymous read is not retried), and the failure is kept
/// a few seconds, so a flood does not reach the provider.
#[tokio::test]
async fn plans_are_answered_from_the_last_good_read_in_a_provider_outage_with_no_retries() {
    let env = TestEnv::with(Options {
        cache_seconds: 1,
        ..Options::default()
    })
    .await;
    let good = env.req("GET", "/api/cloud/plans").send().await;
    assert_eq!(good.status, 200, "{}", good.body);
    assert_eq!(good.header("age"), None);
    for _ in 0..10 {
        env.sim.inject(Fault::status("/plans", 503));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for _ in 0..5 {
        let res = env.req("GET", "/api/cloud/plans").send().await;
        assert_eq!(res.status, 200, "{}", res.body);
        assert_eq!(res.json(), good.json());
        let age: u64 = res.header("age").expect("an Age").parse().unwrap();
        assert!(age >= 1, "{age}");
    }
    assert_eq!(plans_asked(&env), 2, "{:?}", env.upstream_log());
    assert_eq!(env.sim.unfired_faults(), 9);
}

/// With no good read to stand in, a provider outage is the answer (502), asked once for an
/// anonymous read and then kept a few seconds for every caller.
#[tokio::test]
async fn a_provider_outage_before_any_good_read_is_asked_once_and_kept_briefly() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for _ in 0..10 {
        env.sim.inject(Fault::status("/plans", 503));
    }
    for _ in 0..3 {
        env.req("GET", "/api/cloud/plans").send().await.problem(502);
    }
    env.req("GET", "/api/cloud/plans")
        .key(&key)
        .send()
        .await
        .problem(502);
    assert_eq!(plans_asked(&env), 1, "{:?}", env.upstream_log());
    assert_eq!(env.sim.unfired_faults(), 9);
}

#[tokio::test]
async fn unpriceable_plans_list_a_null_monthly_cost() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // A state whose pricing knows no EUR rate: every simulator plan (EUR) is unpriceable.
    let mut config = env.state.config.clone();
    config.pricing = domain::config::PricingConfig::default();
    let upstream = domain::upstream::Client::new(
        &config.upstream,
        domain::secrets::Secret::new(crate::harness::TOKEN),
    );
    let state = domain::AppState::new(config, env.store.clone(), Some(upstream));
    let plans = domain::servers::discovery::plans(&state, None)
        .await
        .unwrap()
        .items;
    assert!(plans.iter().all(|p| p["monthlyCost"] == Value::Null));
    // And such a plan is never provisioned as if free.
    let principal = domain::identity::auth::Principal {
        counted: domain::ratelimit::Tally::settled(domain::ratelimit::Verdict::Counted),
        approval: None,
        owner: owner(ALICE),
        credential: domain::identity::auth::Credential::ApiKey {
            key_id: "key_x".into(),
            key_hash: "h".into(),
            scopes: domain::policy::Scope::ALL.to_vec(),
            policy: None,
        },
    };
    let request: domain::billing::purchase::ProvisionRequest = serde_json::from_value(
        serde_json::json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}),
    )
    .unwrap();
    let err = domain::servers::provision(
        &state,
        &principal,
        crate::harness::PROJECT,
        request.validate().unwrap(),
        domain::billing::order::Resource {
            url: "https://api.example.test/api/cloud/servers/1",
            base: "https://api.example.test",
        },
        None,
        &domain::deadline::Deadline::after(std::time::Duration::from_secs(10)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.status().as_u16(), 503);
    assert_eq!(env.sim.server_count(), 0);
    drop(key);
}

#[tokio::test]
async fn refusals_are_cached_and_foreign_teams_never_reach_the_provider() {
    let team = e2e::sim::TEAM_ID;
    let env = TestEnv::with(Options {
        vars: vec![("UPSTREAM_TEAM_ID", team.to_string())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let get = |path: String, query: &'static str| {
        let key = key.clone();
        let env = &env;
        async move { env.req("GET", &path).query(query).key(&key).send().await }
    };
    // Another team than the configured one: 404 here, the provider never asked.
    for _ in 0..3 {
        get("/api/cloud/projects/999".into(), "").await.problem(404);
    }
    assert!(env.upstream_log().is_empty(), "{:?}", env.upstream_log());
    // The configured team's projects: id and name, nothing of the provider's billing or BGP.
    let projects = get(format!("/api/cloud/projects/{team}"), "").await.json();
    for project in projects.as_array().unwrap() {
        let mut fields: Vec<&String> = project.as_object().unwrap().keys().collect();
        fields.sort();
        assert_eq!(fields, ["id", "name"], "{project}");
    }
    // An unknown plan: the provider's 404 is asked once, then answered from the cache.
    let before = env.upstream_log().len();
    for _ in 0..4 {
        get("/api/cloud/images".into(), "plan=nope")
            .await
            .problem(404);
    }
    let asked: Vec<String> = env.upstream_log()[before..].to_vec();
    assert_eq!(asked.len(), 1, "{asked:?}");
}
