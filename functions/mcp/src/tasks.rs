//! MCP tasks (issue 47, point 3; MCP 2025-11-25 "Tasks"), answered here rather than by `rmcp`,
//! whose tasks are a later extension's (SEP-2663: other methods and shapes, gated on a client
//! capability 2025-11-25 clients do not send). The task's rules and its record are
//! `domain::servers::tasks`'s; this module speaks the protocol:
//!
//! - a `tools/call` of `provision_server`, `renew_server` or `resize_server` with `params.task`
//!   (`{ttl?}`) runs the call as today and answers `{task}` at once (CreateTaskResult); a
//!   resize's task ends as a renewal's does, with its order;
//! - `tasks/get` (the task), `tasks/result` (the tool's result once the task ended, with
//!   `_meta["io.modelcontextprotocol/related-task"]`; a working one is waited for within the
//!   invocation), `tasks/list` (`{tasks, nextCursor?}`), `tasks/cancel` (the task);
//! - the `tasks` capability at `initialize` and `execution.taskSupport: "optional"` on the task
//!   tools in `tools/list`, added to `rmcp`'s answers ([`declare`]).
//!
//! A client that sends no `task` gets today's behaviour, and so does one whose task cannot be
//! recorded after its call ran (the store failed): the call's result, with its payment response.
//! Errors are JSON-RPC errors: an unknown task (or another key's) and one that already ended are
//! `-32602`.

use domain::error::ApiError;
use domain::servers::stages::Stage;
use domain::servers::tasks::{self, TaskView};
use domain::store::tasks::{TaskRecord, TaskStatus};
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Value, json};

use crate::tools::{self, Call};

/// The tools a client may call as a task: those whose end comes after their answer.
pub const TASK_TOOLS: [&str; 3] = ["provision_server", "renew_server", "resize_server"];
/// The `_meta` key that ties a result to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Whether this module answers `message`: a task-augmented call of a task tool, or a `tasks/`
/// request.
pub fn answers(message: &Value) -> bool {
    match message["method"].as_str() {
        Some("tools/call") => {
            message["params"]["task"].is_object()
                && TASK_TOOLS.contains(&message["params"]["name"].as_str().unwrap_or_default())
        }
        Some(method) => method.starts_with("tasks/"),
        None => false,
    }
}

