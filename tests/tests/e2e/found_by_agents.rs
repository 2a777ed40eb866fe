//! Found by agents (issue 47, point 1): without a key, a client reads what is sold and on what
//! terms — the OpenAPI document at the root with `x-payment-info` on every paid operation,
//! `/.well-known/x402`, `/llms.txt` — and every 402 carries the `bazaar` extension of its route;
//! each held to the route table and to what the API answers.

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use serde_json::json;

use crate::harness::{ALICE, PROJECT, TREASURY, TestEnv, b64json, pay};

/// The public base the harness's requests are answered on (`faces::http::public_base`).
async fn base(env: &TestEnv) -> String {
    let document = env.req("GET", "/openapi.json").send().await.json();
    document["servers"][0]["url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_root_document_is_the_apis_with_the_terms_of_each_paid_operation() {
    let env = TestEnv::new().await;
    let root = env.req("GET", "/openapi.json").send().await;
    assert_eq!(root.status, 200, "{}", root.body);
    let api = env.req("GET", "/api/openapi.json").send().await;
    assert_eq!(root.json(), api.json(), "one document at both paths");
    let document = root.json();
    let base = base(&env).await;
    let mut paid = 0;
    for op in domain::api::OPERATIONS.iter().filter(|op| op.documented) {
        let method = op.method.as_str().to_ascii_lowercase();
        let operation = &document["paths"][op.path][&method];
        let info = &operation["x-payment-info"];
        if !op.paid {
            assert!(info.is_null(), "{} {}: {info}", op.method, op.path);
            continue;
        }
        paid += 1;
        // What x402scan requires of a paid operation: the protocol, a price mode, a 402
        // answer, and its security.
        assert_eq!(info["protocols"], json!(["x402"]), "{}", op.id);
        assert_eq!(info["pricingMode"], "quote");
        assert_eq!(info["scheme"], "exact");
        assert_eq!(info["network"], "eip155:84532");
        assert_eq!(info["asset"], domain::x402::Network::BaseSepolia.usdc());
        assert!(
            info["payTo"]
                .as_str()
                .is_some_and(|to| to.eq_ignore_ascii_case(TREASURY)),
            "{info}"
        );
        assert!(operation["responses"]["402"].is_object(), "{}", op.id);
        assert!(operation["security"].is_array(), "{}", op.id);
    }
    assert_eq!(paid, 3, "provisioning, renewals and resizes");
    let llms = format!("{base}/llms.txt");
    assert_eq!(document["x-discovery"]["llmsTxtUrl"], llms);
    assert_eq!(document["x-service-info"]["docs"]["llms"], llms);
    assert_eq!(document["x-service-info"]["categories"], json!(["compute"]));
}

#[tokio::test]
async fn the_well_known_document_lists_every_paid_route_and_how_to_get_a_key() {
    let env = TestEnv::new().await;
    let res = env.req("GET", "/.well-known/x402").send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    let base = base(&env).await;
    let document = res.json();
    assert_eq!(document["version"], 1);
    let paid: Vec<String> = domain::api::OPERATIONS
        .iter()
        .filter(|op| op.paid)
        .map(|op| format!("{base}{}", op.path))
        .collect();
    assert_eq!(document["resources"], json!(paid));
    let instructions = document["instructions"].as_str().unwrap();
    for needed in ["X-API-Key", "/llms.txt", "/openapi.json", "/mcp"] {
        assert!(instructions.contains(needed), "{needed}: {instructions}");
    }
}

#[tokio::test]
async fn llms_txt_says_what_is_sold_and_how_to_buy_wait_and_connect() {
    let env = TestEnv::new().await;
    let res = env.req("GET", "/llms.txt").send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(
        res.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let text = res.body;
    assert!(text.starts_with("# Cloud API for agents\n\n> "), "{text}");
    let base = base(&env).await;
    // Every path it names is a route of the table, on this deployment's base.
    for (at, _) in text.match_indices(&base) {
        let path: String = text[at + base.len()..]
            .chars()
            .take_while(|c| !matches!(c, '`' | ')' | '?' | ' ' | '\n' | ':'))
            .collect();
        let known = path == "/"
            || domain::api::OPERATIONS
                .iter()
                .any(|op| op.path == path.trim_end_matches('/') || op.path == path);
        assert!(known, "{path} is no route");
    }
    for op in domain::api::OPERATIONS.iter().filter(|op| op.paid) {
        assert!(
            text.contains(&format!("POST {base}{}", op.path)),
            "{}",
            op.id
        );
    }
    for needed in [
        "eip155:84532",
        "PAYMENT-SIGNATURE",
        "X-API-Key",
        "waitFor=ready",
        "/mcp",
    ] {
        assert!(text.contains(needed), "{needed}");
    }
}

/// What is sold and its price, without a key: the plans with `monthlyCost`; a stranger's
/// flood of them costs the provider one call per cache window.
#[tokio::test]
async fn the_plans_and_their_prices_are_anyones_and_a_flood_is_one_provider_call() {
    let env = TestEnv::new().await;
    let plans = |res: crate::harness::TestResponse| {
        assert_eq!(res.status, 200, "{}", res.body);
        res.json().as_array().unwrap().clone()
    };
    let first = plans(env.req("GET", "/api/cloud/plans").send().await);
    let priced = first
        .iter()
        .find(|p| p["slug"] == "B1-1-1gb-20s-shared")
        .unwrap();
    assert_eq!(priced["monthlyCost"], 18.46024);
    let before = env
        .upstream_log()
        .iter()
        .filter(|r| r.contains("/plans"))
        .count();
    for _ in 0..20 {
        assert_eq!(
            plans(env.req("GET", "/api/cloud/plans").send().await),
            first
        );
    }
    let after = env
        .upstream_log()
        .iter()
        .filter(|r| r.contains("/plans"))
        .count();
    assert_eq!(after, before, "served from the cache");
    // With a key, the same answer.
    let key = env.key(ALICE).await;
    assert_eq!(
        plans(env.req("GET", "/api/cloud/plans").key(&key).send().await),
        first
    );
}

/// The `bazaar` extension of a 402: its route, this request's path parameter, the body
/// example of the row's request type (one the route accepts: sent, it is offered the same
/// way), and a schema whose body is the document's.
#[tokio::test]
async fn every_402_carries_the_bazaar_extension_of_its_route() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let example = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai",
        "hostname": "agent-1"});
    let res = env
        .req("POST", &path)
        .key(&key)
        .json(example.clone())
        .send()
        .await;
    assert_eq!(res.status, 402, "{}", res.body);
    let required = b64json(res.header("payment-required").unwrap());
    let bazaar = &required["extensions"]["bazaar"];
    let input = &bazaar["info"]["input"];
    assert_eq!(
        (&input["type"], &input["method"], &input["bodyType"]),
        (&json!("http"), &json!("POST"), &json!("json"))
    );
    assert_eq!(input["body"], example, "the request type's own example");
    assert_eq!(input["pathParams"], json!({"id": PROJECT.to_string()}));
    assert!(input["headers"]["X-API-Key"].is_string());
    assert_eq!(bazaar["info"]["output"], json!({"type": "json"}));
    assert_eq!(bazaar["routeTemplate"], "/api/cloud/servers/:id");
    let schema = &bazaar["schema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let body = &schema["properties"]["input"]["properties"]["body"];
    assert_eq!(body["$ref"], "#/$defs/ProvisionRequest");
    let document = env.req("GET", "/api/openapi.json").send().await.json();
    assert_eq!(
        schema["$defs"]["ProvisionRequest"],
        document["components"]["schemas"]["ProvisionRequest"]
    );
    // Self-contained: every `$ref` a same-document fragment.
    assert!(!schema.to_string().contains("#/components/"), "{schema}");
}

