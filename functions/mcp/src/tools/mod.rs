//! The MCP tools: each an operation of the route table (`domain::api`) with its MCP name, title
//! and honest annotations; its arguments, description, scope, payment and (where it answers the
//! row's body) output schema come from the row. What stays here is MCP's own: the id
//! argument's name (`serverId` where the path says `{id}`), the results that are not a row's
//! body, the payment in `_meta`, elicitation; and one call of a tool, answered by the same
//! library functions as the HTTP routes.
//!
//! Arguments are checked like request bodies: unknown or mistyped arguments are a 400 problem
//! naming the argument; the query's are read by the parsers of the HTTP query (a list as a JSON
//! array). Ids may be given as numbers or strings. Every result carries its value
//! twice, as `structuredContent` (matching the tool's output schema) and as JSON text in
//! `content[0]`. Errors are tool results with `isError: true`: the problem document's fields
//! (`type`, `title`, `status`, `detail`, `requestId`, `field`, `payment`, and `retryAfter`
//! seconds when the HTTP answer would carry `Retry-After`); a payment required is x402's MCP
//! form (`reference/x402.md` §8) instead.

use std::sync::Arc;

use domain::AppState;
use domain::api::{Kind, Schemas};
use domain::deadline::Deadline;
use domain::identity::auth::Principal;
use domain::policy::Scope;
use rmcp::model::{self, JsonObject, ToolAnnotations};
use serde_json::{Value, json};

mod call;
pub use call::{URL_ELICITATION_REQUIRED, call};

/// The resource a paid `provision_server` offers (x402 MCP transport's `mcp://tool/<name>`).
pub const PROVISION_RESOURCE: &str = "mcp://tool/provision_server";

/// The resource a paid `renew_server` offers.
pub const RENEW_RESOURCE: &str = "mcp://tool/renew_server";

/// The resource a paid `resize_server` offers.
pub const RESIZE_RESOURCE: &str = "mcp://tool/resize_server";

/// What `provision_server` does, as `tools/list` says it.
const PROVISION_DESCRIPTION: &str = "Create a server in project `projectId`. A paid plan first \
    answers with an x402 PaymentRequired (isError, structuredContent); call again with the same \
    arguments and the payment payload in _meta[\"x402/payment\"]. The result has sandboxId \
    (follow it with wait_for_sandbox) and the server, or status `provisioning` when the paid \
    order finishes in the background; a paid result carries the settlement in \
    _meta[\"x402/payment-response\"].";

/// What `renew_server` does, as `tools/list` says it.
const RENEW_DESCRIPTION: &str = "Buy `periods` (1-12, default 1) more paid periods for your \
    server `serverId` (get_quote with serverId shows the price). Paid like provision_server: the \
    first call answers an x402 PaymentRequired (isError, structuredContent); call again with the \
    same arguments and the payment payload in _meta[\"x402/payment\"]. The result has the new \
    paidUntil and graceEndsAt; the settlement is in _meta[\"x402/payment-response\"].";

/// What `resize_server` does, as `tools/list` says it.
const RESIZE_DESCRIPTION: &str = "Move your paid cloud VPS `serverId` to `plan`, a dearer VPS \
    plan in stock in its region (the provider's upgrade, which reboots it): you pay the \
    difference of the two plans for the paid time left (get_quote with serverId and plan shows \
    the price), paidUntil unchanged; downgrades are refused. Paid like renew_server: the first \
    call answers an x402 PaymentRequired (isError, structuredContent); call again with the same \
    arguments and the payment payload in _meta[\"x402/payment\"]. The result has serverId, plan, \
    from, amount and paidUntil, or status `provisioning` while the upgrade is on its way; the \
    settlement is in _meta[\"x402/payment-response\"].";

/// The `_meta` key of a result's settlement (x402 MCP transport).
pub const MCP_PAYMENT_RESPONSE: &str = "x402/payment-response";

/// What one tool call needs: the state, the caller, the invocation's deadline, the request id
/// (for problem documents).
pub struct Call<'a> {
    /// The function's state.
    pub state: &'static AppState,
    /// The authenticated caller (an API key).
    pub principal: &'a Principal,
    /// When the invocation must have answered.
    pub deadline: &'a Deadline,
    /// The HTTP request's id.
    pub request_id: &'a str,
    /// The API's public base URL (an approval's link: `faces::http::public_base`).
    pub base: &'a str,
}

