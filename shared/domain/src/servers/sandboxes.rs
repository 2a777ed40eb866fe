//! Sandboxes (design brief §2): the caller's records of servers and metadata. One is written at
//! provisioning; callers may add metadata records, which can never claim a server the caller
//! does not own.
//!
//! A new server takes minutes (bare metal up to half an hour). Its sandbox carries `stage`
//! ([`crate::servers::stages`]), answered from the store — polls cost the provider nothing; the
//! reconciler's refresher reads the provider. To wait, long-poll:
//! `GET /api/sandboxes/{id}?waitFor=ready,failed&timeout=20` answers as soon as the stage is
//! reached, else after the timeout with `reached: false` and `Retry-After`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::ids::{self, SandboxId};
use crate::page::PageRequest;
use crate::ratelimit::slots;
use crate::servers::leases;
use crate::servers::stages::{self, Progress, Stage};
use crate::state::AppState;
use crate::store::caps::Pool;
use crate::store::sandboxes::{SandboxRecord, Status};
use crate::store::{Page, StoreError};
use crate::validate;

/// The body of `POST /api/sandboxes`: all optional — `serverId` (a server the caller
/// provisioned; number or numeric string), `name` (1-64 characters), `metadata` (at most 20
/// string → string pairs, the same rules as server tags).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewSandbox {
    /// A server the caller owns.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub server_id: Option<Value>,
    /// A name.
    #[serde(default)]
    pub name: Option<String>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// Creates a metadata sandbox for `principal`.
///
/// Errors: 400 naming a malformed field; 403 when `serverId` is not a server the caller
/// provisioned (checked again inside the write's transaction); 409 when the owner has created
/// `MAX_SANDBOXES_PER_OWNER` of them.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    request: NewSandbox,
) -> Result<Sandbox, ApiError> {
    let server_id = match &request.server_id {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(validate::numeric_id("serverId", s)?),
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::invalid("serverId", "must be a positive numeric id"))?,
        ),
        Some(_) => {
            return Err(ApiError::invalid(
                "serverId",
                "must be a positive numeric id",
            ));
        }
    };
    if let Some(name) = &request.name {
        validate::name("name", name)?;
    }
    validate::tags("metadata", &request.metadata)?;
    let ownership = match server_id {
        Some(id) => Some(crate::servers::ownership::authorize(state, principal, id).await?),
        None => None,
    };
    let now = state.clock.timestamp();
    let record = SandboxRecord {
        event_seq: 0,
        id: ids::new(ids::SANDBOX),
        owner: principal.owner.clone(),
        server_id,
        project_id: ownership.as_ref().map(|o| o.project_id),
        plan: None,
        region: None,
        hostname: None,
        name: request.name,
        metadata: request.metadata,
        status: Status::Recorded,
        created_at: now,
        updated_at: now,
        lease: None,
        watch: None,
        payment: None,
        authorized_keys: Vec::new(),
        resizing: None,
    };
    let cap = state.config.caps.sandboxes;
    match state.store.put_sandbox(&record, Some(cap)).await {
        Ok(()) => Ok(record.into()),
        Err(StoreError::CapReached(_)) => Err(ApiError::Conflict(format!(
            "this wallet has created {cap} metadata sandboxes, the most allowed"
        ))),
        Err(StoreError::ConditionFailed) => Err(ApiError::Forbidden(format!(
            "server {} does not belong to the caller",
            server_id.unwrap_or_default()
        ))),
        Err(err) => Err(err.into()),
    }
}

/// A sandbox's record as answered (`crate::store::sandboxes::SandboxRecord`, its owner in
/// EIP-55; its internal watch and event sequence left out): the answer of `POST /api/sandboxes`
/// and the first part of a [`SandboxView`].
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// `sbx_<32 hex>`.
    pub id: String,
    /// The owner.
    pub owner: crate::address::Checksummed,
    /// Provider server id, when the record is about a server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// Provider project id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<u64>,
    /// Plan slug.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Region slug.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Hostname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// A name the owner chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free-form string metadata.
    pub metadata: BTreeMap<String, String>,
    /// Last known status: the provider's (`deploying`, `deployed`, …), `terminating` after a
    /// delete, `terminated` once the provider no longer knows the server, `recorded` for a
    /// metadata-only record, or another of the service's own.
    #[schema(value_type = String)]
    pub status: Status,
    /// When it was recorded.
    pub created_at: crate::time::Timestamp,
    /// When it last changed.
    pub updated_at: crate::time::Timestamp,
    /// A paid server's lease (free servers and metadata records have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<crate::store::sandboxes::Lease>,
    /// The payment key of the order that provisioned the server (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub payment: Option<crate::x402::PaymentKey>,
}

impl From<SandboxRecord> for Sandbox {
    fn from(record: SandboxRecord) -> Sandbox {
        Sandbox {
            owner: record.owner.checksummed(),
            id: record.id,
            server_id: record.server_id,
            project_id: record.project_id,
            plan: record.plan,
            region: record.region,
            hostname: record.hostname,
            name: record.name,
            metadata: record.metadata,
            status: record.status,
            created_at: record.created_at,
            updated_at: record.updated_at,
            lease: record.lease,
            payment: record.payment,
        }
    }
}

