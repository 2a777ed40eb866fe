//! Approvals (issue 35): a key's paid request its policy refuses is answered 403
//! `policy-violation` with an approval; its owner grants it with one signed EIP-4361 message
//! (or declines it); the same request, repeated with the same key, then passes the policy once.
//! Every refusal case: a second use, another request, another key, a lapsed grant, a declined
//! one, a replayed signature, another owner's approval, a message that names another approval
//! or is signed by another wallet.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};

use e2e::receiver::Receiver;

use crate::harness::{PROJECT, TestEnv, TestResponse, pay};
use crate::mcp::payment_payload;

const PLAN: &str = "B1-1-1gb-20s-shared";
/// One period of [`PLAN`], USD.
const PRICE: f64 = 18.46024;

fn path() -> String {
    format!("/api/cloud/servers/{PROJECT}")
}

fn body(hostname: &str) -> Value {
    json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": hostname})
}

/// An owner (its wallet and session) and a key of theirs with `policy`: (key id, key).
struct Owner {
    wallet: PrivateKeySigner,
    session: String,
}

impl Owner {
    async fn new(env: &TestEnv) -> Owner {
        let wallet = PrivateKeySigner::random();
        let session = env.sign_in(&wallet).await;
        Owner { wallet, session }
    }

    async fn key(&self, env: &TestEnv, name: &str, policy: Value) -> (String, String) {
        self.issue(env, json!({"name": name, "policy": policy}))
            .await
    }

    async fn issue(&self, env: &TestEnv, body: Value) -> (String, String) {
        env.generate_key(&self.session, body).await
    }

    async fn grant(&self, env: &TestEnv, id: &str, body: Value) -> TestResponse {
        env.req("POST", &format!("/api/approvals/{id}/grant"))
            .bearer(&self.session)
            .json(body)
            .send()
            .await
    }

    /// Grants approval `id` with its own message: the approval, granted.
    async fn approve(&self, env: &TestEnv, id: &str) -> Value {
        let body = env
            .grant_body(&self.wallet, &[format!("urn:approval:{id}")])
            .await;
        let res = self.grant(env, id, body).await;
        assert_eq!(res.status, 200, "{}", res.body);
        let view = res.json();
        assert_eq!(view["state"], "granted", "{view}");
        view
    }
}

/// An owner, a key of theirs named `name` with a daily limit below the price, and its request
/// for host `a`, refused and then granted: (owner, key, approval id).
async fn granted(env: &TestEnv, name: &str) -> (Owner, String, String) {
    let owner = Owner::new(env).await;
    let (_, key) = owner.key(env, name, json!({"dailySpendLimit": 1})).await;
    let offer = refused_with_approval(&ask(env, &key, "a").await, "dailySpendLimit", "pending");
    let id = offer["approvalId"].as_str().unwrap().to_owned();
    owner.approve(env, &id).await;
    (owner, key, id)
}

async fn ask(env: &TestEnv, key: &str, hostname: &str) -> TestResponse {
    env.req("POST", &path())
        .key(key)
        .json(body(hostname))
        .send()
        .await
}

/// A 403 `policy-violation` of `limit` carrying an approval in `state`: the approval.
fn refused_with_approval(res: &TestResponse, limit: &str, state: &str) -> Value {
    assert!(res.header("payment-required").is_none(), "{}", res.body);
    let doc = res.problem(403);
    assert_eq!(doc["type"], "/problems/policy-violation", "{doc}");
    assert_eq!(doc["limit"], limit, "{doc}");
    let approval = doc["approval"].clone();
    assert_eq!(approval["state"], state, "{doc}");
    let id = approval["approvalId"].as_str().unwrap();
    assert!(id.starts_with("apr_") && id.len() == 36, "{doc}");
    // The console on the API's own origin (the harness sends no Host: `https://localhost`).
    assert_eq!(
        approval["approvalUrl"],
        format!("https://localhost/#approvals/{id}"),
        "{doc}"
    );
    approval
}

