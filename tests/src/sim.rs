//! A simulator of the provider's REST API v1, faithful to `reference/upstream-cherry-api.md`:
//! bearer-token auth, bare JSON arrays for lists (with `X-Total-Count`), `{code, message}` error
//! bodies, 201 on create, 202 on actions, 204 on delete, status `deploying` → `deployed` after a
//! delay, power state (`GET /servers/{id}?fields=power`), rescue mode (bare metal only), and
//! both spellings of actions (`power-on`/`power_on`, `rebuild`/`reinstall`).
//!
//! It offers two free plans (`cloud_vps_free`, `bm_trial`) and several paid ones, with stock per
//! region, and the account's SSH keys (9845 and 9846, the operator's, then any added with
//! `POST /ssh-keys`: `sim/ssh.rs`). Tests can inject faults (a status, a delay, `Retry-After`),
//! before the request is handled or after it (a create that happens and whose answer is then
//! lost, or replaced by a 500), and read the request log (calls per route, the peak per second).
//! Stage timing is set per simulator: no IPv4 address for a while, then `deploying`, then
//! `deployed`; each server's own SSH ([`Simulator::serve_ssh`]), or one [`SshListener`] for them
//! all, answers the readiness check. `make dev` injects the same faults with
//! `POST /_sim/faults` (`{"method", "path", "status", "delayMs", "after"}`).
//!
//! It also misbehaves the ways a real provider does, on the time of a [`Clock`] tests move
//! forward: a create committed seconds after its request, whose answer is lost
//! ([`Simulator::commit_next_create_after`]); new servers missing from listings for a while
//! ([`Simulator::set_listing_lag`]); listings in pages (`limit`, `offset`, `X-Total-Count`, and
//! a cap on any page, [`Simulator::set_page_cap`]); 422 for a power action the server is already
//! in ([`Simulator::set_strict_power`]); and 404 for every server, as after a token or team
//! change ([`Simulator::forget_all_servers`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::clock::Clock;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use serde_json::{Value, json};

mod ssh;
pub use ssh::{SSH_KEY_IDS, SshListener};

/// A response the simulator gives instead of the real one, once, to the next request matching
/// `method` (any when `None`) and starting with `path_prefix` (after `/v1`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// Method to match.
    #[serde(default, with = "method_name")]
    pub method: Option<Method>,
    /// Path prefix to match, e.g. `/plans`.
    #[serde(rename = "path")]
    pub path_prefix: String,
    /// Status to answer (with a `{code, message}` body); `None` answers normally after `delay`.
    #[serde(default)]
    pub status: Option<u16>,
    /// Wait this long first.
    #[serde(default, rename = "delayMs", with = "millis")]
    pub delay: Duration,
    /// `Retry-After` seconds to send.
    pub retry_after: Option<u64>,
    /// Handle the request normally first, then wait `delay` and answer `status` instead (the
    /// effect happens; its answer is lost or replaced).
    #[serde(default)]
    pub after: bool,
}

impl Fault {
    /// Answer `status` once to requests under `path_prefix`.
    pub fn status(path_prefix: &str, status: u16) -> Self {
        Fault {
            method: None,
            path_prefix: path_prefix.into(),
            status: Some(status),
            delay: Duration::ZERO,
            retry_after: None,
            after: false,
        }
    }
    /// Stall `delay` once before answering requests under `path_prefix`.
    pub fn stall(path_prefix: &str, delay: Duration) -> Self {
        Fault {
            method: None,
            path_prefix: path_prefix.into(),
            status: None,
            delay,
            retry_after: None,
            after: false,
        }
    }
    /// Handle the request, then answer `status` instead (e.g. a create that happened, then 500).
    pub fn status_after(path_prefix: &str, status: u16) -> Self {
        Fault {
            after: true,
            ..Fault::status(path_prefix, status)
        }
    }
    /// Handle the request, then stall `delay` before answering (an answer lost to a timeout).
    pub fn stall_after(path_prefix: &str, delay: Duration) -> Self {
        Fault {
            after: true,
            ..Fault::stall(path_prefix, delay)
        }
    }
    /// With `Retry-After: secs`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    /// Only for `method`.
    pub fn on(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }
}

#[derive(Debug, Clone)]
struct SimServer {
    id: u64,
    project: u64,
    plan: String,
    region: String,
    hostname: String,
    image: String,
    tags: Value,
    ssh_keys: Vec<u64>,
    /// The public key texts of `ssh_keys` when it was created or rebuilt (its
    /// `authorized_keys`).
    authorized: Vec<String>,
    /// Its own loopback address, when the simulator serves SSH per server.
    address: Option<String>,
    created_at: String,
    /// Clock milliseconds: when its deployment started.
    deploy_started: i64,
    /// Clock milliseconds: when the create took effect (a late commit is invisible before).
    committed_at: i64,
    power_on: bool,
    rescue: bool,
}

