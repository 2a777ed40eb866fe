//! `POST /mcp`: the Model Context Protocol face (rmcp, Streamable HTTP, stateless, JSON) —
//! `initialize`, `tools/list` with schemas and annotations, free provisioning and waiting, the
//! x402 MCP payment round trip with a real EIP-3009 signature, replays (over MCP and HTTP: one
//! payment), errors as tool errors, and keys only.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, PROJECT, TREASURY, TestEnv, TestResponse, owner, pay};

pub(crate) const PLAN: &str = "B1-1-1gb-20s-shared";
pub(crate) const PROTOCOL: &str = "2025-06-18";

/// Posts one JSON-RPC message to `/mcp` as an MCP client does, with `key` (an OAuth access
/// token as a bearer).
pub(crate) async fn post(env: &TestEnv, key: Option<&str>, message: Value) -> TestResponse {
    let mut req = env
        .req("POST", "/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", PROTOCOL)
        .json(message);
    req = match key {
        Some(token) if token.starts_with(domain::identity::oauth::ACCESS_PREFIX) => {
            req.bearer(token)
        }
        Some(key) => req.key(key),
        None => req,
    };
    req.send().await
}

/// A request's JSON-RPC `result` (or `error`), answered 200 as JSON.
pub(crate) async fn rpc(env: &TestEnv, key: &str, method: &str, params: Value) -> Value {
    let res = post(
        env,
        Some(key),
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert!(
        res.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        res.headers
    );
    let answer = res.json();
    assert_eq!(
        (&answer["jsonrpc"], &answer["id"]),
        (&json!("2.0"), &json!(7))
    );
    answer
}

/// `tools/call` of `name` with `arguments` (and `_meta` when given): the tool result.
pub(crate) async fn call(
    env: &TestEnv,
    key: &str,
    name: &str,
    arguments: Value,
    meta: Option<Value>,
) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let answer = rpc(env, key, "tools/call", params).await;
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

/// A successful tool result's structured value; its text content is the same JSON.
pub(crate) fn ok(result: &Value) -> Value {
    assert_ne!(result["isError"], true, "{result}");
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
    result["structuredContent"].clone()
}

/// A tool error's problem document, of `status`.
fn problem(result: &Value, status: u16) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    let doc = result["structuredContent"].clone();
    assert_eq!(doc["status"], status, "{doc}");
    assert!(
        doc["type"].as_str().unwrap().starts_with("/problems/"),
        "{doc}"
    );
    assert!(
        doc["requestId"].is_string() && doc["detail"].is_string(),
        "{doc}"
    );
    doc
}

/// Signs the first offer of an MCP `PaymentRequired` as `signer`: the payment payload object.
pub(crate) fn payment_payload(signer: &PrivateKeySigner, required: &Value) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    let (_, header) = pay(signer, &engine.encode(required.to_string()), 2);
    serde_json::from_slice(&engine.decode(header).unwrap()).unwrap()
}

fn creates(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| r.starts_with("POST /projects/"))
        .count()
}