/// Pays the 402 `res` carries from a new payer and sends the request again with it.
async fn pay_and_send(
    env: &TestEnv,
    key: &str,
    res: &TestResponse,
    hostname: &str,
) -> TestResponse {
    assert_eq!(res.status, 402, "{}", res.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        res.header("payment-required").unwrap(),
        2,
    );
    env.req("POST", &path())
        .key(key)
        .header(payment.0, &payment.1)
        .json(body(hostname))
        .send()
        .await
}

fn creates(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| r.starts_with("POST /projects/"))
        .count()
}

async fn approval(env: &TestEnv, credential: (&str, &str), id: &str) -> TestResponse {
    let req = env.req("GET", &format!("/api/approvals/{id}"));
    match credential {
        ("key", key) => req.key(key),
        (_, session) => req.bearer(session),
    }
    .send()
    .await
}

#[tokio::test]
async fn an_agent_over_its_daily_limit_gets_its_server_once_its_owner_signs() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (key_id, key) = owner
        .key(&env, "agent-a", json!({"dailySpendLimit": 1}))
        .await;
    // The owner's phone: a webhook endpoint of theirs.
    let scopes = json!({"name": "hooks", "scopes": ["webhooks"]});
    let (_, hooks) = owner.issue(&env, scopes).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&hooks, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());

    // Refused before any 402, with an approval; the same request again: the same approval.
    let offer = refused_with_approval(&ask(&env, &key, "a").await, "dailySpendLimit", "pending");
    let id = offer["approvalId"].as_str().unwrap().to_owned();
    let request = &offer["request"];
    assert_eq!(
        (&request["what"], &request["plan"], &request["region"]),
        (&json!("provision"), &json!(PLAN), &json!("LT-Siauliai")),
        "{offer}"
    );
    assert_eq!(request["route"], format!("POST {}", path()), "{offer}");
    assert_eq!(
        (&request["periods"], &request["key"]),
        (&json!(1), &json!(key_id))
    );
    assert_eq!(request["keyName"], "agent-a", "{offer}");
    assert!(
        (request["price"].as_f64().unwrap() - PRICE).abs() < 1e-9,
        "{offer}"
    );
    let again = refused_with_approval(&ask(&env, &key, "a").await, "dailySpendLimit", "pending");
    assert_eq!(again["approvalId"], id.as_str());

    // The agent and the owner see it; the events feed says it was asked.
    let view = approval(&env, ("key", &key), &id).await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    assert_eq!(view["state"], "pending");
    assert_eq!(view["reason"]["limit"], "dailySpendLimit");
    assert_eq!(view["resource"], format!("urn:approval:{id}"));
    let listed = env
        .req("GET", "/api/approvals")
        .bearer(&owner.session)
        .send()
        .await
        .json();
    assert_eq!(listed["items"][0]["id"], id.as_str(), "{listed}");

    // The owner signs; the agent's repeat passes the policy, pays and gets its server.
    let granted = owner.approve(&env, &id).await;
    assert!(granted["decidedAt"].is_string(), "{granted}");
    let offered = ask(&env, &key, "a").await;
    let created = pay_and_send(&env, &key, &offered, "a").await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(creates(&env), 1);
    let used = approval(&env, ("session", &owner.session), &id)
        .await
        .json();
    assert_eq!(used["state"], "used", "{used}");
    assert!(
        used["usedBy"].as_str().unwrap().starts_with("ord_"),
        "{used}"
    );

    // Once: the same request again is refused as before, with a new approval.
    let after = refused_with_approval(&ask(&env, &key, "a").await, "dailySpendLimit", "pending");
    assert_ne!(after["approvalId"], id.as_str());
    assert_eq!(creates(&env), 1);

    // Its spend counted like any other.
    let keys = env
        .req("GET", "/api/keys")
        .bearer(&owner.session)
        .send()
        .await
        .json();
    let usage = &keys["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .unwrap()["usage"];
    assert!(
        (usage["spentToday"].as_f64().unwrap() - PRICE).abs() < 1e-9,
        "{usage}"
    );

    // The feed: requested, then granted.
    env.feed().await;
    let events = env
        .req("GET", "/api/events")
        .query(&format!("subject={id}"))
        .bearer(&owner.session)
        .send()
        .await
        .json();
    let types: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["approval.requested", "approval.granted"],
        "{events}"
    );
    assert_eq!(
        events["items"][0]["data"]["approvalUrl"],
        offer["approvalUrl"]
    );
    // And at the owner's endpoint, signed, in order: the approval that was used, and the one
    // asked after it.
    let got: Vec<(String, String)> = receiver
        .got()
        .iter()
        .filter(|r| r.accepted && r.verified == [true])
        .map(|r| {
            (
                r.event["subject"]["id"].to_string(),
                r.event["type"].to_string(),
            )
        })
        .collect();
    let of = |id: &str| -> Vec<String> {
        got.iter()
            .filter(|(subject, _)| subject.trim_matches('"') == id)
            .map(|(_, kind)| kind.trim_matches('"').to_owned())
            .collect()
    };
    assert_eq!(
        of(&id),
        ["approval.requested", "approval.granted"],
        "{got:?}"
    );
    assert_eq!(
        of(after["approvalId"].as_str().unwrap()),
        ["approval.requested"],
        "{got:?}"
    );
}

