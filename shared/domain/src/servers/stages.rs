//! Stages (waiting, point 3): how far a provisioned server is from being usable, answered from
//! the store — never from the provider (the refresher, [`crate::servers::refresher`], keeps the store
//! current). Every sandbox and server answer carries `stage`:
//!
//! `ordered` (paid, no server yet) → `deploying` (no IPv4 address yet, or being rebuilt) →
//! `network-ready` (an IPv4 address is assigned) → `ready` (the provider says deployed and the
//! readiness check's SSH key exchange on port 22 answered) — or `failed` (the provider reports a
//! failed deployment, or the server missed its `deadlineAt` and was deleted; a paid order then
//! became a credit), and `terminated` once the server is gone. A powered-off server, or one an
//! action is changing, is `network-ready` until the refresher sees it answer again.
//!
//! With the stage: `etaAt` (the usual time to `ready` for the plan's class), `deadlineAt` (the
//! first deployment only), `statusAt` (when the provider was last read), `transition` (what an
//! action started and the refresher has not confirmed), and, once `ready`, `access`.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;
use crate::store::sandboxes::{
    HostKey, LeaseState, PlanClass, SandboxRecord, Status, Watch, WatchChange,
};
use crate::time::Timestamp;

/// Where a server is on its way to being usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Paid for; the provider has not created the server yet.
    Ordered,
    /// Created; no IPv4 address yet (or being rebuilt).
    Deploying,
    /// An IPv4 address is assigned; SSH does not answer yet (or the server is off).
    NetworkReady,
    /// Deployed, and port 22 completed an SSH key exchange.
    Ready,
    /// The deployment failed or missed its deadline.
    Failed,
    /// The server is gone.
    Terminated,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 6] = [
        Stage::Ordered,
        Stage::Deploying,
        Stage::NetworkReady,
        Stage::Ready,
        Stage::Failed,
        Stage::Terminated,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Ordered => "ordered",
            Stage::Deploying => "deploying",
            Stage::NetworkReady => "network-ready",
            Stage::Ready => "ready",
            Stage::Failed => "failed",
            Stage::Terminated => "terminated",
        }
    }

    /// The stage named `name`.
    pub fn parse(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The statuses of a sandbox without a watch (recorded before watches existed, or a metadata
/// record) that mean it holds no server.
const ENDED_WITHOUT_WATCH: [Status; 5] = [
    Status::Recorded,
    Status::Terminating,
    Status::Terminated,
    Status::Credited,
    Status::Redeemed,
];

/// Whether `record` stands for a server that exists or is being provisioned: not failed, not
/// terminated, not an order that never delivered one. A record without a watch holds one when
/// it names a server and its status does not say it ended.
pub fn live(record: &SandboxRecord) -> bool {
    match &record.watch {
        Some(_) => !matches!(stage(record), Some(Stage::Failed | Stage::Terminated)),
        None => record.server_id.is_some() && !ENDED_WITHOUT_WATCH.contains(&record.status),
    }
}

/// The watch of a paid order's new sandbox: `ordered`, its deployment timed from `at`.
pub fn ordered(class: PlanClass, at: Timestamp) -> Watch {
    Watch {
        class,
        since: at,
        first: true,
        server: None,
        status_at: None,
        power: None,
        transition: None,
        transition_at: None,
        ready_at: None,
        host_keys: Vec::new(),
        failed: None,
        unreachable: None,
        seq: 0,
    }
}

/// The watch of a server the provider just created (answered `object`, read at `at`): its
/// first deployment, timed from `since` (the order's claim, or now for a free server).
pub fn created(object: &Value, since: Timestamp, at: Timestamp) -> Watch {
    let plan_type = object["plan"]["type"].as_str();
    Watch {
        server: Some(crate::upstream::without_credentials(object.clone()).to_string()),
        status_at: Some(at),
        power: Some("on".into()),
        ..ordered(PlanClass::of_type(plan_type), since)
    }
}

/// A change that makes the refresher read `record`'s server on its next pass (after a delete),
/// conditional on the watch as read; `None` for a record without a watch.
pub fn recheck(record: &SandboxRecord, now: i64) -> Option<WatchChange> {
    record.watch.as_ref().map(|watch| WatchChange {
        watch: Watch {
            seq: watch.seq + 1,
            ..watch.clone()
        },
        read_seq: Some(watch.seq),
        due: Some(now),
    })
}

/// The server object of a watch, as last read (without credentials).
pub fn server_object(watch: &Watch) -> Option<Value> {
    watch
        .server
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
}

/// The first address of `family` (4 or 6) of a server object: its public (`primary-ip`) one
/// when it has one, else any that is not private.
pub fn address(object: &Value, family: u64) -> Option<String> {
    let ips = object["ip_addresses"].as_array()?;
    let of_family = |ip: &&Value| ip["address_family"].as_u64() == Some(family);
    ips.iter()
        .filter(of_family)
        .find(|ip| ip["type"] == "primary-ip")
        .or_else(|| {
            ips.iter()
                .filter(of_family)
                .find(|ip| ip["type"] != "private-ip")
        })
        .and_then(|ip| ip["address"].as_str())
        .map(str::to_owned)
}

/// The stage of `record`; `None` for a metadata record.
pub fn stage(record: &SandboxRecord) -> Option<Stage> {
    let lease = record.lease.as_ref().map(|l| l.state);
    if record.watch.as_ref().is_some_and(|w| w.failed.is_some()) {
        return Some(Stage::Failed);
    }
    if record.status.is_ending()
        || matches!(
            lease,
            Some(LeaseState::Terminating | LeaseState::Terminated | LeaseState::Ended)
        )
    {
        return Some(Stage::Terminated);
    }
    let watch = record.watch.as_ref()?;
    if record.status.is_undelivered() {
        return Some(Stage::Failed);
    }
    if record.server_id.is_none() {
        return Some(Stage::Ordered);
    }
    let Some(object) = server_object(watch) else {
        return Some(Stage::Deploying);
    };
    if watch.transition.as_deref() == Some("rebuilding") || address(&object, 4).is_none() {
        return Some(Stage::Deploying);
    }
    let running =
        watch.power.as_deref() != Some("off") && matches!(lease, None | Some(LeaseState::Active));
    if watch.ready_at.is_some() && watch.transition.is_none() && running {
        Some(Stage::Ready)
    } else {
        Some(Stage::NetworkReady)
    }
}

/// How to reach a `ready` server: addresses, SSH user and port, and the host keys the readiness
/// check received (verify them on first connect).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// Public IPv4 address.
    pub ipv4: Option<String>,
    /// Public IPv6 address, when the server has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<String>,
    /// The provider's login user (`root` unless it says otherwise).
    pub ssh_user: String,
    /// The port SSH listens on: 22 (`SSH_PORT` on a local stack).
    pub ssh_port: u16,
    /// `{algorithm, fingerprint}` (OpenSSH `SHA256:` form) of each host key seen.
    pub host_keys: Vec<HostKey>,
    /// The caller's SSH keys the server was created (or last rebuilt) with: `{id, fingerprint}`
    /// (`SHA256:` form); log in with the private key of one of them.
    pub authorized_keys: Vec<crate::store::ssh_keys::AuthorizedKey>,
    /// When the readiness check saw them, RFC 3339.
    pub checked_at: Option<crate::time::Timestamp>,
}

/// The progress fields of an answer about a provisioned server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// See [`Stage`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// When the server is usually `ready` (RFC 3339), until it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta_at: Option<crate::time::Timestamp>,
    /// A first deployment not `ready` by then is deleted (RFC 3339), until it is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<crate::time::Timestamp>,
    /// When the provider's state was last read (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_at: Option<crate::time::Timestamp>,
    /// `on` / `off`, as last read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power: Option<String>,
    /// What an action started and the refresher has not confirmed yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    /// Why the deployment failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Why a deployed, running server is not `ready` yet: SSH did not answer by its deadline
    /// (the server stays; the check goes on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// How to connect, once `ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
}