/// A tool's annotations: (readOnly, destructive, idempotent, openWorld).
type Hints = (bool, bool, bool, bool);

/// Reads our store or the provider, changes nothing.
const READS_PROVIDER: Hints = (true, false, true, true);
/// Reads our store only.
const READS_STORE: Hints = (true, false, true, false);

fn list_output(name: &str) -> Value {
    json!({
        "type": "object",
        "properties": {name: {"type": "array", "items": {"type": "object"}}},
        "required": [name],
    })
}

/// Every tool the MCP function serves. Its name, its row, its annotations and its dispatch are
/// each an exhaustive `match` on this enum, so a tool cannot be listed without a row (whence its
/// scope and schemas) or a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `list_plans`: the provider's plans with their USD prices.
    ListPlans,
    /// `list_regions`: the provider's regions.
    ListRegions,
    /// `list_images`: operating system images, optionally of one plan.
    ListImages,
    /// `list_projects`: projects to provision into.
    ListProjects,
    /// `get_quote`: the offer a provisioning or a renewal would carry.
    GetQuote,
    /// `provision_server`: a new server, paid by x402 when its plan costs money.
    ProvisionServer,
    /// `list_sandboxes`: the caller's sandboxes, a page.
    ListSandboxes,
    /// `get_sandbox`: one sandbox.
    GetSandbox,
    /// `wait_for_sandbox`: the long poll of one sandbox.
    WaitForSandbox,
    /// `server_action`: power, reboot, rebuild, rescue.
    ServerAction,
    /// `delete_server`: terminate a server.
    DeleteServer,
    /// `list_payments`: the caller's payments and credits, a page.
    ListPayments,
    /// `list_events`: the caller's events, oldest first, a page
    /// (`domain::notifications::events::feed`).
    ListEvents,
    /// `renew_server`: more paid time for a server, paid by x402 like `provision_server`.
    RenewServer,
    /// `resize_server`: a paid VPS moved to a dearer VPS plan in its region, its paid time
    /// kept, paid by x402 like `renew_server`.
    ResizeServer,
    /// `add_ssh_key`: an SSH public key of the caller's (the provider gets it when a paid
    /// server or a rebuild uses it).
    AddSshKey,
    /// `list_ssh_keys`: the caller's SSH keys, a page.
    ListSshKeys,
    /// `delete_ssh_key`: one of the caller's SSH keys.
    DeleteSshKey,
    /// `wait_for_approval`: the long poll of an approval the caller's key asked its owner for.
    WaitForApproval,
}

impl Tool {
    /// Every tool, in the order `tools/list` answers them.
    pub const ALL: [Tool; 19] = [
        Tool::ListPlans,
        Tool::ListRegions,
        Tool::ListImages,
        Tool::ListProjects,
        Tool::GetQuote,
        Tool::ProvisionServer,
        Tool::ListSandboxes,
        Tool::GetSandbox,
        Tool::WaitForSandbox,
        Tool::ServerAction,
        Tool::DeleteServer,
        Tool::ListPayments,
        Tool::ListEvents,
        Tool::RenewServer,
        Tool::ResizeServer,
        Tool::AddSshKey,
        Tool::ListSshKeys,
        Tool::DeleteSshKey,
        Tool::WaitForApproval,
    ];

