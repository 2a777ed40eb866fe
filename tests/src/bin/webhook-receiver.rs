//! A webhook receiver for `make dev` (`docs/walkthroughs.md`, "Events pushed to a webhook"):
//! listens on 127.0.0.1, verifies every delivery's `webhook-signature` with the endpoint's secret
//! (the `standardwebhooks` crate, as the tests' receiver does) and prints one line per event;
//! answers 204, or 500 with `--fail` (to watch the retries).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "webhook-receiver",
    about = "Prints and verifies webhook deliveries"
)]
struct Args {
    /// Address to listen on; register `http://<this>/hook`.
    #[arg(long, default_value = "127.0.0.1:4030")]
    listen: String,
    /// The endpoint's `whsec_…` secret (printed once when it was registered).
    #[arg(long, env = "WEBHOOK_SECRET")]
    secret: Option<String>,
    /// Answer 500 to every delivery.
    #[arg(long)]
    fail: bool,
}

struct Receiver {
    secret: Option<standardwebhooks::Webhook>,
    fail: bool,
}

async fn hook(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let verified = match &receiver.secret {
        Some(signer) => match signer.verify(&body, &headers) {
            Ok(()) => "verified".to_owned(),
            Err(err) => format!("NOT VERIFIED ({err})"),
        },
        None => "unchecked (no --secret)".to_owned(),
    };
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    println!(
        "{} {} {}#{} {} {}",
        event["occurredAt"].as_str().unwrap_or("?"),
        event["type"].as_str().unwrap_or("?"),
        event["subject"]["id"].as_str().unwrap_or("?"),
        event["sequence"],
        verified,
        event["data"]
    );
    if receiver.fail {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let secret = args
        .secret
        .as_deref()
        .map(|s| standardwebhooks::Webhook::new(s).expect("a whsec_ secret"));
    let receiver = Arc::new(Receiver {
        secret,
        fail: args.fail,
    });
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("webhook receiver on http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(receiver);
    axum::serve(listener, app).await
}
