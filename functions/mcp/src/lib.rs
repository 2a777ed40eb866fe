//! `mcp` function: `POST /mcp`, the Model Context Protocol face of the API, served with the
//! official Rust SDK (`rmcp`) over Streamable HTTP in stateless mode with JSON responses (each
//! invocation answers one JSON-RPC message; nothing is kept between them).
//!
//! The caller authenticates with an API key (`X-API-Key` or `Authorization: Bearer svc_…`), or
//! an OAuth access token that stands for one (`Authorization: Bearer mcp_at_…`, MCP
//! authorization: `domain::identity::oauth`), before any JSON-RPC is read: a missing or bad
//! credential is a 401 problem document, like every route, and its `WWW-Authenticate` names
//! where an OAuth client starts. The tools (see [`tools`]) call the same library functions as
//! the HTTP routes, under the same ownership rules. A paid `provision_server` (and
//! `renew_server`, `resize_server`) follows x402's MCP transport: the unpaid call is a tool error
//! carrying the `PaymentRequired`, the paid retry carries the payment payload in
//! `_meta["x402/payment"]`, and the result carries the settlement in
//! `_meta["x402/payment-response"]`; it is the same ledger as over HTTP, so the same payment over
//! HTTP and MCP is one payment. Every failure of a tool is a tool result with
//! `isError: true` and the problem document's fields, never a transport error.

#![warn(missing_docs)]
// The handler's future (rmcp's service within ours) is deeper than the compiler's default depth
// for proving it `Send`.
#![recursion_limit = "256"]

pub mod tasks;
pub mod tools;

use std::sync::Arc;

use bytes::Bytes;
use domain::AppState;
use domain::deadline::Deadline;
use domain::identity::auth::Principal;
use faces::http;
use http_body_util::{BodyExt, Full};
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

/// What the server tells a client at `initialize`.
const INSTRUCTIONS: &str = "Real servers (VPS and bare metal) for agents. list_plans, \
list_regions, list_images and list_projects to choose; get_quote for the exact price; \
add_ssh_key with your public key, then provision_server with sshKeys (a paid plan answers \
with an x402 PaymentRequired: pay with _meta[\"x402/payment\"]); wait_for_sandbox until \
`ready`, compare access.hostKeys, then ssh as access.sshUser with your private key; \
renew_server for more paid time and resize_server for a bigger VPS plan (both paid the same \
way); server_action and delete_server to manage it; list_payments for payments and credits; \
list_events for what happened since you last looked. A paid call your key's policy refuses \
carries an approval for your key's owner (a URL elicitation, or `approval.approvalUrl` in the \
error): show them the URL, wait_for_approval, then call again with the same arguments. \
provision_server, renew_server and resize_server may be called as tasks (params.task): follow \
them with tasks/get until the server is ready, then tasks/result.";

/// One MCP request's server: the state, the caller and the invocation's deadline.
#[derive(Clone)]
pub struct Server {
    state: &'static AppState,
    principal: Principal,
    deadline: Deadline,
    request_id: String,
    base: String,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cloud-api", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list().to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::list().iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        tools::call(&self.call(), request, &context.meta)
            .await
            .map(Into::into)
    }
}

impl Server {
    /// What one tool call of this request needs.
    fn call(&self) -> tools::Call<'_> {
        tools::Call {
            state: self.state,
            principal: &self.principal,
            deadline: &self.deadline,
            request_id: &self.request_id,
            base: &self.base,
        }
    }
}

/// The transport: stateless, JSON answers, any `Host` (API Gateway's or a custom domain; the
/// key, not the host, is the protection).
fn transport_config() -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts()
}

/// At an `initialize`, remembers whether the key's client declared URL-mode elicitation
/// (`capabilities.elicitation.url`): a later tool call, in another invocation, answers a policy
/// refusal with `-32042` only to such a client.
async fn remember_client(state: &AppState, principal: &Principal, message: &Value) {
    if message["method"] != "initialize" {
        return;
    }
    let url = message["params"]["capabilities"]["elicitation"]
        .get("url")
        .is_some();
    domain::identity::approvals::remember_mcp_client(state, principal, url).await;
}

/// Handles one request of `POST /mcp` (any other method: 405): admits the key (or the OAuth
/// access token that stands for one) by its row — a 401 problem otherwise, whose
/// `WWW-Authenticate` names the protected-resource metadata (MCP authorization, RFC 9728 §5.1)
/// — then answers the JSON-RPC message through `rmcp`'s Streamable HTTP
/// service (its own 4xx for a malformed message, a wrong `Accept` or protocol version).
pub async fn handle(state: &'static AppState, req: Request) -> Response<Body> {
    let challenge = faces::oauth::challenge(
        &http::public_base(&state.config, &req),
        req.headers().contains_key(header::AUTHORIZATION)
            || req
                .headers()
                .contains_key(domain::identity::auth::api_key::HEADER),
    );
    let mut response = answer(state, req).await;
    if response.status() == lambda_http::http::StatusCode::UNAUTHORIZED
        && let Ok(value) = header::HeaderValue::from_str(&challenge)
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// [`handle`] before the 401's challenge.
async fn answer(state: &'static AppState, req: Request) -> Response<Body> {
    http::serve(state.config.max_body_bytes, req, |req| async move {
        // A GET opens a server-sent event stream; stateless, there is none: 405 (MCP, Streamable
        // HTTP), which clients take as "send everything with POST".
        let matched = faces::router::admit(state, &[("mcp", ())], &req).await?;
        let principal = matched.principal()?.clone();
        let message: Value = serde_json::from_slice(http::body_bytes(&req)).unwrap_or_default();
        remember_client(state, &principal, &message).await;
        let server = Server {
            state,
            principal,
            deadline: http::deadline(state, &req),
            request_id: http::request_id(&req),
            base: http::public_base(&state.config, &req),
        };
        if tasks::answers(&message) {
            let answer = tasks::answer(&server.call(), &message).await;
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::Text(answer.to_string()))
                .map_err(|e| domain::ApiError::Internal(e.to_string()));
        }
        Ok(through_rmcp(server, req, &message).await)
    })
    .await
}

/// `req` answered by `rmcp`'s Streamable HTTP service as `server`, with what it does not know
/// of tasks added ([`tasks::declare`]).
async fn through_rmcp(server: Server, req: Request, message: &Value) -> Response<Body> {
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        transport_config(),
    );
    let body = Bytes::copy_from_slice(http::body_bytes(&req));
    let (parts, _) = req.into_parts();
    let response = service
        .handle(lambda_http::http::Request::from_parts(
            parts,
            Full::new(body),
        ))
        .await;
    let (mut parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    // The transport's refusals (406, 415, …) are plain text without a media type.
    if !bytes.is_empty() && !parts.headers.contains_key(header::CONTENT_TYPE) {
        parts.headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    let body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut answer)
            if matches!(
                message["method"].as_str(),
                Some("initialize" | "tools/list")
            ) =>
        {
            tasks::declare(message, &mut answer);
            Body::Text(answer.to_string())
        }
        _ => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Body::Text(text),
            Err(binary) => Body::Binary(binary.into_bytes()),
        },
    };
    Response::from_parts(parts, body)
}
