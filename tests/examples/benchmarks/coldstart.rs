//! `make bench`, cold start (the cold-start issue, point 4): every function's release binary
//! started as Lambda starts it, beside two floor binaries built in the same run — `floor-hello`
//! (a hello-world `lambda_runtime` function) and `floor-sdk` (the same plus
//! `aws_config::load_from_env` and a DynamoDB client) — and held to the SDK floor.
//!
//! Each binary is spawned with a Lambda environment (`AWS_LAMBDA_*`) whose Runtime API is
//! served in this process, so its init is the time from `exec` to its first
//! `GET /runtime/invocation/next`; then it answers `EVENTS` API Gateway events (payload 2.0, an
//! API key or a session where the route needs one), each timed from the event handed out to its
//! response posted. Its DynamoDB client talks to moto through a proxy here that counts the
//! calls by operation, so "store calls per request" is what the function really sends. Peak RSS
//! is `VmHWM` after the events; the zip is `cargo lambda build --output-format zip`'s, the file
//! AWS is given. `ROUNDS` rounds, the binaries interleaved in each; medians.
//!
//! Inputs: `BENCH_BIN_DIR` (the release binaries; default the x86_64 release directory
//! `cargo lambda build --compiler cargo` writes) and `BENCH_ZIP_DIR` (default `target/lambda`);
//! `BENCH_ROUNDS`, `BENCH_EVENTS`, `BENCH_STARTS` (init-only starts per round beside the one
//! that answers the events, default 10: init's median is of `ROUNDS × (STARTS + 1)` starts),
//! `BENCH_ONLY` (functions, comma-separated); a baseline build's
//! `BENCH_BASELINE_BIN_DIR` and `BENCH_BASELINE_ZIP_DIR`. It refuses to print figures of a function that answered
//! anything but the status its event expects.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_signer_local::PrivateKeySigner;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::harness::{ALICE, Options, PROJECT, TestEnv};

/// DynamoDB calls by class and operation (`X-Amz-Target`'s last part): `credential GetItem`.
type Calls = BTreeMap<String, usize>;

/// The counting proxy in front of moto.
#[derive(Clone)]
struct Proxy {
    moto: String,
    client: reqwest::Client,
    calls: Arc<Mutex<Calls>>,
}

impl Proxy {
    fn snapshot(&self) -> Calls {
        self.calls.lock().unwrap().clone()
    }
}

async fn forward(
    State(proxy): State<Proxy>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let operation = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?");
    // What the call is for: the credential's read (the one call before a request's work: an
    // item of a key or a session read or updated; a listing of keys is work), a shared
    // rate-limit count (beside the work), or the work itself.
    let text = String::from_utf8_lossy(&body);
    let credential_item = text.contains("\"APIKEY#") || text.contains("\"SESSION#");
    let class = if credential_item && matches!(operation, "GetItem" | "UpdateItem") {
        "credential"
    } else if text.contains("\"RATE#") {
        "count"
    } else {
        "work"
    };
    let name = format!("{class} {operation}");
    *proxy.calls.lock().unwrap().entry(name).or_default() += 1;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = proxy
        .client
        .request(method, format!("{}{path}", proxy.moto))
        .body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let answer = request.send().await.expect("moto answers");
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            response = response.header(name, value);
        }
    }
    let body = answer.bytes().await.expect("moto's body");
    response.body(Body::from(body)).unwrap()
}

/// One function's Lambda Runtime API (2018-06-01), served here.
#[derive(Clone)]
struct Runtime {
    first_poll: Arc<Mutex<Option<oneshot::Sender<Instant>>>>,
    events: Arc<tokio::sync::Mutex<mpsc::Receiver<Value>>>,
    handed: Arc<Mutex<Option<Instant>>>,
    answers: mpsc::Sender<(Instant, Result<Value, String>)>,
}

