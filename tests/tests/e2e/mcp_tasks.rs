//! MCP tasks (issue 47, point 3): a task-augmented `provision_server` answers a task at once,
//! followed across invocations (`tasks/get`) until the refresher sees its server ready; its
//! result (`tasks/result`) is the tool's; `tasks/list` and `tasks/cancel` work on the key's own
//! tasks only; a client that asks for no task gets today's answer.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, PROJECT, TestEnv};
use crate::mcp::{PLAN, rpc};

/// A free server's arguments.
fn free(hostname: &str) -> Value {
    json!({"projectId": PROJECT, "plan": "cloud_vps_free", "region": "LT-Siauliai",
           "hostname": hostname})
}

/// `tools/call` of `name` with `arguments` as a task: the task.
async fn as_task(env: &TestEnv, key: &str, name: &str, arguments: Value) -> Value {
    let params = json!({"name": name, "arguments": arguments, "task": {"ttl": 600_000}});
    let answer = rpc(env, key, "tools/call", params).await;
    let task = answer["result"]["task"].clone();
    assert!(
        task["taskId"]
            .as_str()
            .is_some_and(|id| id.starts_with("tsk_")),
        "{answer}"
    );
    task
}

/// `tasks/get` of `id`: the task.
async fn get(env: &TestEnv, key: &str, id: &str) -> Value {
    rpc(env, key, "tasks/get", json!({"taskId": id})).await["result"].clone()
}

#[tokio::test]
async fn a_task_augmented_provisioning_is_followed_to_ready_across_invocations() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    // What the server declares: tasks for tools/call, list and cancel; the two task tools.
    let init = json!({"protocolVersion": crate::mcp::PROTOCOL, "capabilities": {},
                      "clientInfo": {"name": "e2e", "version": "1"}});
    let init = rpc(&env, &key, "initialize", init).await;
    let tasks = &init["result"]["capabilities"]["tasks"];
    assert!(tasks["requests"]["tools"]["call"].is_object(), "{init}");
    assert!(
        tasks["list"].is_object() && tasks["cancel"].is_object(),
        "{init}"
    );
    let tools = rpc(&env, &key, "tools/list", json!({})).await;
    for tool in tools["result"]["tools"].as_array().unwrap() {
        let support = &tool["execution"]["taskSupport"];
        match tool["name"].as_str().unwrap() {
            "provision_server" | "renew_server" | "resize_server" => {
                assert_eq!(support, "optional")
            }
            _ => assert!(support.is_null(), "{tool}"),
        }
    }

    // The call answers a task at once, working; its server is followed to ready.
    let task = as_task(&env, &key, "provision_server", free("task-free")).await;
    assert_eq!(
        (&task["status"], &task["ttl"]),
        (&json!("working"), &json!(600_000))
    );
    assert_eq!(task["pollInterval"], 5000);
    let id = task["taskId"].as_str().unwrap().to_owned();
    let mut seen = get(&env, &key, &id).await;
    for _ in 0..30 {
        if seen["status"] != "working" {
            break;
        }
        env.reconcile_in(1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen = get(&env, &key, &id).await;
    }
    assert_eq!(seen["status"], "completed", "{seen}");
    assert_eq!(seen["statusMessage"], "the server is ready");
    let result = rpc(&env, &key, "tasks/result", json!({"taskId": id})).await["result"].clone();
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(
        result["structuredContent"]["server"]["hostname"],
        "task-free"
    );
    let sandbox = result["structuredContent"]["sandboxId"].as_str().unwrap();
    let view = env.sandbox(&key, sandbox).await;
    assert_eq!(view["stage"], "ready");
    // The traffic the provider reports, on the server object and the sandbox (issue 48, 3).
    let traffic = &view["server"]["traffic_used_bytes"];
    assert!(traffic.is_u64(), "{view}");
    assert_eq!(&view["trafficUsedBytes"], traffic);

    // A tool error ends its task at once: completed, the error its result.
    let unpaid = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai"});
    let refused = as_task(&env, &key, "provision_server", unpaid).await;
    assert_eq!(refused["status"], "completed");
    let refused_id = refused["taskId"].as_str().unwrap();
    let result = rpc(&env, &key, "tasks/result", json!({"taskId": refused_id})).await;
    assert_eq!(result["result"]["isError"], true);
    assert!(
        result["result"]["structuredContent"]["accepts"].is_array(),
        "{result}"
    );

    // A working task cancelled: the task ends, the server stays its owner's.
    let working = as_task(&env, &key, "provision_server", free("task-cancelled")).await;
    let working_id = working["taskId"].as_str().unwrap().to_owned();
    let cancelled = rpc(&env, &key, "tasks/cancel", json!({"taskId": working_id})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let again = rpc(&env, &key, "tasks/cancel", json!({"taskId": working_id})).await;
    assert_eq!(again["error"]["code"], -32602, "an ended task: {again}");
    let result = rpc(&env, &key, "tasks/result", json!({"taskId": working_id})).await;
    assert_eq!(result["result"]["isError"], true, "{result}");

    // The key's tasks, newest first; another key sees none of them.
    let listed = rpc(&env, &key, "tasks/list", json!({})).await["result"].clone();
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [working_id.as_str(), refused_id, id.as_str()]);
    let bob = env.key(BOB).await;
    let stranger = rpc(&env, &bob, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
    let stranger = rpc(&env, &bob, "tasks/cancel", json!({"taskId": working_id})).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
    let empty = rpc(&env, &bob, "tasks/list", json!({})).await;
    assert_eq!(empty["result"]["tasks"], json!([]));
    let unknown = rpc(&env, &key, "tasks/get", json!({"taskId": "tsk_nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602);
}

/// A paid task-augmented call whose task cannot be recorded (the store refuses its write) still
/// answers what the call did: the tool's result with its payment response, never an error that
/// hides the charge.
#[tokio::test]
async fn a_paid_call_whose_task_cannot_be_recorded_answers_its_result_and_payment() {
    use alloy_signer_local::PrivateKeySigner;
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                      "hostname": "task-unrecorded"});
    let unpaid = crate::mcp::call(&env, &key, "provision_server", args.clone(), None).await;
    let required = unpaid["structuredContent"].clone();
    let payment = crate::mcp::payment_payload(&PrivateKeySigner::random(), &required);
    env.faults.arm(
        "PutItem",
        "MCPTASKS#",
        crate::dynamo_faults::Kind::Throttle,
        5,
    );
    let params = json!({"name": "provision_server", "arguments": args,
                        "task": {"ttl": 600_000}, "_meta": {"x402/payment": payment}});
    let answer = rpc(&env, &key, "tools/call", params).await;
    let result = &answer["result"];
    assert!(result["task"].is_null(), "{answer}");
    assert_eq!(
        result["_meta"]["x402/payment-response"]["success"], true,
        "{answer}"
    );
    assert!(
        result["structuredContent"]["server"]["id"].is_u64(),
        "{answer}"
    );
    assert_eq!(env.facilitator.settles(), 1);
}