#[derive(Default)]
struct Data {
    servers: BTreeMap<u64, SimServer>,
    next_id: u64,
    faults: VecDeque<Fault>,
    log: Vec<String>,
    /// When each logged request arrived.
    log_times: Vec<Instant>,
    /// Every JSON body a client wrote (`POST`, `PUT`): `{method, path, body}`, in order.
    bodies: Vec<Value>,
    /// A new (or rebuilt) server has no IPv4 address for this long.
    network_delay: Duration,
    /// Overrides the constructor's deploy delay.
    deploy_delay: Option<Duration>,
    /// The next creates commit this long after their request (and answer 504).
    late_creates: VecDeque<Duration>,
    /// A new server is missing from its project's listing this long after its commit.
    listing_lag: Duration,
    /// No page of a listing holds more than this.
    page_cap: Option<usize>,
    /// A power action the server is already in answers 422.
    strict_power: bool,
    /// Every server answers 404 and listings are empty (a changed token or team).
    forgotten: bool,
    /// Servers deleted (as if outside this service) right after the next listing page is
    /// served: the listing shifts between pages.
    delete_after_page: Vec<u64>,
    /// Every server deleted through the API, with the clock's time (milliseconds).
    deletions: Vec<(u64, i64)>,
    /// The account's SSH keys.
    keys: BTreeMap<u64, ssh::AccountKey>,
    /// The last key id given.
    next_key_id: u64,
    /// Each server answers SSH on this port of its own address ([`Simulator::serve_ssh`]).
    ssh_port: Option<u16>,
    /// The servers' SSH daemons, stopped when their server is deleted.
    daemons: BTreeMap<u64, crate::Serving>,
}

/// The simulator's state, shared by its handlers and the tests.
pub struct Simulator {
    token: String,
    deploy_delay: Duration,
    clock: Clock,
    data: Mutex<Data>,
}

/// A running simulator.
pub struct RunningSimulator {
    /// Base URL including `/v1`, e.g. `http://127.0.0.1:41234/v1`.
    pub base_url: String,
    /// Its state.
    pub sim: Arc<Simulator>,
    /// Listening until dropped.
    pub serving: crate::Serving,
}

impl Simulator {
    /// A simulator accepting `token`, whose servers stay `deploying` for `deploy_delay`.
    pub fn new(token: &str, deploy_delay: Duration) -> Arc<Self> {
        Self::with_clock(token, deploy_delay, Clock::system())
    }

    /// [`Simulator::new`] on `clock`'s time.
    pub fn with_clock(token: &str, deploy_delay: Duration, clock: Clock) -> Arc<Self> {
        Arc::new(Simulator {
            token: token.to_owned(),
            deploy_delay,
            clock,
            data: Mutex::new(Data {
                next_id: 912_000,
                keys: ssh::seed_keys(),
                next_key_id: 10_000,
                ..Data::default()
            }),
        })
    }

    /// Serves on `addr` (port 0 picks a free one) in the background.
    pub async fn start(self: &Arc<Self>, addr: &str) -> std::io::Result<RunningSimulator> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let app = router(self.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(RunningSimulator {
            base_url: format!("http://{local}/v1"),
            sim: self.clone(),
            serving: crate::Serving::of(&task),
        })
    }