    /// The tool's MCP name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::ListPlans => "list_plans",
            Tool::ListRegions => "list_regions",
            Tool::ListImages => "list_images",
            Tool::ListProjects => "list_projects",
            Tool::GetQuote => "get_quote",
            Tool::ProvisionServer => "provision_server",
            Tool::ListSandboxes => "list_sandboxes",
            Tool::GetSandbox => "get_sandbox",
            Tool::WaitForSandbox => "wait_for_sandbox",
            Tool::ServerAction => "server_action",
            Tool::DeleteServer => "delete_server",
            Tool::ListPayments => "list_payments",
            Tool::ListEvents => "list_events",
            Tool::RenewServer => "renew_server",
            Tool::ResizeServer => "resize_server",
            Tool::AddSshKey => "add_ssh_key",
            Tool::ListSshKeys => "list_ssh_keys",
            Tool::DeleteSshKey => "delete_ssh_key",
            Tool::WaitForApproval => "wait_for_approval",
        }
    }

    /// The tool named `name`, if any.
    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The id of the operation (`domain::api::OPERATIONS`) the tool is the MCP face of: its
    /// scope and whether it is paid are that row's.
    pub fn operation(self) -> &'static str {
        match self {
            Tool::ListPlans => "listPlans",
            Tool::ListRegions => "listRegions",
            Tool::ListImages => "listImages",
            Tool::ListProjects => "listProjects",
            Tool::GetQuote => "getQuote",
            Tool::ProvisionServer => "provisionServer",
            Tool::ListSandboxes => "listSandboxes",
            Tool::GetSandbox | Tool::WaitForSandbox => "getSandbox",
            Tool::ServerAction => "serverAction",
            Tool::DeleteServer => "deleteServer",
            Tool::ListPayments => "listPayments",
            Tool::ListEvents => "listEvents",
            Tool::RenewServer => "renewServer",
            Tool::ResizeServer => "resizeServer",
            Tool::AddSshKey => "addSshKey",
            Tool::ListSshKeys => "listSshKeys",
            Tool::DeleteSshKey => "deleteSshKey",
            Tool::WaitForApproval => "getApproval",
        }
    }

    /// The tool's row of the route table.
    fn row(self) -> &'static domain::api::Operation {
        domain::api::operation(self.operation()).expect("every tool's operation is a row")
    }

    /// The scope a key needs to call the tool: its row's (`domain::identity::keys::require`).
    pub fn scope(self) -> Option<Scope> {
        self.row().scope
    }

    /// Whether the tool may ask for a payment (x402's MCP transport): its row is paid.
    pub fn paid(self) -> bool {
        self.row().paid
    }

    fn title(self) -> &'static str {
        match self {
            Tool::ListPlans => "List plans",
            Tool::ListRegions => "List regions",
            Tool::ListImages => "List images",
            Tool::ListProjects => "List projects",
            Tool::GetQuote => "Get a quote",
            Tool::ProvisionServer => "Provision a server",
            Tool::ListSandboxes => "List sandboxes",
            Tool::GetSandbox => "Get a sandbox",
            Tool::WaitForSandbox => "Wait for a sandbox",
            Tool::ServerAction => "Act on a server",
            Tool::DeleteServer => "Delete a server",
            Tool::ListPayments => "List payments",
            Tool::ListEvents => "List events",
            Tool::RenewServer => "Renew a server",
            Tool::ResizeServer => "Resize a server",
            Tool::AddSshKey => "Add an SSH key",
            Tool::ListSshKeys => "List SSH keys",
            Tool::DeleteSshKey => "Delete an SSH key",
            Tool::WaitForApproval => "Wait for an approval",
        }
    }

    /// What the tool does: its row's ([`domain::api::Operation::about`], else its summary),
    /// but where the tool is MCP's own (a payment in `_meta`, a wait's default, every team).
    fn description(self) -> &'static str {
        match self {
            Tool::ProvisionServer => PROVISION_DESCRIPTION,
            Tool::RenewServer => RENEW_DESCRIPTION,
            Tool::ResizeServer => RESIZE_DESCRIPTION,
            Tool::ListProjects => {
                "Projects to provision into (`projectId` of provision_server): those of team \
                 `teamId`, or of every team."
            }
            Tool::WaitForSandbox => {
                "Hold until the sandbox reaches one of `waitFor` (default ready, failed, \
                 terminated) or `timeout` seconds pass (at most 20); the sandbox with `reached`. \
                 Call again while `reached` is false."
            }
            _ => self.row().about.unwrap_or(self.row().summary),
        }
    }

    /// The argument that is the row's path id, and what it says (`None`: the path has none);
    /// MCP names it for what it is (`serverId`, where the path says `{id}`).
    fn id_argument(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Tool::ListProjects => ("teamId", "team id (every team when left out)"),
            Tool::ProvisionServer => ("projectId", "project id (list_projects)"),
            Tool::GetSandbox | Tool::WaitForSandbox => ("sandboxId", "sbx_… (list_sandboxes)"),
            Tool::ServerAction | Tool::DeleteServer | Tool::RenewServer | Tool::ResizeServer => {
                ("serverId", "your server's id")
            }
            Tool::DeleteSshKey => ("sshKeyId", "ssh_… (list_ssh_keys)"),
            Tool::WaitForApproval => ("approvalId", "apr_… (the refusal's approval)"),
            Tool::ListPlans
            | Tool::ListRegions
            | Tool::ListImages
            | Tool::GetQuote
            | Tool::ListSandboxes
            | Tool::ListPayments
            | Tool::ListEvents
            | Tool::AddSshKey
            | Tool::ListSshKeys => return None,
        })
    }

    /// The JSON Schema of the tool's arguments, all from its row: the path's id (named by
    /// [`Tool::id_argument`]; required but for `list_projects`), the query's parameters by their
    /// kinds, and the request body's fields (its type's schema, the one the document derives).
    fn input(self) -> Value {
        let row = self.row();
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        if let Some((name, about)) = self.id_argument() {
            let schema = match row.id_prefix {
                Some(_) => {
                    json!({"type": "string", "pattern": row.id_pattern(), "description": about})
                }
                None => Kind::ProviderId.schema(about),
            };
            properties.insert(name.into(), schema);
            if self != Tool::ListProjects {
                required.push(Value::from(name));
            }
        }
        for param in row.query {
            properties.insert(param.name.into(), param.schema());
        }
        let mut defs = Schemas::new();
        if let Some(body) = row.body {
            body.schemas(&mut defs);
            let name = body.name();
            let own = defs.iter().position(|(each, _)| *each == name);
            let own = own.and_then(|at| serde_json::to_value(defs.remove(at).1).ok());
            if let Some(Value::Object(own)) = own {
                if let Some(Value::Object(fields)) = own.get("properties") {
                    properties.extend(fields.clone());
                }
                if let Some(Value::Array(names)) = own.get("required") {
                    required.extend(names.iter().cloned());
                }
            }
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
        domain::api::answers::with_defs(&mut schema, defs);
        schema
    }

    /// The JSON Schema of the tool's result (before [`Tool::output_schema`] admits the problem
    /// document and, for a paid tool, the `PaymentRequired`): its row's answer
    /// (`domain::api::Answer`, the types the HTTP answer has), the component schemas it refers
    /// to pushed onto `defs`; or, for a result that is MCP's own, its schema here.
    fn output(self, defs: &mut Schemas) -> Value {
        match self {
            Tool::ListPlans => list_output("plans"),
            Tool::ListRegions => list_output("regions"),
            Tool::ListImages => list_output("images"),
            Tool::ListProjects => list_output("projects"),
            Tool::ProvisionServer => provision_output(),
            Tool::WaitForSandbox => json!({
                "allOf": [row_output(self.row(), defs)],
                "required": ["reached"],
            }),
            Tool::GetQuote
            | Tool::ListSandboxes
            | Tool::ListPayments
            | Tool::ListEvents
            | Tool::GetSandbox
            | Tool::AddSshKey
            | Tool::ListSshKeys
            | Tool::WaitForApproval => row_output(self.row(), defs),
            Tool::ServerAction => action_output(),
            Tool::DeleteServer => json!({
                "type": "object",
                "properties": {"serverId": {"type": "integer"}, "deleted": {"type": "boolean"}},
                "required": ["serverId", "deleted"],
            }),
            Tool::RenewServer => renew_output(),
            Tool::ResizeServer => resize_output(),
            Tool::DeleteSshKey => json!({
                "type": "object",
                "properties": {"sshKeyId": {"type": "string"}, "deleted": {"type": "boolean"}},
                "required": ["sshKeyId", "deleted"],
            }),
        }
    }

    /// The tool's annotations: (readOnly, destructive, idempotent, openWorld).
    fn hints(self) -> Hints {
        match self {
            Tool::ListPlans
            | Tool::ListRegions
            | Tool::ListImages
            | Tool::ListProjects
            | Tool::GetQuote => READS_PROVIDER,
            Tool::ListSandboxes
            | Tool::GetSandbox
            | Tool::WaitForSandbox
            | Tool::ListPayments
            | Tool::ListEvents
            | Tool::ListSshKeys
            | Tool::WaitForApproval => READS_STORE,
            Tool::ProvisionServer | Tool::RenewServer | Tool::ResizeServer => {
                (false, false, false, true)
            }
            // The same key again is the same key; nothing reaches the provider.
            Tool::AddSshKey => (false, false, true, false),
            Tool::DeleteSshKey => (false, true, true, false),
            Tool::ServerAction => (false, true, false, true),
            Tool::DeleteServer => (false, true, true, true),
        }
    }

    /// The tool's output schema as `tools/list` answers it: its result, or the problem document
    /// of an error result, or (a paid tool) the `PaymentRequired` — strict clients (the official
    /// TypeScript SDK) check every `structuredContent` against it, error results included. An
    /// object at the root, as MCP requires, holding the component schemas the result refers to
    /// as `$defs`.
    fn output_schema(self) -> Value {
        let mut defs = Schemas::new();
        let mut any_of = vec![self.output(&mut defs), problem_output()];
        if self.paid() {
            any_of.push(payment_required_output());
        }
        let mut schema = json!({"type": "object", "anyOf": any_of});
        domain::api::answers::with_defs(&mut schema, defs);
        schema
    }

    /// The `bazaar` extension of a 402 this paid tool answers
    /// ([`faces::discovery::bazaar_mcp`]): its input schema as `tools/list` gives it, and as
    /// its example the row's body example with `id`, this call's id argument, if any.
    fn bazaar(self, id: Option<Value>) -> Value {
        let row = self.row();
        let mut example = row
            .body
            .map_or_else(|| json!({}), faces::discovery::body_example);
        if let (Some((name, _)), Some(id)) = (self.id_argument(), id) {
            example[name] = id;
        }
        faces::discovery::bazaar_mcp(self.name(), self.description(), &self.input(), &example)
    }

    /// The tool as `tools/list` answers it.
    fn listed(self) -> model::Tool {
        let (read_only, destructive, idempotent, open_world) = self.hints();
        model::Tool::new(self.name(), self.description(), json_object(self.input()))
            .with_title(self.title())
            .with_raw_output_schema(json_object(self.output_schema()))
            .with_annotations(
                ToolAnnotations::with_title(self.title())
                    .read_only(read_only)
                    .destructive(destructive)
                    .idempotent(idempotent)
                    .open_world(open_world),
            )
    }
}