#[tokio::test]
async fn a_grant_lets_one_request_of_one_key_through_and_widens_nothing_else() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let policy = json!({"allowedPlans": ["e5-1620v2"]});
    let (_, key) = owner.key(&env, "narrow", policy.clone()).await;
    let (_, other_key) = owner.key(&env, "other", policy).await;
    let first = refused_with_approval(&ask(&env, &key, "a").await, "allowedPlans", "pending");
    let id = first["approvalId"].as_str().unwrap().to_owned();
    owner.approve(&env, &id).await;

    // Another request (another hostname) of the same key, and the same request of another key:
    // refused, each with an approval of its own.
    let other_request =
        refused_with_approval(&ask(&env, &key, "b").await, "allowedPlans", "pending");
    assert_ne!(other_request["approvalId"], id.as_str());
    let other = refused_with_approval(&ask(&env, &other_key, "a").await, "allowedPlans", "pending");
    assert_ne!(other["approvalId"], id.as_str());
    // Another key of the same owner does not see it; neither does another owner.
    assert_eq!(approval(&env, ("key", &other_key), &id).await.status, 404);
    let stranger = Owner::new(&env).await;
    let res = approval(&env, ("session", &stranger.session), &id).await;
    assert_eq!(res.problem(404)["type"], "/problems/not-found");
    let declined = env
        .req("POST", &format!("/api/approvals/{id}/decline"))
        .bearer(&stranger.session)
        .send()
        .await;
    declined.problem(404);
    // A key cannot grant, even its own approval.
    let body = env
        .grant_body(&owner.wallet, &[format!("urn:approval:{id}")])
        .await;
    let by_key = env
        .req("POST", &format!("/api/approvals/{id}/grant"))
        .key(&key)
        .json(body)
        .send()
        .await;
    by_key.problem(403);

    // The approved request goes through once; a second payment for it is refused.
    let offered = ask(&env, &key, "a").await;
    let created = pay_and_send(&env, &key, &offered, "a").await;
    assert_eq!(created.status, 201, "{}", created.body);
    refused_with_approval(&ask(&env, &key, "a").await, "allowedPlans", "pending");
    assert_eq!(creates(&env), 1);
}

