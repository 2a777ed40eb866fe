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

use domain::billing::order::{self, Outcome};
use domain::billing::payments;
use domain::billing::payments::{MCP_PAYMENT, PaymentHeader};
use domain::billing::purchase::ProvisionRequest;
use domain::deadline::Deadline;
use domain::error::ApiError;
use domain::identity::approvals;
use domain::identity::auth::Principal;
use domain::identity::keys;
use domain::identity::ssh_keys;
use domain::ids::{SandboxId, ServerId};
use domain::notifications::events;
use domain::policy::Scope;
use domain::servers::discovery;
use domain::servers::sandboxes;
use domain::servers::stages;
use domain::servers::{self, ActionRequest};
use domain::x402::SettleResponse;
use domain::{AppState, validate};
use faces::http;
use rmcp::ErrorData;
use rmcp::model::{
    self, CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, MetaObject,
    ToolAnnotations,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

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

/// Longest `wait_for_sandbox` holds, seconds: below MCP clients' 60 s request timeout and
/// within API Gateway's 30 s integration limit, with room for the answer.
pub const MAX_WAIT_SECONDS: u64 = 25;

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

fn page_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "object"}},
            "nextCursor": {"type": ["string", "null"]},
        },
        "required": ["items"],
    })
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

fn sandbox_output() -> Value {
    json!({
        "type": "object",
        "description": "the sandbox: its record, server (without credentials), stage, times, \
                        access (host keys), lease",
        "properties": {
            "id": {"type": "string"},
            "stage": {"type": "string"},
            "server": {"type": "object"},
        },
        "required": ["id"],
    })
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
    /// `list_events`: the caller's events, oldest first, a page (`domain::notifications::events::feed`).
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

    /// The scope a key needs to call the tool (`domain::identity::keys::require`).
    pub fn scope(self) -> Scope {
        match self {
            Tool::ProvisionServer => Scope::Provision,
            Tool::RenewServer => Scope::Renew,
            Tool::ServerAction | Tool::AddSshKey | Tool::DeleteSshKey => Scope::Act,
            Tool::DeleteServer => Scope::Delete,
            Tool::ListPlans
            | Tool::ListRegions
            | Tool::ListImages
            | Tool::ListProjects
            | Tool::GetQuote
            | Tool::ListSandboxes
            | Tool::GetSandbox
            | Tool::WaitForSandbox
            | Tool::ListPayments
            | Tool::ListEvents
            | Tool::ListSshKeys
            | Tool::WaitForApproval => Scope::Read,
        }
    }

    /// Whether the tool may ask for a payment (x402's MCP transport).
    pub fn paid(self) -> bool {
        matches!(self, Tool::ProvisionServer | Tool::RenewServer)
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
                 terminated) or `timeoutSeconds` pass (at most 25); the sandbox with `reached`. \
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
                    "approvalId": {"type": "string", "description": "apr_… (the refusal's approval)"},
                    "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": 20},
                }),
                &["approvalId"],
            ),
        }
    }

    /// The JSON Schema of the tool's result (before [`output_schema`] admits the problem
    /// document and, for a paid tool, the `PaymentRequired`).
    fn output(self) -> Value {
        match self {
            Tool::ListPlans => list_output("plans"),
            Tool::ListRegions => list_output("regions"),
            Tool::ListImages => list_output("images"),
            Tool::ListProjects => list_output("projects"),
            Tool::GetQuote => quote_output(),
            Tool::ProvisionServer => provision_output(),
            Tool::ListSandboxes | Tool::ListPayments | Tool::ListEvents => page_output(),
            Tool::GetSandbox => sandbox_output(),
            Tool::WaitForSandbox => {
                let mut output = sandbox_output();
                output["properties"]["reached"] = json!({"type": "boolean"});
                output["required"] = json!(["id", "reached"]);
                output
            }
            Tool::ServerAction => action_output(),
            Tool::DeleteServer => json!({
                "type": "object",
                "properties": {"serverId": {"type": "integer"}, "deleted": {"type": "boolean"}},
                "required": ["serverId", "deleted"],
            }),
            Tool::RenewServer => renew_output(),
            Tool::AddSshKey => json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "fingerprint": {"type": "string"},
                    "algorithm": {"type": "string"},
                    "publicKey": {"type": "string"},
                    "createdAt": {"type": "string", "format": "date-time"},
                    "registered": {"type": "boolean"},
                },
                "required": ["id", "fingerprint"],
            }),
            Tool::ListSshKeys => page_output(),
            Tool::DeleteSshKey => json!({
                "type": "object",
                "properties": {"sshKeyId": {"type": "string"}, "deleted": {"type": "boolean"}},
                "required": ["sshKeyId", "deleted"],
            }),
            Tool::WaitForApproval => json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "state": {"enum": ["pending", "granted", "declined", "used", "expired"]},
                    "url": {"type": "string"},
                    "resource": {"type": "string"},
                    "request": {"type": "object"},
                    "reason": {"type": "object"},
                    "amount": {"type": "string"},
                    "createdAt": {"type": "string", "format": "date-time"},
                    "expiresAt": {"type": "string", "format": "date-time"},
                },
                "required": ["id", "state", "url", "request"],
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

    /// The tool as `tools/list` answers it.
    fn listed(self) -> model::Tool {
        let (read_only, destructive, idempotent, open_world) = self.hints();
        model::Tool::new(self.name(), self.description(), json_object(self.input()))
            .with_title(self.title())
            .with_raw_output_schema(json_object(output_schema(self.output(), self.paid())))
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
            "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
        }),
        &["sandboxId"],
    )
}

