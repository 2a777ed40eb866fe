//! The upstream provider's REST API v1 (Cherry Servers), as described in
//! `reference/upstream-cherry-api.md`: `Authorization: Bearer <token>`, JSON bodies, bare JSON
//! arrays for lists, `{code, message}` error bodies, 201 on create, 204 on delete, about
//! 4 requests/second per source IP.
//!
//! Transport rules: idempotent reads (GET) are retried with exponential backoff and jitter on
//! 408, 429, 5xx, timeouts and connection failures, honouring `Retry-After` (but an anonymous
//! read of the plans, sent once: [`Client::plans_tried`]); creates, actions and deletes are sent
//! exactly once. Redirects are not followed (a 3xx is an upstream error). The
//! token is sent only in the `Authorization` header and never logged or returned.

mod discovery;
mod servers;

pub use servers::{CreateServer, ServerAction, ServerView, without_credentials};

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::UpstreamConfig;
use crate::secrets::LazySecret;

/// Longest `Retry-After` we wait for inside one request, seconds.
const MAX_RETRY_AFTER_SECS: u64 = 5;

/// A failure talking to the provider. `faces::http` maps it to HTTP: `Status` 400/422 → 400,
/// 404 → 404, 409 → 409, anything else → 502; `RateLimited` → 429 with `Retry-After`;
/// `Timeout` → 504; `Transport` and `Decode` → 502.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The provider answered with an error status and its `{code, message}` body.
    #[error("upstream answered {status}: {message}")]
    Status {
        /// HTTP status the provider sent.
        status: u16,
        /// The body's `code`, if any.
        code: Option<i64>,
        /// The body's `message` (or the status reason when the body had none).
        message: String,
    },
    /// The provider kept answering 429; retry after this many seconds, if it said.
    #[error("upstream rate limit reached")]
    RateLimited {
        /// Seconds from `Retry-After`, if sent.
        retry_after: Option<u64>,
    },
    /// No answer within the configured timeout.
    #[error("upstream did not answer in time")]
    Timeout,
    /// Connection failure or similar.
    #[error("upstream unreachable: {0}")]
    Transport(String),
    /// A success answer whose body is not what the API documents.
    #[error("unexpected upstream answer: {0}")]
    Decode(String),
    /// The provider's token could not be read (its SSM parameter is missing, empty or
    /// unreadable): nothing was sent. 503, as when no token is configured.
    #[error("the provider's token could not be read")]
    NoToken,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: Option<i64>,
    message: Option<String>,
}

/// A client of the provider's API. Cheap to build and share: it sends through the process's one
/// HTTP client ([`crate::outbound`]) and reads its token on the first request.
pub struct Client {
    timeout: Duration,
    base_url: String,
    token: LazySecret,
    team_id: Option<u64>,
    max_retries: u32,
    retry_base: Duration,
    pacer: Option<Pacer>,
}

/// Spaces the requests of one client at least `interval` apart (the refresher's
/// `UPSTREAM_MAX_RPS`): each request waits for the next free slot, in order.
struct Pacer {
    interval: Duration,
    next: tokio::sync::Mutex<tokio::time::Instant>,
}