#[tokio::test]
async fn initialize_and_every_tool_with_schemas_and_annotations() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let init = rpc(
        &env,
        &key,
        "initialize",
        json!({
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"},
        }),
    )
    .await;
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], PROTOCOL, "{init}");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert_eq!(result["serverInfo"]["name"], "cloud-api");
    assert!(
        result["instructions"]
            .as_str()
            .unwrap()
            .contains("x402/payment")
    );
    // The initialized notification is accepted (202, no body).
    let note = post(
        &env,
        Some(&key),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(note.status, 202, "{}", note.body);

    let listed = rpc(&env, &key, "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "list_plans",
            "list_regions",
            "list_images",
            "list_projects",
            "get_quote",
            "provision_server",
            "list_sandboxes",
            "get_sandbox",
            "wait_for_sandbox",
            "server_action",
            "delete_server",
            "list_payments",
            "list_events",
            "renew_server",
            "resize_server",
            "add_ssh_key",
            "list_ssh_keys",
            "delete_ssh_key",
            "wait_for_approval",
        ]
    );
    for tool in &tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
        // Strict clients check error results' structuredContent too: the problem document is
        // one of the admitted shapes, and a paid tool's PaymentRequired another.
        let shapes = tool["outputSchema"]["anyOf"].as_array().unwrap();
        let requires = |field: &str| {
            shapes.iter().any(|s| {
                s["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!(field)))
            })
        };
        assert!(requires("status") && requires("detail"), "{tool}");
        let paid = ["provision_server", "renew_server", "resize_server"]
            .contains(&tool["name"].as_str().unwrap());
        assert_eq!(
            requires("x402Version") && requires("accepts"),
            paid,
            "{tool}"
        );
        assert!(tool["description"].as_str().unwrap().len() > 20, "{tool}");
        // The arguments are the row's: each query parameter with its schema, each field of the
        // body; the description is the row's where the tool is not MCP's own.
        let row = mcp::tools::Tool::parse(tool["name"].as_str().unwrap())
            .map(|t| domain::api::operation(t.operation()).unwrap())
            .unwrap();
        let input = &tool["inputSchema"]["properties"];
        for param in row.query {
            assert_eq!(input[param.name], param.schema(), "{tool}");
        }
        if let Some(body) = row.body {
            let mut schemas = Vec::new();
            body.schemas(&mut schemas);
            let (_, own) = schemas.iter().find(|(n, _)| *n == body.name()).unwrap();
            let own = serde_json::to_value(own).unwrap();
            for field in own["properties"].as_object().unwrap().keys() {
                assert!(input[field].is_object(), "{tool} lacks {field}");
            }
        }
        if let Some(about) = row.about {
            let mcp_own = ["wait_for_sandbox", "renew_server", "resize_server"];
            if !mcp_own.contains(&tool["name"].as_str().unwrap()) {
                assert_eq!(tool["description"], about, "{tool}");
            }
        }
        let hints = &tool["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(hints[hint].is_boolean(), "{tool} lacks {hint}");
        }
    }
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    let hints = |name: &str| {
        let a = &tool(name)["annotations"];
        [
            &a["readOnlyHint"],
            &a["destructiveHint"],
            &a["idempotentHint"],
            &a["openWorldHint"],
        ]
        .map(|v| v.as_bool().unwrap())
    };
    assert_eq!(hints("list_plans"), [true, false, true, true]);
    assert_eq!(hints("get_sandbox"), [true, false, true, false]);
    assert_eq!(hints("provision_server"), [false, false, false, true]);
    assert_eq!(hints("server_action"), [false, true, false, true]);
    assert_eq!(hints("delete_server"), [false, true, true, true]);
    assert_eq!(hints("renew_server"), [false, false, false, true]);
    assert_eq!(hints("resize_server"), [false, false, false, true]);
    // Adding a key reaches nothing outside the service (the provider gets it with a server).
    assert_eq!(hints("add_ssh_key"), [false, false, true, false]);
    // Provisioning takes the HTTP body's fields (derived from the same type) and the project.
    let input = &tool("provision_server")["inputSchema"];
    for field in [
        "projectId",
        "plan",
        "region",
        "image",
        "hostname",
        "sshKeys",
        "ssh_keys",
        "user_data",
    ] {
        assert!(input["properties"][field].is_object(), "{field}: {input}");
    }
    let required: Vec<&str> = input["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["projectId", "plan", "region"]);
    assert_eq!(
        tool("wait_for_sandbox")["inputSchema"]["properties"]["timeout"]["maximum"],
        domain::servers::stages::MAX_WAIT_SECONDS
    );
}

