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

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, MetaObject, Tool,
    ToolAnnotations,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use shared::auth::Principal;
use shared::deadline::Deadline;
use shared::error::ApiError;
use shared::keys;
use shared::order::{self, Outcome};
use shared::payments::{MCP_PAYMENT, PaymentHeader};
use shared::policy::Scope;
use shared::purchase::ProvisionRequest;
use shared::servers::{self, ActionRequest};
use shared::x402::SettleResponse;
use shared::{AppState, discovery, http, ids, payments, sandboxes, stages, validate};

/// The resource a paid `provision_server` offers (x402 MCP transport's `mcp://tool/<name>`).
pub const PROVISION_RESOURCE: &str = "mcp://tool/provision_server";

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
}

/// A tool's annotations: (readOnly, destructive, idempotent, openWorld).
type Hints = (bool, bool, bool, bool);

/// Reads our store or the provider, changes nothing.
const READS_PROVIDER: Hints = (true, false, true, true);
/// Reads our store only.
const READS_STORE: Hints = (true, false, true, false);

struct Spec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    input: Value,
    output: Value,
    hints: Hints,
}

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

fn specs() -> Vec<Spec> {
    let stage_names: Vec<&str> = stages::Stage::ALL.iter().map(|s| s.as_str()).collect();
    vec![
        Spec {
            name: "list_plans",
            title: "List plans",
            description: "The provider's plans (VPS and bare metal), each with monthlyCost in \
                          USD (0 for a free plan) and its regions.",
            input: object(json!({}), &[]),
            output: list_output("plans"),
            hints: READS_PROVIDER,
        },
        Spec {
            name: "list_regions",
            title: "List regions",
            description: "The provider's regions (slug, name, location).",
            input: object(json!({}), &[]),
            output: list_output("regions"),
            hints: READS_PROVIDER,
        },
        Spec {
            name: "list_images",
            title: "List images",
            description: "Operating system images; with `plan`, the images that plan can run.",
            input: object(
                json!({"plan": {"type": "string", "description": "plan slug"}}),
                &[],
            ),
            output: list_output("images"),
            hints: READS_PROVIDER,
        },
        Spec {
            name: "list_projects",
            title: "List projects",
            description: "Projects to provision into (`projectId` of provision_server): those \
                          of team `teamId`, or of every team.",
            input: object(json!({"teamId": id_schema("team id")}), &[]),
            output: list_output("projects"),
            hints: READS_PROVIDER,
        },
        Spec {
            name: "get_quote",
            title: "Get a quote",
            description: "The exact offer provision_server (plan, region, image) or a renewal \
                          (serverId) would carry: amount in USDC atomic units (a string), \
                          amountUsd, network, asset, payTo, the price's parts, validUntil. \
                          No side effects.",
            input: object(
                json!({
                    "plan": {"type": "string", "description": "plan slug (a new server)"},
                    "region": {"type": "string", "description": "region slug (a new server)"},
                    "image": {"type": "string", "description": "image slug (a new server)"},
                    "projectId": id_schema("project id (a new server; checked when given)"),
                    "serverId": id_schema("a server of yours, to renew"),
                    "periods": {"type": "integer", "minimum": 1,
                                "maximum": shared::purchase::MAX_RENEWAL_PERIODS,
                                "description": "paid periods (default 1)"},
                }),
                &[],
            ),
            output: json!({
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
            }),
            hints: READS_PROVIDER,
        },
        Spec {
            name: "provision_server",
            title: "Provision a server",
            description: "Create a server in project `projectId`. A paid plan first answers \
                          with an x402 PaymentRequired (isError, structuredContent); call \
                          again with the same arguments and the payment payload in \
                          _meta[\"x402/payment\"]. The result has sandboxId (follow it with \
                          wait_for_sandbox) and the server, or status `provisioning` when the \
                          paid order finishes in the background; a paid result carries the \
                          settlement in _meta[\"x402/payment-response\"].",
            input: with_id::<ProvisionRequest>("projectId", "project id (list_projects)"),
            output: json!({
                "type": "object",
                "properties": {
                    "sandboxId": {"type": "string"},
                    "server": {"type": "object"},
                    "status": {"type": "string"},
                    "payment": {"type": "object"},
                    "detail": {"type": "string"},
                },
                "required": ["sandboxId"],
            }),
            hints: (false, false, false, true),
        },
        Spec {
            name: "list_sandboxes",
            title: "List sandboxes",
            description: "Your sandboxes (servers and their metadata), newest first.",
            input: page_input(),
            output: page_output(),
            hints: READS_STORE,
        },
        Spec {
            name: "get_sandbox",
            title: "Get a sandbox",
            description: "One sandbox: its server, stage (ordered, deploying, network-ready, \
                          ready, failed, terminated), times, SSH host keys, lease.",
            input: object(json!({"sandboxId": {"type": "string"}}), &["sandboxId"]),
            output: sandbox_output(),
            hints: READS_STORE,
        },
        Spec {
            name: "wait_for_sandbox",
            title: "Wait for a sandbox",
            description: "Hold until the sandbox reaches one of `stages` (default ready, \
                          failed, terminated) or `timeoutSeconds` pass (at most 25); the \
                          sandbox with `reached`. Call again while `reached` is false.",
            input: object(
                json!({
                    "sandboxId": {"type": "string"},
                    "stages": {"type": "array", "items": {"enum": stage_names}},
                    "timeoutSeconds": {"type": "integer", "minimum": 0,
                                       "maximum": MAX_WAIT_SECONDS},
                }),
                &["sandboxId"],
            ),
            output: {
                let mut output = sandbox_output();
                output["properties"]["reached"] = json!({"type": "boolean"});
                output["required"] = json!(["id", "reached"]);
                output
            },
            hints: READS_STORE,
        },
        Spec {
            name: "server_action",
            title: "Act on a server",
            description: "Power on or off, reboot, rebuild (wipes the disk) or enter/exit \
                          rescue mode on your server `serverId`; the server and the \
                          transition started.",
            input: with_id::<ActionRequest>("serverId", "your server's id"),
            output: json!({
                "type": "object",
                "properties": {
                    "server": {"type": "object"},
                    "leaseExpires": {"type": ["string", "null"]},
                },
                "required": ["server"],
            }),
            hints: (false, true, false, true),
        },
        Spec {
            name: "delete_server",
            title: "Delete a server",
            description: "Terminate your server `serverId` (its data is lost; paid time left \
                          is not refunded).",
            input: object(
                json!({"serverId": id_schema("your server's id")}),
                &["serverId"],
            ),
            output: json!({
                "type": "object",
                "properties": {"serverId": {"type": "integer"}, "deleted": {"type": "boolean"}},
                "required": ["serverId", "deleted"],
            }),
            hints: (false, true, true, true),
        },
        Spec {
            name: "list_payments",
            title: "List payments",
            description: "Your payments and credits (a credit is redeemed by provisioning \
                          again with the same payment).",
            input: page_input(),
            output: page_output(),
            hints: READS_STORE,
        },
    ]
}

