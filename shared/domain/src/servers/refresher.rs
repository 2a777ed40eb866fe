//! The refresher (waiting, point 2): the one reader of the provider for servers' state, run by
//! the reconciler each pass. Agents' polls read the store only.
//!
//! Each pass takes the servers due (GSI3, earliest first) and groups them by project: a project
//! with two or more due servers is read with one listing (`GET /projects/{id}/servers`), a lone
//! server with `GET /servers/{id}`; a server missing from a listing is read on its own (404 →
//! `terminated`). Servers an action is powering are asked `?fields=power`. The reconciler's
//! client is paced to `UPSTREAM_MAX_RPS` (default 3) over all of this.
//!
//! Then, per server (sixteen at a time): the object is stored without credentials with `statusAt`;
//! a transition an action wrote is confirmed or, after 30 minutes, dropped; a deployed, running
//! server with an IPv4 address that is not `ready` gets the readiness check ([`crate::servers::probe`]); a
//! first deployment past its deadline is deleted at the provider (a paid order becomes a credit). A
//! server still on its way (or in a transition) is due again next pass; a `ready` one after
//! `REFRESH_STABLE_SECONDS` (600); a failed or terminated one leaves the schedule.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::servers::stages;
use crate::state::AppState;
use crate::store::events::{EventData, ServerFailed, ServerProvisioned};
use crate::store::sandboxes::{
    LeaseState, SandboxRecord, SandboxStatus, Status, Watch, WatchChange,
};
use crate::upstream::{ServerView, UpstreamError};

/// Servers looked at per pass, at most.
const PER_PASS: i32 = 1000;
/// Records refreshed at once (readiness checks are network waits).
const CONCURRENCY: usize = 16;
/// A transition not confirmed within this long is dropped (logged).
const TRANSITION_SECONDS: i64 = 1800;
/// The fewest servers answering 404 in one pass that can mean "the provider forgot them all".
const MASS_NOT_FOUND: usize = 3;

/// What the refresher did in one pass.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RefreshReport {
    /// Servers due.
    pub due: usize,
    /// Provider calls made: project listings, single reads, power reads, deletes.
    pub listings: usize,
    /// Single server reads.
    pub reads: usize,
    /// Power reads (`?fields=power`).
    pub power_reads: usize,
    /// Readiness checks run.
    pub probes: usize,
    /// Servers that became `ready`.
    pub ready: usize,
    /// Servers past their deadline, deleted.
    pub failed: usize,
    /// Servers the provider no longer knows.
    pub terminated: usize,
    /// Records another writer changed first (left for the next pass).
    pub conflicts: usize,
    /// Provider or store errors (tried again next pass).
    pub errors: usize,
}

impl RefreshReport {
    /// Adds the counts of `other` (one record's refresh) to these.
    fn add(&mut self, other: &RefreshReport) {
        self.due += other.due;
        self.listings += other.listings;
        self.reads += other.reads;
        self.power_reads += other.power_reads;
        self.probes += other.probes;
        self.ready += other.ready;
        self.failed += other.failed;
        self.terminated += other.terminated;
        self.conflicts += other.conflicts;
        self.errors += other.errors;
    }

    /// Provider calls this pass made.
    pub fn provider_calls(&self) -> usize {
        self.listings + self.reads + self.power_reads + self.failed
    }
}

