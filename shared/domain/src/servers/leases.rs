//! Paid time (design brief §3, Money): every paid server has a lease. It is paid up to
//! `paidUntil` (provisioned + one period, `PAID_PERIOD_SECONDS`), powered off then, and deleted
//! at `graceEndsAt` (`paidUntil` + `EXPIRY_GRACE_SECONDS`) unless renewed. Free servers have no
//! lease. During the last 24 h before `paidUntil` every answer about the server says
//! `expiresSoon: true` with a `renew` link.
//!
//! The lease lives on the server's sandbox ([`crate::store::sandboxes::Lease`]); every write of
//! it is conditional on the `seq` it read, so a renewal racing an expiry step wins or loses
//! whole.

use serde::Serialize;
use serde_json::Value;

use crate::notifications::events;
use crate::state::AppState;
use crate::store::events::ServerPowerChanged;
use crate::store::events::{EventData, LeaseExpired, LeaseExpiring, Renewal, ServerDeleted};
use crate::store::sandboxes::{
    Lease, LeaseChange, LeaseState, SandboxRecord, SandboxStatus, Status,
};
use crate::upstream::{ServerAction, UpstreamError};

/// How long before `paidUntil` answers warn that the lease ends.
pub const WARNING_SECONDS: i64 = 24 * 3600;

/// When `lease.expiring` events are sent: 24 h and 1 h before `paidUntil` (seconds before it).
pub const NOTICES: [i64; 2] = [WARNING_SECONDS, 3600];

/// The notices still to send for `lease`'s `paidUntil`, largest first.
fn pending_notices(lease: &Lease) -> impl Iterator<Item = i64> + '_ {
    NOTICES
        .into_iter()
        .filter(|before| lease.noticed.is_none_or(|sent| *before < sent))
}

/// When an active `lease` is next due to the reconciler: its next notice, else `paidUntil`.
pub fn next_due(lease: &Lease) -> i64 {
    let until = lease.paid_until.unix();
    pending_notices(lease)
        .next()
        .map_or(until, |before| until - before)
}

/// The notice to send for `lease` at `now`: the smallest pending one whose time has come (a
/// lease that starts, or is renewed, within an hour of its end gets the 1 h notice alone).
fn notice_due(lease: &Lease, now: i64) -> Option<i64> {
    let until = lease.paid_until.unix();
    (lease.state == LeaseState::Active && now < until)
        .then(|| {
            pending_notices(lease)
                .filter(|before| now >= until - before)
                .last()
        })
        .flatten()
}

use crate::time::Timestamp;

fn at(epoch: i64) -> Timestamp {
    Timestamp::from_unix(epoch)
}

/// The lease of a server provisioned at `now` (epoch seconds): one paid period from now.
pub fn first(state: &AppState, now: i64) -> LeaseChange {
    let paid_until = now + state.config.payments.period.as_secs() as i64;
    let grace_ends_at = paid_until + state.config.payments.grace.as_secs() as i64;
    let lease = Lease {
        state: LeaseState::Active,
        paid_until: at(paid_until),
        grace_ends_at: at(grace_ends_at),
        paid_seconds: state.config.payments.period.as_secs() as i64,
        seq: 0,
        failures: 0,
        power_on: false,
        noticed: None,
    };
    LeaseChange {
        due: Some(next_due(&lease)),
        lease,
        read_seq: None,
    }
}

/// Whether `lease` ends within [`WARNING_SECONDS`] of `now` (and has not ended yet).
pub fn expires_soon(lease: &Lease, now: i64) -> bool {
    let until = lease.paid_until.unix();
    lease.state == LeaseState::Active && now < until && until - now <= WARNING_SECONDS
}

/// The renewal route of a server.
pub fn renew_link(server_id: u64) -> String {
    crate::api::paths::fill(crate::api::paths::RENEW_SERVER, &server_id.to_string())
}