#[tokio::test]
async fn declined_lapsed_and_misdirected_grants_let_nothing_through() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (_, key) = owner
        .key(&env, "bounded", json!({"maxPricePerServer": 1}))
        .await;
    let a = refused_with_approval(&ask(&env, &key, "a").await, "maxPricePerServer", "pending");
    let b = refused_with_approval(&ask(&env, &key, "b").await, "maxPricePerServer", "pending");
    let (a, b) = (
        a["approvalId"].as_str().unwrap().to_owned(),
        b["approvalId"].as_str().unwrap().to_owned(),
    );

    // A message naming another approval, or signed by another wallet: refused, and the nonce is
    // spent either way.
    let naming_b = env
        .grant_body(&owner.wallet, &[format!("urn:approval:{b}")])
        .await;
    owner.grant(&env, &a, naming_b).await.problem(403);
    let stranger = PrivateKeySigner::random();
    let theirs = env
        .grant_body(&stranger, &[format!("urn:approval:{a}")])
        .await;
    owner.grant(&env, &a, theirs).await.problem(403);
    // A replayed signature: good once.
    let naming_both = env
        .grant_body(
            &owner.wallet,
            &[format!("urn:approval:{a}"), format!("urn:approval:{b}")],
        )
        .await;
    let res = owner.grant(&env, &a, naming_both.clone()).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let replayed = owner.grant(&env, &b, naming_both).await;
    assert_eq!(replayed.problem(401)["type"], "/problems/sign-in-failed");
    // Granted once: not again.
    let again = env
        .grant_body(&owner.wallet, &[format!("urn:approval:{a}")])
        .await;
    owner.grant(&env, &a, again).await.problem(409);

    // Declined: the same request gets the declined approval back; it cannot be granted after.
    let res = env
        .req("POST", &format!("/api/approvals/{b}/decline"))
        .bearer(&owner.session)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json()["state"], "declined");
    let declined =
        refused_with_approval(&ask(&env, &key, "b").await, "maxPricePerServer", "declined");
    assert_eq!(declined["approvalId"], b.as_str());
    let late = env
        .grant_body(&owner.wallet, &[format!("urn:approval:{b}")])
        .await;
    owner.grant(&env, &b, late).await.problem(409);

    // Granted and not used in time: lapsed, and the request meets the policy again.
    env.clock.advance(Duration::from_secs(31 * 60));
    let lapsed = approval(&env, ("key", &key), &a).await.json();
    assert_eq!(lapsed["state"], "expired", "{lapsed}");
    let fresh = refused_with_approval(&ask(&env, &key, "a").await, "maxPricePerServer", "pending");
    assert_ne!(fresh["approvalId"], a.as_str());
    assert_eq!(creates(&env), 0);
    env.feed().await;
    let events = env
        .req("GET", "/api/events")
        .query(&format!("subject={b}"))
        .bearer(&owner.session)
        .send()
        .await
        .json();
    assert_eq!(events["items"][1]["type"], "approval.declined", "{events}");
}

#[tokio::test]
async fn a_key_has_at_most_five_approvals_pending() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (_, key) = owner
        .key(&env, "chatty", json!({"dailySpendLimit": 1}))
        .await;
    for host in ["h1", "h2", "h3", "h4", "h5"] {
        refused_with_approval(&ask(&env, &key, host).await, "dailySpendLimit", "pending");
    }
    let res = ask(&env, &key, "h6").await;
    let doc = res.problem(403);
    assert_eq!(doc["limit"], "dailySpendLimit", "{doc}");
    assert!(doc.get("approval").is_none(), "{doc}");
    assert!(
        doc["detail"]
            .as_str()
            .unwrap()
            .contains("5 approvals pending"),
        "{doc}"
    );
    // A pending one repeated is still answered with itself.
    refused_with_approval(&ask(&env, &key, "h1").await, "dailySpendLimit", "pending");
}

#[tokio::test]
async fn the_agent_long_polls_its_approval_until_the_owner_decides() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (_, key) = owner
        .key(&env, "waiting", json!({"dailySpendLimit": 1}))
        .await;
    let offer = refused_with_approval(&ask(&env, &key, "a").await, "dailySpendLimit", "pending");
    let id = offer["approvalId"].as_str().unwrap().to_owned();
    let waited = {
        let (env, key, id) = (&env, key.clone(), id.clone());
        async move {
            env.req("GET", &format!("/api/approvals/{id}"))
                .query("timeout=10")
                .key(&key)
                .send()
                .await
        }
    };
    let grant = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        owner.approve(&env, &id).await
    };
    let (waited, _) = tokio::join!(waited, grant);
    assert_eq!(waited.status, 200, "{}", waited.body);
    assert_eq!(waited.json()["state"], "granted");
    // Nothing pending: answered at once.
    let res = env
        .req("GET", &format!("/api/approvals/{id}"))
        .query("timeout=20")
        .key(&key)
        .send()
        .await;
    assert_eq!(res.json()["state"], "granted");
    env.req("GET", &format!("/api/approvals/{id}"))
        .query("timeout=soon")
        .key(&key)
        .send()
        .await
        .invalid("timeout");
}

