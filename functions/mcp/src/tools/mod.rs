//! The MCP tools: their table (name, title, description, input and output JSON Schemas, and
//! honest annotations), and one call of a tool, answered by the same library functions as the
//! HTTP routes.
//!
//! Arguments are checked like request bodies: unknown or mistyped arguments are a 400 problem
//! naming the argument. Ids may be given as numbers or strings. Every result carries its value
//! twice, as `structuredContent` (matching the tool's output schema) and as JSON text in
//! `content[0]`. Errors are tool results with `isError: true`: the problem document's fields
//! (`type`, `title`, `status`, `detail`, `requestId`, `field`, `payment`, and `retryAfter`
//! seconds when the HTTP answer would carry `Retry-After`); a payment required is x402's MCP
//! form (`reference/x402.md` §8) instead.

use std::sync::Arc;

use domain::AppState;
use domain::api::Schemas;
use domain::billing::purchase::ProvisionRequest;
use domain::deadline::Deadline;
use domain::identity::auth::Principal;
use domain::policy::Scope;
use domain::servers::ActionRequest;
use domain::servers::stages;
use rmcp::model::{self, JsonObject, ToolAnnotations};
use serde_json::{Value, json};

mod call;
pub use call::{URL_ELICITATION_REQUIRED, call};

/// The resource a paid `provision_server` offers (x402 MCP transport's `mcp://tool/<name>`).
pub const PROVISION_RESOURCE: &str = "mcp://tool/provision_server";

/// The resource a paid `renew_server` offers.
pub const RENEW_RESOURCE: &str = "mcp://tool/renew_server";

/// What `provision_server` does, as `tools/list` says it.
const PROVISION_DESCRIPTION: &str = "Create a server in project `projectId`. A paid plan first \
    answers with an x402 PaymentRequired (isError, structuredContent); call again with the same \
    arguments and the payment payload in _meta[\"x402/payment\"]. The result has sandboxId \
    (follow it with wait_for_sandbox) and the server, or status `provisioning` when the paid \
    order finishes in the background; a paid result carries the settlement in \
    _meta[\"x402/payment-response\"].";

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

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn id_schema(description: &str) -> Value {
    json!({"type": ["integer", "string"], "description": description})
}

fn page_input() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                      "description": "page size (default 50)"},
            "cursor": {"type": "string", "description": "the previous page's nextCursor"},
        }),
        &[],
    )
}

fn events_input() -> Value {
    let names: Vec<&str> = domain::store::events::EventType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    object(
        json!({
            "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                      "description": "page size (default 50)"},
            "after": {"type": "string",
                      "description": "the previous page's nextCursor (resumes after it)"},
            "types": {"type": "array", "items": {"enum": names},
                      "description": "only these event types"},
            "subject": {
                "type": "string",
                "description":
                    "only this subject's events: sbx_…, key_…, apr_…, dlv_… or a payment key",
            },
        }),
        &[],
    )
}

fn list_output(name: &str) -> Value {
    json!({
        "type": "object",
        "properties": {name: {"type": "array", "items": {"type": "object"}}},
        "required": [name],
    })
}

/// A request type's schema (the one the OpenAPI document derives), with an id argument added.
fn with_id<T: utoipa::PartialSchema>(id: &str, description: &str) -> Value {
    let mut schema = serde_json::to_value(T::schema()).unwrap_or_else(|_| json!({}));
    schema["properties"][id] = id_schema(description);
    if let Some(required) = schema["required"].as_array_mut() {
        required.insert(0, Value::String(id.to_owned()));
    } else {
        schema["required"] = json!([id]);
    }
    schema
}