fn quote_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "amount": {"type": "string", "description": "USDC atomic units"},
            "amountUsd": {"type": "number"},
            "free": {"type": "boolean"},
            "network": {"type": "string"},
            "asset": {"type": "string"},
            "payTo": {"type": ["string", "null"]},
            "maxTimeoutSeconds": {"type": "integer"},
            "price": {"type": "object"},
            "validUntil": {"type": "string", "format": "date-time"},
        },
        "required": ["amount", "amountUsd", "free", "network", "asset", "validUntil"],
    })
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

/// A tool's output schema as `tools/list` answers it: its result, or the problem document of
/// an error result, or (a paid tool) the `PaymentRequired` — strict clients (the official
/// TypeScript SDK) check every `structuredContent` against it, error results included. An
/// object at the root, as MCP requires.
fn output_schema(result: Value, paid: bool) -> Value {
    let mut any_of = vec![result, problem_output()];
    if paid {
        any_of.push(payment_required_output());
    }
    json!({"type": "object", "anyOf": any_of})
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

/// A tool's arguments, taken one by one; what is left at the end is refused.
struct Args(Map<String, Value>);

impl Args {
    /// A listing's page (`limit`, `cursor`), and nothing else.
    fn page(mut self) -> Result<domain::page::PageRequest, ApiError> {
        let (limit, cursor) = (self.string("limit")?, self.string("cursor")?);
        self.finish()?;
        domain::page::PageRequest::parse(limit.as_deref(), cursor.as_deref())
    }

    /// A feed's request (`limit`, `after`, `types`, `subject`), and nothing else.
    fn feed(mut self) -> Result<domain::notifications::events::FeedRequest, ApiError> {
        let limit = self.string("limit")?;
        let after = self.string("after")?;
        let types = match self.take("types") {
            None => None,
            Some(Value::Array(names)) => Some(
                names
                    .iter()
                    .map(|n| n.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| ApiError::invalid("types", "must be event type names"))?
                    .join(","),
            ),
            Some(_) => return Err(ApiError::invalid("types", "must be an array")),
        };
        let subject = self.string("subject")?;
        self.finish()?;
        domain::notifications::events::FeedRequest::parse(
            limit.as_deref(),
            after.as_deref(),
            types.as_deref(),
            subject.as_deref(),
        )
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.0.remove(name).filter(|v| !v.is_null())
    }

    fn string(&mut self, name: &str) -> Result<Option<String>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(ApiError::invalid(name, "must be a string")),
        }
    }

    fn required(&mut self, name: &str) -> Result<String, ApiError> {
        self.string(name)?
            .ok_or_else(|| ApiError::invalid(name, "is required"))
    }

    fn id(&mut self, name: &str) -> Result<Option<u64>, ApiError> {
        self.string(name)?
            .map(|s| validate::numeric_id(name, &s))
            .transpose()
    }

    fn required_id(&mut self, name: &str) -> Result<u64, ApiError> {
        validate::numeric_id(name, &self.required(name)?)
    }

    /// Refuses what was not taken.
    fn finish(self) -> Result<(), ApiError> {
        match self.0.keys().next() {
            Some(name) => Err(ApiError::invalid(name.as_str(), "unknown argument")),
            None => Ok(()),
        }
    }

    /// What is left, decoded as a request body would be.
    fn rest<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        let bytes = serde_json::to_vec(&Value::Object(self.0))
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        http::decode_json(&bytes)
    }
}

/// A tool's answer: its structured value and, for a paid call, the settlement.
struct Done {
    value: Value,
    settlement: Option<SettleResponse>,
}

