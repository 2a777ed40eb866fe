//! `make bench` (the waiting issue, point 6): what waiting costs the provider and the store.
//! A program, not a test: it prints figures, each beside a baseline measured in the same run —
//! the poll as it was before the refresher (a store read plus `GET /servers/{id}`), and one read
//! per server instead of one listing per project. It drives the real handlers through the
//! end-to-end harness against moto (`make bench` starts one). It also prints what the MCP layer
//! adds to a request (the same sandbox read as an MCP tool call, beside the HTTP poll) and what
//! a key's spend policy adds to a paid offer (beside a key without one).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use domain::store::sandboxes::{SandboxRecord, ServerOwnership};

use crate::harness::{ALICE, Options, PROJECT, TestEnv, owner};

const POLLS: usize = 1000;
const SERVERS: usize = 1000;
const OFFERS: usize = 200;

fn p50(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn reads(env: &TestEnv) -> usize {
    ["GetItem", "Query", "BatchGetItem"]
        .iter()
        .map(|op| env.faults.calls(op))
        .sum()
}

#[tokio::main]
pub async fn main() {
    let env = TestEnv::with(Options {
        // Port 22 of the seeded servers does not answer: the pass measures reads, not SSH.
        vars: vec![("SSH_PROBE_TARGET", "127.0.0.1:9".into())],
        // The simulator renders a thousand servers in one listing (within the pass's 20 s).
        timeout_seconds: 8.0,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    let path = format!("/api/sandboxes/{sandbox_id}");

    // Polls through the handler (API key check included).
    let (calls, store_reads) = (env.sim.requests().len(), reads(&env));
    let mut times = Vec::with_capacity(POLLS);
    for _ in 0..POLLS {
        let started = Instant::now();
        let res = env.req("GET", &path).key(&key).send().await;
        times.push(started.elapsed());
        assert_eq!(res.status, 200);
    }
    let poll_calls = env.sim.requests().len() - calls;
    let poll_reads = (reads(&env) - store_reads) as f64 / POLLS as f64;
    let poll_p50 = p50(times);
    // Baseline: the poll as it was — the same, plus the provider's view of the server.
    let upstream = env.state.upstream().unwrap();
    let calls = env.sim.requests().len();
    let mut times = Vec::with_capacity(POLLS);
    for _ in 0..POLLS {
        let started = Instant::now();
        let res = env.req("GET", &path).key(&key).send().await;
        upstream.server(server).await.unwrap();
        times.push(started.elapsed());
        assert_eq!(res.status, 200);
    }
    let baseline_calls = env.sim.requests().len() - calls;
    let baseline_p50 = p50(times);
    // The same read as an MCP tool call (`get_sandbox`): what the MCP layer adds to a request.
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "get_sandbox", "arguments": {"sandboxId": sandbox_id}}});
    let mut times = Vec::with_capacity(POLLS);
    for _ in 0..POLLS {
        let started = Instant::now();
        let res = env
            .req("POST", "/mcp")
            .key(&key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(call.clone())
            .send()
            .await;
        times.push(started.elapsed());
        assert_eq!(res.status, 200);
        assert_eq!(
            res.json()["result"]["structuredContent"]["id"],
            sandbox_id.as_str()
        );
    }
    let mcp_p50 = p50(times);

    // What a key's spend policy adds to a paid request's offer (the 402): the usage check reads
    // the sandboxes of the key's servers besides its counters (which every key's new server
    // reads, to keep its servers set pruned), beside a key without one.
    let policy: domain::policy::Policy = serde_json::from_value(serde_json::json!({
        "dailySpendLimit": 1000, "monthlySpendLimit": 10000, "maxActiveServers": 10}))
    .unwrap();
    let (bounded, _) = domain::identity::auth::api_key::issue(
        &env.store,
        &owner(ALICE),
        domain::identity::auth::api_key::NewKey {
            policy: Some(policy),
            ..domain::identity::auth::api_key::NewKey::named("bounded", env.state.clock.timestamp())
        },
        None,
    )
    .await
    .unwrap();
    env.provision(bounded.expose(), "cloud_vps_free", None)
        .await;
    let offer = |key: String| {
        let env = &env;
        async move {
            let mut times = Vec::with_capacity(OFFERS);
            let store_reads = reads(env);
            for _ in 0..OFFERS {
                let started = Instant::now();
                let res = env
                    .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
                    .key(&key)
                    .json(serde_json::json!({"plan": "B1-1-1gb-20s-shared",
                                             "region": "LT-Siauliai"}))
                    .send()
                    .await;
                times.push(started.elapsed());
                assert_eq!(res.status, 402, "{}", res.body);
            }
            let per_offer = (reads(env) - store_reads) as f64 / OFFERS as f64;
            (p50(times), per_offer)
        }
    };
    let (bounded_p50, bounded_reads) = offer(bounded.expose().to_owned()).await;
    let (plain_p50, plain_reads) = offer(key.clone()).await;

    // A thousand servers of one owner in one project, all due.
    let ids = env.sim.seed_servers(PROJECT, SERVERS);
    let before_listing = env.sim.requests().len();
    let listed = upstream.servers(PROJECT).await.unwrap();
    // One listing of the project is this many requests: the provider pages it.
    let listing_pages = env.sim.requests().len() - before_listing;
    let objects: BTreeMap<u64, serde_json::Value> = listed
        .into_iter()
        .map(|s| (s["id"].as_u64().unwrap(), s))
        .collect();
    let now = domain::time::Timestamp::of(domain::time::now());
    let seeding = Instant::now();
    let mut records = Vec::with_capacity(SERVERS);
    for id in &ids {
        let sandbox = SandboxRecord {
            event_seq: 0,
            id: domain::ids::new(domain::ids::SANDBOX),
            owner: owner(ALICE),
            server_id: Some(*id),
            project_id: Some(PROJECT),
            plan: Some("cloud_vps_free".into()),
            region: Some("LT-Siauliai".into()),
            hostname: None,
            name: None,
            metadata: Default::default(),
            status: "deploying".into(),
            created_at: now,
            updated_at: now,
            lease: None,
            watch: Some(domain::servers::stages::created(&objects[id], now, now)),
            payment: None,
            authorized_keys: Vec::new(),
            resizing: None,
        };
        let ownership = ServerOwnership {
            server_id: *id,
            owner: owner(ALICE),
            sandbox_id: sandbox.id.clone(),
            project_id: PROJECT,
            created_at: now,
        };
        records.push((ownership, sandbox));
    }
    env.store.import_servers(&records).await.unwrap();
    println!("seeded {SERVERS} records in {}", ms(seeding.elapsed()));
    let calls = env.sim.requests().len();
    let started = Instant::now();
    let report = env.reconcile_in(1).await.refresh;
    let pass_time = started.elapsed();
    let pass_calls = env.sim.requests().len() - calls;
    assert_eq!(report.due, SERVERS, "{report:?}");
    let written = SERVERS - report.conflicts - report.errors;
    // Baseline: one read per server.
    let calls = env.sim.requests().len();
    let started = Instant::now();
    for id in &ids {
        upstream.server(*id).await.unwrap();
    }
    let per_server_time = started.elapsed();
    let per_server_calls = env.sim.requests().len() - calls;

    println!("\nwaiting benchmark (moto DynamoDB, simulator, dev profile)");
    println!("| figure | this build | baseline | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| provider calls per {POLLS} polls | {poll_calls} | {baseline_calls} (poll asks the \
         provider) | {:.3} |",
        poll_calls as f64 / baseline_calls as f64
    );
    println!(
        "| poll p50 through the handler | {} | {} (+ the provider read) | \
         {:.2} |",
        ms(poll_p50),
        ms(baseline_p50),
        poll_p50.as_secs_f64() / baseline_p50.as_secs_f64()
    );
    println!(
        "| `get_sandbox` over MCP (tools/call) p50 | {} | {} (the same read over HTTP) | {:.2} |",
        ms(mcp_p50),
        ms(poll_p50),
        mcp_p50.as_secs_f64() / poll_p50.as_secs_f64()
    );
    println!(
        "| store reads per poll (the API key's included) | {poll_reads:.2} | the same + 1 \
         provider read | — |"
    );
    println!(
        "| paid offer (402) p50, key with spend limits and maxActiveServers | {} | {} (a key \
         without a policy) | {:.2} |",
        ms(bounded_p50),
        ms(plain_p50),
        bounded_p50.as_secs_f64() / plain_p50.as_secs_f64()
    );
    println!("| store reads per paid offer | {bounded_reads:.2} | {plain_reads:.2} | — |");
    println!(
        "| provider calls per pass, {SERVERS} servers in one project ({written} refreshed; one \
         listing of {listing_pages} pages) | {pass_calls} | {per_server_calls} (one read per \
         server) | {:.4} |",
        pass_calls as f64 / per_server_calls as f64
    );
    println!(
        "| refresher pass wall time, {SERVERS} servers (1 listing, {SERVERS} store writes, \
         {SERVERS} readiness checks) | {} | {} unpaced, ≥ {:.0} s at 3 requests/s (reads only) \
         | — |",
        ms(pass_time),
        ms(per_server_time),
        per_server_calls as f64 / 3.0
    );
    assert_eq!(poll_calls, 0);
    // The pass reads the project's one listing (every page of it), nothing per server.
    assert_eq!(pass_calls, listing_pages, "{report:?}");
    assert_eq!(written, SERVERS, "{report:?}");
}
