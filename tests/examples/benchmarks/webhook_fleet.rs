//! `make bench` (issue 34, point 6): webhook delivery under load, one endpoint kept from
//! another. One owner with 100 endpoints, 10 of which hang past the 10 s timeout, and 100 events
//! — 50 API keys, each with an agent, revoked: `key.revoked`, then `agent.deactivated`, two
//! events of one subject — so 10,000 deliveries, through the whole path as `make dev` runs it:
//! the table's stream (read every 500 ms) → the events function → the SQS FIFO delivery queue
//! (moto's) → the deliveries function (the local event source mapping) → receivers that verify
//! every signature. It waits until every healthy endpoint has every event, checks that each
//! subject's came in order, and prints the latency from each revocation to each healthy
//! receiver (p50, p99) and the throughput. Against moto (the target starts one).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::receiver::{Mode, Receiver};
use serde_json::json;

use crate::harness::TestEnv;

const ENDPOINTS: usize = 100;
const HANGING: usize = 10;
const KEYS: usize = 50;
/// Two events per key: revoked, and its agent deactivated.
const EVENTS: usize = 2 * KEYS;
/// The owner of everything.
const OWNER: &str = "0x00000000000000000000000000000000000f1ee7";
/// The longest the run may take before it is reported as unfinished.
const PATIENCE: Duration = Duration::from_secs(1200);

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * p).ceil() as usize).saturating_sub(1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// An endpoint of the owner and its receiver.
struct Endpoint {
    receiver: Arc<Receiver>,
    hanging: bool,
}

/// The owner's endpoints, the first [`HANGING`] of them hanging.
async fn endpoints(env: &TestEnv, key: &str) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for i in 0..ENDPOINTS {
        let receiver = Receiver::start().await;
        let hanging = i < HANGING;
        if hanging {
            receiver.set(Mode::Hang);
        }
        let endpoint = env.register_webhook(key, &receiver.url, None).await;
        receiver.trust(endpoint["secret"].as_str().unwrap());
        out.push(Endpoint { receiver, hanging });
    }
    out
}

/// The owner's keys to revoke, each with an agent: their ids.
async fn keys(env: &TestEnv) -> Vec<String> {
    let mut ids = Vec::new();
    for k in 0..KEYS {
        let (key, id) = env.issue_key(OWNER, &format!("agent-{k}")).await;
        let agent = env
            .req("POST", "/api/agents")
            .key(&key)
            .json(json!({"name": format!("agent-{k}")}))
            .send()
            .await;
        assert_eq!(agent.status, 201, "{}", agent.body);
        ids.push(id);
    }
    ids
}

#[tokio::main]
pub async fn main() {
    let env: &'static TestEnv = Box::leak(Box::new(
        TestEnv::with(crate::harness::Options {
            vars: vec![("MAX_WEBHOOKS_PER_OWNER", ENDPOINTS.to_string())],
            ..crate::harness::Options::default()
        })
        .await,
    ));
    let set_up = Instant::now();
    let (key, _) = env.issue_key(OWNER, "owner").await;
    let endpoints = endpoints(env, &key).await;
    let keys = keys(env).await;
    // What setting up wrote is in the stream: read past it before the clock starts.
    env.stream().await;
    let set_up = set_up.elapsed();

    // make dev's stream and delivery queue, running while the keys are revoked.
    let stop = Arc::new(AtomicBool::new(false));
    let pipeline = {
        let stop = stop.clone();
        tokio::spawn(async move {
            // Read every 500 ms until every event is in (moto reads its whole stream again on
            // every pass, and the deliveries' own writes grow it by the thousand: polling on
            // would measure moto, not the deliveries).
            let streaming = async {
                let mut fed = 0;
                while fed < EVENTS && !stop.load(Ordering::SeqCst) {
                    fed += env.stream().await.events;
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
    let owner = domain::address::Owner::parse(OWNER).unwrap();
    let started = Instant::now();
    let mut revoked_at: HashMap<String, Instant> = HashMap::new();
    for id in &keys {
        revoked_at.insert(id.clone(), Instant::now());
        domain::identity::keys::revoke(&env.store, &owner, id, domain::time::now())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let healthy: Vec<&Endpoint> = endpoints.iter().filter(|e| !e.hanging).collect();
    let want = healthy.len() * EVENTS;
    let received = || -> usize {
        healthy
            .iter()
            .map(|e| e.receiver.accepted().len().min(EVENTS))
            .sum()
    };
    let mut told = Instant::now();
    while received() < want && started.elapsed() < PATIENCE {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if told.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "{:.0} s: {} of {want}",
                started.elapsed().as_secs_f64(),
                received()
            );
            told = Instant::now();
        }
    }
    let all_in = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    pipeline.await.unwrap();
    report(&healthy, &revoked_at, want, all_in, set_up, received());
}

/// Checks every healthy endpoint's deliveries (each event once, verified, each subject's in
/// order) and prints the figures.
fn report(
    healthy: &[&Endpoint],
    revoked_at: &HashMap<String, Instant>,
    want: usize,
    all_in: Duration,
    set_up: Duration,
    received: usize,
) {
    let mut latencies = Vec::new();
    let mut duplicates = 0;
    let mut out_of_order = 0;
    for endpoint in healthy {
        let got = endpoint.receiver.got();
        assert!(
            got.iter().all(|r| r.verified == [true]),
            "a signature did not verify"
        );
        let mut seen = HashMap::<String, Vec<String>>::new();
        let mut ids = std::collections::HashSet::new();
        for delivery in got.iter().filter(|r| r.accepted) {
            if !ids.insert(delivery.id.clone()) {
                duplicates += 1;
                continue;
            }
            let subject = delivery.event["subject"]["id"].as_str().unwrap().to_owned();
            let kind = delivery.event["type"].as_str().unwrap().to_owned();
            latencies.push(delivery.at - revoked_at[&subject]);
            seen.entry(subject).or_default().push(kind);
        }
        for kinds in seen.values() {
            if kinds.as_slice() != ["key.revoked", "agent.deactivated"] {
                out_of_order += 1;
            }
        }
    }
    println!(
        "| webhooks at scale: {EVENTS} events to {ENDPOINTS} endpoints ({HANGING} hanging), \
         {} deliveries | |",
        EVENTS * ENDPOINTS
    );
    println!("|---|---|");
    println!(
        "| every event at every healthy endpoint | {received} of {want} in {:.1} s{} |",
        all_in.as_secs_f64(),
        if received == want {
            ""
        } else {
            " (UNFINISHED)"
        }
    );
    println!(
        "| change → healthy receiver, p50 / p99 | {} / {} |",
        ms(percentile(&mut latencies, 0.5)),
        ms(percentile(&mut latencies, 0.99))
    );
    println!(
        "| deliveries to healthy endpoints per second | {:.0} |",
        received as f64 / all_in.as_secs_f64()
    );
    println!("| subjects out of order; deliveries received twice | {out_of_order}; {duplicates} |");
    println!(
        "| setting up (endpoints, keys, agents) | {:.1} s |",
        set_up.as_secs_f64()
    );
    assert_eq!(received, want, "the benchmark did not finish");
    assert_eq!(out_of_order, 0);
}
