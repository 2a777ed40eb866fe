//! A fault hook on the real DynamoDB API (moto), as an SDK interceptor and the HTTP client's
//! connector: the chosen call — matched by its operation (`X-Amz-Target`) and a fragment of its
//! JSON body — is either refused before it is sent (throttled: not applied), sent and its reply
//! lost (applied, and the caller sees an error; the store's identical retry then meets its own
//! write), answered as DynamoDB answers a call that met a concurrent transaction (not applied),
//! or held until the test lets it go. Every `ClientRequestToken` is held to DynamoDB's
//! idempotency rule, which moto does not check. Nothing of DynamoDB itself is mocked.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::http::HttpRequest;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{
    ConfigBag, HttpClient, Intercept, RuntimeComponents, SharedHttpClient,
};
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use e2e::sched::Scheduler;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What happens to a matched call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Refused before sending, as a throttled request the SDK gave up on: not applied.
    Throttle,
    /// Sent and applied; the reply is lost.
    LoseReply,
    /// Held before sending until the test lets it go ([`DynamoFaults::held`]): the call waits
    /// (asynchronously, in the HTTP connector), and its task with it. How a test puts another
    /// request between two store calls of one.
    Hold,
    /// Not sent, and answered as DynamoDB answers a call that met a concurrent transaction on
    /// one of its items: a `TransactWriteItems` is cancelled with the reasons
    /// `[TransactionConflict, ConditionalCheckFailed]` (the conflict beside a condition that
    /// failed, the case that must not read as a failed condition), any other call gets
    /// `TransactionConflictException`. The SDK retries neither.
    Conflict,
}

/// DynamoDB's answer to `operation` (named exactly) when it met a concurrent transaction.
fn conflict(operation: &str) -> HttpResponse {
    let body = if operation == "TransactWriteItems" {
        serde_json::json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Message": "Transaction cancelled, please refer cancellation reasons for specific \
                        reasons [TransactionConflict, ConditionalCheckFailed]",
            "CancellationReasons": [
                {"Code": "TransactionConflict",
                 "Message": "Transaction is ongoing for the item"},
                {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
            ],
        })
    } else {
        serde_json::json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
            "message": "Transaction is ongoing for the item",
        })
    };
    let mut response = HttpResponse::new(
        StatusCode::try_from(400).expect("a status"),
        SdkBody::from(body.to_string()),
    );
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

#[derive(Debug, Clone)]
struct Rule {
    operation: String,
    fragment: String,
    kind: Kind,
    times: usize,
}

/// The armed faults, shared between a test and its store's client.
#[derive(Debug, Default)]
pub struct DynamoFaults {
    rules: Mutex<Vec<Rule>>,
    /// Calls sent, by operation (`GetItem`, `Query`, …): what a benchmark counts.
    calls: Mutex<std::collections::HashMap<String, usize>>,
    /// Calls answered, and the time they took from their send to their answer, summed.
    answered: Mutex<(usize, std::time::Duration)>,
    /// Every `ClientRequestToken` sent, with the body it came with: DynamoDB refuses a token
    /// reused with other parameters (`IdempotentParameterMismatchException`); moto does not.
    tokens: Mutex<std::collections::HashMap<String, String>>,
    /// Whether a call is held ([`Kind::Hold`]); notified when it may go.
    hold: Mutex<bool>,
    go: tokio::sync::Notify,
    /// The scheduler of a simulation: every call of one of its actors is a point of it.
    scheduler: Mutex<Option<Arc<Scheduler>>>,
}

#[derive(Debug, Clone)]
struct LoseThisReply;

impl Storable for LoseThisReply {
    type Storer = StoreReplace<Self>;
}

impl DynamoFaults {
    /// Arms `kind` for the next `times` calls of `operation` (e.g. `TransactWriteItems`) whose
    /// body contains `fragment`.
    pub fn arm(&self, operation: &str, fragment: &str, kind: Kind, times: usize) {
        self.rules.lock().unwrap().push(Rule {
            operation: operation.into(),
            fragment: fragment.into(),
            kind,
            times,
        });
    }