impl From<Value> for Done {
    fn from(value: Value) -> Self {
        Done {
            value,
            settlement: None,
        }
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::Internal(e.to_string()))
}

/// Calls tool `request.name`, with the request's `_meta` (where a payment comes). An unknown
/// tool is a JSON-RPC error (invalid params, as MCP says); everything else is a tool result.
pub async fn call(
    call: &Call<'_>,
    request: CallToolRequestParams,
    meta: &JsonObject,
) -> Result<CallToolResult, ErrorData> {
    let name = request.name.as_ref();
    let Some(tool) = Tool::parse(name) else {
        return Err(ErrorData::invalid_params(
            format!("unknown tool `{name}`"),
            None,
        ));
    };
    let args = Args(request.arguments.clone().unwrap_or_default());
    let payment = meta
        .get(MCP_PAYMENT)
        .filter(|payment| !payment.is_null())
        .map(PaymentHeader::from_mcp);
    Ok(match run(call, tool, args, payment).await {
        Ok(done) => success(done),
        Err(err) => {
            if err.status().is_server_error() {
                tracing_error(name, &err);
            }
            if let Some(elicitation) = url_elicitation(call, &err).await {
                return Err(elicitation);
            }
            failure(&err, call.request_id)
        }
    })
}

/// The error code of MCP's `URLElicitationRequiredError` (2025-11-25, client/elicitation).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

/// A policy refusal that carries an approval, as MCP's `URLElicitationRequiredError` (`-32042`,
/// `data.elicitations`: one URL-mode elicitation, `elicitationId` the approval's id, `url` its
/// console link) — for a key whose MCP client declared `elicitation.url` at its `initialize`.
/// `None` otherwise: the refusal is a tool error whose `structuredContent` carries the approval.
async fn url_elicitation(call: &Call<'_>, err: &ApiError) -> Option<ErrorData> {
    let ApiError::PolicyViolation {
        approval: Some(approval),
        message,
        ..
    } = err
    else {
        return None;
    };
    if !domain::identity::approvals::elicits_urls(call.state, call.principal).await {
        return None;
    }
    let request = &approval.request;
    let text = format!(
        "{message}. Approve {} {} in {} for {} USD: open the link, sign in with the owner's         wallet, and sign the approval; then call the tool again.",
        request.what, request.plan, request.region, request.price
    );
    let data = json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": approval.approval_id,
            "url": approval.approval_url,
            "message": text,
        }],
        "approval": approval,
    });
    Some(ErrorData::new(
        rmcp::model::ErrorCode(URL_ELICITATION_REQUIRED),
        "this request needs its owner's approval",
        Some(data),
    ))
}

fn tracing_error(tool: &str, err: &ApiError) {
    lambda_http::tracing::error!(tool, error = %err, "tool failed");
}

/// Runs `tool` for the caller: its scope, no payment unless it is paid, its arguments, its
/// library call.
async fn run(
    call: &Call<'_>,
    tool: Tool,
    mut args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let Call {
        state, principal, ..
    } = *call;
    keys::require(principal, tool.scope())?;
    if payment.is_some() && !tool.paid() {
        return Err(ApiError::invalid(
            "_meta.x402/payment",
            format!("{} takes no payment", tool.name()),
        ));
    }
    let value = match tool {
        Tool::ListPlans => {
            args.finish()?;
            json!({"plans": discovery::plans(state).await?})
        }
        Tool::ListRegions => {
            args.finish()?;
            json!({"regions": discovery::regions(state).await?})
        }
        Tool::ListImages => {
            let plan = args.string("plan")?;
            args.finish()?;
            json!({"images": discovery::images(state, plan.as_deref()).await?})
        }
        Tool::ListProjects => list_projects(state, args).await?,
        Tool::GetQuote => get_quote(state, principal, args).await?,
        Tool::ProvisionServer => return provision(call, args, payment).await,
        Tool::RenewServer => return renew(call, args, payment).await,
        Tool::AddSshKey => {
            let request = args.rest::<domain::identity::ssh_keys::NewSshKey>()?;
            to_value(&ssh_keys::add(state, principal, request).await?.0)?
        }
        Tool::ListSshKeys => to_value(&ssh_keys::list(state, principal, &args.page()?).await?)?,
        Tool::DeleteSshKey => {
            let id = args.required("sshKeyId")?;
            args.finish()?;
            ssh_keys::delete(state, principal, &id).await?;
            json!({"sshKeyId": id, "deleted": true})
        }
        Tool::ListSandboxes => to_value(&sandboxes::list(state, principal, &args.page()?).await?)?,
        Tool::ListPayments => to_value(&payments::list(state, principal, &args.page()?).await?)?,
        Tool::ListEvents => to_value(&events::feed(state, principal, &args.feed()?).await?)?,
        Tool::GetSandbox => {
            let id = args.required("sandboxId")?;
            args.finish()?;
            let id = SandboxId::parse("sandboxId", &id)?;
            to_value(&sandboxes::get(state, principal, &id).await?)?
        }
        Tool::WaitForSandbox => wait(call, args).await?,
        Tool::WaitForApproval => wait_for_approval(call, args).await?,
        Tool::ServerAction => {
            let server = ServerId::parse("serverId", &args.required("serverId")?)?;
            let action = servers::parse_action(args.rest::<ActionRequest>()?)?;
            let acted = servers::act(state, principal, server, action).await?;
            json!({"server": acted.server, "leaseExpires": acted.lease_expires})
        }
        Tool::DeleteServer => {
            let server = ServerId::parse("serverId", &args.required("serverId")?)?;
            args.finish()?;
            servers::delete(state, principal, server).await?;
            json!({"serverId": server.get(), "deleted": true})
        }
    };
    Ok(value.into())
}

