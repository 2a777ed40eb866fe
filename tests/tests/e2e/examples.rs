//! Example events for local invokes (the agents' front door issue, point 4): one API Gateway
//! payload 2.0 event per route of the template, in `events/<function>/<name>.json`, for
//! `cargo lambda invoke <function> --data-file events/<function>/<name>.json`. They are made by
//! the harness's own event builder, so they cannot drift: a test compares every file with what
//! it would write now (`EXAMPLES_WRITE=1` rewrites them), and another invokes each through its
//! handler.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{ALICE, PROJECT, TestEnv};

/// The API key the examples carry; replace it with yours (`make key`).
const EXAMPLE_KEY: &str = "svc_000000000000000000000000000000000000000000000000";
/// The session token the session-only examples carry (`make sign-in` prints yours).
const EXAMPLE_SESSION: &str = "example-session-token";
const SANDBOX: &str = "sbx_00000000000000000000000000000000";

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../events")
}

/// The file name of a route's example: `<method>-<path words>.json`, the words of a document
/// at the root (a path outside `/api/` with a dot: `/openapi.json`, `/llms.txt`,
/// `/.well-known/x402`) after `root-`, apart from the API's own (`/api/openapi.json`).
fn file_name(method: &str, path: &str) -> String {
    let root = !path.starts_with("/api/") && path.contains('.');
    let words: Vec<&str> = path
        .trim_start_matches("/api/")
        .trim_start_matches('/')
        .split('/')
        .map(|w| w.trim_matches(|c| c == '{' || c == '}'))
        .collect();
    let name = match words.join("-") {
        // The console's page, `/`.
        empty if empty.is_empty() => "page".to_owned(),
        name if root => format!("root-{name}"),
        name => name,
    };
    format!("{}-{name}.json", method.to_ascii_lowercase())
}

/// A concrete request of the route `method path`: (path, query, body, session-only).
fn sample(method: &str, path: &str) -> (String, &'static str, Option<Value>, bool) {
    let server = 912_001;
    match (method, path) {
        ("GET", "/api/auth/nonce") | ("GET", "/api/cloud/status") => (path.into(), "", None, false),
        ("POST", "/api/auth/verify") => (
            path.into(),
            "",
            Some(json!({"message": "127.0.0.1:9000 wants you to sign in …", "signature": "0x00"})),
            false,
        ),
        ("POST", "/api/auth/logout") | ("GET", "/api/auth/me") => (path.into(), "", None, true),
        ("POST", "/api/keys/generate") => (path.into(), "", Some(json!({"name": "agent-1"})), true),
        ("GET", "/api/keys") => (path.into(), "limit=20", None, true),
        ("PATCH", "/api/keys/{id}") => (
            "/api/keys/key_00000000000000000000000000000000".into(),
            "",
            Some(json!({"policy": {"maxPricePerServer": 25, "allowedRegions": ["LT-Siauliai"]}})),
            true,
        ),
        ("DELETE", "/api/keys/{id}") => (
            "/api/keys/key_00000000000000000000000000000000".into(),
            "",
            None,
            true,
        ),
        ("POST", "/api/agents") => (path.into(), "", Some(json!({"name": "builder"})), false),
        ("GET", "/api/agents/{id}") => (
            "/api/agents/agt_00000000000000000000000000000000".into(),
            "",
            None,
            false,
        ),
        ("GET", "/api/cloud/images") => (path.into(), "plan=cloud_vps_free", None, false),
        ("GET", "/api/cloud/quote") => (
            path.into(),
            "plan=B1-1-1gb-20s-shared&region=LT-Siauliai",
            None,
            false,
        ),
        ("GET", "/api/cloud/projects/{teamId}") => {
            ("/api/cloud/projects/210345".into(), "", None, false)
        }
        ("GET", "/api/cloud/servers/{id}") => {
            (format!("/api/cloud/servers/{PROJECT}"), "", None, false)
        }
        ("POST", "/api/cloud/servers/{id}") => (
            format!("/api/cloud/servers/{PROJECT}"),
            "",
            Some(json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "hostname": "box-1"})),
            false,
        ),
        ("DELETE", "/api/cloud/servers/{id}") => {
            (format!("/api/cloud/servers/{server}"), "", None, false)
        }
        ("POST", "/api/cloud/servers/{id}/actions") => (
            format!("/api/cloud/servers/{server}/actions"),
            "",
            Some(json!({"type": "power-off"})),
            false,
        ),
        ("POST", "/api/cloud/servers/{id}/renewals") => (
            format!("/api/cloud/servers/{server}/renewals"),
            "",
            Some(json!({"periods": 1})),
            false,
        ),
        ("GET", "/api/sandboxes/{id}") => (
            format!("/api/sandboxes/{SANDBOX}"),
            "waitFor=ready,failed&timeout=20",
            None,
            false,
        ),
        ("POST", "/api/sandboxes") => (
            path.into(),
            "",
            Some(json!({"name": "notes", "metadata": {"team": "ci"}})),
            false,
        ),
        ("POST", "/api/webhooks") => (
            path.into(),
            "",
            Some(json!({"url": "https://agent.example.com/hooks", "types": ["lease.expiring"]})),
            false,
        ),
        ("POST", "/api/ssh-keys") => (
            path.into(),
            "",
            Some(json!({"name": "laptop", "publicKey": "ssh-ed25519 \
                AAAAC3NzaC1lZDI1NTE5AAAAIEUwtq0dnKZIwio9dsNtAZXA6XuOXMlBmgWGp1VGJOQf agent@example"})),
            false,
        ),
        (_, "/api/ssh-keys/{id}") => (
            "/api/ssh-keys/ssh_00000000000000000000000000000000".into(),
            "",
            None,
            false,
        ),
        (_, p) if p.starts_with("/api/webhooks/{id}") => (
            p.replace("{id}", "whk_00000000000000000000000000000000"),
            "",
            None,
            false,
        ),
        ("GET" | "HEAD", "/console/{file}") => ("/console/app.js".into(), "", None, false),
        ("POST", "/mcp") => (
            path.into(),
            "",
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            false,
        ),
        _ => (path.into(), "", None, false),
    }
}