    /// Queues a fault (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        self.data.lock().unwrap().faults.push_back(fault);
    }

    /// Moves every queued fault under `from` to `to` (a path prefix): the faults a test wrote for
    /// one call, aimed at another (a create's, at a resize's upgrade action).
    pub fn retarget_faults(&self, from: &str, to: &str) {
        for fault in &mut self.data.lock().unwrap().faults {
            if let Some(rest) = fault.path_prefix.strip_prefix(from) {
                fault.path_prefix = format!("{to}{rest}");
            }
        }
    }

    /// Forgets every injected fault that has not fired.
    pub fn clear_faults(&self) {
        self.data.lock().unwrap().faults.clear();
    }

    /// Every server deleted through the API so far, with when (clock milliseconds).
    pub fn deletions(&self) -> Vec<(u64, i64)> {
        self.data.lock().unwrap().deletions.clone()
    }

    /// How many injected faults have not fired yet.
    pub fn unfired_faults(&self) -> usize {
        self.data.lock().unwrap().faults.len()
    }

    /// Every request received so far, as `METHOD /path` (after `/v1`, without the query).
    pub fn requests(&self) -> Vec<String> {
        self.data.lock().unwrap().log.clone()
    }

    /// How many requests so far were `METHOD /path-prefix…` (e.g. `GET /servers/`).
    pub fn calls(&self, prefix: &str) -> usize {
        self.data
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }

    /// The next create takes effect `after` its request (on the clock), and its answer is a
    /// 504 from the provider's gateway: the caller cannot know it will land.
    pub fn commit_next_create_after(&self, after: Duration) {
        self.data.lock().unwrap().late_creates.push_back(after);
    }

    /// New servers are missing from their project's listing for `lag` after they commit.
    pub fn set_listing_lag(&self, lag: Duration) {
        self.data.lock().unwrap().listing_lag = lag;
    }

    /// No page of a listing holds more than `cap` servers, whatever `limit` asks.
    pub fn set_page_cap(&self, cap: Option<usize>) {
        self.data.lock().unwrap().page_cap = cap;
    }

    /// A power-on of a running server or a power-off of a stopped one answers 422.
    pub fn set_strict_power(&self, strict: bool) {
        self.data.lock().unwrap().strict_power = strict;
    }

    /// Deletes server `id` (as if outside this service) right after the next listing page is
    /// served: the next page, read by offset, skips a server (offset paging on a listing that
    /// shifted).
    pub fn delete_after_next_page(&self, id: u64) {
        self.data.lock().unwrap().delete_after_page.push(id);
    }

    /// Every server answers 404 and listings are empty, or (false) as they were.
    pub fn forget_all_servers(&self, forgotten: bool) {
        self.data.lock().unwrap().forgotten = forgotten;
    }

    /// Ids of the servers of `project` that exist now (committed), tagged or not.
    pub fn server_ids(&self, project: u64) -> Vec<u64> {
        let now = self.clock.now_millis();
        let data = self.data.lock().unwrap();
        data.servers
            .values()
            .filter(|s| s.project == project && s.committed_at <= now)
            .map(|s| s.id)
            .collect()
    }

    /// Removes server `id`, as if deleted outside this service.
    pub fn remove_server(&self, id: u64) {
        self.data.lock().unwrap().servers.remove(&id);
    }

    /// The most requests received within any one second, counting from the `from`-th request
    /// of the log.
    pub fn peak_per_second(&self, from: usize) -> usize {
        let times = self.data.lock().unwrap().log_times.clone();
        let times = &times[from.min(times.len())..];
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| t.duration_since(times[i]) < Duration::from_secs(1))
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Stage timing from now on: a server (new or rebuilt) has no IPv4 address for `network`,
    /// and says `deploying` for `deploy` (both counted from its create or rebuild).
    pub fn set_stages(&self, network: Duration, deploy: Duration) {
        let mut data = self.data.lock().unwrap();
        data.network_delay = network;
        data.deploy_delay = Some(deploy);
    }

    /// Creates `count` servers in `project` at once, deployed, each tagged with `tags` and the
    /// `svc-sandbox` tag `<prefix><n>` (benchmarks).
    pub fn seed_servers(&self, project: u64, count: usize) -> Vec<u64> {
        (0..count)
            .map(|_| {
                let id = self.create_foreign_server(project);
                let mut data = self.data.lock().unwrap();
                if let Some(server) = data.servers.get_mut(&id) {
                    server.deploy_started -= 3_600_000;
                }
                id
            })
            .collect()
    }

    /// How many servers exist (committed by now).
    pub fn server_count(&self) -> usize {
        let now = self.clock.now_millis();
        let data = self.data.lock().unwrap();
        data.servers
            .values()
            .filter(|s| s.committed_at <= now)
            .count()
    }

    /// Whether server `id` is powered on (`None` when it does not exist).
    pub fn powered_on(&self, id: u64) -> Option<bool> {
        self.data
            .lock()
            .unwrap()
            .servers
            .get(&id)
            .map(|s| s.power_on)
    }

    /// How many servers (committed by now) carry tag `tag` = `value`.
    pub fn servers_tagged(&self, tag: &str, value: &str) -> usize {
        let now = self.clock.now_millis();
        self.data
            .lock()
            .unwrap()
            .servers
            .values()
            .filter(|s| s.committed_at <= now && s.tags[tag].as_str() == Some(value))
            .count()
    }

    /// How many `upgrade` actions were sent (whatever their answer).
    pub fn upgrades(&self) -> usize {
        let data = self.data.lock().unwrap();
        data.bodies
            .iter()
            .filter(|b| b["body"]["type"] == "upgrade")
            .count()
    }

    /// The plan (slug) the server is on.
    pub fn plan_of(&self, id: u64) -> Option<String> {
        self.data
            .lock()
            .unwrap()
            .servers
            .get(&id)
            .map(|s| s.plan.clone())
    }

    /// The tags the server was created with.
    pub fn server_tags(&self, id: u64) -> Option<Value> {
        self.data
            .lock()
            .unwrap()
            .servers
            .get(&id)
            .map(|s| s.tags.clone())
    }

    /// Creates a server directly with `tags`, as if provisioned by another deployment (or by
    /// hand); its id.
    pub fn create_tagged_server(&self, project: u64, tags: Value) -> u64 {
        let id = self.create_foreign_server(project);
        if let Some(server) = self.data.lock().unwrap().servers.get_mut(&id) {
            server.tags = tags;
        }
        id
    }

    /// Creates a server directly, as if someone provisioned it outside this service.
    pub fn create_foreign_server(&self, project: u64) -> u64 {
        let now = self.clock.now_millis();
        let mut data = self.data.lock().unwrap();
        data.next_id += 1;
        let id = data.next_id;
        data.servers.insert(
            id,
            SimServer {
                id,
                project,
                plan: "B1-1-1gb-20s-shared".into(),
                region: "LT-Siauliai".into(),
                hostname: format!("foreign-{id}"),
                image: "debian_12_64bit".into(),
                tags: json!({}),
                ssh_keys: vec![],
                authorized: vec![],
                address: None,
                created_at: self.clock.rfc3339(),
                deploy_started: now,
                committed_at: now,
                power_on: true,
                rescue: false,
            },
        );
        id
    }

    /// (network delay, deploy delay) now.
    fn timing(&self, data: &Data) -> (Duration, Duration) {
        (
            data.network_delay,
            data.deploy_delay.unwrap_or(self.deploy_delay),
        )
    }

    /// Whether `s` exists for readers at clock time `now` (milliseconds).
    fn visible(data: &Data, s: &SimServer, now: i64) -> bool {
        !data.forgotten && s.committed_at <= now
    }

    fn render(&self, s: &SimServer, (network, deploy): (Duration, Duration)) -> Value {
        let elapsed =
            Duration::from_millis((self.clock.now_millis() - s.deploy_started).max(0) as u64);
        let deploying = elapsed < deploy;
        let addressed = elapsed >= network;
        let (state, status) = if s.rescue {
            ("active", "rescue mode")
        } else if deploying {
            ("pending", "deploying")
        } else {
            ("active", "deployed")
        };
        let plan = find_plan(&s.plan).unwrap_or(Value::Null);
        let image_name = image_name(&s.image);
        let octet = s.id % 250 + 2;
        let (address, cidr, gateway) = match &s.address {
            Some(address) => (
                address.clone(),
                "127.0.0.0/8".to_owned(),
                "127.0.0.1".to_owned(),
            ),
            None => (
                format!("203.0.113.{octet}"),
                "203.0.113.0/24".to_owned(),
                "203.0.113.1".to_owned(),
            ),
        };
        json!({
            "id": s.id,
            "name": plan["name"],
            "href": format!("/servers/{}", s.id),
            "hostname": s.hostname,
            "username": "root",
            "password": "q7Rk2mZp9LwTx4Vb",
            "image": image_name,
            "deployed_image": {"name": image_name, "slug": s.image},
            "spot_instance": false,
            "region": region(&s.region),
            "state": state,
            "status": status,
            "bgp": {"enabled": false, "available": false, "status": "Disabled", "routers": 0,
                    "connected": 0, "limit": 0, "active": 0, "routes": [], "updated": s.created_at},
            "plan": {"id": plan["id"], "href": plan["href"], "name": plan["name"],
                "slug": plan["slug"],
                     "type": plan["type"], "category": plan["category"],
                         "pricing": plan["pricing"]},
            "pricing": {"id": 37, "currency": "EUR", "unit": "Hours", "unit_price": 0.0,
                        "discount": 0.0, "discount_percentage": false, "price_subtotal": 0.0,
                        "taxed": true, "price_total": 0.0, "price": 0.0, "quantity": 0,
                        "billable_amount": 0.0},
            "ip_addresses": if addressed { json!([{
                "id": format!("5b0c6e1a-2f4d-4c61-9a7e-{:012}", s.id),
                "address": address, "address_family": 4,
                "cidr": cidr, "gateway": gateway, "type": "primary-ip",
                "href": format!("/ips/5b0c6e1a-2f4d-4c61-9a7e-{:012}", s.id)
            }]) } else { json!([]) },
            "ssh_keys": s.ssh_keys.iter().map(|k| json!({"id": k,
                "href": format!("/ssh-keys/{k}")})).collect::<Vec<_>>(),
            "tags": s.tags,
            "termination_date": "None",
            "created_at": s.created_at,
            // A deployed server moves a kilobyte a second (the provider counts it).
            "traffic_used_bytes": elapsed.saturating_sub(deploy).as_secs() * 1000,
            "network": if deploying { "unknown" } else { "on" },
            "project": project(s.project).unwrap_or(Value::Null),
        })
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": status.as_u16(), "message": message})),
    )
        .into_response()
}