/// The problem document an error result carries as `structuredContent` (`shared::http::Problem`,
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
pub fn list() -> &'static [Tool] {
    static TOOLS: std::sync::LazyLock<Vec<Tool>> = std::sync::LazyLock::new(build);
    &TOOLS
}

fn build() -> Vec<Tool> {
    specs()
        .into_iter()
        .map(|spec| {
            let (read_only, destructive, idempotent, open_world) = spec.hints;
            Tool::new(spec.name, spec.description, json_object(spec.input))
                .with_title(spec.title)
                .with_raw_output_schema(json_object(output_schema(
                    spec.output,
                    spec.name == "provision_server",
                )))
                .with_annotations(
                    ToolAnnotations::with_title(spec.title)
                        .read_only(read_only)
                        .destructive(destructive)
                        .idempotent(idempotent)
                        .open_world(open_world),
                )
        })
        .collect()
}

/// A tool's arguments, taken one by one; what is left at the end is refused.
struct Args(Map<String, Value>);

impl Args {
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
    if !list().iter().any(|tool| tool.name == name) {
        return Err(ErrorData::invalid_params(
            format!("unknown tool `{name}`"),
            None,
        ));
    }
    let args = Args(request.arguments.clone().unwrap_or_default());
    let payment = meta
        .get(MCP_PAYMENT)
        .filter(|payment| !payment.is_null())
        .map(PaymentHeader::from_mcp);
    Ok(match run(call, name, args, payment).await {
        Ok(done) => success(done),
        Err(err) => {
            if err.status().is_server_error() {
                tracing_error(name, &err);
            }
            failure(&err, call.request_id)
        }
    })
}

