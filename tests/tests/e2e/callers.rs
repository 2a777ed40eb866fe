//! The route table's caller column decides (issue 45, point 1): for every row of
//! `domain::api::OPERATIONS`, the router lets in exactly the callers its `who` names and, for a
//! key, only one holding its `scope` — before the handler runs, so no handler decides it again.
//! Each row is called with no credentials, a session, a key with every scope, a malformed key
//! and a key with every scope but the row's; a refusal at the door is told apart from a handler's answer by its
//! problem document. Every answer's status is one its row declares.

use alloy_signer_local::PrivateKeySigner;
use domain::api::{OPERATIONS, Operation, Who};
use domain::policy::Scope;
use serde_json::json;

use crate::harness::{TestEnv, TestResponse};

/// The path of `op` with each `{name}` segment filled by a well-formed value no record has.
fn path(op: &Operation) -> String {
    op.path
        .split('/')
        .map(|segment| match segment {
            "{file}" => "app.js".to_owned(),
            s if s.starts_with('{') => match op.id_prefix {
                Some(prefix) => format!("{prefix}{}", "0".repeat(32)),
                None => "1".to_owned(),
            },
            s => s.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// What the door answered, if the door refused: `no credential` (401), `wrong credential`
/// (403: a session on a key's row or a key on a session's), `scope <name>` (403
/// `insufficient-scope`); `None` when the request went past it to the handler.
fn refusal(res: &TestResponse) -> Option<String> {
    let detail = |res: &TestResponse| {
        serde_json::from_str::<serde_json::Value>(&res.body).unwrap_or_default()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    match res.status {
        401 => Some("no credential".into()),
        403 => {
            let doc: serde_json::Value = serde_json::from_str(&res.body).unwrap_or_default();
            if doc["type"] == "/problems/insufficient-scope" {
                let scope = detail(res).split('`').nth(1).unwrap_or_default().to_owned();
                Some(format!("scope {scope}"))
            } else if detail(res).starts_with("this route needs") {
                Some("wrong credential".into())
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A key of the signed-in owner with `scopes`.
async fn key_with(env: &TestEnv, session: &str, scopes: &[Scope]) -> String {
    let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    let body = json!({"name": "callers", "scopes": names});
    env.generate_key(session, body).await.1
}

/// Calls `op` with `credential` (`None`, or the header and its value), and checks that the
/// answer's status is one the row declares (`Operation::statuses`: what the document shows).
async fn call(env: &TestEnv, op: &Operation, credential: Option<(&str, &str)>) -> TestResponse {
    let mut req = env.req(op.method.as_str(), &path(op));
    if let Some((name, value)) = credential {
        req = req.header(name, value);
    }
    let res = req.send().await;
    let status = res.status.to_string();
    assert!(
        op.statuses().contains(&status.as_str()),
        "{} {} ({}) answered {status}, which its row does not declare: {}",
        op.method,
        op.path,
        op.id,
        res.body
    );
    res
}

#[tokio::test]
async fn every_row_admits_exactly_the_callers_its_column_names() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let bearer = format!("Bearer {session}");
    let every = key_with(&env, &session, &Scope::ALL).await;
    let mut without = Vec::new();
    for scope in Scope::ALL {
        let others: Vec<Scope> = Scope::ALL.into_iter().filter(|s| *s != scope).collect();
        without.push((scope, key_with(&env, &session, &others).await));
    }
    // Signing out ends the session the other rows use: it goes last.
    let mut rows: Vec<&Operation> = OPERATIONS.to_vec();
    rows.sort_by_key(|op| op.id == "logout");
    let mut checked = 0;
    for op in rows {
        let name = format!("{} {} ({})", op.method, op.path, op.id);
        let anonymous = refusal(&call(&env, op, None).await);
        let by_key = refusal(&call(&env, op, Some(("x-api-key", &every))).await);
        let by_session = refusal(&call(&env, op, Some(("authorization", &bearer))).await);
        let by_bad_key = refusal(&call(&env, op, Some(("x-api-key", "svc_bad"))).await);
        let (want_anonymous, want_key, want_session) = match op.who {
            Who::Anyone | Who::AnyoneChecked => (None, None, None),
            Who::KeyOrSession => (Some("no credential"), None, None),
            Who::Session => (Some("no credential"), Some("wrong credential"), None),
            Who::Key => (Some("no credential"), None, Some("wrong credential")),
            Who::KeyAlone => (Some("no credential"), None, Some("no credential")),
        };
        assert_eq!(
            anonymous.as_deref(),
            want_anonymous,
            "{name}: no credential"
        );
        assert_eq!(
            by_key.as_deref(),
            want_key,
            "{name}: a key with every scope"
        );
        assert_eq!(by_session.as_deref(), want_session, "{name}: a session");
        // A credential presented is a credential checked: everywhere but the rows that read
        // none (issue 63, point 9).
        let want_bad = (op.who != Who::Anyone).then_some("no credential");
        assert_eq!(by_bad_key.as_deref(), want_bad, "{name}: a malformed key");
        if let Some(scope) = op.scope {
            let key = &without.iter().find(|(s, _)| *s == scope).unwrap().1;
            let lacking = refusal(&call(&env, op, Some(("x-api-key", key))).await);
            let want = format!("scope {}", scope.as_str());
            assert_eq!(
                lacking.as_deref(),
                Some(want.as_str()),
                "{name}: a key without it"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, OPERATIONS.len());
}

/// Every row a key may call names the scope it needs, but the two whose scope is the domain's
/// (MCP: each tool's own) and the session-only rows (a session has every scope).
#[test]
fn every_row_a_key_may_call_names_its_scope() {
    let unscoped: Vec<&str> = OPERATIONS
        .iter()
        .filter(|op| matches!(op.who, Who::KeyOrSession | Who::Key) && op.scope.is_none())
        .map(|op| op.id)
        .collect();
    assert!(unscoped.is_empty(), "rows without a scope: {unscoped:?}");
}