#[tokio::test]
async fn only_an_api_key_opens_the_door() {
    let env = TestEnv::new().await;
    // No server-sent event stream (stateless): a GET is 405, which Streamable HTTP clients
    // (the TypeScript SDK opens one after initializing) take as "POST only".
    env.req("GET", "/mcp").send().await.problem(405);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let none = post(&env, None, list.clone()).await;
    none.problem(401);
    let wrong = post(
        &env,
        Some(&format!("svc_{}", "ab".repeat(24))),
        list.clone(),
    )
    .await;
    wrong.problem(401);
    // A signed-in human's session is not a key.
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    let res = env
        .req("POST", "/mcp")
        .bearer(&session)
        .header("accept", "application/json, text/event-stream")
        .json(list.clone())
        .send()
        .await;
    res.problem(401);
    // A revoked key is refused like any other.
    let key = env.key(ALICE).await;
    assert_eq!(post(&env, Some(&key), list.clone()).await.status, 200);
    let keys = env
        .store
        .api_keys_of(&owner(ALICE), 10, None)
        .await
        .unwrap();
    env.store
        .revoke_api_key(
            &owner(ALICE),
            &keys.items[0].id,
            domain::time::Timestamp::of(domain::time::now()),
        )
        .await
        .unwrap();
    post(&env, Some(&key), list).await.problem(401);
}

#[tokio::test]
async fn free_provisioning_waiting_and_managing_a_server() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let plans = ok(&call(&env, &key, "list_plans", json!({}), None).await);
    let free = plans["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["slug"] == "cloud_vps_free")
        .unwrap()
        .clone();
    assert_eq!(free["monthlyCost"], 0.0, "{free}");
    let regions = ok(&call(&env, &key, "list_regions", json!({}), None).await);
    assert!(!regions["regions"].as_array().unwrap().is_empty());
    let images = ok(&call(
        &env,
        &key,
        "list_images",
        json!({"plan": "cloud_vps_free"}),
        None,
    )
    .await);
    assert!(!images["images"].as_array().unwrap().is_empty());
    let projects = ok(&call(&env, &key, "list_projects", json!({}), None).await);
    assert!(
        projects["projects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == PROJECT),
        "{projects}"
    );
    let quote = ok(&call(
        &env,
        &key,
        "get_quote",
        json!({"plan": "cloud_vps_free", "region": "LT-Siauliai", "projectId": PROJECT}),
        None,
    )
    .await);
    assert_eq!(
        (&quote["free"], &quote["amount"]),
        (&json!(true), &json!("0"))
    );

    let created = ok(&call(
        &env,
        &key,
        "provision_server",
        json!({"projectId": PROJECT, "plan": "cloud_vps_free", "region": "LT-Siauliai",
               "hostname": "mcp-free"}),
        None,
    )
    .await);
    let sandbox_id = created["sandboxId"].as_str().unwrap().to_owned();
    let server = created["server"]["id"].as_u64().unwrap();
    assert_eq!(created["server"]["hostname"], "mcp-free");
    assert_eq!(creates(&env), 1);

    // Waiting holds until the refresher sees the server ready.
    let (waited, _) = tokio::join!(
        call(
            &env,
            &key,
            "wait_for_sandbox",
            json!({"sandboxId": sandbox_id, "timeout": 10}),
            None
        ),
        async {
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(400)).await;
                env.reconcile_in(1).await;
            }
        }
    );
    let waited = ok(&waited);
    assert_eq!(
        (&waited["reached"], &waited["stage"]),
        (&json!(true), &json!("ready")),
        "{waited}"
    );
    assert_eq!(
        waited["access"]["hostKeys"][0]["fingerprint"],
        env.ssh.fingerprints[0].as_str()
    );
    // A wait that cannot be met answers when its time is up, `reached: false`.
    let held = ok(&call(
        &env,
        &key,
        "wait_for_sandbox",
        json!({"sandboxId": sandbox_id, "waitFor": ["terminated"], "timeout": 1}),
        None,
    )
    .await);
    assert_eq!(
        (&held["reached"], &held["stage"]),
        (&json!(false), &json!("ready"))
    );

    let listed = ok(&call(&env, &key, "list_sandboxes", json!({"limit": 10}), None).await);
    assert_eq!(listed["items"][0]["id"], sandbox_id.as_str());
    let got = ok(&call(
        &env,
        &key,
        "get_sandbox",
        json!({"sandboxId": sandbox_id}),
        None,
    )
    .await);
    assert_eq!(got["server"]["id"], server);
    let acted = ok(&call(
        &env,
        &key,
        "server_action",
        json!({"serverId": server, "type": "power-off"}),
        None,
    )
    .await);
    assert_eq!(acted["server"]["id"], server);
    let deleted = ok(&call(
        &env,
        &key,
        "delete_server",
        json!({"serverId": server.to_string()}),
        None,
    )
    .await);
    assert_eq!(deleted, json!({"serverId": server, "deleted": true}));
    assert_eq!(env.sim.server_count(), 0);
    let after = ok(&call(
        &env,
        &key,
        "get_sandbox",
        json!({"sandboxId": sandbox_id}),
        None,
    )
    .await);
    assert!(
        ["terminating", "terminated"].contains(&after["status"].as_str().unwrap()),
        "{after}"
    );
}