fn plus(at: Timestamp, by: Duration) -> Timestamp {
    at.plus(by.as_secs() as i64)
}

/// The deployment's usual duration and deadline for `class`.
pub fn timing(state: &AppState, class: PlanClass) -> (Duration, Duration) {
    let watch = &state.config.watch;
    match class {
        PlanClass::Vps => (watch.eta.0, watch.deadline.0),
        PlanClass::Baremetal => (watch.eta.1, watch.deadline.1),
    }
}

/// When the current deployment of `watch` must be ready, if it has a deadline.
pub fn deadline_at(state: &AppState, watch: &Watch) -> Option<Timestamp> {
    watch
        .first
        .then(|| plus(watch.since, timing(state, watch.class).1))
}

impl Progress {
    /// The progress of `record` (empty for a metadata record).
    pub fn of(state: &AppState, record: &SandboxRecord) -> Self {
        let (Some(stage), Some(watch)) = (stage(record), record.watch.as_ref()) else {
            return Progress::default();
        };
        let waiting = matches!(
            stage,
            Stage::Ordered | Stage::Deploying | Stage::NetworkReady
        ) && watch.ready_at.is_none();
        let object = server_object(watch);
        let access = object
            .as_ref()
            .filter(|_| stage == Stage::Ready)
            .map(|object| Access {
                ipv4: address(object, 4),
                ipv6: address(object, 6),
                ssh_user: object["username"].as_str().unwrap_or("root").to_owned(),
                ssh_port: state.config.watch.ssh_port,
                host_keys: watch.host_keys.clone(),
                authorized_keys: record.authorized_keys.clone(),
                checked_at: watch.ready_at,
            });
        Progress {
            stage: Some(stage),
            eta_at: waiting.then(|| plus(watch.since, timing(state, watch.class).0)),
            deadline_at: waiting.then(|| deadline_at(state, watch)).flatten(),
            status_at: watch.status_at,
            power: watch.power.clone(),
            transition: watch.transition.clone(),
            failure: watch.failed.clone(),
            unreachable: watch.unreachable.clone(),
            access,
        }
    }

