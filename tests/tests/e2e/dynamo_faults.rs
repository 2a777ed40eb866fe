//! A fault hook on the real DynamoDB API (moto), as an SDK interceptor: the chosen call —
//! matched by its operation (`X-Amz-Target`) and a fragment of its JSON body — is either
//! refused before it is sent (throttled: not applied) or sent and its reply lost (applied, and
//! the caller sees an error; the store's identical retry then meets its own write). Nothing of
//! DynamoDB itself is mocked.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What happens to a matched call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Refused before sending, as a throttled request the SDK gave up on: not applied.
    Throttle,
    /// Sent and applied; the reply is lost.
    LoseReply,
    /// Held before sending until the test lets it go ([`DynamoFaults::release`]): the thread
    /// that sends it blocks, so tests that hold a call run on a multi-threaded runtime and send
    /// it from a spawned task. How a test puts another request between two store calls of one.
    Hold,
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
    /// Every `ClientRequestToken` sent, with the body it came with: DynamoDB refuses a token
    /// reused with other parameters (`IdempotentParameterMismatchException`); moto does not.
    tokens: Mutex<std::collections::HashMap<String, String>>,
    /// Whether a call is held ([`Kind::Hold`]), and whether it may go.
    hold: Mutex<(bool, bool)>,
    released: std::sync::Condvar,
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

    /// Waits until a call armed with [`Kind::Hold`] is held.
    pub async fn held(&self) {
        while !self.hold.lock().unwrap().0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Lets the held call go (and any call held later).
    pub fn release(&self) {
        self.hold.lock().unwrap().1 = true;
        self.released.notify_all();
    }

    fn wait_for_release(&self) {
        let mut hold = self.hold.lock().unwrap();
        hold.0 = true;
        while !hold.1 {
            hold = self.released.wait(hold).unwrap();
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
        let mut rules = self.rules.lock().unwrap();
        let rule = rules.iter_mut().find(|r| {
            r.times > 0 && operation.ends_with(&r.operation) && body.contains(&r.fragment)
        })?;
        rule.times -= 1;
        Some(rule.kind)
    }
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
        let request = context.request();
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
        match self.0.take(&operation, &body) {
            Some(Kind::Throttle) => Err("injected: ProvisionedThroughputExceededException".into()),
            Some(Kind::LoseReply) => {
                cfg.interceptor_state().store_put(LoseThisReply);
                Ok(())
            }
            Some(Kind::Hold) => {
                self.0.wait_for_release();
                Ok(())
            }
            None => Ok(()),
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