/// Records `server`, created for the free server's `intent`, as the intent's owner's: its
/// ownership and the sandbox (server, status, watch due at once) in one transaction. A server
/// already adopted (by the request or by a refresher) is left as it is.
///
/// Errors: the store's; a server object without an id.
pub async fn adopt(
    state: &AppState,
    intent: &SandboxRecord,
    server: &Value,
) -> Result<(), ApiError> {
    let view = ServerView::of(server)?;
    let mut record = intent.clone();
    // The refresher may have rescheduled the intent meanwhile: read it again and retry.
    for _ in 0..3 {
        if record.server_id.is_some() {
            tracing::info!(sandbox = record.id, server = view.id, "adopted already");
            return Ok(());
        }
        let now = state.clock.now();
        let at = state.clock.timestamp();
        let ownership = crate::store::sandboxes::ServerOwnership {
            server_id: view.id,
            owner: record.owner.clone(),
            sandbox_id: record.id.clone(),
            project_id: record.project_id.unwrap_or_default(),
            created_at: at,
        };
        let read = record.watch.as_ref().map_or(0, |w| w.seq);
        let change = SandboxStatus {
            sandbox_id: record.id.clone(),
            status: Status::from(view.status_or_state()),
            server_id: Some(view.id),
            project_id: record.project_id,
            hostname: view.hostname.clone(),
            watch: Some(WatchChange {
                watch: Watch {
                    seq: read + 1,
                    ..stages::created(server, record.created_at, at)
                },
                read_seq: Some(read),
                due: Some(now),
            }),
            outbox: Some(crate::notifications::events::one(
                crate::notifications::events::of_server(&record, state.clock.event_time()),
                EventData::ServerProvisioned(ServerProvisioned {
                    sandbox_id: record.id.clone(),
                    server_id: view.id,
                    hostname: view.hostname.clone(),
                    project_id: record.project_id,
                    payment: None,
                    paid_until: None,
                    free: true,
                }),
            )),
            ..SandboxStatus::default()
        };
        if state.store.adopt_server(&ownership, &change, at).await? {
            return Ok(());
        }
        let Some(current) = state.store.sandbox(&record.id).await? else {
            return Ok(());
        };
        record = current;
    }
    Err(ApiError::Conflict(format!(
        "sandbox {} kept changing; its server is adopted on a later pass",
        intent.id
    )))
}

/// A free server's intent that the refresher reached: before the create settle time it waits;
/// then its project is searched for its tagged server — adopted if found, else the intent ends
/// (`cancelled`, stage `failed`: the provider never created it).
async fn settle_intent(state: &AppState, intent: &SandboxRecord) -> Result<(), ApiError> {
    let now = state.clock.now();
    let created = intent.created_at.unix();
    let settle = state.config.payments.create_settle.as_secs() as i64;
    let (Some(watch), Some(project)) = (intent.watch.clone(), intent.project_id) else {
        return Ok(());
    };
    let reschedule = |due: Option<i64>, status: Status, failed: Option<String>| SandboxStatus {
        sandbox_id: intent.id.clone(),
        status,
        watch: Some(WatchChange {
            watch: Watch {
                seq: watch.seq + 1,
                failed,
                ..watch.clone()
            },
            read_seq: Some(watch.seq),
            due,
        }),
        unwatch: due.is_none(),
        ..SandboxStatus::default()
    };
    if intent.status != Status::Provisioning || intent.payment.is_some() {
        state
            .store
            .change_sandbox(
                &reschedule(None, intent.status.clone(), None),
                state.clock.timestamp(),
            )
            .await?;
        return Ok(());
    }
    if now < created + settle {
        let wait = reschedule(Some(created + settle), intent.status.clone(), None);
        state
            .store
            .change_sandbox(&wait, state.clock.timestamp())
            .await?;
        return Ok(());
    }
    let found = state
        .upstream()?
        .find_tagged(
            project,
            (crate::billing::order::effects::SANDBOX_TAG, &intent.id),
            None,
        )
        .await?;
    match found {
        Some(server) => adopt(state, intent, &server).await,
        None => {
            let why = "the provider never created the server".to_owned();
            tracing::warn!(sandbox = intent.id, "a free server's create never landed");
            let ended = reschedule(None, Status::Cancelled, Some(why));
            state
                .store
                .change_sandbox(&ended, state.clock.timestamp())
                .await?;
            Ok(())
        }
    }
}

/// Reads one record's server: from the project's listing, else on its own. `Some(None)`: the
/// provider no longer knows it; `None`: it could not be read (counted, tried next pass).
async fn read(
    state: &AppState,
    record: &SandboxRecord,
    listed: &HashMap<u64, Value>,
    report: &mut RefreshReport,
) -> Option<Option<Value>> {
    let server = record.server_id?;
    if let Some(object) = listed.get(&server) {
        return Some(Some(object.clone()));
    }
    report.reads += 1;
    match state.upstream().ok()?.server(server).await {
        Ok(object) => Some(Some(object)),
        Err(UpstreamError::Status { status: 404, .. }) => Some(None),
        Err(err) => {
            report.errors += 1;
            tracing::warn!(server, error = %err, "cannot read the server");
            None
        }
    }
}

