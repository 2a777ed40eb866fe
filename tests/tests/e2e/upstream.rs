//! The upstream client (issue point 9): retries, timeouts, error mapping, the token kept secret.

use std::time::Duration;

use axum::http::Method;
use e2e::sim::Fault;
use serde_json::json;

use crate::harness::{ALICE, Options, PROJECT, TOKEN, TestEnv};

fn count(env: &TestEnv, request: &str) -> usize {
    env.upstream_log().iter().filter(|r| *r == request).count()
}

#[tokio::test]
async fn reads_are_retried_on_5xx_and_429() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    env.sim.inject(Fault::status("/regions", 503));
    env.sim.inject(Fault::status("/regions", 502));
    let res = env.req("GET", "/api/cloud/regions").key(&key).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(count(&env, "GET /regions"), 3);
    let mut limited = Fault::status("/teams", 429);
    limited.retry_after = Some(1);
    env.sim.inject(limited);
    let started = std::time::Instant::now();
    assert_eq!(
        env.req("GET", "/api/cloud/teams")
            .key(&key)
            .send()
            .await
            .status,
        200
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After honoured"
    );
    assert_eq!(count(&env, "GET /teams"), 2);
}

#[tokio::test]
async fn reads_give_up_after_the_configured_retries() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for _ in 0..3 {
        env.sim.inject(Fault::status("/regions", 500));
    }
    let doc = env
        .req("GET", "/api/cloud/regions")
        .key(&key)
        .send()
        .await
        .problem(502);
    assert_eq!(doc["type"], "/problems/upstream-error");
    assert_eq!(count(&env, "GET /regions"), 3, "1 try + 2 retries");
    for _ in 0..3 {
        env.sim.inject(Fault::status("/teams", 429));
    }
    let res = env.req("GET", "/api/cloud/teams").key(&key).send().await;
    res.problem(429);
    assert!(res.header("retry-after").is_some());
    // 4xx other than 408/429 are not retried.
    env.sim
        .inject(Fault::status("/plans/cloud_vps_free/images", 404));
    env.req("GET", "/api/cloud/images")
        .query("plan=cloud_vps_free")
        .key(&key)
        .send()
        .await
        .problem(404);
    assert_eq!(count(&env, "GET /plans/cloud_vps_free/images"), 1);
}

#[tokio::test]
async fn creates_are_never_retried() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let body = json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"});
    env.sim
        .inject(Fault::status("/projects/", 503).on(Method::POST));
    let doc = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .json(body.clone())
        .send()
        .await
        .problem(502);
    assert!(
        !doc["detail"].as_str().unwrap().contains("Injected"),
        "provider 5xx text is not passed on"
    );
    assert_eq!(count(&env, &format!("POST /projects/{PROJECT}/servers")), 1);
    // A create that stalls past the timeout: 504, sent once.
    env.sim
        .inject(Fault::stall("/projects/", Duration::from_secs(3)).on(Method::POST));
    let doc = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .json(body)
        .send()
        .await
        .problem(504);
    assert_eq!(doc["type"], "/problems/upstream-timeout");
    assert_eq!(count(&env, &format!("POST /projects/{PROJECT}/servers")), 2);
}

#[tokio::test]
async fn a_read_that_keeps_timing_out_is_504() {
    let env = TestEnv::with(Options {
        timeout_seconds: 0.3,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    for _ in 0..3 {
        env.sim
            .inject(Fault::stall("/teams", Duration::from_secs(2)));
    }
    env.req("GET", "/api/cloud/teams")
        .key(&key)
        .send()
        .await
        .problem(504);
    assert_eq!(count(&env, "GET /teams"), 3);
}

#[tokio::test]
async fn a_refused_token_is_a_502_and_the_token_is_never_shown() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // The provider refuses our credentials: not the caller's fault, so 502, and nothing of it
    // is passed on. (On the regions: a failure is kept a few seconds, and the plans are read
    // again below.)
    env.sim.inject(Fault::status("/regions", 401));
    let res = env.req("GET", "/api/cloud/regions").key(&key).send().await;
    res.problem(502);
    assert!(!res.body.contains(TOKEN));
    // Nothing the API answers carries the token.
    let (id, _) = {
        let server = env
            .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
            .key(&key)
            .json(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai"}))
            .send()
            .await
            .json();
        (server["id"].as_u64().unwrap(), ())
    };
    for res in [
        env.req("GET", "/api/cloud/plans").key(&key).send().await,
        env.req("GET", &format!("/api/cloud/servers/{PROJECT}"))
            .key(&key)
            .send()
            .await,
        env.req("POST", &format!("/api/cloud/servers/{id}/actions"))
            .key(&key)
            .json(json!({"type": "reboot"}))
            .send()
            .await,
        env.req("GET", "/api/cloud/status").send().await,
    ] {
        assert!(!res.body.contains(TOKEN));
        assert!(
            res.headers
                .values()
                .all(|v| !v.to_str().unwrap_or("").contains(TOKEN))
        );
    }
    assert!(!format!("{:?}", env.state.upstream).contains(TOKEN));
    assert!(!format!("{:?}", env.state.config).contains(TOKEN));
}
