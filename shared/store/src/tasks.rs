//! MCP tasks (issue 47, point 3; MCP 2025-11-25 "Tasks"): a task-augmented `provision_server`
//! or `renew_server` answered at once with a task its client follows across invocations.
//!
//! Item: `pk = MCPTASKS#<key id>`, `sk = TASK#<task id>`, TTL `expiresEpoch`. A task lives in
//! its key's partition: only that key reads, lists or cancels it. Task ids begin with their
//! creation time (`tsk_<12 hex ms><20 random hex>`), so the partition lists them in order.

use crate::partitions::Partition;
use serde::{Deserialize, Serialize};

use super::{Index, Page, Store, StoreError, schema, to_item};

/// A task's status (MCP 2025-11-25): `working` until it ends `completed`, `failed` or
/// `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Still running.
    Working,
    /// Ended with its result.
    Completed,
    /// Ended without the result it was for.
    Failed,
    /// Its requestor gave up on it.
    Cancelled,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// `tsk_…`.
    pub task_id: String,
    /// The key whose call it is (its partition).
    pub key_id: String,
    /// The tool called.
    pub tool: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// Why it stands there, for a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339.
    pub last_updated_at: crate::time::Timestamp,
    /// How long it is kept after its creation, milliseconds.
    pub ttl_ms: u64,
    /// The tool's result (a `CallToolResult`, as JSON text).
    pub result: String,
    /// The sandbox a provisioning follows until its server is ready, failed or gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// When it is deleted, epoch seconds (the TTL attribute).
    pub expires_epoch: i64,
}

fn partition(key_id: &str) -> String {
    Partition::McpTasks.key(key_id)
}

fn sort_key(task_id: &str) -> String {
    format!("TASK#{task_id}")
}

impl Store {
    /// Stores a new task.
    pub async fn put_task(&self, record: &TaskRecord) -> Result<(), StoreError> {
        let keys = [
            (schema::PK, partition(&record.key_id)),
            (schema::SK, sort_key(&record.task_id)),
        ];
        self.insert(to_item(record, &keys)?).await
    }

    /// Key `key_id`'s task `task_id` (strongly consistent), expired or not.
    pub async fn task(
        &self,
        key_id: &str,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        self.get(partition(key_id), &sort_key(task_id)).await
    }

    /// Replaces a working task with `record` (its end); `false` when it was no longer working.
    ///
    /// Errors: the store's.
    pub async fn end_task(&self, record: &TaskRecord) -> Result<bool, StoreError> {
        let keys = [
            (schema::PK, partition(&record.key_id)),
            (schema::SK, sort_key(&record.task_id)),
        ];
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(record, &keys)?))
            .condition_expression("#status = :working")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":working", super::s("working"))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// One page of key `key_id`'s tasks, newest first.
    ///
    /// Errors: [`StoreError::BadCursor`] for a cursor of another listing; the store's.
    pub async fn task_page(
        &self,
        key_id: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<TaskRecord>, StoreError> {
        self.query_index(
            Index::Table,
            &partition(key_id),
            "TASK#",
            limit,
            cursor,
            false,
        )
        .await
    }
}