fn provision_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "sandboxId": {"type": "string"},
            "server": {"type": "object"},
            "status": {"type": "string"},
            "payment": {"type": "object"},
            "detail": {"type": "string"},
        },
        "required": ["sandboxId"],
    })
}

fn renew_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "serverId": {"type": "integer"},
            "periods": {"type": "integer"},
            "amount": {"type": "string", "description": "USDC atomic units"},
            "paidUntil": {"type": "string", "format": "date-time"},
            "graceEndsAt": {"type": "string", "format": "date-time"},
            "sandboxId": {"type": "string"},
            "status": {"type": "string"},
            "payment": {"type": "object"},
            "detail": {"type": "string"},
        },
        "required": ["sandboxId"],
    })
}

fn resize_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "serverId": {"type": "integer"},
            "plan": {"type": "string"},
            "from": {"type": "string"},
            "amount": {"type": "string", "description": "USDC atomic units"},
            "paidUntil": {"type": "string", "format": "date-time"},
            "sandboxId": {"type": "string"},
            "status": {"type": "string"},
            "payment": {"type": "object"},
            "detail": {"type": "string"},
        },
        "required": ["sandboxId"],
    })
}

fn action_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "server": {"type": "object"},
            "leaseExpires": {"type": ["string", "null"]},
        },
        "required": ["server"],
    })
}