/// One JSON-RPC message to `/mcp` with `key`, as a client of protocol 2025-11-25 (the one with
/// URL-mode elicitation; `mcp.rs` speaks 2025-06-18): the answer.
async fn mcp(env: &TestEnv, key: &str, method: &str, params: Value) -> Value {
    let res = env
        .req("POST", "/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .key(key)
        .json(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()
}

async fn initialize(env: &TestEnv, key: &str, capabilities: Value) {
    let params = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": capabilities,
        "clientInfo": {"name": "approvals-test", "version": "1"},
    });
    let answer = mcp(env, key, "initialize", params).await;
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
}

#[tokio::test]
async fn over_mcp_a_refusal_is_a_url_elicitation_or_carries_the_approval() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (_, key) = owner
        .key(&env, "mcp-agent", json!({"dailySpendLimit": 1}))
        .await;
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                      "hostname": "mcp-a"});
    let provision = json!({"name": "provision_server", "arguments": args});

    // A client without URL-mode elicitation: a tool error whose structured content carries the
    // approval.
    initialize(&env, &key, json!({"elicitation": {"form": {}}})).await;
    let answer = mcp(&env, &key, "tools/call", provision.clone()).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    let doc = &result["structuredContent"];
    assert_eq!(doc["type"], "/problems/policy-violation", "{doc}");
    let id = doc["approval"]["approvalId"].as_str().unwrap().to_owned();
    assert_eq!(doc["approval"]["state"], "pending", "{doc}");

    // A client that declared it: MCP's URLElicitationRequiredError naming the same approval.
    initialize(&env, &key, json!({"elicitation": {"form": {}, "url": {}}})).await;
    let answer = mcp(&env, &key, "tools/call", provision.clone()).await;
    let error = &answer["error"];
    assert_eq!(error["code"], -32042, "{answer}");
    let elicitation = &error["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], "url", "{answer}");
    assert_eq!(elicitation["elicitationId"], id.as_str(), "{answer}");
    assert_eq!(
        elicitation["url"],
        format!("https://localhost/#approvals/{id}")
    );
    assert!(
        elicitation["message"].as_str().unwrap().contains(PLAN),
        "{answer}"
    );

    // The agent waits for its owner over MCP too: pending for now.
    let wait = json!({"name": "wait_for_approval",
                      "arguments": {"approvalId": id, "timeout": 0}});
    let answer = mcp(&env, &key, "tools/call", wait.clone()).await;
    assert_eq!(
        answer["result"]["structuredContent"]["state"], "pending",
        "{answer}"
    );

    // Approved: the same call goes on to the payment, then the server.
    owner.approve(&env, &id).await;
    let answer = mcp(&env, &key, "tools/call", wait).await;
    assert_eq!(
        answer["result"]["structuredContent"]["state"], "granted",
        "{answer}"
    );
    let answer = mcp(&env, &key, "tools/call", provision.clone()).await;
    let required = answer["result"]["structuredContent"].clone();
    assert_eq!(required["x402Version"], 2, "{answer}");
    let payment = payment_payload(&PrivateKeySigner::random(), &required);
    let mut paid = provision.clone();
    paid["_meta"] = json!({"x402/payment": payment});
    let answer = mcp(&env, &key, "tools/call", paid).await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer["result"]["structuredContent"]["server"]["id"].is_u64(),
        "{answer}"
    );
    assert_eq!(creates(&env), 1);
    // Used: the next identical call is refused again, with a new approval.
    let answer = mcp(&env, &key, "tools/call", provision).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    assert_ne!(
        answer["error"]["data"]["elicitations"][0]["elicitationId"],
        id.as_str()
    );
}