fn array(items: Vec<Value>) -> Response {
    let total = items.len().to_string();
    let mut response = axum::Json(Value::Array(items)).into_response();
    if let Ok(v) = HeaderValue::from_str(&total) {
        response.headers_mut().insert("x-total-count", v);
    }
    response
}

/// Checks the token, logs the request and applies queued faults.
async fn gatekeeper(State(sim): State<Arc<Simulator>>, request: Request, next: Next) -> Response {
    let path = request
        .uri()
        .path()
        .strip_prefix("/v1")
        .unwrap_or(request.uri().path())
        .to_owned();
    let method = request.method().clone();
    let fault = {
        let mut data = sim.data.lock().unwrap();
        data.log.push(format!("{method} {path}"));
        data.log_times.push(Instant::now());
        let position = data.faults.iter().position(|f| {
            path.starts_with(&f.path_prefix) && f.method.as_ref().is_none_or(|m| *m == method)
        });
        position.and_then(|i| data.faults.remove(i))
    };
    let request = if matches!(method, Method::POST | Method::PUT) {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        if let Ok(body) = serde_json::from_slice::<Value>(&bytes) {
            let written = json!({"method": method.as_str(), "path": path, "body": body});
            sim.data.lock().unwrap().bodies.push(written);
        }
        Request::from_parts(parts, axum::body::Body::from(bytes))
    } else {
        request
    };
    let expected = format!("Bearer {}", sim.token);
    let authorised = request
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes());
    if !authorised {
        return error(StatusCode::UNAUTHORIZED, "Invalid or missing API key.");
    }
    let Some(fault) = fault else {
        return next.run(request).await;
    };
    if fault.after {
        let response = next.run(request).await;
        tokio::time::sleep(fault.delay).await;
        return injected(&fault).unwrap_or(response);
    }
    tokio::time::sleep(fault.delay).await;
    match injected(&fault) {
        Some(response) => response,
        None => next.run(request).await,
    }
}

/// The error answer of a fault with a status.
fn injected(fault: &Fault) -> Option<Response> {
    let status = StatusCode::from_u16(fault.status?).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = error(status, "Injected failure");
    if let Some(secs) = fault.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    Some(response)
}

/// `POST /_sim/faults`: queues a fault (the JSON of [`Fault`]); for `make dev`.
/// `GET /_sim/bodies`: every JSON body clients wrote so far (`{method, path, body}`), for a
/// contract to hold them to the provider's request schemas (`infra/provider-contract.py`).
async fn written_bodies(State(sim): State<Arc<Simulator>>) -> Response {
    array(sim.data.lock().unwrap().bodies.clone())
}