/// The problem document an error result carries as `structuredContent` (`faces::http::Problem`,
/// plus `retryAfter` and, once charged, `x402/payment-response`).
fn problem_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "requestId": {"type": "string"},
        },
        "required": ["type", "title", "status", "detail"],
    })
}

/// The x402 v2 `PaymentRequired` a paid tool's error result carries as `structuredContent`
/// (x402's MCP transport).
fn payment_required_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "x402Version": {"type": "integer"},
            "error": {"type": "string"},
            "resource": {"type": "object"},
            "accepts": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["x402Version", "accepts"],
    })
}

/// The schema of `row`'s success answer, its components pushed onto `defs`.
fn row_output(row: &domain::api::Operation, defs: &mut Schemas) -> Value {
    (row.answer)(defs)
        .and_then(|schema| serde_json::to_value(schema).ok())
        .unwrap_or_else(|| json!({"type": "object"}))
}

fn json_object(value: Value) -> Arc<JsonObject> {
    Arc::new(match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    })
}

/// Every tool, as `tools/list` answers it: built once per cold start (the transport looks a
/// tool up on every call).
pub fn list() -> &'static [model::Tool] {
    static TOOLS: std::sync::LazyLock<Vec<model::Tool>> = std::sync::LazyLock::new(build);
    &TOOLS
}

fn build() -> Vec<model::Tool> {
    Tool::ALL.into_iter().map(Tool::listed).collect()
}