/// Whether the provider says it does not know most of the servers it was asked about: a token
/// or team that changed, not a fleet that vanished. Then no server is marked terminated.
fn mass_not_found(read: &[(SandboxRecord, Option<Value>)]) -> bool {
    let known = read
        .iter()
        .filter(|(r, _)| !r.status.is_ending())
        .collect::<Vec<_>>();
    let missing = known.iter().filter(|(_, object)| object.is_none()).count();
    missing >= MASS_NOT_FOUND && missing * 2 > known.len()
}

/// One pass within `deadline`: reads every server due, then refreshes each at the clock's time.
///
/// Errors: the schedule cannot be read.
pub async fn pass(state: &AppState, deadline: &Deadline) -> Result<RefreshReport, ApiError> {
    let mut report = RefreshReport::default();
    let due = state.store.watches_due(state.clock.now(), PER_PASS).await?;
    report.due = due.len();
    let (intents, due): (Vec<_>, Vec<_>) = due.into_iter().partition(|r| r.server_id.is_none());
    for intent in intents {
        if !deadline.allows(state.config.upstream.timeout) {
            break;
        }
        if let Err(err) = settle_intent(state, &intent).await {
            report.errors += 1;
            tracing::warn!(sandbox = intent.id, error = %err, "cannot settle a free intent");
        }
    }
    let mut projects: BTreeMap<u64, Vec<SandboxRecord>> = BTreeMap::new();
    for record in due {
        projects
            .entry(record.project_id.unwrap_or_default())
            .or_default()
            .push(record);
    }
    let timeout = state.config.upstream.timeout;
    let mut fetched = Vec::new();
    for (project, records) in projects {
        if !deadline.allows(timeout) {
            break;
        }
        let listed = list(state, project, records.len(), &mut report).await;
        let Some(listed) = listed else { continue };
        let listed = &listed;
        let mut reads = futures::stream::iter(records)
            .map(|record| async move {
                let mut delta = RefreshReport::default();
                let object = read(state, &record, listed, &mut delta).await;
                (record, object, delta)
            })
            .buffer_unordered(CONCURRENCY);
        while let Some((record, object, delta)) = reads.next().await {
            report.add(&delta);
            if let Some(object) = object {
                fetched.push((record, object));
            }
        }
    }
    if mass_not_found(&fetched) {
        report.errors += 1;
        crate::metrics::emit("ProviderForgotServers", 1.0, "Count", &[]);
        tracing::error!(
            servers = fetched.len(),
            "the provider does not know most servers it was asked about (token or team changed?); \
             none is marked terminated, the pass stops"
        );
        return Ok(report);
    }
    // Records are refreshed side by side (readiness checks wait on the network); each starts
    // only while the pass has time.
    let mut refreshed = futures::stream::iter(fetched)
        .map(|(record, object)| async move {
            let mut delta = RefreshReport::default();
            if deadline.allows(timeout + state.config.watch.probe_timeout) {
                let now = state.clock.now();
                if let Err(err) = refresh(state, &record, object, now, &mut delta).await {
                    delta.errors += 1;
                    tracing::warn!(sandbox = record.id, error = %err, "cannot refresh the server");
                }
            }
            delta
        })
        .buffer_unordered(CONCURRENCY);
    while let Some(delta) = refreshed.next().await {
        report.add(&delta);
    }
    crate::metrics::emit(
        "RefresherProviderCalls",
        report.provider_calls() as f64,
        "Count",
        &[],
    );
    Ok(report)
}

/// The servers of `project` by id when `due` of them are due (one listing, every page), else
/// none (each is read on its own); `None` when the listing fails (the project waits).
async fn list(
    state: &AppState,
    project: u64,
    due: usize,
    report: &mut RefreshReport,
) -> Option<HashMap<u64, Value>> {
    let mut listed = HashMap::new();
    if due < 2 {
        return Some(listed);
    }
    report.listings += 1;
    match state.upstream().ok()?.servers(project).await {
        Ok(servers) => {
            for server in servers {
                if let Some(id) = server["id"].as_u64() {
                    listed.insert(id, server);
                }
            }
            Some(listed)
        }
        Err(err) => {
            report.errors += 1;
            tracing::warn!(project, error = %err, "cannot list the project's servers");
            None
        }
    }
}

