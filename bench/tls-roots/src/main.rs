//! `make bench`: what each TLS root choice costs the first outbound call of a warm instance —
//! the outbound client ([`domain::outbound`]) built `BUILDS` times (default 50) with roots
//! compiled in (`webpki-roots`) and with the platform verifier (which reads and parses the
//! system store: `SSL_CERT_FILE`, or the distribution's bundle), in a release binary, medians.

use std::time::{Duration, Instant};

use domain::outbound::{Roots, build};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(roots: Roots, builds: usize) -> Duration {
    median(
        (0..builds)
            .map(|_| {
                let started = Instant::now();
                let client = build(roots).expect("the client builds");
                let elapsed = started.elapsed();
                drop(client);
                elapsed
            })
            .collect(),
    )
}

fn main() {
    let builds = std::env::var("BUILDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    // Interleaved, so that the machine's drift touches both alike.
    let mut compiled = Vec::new();
    let mut platform = Vec::new();
    for _ in 0..5 {
        compiled.push(time(Roots::CompiledIn, builds / 5));
        platform.push(time(Roots::Platform, builds / 5));
    }
    let (compiled, platform) = (median(compiled), median(platform));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "TLS roots, one outbound client built ({builds} builds each, medians): compiled in \
         (webpki-root-certs) {:.3} ms; platform verifier (system store) {:.3} ms; {:.0}× — kept: {}",
        ms(compiled),
        ms(platform),
        platform.as_secs_f64() / compiled.as_secs_f64(),
        if compiled <= platform {
            "compiled in"
        } else {
            "platform verifier"
        }
    );
}