/// Adds the lease to a server object of the provider: `paidUntil`, `graceEndsAt`, and, in the
/// last 24 h, `expiresSoon: true` and `renew`.
pub fn annotate(server: &mut Value, lease: &Lease, now: i64) {
    let id = server.get("id").and_then(Value::as_u64);
    if let Value::Object(fields) = server {
        fields.insert("paidUntil".into(), lease.paid_until.to_string().into());
        fields.insert("graceEndsAt".into(), lease.grace_ends_at.to_string().into());
        if expires_soon(lease, now) {
            fields.insert("expiresSoon".into(), Value::Bool(true));
            if let Some(id) = id {
                fields.insert("renew".into(), Value::from(renew_link(id)));
            }
        }
    }
}

/// What the lease part of a reconciler pass did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    /// Leases due that were looked at.
    pub due: usize,
    /// Servers powered off at the end of their paid time.
    pub expired: usize,
    /// Servers deleted at the end of their grace period.
    pub terminated: usize,
    /// Renewed servers powered back on.
    pub powered_on: usize,
    /// `lease.expiring` notices sent.
    pub notices: usize,
    /// Steps that failed (tried again on the next pass).
    pub failures: usize,
    /// Leases due that the pass had no time left for (`LeaseStepsBehind`, alarmed).
    pub behind: usize,
}

impl LeaseReport {
    /// This report with what a later part of the same pass did (`later`) added; `behind` is
    /// the later part's (what is still left).
    pub fn and(self, later: LeaseReport) -> LeaseReport {
        LeaseReport {
            due: self.due + later.due,
            expired: self.expired + later.expired,
            terminated: self.terminated + later.terminated,
            powered_on: self.powered_on + later.powered_on,
            notices: self.notices + later.notices,
            failures: self.failures + later.failures,
            behind: later.behind,
        }
    }
}

fn change(record: &SandboxRecord, status: Status, lease: Lease, due: Option<i64>) -> SandboxStatus {
    let read_seq = record.lease.as_ref().map(|l| l.seq);
    SandboxStatus {
        sandbox_id: record.id.clone(),
        status,
        lease: Some(LeaseChange {
            lease: Lease {
                seq: read_seq.unwrap_or(0) + 1,
                ..lease
            },
            read_seq,
            due,
        }),
        ..SandboxStatus::default()
    }
}

/// Drives every lease due now one step, each step recorded before it is taken and safe to
/// repeat, in this order — so that no failing step blocks a later one:
///
/// 1. past `graceEndsAt` → `terminating` → the server is deleted → `terminated`, whatever its
///    power state (a power-off that keeps failing never keeps an unpaid server);
/// 2. past `paidUntil` → `expiring` → the power state is read first ("already off" is done),
///    then the server is powered off → `expired`;
/// 3. a renewal that asked for it → the power state is read first, then the server is powered
///    on.
///
/// A step that fails is counted on the lease (`LeaseStepFailures`; `LeaseStepFailedTwice` from
/// the second failure in a row, which the template alarms on) and tried again a minute later.
/// Each lease is stepped at the clock's time when it is reached.
///
/// Errors: the listing of due leases fails.
pub async fn drive_due(
    state: &AppState,
    deadline: &crate::deadline::Deadline,
) -> Result<LeaseReport, crate::error::ApiError> {
    let mut report = LeaseReport::default();
    let mut unknown = Vec::new();
    let due = state
        .store
        .leases_due(state.clock.now(), DUE_PER_PASS)
        .await?;
    let listed = due.len();
    for record in due {
        if !deadline.allows(state.config.upstream.timeout * 2) {
            break;
        }
        report.due += 1;
        match step(state, &record, state.clock.now(), Gone::Unconfirmed).await {
            Err(crate::error::ApiError::NotFound(_)) => unknown.push(record),
            result => report.count(state, &record, result).await,
        }
    }
    // Leases due that this pass had no time for: servers may run unpaid past `paidUntil`.
    report.behind = listed - report.due;
    if report.behind > 0 {
        crate::metrics::emit("LeaseStepsBehind", report.behind as f64, "Count", &[]);
        tracing::error!(
            behind = report.behind,
            "leases due were not reached in this pass (its time ran out)"
        );
    }
    // Servers the provider says it does not know: believed one by one, but not for most of
    // the pass at once (a token or team that changed, not a fleet that vanished).
    if unknown.len() >= MASS_NOT_FOUND && unknown.len() * 2 > report.due {
        crate::metrics::emit("ProviderForgotServers", 1.0, "Count", &[]);
        tracing::error!(
            servers = unknown.len(),
            "the provider does not know most servers whose leases are due (token or team \
             changed?); none is marked off or deleted"
        );
        report.failures += unknown.len();
        return Ok(report);
    }
    for record in unknown {
        if !deadline.allows(state.config.upstream.timeout * 2) {
            break;
        }
        let result = step(state, &record, state.clock.now(), Gone::Believed).await;
        report.count(state, &record, result).await;
    }
    Ok(report)
}

