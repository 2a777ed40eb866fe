//! One call of a tool: its arguments taken one by one like a request body's, its scope (its
//! row's), its library call, and its result or error as MCP answers them.

use super::{Call, MCP_PAYMENT_RESPONSE, PROVISION_RESOURCE, RENEW_RESOURCE, Tool};

use domain::billing::order::{self, Outcome};
use domain::billing::payments;
use domain::billing::payments::{MCP_PAYMENT, PaymentHeader};
use domain::billing::purchase::ProvisionRequest;
use domain::error::ApiError;
use domain::identity::approvals;
use domain::identity::auth::Principal;
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

    /// A long poll's `timeoutSeconds`: 0 to `stages::MAX_WAIT_SECONDS` (the one limit of every
    /// wait, over HTTP and MCP), that when left out.
    fn timeout(&mut self) -> Result<std::time::Duration, ApiError> {
        let most = stages::MAX_WAIT_SECONDS;
        let seconds = match self.take("timeoutSeconds") {
            None => most,
            Some(value) => value.as_u64().filter(|secs| *secs <= most).ok_or_else(|| {
                ApiError::invalid(
                    "timeoutSeconds",
                    format!("must be a whole number of seconds, 0 to {most}"),
                )
            })?,
        };
        Ok(std::time::Duration::from_secs(seconds))
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
    let Call {
        state, principal, ..
    } = *call;
    if let Some(scope) = tool.scope() {
        keys::require(principal, scope)?;
    }
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
/// `stages::MAX_WAIT_SECONDS`.
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
    let timeout = args.timeout()?;
    args.finish()?;
    let id = SandboxId::parse("sandboxId", &id)?;
    let (stages, _) = stages::parse_wait(&wanted, None)
        .map_err(|_| ApiError::invalid("stages", format!("unknown stage in `{wanted}`")))?;
    let (mut view, reached) = sandboxes::wait(
        call.state,
        call.principal,
        &id,
        &stages,
        timeout,
        call.deadline,
    )
    .await?;
    view.reached = Some(reached);
    to_value(&view)
}

/// `wait_for_approval`: the long-poll of `GET /api/approvals/{id}?timeout=`, up to
/// `stages::MAX_WAIT_SECONDS`.
async fn wait_for_approval(call: &Call<'_>, mut args: Args) -> Result<Value, ApiError> {
    let id = args.required("approvalId")?;
    let timeout = args.timeout()?;
    args.finish()?;
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