async fn queue_fault(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Fault>(&body) {
        Ok(fault) => {
            sim.inject(fault);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

mod method_name {
    use axum::http::Method;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Method>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|m| m.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// The simulator's routes, under `/v1`.
pub fn router(sim: Arc<Simulator>) -> Router {
    let control = Router::new()
        .route("/_sim/faults", axum::routing::post(queue_fault))
        .route("/_sim/bodies", get(written_bodies))
        .with_state(sim.clone());
    Router::new()
        .route("/v1/ssh-keys", get(ssh::list_keys).post(ssh::add_key))
        .route(
            "/v1/ssh-keys/{id}",
            get(ssh::get_key)
                .put(ssh::update_key)
                .delete(ssh::delete_key),
        )
        .route("/v1/plans", get(|| async { array(plans()) }))
        .route("/v1/teams/{team}/plans", get(team_plans))
        .route("/v1/plans/{plan}", get(get_plan))
        .route("/v1/plans/{plan}/images", get(plan_images))
        .route("/v1/regions", get(|| async { array(regions()) }))
        .route("/v1/teams", get(|| async { array(vec![team()]) }))
        .route("/v1/teams/{team}/projects", get(team_projects))
        .route(
            "/v1/projects/{project}/servers",
            get(list_servers).post(create_server),
        )
        .route(
            "/v1/servers/{id}",
            get(get_server).put(update_server).delete(delete_server),
        )
        .route(
            "/v1/servers/{id}/actions",
            axum::routing::post(server_action),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Resource not found.") })
        .layer(middleware::from_fn_with_state(sim.clone(), gatekeeper))
        .with_state(sim)
        .merge(control)
}

async fn team_plans(Path(team): Path<String>) -> Response {
    if team != TEAM_ID.to_string() {
        return error(StatusCode::NOT_FOUND, "Team not found.");
    }
    array(plans())
}

/// `GET plans/{id_or_slug}` (the official SDK's `plans.get_by_id_or_slug`).
async fn get_plan(Path(plan): Path<String>) -> Response {
    match find_plan(&plan) {
        Some(p) => axum::Json(p).into_response(),
        None => error(StatusCode::NOT_FOUND, "Plan not found."),
    }
}

async fn plan_images(Path(plan): Path<String>) -> Response {
    match find_plan(&plan) {
        Some(p) => array(images_of(&p)),
        None => error(StatusCode::NOT_FOUND, "Plan not found."),
    }
}

async fn team_projects(Path(team): Path<String>) -> Response {
    if team != TEAM_ID.to_string() {
        return error(StatusCode::NOT_FOUND, "Team not found.");
    }
    array(projects())
}

async fn list_servers(
    State(sim): State<Arc<Simulator>>,
    Path(project): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let Some(project) = project
        .parse::<u64>()
        .ok()
        .filter(|p| self::project(*p).is_some())
    else {
        return error(StatusCode::NOT_FOUND, "Project not found.");
    };
    let number = |name: &str| query.get(name).and_then(|v| v.parse::<usize>().ok());
    let offset = number("offset").unwrap_or(0);
    let mut data = sim.data.lock().unwrap();
    let response = list_page(&sim, &data, project, offset, number("limit"));
    for id in std::mem::take(&mut data.delete_after_page) {
        data.servers.remove(&id);
    }
    response
}

/// One page of `project`'s listing from `offset`, at most `limit` (none or 0: every server).
fn list_page(
    sim: &Simulator,
    data: &Data,
    project: u64,
    offset: usize,
    limit: Option<usize>,
) -> Response {
    let now = sim.clock.now_millis();
    let lag = data.listing_lag.as_millis() as i64;
    let listed: Vec<&SimServer> = data
        .servers
        .values()
        .filter(|s| s.project == project && Simulator::visible(data, s, now - lag))
        .collect();
    // `limit=0` or none: no limit (reference §1), but never more than the page cap.
    let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let size = limit.min(data.page_cap.unwrap_or(usize::MAX));
    let timing = sim.timing(data);
    let page: Vec<Value> = listed
        .iter()
        .skip(offset)
        .take(size)
        .map(|s| sim.render(s, timing))
        .collect();
    let mut response = array(page);
    if let Ok(v) = HeaderValue::from_str(&listed.len().to_string()) {
        response.headers_mut().insert("x-total-count", v);
    }
    response
}

/// A 400 message of the provider's.
type Refusal = &'static str;

fn body_json(body: &Bytes) -> Result<Value, Refusal> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .ok_or("Request body is not a valid JSON object.")
}

fn ssh_key_ids(value: Option<&Value>) -> Result<Vec<u64>, Refusal> {
    let bad = || "Invalid SSH key id.";
    match value {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Number(n) => n.as_u64().ok_or_else(bad),
                Value::String(s) => s.parse().map_err(|_| bad()),
                _ => Err(bad()),
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// The account keys `value` names (ids) and their texts; a refusal for an unknown id.
fn account_keys(
    sim: &Simulator,
    value: Option<&Value>,
) -> Result<(Vec<u64>, Vec<String>), Refusal> {
    let keys = sim.data.lock().unwrap().keys.clone();
    account_keys_in(&keys, value)
}

fn account_keys_in(
    keys: &BTreeMap<u64, ssh::AccountKey>,
    value: Option<&Value>,
) -> Result<(Vec<u64>, Vec<String>), Refusal> {
    let ids = ssh_key_ids(value)?;
    let texts = ids
        .iter()
        .map(|id| keys.get(id).map(|k| k.key.clone()))
        .collect::<Option<Vec<_>>>()
        .ok_or("Given SSH key was not found.")?;
    Ok((ids, texts))
}

fn check_user_data(value: Option<&Value>) -> Result<(), Refusal> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if base64::engine::general_purpose::STANDARD.decode(s).is_ok() => {
            Ok(())
        }
        Some(_) => Err("user_data must be base64 encoded."),
    }
}

async fn create_server(
    State(sim): State<Arc<Simulator>>,
    Path(project): Path<String>,
    body: Bytes,
) -> Response {
    let Some(project) = project
        .parse::<u64>()
        .ok()
        .filter(|p| self::project(*p).is_some())
    else {
        return error(StatusCode::NOT_FOUND, "Project not found.");
    };
    let body = match body_json(&body) {
        Ok(b) => b,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let Some(plan) = body["plan"].as_str().and_then(find_plan) else {
        return error(StatusCode::BAD_REQUEST, "Given server plan was not found.");
    };
    let Some(region) = body["region"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "Region is required.");
    };
    let stock = plan["available_regions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["slug"] == region)
        .and_then(|r| r["stock_qty"].as_i64());
    match stock {
        None => {
            return error(
                StatusCode::BAD_REQUEST,
                "Given region was not found for this plan.",
            );
        }
        Some(0) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Plan is out of stock in the selected region.",
            );
        }
        Some(_) => {}
    }
    let image = match body.get("image").and_then(Value::as_str) {
        None => "ubuntu_24_04_64bit".to_owned(),
        Some(slug) if images_of(&plan).iter().any(|i| i["slug"] == slug) => slug.to_owned(),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Given image is not available for this plan.",
            );
        }
    };
    let (ssh_keys, authorized) = match account_keys(&sim, body.get("ssh_keys")) {
        Ok(keys) => keys,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    if let Err(m) = check_user_data(body.get("user_data")) {
        return error(StatusCode::BAD_REQUEST, m);
    }
    let tags = match body.get("tags") {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(t)) if t.values().all(Value::is_string) => Value::Object(t.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Tags must be an object of strings.",
            );
        }
    };
    let now = sim.clock.now_millis();
    let mut data = sim.data.lock().unwrap();
    let late = data.late_creates.pop_front();
    data.next_id += 1;
    let id = data.next_id;
    let hostname = body["hostname"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("honest-toucan-{id}"));
    let server = SimServer {
        id,
        project,
        plan: plan["slug"].as_str().unwrap_or_default().to_owned(),
        region: region.to_owned(),
        hostname,
        image,
        tags,
        ssh_keys,
        authorized,
        address: None,
        created_at: sim.clock.rfc3339(),
        deploy_started: now,
        committed_at: now + late.map_or(0, |d| d.as_millis() as i64),
        power_on: true,
        rescue: false,
    };
    let mut server = server;
    if let Some(port) = data.ssh_port {
        match ssh::serve(Arc::downgrade(&sim), id, port) {
            Ok((address, daemon)) => {
                server.address = Some(address);
                data.daemons.insert(id, daemon);
            }
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    }
    let rendered = sim.render(&server, sim.timing(&data));
    data.servers.insert(id, server);
    if late.is_some() {
        return error(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout");
    }
    (StatusCode::CREATED, axum::Json(rendered)).into_response()
}

fn server_id(id: &str) -> Option<u64> {
    id.parse().ok()
}

async fn get_server(
    State(sim): State<Arc<Simulator>>,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let data = sim.data.lock().unwrap();
    let timing = sim.timing(&data);
    let now = sim.clock.now_millis();
    let Some(server) = server_id(&id)
        .and_then(|id| data.servers.get(&id))
        .filter(|s| Simulator::visible(&data, s, now))
    else {
        return error(StatusCode::NOT_FOUND, "Server not found.");
    };
    if query.get("fields").map(String::as_str) == Some("power") {
        let power = if server.power_on { "on" } else { "off" };
        return axum::Json(json!({ "power": power })).into_response();
    }
    axum::Json(sim.render(server, timing)).into_response()
}

/// `PUT servers/{id}` (the official SDK's `servers.update`): `hostname` and `tags` replaced
/// where given (`name` and `bgp` are accepted and kept nowhere); the server as it is now.
async fn update_server(
    State(sim): State<Arc<Simulator>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match body_json(&body) {
        Ok(b) => b,
        Err(reason) => return error(StatusCode::BAD_REQUEST, reason),
    };
    let now = sim.clock.now_millis();
    let mut data = sim.data.lock().unwrap();
    let timing = sim.timing(&data);
    let Some(server) = server_id(&id)
        .filter(|id| {
            data.servers
                .get(id)
                .is_some_and(|s| Simulator::visible(&data, s, now))
        })
        .and_then(|id| data.servers.get_mut(&id))
    else {
        return error(StatusCode::NOT_FOUND, "Server not found.");
    };
    if let Some(hostname) = body["hostname"].as_str() {
        server.hostname = hostname.to_owned();
    }
    if body["tags"].is_object() {
        server.tags = body["tags"].clone();
    }
    let server = server.clone();
    axum::Json(sim.render(&server, timing)).into_response()
}

async fn delete_server(State(sim): State<Arc<Simulator>>, Path(id): Path<String>) -> Response {
    let now = sim.clock.now_millis();
    let mut data = sim.data.lock().unwrap();
    let known = server_id(&id)
        .and_then(|id| data.servers.get(&id))
        .is_some_and(|s| Simulator::visible(&data, s, now));
    match server_id(&id)
        .filter(|_| known)
        .and_then(|id| data.servers.remove(&id))
    {
        Some(server) => {
            data.deletions.push((server.id, now));
            data.daemons.remove(&server.id);
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, "Server not found."),
    }
}

async fn server_action(
    State(sim): State<Arc<Simulator>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match body_json(&body) {
        Ok(b) => b,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let now = sim.clock.now_millis();
    let mut data = sim.data.lock().unwrap();
    let timing = sim.timing(&data);
    let strict = data.strict_power;
    let keys = data.keys.clone();
    let known = server_id(&id)
        .and_then(|id| data.servers.get(&id))
        .is_some_and(|s| Simulator::visible(&data, s, now));
    let Some(server) = server_id(&id)
        .filter(|_| known)
        .and_then(|id| data.servers.get_mut(&id))
    else {
        return error(StatusCode::NOT_FOUND, "Server not found.");
    };
    let wanted = match body["type"].as_str().unwrap_or_default() {
        "power-on" | "power_on" => Some(true),
        "power-off" | "power_off" => Some(false),
        _ => None,
    };
    if strict && wanted == Some(server.power_on) {
        let message = if server.power_on {
            "Server is already powered on."
        } else {
            "Server is already powered off."
        };
        return error(StatusCode::UNPROCESSABLE_ENTITY, message);
    }
    let baremetal = find_plan(&server.plan).is_some_and(|p| p["type"] == "baremetal");
    match body["type"].as_str().unwrap_or_default() {
        "power-on" | "power_on" => server.power_on = true,
        "power-off" | "power_off" => server.power_on = false,
        "reboot" => server.power_on = true,
        "rebuild" | "reinstall" => {
            let (Some(image), Some(_password)) =
                (body["image"].as_str(), body["password"].as_str())
            else {
                return error(StatusCode::BAD_REQUEST, "Image and password are required.");
            };
            let plan = find_plan(&server.plan).unwrap_or(Value::Null);
            if !images_of(&plan).iter().any(|i| i["slug"] == image) {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Given image is not available for this plan.",
                );
            }
            match account_keys_in(&keys, body.get("ssh_keys")) {
                Ok((ids, authorized)) => {
                    server.ssh_keys = ids;
                    server.authorized = authorized;
                }
                Err(m) => return error(StatusCode::BAD_REQUEST, m),
            }
            if let Err(m) = check_user_data(body.get("user_data")) {
                return error(StatusCode::BAD_REQUEST, m);
            }
            server.image = image.to_owned();
            if let Some(hostname) = body["hostname"].as_str() {
                server.hostname = hostname.to_owned();
            }
            server.rescue = false;
            server.power_on = true;
            server.deploy_started = now;
        }
        "enter-rescue-mode" => {
            if !baremetal {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Rescue mode is available for bare metal servers only.",
                );
            }
            if body["password"].as_str().is_none() {
                return error(StatusCode::BAD_REQUEST, "Password is required.");
            }
            server.rescue = true;
        }
        "exit-rescue-mode" => {
            if !server.rescue {
                return error(StatusCode::BAD_REQUEST, "Server is not in rescue mode.");
            }
            server.rescue = false;
        }
        "upgrade" => {
            if let Err(m) = upgradable(&server.plan, &server.region, body["plan"].as_str()) {
                return error(StatusCode::BAD_REQUEST, m);
            }
            server.plan = body["plan"].as_str().unwrap_or_default().to_owned();
            server.power_on = true;
        }
        _ => return error(StatusCode::BAD_REQUEST, "Unknown action type."),
    }
    let rendered = sim.render(server, timing);
    (StatusCode::ACCEPTED, axum::Json(rendered)).into_response()
}

/// Whether a server on plan `from` in `region` can move to plan `to` (the Go client's "Upgrade
/// virtual server plan"): VPS to a VPS plan in stock there, never to a cheaper one (disks do not
/// shrink).
fn upgradable(from: &str, region: &str, to: Option<&str>) -> Result<(), &'static str> {
    let hourly = |plan: &Value| {
        plan["pricing"]
            .as_array()
            .and_then(|p| p.iter().find(|e| e["unit"] == "Hourly"))
            .and_then(|e| e["price"].as_f64())
            .unwrap_or_default()
    };
    let (Some(from), Some(to)) = (find_plan(from), to.and_then(find_plan)) else {
        return Err("Plan is required and must exist.");
    };
    if from["type"] != "vps" || to["type"] != "vps" {
        return Err("Only virtual servers can be upgraded.");
    }
    let stock = to["available_regions"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["slug"] == region))
        .and_then(|r| r["stock_qty"].as_u64())
        .unwrap_or_default();
    if stock == 0 {
        return Err("Plan is not available in the server's region.");
    }
    if hourly(&to) <= hourly(&from) {
        return Err("Server can only be upgraded to a bigger plan.");
    }
    Ok(())
}

