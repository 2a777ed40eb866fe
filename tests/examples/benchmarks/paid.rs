//! `make bench` (the real-rails issue): what a paid provision costs on the real rails — anvil
//! (2 s blocks) with Circle's USDC, x402's own facilitator — from the paying request to its 201,
//! p50 and p99 over [`RUNS`] paid provisions through the real handler, beside the floor measured
//! in the same run, interleaved: the facilitator's settle alone (a fresh payment of the same
//! amount posted straight to `/settle`) plus the provider's create alone (the same body straight
//! to the simulator). Against moto and the rails `make bench` starts.
//!
//! Where the paid request's time goes: every call it makes to the node, the facilitator and
//! the provider is timed from its send to its answer (the outbound client's gate,
//! `outbound::install_gate`), so is every call to the store (the test store's connector), and
//! the service's own work is what is left of the request's time.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::figures::{PLAN, create_alone, facilitator, ms, payment, percentile, settle_alone};
use crate::harness::{ALICE, Options, PROJECT, TestEnv};
use crate::rails::Rails;

/// Paid provisions measured (and as many floors).
const RUNS: usize = 50;

/// Where the outbound calls went, by whom they are made.
const PEERS: [&str; 3] = ["node", "facilitator", "provider"];

/// The outbound calls made while recording (`Some`): to which peer, and how long each took.
static CALLS: Mutex<Option<Vec<(&str, Duration)>>> = Mutex::new(None);

/// One outbound call being timed: recorded when its answer is in (the gate drops it).
struct Timed {
    peer: &'static str,
    started: Instant,
}

impl Drop for Timed {
    fn drop(&mut self) {
        if let Some(calls) = CALLS.lock().unwrap().as_mut() {
            calls.push((self.peer, self.started.elapsed()));
        }
    }
}

/// Times every outbound call of this process by its peer (of [`PEERS`], told by its URL).
fn time_outbound_calls(rails: &Rails) {
    let (node, facilitator) = (rails.rpc_url.clone(), rails.facilitator_url.clone());
    domain::outbound::install_gate(Box::new(move |request| {
        let url = request.url().as_str();
        let peer = if url.starts_with(&node) {
            PEERS[0]
        } else if url.starts_with(&facilitator) {
            PEERS[1]
        } else {
            PEERS[2]
        };
        let timed = Box::new(Timed {
            peer,
            started: Instant::now(),
        }) as Box<dyn Any + Send>;
        Box::pin(async move { timed })
    }));
}

#[tokio::main]
pub async fn main() {
    let rails = Rails::from_env();
    let env = TestEnv::with(Options {
        real_rails: true,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let facilitator = facilitator(&rails);
    time_outbound_calls(&rails);
    let path = format!("/api/cloud/servers/{PROJECT}");
    let (mut paid, mut settles, mut creates) = (Vec::new(), Vec::new(), Vec::new());
    // Per paid request: its time with each peer, and the calls it made to each.
    let mut parts: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut calls: BTreeMap<&str, usize> = BTreeMap::new();
    for run in 0..RUNS {
        let body =
            json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": format!("bench-{run}")});
        let offer = env
            .req("POST", &path)
            .key(&key)
            .json(body.clone())
            .send()
            .await;
        let offer = offer.header("payment-required").unwrap().to_owned();
        // The paid request, from its payment to its 201.
        let (header, _, _) = payment(&rails, &offer).await;
        *CALLS.lock().unwrap() = Some(Vec::new());
        let store_before = env.faults.answered();
        let started = Instant::now();
        let res = env
            .req("POST", &path)
            .key(&key)
            .header(header.0, &header.1)
            .json(body.clone())
            .send()
            .await;
        let took = started.elapsed();
        paid.push(took);
        assert_eq!(res.status, 201, "{}", res.body);
        let made = CALLS.lock().unwrap().take().unwrap_or_default();
        let store = env.faults.answered();
        let mut outside = store.1 - store_before.1;
        *calls.entry("store").or_default() += store.0 - store_before.0;
        parts.entry("store").or_default().push(outside);
        for peer in PEERS {
            let with: Vec<Duration> = made.iter().filter(|c| c.0 == peer).map(|c| c.1).collect();
            *calls.entry(peer).or_default() += with.len();
            outside += with.iter().sum::<Duration>();
            parts.entry(peer).or_default().push(with.iter().sum());
        }
        parts
            .entry("own")
            .or_default()
            .push(took.saturating_sub(outside));
        // The floor: a settle alone, then a create alone.
        settles.push(settle_alone(&rails, &facilitator, &offer).await);
        creates.push(create_alone(&env, format!("floor-{run}")).await);
    }
    let floor: Vec<Duration> = settles.iter().zip(&creates).map(|(s, c)| *s + *c).collect();
    let overhead = percentile(&paid, 0.5).saturating_sub(percentile(&floor, 0.5));
    println!("\n## A paid provision on the real rails ({RUNS} runs, 2 s blocks)\n");
    println!("| | p50 | p99 |");
    println!("|---|---|---|");
    for (name, times) in [
        ("paying request → 201 (through the service)", &paid),
        ("floor: settle alone + create alone", &floor),
        (
            "  settle alone (x402's facilitator, waits for the block)",
            &settles,
        ),
        ("  create alone (the provider simulator)", &creates),
    ] {
        println!(
            "| {name} | {} | {} |",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99))
        );
    }
    println!("\nWhere the paying request's time goes (each part's own p50 and p99):\n");
    println!("| | calls per request | p50 | p99 |");
    println!("|---|---|---|---|");
    for (part, name) in PEERS.iter().chain(&["store"]).zip([
        "the node (standing check, receipt)",
        "x402's facilitator (verify, settle: waits for the block)",
        "the provider (create)",
        "the store (moto's DynamoDB)",
    ]) {
        let per = calls[part] as f64 / RUNS as f64;
        let times = &parts[part];
        let (p50, p99) = (percentile(times, 0.5), percentile(times, 0.99));
        println!("| {name} | {per:.1} | {} | {} |", ms(p50), ms(p99));
    }
    let own = &parts["own"];
    println!(
        "| the rest: the service's own work | | {} | {} |",
        ms(percentile(own, 0.5)),
        ms(percentile(own, 0.99))
    );
    println!(
        "\nOverhead at p50: {} ({:.2}× the floor)",
        ms(overhead),
        percentile(&paid, 0.5).as_secs_f64() / percentile(&floor, 0.5).as_secs_f64()
    );
}