/// A sandbox as its owner sees it: the record, the server as last read (without credentials),
/// its progress ([`Progress`]: `stage`, `etaAt`, `deadlineAt`, `statusAt`, `access`, …) and the
/// lease's times and warning.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxView {
    /// The record.
    #[serde(flatten)]
    pub record: Sandbox,
    /// The provider's server object as the refresher last read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub server: Option<Value>,
    /// Stage, times, access.
    #[serde(flatten)]
    pub progress: Progress,
    /// Bytes of traffic the server used, as the provider reported it when the refresher last
    /// read it (its object's `traffic_used_bytes`, at `statusAt`); absent before the provider
    /// reported any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_used_bytes: Option<u64>,
    /// End of the paid time (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_until: Option<crate::time::Timestamp>,
    /// When the server is deleted unless renewed (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_ends_at: Option<crate::time::Timestamp>,
    /// `true` in the last 24 h before `paidUntil`.
    pub expires_soon: bool,
    /// The renewal route, with `expiresSoon`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew: Option<String>,
    /// Whether a wait (`waitFor`) saw one of the stages it waited for; only on a wait's
    /// answer, where `false` comes with `Retry-After`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached: Option<bool>,
}

impl SandboxView {
    /// The view of `record` at `now` (epoch seconds).
    pub fn of(state: &AppState, mut record: SandboxRecord, now: i64) -> Self {
        let progress = Progress::of(state, &record);
        let server = record.watch.take().as_ref().and_then(stages::server_object);
        let lease = record.lease.as_ref();
        let soon = lease.is_some_and(|l| leases::expires_soon(l, now));
        SandboxView {
            traffic_used_bytes: server
                .as_ref()
                .and_then(|s| s["traffic_used_bytes"].as_u64()),
            paid_until: lease.map(|l| l.paid_until),
            grace_ends_at: lease.map(|l| l.grace_ends_at),
            expires_soon: soon,
            renew: record.server_id.filter(|_| soon).map(leases::renew_link),
            server,
            progress,
            record: record.into(),
            reached: None,
        }
    }
}

/// The sandbox `id` of `principal` as the store has it: no provider call (the refresher keeps
/// the server's state current; `statusAt` says when it was read).
///
/// Errors: 404 unknown id; 403 another owner's sandbox.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &SandboxId,
) -> Result<SandboxView, ApiError> {
    let record = owned(state, principal, id.as_str()).await?;
    Ok(SandboxView::of(state, record, state.clock.now()))
}

/// A long-poll (`GET /api/sandboxes/{id}?waitFor=ready&timeout=20`): reads the store until the
/// sandbox reaches one of `stages` or `timeout` passes (at most
/// [`stages::MAX_WAIT_SECONDS`], and never past `deadline`); the sandbox as last read and
/// whether it got there. Never an error for a timeout. A wait that does not end at its first
/// read holds one of the owner's `MAX_WAITS_PER_OWNER` slots (`crate::store::caps`) while it
/// polls: a few keys cannot pin every instance of the account.
///
/// Errors: 404 unknown id; 403 another owner's sandbox; 429 `waits` (with `Retry-After`: when
/// the first slot frees) while the owner holds every slot.
pub async fn wait(
    state: &AppState,
    principal: &Principal,
    id: &SandboxId,
    stages: &[Stage],
    timeout: std::time::Duration,
    deadline: &crate::deadline::Deadline,
) -> Result<(SandboxView, bool), ApiError> {
    let id = id.as_str();
    let until = tokio::time::Instant::now() + timeout;
    let record = owned(state, principal, id).await?;
    let reached = stages::stage(&record).is_some_and(|s| stages.contains(&s));
    let pause = stages::poll_interval(0).min(timeout);
    if reached || pause.is_zero() || !deadline.allows(pause) {
        let view = SandboxView::of(state, record, state.clock.now());
        return Ok((view, reached));
    }
    let caps = &state.config.caps;
    let seconds = timeout.as_secs() as i64 + 5;
    let owner = (principal.owner.as_str(), caps.waits);
    let polled = async {
        tokio::time::sleep(pause).await;
        poll(state, principal, id, stages, until, deadline).await
    };
    slots::holding_in_pool(state, Pool::Waits, owner, caps.waits_pool, seconds, polled).await
}

/// The polls after the first read, until the sandbox reaches one of `stages`, `until` passes
/// or `deadline` would.
async fn poll(
    state: &AppState,
    principal: &Principal,
    id: &str,
    stages: &[Stage],
    until: tokio::time::Instant,
    deadline: &crate::deadline::Deadline,
) -> Result<(SandboxView, bool), ApiError> {
    let mut reads = 1;
    loop {
        let record = owned(state, principal, id).await?;
        reads += 1;
        let reached = stages::stage(&record).is_some_and(|s| stages.contains(&s));
        let now = tokio::time::Instant::now();
        let pause = stages::poll_interval(reads - 1).min(until.saturating_duration_since(now));
        if reached || pause.is_zero() || !deadline.allows(pause) {
            let view = SandboxView::of(state, record, state.clock.now());
            return Ok((view, reached));
        }
        tokio::time::sleep(pause).await;
    }
}

/// The sandbox `id` if `principal` owns it (strongly consistent read).
async fn owned(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<SandboxRecord, ApiError> {
    let record = state
        .store
        .sandbox(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no sandbox {id}")))?;
    if record.owner != principal.owner {
        return Err(ApiError::Forbidden(format!(
            "sandbox {id} does not belong to the caller"
        )));
    }
    Ok(record)
}

/// One page of the caller's sandboxes, newest first: `limit` 1-100 (default 50), `cursor` from
/// the previous page's `nextCursor`.
///
/// Errors: 400 (`limit`, `cursor`) when malformed.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    page: &PageRequest,
) -> Result<Page<SandboxView>, ApiError> {
    let page = state
        .store
        .sandboxes_of(&principal.owner, page.limit, page.cursor())
        .await?;
    let now = state.clock.now();
    Ok(Page {
        items: page
            .items
            .into_iter()
            .map(|record| SandboxView::of(state, record, now))
            .collect(),
        next_cursor: page.next_cursor,
    })
}
