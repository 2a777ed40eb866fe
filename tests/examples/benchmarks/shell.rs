//! `make bench` (issue 33): from the paying request to a shell, p50 over [`RUNS`] paid
//! provisions on the real rails (anvil with Circle's USDC, x402's own facilitator), each with a
//! fresh SSH key given as its public key line: the paid request to its 201, then the refresher
//! reading the server and its SSH (one pass, run at once: the schedule's period is left out —
//! `RECONCILE_SECONDS` on `make dev`, a minute in AWS), then a `russh` login running `hostname`.
//! Beside it, measured in the same run, the floor: the facilitator's settle alone, the
//! provider's create alone and a login alone. Also the provider calls a provisioning makes with
//! a new raw key and with a key already added. Against moto and the rails `make bench` starts.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::figures::{PLAN, create_alone, facilitator, ms, payment, percentile, settle_alone};
use crate::harness::{ALICE, Options, PROJECT, TestEnv};
use crate::rails::Rails;
use e2e::shell::{key_pair, login, public};
use russh::keys::{HashAlg, PrivateKey};

/// Paid provisions measured (and as many floors).
const RUNS: usize = 20;

/// The times of one run: paying request → 201, 201 → ready, the login, and the provider calls
/// of the provisioning (its 402 and its paid request).
struct Run {
    paid: Duration,
    ready: Duration,
    login: Duration,
    calls: Vec<String>,
    offer: String,
}

/// One paid provision with `ssh` — named by `id` when it was added before, else given as its
/// public key line — through to a login with it.
async fn run(
    env: &TestEnv,
    rails: &Rails,
    key: &str,
    n: usize,
    ssh: &PrivateKey,
    id: Option<&str>,
) -> Run {
    let path = format!("/api/cloud/servers/{PROJECT}");
    let named = id.map_or_else(|| json!(public(ssh)), |id| json!(id));
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": format!("shell-{n}"),
                      "sshKeys": [named]});
    let before = env.sim.requests().len();
    let offer = env
        .req("POST", &path)
        .key(key)
        .json(body.clone())
        .send()
        .await;
    let offer = offer.header("payment-required").unwrap().to_owned();
    let (header, _, _) = payment(rails, &offer).await;
    let started = Instant::now();
    let res = env
        .req("POST", &path)
        .key(key)
        .header(header.0, &header.1)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let paid = started.elapsed();
    let calls = env.sim.requests()[before..].to_vec();
    let sandbox = res.json()["sandboxId"].as_str().unwrap().to_owned();
    let view = loop {
        let view = env.sandbox(key, &sandbox).await;
        if view["stage"] == "ready" {
            break view;
        }
        env.pass().await;
    };
    let ready = started.elapsed() - paid;
    let at = Instant::now();
    let out = login(&view["access"], ssh).await;
    let login_time = at.elapsed();
    assert_eq!(out.as_deref(), Ok(format!("shell-{n}\n").as_str()));
    Run {
        paid,
        ready,
        login: login_time,
        calls,
        offer,
    }
}

#[tokio::main]
pub async fn main() {
    let rails = Rails::from_env();
    let env = TestEnv::with(Options {
        real_rails: true,
        server_ssh: true,
        deploy_seconds: 0.0,
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let facilitator = facilitator(&rails);
    let (mut totals, mut paid, mut ready, mut logins) = (vec![], vec![], vec![], vec![]);
    let mut floors = Vec::new();
    let mut new_key_calls = Vec::new();
    let first = key_pair();
    for n in 0..RUNS {
        let fresh = key_pair();
        let ssh = if n == 0 { &first } else { &fresh };
        let measured = run(&env, &rails, &key, n, ssh, None).await;
        totals.push(measured.paid + measured.ready + measured.login);
        paid.push(measured.paid);
        ready.push(measured.ready);
        logins.push(measured.login);
        new_key_calls = measured.calls.clone();
        // The floor: a settle alone, a create alone, a login alone.
        let settle = settle_alone(&rails, &facilitator, &measured.offer).await;
        let create = create_alone(&env, format!("floor-{n}")).await;
        floors.push(settle + create + measured.login);
    }
    // The first run's key, added then, named by its id.
    let listed = env
        .req("GET", "/api/ssh-keys")
        .query("limit=100")
        .key(&key)
        .send()
        .await
        .json();
    let fingerprint = first.public_key().fingerprint(HashAlg::Sha256).to_string();
    let added = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["fingerprint"] == fingerprint.as_str())
        .unwrap();
    let known = run(&env, &rails, &key, RUNS, &first, added["id"].as_str()).await;
    let ssh_calls = |calls: &[String]| calls.iter().filter(|c| c.contains("/ssh-keys")).count();
    println!("\n## From the paying request to a shell ({RUNS} runs, real rails, 2 s blocks)\n");
    println!("| | p50 |");
    println!("|---|---|");
    for (name, times) in [
        (
            "paying request → SSH login done (through the service)",
            &totals,
        ),
        ("  paying request → 201", &paid),
        (
            "  201 → ready (one refresher pass: read, SSH key exchange)",
            &ready,
        ),
        ("  login and `hostname` (russh)", &logins),
        ("floor: settle alone + create alone + login alone", &floors),
    ] {
        println!("| {name} | {} |", ms(percentile(times, 0.5)));
    }
    println!(
        "\nAt p50: {:.2}× the floor",
        percentile(&totals, 0.5).as_secs_f64() / percentile(&floors, 0.5).as_secs_f64()
    );
    println!(
        "\nProvider calls per provisioning (402 + paid request): new raw key {} ({} to /ssh-keys: \
         {:?}), a key already added {} ({} to /ssh-keys)",
        new_key_calls.len(),
        ssh_calls(&new_key_calls),
        new_key_calls,
        known.calls.len(),
        ssh_calls(&known.calls)
    );
}