/// `list_projects`: the projects of team `teamId`, or of every team.
async fn list_projects(state: &AppState, mut args: Args) -> Result<Value, ApiError> {
    let team = args.id("teamId")?;
    args.finish()?;
    let teams = match team {
        Some(team) => vec![team],
        None => discovery::teams(state)
            .await?
            .iter()
            .filter_map(|team| team["id"].as_u64())
            .collect(),
    };
    let mut projects = Vec::new();
    for team in teams {
        projects.extend(discovery::projects(state, team).await?);
    }
    Ok(json!({"projects": projects}))
}

/// `get_quote`: the offer a new server (plan, region, image) or a renewal (serverId) carries.
async fn get_quote(
    state: &AppState,
    principal: &Principal,
    mut args: Args,
) -> Result<Value, ApiError> {
    let [plan, region, image, project_id, server_id, periods] = [
        "plan",
        "region",
        "image",
        "projectId",
        "serverId",
        "periods",
    ]
    .map(|name| args.string(name));
    let (plan, region, image) = (plan?, region?, image?);
    let (project_id, server_id, periods) = (project_id?, server_id?, periods?);
    args.finish()?;
    let query = servers::QuoteQuery {
        plan: plan.as_deref(),
        region: region.as_deref(),
        image: image.as_deref(),
        project_id: project_id.as_deref(),
        server_id: server_id.as_deref(),
        periods: periods.as_deref(),
    };
    to_value(&servers::quote(state, principal, &query).await?)
}

/// `provision_server`: the same provisioning as `POST /api/cloud/servers/{projectId}`, the
/// payment from `_meta`.
async fn provision(
    call: &Call<'_>,
    mut args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let project = args.required_id("projectId")?;
    let request = args.rest::<ProvisionRequest>()?.validate()?;
    let outcome = servers::provision(
        call.state,
        call.principal,
        project,
        request,
        order::Resource {
            url: PROVISION_RESOURCE,
            base: call.base,
        },
        payment,
        call.deadline,
    )
    .await?;
    Ok(provisioned(call.state, outcome).await)
}

/// `renew_server`: the same renewal as `POST /api/cloud/servers/{serverId}/renewals`, the
/// payment from `_meta`.
async fn renew(
    call: &Call<'_>,
    mut args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let server = ServerId::parse("serverId", &args.required("serverId")?)?;
    if !args.0.contains_key("periods") {
        args.0.insert("periods".into(), json!(1));
    }
    let request = args.rest::<domain::billing::purchase::RenewalRequest>()?;
    let outcome = servers::renew(
        call.state,
        call.principal,
        server,
        request,
        order::Resource {
            url: RENEW_RESOURCE,
            base: call.base,
        },
        payment,
        call.deadline,
    )
    .await?;
    let answer = order::answer(call.state, outcome).await;
    let mut value = answer.body;
    value["sandboxId"] = answer.sandbox_id.into();
    Ok(Done {
        value,
        settlement: answer.settlement,
    })
}