/// (function, file name, event) of every route of the template.
fn examples(env: &TestEnv) -> Vec<(String, String, Value)> {
    crate::template::template_routes()
        .into_iter()
        .map(|(method, path, function)| {
            let (concrete, query, body, session) = sample(&method, &path);
            let mut request = env.req(&method, &concrete).query(query);
            request = if method == "OPTIONS" {
                // A browser's CORS preflight from the web app's origin.
                request
                    .header("origin", crate::harness::WEB_ORIGIN)
                    .header("access-control-request-method", "POST")
            } else if session {
                request.bearer(EXAMPLE_SESSION)
            } else {
                request.key(EXAMPLE_KEY)
            };
            if path == "/mcp" {
                // What an MCP client sends (Streamable HTTP).
                request = request
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2025-06-18");
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let (routed, mut event) = request.event();
            assert_eq!(routed, function, "{method} {path}");
            event["requestContext"]["requestId"] = json!("example-request");
            (function, file_name(&method, &path), event)
        })
        .collect()
}

#[tokio::test]
async fn there_is_a_current_example_event_for_every_route() {
    let env = TestEnv::new().await;
    let write = std::env::var("EXAMPLES_WRITE").is_ok();
    let mut expected = std::collections::BTreeSet::new();
    for (function, name, event) in examples(&env) {
        let file = events_dir().join(&function).join(&name);
        expected.insert(file.clone());
        let text = serde_json::to_string_pretty(&event).unwrap() + "\n";
        if write {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &text).unwrap();
        }
        let found = std::fs::read_to_string(&file)
            .unwrap_or_else(|_| panic!("{} is missing: run with EXAMPLES_WRITE=1", file.display()));
        assert_eq!(
            found,
            text,
            "{} is stale: run with EXAMPLES_WRITE=1",
            file.display()
        );
    }
    // Nothing else in the folder.
    for dir in std::fs::read_dir(events_dir()).unwrap() {
        for file in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            let file = file.unwrap().path();
            assert!(
                expected.contains(&file),
                "{} names no route",
                file.display()
            );
        }
    }
}

#[tokio::test]
async fn every_example_event_answers_through_its_handler() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let mut answered = 0;
    for dir in std::fs::read_dir(events_dir()).unwrap() {
        let dir = dir.unwrap().path();
        let function = dir.file_name().unwrap().to_string_lossy().into_owned();
        for file in std::fs::read_dir(&dir).unwrap() {
            let file = file.unwrap().path();
            let mut text = std::fs::read_to_string(&file)
                .unwrap()
                .replace(EXAMPLE_KEY, &key);
            if text.contains(EXAMPLE_SESSION) {
                // A session of its own: the logout example ends the one it carries.
                let signer = alloy_signer_local::PrivateKeySigner::random();
                text = text.replace(EXAMPLE_SESSION, &env.sign_in(&signer).await);
            }
            let res = env.invoke(&function, &text).await;
            assert!(
                res.status < 500,
                "{}: {} {}",
                file.display(),
                res.status,
                res.body
            );
            // Credentials are accepted (a made-up sign-in message is refused, as it should be).
            if !file.ends_with("post-auth-verify.json") {
                assert_ne!(res.status, 401, "{}: {}", file.display(), res.body);
            }
            answered += 1;
        }
    }
    assert_eq!(answered, crate::template::template_routes().len());
}
