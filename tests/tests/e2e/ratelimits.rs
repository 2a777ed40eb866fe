//! Rate limits (the key-policies issue, point 3): per key or session, per source address on the
//! sign-in routes; bursts, refill, independence, and the 429's headers.

use std::time::Duration;

use serde_json::json;

use crate::harness::{ALICE, BOB, Options, TestEnv, TestResponse};

/// An environment whose callers may make `burst` requests per `burst / rate` seconds.
async fn limited(rate: &str, burst: &str) -> TestEnv {
    TestEnv::with(Options {
        vars: vec![
            ("RATE_LIMIT_PER_SECOND", rate.into()),
            ("RATE_LIMIT_BURST", burst.into()),
            ("SIGN_IN_RATE_PER_SECOND", rate.into()),
            ("SIGN_IN_RATE_BURST", burst.into()),
        ],
        ..Options::default()
    })
    .await
}

fn is_limited(res: &TestResponse, policy: &str, quota: u32, window: u64) {
    let doc = res.problem(429);
    assert_eq!(doc["type"], "/problems/rate-limited", "{doc}");
    let retry: u64 = res.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=window).contains(&retry), "{retry}");
    assert_eq!(
        res.header("ratelimit-policy"),
        Some(format!("\"{policy}\";q={quota};w={window}").as_str())
    );
    assert_eq!(
        res.header("ratelimit"),
        Some(format!("\"{policy}\";r=0;t={retry}").as_str())
    );
}

/// Moves the clock to the start of a fresh window of `window` seconds, so a burst fits in one
/// (no sleep: the limits read the environment's clock).
fn fresh_window(env: &TestEnv, window: u64) {
    let now = env.clock.now_millis() as f64 / 1000.0;
    let next = ((now as u64 / window) + 1) * window;
    env.clock.forward_to(next as i64 * 1000 + 50);
}

#[tokio::test]
async fn a_key_gets_its_burst_then_429_then_refills() {
    // 2 per second, bursts of 6: a 3 s window.
    let env = limited("2", "6").await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    fresh_window(&env, 3);
    for i in 0..6 {
        let res = env.req("GET", "/api/sandboxes").key(&alice).send().await;
        assert_eq!(res.status, 200, "request {i}: {}", res.body);
    }
    let over = env.req("GET", "/api/sandboxes").key(&alice).send().await;
    is_limited(&over, "caller", 6, 3);
    // Every route counts (and refuses) alike, the MCP face too.
    let other_route = env.req("GET", "/api/payments").key(&alice).send().await;
    is_limited(&other_route, "caller", 6, 3);
    let mcp = env
        .req("POST", "/mcp")
        .key(&alice)
        .header("accept", "application/json, text/event-stream")
        .json(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await;
    is_limited(&mcp, "caller", 6, 3);
    // Another key is not affected.
    let res = env.req("GET", "/api/sandboxes").key(&bob).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    // The next window refills.
    let retry: u64 = over.header("retry-after").unwrap().parse().unwrap();
    env.clock.advance(Duration::from_secs(retry));
    let res = env.req("GET", "/api/sandboxes").key(&alice).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    // One counter write per request (the only limit this environment turns on), nothing else.
    let before = env.faults.calls("UpdateItem");
    env.req("GET", "/api/sandboxes").key(&alice).send().await;
    assert_eq!(env.faults.calls("UpdateItem") - before, 1);
}

#[tokio::test]
async fn a_session_is_limited_like_a_key() {
    let env = limited("1", "3").await;
    let signer = alloy_signer_local::PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    fresh_window(&env, 3);
    for _ in 0..3 {
        let res = env.req("GET", "/api/keys").bearer(&session).send().await;
        assert_eq!(res.status, 200, "{}", res.body);
    }
    let over = env.req("GET", "/api/auth/me").bearer(&session).send().await;
    is_limited(&over, "caller", 3, 3);
}

#[tokio::test]
async fn the_sign_in_routes_are_limited_per_source_address() {
    let env = limited("1", "3").await;
    fresh_window(&env, 3);
    let from = |ip: &'static str| {
        let env = &env;
        async move {
            let (function, mut event) = env.req("GET", "/api/auth/nonce").event();
            event["requestContext"]["http"]["sourceIp"] = json!(ip);
            env.invoke(&function, &event.to_string()).await
        }
    };
    for _ in 0..3 {
        assert_eq!(from("198.51.100.7").await.status, 200);
    }
    is_limited(&from("198.51.100.7").await, "sign-in", 3, 3);
    // verify counts against the same address.
    let (function, mut event) = env
        .req("POST", "/api/auth/verify")
        .json(json!({"message": "x", "signature": "0x00"}))
        .event();
    event["requestContext"]["http"]["sourceIp"] = json!("198.51.100.7");
    is_limited(
        &env.invoke(&function, &event.to_string()).await,
        "sign-in",
        3,
        3,
    );
    // Another address is not affected.
    assert_eq!(from("203.0.113.9").await.status, 200);
}

