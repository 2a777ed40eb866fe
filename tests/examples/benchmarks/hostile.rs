//! `make hostile`: one honest owner's journey — sign in, make a key, register a webhook, pay for
//! a server, read it, be notified — timed alone, then beside a flood of free owners: worthless
//! paid requests (valid signatures from empty wallets, forged smart-wallet payments), expensive
//! smart-wallet sign-ins from many addresses, SSH keys added and deleted, and flapping webhook
//! endpoints sent test events. Prints the honest journey's p50 and p99 in both runs, their
//! ratio, and what the flood was answered.
//!
//! Through the real handlers (the router table of `make dev`) against moto, the provider
//! simulator and the development chain and facilitator, in one process: the local stack does
//! not enforce Lambda concurrency, so what this run exercises is what the service itself holds
//! — the budgets in the store, the pools and the cheap checks (`docs/capacity.md`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use alloy_signer_local::PrivateKeySigner;
use e2e::receiver::{Mode, Receiver};
use serde_json::json;
use tokio::sync::Mutex;

use crate::figures::{PLAN, ms, percentile};
use crate::harness::{PROJECT, TestEnv, pay, sign, siwe_message};

/// Honest journeys timed in each run (`JOURNEYS`, default 10).
fn journeys() -> usize {
    std::env::var("JOURNEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}
/// Free owners in the flood (`STRANGERS`, default 8), sharing [`flood_rate`] between them.
fn strangers() -> usize {
    std::env::var("STRANGERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8)
}
const DOMAIN: &str = "127.0.0.1:9000";
const URI: &str = "http://127.0.0.1:9000";

/// A session for `signer` (an EOA: its signature is recovered offline).
async fn session(env: &TestEnv, signer: &PrivateKeySigner) -> String {
    let nonce = env.req("GET", "/api/auth/nonce").send().await.json()["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let message = siwe_message(signer, DOMAIN, URI, 84532, &nonce, |_| {});
    let res = env
        .req("POST", "/api/auth/verify")
        .json(json!({"message": message, "signature": sign(signer, &message)}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["token"].as_str().unwrap().to_owned()
}

/// A new API key of the session's owner, with every scope.
async fn new_key(env: &TestEnv, token: &str, name: &str) -> String {
    let res = env
        .req("POST", "/api/keys/generate")
        .bearer(token)
        .json(json!({"name": name, "scopes": domain::policy::Scope::ALL.map(|s| s.as_str())}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.json()["key"].as_str().unwrap().to_owned()
}

/// One honest journey, start to end: its time.
async fn journey(env: &TestEnv, run: usize) -> Duration {
    let started = Instant::now();
    let owner = PrivateKeySigner::random();
    let token = session(env, &owner).await;
    let t_session = started.elapsed();
    let key = new_key(env, &token, "honest").await;
    let receiver = Receiver::start().await;
    env.register_webhook(&key, &receiver.url, None).await;
    let t_hooked = started.elapsed();
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": format!("honest-{run}")});
    let offer = env
        .req("POST", &path)
        .key(&key)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let t_offer = started.elapsed();
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let res = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let t_paid = started.elapsed();
    let sandbox = res.json()["sandboxId"].as_str().unwrap().to_owned();
    let read = env
        .req("GET", &format!("/api/sandboxes/{sandbox}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(read.status, 200, "{}", read.body);
    // Notified: the stream's events queued and delivered to its endpoint (by [`pipeline`]).
    while receiver.accepted().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never notified"
        );
    }
    if std::env::var_os("STEPS").is_some() {
        let end = started.elapsed();
        eprintln!(
            "steps: session {} key and webhook {} offer {} paid {} end {}",
            ms(t_session),
            ms(t_hooked),
            ms(t_offer),
            ms(t_paid),
            ms(end)
        );
    }
    started.elapsed()
}

/// Local consumers of the delivery queue. Each one's pass runs its batches side by side (as
/// the mapping scales out over message groups; the local stack enforces no Lambda
/// concurrency), so two keep every delivery moving.
const DELIVERY_CONSUMERS: usize = 2;

/// How long a delivery consumer waits before it looks again. AWS's pollers long-poll; the
/// local consumers short-poll a single-threaded emulator, and six of them every 50 ms were most
/// of moto's requests in both runs (120 receives a second, each through botocore's serializer).
const IDLE_POLL: Duration = Duration::from_millis(250);

/// How often the table's stream is read: Lambda polls a DynamoDB stream's shard four times a
/// second.
const STREAM_POLL: Duration = Duration::from_millis(250);

/// The event pipeline, as Lambda runs it beside the API, until `stop`: the table's stream into
/// the events function every [`STREAM_POLL`], and the delivery queue into
/// [`DELIVERY_CONSUMERS`] consumers (staggered, each a pass every [`IDLE_POLL`]).
async fn pipeline(env: &TestEnv, stop: &AtomicBool) {
    let stream = async {
        while !stop.load(Ordering::Relaxed) {
            env.stream().await;
            tokio::time::sleep(STREAM_POLL).await;
        }
    };
    let consumer = |n: u32| async move {
        tokio::time::sleep(IDLE_POLL * n / DELIVERY_CONSUMERS as u32).await;
        while !stop.load(Ordering::Relaxed) {
            env.deliver().await;
            tokio::time::sleep(IDLE_POLL).await;
        }
    };
    let consumers = (0..DELIVERY_CONSUMERS as u32).map(consumer);
    tokio::join!(stream, futures::future::join_all(consumers));
}

/// What the flood was answered, by kind and status.
type Tally = Arc<Mutex<BTreeMap<(&'static str, u16), usize>>>;

async fn count(tally: &Tally, kind: &'static str, status: u16) {
    *tally.lock().await.entry((kind, status)).or_default() += 1;
}

/// The kinds of request a stranger sends (`FLOOD`: `paid,sign-in,ssh,webhook`, the default:
/// all) and how many requests a round of them is.
fn flood_kinds() -> (Vec<String>, usize) {
    let kinds: Vec<String> = std::env::var("FLOOD")
        .unwrap_or_else(|_| "paid,sign-in,ssh,webhook".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let per_round = kinds
        .iter()
        .map(|k| match k.as_str() {
            "paid" | "sign-in" | "ssh" => 2,
            _ => 1,
        })
        .sum();
    (kinds, per_round)
}

/// A stranger: its key, its flapping endpoint and what its rounds send.
struct Stranger {
    n: usize,
    key: String,
    flapping: Arc<Receiver>,
    test: String,
    offer: String,
    kinds: Vec<String>,
    path: String,
}

impl Stranger {
    /// A free owner signed in, with a key and an endpoint of its own.
    async fn new(env: &TestEnv, n: usize) -> Stranger {
        let owner = PrivateKeySigner::random();
        let token = session(env, &owner).await;
        let key = new_key(env, &token, "stranger").await;
        let flapping = Receiver::start().await;
        let endpoint = env.register_webhook(&key, &flapping.url, None).await;
        let test = format!("/api/webhooks/{}/test", endpoint["id"].as_str().unwrap());
        let path = format!("/api/cloud/servers/{PROJECT}");
        let offer = env
            .req("POST", &path)
            .key(&key)
            .json(json!({"plan": PLAN, "region": "LT-Siauliai"}))
            .send()
            .await;
        let offer = offer.header("payment-required").unwrap().to_owned();
        let kinds = flood_kinds().0;
        Stranger {
            n,
            key,
            flapping,
            test,
            offer,
            kinds,
            path,
        }
    }

    fn sends(&self, kind: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
    }

    /// One round: worthless paid requests (an empty wallet's valid payment, a smart-wallet
    /// payment no account signed), a smart-wallet sign-in no account made, an SSH key added and
    /// deleted, a test event to its flapping endpoint.
    async fn round(&self, env: &TestEnv, round: usize, tally: &Tally) {
        let ip = format!("198.51.{}.{}", 100 + self.n % 100, round % 250);
        let body = json!({"plan": PLAN, "region": "LT-Siauliai"});
        if self.sends("paid") {
            // A valid signature from a wallet with nothing in it.
            let empty = PrivateKeySigner::random();
            let chain = env.facilitator.chain();
            chain.set_balance(&format!("{:#x}", empty.address()), 0);
            let payment = pay(&empty, &self.offer, 2);
            let res = env
                .req("POST", &self.path)
                .key(&self.key)
                .source_ip(&ip)
                .header(payment.0, &payment.1)
                .json(body.clone())
                .send()
                .await;
            count(tally, "paid: empty wallet", res.status).await;
            // A smart-wallet payment nobody signed.
            let forged = {
                let mut value: serde_json::Value = serde_json::from_slice(
                    &base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        &pay(&PrivateKeySigner::random(), &self.offer, 2).1,
                    )
                    .unwrap(),
                )
                .unwrap();
                value["payload"]["signature"] = json!(format!("0x{}", "ab".repeat(97)));
                domain::x402::encode_header(&value)
            };
            let res = env
                .req("POST", &self.path)
                .key(&self.key)
                .source_ip(&ip)
                .header("payment-signature", &forged)
                .json(body)
                .send()
                .await;
            count(tally, "paid: forged smart wallet", res.status).await;
        }
        if self.sends("sign-in") {
            // A smart-wallet sign-in no account made.
            let nonce = env
                .req("GET", "/api/auth/nonce")
                .source_ip(&ip)
                .send()
                .await;
            if let Some(nonce) = nonce.json()["nonce"].as_str() {
                let signer = PrivateKeySigner::random();
                let message = siwe_message(&signer, DOMAIN, URI, 84532, nonce, |_| {});
                let signature = format!("0x{}", "cd".repeat(200));
                let res = env
                    .req("POST", "/api/auth/verify")
                    .source_ip(&ip)
                    .json(json!({"message": message, "signature": signature}))
                    .send()
                    .await;
                count(tally, "sign-in: smart wallet", res.status).await;
            }
        }
        if self.sends("ssh") {
            // An SSH key added and deleted.
            let ssh = e2e::shell::public(&e2e::shell::key_pair());
            let added = env
                .req("POST", "/api/ssh-keys")
                .key(&self.key)
                .json(json!({"publicKey": ssh}))
                .send()
                .await;
            count(tally, "ssh key: add", added.status).await;
            if let Some(id) = added.json()["id"].as_str() {
                let gone = env
                    .req("DELETE", &format!("/api/ssh-keys/{id}"))
                    .key(&self.key)
                    .send()
                    .await;
                count(tally, "ssh key: delete", gone.status).await;
            }
        }
        if self.sends("webhook") {
            // Its endpoint flaps; a test event is queued to it.
            let mode = if round.is_multiple_of(2) {
                Mode::Accept
            } else {
                Mode::Fail
            };
            self.flapping.set(mode);
            let res = env.req("POST", &self.test).key(&self.key).send().await;
            count(tally, "webhook test", res.status).await;
        }
    }
}

/// The flood's rate, requests a second from every stranger together (`FLOOD_RATE`, default
/// 20): an open loop, each stranger starting a round on its own clock whether or not its last
/// one was answered (at most [`ROUNDS_IN_FLIGHT`] at once), so that a faster service does not
/// draw a heavier flood and runs compare at the same load.
fn flood_rate() -> f64 {
    std::env::var("FLOOD_RATE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20.0)
}

/// Rounds one stranger has under way at most.
const ROUNDS_IN_FLIGHT: usize = 8;

/// A stranger's rounds until `stop`, one every `period`, side by side.
async fn stranger(env: &TestEnv, n: usize, period: Duration, stop: &AtomicBool, tally: &Tally) {
    use futures::StreamExt;
    let me = Stranger::new(env, n).await;
    // The strangers' clocks apart, so the flood is steady.
    tokio::time::sleep(period.mul_f64(n as f64 / strangers() as f64)).await;
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds = futures::stream::FuturesUnordered::new();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            _ = ticks.tick(), if rounds.len() < ROUNDS_IN_FLIGHT => {
                round += 1;
                rounds.push(me.round(env, round, tally));
            }
            Some(()) = rounds.next() => {}
        }
    }
    while rounds.next().await.is_some() {}
}

#[tokio::main]
pub async fn main() {
    let env = TestEnv::new().await;
    let done = AtomicBool::new(false);
    tokio::join!(measure(&env, &done), pipeline(&env, &done));
}

/// Both runs, then the figures; sets `done` at the end.
async fn measure(env: &TestEnv, done: &AtomicBool) {
    // Warm up (the first requests build clients and caches).
    journey(env, 0).await;
    let (journeys, strangers) = (journeys(), strangers());
    let mut alone = Vec::new();
    for run in 0..journeys {
        alone.push(journey(env, 1 + run).await);
        eprintln!("alone {run}: {}", ms(alone[run]));
    }
    let stop = AtomicBool::new(false);
    let tally: Tally = Arc::default();
    let per_round = flood_kinds().1 as f64;
    let period = Duration::from_secs_f64(per_round * strangers as f64 / flood_rate());
    let flood = (0..strangers).map(|n| stranger(env, n, period, &stop, &tally));
    let flood = futures::future::join_all(flood);
    let honest = async {
        // The flood first takes hold.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut loaded = Vec::new();
        for run in 0..journeys {
            loaded.push(journey(env, 100 + run).await);
            eprintln!("beside the flood {run}: {}", ms(loaded[run]));
        }
        stop.store(true, Ordering::Relaxed);
        loaded
    };
    let started = Instant::now();
    let (loaded, _) = tokio::join!(honest, flood);
    let flood_seconds = started.elapsed().as_secs_f64();
    println!("\n## An honest owner beside a flood of free owners ({journeys} journeys each)\n");
    println!("| honest journey: sign in, key, webhook, pay, read, notified | p50 | p99 |");
    println!("|---|---|---|");
    for (name, times) in [("alone", &alone), ("beside the flood", &loaded)] {
        println!(
            "| {name} | {} | {} |",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99))
        );
    }
    let ratio = |p| percentile(&loaded, p).as_secs_f64() / percentile(&alone, p).as_secs_f64();
    println!(
        "\nBeside the flood: p50 {:.2}×, p99 {:.2}× the journey alone.",
        ratio(0.5),
        ratio(0.99)
    );
    let tally = tally.lock().await;
    let total: usize = tally.values().sum();
    println!(
        "\nThe flood ({strangers} free owners, {total} requests in {flood_seconds:.0} s: {:.1} a \
         second, asked {:.1}) was answered:\n",
        total as f64 / flood_seconds,
        flood_rate()
    );
    println!("| request | status | count |");
    println!("|---|---|---|");
    for ((kind, status), n) in tally.iter() {
        println!("| {kind} | {status} | {n} |");
    }
    let facilitator = &env.facilitator;
    println!(
        "\nWhat reached the facilitator: {} verifies, {} settles (the honest journeys' {}).",
        facilitator.verifies(),
        facilitator.settles(),
        2 * journeys + 1
    );
    println!(
        "SSH keys written at the provider: {}.",
        env.sim.calls("POST /ssh-keys")
    );
    done.store(true, Ordering::Relaxed);
}