impl Pacer {
    async fn wait(&self) {
        let mut next = self.next.lock().await;
        tokio::time::sleep_until(*next).await;
        *next = tokio::time::Instant::now() + self.interval;
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `config.base_url` (e.g. `https://api.cherryservers.com/v1`) using `token`
    /// (a [`crate::secrets::Secret`], or a parameter read on first use), each request within
    /// `config.timeout`. Nothing is built or read until the first request.
    pub fn new(config: &UpstreamConfig, token: impl Into<LazySecret>) -> Self {
        Client {
            timeout: config.timeout,
            base_url: config.base_url.clone(),
            token: token.into(),
            team_id: config.team_id,
            max_retries: config.max_retries,
            retry_base: config.retry_base,
            pacer: None,
        }
    }

    /// This client, sending at most `max_rps` requests per second (retries included): the
    /// reconciler's client, so that the refresher alone can never exceed the provider's limit
    /// (about 4 per second per address, reference §1).
    pub fn paced(mut self, max_rps: f64) -> Self {
        self.pacer = Some(Pacer {
            interval: Duration::from_secs_f64(1.0 / max_rps.max(0.001)),
            next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
        });
        self
    }

    /// GET `path` (relative to the base URL, starting with `/`), retried as the module docs say,
    /// and decodes the JSON answer.
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, UpstreamError> {
        self.get_tried(path, true).await
    }

    /// [`Client::get`], retried when `retried`, else sent once.
    async fn get_tried<T: DeserializeOwned>(
        &self,
        path: &str,
        retried: bool,
    ) -> Result<T, UpstreamError> {
        decode(self.get_page(path, retried).await?.0)
    }

    /// GET `path`, retried when `retried` (else sent once), with the listing's `X-Total-Count`
    /// when the answer has one.
    async fn get_page(
        &self,
        path: &str,
        retried: bool,
    ) -> Result<(Value, Option<u64>), UpstreamError> {
        let mut attempt = 0;
        loop {
            let result = self.exchange(Method::GET, path, None).await;
            let retryable = match &result {
                Ok(_) => false,
                Err(UpstreamError::Status { status, .. }) => {
                    matches!(status, 408 | 500 | 502 | 503 | 504)
                }
                Err(UpstreamError::RateLimited { .. })
                | Err(UpstreamError::Timeout)
                | Err(UpstreamError::Transport(_)) => true,
                Err(UpstreamError::Decode(_) | UpstreamError::NoToken) => false,
            };
            if !retryable || !retried || attempt >= self.max_retries {
                return result;
            }
            let delay = match &result {
                Err(UpstreamError::RateLimited {
                    retry_after: Some(secs),
                }) => Duration::from_secs((*secs).min(MAX_RETRY_AFTER_SECS)),
                _ => backoff(self.retry_base, attempt),
            };
            tracing::warn!(
                path,
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                "retrying an upstream read"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// Sends one request, never retried; returns the body of a 2xx answer (`Value::Null` for an
    /// empty one).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, UpstreamError> {
        Ok(self.exchange(method, path, body).await?.0)
    }

    /// [`Client::send`], with the answer's `X-Total-Count` (lists, reference §1).
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(Value, Option<u64>), UpstreamError> {
        if let Some(pacer) = &self.pacer {
            pacer.wait().await;
        }
        let token = self.token.get().await.ok_or(UpstreamError::NoToken)?;
        let http = crate::outbound::client().map_err(UpstreamError::Transport)?;
        let url = format!("{}{}", self.base_url, path);
        let mut request = http
            .request(method, url)
            .timeout(self.timeout)
            .bearer_auth(token.expose())
            .header(header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = crate::outbound::send(request)
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let total = response
            .headers()
            .get("x-total-count")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = response.bytes().await.map_err(transport_error)?;
        if status.is_success() {
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok((Value::Null, total));
            }
            return serde_json::from_slice(&bytes)
                .map(|value| (value, total))
                .map_err(|e| UpstreamError::Decode(format!("{path}: {e}")));
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            return Err(UpstreamError::RateLimited { retry_after });
        }
        let parsed: Option<ErrorBody> = serde_json::from_slice(&bytes).ok();
        Err(UpstreamError::Status {
            status: status.as_u16(),
            code: parsed.as_ref().and_then(|b| b.code),
            message: parsed
                .and_then(|b| b.message)
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned()),
        })
    }
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, UpstreamError> {
    serde_json::from_value(value).map_err(|e| UpstreamError::Decode(e.to_string()))
}

fn transport_error(err: reqwest::Error) -> UpstreamError {
    if err.is_timeout() {
        UpstreamError::Timeout
    } else {
        // Without the URL: it is ours and adds nothing; the token is never part of it.
        UpstreamError::Transport(err.without_url().to_string())
    }
}

/// `base × 2^attempt`, plus up to `base` of random jitter.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1 << attempt.min(8));
    let mut byte = [0u8; 1];
    let jitter = if getrandom::fill(&mut byte).is_ok() {
        base.mul_f64(f64::from(byte[0]) / 255.0)
    } else {
        Duration::ZERO
    };
    exp + jitter
}
