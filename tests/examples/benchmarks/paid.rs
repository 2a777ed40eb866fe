//! `make bench` (the real-rails issue): what a paid provision costs on the real rails — anvil
//! (2 s blocks) with Circle's USDC, x402's own facilitator — from the paying request to its 201,
//! p50 and p99 over [`RUNS`] paid provisions through the real handler, beside the floor measured
//! in the same run, interleaved: the facilitator's settle alone (a fresh payment of the same
//! amount posted straight to `/settle`) plus the provider's create alone (the same body straight
//! to the simulator). Against moto and the rails `make bench` starts.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::figures::{PLAN, create_alone, facilitator, ms, payment, percentile, settle_alone};
use crate::harness::{ALICE, Options, PROJECT, TestEnv};
use crate::rails::Rails;

/// Paid provisions measured (and as many floors).
const RUNS: usize = 50;

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
    let path = format!("/api/cloud/servers/{PROJECT}");
    let (mut paid, mut settles, mut creates) = (Vec::new(), Vec::new(), Vec::new());
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
        let started = Instant::now();
        let res = env
            .req("POST", &path)
            .key(&key)
            .header(header.0, &header.1)
            .json(body.clone())
            .send()
            .await;
        paid.push(started.elapsed());
        assert_eq!(res.status, 201, "{}", res.body);
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
    println!(
        "\nOverhead at p50: {} ({:.2}× the floor)",
        ms(overhead),
        percentile(&paid, 0.5).as_secs_f64() / percentile(&floor, 0.5).as_secs_f64()
    );
}