/// The simulator's team id.
pub const TEAM_ID: u64 = 210_345;
/// The simulator's project ids (of team [`TEAM_ID`]).
pub const PROJECT_IDS: [u64; 2] = [254_871, 254_872];

fn team() -> Value {
    json!({
        "id": TEAM_ID, "name": "Acme Ops", "href": format!("/teams/{TEAM_ID}"),
        "credit": {
            "account": {"remaining": 0.0, "usage": 0.0, "currency": "EUR"},
            "promo": {"remaining": 42.5, "usage": 0.0363, "currency": "EUR"},
            "resources": {"pricing": {"price": 0.0363, "taxed": true, "currency": "EUR",
                "unit": "Hourly"},
                          "remaining": {"time": 1170, "unit": "Hourly"}}
        },
        "billing": {"type": "business", "company_name": "Acme UAB", "country_iso_2": "LT",
                    "vat": {"amount": 21, "number": "LT100000000017", "valid": true},
                        "currency": "EUR"}
    })
}

fn projects() -> Vec<Value> {
    PROJECT_IDS
        .iter()
        .zip(["ci-runners", "agents"])
        .map(|(id, name)| {
            json!({"id": id, "name": name, "bgp": {"enabled": false, "local_asn": 0},
                   "href": format!("/projects/{id}")})
        })
        .collect()
}