#[tokio::test]
async fn two_payments_for_one_granted_request_at_once_buy_one_server() {
    let env = TestEnv::new().await;
    let (_, key, id) = granted(&env, "racing").await;
    let offered = ask(&env, &key, "a").await;
    // Two payers pay the same approved request at once: one claim uses the grant, the other's
    // is cancelled with it — nothing recorded, settled or charged for it.
    let (first, second) = tokio::join!(
        pay_and_send(&env, &key, &offered, "a"),
        pay_and_send(&env, &key, &offered, "a"),
    );
    let mut statuses = [first.status, second.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 403], "{} / {}", first.body, second.body);
    let loser = if first.status == 403 { &first } else { &second };
    let doc = loser.problem(403);
    assert_eq!(doc["limit"], "dailySpendLimit", "{doc}");
    assert!(doc.get("payment").is_none(), "{doc}");
    assert_eq!((creates(&env), env.facilitator.settles()), (1, 1));
    let used = approval(&env, ("key", &key), &id).await.json();
    assert_eq!(used["state"], "used", "{used}");
}

#[tokio::test]
async fn a_grant_covers_no_more_than_the_price_the_owner_saw() {
    let env = TestEnv::new().await;
    let (_, key, id) = granted(&env, "pricey").await;
    // The price rose after the owner saw it: here, the approval covers one atomic unit less.
    let below = (PRICE * 1e6).round() as u64 - 1;
    env.store
        .client()
        .update_item()
        .table_name(env.store.table())
        .key("pk", AttributeValue::S(format!("APPROVAL#{id}")))
        .key("sk", AttributeValue::S("APPROVAL".into()))
        .update_expression("SET amount = :amount")
        .expression_attribute_values(":amount", AttributeValue::S(below.to_string()))
        .send()
        .await
        .unwrap();
    let refused = refused_with_approval(&ask(&env, &key, "a").await, "dailySpendLimit", "pending");
    assert_ne!(refused["approvalId"], id.as_str());
    let granted = approval(&env, ("key", &key), &id).await.json();
    assert_eq!(granted["state"], "granted", "{granted}");
}

#[tokio::test]
async fn a_renewal_over_the_policy_is_approved_the_same_way() {
    let env = TestEnv::new().await;
    let owner = Owner::new(&env).await;
    let (key_id, key) = owner.key(&env, "renewer", json!({})).await;
    let (server, _, _) = crate::paid_time::paid_server(&env, &key, "renewed").await;
    // The owner narrows the key: two periods are now over its daily limit.
    let res = env
        .req("PATCH", &format!("/api/keys/{key_id}"))
        .bearer(&owner.session)
        .json(json!({"policy": {"dailySpendLimit": 20}}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    let renew = || {
        env.req("POST", &format!("/api/cloud/servers/{server}/renewals"))
            .key(&key)
            .json(json!({"periods": 2}))
            .send()
    };
    let offer = refused_with_approval(&renew().await, "dailySpendLimit", "pending");
    let request = &offer["request"];
    assert_eq!(
        (&request["what"], &request["serverId"], &request["periods"]),
        (&json!("renewal"), &json!(server), &json!(2)),
        "{offer}"
    );
    assert_eq!(
        request["route"],
        format!("POST /api/cloud/servers/{server}/renewals")
    );
    owner
        .approve(&env, offer["approvalId"].as_str().unwrap())
        .await;
    let offered = renew().await;
    assert_eq!(offered.status, 402, "{}", offered.body);
    let payment = pay(
        &PrivateKeySigner::random(),
        offered.header("payment-required").unwrap(),
        2,
    );
    let renewed = env
        .req("POST", &format!("/api/cloud/servers/{server}/renewals"))
        .key(&key)
        .header(payment.0, &payment.1)
        .json(json!({"periods": 2}))
        .send()
        .await;
    assert_eq!(renewed.status, 201, "{}", renewed.body);
    assert_eq!(renewed.json()["periods"], 2);
    refused_with_approval(&renew().await, "dailySpendLimit", "pending");
}