#[tokio::test]
async fn a_paid_server_through_the_x402_mcp_round_trip_and_its_replays() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let signer = PrivateKeySigner::random();
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                      "hostname": "mcp-paid"});
    let quote = ok(&call(
        &env,
        &key,
        "get_quote",
        json!({"plan": PLAN, "region": "LT-Siauliai", "projectId": PROJECT}),
        None,
    )
    .await);

    // Unpaid: a tool error carrying the PaymentRequired, twice (structured and as text).
    let unpaid = call(&env, &key, "provision_server", args.clone(), None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let required = unpaid["structuredContent"].clone();
    assert_eq!(required["x402Version"], 2);
    assert_eq!(required["resource"]["url"], "mcp://tool/provision_server");
    let offer = &required["accepts"][0];
    assert_eq!(offer["amount"], quote["amount"], "the quote is the offer");
    assert_eq!(offer["payTo"], quote["payTo"]);
    assert_eq!(
        offer["payTo"].as_str().unwrap().to_lowercase(),
        TREASURY.to_lowercase()
    );
    assert_eq!(
        (&offer["scheme"], &offer["network"]),
        (&json!("exact"), &json!("eip155:84532"))
    );
    let text: Value = serde_json::from_str(unpaid["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["x402/error"]["code"], 402);
    assert_eq!(text["x402/error"]["data"], required);
    // Its `bazaar` extension names the tool, its input schema as `tools/list` gives it, and
    // this call's project in its example.
    let input = &required["extensions"]["bazaar"]["info"]["input"];
    assert_eq!(
        (&input["type"], &input["toolName"], &input["transport"]),
        (
            &json!("mcp"),
            &json!("provision_server"),
            &json!("streamable-http")
        )
    );
    let tools = rpc(&env, &key, "tools/list", json!({})).await;
    let tool = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "provision_server")
        .unwrap()
        .clone();
    assert_eq!(input["inputSchema"], tool["inputSchema"]);
    assert_eq!(input["example"]["projectId"], json!(PROJECT));
    assert_eq!(input["example"]["plan"], "B1-1-1gb-20s-shared");
    assert!(
        required["error"]
            .as_str()
            .unwrap()
            .contains("_meta[\"x402/payment\"]"),
        "{required}"
    );
    assert_eq!((creates(&env), env.facilitator.settles()), (0, 0));

    // Paid: the payload in _meta, the settlement in the result's _meta.
    let payment = payment_payload(&signer, &required);
    let paid = call(
        &env,
        &key,
        "provision_server",
        args.clone(),
        Some(json!({"x402/payment": payment})),
    )
    .await;
    let created = ok(&paid);
    let server = created["server"]["id"].as_u64().unwrap();
    assert_eq!(created["server"]["hostname"], "mcp-paid");
    let settlement = &paid["_meta"]["x402/payment-response"];
    assert_eq!(settlement["success"], true, "{paid}");
    assert_eq!(settlement["network"], "eip155:84532");
    assert_eq!(
        settlement["payer"].as_str().unwrap().to_lowercase(),
        format!("{:#x}", signer.address())
    );
    assert!(
        settlement["transaction"]
            .as_str()
            .unwrap()
            .starts_with("0x")
    );
    assert_eq!((creates(&env), env.facilitator.settles()), (1, 1));

    // The same call again: the same server, nothing charged or created twice.
    let again = call(
        &env,
        &key,
        "provision_server",
        args.clone(),
        Some(json!({"x402/payment": payment})),
    )
    .await;
    assert_eq!(ok(&again)["server"]["id"], server);
    assert_eq!(
        again["_meta"]["x402/payment-response"]["transaction"],
        settlement["transaction"]
    );
    // Over HTTP, the same payment for the same request is the same order.
    let header = base64::engine::general_purpose::STANDARD.encode(payment.to_string());
    let http = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .header("payment-signature", &header)
        .json(json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "mcp-paid"}))
        .send()
        .await;
    assert_eq!(http.status, 201, "{}", http.body);
    assert_eq!(http.json()["id"], server);
    // For another request, it is refused: a 409 tool error, still one payment.
    let other = call(
        &env,
        &key,
        "provision_server",
        json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai", "hostname": "x"}),
        Some(json!({"x402/payment": payment})),
    )
    .await;
    problem(&other, 409);
    assert_eq!((creates(&env), env.facilitator.settles()), (1, 1));
    let payments = ok(&call(&env, &key, "list_payments", json!({}), None).await);
    assert_eq!(payments["items"].as_array().unwrap().len(), 1, "{payments}");
    assert_eq!(payments["items"][0]["state"], "provisioned", "{payments}");
    // What happened, as events: the payment settled and the server provisioned; filtered by
    // type; a type that is not one is a tool error naming `types`. (They are in the feed once
    // the stream has handed them over.)
    env.feed().await;
    let events = ok(&call(&env, &key, "list_events", json!({}), None).await);
    let types: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["payment.settled", "server.provisioned"], "{events}");
    let settled = ok(&call(
        &env,
        &key,
        "list_events",
        json!({"types": ["payment.settled"], "limit": 10}),
        None,
    )
    .await);
    assert_eq!(settled["items"].as_array().unwrap().len(), 1, "{settled}");
    assert_eq!(settled["items"][0]["data"]["serverId"], json!(null));
    let resumed = ok(&call(
        &env,
        &key,
        "list_events",
        json!({"after": events["nextCursor"]}),
        None,
    )
    .await);
    assert_eq!(resumed["items"], json!([]), "{resumed}");
    let bad = call(&env, &key, "list_events", json!({"types": ["nope"]}), None).await;
    assert!(problem(&bad, 400).to_string().contains("types"), "{bad}");
}

