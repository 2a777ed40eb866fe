//! A webhook receiver on 127.0.0.1: the test double of an agent's endpoint, which verifies
//! every delivery's `webhook-signature` with the `standardwebhooks` crate (the Standard
//! Webhooks spec the sender follows) and can fail or hang as a real receiver does. The
//! end-to-end tests and `make bench` use it; `webhook-receiver` is its command-line sibling.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// What the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// 204.
    Accept = 0,
    /// 500.
    Fail = 1,
    /// Nothing for 12 s (past the 10 s timeout), then 204.
    Hang = 2,
    /// 500 after a second (an attempt that is under way for a while).
    Slow = 3,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// The body, as JSON.
    pub event: Value,
    /// `webhook-id`.
    pub id: String,
    /// For each secret the receiver knows, whether it verified the request.
    pub verified: Vec<bool>,
    /// What the receiver answered.
    pub accepted: bool,
    /// When it came (`make bench` times deliveries by it).
    pub at: Instant,
}

/// A webhook receiver on 127.0.0.1 (a test double of an agent's endpoint) that verifies every
/// request with the `standardwebhooks` crate against the secrets it is given.
pub struct Receiver {
    /// `http://127.0.0.1:<port>/hook`.
    pub url: String,
    mode: AtomicU8,
    fail_next: std::sync::atomic::AtomicUsize,
    secrets: Mutex<Vec<String>>,
    got: Mutex<Vec<Received>>,
}

impl Receiver {
    /// A receiver listening, accepting.
    pub async fn start() -> Arc<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Arc::new(Receiver {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            mode: AtomicU8::new(Mode::Accept as u8),
            fail_next: Default::default(),
            secrets: Mutex::default(),
            got: Mutex::default(),
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    /// From now on, answer as `mode` says.
    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Answer 500 to the next `count` requests, whatever the mode (a receiver failing its first
    /// deliveries, then recovering).
    pub fn fail_next(&self, count: usize) {
        self.fail_next.store(count, Ordering::SeqCst);
    }

    /// Verify with `secret` too (its index in [`Received::verified`] is the order given).
    pub fn trust(&self, secret: &str) {
        self.secrets.lock().unwrap().push(secret.to_owned());
    }

    /// Every request so far.
    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The events it accepted, in the order they came.
    pub fn accepted(&self) -> Vec<Value> {
        self.got()
            .into_iter()
            .filter(|r| r.accepted)
            .map(|r| r.event)
            .collect()
    }
}

async fn hook(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let failing = receiver
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let mode = match receiver.mode.load(Ordering::SeqCst) {
        _ if failing => Mode::Fail as u8,
        mode => mode,
    };
    let secrets = receiver.secrets.lock().unwrap().clone();
    let verified = secrets
        .iter()
        .map(|secret| {
            let signer = standardwebhooks::Webhook::new(secret).unwrap();
            signer.verify(&body, &headers).is_ok()
        })
        .collect();
    let received = Received {
        event: serde_json::from_slice(&body).unwrap_or(Value::Null),
        id: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        verified,
        accepted: mode != Mode::Fail as u8,
        at: Instant::now(),
    };
    if mode == Mode::Hang as u8 {
        tokio::time::sleep(Duration::from_secs(12)).await;
        // The sender gave up: what it did not wait for does not count.
        receiver.got.lock().unwrap().push(Received {
            accepted: false,
            ..received
        });
        return StatusCode::NO_CONTENT;
    }
    if mode == Mode::Slow as u8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        receiver.got.lock().unwrap().push(Received {
            accepted: false,
            ..received
        });
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    receiver.got.lock().unwrap().push(received);
    if mode == Mode::Fail as u8 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}