/// Every tool the MCP function serves. Its name, the scope it needs, its schemas, annotations
/// and its dispatch all come from this one enum: each is an exhaustive `match`, so a tool
/// cannot be listed without a scope, a schema or a handler.
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
    pub const ALL: [Tool; 18] = [
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
            Tool::AddSshKey => "Add an SSH key",
            Tool::ListSshKeys => "List SSH keys",
            Tool::DeleteSshKey => "Delete an SSH key",
            Tool::WaitForApproval => "Wait for an approval",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Tool::ListPlans => {
                "The provider's plans (VPS and bare metal), each with monthlyCost in USD (0 for \
                 a free plan) and its regions."
            }
            Tool::ListRegions => "The provider's regions (slug, name, location).",
            Tool::ListImages => {
                "Operating system images; with `plan`, the images that plan can run."
            }
            Tool::ListProjects => {
                "Projects to provision into (`projectId` of provision_server): those of team \
                 `teamId`, or of every team."
            }
            Tool::GetQuote => {
                "The exact offer provision_server (plan, region, image) or a renewal (serverId) \
                 would carry: amount in USDC atomic units (a string), amountUsd, network, asset, \
                 payTo, the price's parts, validUntil. No side effects."
            }
            Tool::ProvisionServer => PROVISION_DESCRIPTION,
            Tool::ListSandboxes => "Your sandboxes (servers and their metadata), newest first.",
            Tool::GetSandbox => {
                "One sandbox: its server, stage (ordered, deploying, network-ready, ready, \
                 failed, terminated), times, SSH host keys, lease."
            }
            Tool::WaitForSandbox => {
                "Hold until the sandbox reaches one of `stages` (default ready, failed, \
                 terminated) or `timeoutSeconds` pass (at most 20); the sandbox with `reached`. \
                 Call again while `reached` is false."
            }
            Tool::ServerAction => {
                "Power on or off, reboot, rebuild (wipes the disk) or enter/exit rescue mode on \
                 your server `serverId`; the server and the transition started."
            }
            Tool::DeleteServer => {
                "Terminate your server `serverId` (its data is lost; paid time left is not \
                 refunded)."
            }
            Tool::ListPayments => {
                "Your payments and credits (a credit is redeemed by provisioning again with the \
                 same payment)."
            }
            Tool::ListEvents => {
                "What happened to your servers, leases, payments and keys, oldest first: \
                 server.ready (with SSH host keys), lease.expiring (24 h and 1 h before \
                 paidUntil, with the renewal route), lease.expired, server.deleted, \
                 payment.settled, … Keep nextCursor and pass it as `after` to get what is new."
            }
            Tool::RenewServer => {
                "Buy `periods` (1-12, default 1) more paid periods for your server `serverId` \
                 (get_quote with serverId shows the price). Paid like provision_server: the \
                 first call answers an x402 PaymentRequired (isError, structuredContent); call \
                 again with the same arguments and the payment payload in \
                 _meta[\"x402/payment\"]. The result has the new paidUntil and graceEndsAt; the \
                 settlement is in _meta[\"x402/payment-response\"]."
            }
            Tool::AddSshKey => {
                "Add an SSH public key (one OpenSSH line, e.g. the contents of \
                 ~/.ssh/id_ed25519.pub: ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa of \
                 2048 bits or more, sk-ssh-ed25519@openssh.com) to your keys; its id (ssh_…) \
                 goes in sshKeys of provision_server or a rebuild. The same key again answers \
                 the key as it was."
            }
            Tool::ListSshKeys => "Your SSH keys (id, name, fingerprint), newest first.",
            Tool::DeleteSshKey => {
                "Delete one of your SSH keys `sshKeyId`: it can no longer be put on a server \
                 (servers made with it keep it)."
            }
            Tool::WaitForApproval => {
                "Hold while approval `approvalId` is pending, up to `timeoutSeconds` (at most \
                 20): its state. Granted: call the refused tool again, same arguments (once)."
            }
        }
    }

    /// The JSON Schema of the tool's arguments.
    fn input(self) -> Value {
        match self {
            Tool::ListPlans | Tool::ListRegions => object(json!({}), &[]),
            Tool::ListImages => object(
                json!({"plan": {"type": "string", "description": "plan slug"}}),
                &[],
            ),
            Tool::ListProjects => object(json!({"teamId": id_schema("team id")}), &[]),
            Tool::GetQuote => quote_input(),
            Tool::ProvisionServer => {
                with_id::<ProvisionRequest>("projectId", "project id (list_projects)")
            }
            Tool::ListSandboxes | Tool::ListPayments => page_input(),
            Tool::GetSandbox => object(json!({"sandboxId": {"type": "string"}}), &["sandboxId"]),
            Tool::WaitForSandbox => wait_input(),
            Tool::ServerAction => with_id::<ActionRequest>("serverId", "your server's id"),
            Tool::ListEvents => events_input(),
            Tool::DeleteServer => object(
                json!({"serverId": id_schema("your server's id")}),
                &["serverId"],
            ),
            Tool::RenewServer => {
                with_id::<domain::billing::purchase::RenewalRequest>("serverId", "your server's id")
            }
            Tool::AddSshKey => serde_json::to_value(
                <domain::identity::ssh_keys::NewSshKey as utoipa::PartialSchema>::schema(),
            )
            .unwrap_or_else(|_| json!({})),
            Tool::ListSshKeys => page_input(),
            Tool::DeleteSshKey => object(
                json!({"sshKeyId": {"type": "string", "description": "ssh_… (list_ssh_keys)"}}),
                &["sshKeyId"],
            ),
            Tool::WaitForApproval => object(
                json!({
                    "approvalId": {"type": "string",
                                   "description": "apr_… (the refusal's approval)"},
                    "timeoutSeconds": {"type": "integer", "minimum": 0,
                                       "maximum": stages::MAX_WAIT_SECONDS},
                }),
                &["approvalId"],
            ),
        }
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
            Tool::ProvisionServer | Tool::RenewServer => (false, false, false, true),
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
        if !defs.is_empty() {
            let defs: serde_json::Map<String, Value> = defs
                .into_iter()
                .map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or_default()))
                .collect();
            schema["$defs"] = Value::Object(defs);
        }
        to_defs(&mut schema);
        schema
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

fn quote_input() -> Value {
    object(
        json!({
            "plan": {"type": "string", "description": "plan slug (a new server)"},
            "region": {"type": "string", "description": "region slug (a new server)"},
            "image": {"type": "string", "description": "image slug (a new server)"},
            "projectId": id_schema("project id (a new server; checked when given)"),
            "serverId": id_schema("a server of yours, to renew"),
            "periods": {"type": "integer", "minimum": 1,
                        "maximum": domain::billing::purchase::MAX_RENEWAL_PERIODS,
                        "description": "paid periods (default 1)"},
        }),
        &[],
    )
}

fn wait_input() -> Value {
    let stage_names: Vec<&str> = stages::Stage::ALL.iter().map(|s| s.as_str()).collect();
    object(
        json!({
            "sandboxId": {"type": "string"},
            "stages": {"type": "array", "items": {"enum": stage_names}},
            "timeoutSeconds": {"type": "integer", "minimum": 0,
                               "maximum": stages::MAX_WAIT_SECONDS},
        }),
        &["sandboxId"],
    )
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

/// Points every `$ref` of `schema` at its `$defs` (the document's refs name
/// `#/components/schemas/…`).
fn to_defs(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        *target = target.replace("#/components/schemas/", "#/$defs/");
                    }
                    (_, value) => to_defs(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_defs),
        _ => {}
    }
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