#[tokio::test]
async fn a_bad_payment_is_refused_with_the_offer_and_charges_nothing() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai"});
    let required =
        call(&env, &key, "provision_server", args.clone(), None).await["structuredContent"].clone();
    // Signed by one key, claiming another payer: the signature does not recover to `from`.
    let mut payment = payment_payload(&PrivateKeySigner::random(), &required);
    payment["payload"]["authorization"]["from"] =
        json!(format!("{:#x}", PrivateKeySigner::random().address()));
    let refused = call(
        &env,
        &key,
        "provision_server",
        args.clone(),
        Some(json!({"x402/payment": payment})),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["structuredContent"]["x402Version"], 2, "{refused}");
    let reason = refused["structuredContent"]["error"].as_str().unwrap();
    assert!(reason.contains("signature"), "{reason}");
    // Not a payment payload at all: a 400 naming where it came from.
    let garbled = call(
        &env,
        &key,
        "provision_server",
        args,
        Some(json!({"x402/payment": {"x402Version": 2}})),
    )
    .await;
    assert_eq!(problem(&garbled, 400)["field"], "_meta.x402/payment");
    assert_eq!(
        (
            creates(&env),
            env.facilitator.settles(),
            env.facilitator.verifies()
        ),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn errors_are_tool_errors_with_the_problem_fields() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    // A missing, an unknown and a mistyped argument: 400 naming it.
    let missing = call(
        &env,
        &alice,
        "provision_server",
        json!({"projectId": PROJECT, "plan": "cloud_vps_free"}),
        None,
    )
    .await;
    assert_eq!(problem(&missing, 400)["field"], "region");
    let unknown = call(&env, &alice, "list_plans", json!({"verbose": true}), None).await;
    assert_eq!(problem(&unknown, 400)["field"], "verbose");
    let typed = call(
        &env,
        &alice,
        "get_sandbox",
        json!({"sandboxId": "nope"}),
        None,
    )
    .await;
    assert_eq!(problem(&typed, 400)["field"], "sandboxId");
    let project = call(
        &env,
        &alice,
        "provision_server",
        json!({"projectId": "0x1", "plan": "cloud_vps_free", "region": "LT-Siauliai"}),
        None,
    )
    .await;
    assert_eq!(problem(&project, 400)["field"], "projectId");
    let wait = call(
        &env,
        &alice,
        "wait_for_sandbox",
        json!({"sandboxId": format!("sbx_{}", "0".repeat(32)), "timeout": "soon"}),
        None,
    )
    .await;
    assert_eq!(problem(&wait, 400)["field"], "timeout");
    let paid_list = call(
        &env,
        &alice,
        "list_plans",
        json!({}),
        Some(json!({"x402/payment": {"x402Version": 2}})),
    )
    .await;
    assert_eq!(problem(&paid_list, 400)["field"], "_meta.x402/payment");
    // Another owner's server and sandbox: 403; an unknown sandbox: 404.
    let (server, sandbox_id) = env.provision(&alice, "cloud_vps_free", None).await;
    problem(
        &call(
            &env,
            &bob,
            "delete_server",
            json!({"serverId": server}),
            None,
        )
        .await,
        403,
    );
    problem(
        &call(
            &env,
            &bob,
            "get_sandbox",
            json!({"sandboxId": sandbox_id}),
            None,
        )
        .await,
        403,
    );
    problem(
        &call(
            &env,
            &bob,
            "get_sandbox",
            json!({"sandboxId": format!("sbx_{}", "0".repeat(32))}),
            None,
        )
        .await,
        404,
    );
    assert_eq!(env.sim.server_count(), 1);
    // The provider failing is a tool error too, never a transport failure.
    env.sim.inject(Fault::status("/regions", 401));
    let failed = call(&env, &alice, "list_regions", json!({}), None).await;
    problem(&failed, 502);
    // An unknown tool is a JSON-RPC error (invalid params), as MCP says.
    let answer = rpc(
        &env,
        &alice,
        "tools/call",
        json!({"name": "mine_bitcoin", "arguments": {}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}

/// The faults of the paid path over MCP, as over HTTP (`hostile_world.rs`): a nonce spent
/// elsewhere is an x402 refusal (no server, no credit); a failure reported after broadcast is an
/// order in progress — never the x402 error that asks for a new payment — that completes with
/// the settlement once the chain shows the transfer; a refused create after settlement is a tool
/// error that carries the settlement (a credit), in `structuredContent` and `_meta`.
#[tokio::test]
async fn the_paid_paths_faults_answer_over_mcp_as_over_http() {
    use e2e::facilitator::{Mode, VerifyMode};
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let args = |host: &str| provision_args(host);
    let required =
        call(&env, &key, "provision_server", args("a"), None).await["structuredContent"].clone();
    let paid = |signer: &PrivateKeySigner| {
        Some(json!({"x402/payment": payment_payload(signer, &required)}))
    };

    // The payer spends the nonce after verify: refused with the offer, nothing provisioned.
    let spender = PrivateKeySigner::random();
    let to = format!("{:#x}", spender.address());
    env.facilitator
        .next_verify(VerifyMode::PayerSpends(Some((to, 1))));
    let refused = call(&env, &key, "provision_server", args("a"), paid(&spender)).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["structuredContent"]["x402Version"], 2, "{refused}");
    assert!(
        refused["_meta"]["x402/payment-response"].is_null(),
        "{refused}"
    );
    assert_eq!(creates(&env), 0);

    // Broadcast, then a failure reported, while the node lags 20 s: in progress, not a 402.
    env.facilitator
        .set_chain_lag(std::time::Duration::from_secs(20));
    env.facilitator.next_settle(Mode::BroadcastThenFail {
        reason: "unexpected_settle_error".into(),
        confirm_after: std::time::Duration::ZERO,
    });
    let payer = PrivateKeySigner::random();
    let meta = paid(&payer);
    let waiting = ok(&call(&env, &key, "provision_server", args("b"), meta.clone()).await);
    assert_eq!(waiting["status"], "provisioning", "{waiting}");
    assert_eq!(waiting["payment"]["state"], "settling", "{waiting}");
    assert!(
        waiting["detail"]
            .as_str()
            .unwrap()
            .contains("never sign a new one")
    );
    env.clock.advance(std::time::Duration::from_secs(21));
    let done = call(&env, &key, "provision_server", args("b"), meta).await;
    assert_eq!(ok(&done)["server"]["hostname"], "b", "{done}");
    assert_eq!(done["_meta"]["x402/payment-response"]["success"], true);

    // Settled, then refused by the provider: a credit, its settlement on the tool error.
    env.facilitator.set_chain_lag(std::time::Duration::ZERO);
    env.sim
        .inject(e2e::sim::Fault::status("/projects/", 400).on(axum::http::Method::POST));
    let credited = call(
        &env,
        &key,
        "provision_server",
        args("c"),
        paid(&PrivateKeySigner::random()),
    )
    .await;
    let doc = problem(&credited, 409);
    assert_eq!(doc["payment"]["state"], "credited", "{doc}");
    assert_eq!(doc["x402/payment-response"]["success"], true, "{doc}");
    assert_eq!(credited["_meta"]["x402/payment-response"]["success"], true);
    assert_eq!(env.facilitator.settles(), 2);
}

/// `provision_server`'s arguments for a paid server named `host`.
fn provision_args(host: &str) -> Value {
    json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai", "hostname": host})
}

#[tokio::test]
async fn an_mcp_agent_adds_its_key_pays_for_a_server_logs_in_and_renews_it() {
    use crate::ssh_keys::ready;
    use e2e::shell::{key_pair, login, public};
    let env = TestEnv::with(crate::harness::Options {
        server_ssh: true,
        ..crate::harness::Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let ssh = key_pair();
    let added = ok(&call(
        &env,
        &key,
        "add_ssh_key",
        json!({"name": "mcp-agent", "publicKey": public(&ssh)}),
        None,
    )
    .await);
    // Nothing reaches the provider until a server is paid for.
    assert_eq!(added["registered"], false, "{added}");
    let listed = ok(&call(&env, &key, "list_ssh_keys", json!({}), None).await);
    assert_eq!(listed["items"][0]["id"], added["id"]);
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                      "hostname": "mcp-box", "sshKeys": [added["id"]]});
    let unpaid = call(&env, &key, "provision_server", args.clone(), None).await;
    let payment = payment_payload(&PrivateKeySigner::random(), &unpaid["structuredContent"]);
    let meta = json!({"x402/payment": payment});
    let created = ok(&call(&env, &key, "provision_server", args, Some(meta)).await);
    let server = created["server"]["id"].as_u64().unwrap();
    let sandbox = created["sandboxId"].as_str().unwrap();
    ready(&env, &key, sandbox).await;
    let view = ok(&call(
        &env,
        &key,
        "get_sandbox",
        json!({"sandboxId": sandbox}),
        None,
    )
    .await);
    assert_eq!(
        view["access"]["authorizedKeys"][0]["id"], added["id"],
        "{view}"
    );
    assert_eq!(login(&view["access"], &ssh).await.unwrap(), "mcp-box\n");

    // Renewed over MCP, paid like the provisioning.
    let paid_until = view["lease"]["paidUntil"].as_str().unwrap().to_owned();
    let renewal = json!({"serverId": server, "periods": 2});
    let unpaid = call(&env, &key, "renew_server", renewal.clone(), None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let required = unpaid["structuredContent"].clone();
    assert_eq!(required["resource"]["url"], "mcp://tool/renew_server");
    let quote = ok(&call(
        &env,
        &key,
        "get_quote",
        json!({"serverId": server, "periods": 2}),
        None,
    )
    .await);
    assert_eq!(required["accepts"][0]["amount"], quote["amount"]);
    let payment = payment_payload(&PrivateKeySigner::random(), &required);
    let paid = call(
        &env,
        &key,
        "renew_server",
        renewal,
        Some(json!({"x402/payment": payment})),
    )
    .await;
    let renewed = ok(&paid);
    assert_eq!(
        paid["_meta"]["x402/payment-response"]["success"], true,
        "{paid}"
    );
    assert_eq!(
        (renewed["serverId"].as_u64(), renewed["periods"].as_u64()),
        (Some(server), Some(2))
    );
    assert!(
        renewed["paidUntil"].as_str().unwrap() > paid_until.as_str(),
        "{renewed}"
    );
    // A key with `act` deletes it; it is gone from the list.
    let deleted = ok(&call(
        &env,
        &key,
        "delete_ssh_key",
        json!({"sshKeyId": added["id"]}),
        None,
    )
    .await);
    assert_eq!(deleted["deleted"], true);
    let listed = ok(&call(&env, &key, "list_ssh_keys", json!({}), None).await);
    assert_eq!(listed["items"], json!([]));
}

#[tokio::test]
async fn an_mcp_agent_resizes_its_paid_server_keeping_its_paid_time_and_cannot_shrink_it() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // Delivered: no longer on its first deployment, so resizable.
    let (server, sandbox, _) = crate::paid_time::paid_server(&env, &key, "mcp-resized").await;
    let view = ok(&call(
        &env,
        &key,
        "get_sandbox",
        json!({"sandboxId": sandbox}),
        None,
    )
    .await);
    let paid_until = view["lease"]["paidUntil"].clone();
    assert!(paid_until.is_string(), "{view}");

    // Unpaid: x402's payment required, for the difference over the paid time left.
    let resize = json!({"serverId": server, "plan": "B1-2-2gb-40s-shared"});
    let unpaid = call(&env, &key, "resize_server", resize.clone(), None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let required = unpaid["structuredContent"].clone();
    assert_eq!(required["resource"]["url"], "mcp://tool/resize_server");
    let amount: u128 = required["accepts"][0]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(amount > 0, "{required}");

    // Paid: the server is on the bigger plan, its paid time unchanged.
    let payment = payment_payload(&PrivateKeySigner::random(), &required);
    let meta = json!({"x402/payment": payment});
    let paid = call(&env, &key, "resize_server", resize, Some(meta)).await;
    let resized = ok(&paid);
    assert_eq!(
        paid["_meta"]["x402/payment-response"]["success"], true,
        "{paid}"
    );
    assert_eq!(resized["serverId"].as_u64(), Some(server), "{resized}");
    assert_eq!(resized["plan"], "B1-2-2gb-40s-shared", "{resized}");
    assert_eq!(resized["from"], "B1-1-1gb-20s-shared", "{resized}");
    assert_eq!(resized["paidUntil"], paid_until, "{resized}");
    assert_eq!(resized["sandboxId"], sandbox.as_str(), "{resized}");

    // Back to the smaller plan: a downgrade, refused naming `plan`.
    let back = json!({"serverId": server, "plan": "B1-1-1gb-20s-shared"});
    let refused = call(&env, &key, "resize_server", back, None).await;
    let doc = problem(&refused, 400);
    assert_eq!(doc["field"], "plan", "{doc}");
}