/// Leases read per pass.
const DUE_PER_PASS: i32 = 100;

/// How many servers answering 404 in one pass, and more than half of those due, make the
/// pass believe none of them ([`drive_due`]).
const MASS_NOT_FOUND: usize = 3;

/// What a lease step makes of the provider's 404 for its server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Gone {
    /// Gone: off, and deleted.
    Believed,
    /// Not yet: the step stops with [`crate::error::ApiError::NotFound`] and writes nothing.
    Unconfirmed,
}

impl LeaseReport {
    /// Counts what a step of `record` did (a failure is counted on the lease too).
    async fn count(
        &mut self,
        state: &AppState,
        record: &SandboxRecord,
        result: Result<Option<Step>, crate::error::ApiError>,
    ) {
        match result {
            Ok(Some(Step::Noticed)) => self.notices += 1,
            Ok(Some(Step::Reached(done))) => match done {
                LeaseState::Expired => self.expired += 1,
                LeaseState::Terminated => self.terminated += 1,
                LeaseState::Active => self.powered_on += 1,
                LeaseState::Expiring | LeaseState::Terminating | LeaseState::Ended => {}
            },
            Ok(None) => {}
            Err(err) => {
                self.failures += 1;
                failed(state, record, state.clock.now(), &err.to_string()).await;
            }
        }
    }
}