/// A client echoes the offer's extensions in its payment payload (x402 v2, so that a
/// cataloguing facilitator sees them): the payment provisions as any other; the server's
/// renewal is offered with the renewal route's extension.
#[tokio::test]
async fn a_payment_that_echoes_the_extensions_provisions_and_its_renewal_names_its_route() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai",
        "hostname": "echo-1"});
    let res = env
        .req("POST", &path)
        .key(&key)
        .json(body.clone())
        .send()
        .await;
    let required = res.header("payment-required").unwrap().to_owned();
    let (name, header) = pay(&PrivateKeySigner::random(), &required, 2);
    let engine = base64::engine::general_purpose::STANDARD;
    let mut payload = b64json(&header);
    payload["extensions"] = b64json(&required)["extensions"].clone();
    assert!(payload["extensions"]["bazaar"].is_object());
    let echoed = engine.encode(payload.to_string());
    // Both headers fit well within what API Gateway and CloudFront take (a request's headers:
    // 10 KiB in all).
    assert!(
        required.len() < 6_144,
        "PAYMENT-REQUIRED is {} bytes",
        required.len()
    );
    assert!(
        echoed.len() < 6_144,
        "the echoing PAYMENT-SIGNATURE is {} bytes",
        echoed.len()
    );
    let paid = env
        .req("POST", &path)
        .key(&key)
        .header(name, &echoed)
        .json(body)
        .send()
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
    let id = paid.json()["id"].as_u64().unwrap();
    // Delivered (no longer on its first deployment), so renewable.
    env.pass_after(1).await;
    let renewal = env
        .req("POST", &format!("/api/cloud/servers/{id}/renewals"))
        .key(&key)
        .json(json!({"periods": 1}))
        .send()
        .await;
    assert_eq!(renewal.status, 402, "{}", renewal.body);
    let required = b64json(renewal.header("payment-required").unwrap());
    let bazaar = &required["extensions"]["bazaar"];
    assert_eq!(bazaar["routeTemplate"], "/api/cloud/servers/:id/renewals");
    assert_eq!(bazaar["info"]["input"]["body"], json!({"periods": 1}));
    assert_eq!(
        bazaar["info"]["input"]["pathParams"],
        json!({"id": id.to_string()})
    );
}
