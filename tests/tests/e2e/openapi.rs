//! The OpenAPI document (the agents' front door issue, point 1): served to anyone, OpenAPI
//! 3.1, naming exactly the routes of the template, every reference resolving.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::harness::TestEnv;

fn refs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "$ref"
                    && let Some(r) = v.as_str()
                {
                    found.push(r.to_owned());
                }
                refs(v, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_names_exactly_the_templates_routes() {
    let env = TestEnv::new().await;
    let res = env.req("GET", "/api/openapi.json").send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    let doc = res.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            documented.insert((method.to_ascii_uppercase(), path.clone()));
            assert!(op["operationId"].is_string(), "{method} {path}");
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()));
        }
    }
    // Every route but those the table leaves out of the document: the console's pages,
    // `llms.txt` (text for agents), the OAuth endpoints (OAuth's own forms and errors).
    let documented_row = |method: &str, path: &str| {
        domain::api::OPERATIONS
            .iter()
            .find(|op| op.method == method && op.path == path)
            .is_some_and(|op| op.documented)
    };
    let template: BTreeSet<(String, String)> = crate::template::template_routes()
        .into_iter()
        .filter(|(method, path, _)| documented_row(method, path))
        .map(|(method, path, _)| (method, path))
        .collect();
    assert_eq!(documented, template);
    // Every reference resolves to a component.
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let name = r.strip_prefix("#/components/schemas/").expect(&r);
        assert!(doc["components"]["schemas"][name].is_object(), "{r}");
    }
    // The request bodies are the handlers' own types.
    let provision = &doc["components"]["schemas"]["ProvisionRequest"];
    assert_eq!(provision["required"], serde_json::json!(["plan", "region"]));
    assert_eq!(provision["additionalProperties"], false);
    // Paid routes carry the x402 headers.
    let op = &doc["paths"]["/api/cloud/servers/{id}"]["post"];
    assert!(op["responses"]["402"]["headers"]["PAYMENT-REQUIRED"].is_object());
    assert!(op["responses"]["201"]["headers"]["PAYMENT-RESPONSE"].is_object());
    let names: Vec<&str> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"PAYMENT-SIGNATURE") && names.contains(&"X-PAYMENT"));
    for scheme in ["apiKey", "bearer", "sessionCookie"] {
        assert!(
            doc["components"]["securitySchemes"][scheme].is_object(),
            "{scheme}"
        );
    }
}

/// The whole document as a reviewed snapshot (`tests/tests/e2e/snapshots/`): every change of
/// the API shows in review. `cargo insta review` (or `INSTA_UPDATE=always`) accepts a change.
#[test]
fn the_document_is_the_reviewed_snapshot() {
    insta::assert_json_snapshot!("openapi", faces::openapi::document());
}

/// Every operation of the route table reaches its function's handler: no function binds an id
/// the table does not know (the router skips such a binding, and its route would answer the
/// router's own 404 or 405). A made-up id may be refused or not found, never unrouted.
#[tokio::test]
async fn every_operation_of_the_table_is_routed_to_a_handler() {
    let env = TestEnv::new().await;
    let key = env.key(crate::harness::ALICE).await;
    for op in domain::api::OPERATIONS {
        // The preflights are answered before routing; `GET /mcp` answers 405 by design.
        if op.method == "OPTIONS" || op.ok.0 == "405" {
            continue;
        }
        let path = op
            .path
            .split('/')
            .map(|segment| match segment {
                "{file}" => "app.js",
                s if s.starts_with('{') => "912001",
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/");
        let res = env.req(op.method.as_str(), &path).key(&key).send().await;
        let unrouted = res.status == 405
            || (res.status == 404 && res.body.contains(&format!("no route {path}")));
        assert!(
            !unrouted,
            "{} {path} ({}): {} {}",
            op.method, op.id, res.status, res.body
        );
    }
}
