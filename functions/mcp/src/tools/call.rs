//! One call of a tool: its arguments taken one by one like a request body's, its scope (its
//! row's), its library call, and its result or error as MCP answers them.

use super::{
    Call, MCP_PAYMENT_RESPONSE, PROVISION_RESOURCE, RENEW_RESOURCE, RESIZE_RESOURCE, Tool,
};

use domain::api::{Kind, Operation};
use domain::billing::order::{self, Outcome};
use domain::billing::payments;
use domain::billing::payments::{MCP_PAYMENT, PaymentHeader};
use domain::billing::purchase::ProvisionRequest;
use domain::error::ApiError;
use domain::identity::approvals;
use domain::identity::keys;
use domain::identity::ssh_keys;
use domain::ids::{SandboxId, ServerId};
use domain::notifications::events;
use domain::servers::discovery;
use domain::servers::sandboxes;
use domain::servers::stages;
use domain::servers::{self, ActionRequest};
use domain::x402::SettleResponse;
use domain::{AppState, validate};
use faces::http;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, MetaObject};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A tool's arguments, taken one by one; what is left at the end is refused.
struct Args(Map<String, Value>);

/// A row's query parameters as a tool's arguments gave them, spelled as the query spells them
/// (a number as its digits, a list of names comma-separated): the parsers that read the HTTP
/// query read these.
struct Query(BTreeMap<&'static str, String>);

impl Query {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A listing's page (`limit`, `cursor`).
    fn page(&self) -> Result<domain::page::PageRequest, ApiError> {
        domain::page::PageRequest::parse(self.get("limit"), self.get("cursor"))
    }
}

impl Args {
    /// `row`'s query parameters, each taken by its kind: a string, or a number where the kind
    /// is a number or an id, or a list of names where it is one (400 naming it otherwise).
    fn query(&mut self, row: &Operation) -> Result<Query, ApiError> {
        let mut query = BTreeMap::new();
        for param in row.query {
            let (name, kind) = (param.name, param.kind);
            let spelled = match (kind, self.take(name)) {
                (_, None) => continue,
                (Kind::Names(_), Some(Value::Array(names))) => names
                    .iter()
                    .map(Value::as_str)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| ApiError::invalid(name, "must be a list of names"))?
                    .join(","),
                (Kind::Names(_), Some(_)) => {
                    return Err(ApiError::invalid(name, "must be a list of names"));
                }
                (_, Some(Value::String(text))) => text,
                (Kind::Whole { .. } | Kind::ProviderId, Some(Value::Number(n))) => n.to_string(),
                (Kind::Text, Some(_)) => return Err(ApiError::invalid(name, "must be a string")),
                (_, Some(_)) => return Err(ApiError::invalid(name, "must be a whole number")),
            };
            query.insert(name, spelled);
        }
        Ok(Query(query))
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

    /// Refuses what was not taken.
    fn finish(&self) -> Result<(), ApiError> {
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
    let id = tool
        .id_argument()
        .and_then(|(name, _)| args.0.get(name).cloned());
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
            failure(tool, id, &err, call.request_id)
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
        "{message}. Approve {} {} in {} for {} USD: open the link, sign in with the owner's \
         wallet, and sign the approval; then call the tool again.",
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
    let principal = call.principal;
    if let Some(scope) = tool.scope() {
        keys::require(principal, scope)?;
    }
    if payment.is_some() && !tool.paid() {
        return Err(ApiError::invalid(
            "_meta.x402/payment",
            format!("{} takes no payment", tool.name()),
        ));
    }
    // The row's arguments: its query's, its path id's (named for MCP), its body's (the rest).
    let query = args.query(tool.row())?;
    let id = match tool.id_argument() {
        Some((name, _)) if tool == Tool::ListProjects => args.string(name)?,
        Some((name, _)) => Some(args.required(name)?),
        None => None,
    };
    if tool.row().body.is_none() {
        args.finish()?;
    }
    match tool {
        Tool::ProvisionServer => provision(call, id.as_deref(), args, payment).await,
        Tool::RenewServer => renew(call, id.as_deref(), args, payment).await,
        Tool::ResizeServer => resize(call, id.as_deref(), args, payment).await,
        Tool::AddSshKey | Tool::DeleteSshKey | Tool::ServerAction | Tool::DeleteServer => {
            Ok(change(call, tool, id.unwrap_or_default(), args)
                .await?
                .into())
        }
        _ => Ok(read(call, tool, id, &query).await?.into()),
    }
}

/// A tool that reads (no body): its library call on its id and query.
async fn read(
    call: &Call<'_>,
    tool: Tool,
    id: Option<String>,
    query: &Query,
) -> Result<Value, ApiError> {
    let Call {
        state, principal, ..
    } = *call;
    let id = id.unwrap_or_default();
    Ok(match tool {
        Tool::ListPlans => json!({"plans": discovery::plans(state, Some(principal)).await?.items}),
        Tool::ListRegions => json!({"regions": discovery::regions(state).await?}),
        Tool::ListImages => json!({"images": discovery::images(state, query.get("plan")).await?}),
        Tool::ListProjects => list_projects(state, Some(id).filter(|id| !id.is_empty())).await?,
        Tool::GetQuote => {
            let query = servers::QuoteQuery {
                plan: query.get("plan"),
                region: query.get("region"),
                image: query.get("image"),
                project_id: query.get("projectId"),
                server_id: query.get("serverId"),
                periods: query.get("periods"),
            };
            to_value(&servers::quote(state, principal, &query).await?)?
        }
        Tool::ListSshKeys => to_value(&ssh_keys::list(state, principal, &query.page()?).await?)?,
        Tool::ListSandboxes => to_value(&sandboxes::list(state, principal, &query.page()?).await?)?,
        Tool::ListPayments => to_value(&payments::list(state, principal, &query.page()?).await?)?,
        Tool::ListEvents => {
            let feed = events::FeedRequest::parse(
                query.get("limit"),
                query.get("after"),
                query.get("types"),
                query.get("subject"),
            )?;
            to_value(&events::feed(state, principal, &feed).await?)?
        }
        Tool::GetSandbox | Tool::WaitForSandbox => {
            let id = SandboxId::parse("sandboxId", &id)?;
            let wait_for = match (tool, query.get("waitFor")) {
                (_, Some(stages)) => Some(stages),
                (Tool::WaitForSandbox, None) => Some("ready,failed,terminated"),
                _ => None,
            };
            match wait_for {
                Some(wait_for) => wait(call, &id, wait_for, query.get("timeout")).await?,
                None => to_value(&sandboxes::get(state, principal, &id).await?)?,
            }
        }
        Tool::WaitForApproval => {
            let timeout = stages::parse_timeout(query.get("timeout"))?;
            to_value(&approvals::wait(state, principal, &id, timeout, call.deadline).await?)?
        }
        _ => return Err(ApiError::Internal(format!("{} is not a read", tool.name()))),
    })
}

/// A tool that changes something (not a payment): its library call on its id and body.
async fn change(call: &Call<'_>, tool: Tool, id: String, args: Args) -> Result<Value, ApiError> {
    let Call {
        state, principal, ..
    } = *call;
    Ok(match tool {
        Tool::AddSshKey => {
            let request = args.rest::<domain::identity::ssh_keys::NewSshKey>()?;
            to_value(&ssh_keys::add(state, principal, request).await?.0)?
        }
        Tool::DeleteSshKey => {
            ssh_keys::delete(state, principal, &id).await?;
            json!({"sshKeyId": id, "deleted": true})
        }
        Tool::ServerAction => {
            let server = ServerId::parse("serverId", &id)?;
            let action = servers::parse_action(args.rest::<ActionRequest>()?)?;
            let acted = servers::act(state, principal, server, action).await?;
            json!({"server": acted.server, "leaseExpires": acted.lease_expires})
        }
        Tool::DeleteServer => {
            let server = ServerId::parse("serverId", &id)?;
            servers::delete(state, principal, server).await?;
            json!({"serverId": server.get(), "deleted": true})
        }
        _ => {
            return Err(ApiError::Internal(format!(
                "{} changes nothing",
                tool.name()
            )));
        }
    })
}

/// `list_projects`: the projects of team `teamId`, or of every team.
async fn list_projects(state: &AppState, team: Option<String>) -> Result<Value, ApiError> {
    let teams = match team {
        Some(team) => vec![validate::numeric_id("teamId", &team)?],
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

/// `provision_server`: the same provisioning as `POST /api/cloud/servers/{projectId}`, the
/// payment from `_meta`.
async fn provision(
    call: &Call<'_>,
    project: Option<&str>,
    args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let project = validate::numeric_id("projectId", project.unwrap_or_default())?;
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
    server: Option<&str>,
    mut args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let server = ServerId::parse("serverId", server.unwrap_or_default())?;
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
    Ok(on_lease(call.state, outcome).await)
}

/// `resize_server`: the same resize as `POST /api/cloud/servers/{serverId}/resizes`, the
/// payment from `_meta`.
async fn resize(
    call: &Call<'_>,
    server: Option<&str>,
    args: Args,
    payment: Option<PaymentHeader>,
) -> Result<Done, ApiError> {
    let server = ServerId::parse("serverId", server.unwrap_or_default())?;
    let request = args.rest::<domain::billing::purchase::ResizeRequest>()?;
    let outcome = servers::resize(
        call.state,
        call.principal,
        server,
        request,
        order::Resource {
            url: RESIZE_RESOURCE,
            base: call.base,
        },
        payment,
        call.deadline,
    )
    .await?;
    Ok(on_lease(call.state, outcome).await)
}

/// A renewal's or a resize's outcome as the tool answers it (`order::answer`, as over HTTP):
/// the answer's body (`{serverId, …}` once done, `{status, payment, detail}` while the order
/// runs on) with `sandboxId`.
async fn on_lease(state: &AppState, outcome: Outcome) -> Done {
    let answer = order::answer(state, outcome).await;
    let mut value = answer.body;
    value["sandboxId"] = answer.sandbox_id.into();
    Done {
        value,
        settlement: answer.settlement,
    }
}

/// The long poll of `GET /api/sandboxes/{id}?waitFor=&timeout=` (`get_sandbox` with
/// `waitFor`, `wait_for_sandbox`): the sandbox with `reached`.
async fn wait(
    call: &Call<'_>,
    id: &SandboxId,
    wait_for: &str,
    timeout: Option<&str>,
) -> Result<Value, ApiError> {
    let (stages, timeout) = stages::parse_wait(wait_for, timeout)?;
    let (mut view, reached) = sandboxes::wait(
        call.state,
        call.principal,
        id,
        &stages,
        timeout,
        call.deadline,
    )
    .await?;
    view.reached = Some(reached);
    to_value(&view)
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

/// An error of `tool` (called with id argument `id`) as a tool result: x402's form for a
/// payment required (the v2 `PaymentRequired`, with the tool's `bazaar` extension, as
/// `structuredContent`, and `{"x402/error": {code: 402, message, data}}` as text), else the
/// problem document (plus the settlement under `x402/payment-response` when the payment
/// settled, in `structuredContent` and `_meta`).
fn failure(tool: Tool, id: Option<Value>, err: &ApiError, request_id: &str) -> CallToolResult {
    if let ApiError::PaymentRequired(demand) = err {
        // Over MCP, the payment comes in `_meta`, not in a header.
        let reason = match demand.reason.as_str() {
            payments::NO_PAYMENT => {
                "payment required: call again with the payment payload in _meta[\"x402/payment\"]"
            }
            other => other,
        };
        let mut required = demand.offer.payment_required(reason);
        required.extensions = Some(serde_json::Map::from_iter([(
            "bazaar".to_owned(),
            tool.bazaar(id),
        )]));
        let required = serde_json::to_value(required).unwrap_or_default();
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
