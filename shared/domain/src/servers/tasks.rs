//! MCP tasks (issue 47, point 3; MCP 2025-11-25 "Tasks"): a `provision_server`, `renew_server`
//! or `resize_server` called with a `task` returns a task at once; the task is followed across
//! invocations from the table, in its key's partition (`crate::store::tasks`: only that key
//! reads, lists or cancels it).
//!
//! A provisioning whose server is not ready yet is `working` while its sandbox is; it ends
//! `completed` when the server is ready (with the tool's result), `failed` when the server
//! failed, was deleted, or its order ended without one (a credit). Every other call ends at
//! once, `completed` with its result — a tool error too (`isError`, e.g. a payment required), as
//! the spec has it. Cancelling a working task ends the task, not the server: the server was
//! paid for and stays the caller's (its sandbox says where it is).

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::servers::stages::{self, Stage};
use crate::state::AppState;
use crate::store::tasks::{TaskRecord, TaskStatus};

/// The prefix of a task id.
pub const TASK: &str = "tsk_";
/// How long a task is kept unless its client asks for less, milliseconds (a day).
pub const MAX_TTL_MS: u64 = 86_400_000;
/// How often a client should poll a working task, milliseconds.
pub const POLL_INTERVAL_MS: u64 = 5_000;

/// A task as MCP 2025-11-25 shows it (`Task`): its id, status, times, `ttl` and `pollInterval`
/// (milliseconds).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// `tsk_…`.
    pub task_id: String,
    /// `working`, `completed`, `failed` or `cancelled`.
    pub status: TaskStatus,
    /// Why, for a human.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339.
    pub last_updated_at: crate::time::Timestamp,
    /// How long the task is kept after its creation, milliseconds.
    pub ttl: u64,
    /// How often to poll it, milliseconds (while it works).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
}

impl From<&TaskRecord> for TaskView {
    fn from(record: &TaskRecord) -> TaskView {
        TaskView {
            task_id: record.task_id.clone(),
            status: record.status,
            status_message: record.status_message.clone(),
            created_at: record.created_at,
            last_updated_at: record.last_updated_at,
            ttl: record.ttl_ms,
            poll_interval: (record.status == TaskStatus::Working).then_some(POLL_INTERVAL_MS),
        }
    }
}

/// The key id of `principal`, whose partition holds its tasks.
///
/// Errors: 403 for a session (tasks are MCP's, and MCP takes keys).
fn key_of(principal: &Principal) -> Result<&str, ApiError> {
    principal
        .key_id()
        .ok_or_else(|| ApiError::Forbidden("tasks belong to API keys".into()))
}

/// A new task of `principal`'s key for its call of `tool`, whose `result` (a `CallToolResult`)
/// is in: working while `sandbox` (a provisioning's) is on its way, else completed. `ttl_ms` is
/// what the client asked for, at most [`MAX_TTL_MS`].
///
/// Errors: 403 for a session; 500 when the store fails.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    tool: &str,
    ttl_ms: Option<u64>,
    result: &Value,
    sandbox: Option<&str>,
) -> Result<TaskRecord, ApiError> {
    let key_id = key_of(principal)?;
    let now = state.clock.timestamp();
    let ttl_ms = ttl_ms.unwrap_or(MAX_TTL_MS).clamp(1_000, MAX_TTL_MS);
    let millis = state.clock.now_millis();
    let record = TaskRecord {
        task_id: format!("{TASK}{millis:012x}{}", crate::ids::random_hex(10)),
        key_id: key_id.to_owned(),
        tool: tool.to_owned(),
        status: if sandbox.is_some() {
            TaskStatus::Working
        } else {
            TaskStatus::Completed
        },
        status_message: sandbox.map(|id| format!("provisioning: follow sandbox {id}")),
        created_at: now,
        last_updated_at: now,
        ttl_ms,
        result: result.to_string(),
        sandbox_id: sandbox.map(str::to_owned),
        expires_epoch: (millis + ttl_ms as i64) / 1000,
    };
    state.store.put_task(&record).await?;
    Ok(record)
}

/// `principal`'s task `id`, brought up to date: a working provisioning ends when its sandbox
/// says so (written once).
///
/// Errors: 404 for no such task of the caller's key (another key's included) or an expired one;
/// 403 for a session; 500 when the store fails.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<TaskRecord, ApiError> {
    let key_id = key_of(principal)?;
    let missing = || ApiError::NotFound(format!("no task {id}"));
    if crate::ids::parse(TASK, "taskId", id).is_err() {
        return Err(missing());
    }
    let record = state.store.task(key_id, id).await?.ok_or_else(missing)?;
    if record.expires_epoch <= state.clock.now() {
        return Err(missing());
    }
    if record.status != TaskStatus::Working {
        return Ok(record);
    }
    let Some(sandbox_id) = record.sandbox_id.clone() else {
        return Ok(record);
    };
    let sandbox = state.store.sandbox(&sandbox_id).await?;
    let (status, message) = match sandbox.as_ref() {
        None => (TaskStatus::Failed, "its sandbox is gone".to_owned()),
        Some(s) => match stages::stage(s) {
            Some(Stage::Ready) => (TaskStatus::Completed, "the server is ready".to_owned()),
            Some(Stage::Failed) => (TaskStatus::Failed, "the server failed".to_owned()),
            Some(Stage::Terminated) => (TaskStatus::Failed, "the server was deleted".to_owned()),
            _ if !stages::live(s) => (
                TaskStatus::Failed,
                "the order ended without a server".into(),
            ),
            _ => return Ok(record),
        },
    };
    end(state, record, status, message).await
}

/// Ends the working `record` as `status` saying `message`; the task as stored after.
async fn end(
    state: &AppState,
    record: TaskRecord,
    status: TaskStatus,
    message: String,
) -> Result<TaskRecord, ApiError> {
    let ended = TaskRecord {
        status,
        status_message: Some(message),
        last_updated_at: state.clock.timestamp(),
        ..record.clone()
    };
    if state.store.end_task(&ended).await? {
        return Ok(ended);
    }
    // Another invocation ended it first: its end stands.
    let stored = state.store.task(&record.key_id, &record.task_id).await?;
    Ok(stored.unwrap_or(ended))
}

/// Cancels `principal`'s working task `id`.
///
/// Errors: those of [`get`]; 409 for a task that already ended.
pub async fn cancel(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<TaskRecord, ApiError> {
    let record = get(state, principal, id).await?;
    if record.status != TaskStatus::Working {
        return Err(ApiError::Conflict(format!(
            "task {id} already ended: {}",
            serde_json::to_value(record.status).unwrap_or_default()
        )));
    }
    let message = "cancelled by its requestor; the server stays yours".to_owned();
    let ended = end(state, record, TaskStatus::Cancelled, message).await?;
    if ended.status != TaskStatus::Cancelled {
        return Err(ApiError::Conflict(format!(
            "task {id} ended before it was cancelled"
        )));
    }
    Ok(ended)
}

/// One page of `principal`'s key's tasks, newest first (`cursor` from the previous page).
///
/// Errors: 400 naming `cursor` for a malformed one; 403 for a session; 500 when the store fails.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    cursor: Option<&str>,
) -> Result<crate::store::Page<TaskRecord>, ApiError> {
    let key_id = key_of(principal)?;
    let now = state.clock.now();
    let mut page = state.store.task_page(key_id, 50, cursor).await?;
    page.items.retain(|task| task.expires_epoch > now);
    Ok(page)
}