fn tracing_error(tool: &str, err: &ApiError) {
    lambda_http::tracing::error!(tool, error = %err, "tool failed");
}

async fn run(
    call: &Call<'_>,
    name: &str,
    mut args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let Call {
        state,
        principal,
        deadline,
        ..
    } = *call;
    let scope = match name {
        "provision_server" => Scope::Provision,
        "server_action" => Scope::Act,
        "delete_server" => Scope::Delete,
        _ => Scope::Read,
    };
    keys::require(principal, scope)?;
    if payment.is_some() && name != "provision_server" {
        return Err(ApiError::invalid(
            "_meta.x402/payment",
            format!("{name} takes no payment"),
        ));
    }
    let value = match name {
        "list_plans" => {
            args.finish()?;
            json!({"plans": discovery::plans(state).await?})
        }
        "list_regions" => {
            args.finish()?;
            json!({"regions": discovery::regions(state).await?})
        }
        "list_images" => {
            let plan = args.string("plan")?;
            args.finish()?;
            json!({"images": discovery::images(state, plan.as_deref()).await?})
        }
        "list_projects" => {
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
            json!({"projects": projects})
        }
        "get_quote" => {
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
            to_value(&servers::quote(state, principal, &query).await?)?
        }
        "provision_server" => {
            let project = args.required_id("projectId")?;
            let request = args.rest::<ProvisionRequest>()?.validate()?;
            let outcome = servers::provision(
                state,
                principal,
                project,
                request,
                PROVISION_RESOURCE,
                payment,
                deadline,
            )
            .await?;
            return Ok(provisioned(state, outcome).await);
        }
        "list_sandboxes" | "list_payments" => {
            let (limit, cursor) = (args.string("limit")?, args.string("cursor")?);
            args.finish()?;
            let page = shared::page::PageRequest::parse(limit.as_deref(), cursor.as_deref())?;
            if name == "list_sandboxes" {
                to_value(&sandboxes::list(state, principal, &page).await?)?
            } else {
                to_value(&payments::list(state, principal, &page).await?)?
            }
        }
        "get_sandbox" => {
            let id = args.required("sandboxId")?;
            args.finish()?;
            let id = ids::parse(ids::SANDBOX, "sandboxId", &id)?;
            to_value(&sandboxes::get(state, principal, id).await?)?
        }
        "wait_for_sandbox" => wait(call, args).await?,
        "server_action" => {
            let server = args.required_id("serverId")?;
            let action = servers::parse_action(args.rest::<ActionRequest>()?)?;
            let acted = servers::act(state, principal, server, &action).await?;
            json!({"server": acted.server, "leaseExpires": acted.lease_expires})
        }
        "delete_server" => {
            let server = args.required_id("serverId")?;
            args.finish()?;
            servers::delete(state, principal, server).await?;
            json!({"serverId": server, "deleted": true})
        }
        other => return Err(ApiError::NotFound(format!("no tool {other}"))),
    };
    Ok(value.into())
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
    let id = ids::parse(ids::SANDBOX, "sandboxId", &id)?;
    let (stages, _) = stages::parse_wait(&wanted, None)
        .map_err(|_| ApiError::invalid("stages", format!("unknown stage in `{wanted}`")))?;
    let (view, reached) = sandboxes::wait(
        call.state,
        call.principal,
        id,
        &stages,
        std::time::Duration::from_secs(timeout),
        call.deadline,
    )
    .await?;
    let mut value = to_value(&view)?;
    value["reached"] = reached.into();
    Ok(value)
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

fn success(mut done: Done) -> CallToolResult {
    shared::address::answer_eip55(&mut done.value);
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