async fn next(State(rt): State<Runtime>) -> Response {
    let now = Instant::now();
    if let Some(first) = rt.first_poll.lock().unwrap().take() {
        let _ = first.send(now);
    }
    let Some(event) = rt.events.lock().await.recv().await else {
        // Done: the process is killed while it waits.
        return std::future::pending().await;
    };
    let deadline = domain::time::now().unix_timestamp() * 1000 + 30_000;
    *rt.handed.lock().unwrap() = Some(Instant::now());
    Response::builder()
        .header("lambda-runtime-aws-request-id", domain::ids::random_hex(8))
        .header("lambda-runtime-deadline-ms", deadline.to_string())
        .header(
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:123456789012:function:bench",
        )
        .header(
            "lambda-runtime-trace-id",
            "Root=1-00000000-000000000000000000000000",
        )
        .header("content-type", "application/json")
        .body(Body::from(event.to_string()))
        .unwrap()
}

async fn answered(State(rt): State<Runtime>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = rt.answers.send((at, Ok(value))).await;
    StatusCode::ACCEPTED
}

async fn failed(State(rt): State<Runtime>, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let text = String::from_utf8_lossy(&body).into_owned();
    let _ = rt.answers.send((at, Err(text))).await;
    StatusCode::ACCEPTED
}

/// What one start of one binary measured.
struct Sample {
    init: Duration,
    p50: Duration,
    rss_kb: u64,
    init_calls: usize,
    calls: Calls,
}

/// One binary and the event it answers.
struct Subject {
    /// The row's label: the event.
    event_label: String,
    binary: String,
    event: Value,
    /// The API Gateway response's `statusCode` it must answer; `None` for the schedule.
    expect: Option<u16>,
    /// Events per start: `EVENTS` divided by this (a reconciler pass is a whole pass).
    divide: usize,
}

