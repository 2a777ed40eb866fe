//! Errors everywhere (issue point 11): problem+json, X-Request-Id, 413, malformed JSON.

use serde_json::json;

use crate::harness::{ALICE, PROJECT, TestEnv};

#[tokio::test]
async fn every_response_carries_the_services_request_id_never_the_callers() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let ok = env.req("GET", "/api/cloud/plans").key(&key).send().await;
    assert_eq!(ok.status, 200);
    assert!(
        ok.header("x-request-id")
            .is_some_and(|id| id.starts_with("apigw-"))
    );
    // A caller's id (logged beside the service's) never replaces it: two callers sending the
    // same one still get ids of their own, in answers and problem documents alike.
    let mut ids = std::collections::BTreeSet::new();
    for (path, status) in [("/api/cloud/plans", 200), ("/api/sandboxes/nope", 400)] {
        for given in ["trace-42.a_b", "a b<script>"] {
            let res = env
                .req("GET", path)
                .key(&key)
                .header("x-request-id", given)
                .send()
                .await;
            assert_eq!(res.status, status, "{}", res.body);
            let id = res.header("x-request-id").unwrap().to_owned();
            assert!(id.starts_with("apigw-"), "{id}");
            if status != 200 {
                assert_eq!(res.json()["requestId"], id.as_str());
            }
            ids.insert(id);
        }
    }
    assert_eq!(ids.len(), 4);
    let denied = env.req("GET", "/api/sandboxes").send().await;
    denied.problem(401);
}

#[tokio::test]
async fn oversized_bodies_get_413_before_anything_else() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let big =
        json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "user_data": "A".repeat(9000)});
    let doc = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .json(big.clone())
        .send()
        .await
        .problem(413);
    assert_eq!(doc["type"], "/problems/payload-too-large");
    // Even without a key: the size is checked first, and nothing reaches the provider.
    env.req("POST", "/api/sandboxes")
        .json(big)
        .send()
        .await
        .problem(413);
    assert!(env.upstream_log().is_empty());
}

#[tokio::test]
async fn malformed_json_says_what_is_wrong() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    // Not JSON at all: 415 before anything is read.
    env.req("POST", &path)
        .key(&key)
        .body("plan=x")
        .send()
        .await
        .problem(415);
    let doc = env
        .req("POST", &path)
        .key(&key)
        .header("content-type", "application/json")
        .body("{\"plan\": \"x\",")
        .send()
        .await
        .invalid("body");
    assert!(
        doc["detail"].as_str().unwrap().contains("malformed JSON"),
        "{doc}"
    );
    let doc = env
        .req("POST", &path)
        .key(&key)
        .header("content-type", "application/json")
        .body("{\"plan\": 1}")
        .send()
        .await
        .invalid("plan");
    assert!(
        doc["detail"].as_str().unwrap().contains("invalid type"),
        "{doc}"
    );
    env.req("POST", &path)
        .key(&key)
        .header("content-type", "application/json")
        .body("")
        .send()
        .await
        .invalid("body");
    env.req("POST", &path)
        .key(&key)
        .header("content-type", "application/json")
        .body("{\"plan\": \"p\", \"region\": \"r\"} []")
        .send()
        .await
        .invalid("body");
    env.req("POST", &path)
        .key(&key)
        .header("content-type", "application/json")
        .body("[1]")
        .send()
        .await
        .invalid("body");
    let doc = env
        .req("POST", &path)
        .key(&key)
        .json(json!({"plan": "p", "region": "r", "color": "red"}))
        .send()
        .await
        .invalid("color");
    assert!(doc["detail"].as_str().unwrap().contains("unknown field"));
    assert!(!env.upstream_log().iter().any(|r| r.starts_with("POST")));
}

#[tokio::test]
async fn bodies_that_are_not_utf8_are_refused_as_bad_input() {
    use base64::Engine;
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let bytes = [0x0b, 0xff, 0x7c, 0xfe, 0x65];
    for (path, status) in [
        (format!("/api/cloud/servers/{PROJECT}"), 400),
        ("/api/sandboxes".to_owned(), 400),
        ("/api/agents".to_owned(), 400),
        // The MCP transport (rmcp) answers a body it cannot decode 415, in plain text.
        ("/mcp".to_owned(), 415),
    ] {
        // API Gateway hands a body that is not text to the function base64-encoded.
        let (function, mut event) = env
            .req("POST", &path)
            .key(&key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .event();
        event["body"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
        event["isBase64Encoded"] = json!(true);
        let res = env.invoke(&function, &event.to_string()).await;
        assert_eq!(res.status, status, "{path}: {}", res.body);
        if path.starts_with("/api/") {
            res.invalid("body");
        }
    }
    assert!(!env.upstream_log().iter().any(|r| r.starts_with("POST")));
}

#[tokio::test]
async fn wrong_methods_get_405() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    env.req("PUT", "/api/sandboxes")
        .key(&key)
        .send()
        .await
        .problem(405);
    env.req("DELETE", "/api/cloud/plans")
        .key(&key)
        .send()
        .await
        .problem(405);
}
