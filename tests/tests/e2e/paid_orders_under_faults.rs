//! Paid orders that survive every fault (the durable-orders issue): for each fault of its
//! table, the first answer tells the truth, and after retries and a reconciler pass the payment
//! has ended in exactly one server owned by its payer's owner, or one redeemable credit — or,
//! when nothing settled, in no charge at all — with at most one settlement. Payments are signed
//! for real; the provider and the facilitator are the doubles; DynamoDB is moto with a fault
//! hook on the SDK. Every case runs twice: for a new server, and for a resize of a delivered
//! one (issue 48: the provider's upgrade is its create; `resize::` tests).

use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use axum::http::Method;
use domain::checkpoint::Step;
use domain::store::payments::{OrderKind, OrderState};
use e2e::facilitator::{Mode, VerifyMode};
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::dynamo_faults::{CLAIM, Kind, to_state};
use crate::harness::{ALICE, PROJECT, TestEnv, TestResponse, b64json, owner, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";
/// The plan a resize moves the server to.
const BIGGER: &str = "B1-2-2gb-40s-shared";

/// What a case's payment buys.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Buy {
    /// A new server.
    NewServer,
    /// A delivered server of the owner's (its id) moved to [`BIGGER`].
    Resize(u64),
}

fn path(buy: Buy) -> String {
    match buy {
        Buy::NewServer => format!("/api/cloud/servers/{PROJECT}"),
        Buy::Resize(server) => format!("/api/cloud/servers/{server}/resizes"),
    }
}

fn body(buy: Buy) -> Value {
    match buy {
        Buy::NewServer => json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "durable-1"}),
        Buy::Resize(_) => json!({"plan": BIGGER}),
    }
}

/// What `buy` is in a new world `env` whose `key` pays: a resize's server is provisioned and
/// delivered first (its own payment settled), and the create faults a case injects are aimed at
/// the upgrade action instead.
async fn prepare(env: &TestEnv, key: &str, resize: bool) -> Buy {
    if resize {
        Buy::Resize(crate::paid_time::paid_server(env, key, "durable").await.0)
    } else {
        Buy::NewServer
    }
}

/// How a case's payment must end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// One server, recorded as the owner's; one settlement.
    Server,
    /// One redeemable credit; one settlement; no server.
    Credit,
    /// Nothing settled, no server.
    NothingCharged,
}

/// A fault of the table, injected before the paid request.
#[derive(Clone)]
struct Case {
    name: &'static str,
    inject: fn(&TestEnv),
    /// Kill the handler at this step instead of letting it answer.
    kill: Option<Step>,
    end: End,
}

fn sim_create(fault: Fault) -> impl Fn(&TestEnv) {
    move |env: &TestEnv| env.sim.inject(fault.clone().on(Method::POST))
}

