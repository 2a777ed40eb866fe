//! What more than one benchmark uses: percentiles and milliseconds as printed, a funded payer's
//! payment of a 402 on the real rails, and the paid path's floor (a settle alone, a create alone).

use std::time::{Duration, Instant};

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use domain::x402::facilitator::{Facilitator, FacilitatorAuth, PaymentRequest, Settlement};
use serde_json::Value;

use crate::harness::{PROJECT, TestEnv, pay};
use crate::rails::Rails;

/// The plan every paid benchmark buys.
pub const PLAN: &str = "B1-1-1gb-20s-shared";

/// The `p` percentile (0.5: the median) of `times`, the nearest rank rounded.
pub fn percentile(times: &[Duration], p: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `d` in whole milliseconds, as printed.
pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// An x402 header's JSON (base64).
fn decode(header: &str) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    serde_json::from_slice(&engine.decode(header).unwrap()).unwrap()
}

/// A funded payer's v2 payment of the 402 `offer`: the header, and the payload and
/// requirements as the facilitator is sent them.
pub async fn payment(rails: &Rails, offer: &str) -> ((&'static str, String), Value, Value) {
    let required = decode(offer);
    let amount: u128 = required["accepts"][0]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let payer = PrivateKeySigner::random();
    rails.fund(payer.address(), amount).await;
    let header = pay(&payer, offer, 2);
    let payload = decode(&header.1);
    (header, payload, required["accepts"][0].clone())
}

/// x402's facilitator on `rails`, called straight (the floor's settle).
pub fn facilitator(rails: &Rails) -> Facilitator {
    Facilitator::new(
        &rails.facilitator_url,
        FacilitatorAuth::None,
        Duration::from_secs(15),
    )
}

/// The floor's settle: a fresh payment of `offer` settled straight through `facilitator`; how
/// long the settle took. Panics unless it settled.
pub async fn settle_alone(rails: &Rails, facilitator: &Facilitator, offer: &str) -> Duration {
    let (_, payload, requirements) = payment(rails, offer).await;
    let started = Instant::now();
    let settled = facilitator
        .settle(&PaymentRequest {
            version: 2,
            payload: &payload,
            requirements: &requirements,
        })
        .await;
    let took = started.elapsed();
    assert!(matches!(settled, Ok(Settlement::Settled(_))), "{settled:?}");
    took
}

/// The floor's create: a server of [`PLAN`] named `hostname` created straight at the provider
/// simulator of `env`; how long the create took.
pub async fn create_alone(env: &TestEnv, hostname: String) -> Duration {
    let create = domain::upstream::CreateServer {
        plan: PLAN.into(),
        region: "LT-Siauliai".into(),
        image: None,
        hostname: Some(hostname),
        ssh_keys: Vec::new(),
        user_data: None,
        tags: Default::default(),
        spot_market: false,
        cycle: "hourly".into(),
    };
    let upstream = env.state.upstream().expect("the simulator");
    let started = Instant::now();
    upstream
        .create_server(PROJECT, &create)
        .await
        .expect("a create");
    started.elapsed()
}