fn diff(after: &Calls, before: &Calls) -> Calls {
    after
        .iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One function's Runtime API, served on a free port: the state, the channels the benchmark
/// drives it with, its address, and the server's task.
struct Served {
    runtime: Runtime,
    first: oneshot::Receiver<Instant>,
    events: mpsc::Sender<Value>,
    answers: mpsc::Receiver<(Instant, Result<Value, String>)>,
    api: String,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn serve_runtime() -> Served {
    let (first_tx, first) = oneshot::channel();
    let (events, event_rx) = mpsc::channel(1);
    let (answer_tx, answers) = mpsc::channel(1);
    let runtime = Runtime {
        first_poll: Arc::new(Mutex::new(Some(first_tx))),
        events: Arc::new(tokio::sync::Mutex::new(event_rx)),
        handed: Arc::new(Mutex::new(None)),
        answers: answer_tx,
    };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(answered),
        )
        .route("/2018-06-01/runtime/invocation/{id}/error", post(failed))
        .route("/2018-06-01/runtime/init/error", post(failed))
        .with_state(runtime.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Served {
        runtime,
        first,
        events,
        answers,
        api,
        server,
    }
}

/// Spawns `subject`'s binary with the Runtime API at `api` and waits for its first
/// `GET /next` (`first`): the child and its init, `exec` to that poll. Panics, with its stderr,
/// if it exits first.
async fn start(
    subject: &Subject,
    bin_dir: &std::path::Path,
    vars: &HashMap<String, String>,
    api: &str,
    first: oneshot::Receiver<Instant>,
) -> (tokio::process::Child, Duration) {
    let binary = bin_dir.join(&subject.binary);
    let spawned = Instant::now();
    let mut child = tokio::process::Command::new(&binary)
        .env_clear()
        .envs(vars)
        .env("AWS_LAMBDA_RUNTIME_API", api)
        .env("AWS_LAMBDA_FUNCTION_NAME", &subject.binary)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    let first = tokio::select! {
        first = first => first.unwrap(),
        status = child.wait() => {
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = err.read_to_string(&mut stderr).await;
            }
            panic!("{} exited at init ({status:?}): {stderr}", subject.binary)
        }
    };
    (child, first - spawned)
}

/// Starts `subject`'s binary and stops it at its first poll: one more init, no event.
async fn init_only(
    subject: &Subject,
    bin_dir: &std::path::Path,
    vars: &HashMap<String, String>,
) -> Duration {
    let served = serve_runtime().await;
    let (mut child, init) = start(subject, bin_dir, vars, &served.api, served.first).await;
    child.kill().await.unwrap();
    served.server.abort();
    init
}

/// Starts `subject`'s binary once, as Lambda would, and hands it `events` events.
async fn measure(
    subject: &Subject,
    bin_dir: &std::path::Path,
    vars: &HashMap<String, String>,
    proxy: &Proxy,
    events: usize,
) -> Sample {
    let Served {
        runtime,
        first: first_rx,
        events: event_tx,
        answers: mut answer_rx,
        api,
        server,
    } = serve_runtime().await;
    let before = proxy.snapshot();
    let (mut child, init) = start(subject, bin_dir, vars, &api, first_rx).await;
    let after_init = proxy.snapshot();
    let mut times = Vec::with_capacity(events);
    for i in 0..events {
        event_tx.send(subject.event.clone()).await.unwrap();
        let (at, answer) = answer_rx.recv().await.unwrap();
        let handed = runtime.handed.lock().unwrap().take().unwrap();
        times.push(at - handed);
        let answer = answer.unwrap_or_else(|e| panic!("{} failed: {e}", subject.binary));
        if let Some(expect) = subject.expect {
            assert_eq!(
                answer["statusCode"].as_u64(),
                Some(u64::from(expect)),
                "{} event {i} for {}: {answer}",
                subject.event_label,
                subject.binary
            );
        }
    }
    let rss_kb = peak_rss_kb(child.id().unwrap());
    let calls = diff(&proxy.snapshot(), &after_init);
    let init_calls = diff(&after_init, &before).values().sum();
    child.kill().await.unwrap();
    server.abort();
    times.sort();
    Sample {
        init,
        p50: times[times.len() / 2],
        rss_kb,
        init_calls,
        calls,
    }
}

fn median<T: Ord + Copy>(mut values: Vec<T>) -> T {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The instructions `binary` executes from `exec` to its first `GET /next`, counted by
/// valgrind's callgrind (repeatable, whatever else the machine does): the process is stopped
/// with SIGTERM once it polls, and callgrind's `summary:` read. `None` without valgrind.
async fn init_instructions(
    binary: &std::path::Path,
    vars: &HashMap<String, String>,
) -> Option<u64> {
    let Served {
        first: first_rx,
        api,
        server,
        ..
    } = serve_runtime().await;
    let out = std::env::temp_dir().join(format!("callgrind.{}", domain::ids::random_hex(6)));
    let mut child = tokio::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(binary)
        .env_clear()
        .envs(vars)
        .env("AWS_LAMBDA_RUNTIME_API", &api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let polled = tokio::time::timeout(Duration::from_secs(60), first_rx).await;
    let pid = child.id()?;
    // SIGTERM: callgrind writes its counts on the way out.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    server.abort();
    polled.ok()?.ok()?;
    let text = std::fs::read_to_string(&out).ok()?;
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The subjects: every function with a representative event, then the floors.
async fn subjects(env: &TestEnv) -> Vec<Subject> {
    let key = env.key(ALICE).await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let (server, _) = env.provision(&key, "cloud_vps_free", None).await;
    let http = |label: &str, binary: &str, event: (String, Value), expect: u16| {
        assert_eq!(event.0, binary, "{label} is routed to {binary}");
        Subject {
            event_label: label.to_owned(),
            binary: binary.to_owned(),
            event: event.1,
            expect: Some(expect),
            divide: 1,
        }
    };
    let status = env.req("GET", "/api/cloud/status").event();
    let mcp = env
        .req("POST", "/mcp")
        .key(&key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_sandboxes", "arguments": {"limit": 10}}}));
    let schedule = json!({
        "version": "0", "id": "bench", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-11-25T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/bench"], "detail": {}
    });
    vec![
        http("GET /api/cloud/status", "status", status.clone(), 200),
        http(
            "GET /api/openapi.json",
            "docs",
            env.req("GET", "/api/openapi.json").event(),
            200,
        ),
        http("GET /", "console", env.req("GET", "/").event(), 200),
        http(
            "GET /api/auth/me (session)",
            "auth",
            env.req("GET", "/api/auth/me").bearer(&session).event(),
            200,
        ),
        http(
            "GET /api/keys?limit=10 (session)",
            "keys",
            env.req("GET", "/api/keys")
                .query("limit=10")
                .bearer(&session)
                .event(),
            200,
        ),
        http(
            "GET /api/cloud/regions (key, warm cache)",
            "discovery",
            env.req("GET", "/api/cloud/regions").key(&key).event(),
            200,
        ),
        http(
            "GET /api/cloud/servers/{project} (key)",
            "servers",
            env.req("GET", &format!("/api/cloud/servers/{PROJECT}"))
                .key(&key)
                .event(),
            200,
        ),
        http(
            "POST …/servers/{id}/actions reboot (key)",
            "actions",
            env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
                .key(&key)
                .json(json!({"type": "reboot"}))
                .event(),
            202,
        ),
        http(
            "GET /api/sandboxes?limit=10 (key)",
            "sandboxes",
            env.req("GET", "/api/sandboxes")
                .query("limit=10")
                .key(&key)
                .event(),
            200,
        ),
        http(
            "GET /api/payments?limit=10 (key)",
            "payments",
            env.req("GET", "/api/payments")
                .query("limit=10")
                .key(&key)
                .event(),
            200,
        ),
        http("POST /mcp list_sandboxes (key)", "mcp", mcp.event(), 200),
        Subject {
            event_label: "schedule (one pass)".into(),
            binary: "reconciler".into(),
            event: schedule,
            expect: None,
            divide: 10,
        },
        http(
            "GET /api/cloud/status",
            "floor-hello",
            (String::from("floor-hello"), status.1.clone()),
            200,
        ),
        http(
            "GET /api/cloud/status",
            "floor-sdk",
            (String::from("floor-sdk"), status.1),
            200,
        ),
    ]
}

/// The environment a function starts with: Lambda's variables, the SDK's (moto through the
/// proxy) and the service's (the harness's, with every rate limit on and never reached).
fn lambda_vars(env: &TestEnv, proxy_url: &str) -> HashMap<String, String> {
    let mut vars: HashMap<String, String> = env
        .vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    for (k, v) in [
        ("AWS_REGION", "us-east-1"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_SESSION_TOKEN", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "bench"),
        ("LAMBDA_TASK_ROOT", "/var/task"),
        ("TZ", ":UTC"),
        ("RATE_LIMIT_PER_SECOND", "100000"),
        ("RATE_LIMIT_BURST", "1000000"),
        ("OWNER_RATE_PER_SECOND", "100000"),
        ("OWNER_RATE_BURST", "1000000"),
        ("ADDRESS_RATE_PER_SECOND", "100000"),
        ("ADDRESS_RATE_BURST", "1000000"),
        ("SIGN_IN_RATE_PER_SECOND", "100000"),
        ("SIGN_IN_RATE_BURST", "1000000"),
        ("FAILED_AUTH_PER_SECOND", "1"),
        ("FAILED_AUTH_BURST", "10"),
    ] {
        vars.insert(k.into(), v.into());
    }
    vars.insert("AWS_ENDPOINT_URL_DYNAMODB".into(), proxy_url.into());
    vars
}

async fn start_proxy() -> (Proxy, String) {
    let moto = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("make bench starts moto");
    let proxy = Proxy {
        moto,
        client: reqwest::Client::new(),
        calls: Arc::default(),
    };
    let app = Router::new()
        .fallback(any(forward))
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (proxy, url)
}

/// Calls per request by class (`credential`, `count`, `work`), each with its operations:
/// `1 credential (UpdateItem) + 2 count (UpdateItem×2) + 1 work (Query)`.
fn calls_text(calls: &Calls, events: usize) -> String {
    let per = |n: usize| {
        let per = n as f64 / events as f64;
        if per == per.round() {
            format!("{per}")
        } else {
            format!("{per:.2}")
        }
    };
    let mut classes: Vec<String> = Vec::new();
    for class in ["credential", "count", "work"] {
        let ops: Vec<(&str, usize)> = calls
            .iter()
            .filter_map(|(name, n)| Some((name.strip_prefix(class)?.trim(), *n)))
            .collect();
        let total: usize = ops.iter().map(|(_, n)| n).sum();
        if total == 0 {
            continue;
        }
        let ops: Vec<String> = ops
            .iter()
            .map(|(op, n)| format!("{op}×{}", per(*n)))
            .collect();
        classes.push(format!("{} {class} ({})", per(total), ops.join(", ")));
    }
    if classes.is_empty() {
        "0".into()
    } else {
        classes.join(" + ")
    }
}

/// What one subject measured over every round.
struct Row {
    init: Duration,
    p50: Duration,
    rss_kb: u64,
    zip_kb: u64,
    init_calls: usize,
    calls: Calls,
    events: usize,
}

fn row(samples: &[Sample], inits: &[Duration], zip: &std::path::Path, events: usize) -> Row {
    let zip_kb = std::fs::metadata(zip)
        .unwrap_or_else(|e| panic!("{}: {e}", zip.display()))
        .len()
        / 1024;
    Row {
        init: median(
            samples
                .iter()
                .map(|x| x.init)
                .chain(inits.iter().copied())
                .collect(),
        ),
        p50: median(samples.iter().map(|x| x.p50).collect()),
        rss_kb: median(samples.iter().map(|x| x.rss_kb).collect()),
        zip_kb,
        init_calls: samples.iter().map(|x| x.init_calls).max().unwrap_or(0),
        calls: samples.last().map(|x| x.calls.clone()).unwrap_or_default(),
        events,
    }
}

/// Where one build's binaries and zips are.
struct Build {
    name: &'static str,
    bins: PathBuf,
    zips: PathBuf,
}

fn print_rows(subjects: &[Subject], builds: &[Build], rows: &[Vec<Row>], floor: &Row) {
    println!(
        "| event | function | build | init ms | × floor | p50 ms | × floor | RSS MB | × floor | zip KB | × floor | store calls at init | store calls / request |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, subject) in subjects.iter().enumerate() {
        for (b, build) in builds.iter().enumerate() {
            let Some(row) = rows[b].get(i) else { continue };
            if subject.binary.starts_with("floor") && b > 0 {
                continue;
            }
            println!(
                "| {} | {} | {} | {:.1} | {:.2}× | {:.2} | {:.2}× | {:.1} | {:.2}× | {} | {:.2}× | {} | {} |",
                subject.event_label,
                subject.binary,
                build.name,
                ms(row.init),
                row.init.as_secs_f64() / floor.init.as_secs_f64(),
                ms(row.p50),
                row.p50.as_secs_f64() / floor.p50.as_secs_f64(),
                row.rss_kb as f64 / 1024.0,
                row.rss_kb as f64 / floor.rss_kb as f64,
                row.zip_kb,
                row.zip_kb as f64 / floor.zip_kb as f64,
                row.init_calls,
                calls_text(&row.calls, row.events),
            );
        }
    }
}

#[tokio::main]
pub async fn main() {
    let rounds = env_number("BENCH_ROUNDS", 5);
    let events = env_number("BENCH_EVENTS", 200);
    let starts = env_number("BENCH_STARTS", 10);
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let path = |var: &str, default: &str| {
        std::env::var(var).map_or_else(|_| root.join(default), PathBuf::from)
    };
    let mut builds = vec![Build {
        name: "this tree",
        bins: path("BENCH_BIN_DIR", "target/x86_64-unknown-linux-gnu/release"),
        zips: path("BENCH_ZIP_DIR", "target/lambda"),
    }];
    // A baseline measured in the same run, interleaved (e.g. the last commit's binaries).
    if let (Ok(bins), Ok(zips)) = (
        std::env::var("BENCH_BASELINE_BIN_DIR"),
        std::env::var("BENCH_BASELINE_ZIP_DIR"),
    ) {
        builds.push(Build {
            name: "baseline",
            bins: bins.into(),
            zips: zips.into(),
        });
    }
    let env = TestEnv::with(Options {
        vars: vec![("SSH_PROBE_TARGET", "127.0.0.1:9".into())],
        ..Options::default()
    })
    .await;
    let (proxy, proxy_url) = start_proxy().await;
    let vars = lambda_vars(&env, &proxy_url);
    let mut subjects = subjects(&env).await;
    // `BENCH_ONLY=auth,reconciler`: those functions (and the floors) alone.
    if let Ok(only) = std::env::var("BENCH_ONLY") {
        let only: Vec<&str> = only.split(',').map(str::trim).collect();
        subjects.retain(|s| s.binary.starts_with("floor") || only.contains(&s.binary.as_str()));
    }
    // samples[build][subject]; the floors run from the first build only.
    let mut samples: Vec<Vec<Vec<Sample>>> = builds
        .iter()
        .map(|_| subjects.iter().map(|_| Vec::new()).collect())
        .collect();
    // inits[build][subject]: the init-only starts.
    let mut inits: Vec<Vec<Vec<Duration>>> = builds
        .iter()
        .map(|_| subjects.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 0..rounds {
        // Each round starts one subject further on: no binary always follows the same one.
        for k in 0..subjects.len() {
            let i = (k + round) % subjects.len();
            let subject = &subjects[i];
            for (b, build) in builds.iter().enumerate() {
                if subject.binary.starts_with("floor") && b > 0 {
                    continue;
                }
                let events = (events / subject.divide).max(1);
                let sample = measure(subject, &build.bins, &vars, &proxy, events).await;
                samples[b][i].push(sample);
                for _ in 0..starts {
                    inits[b][i].push(init_only(subject, &build.bins, &vars).await);
                }
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let rows: Vec<Vec<Row>> = builds
        .iter()
        .zip(samples.iter().zip(&inits))
        .map(|(build, (by_subject, inits))| {
            subjects
                .iter()
                .zip(by_subject.iter().zip(inits))
                .filter(|(_, (s, _))| !s.is_empty())
                .map(|(subject, (s, inits))| {
                    let zip = build.zips.join(&subject.binary).join("bootstrap.zip");
                    row(s, inits, &zip, (events / subject.divide).max(1))
                })
                .collect()
        })
        .collect();
    let floor = rows[0].last().expect("the SDK floor is the last subject");
    println!(
        "cold start: {rounds} rounds × {events} events (a reconciler pass: {} events), and \
         {starts} more starts to the first poll each round (init's median is of {} starts); \
         medians; x86_64 release binaries and two floors built in the same run, each build's starts \
         interleaved and each round in another order; ratios are to the SDK floor (floor-sdk)",
        (events / 10).max(1),
        rounds * (starts + 1)
    );
    print_rows(&subjects, &builds, &rows, floor);
    let over: Vec<&str> = subjects
        .iter()
        .zip(&rows[0])
        .filter(|(s, r)| !s.binary.starts_with("floor") && r.init > floor.init)
        .map(|(s, _)| s.binary.as_str())
        .collect();
    let zips: Vec<&str> = subjects
        .iter()
        .zip(&rows[0])
        .filter(|(s, r)| !s.binary.starts_with("floor") && r.zip_kb > 4500)
        .map(|(s, _)| s.binary.as_str())
        .collect();
    let list = |v: Vec<&str>| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(", ")
        }
    };
    println!("this tree over the SDK floor's init: {}", list(over));
    println!("this tree's zips over 4,500 KB: {}", list(zips));
    print_instructions(&subjects, &builds, &vars).await;
}

/// Init in instructions (callgrind), which wall time's noise between runs cannot move: each
/// build's functions and the SDK floor, with their ratio to the floor, and those over it.
async fn print_instructions(
    subjects: &[Subject],
    builds: &[Build],
    vars: &HashMap<String, String>,
) {
    let floor_bin = builds[0].bins.join("floor-sdk");
    let Some(floor) = init_instructions(&floor_bin, vars).await else {
        println!("init instructions: valgrind is not installed; skipped");
        return;
    };
    println!("init instructions (valgrind --tool=callgrind, exec to the first GET /next):");
    println!("| function | build | instructions (M) | × floor |");
    println!("|---|---|---|---|");
    let mut over = Vec::new();
    for subject in subjects.iter().filter(|s| !s.binary.starts_with("floor")) {
        for (b, build) in builds.iter().enumerate() {
            let Some(count) = init_instructions(&build.bins.join(&subject.binary), vars).await
            else {
                continue;
            };
            let ratio = count as f64 / floor as f64;
            if b == 0 && ratio > 1.0 {
                over.push(subject.binary.as_str());
            }
            println!(
                "| {} | {} | {:.1} | {ratio:.2}× |",
                subject.binary,
                build.name,
                count as f64 / 1e6
            );
        }
    }
    println!(
        "| floor-sdk | this tree | {:.1} | 1.00× |",
        floor as f64 / 1e6
    );
    println!(
        "this tree over the SDK floor's init instructions: {}",
        if over.is_empty() {
            "none".to_owned()
        } else {
            over.join(", ")
        }
    );
}