fn project(id: u64) -> Option<Value> {
    projects().into_iter().find(|p| p["id"] == id)
}

fn regions() -> Vec<Value> {
    [
        (1, "Lithuania", "LT-Siauliai", "LT", "Lithuania, Šiauliai"),
        (
            2,
            "Netherlands",
            "NL-Amsterdam",
            "NL",
            "Netherlands, Amsterdam",
        ),
        (
            3,
            "United States",
            "US-Chicago",
            "US",
            "United States, Chicago",
        ),
    ]
    .iter()
    .map(|(id, name, slug, iso, location)| {
        json!({"id": id, "name": name, "slug": slug, "region_iso_2": iso, "location": location,
               "bgp": {"hosts": [format!("198.51.100.{}", 10 + id)], "asn": 64512 + id},
               "href": format!("/regions/{id}")})
    })
    .collect()
}

fn region(slug: &str) -> Value {
    regions()
        .into_iter()
        .find(|r| r["slug"] == slug)
        .unwrap_or(Value::Null)
}

fn price(id: u32, unit: &str, price: f64) -> Value {
    json!({"id": id, "unit": unit, "price": price, "currency": "EUR", "taxed": true})
}

fn plan(
    id: u32,
    slug: &str,
    name: &str,
    kind: &str,
    pricing: Vec<Value>,
    stock: &[(&str, i64)],
) -> Value {
    let available: Vec<Value> = stock
        .iter()
        .map(|(slug, qty)| {
            let mut r = region(slug);
            r["stock_qty"] = json!(qty);
            r["spot_qty"] = json!(0);
            r
        })
        .collect();
    let softwares: Vec<Value> = if kind == "baremetal" {
        vec!["ubuntu_24_04_64bit", "debian_12_64bit", "windows_2022"]
    } else {
        vec!["ubuntu_24_04_64bit", "debian_12_64bit"]
    }
    .into_iter()
    .map(|slug| json!({"image": {"name": image_name(slug), "slug": slug}}))
    .collect();
    let category = if kind == "vps" {
        "Shared resources"
    } else {
        "lightweight"
    };
    json!({
        "id": id, "href": format!("/plans/{slug}"), "name": name, "slug": slug, "title": name,
        "custom": false, "type": kind, "category": category,
        "specs": {
            "cpus": {"count": 1, "name": name, "cores": if kind == "vps" { 1 } else { 6 },
                "frequency": 3.6, "unit": "GHz"},
            "memory": {"count": 1, "total": if kind == "vps" { 1 } else { 64 }, "unit": "GB",
                "name": "DDR4"},
            "storage": [{"count": 1, "name": "NVMe 20GB", "size": 20, "unit": "GB",
                "type": "NVME"}],
            "raid": {"name": "none"}, "nics": {"name": "1Gbps"}, "bandwidth": {"name": "1TB"}
        },
        "pricing": pricing,
        "available_regions": available,
        "softwares": softwares,
    })
}