/// One step of a due lease; the state it reached, or `None` when there was nothing to do (or
/// another writer moved the lease first).
async fn step(
    state: &AppState,
    record: &SandboxRecord,
    now: i64,
    gone: Gone,
) -> Result<Option<Step>, crate::error::ApiError> {
    let Some(lease) = record.lease.clone() else {
        return Ok(None);
    };
    let live = matches!(
        lease.state,
        LeaseState::Active | LeaseState::Expiring | LeaseState::Expired | LeaseState::Terminating
    );
    let reached = |done: Option<LeaseState>| done.map(Step::Reached);
    let grace_ends = if state.holds(crate::checkpoint::Guard::GraceKept) {
        lease.grace_ends_at.unix()
    } else {
        lease.paid_until.unix()
    };
    if live && now >= grace_ends {
        return terminate(state, record, now, gone).await.map(reached);
    }
    match lease.state {
        LeaseState::Active | LeaseState::Expiring if now >= lease.paid_until.unix() => {
            expire(state, record, now, gone).await.map(reached)
        }
        LeaseState::Active if lease.power_on => powered_on(state, record, gone).await.map(reached),
        LeaseState::Active => match notice_due(&lease, now) {
            Some(before) => notify(state, record, lease, before).await,
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// What a lease step did.
enum Step {
    /// The lease reached this state.
    Reached(LeaseState),
    /// A `lease.expiring` notice was sent.
    Noticed,
}

/// Sends `lease.expiring` `before` seconds before `paidUntil` (recorded on the lease, which is
/// due again at its next notice or at `paidUntil`): the renewal route and the price of one
/// period as the server's order paid it (USDC atomic units). `None`: nothing left to do, or
/// another writer moved the lease first.
async fn notify(
    state: &AppState,
    record: &SandboxRecord,
    lease: Lease,
    before: i64,
) -> Result<Option<Step>, crate::error::ApiError> {
    let Some(server) = record.server_id else {
        return Ok(None);
    };
    let price = match &record.payment {
        Some(payment) => state.store.order(payment).await?.map(|order| order.amount),
        None => None,
    };
    let next = Lease {
        noticed: Some(before),
        ..lease
    };
    let due = next_due(&next);
    let data = EventData::LeaseExpiring(LeaseExpiring {
        server: events::server_facts(record),
        paid_until: next.paid_until,
        grace_ends_at: next.grace_ends_at,
        seconds_left: before,
        renew: Renewal::one_period(renew_link(server)),
        price_per_period: price,
        asset: "USDC".into(),
    });
    let outbox = events::one(events::of_server(record, state.clock.event_time()), data);
    let change = SandboxStatus {
        outbox: Some(outbox),
        ..change(record, record.status.clone(), next, Some(due))
    };
    let written = state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await?;
    Ok(written.then_some(Step::Noticed))
}

/// The provider's 404 for `server` as a lease step takes it: `Ok` when `gone` believes it,
/// else [`crate::error::ApiError::NotFound`] (the pass decides).
fn not_found(server: u64, gone: Gone) -> Result<(), crate::error::ApiError> {
    match gone {
        Gone::Believed => Ok(()),
        Gone::Unconfirmed => Err(crate::error::ApiError::NotFound(format!(
            "the provider does not know server {server}"
        ))),
    }
}

/// The server's power as the provider reads it (`on`, `off`); a server it no longer knows is
/// `off` when `gone` believes it.
async fn power_state(
    state: &AppState,
    server: u64,
    gone: Gone,
) -> Result<String, crate::error::ApiError> {
    match state.upstream()?.power(server).await {
        Ok(power) => Ok(power),
        Err(UpstreamError::Status { status: 404, .. }) => {
            not_found(server, gone).map(|()| "off".into())
        }
        Err(err) => Err(err.into()),
    }
}

/// Sends power action `action` unless the server is already `wanted`; a refusal (e.g. 422
/// "already off") is checked against the power state read again.
async fn power(
    state: &AppState,
    server: u64,
    action: ServerAction,
    (wanted, gone): (&str, Gone),
) -> Result<(), crate::error::ApiError> {
    if power_state(state, server, gone).await? == wanted {
        return Ok(());
    }
    match state.upstream()?.server_action(server, &action).await {
        Ok(_) => Ok(()),
        Err(UpstreamError::Status { status: 404, .. }) => not_found(server, gone),
        Err(
            err @ UpstreamError::Status {
                status: 409 | 422, ..
            },
        ) => {
            if power_state(state, server, gone).await? == wanted {
                Ok(())
            } else {
                Err(err.into())
            }
        }
        Err(err) => Err(err.into()),
    }
}

/// Past `paidUntil`: `expiring` (the intent), the server powered off, `expired`.
async fn expire(
    state: &AppState,
    record: &SandboxRecord,
    now: i64,
    gone: Gone,
) -> Result<Option<LeaseState>, crate::error::ApiError> {
    let (Some(lease), Some(server)) = (record.lease.clone(), record.server_id) else {
        return Ok(None);
    };
    let record = match lease.state {
        LeaseState::Active => {
            tracing::info!(sandbox = record.id, server, "paid time over: powering off");
            let intent = Lease {
                state: LeaseState::Expiring,
                ..lease.clone()
            };
            match announce(state, record, Status::Expiring, intent, now).await? {
                Some(record) => record,
                None => return Ok(None),
            }
        }
        _ => record.clone(),
    };
    power(state, server, ServerAction::PowerOff, ("off", gone)).await?;
    let lease = record.lease.clone().unwrap_or(lease);
    let done = Lease {
        state: LeaseState::Expired,
        failures: 0,
        ..lease
    };
    let grace_ends_at = done.grace_ends_at.unix();
    let mut outbox = events::of_server(&record, state.clock.event_time());
    outbox.push(EventData::LeaseExpired(LeaseExpired {
        server: events::server_facts(&record),
        paid_until: done.paid_until,
        grace_ends_at: done.grace_ends_at,
        renew: Renewal::one_period(renew_link(server)),
    }));
    outbox.push(EventData::ServerPowerChanged(ServerPowerChanged {
        server: events::server_facts(&record),
        power: "off".into(),
        was: None,
        by: Some("lease".into()),
    }));
    let expired = SandboxStatus {
        outbox: Some(outbox),
        ..change(&record, Status::Expired, done, Some(grace_ends_at))
    };
    if state
        .store
        .change_sandbox(&expired, state.clock.timestamp())
        .await?
    {
        crate::metrics::emit("LeasesExpired", 1.0, "Count", &[]);
        return Ok(Some(LeaseState::Expired));
    }
    // A renewal won meanwhile: the server it renewed must run.
    repair(state, &record.id).await
}

/// Past `graceEndsAt`: `terminating` (the intent), the server deleted, `terminated`.
async fn terminate(
    state: &AppState,
    record: &SandboxRecord,
    now: i64,
    gone: Gone,
) -> Result<Option<LeaseState>, crate::error::ApiError> {
    let (Some(lease), Some(server)) = (record.lease.clone(), record.server_id) else {
        return Ok(None);
    };
    let record = match lease.state {
        LeaseState::Terminating => record.clone(),
        _ => {
            tracing::info!(
                sandbox = record.id,
                server,
                "grace over: deleting the server"
            );
            let intent = Lease {
                state: LeaseState::Terminating,
                ..lease.clone()
            };
            match announce(state, record, Status::Terminating, intent, now).await? {
                Some(record) => record,
                None => return Ok(None),
            }
        }
    };
    match state.upstream()?.delete_server(server).await {
        Ok(()) => {}
        Err(UpstreamError::Status { status: 404, .. }) => not_found(server, gone)?,
        Err(err) => return Err(err.into()),
    }
    let lease = record.lease.clone().unwrap_or(lease);
    let done = Lease {
        state: LeaseState::Terminated,
        failures: 0,
        ..lease
    };
    let deleted = SandboxStatus {
        outbox: Some(events::one(
            events::of_server(&record, state.clock.event_time()),
            EventData::ServerDeleted(ServerDeleted {
                server: events::server_facts(&record),
                by: "lease".into(),
                reason: record.lease.as_ref().map(|l| {
                    format!(
                        "the lease ended at {} and was not renewed by {}",
                        l.paid_until, l.grace_ends_at
                    )
                }),
            }),
        )),
        ..change(&record, Status::Terminated, done, None)
    };
    let written = state
        .store
        .change_sandbox(&deleted, state.clock.timestamp())
        .await?;
    if written {
        crate::metrics::emit("LeasesTerminated", 1.0, "Count", &[]);
    }
    Ok(written.then_some(LeaseState::Terminated))
}

/// Records the intent of a step (its state, due again a minute from `now` should the step not
/// finish); the record as written, or `None` when another writer moved the lease first.
///
/// The record is the one this step wrote, never read back: a renewal may land right after the
/// write, and the step's last write must stay conditional on the intent's `seq` so that it
/// loses to that renewal.
async fn announce(
    state: &AppState,
    record: &SandboxRecord,
    status: Status,
    intent: Lease,
    now: i64,
) -> Result<Option<SandboxRecord>, crate::error::ApiError> {
    let change = change(record, status, intent, Some(now + 60));
    if !state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await?
    {
        return Ok(None);
    }
    Ok(Some(SandboxRecord {
        status: change.status,
        lease: change.lease.map(|c| c.lease),
        ..record.clone()
    }))
}

/// After a step lost its last write to a renewal: the lease is active again, so the server is
/// powered on (the renewal asked for it too; both are idempotent).
async fn repair(
    state: &AppState,
    sandbox_id: &str,
) -> Result<Option<LeaseState>, crate::error::ApiError> {
    match state.store.sandbox(sandbox_id).await? {
        Some(record)
            if record
                .lease
                .as_ref()
                .is_some_and(|l| l.state == LeaseState::Active) =>
        {
            let mut record = record;
            if let Some(lease) = &mut record.lease {
                lease.power_on = true;
            }
            power_on(state, &record).await
        }
        _ => Ok(None),
    }
}

/// Powers on the server of a renewed lease that asked for it, then clears the request (a
/// server the provider no longer knows counts as done: the refresher finds it gone).
pub async fn power_on(
    state: &AppState,
    record: &SandboxRecord,
) -> Result<Option<LeaseState>, crate::error::ApiError> {
    powered_on(state, record, Gone::Believed).await
}

/// [`power_on`], taking the provider's 404 as `gone` says.
async fn powered_on(
    state: &AppState,
    record: &SandboxRecord,
    gone: Gone,
) -> Result<Option<LeaseState>, crate::error::ApiError> {
    let (Some(lease), Some(server)) = (record.lease.clone(), record.server_id) else {
        return Ok(None);
    };
    tracing::info!(
        sandbox = record.id,
        server,
        "renewed: powering the server on"
    );
    power(state, server, ServerAction::PowerOn, ("on", gone)).await?;
    let status = match &record.status {
        // The provider's text for a running server, until the refresher reads it.
        Status::Expired | Status::Expiring => Status::from("deployed"),
        other => other.clone(),
    };
    let due = lease.paid_until.unix();
    let done = Lease {
        power_on: false,
        failures: 0,
        ..lease
    };
    // Not `ready` until the refresher sees SSH answer again.
    let now = state.clock.now();
    let booting = record
        .watch
        .as_ref()
        .map(|watch| crate::store::sandboxes::WatchChange {
            watch: crate::store::sandboxes::Watch {
                transition: Some("powering-on".into()),
                transition_at: Some(state.clock.timestamp()),
                ready_at: None,
                seq: watch.seq + 1,
                ..watch.clone()
            },
            read_seq: None,
            due: Some(now),
        });
    let outbox = events::one(
        events::of_server(record, state.clock.event_time()),
        EventData::ServerPowerChanged(ServerPowerChanged {
            server: events::server_facts(record),
            power: "on".into(),
            was: None,
            by: Some("renewal".into()),
        }),
    );
    let change = SandboxStatus {
        watch: booting,
        outbox: Some(outbox),
        ..change(record, status, done, Some(due))
    };
    let written = state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await?;
    Ok(written.then_some(LeaseState::Active))
}

/// Counts a failed step on the lease and schedules it again a minute from `now`.
async fn failed(state: &AppState, record: &SandboxRecord, now: i64, error: &str) {
    let Ok(Some(record)) = state.store.sandbox(&record.id).await else {
        return;
    };
    let Some(lease) = record.lease.clone() else {
        return;
    };
    let failures = lease.failures + 1;
    crate::metrics::emit("LeaseStepFailures", 1.0, "Count", &[]);
    if failures >= 2 {
        crate::metrics::emit("LeaseStepFailedTwice", 1.0, "Count", &[]);
        tracing::error!(
            sandbox = record.id,
            failures,
            error,
            "a lease step failed again"
        );
    } else {
        tracing::warn!(
            sandbox = record.id,
            error,
            "a lease step failed; trying again"
        );
    }
    let status = record.status.clone();
    let next = Lease { failures, ..lease };
    let _ = state
        .store
        .change_sandbox(
            &change(&record, status, next, Some(now + 60)),
            state.clock.timestamp(),
        )
        .await;
}

/// Stops the lease of a server deleted `by` its owner or after a failed deployment (`ended`,
/// out of the reconciler's index), with the sandbox's new `status` and its `server.deleted`;
/// the refresher reads the server next pass. `false` when the lease
/// (or the watch) moved meanwhile (read it again).
pub async fn end(
    state: &AppState,
    record: &SandboxRecord,
    status: Status,
    by: &str,
) -> Result<bool, crate::store::StoreError> {
    let Some(lease) = record.lease.clone() else {
        return Ok(true);
    };
    let ended = Lease {
        state: LeaseState::Ended,
        power_on: false,
        ..lease
    };
    let now = state.clock.now();
    let change = SandboxStatus {
        watch: crate::servers::stages::recheck(record, now),
        outbox: Some(crate::notifications::events::deleted(
            record,
            state.clock.event_time(),
            by,
        )),
        ..change(record, status, ended, None)
    };
    state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await
}

/// The lease after a renewal of `periods` periods at `now`: paid time added from
/// `max(paidUntil, now)`, active again (and to be powered on if it was being, or was, powered
/// off); `None` when the lease cannot be renewed any more (the server is being, or was,
/// deleted). Also when the reconciler is due next.
pub fn renewed(state: &AppState, lease: &Lease, periods: u32, now: i64) -> Option<(Lease, i64)> {
    match lease.state {
        LeaseState::Terminating | LeaseState::Terminated | LeaseState::Ended => None,
        LeaseState::Active | LeaseState::Expiring | LeaseState::Expired => {
            let period = state.config.payments.period.as_secs() as i64;
            let until = lease.paid_until.unix().max(now) + i64::from(periods) * period;
            let grace = until + state.config.payments.grace.as_secs() as i64;
            let power_on =
                lease.power_on || matches!(lease.state, LeaseState::Expiring | LeaseState::Expired);
            let next = Lease {
                state: LeaseState::Active,
                paid_until: at(until),
                grace_ends_at: at(grace),
                paid_seconds: lease.paid_seconds + i64::from(periods) * period,
                seq: lease.seq + 1,
                failures: 0,
                power_on,
                noticed: None,
            };
            let due = if power_on { now } else { next_due(&next) };
            Some((next, due))
        }
    }
}

/// The lease after `seconds` of its paid time are taken back at `now` (a reversed payment,
/// [`crate::billing::finality`]): `paidUntil` that much earlier, and `grace` seconds from the
/// later of it and `now` (powered off at the next step, deleted then unless renewed); when the
/// reconciler is due next. `None` when the server is being, or was, deleted.
pub fn taken_back(lease: &Lease, seconds: i64, grace: i64, now: i64) -> Option<(Lease, i64)> {
    match lease.state {
        LeaseState::Terminating | LeaseState::Terminated | LeaseState::Ended => None,
        LeaseState::Active | LeaseState::Expiring | LeaseState::Expired => {
            let until = lease.paid_until.unix() - seconds;
            let next = Lease {
                paid_until: at(until),
                grace_ends_at: at(until.max(now) + grace),
                paid_seconds: lease.paid_seconds - seconds,
                seq: lease.seq + 1,
                failures: 0,
                noticed: None,
                ..lease.clone()
            };
            let due = match next.state {
                LeaseState::Expired => next.grace_ends_at.unix(),
                _ if until <= now => now,
                _ => next_due(&next),
            };
            Some((next, due))
        }
    }
}

/// The paid servers whose lease ends by `until` (unix seconds) or that are already past it,
/// in grace or being terminated, at most 1,000, soonest first: what the operator's
/// `svcctl leases` shows.
///
/// Errors: 500 when the store fails.
pub async fn due(
    store: &impl crate::state::StoreHandle,
    until: i64,
) -> Result<Vec<SandboxRecord>, crate::error::ApiError> {
    Ok(store
        .store(crate::state::Sealed::key())
        .leases_due(until, 1000)
        .await?)
}

#[cfg(test)]
mod tests;