/// `wait_for_sandbox`: the long-poll of `GET /api/sandboxes/{id}?waitFor=`, up to
/// [`MAX_WAIT_SECONDS`].
async fn wait(call: &Call<'_>, mut args: Args) -> Result<Value, ApiError> {
    let id = args.required("sandboxId")?;
    let wanted = match args.take("stages") {
        None => "ready,failed,terminated".to_owned(),
        Some(Value::Array(names)) if !names.is_empty() => names
            .iter()
            .map(|name| name.as_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(","),
        Some(_) => {
            return Err(ApiError::invalid(
                "stages",
                "must be a non-empty array of stage names",
            ));
        }
    };
    let timeout = match args.take("timeoutSeconds") {
        None => MAX_WAIT_SECONDS,
        Some(value) => value
            .as_u64()
            .filter(|secs| *secs <= MAX_WAIT_SECONDS)
            .ok_or_else(|| {
                ApiError::invalid(
                    "timeoutSeconds",
                    format!("must be a whole number of seconds, 0 to {MAX_WAIT_SECONDS}"),
                )
            })?,
    };
    args.finish()?;
    let id = SandboxId::parse("sandboxId", &id)?;
    let (stages, _) = stages::parse_wait(&wanted, None)
        .map_err(|_| ApiError::invalid("stages", format!("unknown stage in `{wanted}`")))?;
    let (view, reached) = sandboxes::wait(
        call.state,
        call.principal,
        &id,
        &stages,
        std::time::Duration::from_secs(timeout),
        call.deadline,
    )
    .await?;
    let mut value = to_value(&view)?;
    value["reached"] = reached.into();
    Ok(value)
}

/// `wait_for_approval`: the long-poll of `GET /api/approvals/{id}?timeout=`, up to 20 s.
async fn wait_for_approval(call: &Call<'_>, mut args: Args) -> Result<Value, ApiError> {
    let id = args.required("approvalId")?;
    let timeout = match args.take("timeoutSeconds") {
        None => stages::MAX_WAIT_SECONDS,
        Some(value) => value
            .as_u64()
            .filter(|secs| *secs <= stages::MAX_WAIT_SECONDS)
            .ok_or_else(|| {
                ApiError::invalid(
                    "timeoutSeconds",
                    format!(
                        "must be a whole number of seconds, 0 to {}",
                        stages::MAX_WAIT_SECONDS
                    ),
                )
            })?,
    };
    args.finish()?;
    let timeout = std::time::Duration::from_secs(timeout);
    let view = approvals::wait(call.state, call.principal, &id, timeout, call.deadline).await;
    to_value(&view?)
}

/// A provisioning's outcome as the tool answers it (`order::answer`, as over HTTP):
/// `{sandboxId, server}` once the server exists, `{sandboxId, status: "provisioning", payment,
/// detail}` while a paid order runs on.
async fn provisioned(state: &AppState, outcome: Outcome) -> Done {
    let answer = order::answer(state, outcome).await;
    let value = if answer.created {
        json!({"sandboxId": answer.sandbox_id, "server": answer.body})
    } else {
        answer.body
    };
    Done {
        value,
        settlement: answer.settlement,
    }
}

fn settlement_meta(settlement: &SettleResponse) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert(
        MCP_PAYMENT_RESPONSE.to_owned(),
        serde_json::to_value(settlement).unwrap_or_default(),
    );
    meta
}

fn success(done: Done) -> CallToolResult {
    let mut result = CallToolResult::structured(done.value);
    result.meta = done.settlement.as_ref().map(settlement_meta);
    result
}

/// An error as a tool result: x402's form for a payment required (the v2 `PaymentRequired` as
/// `structuredContent`, and `{"x402/error": {code: 402, message, data}}` as text), else the
/// problem document (plus the settlement under `x402/payment-response` when the payment
/// settled, in `structuredContent` and `_meta`).
fn failure(err: &ApiError, request_id: &str) -> CallToolResult {
    if let ApiError::PaymentRequired(demand) = err {
        // Over MCP, the payment comes in `_meta`, not in a header.
        let reason = match demand.reason.as_str() {
            payments::NO_PAYMENT => {
                "payment required: call again with the payment payload in _meta[\"x402/payment\"]"
            }
            other => other,
        };
        let required =
            serde_json::to_value(demand.offer.payment_required(reason)).unwrap_or_default();
        let text = json!({
            "x402/error": {"code": 402, "message": reason, "data": required},
        });
        let mut result = CallToolResult::error(vec![ContentBlock::text(text.to_string())]);
        result.structured_content = Some(required);
        return result;
    }
    let (doc, retry_after) = http::problem_document(err, request_id);
    let mut value = serde_json::to_value(doc).unwrap_or_default();
    if let Some(secs) = retry_after {
        value["retryAfter"] = secs.into();
    }
    let mut meta = None;
    if let ApiError::Charged(charged) = err {
        value[MCP_PAYMENT_RESPONSE] = serde_json::to_value(&charged.settlement).unwrap_or_default();
        meta = Some(settlement_meta(&charged.settlement));
    }
    let mut result = CallToolResult::structured_error(value);
    result.meta = meta;
    result
}
