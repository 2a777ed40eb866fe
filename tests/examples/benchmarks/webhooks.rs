//! `make bench` (issue 20): what a webhook costs. A program, not a test: it prints the latency
//! from a change (an API key revoked: its change and its event in one transaction) to a local
//! receiver that verifies the delivery, p50 and p99, with the stream read as `make dev` reads it
//! (every 500 ms); one pass of the stream's handler alone; and the store calls a delivery adds
//! per event, beside the change's own. Against moto (the target starts one).

use std::time::{Duration, Instant};

use crate::harness::{ALICE, TestEnv, owner};
use e2e::receiver::Receiver;

const EVENTS: usize = 100;

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * p).ceil() as usize).saturating_sub(1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn calls(env: &TestEnv, ops: &[&str]) -> usize {
    ops.iter().map(|op| env.faults.calls(op)).sum()
}

const WRITES: &[&str] = &["PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"];
const READS: &[&str] = &["GetItem", "Query", "BatchGetItem"];

/// Revokes ALICE's key `id`: the change, and its `key.revoked` event in the same transaction.
async fn revoke(env: &TestEnv, id: &str) {
    domain::identity::keys::revoke(&env.store, &owner(ALICE), id, domain::time::now())
        .await
        .unwrap();
}

/// Revokes `EVENTS` keys one by one while the stream is read every `every`; answers the
/// latencies from each revocation's start to the receiver.
async fn latencies(env: &'static TestEnv, receiver: &Receiver, every: Duration) -> Vec<Duration> {
    let before = receiver.got().len();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeding = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                env.feed().await;
                tokio::time::sleep(every).await;
            }
        })
    };
    let mut started = Vec::new();
    for i in 0..EVENTS {
        let id = env.issue_key(ALICE, &format!("k{i}")).await.1;
        started.push(Instant::now());
        revoke(env, &id).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waited = Instant::now();
    while receiver.got().len() < before + EVENTS {
        assert!(
            waited.elapsed() < Duration::from_secs(180),
            "{} of {EVENTS} delivered",
            receiver.got().len() - before
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    feeding.await.unwrap();
    let got = receiver.got();
    got[before..]
        .iter()
        .zip(started)
        .map(|(received, start)| received.at - start)
        .collect()
}

#[tokio::main]
pub async fn main() {
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::new().await));
    let key = env.key(ALICE).await;
    let receiver = Receiver::start().await;
    let endpoint = env.register_webhook(&key, &receiver.url, None).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());

    // The store calls of one change and its event, then of its delivery.
    let id = env.issue_key(ALICE, "one").await.1;
    env.feed().await;
    let (w0, r0) = (calls(env, WRITES), calls(env, READS));
    revoke(env, &id).await;
    let (w1, r1) = (calls(env, WRITES), calls(env, READS));
    env.feed().await;
    let (w2, r2) = (calls(env, WRITES), calls(env, READS));
    assert_eq!(receiver.got().len(), 1);

    let mut polled = latencies(env, &receiver, Duration::from_millis(500)).await;
    // The handler alone: a stream record to the receiver, each event read as soon as written.
    let mut direct = Vec::new();
    for i in 0..20 {
        let id = env.issue_key(ALICE, &format!("d{i}")).await.1;
        revoke(env, &id).await;
        let start = Instant::now();
        env.feed().await;
        direct.push(start.elapsed());
    }
    assert!(
        receiver
            .got()
            .iter()
            .all(|r| r.accepted && r.verified == [true])
    );

    println!("| webhooks, {EVENTS} events, local receiver | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| change → receiver, stream read every 500 ms (make dev) | {} | {} |",
        ms(percentile(&mut polled, 0.5)),
        ms(percentile(&mut polled, 0.99))
    );
    println!(
        "| one pass of the stream's handler: the record read → the receiver answered (20) \
         | {} | {} |",
        ms(percentile(&mut direct, 0.5)),
        ms(percentile(&mut direct, 0.99))
    );
    println!();
    println!("| store calls | writes | reads |");
    println!("|---|---|---|");
    println!(
        "| a key revoked (the change; its event is one Put in the same transaction) | {} | {} |",
        w1 - w0,
        r1 - r0
    );
    println!(
        "| its delivery to one endpoint (queue, claim, result; endpoints, queue, endpoint) \
         | {} | {} |",
        w2 - w1,
        r2 - r1
    );
}