/// Every plan the simulator offers.
pub fn plans() -> Vec<Value> {
    vec![
        plan(
            900,
            "cloud_vps_free",
            "Cloud VPS Free",
            "vps",
            vec![price(37, "Hourly", 0.0)],
            &[("LT-Siauliai", 25), ("NL-Amsterdam", 0)],
        ),
        plan(
            901,
            "bm_trial",
            "Bare Metal Trial",
            "baremetal",
            vec![price(3, "Monthly", 0.0), price(37, "Hourly", 0.0)],
            &[("LT-Siauliai", 2)],
        ),
        plan(
            625,
            "B1-1-1gb-20s-shared",
            "Cloud VPS 1",
            "vps",
            vec![price(37, "Hourly", 0.0218)],
            &[("LT-Siauliai", 40), ("NL-Amsterdam", 12)],
        ),
        plan(
            626,
            "B1-2-2gb-40s-shared",
            "Cloud VPS 2",
            "vps",
            vec![price(37, "Hourly", 0.0436)],
            &[("LT-Siauliai", 30)],
        ),
        plan(
            161,
            "e5_1650v4",
            "E5-1650v4",
            "baremetal",
            vec![
                price(3, "Monthly", 149.0),
                price(4, "Quarterly", 424.65),
                price(37, "Hourly", 0.2551),
                price(38, "Spot hourly", 0.0765),
            ],
            &[("LT-Siauliai", 7), ("NL-Amsterdam", 0)],
        ),
        plan(
            700,
            "amd_ryzen_9950x",
            "AMD Ryzen 9950X",
            "baremetal",
            vec![price(3, "Monthly", 289.0), price(37, "Hourly", 0.495)],
            &[("NL-Amsterdam", 3), ("US-Chicago", 1)],
        ),
    ]
}

/// The plan whose slug (or numeric id) is `slug`.
fn find_plan(slug: &str) -> Option<Value> {
    plans()
        .into_iter()
        .find(|p| p["slug"] == slug || slug.parse::<u64>().is_ok_and(|id| p["id"] == id))
}

fn image_name(slug: &str) -> &'static str {
    match slug {
        "ubuntu_24_04_64bit" => "Ubuntu 24.04 64bit",
        "debian_12_64bit" => "Debian 12 64bit",
        "windows_2022" => "Windows Server 2022",
        _ => "Unknown",
    }
}

fn images_of(plan: &Value) -> Vec<Value> {
    let ids = [
        ("ubuntu_24_04_64bit", 40991),
        ("debian_12_64bit", 40785),
        ("windows_2022", 39012),
    ];
    plan["softwares"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["image"]["slug"].as_str())
        .map(|slug| {
            let id = ids
                .iter()
                .find(|(s, _)| *s == slug)
                .map(|(_, id)| *id)
                .unwrap_or(1);
            let mut image = json!({"id": id, "name": image_name(slug), "slug": slug});
            if slug == "windows_2022" {
                image["pricing"] =
                    json!([{"unit": "Hourly", "price": 0.0411, "currency": "EUR", "taxed": true}]);
            }
            image
        })
        .collect()
}