/// Answers the JSON-RPC request `message` (one [`answers`] takes): its response.
pub async fn answer(call: &Call<'_>, message: &Value) -> Value {
    let params = &message["params"];
    let outcome = match message["method"].as_str().unwrap_or_default() {
        "tools/call" => call_as_task(call, params).await,
        "tasks/get" => get(call, params).await.map(|task| view(&task)),
        "tasks/result" => result(call, params).await,
        "tasks/list" => list(call, params).await,
        "tasks/cancel" => {
            let id = task_id(params);
            let task = tasks::cancel(call.state, call.principal, id).await;
            task.map(|task| view(&task)).map_err(rpc_error)
        }
        other => Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("no method {other}"),
            None,
        )),
    };
    let id = message["id"].clone();
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// Adds the tasks this server takes to `rmcp`'s `response` to `message`: the `tasks`
/// capability (`list`, `cancel`, `tools/call`) at `initialize`, `execution.taskSupport` on the
/// task tools in `tools/list`.
pub fn declare(message: &Value, response: &mut Value) {
    let result = &mut response["result"];
    if !result.is_object() {
        return;
    }
    match message["method"].as_str() {
        Some("initialize") => {
            result["capabilities"]["tasks"] =
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        Some("tools/list") => {
            let tools = result["tools"].as_array_mut().into_iter().flatten();
            for tool in
                tools.filter(|t| TASK_TOOLS.contains(&t["name"].as_str().unwrap_or_default()))
            {
                tool["execution"] = json!({"taskSupport": "optional"});
            }
        }
        _ => {}
    }
}

/// A task as MCP shows it.
fn view(task: &TaskRecord) -> Value {
    serde_json::to_value(TaskView::from(task)).unwrap_or_default()
}

/// `params.taskId`.
fn task_id(params: &Value) -> &str {
    params["taskId"].as_str().unwrap_or_default()
}

/// The JSON-RPC error of a refusal: `-32602` for what the caller named (no such task, one
/// that ended), else an internal error.
fn rpc_error(err: ApiError) -> ErrorData {
    match err {
        ApiError::NotFound(message) | ApiError::Conflict(message) => {
            ErrorData::invalid_params(message, None)
        }
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

/// A task-augmented `tools/call`: the call as today, then its task — working while a
/// provisioning's server is on its way, else completed with the result.
async fn call_as_task(call: &Call<'_>, params: &Value) -> Result<Value, ErrorData> {
    let request: CallToolRequestParams = serde_json::from_value(params.clone())
        .map_err(|e| ErrorData::invalid_params(format!("params: {e}"), None))?;
    let meta: JsonObject = params["_meta"].as_object().cloned().unwrap_or_default();
    let name = request.name.to_string();
    let result = tools::call(call, request, &meta).await?;
    let value = serde_json::to_value(&result)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let sandbox = match result.is_error {
        Some(true) => None,
        _ => value["structuredContent"]["sandboxId"].as_str(),
    };
    let ttl = params["task"]["ttl"].as_u64();
    match tasks::create(call.state, call.principal, &name, ttl, &value, sandbox).await {
        Ok(task) => Ok(json!({"task": view(&task)})),
        // The call ran (and may have been paid): its result, payment response and all, is
        // the answer when its task cannot be recorded — never an error that hides a charge.
        Err(err) => {
            lambda_http::tracing::warn!(tool = name, error = %err, "a task could not be recorded");
            Ok(value)
        }
    }
}

/// The caller's task `params.taskId`, up to date.
async fn get(call: &Call<'_>, params: &Value) -> Result<TaskRecord, ErrorData> {
    tasks::get(call.state, call.principal, task_id(params))
        .await
        .map_err(rpc_error)
}

/// `tasks/result`: the tool's result once the task ended (a working one is waited for, at most
/// `stages::MAX_WAIT_SECONDS`, as every wait and within the invocation); a failed or cancelled
/// task's is an error result saying why.
async fn result(call: &Call<'_>, params: &Value) -> Result<Value, ErrorData> {
    let mut task = get(call, params).await?;
    if let (TaskStatus::Working, Some(sandbox)) = (task.status, task.sandbox_id.clone()) {
        let id = domain::ids::SandboxId::parse("sandboxId", &sandbox).map_err(rpc_error)?;
        let ended = [Stage::Ready, Stage::Failed, Stage::Terminated];
        let timeout = std::time::Duration::from_secs(domain::servers::stages::MAX_WAIT_SECONDS);
        let waited = domain::servers::sandboxes::wait(
            call.state,
            call.principal,
            &id,
            &ended,
            timeout,
            call.deadline,
        );
        waited.await.map_err(rpc_error)?;
        task = get(call, params).await?;
    }
    let related = json!({"taskId": task.task_id});
    let mut value = match task.status {
        TaskStatus::Working => {
            return Err(ErrorData::invalid_params(
                format!("task {} is still working: poll tasks/get", task.task_id),
                None,
            ));
        }
        TaskStatus::Completed => serde_json::from_str(&task.result).unwrap_or_default(),
        TaskStatus::Failed | TaskStatus::Cancelled => {
            let why = task.status_message.clone().unwrap_or_default();
            json!({"content": [{"type": "text", "text": why}], "isError": true})
        }
    };
    value["_meta"][RELATED_TASK] = related;
    Ok(value)
}

/// `tasks/list`: the caller's key's tasks, newest first, a page at a time.
async fn list(call: &Call<'_>, params: &Value) -> Result<Value, ErrorData> {
    let cursor = params["cursor"].as_str();
    let page = tasks::list(call.state, call.principal, cursor)
        .await
        .map_err(|err| match err {
            ApiError::Invalid { message, .. } => ErrorData::invalid_params(message, None),
            other => rpc_error(other),
        })?;
    let mut answer = json!({"tasks": page.items.iter().map(view).collect::<Vec<_>>()});
    if let Some(cursor) = page.next_cursor {
        answer["nextCursor"] = cursor.into();
    }
    Ok(answer)
}
