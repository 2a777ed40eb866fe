//! Sandboxes (design brief §2): the caller's records of servers and metadata. One is written at
//! provisioning; callers may add metadata records, which can never claim a server the caller
//! does not own.
//!
//! Provisioning is eventually consistent: a new server reports `deploying`, then `deployed`
//! minutes later. `GET /api/sandboxes/{id}` asks the provider for the server's current status
//! (and stores it), so clients poll that route — every 10 s or slower, as the provider limits
//! requests to about 4 per second — until `status` is `deployed` (or `failed deployment`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::leases::SandboxView;
use crate::state::AppState;
use crate::store::sandboxes::{LeaseState, SandboxRecord};
use crate::store::{Page, StoreError};
use crate::upstream::{ServerView, UpstreamError};
use crate::{ids, servers, validate};

/// Default page size of the listing.
pub const DEFAULT_LIMIT: i32 = 50;
/// Largest page size of the listing.
pub const MAX_LIMIT: i32 = 100;
/// Status of a metadata record that names no server.
pub const RECORDED: &str = "recorded";
/// Status once the provider no longer knows the server.
pub const TERMINATED: &str = "terminated";

/// The body of `POST /api/sandboxes`: all optional — `serverId` (a server the caller
/// provisioned; number or numeric string), `name` (1-64 characters), `metadata` (at most 20
/// string → string pairs, the same rules as server tags).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewSandbox {
    /// A server the caller owns.
    #[serde(default)]
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
/// provisioned (checked again inside the write's transaction).
pub async fn create(
    state: &AppState,
    principal: &Principal,
    request: NewSandbox,
) -> Result<SandboxRecord, ApiError> {
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
    if let Some(name) = &request.name
        && (name.trim().is_empty()
            || name.chars().count() > 64
            || name.chars().any(char::is_control))
    {
        return Err(ApiError::invalid(
            "name",
            "must be 1-64 characters without control characters",
        ));
    }
    validate::tags("metadata", &request.metadata)?;
    let ownership = match server_id {
        Some(id) => Some(servers::authorize(state, principal, id).await?),
        None => None,
    };
    let now = crate::time::now_rfc3339();
    let record = SandboxRecord {
        id: ids::new(ids::SANDBOX),
        owner: principal.owner.clone(),
        server_id,
        project_id: ownership.as_ref().map(|o| o.project_id),
        plan: None,
        region: None,
        hostname: None,
        name: request.name,
        metadata: request.metadata,
        status: RECORDED.into(),
        created_at: now.clone(),
        updated_at: now,
        lease: None,
    };
    match state.store.put_sandbox(&record).await {
        Ok(()) => Ok(record),
        Err(StoreError::ConditionFailed) => Err(ApiError::Forbidden(format!(
            "server {} does not belong to the caller",
            server_id.unwrap_or_default()
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The sandbox `id` of `principal`, with the server's current status from the provider when it
/// names a server and the upstream is configured (stored when it changed; the stored status is
/// returned if the provider cannot be reached).
///
/// Errors: 404 unknown id; 403 another owner's sandbox.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<SandboxView, ApiError> {
    let now = crate::time::now().unix_timestamp();
    Ok(SandboxView::of(refreshed(state, principal, id).await?, now))
}

/// The sandbox `id` of `principal`, its status refreshed from the provider (see [`get`]). The
/// status of a paid server past its paid time (`expired`, `terminated`) is the lease's, not the
/// provider's (a powered-off server still says `deployed` there).
async fn refreshed(
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
    let (Some(server), Some(upstream)) = (record.server_id, state.upstream.as_ref()) else {
        return Ok(record);
    };
    let lease_decides = record.lease.as_ref().is_some_and(|l| {
        matches!(
            l.state,
            LeaseState::Expiring
                | LeaseState::Expired
                | LeaseState::Terminating
                | LeaseState::Terminated
                | LeaseState::Ended
        )
    });
    if record.status == TERMINATED || lease_decides {
        return Ok(record);
    }
    let (status, hostname) = match upstream.server(server).await {
        Ok(object) => match ServerView::of(&object) {
            Ok(view) => (servers::status_of(&view), view.hostname),
            Err(_) => return Ok(record),
        },
        Err(UpstreamError::Status { status: 404, .. }) => (TERMINATED.to_owned(), None),
        Err(err) => {
            tracing::warn!(server, error = %err, "cannot refresh the sandbox status");
            return Ok(record);
        }
    };
    if status == record.status && (hostname.is_none() || hostname == record.hostname) {
        return Ok(record);
    }
    let at = crate::time::now_rfc3339();
    Ok(state
        .store
        .update_sandbox_status(id, &status, hostname.as_deref(), &at)
        .await?
        .unwrap_or(record))
}

/// One page of the caller's sandboxes, newest first: `limit` 1-100 (default 50), `cursor` from
/// the previous page's `nextCursor`.
///
/// Errors: 400 (`limit`, `cursor`) when malformed.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    limit: Option<&str>,
    cursor: Option<&str>,
) -> Result<Page<SandboxView>, ApiError> {
    let limit = page_limit(limit)?;
    let page = state
        .store
        .sandboxes_of(&principal.owner, limit, cursor)
        .await?;
    let now = crate::time::now().unix_timestamp();
    Ok(Page {
        items: page
            .items
            .into_iter()
            .map(|record| SandboxView::of(record, now))
            .collect(),
        next_cursor: page.next_cursor,
    })
}

/// A listing's `limit` query parameter: 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
///
/// Errors: 400 (`limit`) otherwise.
pub fn page_limit(limit: Option<&str>) -> Result<i32, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(l) => l
            .parse::<i32>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| ApiError::invalid("limit", format!("must be 1 to {MAX_LIMIT}"))),
    }
}
