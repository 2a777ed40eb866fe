//! `make bench` (issue 34, point 6): webhook delivery under load, one endpoint kept from
//! another. 100 owners with one endpoint each, 10 of which hang past the 10 s timeout; 100
//! events per owner — 50 API keys, each with an agent, revoked: `key.revoked`, then
//! `agent.deactivated`, two events of one subject — so 10,000 events, through the whole path as
//! `make dev` runs it: the table's stream (read every 500 ms) → the events function → the SQS
//! FIFO delivery queue (moto's) → the deliveries function (the local event source mapping) →
//! receivers that verify every signature. It waits until every healthy endpoint has every one of
//! its events, checks that each subject's came in order, and prints the latency from each
//! revocation to its receiver (p50, p99) for the healthy endpoints, and the throughput.
//! Against moto (the target starts one).

#[allow(dead_code)]
#[path = "../tests/e2e/dynamo_faults.rs"]
mod dynamo_faults;
#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../tests/e2e/iam.rs"]
mod iam;
#[allow(dead_code)]
#[path = "../tests/e2e/rails.rs"]
mod rails;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::receiver::{Mode, Receiver};
use serde_json::json;

use crate::harness::TestEnv;

const OWNERS: usize = 100;
const HANGING: usize = 10;
const KEYS_PER_OWNER: usize = 50;
/// Two events per key: revoked, and its agent deactivated.
const EVENTS_PER_OWNER: usize = 2 * KEYS_PER_OWNER;
/// The longest the run may take before it is reported as unfinished.
const PATIENCE: Duration = Duration::from_secs(1800);

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * p).ceil() as usize).saturating_sub(1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// One owner of the fleet: its address, its endpoint's receiver, its keys to revoke.
struct Owner {
    address: String,
    receiver: Arc<Receiver>,
    hanging: bool,
    keys: Vec<String>,
}

/// An owner with its endpoint and its keys, each with an agent.
async fn owner(env: &TestEnv, i: usize) -> Owner {
    let address = format!("0x{:040x}", 0xf1ee7_0000u64 + i as u64);
    let hanging = i < HANGING;
    let receiver = Receiver::start().await;
    if hanging {
        receiver.set(Mode::Hang);
    }
    let (key, _) = env.issue_key(&address, "owner").await;
    let endpoint = env.register_webhook(&key, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());
    let mut keys = Vec::new();
    for k in 0..KEYS_PER_OWNER {
        let (agent_key, id) = env.issue_key(&address, &format!("agent-{k}")).await;
        let agent = env
            .req("POST", "/api/agents")
            .key(&agent_key)
            .json(json!({"name": format!("agent-{k}")}))
            .send()
            .await;
        assert_eq!(agent.status, 201, "{}", agent.body);
        keys.push(id);
    }
    Owner {
        address,
        receiver,
        hanging,
        keys,
    }
}

#[tokio::main]
async fn main() {
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::new().await));
    let set_up = Instant::now();
    let mut owners = Vec::new();
    for i in 0..OWNERS {
        owners.push(owner(env, i).await);
    }
    // What setting up wrote is in the stream: read past it before the clock starts.
    env.stream().await;
    let set_up = set_up.elapsed();

    // make dev's stream and delivery queue, running while the keys are revoked.
    let stop = Arc::new(AtomicBool::new(false));
    let pipeline = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let streaming = async {
                while !stop.load(Ordering::SeqCst) {
                    env.stream().await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            };
            let delivering = async {
                while !stop.load(Ordering::SeqCst) {
                    env.deliver().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::join!(streaming, delivering);
        })
    };
    let started = Instant::now();
    let mut revoked_at: HashMap<String, Instant> = HashMap::new();
    for k in 0..KEYS_PER_OWNER {
        for owner in &owners {
            let id = &owner.keys[k];
            let who = shared::address::Owner::parse(&owner.address).unwrap();
            revoked_at.insert(id.clone(), Instant::now());
            shared::identity::keys::revoke(&env.store, &who, id, shared::time::now())
                .await
                .unwrap();
        }
    }
    let revoking = started.elapsed();
    let healthy: Vec<&Owner> = owners.iter().filter(|o| !o.hanging).collect();
    let want = healthy.len() * EVENTS_PER_OWNER;
    let received = || -> usize {
        healthy
            .iter()
            .map(|o| o.receiver.accepted().len().min(EVENTS_PER_OWNER))
            .sum()
    };
    while received() < want && started.elapsed() < PATIENCE {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all_in = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    pipeline.await.unwrap();

    // Every event once at every healthy endpoint, verified, each subject's in order.
    let mut latencies = Vec::new();
    let mut duplicates = 0;
    let mut out_of_order = 0;
    for owner in &healthy {
        let got = owner.receiver.got();
        assert!(got.iter().all(|r| r.verified == [true]), "a signature did not verify");
        let mut seen = HashMap::<String, Vec<String>>::new();
        let mut ids = std::collections::HashSet::new();
        for delivery in got.iter().filter(|r| r.accepted) {
            if !ids.insert(delivery.id.clone()) {
                duplicates += 1;
                continue;
            }
            let subject = delivery.event["subject"]["id"].as_str().unwrap().to_owned();
            let kind = delivery.event["type"].as_str().unwrap().to_owned();
            if kind == "key.revoked" {
                latencies.push(delivery.at - revoked_at[&subject]);
            }
            seen.entry(subject).or_default().push(kind);
        }
        assert_eq!(ids.len(), EVENTS_PER_OWNER, "{} got {} events", owner.address, ids.len());
        for kinds in seen.values() {
            if kinds.as_slice() != ["key.revoked", "agent.deactivated"] {
                out_of_order += 1;
            }
        }
    }
    let delivered: usize = healthy.iter().map(|o| o.receiver.accepted().len()).sum();
    println!(
        "| webhooks at scale: {OWNERS} endpoints ({HANGING} hanging), {} events | |",
        OWNERS * EVENTS_PER_OWNER
    );
    println!("|---|---|");
    println!(
        "| every event at every healthy endpoint | {} of {want} in {:.1} s{} |",
        received(),
        all_in.as_secs_f64(),
        if received() == want { "" } else { " (UNFINISHED)" }
    );
    println!(
        "| change → healthy receiver (`key.revoked`), p50 / p99 | {} / {} |",
        ms(percentile(&mut latencies, 0.5)),
        ms(percentile(&mut latencies, 0.99))
    );
    println!(
        "| deliveries per second, first revocation to the last delivery | {:.0} |",
        delivered as f64 / all_in.as_secs_f64()
    );
    println!(
        "| subjects out of order; deliveries received twice | {out_of_order}; {duplicates} |"
    );
    println!(
        "| the {} revocations (change + events) took; setting up took | {:.1} s; {:.1} s |",
        OWNERS * KEYS_PER_OWNER,
        revoking.as_secs_f64(),
        set_up.as_secs_f64()
    );
    assert_eq!(received(), want, "the benchmark did not finish");
    assert_eq!(out_of_order, 0);
}