fn cases() -> Vec<Case> {
    vec![
        // claim
        Case {
            name: "claim applied, reply lost",
            inject: |env| {
                env.faults
                    .arm("TransactWriteItems", CLAIM, Kind::LoseReply, 1)
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "claim throttled",
            inject: |env| {
                env.faults
                    .arm("TransactWriteItems", CLAIM, Kind::Throttle, 1)
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "claim throttled past the retries",
            inject: |env| {
                env.faults
                    .arm("TransactWriteItems", CLAIM, Kind::Throttle, 3)
            },
            kill: None,
            end: End::Server,
        },
        // A transaction cancelled by a concurrent one on its items (`TransactionConflict`, beside
        // a `ConditionalCheckFailed` reason): not applied, and not a failed condition.
        Case {
            name: "claim cancelled by a conflicting transaction",
            inject: |env| {
                env.faults
                    .arm("TransactWriteItems", CLAIM, Kind::Conflict, 1)
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settled write cancelled by conflicts past the retries",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settled"),
                    Kind::Conflict,
                    3,
                )
            },
            kill: None,
            end: End::Server,
        },
        // verify
        Case {
            name: "verify times out",
            inject: |env| {
                env.facilitator
                    .next_verify(VerifyMode::Stall(Duration::from_secs(3)))
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "verify answers garbage",
            inject: |env| env.facilitator.next_verify(VerifyMode::Garbage),
            kill: None,
            end: End::Server,
        },
        Case {
            name: "verify says isValid false",
            inject: |env| {
                env.facilitator
                    .next_verify(VerifyMode::Invalid("insufficient_funds".into()))
            },
            kill: None,
            end: End::NothingCharged,
        },
        // settle
        Case {
            name: "settle answer lost after settling",
            inject: |env| {
                env.facilitator
                    .next_settle(Mode::SettleThenStall(Duration::from_secs(3)))
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settle already used after a lost answer",
            inject: |env| {
                // The answer of a settlement is lost; the node asked next lags behind it, so the
                // payment is settled again — and the facilitator says "already used".
                env.facilitator.set_chain_lag(Duration::from_secs(2));
                env.facilitator
                    .next_settle(Mode::SettleThenStall(Duration::from_secs(3)))
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settle pending twice",
            inject: |env| {
                env.facilitator.next_settle(Mode::Pending);
                env.facilitator.next_settle(Mode::Pending);
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settle times out before settling",
            inject: |env| {
                env.facilitator
                    .next_settle(Mode::Stall(Duration::from_secs(3)))
            },
            kill: None,
            end: End::Server,
        },
        Case {
            // Refused every time it is asked: the order waits for the authorization to expire.
            name: "settle refused",
            inject: |env| {
                // Every attempt asks again (ten concurrent requests take turns): refuse them all.
                for _ in 0..40 {
                    env.facilitator
                        .next_settle(Mode::Fail("insufficient_funds".into()));
                }
            },
            kill: None,
            end: End::NothingCharged,
        },
        Case {
            name: "killed after settling",
            inject: |_| {},
            kill: Some(Step::AfterSettle),
            end: End::Server,
        },
        Case {
            name: "killed before settling",
            inject: |_| {},
            kill: Some(Step::BeforeSettle),
            end: End::Server,
        },
        Case {
            name: "killed after the claim",
            inject: |_| {},
            kill: Some(Step::Claimed),
            end: End::Server,
        },
        // state writes
        Case {
            name: "settling write throttled",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settling"),
                    Kind::Throttle,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settling write throttled past the retries",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settling"),
                    Kind::Throttle,
                    3,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settling write applied, reply lost",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settling"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settled write throttled",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settled"),
                    Kind::Throttle,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settled write throttled past the retries",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settled"),
                    Kind::Throttle,
                    3,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "settled write applied, reply lost",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("settled"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "creating write throttled",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("creating"),
                    Kind::Throttle,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "creating write throttled past the retries",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("creating"),
                    Kind::Throttle,
                    3,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "creating write applied, reply lost",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("creating"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "credited write throttled",
            inject: |env| {
                env.sim
                    .inject(Fault::status("/projects/", 400).on(Method::POST));
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("credited"),
                    Kind::Throttle,
                    1,
                )
            },
            kill: None,
            end: End::Credit,
        },
        Case {
            name: "rejected write applied, reply lost",
            inject: |env| {
                env.facilitator
                    .next_verify(VerifyMode::Invalid("insufficient_funds".into()));
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("rejected"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::NothingCharged,
        },
        Case {
            name: "credited write applied, reply lost",
            inject: |env| {
                env.sim
                    .inject(Fault::status("/projects/", 400).on(Method::POST));
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("credited"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::Credit,
        },
        // create
        Case {
            name: "killed while creating",
            inject: |_| {},
            kill: Some(Step::BeforeCreate),
            end: End::Server,
        },
        Case {
            name: "create answer lost after creating",
            inject: |env| sim_create(Fault::stall_after("/projects/", Duration::from_secs(3)))(env),
            kill: None,
            end: End::Server,
        },
        Case {
            name: "create 500 after creating",
            inject: |env| sim_create(Fault::status_after("/projects/", 500))(env),
            kill: None,
            end: End::Server,
        },
        Case {
            name: "create 500 before creating",
            inject: |env| sim_create(Fault::status("/projects/", 500))(env),
            kill: None,
            end: End::Server,
        },
        Case {
            name: "create 429",
            inject: |env| sim_create(Fault::status("/projects/", 429).retry_after(1))(env),
            kill: None,
            end: End::Server,
        },
        Case {
            name: "create refused with 400",
            inject: |env| sim_create(Fault::status("/projects/", 400))(env),
            kill: None,
            end: End::Credit,
        },
        // ownership record
        Case {
            name: "ownership record throttled",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("provisioned"),
                    Kind::Throttle,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "ownership record throttled past the retries",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("provisioned"),
                    Kind::Throttle,
                    3,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "ownership record applied, reply lost",
            inject: |env| {
                env.faults.arm(
                    "TransactWriteItems",
                    &to_state("provisioned"),
                    Kind::LoseReply,
                    1,
                )
            },
            kill: None,
            end: End::Server,
        },
        Case {
            name: "killed before the ownership record",
            inject: |_| {},
            kill: Some(Step::AfterCreate),
            end: End::Server,
        },
    ]
}

async fn offer(env: &TestEnv, key: &str, buy: Buy) -> String {
    let res = env
        .req("POST", &path(buy))
        .key(key)
        .json(body(buy))
        .send()
        .await;
    assert_eq!(res.status, 402, "{}", res.body);
    res.header("payment-required").unwrap().to_owned()
}

async fn send(env: &TestEnv, key: &str, payment: &(&str, String), buy: Buy) -> TestResponse {
    env.req("POST", &path(buy))
        .key(key)
        .header(payment.0, &payment.1)
        .json(body(buy))
        .send()
        .await
}

/// A case's faults, injected: a create's aimed at a resize's upgrade.
fn inject(case: &Case, env: &TestEnv, buy: Buy) {
    (case.inject)(env);
    if buy != Buy::NewServer {
        env.sim.retarget_faults("/projects/", "/servers/");
    }
}

/// The first answer tells the truth about where the payment is.
fn assert_truthful(case: &str, res: &TestResponse, end: End) {
    let settled = res.header("payment-response").is_some();
    assert_eq!(
        settled,
        res.header("x-payment-response").is_some(),
        "{case}: both versions' headers"
    );
    if settled {
        assert_eq!(
            b64json(res.header("payment-response").unwrap())["success"],
            true,
            "{case}"
        );
    }
    match res.status {
        201 => {
            assert_eq!(end, End::Server, "{case}: 201 means a server");
            assert!(settled, "{case}: a paid 201 carries the settlement");
        }
        202 => {
            let body = res.json();
            assert_eq!(body["status"], "provisioning", "{case}");
            let sandbox = body["sandboxId"].as_str().unwrap();
            assert_eq!(
                res.header("location"),
                Some(format!("/api/sandboxes/{sandbox}").as_str()),
                "{case}"
            );
            // Before settlement it says the same payment will still be settled: never sign
            // another (the order may end uncharged only once its authorization expires).
            if !settled {
                let detail = body["detail"].as_str().unwrap();
                assert!(detail.contains("not settled yet"), "{case}: {detail}");
                assert!(detail.contains("never sign a new one"), "{case}: {detail}");
                assert!(!detail.contains("nothing was charged"), "{case}: {detail}");
            } else {
                assert_ne!(end, End::NothingCharged, "{case}: settled means charged");
            }
        }
        402 => {
            assert_eq!(end, End::NothingCharged, "{case}: 402 means no charge");
            assert!(!settled, "{case}");
        }
        409 => {
            let doc = res.problem(409);
            assert_eq!(end, End::Credit, "{case}: {doc}");
            assert!(settled, "{case}: a credit says what was charged");
            assert_eq!(doc["payment"]["state"], "credited", "{case}");
            assert!(doc["detail"].as_str().unwrap().contains("credit"), "{case}");
        }
        // Before the settlement is known: not settled *yet*. After it (a store busy past
        // its retries): what was charged, with the payment response.
        503 => {
            assert!(res.header("retry-after").is_some(), "{case}");
            let doc = res.problem(503);
            let detail = doc["detail"].as_str().unwrap();
            assert!(!detail.contains("nothing was charged"), "{case}: {detail}");
            if settled {
                assert_ne!(end, End::NothingCharged, "{case}: settled means charged");
                assert!(detail.contains("was charged"), "{case}: {detail}");
                assert!(
                    detail.contains("retry with the same payment"),
                    "{case}: {detail}"
                );
            } else {
                assert!(detail.contains("never sign a new one"), "{case}: {detail}");
            }
        }
        500 => {
            // A store failure after settlement still says what was charged.
            let doc = res.problem(500);
            assert!(settled, "{case}: a 500 after settlement carries it: {doc}");
            assert!(
                doc["detail"].as_str().unwrap().contains("charged"),
                "{case}"
            );
        }
        other => panic!("{case}: unexpected {other}: {}", res.body),
    }
}

/// Where a resize's payment ended, asserted against `end`: the server on the bigger plan with
/// its record naming it, or both on the plan they were; one settlement more than the server's
/// own, or none.
async fn assert_resize_end(case: &str, env: &TestEnv, last: &TestResponse, server: u64, end: End) {
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    let order = orders.items.iter().find(|o| o.kind == OrderKind::Resize);
    let order = order.unwrap_or_else(|| panic!("{case}: no resize order"));
    let ownership = env.store.server_ownership(server).await.unwrap().unwrap();
    let record = env
        .store
        .sandbox(&ownership.sandbox_id)
        .await
        .unwrap()
        .unwrap();
    let (plan, settles, state) = match end {
        End::Server => {
            assert_eq!(last.status, 201, "{case}: {}", last.body);
            assert_eq!(last.json()["plan"], BIGGER, "{case}");
            (BIGGER, 2, vec![OrderState::Provisioned])
        }
        End::Credit => {
            last.problem(409);
            (PLAN, 2, vec![OrderState::Credited])
        }
        End::NothingCharged => {
            assert_eq!(last.status, 402, "{case}: {}", last.body);
            (PLAN, 1, vec![OrderState::Rejected, OrderState::Expired])
        }
    };
    assert_eq!(env.sim.plan_of(server).as_deref(), Some(plan), "{case}");
    assert_eq!(
        record.plan.as_deref(),
        Some(plan),
        "{case}: the record's plan"
    );
    assert_eq!(env.sim.server_count(), 1, "{case}: no other server");
    assert_eq!(env.facilitator.settles(), settles, "{case}: settlements");
    assert!(state.contains(&order.state), "{case}: {:?}", order.state);
    assert_eq!(
        last.header("payment-response").is_some(),
        end != End::NothingCharged,
        "{case}"
    );
}

/// Where the payment ended, asserted against `end`.
async fn assert_end(
    case: &str,
    (env, key): (&TestEnv, &str),
    payment: &(&str, String),
    end: End,
    buy: Buy,
) {
    let last = send(env, key, payment, buy).await;
    if let Buy::Resize(server) = buy {
        return assert_resize_end(case, env, &last, server, end).await;
    }
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    match end {
        End::Server => {
            assert_eq!(last.status, 201, "{case}: {}", last.body);
            let server = last.json();
            let sandbox = server["sandboxId"].as_str().unwrap();
            assert_eq!(env.sim.server_count(), 1, "{case}: one server");
            assert_eq!(
                env.sim
                    .servers_tagged(domain::billing::order::effects::SANDBOX_TAG, sandbox),
                1,
                "{case}"
            );
            let ownership = env
                .store
                .server_ownership(server["id"].as_u64().unwrap())
                .await
                .unwrap()
                .expect("the server is recorded");
            assert_eq!(ownership.owner, ALICE, "{case}");
            assert_eq!(env.facilitator.settles(), 1, "{case}: one settlement");
            assert!(last.header("payment-response").is_some(), "{case}");
            assert_eq!(orders.items[0].state, OrderState::Provisioned, "{case}");
            assert!(
                !orders.items[0]
                    .server
                    .as_deref()
                    .unwrap()
                    .contains("password"),
                "{case}: no credentials stored"
            );
        }
        End::Credit => {
            last.problem(409);
            assert!(last.header("payment-response").is_some(), "{case}");
            assert_eq!(env.sim.server_count(), 0, "{case}: no server");
            assert_eq!(env.facilitator.settles(), 1, "{case}: one settlement");
            assert_eq!(orders.items[0].state, OrderState::Credited, "{case}");
        }
        End::NothingCharged => {
            assert_eq!(last.status, 402, "{case}: {}", last.body);
            assert_eq!(env.facilitator.settles(), 0, "{case}: nothing settled");
            assert_eq!(env.sim.server_count(), 0, "{case}");
            assert!(
                matches!(
                    orders.items[0].state,
                    OrderState::Rejected | OrderState::Expired
                ),
                "{case}: {:?}",
                orders.items[0].state
            );
        }
    }
}

/// Reconciler passes, the clock moved 100 s before each — past leases, lagging nodes, a
/// create's settle time, an authorization's expiry — until no order is in flight.
async fn drain(case: &str, env: &TestEnv) {
    for _ in 0..8 {
        let report = env.pass_after(100).await;
        assert_eq!(report.errors, 0, "{case}: {report:?}");
        let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
        if orders.items.iter().all(|o| !o.state.in_flight()) {
            return;
        }
    }
    panic!("{case}: the order is still in flight");
}

async fn run(case: Case, resize: bool) {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let buy = prepare(&env, &key, resize).await;
    let payment = pay(
        &PrivateKeySigner::random(),
        &offer(&env, &key, buy).await,
        2,
    );
    inject(&case, &env, buy);
    let request = env
        .req("POST", &path(buy))
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body(buy));
    match case.kill {
        Some(step) => {
            env.killed_at(step, request).await;
            // The client retries at once: the killed holder's lease is live, so it hears that the
            // order is in progress (or, if nothing was charged yet, still in progress).
            let retry = send(&env, &key, &payment, buy).await;
            assert_eq!(retry.status, 202, "{}: {}", case.name, retry.body);
            assert_truthful(case.name, &retry, case.end);
        }
        None => {
            let first = request.send().await;
            assert_truthful(case.name, &first, case.end);
        }
    }
    assert_eq!(
        (env.faults.unfired(), env.sim.unfired_faults()),
        (0, 0),
        "{}: the fault happened",
        case.name
    );
    drain(case.name, &env).await;
    assert_end(case.name, (&env, &key), &payment, case.end, buy).await;
    // A second pass finds nothing left to do.
    let again = env.reconcile().await;
    assert_eq!(again.taken, 0, "{}: {again:?}", case.name);
}

macro_rules! fault_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let case = cases().into_iter().find(|c| c.name == $name).expect($name);
                run(case, false).await;
            }
        )*

        /// The same faults, met by a resize's order.
        mod resize {
            use super::*;
            $(
                #[tokio::test]
                async fn $test() {
                    let case = cases().into_iter().find(|c| c.name == $name).expect($name);
                    run(case, true).await;
                }
            )*
        }

        #[test]
        fn every_case_has_a_test() {
            let named = [$($name),*];
            for case in cases() {
                assert!(named.contains(&case.name), "no test for {}", case.name);
            }
        }
    };
}

fault_tests! {
    claim_reply_lost => "claim applied, reply lost",
    claim_throttled => "claim throttled",
    claim_throttled_past_retries => "claim throttled past the retries",
    claim_conflict => "claim cancelled by a conflicting transaction",
    settled_write_conflicts => "settled write cancelled by conflicts past the retries",
    verify_timeout => "verify times out",
    verify_garbage => "verify answers garbage",
    verify_invalid => "verify says isValid false",
    settle_answer_lost => "settle answer lost after settling",
    settle_already_used => "settle already used after a lost answer",
    settle_pending_twice => "settle pending twice",
    settle_timeout => "settle times out before settling",
    settle_refused => "settle refused",
    killed_after_settling => "killed after settling",
    killed_before_settling => "killed before settling",
    killed_after_claim => "killed after the claim",
    settling_write_throttled => "settling write throttled",
    settling_write_throttled_past_retries => "settling write throttled past the retries",
    settling_write_reply_lost => "settling write applied, reply lost",
    settled_write_throttled => "settled write throttled",
    settled_write_throttled_past_retries => "settled write throttled past the retries",
    settled_write_reply_lost => "settled write applied, reply lost",
    creating_write_throttled => "creating write throttled",
    creating_write_throttled_past_retries => "creating write throttled past the retries",
    credited_write_throttled => "credited write throttled",
    rejected_write_reply_lost => "rejected write applied, reply lost",
    creating_write_reply_lost => "creating write applied, reply lost",
    credited_write_reply_lost => "credited write applied, reply lost",
    killed_while_creating => "killed while creating",
    create_answer_lost => "create answer lost after creating",
    create_500_after_creating => "create 500 after creating",
    create_500_before_creating => "create 500 before creating",
    create_429 => "create 429",
    create_refused => "create refused with 400",
    ownership_throttled => "ownership record throttled",
    ownership_throttled_past_retries => "ownership record throttled past the retries",
    ownership_reply_lost => "ownership record applied, reply lost",
    killed_before_ownership => "killed before the ownership record",
}

/// Ten requests with one payment while the holder hits the fault: one outcome for all, one
/// server or one credit (a resize: the server on one plan), at most one settlement; and for a
/// resize, no upgrade sent that its order did not announce first.
async fn run_concurrently(case: Case, resize: bool) {
    // Each request holds one of its owner's paid slots while it checks the payment: ten at once
    // are more than the default budget of 3 (of a pool of 9).
    let env = TestEnv::with(crate::harness::Options {
        vars: vec![
            ("MAX_PAID_IN_FLIGHT_PER_OWNER", "10".into()),
            ("MAX_PAID_IN_FLIGHT", "30".into()),
        ],
        ..Default::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let buy = prepare(&env, &key, resize).await;
    let settled_before = env.facilitator.settles();
    let payment = pay(
        &PrivateKeySigner::random(),
        &offer(&env, &key, buy).await,
        2,
    );
    inject(&case, &env, buy);
    let answers = futures::future::join_all((0..10).map(|_| send(&env, &key, &payment, buy))).await;
    let mut servers = std::collections::BTreeSet::new();
    for res in &answers {
        assert_truthful(case.name, res, case.end);
        if res.status == 201 {
            let body = res.json();
            // A new server's id, or the resized server's id and plan.
            let id = body.get("id").unwrap_or(&body["serverId"]);
            servers.insert(format!("{id} {}", body["plan"]));
        }
    }
    assert!(servers.len() <= 1, "{}: {servers:?}", case.name);
    let settled = env.facilitator.settles() - settled_before;
    assert!(settled <= 1, "{}: {settled} settlements", case.name);
    drain(case.name, &env).await;
    assert_end(case.name, (&env, &key), &payment, case.end, buy).await;
    if resize {
        let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
        let order = orders.items.iter().find(|o| o.kind == OrderKind::Resize);
        let announced = order.map_or(0, |o| o.create_attempts as usize);
        assert!(
            env.sim.upgrades() <= announced,
            "{}: {} upgrades sent, {announced} announced",
            case.name,
            env.sim.upgrades()
        );
    }
}

/// Every case without a kill, of one half (0 or 1) of the table.
async fn concurrently(half: usize) {
    // One case at a time: each has its own table, simulator and facilitator, but time is one
    // clock, which each case moves forward as it drains.
    let cases = cases().into_iter().filter(|c| c.kill.is_none());
    for case in cases.skip(half).step_by(2) {
        run_concurrently(case, false).await;
    }
}

#[tokio::test]
async fn ten_concurrent_requests_with_one_payment_while_the_holder_hits_each_fault() {
    concurrently(0).await;
}

#[tokio::test]
async fn ten_concurrent_requests_with_one_payment_while_the_holder_hits_each_other_fault() {
    concurrently(1).await;
}

/// Ten resizes with one payment while the holder's upgrade meets each fault of the provider's
/// (the table's create faults, aimed at the upgrade).
#[tokio::test]
async fn ten_concurrent_resizes_with_one_payment_while_the_upgrade_hits_each_fault() {
    let cases: Vec<Case> = (cases().into_iter())
        .filter(|c| c.kill.is_none() && c.name.starts_with("create "))
        .collect();
    assert_eq!(cases.len(), 5, "the table's create faults");
    for case in cases {
        run_concurrently(case, true).await;
    }
}
