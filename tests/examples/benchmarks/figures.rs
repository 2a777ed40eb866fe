//! What more than one benchmark uses: percentiles and milliseconds as printed, and a funded
//! payer's payment of a 402 on the real rails.

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use serde_json::Value;

use crate::harness::pay;
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