    /// Adds these fields (and `sandboxId`) to a provider server object.
    pub fn annotate(&self, server: &mut Value, sandbox_id: &str) {
        if let (Value::Object(fields), Ok(Value::Object(progress))) =
            (server, serde_json::to_value(self))
        {
            fields.insert("sandboxId".into(), Value::from(sandbox_id));
            fields.extend(progress);
        }
    }
}

/// Adds `sandboxId` and the progress of that sandbox as stored to `server` (a 201's object);
/// without the progress when the store cannot be read (logged).
pub async fn annotate_stored(state: &AppState, server: &mut Value, sandbox_id: &str) {
    let progress = match state.store.sandbox(sandbox_id).await {
        Ok(Some(record)) => Progress::of(state, &record),
        Ok(None) => Progress::default(),
        Err(err) => {
            tracing::warn!(sandbox = sandbox_id, error = %err, "cannot read the sandbox's stage");
            Progress::default()
        }
    };
    progress.annotate(server, sandbox_id);
}

/// Longest a long-poll holds, seconds.
pub const MAX_WAIT_SECONDS: u64 = 20;

/// A long-poll's query: `waitFor` (stage names, comma-separated) and `timeout` (seconds, at most
/// [`MAX_WAIT_SECONDS`]; default that).
///
/// Errors: 400 naming `waitFor` (an unknown or empty stage) or `timeout` (not a whole number
/// of seconds ≥ 0).
pub fn parse_wait(
    wait_for: &str,
    timeout: Option<&str>,
) -> Result<(Vec<Stage>, Duration), ApiError> {
    let names = || {
        Stage::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let stages = wait_for
        .split(',')
        .map(|name| {
            Stage::parse(name.trim()).ok_or_else(|| {
                ApiError::invalid(
                    "waitFor",
                    format!(
                        "`{}` is not a stage; one or more of {}",
                        name.trim(),
                        names()
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((stages, parse_timeout(timeout)?))
}

/// A long-poll's `timeout` (seconds; [`MAX_WAIT_SECONDS`] when absent, and at most that).
///
/// Errors: 400 naming `timeout` (not a whole number of seconds ≥ 0).
pub fn parse_timeout(timeout: Option<&str>) -> Result<Duration, ApiError> {
    let seconds = match timeout {
        None => MAX_WAIT_SECONDS,
        Some(t) => t.trim().parse::<u64>().map_err(|_| {
            ApiError::invalid(
                "timeout",
                format!("must be a whole number of seconds (at most {MAX_WAIT_SECONDS} are held)"),
            )
        })?,
    };
    Ok(Duration::from_secs(seconds.min(MAX_WAIT_SECONDS)))
}

/// Store reads of a long-poll: the first at once, then every 0.5 s growing to 2 s.
pub fn poll_interval(read: u32) -> Duration {
    Duration::from_millis((500.0 * 1.5f64.powi(read as i32)).min(2000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_queries_name_the_field_and_clamp_the_timeout() {
        let (stages, timeout) = parse_wait("ready, failed", Some("60")).unwrap();
        assert_eq!(stages, [Stage::Ready, Stage::Failed]);
        assert_eq!(timeout, Duration::from_secs(MAX_WAIT_SECONDS));
        assert_eq!(parse_wait("network-ready", None).unwrap().1.as_secs(), 20);
        assert_eq!(parse_wait("ordered", Some("0")).unwrap().1, Duration::ZERO);
        for (wait_for, timeout, field) in [
            ("", None, "waitFor"),
            ("ready,", None, "waitFor"),
            ("Ready", None, "waitFor"),
            ("ready", Some("1.5"), "timeout"),
            ("ready", Some("-1"), "timeout"),
        ] {
            match parse_wait(wait_for, timeout) {
                Err(ApiError::Invalid { field: f, .. }) => assert_eq!(f, field, "{wait_for}"),
                other => panic!("{wait_for} {timeout:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_public_address_is_preferred() {
        let object = serde_json::json!({"ip_addresses": [
            {"address": "10.0.0.7", "address_family": 4, "type": "private-ip"},
            {"address": "2001:db8::7", "address_family": 6, "type": "subnet"},
            {"address": "203.0.113.7", "address_family": 4, "type": "primary-ip"},
        ]});
        assert_eq!(address(&object, 4).as_deref(), Some("203.0.113.7"));
        assert_eq!(address(&object, 6).as_deref(), Some("2001:db8::7"));
        let private_only = serde_json::json!({"ip_addresses": [
            {"address": "10.0.0.7", "address_family": 4, "type": "private-ip"}]});
        assert_eq!(address(&private_only, 4), None);
        assert_eq!(address(&serde_json::json!({}), 4), None);
    }

    fn record(server: Option<u64>, watch: Option<Watch>) -> SandboxRecord {
        SandboxRecord {
            event_seq: 0,
            id: "sbx_1".into(),
            owner: crate::address::Owner::parse(&format!("0x{}", "1".repeat(40))).unwrap(),
            server_id: server,
            project_id: Some(1),
            plan: None,
            region: None,
            hostname: None,
            name: None,
            metadata: Default::default(),
            status: Status::from("deployed"),
            created_at: Timestamp::from_unix(1_795_392_000),
            updated_at: Timestamp::from_unix(1_795_392_000),
            lease: None,
            watch,
            payment: None,
            authorized_keys: Vec::new(),
            resizing: None,
        }
    }

    #[test]
    fn stages_follow_the_record() {
        let addressed = serde_json::json!({"status": "deployed", "ip_addresses": [
            {"address": "203.0.113.7", "address_family": 4, "type": "primary-ip"}]});
        let at = Timestamp::from_unix(1_795_392_000); // 2026-11-23T00:00:00Z
        let ready = Watch {
            ready_at: Some(at),
            ..created(&addressed, at, at)
        };
        assert_eq!(stage(&record(None, None)), None, "a metadata record");
        assert_eq!(
            stage(&record(None, Some(ordered(PlanClass::Vps, at)))),
            Some(Stage::Ordered)
        );
        let no_ip = created(&serde_json::json!({"ip_addresses": []}), at, at);
        assert_eq!(stage(&record(Some(1), Some(no_ip))), Some(Stage::Deploying));
        assert_eq!(
            stage(&record(Some(1), Some(created(&addressed, at, at)))),
            Some(Stage::NetworkReady)
        );
        assert_eq!(
            stage(&record(Some(1), Some(ready.clone()))),
            Some(Stage::Ready)
        );
        let off = Watch {
            power: Some("off".into()),
            ..ready.clone()
        };
        assert_eq!(
            stage(&record(Some(1), Some(off))),
            Some(Stage::NetworkReady)
        );
        let rebuilding = Watch {
            transition: Some("rebuilding".into()),
            ..ready.clone()
        };
        assert_eq!(
            stage(&record(Some(1), Some(rebuilding))),
            Some(Stage::Deploying)
        );
        let mut expired = record(Some(1), Some(ready.clone()));
        expired.lease = Some(crate::store::sandboxes::Lease {
            noticed: None,
            state: LeaseState::Expired,
            paid_until: at,
            grace_ends_at: at,
            paid_seconds: 86_400,
            seq: 1,
            failures: 0,
            power_on: false,
        });
        assert_eq!(stage(&expired), Some(Stage::NetworkReady));
        let mut gone = record(Some(1), Some(ready.clone()));
        gone.status = Status::Terminated;
        assert_eq!(stage(&gone), Some(Stage::Terminated));
        let failed = Watch {
            failed: Some("deadline".into()),
            ..ready
        };
        let mut failed_and_gone = record(Some(1), Some(failed));
        failed_and_gone.status = Status::Terminated;
        assert_eq!(stage(&failed_and_gone), Some(Stage::Failed));
    }

    #[test]
    fn polls_back_off_to_two_seconds() {
        let pauses: Vec<u128> = (0..6).map(|n| poll_interval(n).as_millis()).collect();
        assert_eq!(pauses, [500, 750, 1125, 1687, 2000, 2000]);
    }
}