/// Statuses of a server that has finished deploying.
const DEPLOYED: [&str; 3] = ["deployed", "allocated", "rescue mode"];

/// Refreshes one record from `object` (`None`: the provider no longer knows the server).
async fn refresh(
    state: &AppState,
    record: &SandboxRecord,
    object: Option<Value>,
    now: i64,
    report: &mut RefreshReport,
) -> Result<(), ApiError> {
    let (Some(server), Some(read)) = (record.server_id, record.watch.clone()) else {
        return Ok(());
    };
    let mut watch = Watch {
        seq: read.seq + 1,
        ..read.clone()
    };
    let lease_decides = record
        .lease
        .as_ref()
        .is_some_and(|l| l.state != LeaseState::Active);
    if read.failed.is_some() && record.status == Status::Terminating {
        // A failed deployment's delete that did not finish: finish it.
        return give_up(state, record, watch, &read, now, report).await;
    }
    let terminating = record.status.is_ending();
    let object = match object {
        Some(object) if !terminating => object,
        object => {
            let listed = object.is_some();
            return write_gone(state, record, watch, &read, listed, now, report).await;
        }
    };
    let view = ServerView::of(&object)?;
    let provider_status = view.status_or_state();
    watch.server = Some(crate::upstream::without_credentials(object.clone()).to_string());
    watch.status_at = Some(crate::time::Timestamp::from_unix(now));
    let provider_failed = provider_status == "failed deployment" && watch.failed.is_none();
    if provider_failed && !watch.first {
        watch.failed = Some("the provider reports a failed deployment".into());
    }
    confirm_transition(state, server, &mut watch, &provider_status, now, report).await;
    let address = stages::address(&object, 4);
    let running = watch.power.as_deref() != Some("off") && !lease_decides;
    if watch.failed.is_none()
        && watch.transition.is_none()
        && watch.ready_at.is_none()
        && running
        && DEPLOYED.contains(&provider_status.as_str())
        && let Some(address) = &address
    {
        probe(state, &record.id, server, address, &mut watch, now, report).await;
    }
    let delivered = running && DEPLOYED.contains(&provider_status.as_str()) && address.is_some();
    let first_failure = provider_failed && watch.first;
    // A first deployment the provider failed (never deployed, so never kept as unreachable),
    // else what its deadline says.
    let failure = if first_failure {
        Some("the provider reports a failed deployment; the server was deleted".to_owned())
    } else {
        judge_deadline(
            state,
            &record.id,
            server,
            &mut watch,
            delivered,
            lease_decides,
            now,
        )
    };
    if let Some(reason) = failure {
        watch.failed = Some(reason);
        return give_up(state, record, watch, &read, now, report).await;
    }
    let status = if lease_decides {
        record.status.clone()
    } else {
        Status::from(provider_status)
    };
    let due = next_due(state, &watch, lease_decides, now);
    write(state, record, status, watch, &read, due, report).await
}

/// Writes a record the provider no longer lists (`listed` false), or one being deleted by its
/// owner or its lease: watched until the provider no longer has it, then `terminated`.
async fn write_gone(
    state: &AppState,
    record: &SandboxRecord,
    mut watch: Watch,
    read: &Watch,
    listed: bool,
    now: i64,
    report: &mut RefreshReport,
) -> Result<(), ApiError> {
    watch.status_at = Some(crate::time::Timestamp::from_unix(now));
    if record.status.is_ending() {
        let (status, due) = match listed {
            false => (Status::Terminated, None),
            true => (record.status.clone(), Some(now)),
        };
        return write(state, record, status, watch, read, due, report).await;
    }
    tracing::info!(
        server = record.server_id,
        sandbox = record.id,
        "the provider no longer knows the server"
    );
    report.terminated += 1;
    write(state, record, Status::Terminated, watch, read, None, report).await
}