    /// Waits until a call armed with [`Kind::Hold`] is held; it goes when the guard returned
    /// is dropped (also when the test panics first).
    pub async fn held(&self) -> Held<'_> {
        while !*self.hold.lock().unwrap() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Held(self)
    }

    /// Makes every call of an actor of `scheduler` a point of its schedule (`None`: no more).
    pub fn schedule(&self, scheduler: Option<Arc<Scheduler>>) {
        *self.scheduler.lock().unwrap() = scheduler;
    }

    /// Forgets every armed fault.
    pub fn disarm(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// What the connector does before sending a call: waits while it is held.
    async fn gate(&self, operation: &str, body: &str) {
        if self.take_kind(operation, body, Kind::Hold) {
            // Registered before the test can see the call held: no wake-up is lost.
            let go = self.go.notified();
            tokio::pin!(go);
            go.as_mut().enable();
            *self.hold.lock().unwrap() = true;
            go.await;
        }
    }

    /// How many armed faults have not fired yet (a test checks its fault happened).
    pub fn unfired(&self) -> usize {
        self.rules.lock().unwrap().iter().map(|r| r.times).sum()
    }

    /// How many `operation` calls (e.g. `GetItem`) were sent so far.
    pub fn calls(&self, operation: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// How many calls were answered so far, and the time they took, summed (`make bench`'s
    /// share of the store in a request; no test reads it).
    #[allow(dead_code)]
    pub fn answered(&self) -> (usize, std::time::Duration) {
        *self.answered.lock().unwrap()
    }

    /// DynamoDB's idempotency rule, which moto does not hold: a `ClientRequestToken` sent again
    /// must come with the same parameters. A store that breaks it fails the test at once (real
    /// DynamoDB would refuse the write with `IdempotentParameterMismatchException`).
    fn hold_idempotency(&self, body: &str) {
        let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else {
            return;
        };
        let Some(token) = json["ClientRequestToken"].as_str() else {
            return;
        };
        let mut tokens = self.tokens.lock().unwrap();
        match tokens.get(token) {
            Some(first) if first != body => panic!(
                "ClientRequestToken {token} reused with other parameters: real DynamoDB answers \
                 IdempotentParameterMismatchException\nfirst: {first}\nthen: {body}"
            ),
            Some(_) => {}
            None => {
                tokens.insert(token.to_owned(), body.to_owned());
            }
        }
    }

    fn take(&self, operation: &str, body: &str) -> Option<Kind> {
        self.hold_idempotency(body);
        let name = operation.rsplit('.').next().unwrap_or(operation).to_owned();
        *self.calls.lock().unwrap().entry(name).or_default() += 1;
        [Kind::Throttle, Kind::LoseReply]
            .into_iter()
            .find(|kind| self.take_kind(operation, body, *kind))
    }

    /// Fires a rule of `kind` for the call (`operation` named exactly), if one is armed.
    fn take_kind(&self, operation: &str, body: &str, kind: Kind) -> bool {
        let name = operation.rsplit('.').next().unwrap_or(operation);
        let mut rules = self.rules.lock().unwrap();
        let Some(rule) = rules.iter_mut().find(|r| {
            r.kind == kind && r.times > 0 && name == r.operation && body.contains(&r.fragment)
        }) else {
            return false;
        };
        rule.times -= 1;
        true
    }
}

/// A held call ([`DynamoFaults::held`]): dropped, it goes.
#[must_use = "the held call goes when this is dropped"]
pub struct Held<'a>(&'a DynamoFaults);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        *self.0.hold.lock().unwrap() = false;
        self.0.go.notify_waiters();
    }
}

/// The HTTP client of a store under test: the SDK's own, with [`DynamoFaults::gate`] before
/// every call it sends (where a call can wait without blocking a thread).
#[derive(Debug)]
pub struct Gated {
    inner: SharedHttpClient,
    faults: Arc<DynamoFaults>,
}

impl Gated {
    /// `inner`, gated by `faults`.
    pub fn new(inner: SharedHttpClient, faults: Arc<DynamoFaults>) -> Self {
        Gated { inner, faults }
    }
}

impl HttpClient for Gated {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(GatedConnector {
            inner: self.inner.http_connector(settings, components),
            faults: self.faults.clone(),
        })
    }
}

#[derive(Debug)]
struct GatedConnector {
    inner: SharedHttpConnector,
    faults: Arc<DynamoFaults>,
}

impl HttpConnector for GatedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, faults) = (self.inner.clone(), self.faults.clone());
        let (operation, body) = call_of(&request);
        let turn = Scheduler::current().zip(faults.scheduler.lock().unwrap().clone());
        HttpConnectorFuture::new(async move {
            let _one_at_a_time = match turn {
                Some((actor, scheduler)) => Some(scheduler.call(actor).await),
                None => None,
            };
            faults.gate(&operation, &body).await;
            let name = operation.rsplit('.').next().unwrap_or(&operation);
            if faults.take_kind(&operation, &body, Kind::Conflict) {
                return Ok(conflict(name));
            }
            let sent = std::time::Instant::now();
            let answer = inner.call(request).await;
            let mut answered = faults.answered.lock().unwrap();
            *answered = (answered.0 + 1, answered.1 + sent.elapsed());
            answer
        })
    }
}

/// A DynamoDB call's operation (`X-Amz-Target`) and JSON body.
fn call_of(request: &HttpRequest) -> (String, String) {
    let operation = request
        .headers()
        .get("x-amz-target")
        .unwrap_or_default()
        .to_owned();
    let body = request
        .body()
        .bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    (operation, body)
}

/// The interceptor over a shared [`DynamoFaults`].
#[derive(Debug, Clone)]
pub struct Hook(pub Arc<DynamoFaults>);

impl Intercept for Hook {
    fn name(&self) -> &'static str {
        "DynamoFaults"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (operation, body) = call_of(context.request());
        match self.0.take(&operation, &body) {
            Some(Kind::Throttle) => Err("injected: ProvisionedThroughputExceededException".into()),
            Some(Kind::LoseReply) => {
                cfg.interceptor_state().store_put(LoseThisReply);
                Ok(())
            }
            Some(Kind::Hold | Kind::Conflict) | None => Ok(()),
        }
    }

    fn read_before_deserialization(
        &self,
        _context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<LoseThisReply>().is_some() {
            return Err("injected: the reply was lost".into());
        }
        Ok(())
    }
}

/// The fragment of an order write that moves it to `state`.
pub fn to_state(state: &str) -> String {
    format!(r#"":to":{{"S":"{state}"}}"#)
}

/// The fragment of the claim (the order item put with state `claimed`).
pub const CLAIM: &str = r#""state":{"S":"claimed"}"#;