/// The authorization server's doors anyone may knock on (registration, authorization, tokens,
/// revocation) share one `oauth` budget per source address: a flood of registrations or forged
/// codes from one address is refused before it reaches the store; its metadata stays free.
#[tokio::test]
async fn the_oauth_endpoints_are_limited_per_source_address() {
    let env = limited("1", "3").await;
    fresh_window(&env, 3);
    let register = |ip: &'static str| {
        let env = &env;
        async move {
            env.req("POST", "/oauth/register")
                .source_ip(ip)
                .json(json!({"redirect_uris": ["http://127.0.0.1:1/cb"]}))
                .send()
                .await
        }
    };
    for _ in 0..3 {
        assert_eq!(register("198.51.100.7").await.status, 201);
    }
    is_limited(&register("198.51.100.7").await, "oauth", 3, 3);
    let token = env
        .req("POST", "/oauth/token")
        .source_ip("198.51.100.7")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=authorization_code&code=forged")
        .send()
        .await;
    is_limited(&token, "oauth", 3, 3);
    let metadata = env
        .req("GET", "/.well-known/oauth-authorization-server")
        .source_ip("198.51.100.7")
        .send()
        .await;
    assert_eq!(metadata.status, 200);
    assert_eq!(register("203.0.113.9").await.status, 201);
}

/// Registrations are anyone's writes, so besides each address's `oauth` limit every caller
/// together has a budget (`registrations`): a flood from many addresses is refused once it is
/// spent, and a refused registration spends none of it.
#[tokio::test]
async fn registrations_of_everyone_have_one_budget() {
    let env = TestEnv::with(Options {
        vars: vec![
            ("OAUTH_REGISTRATIONS_PER_SECOND", "1".into()),
            ("OAUTH_REGISTRATIONS_BURST", "3".into()),
        ],
        ..Options::default()
    })
    .await;
    fresh_window(&env, 3);
    let register = |ip: &'static str, uri: &'static str| {
        let env = &env;
        async move {
            env.req("POST", "/oauth/register")
                .source_ip(ip)
                .json(json!({"redirect_uris": [uri]}))
                .send()
                .await
        }
    };
    let good = "http://127.0.0.1:1/cb";
    for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        assert_eq!(register(ip, good).await.status, 201);
        assert_eq!(register(ip, "myapp:/cb").await.status, 400);
    }
    is_limited(&register("198.51.100.4", good).await, "registrations", 3, 3);
}

/// A flood of bad token requests from an address spends that address's `oauth` limit, but a
/// client holding a live refresh token of its own is counted against its grant instead: the
/// flood cannot close its refresh (and its grant's limit bounds it).
#[tokio::test]
async fn a_token_flood_does_not_close_a_valid_refresh() {
    use crate::mcp_oauth::{form, tokens};
    let env = TestEnv::with(Options {
        vars: vec![
            ("SIGN_IN_RATE_PER_SECOND", "1".into()),
            ("SIGN_IN_RATE_BURST", "3".into()),
        ],
        ..Options::default()
    })
    .await;
    let session = env
        .sign_in(&alloy_signer_local::PrivateKeySigner::random())
        .await;
    let (first, client_id) = tokens(&env, &session).await;
    fresh_window(&env, 3);
    let forged = [("grant_type", "authorization_code"), ("code", "forged")];
    for _ in 0..3 {
        assert_eq!(form(&env, "/oauth/token", &forged).await.status, 400);
    }
    is_limited(&form(&env, "/oauth/token", &forged).await, "oauth", 3, 3);
    let refresh = |token: String| {
        let (env, client_id) = (&env, &client_id);
        async move {
            let body = [
                ("grant_type", "refresh_token"),
                ("refresh_token", token.as_str()),
                ("client_id", client_id.as_str()),
            ];
            form(env, "/oauth/token", &body).await
        }
    };
    // A forged refresh token is one more bad request of the address.
    let unknown = format!("mcp_rt_{}", domain::ids::random_hex(32));
    is_limited(&refresh(unknown).await, "oauth", 3, 3);
    // The valid one goes through, rotating, until its grant's own limit.
    let mut token = first["refresh_token"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        let res = refresh(token).await;
        assert_eq!(res.status, 200, "{}", res.body);
        token = res.json()["refresh_token"].as_str().unwrap().to_owned();
    }
    is_limited(&refresh(token).await, "oauth-grant", 3, 3);
}