/// What a server's deployment deadline says of it: past the deadline, deployed and running but
/// SSH silent, it is kept and marked unreachable (the provider delivered it; it stays, and
/// stays charged); on its first deployment, not ready and not in its lease's hands, it failed:
/// the reason, for its deletion.
fn judge_deadline(
    state: &AppState,
    sandbox: &str,
    server: u64,
    watch: &mut Watch,
    delivered: bool,
    lease_decides: bool,
    now: i64,
) -> Option<String> {
    let deadline = stages::deadline_at(state, watch);
    let past_deadline = deadline.is_some_and(|d| now > d.unix());
    if past_deadline && delivered && watch.ready_at.is_none() && watch.failed.is_none() {
        // A probe that cannot reach port 22 (a firewall in user data, sshd moved) never
        // deletes it.
        tracing::warn!(server, sandbox, "SSH did not answer by the deadline; kept");
        watch.unreachable = Some(format!(
            "SSH did not answer on port 22 by {} (a firewall or sshd configuration?); the server \
             is deployed and running, and stays",
            deadline.map(String::from).unwrap_or_default()
        ));
        watch.first = false;
    }
    let failed = watch.ready_at.is_none()
        && watch.failed.is_none()
        && watch.first
        && !lease_decides
        && past_deadline;
    failed.then(|| {
        format!(
            "not ready by its deadline ({}); the server was deleted",
            deadline.map(String::from).unwrap_or_default()
        )
    })
}

/// Asks the server's SSH (at `address`, or the configured probe target) for its host keys:
/// on an answer the watch records it ready, with the keys.
async fn probe(
    state: &AppState,
    sandbox: &str,
    server: u64,
    address: &str,
    watch: &mut Watch,
    now: i64,
    report: &mut RefreshReport,
) {
    let target = state
        .config
        .watch
        .probe_target
        .clone()
        .unwrap_or_else(|| format!("{address}:{}", state.config.watch.ssh_port));
    report.probes += 1;
    match crate::servers::probe::host_keys(&target, state.config.watch.probe_timeout).await {
        Ok(keys) => {
            tracing::info!(server, sandbox, "ready: SSH answered");
            report.ready += 1;
            watch.ready_at = Some(crate::time::Timestamp::from_unix(now));
            watch.host_keys = keys;
            watch.first = false;
            watch.unreachable = None;
        }
        Err(err) => tracing::debug!(server, error = %err, "not ready yet"),
    }
}

/// When a record is refreshed next: never once failed, after the stable interval once it is
/// ready, unreachable, off or in its lease's hands, else at once.
fn next_due(state: &AppState, watch: &Watch, lease_decides: bool, now: i64) -> Option<i64> {
    let stable = watch.transition.is_none()
        && (watch.ready_at.is_some()
            || watch.unreachable.is_some()
            || watch.power.as_deref() == Some("off")
            || lease_decides);
    if watch.failed.is_some() {
        None
    } else if stable {
        Some(now + state.config.watch.stable_refresh.as_secs() as i64)
    } else {
        Some(now)
    }
}

/// Confirms (or drops) the transition an action wrote, reading the power state when the
/// transition is about power.
async fn confirm_transition(
    state: &AppState,
    server: u64,
    watch: &mut Watch,
    provider_status: &str,
    now: i64,
    report: &mut RefreshReport,
) {
    let Some(transition) = watch.transition.clone() else {
        return;
    };
    let power_wanted = match transition.as_str() {
        "powering-off" => Some("off"),
        "powering-on" | "rebooting" => Some("on"),
        _ => None,
    };
    if power_wanted.is_some()
        && let Ok(upstream) = state.upstream()
    {
        report.power_reads += 1;
        match upstream.power(server).await {
            Ok(power) => watch.power = Some(power),
            Err(err) => tracing::warn!(server, error = %err, "cannot read the power state"),
        }
    }
    let done = match transition.as_str() {
        "rebuilding" | "exiting-rescue-mode" => provider_status == "deployed",
        "entering-rescue-mode" => provider_status == "rescue mode",
        _ => power_wanted.is_some_and(|p| watch.power.as_deref() == Some(p)),
    };
    let stale = watch
        .transition_at
        .is_some_and(|t| now - t.unix() > TRANSITION_SECONDS);
    if stale && !done {
        tracing::warn!(
            server,
            transition,
            "a transition was never confirmed; dropped"
        );
    }
    if done || stale {
        watch.transition = None;
        watch.transition_at = None;
    }
}

/// A first deployment that failed (past its deadline, or the provider says so; `watch.failed`
/// says which): deleted at the provider (the intent recorded first), the stage `failed`, a paid
/// order credited, a lease ended.
async fn give_up(
    state: &AppState,
    record: &SandboxRecord,
    watch: Watch,
    read: &Watch,
    now: i64,
    report: &mut RefreshReport,
) -> Result<(), ApiError> {
    let Some(server) = record.server_id else {
        return Ok(());
    };
    let reason = watch.failed.clone().unwrap_or_default();
    match &read.failed {
        Some(_) => {}
        None => {
            tracing::warn!(
                server,
                sandbox = record.id,
                reason,
                "the first deployment failed"
            );
            // The intent first, still due: a pass that dies after it finishes the step next time.
            let failed = crate::notifications::events::one(
                crate::notifications::events::of_server(record, state.clock.event_time()),
                EventData::ServerFailed(ServerFailed {
                    server: crate::notifications::events::server_facts(record),
                    reason: reason.to_owned(),
                }),
            );
            let intent = SandboxStatus {
                sandbox_id: record.id.clone(),
                status: Status::Terminating,
                watch: Some(WatchChange {
                    watch: watch.clone(),
                    read_seq: Some(read.seq),
                    due: Some(now),
                }),
                outbox: Some(failed),
                ..SandboxStatus::default()
            };
            if !state
                .store
                .change_sandbox(&intent, state.clock.timestamp())
                .await?
            {
                report.conflicts += 1;
                return Ok(());
            }
        }
    }
    if state.holds(crate::checkpoint::Guard::UndeliveredDeleted) {
        match state.upstream()?.delete_server(server).await {
            Ok(()) | Err(UpstreamError::Status { status: 404, .. }) => {}
            Err(err) => return Err(err.into()),
        }
    }
    report.failed += 1;
    if let Some(payment) = &record.payment {
        crate::billing::order::ledger::credit_undelivered(state, payment, &reason).await?;
    }
    let Some(current) = state.store.sandbox(&record.id).await? else {
        return Ok(());
    };
    if current.lease.is_some() {
        crate::servers::leases::end(state, &current, Status::Terminated, "failed deployment")
            .await?;
    }
    if !close_failed(state, &record.id).await? {
        report.conflicts += 1;
    }
    Ok(())
}

/// The last step of a failed first deployment: the sandbox `terminated` (or left `credited`)
/// and no longer watched, conditional on the watch it reads. Whether it wrote (a concurrent
/// change wins).
async fn close_failed(state: &AppState, sandbox_id: &str) -> Result<bool, ApiError> {
    let Some(current) = state.store.sandbox(sandbox_id).await? else {
        return Ok(true);
    };
    let Some(now_watch) = current.watch.clone() else {
        return Ok(true);
    };
    let status = if current.status == Status::Credited {
        current.status.clone()
    } else {
        Status::Terminated
    };
    let done = SandboxStatus {
        sandbox_id: sandbox_id.to_owned(),
        status,
        watch: Some(WatchChange {
            watch: Watch {
                seq: now_watch.seq + 1,
                ..now_watch.clone()
            },
            read_seq: Some(now_watch.seq),
            due: None,
        }),
        unwatch: true,
        ..SandboxStatus::default()
    };
    Ok(state
        .store
        .change_sandbox(&done, state.clock.timestamp())
        .await?)
}

/// Writes a record's refreshed `watch` with `status`, off the schedule when `due` is `None`.
async fn write(
    state: &AppState,
    record: &SandboxRecord,
    status: Status,
    watch: Watch,
    read: &Watch,
    due: Option<i64>,
    report: &mut RefreshReport,
) -> Result<(), ApiError> {
    let outbox = crate::notifications::events::of_refresh(
        record,
        (read, &watch),
        &status,
        state.clock.event_time(),
    );
    let change = SandboxStatus {
        sandbox_id: record.id.clone(),
        status,
        watch: Some(WatchChange {
            watch,
            read_seq: Some(read.seq),
            due,
        }),
        unwatch: due.is_none(),
        outbox,
        ..SandboxStatus::default()
    };
    if !state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await?
    {
        report.conflicts += 1;
    }
    Ok(())
}
